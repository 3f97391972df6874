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

Memory: the events are never all in memory at once. The inputs are read a batch at a time (lazy
frames, as the JSON export reads them) and the slices placed on sub-tracks by the JSON export's
streamed placement (`export.placement`). Each slice's end (its order keys and track) and begin
(with its name, category and the rest of its `TrackEvent`: annotations and flow ids, encoded
then) are dealt into spill files by ranges of time (`extsort.Buckets`); each range is read back,
sorted and encoded, `chunk_rows` events at a time, in Arrow arrays (`perfetto_packets`
`slice_names`, `slice_bytes`: no Python loop per event). What spans the trace: the ids of the
flows (per slice where one starts or ends: one per launched kernel or copy), the interned names
(they grow with the distinct names, not the events), and what the placement keeps.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import BinaryIO

import numpy as np
import polars as pl
import pyarrow as pa

from ..background import ordered_map, prefetch
from ..errors import TraceanalyzeError
from . import extsort
from . import perfetto_packets as pk
from .extsort import Buckets
from .perfetto import (
    _COPY_TID,
    _DEV,
    _HOST_TID,
    _MARK_PID,
    _MARK_TID,
    _STREAM_TID,
    API,
    COPY_TID_OFFSET,
    COUNTERS,
    HOST_PID_OFFSET,
    KERNEL,
    KERNEL_CAT,
    MEMCPY,
    Frame,
    Inputs,
    _c,
    _height,
    _metadata,
    batches,
    inputs,
    lanes_of,
    launch_flows,
)

PROTO_SUFFIXES: tuple[str, ...] = (".pftrace", ".perfetto-trace", ".pb")
CHUNK_ROWS = 50_000
_LANE_BIT = 1 << 36  # a process track's uuid: (pid + 1) << 36; its tracks add tid + 1
_COUNTER_BIT = 1 << 35
_TID_MASK = _COUNTER_BIT - 1


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
        _Spec(_STREAM_TID, pl.col("name").fill_null("kernel"), KERNEL_CAT, kernel),
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


def _keys(inp: Inputs, offsets: list[int]) -> pl.LazyFrame | None:
    """`sid, blk, pid, lane, tid, s, e, uuid`: per slice its id, kind, track (process, the
    sub-track's tid, the track's own tid), times from the origin and track uuid."""
    specs, parts = _specs(), []
    for i in range(5):
        df = inp.placed(i)
        if df is None:
            continue
        parts.append(
            df.with_row_index("_r").select(
                (pl.col("_r").cast(pl.Int64) + offsets[i]).alias("sid"),
                pl.lit(i, pl.Int8).alias("blk"),
                pl.col("_pid").cast(pl.Int64).alias("pid"),
                pl.col("_tid").cast(pl.Int64).alias("lane"),
                specs[i].tid.cast(pl.Int64).alias("tid"),
                (pl.col("start_ns") - inp.t0).cast(pl.Int64).alias("s"),
                (pl.col("end_ns") - inp.t0).cast(pl.Int64).alias("e"),
            )
        )
    if not parts:
        return None
    return pl.concat(parts).with_columns(_tuuid(pl.col("pid"), pl.col("lane")).alias("uuid"))


def _launch_pairs(inp: Inputs, offsets: list[int], work: str) -> pl.DataFrame | None:
    """`id, out, in`: a flow from each launch call to each GPU event of its correlation id (same
    source, same process where both give one), ids 1.. in order of the GPU event's start (the
    JSON export's `launch_flows`)."""
    j = launch_flows(inp, os.path.join(work, "flows.parquet"))
    if j is None:
        return None
    gpu_off = pl.when(pl.col("_gb") == KERNEL).then(offsets[KERNEL]).otherwise(offsets[MEMCPY])
    return j.select(
        pl.col("id").cast(pl.UInt64),
        (pl.col("_sr") + offsets[API]).alias("out"),
        (pl.col("_gr") + gpu_off).alias("in"),
    ).collect()


def _path_pairs(keys: pl.LazyFrame, cp: pl.DataFrame | None, t0: int) -> pl.DataFrame | None:
    """`id, out, in` of the critical path's flows (`perfetto_path`), each end bound to the
    first slice that starts at its time on its track."""
    if cp is None or cp.height == 0:
        return None
    from .perfetto_path import path_flows

    starts, ends = path_flows(cp, t0, HOST_PID_OFFSET, COPY_TID_OFFSET)
    s = (pl.col("ts") * 1e3).round().cast(pl.Int64).alias("s")
    at = pl.concat(
        [
            f.select(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64), s)
            for f in (starts, ends)
        ]
    ).unique()
    at_key = (
        keys.select("pid", "tid", "s", "sid")
        .join(at.lazy(), on=["pid", "tid", "s"], how="semi")
        .group_by("pid", "tid", "s")
        .agg(pl.col("sid").min())
        .collect()
    )

    def side(f: pl.DataFrame, name: str) -> pl.DataFrame:
        f = f.select(pl.col("id").cast(pl.UInt64), pl.col("pid"), pl.col("tid"), s)
        f = f.join(at_key, on=["pid", "tid", "s"], how="inner")
        return f.select("id", pl.col("sid").alias(name))

    return side(starts, "out").join(side(ends, "in"), on="id", how="inner")


