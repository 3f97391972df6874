"""Chrome trace JSON (the Trace Event Format) for ui.perfetto.dev and chrome://tracing.

Written by `traceanalyze timeline --perfetto out.json`. Events:

* kernels: complete events `ph: "X"`, `cat: "kernel"`, `pid` = device, `tid` = stream, with `args`
  grid, block, registers per thread, shared memory (static, dynamic, total), correlation id,
  stream, device, kernel id;
* copies: `ph: "X"`, `cat: "memcpy"`, on their own thread id `stream + 1_000_000` next to the
  kernels of the same stream, `args` kind, bytes, correlation id, stream;
* host side, `pid` = process_id + 10⁶, `tid` = thread id: runtime/driver API calls
  (`cat: "cuda_runtime"` / `"cuda_driver"`), framework operators (`cat` = their category, e.g.
  `cpu_op`), NVTX ranges and user annotations (`ph: "X"`; marks without an end `ph: "i"`);
  GPU-side annotations (markers with a device, e.g. Kineto's `gpu_user_annotation`) on the
  device's process, on their own stream's track (`tid` = stream; a track "GPU annotations",
  `tid` 2 000 000, where the stream is unknown);
* overlap: the complete slices of one track nest properly (Perfetto requires it of `ph: "X"`).
  Where two slices of a track overlap without one holding the other (kernels of one stream
  that really run concurrently, as newer GPUs allow; ranges that cross), the later one goes to
  a sub-track of the same process: `tid` + n × 10 000 000, named "<track> · overlap n", n the
  first sub-track where it nests (slices in order of start, longer first). Complete slices on
  sub-tracks, not async slices, so flows still bind to them;
* flows: one arrow per kernel or copy whose launch call is exported, from the call to the GPU
  event: a flow start `ph: "s"` at the call's start on the call's thread and a flow end
  `ph: "f"` with `bp: "e"` (bind to the enclosing slice) at the GPU event's start on its
  stream, sharing `id`, `cat: "launch"` and `name: "launch"`
  (Trace Event Format, "Flow events"; Perfetto binds "s" and "bp":"e" "f" to the enclosing
  slice);
* the critical path (`critical_path`, `Dataset.critical_path(by_event=True).events`): a flow
  between consecutive events on it, `cat: "critical_path"` (`perfetto_path`);
* telemetry: counters `ph: "C"` (`sm_clock_mhz`, `power_w`, `temperature_c`), one track per device
  and metric, `args: {"value": v}`;
* `ph: "M"` metadata naming processes ("GPU 0 · Tesla V100-SXM2-32GB · rank 1",
  "host pid 123 · rank 1") and threads ("stream 7", "copies stream 7", "thread 456",
  "stream 7 · overlap 1").

Times: `ts`/`dur` in microseconds as floats (the format's unit), relative to `origin_ns` (default:
the earliest exported time) so that float64 keeps sub-µs precision. An event that starts before
`origin_ns` lowers the origin to its start: Perfetto rejects negative timestamps
(google/perfetto#107), and an overlapping interval is exported whole, never cut. Rows are
serialized columnar (polars `write_ndjson`, which escapes strings as JSON requires), not with a
Python loop per event.
"""

from __future__ import annotations

import io
import itertools
import os

import numpy as np
import polars as pl

from ..outpaths import check_output

Frame = pl.DataFrame | pl.LazyFrame

HOST_PID_OFFSET = 1_000_000
COPY_TID_OFFSET = 1_000_000
ANNOTATION_TID = 2_000_000
LANE_TID_OFFSET = 10_000_000
COUNTERS: tuple[str, ...] = ("sm_clock_mhz", "power_w", "temperature_c")
FLOW_CAT = "launch"
_LANE_CHUNK = 65_536


def _c(df: Frame | None) -> pl.DataFrame | None:
    if df is None:
        return None
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def _ndjson(df: pl.DataFrame) -> str:
    if df.height == 0:
        return ""
    buf = io.BytesIO()
    df.write_ndjson(buf)
    return buf.getvalue().decode().rstrip("\n").replace("\n", ",\n")


def _timed(df: pl.DataFrame | None) -> pl.DataFrame | None:
    if df is None or df.height == 0:
        return None
    return df.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())


