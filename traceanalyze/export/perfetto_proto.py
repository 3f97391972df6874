"""Perfetto's own protobuf trace format, written as a stream (`timeline --perfetto out.pftrace`).

The same content as the Chrome trace JSON of `export.perfetto` (read its docstring for what goes
where), in the `Trace` message of Perfetto's trace protos
(protos/perfetto/trace/perfetto_trace.proto), one `TracePacket` after another:

* tracks: a `TrackDescriptor` per JSON process, with a `ProcessDescriptor` (the JSON `pid` and
  its name: "GPU 0 · Tesla V100-SXM2-32GB · rank 1", "host pid 123 · rank 1"); a child track
  (`parent_uuid`) per JSON thread, named as the JSON names it ("stream 7", "copies stream 7",
  "thread 456", "stream 7 · overlap 1" for the sub-tracks of overlapping slices); a counter track
  (`CounterDescriptor`) per device and telemetry metric, named by the metric;
* slices: a `TrackEvent` `TYPE_SLICE_BEGIN` with the name, the category and the JSON `args` as
  `DebugAnnotation`s (integers `int_value`, texts `string_value`, grid and block an array of
  three; a null argument is left out, where the JSON writes `null`), and a `TYPE_SLICE_END`;
  the events are in time order, at one time ends before begins (innermost end first, outermost
  begin first) so that every track nests as in the JSON;
* marks without an end: `TYPE_INSTANT`; telemetry: `TYPE_COUNTER` with `double_counter_value`;
* flows: the launch flows (ids 1.. as in the JSON) and the critical path's flows (ids from
  10⁹) as `flow_ids` on the begin of the slice where the arrow starts and
  `terminating_flow_ids` on the begin of the slice where it ends. A critical-path flow binds to
  the slice that starts at the path event's start on its track; one whose end has no such slice
  is left out.

Interned: event names and categories (`InternedData.event_names`, `event_categories`, each
emitted once, in the packet that first uses it) and debug-annotation names (all in the first
packet); everything is on one packet sequence (`trusted_packet_sequence_id` 1, the first packet
`SEQ_INCREMENTAL_STATE_CLEARED`, event packets `SEQ_NEEDS_INCREMENTAL_STATE`). Not interned: track
names (one descriptor each) and string argument values (`kind`, `domain`).

Times: `TracePacket.timestamp` in integer ns from the same origin as the JSON (default clock).

Memory: the packets are encoded and written one chunk of `chunk_rows` events at a time (a Python
loop over the chunk's rows, never a list over the trace); what the whole trace needs is columnar
(polars): the slices with their tracks, and a sort key per begin and end. The interned names grow
with the trace's distinct names, not its events.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO

import polars as pl

from ..errors import TraceanalyzeError
from . import protowire as pw
from .perfetto import (
    _COPY_TID,
    _DEV,
    _HOST_PID,
    _HOST_TID,
    _MARK_PID,
    _MARK_TID,
    _STREAM_TID,
    COPY_TID_OFFSET,
    COUNTERS,
    HOST_PID_OFFSET,
    Frame,
    _c,
    _metadata,
    _origin,
    _timed,
    _tracks,
    _Writer,
)

PROTO_SUFFIXES: tuple[str, ...] = (".pftrace", ".perfetto-trace", ".pb")
CHUNK_ROWS = 50_000
SEQ_ID = 1

# field numbers, from perfetto_trace.proto (perfetto 0.59)
_P_TS, _P_SEQ, _P_EVENT, _P_INTERNED, _P_FLAGS, _P_TRACK = 8, 10, 11, 12, 13, 60
_E_CAT, _E_ANNOT, _E_TYPE, _E_NAME, _E_TRACK, _E_DOUBLE, _E_FLOW, _E_TFLOW = (
    3,
    4,
    9,
    10,
    11,
    44,
    47,
    48,
)
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
_I_CATS, _I_NAMES, _I_ANNOT = 1, 2, 3
_A_NAME, _A_INT, _A_STR, _A_ARRAY = 1, 4, 6, 12
_T_UUID, _T_NAME, _T_PROCESS, _T_PARENT, _T_COUNTER = 1, 2, 3, 5, 8
_PD_PID, _PD_NAME = 1, 6
_SEQ_CLEARED, _SEQ_NEEDS = 1, 2

# (annotation name, column of the slice frame, kind): the JSON export's `args`.
ARGS: tuple[tuple[str, str, str], ...] = (
    ("grid", "a_grid", "ints"),
    ("block", "a_block", "ints"),
    ("registers per thread", "a_regs", "int"),
    ("static shared memory bytes", "a_ssm", "int"),
    ("dynamic shared memory bytes", "a_dsm", "int"),
    ("shared memory bytes", "a_smem", "int"),
    ("correlation_id", "a_corr", "int"),
    ("stream", "a_stream", "int"),
    ("device", "a_device", "int"),
    ("kernel_id", "a_kid", "int"),
    ("kind", "a_kind", "str"),
    ("size_bytes", "a_size", "int"),
    ("callback_id", "a_cb", "int"),
    ("return_code", "a_rc", "int"),
    ("external_id", "a_ext", "int"),
    ("domain", "a_domain", "str"),
)
_DTYPE = {"int": pl.Int64(), "str": pl.String(), "ints": pl.List(pl.Int64)}
_KERNEL, _MEMCPY, _API, _OP, _RANGE = range(5)
_LANE_BIT = 1 << 36  # a process track's uuid: (pid + 1) << 36; its tracks add tid + 1
_COUNTER_BIT = 1 << 35
_TID_MASK = _COUNTER_BIT - 1


def is_proto_path(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a protobuf trace (by its extension; anything else is JSON)."""
    return os.fspath(path).lower().endswith(PROTO_SUFFIXES)