Ends = tuple[np.ndarray, np.ndarray]


def _flow_ids(pairs: list[pl.DataFrame | None]) -> tuple[Ends, Ends] | None:
    """The slices where flows start (`out`) and where they end (`in`): for each side, the
    slice ids and the flow ids, sorted by slice id, then flow id (None where no flow)."""
    live = [
        p.select("id", pl.col("out").cast(pl.Int64), pl.col("in").cast(pl.Int64))
        for p in pairs
        if p is not None and p.height
    ]
    if not live:
        return None
    p = pl.concat(live)

    def side(col: str) -> Ends:
        q = p.select(pl.col(col).alias("sid"), "id").drop_nulls("sid").sort("sid", "id")
        return q["sid"].to_numpy(), q["id"].to_numpy()

    return side("out"), side("in")


def _flows_of(ends: Ends, first: int, n: int, field: int) -> pa.Array:
    """The flow ids field (`field`) of the `n` slices from id `first` on."""
    sids, ids = ends
    lo, hi = np.searchsorted(sids, [first, first + n])
    counts = np.bincount(sids[lo:hi] - first, minlength=n)
    return pk.flow_fields(ids[lo:hi], counts, field)


def _begins(
    enc: pk.Packets,
    inp: Inputs,
    offsets: list[int],
    flows: tuple[Ends, Ends] | None,
    out: Buckets,
) -> None:
    """The begins and ends of the slices (`_ends`), a batch of each kind at a time, into `out`:
    per begin its slice's name, category and the rest of its `TrackEvent` (annotations,
    flows); the ends from the same batch (the inputs read once for both). A batch is made on a
    thread of its own while the one before is dealt into `out` (the order they are dealt in
    does not matter: each bucket is sorted by keys that are unique per event)."""
    for df in prefetch(_begin_batches(enc, inp, offsets, flows), "traceanalyze-pftrace"):
        out.add(df)


def _begin_batches(
    enc: pk.Packets, inp: Inputs, offsets: list[int], flows: tuple[Ends, Ends] | None
) -> Iterator[pl.DataFrame]:
    for k, spec in enumerate(_specs()):
        df = inp.placed(k)
        if df is None:
            continue
        for g in batches(df.with_row_index("_r")):
            head = g.select(
                (pl.col("start_ns") - inp.t0).cast(pl.Int64).alias("ts"),
                pl.lit(1, pl.Int8).alias("k1"),
                (inp.t0 - pl.col("end_ns")).cast(pl.Int64).alias("k2"),
                (pl.col("_r").cast(pl.Int64) + offsets[k]).alias("k3"),
                pl.lit(pk.BEGIN, pl.Int8).alias("typ"),
                _tuuid(pl.col("_pid").cast(pl.Int64), pl.col("_tid").cast(pl.Int64)).alias("uuid"),
                spec.name.cast(pl.String).alias("name"),
                spec.cat.cast(pl.String).alias("cat"),
            )
            args = g.select(*[e.alias(f"a{j}") for j, (_, _, e) in enumerate(spec.args)])
            more = pk.debug_annotations(enc, [(a, kind) for a, kind, _ in spec.args], args)
            if flows is not None:
                first = int(head["k3"][0])  # consecutive slice ids
                out_ids = _flows_of(flows[0], first, head.height, pk.FLOW_OUT)
                more = pk.join(more, out_ids, _flows_of(flows[1], first, head.height, pk.FLOW_IN))
            begins = head.with_columns(pl.Series("more", more, pl.Binary))
            yield pl.concat([begins, _ends(head)])


def _ends(begins: pl.DataFrame) -> pl.DataFrame:
    """`ts, k1, k2, k3, typ, uuid, name, cat, more`: the end of each slice of `begins` (`ts`
    its start, `k2` minus its end, `k3` its id), with the keys that order the begins and ends
    so that they nest: by time; at one time ends first (innermost first), then begins
    (outermost first), an empty slice's end right after its begin (`_begins` gives the begins,
    with their slice's name, category and the rest of its `TrackEvent`)."""
    end = -pl.col("k2")
    pos = end > pl.col("ts")
    sid = pl.col("k3")
    return begins.select(
        end.alias("ts"),
        pl.when(pos).then(0).otherwise(1).cast(pl.Int8).alias("k1"),
        (-pl.col("ts")).alias("k2"),
        pl.when(pos).then(-sid).otherwise(sid).alias("k3"),
        pl.lit(pk.END, pl.Int8).alias("typ"),
        "uuid",
        pl.lit(None, pl.String).alias("name"),
        pl.lit(None, pl.String).alias("cat"),
        pl.lit(None, pl.Binary).alias("more"),
    )


