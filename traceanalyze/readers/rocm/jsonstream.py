"""A big JSON document read in bounded memory: its large arrays of objects (named by key) are
decoded batch by batch as the bytes come, the rest (the "outer" document, those arrays left
empty) kept whole. Used by `rocprofv3_json`, whose dispatch and symbol arrays reach GBs while
its agents and metadata stay small.

A key followed by `[` is found with a pattern: inside a JSON string a quote is escaped, so
`"kernel_dispatch":[` cannot match there. Inside an array, candidate boundaries between objects
(`}` then `,` or `]`) may lie inside a string; each cut is confirmed by decoding it (the typed
msgspec decoder refuses a cut that is not whole objects), an earlier one tried otherwise.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from ...errors import MalformedInput
from ..common.core import PathLike
from ..common.limits import current_limits, too_large_value

_CUT = re.compile(rb"\}\s*,\s*\{")
_END = re.compile(rb"\}\s*\]")
_WS = b" \t\r\n"
_TRIES = 16  # candidate cuts tried per batch before waiting for more bytes


class ArrayReader:
    """Feed it the document's bytes (`feed`), then `finish`; it yields `(key, records)` for the
    arrays named in `decoders` (each a msgspec decoder of a list of records) and keeps the
    rest in `outer`."""

    def __init__(self, decoders: Mapping[str, msgspec.json.Decoder[Any]], path: PathLike):
        names = b"|".join(re.escape(k.encode()) for k in decoders)
        self._key = re.compile(rb'"(' + names + rb')"\s*:\s*\[')
        self._decoders = decoders
        self._path = path
        self._limit = current_limits().max_value_bytes
        self.outer = bytearray()
        self._buf = b""
        self._array: str | None = None  # the key whose array is being read

    def feed(self, data: bytes) -> Iterator[tuple[str, list[Any]]]:
        self._buf = self._buf + data if self._buf else data
        while True:
            if self._array is None:
                if not self._outer_step():
                    return
            else:
                got = self._array_step()
                if got is None:
                    return
                if got[1]:
                    yield got

    def finish(self) -> Any:
        """The outer document, decoded (the arrays read here left empty)."""
        if self._array is not None:
            raise MalformedInput(
                f"the {self._array} array never ends (cut short?)", path=self._path
            )
        self.outer += self._buf
        try:
            return json.loads(bytes(self.outer))
        except (ValueError, RecursionError) as e:
            raise MalformedInput(f"not valid JSON ({e})", path=self._path) from None

    def _outer_step(self) -> bool:
        m = self._key.search(self._buf)
        if m is None:
            keep = min(len(self._buf), 256)  # a key cut between two pieces
            self.outer += self._buf[: len(self._buf) - keep]
            self._buf = self._buf[len(self._buf) - keep :]
            self._check(len(self.outer), "the document outside its record arrays")
            return False
        self.outer += self._buf[: m.end()]
        self._buf = self._buf[m.end() :]
        self._array = m.group(1).decode()
        return True

    def _array_step(self) -> tuple[str, list[Any]] | None:
        """One batch of the current array, ([] at its end), or None for more bytes."""
        assert self._array is not None
        buf = self._buf.lstrip(_WS)
        if buf[:1] == b"]":  # the array ends (or was empty)
            self.outer += b"]"
            self._buf, key, self._array = buf[1:], self._array, None
            return key, []
        ends = [m.start() + 1 for m in itertools.islice(_END.finditer(buf), _TRIES)]
        for end in ends:  # the array's end, if it is in these bytes
            records = self._decode(buf[:end])
            if records is not None:
                self._buf = buf[end:]
                return self._array, records
        # no end among those: every cut before the last of them is inside the array
        stop = ends[-1] if ends else len(buf)
        for cut in _last_cuts(buf, stop):
            records = self._decode(buf[: cut.start() + 1])
            if records is not None:
                self._buf = buf[cut.end() - 1 :]
                return self._array, records
        self._buf = buf
        self._check(len(buf), f"a record of {self._array}")
        return None

    def _decode(self, body: bytes) -> list[Any] | None:
        try:
            out: list[Any] = self._decoders[self._array or ""].decode(b"[" + body + b"]")
        except msgspec.ValidationError as e:  # whole records, of the wrong shape
            raise MalformedInput(f"{self._array}: {e}", path=self._path) from None
        except msgspec.DecodeError:  # not whole records: a cut inside one
            return None
        return out

    def _check(self, n: int, what: str) -> None:
        if n > self._limit:
            lim = current_limits()
            raise too_large_value("JSON value", f"({what})", lim, self._path)


def _last_cuts(buf: bytes, stop: int) -> list[re.Match[bytes]]:
    """The last `_TRIES` candidate cuts before `stop`, last first: looked for in the last 64 KiB
    (records are far smaller), then in the whole buffer (a record larger than that)."""
    near = list(_CUT.finditer(buf, max(0, stop - (1 << 16)), stop))
    if len(near) < _TRIES and stop > 1 << 16:
        near = list(_CUT.finditer(buf, 0, stop))
    return near[::-1][:_TRIES]


def value_after(doc: bytes | bytearray, key: bytes, start: int = 0) -> Any:
    """The JSON value after the first `"key":` from `start` of a (partial) document, or None
    when it is not there whole yet."""
    m = re.compile(rb'"' + re.escape(key) + rb'"\s*:\s*').search(doc, start)
    if m is None:
        return None
    text = bytes(doc[m.end() :]).decode("utf-8", "replace")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    return value
