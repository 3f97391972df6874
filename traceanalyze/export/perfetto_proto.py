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
loop over the chunk's rows, never a list over the trace): each chunk gathers the names, categories
and arguments of its slices from the input frames. What the whole trace needs is columnar and
narrow (polars): per slice its track, times and row (integers), per begin and end a sort key, the
flows' ids. The interned names grow with the trace's distinct names, not its events. The
placement of slices on sub-tracks is `export.perfetto`'s, shared with the JSON export.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import polars as pl

from ..errors import TraceanalyzeError
from . import perfetto_packets as pk
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
_LANE_BIT = 1 << 36  # a process track's uuid: (pid + 1) << 36; its tracks add tid + 1
_COUNTER_BIT = 1 << 35
_TID_MASK = _COUNTER_BIT - 1
_KERNEL, _MEMCPY, _API, _OP, _RANGE = range(5)


@dataclass(frozen=True)
class _Spec:
    """One kind of slice: its track's base tid, its name, its category and its arguments (the
    JSON export's `args`: annotation name, kind (int, str, ints), value)."""

    tid: pl.Expr
    name: pl.Expr
    cat: pl.Expr
    args: tuple[tuple[str, str, pl.Expr], ...]


def _specs() -> tuple[_Spec, ...]:
    """Kernels, copies, runtime/driver calls, operators, ranges (the order of `_tracks`)."""
    corr = ("correlation_id", "int", pl.col("correlation_id"))
    stream = ("stream", "int", pl.col("stream_id"))
    kernel = (
        ("grid", "ints", pl.concat_list("grid_x", "grid_y", "grid_z")),
        ("block", "ints", pl.concat_list("block_x", "block_y", "block_z")),
        ("registers per thread", "int", pl.col("registers_per_thread")),
        ("static shared memory bytes", "int", pl.col("static_smem_bytes")),
        ("dynamic shared memory bytes", "int", pl.col("dynamic_smem_bytes")),
        ("shared memory bytes", "int", pl.col("total_smem_bytes")),
        corr,
        stream,
        ("device", "int", pl.col("device_id")),
        ("kernel_id", "int", pl.col("kernel_id")),
    )
    memcpy = (("kind", "str", pl.col("kind")), ("size_bytes", "int", pl.col("size_bytes")))
    api = (corr, ("callback_id", "int", pl.col("callback_id")))
    return (
        _Spec(_STREAM_TID, pl.col("name").fill_null("kernel"), pl.lit("kernel"), kernel),
        _Spec(
            _COPY_TID,
            pl.concat_str(pl.lit("Memcpy "), pl.col("kind").fill_null("?")),
            pl.lit("memcpy"),
            (*memcpy, corr, stream),
        ),
        _Spec(
            _HOST_TID,
            pl.col("name").fill_null("api"),
            pl.concat_str(pl.lit("cuda_"), pl.col("api").fill_null("api")),
            (*api, ("return_code", "int", pl.col("return_code"))),
        ),
        _Spec(
            _HOST_TID,
            pl.col("name").fill_null("op"),
            pl.col("category").fill_null("op"),
            (("external_id", "int", pl.col("external_id")),),
        ),
        _Spec(
            _MARK_TID,
            pl.col("name").fill_null(""),
            pl.coalesce("category", pl.lit("marker")),
            (("domain", "str", pl.col("domain")),),
        ),
    )


def annotation_names() -> list[str]:
    """Every debug-annotation name the export writes (interned in its first packet)."""
    names: list[str] = []
    for spec in _specs():
        names += [n for n, _, _ in spec.args if n not in names]
    return names