class _Writer:
    """Collects event blocks (NDJSON text), the (pid, tid) pairs they use and the sub-tracks
    made for overlapping slices ((pid, tid) -> (the track's own tid, n))."""

    def __init__(self, t0: int) -> None:
        self.t0 = t0
        self.parts: list[str] = []
        self.ids: list[pl.DataFrame] = []
        self.lanes: dict[tuple[int, int], tuple[int, int]] = {}

    def us(self, c: str) -> pl.Expr:
        return (pl.col(c) - self.t0) / 1e3

    def add(self, ev: pl.DataFrame, track: bool = True) -> None:
        if ev.height == 0:
            return
        self.parts.append(_ndjson(ev))
        if track:
            self.ids.append(ev.select(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64)))

    def slices(self, df: pl.DataFrame, cat: pl.Expr, name: pl.Expr, args: pl.Expr) -> None:
        """Complete events of `df` on the tracks `_tracks` gave it (`_pid`, `_tid`)."""
        self.add(
            df.select(
                name.alias("name"),
                cat.alias("cat"),
                pl.lit("X").alias("ph"),
                self.us("start_ns").alias("ts"),
                ((pl.col("end_ns") - pl.col("start_ns")) / 1e3).alias("dur"),
                pl.col("_pid").alias("pid"),
                pl.col("_tid").alias("tid"),
                args.alias("args"),
            )
        )


_DEV = pl.col("device_id").fill_null(0).cast(pl.Int64)
_HOST_PID = pl.col("process_id").fill_null(0) + HOST_PID_OFFSET
_HOST_TID = pl.col("thread_id").fill_null(0)
_STREAM_TID = pl.col("stream_id").fill_null(0)
_COPY_TID = pl.col("stream_id").fill_null(0) + COPY_TID_OFFSET
_ON_GPU = pl.col("device_id").is_not_null()
_MARK_PID = pl.when(_ON_GPU).then(_DEV).otherwise(_HOST_PID)
_MARK_TID = (
    pl.when(_ON_GPU).then(pl.col("stream_id").fill_null(ANNOTATION_TID)).otherwise(_HOST_TID)
)

_Block = tuple[pl.DataFrame | None, pl.Expr, pl.Expr]


def _greedy(starts: list[int], ends: list[int], groups: list[int]) -> list[int]:
    """Sub-track of each slice (in order of start, longer first; `groups`: runs of slices that
    overlap one another): the first one where it nests in the slices still open there."""
    out: list[int] = []
    open_: list[list[int]] = []  # per sub-track, the ends of its open slices, innermost last
    last = -1
    for a, b, g in zip(starts, ends, groups, strict=True):
        if g != last:
            open_, last = [], g
        for i, ends_open in enumerate(open_):
            while ends_open and ends_open[-1] <= a:
                ends_open.pop()
            if not ends_open or b <= ends_open[-1]:
                ends_open.append(b)
                out.append(i)
                break
        else:
            open_.append([b])
            out.append(len(open_) - 1)
    return out


def _lane_of(keys: pl.DataFrame) -> np.ndarray:
    """Sub-track per row of `keys` (pid, tid, s, e; sorted by track, start, longer first).
    Only runs of mutually overlapping slices go through the loop; a lone slice stays at 0."""
    prev = pl.col("e").cum_max().shift(1).over("pid", "tid")
    run = keys.select((prev.is_null() | (pl.col("s") >= prev)).cum_sum().alias("c"))["c"]
    lane = np.zeros(keys.height, dtype=np.int64)
    idx = np.flatnonzero(run.is_duplicated().to_numpy())
    if idx.size == 0:
        return lane
    s, e, g = keys["s"].to_numpy()[idx], keys["e"].to_numpy()[idx], run.to_numpy()[idx]
    # whole runs at a time, about _LANE_CHUNK rows per call: Python lists of a chunk only
    starts = np.flatnonzero(np.diff(g)) + 1  # where a run begins (after the first)
    at = np.searchsorted(starts, np.arange(_LANE_CHUNK, g.size, _LANE_CHUNK))
    cuts = np.unique(starts[at[at < starts.size]])
    bounds = [0, *cuts.tolist(), g.size]
    for lo, hi in itertools.pairwise(bounds):
        part = slice(lo, hi)
        lane[idx[part]] = _greedy(s[part].tolist(), e[part].tolist(), g[part].tolist())
    return lane