def _puuid(pid: pl.Expr) -> pl.Expr:
    return ((pid + 1) * _LANE_BIT).cast(pl.UInt64)


def _tuuid(pid: pl.Expr, tid: pl.Expr) -> pl.Expr:
    """A thread track's uuid: its process's plus its tid + 1 taken modulo 2^35 (so that
    negative thread ids, which Kineto writes, stay apart from the counter tracks)."""
    return _puuid(pid) + ((tid + 1) & _TID_MASK).cast(pl.UInt64)


def _opt(df: pl.DataFrame, col: str, dtype: pl.DataType) -> pl.Expr:
    return pl.col(col).cast(dtype) if col in df.columns else pl.lit(None, dtype)


def _block(
    df: pl.DataFrame, blk: int, tid: pl.Expr, name: pl.Expr, cat: pl.Expr, args: dict[str, pl.Expr]
) -> pl.DataFrame:
    """One block's slices in the common shape (track, times, name, category, arguments)."""
    return df.select(
        pl.lit(blk, pl.Int8).alias("blk"),
        pl.col("_pid").cast(pl.Int64).alias("pid"),
        pl.col("_tid").cast(pl.Int64).alias("lane"),
        tid.cast(pl.Int64).alias("tid"),
        pl.col("start_ns").cast(pl.Int64).alias("s"),
        pl.col("end_ns").cast(pl.Int64).alias("e"),
        name.cast(pl.String).alias("name"),
        cat.cast(pl.String).alias("cat"),
        _opt(df, "source_id", pl.String()).alias("source_id"),
        _opt(df, "process_id", pl.Int64()).alias("process_id"),
        *[v.alias(k) for k, v in args.items()],
    )


def _kernel_args() -> dict[str, pl.Expr]:
    return {
        "a_grid": pl.concat_list("grid_x", "grid_y", "grid_z"),
        "a_block": pl.concat_list("block_x", "block_y", "block_z"),
        "a_regs": pl.col("registers_per_thread"),
        "a_ssm": pl.col("static_smem_bytes"),
        "a_dsm": pl.col("dynamic_smem_bytes"),
        "a_smem": pl.col("total_smem_bytes"),
        "a_corr": pl.col("correlation_id"),
        "a_stream": pl.col("stream_id"),
        "a_device": pl.col("device_id"),
        "a_kid": pl.col("kernel_id"),
    }


