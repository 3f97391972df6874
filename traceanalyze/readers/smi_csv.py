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
3. **Other NVML sampler CSVs** (`_smi_variants`), e.g. GPU-Roofline-Profiler's
   `timestamp,power_w,temperature_c,sm_clock_mhz,memory_clock_mhz,gpu_util_pct` with ISO-8601
   `…Z` stamps (tested on `../shared/traces/smi_logs/roofline_custom_nvml_sampler_rtx5070.csv`).
4. **SC22 `dumpGpuPower`** stdout (`[n] Power: <W>, Util: <%>, CoreClockMhz: …, MemClockMHz: …,
   Timestamp_ns: <epoch ns>, Temp: <C>`), see `_smi_variants`.
5. **`dcgmi dmon`** text (whitespace aligned, `#Entity` header, units line, `GPU 0` rows, no
   timestamps): needs the option `interval_ms` (the `-d` used at capture), see `_smi_variants`.

Every variant is read columnar (pyarrow CSV / polars string expressions), no per-row loops.
An nvidia-smi log is first read by one streaming polars scan that parses every column as it goes
(`_smi_fast`); a file it is not sure about (ragged rows, blank lines, a `[…]` state, a value with
another unit, stamps without exactly 3 decimals, …) goes to the careful pyarrow path
(`_read_smi_careful`), which gives the same tables, errors and warnings, at ~2x the time and
memory.