def _tracks(w: _Writer, blocks: list[_Block]) -> list[pl.DataFrame | None]:
    """Each block's frame with its track (`_pid`, `_tid`), the complete slices of all blocks
    together nesting properly per track (module docstring, "overlap")."""
    live = [(i, df, p, t) for i, (df, p, t) in enumerate(blocks) if df is not None and df.height]
    out: list[pl.DataFrame | None] = [b[0] for b in blocks]
    if not live:
        return out
    keys = pl.concat(
        df.select(
            p.cast(pl.Int64).alias("pid"),
            t.cast(pl.Int64).alias("tid"),
            pl.col("start_ns").cast(pl.Int64).alias("s"),
            pl.col("end_ns").cast(pl.Int64).alias("e"),
            pl.lit(i, pl.Int64).alias("b"),
        ).with_row_index("r")
        for i, df, p, t in live
    ).sort(["pid", "tid", "s", "e", "b", "r"], descending=[False, False, False, True, False, False])
    keys = keys.with_columns(n=pl.Series(_lane_of(keys))).with_columns(
        _tid=pl.col("tid") + pl.col("n") * LANE_TID_OFFSET
    )
    for pid, tid, n, lt in keys.filter(pl.col("n") > 0).select("pid", "tid", "n", "_tid").rows():
        w.lanes[(pid, lt)] = (tid, n)
    for i, df, _, _ in live:
        got = keys.filter(pl.col("b") == i).sort("r")
        out[i] = df.with_columns(got["pid"].alias("_pid"), got["_tid"].alias("_tid"))
    return out


def _origin(frames: list[tuple[pl.DataFrame | None, str]], origin_ns: int | None) -> int:
    starts: list[int] = []
    for df, col in frames[:4]:
        if df is not None and df.height:
            v = df.select(pl.col(col).min()).item()
            if v is not None:
                starts.append(int(v))
    if origin_ns is None:
        origin_ns = min(starts) if starts else 0
    for df, col in frames[4:]:
        if df is not None and df.height:
            starts.append(int(df[col].min()))  # type: ignore[arg-type]
    return min([origin_ns, *starts])


def chrome_trace_json(
    kernels: Frame | None = None,
    memcpy: Frame | None = None,
    markers: Frame | None = None,
    gpu_samples: Frame | None = None,
    *,
    api_calls: Frame | None = None,
    ops: Frame | None = None,
    devices: Frame | None = None,
    sources: Frame | None = None,
    origin_ns: int | None = None,
    critical_path: Frame | None = None,
) -> str:
    """The trace as a JSON text `{"traceEvents": [...], "displayTimeUnit": "ms"}`."""
    k, m, mk, s = _timed(_c(kernels)), _timed(_c(memcpy)), _c(markers), _c(gpu_samples)
    a, o = _timed(_c(api_calls)), _timed(_c(ops))
    if mk is not None and "stream_id" not in mk.columns:
        mk = mk.with_columns(pl.lit(None, pl.Int64).alias("stream_id"))
    frames = [(k, "start_ns"), (m, "start_ns"), (mk, "start_ns"), (s, "timestamp_ns")]
    w = _Writer(_origin([*frames, (a, "start_ns"), (o, "start_ns")], origin_ns))
    k, m, a, o, ranges = _tracks(
        w,
        [
            (k, _DEV, _STREAM_TID),
            (m, _DEV, _COPY_TID),
            (a, _HOST_PID, _HOST_TID),
            (o, _HOST_PID, _HOST_TID),
            (_timed(mk), _MARK_PID, _MARK_TID),
        ],
    )
    _slices(w, k, m, a, o, ranges)
    if mk is not None and mk.height:
        _marks(w, mk)
    if a is not None:
        _flows(w, a, k, m)
    if s is not None and s.height:
        _counters(w, s)
    cp = _c(critical_path)
    if cp is not None and cp.height:
        from .perfetto_path import path_flows

        for flows in path_flows(cp, w.t0, HOST_PID_OFFSET, COPY_TID_OFFSET):
            w.add(flows, track=False)
    w.add(_metadata(w.ids, w.lanes, _c(devices), _c(sources)), track=False)
    body = ",\n".join(p for p in w.parts if p)
    return '{"displayTimeUnit": "ms", "traceEvents": [\n' + body + "\n]}\n"


def _slices(
    w: _Writer,
    k: pl.DataFrame | None,
    m: pl.DataFrame | None,
    a: pl.DataFrame | None,
    o: pl.DataFrame | None,
    ranges: pl.DataFrame | None,
) -> None:
    if k is not None:
        w.slices(k, pl.lit("kernel"), pl.col("name").fill_null("kernel"), _kargs())
    if m is not None:
        w.slices(
            m,
            pl.lit("memcpy"),
            pl.concat_str(pl.lit("Memcpy "), pl.col("kind").fill_null("?")),
            pl.struct(
                "kind",
                "size_bytes",
                pl.col("correlation_id").alias("correlation_id"),
                pl.col("stream_id").alias("stream"),
            ),
        )
    if a is not None:
        cat = pl.concat_str(pl.lit("cuda_"), pl.col("api").fill_null("api"))
        w.slices(a, cat, pl.col("name").fill_null("api"), _aargs())
    if o is not None:
        w.slices(
            o,
            pl.col("category").fill_null("op"),
            pl.col("name").fill_null("op"),
            pl.struct(pl.col("external_id").alias("external_id")),
        )
    if ranges is not None:
        cat = pl.coalesce("category", pl.lit("marker"))
        w.slices(ranges, cat, pl.col("name").fill_null(""), pl.struct(pl.col("domain")))