def _slice_frame(blocks: list[pl.DataFrame | None], t0: int) -> pl.DataFrame:
    """Every complete slice of the five blocks (kernels, copies, calls, operators, ranges) on
    its track, times from `t0`, with `sid` (its row) and `uuid` (its track)."""
    k, m, a, o, r = blocks
    parts: list[pl.DataFrame] = []
    if k is not None:
        name = pl.col("name").fill_null("kernel")
        parts.append(_block(k, _KERNEL, _STREAM_TID, name, pl.lit("kernel"), _kernel_args()))
    if m is not None:
        name = pl.concat_str(pl.lit("Memcpy "), pl.col("kind").fill_null("?"))
        margs = {"a_kind": pl.col("kind"), "a_size": pl.col("size_bytes")}
        margs |= {"a_corr": pl.col("correlation_id"), "a_stream": pl.col("stream_id")}
        parts.append(_block(m, _MEMCPY, _COPY_TID, name, pl.lit("memcpy"), margs))
    if a is not None:
        cat = pl.concat_str(pl.lit("cuda_"), pl.col("api").fill_null("api"))
        aargs = {"a_corr": pl.col("correlation_id"), "a_cb": pl.col("callback_id")}
        aargs["a_rc"] = pl.col("return_code")
        parts.append(_block(a, _API, _HOST_TID, pl.col("name").fill_null("api"), cat, aargs))
    if o is not None:
        oargs = {"a_ext": pl.col("external_id")}
        cat = pl.col("category").fill_null("op")
        parts.append(_block(o, _OP, _HOST_TID, pl.col("name").fill_null("op"), cat, oargs))
    if r is not None:
        cat = pl.coalesce("category", pl.lit("marker"))
        rargs = {"a_domain": pl.col("domain")}
        parts.append(_block(r, _RANGE, _MARK_TID, pl.col("name").fill_null(""), cat, rargs))
    sl = pl.concat(parts, how="diagonal_relaxed") if parts else None
    if sl is None:
        return pl.DataFrame()
    missing = [pl.lit(None, _DTYPE[kind]).alias(c) for _, c, kind in ARGS if c not in sl.columns]
    return sl.with_columns(
        *missing,
        pl.col("s") - t0,
        pl.col("e") - t0,
        _tuuid(pl.col("pid"), pl.col("lane")).alias("uuid"),
    ).with_row_index("sid")


def _launch_pairs(sl: pl.DataFrame) -> pl.DataFrame:
    """`id, out, in`: a flow from each launch call to each GPU event of its correlation id (same
    source, same process where both give one), ids 1.. in order of the GPU event's start."""
    corr = pl.col("a_corr").is_not_null()
    calls = sl.filter((pl.col("blk") == _API) & corr).select(
        "source_id", "a_corr", pl.col("process_id").alias("_cpid"), pl.col("sid").alias("out")
    )
    gpu = sl.filter(pl.col("blk").is_in([_KERNEL, _MEMCPY]) & corr).select(
        "source_id", "a_corr", "process_id", pl.col("sid").alias("in"), "s", "pid", "lane"
    )
    j = gpu.join(calls, on=["source_id", "a_corr"], how="inner", nulls_equal=False)
    j = j.filter(
        pl.col("process_id").is_null()
        | pl.col("_cpid").is_null()
        | (pl.col("process_id") == pl.col("_cpid"))
    )
    j = j.sort("s", "pid", "lane").with_row_index("id", offset=1)
    return j.select(pl.col("id").cast(pl.UInt64), "out", "in")


def _path_pairs(sl: pl.DataFrame, cp: pl.DataFrame | None, t0: int) -> pl.DataFrame | None:
    """`id, out, in` of the critical path's flows (`perfetto_path`), each end bound to the
    first slice that starts at its time on its track."""
    if cp is None or cp.height == 0 or sl.height == 0:
        return None
    from .perfetto_path import path_flows

    starts, ends = path_flows(cp, t0, HOST_PID_OFFSET, COPY_TID_OFFSET)
    key = sl.group_by("pid", "tid", "s").agg(pl.col("sid").min())

    def at(f: pl.DataFrame, side: str) -> pl.DataFrame:
        s = (pl.col("ts") * 1e3).round().cast(pl.Int64).alias("s")
        f = f.select(pl.col("id").cast(pl.UInt64), pl.col("pid"), pl.col("tid"), s)
        return f.join(key, on=["pid", "tid", "s"], how="inner").select(
            "id", pl.col("sid").alias(side)
        )

    return at(starts, "out").join(at(ends, "in"), on="id", how="inner")


