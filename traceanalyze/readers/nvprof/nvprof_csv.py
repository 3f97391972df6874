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
each process has its own table); the `--local_rank` of the profiled commands in its first 64 KiB
gives `sources.rank` (`nvprof.ranks`; only the number is kept). Lines before the first header
(application output when nvprof wrote to stderr) are skipped with a warning. A UTF-8 BOM, CRLF
line ends and gzip are accepted.

Speed (benchmarks/bench_nvprof_csv.py, 1 M rows): rows are parsed by pyarrow's multithreaded CSV
reader straight from the file's bytes (no copy, numbers typed while parsing, low-cardinality
strings dictionary-encoded), then converted with polars expressions; no Python loop visits rows.
A single GPU trace is parsed without first scanning it for `==` lines (see
`_split_trace_fast`); anything else, or a failed parse, goes through the full split.

GPU trace (§1.2): header, then a **units row** applied per column: times s/ms/us/ns → int64 ns
(rounded half-even, not truncated; values are parsed as float64, whose error at nvprof's ≤ 6
decimals stays far below 0.5 ns for sessions of days), sizes B/KB/MB/GB → bytes with nvprof's
*binary* multiples (`common.core.NVPROF_SIZE_TO_BYTES`: the magus 320×320 float matrix, 409,600 B,
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
`schema.PLAUSIBLE_RANGES` is set to null with a warning (`common.core.check_telemetry`).

Ingest streams (`stream_nvprof_csv`, `nvprof.csv_stream`): the file is read 2 MiB of text at a
time (gzip decompressed as it streams), cut into sections as above, and every block's rows go
through the same handlers, so memory stays flat however big the file; the chunks equal
`read_nvprof_csv`'s tables row for row (tests/test_csv_stream.py). `read_nvprof_csv` stays the
faster whole-file read for notebooks.

This module is the entry point; the work is in `nvprof.split` (sections), `nvprof.rows`
(typed rows, units, devices), `nvprof.trace` (trace tables), `nvprof.metrics` and
`nvprof.csv_stream` (the streaming read).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from ...errors import MalformedInput
from ...rank_names import rank_columns
from ...tables import Tables
from ..common.core import GZIP_MAGIC, PathLike, check_telemetry, head_bytes, reader_entry, warn
from ..common.limits import check_line_lengths, read_content
from ..common.stream import stream_entry
from . import content_lines
from .csv_stream import stream_nvprof
from .metrics import _instance_metrics, _metrics, _summary
from .ranks import csv_rank_hints
from .rows import _devices_frame, _Out
from .split import (
    _NON_SPACE,
    HEADERS,
    _Raw,
    _Retry,
    _split,
    _split_trace_fast,
    header_kind,
)
from .trace import _trace, warn_skipped


def sniff(path: PathLike) -> bool:
    """The first line that is not an `==` envelope line is an nvprof CSV header."""
    head = head_bytes(path, 65536)
    if b"\x00" in head:
        return False
    text = head.decode("utf-8", "replace")
    for line in content_lines(text):
        known_order = any(line.startswith(p) for p in HEADERS.values())
        return known_order or header_kind(line) is not None
    return False


# --- entry points ---------------------------------------------------------------------------------


def _sources(path: PathLike) -> pl.DataFrame:
    return pl.DataFrame(
        {"tool": ["nvprof"], "tool_version": [None], "time_origin_epoch_ns": [None]},
        schema={"tool": pl.String, "tool_version": pl.String, "time_origin_epoch_ns": pl.Int64},
    ).with_columns(**rank_columns(csv_rank_hints(path)))


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
            warn_skipped(out, path)
    except _Retry:
        notes, out = [], _Out()
        for sec in _split(raw, path, notes):
            handlers[sec.kind](raw, sec, path, out)
            warn_skipped(out, path)
    for note in notes:
        warn(note)

    frames: dict[str, pl.DataFrame] = {"sources": _sources(path)}
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


@stream_entry("nvprof_csv")
def stream_nvprof_csv(path: PathLike, *, workdir: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    """`read_nvprof_csv` as `(table, chunk)` pairs, holding a block of the file at a time
    (`common.stream.BLOCK_BYTES` of decompressed text, gzip streamed): concatenated per table,
    the chunks equal its tables, ids and row order included. Trace tables are emitted block by
    block (nvprof's row order is kept, `kernel_id` counts in file order); the `kernel_metrics`
    of summary and metrics tables are spilled to `workdir` per quantity and emitted when their
    section ends (the whole-file read has one quantity's rows after another).
    """
    if os.path.getsize(path) == 0:
        raise MalformedInput("empty file", path=path)
    head = head_bytes(path, 65536 + 3)
    head = head[3:] if head.startswith(b"\xef\xbb\xbf") else head[:65536]
    if b"\x00" in head[:65536]:
        raise MalformedInput("binary data, not nvprof CSV text", path=path)
    yield from stream_nvprof(path, head, workdir)
    yield "sources", _sources(path)