def _kargs() -> pl.Expr:
    return pl.struct(
        pl.concat_list("grid_x", "grid_y", "grid_z").alias("grid"),
        pl.concat_list("block_x", "block_y", "block_z").alias("block"),
        pl.col("registers_per_thread").alias("registers per thread"),
        pl.col("static_smem_bytes").alias("static shared memory bytes"),
        pl.col("dynamic_smem_bytes").alias("dynamic shared memory bytes"),
        pl.col("total_smem_bytes").alias("shared memory bytes"),
        pl.col("correlation_id").alias("correlation_id"),
        pl.col("stream_id").alias("stream"),
        pl.col("device_id").alias("device"),
        pl.col("kernel_id").alias("kernel_id"),
    )


def _aargs() -> pl.Expr:
    return pl.struct(
        pl.col("correlation_id").alias("correlation_id"),
        pl.col("callback_id").alias("callback_id"),
        pl.col("return_code").alias("return_code"),
    )


def _marks(w: _Writer, mk: pl.DataFrame) -> None:
    """Marks without an end: instant events on the track their ranges would use."""
    marks = mk.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_null()).select(
        pl.col("name").fill_null(""),
        pl.coalesce("category", pl.lit("marker")).alias("cat"),
        pl.lit("i").alias("ph"),
        w.us("start_ns").alias("ts"),
        pl.lit("t").alias("s"),
        _MARK_PID.alias("pid"),
        _MARK_TID.alias("tid"),
    )
    w.add(marks)


def _flows(w: _Writer, a: pl.DataFrame, k: pl.DataFrame | None, m: pl.DataFrame | None) -> None:
    """A flow per GPU event whose launch call (same correlation id, same process where both
    give one) is exported; ids 1.. in order of the GPU event's start."""
    calls = a.filter(pl.col("correlation_id").is_not_null()).select(
        "source_id",
        "correlation_id",
        pl.col("process_id").alias("_cpid"),
        pl.col("_pid").alias("_spid"),
        pl.col("_tid").alias("_stid"),
        pl.col("start_ns").alias("_sts"),
    )
    gpu = []
    for df in (k, m):
        if df is not None and df.height:
            gpu.append(
                df.filter(pl.col("correlation_id").is_not_null()).select(
                    "source_id",
                    "correlation_id",
                    pl.col("process_id").alias("_gpid"),
                    pl.col("_pid").alias("pid"),
                    pl.col("_tid").cast(pl.Int64).alias("tid"),
                    "start_ns",
                )
            )
    if not gpu or calls.height == 0:
        return
    j = pl.concat(gpu).join(calls, on=["source_id", "correlation_id"], how="inner")
    # nsys numbers correlation ids per process.
    j = j.filter(
        pl.col("_gpid").is_null() | pl.col("_cpid").is_null() | (pl.col("_gpid") == pl.col("_cpid"))
    )
    j = j.sort("start_ns", "pid", "tid").with_row_index("id", offset=1)
    common = [pl.lit(FLOW_CAT).alias("cat"), pl.lit(FLOW_CAT).alias("name"), pl.col("id")]
    w.add(
        j.select(
            *common,
            pl.lit("s").alias("ph"),
            w.us("_sts").alias("ts"),
            pl.col("_spid").alias("pid"),
            pl.col("_stid").alias("tid"),
        ),
        track=False,
    )
    w.add(
        j.select(
            *common,
            pl.lit("f").alias("ph"),
            pl.lit("e").alias("bp"),
            w.us("start_ns").alias("ts"),
            "pid",
            "tid",
        ),
        track=False,
    )


def _counters(w: _Writer, s: pl.DataFrame) -> None:
    for col in COUNTERS:
        if col not in s.columns:
            continue
        ev = s.filter(pl.col(col).is_not_null()).select(
            pl.lit(col).alias("name"),
            pl.lit("C").alias("ph"),
            w.us("timestamp_ns").alias("ts"),
            _DEV.alias("pid"),
            pl.struct(pl.col(col).alias("value")).alias("args"),
        )
        w.add(ev, track=False)
        w.ids.append(ev.select("pid").unique().with_columns(pl.lit(None, pl.Int64).alias("tid")))


