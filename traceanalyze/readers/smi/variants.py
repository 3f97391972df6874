"""The less common GPU telemetry logs read by the `smi_csv` reader (see its module docstring).

* Timestamped NVML sampler CSVs other than the project's own (formats.md §6.2), e.g.
  GPU-Roofline-Profiler `results/sample_run/nvml.csv`:
  `timestamp,power_w,temperature_c,sm_clock_mhz,memory_clock_mhz,gpu_util_pct` with ISO-8601
  `2026-07-22T21:41:45.304Z` stamps. A header with a time column (`timestamp` ISO-8601, or
  `timestamp_ns` epoch ns) and at least one known column name (`_ALIASES`); other numeric columns
  go to `gpu_metrics` with the unit their suffix names (`_mhz` → MHz, `_w` → W, `_pct` → %, …).
  ISO stamps with `Z`/an offset are exact; stamps without a zone are local time and use `tz`.
* SC22 `nvml_power_measuring/dumpGpuPower.cpp` stdout (formats.md §0.3), one line per sample:
  `[<n>] Power: <W %.4f>, Util: <%>, CoreClockMhz: <MHz>, MemClockMHz: <MHz>, Timestamp_ns:
  <epoch ns>, Temp: <C>`, `<n>` being the sample count. Power is `nvmlDeviceGetPowerUsage` / 1000
  (W; an average on Ampere and newer, instant before: `power_kind` stays null). The device is the
  `Selected device <d>: <name>` line when present. The framing lines `Starting power measurement
  with energy <mJ> at <ns>` / `… Closing profiler with energy <mJ> at <ns>` give two samples with
  only `energy_j` (mJ / 1000). `Timestamp_ns` is `std::chrono::high_resolution_clock` since the
  epoch (libstdc++: the system clock), so `time_origin_epoch_ns` = 0.
* `dcgmi dmon -e <ids> [-d ms]` text (formats.md §6.3; DCGM 2.x/3.x layout, no real file seen):
  `#Entity  SMCLK  POWER …` header, a units line starting `ID`, rows `GPU 0   1410  70.2 …`,
  `N/A` = null, headers may repeat. There are no timestamps: the sample index (the n-th row of
  an entity) times the option `interval_ms` (the `-d` used at capture) gives `timestamp_ns`
  relative to the first sample (DERIVED, and `time_origin_epoch_ns` is null). Without
  `interval_ms` reading fails and says so. `SMCLK` → sm_clock_mhz, `MMCLK` → mem_clock_mhz,
  `POWER` → power_w, `GTEMP` → temperature_c, `GPUTL` → gpu_util_pct, `MCUTL` → mem_util_pct;
  other fields → `gpu_metrics` (metric_name = the dmon tag, unit = the units-line label, values
  as printed). Only `GPU <n>` entities are read (MIG `GPU-I`/`GPU-CI` rows are skipped with a
  warning).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import polars as pl

from ...errors import MalformedInput, TraceanalyzeError
from ...tables import Tables
from ..common.core import PathLike, lazy_import, warn
from .clock import check_timezone, local_timezone, local_to_epoch_ns

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.csv as pacsv
else:  # imported on first use, so format detection stays light
    pa = lazy_import("pyarrow")
    pacsv = lazy_import("pyarrow.csv")


def build_tables(**frames: pl.DataFrame | None) -> Tables:
    """`Tables.build` with absent (None) frames left out (as `smi_csv.build_tables`)."""
    return Tables.build(**{k: v for k, v in frames.items() if v is not None})


# --- timestamped sampler CSVs -----------------------------------------------------------------

_ALIASES: dict[str, str] = {
    "power_w": "power_w",
    "power_draw_w": "power_w",
    "temperature_c": "temperature_c",
    "temp_c": "temperature_c",
    "sm_clock_mhz": "sm_clock_mhz",
    "graphics_clock_mhz": "sm_clock_mhz",
    "memory_clock_mhz": "mem_clock_mhz",
    "mem_clock_mhz": "mem_clock_mhz",
    "gpu_util_pct": "gpu_util_pct",
    "mem_util_pct": "mem_util_pct",
    "memory_util_pct": "mem_util_pct",
    "fan_pct": "fan_pct",
    "power_limit_w": "power_limit_w",
    "energy_j": "energy_j",
    "device_id": "device_id",
    "gpu_index": "device_id",
    "device_uuid": "device_uuid",
    "power_kind": "power_kind",
    "clock_event_reasons": "clock_event_reasons",
}
_TIME_COLUMNS = ("timestamp", "timestamp_ns")
_SUFFIX_UNITS = {"_mhz": "MHz", "_w": "W", "_pct": "%", "_c": "C", "_j": "J", "_bytes": "bytes"}
_DUMP_LINE = re.compile(
    r"^\[(\d+)\] Power: ([-+\d.eE]+), Util: (-?\d+), CoreClockMhz: (\d+), MemClockMHz: (\d+), "
    r"Timestamp_ns: (-?\d+), Temp: (-?\d+)\s*$",
    re.MULTILINE,
)
_DUMP_ENERGY = re.compile(
    r"(?:Starting power measurement|Closing profiler) with energy (\d+) at (\d+)"
)


def variant_of(first: str, head: str) -> str | None:
    """ "generic", "dump", "dcgmi" or None, from the first non-empty line and the head."""
    if first.lstrip().startswith("#Entity"):
        return "dcgmi"
    if _DUMP_LINE.search(head) or _DUMP_ENERGY.search(head):
        return "dump"
    if ", " not in first and "," in first:
        cols = [c.strip().strip('"') for c in first.split(",")]
        if (
            cols[0] in _TIME_COLUMNS
            and all(re.fullmatch(r"[a-z][a-z0-9_]*", c) for c in cols)
            and any(c in _ALIASES for c in cols)
        ):
            return "generic"
    return None


def _unit_of(col: str) -> str | None:
    return next((u for s, u in _SUFFIX_UNITS.items() if col.endswith(s)), None)


def read_generic(raw: bytes, path: PathLike, *, tz: str | None) -> Tables:
    gs, metrics, zone = generic_rows(raw, path, tz, 0)
    return build_tables(sources=generic_sources(zone), gpu_samples=gs, gpu_metrics=metrics)


def generic_sources(zone: str | None) -> pl.DataFrame:
    return pl.DataFrame(
        {"tool": ["nvml-sampler"], "time_origin_epoch_ns": [0], "timezone": [zone]},
        schema={"tool": pl.String, "time_origin_epoch_ns": pl.Int64, "timezone": pl.String},
    )


def generic_rows(
    raw: bytes, path: PathLike, tz: str | None, rows_before: int
) -> tuple[pl.DataFrame, pl.DataFrame | None, str | None]:
    """(gpu_samples, gpu_metrics, the zone used for zone-less stamps or None) of `raw`: the
    header, then rows (the log's first `rows_before` rows were in earlier blocks)."""
    df = _generic_frame(raw, path, rows_before)
    ts, zone = _generic_timestamps(df, path, tz, rows_before)
    gs, metrics = _generic_columns(df, ts)
    return gs, pl.concat(metrics) if metrics else None, zone


def _generic_frame(raw: bytes, path: PathLike, rows_before: int = 0) -> pl.DataFrame:
    """The CSV as a frame, stamps as text; a bad row or a repeated column is MalformedInput."""
    try:
        tbl = pacsv.read_csv(
            pa.py_buffer(raw),
            read_options=pacsv.ReadOptions(block_size=1 << 24),
            parse_options=pacsv.ParseOptions(ignore_empty_lines=True),
            # Stamps stay text: the zone rules below decide how to read them.
            convert_options=pacsv.ConvertOptions(
                strings_can_be_null=True, column_types={"timestamp": pa.string()}
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        m = re.search(r"[Rr]ow #(\d+)", str(e))
        raise MalformedInput(
            f"bad sampler CSV row ({str(e).splitlines()[0]})",
            path=path,
            line=int(m.group(1)) + rows_before if m else None,
        ) from None
    names = tbl.column_names
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # columns are matched by name: a repeated one would be ambiguous
        raise MalformedInput(
            f"column {twice[0]!r} appears twice in the header", path=path, line=1, column=twice[0]
        )
    df = pl.from_arrow(tbl)
    assert isinstance(df, pl.DataFrame)
    return df


def _generic_timestamps(
    df: pl.DataFrame, path: PathLike, tz: str | None, rows_before: int = 0
) -> tuple[pl.Series, str | None]:
    """(epoch ns per row, the zone used for zone-less stamps or None)."""
    tcol = df.columns[0]
    zone: str | None = None
    if tcol == "timestamp_ns":
        ts = df[tcol].cast(pl.Int64, strict=False)
    else:
        s = df[tcol].cast(pl.String)
        zoned = s.str.contains(r"(?:Z|[+-]\d{2}:?\d{2})$")
        if zoned.all():
            ts = s.str.to_datetime(
                "%Y-%m-%dT%H:%M:%S%.f%#z", time_unit="ns", time_zone="UTC", strict=False
            ).dt.epoch("ns")
        else:
            zone = check_timezone(tz, path) if tz is not None else local_timezone()
            naive = s.str.to_datetime(time_unit="ns", strict=False)
            ts = local_to_epoch_ns(naive, zone, path, lambda i: i + 2 + rows_before)
    bad = ts.is_null().arg_true()
    if bad.len():
        i = int(bad[0])
        raise MalformedInput(
            f"bad {tcol} value {df[tcol][i]!r} (expected ISO-8601 or epoch ns)",
            path=path,
            line=i + 2 + rows_before,
            column=tcol,
        )
    return ts, zone


def _generic_columns(df: pl.DataFrame, ts: pl.Series) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
    """(gpu_samples from the known columns, one gpu_metrics frame per other numeric column)."""
    samples: dict[str, pl.Series] = {"timestamp_ns": ts.alias("timestamp_ns")}
    metrics = []
    for c in df.columns[1:]:
        if c in _ALIASES:
            samples[_ALIASES[c]] = df[c].alias(_ALIASES[c])
        elif df[c].dtype.is_numeric():
            metrics.append(
                pl.DataFrame(
                    {
                        "timestamp_ns": ts,
                        "metric_name": pl.repeat(c, df.height, dtype=pl.String, eager=True),
                        "unit": pl.repeat(_unit_of(c), df.height, dtype=pl.String, eager=True),
                        "value": df[c].cast(pl.Float64),
                    }
                ).drop_nulls("value")
            )
    gs = pl.DataFrame(list(samples.values()))
    if "device_id" in gs.columns:
        gs = gs.with_columns(pl.col("device_id").cast(pl.Int64, strict=False))
        if metrics:
            metrics = [m.with_columns(gs["device_id"]) for m in metrics]
    return gs, metrics


# --- dumpGpuPower -----------------------------------------------------------------------------


DUMP_NO_SAMPLES = "no dumpGpuPower sample lines ('[n] Power: …')"
DUMP_DEVICE = re.compile(r"Selected device (\d+): (.+)")


def read_dump(raw: bytes, path: PathLike) -> Tables:
    text = raw.decode("utf-8", "replace")
    samples = dump_sample_rows(text)
    if samples.height == 0:
        raise MalformedInput(DUMP_NO_SAMPLES, path=path)
    dev = DUMP_DEVICE.search(text)
    device_id = int(dev.group(1)) if dev else None
    energy = dump_energy_rows(text)
    if energy:
        e = dump_energy_frame(energy)
        samples = pl.concat([samples, e], how="diagonal").sort("timestamp_ns", maintain_order=True)
    samples = samples.with_columns(pl.lit(device_id, dtype=pl.Int64).alias("device_id"))
    return build_tables(sources=dump_sources(), gpu_samples=samples, devices=dump_devices(dev))


def dump_sample_rows(text: str) -> pl.DataFrame:
    """The sample lines of `text` as `gpu_samples` columns (no device_id), in line order."""
    lines = pl.Series("line", text.splitlines(), dtype=pl.String)
    g = lines.str.extract_groups(_DUMP_LINE.pattern)
    df = pl.DataFrame(g.struct.unnest()).drop_nulls("1")
    return df.select(
        pl.col("6").cast(pl.Int64).alias("timestamp_ns"),
        pl.col("2").cast(pl.Float64).alias("power_w"),
        pl.col("3").cast(pl.Float64).alias("gpu_util_pct"),
        pl.col("4").cast(pl.Float64).alias("sm_clock_mhz"),
        pl.col("5").cast(pl.Float64).alias("mem_clock_mhz"),
        pl.col("7").cast(pl.Float64).alias("temperature_c"),
    )


def dump_energy_rows(text: str) -> list[tuple[int, float]]:
    """`(timestamp_ns, energy_j)` of the framing lines of `text`, in text order."""
    return [(int(t), int(mj) / 1000.0) for mj, t in _DUMP_ENERGY.findall(text)]


def dump_energy_frame(rows: list[tuple[int, float]]) -> pl.DataFrame:
    return pl.DataFrame({"timestamp_ns": [t for t, _ in rows], "energy_j": [e for _, e in rows]})


def dump_devices(dev: re.Match[str] | None) -> pl.DataFrame | None:
    """The `devices` row of the first `Selected device` line, None without one."""
    if dev is None:
        return None
    return pl.DataFrame(
        {"device_id": [int(dev.group(1))], "name": [dev.group(2).strip()], "vendor": ["NVIDIA"]}
    )


def dump_sources() -> pl.DataFrame:
    return pl.DataFrame({"tool": ["dumpGpuPower"], "time_origin_epoch_ns": [0]})


# --- dcgmi dmon -------------------------------------------------------------------------------

DCGMI_FIELDS: dict[str, str] = {
    "SMCLK": "sm_clock_mhz",
    "MMCLK": "mem_clock_mhz",
    "POWER": "power_w",
    "GTEMP": "temperature_c",
    "GPUTL": "gpu_util_pct",
    "MCUTL": "mem_util_pct",
}


def read_dcgmi(raw: bytes, path: PathLike, *, interval_ms: Any) -> Tables:
    _dcgmi_step_ns(interval_ms, path)  # the error for a missing or bad interval first
    text = raw.decode("utf-8", "replace")
    # split on "\n" only (not str.splitlines, which also breaks at \x0b, \x1c, U+2028, …), so
    # list index + 1 is the line number an editor shows.
    lines = text.split("\n")
    header, tags, units = _dcgmi_header(lines)
    samples, metrics, devices = dcgmi_rows(lines, 1, (header, tags, units), path, interval_ms, {})
    return build_tables(
        sources=dcgmi_sources(interval_ms),
        gpu_samples=samples,
        gpu_metrics=metrics,
        devices=devices,
    )


def dcgmi_sources(interval_ms: Any) -> pl.DataFrame:
    return pl.DataFrame(
        {"tool": ["dcgmi"], "requested_interval_ns": [round(interval_ms * 1e6)]},
        schema_overrides={"requested_interval_ns": pl.Int64},
    )


def dcgmi_rows(
    lines: list[str],
    line0: int,
    head: tuple[str, list[str], dict[str, str | None]],
    path: PathLike,
    interval_ms: Any,
    seen: dict[str, int],
) -> tuple[pl.DataFrame, pl.DataFrame | None, pl.DataFrame]:
    """(gpu_samples, gpu_metrics, devices) of `lines` (the first is line `line0`), given the
    log's `_dcgmi_header`. `seen`: the samples per entity id in earlier lines, updated (a
    sample's time is its index among its entity's rows times the interval)."""
    header, tags, units = head
    step_ns = _dcgmi_step_ns(interval_ms, path)
    gpu = _dcgmi_gpu_rows(_dcgmi_rows(lines, header, tags, path, line0), path)
    for gid, n in gpu.group_by("id", maintain_order=True).len().rows():
        seen[gid] = seen.get(gid, 0) + n
    per_gpu = max(seen.values(), default=None)
    if isinstance(per_gpu, int) and not (per_gpu - 1) * step_ns < 2.0**63:
        raise TraceanalyzeError(
            f"interval_ms={interval_ms} places samples past int64 nanoseconds", path=path
        )
    # Earlier lines' samples of each id come first: the index goes on from their count.
    before = pl.col("id").replace_strict(
        dict(seen), default=0, return_dtype=pl.Int64
    ) - pl.len().over("id")
    index = pl.int_range(pl.len()).over("id") + before
    gpu = gpu.with_columns((index * step_ns).round(0).cast(pl.Int64).alias("timestamp_ns"))
    samples, metrics = _dcgmi_values(gpu, tags, units, path)
    devices = gpu.select("device_id").unique(maintain_order=True)
    return samples, metrics, devices


def _dcgmi_step_ns(interval_ms: Any, path: PathLike) -> float:
    """The sampling interval in ns; an error without one or with one out of range."""
    if interval_ms is None:
        raise TraceanalyzeError(
            "dcgmi dmon text has no timestamps; pass the sampling interval used at capture "
            "(dcgmi dmon -d, default 1000 ms) as the option interval_ms=… to place the samples",
            path=path,
        )
    step_ns = float(interval_ms) * 1e6
    if not 0 < step_ns < 2.0**63:  # also refuses nan and inf
        raise TraceanalyzeError(
            f"interval_ms must be positive and below ~292 years, got {interval_ms}", path=path
        )
    return step_ns


def _dcgmi_header(lines: list[str]) -> tuple[str, list[str], dict[str, str | None]]:
    """(the first `#Entity` line, its field tags, each tag's unit label from the `ID` line)."""
    header_i = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("#Entity"))
    header = lines[header_i]
    tags = header.split()[1:]
    units: dict[str, str | None] = dict.fromkeys(tags)
    # The units line aligns its labels under the tags: a label belongs to the tag whose span
    # (from its first character to the next tag's) contains the label's last character.
    starts = [m.start() for m in re.finditer(r"\S+", header)][1:]
    if header_i + 1 < len(lines) and lines[header_i + 1].lstrip().startswith("ID"):
        for m in list(re.finditer(r"\S+", lines[header_i + 1]))[1:]:
            end = m.end() - 1
            k = max((j for j, s in enumerate(starts) if s <= end), default=None)
            if k is not None:
                units[tags[k]] = m.group()
    return header, tags, units


def _dcgmi_rows(
    lines: list[str], header: str, tags: list[str], path: PathLike, line0: int = 1
) -> pl.DataFrame:
    """The data rows as text cells (line, entity, id, one column per tag)."""
    s = pl.Series("line", lines, dtype=pl.String).str.strip_chars()
    # Data rows: not headers, units lines or blank; repeated headers must be identical.
    is_head = s.str.starts_with("#Entity")
    changed = is_head & (s.str.replace_all(r"\s+", " ") != " ".join(header.split()))
    if changed.any():
        raise MalformedInput(
            "dcgmi dmon header changes mid-file",
            path=path,
            line=int(changed.arg_true()[0]) + line0,
        )
    keep = ~(
        s.str.starts_with("#") | s.str.starts_with("ID") | (s == "") | s.str.starts_with("Error")
    )
    rows = s.filter(keep)
    line_no = pl.int_range(line0, line0 + len(lines), eager=True).filter(keep)
    parts = rows.str.replace_all(r"\s+", " ").str.split(" ")
    n = parts.list.len()
    bad = (n != len(tags) + 2).arg_true()
    if bad.len():
        i = int(bad[0])
        raise MalformedInput(
            f"dcgmi dmon row with {n[i]} fields, expected {len(tags) + 2}: {rows[i]!r}",
            path=path,
            line=int(line_no[i]),
        )
    return pl.DataFrame(
        {
            "line": line_no,
            "entity": parts.list.get(0),
            "id": parts.list.get(1),
            **{t: parts.list.get(i + 2) for i, t in enumerate(tags)},
        }
    )


def _dcgmi_gpu_rows(df: pl.DataFrame, path: PathLike) -> pl.DataFrame:
    """The `GPU <n>` rows with an integer `device_id` (other entities skipped, warned)."""
    gpu = df.filter(pl.col("entity") == "GPU")
    if gpu.height < df.height:
        warn(f"{path}: skipped {df.height - gpu.height} dcgmi row(s) of non-GPU entities")
    gpu = gpu.with_columns(pl.col("id").cast(pl.Int64, strict=False).alias("device_id"))
    bad_rows = gpu.filter(pl.col("device_id").is_null())
    if bad_rows.height:
        raise MalformedInput(
            f"dcgmi dmon GPU id is not an integer: {bad_rows['id'][0]!r}",
            path=path,
            line=int(bad_rows["line"][0]),
        )
    return gpu


def _dcgmi_num(t: str) -> pl.Expr:
    v = pl.col(t)
    return pl.when(v == "N/A").then(None).otherwise(v).cast(pl.Float64, strict=False)


def _dcgmi_values(
    gpu: pl.DataFrame, tags: list[str], units: dict[str, str | None], path: PathLike
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(gpu_samples from the known tags, gpu_metrics from the others or None)."""
    num = _dcgmi_num
    for t in tags:
        bad_rows = gpu.filter(num(t).is_null() & (pl.col(t) != "N/A"))
        if bad_rows.height:
            raise MalformedInput(
                f"dcgmi dmon {t}: not a number: {bad_rows[t][0]!r}",
                path=path,
                line=int(bad_rows["line"][0]),
                column=t,
            )
    samples = gpu.select(
        "device_id",
        "timestamp_ns",
        *[num(t).alias(DCGMI_FIELDS[t]) for t in tags if t in DCGMI_FIELDS],
    )
    others = [t for t in tags if t not in DCGMI_FIELDS]
    metrics = None
    if others:
        metrics = (
            gpu.select("device_id", "timestamp_ns", *[num(t).alias(t) for t in others])
            .unpivot(index=["device_id", "timestamp_ns"], variable_name="metric_name")
            .with_columns(
                pl.col("metric_name")
                .replace_strict({t: units[t] for t in others}, default=None, return_dtype=pl.String)
                .alias("unit")
            )
            .drop_nulls("value")
        )
    return samples, metrics
