"""Kineto JSON: the events array decoded batch by batch as the file's bytes come, without holding
the whole text (`_EventText`), into per-table frames (`_Parts`); the header keys before and after
the array as documents. Used by `kineto_json` (one process, or this process's part of a split
read) and by `kineto.split` (the helper's part)."""

from __future__ import annotations

import importlib
import os
import re
import zlib
from collections.abc import Iterator
from typing import Any, NoReturn

import msgspec
import polars as pl

from ...errors import MalformedInput
from ..common.core import GZIP_MAGIC, PathLike, check_stop
from ..common.limits import current_limits, gunzip_stream, too_large_value
from .frames import _BUILDERS, _split
from .stream import Spiller
from .structs import (
    _BATCH_DECODER,
    _BATCH_DECODER_ANY,
    _BATCH_DECODER_KNOWN,
    _DECODER,
    _DECODER_ANY,
    _RANGE,
    _RANGE_DECODER,
    _RANGE_DOC_DECODER,
    _RangeDoc,
)

_inflate: Any
try:  # ISA-L inflates ~2.5x faster than zlib (10 vs 27 ms for the ResNet trace); optional
    _inflate = importlib.import_module("isal.isal_zlib")
except ImportError:  # pragma: no cover - depends on the environment
    _inflate = zlib


# 8 MiB: a quarter of the per-batch polars work and spill writes of 2 MiB batches (~0.4 s of a
# 1 GB trace's ingest); a batch's decoded events are ~25 MB of Python objects.
_CHUNK = 1 << 23
# A file of at most 8 MiB on disk (~100 MB of JSON gzipped) goes in 4 MiB batches: the 15 MB
# ResNet-50 trace then decodes ~8 % faster with less peak memory (smaller batches of Python
# objects reuse the memory the last one freed); a 1 GB trace keeps the 8 MiB batches.
_SMALL_FILE = 8 << 20
_SMALL_CHUNK = 1 << 22