def _metadata(
    ids: list[pl.DataFrame],
    lanes: dict[tuple[int, int], tuple[int, int]],
    devices: pl.DataFrame | None,
    sources: pl.DataFrame | None,
) -> pl.DataFrame:
    if not ids:
        return pl.DataFrame()
    both = pl.concat([d.cast({"pid": pl.Int64, "tid": pl.Int64}) for d in ids]).unique()
    pname = _process_name(devices, sources)
    procs = (
        both.select("pid")
        .unique()
        .select(
            pl.lit("process_name").alias("name"),
            pl.lit("M").alias("ph"),
            pl.col("pid"),
            pl.lit(0, pl.Int64).alias("tid"),
            pl.struct(pname.alias("name")).alias("args"),
        )
    )
    sub = pl.DataFrame(
        [(p, t, b, n) for (p, t), (b, n) in lanes.items()],
        schema={"pid": pl.Int64, "tid": pl.Int64, "_base": pl.Int64, "_n": pl.Int64},
        orient="row",
    )
    tname = _thread_name()
    threads = (
        both.drop_nulls("tid")
        .join(sub, on=["pid", "tid"], how="left")
        .select(
            pl.lit("thread_name").alias("name"),
            pl.lit("M").alias("ph"),
            pl.col("pid"),
            pl.col("tid"),
            pl.struct(tname.alias("name")).alias("args"),
        )
    )
    return pl.concat([procs, threads]).sort("pid", "tid")


def _process_name(devices: pl.DataFrame | None, sources: pl.DataFrame | None) -> pl.Expr:
    """A process's name from its pid: "GPU 0 · <device name> · rank 1", "host pid 1102"."""
    dev_names: dict[int, str] = {}
    if devices is not None and devices.height:
        for d, n in devices.filter(pl.col("name").is_not_null()).select("device_id", "name").rows():
            if d is not None:
                dev_names.setdefault(int(d), str(n))
    ranks = [] if sources is None else sources["rank"].drop_nulls().unique().to_list()
    rank = f" · rank {ranks[0]}" if len(ranks) == 1 else ""
    gpu_name = pl.concat_str(
        pl.format("GPU {}", pl.col("pid")),
        pl.col("pid")
        .replace_strict(
            {d: f" · {n}" for d, n in dev_names.items()}, default="", return_dtype=pl.String
        )
        .fill_null(""),
        pl.lit(rank),
    )
    return (
        # host rows without a process id (Kineto's instant markers) share pid 10⁶
        pl.when(pl.col("pid") == HOST_PID_OFFSET)
        .then(pl.format("host{}", pl.lit(rank)))
        .when(pl.col("pid") >= HOST_PID_OFFSET)
        .then(pl.format("host pid {}{}", pl.col("pid") - HOST_PID_OFFSET, pl.lit(rank)))
        .otherwise(gpu_name)
    )


def _thread_name() -> pl.Expr:
    """A thread's name from its pid, tid and the sub-track placement (`_base`, `_n`): "stream 7",
    "copies stream 7", "thread 1102", "GPU annotations", "stream 7 · overlap 1"."""
    base = pl.coalesce("_base", "tid")
    return pl.concat_str(
        pl.when(pl.col("pid") >= HOST_PID_OFFSET)
        .then(pl.format("thread {}", base))
        .when(base == ANNOTATION_TID)
        .then(pl.lit("GPU annotations"))
        .when(base >= COPY_TID_OFFSET)
        .then(pl.format("copies stream {}", base - COPY_TID_OFFSET))
        .otherwise(pl.format("stream {}", base)),
        pl.format(" · overlap {}", pl.col("_n")).fill_null(""),
    )


def write_chrome_trace(
    path: str | os.PathLike[str],
    kernels: Frame | None = None,
    memcpy: Frame | None = None,
    markers: Frame | None = None,
    gpu_samples: Frame | None = None,
    *,
    api_calls: Frame | None = None,
    ops: Frame | None = None,
    devices: Frame | None = None,
    sources: Frame | None = None,
    origin_ns: int | None = None,
    critical_path: Frame | None = None,
) -> None:
    """Write `chrome_trace_json(...)` to `path`, through a temporary name renamed at the end."""
    text = chrome_trace_json(
        kernels,
        memcpy,
        markers,
        gpu_samples,
        api_calls=api_calls,
        ops=ops,
        devices=devices,
        sources=sources,
        origin_ns=origin_ns,
        critical_path=critical_path,
    )
    check_output(path)  # a missing directory: one clear error, not an OSError
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
