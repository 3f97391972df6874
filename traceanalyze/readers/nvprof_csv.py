"""nvprof CSV output (`nvprof --csv [--log-file f.csv]`): GPU/API trace, summary, metrics.

Producing commands (formats.md §0–§1). Tested on the real magus captures (nvprof ≈CUDA 8, GTX
1080 Ti: 17-column GPU trace and `--metrics all` aggregate) and, inline, on the SC22 artifact's
layout as formats.md §1.2.1 quotes it (nvprof from CUDA 10.1–11.2, TITAN V, `--print-gpu-trace
--system-profiling on --kernel-latency-timestamps on --csv`, 21 columns); the summary, per-instance
metric and API-trace layouts follow formats.md §0.3/§1.3/§1.4 (no real file of those was found):

* `--print-gpu-trace --csv` (optionally `--system-profiling on`, `--print-api-trace`)
* `--print-gpu-summary --csv` / `--print-api-summary --csv` / default summary, NVTX `Range` sections
* `--metrics … --csv` / `--events … --csv` (aggregate over invocations)
* `--metrics … --print-gpu-trace --csv` (one row per kernel instance, wide)

Envelope (§1.1): every line starting with `==` (`==PID== …`, `======== Warning: …`) is skipped
wherever it appears; `======== Warning` lines become `warnings.warn` notes. The `==PID==` line
before a table gives `process_id` for its rows (with `--profile-child-processes` into one file,
each process has its own table). Lines before the first header (application output when nvprof
wrote to stderr) are skipped with a warning. A UTF-8 BOM, CRLF line ends and gzip are accepted.

Speed (benchmarks/bench_nvprof_csv.py, 1 M rows): rows are parsed by pyarrow's multithreaded CSV
reader straight from the file's bytes (no copy, numbers typed while parsing, low-cardinality
strings dictionary-encoded), then converted with polars expressions; no Python loop visits rows.
A single GPU trace is parsed without first scanning it for `==` lines (see
`_split_trace_fast`); anything else, or a failed parse, goes through the full split.

GPU trace (§1.2): header, then a **units row** applied per column: times s/ms/us/ns → int64 ns
(rounded half-even, not truncated; values are parsed as float64, whose error at nvprof's ≤ 6
decimals stays far below 0.5 ns for sessions of days), sizes B/KB/MB/GB → bytes with nvprof's
*binary* multiples (`_common.NVPROF_SIZE_TO_BYTES`: the magus 320×320 float matrix, 409,600 B,
prints as `400.000000 KB`), throughput checked against the known rate units but not stored (the
schema derives it from size and duration). An unknown unit raises UnknownUnit naming the units
row's line and the column. The columns are matched by name, so the old 17-column layout, the
newer one (`SrcMemType, DstMemType, …, Correlation_ID`), the `System` column and the P2P columns
(`Src Dev, Src Ctx, Dst Dev, Dst Ctx`, read and ignored: `Device` already names the row's
device) all work. Rows go by `Name`:

* `[CUDA memcpy HtoD|DtoH|DtoD|PtoP|HtoH|…]` → `memcpy` with that kind; `[CUDA memset]` →
  `memcpy` kind `memset`; `src_kind`/`dst_kind` from `SrcMemType`/`DstMemType`.
* `--system-profiling on` sample rows → `gpu_samples`, **one row per sample row** (nvprof samples
  clocks, power, temperature and fan at different instants, ~50–100 ms apart, so rows are not
  merged): `[SM/Memory Clock (MHz)]` `"1200/850"` → sm/mem clock; `[Power/Limit (mW)]`
  `"32535/250000"` → power_w/power_limit_w (mW / 1000); `[Temperature (C)]`; `[Fan Speed (%)]`.
* other bracketed names (`[Unified Memory …]`) are skipped with a warning.
* a row with a `Device` is a kernel; without one (the API rows of `--print-api-trace`) an API
  call (`api` = runtime for `cuda*`, driver for `cu*`).

Kernel names are already demangled (`short_name`/`mangled_name` stay null). In the old layout
(no `Correlation_ID` column) names end in ` [NNNN]`: the suffix is stripped and kept as
`correlation_id`. `kernel_id` is the kernel's ordinal in file order (nvprof writes rows roughly,
not strictly, in start order). `Device` is `"<name> (<ordinal>)"`: the ordinal comes from the
regex `\\((\\d+)\\)$` (so `NVIDIA TITAN V (0)` and ordinals ≥ 10 work), and each distinct
device gives a `devices` row. `Start` is relative to the profiling session:
`sources.time_origin_epoch_ns` is null.

Summary mode (§1.4) → `kernel_metrics`, one row per (Name, quantity): `metric_name` is
`<type>_time` with `stat` total/avg/min/max in `unit` ns, and `<type>_time_pct` (stat null,
unit %), where `<type>` is `gpu` for "GPU activities", `api` for "API calls" (other types
snake_cased); `invocations_count` = Calls. NVTX `==PID== Range "<r>"` sections prefix the metric
name with `range[<r>].` (the schema has no range column). `kernel_id` is null (aggregates).

Aggregate metrics/events mode (§1.5) has no units row; units are glued to each value and can
differ between Min, Max and Avg of one row. Each row gives three `kernel_metrics` rows (stat
min/max/avg; events also total) with `invocations_count`. Units: `%` stays `%`; `B/s`…`TB/s` →
`bytes/s` with binary multiples: in the magus file `gst_throughput`/`sysmem_write_throughput`
minima are 7.753450 GB/s and 1.550690 MB/s, a ratio of 5 × 1024 = 5120 in bytes, which is the
ratio of the bytes behind them (C = 640×320 floats = 819,200 B stored, vs 5 sysmem write
transactions × 32 B = 160 B); decimal multiples would give 5000 (163.84 B, not whole
transactions). Levels `Idle (0)`…`Max (10)` → unit `level`, value 0–10. Unitless numbers have
a null unit.

Per-instance metric traces (`Device, Context, Stream, Kernel, [Correlation_ID], <metrics…>` +
units row) → one `kernels` row per instance (no times) and long `kernel_metrics` rows with the
same `kernel_id`; a value's glued unit wins over the units row's.

Bad input raises MalformedInput (no header, truncated row, wrong column count, a value that is
not a number, a column named twice in a header), UnknownUnit or MissingColumn, with the path and
the line. A header is recognized by its column names in any order (`HEADER_NAMES`), quoted or not,
so a table whose columns another tool reordered is read the same. Telemetry outside
`schema.PLAUSIBLE_RANGES` is set to null with a warning (`_common.check_telemetry`).
"""

