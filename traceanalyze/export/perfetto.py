"""Chrome trace JSON (the Trace Event Format) for ui.perfetto.dev and chrome://tracing.

Written by `traceanalyze timeline --perfetto out.json`. Events:

* kernels: complete events `ph: "X"`, `cat: "kernel"`, `pid` = device, `tid` = stream, with `args`
  grid, block, registers per thread, shared memory (static, dynamic, total), correlation id,
  stream, device, kernel id;
* whole-graph replays (rows of the kernel frame with `whole_graph` true, `analyses.timeline.
  with_replays`: nsys `--cuda-graph-trace=graph`): `ph: "X"`, `cat: "cuda_graph"`, named `CUDA
  graph <graph_id>`, on their stream's track like kernels, with a launch flow from the graph
  launch call;
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

Streamed: the inputs may be lazy frames (a store's scans; `Timeline` keeps its runtime calls and
operators lazy), read a batch of `BATCH_ROWS` rows at a time; `write_chrome_trace` writes each
batch's events as they are made. The sub-track placement (`export.placement`) sorts its keys
out of memory (`export.extsort`) and walks them a batch at a time; the launch flows are joined
and sorted by polars' streaming engine into a spill file. What stays in memory for the whole
trace: the slices placed on sub-tracks (few), the distinct tracks, and the join of the launch
calls to their kernels (polars holds the calls' keys while it joins). The output is the same
whatever the batch sizes (`tests/test_perfetto_proto.py`).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import polars as pl

from ..outpaths import check_output
from .placement import LANE_TID_OFFSET as LANE_TID_OFFSET
from .placement import Placement, lazy, place

Frame = pl.DataFrame | pl.LazyFrame

HOST_PID_OFFSET = 1_000_000
COPY_TID_OFFSET = 1_000_000
ANNOTATION_TID = 2_000_000
COUNTERS: tuple[str, ...] = ("sm_clock_mhz", "power_w", "temperature_c")
FLOW_CAT = "launch"
BATCH_ROWS = 1 << 16
# ns to µs. A product, not `/ 1e3`: polars divides a column of more than one value (or, in the
# streaming engine, of more than three) by multiplying with the reciprocal, one of a single value
# exactly, so a quotient's last digit would depend on how the rows are batched.
_US = 1e-3


def _c(df: Frame | None) -> pl.DataFrame | None:
    if df is None:
        return None
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def _ndjson(df: pl.DataFrame) -> str:
    return bytes(_ndjson_bytes(df)).decode()


def _ndjson_bytes(df: pl.DataFrame) -> memoryview:
    """`df`'s rows as JSON objects, one a line, each line but the last ending in a comma."""
    if df.height == 0:
        return memoryview(b"")
    buf = io.BytesIO()
    df.write_ndjson(buf)
    return memoryview(buf.getvalue().replace(b"\n", b",\n"))[:-2]


def batches(df: Frame, rows: int | None = None) -> Iterator[pl.DataFrame]:
    """`df` in row order, `rows` (default `BATCH_ROWS`) at a time (a lazy frame by the
    streaming engine)."""
    rows = rows or BATCH_ROWS
    if isinstance(df, pl.DataFrame):
        yield from df.iter_slices(rows)
    else:
        yield from df.collect_batches(chunk_size=rows)


def _height(df: Frame) -> int:
    if isinstance(df, pl.DataFrame):
        return df.height
    return int(df.select(pl.len()).collect().item())


def _timed(df: Frame | None) -> pl.LazyFrame | None:
    """`df`'s rows with a start and an end, lazily; None when `df` has no rows at all."""
    if df is None or _height(df) == 0:
        return None
    return lazy(df).filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())


def _present(df: Frame | None) -> pl.LazyFrame | None:
    return None if df is None or _height(df) == 0 else lazy(df)


