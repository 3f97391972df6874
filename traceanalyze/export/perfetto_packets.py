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

from collections.abc import Iterator, Sequence

import numpy as np
import polars as pl

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

    def end(self, ts: bytes, uuid: int) -> bytes:
        tail = self.ends.get(uuid)
        if tail is None:
            tail = self.ends[uuid] = _SEQ + pw.ld(_P_EVENT, _TYPE[END] + self.track(uuid))
        return packet(_TS + ts + tail)

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


def debug_annotations(
    enc: Packets, names: Sequence[tuple[str, str]], g: pl.DataFrame
) -> list[bytes]:
    """The `debug_annotations` of each row of `g` (a column per argument, `names`: its
    annotation name and kind: int, str, ints); a null is left out, and a list holding one."""
    out = [b""] * g.height
    for (name, kind), col in zip(names, g.columns, strict=True):
        s = g[col]
        if s.null_count() == s.len():
            continue
        prefix = enc.annot[name]
        if kind == "int":
            head = prefix + _INT
            ints = pw.varints(s.fill_null(0).to_numpy())
            for i in np.flatnonzero(s.is_not_null().to_numpy()).tolist():
                body = head + ints[i]
                out[i] += _ANNOT + pw.varint(len(body)) + body
            continue
        for i, v in enumerate(s.to_list()):
            if v is None or (kind == "ints" and None in v):
                continue
            if kind == "str":
                body = prefix + pw.text(_A_STR, v)
            else:
                body = prefix + b"".join(pw.ld(_A_ARRAY, _INT + pw.varint(x)) for x in v)
            out[i] += _ANNOT + pw.varint(len(body)) + body
    return out


def flows(ids: Sequence[int] | None, terminating: Sequence[int] | None) -> bytes:
    out = b"".join(pw.fixed64(_E_FLOW, x) for x in ids) if ids else b""
    return out + b"".join(pw.fixed64(_E_TFLOW, x) for x in terminating) if terminating else out


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
