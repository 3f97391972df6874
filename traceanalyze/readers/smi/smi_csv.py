"""GPU telemetry logs: `nvidia-smi --query-gpu … --format=csv`, NVML sampler CSVs, `dcgmi dmon`.

Variants (formats.md §6, §0.3), told apart by their first line:

1. **nvidia-smi** `--query-gpu=<fields> --format=csv[,nounits][,noheader] [-l s|-lms ms]`
   (driver 450–580 field names; formats.md §6.1). Header `timestamp, index, power.draw [W], …`,
   separator ", " (never quoted: the parser splits on "," and strips the space), values with
   units (`77.08 W`, `1755 MHz`, `0 %`, `81559 MiB`) unless `nounits`; `[N/A]`,
   `[Not Supported]`, `N/A` are null, and so is any other bracketed `[…]` state in a numeric
   field (with a warning).
   Any subset and order of fields. With `noheader` the field list must be given as the option
   `fields=` ("timestamp,index,power.draw" or a list); without it reading fails and says so.
   Fields mapped to `gpu_samples`:
   `clocks.current.sm`/`clocks.sm` → sm_clock_mhz, `clocks.current.memory`/`clocks.mem` →
   mem_clock_mhz, `power.draw.instant` / `power.draw` / `power.draw.average` → power_w (the first
   present, in that order; `power_kind` instant / null (the field does not say) / average; the
   others go to gpu_metrics), `enforced.power.limit` / `power.limit` → power_limit_w,
   `temperature.gpu` → temperature_c, `fan.speed` → fan_pct, `utilization.gpu` → gpu_util_pct,
   `utilization.memory` → mem_util_pct, `clocks_event_reasons.active` /
   `clocks_throttle_reasons.active` (the pre-535 name; hex `0x…`) → clock_event_reasons.
   `index` → device_id, `uuid` → device_uuid; `name`, `uuid`, `index`, `memory.total` →
   `devices`. Every other field whose values are numbers goes to `gpu_metrics` (metric_name = the
   nvidia-smi field, sizes MiB/KiB/GiB → `bytes`, times → `ns`); fields with text values
   (`pstate`, the per-reason `Active`/`Not Active` flags, `driver_version`, …) are ignored.
   Units come from the `[W]` header brackets and the values; an unknown one raises UnknownUnit.
   `timestamp` (`YYYY/MM/DD HH:MM:SS.mmm`) is LOCAL time without a zone: it is converted with the
   option `tz` (an IANA name such as "Europe/Berlin", "UTC", or an offset "+01:00"); by default
   the machine's zone (from /etc/localtime, else its current UTC offset). The zone used is
   recorded in `sources.timezone`; `timestamp_ns` is Unix epoch ns and
   `sources.time_origin_epoch_ns` is 0. Wall-clock times repeated by a DST fall-back are taken
   at the earlier offset (with a warning); times that do not exist in the zone are an error.
2. **The project's NVML sampler log** (`traceanalyze.collect.sampler`), defined here::

       # traceanalyze-nvml-sampler v1 interval_ms=50
       timestamp_ns,device_id,device_uuid,sm_clock_mhz,mem_clock_mhz,power_w,power_kind,…

   i.e. the magic comment line (`NVML_SAMPLER_MAGIC` + ` interval_ms=<n>`), then a CSV header
   equal to `NVML_SAMPLER_HEADER` (the `gpu_samples` columns, in that order), then one row per
   device per sample: `timestamp_ns` Unix epoch ns (integer), units as the column suffixes,
   `power_kind` `instant`/`average`, `clock_event_reasons` the NVML bitmask as a decimal
   integer, an empty cell = null. `time_origin_epoch_ns` is 0.
3. **Other NVML sampler CSVs** (`smi.variants`), e.g. GPU-Roofline-Profiler's
   `timestamp,power_w,temperature_c,sm_clock_mhz,memory_clock_mhz,gpu_util_pct` with ISO-8601
   `…Z` stamps (tested on `../shared/traces/smi_logs/roofline_custom_nvml_sampler_rtx5070.csv`).
4. **SC22 `dumpGpuPower`** stdout (`[n] Power: <W>, Util: <%>, CoreClockMhz: …, MemClockMHz: …,
   Timestamp_ns: <epoch ns>, Temp: <C>`), see `smi.variants`.
5. **`dcgmi dmon`** text (whitespace aligned, `#Entity` header, units line, `GPU 0` rows, no
   timestamps): needs the option `interval_ms` (the `-d` used at capture), see `smi.variants`.

Every variant is read columnar (pyarrow CSV / polars string expressions), no per-row loops.
An nvidia-smi log is first read by one streaming polars scan that parses every column as it goes
(`smi.fast`); a file it is not sure about (ragged rows, blank lines, a `[…]` state, a value with
another unit, stamps without exactly 3 decimals, …) goes to the careful pyarrow path
(`smi.careful`), which gives the same tables, errors and warnings, at ~2x the time and
memory. Both paths end in `smi.assemble`, which also holds the fields and units known.

Ingest streams (`stream_smi_csv`, `smi.stream`): the log is read 2 MiB of text at a time
(gzip decompressed as it streams) and each block goes through the functions above, so memory
stays flat; the chunks equal `read_smi_csv`'s tables row for row (tests/test_csv_stream.py).
dumpGpuPower text streams too, read twice (`smi.dump_stream`: the device line, energy rows and
sample order first; then a merge, or sorted runs spilled to the workdir).

Whatever the variant, a value outside `schema.PLAUSIBLE_RANGES` (1e308 °C, -64 W, a 20 GHz clock,
150 % utilization, NaN) is set to null with one warning per column giving the count
(`common.core.check_telemetry`, the rule every reader of telemetry applies).
"""

