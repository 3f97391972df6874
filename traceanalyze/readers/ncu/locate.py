"""Nsight Compute CSV: finding the header, a raw page's units row, and the data rows among
envelope lines."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import MalformedInput, MissingColumn
from ..common.core import PathLike, warn
from ..common.limits import read_content

BOM = b"\xef\xbb\xbf"


# The header's start: used by `ncu_csv.sniff` too.
_HEADER_START = re.compile(rb'(?:^|\n)(?:"ID"|ID),"?Process ID"?,')
_HEADER_AT = re.compile(rb'(?:"ID"|ID),"?Process ID"?,')


# --- locating the table -----------------------------------------------------------------------


@dataclass
class _Body:
    header: list[str]
    header_line: int
    units: list[str] | None
    units_line: int | None
    # The data rows only, one per line: a zero-copy view into the file's bytes on the fast path.
    data: bytes | memoryview
    # Original line number of each data row, or None when rows are consecutive from first_line.
    lines: list[int] | None
    first_line: int

    def line_of(self, row: int) -> int:
        return self.lines[row] if self.lines is not None else self.first_line + row


def _read_bytes(path: PathLike) -> tuple[bytes, int]:
    """The file's bytes (gunzipped) and the offset after a UTF-8 BOM (not sliced: no copy)."""
    raw = read_content(path)  # gzip streamed, within InputLimits (bombs, giant fields refused)
    return raw, 3 if raw.startswith(BOM) else 0


def _split_header(line: bytes, path: PathLike, lineno: int) -> list[str]:
    import csv

    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedInput("not UTF-8 text", path=path, line=lineno) from None
    try:
        return next(csv.reader([text.rstrip("\r\n")]), [])
    except csv.Error as e:  # e.g. a lone CR inside an unquoted cell
        raise MalformedInput(f"bad CSV header ({e})", path=path, line=lineno) from None


def _envelope_note(path: PathLike, line: bytes) -> None:
    if line.startswith((b"==WARNING==", b"==ERROR==")):
        warn(f"{path}: ncu: {line.decode('utf-8', 'replace').strip()}")


_NOT_A_ROW = re.compile(rb'\n(?!")')
_WS = frozenset(b"\r\n\t ")


def _data_rows(
    region: bytes, hdr: bytes, quoted: bool, first_line: int, path: PathLike
) -> tuple[bytes, list[int]]:
    """The slow path: the data rows of `region` (from `first_line`) and their line numbers,
    without blank lines, repeated headers and envelope lines (those noted, then counted)."""
    kept: list[bytes] = []
    lines: list[int] = []
    dropped = 0
    for i, ln in enumerate(region.split(b"\n")):
        s = ln.rstrip(b"\r")
        if not s:
            continue
        if s == hdr:
            dropped += 1
            continue
        ok = s.startswith(b'"') if quoted else s[:1].isdigit()
        if ok:
            kept.append(s)
            lines.append(first_line + i)
        else:
            _envelope_note(path, s)
            dropped += 1
    if dropped:
        warn(f"{path}: skipped {dropped} non-data line(s) between ncu CSV rows")
    return (b"\n".join(kept) + b"\n" if kept else b""), lines


def _units_row(
    body: bytes | memoryview, header: list[str], units_line: int, path: PathLike
) -> tuple[list[str], bytes | memoryview]:
    """A raw page's units row (the first row after the header, with empty identity cells) and
    the rows after it."""
    data = bytes(body[:65536])
    nl = data.find(b"\n")
    nl = len(body) if nl < 0 else nl
    units = _split_header(bytes(body[: nl + 1]), path, units_line)
    if units and units[0].strip():
        raise MalformedInput(
            "raw-page ncu CSV without its units row (the first row after the header must "
            "have an empty ID cell)",
            path=path,
            line=units_line,
        )
    if len(units) != len(header):  # found by benchmarks/fuzz_readers.py
        raise MalformedInput(
            f"units row has {len(units)} fields, header has {len(header)}",
            path=path,
            line=units_line,
        )
    return units, body[nl + 1 :]


def _is_long(header: list[str], path: PathLike, header_line: int) -> bool:
    """Whether the header is the long layout (metric name/unit/value columns) rather than a raw
    page; MissingColumn for a header with only some of the long layout's columns."""
    is_long = "Metric Name" in header and "Metric Value" in header
    long_cols = ("Metric Name", "Metric Unit", "Metric Value")
    partial = [c for c in long_cols if c not in header]
    if not is_long and len(partial) < len(long_cols):
        # some of the long layout's columns but not its name/value pair: a damaged long CSV,
        # not a raw page (which has none of them)
        raise MissingColumn(
            f"missing column(s) {', '.join(partial)} in the ncu CSV header",
            path=path,
            line=header_line,
            column=partial[0],
        )
    return is_long


def _locate(raw: bytes, path: PathLike, offset: int = 0) -> _Body:
    """Find the header and the data rows. Big files are never copied on the fast path."""
    # `^` does not match at a search's start position, so the first line is tried on its own.
    m = _HEADER_AT.match(raw, offset) or _HEADER_START.search(raw, offset)
    if m is None:
        raise MalformedInput(
            'no Nsight Compute CSV header found (a row whose first cell is "ID", followed by '
            '"Process ID")',
            path=path,
        )
    start = m.start() + 1 if raw[m.start() : m.start() + 1] == b"\n" else m.start()
    for pre in raw[offset:start].splitlines():
        _envelope_note(path, pre)
    header_line = raw.count(b"\n", offset, start) + 1
    eol = raw.find(b"\n", start)
    eol = len(raw) if eol < 0 else eol + 1
    header_bytes = raw[start:eol]
    hdr = header_bytes.rstrip(b"\r\n")
    header = _split_header(header_bytes, path, header_line)
    quoted = header_bytes.startswith(b'"')
    end = len(raw)
    while end > eol and raw[end - 1] in _WS:
        end -= 1
    first_line = header_line + 1
    # Fast path: every line after the header is a data row (ncu quotes every cell; --log-file
    # output is pure CSV), and the header does not repeat. Regex scans in C over the bytes decide
    # it; unquoted headers take the slow path.
    dirty = not quoted or (
        end > eol
        and (
            raw[eol : eol + 1] != b'"'
            or _NOT_A_ROW.search(raw, eol, end) is not None
            or raw.find(b"\n" + hdr, eol, end) >= 0
        )
    )
    lines: list[int] | None = None
    body: bytes | memoryview = memoryview(raw)[eol:end]
    if dirty:
        body, lines = _data_rows(raw[eol:end], hdr, quoted, first_line, path)
    units: list[str] | None = None
    units_line: int | None = None
    is_long = _is_long(header, path, header_line)
    if not is_long and len(body):
        units_line = lines[0] if lines is not None else first_line
        units, body = _units_row(body, header, units_line, path)
        if lines is not None:
            lines = lines[1:]
        else:
            first_line += 1
    return _Body(header, header_line, units, units_line, body, lines, first_line)
