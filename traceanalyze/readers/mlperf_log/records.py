"""One MLPerf log line -> its records, for every logging variant.

* `:::MLLOG {json}` (v0.7 onward): `time_ms` (epoch ms), `key`, `value`, `metadata`; the other
  fields (`namespace`, `event_type`) and unknown ones are ignored, never an error.
* `:::MLL <epoch s> <key>: {"value": …, "metadata": {…}}` (v0.6).
* `:::MLPv0.5.0 <benchmark> <epoch s> (<file>:<line>) <key>[: <value>]` (v0.5); the value is
  JSON when it parses, else its text.
* `:::SYSJSON {json}`: a system description written into the log (newer NVIDIA logs).

Several records may share a line (ranks' output interleaved): each marker is parsed from where it
stands, and the JSON object after it ends where its braces close (`raw_decode`), so text after it
does not matter. A record whose JSON does not parse is returned as a `Bad` for the caller to warn.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()
_MARKERS = re.compile(rb":::(MLLOG|MLL|MLPv0\.5\.0|SYSJSON)(?=[ \t{])")
_MLL = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s+([A-Za-z_][\w.]*)\s*:\s*")
_MLP05 = re.compile(
    r"\s*(\S+)\s+([0-9]+(?:\.[0-9]*)?)\s+\(([^)]*)\)\s+([A-Za-z_]\w*)\s*(?::\s*(.*))?$"
)


@dataclass(frozen=True)
class Record:
    key: str
    time_ns: int | None
    value: Any
    metadata: dict[str, Any]
    line: int
    variant: str = "MLLOG"  # MLLOG (v0.7+), MLL (v0.6), MLPv0.5.0


@dataclass(frozen=True)
class SysJson:
    data: dict[str, Any]
    line: int


@dataclass(frozen=True)
class Bad:
    line: int
    why: str


Item = Record | SysJson | Bad


def _ns(seconds: float) -> int | None:
    return round(seconds * 1e9) if math.isfinite(seconds) and abs(seconds) < 9.2e9 else None


def _ms_to_ns(t: Any) -> int | None:
    """Epoch ms (an integer in every known log; a float read too) as ns, exactly for integers."""
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return None
    if isinstance(t, int):
        return t * 1_000_000 if abs(t) < 9_000_000_000_000 else None
    return _ns(t / 1e3)


def _object(text: str, at: int) -> tuple[dict[str, Any] | None, int]:
    """The JSON object starting at `text[at:]` (after blanks) and where it ends; None if bad."""
    i = at
    while i < len(text) and text[i] in " \t":
        i += 1
    try:
        obj, end = _DECODER.raw_decode(text, i)
    except (ValueError, RecursionError):
        return None, at
    return (obj, end) if isinstance(obj, dict) else (None, at)


def parse_line(line_no: int, raw: bytes) -> list[Item]:
    """Every record on one line (possibly none: a `:::` that starts no known marker)."""
    text = raw.decode("utf-8", "replace")
    out: list[Item] = []
    for m in _MARKERS.finditer(raw):
        # Marker offsets are byte offsets; the text before them is ASCII in practice, but map
        # through the decoded prefix to stay right when it is not.
        at = len(raw[: m.end()].decode("utf-8", "replace"))
        kind = m.group(1)
        if kind == b"MLLOG":
            out.append(_mllog(text, at, line_no))
        elif kind == b"SYSJSON":
            obj, _ = _object(text, at)
            out.append(SysJson(obj, line_no) if obj is not None else Bad(line_no, "SYSJSON"))
        elif kind == b"MLL":
            out.append(_mll(text, at, line_no))
        else:
            out.append(_mlp05(text, at, line_no))
    return out


def _mllog(text: str, at: int, line_no: int) -> Item:
    obj, _ = _object(text, at)
    if obj is None or not isinstance(obj.get("key"), str):
        return Bad(line_no, "MLLOG record does not parse" if obj is None else "MLLOG without key")
    time_ns = _ms_to_ns(obj.get("time_ms"))
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return Record(obj["key"], time_ns, obj.get("value"), meta, line_no)


def _mll(text: str, at: int, line_no: int) -> Item:
    m = _MLL.match(text, at)
    if m is None:
        return Bad(line_no, "MLL record does not parse")
    obj, _ = _object(text, m.end())
    if obj is None:
        return Bad(line_no, "MLL record does not parse")
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return Record(m.group(2), _ns(float(m.group(1))), obj.get("value"), meta, line_no, "MLL")


def _mlp05(text: str, at: int, line_no: int) -> Item:
    # The value runs to the end of the line; a later marker on the same line is not split off
    # (v0.5 logs are written by one process).
    m = _MLP05.match(text, at)
    if m is None:
        return Bad(line_no, "MLPv0.5.0 record does not parse")
    value: Any = None
    if m.group(5) is not None:
        rest = m.group(5).strip()
        try:
            value = json.loads(rest)
        except ValueError:
            value = rest
    meta = {"benchmark": m.group(1), "where": m.group(3)}
    return Record(m.group(4), _ns(float(m.group(2))), value, meta, line_no, "MLPv0.5.0")
