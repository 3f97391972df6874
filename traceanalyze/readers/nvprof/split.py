"""nvprof CSV: cutting a file into its tables (sections), by header and `==` envelope lines."""

from __future__ import annotations

import csv
import mmap
import re
from dataclasses import dataclass, field

from ...errors import MalformedInput, MissingColumn
from ..common.core import PathLike
from . import KEY_NAMES

# The file's bytes: a read-only memory map (pyarrow's threads fault pages in while parsing, no
# serial copy first) or, for gzip and BOM files, bytes. Both slice to bytes and have find/rfind.
_Raw = bytes | mmap.mmap

# Header prefixes (quotes included) that identify each table kind, in the order they are tried.
HEADERS: dict[str, str] = {
    "trace": '"Start","Duration"',
    "summary": '"Type","Time(%)"',
    "metrics": '"Device","Kernel","Invocations"',
    "instance_metrics": '"Device","Context","Stream","Kernel"',
}
_HEADER_BYTES = {k: v.encode() for k, v in HEADERS.items()}
# The column names that make a line a header of each kind, whatever their order: columns are
# matched by name (formats.md §1.2: column sets and positions vary by version and options), so
# a table whose columns were reordered (by a script, a spreadsheet) is still found. Tried in
# this order: a metric trace has Device/Context/Stream/Kernel but no Invocations.
HEADER_NAMES: dict[str, frozenset[str]] = {
    "trace": frozenset({"Start", "Duration", "Name"}),
    "summary": frozenset({"Type", "Time(%)", "Name"}),
    "metrics": frozenset({"Device", "Kernel", "Invocations"}),
    "instance_metrics": frozenset({"Device", "Context", "Stream", "Kernel"}),
}
# `KEY_NAMES` (from the package, whose screen relies on it): one name of each kind's header,
# searched for to find a header among other lines.
# A header line longer than this is not looked at (a metric trace of `--metrics all` has a few
# hundred columns, well under it); it bounds the work on a garbage line that starts with '"'.
_MAX_HEADER_BYTES = 1 << 20
_HAS_UNITS_ROW = {"trace": True, "summary": True, "metrics": False, "instance_metrics": True}

_PID = re.compile(rb"^==(\d+)==")
_RANGE = re.compile(rb'^==\d+== Range "(.*)"\s*$')
_NON_SPACE = re.compile(rb"\S")
_DEVICE_ORDINAL = re.compile(r"\((\d+)\)$")


# --- detection ------------------------------------------------------------------------------------


def header_kind(line: str) -> str | None:
    """The table kind whose header this line is, by its column names in any order; else None.

    nvprof quotes every header cell (§1.1); a table rewritten by another CSV writer may not, so
    unquoted names count too. Only a line holding one of the kinds' key names is parsed.
    """
    if not any(k in line for k in KEY_NAMES):
        return None
    try:
        fields = next(csv.reader([line.rstrip("\r\n")]), [])
    except csv.Error:
        return None
    names = {f.strip() for f in fields}
    for kind, need in HEADER_NAMES.items():
        if need <= names:
            return kind
    return None


# --- splitting the file into tables ---------------------------------------------------------------


@dataclass
class _Section:
    kind: str
    header: list[str]
    header_off: int
    units: list[str] | None = None
    units_off: int | None = None
    # Body pieces: (start offset, end offset) into the raw bytes, split by '==' lines.
    pieces: list[tuple[int, int]] = field(default_factory=list)
    process_id: int | None = None
    range_name: str | None = None
    # Body taken as "everything after the units row" without looking for '==' lines in it.
    optimistic: bool = False
    # Line numbers, when the header, units row and pieces are not all in `raw` (the streaming
    # reader parses a section block by block): then they are not counted from `raw`'s start.
    header_line: int | None = None
    units_line: int | None = None
    piece_lines: list[int] | None = None
    # The "columns ignored" note is given once per section, not once per block.
    warned: bool = False


class _Retry(Exception):
    """An optimistic trace parse failed: split the file properly and parse again."""


def _line_at(raw: _Raw, off: int) -> int:
    """1-based line number of a byte offset. Only called to report an error (it scans)."""
    return raw[:off].count(b"\n") + 1


def _header_line(raw: _Raw, sec: _Section) -> int:
    return sec.header_line if sec.header_line is not None else _line_at(raw, sec.header_off)


def _units_line(raw: _Raw, sec: _Section) -> int:
    if sec.units_line is not None:
        return sec.units_line
    assert sec.units_off is not None
    return _line_at(raw, sec.units_off)


def _piece_line(raw: _Raw, sec: _Section, k: int) -> int:
    """The line number of the first line of piece `k` of the section."""
    if sec.piece_lines is not None:
        return sec.piece_lines[k]
    return _line_at(raw, sec.pieces[k][0])


def _starts(raw: _Raw, prefix: bytes, pos: int) -> bool:
    return raw[pos : pos + len(prefix)] == prefix