from __future__ import annotations

import dataclasses
import functools
import mmap
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from ...errors import MalformedInput, MissingColumn
from ...tables import Tables
from ..common.core import (
    GZIP_MAGIC,
    PathLike,
    check_telemetry,
    head_text,
    lazy_import,
    reader_entry,
)
from ..common.limits import check_line_lengths, read_content
from .assemble import _REASONS, SMI_FIELDS, _assemble, _numbers
from .careful import _read_smi_careful
from .clock import check_timezone, local_timezone, local_to_epoch_ns
from .fast import _smi_fast
from .state import SmiLog
from .stream import stream_smi

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.csv as pacsv
else:  # imported on first use, so format detection stays light
    pa = lazy_import("pyarrow")
    pacsv = lazy_import("pyarrow.csv")
from ..common.stream import stream_entry
from .variants import build_tables

# --- the project's own sampler format (variant 2) ---------------------------------------------

NVML_SAMPLER_MAGIC = "# traceanalyze-nvml-sampler v1"
NVML_SAMPLER_HEADER: tuple[str, ...] = (
    "timestamp_ns",
    "device_id",
    "device_uuid",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "power_kind",
    "power_limit_w",
    "temperature_c",
    "fan_pct",
    "gpu_util_pct",
    "mem_util_pct",
    "energy_j",
    "clock_event_reasons",
)
# Arrow types of the sampler columns that are not float64 (pyarrow is imported on first use)
_SAMPLER_TYPES: dict[str, str] = {
    "timestamp_ns": "int64",
    "device_id": "int64",
    "device_uuid": "string",
    "power_kind": "string",
    "clock_event_reasons": "int64",
}


def nvml_sampler_magic_line(interval_ms: float) -> str:
    """The first line of a sampler log (`interval_ms` written as an integer when whole)."""
    iv = int(interval_ms) if float(interval_ms).is_integer() else interval_ms
    return f"{NVML_SAMPLER_MAGIC} interval_ms={iv}"


_SMI_STAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?$")
_SMI_FIELD = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*(?: \[[^\]]*\])?$")
_KNOWN_SMI = frozenset(
    {
        "timestamp",
        "index",
        "uuid",
        "name",
        "pci.bus_id",
        "driver_version",
        "pstate",
        "memory.total",
        "memory.used",
        "memory.free",
        *_REASONS,
    }
    | {f for names in SMI_FIELDS.values() for f in names}
)