def _events(
    enc: pk.Packets,
    inp: Inputs,
    offsets: list[int],
    keys: pl.LazyFrame,
    path_pairs: pl.DataFrame | None,
    work: str,
    rows: int,
) -> Iterator[pl.DataFrame]:
    """The begins and ends of the slices in order (`_ends`), `rows` or so at a time: dealt into
    buckets by time, each sorted (`extsort`). `offsets`: each block's first slice id, then the
    number of slices."""
    n = 2 * offsets[-1]
    step = max(1, n // 4096)
    # every `step`-th slice's start and end (a list column per row, exploded, cost ~10x more)
    some = keys.select("s", "e").gather_every(step).collect()
    sample = np.concatenate([some["s"].to_numpy(), some["e"].to_numpy()])
    buckets = Buckets(sample, n, "ts", work, extsort.BUCKET_ROWS)
    _begins(enc, inp, offsets, _flow_ids([_launch_pairs(inp, offsets, work), path_pairs]), buckets)
    yield from buckets.sorted(["ts", "k1", "k2", "k3", "typ"], None, rows)


def _slice_chunks(enc: pk.Packets, events: Iterator[pl.DataFrame]) -> Iterator[pa.Buffer]:
    """The begin and end packets of the slices, in order, a batch of `events` at a time. The
    events are made (built, dealt, sorted: polars) on a thread of their own, and the batches'
    bytes made (pyarrow, numpy) on two more, so that the work overlaps on two cores; only the
    interning of names runs batch after batch, here (`perfetto_packets.slice_names`). Safe:
    making the events reads only the encoder's fixed annotation names, and making bytes only
    its per-track bytes (a cache of a pure function)."""
    named = (pk.slice_names(enc, c) for c in prefetch(events, "traceanalyze-pftrace", ahead=1))
    yield from ordered_map(partial(pk.slice_bytes, enc), named, "traceanalyze-pftrace-bytes")


def _track_packets(
    inp: Inputs,
    marks: pl.DataFrame,
    counters: pl.DataFrame,
    devices: pl.DataFrame | None,
    sources: pl.DataFrame | None,
) -> bytes:
    """A descriptor per process and thread of the JSON export (named as it names them),
    processes first, and one per counter track."""
    ids = [inp.placement.tracks.select("pid", "tid")]
    if marks.height:
        ids.append(marks.select("pid", "tid").unique())
    if counters.height:
        ids.append(counters.select("pid", pl.lit(None, pl.Int64).alias("tid")).unique())
    meta = _metadata(ids, lanes_of(inp.placement), devices, sources)
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


def _marks(mk: pl.LazyFrame | None, t0: int) -> pl.DataFrame:
    """Marks without an end: instants on the track their ranges would use."""
    if mk is None:
        return pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64})
    return (
        mk.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_null())
        .select(
            (pl.col("start_ns") - t0).alias("ts"),
            _MARK_PID.cast(pl.Int64).alias("pid"),
            _MARK_TID.cast(pl.Int64).alias("tid"),
            _tuuid(_MARK_PID.cast(pl.Int64), _MARK_TID.cast(pl.Int64)).alias("uuid"),
            pl.col("name").fill_null("").cast(pl.String),
            pl.coalesce("category", pl.lit("marker")).cast(pl.String).alias("cat"),
        )
        .collect()
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
    with tempfile.TemporaryDirectory(prefix="traceanalyze-pftrace-") as work:
        frames = (kernels, memcpy, api_calls, ops, markers)
        inp = inputs(frames, gpu_samples, origin_ns, work)
        offsets, at = [], 0
        for df in inp.blocks:
            offsets.append(at)
            at += 0 if df is None else _height(df)
        offsets.append(at)  # counted once (each count is a scan)
        keys = _keys(inp, offsets)
        marks, counters = _marks(inp.markers, inp.t0), _counters(inp.samples, inp.t0)
        enc = pk.Packets(annotation_names())
        head = [enc.first(), _track_packets(inp, marks, counters, _c(devices), _c(sources))]
        chunks: list[Iterator[bytes]] = []
        if keys is not None and at:
            cp = _path_pairs(keys, _c(critical_path), inp.t0)
            events = _events(enc, inp, offsets, keys, cp, work, chunk_rows)
            chunks.append(_slice_chunks(enc, events))
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