def _chunks(path: PathLike, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """The file's bytes in pieces of at most `_CHUNK`, gunzipped (every member, with ISA-L when
    it is installed) when it is gzip. Pieces are no larger than the value bound either, so that a
    value past it is seen whole in no piece and refused (`_stream`). `start`/`end` (a plain
    file's byte range, end exclusive) are for the split read (`kineto.split`). Between pieces,
    the caller's `stop_reading_when` is asked (`check_stop`)."""
    for piece in _pieces(path, start, end):
        check_stop()
        yield piece


def _pieces(path: PathLike, start: int, end: int | None) -> Iterator[bytes]:
    with open(path, "rb") as f:
        chunk = _SMALL_CHUNK if os.fstat(f.fileno()).st_size <= _SMALL_FILE else _CHUNK
        size = max(1, min(_CHUNK, chunk, current_limits().max_value_bytes))
        if start or end is not None:
            f.seek(start)
            left = (end - start) if end is not None else -1
            while left and (b := f.read(size if left < 0 else min(size, left))):
                left = left - len(b) if left > 0 else left
                yield b
            return
        if f.read(2) != GZIP_MAGIC:
            f.seek(0)
            while b := f.read(size):
                yield b
            return
        f.seek(0)
        yield from gunzip_stream(f, path, out_chunk=size, inflate=_inflate)


# The start of the events array, and a candidate boundary between two events. A candidate may
# lie inside a string or a nested array of objects; the left part then is not valid JSON (an
# unterminated string or unbalanced brackets), so every cut is confirmed by decoding it.
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")
_CUT_WINDOW = 1 << 16


class _Parts:
    """What the streaming pass collects: per-table frames per batch (or, with a `spiller`, their
    spill files on disk), ranges, the header docs."""

    def __init__(self, spiller: Spiller | None = None) -> None:
        self.frames: dict[str, list[pl.DataFrame]] = {t: [] for t in _BUILDERS}
        self.spiller = spiller
        self.ranges: list[Any] = []
        self.docs: list[Any] = []
        self.known_cats = True  # `_decode_batch`: every category so far is in `_KNOWN_CATS`

    def add_events(self, events: list[Any], raw: Any, range_decoder: Any) -> None:
        """Split one batch by table and build each table's rows."""
        if not events:
            return
        for role, sub in _split(events).items():
            if role == "range":
                # CUPTI range-profiler counters live in free-form args: decode this batch again
                # with `args` untyped (only traces that have such events pay for it).
                self.ranges += _range_events(range_decoder.decode(raw))
            else:
                self.add_frame(role, _BUILDERS[role](sub))

    def add_frame(self, table: str, df: pl.DataFrame) -> None:
        if self.spiller is not None:
            self.spiller.add(table, df)
        else:
            self.frames[table].append(df)


def _range_events(decoded: Any) -> list[Any]:
    events = decoded.traceEvents if isinstance(decoded, _RangeDoc) else decoded
    return [e for e in events if isinstance(e.cat, str) and e.cat.lower() == _RANGE]


class _EventText:
    """The events array decoded batch by batch (`_CHUNK`, 8 MiB of text; 4 MiB for a small
    file) as its bytes are fed, without holding the whole text; each batch's frames go to
    `parts`.

    `pending` always starts with `[` followed by the next undecoded event, so a batch is decoded
    in place: the byte after its last event is set to `]` for the decode and restored. `start`
    > 0: the text fed begins with an event at that file offset, inside the array (the second
    part of a split read, `kineto.split`).
    """

    def __init__(self, path: PathLike, parts: _Parts, start: int = 0) -> None:
        self.path, self.parts = path, parts
        self.pending = bytearray(b"[" if start else b"")
        self.consumed = start  # file offset of pending[1]
        self.in_events = start > 0
        # `pending` holds one undecoded event at most (and a chunk): past the bound it is one
        # giant value (a 2 GB string) or no event boundary at all; refused before it fills memory.
        self.lim = current_limits()

    def feed(self, chunk: bytes) -> None:
        pending, parts = self.pending, self.parts
        if len(pending) > self.lim.max_value_bytes:
            _oversized(self.path, pending, self.consumed, self.in_events, self.lim)
        pending += chunk
        if not self.in_events:
            if pending.startswith(b"\xef\xbb\xbf"):  # a UTF-8 BOM (Windows editors)
                del pending[:3]
            m = _ARRAY_START.search(pending)
            if m is None:
                return
            # Header keys before the array (deviceProperties, distributedInfo): close the array
            # and the object and decode them as a document without events.
            parts.docs.append(_decode_doc(self.path, bytes(pending[: m.end()]) + b"]}", 0))
            self.consumed = m.end()
            del pending[: m.end() - 1]  # keep the `[`
            self.in_events = True
        used = _decode_front(pending, parts)
        if used:
            self.consumed += used
            del pending[1 : 1 + used]

    def close_at_boundary(self) -> bool:
        """The text fed so far ends with a whole event, the last before a boundary the split
        read chose: decode what is pending as one batch. False (nothing changed) when it does
        not decode: the boundary was not between two events of the array."""
        if not self.in_events:
            return False
        if len(self.pending) == 1:
            return True
        self.pending += b"]"
        with memoryview(self.pending) as raw:
            events = _decode_batch(raw, self.parts)
            if events is not None:
                self.parts.add_events(events, raw, _RANGE_DECODER)
        if events is None:
            del self.pending[-1]
            return False
        self.pending = bytearray(b"[")
        return True

    def restart_at(self, offset: int) -> None:
        """After `close_at_boundary`: the next bytes fed are the event at `offset`."""
        self.consumed = offset

    def finish(self) -> None:
        """The last events, `]`, and any trailing keys (baseTimeNanoseconds is often last):
        reopen the object around them and decode it as a document."""
        path, parts = self.path, self.parts
        if not self.in_events:
            # No events array: decode what is there for the decoder's own message (empty,
            # garbage, a JSON document without traceEvents).
            _decode_doc(path, bytes(self.pending), 0)
            raise MalformedInput("no traceEvents array", path=path)
        prefix = b'{"traceEvents":'
        tail = prefix + bytes(self.pending)
        doc = _decode_doc(path, tail, self.consumed - len(prefix) - 1)
        parts.add_events(doc.traceEvents, tail, _RANGE_DOC_DECODER)
        doc.traceEvents = []
        parts.docs.append(doc)


def _stream(path: PathLike, parts: _Parts, start: int = 0) -> None:
    """Decode the trace (from the event at `start`, for the second part of a split read) to its
    end, handing each batch's frames to `parts`."""
    text = _EventText(path, parts, start)
    for chunk in _chunks(path, start):
        text.feed(chunk)
    text.finish()


def _oversized(
    path: PathLike, pending: bytearray, consumed: int, in_events: bool, lim: Any
) -> NoReturn:
    """`pending` is past the value bound. A syntax error inside it (no event boundary could be
    confirmed because the JSON is broken) is reported as such, with its line; otherwise it is
    one value too large to hold."""
    prefix = b'{"traceEvents":' if in_events else b""
    offset = consumed - len(prefix) - 1 if in_events else 0
    try:
        _DECODER_ANY.decode(prefix + bytes(pending))
    except msgspec.DecodeError as e:
        if "truncated" not in str(e):
            _decode_doc(path, prefix + bytes(pending), offset)  # raises, naming the line
    raise too_large_value("JSON value", f"at byte {consumed} of the JSON text", lim, path)


def _decode_front(pending: bytearray, parts: _Parts) -> int:
    """Decode the complete events at the front of `pending`; return how many bytes they used."""
    lo = max(1, len(pending) - _CUT_WINDOW)
    cands = [m.start() + 1 for m in _CUT.finditer(pending, lo)]
    if not cands and lo > 1:
        cands = [m.start() + 1 for m in _CUT.finditer(pending, 1)]
    for end in reversed(cands[-3:]):
        saved = pending[end]
        pending[end] = 0x5D  # "]"
        with memoryview(pending) as whole, whole[: end + 1] as raw:
            events = _decode_batch(raw, parts)
            if events is not None:
                parts.add_events(events, raw, _RANGE_DECODER)
        pending[end] = saved
        if events is not None:
            return pending.find(b"{", end) - 1  # up to the next event, comma skipped
    return 0


def _decode_batch(raw: memoryview, parts: _Parts) -> list[Any] | None:
    """The events of one batch; None when the cut was not between two top-level events."""
    if parts.known_cats:
        try:
            known: list[Any] = _BATCH_DECODER_KNOWN.decode(raw)
            return known
        except msgspec.ValidationError:
            # A category outside `_KNOWN_CATS` (or any other misfit, tried below): the rest of
            # the file is decoded with `Any` categories, so that such a file pays once.
            parts.known_cats = False
        except msgspec.DecodeError:
            return None
    try:
        events: list[Any] = _BATCH_DECODER.decode(raw)
        return events
    except msgspec.ValidationError:
        # A phase outside the Chrome trace spec (or none), `"args": null`, or a cut that is not
        # between top-level events: decode without the tag (None if that fails too).
        try:
            events = _BATCH_DECODER_ANY.decode(raw)
            return events
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
    except msgspec.DecodeError:
        return None


def _decode_doc(path: PathLike, text: bytes, file_offset: int) -> Any:
    """Decode a whole-document text; `file_offset` maps its byte 0 to the file for errors."""
    if not text.strip():
        raise MalformedInput("empty file", path=path)
    try:
        try:
            return _DECODER.decode(text)
        except msgspec.ValidationError:  # see _decode_batch
            return _DECODER_ANY.decode(text)
    except msgspec.ValidationError as e:  # a subclass of DecodeError: first
        raise MalformedInput(
            f"not a Kineto trace: expected an object with a traceEvents array ({e})", path=path
        ) from None
    except msgspec.DecodeError as e:
        msg, line = str(e), None
        m = _BYTE_POS.search(msg)
        if m:  # the decoder counts in this text; report the file's (decompressed) offset
            pos = max(file_offset + int(m.group(1)), 0)
            line = _line_at(path, pos)
            msg = _BYTE_POS.sub(f"(byte {pos} of the JSON text)", msg)
        raise MalformedInput(f"not valid JSON ({msg})", path=path, line=line) from None


def _line_at(path: PathLike, offset: int) -> int:
    """1-based line of a byte offset of the (decompressed) file; errors only, so it re-reads."""
    lines, seen = 1, 0
    for chunk in _chunks(path):
        if seen + len(chunk) >= offset:
            return lines + chunk.count(b"\n", 0, max(offset - seen, 0))
        lines += chunk.count(b"\n")
        seen += len(chunk)
    return lines