def is_proto_path(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a protobuf trace (by its extension; anything else is JSON)."""
    return os.fspath(path).lower().endswith(PROTO_SUFFIXES)


def _puuid(pid: pl.Expr) -> pl.Expr:
    return ((pid + 1) * _LANE_BIT).cast(pl.UInt64)


def _tuuid(pid: pl.Expr, tid: pl.Expr) -> pl.Expr:
    """A thread track's uuid: its process's plus its tid + 1 taken modulo 2^35 (so that
    negative thread ids, which Kineto writes, stay apart from the counter tracks)."""
    return _puuid(pid) + ((tid + 1) & _TID_MASK).cast(pl.UInt64)


@dataclass(frozen=True)
class _Slices:
    """The slices of the five kinds: `frames` (each kind's rows with `_pid`, `_tid` from
    `_tracks`, or None), `offsets` (a kind's first slice id), `keys` (`sid, blk, pid, lane, tid,
    s, e, uuid`: per slice its id, kind, track, base tid, times from the origin)."""

    frames: list[pl.DataFrame | None]
    offsets: list[int]
    keys: pl.DataFrame


def _slices(frames: list[pl.DataFrame | None], t0: int) -> _Slices:
    specs, parts, offsets, at = _specs(), [], [], 0
    for i, df in enumerate(frames):
        offsets.append(at)
        if df is None or df.height == 0:
            continue
        at += df.height
        parts.append(
            df.select(
                pl.lit(i, pl.Int8).alias("blk"),
                pl.col("_pid").cast(pl.Int64).alias("pid"),
                pl.col("_tid").cast(pl.Int64).alias("lane"),
                specs[i].tid.cast(pl.Int64).alias("tid"),
                (pl.col("start_ns") - t0).cast(pl.Int64).alias("s"),
                (pl.col("end_ns") - t0).cast(pl.Int64).alias("e"),
            )
        )
    keys = pl.concat(parts) if parts else pl.DataFrame()
    if keys.height:
        keys = keys.with_row_index("sid").with_columns(
            _tuuid(pl.col("pid"), pl.col("lane")).alias("uuid")
        )
    return _Slices(frames, offsets, keys)


def _launch_pairs(sl: _Slices) -> pl.DataFrame | None:
    """`id, out, in`: a flow from each launch call to each GPU event of its correlation id (same
    source, same process where both give one), ids 1.. in order of the GPU event's start."""
    a = sl.frames[_API]
    if a is None or a.height == 0:
        return None
    corr = pl.col("correlation_id").is_not_null()
    calls = (
        a.with_row_index("out", offset=sl.offsets[_API])
        .filter(corr)
        .select("source_id", "correlation_id", pl.col("process_id").alias("_cpid"), "out")
    )
    gpu = [
        df.with_row_index("in", offset=sl.offsets[i])
        .filter(corr)
        .select(
            "source_id",
            "correlation_id",
            "process_id",
            "in",
            "start_ns",
            pl.col("_pid").cast(pl.Int64),
            pl.col("_tid").cast(pl.Int64),
        )
        for i in (_KERNEL, _MEMCPY)
        if (df := sl.frames[i]) is not None and df.height
    ]
    if not gpu:
        return None
    j = pl.concat(gpu).join(calls, on=["source_id", "correlation_id"], how="inner")
    j = j.filter(
        pl.col("process_id").is_null()
        | pl.col("_cpid").is_null()
        | (pl.col("process_id") == pl.col("_cpid"))
    )
    j = j.sort("start_ns", "_pid", "_tid").with_row_index("id", offset=1)
    return j.select(pl.col("id").cast(pl.UInt64), "out", "in")


def _path_pairs(keys: pl.DataFrame, cp: pl.DataFrame | None, t0: int) -> pl.DataFrame | None:
    """`id, out, in` of the critical path's flows (`perfetto_path`), each end bound to the
    first slice that starts at its time on its track."""
    if cp is None or cp.height == 0 or keys.height == 0:
        return None
    from .perfetto_path import path_flows

    starts, ends = path_flows(cp, t0, HOST_PID_OFFSET, COPY_TID_OFFSET)
    at_key = keys.group_by("pid", "tid", "s").agg(pl.col("sid").min())

    def at(f: pl.DataFrame, side: str) -> pl.DataFrame:
        s = (pl.col("ts") * 1e3).round().cast(pl.Int64).alias("s")
        f = f.select(pl.col("id").cast(pl.UInt64), pl.col("pid"), pl.col("tid"), s)
        f = f.join(at_key, on=["pid", "tid", "s"], how="inner")
        return f.select("id", pl.col("sid").alias(side))

    return at(starts, "out").join(at(ends, "in"), on="id", how="inner")


def _flow_ids(keys: pl.DataFrame, pairs: list[pl.DataFrame | None]) -> pl.DataFrame:
    """`out, in`: per slice (row = slice id) the ids of the flows that start at it and of those
    that end at it (null where none)."""
    live = [
        p.select("id", pl.col("out").cast(pl.UInt32), pl.col("in").cast(pl.UInt32))
        for p in pairs
        if p is not None and p.height
    ]
    if not live or keys.height == 0:
        return pl.DataFrame(schema={"out": pl.List(pl.UInt64), "in": pl.List(pl.UInt64)})
    p = pl.concat(live)
    out = p.group_by("out").agg(pl.col("id").sort().alias("ids")).rename({"out": "sid"})
    end = p.group_by("in").agg(pl.col("id").sort().alias("ids")).rename({"in": "sid"})
    sid = keys.select("sid")
    return sid.join(out, on="sid", how="left", maintain_order="left").select(
        pl.col("ids").alias("out"),
        sid.join(end, on="sid", how="left", maintain_order="left")["ids"].alias("in"),
    )


def _events(keys: pl.DataFrame) -> pl.DataFrame:
    """`sid, blk, uuid, ts, typ`: a begin and an end per slice in the order that nests them: by
    time; at one time ends first (innermost first), then begins (outermost first), an empty
    slice's end right after its begin."""
    pos = pl.col("e") > pl.col("s")
    sid = pl.col("sid").cast(pl.Int64)
    common = [pl.col("sid"), pl.col("blk"), pl.col("uuid")]
    begins = keys.select(
        *common,
        pl.col("s").alias("ts"),
        pl.lit(pk.BEGIN, pl.Int8).alias("typ"),
        pl.lit(1, pl.Int8).alias("k1"),
        (-pl.col("e")).alias("k2"),
        sid.alias("k3"),
    )
    ends = keys.select(
        *common,
        pl.col("e").alias("ts"),
        pl.lit(pk.END, pl.Int8).alias("typ"),
        pl.when(pos).then(0).otherwise(1).cast(pl.Int8).alias("k1"),
        (-pl.col("s")).alias("k2"),
        pl.when(pos).then(-sid).otherwise(sid).alias("k3"),
    )
    order = ["ts", "k1", "k2", "k3", "typ"]
    return pl.concat([begins, ends]).sort(order).select("sid", "blk", "uuid", "ts", "typ")


def _chunk_fields(
    enc: pk.Packets, sl: _Slices, flows: pl.DataFrame, chunk: pl.DataFrame
) -> tuple[list[str], list[str], list[bytes]]:
    """Name, category and the rest of the `TrackEvent` (annotations, flows) of each begin of
    `chunk`, gathered from the input frames (an end's are empty)."""
    n = chunk.height
    names, cats, more = [""] * n, [""] * n, [b""] * n
    begins = chunk.with_row_index("i").filter(pl.col("typ") == pk.BEGIN)
    for k, spec in enumerate(_specs()):
        b = begins.filter(pl.col("blk") == k)
        df = sl.frames[k]
        if b.height == 0 or df is None:
            continue
        g = df[(b["sid"].cast(pl.Int64) - sl.offsets[k]).to_numpy()]
        args = g.select(*[e.alias(f"a{j}") for j, (_, _, e) in enumerate(spec.args)])
        ann = pk.debug_annotations(enc, [(a, kind) for a, kind, _ in spec.args], args)
        got = g.select(spec.name.cast(pl.String).alias("n"), spec.cat.cast(pl.String).alias("c"))
        nms, cts = got["n"].to_list(), got["c"].to_list()
        for i, nm, ct, a in zip(b["i"].to_list(), nms, cts, ann, strict=True):
            names[i], cats[i], more[i] = nm, ct, a
    if flows.height:
        f = flows[begins["sid"].to_numpy()]
        has = f.select(pl.col("out").is_not_null() | pl.col("in").is_not_null())[:, 0]
        f = f.with_columns(begins["i"]).filter(has)
        for i, out, end in zip(
            f["i"].to_list(), f["out"].to_list(), f["in"].to_list(), strict=True
        ):
            more[i] += pk.flows(out, end)
    return names, cats, more


def _slice_chunks(enc: pk.Packets, sl: _Slices, flows: pl.DataFrame, rows: int) -> Iterator[bytes]:
    """The begin and end packets of the slices, `rows` events at a time."""
    for chunk in _events(sl.keys).iter_slices(rows):
        names, cats, more = _chunk_fields(enc, sl, flows, chunk)
        ts = pw.varints(chunk["ts"].to_numpy())
        typ, uuid = chunk["typ"].to_list(), chunk["uuid"].to_list()
        yield b"".join(
            enc.end(ts[i], uuid[i])
            if typ[i] == pk.END
            else enc.event(ts[i], pk.BEGIN, uuid[i], names[i], cats[i], more[i])
            for i in range(chunk.height)
        )


def _track_packets(
    w: _Writer,
    keys: pl.DataFrame,
    marks: pl.DataFrame,
    counters: pl.DataFrame,
    devices: pl.DataFrame | None,
    sources: pl.DataFrame | None,
) -> bytes:
    """A descriptor per process and thread of the JSON export (named as it names them),
    processes first, and one per counter track."""
    ids = [
        f.select(pl.col("pid").cast(pl.Int64), pl.col(t).cast(pl.Int64).alias("tid")).unique()
        for f, t in ((keys, "lane"), (marks, "tid"))
        if f.height
    ]
    if counters.height:
        ids.append(counters.select("pid", pl.lit(None, pl.Int64).alias("tid")).unique())
    meta = _metadata(ids, w.lanes, devices, sources)
    if meta.height == 0:
        return b""
    label = pl.col("args").struct.field("name").alias("label")
    meta = meta.select("name", "pid", "tid", label).sort("name", "pid", "tid")
    out: list[bytes] = []
    for kind, pid, tid, name in meta.rows():
        puuid = (pid + 1) * _LANE_BIT
        if kind == "process_name":
            out.append(pk.process(puuid, pid, name))
        else:
            out.append(pk.descriptor(puuid + ((tid + 1) & _TID_MASK), name, parent=puuid))
    for pid, metric, uuid in counters.select("pid", "metric", "uuid").unique().sort("uuid").rows():
        out.append(pk.counter_track(uuid, metric, (pid + 1) * _LANE_BIT))
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
    specs = _specs()
    blocks = [k, m, a, o, _timed(mk)]
    pids = [_DEV, _DEV, _HOST_PID, _HOST_PID, _MARK_PID]
    placed = _tracks(w, [(df, p, sp.tid) for df, p, sp in zip(blocks, pids, specs, strict=True)])
    sl = _slices(placed, w.t0)
    del k, m, a, o, blocks, placed
    pairs = [_launch_pairs(sl), _path_pairs(sl.keys, _c(critical_path), w.t0)]
    flows = _flow_ids(sl.keys, pairs)
    marks, counters = _marks(mk, w.t0), _counters(s, w.t0)
    enc = pk.Packets(annotation_names())
    head = [enc.first(), _track_packets(w, sl.keys, marks, counters, _c(devices), _c(sources))]
    chunks: list[Iterator[bytes]] = []
    if sl.keys.height:
        chunks.append(_slice_chunks(enc, sl, flows, chunk_rows))
    if marks.height:
        chunks.append(pk.instant_chunks(enc, marks, chunk_rows))
    if counters.height:
        chunks.append(pk.counter_chunks(enc, counters, chunk_rows))
    _write(path, head, chunks)


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