Whatever the variant, a value outside `schema.PLAUSIBLE_RANGES` (1e308 °C, -64 W, a 20 GHz clock,
150 % utilization, NaN) is set to null with one warning per column giving the count
(`_common.check_telemetry`, the rule every reader of telemetry applies).
"""

from __future__ import annotations

import dataclasses
import mmap
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv

from ..errors import MalformedInput, MissingColumn, UnknownUnit
from ..tables import Tables
from ._common import (
    GZIP_MAGIC,
    TIME_TO_NS,
    PathLike,
    check_line_lengths,
    check_telemetry,
    head_text,
    read_content,
    reader_entry,
    warn,
)
from ._smi_time import check_timezone, local_timezone, local_to_epoch_ns
from ._smi_variants import build_tables

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
_SAMPLER_TYPES: dict[str, pa.DataType] = {
    "timestamp_ns": pa.int64(),
    "device_id": pa.int64(),
    "device_uuid": pa.string(),
    "power_kind": pa.string(),
    "clock_event_reasons": pa.int64(),
}


def nvml_sampler_magic_line(interval_ms: float) -> str:
    """The first line of a sampler log (`interval_ms` written as an integer when whole)."""
    iv = int(interval_ms) if float(interval_ms).is_integer() else interval_ms
    return f"{NVML_SAMPLER_MAGIC} interval_ms={iv}"


# --- nvidia-smi field names (variant 1) -------------------------------------------------------

# nvidia-smi field → gpu_samples column. Several names per column: the first present wins.
SMI_FIELDS: dict[str, tuple[str, ...]] = {
    "sm_clock_mhz": ("clocks.current.sm", "clocks.sm"),
    "mem_clock_mhz": ("clocks.current.memory", "clocks.mem"),
    "power_w": ("power.draw.instant", "power.draw", "power.draw.average"),
    "power_limit_w": ("enforced.power.limit", "power.limit"),
    "temperature_c": ("temperature.gpu",),
    "fan_pct": ("fan.speed",),
    "gpu_util_pct": ("utilization.gpu",),
    "mem_util_pct": ("utilization.memory",),
}
_POWER_KIND = {"power.draw.instant": "instant", "power.draw": None, "power.draw.average": "average"}
_REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
# The unit each mapped column is in (nvidia-smi documents these; `nounits` drops them).
_COLUMN_UNIT = {
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "power_w": "W",
    "power_limit_w": "W",
    "temperature_c": "C",
    "fan_pct": "%",
    "gpu_util_pct": "%",
    "mem_util_pct": "%",
}
# The unit nvidia-smi reports a field in (`nvidia-smi --help-query-gpu`), for `nounits` logs,
# whose header and values carry none: by field-name prefix, longest first. Fields not listed
# (counts such as `pcie.link.gen.current`, `encoder.stats.sessionCount`) keep a null unit.
_NOUNITS_UNIT: tuple[tuple[str, str], ...] = (
    ("memory.total", "MiB"),
    ("memory.used", "MiB"),
    ("memory.free", "MiB"),
    ("memory.reserved", "MiB"),
    ("clocks.", "MHz"),
    ("power.", "W"),
    ("enforced.power.", "W"),
    ("temperature.", "C"),
    ("utilization.", "%"),
    ("fan.speed", "%"),
)


def _nounits_unit(field: str) -> str | None:
    return next((u for prefix, u in _NOUNITS_UNIT if field.startswith(prefix)), None)


# Value/header unit → (base unit, factor). Sizes are binary: nvidia-smi prints MiB.
SMI_UNITS: dict[str, tuple[str, float]] = {
    "W": ("W", 1.0),
    "MHz": ("MHz", 1.0),
    "%": ("%", 1.0),
    "C": ("C", 1.0),
    "B": ("bytes", 1.0),
    "KiB": ("bytes", 1024.0),
    "MiB": ("bytes", 1024.0**2),
    "GiB": ("bytes", 1024.0**3),
    "RPM": ("RPM", 1.0),
    **{u: ("ns", f) for u, f in TIME_TO_NS.items()},
}
_NULL_TOKENS = (
    "",
    "N/A",
    "[N/A]",
    "[Not Supported]",
    "[Unknown Error]",
    "[Insufficient Permissions]",
)
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
    from . import _smi_variants as v

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
    from . import _smi_variants as v

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
    hdr_end = body.find(b"\n")
    header = (body if hdr_end < 0 else body[:hdr_end]).decode("utf-8", "replace").strip()
    if tuple(header.split(",")) != NVML_SAMPLER_HEADER:
        raise MalformedInput(
            f"traceanalyze NVML sampler log: header must be {','.join(NVML_SAMPLER_HEADER)}",
            path=path,
            line=2,
        )
    types = {c: _SAMPLER_TYPES.get(c, pa.float64()) for c in NVML_SAMPLER_HEADER}
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
            line=int(m.group(1)) + 2 if m else None,
        ) from None
    df = pl.from_arrow(tbl)
    assert isinstance(df, pl.DataFrame)
    if df["timestamp_ns"].null_count():
        raise MalformedInput("sampler row without timestamp_ns", path=path)
    devices = (
        df.select("device_id", pl.col("device_uuid").alias("uuid"))
        .unique(maintain_order=True)
        .with_columns(pl.lit("NVIDIA").alias("vendor"))
    )
    iv = re.search(rb"interval_ms=([0-9.]+)", raw[: nl if nl >= 0 else len(raw)])
    interval_ns = round(float(iv.group(1)) * 1e6) if iv else None
    return build_tables(
        sources=pl.DataFrame(
            {
                "tool": ["traceanalyze-nvml-sampler"],
                "time_origin_epoch_ns": [0],
                "requested_interval_ns": [interval_ns],
            },
            schema_overrides={"requested_interval_ns": pl.Int64},
        ),
        gpu_samples=df,
        devices=devices,
    )


# --- nvidia-smi CSV ---------------------------------------------------------------------------

_SMI_STAMP_FORMAT = "%Y/%m/%d %H:%M:%S%.f"
# Cells read as null: the tokens with and without the space that follows nvidia-smi's ", ".
_SMI_NULL_CELLS = [*_NULL_TOKENS, *(" " + t for t in _NULL_TOKENS)]
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_Numbers = Callable[[str, bool], tuple[str | None, pl.Series | None]]


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

    def line_of(i: int) -> int:
        # Rows are one per line; blank lines are rare in nvidia-smi output (and send a file to
        # the careful path, where this numbering is kept as it always was).
        return first_line + i

    parsed = _smi_fast(raw if raw is not None else path, first_line - 1, base, header_units)
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
    if raw is None:
        raw = read_bytes(path)
    return _read_smi_careful(raw, path, tz, first_line, base, header_units, line_of)


def _smi_chosen(base: list[str]) -> set[str]:
    """The fields that feed `gpu_samples` columns (the first present name of each)."""
    present = (next((c for c in names if c in base), None) for names in SMI_FIELDS.values())
    return {f for f in present if f is not None}


def _smi_fast(
    source: PathLike | bytes,
    skip: int,
    base: list[str],
    header_units: dict[str, str | None],
) -> tuple[pl.DataFrame, pl.DataFrame | None] | None:
    """The fast path: every column parsed in one streaming polars scan (parallel, the strings
    never held as a whole frame), and the distinct (device_id, uuid, name) rows.

    None when the file needs the careful path (`_read_smi_careful`, pyarrow): a row with too
    few or too many fields, a blank line, invalid UTF-8, a timestamp that is not exactly
    `YYYY/MM/DD HH:MM:SS.mmm`, a bad index, or a cell of a `gpu_samples` field or of the
    clock-reasons bitmask that is neither a null token nor a plain number with the header's unit
    (a value with another unit, a `[…]` state, units only in the values as with `noheader`).
    Declining costs only this scan; the careful path then reads the file as it always did, so
    results, errors (with their line numbers) and warnings are the same on both paths.

    Columns: `ts` (naive local time), `device_id`, `uuid`, `name`, `reasons`, `n:<field>` (the
    number with the header unit stripped, as `_split_values`), and `s:<field>` (the cells, null
    tokens null) for the fields bound for `gpu_metrics`/`devices`, which `_numbers` checks as
    carefully as before (text fields such as `pstate`, units in the values, unknown units).
    """
    cols = [f"c{i}" for i in range(len(base))]
    col = dict(zip(base, cols, strict=True))

    def raw(f: str) -> pl.Expr:
        return pl.col(col[f])

    def cell(f: str) -> pl.Expr:  # the cell with the null tokens null, as the careful path
        return pl.when(raw(f).is_in(_SMI_NULL_CELLS)).then(None).otherwise(raw(f))

    chosen = _smi_chosen(base)
    reasons = next((c for c in _REASONS if c in base), None)
    # nvidia-smi prints exactly 3 decimals (`.mmm`): the fixed-width format parses 3x faster
    # than `%.f`, and a stamp it rejects (other decimals, stray spaces) takes the careful path.
    # (Polars' strptime accepts the leading space a non-first column has.)
    exprs = [
        pl.col(col["timestamp"])
        .str.strptime(pl.Datetime("ns"), "%Y/%m/%d %H:%M:%S.%3f", strict=False)
        .alias("ts"),
        # A row with too few fields has a null last cell (and so has a blank line, which the
        # careful path skips); too many fields make the scan fail.
        pl.col(cols[-1]).is_null().alias("?short"),
    ]
    # (parsed column, flag column "the cell is not null"): a null parsed value of a non-null
    # cell sends the file to the careful path. Checked after the scan, on the collected
    # columns: a flag computed from the parsed expression inside the scan would parse twice.
    # Numbers are parsed from the raw cells: no null token (`[N/A]`, `N/A`, …, with or without
    # a unit stripped) parses, so they come out null as from `cell`, without its string copy.
    checks: list[tuple[str, str]] = []

    def checked(f: str, parsed: pl.Expr, name: str) -> None:
        flag = raw(f).is_not_null() & ~raw(f).is_in(_SMI_NULL_CELLS)
        exprs.extend([parsed.alias(name), flag.alias(f"?{name}")])
        checks.append((name, f"?{name}"))

    if "index" in base:
        checked(
            "index", raw("index").str.strip_chars_start().cast(pl.Int64, strict=False), "device_id"
        )
    exprs += [cell(f).str.strip_chars().alias(f) for f in ("uuid", "name") if f in base]
    if reasons is not None:
        # "0x…" lower case as nvidia-smi prints it; "0X…" or stray spaces take the careful path.
        hexs = raw(reasons).str.strip_chars_start().str.strip_prefix("0x")
        checked(reasons, hexs.str.to_integer(base=16, strict=False).cast(pl.Int64), "reasons")
    for f in base:
        if f in ("timestamp", "index", "uuid", "name") or f.startswith(_REASON_PREFIXES):
            continue
        hu = header_units.get(f)
        v = raw(f).str.strip_chars_start()
        num = (v.str.strip_suffix(f" {hu}") if hu else v).cast(pl.Float64, strict=False)
        if f in chosen:
            checked(f, num, f"n:{f}")
        else:
            exprs += [num.alias(f"n:{f}"), cell(f).alias(f"s:{f}")]
    lf = pl.scan_csv(
        source if isinstance(source, bytes) else Path(source),
        has_header=False,
        skip_lines=skip,
        new_columns=cols,
        schema=dict.fromkeys(cols, pl.String),
        quote_char=None,
        glob=False,
    ).select(exprs)
    # The distinct devices in the same scan (collect_all shares it): cheaper than a
    # `unique` over the collected million rows. Not with memory.total, whose unit
    # `_numbers` decides after the scan.
    dev = ["device_id"] * ("index" in base) + [c for c in ("uuid", "name") if c in base]
    try:
        if dev and "memory.total" not in base:
            out, devices = pl.collect_all(
                [lf, lf.select(dev).group_by(dev, maintain_order=True).agg()],
                engine="streaming",
            )
        else:
            out, devices = lf.collect(engine="streaming"), None
    except pl.exceptions.PolarsError:
        return None  # ragged rows, invalid UTF-8, …: the careful path says what is wrong
    if out.height == 0 or out["?short"].any() or out["ts"].null_count():
        return None
    if any((out[name].is_null() & out[flag]).any() for name, flag in checks):
        return None
    return out.select(pl.exclude("^\\?.*$")), devices


def _read_smi_careful(
    raw: bytes,
    path: PathLike,
    tz: str | None,
    first_line: int,
    base: list[str],
    header_units: dict[str, str | None],
    line_of: Callable[[int], int],
) -> Tables:
    # nvidia-smi separates fields with ", " and never quotes: the CSV parser splits on "," and
    # every cell but the first keeps one leading space (stripped per used column below; the
    # null states are matched with and without it).
    if first_line == 1:
        body: bytes | memoryview = raw
    else:
        nl = raw.find(b"\n")
        body = memoryview(raw)[nl + 1 :] if nl >= 0 else b""
    cols = [f"c{i}" for i in range(len(base))]
    try:
        tbl = pacsv.read_csv(
            pa.py_buffer(body),
            read_options=pacsv.ReadOptions(column_names=cols, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(quote_char=False, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                column_types={c: pa.string() for c in cols},
                strings_can_be_null=True,
                null_values=_SMI_NULL_CELLS,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        m = re.search(r"[Rr]ow #(\d+)", str(e))
        raise MalformedInput(
            f"bad nvidia-smi row ({str(e).splitlines()[0]}); expected {len(base)} fields "
            f"({', '.join(base)})",
            path=path,
            line=int(m.group(1)) + first_line - 1 if m else None,
        ) from None
    df = pl.from_arrow(tbl)
    del tbl
    assert isinstance(df, pl.DataFrame)
    df = df.rename(dict(zip(cols, base, strict=True)))
    text_cols = [b for b in ("timestamp", "index", "uuid", "name", *_REASONS) if b in base]
    df = df.with_columns(pl.col(text_cols).str.strip_chars())

    # Timestamps (local wall clock) → epoch ns.
    zone = check_timezone(tz, path) if tz is not None else local_timezone()
    naive = df["timestamp"].str.strptime(pl.Datetime("ns"), _SMI_STAMP_FORMAT, strict=False)
    bad = (naive.is_null() & df["timestamp"].is_not_null()).arg_true()
    if bad.len() or df["timestamp"].null_count():
        i = int(bad[0]) if bad.len() else int(df["timestamp"].is_null().arg_true()[0])
        raise MalformedInput(
            f"bad nvidia-smi timestamp {df['timestamp'][i]!r} (expected YYYY/MM/DD HH:MM:SS.mmm)",
            path=path,
            line=line_of(i),
            column="timestamp",
        )
    ts = local_to_epoch_ns(naive, zone, path, line_of)

    split = _split_values(
        df,
        [b for b in base if b not in ("timestamp", "uuid", "name", "index", *_REASONS)],
        header_units,
    )
    device_id = _ints(df, "index", path, line_of).alias("device_id") if "index" in base else None

    def numbers(f: str, optional: bool) -> tuple[str | None, pl.Series | None]:
        return _numbers(
            f, split[f"n:{f}"], df[f], header_units.get(f), path, line_of, optional=optional
        )

    def reasons(col: str) -> pl.Series:
        s = df[col].str.strip_chars().str.to_lowercase()
        hexs = s.str.strip_prefix("0x")
        val = hexs.str.to_integer(base=16, strict=False)
        bad = (val.is_null() & s.is_not_null()).arg_true()
        if bad.len():
            i = int(bad[0])
            raise MalformedInput(
                f"{col}: not a hex bitmask: {df[col][i]!r}",
                path=path,
                line=line_of(i),
                column=col,
            )
        out: pl.Series = val.cast(pl.Int64).alias("clock_event_reasons")
        return out

    return _assemble(
        path,
        base,
        df.height,
        ts,
        zone,
        device_id,
        {b: df[b] for b in ("uuid", "name") if b in base},
        numbers,
        reasons,
    )


def _assemble(
    path: PathLike,
    base: list[str],
    height: int,
    ts: pl.Series,
    zone: str,
    device_id: pl.Series | None,
    text: dict[str, pl.Series],
    stated: _Numbers,
    reasons: Callable[[str], pl.Series],
    distinct_devices: pl.DataFrame | None = None,
) -> Tables:
    """The tables from parsed columns (both paths): `stated(field, optional)` gives a field's
    (base unit, values) as `_numbers`, `reasons(field)` the clock-reasons bitmask,
    `distinct_devices` the distinct (device_id, uuid, name) rows when already known."""

    def numbers(f: str, optional: bool) -> tuple[str | None, pl.Series | None]:
        # A field without any unit (`nounits`) is in the unit nvidia-smi documents for it, so
        # `memory.used` is bytes whether or not the log was written with units.
        unit, vals = stated(f, optional)
        default = _nounits_unit(f) if unit is None and vals is not None else None
        if default is None or vals is None:
            return unit, vals
        b, factor = SMI_UNITS[default]
        return b, vals * factor if factor != 1.0 else vals

    out: dict[str, pl.Series] = {"timestamp_ns": ts.alias("timestamp_ns")}
    if device_id is not None:
        out["device_id"] = device_id.alias("device_id")
    if "uuid" in text:
        out["device_uuid"] = text["uuid"].alias("device_uuid")
    used = {"timestamp", "index", "uuid", "name"}
    for col, candidates in SMI_FIELDS.items():
        f = next((c for c in candidates if c in base), None)
        if f is None:
            continue
        used.add(f)
        unit, vals = numbers(f, False)
        if vals is None:
            raise MalformedInput(f"nvidia-smi field {f} has no numeric values", path=path, column=f)
        want = _COLUMN_UNIT[col]
        if unit is not None and unit != want:
            raise UnknownUnit(
                f"nvidia-smi field {f} in {unit!r}, expected {want!r}", path=path, column=f
            )
        out[col] = vals.alias(col)
        if col == "power_w":
            out["power_kind"] = pl.repeat(
                _POWER_KIND[f], height, dtype=pl.String, eager=True
            ).alias("power_kind")
    reasons_col = next((c for c in _REASONS if c in base), None)
    if reasons_col is not None:
        used.add(reasons_col)
        out["clock_event_reasons"] = reasons(reasons_col)
    samples = pl.DataFrame(list(out.values()))

    # Other numeric fields → gpu_metrics (long).
    metrics = []
    for f in base:
        if f in used or f.startswith(_REASON_PREFIXES):
            continue
        unit, vals = numbers(f, True)
        if vals is None:
            continue
        metrics.append(
            pl.DataFrame(
                {
                    "device_id": out.get(
                        "device_id", pl.repeat(None, height, dtype=pl.Int64, eager=True)
                    ),
                    "timestamp_ns": ts,
                    "metric_name": pl.repeat(f, height, dtype=pl.String, eager=True),
                    "unit": pl.repeat(unit, height, dtype=pl.String, eager=True),
                    "value": vals,
                }
            ).drop_nulls("value")
        )
    gpu_metrics = pl.concat(metrics) if metrics else None

    dev_cols = {}
    if device_id is not None:
        dev_cols["device_id"] = out["device_id"]
    for b in ("uuid", "name"):
        if b in text:
            dev_cols[b] = text[b]
    if "memory.total" in base:
        unit, vals = numbers("memory.total", False)
        if unit == "bytes" and vals is not None:  # MiB when the log has no units
            dev_cols["memory_bytes"] = vals.round(0).cast(pl.Int64)
    devices = None
    if distinct_devices is not None:
        devices = distinct_devices.with_columns(pl.lit("NVIDIA").alias("vendor"))
    elif dev_cols:
        # The distinct rows in first-seen order (`group_by` does it in half `unique`'s time).
        devices = (
            pl.DataFrame({k: v.alias(k) for k, v in dev_cols.items()})
            .group_by(list(dev_cols), maintain_order=True)
            .agg()
            .with_columns(pl.lit("NVIDIA").alias("vendor"))
        )
    return build_tables(
        sources=pl.DataFrame(
            {"tool": ["nvidia-smi"], "time_origin_epoch_ns": [0], "timezone": [zone]}
        ),
        gpu_samples=samples,
        gpu_metrics=gpu_metrics,
        devices=devices,
    )


def _ints(df: pl.DataFrame, col: str, path: PathLike, line_of: Any) -> pl.Series:
    s = df[col]
    out: pl.Series = s.cast(pl.Int64, strict=False)
    bad = (out.is_null() & s.is_not_null()).arg_true()
    if bad.len():
        i = int(bad[0])
        raise MalformedInput(f"not an integer: {s[i]!r}", path=path, line=line_of(i), column=col)
    return out.alias(col)


def _split_values(
    df: pl.DataFrame, fields: list[str], header_units: dict[str, str | None]
) -> pl.DataFrame:
    """`n:<f>`, the number of every field, in one parallel pass: the header's unit (`[W]`) is
    stripped from the end of the values (`77.08 W`) and the rest cast. Fields where that fails
    for some value (no header unit but units in values, text fields) are redone by `_numbers`."""
    exprs = []
    for f in fields:
        hu = header_units.get(f)
        v = pl.col(f).str.strip_chars_start()
        v = v.str.strip_suffix(f" {hu}") if hu else v
        exprs.append(v.cast(pl.Float64, strict=False).alias(f"n:{f}"))
    return df.select(exprs)


def _first_tokens_numeric(s: pl.Series) -> bool:
    """Whether any cell's first word is a number (checked on the distinct cells: a text field
    such as `pstate` has a handful)."""
    u = s.drop_nulls().unique()
    first = u.str.strip_chars().str.splitn(" ", 2).struct.field("field_0")
    return bool(first.cast(pl.Float64, strict=False).is_not_null().any())


def _numbers(
    col: str,
    num: pl.Series,
    s: pl.Series | None,
    header_unit: str | None,
    path: PathLike,
    line_of: Any,
    *,
    optional: bool = False,
) -> tuple[str | None, pl.Series | None]:
    """(base unit, values in it) of a field; (None, None) when its values are not numbers.

    `num` is the `_split_values` number of every cell, `s` the cells (null tokens null), or None
    when the caller has checked that every non-null cell gave a number.
    A value's own unit (`77.08 W`) must agree with the header's (`power.draw [W]`); either may
    be absent (`nounits`, `noheader`). Not-a-number values in a numeric field are an error
    unless `optional` and no value at all is a number (a text field such as `pstate`).
    """
    vunit = pl.Series(col, [], dtype=pl.String)
    # A null cell gives a null number, so more null numbers than null cells = failed values.
    if s is not None and num.null_count() > s.null_count():
        if optional and not _first_tokens_numeric(s):
            return None, None  # a text field: what the split below would conclude, cheaper
        s = s.str.strip_chars()
        # Slow path for this field only: units in the values without a header unit, a text
        # field, an unknown `[…]` state or a bad value.
        sp = s.str.splitn(" ", 2)
        num = sp.struct.field("field_0").cast(pl.Float64, strict=False)
        vunit = sp.struct.field("field_1").str.strip_chars()
        state = s.str.starts_with("[") & num.is_null()
        if state.any() and not (optional and num.is_null().all()):
            n_state, example = int(state.sum()), s.filter(state)[0]
            warn(f"{path}: {col}: {n_state} value(s) like {example!r} read as null")
            s = pl.select(pl.when(state).then(None).otherwise(s)).to_series()
            vunit = pl.select(pl.when(state).then(None).otherwise(vunit)).to_series()
    if s is not None and num.null_count() > s.null_count():
        if optional and num.null_count() == num.len():
            return None, None
        i = int((num.is_null() & s.is_not_null()).arg_true()[0])
        raise MalformedInput(
            f"nvidia-smi field {col}: not a number: {s[i]!r}",
            path=path,
            line=line_of(i),
            column=col,
        )
    if optional and num.null_count() == num.len():
        return None, None
    units = set(vunit.drop_nulls().unique().to_list()) - {""}
    if header_unit:
        units.add(header_unit)
    if len(units) > 1:
        raise MalformedInput(
            f"nvidia-smi field {col}: mixed units {sorted(units)}", path=path, column=col
        )
    if not units:
        return None, num.alias(col)
    u = units.pop()
    if u not in SMI_UNITS:
        j = int((vunit == u).arg_true()[0]) if (vunit == u).any() else None
        raise UnknownUnit(
            f"unknown nvidia-smi unit {u!r} (known: {', '.join(sorted(SMI_UNITS))})",
            path=path,
            line=line_of(j) if j is not None else 1,
            column=col,
        )
    b, factor = SMI_UNITS[u]
    return b, (num * factor).alias(col)