from __future__ import annotations

import array
import contextlib
import csv
import io
import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from ..errors import MalformedInput, MissingColumn, UnknownUnit
from ..tables import Tables
from ._common import (
    GZIP_MAGIC,
    NVPROF_RATE_TO_BYTES_PER_S,
    NVPROF_SIZE_TO_BYTES,
    TIME_TO_NS,
    PathLike,
    check_line_lengths,
    check_telemetry,
    head_bytes,
    lazy_import,
    read_content,
    reader_entry,
    warn,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
else:  # imported on first use, so format detection stays light
    pa = lazy_import("pyarrow")
    pc = lazy_import("pyarrow.compute")
    pacsv = lazy_import("pyarrow.csv")

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
# One name of each kind's header, searched for as bytes to find a header among other lines.
_KEY_NAMES = ("Duration", "Time(%)", "Invocations", "Kernel")
# A header line longer than this is not looked at (a metric trace of `--metrics all` has a few
# hundred columns, well under it); it bounds the work on a garbage line that starts with '"'.
_MAX_HEADER_BYTES = 1 << 20
_HAS_UNITS_ROW = {"trace": True, "summary": True, "metrics": False, "instance_metrics": True}

_PID = re.compile(rb"^==(\d+)==")
_RANGE = re.compile(rb'^==\d+== Range "(.*)"\s*$')
_NON_SPACE = re.compile(rb"\S")
_DEVICE_ORDINAL = re.compile(r"\((\d+)\)$")

# Trace columns by role. Anything else in a trace header is ignored with a warning.
_TIME_COLS = ("Start", "Duration")
_INT_COLS = (
    "Grid X",
    "Grid Y",
    "Grid Z",
    "Block X",
    "Block Y",
    "Block Z",
    "Registers Per Thread",
    "Context",
    "Stream",
    "Correlation_ID",
)
_SIZE_COLS = ("Static SMem", "Dynamic SMem", "Size")
_RATE_COLS = ("Throughput",)
_STR_COLS = ("SrcMemType", "DstMemType", "Device", "System", "Name")
_IGNORED_COLS = ("Src Dev", "Src Ctx", "Dst Dev", "Dst Ctx")

_SAMPLE_NAMES = {
    "[SM/Memory Clock (MHz)]": "clock",
    "[Power/Limit (mW)]": "power",
    "[Temperature (C)]": "temperature",
    "[Fan Speed (%)]": "fan",
}

# Units glued to metric values (or in a metric trace's units row): unit -> (base unit, factor).
_METRIC_UNITS: dict[str, tuple[str | None, float]] = {
    "": (None, 1.0),
    "%": ("%", 1.0),
    **{u: ("bytes/s", f) for u, f in NVPROF_RATE_TO_BYTES_PER_S.items()},
    **{u: ("bytes", f) for u, f in NVPROF_SIZE_TO_BYTES.items()},
    **{u: ("ns", f) for u, f in TIME_TO_NS.items()},
}
_NUMBER_WITH_UNIT = r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$"
_LEVEL = r"^\s*(?:Idle|Low|Mid|High|Max)\s*\((\d+)\)\s*$"


# --- detection ------------------------------------------------------------------------------------


def _content_lines(text: str) -> Iterator[str]:
    for line in text.lstrip("\ufeff").splitlines():
        if line.startswith("==") or not line.strip():
            continue
        yield line


def header_kind(line: str) -> str | None:
    """The table kind whose header this line is, by its column names in any order; else None.

    nvprof quotes every header cell (§1.1); a table rewritten by another CSV writer may not, so
    unquoted names count too. Only a line holding one of the kinds' key names is parsed.
    """
    if not any(k in line for k in _KEY_NAMES):
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


def sniff(path: PathLike) -> bool:
    """The first line that is not an `==` envelope line is an nvprof CSV header."""
    head = head_bytes(path, 65536)
    if b"\x00" in head:
        return False
    text = head.decode("utf-8", "replace")
    for line in _content_lines(text):
        known_order = any(line.startswith(p) for p in HEADERS.values())
        return known_order or header_kind(line) is not None
    return False


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


class _Retry(Exception):
    """An optimistic trace parse failed: split the file properly and parse again."""


def _line_at(raw: _Raw, off: int) -> int:
    """1-based line number of a byte offset. Only called to report an error (it scans)."""
    return raw[:off].count(b"\n") + 1


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
    for key in _KEY_NAMES:
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
        start = pos
        # Skip blank lines at the region's start (cheap: they are short).
        while start < env:
            after = _eol(raw, start, env)
            if after - start > 2 or raw[start:after].strip():
                break
            start = after
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
                after = _eol(raw, start, env)
                current = _Section(
                    kind=kind,
                    header=_header(raw, start, after, path),
                    header_off=start,
                    process_id=pid,
                    range_name=range_name,
                )
                sections.append(current)
                start = after
                if _HAS_UNITS_ROW[kind]:
                    if start >= env:
                        raise MalformedInput(
                            "header without the units row that follows it in nvprof CSV",
                            path=path,
                            line=_line_at(raw, current.header_off) + 1,
                        )
                    after = _eol(raw, start, env)
                    current.units = _parse_csv_line(raw, start, after, path)
                    current.units_off = start
                    if len(current.units) != len(current.header):
                        raise MalformedInput(
                            f"units row has {len(current.units)} fields, header has "
                            f"{len(current.header)}",
                            path=path,
                            line=_line_at(raw, start),
                        )
                    start = after
            if start < env and current is not None and not _blank(raw, start, env):
                current.pieces.append((start, env))
        if env >= n:
            break
        pos = _eol(raw, env, n)
        envelope = raw[env:pos]
        m = _PID.match(envelope)
        if m:
            pid = int(m.group(1))
        r = _RANGE.match(envelope)
        if r:
            range_name = r.group(1).decode("utf-8", "replace")
        elif b"Profiling result" in envelope or b"Metric result" in envelope:
            range_name = None
        _note_envelope(envelope, path, notes)
    if not sections:
        _raise_if_damaged_header(raw, path)
        raise MalformedInput(
            "no nvprof CSV header found (expected a line starting with "
            + " or ".join(HEADERS.values())
            + ")",
            path=path,
        )
    if skipped_before_header:
        notes.append(
            f"{path}: skipped {skipped_before_header} line(s) before the nvprof CSV header"
        )
    return sections


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


# --- parsing one section's rows -------------------------------------------------------------------


def _locate_bad_row(raw: _Raw, sec: _Section, path: PathLike, why: str) -> MalformedInput:
    """Slow path, only after the fast parser failed: find the first row that is wrong."""
    width = len(sec.header)
    for start, end in sec.pieces:
        first_line = _line_at(raw, start)
        chunk = raw[start:end]
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as e:
            bad_line = first_line + chunk.count(b"\n", 0, e.start)
            return MalformedInput("not UTF-8 text", path=path, line=bad_line)
        reader = csv.reader(io.StringIO(text, newline=""))
        prev = 0
        try:
            for row in reader:
                row_line = first_line + prev
                prev = reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != width:
                    return MalformedInput(
                        f"row has {len(row)} fields, header has {width} (truncated or "
                        "malformed row)",
                        path=path,
                        line=row_line,
                    )
        except csv.Error as e:
            return MalformedInput(f"bad CSV ({e})", path=path, line=first_line + prev)
    return MalformedInput(f"bad CSV ({why})", path=path, line=None)


def _read_rows(
    raw: _Raw,
    sec: _Section,
    path: PathLike,
    types: dict[str, pa.DataType],
    *,
    only_empty_is_null: bool = False,
) -> pa.Table:
    """The section's data rows via pyarrow's multithreaded CSV reader, columns named as the header.

    `types` gives the Arrow type of columns by header name (others are read as strings), so
    numbers are converted while parsing. Empty cells are nulls, and with `only_empty_is_null`
    nothing else is (pyarrow's default null spellings include `nan`, which would hide a broken
    nvprof timestamp as a missing value). The bytes are not copied when the table is one piece
    (the usual case: no '==' line inside it).
    """
    names = [f"c{i}" for i in range(len(sec.header))]
    col_types = {n: types.get(h, pa.string()) for n, h in zip(names, sec.header, strict=True)}
    view = memoryview(raw)
    for _, e in sec.pieces[-1:]:
        # pyarrow takes a quote left open at the end of the input as a complete value: a file
        # cut inside a quoted kernel name would pass. nvprof ends every line with a newline.
        last = raw.rfind(b"\n", 0, e) + 1
        if last < e and raw[last:e].count(b'"') % 2:
            raise MalformedInput(
                "file ends inside a quoted field (truncated)", path=path, line=_line_at(raw, last)
            )
    if not sec.pieces:
        tbl = pa.table({n: pa.nulls(0, type=t) for n, t in col_types.items()})
        return tbl.rename_columns(sec.header)
    if len(sec.pieces) == 1:
        s, e = sec.pieces[0]
        buf = pa.py_buffer(view[s:e])
    else:
        # A piece may end without a newline before a mid-file '==' line.
        parts = []
        for s, e in sec.pieces:
            parts.append(view[s:e])
            if raw[e - 1 : e] != b"\n":
                parts.append(memoryview(b"\n"))
        buf = pa.py_buffer(b"".join(parts))
    try:
        tbl = pacsv.read_csv(
            buf,
            read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 22),
            parse_options=pacsv.ParseOptions(ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                column_types=col_types,
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
                **({"null_values": [""]} if only_empty_is_null else {}),
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        if sec.optimistic:
            raise _Retry from None
        why = str(e).split("\n")[0]
        err = _locate_bad_row(raw, sec, path, why)
        if err.line is None:
            m = re.search(r"column #(\d+): CSV conversion error", why)
            if m:
                err = _locate_bad_value(raw, sec, path, buf, int(m.group(1)), col_types, why)
        raise err from None
    return tbl.rename_columns(sec.header)


def _locate_bad_value(
    raw: _Raw,
    sec: _Section,
    path: PathLike,
    buf: pa.Buffer,
    index: int,
    col_types: dict[str, pa.DataType],
    why: str,
) -> MalformedInput:
    """Slow path for a value pyarrow could not convert: re-read that column as text."""
    name = f"c{index}"
    column = sec.header[index]
    text = pacsv.read_csv(
        buf,
        read_options=pacsv.ReadOptions(column_names=list(col_types)),
        convert_options=pacsv.ConvertOptions(
            include_columns=[name],
            column_types={name: pa.string()},
            strings_can_be_null=True,
        ),
    ).column(0)
    s = pl.Series(name, text.combine_chunks())
    integer = col_types[name] == pa.int64()
    bad = s.is_not_null() & s.cast(pl.Int64 if integer else pl.Float64, strict=False).is_null()
    if not bad.any():
        return MalformedInput(f"bad value ({why})", path=path, column=column)
    i = int(bad.arg_true()[0])
    return MalformedInput(
        f"value {s[i]!r} is not {'an integer' if integer else 'a number'}",
        path=path,
        line=_line_of_row(sec, raw, i),
        column=column,
    )


def _line_of_row(sec: _Section, raw: _Raw, row: int) -> int:
    """Line number of data row `row` (error reporting only).

    Counts newlines, so it assumes no newline inside quoted fields (nvprof writes none).
    """
    before = 0
    for s, e in sec.pieces:
        rows = raw[s:e].count(b"\n") + (0 if raw[e - 1 : e] == b"\n" else 1)
        if row < before + rows:
            return _line_at(raw, s) + row - before
        before += rows
    return _line_at(raw, sec.header_off)


def _first_bad(df: pl.DataFrame, ok: pl.Expr) -> int | None:
    """Index of the first row where `ok` is false (null counts as false)."""
    bad = df.select(ok.fill_null(False).not_().arg_true().first()).item()
    return None if bad is None else int(bad)


# --- units ----------------------------------------------------------------------------------------


def _factor(
    raw: _Raw, sec: _Section, col: str, table: dict[str, float], path: PathLike, has_values: bool
) -> float | None:
    """Factor for a column from the units row; None when the column is empty."""
    assert sec.units is not None and sec.units_off is not None
    unit = sec.units[sec.header.index(col)].strip()
    if not unit and not has_values:
        return None
    try:
        return table[unit]
    except KeyError:
        raise UnknownUnit(
            f"unknown unit {unit!r} in the units row (known: {', '.join(table)})",
            path=path,
            line=_line_at(raw, sec.units_off),
            column=col,
        ) from None


# --- devices --------------------------------------------------------------------------------------


def _device_type() -> pa.DataType:
    return pa.dictionary(pa.int32(), pa.string())


def _device_ids(
    tbl: pa.Table, raw: _Raw, sec: _Section, path: PathLike, devices: set[str]
) -> pa.Table:
    r"""Replace the dictionary-encoded `Device` column by `device_id`.

    `"GeForce GTX 1080 Ti (0)"` → 0 via the regex `\((\d+)\)$`, once per distinct string (the
    dictionary), then gathered by the indices: no per-row Python work.
    """
    col = tbl.column("Device")
    out, offset = [], 0
    for chunk in col.chunks:
        if not isinstance(chunk, pa.DictionaryArray):  # an all-null chunk of an empty table
            chunk = pc.dictionary_encode(chunk.cast(pa.string()))
        names = chunk.dictionary.to_pylist()
        ids = []
        for code, name in enumerate(names):
            m = _DEVICE_ORDINAL.search(name.strip())
            if m is None:
                row = offset + pc.index(chunk.indices, code).as_py()
                raise MalformedInput(
                    f"device {name!r} does not end in '(<ordinal>)'",
                    path=path,
                    line=_line_of_row(sec, raw, row),
                    column="Device",
                )
            ids.append(int(m.group(1)))
        devices.update(names)
        out.append(pc.take(_int64_array(ids), chunk.indices))
        offset += len(chunk)
    device_id = pa.chunked_array(out, pa.int64())
    return tbl.drop_columns(["Device"]).append_column("device_id", device_id)


def _int64_array(values: list[int]) -> pa.Array:
    """`pa.array(list)` imports pandas on first use (~0.5 s cold); a buffer does not."""
    return pa.Array.from_buffers(
        pa.int64(), len(values), [None, pa.py_buffer(array.array("q", values))]
    )


def _devices_frame(devices: set[str]) -> pl.DataFrame:
    rows = []
    for d in sorted(devices):
        m = _DEVICE_ORDINAL.search(d.strip())
        assert m is not None  # checked by _device_ids
        rows.append((int(m.group(1)), d.strip()[: m.start()].strip()))
    return pl.DataFrame(
        sorted(set(rows)), schema={"device_id": pl.Int64, "name": pl.String}, orient="row"
    )


def _to_polars(tbl: pa.Table) -> pl.DataFrame:
    df = pl.from_arrow(tbl)
    assert isinstance(df, pl.DataFrame)
    return df


# --- GPU / API trace ------------------------------------------------------------------------------


@dataclass
class _Out:
    kernels: list[pl.DataFrame] = field(default_factory=list)
    memcpy: list[pl.DataFrame] = field(default_factory=list)
    api_calls: list[pl.DataFrame] = field(default_factory=list)
    gpu_samples: list[pl.DataFrame] = field(default_factory=list)
    kernel_metrics: list[pl.DataFrame] = field(default_factory=list)
    devices: set[str] = field(default_factory=set)
    kernels_seen: int = 0


def _missing(sec: _Section, raw: _Raw, path: PathLike, need: list[str], what: str) -> None:
    missing = [c for c in need if c not in sec.header]
    if missing:
        raise MissingColumn(
            f"{what} without column(s) {', '.join(missing)}",
            path=path,
            line=_line_at(raw, sec.header_off),
            column=missing[0],
        )


def _stem_of(names: pa.ChunkedArray) -> pa.ChunkedArray:
    stem: pa.ChunkedArray = pc.utf8_rtrim(names, characters="0123456789]")
    return stem


def _strip_id_suffix(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Old layout (≈CUDA 8): `void k<int=32>(float*, int) [1073]` → `void k<…>(…)`, id 1073.

    Adds `_name` and `_id`. Without a regex (1 M rows): `_stem`, made by `_stem_of` on the Arrow
    side (several times faster than polars' strip_chars_end), is the name with trailing digits
    and ']' stripped; stripping stops at the suffix's '[', which is neither. The name has the
    suffix when the stem ends in ' [' and the stripped tail is digits + ']'. Names without it
    are kept whole, with a null id.
    """
    name = pl.col("Name")
    return (
        lf.with_columns(
            # The stripped characters are ASCII, so the byte difference is a char count.
            name.str.tail(name.str.len_bytes() - pl.col("_stem").str.len_bytes()).alias("_tail")
        )
        .with_columns(
            pl.col("_tail").str.strip_suffix("]").cast(pl.Int64, strict=False).alias("_tail_num")
        )
        .with_columns(
            (
                pl.col("_tail_num").is_not_null()
                & name.str.ends_with("]")
                & pl.col("_stem").str.ends_with(" [")
            ).alias("_has")
        )
        .with_columns(
            pl.when("_has")
            .then(pl.col("_stem").str.strip_suffix(" ["))
            .otherwise(name)
            .alias("_name"),
            pl.when("_has").then(pl.col("_tail_num")).alias("_id"),
        )
    )


def _trace(raw: _Raw, sec: _Section, path: PathLike, out: _Out) -> None:
    hdr = sec.header
    _missing(sec, raw, path, ["Start", "Name"], "nvprof trace")
    # An API trace (§1.3) has no Device; a GPU trace always has one. Without it, a GPU trace's
    # kernels would silently turn into API calls: its launch-geometry or size columns say which.
    gpu_cols = ("Grid X", "Block X", "Size", "Throughput", "Context", "Stream")
    if any(c in hdr for c in gpu_cols):
        _missing(sec, raw, path, ["Device"], "nvprof GPU trace")
    known = (*_TIME_COLS, *_INT_COLS, *_SIZE_COLS, *_RATE_COLS, *_STR_COLS, *_IGNORED_COLS)
    extra = [c for c in hdr if c not in known]
    types: dict[str, pa.DataType] = {c: pa.float64() for c in (*_TIME_COLS, *_SIZE_COLS)}
    types.update({c: pa.float64() for c in _RATE_COLS})
    types.update({c: pa.int64() for c in _INT_COLS})
    # Low-cardinality strings as dictionaries: cheaper to parse, and Device maps per distinct.
    types.update({c: _device_type() for c in ("Device", "SrcMemType", "DstMemType", "System")})
    types.update({c: _device_type() for c in _IGNORED_COLS})
    tbl = _read_rows(raw, sec, path, types, only_empty_is_null=True)
    n = tbl.num_rows
    if extra:  # after the parse, which may be retried
        warn(f"{path}: nvprof trace columns ignored: {', '.join(extra)}")
    if "Device" in hdr:
        tbl = _device_ids(tbl, raw, sec, path, out.devices)
    tbl = tbl.drop_columns([c for c in (*_RATE_COLS, *_IGNORED_COLS) if c in hdr])

    # Units row, per column (formats.md §1.2: chosen per file and per column).
    conv: list[pl.Expr] = []
    for c in _TIME_COLS + _SIZE_COLS:
        if c not in hdr:
            continue
        table = TIME_TO_NS if c in _TIME_COLS else NVPROF_SIZE_TO_BYTES
        f = _factor(raw, sec, c, table, path, has_values=tbl.column(c).null_count < n)
        # strict=False: NaN, ±inf and values beyond int64 become null here and are reported
        # with their line below (nvprof prints `nan`/`inf` for broken timestamps).
        if f is None:
            conv.append(pl.col(c).cast(pl.Int64, strict=False))
        else:
            conv.append((pl.col(c) * f).round().cast(pl.Int64, strict=False))
    for c in _RATE_COLS:  # checked, not stored: size and duration give it
        if c in hdr:
            # The column was dropped; its nulls don't matter, only a stated unit is checked.
            _factor(raw, sec, c, NVPROF_RATE_TO_BYTES_PER_S, path, has_values=False)
    if "Correlation_ID" not in hdr:  # old layout: names carry the ` [NNNN]` id suffix
        tbl = tbl.append_column("_stem", _stem_of(tbl.column("Name")))
    df = _to_polars(tbl)
    del tbl  # polars holds its own copy of the strings: free Arrow's before building outputs
    converted = [c for c in _TIME_COLS + _SIZE_COLS if c in hdr]
    for c in (*_TIME_COLS, *_INT_COLS, *_SIZE_COLS, "device_id"):
        if c not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=pl.Int64).alias(c))
    for c in ("SrcMemType", "DstMemType", "System", "Name", "Device"):
        if c not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=pl.String).alias(c))
    # One pass converts, and one more finds the first bad row (diagnosed below, errors only):
    # a value that did not survive the conversion, a row without a Name or a Start, or an
    # activity (kernel, copy, API call) without a Duration. Only the `--system-profiling`
    # sample rows (`[SM/Memory Clock (MHz)]`, …) leave Duration empty.
    df = df.with_columns(
        *conv,
        pl.any_horizontal(
            [pl.col(c).is_not_null() & e.is_null() for c, e in zip(converted, conv, strict=True)]
        ).alias("_lost")
        if conv
        else pl.lit(False).alias("_lost"),
        pl.col("Name").str.starts_with("[").alias("_bracketed"),
    )
    sample_row = pl.col("_bracketed") & ~pl.col("Name").str.starts_with("[CUDA ")
    bad = _first_bad(
        df,
        ~pl.col("_lost")
        & pl.col("Name").is_not_null()
        & pl.col("Start").is_not_null()
        & (pl.col("Duration").is_not_null() | sample_row),
    )
    if bad is not None:
        row = df.row(bad, named=True)
        line = _line_of_row(sec, raw, bad)
        if row["_lost"]:
            raw_row = _to_polars(_read_rows(raw, sec, path, {}, only_empty_is_null=True)).row(
                bad, named=True
            )
            col = next(c for c in converted if raw_row[c] is not None and row[c] is None)
            raise MalformedInput(
                f"value {raw_row[col]!r} is not a finite {col.lower()} that fits int64 "
                + ("ns" if col in _TIME_COLS else "bytes"),
                path=path,
                line=line,
                column=col,
            )
        if row["Name"] is None:
            raise MalformedInput("row without a Name", path=path, line=line, column="Name")
        col = "Start" if row["Start"] is None else "Duration"
        raise MalformedInput(
            f"{row['Name']!r} row without a {col}", path=path, line=line, column=col
        )
    df = df.drop("_lost")
    pid = pl.lit(sec.process_id, dtype=pl.Int64).alias("process_id")
    times = [
        pl.col("Start").alias("start_ns"),
        (pl.col("Start") + pl.col("Duration")).alias("end_ns"),
        pl.col("Duration").alias("duration_ns"),
    ]
    common = [
        pid,
        pl.col("device_id"),
        pl.col("Context").alias("context_id"),
        pl.col("Stream").alias("stream_id"),
    ]

    # Kernels: not bracketed, with a device.
    k = df.lazy().filter(~pl.col("_bracketed") & pl.col("device_id").is_not_null())
    if "Correlation_ID" in hdr:
        k = k.with_columns(pl.col("Name").alias("_name"), pl.col("Correlation_ID").alias("_id"))
    else:
        k = _strip_id_suffix(k)
    kernels = k.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("kernel_id") + out.kernels_seen,
        *common,
        pl.col("_id").alias("correlation_id"),
        pl.col("_name").alias("name"),
        *times,
        pl.col("Grid X").alias("grid_x"),
        pl.col("Grid Y").alias("grid_y"),
        pl.col("Grid Z").alias("grid_z"),
        pl.col("Block X").alias("block_x"),
        pl.col("Block Y").alias("block_y"),
        pl.col("Block Z").alias("block_z"),
        pl.col("Registers Per Thread").alias("registers_per_thread"),
        pl.col("Static SMem").alias("static_smem_bytes"),
        pl.col("Dynamic SMem").alias("dynamic_smem_bytes"),
    ).collect()
    out.kernels.append(kernels)
    out.kernels_seen += kernels.height

    # API calls (--print-api-trace): a Name that is not bracketed and no device.
    api = df.filter(~pl.col("_bracketed") & pl.col("device_id").is_null())
    if api.height:
        out.api_calls.append(
            api.select(
                pid,
                pl.col("Correlation_ID").alias("correlation_id"),
                pl.when(pl.col("Name").str.starts_with("cuda"))
                .then(pl.lit("runtime"))
                .when(pl.col("Name").str.contains(r"^cu[A-Z]"))
                .then(pl.lit("driver"))
                .alias("api"),
                pl.col("Name").alias("name"),
                *times,
            )
        )

    # `_row` (the row's index in the table) is kept for error messages on sample values.
    b = df.lazy().with_row_index("_row").filter(pl.col("_bracketed")).collect()
    if not b.height:
        return
    b = b.with_columns(
        pl.when(pl.col("Name") == "[CUDA memset]")
        .then(pl.lit("memset"))
        .otherwise(pl.col("Name").str.extract(r"^\[CUDA memcpy (\w+)\]$", 1))
        .alias("_kind"),
        pl.col("Name")
        .replace_strict(_SAMPLE_NAMES, default=None, return_dtype=pl.String)
        .alias("_sample"),
    )
    m = b.filter(pl.col("_kind").is_not_null())
    out.memcpy.append(
        m.select(
            *common,
            pl.col("Correlation_ID").alias("correlation_id"),
            pl.col("_kind").alias("kind"),
            pl.col("SrcMemType").cast(pl.String).alias("src_kind"),
            pl.col("DstMemType").cast(pl.String).alias("dst_kind"),
            pl.col("Size").alias("size_bytes"),
            *times,
        )
    )
    s = b.filter(pl.col("_sample").is_not_null())
    if s.height:
        out.gpu_samples.append(_samples(s, raw, sec, path))
    other = b.filter(pl.col("_kind").is_null() & pl.col("_sample").is_null())
    if other.height:
        counts = other["Name"].value_counts(sort=True).rows()
        listed = ", ".join(f"{nm} ×{c}" for nm, c in counts[:5])
        warn(f"{path}: skipped {other.height} nvprof row(s) of unsupported kinds: {listed}")


def _samples(s: pl.DataFrame, raw: _Raw, sec: _Section, path: PathLike) -> pl.DataFrame:
    """`--system-profiling on` rows: one gpu_samples row per sample row (not merged).

    Pairs: `[SM/Memory Clock (MHz)]` "1200/850", `[Power/Limit (mW)]` "32535/250000" (mW → W);
    singles: `[Temperature (C)]` "58", `[Fan Speed (%)]` "43" (formats.md §1.2).
    """
    system = pl.col("System").cast(pl.String)
    parts = system.str.split_exact("/", 1)
    first = parts.struct.field("field_0").str.strip_chars().cast(pl.Float64, strict=False)
    second = parts.struct.field("field_1").str.strip_chars().cast(pl.Float64, strict=False)
    kind = pl.col("_sample")
    pair = kind.is_in(["clock", "power"])
    ok = (
        pl.when(pair)
        .then(first.is_not_null() & second.is_not_null())
        .otherwise(first.is_not_null() & ~system.str.contains("/", literal=True))
    )
    bad = _first_bad(s, ok)
    if bad is not None:
        row = s.row(bad, named=True)
        raise MalformedInput(
            f"system-profiling value {row['System']!r} for {row['Name']} is not "
            + ("two numbers 'a/b'" if row["_sample"] in ("clock", "power") else "a number"),
            path=path,
            line=_line_of_row(sec, raw, row["_row"]),
            column="System",
        )
    return s.select(
        pl.col("device_id"),
        pl.col("Start").alias("timestamp_ns"),
        pl.when(kind == "clock").then(first).alias("sm_clock_mhz"),
        pl.when(kind == "clock").then(second).alias("mem_clock_mhz"),
        pl.when(kind == "power").then(first / 1000.0).alias("power_w"),
        pl.when(kind == "power").then(second / 1000.0).alias("power_limit_w"),
        pl.when(kind == "temperature").then(first).alias("temperature_c"),
        pl.when(kind == "fan").then(first).alias("fan_pct"),
    )


# --- summary --------------------------------------------------------------------------------------


def _type_prefix(t: str) -> str:
    fixed = {"GPU activities": "gpu", "API calls": "api"}
    return fixed.get(t) or re.sub(r"[^0-9a-z]+", "_", t.lower()).strip("_") or "unknown"


def _summary(raw: _Raw, sec: _Section, path: PathLike, out: _Out) -> None:
    need = ["Type", "Time(%)", "Time", "Calls", "Avg", "Min", "Max", "Name"]
    _missing(sec, raw, path, need, "nvprof summary")
    types: dict[str, pa.DataType] = {c: pa.float64() for c in need[1:7]}
    types["Calls"] = pa.int64()
    df = _to_polars(_read_rows(raw, sec, path, types))
    assert sec.units is not None and sec.units_off is not None
    pct_unit = sec.units[sec.header.index("Time(%)")].strip()
    if pct_unit != "%":
        raise UnknownUnit(
            f"unknown unit {pct_unit!r} for Time(%) (expected '%')",
            path=path,
            line=_line_at(raw, sec.units_off),
            column="Time(%)",
        )
    prefixes = {t: _type_prefix(t) for t in df["Type"].drop_nulls().unique().to_list()}
    prefix = pl.col("Type").replace_strict(prefixes, default="unknown", return_dtype=pl.String)
    if sec.range_name is not None:
        prefix = pl.lit(f"range[{sec.range_name}].") + prefix
    frames = []
    for col, stat in {"Time": "total", "Avg": "avg", "Min": "min", "Max": "max"}.items():
        has = df[col].null_count() < df.height
        f = _factor(raw, sec, col, TIME_TO_NS, path, has_values=has) or 1.0
        frames.append(
            df.select(
                pl.col("Name").alias("name"),
                (prefix + "_time").alias("metric_name"),
                pl.lit(stat).alias("stat"),
                pl.lit("ns").alias("unit"),
                (pl.col(col) * f).alias("value"),
                pl.col("Calls").alias("invocations_count"),
            )
        )
    frames.append(
        df.select(
            pl.col("Name").alias("name"),
            (prefix + "_time_pct").alias("metric_name"),
            pl.lit(None, dtype=pl.String).alias("stat"),
            pl.lit("%").alias("unit"),
            pl.col("Time(%)").alias("value"),
            pl.col("Calls").alias("invocations_count"),
        )
    )
    pid = pl.lit(sec.process_id, dtype=pl.Int64).alias("process_id")
    out.kernel_metrics.append(pl.concat(frames).with_columns(pid))


# --- metrics --------------------------------------------------------------------------------------


def _parse_values(
    values: pl.Series, default_unit: str, sec: _Section, raw: _Raw, path: PathLike
) -> tuple[pl.Series, pl.Series]:
    """Values with glued units (`155.068995GB/s`, `100.000000%`, `Low (1)`) → (value, unit).

    `default_unit` is the units row's unit for the column ('' when there is none).
    """
    col = values.name
    parsed = pl.DataFrame({"v": values.cast(pl.String)}).select(
        pl.col("v"),
        pl.col("v").str.extract(_LEVEL, 1).cast(pl.Float64).alias("level"),
        pl.col("v").str.extract_groups(_NUMBER_WITH_UNIT).alias("g"),
    )
    parsed = parsed.select(
        pl.col("v"),
        pl.col("level"),
        pl.col("g").struct.field("1").cast(pl.Float64, strict=False).alias("num"),
        pl.col("g").struct.field("2").alias("glued"),
    )
    ok = pl.col("v").is_null() | pl.col("num").is_not_null() | pl.col("level").is_not_null()
    bad = _first_bad(parsed, ok)
    if bad is not None:
        raise MalformedInput(
            f"metric value {values[bad]!r} is neither a number nor a level",
            path=path,
            line=_line_of_row(sec, raw, bad),
            column=col,
        )
    glued = pl.col("glued").fill_null("")
    units = parsed.select(
        pl.when(pl.col("level").is_not_null())
        .then(pl.lit(None, dtype=pl.String))
        .when(glued != "")
        .then(glued)
        .when(pl.col("num").is_not_null())
        .then(pl.lit(default_unit))
        .alias("u")
    )["u"]
    distinct = [u for u in units.unique().to_list() if u is not None]
    for u in distinct:
        if u not in _METRIC_UNITS:
            i = int((units == u).arg_true()[0])
            raise UnknownUnit(
                f"unknown unit {u!r} in metric value {values[i]!r} "
                f"(known: {', '.join(k for k in _METRIC_UNITS if k)})",
                path=path,
                line=_line_of_row(sec, raw, i),
                column=col,
            )
    base = units.replace_strict(
        {u: _METRIC_UNITS[u][0] for u in distinct}, default=None, return_dtype=pl.String
    )
    factor = units.replace_strict(
        {u: _METRIC_UNITS[u][1] for u in distinct}, default=None, return_dtype=pl.Float64
    )
    is_level = parsed["level"].is_not_null()
    frame = pl.DataFrame({"lv": is_level, "level": parsed["level"], "num": parsed["num"]})
    res = frame.select(
        pl.when(pl.col("lv")).then(pl.col("level")).otherwise(pl.col("num") * factor).alias("v"),
        pl.when(pl.col("lv")).then(pl.lit("level")).otherwise(base).alias("u"),
    )
    return res["v"], res["u"]


def _metrics(raw: _Raw, sec: _Section, path: PathLike, out: _Out) -> None:
    """Aggregate `--metrics`/`--events` tables: Min/Max/Avg (and events' Total) → stats."""
    name_col = "Metric Name" if "Metric Name" in sec.header else "Event Name"
    stats = [c for c in ("Min", "Max", "Avg", "Total") if c in sec.header]
    _missing(sec, raw, path, ["Device", "Kernel", "Invocations", name_col], "nvprof metrics")
    if not stats:
        _missing(sec, raw, path, ["Min", "Max", "Avg"], "nvprof metrics")
    tbl = _read_rows(raw, sec, path, {"Invocations": pa.int64(), "Device": _device_type()})
    df = _to_polars(_device_ids(tbl, raw, sec, path, out.devices))
    for c in stats:
        value, unit = _parse_values(df[c], "", sec, raw, path)
        out.kernel_metrics.append(
            df.select(
                pl.lit(sec.process_id, dtype=pl.Int64).alias("process_id"),
                pl.col("device_id"),
                pl.col("Kernel").alias("name"),
                pl.col(name_col).alias("metric_name"),
                pl.lit(c.lower()).alias("stat"),
                unit.alias("unit"),
                value.alias("value"),
                pl.col("Invocations").alias("invocations_count"),
            )
        )


def _instance_metrics(raw: _Raw, sec: _Section, path: PathLike, out: _Out) -> None:
    """`--metrics … --print-gpu-trace`: one row per kernel instance, one column per metric."""
    id_cols = ("Device", "Context", "Stream", "Kernel", "Correlation_ID")
    metric_cols = [c for c in sec.header if c not in id_cols]
    if any(not c.strip() for c in metric_cols):  # found by benchmarks/fuzz_readers.py
        raise MalformedInput(
            "a metric column without a name in the header",
            path=path,
            line=_line_at(raw, sec.header_off),
        )
    types: dict[str, pa.DataType] = {c: pa.int64() for c in ("Context", "Stream", "Correlation_ID")}
    types["Device"] = _device_type()
    df = _to_polars(_device_ids(_read_rows(raw, sec, path, types), raw, sec, path, out.devices))
    if "Correlation_ID" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.Int64).alias("Correlation_ID"))
    assert sec.units is not None
    df = df.with_columns(
        pl.int_range(out.kernels_seen, out.kernels_seen + df.height, dtype=pl.Int64).alias(
            "kernel_id"
        ),
        pl.lit(sec.process_id, dtype=pl.Int64).alias("process_id"),
    )
    out.kernels_seen += df.height
    out.kernels.append(
        df.select(
            "kernel_id",
            "process_id",
            "device_id",
            pl.col("Context").alias("context_id"),
            pl.col("Stream").alias("stream_id"),
            pl.col("Correlation_ID").alias("correlation_id"),
            pl.col("Kernel").alias("name"),
        )
    )
    for c in metric_cols:
        unit_row = sec.units[sec.header.index(c)].strip()
        value, unit = _parse_values(df[c], unit_row, sec, raw, path)
        out.kernel_metrics.append(
            df.select(
                "kernel_id",
                "process_id",
                "device_id",
                pl.col("Kernel").alias("name"),
                pl.lit(c).alias("metric_name"),
                unit.alias("unit"),
                value.alias("value"),
            )
        )


# --- entry point ----------------------------------------------------------------------------------


def _open(path: PathLike) -> _Raw:
    if os.path.getsize(path) == 0:
        raise MalformedInput("empty file", path=path)
    with open(path, "rb") as f:
        first = f.read(3)
        if not first.startswith(GZIP_MAGIC) and first != b"\xef\xbb\xbf":
            # Not mappable (a pipe, /proc): read it instead.
            with contextlib.suppress(OSError, ValueError):
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                check_line_lengths(mm, path)  # a field past the bound: refused (InputLimits)
                return mm
    # sniff (head_bytes) looks inside gzip, so read it too: streamed, within InputLimits
    raw = read_content(path)
    return raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw


@reader_entry("nvprof_csv")
def read_nvprof_csv(path: PathLike) -> Tables:
    """Read an nvprof `--csv` file (any of the modes in the module docstring) into Tables."""
    raw = _open(path)
    if _NON_SPACE.search(raw) is None:
        raise MalformedInput("empty file", path=path)
    if b"\x00" in raw[:65536]:
        raise MalformedInput("binary data, not nvprof CSV text", path=path)
    handlers = {
        "trace": _trace,
        "summary": _summary,
        "metrics": _metrics,
        "instance_metrics": _instance_metrics,
    }
    notes: list[str] = []
    out = _Out()
    try:
        sections = _split_trace_fast(raw, path, notes)
        if sections is None:
            raise _Retry
        for sec in sections:
            handlers[sec.kind](raw, sec, path, out)
    except _Retry:
        notes, out = [], _Out()
        for sec in _split(raw, path, notes):
            handlers[sec.kind](raw, sec, path, out)
    for note in notes:
        warn(note)

    frames: dict[str, pl.DataFrame] = {
        "sources": pl.DataFrame(
            {"tool": ["nvprof"], "tool_version": [None], "time_origin_epoch_ns": [None]},
            schema={"tool": pl.String, "tool_version": pl.String, "time_origin_epoch_ns": pl.Int64},
        )
    }
    if out.devices:
        frames["devices"] = _devices_frame(out.devices)
    for name in ("kernels", "memcpy", "api_calls", "gpu_samples", "kernel_metrics"):
        parts = [f for f in getattr(out, name) if f.height]
        if parts:
            # Sections differ in columns (a metric trace's kernels have no times): diagonal.
            frames[name] = pl.concat(parts, how="diagonal_relaxed")
    if "gpu_samples" in frames:
        frames["gpu_samples"] = check_telemetry(
            frames["gpu_samples"], path=path, reader="nvprof_csv"
        )
    return Tables.build(**frames)
