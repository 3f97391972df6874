"""The packets of the Perfetto protobuf trace (`perfetto_proto`): descriptors, slices, instants,
counters, encoded a chunk of events at a time.

Field numbers are those of Perfetto's trace protos (protos/perfetto/trace/perfetto_trace.proto,
as the `perfetto` 0.59 package ships them): `Trace.packet` 1; `TracePacket` timestamp 8,
trusted_packet_sequence_id 10, track_event 11, interned_data 12, sequence_flags 13,
track_descriptor 60; `TrackEvent` category_iids 3, debug_annotations 4, type 9, name_iid 10,
track_uuid 11, double_counter_value 44, flow_ids 47, terminating_flow_ids 48; `InternedData`
event_categories 1, event_names 2, debug_annotation_names 3 (each `iid` 1, `name` 2);
`DebugAnnotation` name_iid 1, int_value 4, string_value 6, array_values 12; `TrackDescriptor`
uuid 1, name 2, process 3, parent_uuid 5, counter 8; `ProcessDescriptor` pid 1, process_name 6.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from . import protowire as pw

SEQ_ID = 1
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
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
_I_CATS, _I_NAMES, _I_ANNOT = 1, 2, 3
_A_NAME, _A_INT, _A_STR, _A_ARRAY = 1, 4, 6, 12
_T_UUID, _T_NAME, _T_PROCESS, _T_PARENT, _T_COUNTER = 1, 2, 3, 5, 8
_PD_PID, _PD_NAME = 1, 6
_SEQ_CLEARED, _SEQ_NEEDS = 1, 2

_SEQ = pw.uint(_P_SEQ, SEQ_ID)
_NEEDS = _SEQ + pw.uint(_P_FLAGS, _SEQ_NEEDS)
_TS = pw.tag(_P_TS, pw.VARINT)
_PACKET = pw.tag(1, pw.LEN)
_TYPE = {t: pw.uint(_E_TYPE, t) for t in (BEGIN, END, INSTANT, COUNTER)}
_ANNOT = pw.tag(_E_ANNOT, pw.LEN)
_INT = pw.tag(_A_INT, pw.VARINT)


def packet(body: bytes) -> bytes:
    return _PACKET + pw.varint(len(body)) + body


class Packets:
    """The encoder's state: the interned names of the one packet sequence, and the bytes of
    each track's `track_uuid` field."""

    def __init__(self, annotation_names: Sequence[str]) -> None:
        self.names: dict[str, bytes] = {}
        self.cats: dict[str, bytes] = {}
        self.annot = {n: pw.uint(_A_NAME, i) for i, n in enumerate(annotation_names, start=1)}
        self.tracks: dict[int, bytes] = {}
        self.ends: dict[int, bytes] = {}

    def first(self) -> bytes:
        """The packet that opens the sequence, with the debug-annotation names."""
        names = b"".join(
            pw.ld(_I_ANNOT, pw.uint(1, i) + pw.text(2, n))
            for i, n in enumerate(self.annot, start=1)
        )
        return packet(_SEQ + pw.uint(_P_FLAGS, _SEQ_CLEARED) + pw.ld(_P_INTERNED, names))

    def track(self, uuid: int) -> bytes:
        b = self.tracks.get(uuid)
        if b is None:
            b = self.tracks[uuid] = pw.uint(_E_TRACK, uuid)
        return b

    def end_tail(self, uuid: int) -> bytes:
        """What follows the timestamp in the packet of an end on track `uuid`."""
        tail = self.ends.get(uuid)
        if tail is None:
            tail = self.ends[uuid] = _SEQ + pw.ld(_P_EVENT, _TYPE[END] + self.track(uuid))
        return tail

    def end(self, ts: bytes, uuid: int) -> bytes:
        return packet(_TS + ts + self.end_tail(uuid))

    def _intern(self, table: dict[str, bytes], field: int, iid_field: int, s: str) -> bytes:
        """The `InternedData` entry `s` needs when it is new (its iid goes in `table`)."""
        iid = len(table) + 1
        table[s] = pw.uint(iid_field, iid)
        return pw.ld(field, pw.uint(1, iid) + pw.text(2, s))

    def event(self, ts: bytes, typ: int, uuid: int, name: str, cat: str, more: bytes) -> bytes:
        new = b""
        n = self.names.get(name)
        if n is None:
            new += self._intern(self.names, _I_NAMES, _E_NAME, name)
            n = self.names[name]
        c = self.cats.get(cat)
        if c is None:
            new += self._intern(self.cats, _I_CATS, _E_CAT, cat)
            c = self.cats[cat]
        te = _TYPE[typ] + self.track(uuid) + n + c + more
        head = _TS + ts + _NEEDS + (pw.ld(_P_INTERNED, new) if new else b"")
        return packet(head + pw.ld(_P_EVENT, te))