def _with_flows(sl: pl.DataFrame, pairs: list[pl.DataFrame | None]) -> pl.DataFrame:
    live = [p for p in pairs if p is not None and p.height]
    if not live:
        empty = pl.lit(None, pl.List(pl.UInt64))
        return sl.with_columns(empty.alias("fo"), empty.alias("fi"))
    p = pl.concat(live)
    fo = p.group_by("out").agg(pl.col("id").sort().alias("fo")).rename({"out": "sid"})
    fi = p.group_by("in").agg(pl.col("id").sort().alias("fi")).rename({"in": "sid"})
    return sl.join(fo, on="sid", how="left").join(fi, on="sid", how="left").sort("sid")


def _events(sl: pl.DataFrame) -> pl.DataFrame:
    """`sid, ts, typ`: a begin and an end per slice in the order that nests them: by time; at
    one time ends first (innermost first), then begins (outermost first), an empty slice's end
    right after its begin."""
    pos = pl.col("e") > pl.col("s")
    begins = sl.select(
        "sid",
        pl.col("s").alias("ts"),
        pl.lit(BEGIN, pl.Int8).alias("typ"),
        pl.lit(1, pl.Int8).alias("k1"),
        (-pl.col("e")).alias("k2"),
        pl.col("sid").cast(pl.Int64).alias("k3"),
    )
    ends = sl.select(
        "sid",
        pl.col("e").alias("ts"),
        pl.lit(END, pl.Int8).alias("typ"),
        pl.when(pos).then(0).otherwise(1).cast(pl.Int8).alias("k1"),
        (-pl.col("s")).alias("k2"),
        pl.when(pos).then(-pl.col("sid").cast(pl.Int64)).otherwise(pl.col("sid")).alias("k3"),
    )
    return pl.concat([begins, ends]).sort("ts", "k1", "k2", "k3", "typ").select("sid", "ts", "typ")


_SEQ = pw.uint(_P_SEQ, SEQ_ID)
_NEEDS = _SEQ + pw.uint(_P_FLAGS, _SEQ_NEEDS)
_END = pw.uint(_E_TYPE, END)