class _Writer:
    """Writes the event blocks (NDJSON text) to `out`, separated as the JSON array needs."""

    def __init__(self, t0: int, out: Callable[[bytes | memoryview], object]) -> None:
        self.t0 = t0
        self.out = out
        self.empty = True

    def us(self, c: str) -> pl.Expr:
        return (pl.col(c) - self.t0) * _US  # length-independent: see _US

    def add(self, ev: Frame) -> None:
        for batch in batches(ev):
            text = _ndjson_bytes(batch)
            if text:
                if not self.empty:
                    self.out(b",\n")
                self.out(text)
                self.empty = False

    def slices(self, df: pl.LazyFrame, cat: pl.Expr, name: pl.Expr, args: pl.Expr) -> None:
        """Complete events of `df` on the tracks the placement gave it (`_pid`, `_tid`)."""
        self.add(
            df.select(
                name.alias("name"),
                cat.alias("cat"),
                pl.lit("X").alias("ph"),
                self.us("start_ns").alias("ts"),
                ((pl.col("end_ns") - pl.col("start_ns")) * _US).alias("dur"),
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
PIDS: tuple[pl.Expr, ...] = (_DEV, _DEV, _HOST_PID, _HOST_PID, _MARK_PID)
TIDS: tuple[pl.Expr, ...] = (_STREAM_TID, _COPY_TID, _HOST_TID, _HOST_TID, _MARK_TID)
KERNEL, MEMCPY, API, OP, RANGE = range(5)
# The kernel block's category: a whole-graph replay's slice is not a kernel's.
KERNEL_CAT = pl.when(pl.col("whole_graph")).then(pl.lit("cuda_graph")).otherwise(pl.lit("kernel"))


@dataclass(frozen=True)
class Inputs:
    """The export's inputs, lazy: the slices of the five kinds (kernels, copies, runtime/driver
    calls, operators, ranges; timed rows only, or None) placed on their tracks (`placement`),
    the markers (with a `stream_id`), the telemetry and the origin `t0`."""

    blocks: tuple[pl.LazyFrame | None, ...]
    markers: pl.LazyFrame | None
    samples: pl.DataFrame | None
    t0: int
    placement: Placement

    def placed(self, i: int) -> pl.LazyFrame | None:
        """Block `i` with its track (`_pid`, `_tid`, the sub-track's tid)."""
        df = self.blocks[i]
        return None if df is None else self.placement.with_tracks(df, i, PIDS[i], TIDS[i])


def inputs(
    frames: tuple[Frame | None, ...],
    gpu_samples: Frame | None,
    origin_ns: int | None,
    workdir: str,
) -> Inputs:
    """`frames`: kernels, memcpy, api_calls, ops, markers, lazy; sub-tracks placed (streamed,
    `export.placement`, spilling to `workdir`)."""
    k, m, a, o = (_timed(f) for f in frames[:4])
    if k is not None and "whole_graph" not in k.collect_schema().names():
        k = k.with_columns(pl.lit(False).alias("whole_graph"))
    mk = _present(frames[4])
    if mk is not None and "stream_id" not in mk.collect_schema().names():
        mk = mk.with_columns(pl.lit(None, pl.Int64).alias("stream_id"))
    s = _c(gpu_samples)
    s = s if s is not None and s.height else None
    ranges = None if mk is None else _timed(mk)
    blocks = (k, m, a, o, ranges)
    t0 = _origin([(k, "start_ns"), (m, "start_ns"), (mk, "start_ns"), (s, "timestamp_ns")],
                 [(a, "start_ns"), (o, "start_ns")], origin_ns)  # fmt: skip
    pl_ = place([(b, PIDS[i], TIDS[i]) for i, b in enumerate(blocks)], workdir)
    return Inputs(blocks, mk, s, t0, pl_)


def _origin(
    own: list[tuple[Frame | None, str]], host: list[tuple[Frame | None, str]], origin_ns: int | None
) -> int:
    """The origin: `origin_ns` (default the earliest start of `own`), lowered to the earliest
    start of anything exported (Perfetto rejects negative times)."""

    def first(df: Frame | None, col: str) -> int | None:
        if df is None:
            return None
        v = lazy(df).select(pl.col(col).min()).collect().item()
        return None if v is None else int(v)

    starts = [v for df, c in own if (v := first(df, c)) is not None]
    if origin_ns is None:
        origin_ns = min(starts) if starts else 0
    starts += [v for df, c in host if (v := first(df, c)) is not None]
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
    parts: list[bytes | memoryview] = []
    with tempfile.TemporaryDirectory(prefix="traceanalyze-perfetto-") as work:
        frames = (kernels, memcpy, api_calls, ops, markers)
        inp = inputs(frames, gpu_samples, origin_ns, work)
        _write_events(parts.append, inp, devices, sources, critical_path, work)
    return b"".join(parts).decode()


def _write_events(
    out: Callable[[bytes | memoryview], object],
    inp: Inputs,
    devices: Frame | None,
    sources: Frame | None,
    critical_path: Frame | None,
    work: str,
) -> None:
    """The JSON text (UTF-8), piece by piece, to `out`."""
    out(b'{"displayTimeUnit": "ms", "traceEvents": [\n')
    w = _Writer(inp.t0, out)
    _slices(w, inp)
    ids = [inp.placement.tracks.select("pid", "tid")]
    mk = inp.markers
    if mk is not None:
        ids.append(_marks(w, mk))
    _flows(w, inp, work)
    if inp.samples is not None:
        ids += _counters(w, inp.samples)
    cp = _c(critical_path)
    if cp is not None and cp.height:
        from .perfetto_path import path_flows

        for flows in path_flows(cp, w.t0, HOST_PID_OFFSET, COPY_TID_OFFSET):
            w.add(flows)
    w.add(_metadata(ids, lanes_of(inp.placement), _c(devices), _c(sources)))
    out(b"\n]}\n")


def lanes_of(p: Placement) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, sub-track tid) -> (the track's own tid, n) of the sub-tracks."""
    sub = p.tracks.drop_nulls("n")
    return {(pid, t): (b, n) for pid, t, b, n in sub.select("pid", "tid", "base", "n").rows()}


def _slices(w: _Writer, inp: Inputs) -> None:
    k, m, a, o, ranges = (inp.placed(i) for i in range(5))
    if k is not None:
        w.slices(k, KERNEL_CAT, pl.col("name").fill_null("kernel"), _kargs())
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


def _marks(w: _Writer, mk: pl.LazyFrame) -> pl.DataFrame:
    """Marks without an end: instant events on the track their ranges would use. Returns their
    tracks (`pid, tid`)."""
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
    ids = marks.select(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64)).unique()
    return ids.collect()


def launch_flows(inp: Inputs, path: str) -> pl.LazyFrame | None:
    """A flow per GPU event whose launch call (same correlation id, same process where both
    give one) is exported, ids 1.. in order of the GPU event's start, written (streaming) to
    `path`: `id`, the call's `_spid, _stid, _sts, _sr` (track, start, row) and the GPU event's
    `pid, tid, start_ns, _gb, _gr` (track, start, block, row)."""
    a = inp.placed(API)
    if a is None:
        return None
    corr = pl.col("correlation_id").is_not_null()
    calls = (
        a.with_row_index("_sr")
        .filter(corr)
        .select(
            "source_id",
            "correlation_id",
            pl.col("process_id").alias("_cpid"),
            pl.col("_pid").alias("_spid"),
            pl.col("_tid").alias("_stid"),
            pl.col("start_ns").alias("_sts"),
            pl.col("_sr").cast(pl.Int64),
        )
    )
    gpu = [
        df.with_row_index("_gr")
        .filter(corr)
        .select(
            "source_id",
            "correlation_id",
            pl.col("process_id").alias("_gpid"),
            pl.col("_pid").alias("pid"),
            pl.col("_tid").cast(pl.Int64).alias("tid"),
            "start_ns",
            pl.lit(i, pl.Int64).alias("_gb"),
            pl.col("_gr").cast(pl.Int64),
        )
        for i in (KERNEL, MEMCPY)
        if (df := inp.placed(i)) is not None
    ]
    if not gpu:
        return None
    j = pl.concat(gpu).join(calls, on=["source_id", "correlation_id"], how="inner")
    # nsys numbers correlation ids per process.
    j = j.filter(
        pl.col("_gpid").is_null() | pl.col("_cpid").is_null() | (pl.col("_gpid") == pl.col("_cpid"))
    )
    order = ["start_ns", "pid", "tid", "_gb", "_gr", "_sr"]
    j = j.sort(order).with_row_index("id", offset=1).drop("source_id", "correlation_id")
    j.sink_parquet(path)
    return pl.scan_parquet(path)


def _flows(w: _Writer, inp: Inputs, work: str) -> None:
    j = launch_flows(inp, os.path.join(work, "flows.parquet"))
    if j is None:
        return
    common = [pl.lit(FLOW_CAT).alias("cat"), pl.lit(FLOW_CAT).alias("name"), pl.col("id")]
    w.add(
        j.select(
            *common,
            pl.lit("s").alias("ph"),
            w.us("_sts").alias("ts"),
            pl.col("_spid").alias("pid"),
            pl.col("_stid").alias("tid"),
        )
    )
    w.add(
        j.select(
            *common,
            pl.lit("f").alias("ph"),
            pl.lit("e").alias("bp"),
            w.us("start_ns").alias("ts"),
            "pid",
            "tid",
        )
    )


def _counters(w: _Writer, s: pl.DataFrame) -> list[pl.DataFrame]:
    ids = []
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
        w.add(ev)
        ids.append(ev.select("pid").unique().with_columns(pl.lit(None, pl.Int64).alias("tid")))
    return ids


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
    """Write `chrome_trace_json(...)` to `path` as it is made (a batch of events at a time),
    through a temporary name renamed at the end."""
    check_output(path)  # a missing directory: one clear error, not an OSError
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with (
            tempfile.TemporaryDirectory(prefix="traceanalyze-perfetto-") as work,
            open(tmp, "wb") as f,
        ):
            inp = inputs((kernels, memcpy, api_calls, ops, markers), gpu_samples, origin_ns, work)
            _write_events(f.write, inp, devices, sources, critical_path, work)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