def instant_chunks(enc: Packets, marks: pl.DataFrame, rows: int) -> Iterator[bytes]:
    for chunk in marks.iter_slices(rows):
        ts = pw.varints(chunk["ts"].to_numpy())
        cols = (chunk[c].to_list() for c in ("uuid", "name", "cat"))
        yield b"".join(
            enc.event(t, INSTANT, u, n, c, b"") for t, u, n, c in zip(ts, *cols, strict=True)
        )


def counter_chunks(enc: Packets, counters: pl.DataFrame, rows: int) -> Iterator[bytes]:
    head = _TYPE[COUNTER]
    for chunk in counters.iter_slices(rows):
        ts = pw.varints(chunk["ts"].to_numpy())
        cols = (chunk[c].to_list() for c in ("uuid", "value"))
        yield b"".join(
            packet(_TS + t + _SEQ + pw.ld(_P_EVENT, head + enc.track(u) + pw.double(_E_DOUBLE, v)))
            for t, u, v in zip(ts, *cols, strict=True)
        )


def descriptor(uuid: int, name: str, parent: int | None = None, extra: bytes = b"") -> bytes:
    td = pw.uint(_T_UUID, uuid) + pw.text(_T_NAME, name) + extra
    if parent is not None:
        td += pw.uint(_T_PARENT, parent)
    return packet(_SEQ + pw.ld(_P_TRACK, td))


def process(uuid: int, pid: int, name: str) -> bytes:
    proc = pw.ld(_T_PROCESS, pw.uint(_PD_PID, pid) + pw.text(_PD_NAME, name))
    return descriptor(uuid, name, extra=proc)


def counter_track(uuid: int, name: str, parent: int) -> bytes:
    return descriptor(uuid, name, parent=parent, extra=pw.ld(_T_COUNTER, b""))


# --- the slices' packets, a chunk at a time, in Arrow arrays (no Python loop per event) -------

_BIN = pa.binary()
_NONE = pa.scalar(b"", _BIN)


FLOW_OUT, FLOW_IN = _E_FLOW, _E_TFLOW


def join(*parts: pa.Array | pa.Scalar) -> pa.Array:
    """The binary values of `parts` (arrays of one length, or scalars) joined row by row."""
    return _join(*parts)


def _join(*parts: pa.Array | pa.Scalar) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _NONE)