class _Packets:
    """The encoder's state: the interned names of the one packet sequence."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.annot = {name: i for i, (name, _, _) in enumerate(ARGS, start=1)}

    def first(self) -> bytes:
        """The packet that opens the sequence, with the debug-annotation names."""
        names = b"".join(
            pw.ld(_I_ANNOT, pw.uint(1, i) + pw.text(2, n)) for n, i in self.annot.items()
        )
        body = _SEQ + pw.uint(_P_FLAGS, _SEQ_CLEARED) + pw.ld(_P_INTERNED, names)
        return pw.ld(1, body)

    def interned(self, name: str, cat: str) -> tuple[int, int, bytes]:
        """The iids of `name` and `cat`, and the `InternedData` entries new ones need."""
        new = b""
        n = self.names.get(name)
        if n is None:
            n = self.names[name] = len(self.names) + 1
            new += pw.ld(_I_NAMES, pw.uint(1, n) + pw.text(2, name))
        c = self.cats.get(cat)
        if c is None:
            c = self.cats[cat] = len(self.cats) + 1
            new += pw.ld(_I_CATS, pw.uint(1, c) + pw.text(2, cat))
        return n, c, new

    def event(self, ts: int, typ: int, uuid: int, name: str, cat: str, more: bytes) -> bytes:
        n, c, new = self.interned(name, cat)
        te = pw.uint(_E_TYPE, typ) + pw.uint(_E_TRACK, uuid) + pw.uint(_E_NAME, n)
        te += pw.uint(_E_CAT, c) + more
        body = pw.uint(_P_TS, ts) + _NEEDS + (pw.ld(_P_INTERNED, new) if new else b"")
        return pw.ld(1, body + pw.ld(_P_EVENT, te))


def _annotation(prefix: bytes, kind: str, v: object) -> bytes:
    if kind == "int":
        return pw.ld(_E_ANNOT, prefix + pw.uint(_A_INT, v))  # type: ignore[arg-type]
    if kind == "str":
        return pw.ld(_E_ANNOT, prefix + pw.text(_A_STR, v))  # type: ignore[arg-type]
    items = v  # a list of integers (grid, block)
    if any(x is None for x in items):  # type: ignore[attr-defined]
        return b""
    arr = b"".join(pw.ld(_A_ARRAY, pw.uint(_A_INT, x)) for x in items)  # type: ignore[attr-defined]
    return pw.ld(_E_ANNOT, prefix + arr)


def _slice_chunks(enc: _Packets, sl: pl.DataFrame, ev: pl.DataFrame, rows: int) -> Iterator[bytes]:
    """The begin and end packets of the slices, `rows` events at a time."""
    for chunk in ev.iter_slices(rows):
        g = sl[chunk["sid"]]
        ts, typ, uuid = chunk["ts"].to_list(), chunk["typ"].to_list(), g["uuid"].to_list()
        name, cat, fo, fi = (g[c].to_list() for c in ("name", "cat", "fo", "fi"))
        args = [
            (pw.uint(_A_NAME, enc.annot[a]), kind, g[c].to_list())
            for a, c, kind in ARGS
            if g[c].null_count() < g.height
        ]
        out: list[bytes] = []
        for i in range(len(ts)):
            if typ[i] == END:
                te = pw.ld(_P_EVENT, _END + pw.uint(_E_TRACK, uuid[i]))
                out.append(pw.ld(1, pw.uint(_P_TS, ts[i]) + _SEQ + te))
                continue
            more = b"".join(
                _annotation(p, kind, vals[i]) for p, kind, vals in args if vals[i] is not None
            )
            if fo[i]:
                more += b"".join(pw.fixed64(_E_FLOW, x) for x in fo[i])
            if fi[i]:
                more += b"".join(pw.fixed64(_E_TFLOW, x) for x in fi[i])
            out.append(enc.event(ts[i], BEGIN, uuid[i], name[i], cat[i], more))
        yield b"".join(out)


def _mark_chunks(enc: _Packets, marks: pl.DataFrame, rows: int) -> Iterator[bytes]:
    for chunk in marks.iter_slices(rows):
        cols = (chunk[c].to_list() for c in ("ts", "uuid", "name", "cat"))
        yield b"".join(
            enc.event(ts, INSTANT, u, n, c, b"") for ts, u, n, c in zip(*cols, strict=True)
        )


def _counter_chunks(counters: pl.DataFrame, rows: int) -> Iterator[bytes]:
    head = pw.uint(_E_TYPE, COUNTER)
    for chunk in counters.iter_slices(rows):
        cols = (chunk[c].to_list() for c in ("ts", "uuid", "value"))
        yield b"".join(
            pw.ld(
                1,
                pw.uint(_P_TS, ts)
                + _SEQ
                + pw.ld(_P_EVENT, head + pw.uint(_E_TRACK, u) + pw.double(_E_DOUBLE, v)),
            )
            for ts, u, v in zip(*cols, strict=True)
        )


def _track(uuid: int, name: str, parent: int | None = None, extra: bytes = b"") -> bytes:
    td = pw.uint(_T_UUID, uuid) + pw.text(_T_NAME, name) + extra
    if parent is not None:
        td += pw.uint(_T_PARENT, parent)
    return pw.ld(1, _SEQ + pw.ld(_P_TRACK, td))


def _track_packets(
    w: _Writer,
    sl: pl.DataFrame,
    marks: pl.DataFrame,
    counters: pl.DataFrame,
    devices: pl.DataFrame | None,
    sources: pl.DataFrame | None,
) -> bytes:
    """A descriptor per process and thread of the JSON export (named as it names them) and one
    per counter track."""
    ids = [
        f.select(pl.col("pid").cast(pl.Int64), pl.col(t).cast(pl.Int64).alias("tid")).unique()
        for f, t in ((sl, "lane"), (marks, "tid"))
        if f.height
    ]
    if counters.height:
        ids.append(counters.select("pid", pl.lit(None, pl.Int64).alias("tid")).unique())
    meta = _metadata(ids, w.lanes, devices, sources)
    if meta.height == 0:
        return b""
    label = pl.col("args").struct.field("name").alias("label")
    meta = meta.select("name", "pid", "tid", label).sort("name", "pid", "tid")  # processes first
    out: list[bytes] = []
    for kind, pid, tid, label in meta.rows():
        puuid = (pid + 1) * _LANE_BIT
        if kind == "process_name":
            proc = pw.ld(_T_PROCESS, pw.uint(_PD_PID, pid) + pw.text(_PD_NAME, label))
            out.append(_track(puuid, label, extra=proc))
        else:
            out.append(_track(puuid + ((tid + 1) & _TID_MASK), label, parent=puuid))
    for pid, metric, uuid in counters.select("pid", "metric", "uuid").unique().sort("uuid").rows():
        out.append(_track(uuid, metric, parent=(pid + 1) * _LANE_BIT, extra=pw.ld(_T_COUNTER, b"")))
    return b"".join(out)


def _marks(mk: pl.DataFrame | None, t0: int) -> pl.DataFrame:
    """Marks without an end: instants on the track their ranges would use."""
    if mk is None or mk.height == 0:
        return pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64})
    return mk.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_null()).select(
        (pl.col("start_ns") - t0).alias("ts"),
        _MARK_PID.cast(pl.Int64).alias("pid"),
        _MARK_TID.cast(pl.Int64).alias("tid"),
        _tuuid(_MARK_PID.cast(pl.Int64), _MARK_TID.cast(pl.Int64)).alias("uuid"),
        pl.col("name").fill_null("").cast(pl.String),
        pl.coalesce("category", pl.lit("marker")).cast(pl.String).alias("cat"),
    )


def _counters(s: pl.DataFrame | None, t0: int) -> pl.DataFrame:
    """Telemetry samples, long: `ts, pid, metric, uuid, value` (one track per device and
    metric)."""
    parts = [
        s.filter(pl.col(col).is_not_null()).select(
            (pl.col("timestamp_ns") - t0).alias("ts"),
            _DEV.alias("pid"),
            pl.lit(col).alias("metric"),
            (_puuid(_DEV) + _COUNTER_BIT + i).alias("uuid"),
            pl.col(col).cast(pl.Float64).alias("value"),
        )
        for i, col in enumerate(COUNTERS)
        if s is not None and col in s.columns
    ]
    if not parts:
        return pl.DataFrame(schema={"pid": pl.Int64, "metric": pl.String, "uuid": pl.UInt64})
    return pl.concat(parts).sort("ts", "uuid")


def write_perfetto_proto(
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
    chunk_rows: int = CHUNK_ROWS,
) -> None:
    """Write the trace `write_chrome_trace` would write, as a Perfetto protobuf trace, to
    `path`, through a temporary name renamed at the end."""
    k, m, mk, s = _timed(_c(kernels)), _timed(_c(memcpy)), _c(markers), _c(gpu_samples)
    a, o = _timed(_c(api_calls)), _timed(_c(ops))
    if mk is not None and "stream_id" not in mk.columns:
        mk = mk.with_columns(pl.lit(None, pl.Int64).alias("stream_id"))
    frames = [(k, "start_ns"), (m, "start_ns"), (mk, "start_ns"), (s, "timestamp_ns")]
    w = _Writer(_origin([*frames, (a, "start_ns"), (o, "start_ns")], origin_ns))
    blocks = _tracks(
        w,
        [
            (k, _DEV, _STREAM_TID),
            (m, _DEV, _COPY_TID),
            (a, _HOST_PID, _HOST_TID),
            (o, _HOST_PID, _HOST_TID),
            (_timed(mk), _MARK_PID, _MARK_TID),
        ],
    )
    sl = _slice_frame(blocks, w.t0)
    if sl.height:
        pairs = [_launch_pairs(sl), _path_pairs(sl, _c(critical_path), w.t0)]
        sl = _with_flows(sl, pairs)
    marks, counters = _marks(mk, w.t0), _counters(s, w.t0)
    tracks = _track_packets(w, sl, marks, counters, _c(devices), _c(sources))
    enc = _Packets()
    chunks: list[Iterator[bytes]] = [
        _mark_chunks(enc, marks, chunk_rows) if marks.height else iter(()),
        _counter_chunks(counters, chunk_rows) if counters.height else iter(()),
    ]
    if sl.height:
        chunks.insert(0, _slice_chunks(enc, sl, _events(sl), chunk_rows))
    _write(path, [enc.first(), tracks], chunks)


def _write(path: str | os.PathLike[str], head: list[bytes], chunks: list[Iterator[bytes]]) -> None:
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            _drain(f, head, chunks)
        os.replace(tmp, path)
    except OSError as e:
        raise TraceanalyzeError(f"cannot write the trace: {e.strerror or e}", path=path) from e
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _drain(f: BinaryIO, head: list[bytes], chunks: list[Iterator[bytes]]) -> None:
    for b in head:
        f.write(b)
    for it in chunks:
        for b in it:
            f.write(b)