def _parse_csv_line(raw: _Raw, start: int, end: int, path: PathLike) -> list[str]:
    try:
        text = raw[start:end].decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedInput("not UTF-8 text", path=path, line=_line_at(raw, start)) from None
    try:
        rows = list(csv.reader([text.rstrip("\r\n")]))
    except csv.Error as e:  # a lone CR inside an unquoted cell
        raise MalformedInput(f"bad CSV ({e})", path=path, line=_line_at(raw, start)) from None
    return rows[0] if rows else []


def _kind_at(raw: _Raw, pos: int) -> str | None:
    for kind, prefix in _HEADER_BYTES.items():
        if _starts(raw, prefix, pos):
            return kind
    end = raw.find(b"\n", pos, pos + _MAX_HEADER_BYTES)
    line = raw[pos : pos + _MAX_HEADER_BYTES if end < 0 else end]
    return header_kind(line.decode("utf-8", "replace"))


def _find_header(raw: _Raw, start: int, end: int) -> tuple[int, str | None]:
    """The first header line in raw[start:end] (application output before the table), as
    (offset, kind); (-1, None) when there is none."""
    found_at, found_kind = -1, None
    for k, prefix in _HEADER_BYTES.items():
        i = raw.find(b"\n" + prefix, start, end)
        if i >= 0 and (found_at < 0 or i < found_at):
            found_at, found_kind = i + 1, k
    # Reordered columns: the lines holding a key name, up to the first fast hit.
    limit = end if found_at < 0 else found_at
    for key in KEY_NAMES:
        i = raw.find(key.encode(), start, limit)
        while i >= 0:
            line = raw.rfind(b"\n", start, i) + 1 or start
            kind = _kind_at(raw, line)
            if kind is not None:
                found_at, found_kind, limit = line, kind, line
                break
            i = raw.find(key.encode(), _eol(raw, i, limit), limit)
    return found_at, found_kind


def _raise_if_damaged_header(raw: _Raw, path: PathLike) -> None:
    """MissingColumn when a line of the head lacks one of a header kind's key names but has the
    others (a renamed `Start` or `Duration`): say which column, not just "no header"."""
    head = bytes(raw[:65536]).decode("utf-8", "replace")
    for i, line in enumerate(head.splitlines(), start=1):
        if line.startswith("==") or not any(k in line for k in ("Duration", "Name", "Kernel")):
            continue
        try:
            names = {f.strip() for f in next(csv.reader([line]), [])}
        except csv.Error:
            continue
        for kind, need in HEADER_NAMES.items():
            missing = sorted(need - names)
            if len(missing) == 1 and len(need & names) >= 2:
                raise MissingColumn(
                    f"nvprof {kind} header without column {missing[0]}",
                    path=path,
                    line=i,
                    column=missing[0],
                )


def _header(raw: _Raw, start: int, end: int, path: PathLike) -> list[str]:
    """The header line's column names; MalformedInput when one is there twice (which would
    make a match by name ambiguous)."""
    names = _parse_csv_line(raw, start, end, path)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise MalformedInput(
                f"column {name!r} appears twice in the header",
                path=path,
                line=_line_at(raw, start),
                column=name,
            )
        seen.add(name)
    return names


def _eol(raw: _Raw, pos: int, end: int) -> int:
    """Offset just past the line starting at `pos` (or `end`)."""
    i = raw.find(b"\n", pos, end)
    return end if i < 0 else i + 1


def _blank(raw: _Raw, start: int, end: int) -> bool:
    return _NON_SPACE.search(raw, start, end) is None  # no copy of a large region


def _skip_blank_lines(raw: _Raw, start: int, end: int) -> int:
    """The offset of the first non-blank line at or after `start` (cheap: blank lines are short)."""
    while start < end:
        after = _eol(raw, start, end)
        if after - start > 2 or raw[start:after].strip():
            break
        start = after
    return start


def _open_section(raw: _Raw, sec: _Section, start: int, env: int, path: PathLike) -> int:
    """Fill `sec`'s header (at `start`) and units row, where its kind has one; the offset after."""
    after = _eol(raw, start, env)
    sec.header = _header(raw, start, after, path)
    sec.header_off = start
    start = after
    if not _HAS_UNITS_ROW[sec.kind]:
        return start
    if start >= env:
        raise MalformedInput(
            "header without the units row that follows it in nvprof CSV",
            path=path,
            line=_line_at(raw, sec.header_off) + 1,
        )
    after = _eol(raw, start, env)
    sec.units = _parse_csv_line(raw, start, after, path)
    sec.units_off = start
    if len(sec.units) != len(sec.header):
        raise MalformedInput(
            f"units row has {len(sec.units)} fields, header has {len(sec.header)}",
            path=path,
            line=_line_at(raw, start),
        )
    return after


def _no_header(path: PathLike) -> MalformedInput:
    return MalformedInput(
        "no nvprof CSV header found (expected a line starting with "
        + " or ".join(HEADERS.values())
        + ")",
        path=path,
    )