def _split_smi_header(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


def _is_smi_header(line: str) -> bool:
    cells = _split_smi_header(line)
    if not all(_SMI_FIELD.match(c) for c in cells):
        return False
    base = [c.split(" [", 1)[0] for c in cells]
    # nvidia-smi separates with ", "; other CSVs with our column names use plain ",".
    return any(b in _KNOWN_SMI for b in base) and (len(cells) == 1 or ", " in line)


def _variant(head: str) -> str | None:
    """Which variant the first lines belong to; None when none."""
    lines = [ln.strip("\r") for ln in head.split("\n")]
    first = next((ln for ln in lines if ln.strip()), "")
    if first.startswith(NVML_SAMPLER_MAGIC):
        return "sampler"
    from . import variants as v

    if _is_smi_header(first):
        return "smi"
    if _SMI_STAMP.match(first.split(",", 1)[0].strip()) and ", " in first:
        return "smi_noheader"
    return v.variant_of(first, head)


def sniff(path: PathLike) -> bool:
    head = head_text(path, 16384)
    if "\x00" in head:
        return False
    try:
        return _variant(head) is not None
    except (ValueError, IndexError):
        return False


# --- reading ----------------------------------------------------------------------------------


def read_bytes(path: PathLike) -> bytes:
    raw = read_content(path)  # gzip streamed, within InputLimits (bombs, giant fields refused)
    return raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw


_HEAD = 65536


def _read_head(path: PathLike) -> tuple[bytes, bytes | None]:
    """(the first 64 KiB of the content, the whole content or None).

    The whole content (gzip-decompressed, BOM stripped, as `read_bytes`) is read only when the
    file is gzip or small: a big plain nvidia-smi log is handed to the CSV scanner by path, so
    it is never held in memory twice."""
    with open(path, "rb") as f:
        start = f.read(_HEAD + 3)
        if start.startswith(GZIP_MAGIC):
            raw = read_bytes(path)
            return raw[:_HEAD], raw
        small = len(start) < _HEAD + 3
        if not small:  # scanned by path below: refuse a giant field first (InputLimits)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                check_line_lengths(mm, path)
    if start.startswith(b"\xef\xbb\xbf"):
        start = start[3:]
    return start[:_HEAD], (start if small else None)


@reader_entry("smi_csv")
def read_smi_csv(
    path: PathLike,
    *,
    tz: str | None = None,
    fields: str | Sequence[str] | None = None,
    interval_ms: float | None = None,
) -> Tables:
    """Read a GPU telemetry log (see the module docstring for the variants and options)."""
    tables = _read_variant(path, tz=tz, fields=fields, interval_ms=interval_ms)
    if not tables.gpu_samples.height:
        return tables
    samples = check_telemetry(tables.gpu_samples, path=path, reader="smi_csv")
    return dataclasses.replace(tables, gpu_samples=samples)


@stream_entry("smi_csv")
def stream_smi_csv(
    path: PathLike,
    *,
    workdir: Path,
    tz: str | None = None,
    fields: str | Sequence[str] | None = None,
    interval_ms: float | None = None,
) -> Iterator[tuple[str, pl.DataFrame]]:
    """`read_smi_csv` as `(table, chunk)` pairs, holding a block of the log at a time
    (`common.stream.BLOCK_BYTES` of decompressed text, gzip streamed); concatenated per table,
    the chunks equal its tables, row order included. `workdir` is not needed: rows keep the
    log's order. `gpu_metrics` (one field's rows after another in the whole-file read) are
    spilled to `workdir` by field and written at the end."""
    log = SmiLog(
        variant=_variant,
        header=smi_header,
        rows=smi_rows,
        check_sampler_header=check_sampler_header,
        sampler_rows=sampler_rows,
        sampler_devices=sampler_devices,
        sampler_sources=sampler_sources,
        whole=functools.partial(read_smi_csv, path, tz=tz, fields=fields, interval_ms=interval_ms),
    )
    yield from stream_smi(path, log, workdir=workdir, tz=tz, fields=fields, interval_ms=interval_ms)


def _read_variant(
    path: PathLike,
    *,
    tz: str | None,
    fields: str | Sequence[str] | None,
    interval_ms: float | None,
) -> Tables:
    first, raw = _read_head(path)
    if not first.strip():
        raise MalformedInput("empty file", path=path)
    if b"\x00" in first:
        raise MalformedInput("binary data, not a GPU telemetry log", path=path)
    head = first[:16384].decode("utf-8", "replace")
    kind = _variant(head)
    from . import variants as v

    if kind == "smi":
        return _read_smi(first, raw, path, tz=tz, fields=None)
    if kind == "smi_noheader" or (kind is None and fields is not None):
        if fields is None:
            raise MissingColumn(
                "nvidia-smi log without a header (--format=csv,noheader): pass the query's "
                "field list as the option fields='timestamp,index,power.draw,…'",
                path=path,
                line=1,
            )
        return _read_smi(first, raw, path, tz=tz, fields=fields)
    if raw is None:
        raw = read_bytes(path)
    if kind == "sampler":
        return _read_sampler(raw, path)
    if kind == "generic":
        return v.read_generic(raw, path, tz=tz)
    if kind == "dump":
        return v.read_dump(raw, path)
    if kind == "dcgmi":
        return v.read_dcgmi(raw, path, interval_ms=interval_ms)
    raise MalformedInput(
        "not a recognized GPU telemetry log (nvidia-smi --query-gpu CSV, traceanalyze NVML "
        "sampler CSV, timestamped NVML sampler CSV, dumpGpuPower text, dcgmi dmon text)",
        path=path,
    )


def _read_sampler(raw: bytes, path: PathLike) -> Tables:
    nl = raw.find(b"\n")
    body = raw[nl + 1 :] if nl >= 0 else b""
    check_sampler_header(body, path)
    df = sampler_rows(body, path, 0)
    return build_tables(
        sources=sampler_sources(raw[: nl if nl >= 0 else len(raw)]),
        gpu_samples=df,
        devices=sampler_devices(df),
    )


def check_sampler_header(body: bytes, path: PathLike) -> None:
    """MalformedInput unless `body` (the log after its magic line) starts with the header."""
    hdr_end = body.find(b"\n")
    header = (body if hdr_end < 0 else body[:hdr_end]).decode("utf-8", "replace").strip()
    if tuple(header.split(",")) != NVML_SAMPLER_HEADER:
        raise MalformedInput(
            f"traceanalyze NVML sampler log: header must be {','.join(NVML_SAMPLER_HEADER)}",
            path=path,
            line=2,
        )


def sampler_rows(body: bytes, path: PathLike, rows_before: int) -> pl.DataFrame:
    """The samples of `body`: the header line, then rows (the first `rows_before` rows of the
    log were in earlier blocks: error line numbers count them)."""
    types = {c: getattr(pa, _SAMPLER_TYPES.get(c, "float64"))() for c in NVML_SAMPLER_HEADER}
    try:
        tbl = pacsv.read_csv(
            pa.py_buffer(body),
            read_options=pacsv.ReadOptions(block_size=1 << 24),
            parse_options=pacsv.ParseOptions(ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=True
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        m = re.search(r"[Rr]ow #(\d+)", str(e))
        raise MalformedInput(
            f"bad sampler row ({str(e).splitlines()[0]})",
            path=path,
            line=int(m.group(1)) + 2 + rows_before if m else None,
        ) from None
    df = pl.from_arrow(tbl)
    assert isinstance(df, pl.DataFrame)
    if df["timestamp_ns"].null_count():
        raise MalformedInput("sampler row without timestamp_ns", path=path)
    return df


def sampler_devices(df: pl.DataFrame) -> pl.DataFrame:
    return (
        df.select("device_id", pl.col("device_uuid").alias("uuid"))
        .unique(maintain_order=True)
        .with_columns(pl.lit("NVIDIA").alias("vendor"))
    )


def sampler_sources(magic: bytes) -> pl.DataFrame:
    """The `sources` row, with the interval the magic line (the log's first) states."""
    iv = re.search(rb"interval_ms=([0-9.]+)", magic)
    interval_ns = round(float(iv.group(1)) * 1e6) if iv else None
    return pl.DataFrame(
        {
            "tool": ["traceanalyze-nvml-sampler"],
            "time_origin_epoch_ns": [0],
            "requested_interval_ns": [interval_ns],
        },
        schema_overrides={"requested_interval_ns": pl.Int64},
    )


def _read_smi(
    first: bytes,
    raw: bytes | None,
    path: PathLike,
    *,
    tz: str | None,
    fields: str | Sequence[str] | None,
) -> Tables:
    """`first`: the first 64 KiB; `raw`: the whole content, or None for a big plain file (the
    fast path scans it by path; the careful path reads it when needed)."""
    base, header_units, first_line = smi_header(first, raw, path, fields)
    source: PathLike | bytes = raw if raw is not None else path
    return smi_rows(source, path, tz, base, header_units, first_line, has_header=first_line == 2)


def smi_header(
    first: bytes, raw: bytes | None, path: PathLike, fields: str | Sequence[str] | None
) -> tuple[list[str], dict[str, str | None], int]:
    """(the fields, the unit each names in `[…]`, the line number of the first row)."""
    if fields is not None:
        names = _split_smi_header(fields) if isinstance(fields, str) else [*fields]
        first_line = 1
    else:
        nl = first.find(b"\n")
        if nl < 0 and raw is None:  # a header line over 64 KiB
            raw = read_bytes(path)
            first, nl = raw, raw.find(b"\n")
        header = first[: nl if nl >= 0 else len(first)].decode("utf-8", "replace").strip()
        names = _split_smi_header(header)
        first_line = 2
    base: list[str] = []
    header_units: dict[str, str | None] = {}
    for n in names:
        m = re.fullmatch(r"(.+?)(?: \[([^\]]*)\])?", n.strip())
        assert m is not None
        base.append(m.group(1))
        header_units[m.group(1)] = m.group(2)
    if len(set(base)) != len(base):
        raise MalformedInput(f"repeated nvidia-smi field in {names}", path=path, line=1)
    if "timestamp" not in base:
        raise MissingColumn(
            "nvidia-smi log without a timestamp field (add timestamp to --query-gpu)",
            path=path,
            column="timestamp",
        )
    return base, header_units, first_line


def smi_rows(
    source: PathLike | bytes,
    path: PathLike,
    tz: str | None,
    base: list[str],
    header_units: dict[str, str | None],
    first_line: int,
    *,
    has_header: bool,
) -> Tables:
    """The tables of nvidia-smi rows: the whole log (`source` its content or path, its first
    line the header when `has_header`) or a block of rows whose first is line `first_line`."""

    def line_of(i: int) -> int:
        # Rows are one per line; blank lines are rare in nvidia-smi output (and send a file to
        # the careful path, where this numbering is kept as it always was).
        return first_line + i

    parsed = _smi_fast(source, int(has_header), base, header_units)
    if parsed is not None:
        fast, distinct_devices = parsed
        zone = check_timezone(tz, path) if tz is not None else local_timezone()
        ts = local_to_epoch_ns(fast["ts"], zone, path, line_of)

        def fast_numbers(f: str, optional: bool) -> tuple[str | None, pl.Series | None]:
            cells = fast.get_column(f"s:{f}") if f"s:{f}" in fast.columns else None
            num = fast.get_column(f"n:{f}")
            return _numbers(f, num, cells, header_units.get(f), path, line_of, optional=optional)

        return _assemble(
            path,
            base,
            fast.height,
            ts,
            zone,
            fast.get_column("device_id") if "index" in base else None,
            {b: fast.get_column(b) for b in ("uuid", "name") if b in base},
            fast_numbers,
            lambda col: fast.get_column("reasons").alias("clock_event_reasons"),
            distinct_devices,
        )
    raw = source if isinstance(source, bytes) else read_bytes(path)
    return _read_smi_careful(
        raw, path, tz, first_line, base, header_units, line_of, skip_header=has_header
    )