def _varint_array(values: np.ndarray) -> pa.Array:
    """`values` (integers) as varints, one binary value each (as `protowire.varints`)."""
    v = values.astype(np.int64).view(np.uint64)
    n = v.shape[0]
    lens = np.ones(n, dtype=np.int32)
    for k in range(1, 10):
        more = v >= np.uint64(1 << (7 * k))
        if not more.any():
            break
        lens += more
    width = int(lens.max()) if n else 1
    if width == 1:
        data = v.astype(np.uint8)
    else:
        out = np.empty((n, width), dtype=np.uint8)
        for k in range(width):
            out[:, k] = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
            out[:, k] |= (lens > k + 1).astype(np.uint8) << 7
        data = out.reshape(-1)[(np.arange(width) < lens[:, None]).reshape(-1)]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    return pa.Array.from_buffers(_BIN, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _framed(tag: bytes, *parts: pa.Array | bytes) -> pa.Array:
    """A length-delimited field with the tag `tag` per row, its payload `parts` (arrays of one
    length, or bytes) joined row by row: one join, the length added up from the parts'."""
    size: np.ndarray | int = 0
    for part in parts:
        if isinstance(part, bytes):
            size = size + len(part)
        else:
            size = size + pc.binary_length(part).to_numpy(zero_copy_only=False)
    n = max((len(x) for x in parts if not isinstance(x, bytes)), default=0)
    sizes = np.broadcast_to(np.asarray(size, dtype=np.int64), (n,))
    cols = [pa.scalar(x, _BIN) if isinstance(x, bytes) else x for x in parts]
    return _join(pa.scalar(tag, _BIN), _varint_array(sizes), *cols)


def _sizes(a: pa.Array) -> np.ndarray:
    return np.asarray(pc.binary_length(a).to_numpy(zero_copy_only=False), dtype=np.int64)


def _per_value(values: np.ndarray, encode: Callable[[int], bytes]) -> pa.Array:
    """`encode(v)` for each of `values`, computed once per distinct value."""
    d = pc.dictionary_encode(pa.array(values))  # by hashing: no sort
    table = pa.array([encode(int(u)) for u in d.dictionary.to_pylist()], _BIN)
    return table.take(d.indices)


class _Interned:
    """Per distinct text of a chunk's column: its `iid` field, and the `InternedData` entry of
    the texts new to the sequence, at the row where each first appears."""

    def __init__(self, enc: Packets, table: dict[str, bytes], field: int, iid_field: int) -> None:
        self.enc, self.table, self.field, self.iid_field = enc, table, field, iid_field

    def column(self, texts: pa.Array) -> tuple[pa.Array, dict[int, bytes]]:
        d = pc.dictionary_encode(texts).combine_chunks() if isinstance(texts, pa.ChunkedArray) \
            else pc.dictionary_encode(texts)  # fmt: skip
        codes = d.indices.to_numpy(zero_copy_only=False)
        first = np.full(len(d.dictionary), codes.size, dtype=np.int64)
        np.minimum.at(first, codes, np.arange(codes.size))  # where each text first appears
        new: dict[int, bytes] = {}
        fields = []
        for code, text in enumerate(d.dictionary.to_pylist()):
            b = self.table.get(text)
            if b is None:
                new[int(first[code])] = self.enc._intern(
                    self.table, self.field, self.iid_field, text
                )
                b = self.table[text]
            fields.append(b)
        return pa.array(fields, _BIN).take(d.indices), new


@dataclass(frozen=True)
class SliceNames:
    """A chunk of slice events (`ts, typ, uuid, name, cat, more`; a begin's `name`, `cat`,
    `more`: its name, category and the rest of its `TrackEvent`) with its begins' names and
    categories interned (`slice_names`): what `slice_bytes` needs to write its packets, in
    order, as `Packets.event` and `Packets.end` write them one at a time."""

    chunk: pl.DataFrame
    b_rows: np.ndarray
    e_rows: np.ndarray
    begins: pa.Table | None  # name, cat, more of the begins
    names: pa.Array | None
    cats: pa.Array | None
    interned: pa.Array | None  # per begin, the InternedData its names and categories need


def slice_names(enc: Packets, chunk: pl.DataFrame) -> SliceNames:
    """The part of a chunk's packets that must run chunk after chunk, in the output's order:
    interning names and categories (an iid is defined where its text first appears)."""
    is_end = (chunk["typ"] == END).to_numpy()
    b_rows, e_rows = np.flatnonzero(~is_end), np.flatnonzero(is_end)
    if not b_rows.size:
        return SliceNames(chunk, b_rows, e_rows, None, None, None, None)
    b = chunk[b_rows].select("name", "cat", "more").to_arrow()
    names, new_n = _Interned(enc, enc.names, _I_NAMES, _E_NAME).column(b["name"])
    cats, new_c = _Interned(enc, enc.cats, _I_CATS, _E_CAT).column(b["cat"])
    rows = sorted(set(new_n) | set(new_c))
    extra = [b""] + [pw.ld(_P_INTERNED, new_n.get(r, b"") + new_c.get(r, b"")) for r in rows]
    at = np.zeros(b_rows.size, dtype=np.int64)
    at[rows] = np.arange(1, len(rows) + 1)
    interned = pa.array(extra, _BIN).take(pa.array(at))
    return SliceNames(chunk, b_rows, e_rows, b, names, cats, interned)


def slice_bytes(enc: Packets, s: SliceNames) -> pa.Buffer:
    """The packets of a chunk (`SliceNames`), its names interned. This reads only the encoder's
    per-track bytes (a cache of a pure function), so chunks may be encoded here on several
    threads at once."""
    chunk, b_rows, e_rows = s.chunk, s.b_rows, s.e_rows
    ts = _varint_array(chunk["ts"].to_numpy())
    uuid = chunk["uuid"].to_numpy()
    parts = []
    if s.begins is not None:
        te = (
            _TYPE[BEGIN],
            _per_value(uuid[b_rows], enc.track),
            s.names,
            s.cats,
            pc.cast(s.begins["more"].combine_chunks(), _BIN),
        )
        te_size = sum(len(x) if isinstance(x, bytes) else _sizes(x) for x in te)
        event = (pw.tag(_P_EVENT, pw.LEN), _varint_array(np.asarray(te_size)), *te)
        ts_b = ts.take(pa.array(b_rows))
        parts.append(_framed(_PACKET, _TS, ts_b, _NEEDS, s.interned, *event))
    if e_rows.size:
        tail = _per_value(uuid[e_rows], enc.end_tail)
        parts.append(_framed(_PACKET, _TS, ts.take(pa.array(e_rows)), tail))
    where = np.empty(chunk.height, dtype=np.int64)
    where[b_rows] = np.arange(b_rows.size)
    where[e_rows] = b_rows.size + np.arange(e_rows.size)
    out = pa.concat_arrays(parts).take(pa.array(where))
    offsets = np.frombuffer(out.buffers()[1], dtype=np.int32)
    lo, hi = int(offsets[out.offset]), int(offsets[out.offset + len(out)])
    return out.buffers()[2].slice(lo, hi - lo)


def _regroup(elems: pa.Array, list_offsets: np.ndarray) -> pa.Array:
    """The values of `elems` (a fresh binary array) concatenated list by list (`list_offsets`:
    where each list starts in `elems`, and the end)."""
    offsets = np.frombuffer(elems.buffers()[1], dtype=np.int32)[: len(elems) + 1]
    rows = offsets[list_offsets].astype(np.int32)
    n = list_offsets.size - 1
    return pa.Array.from_buffers(_BIN, n, [None, pa.py_buffer(rows), elems.buffers()[2]])


def _or_empty(mask: np.ndarray, values: pa.Array) -> pa.Array:
    return pc.if_else(pa.array(mask), values, _NONE)


def debug_annotations(enc: Packets, names: Sequence[tuple[str, str]], g: pl.DataFrame) -> pa.Array:
    """The `debug_annotations` of each row of `g` (a column per argument, `names`: its
    annotation name and kind: int, str, ints), one binary value per row; a null is left out,
    and a list holding one."""
    out: list[pa.Array] = []
    for (name, kind), col in zip(names, g.columns, strict=True):
        s = g[col]
        if s.null_count() == s.len():
            continue
        prefix = enc.annot[name]
        if kind == "int":
            field = _framed(_ANNOT, prefix + _INT, _varint_array(s.fill_null(0).to_numpy()))
            keep = s.is_not_null().to_numpy()
        elif kind == "str":
            text = pc.cast(s.fill_null("").cast(pl.String).to_arrow(), _BIN)
            str_tag = pw.tag(_A_STR, pw.LEN)
            field = _framed(_ANNOT, prefix, str_tag, _varint_array(_sizes(text)), text)
            keep = s.is_not_null().to_numpy()
        else:
            whole = s.list.drop_nulls().list.len() == s.list.len()
            keep = (s.is_not_null() & whole).fill_null(False).to_numpy()
            full = s.fill_null([]).list.eval(pl.element().fill_null(0))
            flat = _flatten(full).astype(np.int64)
            elems = _framed(pw.tag(_A_ARRAY, pw.LEN), _INT, _varint_array(flat))
            starts = np.zeros(s.len() + 1, dtype=np.int64)
            np.cumsum(full.list.len().to_numpy(), out=starts[1:])
            field = _framed(_ANNOT, prefix, _regroup(elems, starts))
        out.append(_or_empty(keep, field))
    if not out:
        return pa.array([b""] * g.height, _BIN)
    return _join(*out) if len(out) > 1 else out[0]


def _flatten(lists: pl.Series) -> np.ndarray:
    """The values of a list column (no nulls), list after list; an empty list adds none."""
    arr = lists.to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return np.asarray(pc.list_flatten(arr).to_numpy(zero_copy_only=False))


def flow_fields(ids: np.ndarray, counts: np.ndarray, field: int) -> pa.Array:
    """The `flow_ids` (`field` 47) or `terminating_flow_ids` (48) of each row: `counts` the
    number of flows per row, `ids` their ids, row after row."""
    flat = ids.astype(np.uint64)
    tag = np.frombuffer(pw.tag(field, pw.I64), dtype=np.uint8)
    elems = np.empty((flat.size, tag.size + 8), dtype=np.uint8)
    elems[:, : tag.size] = tag
    elems[:, tag.size :] = flat.astype("<u8").view(np.uint8).reshape(-1, 8)
    starts = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    offsets = (starts * elems.shape[1]).astype(np.int32)
    data = pa.py_buffer(elems.tobytes())
    return pa.Array.from_buffers(_BIN, counts.size, [None, pa.py_buffer(offsets), data])