def _split(raw: _Raw, path: PathLike, notes: list[str]) -> list[_Section]:
    """Sections (one per header) with their body pieces; envelope lines handled on the way.

    Only the `==` lines, headers and units rows are visited in Python; data rows are located
    by offset (bytes.find), never split into lines.
    """
    n = len(raw)
    sections: list[_Section] = []
    current: _Section | None = None
    pid: int | None = None
    range_name: str | None = None
    skipped_before_header = 0
    pos = 0
    while pos < n:
        # The region up to the next envelope line (a line starting with '==').
        if _starts(raw, b"==", pos):
            env = pos
        else:
            found = raw.find(b"\n==", pos)
            env = n if found < 0 else found + 1
        start = _skip_blank_lines(raw, pos, env)
        if start < env:
            kind = _kind_at(raw, start)
            if kind is None and current is None:
                # Application output before the first header: look for a header in the region.
                found_at, found_kind = _find_header(raw, start, env)
                if found_kind is not None:
                    skipped_before_header += raw[start:found_at].count(b"\n")
                    start, kind = found_at, found_kind
                else:
                    skipped_before_header += raw[start:env].count(b"\n") or 1
                    start = env
            if kind is not None:
                current = _Section(
                    kind=kind, header=[], header_off=start, process_id=pid, range_name=range_name
                )
                start = _open_section(raw, current, start, env, path)
                sections.append(current)
            if start < env and current is not None and not _blank(raw, start, env):
                current.pieces.append((start, env))
        if env >= n:
            break
        pos = _eol(raw, env, n)
        pid, range_name = _envelope_line(raw[env:pos], pid, range_name, path, notes)
    if not sections:
        _raise_if_damaged_header(raw, path)
        raise _no_header(path)
    if skipped_before_header:
        notes.append(
            f"{path}: skipped {skipped_before_header} line(s) before the nvprof CSV header"
        )
    return sections


def _envelope_line(
    envelope: bytes, pid: int | None, range_name: str | None, path: PathLike, notes: list[str]
) -> tuple[int | None, str | None]:
    """Note an '==' line; returns the process id and range name in force after it."""
    m = _PID.match(envelope)
    if m:
        pid = int(m.group(1))
    r = _RANGE.match(envelope)
    if r:
        range_name = r.group(1).decode("utf-8", "replace")
    elif b"Profiling result" in envelope or b"Metric result" in envelope:
        range_name = None
    _note_envelope(envelope, path, notes)
    return pid, range_name


def _note_envelope(envelope: bytes, path: PathLike, notes: list[str]) -> None:
    if envelope.startswith(b"======== Warning"):
        notes.append(f"{path}: nvprof: {envelope.decode('utf-8', 'replace').strip()}")


def _split_trace_fast(raw: _Raw, path: PathLike, notes: list[str]) -> list[_Section] | None:
    """The common case, a single GPU trace: preamble, header, units row, rows, maybe an epilogue.

    Finding '==' lines means scanning every byte, slowly, since '=' is frequent in template
    names (`<int=32>`). Here the rows are taken as everything between the units row and the
    trailing '==' lines without that scan; it is safe because a '==' line (or a second table)
    inside them cannot parse: `Start`, the first column, is read as a number. When the parse
    fails, `_Retry` sends the file through `_split`. None when the file is not of this shape.
    """
    n, pos, pid = len(raw), 0, None
    while pos < n and (_starts(raw, b"==", pos) or raw[pos : pos + 1] in (b"\n", b"\r")):
        eol = _eol(raw, pos, n)
        m = _PID.match(raw, pos, eol)
        pid = int(m.group(1)) if m else pid
        _note_envelope(raw[pos:eol], path, notes)
        pos = eol
    if pos >= n or _kind_at(raw, pos) != "trace":
        return None
    after = _eol(raw, pos, n)
    sec = _Section(
        kind="trace",
        header=_header(raw, pos, after, path),
        header_off=pos,
        process_id=pid,
        optimistic=True,
    )
    if after >= n:
        return None  # let _split report the missing units row
    sec.units_off, start = after, _eol(raw, after, n)
    sec.units = _parse_csv_line(raw, after, start, path)
    if len(sec.units) != len(sec.header):
        return None  # _split reports it
    # Trailing '==' lines and blank lines, from the end.
    end, tail = n, []
    while end > start:
        stripped, e = start, end
        while e > start:  # skip trailing whitespace, 4 KiB at a time
            w0 = max(start, e - 4096)
            kept = raw[w0:e].rstrip()
            if kept:
                stripped = w0 + len(kept)
                break
            e = w0
        line_start = raw.rfind(b"\n", start, stripped) + 1 or start
        if stripped <= start or not _starts(raw, b"==", line_start):
            end = stripped
            break
        tail.append(raw[line_start:stripped])
        end = line_start
    for envelope in reversed(tail):
        _note_envelope(envelope, path, notes)
    if end > start:
        sec.pieces.append((start, end))
    return [sec]
