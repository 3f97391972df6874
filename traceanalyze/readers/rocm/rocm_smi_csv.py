"""rocm-smi / amd-smi telemetry logs in CSV (`gpu_samples`): a sampler's log with a time column
and a device column per row, as scripts around `rocm-smi --showpower --showtemp --csv` or
`amd-smi metric --csv` write them (tested with the MI300X benchmark logs of
cmontemuino/amd-mi300x-ml-benchmarks: `timestamp,device,power_watts,power_cap_watts` and
`timestamp,device,temp_edge_celsius,temp_junction_celsius`, 5 s sweeps over 8 GPUs).

* Time: epoch seconds (integer or fractional), or ISO-8601 with a `Z` or an offset; the
  `timestamp_ns` are epoch ns (`time_origin_epoch_ns` = 0). A naive ISO time is refused: its
  zone is unknown.
* Device: `cardN` (rocm-smi's names) or an integer index (amd-smi's `gpu`) -> device_id N.
* A row with a time and no device (`<timestamp>,`) closes a sweep: it is not a sample, and is
  skipped. An empty value is null.
* Columns (names as rocm-smi's CSV, amd-smi's and the common samplers spell them): power
  (`power_watts`, `Average Graphics Package Power (W)`, `Current Socket Graphics Package Power
  (W)`, `power_usage`, `socket_power`) -> power_w; power cap -> power_limit_w; junction
  (`temp_junction_celsius`, `Temperature (Sensor junction) (C)`, `hotspot_temperature`) ->
  temperature_c, **the temperature analyses use**; edge (`temp_edge_celsius`, `Temperature
  (Sensor edge) (C)`, `edge_temperature`) -> edge_temperature_c; `sclk_mhz`/`gfx_clk` ->
  sm_clock_mhz; `mclk_mhz`/`mem_clk` -> mem_clock_mhz; `GPU use (%)`/`gfx_activity`/
  `gpu_util` -> gpu_util_pct; `GPU Memory use (%)`/`umc_activity` -> mem_util_pct. Other
  columns are left out.
"""

from __future__ import annotations

import csv
import io
import re

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import PathLike, check_telemetry, head_text, reader_entry
from ..common.limits import read_content

_TIME = ("timestamp", "time", "Timestamp", "date_time")
_DEVICE = ("device", "gpu", "Device", "GPU", "card")
_FIELDS: dict[str, tuple[str, ...]] = {
    "power_w": (
        "power_watts",
        "Average Graphics Package Power (W)",
        "Current Socket Graphics Package Power (W)",
        "power_usage",
        "socket_power",
        "power_socket_power",
    ),
    "power_limit_w": ("power_cap_watts", "Max Graphics Package Power (W)", "power_cap"),
    "temperature_c": (
        "temp_junction_celsius",
        "Temperature (Sensor junction) (C)",
        "hotspot_temperature",
        "temperature_hotspot",
        "temp_hotspot_celsius",
    ),
    "edge_temperature_c": (
        "temp_edge_celsius",
        "Temperature (Sensor edge) (C)",
        "edge_temperature",
        "temperature_edge",
    ),
    "sm_clock_mhz": ("sclk_mhz", "gfx_clk", "sclk_clock_mhz", "clock_gfx_clk"),
    "mem_clock_mhz": ("mclk_mhz", "mem_clk", "mclk_clock_mhz", "clock_mem_clk"),
    "gpu_util_pct": (
        "GPU use (%)",
        "gfx_activity",
        "usage_gfx_activity",
        "gpu_util",
        "gpu_use_percent",
    ),
    "mem_util_pct": ("GPU Memory use (%)", "umc_activity", "usage_umc_activity", "mem_util"),
}
_ALL = {name: col for col, names in _FIELDS.items() for name in names}


def _cells(line: str) -> list[str]:
    """One CSV line's cells; none for a line the csv module refuses (a lone carriage return,
    a NUL): such a file is no rocm-smi log."""
    try:
        return next(csv.reader([line.strip("\r")]), [])
    except csv.Error:
        return []


def _header(text: str) -> list[str]:
    return _cells(text.lstrip("\ufeff").split("\n", 1)[0])


# Names only AMD's tools write: a log with generic names (timestamp, gpu, power_w) may be an
# NVIDIA sampler's, which `smi_csv` reads; this reader claims it only with one of these columns,
# or with rocm-smi's `cardN` devices.
_AMD_ONLY = re.compile(r"junction|hotspot|edge|gfx|umc|socket|Graphics Package|sclk|mclk", re.I)
_CARD = re.compile(r"\s*card\d+\s*$")


def sniff(path: PathLike) -> bool:
    """A CSV header with a time column, a device column and one of the columns above, and
    something AMD's: a column only its tools name so, or `cardN` devices."""
    text = head_text(path, 4096)
    if "\x00" in text:
        return False
    lines = text.lstrip("\ufeff").split("\n")
    cols = [c.strip() for c in _header(text)]
    dev = _pick(cols, _DEVICE)
    if dev is None or not any(c in _TIME for c in cols) or not any(c in _ALL for c in cols):
        return False
    if any(_AMD_ONLY.search(c) for c in cols):
        return True
    row = _cells(lines[1]) if len(lines) > 1 else []
    i = cols.index(dev)
    return i < len(row) and _CARD.match(row[i]) is not None


def _pick(cols: list[str], names: tuple[str, ...]) -> str | None:
    return next((c for c in cols if c.strip() in names), None)


def _time_ns(s: pl.Series, path: PathLike, column: str) -> pl.Series:
    text = s.str.strip_chars()
    num = text.cast(pl.Float64, strict=False)
    if num.null_count() == 0:
        secs: pl.Series = (num * 1e9).round().cast(pl.Int64)
        return secs
    zoned = text.str.contains(r"(Z|[+-]\d\d:?\d\d)$")
    try:
        if not zoned.all():
            raise ValueError("naive")
        t = text.str.to_datetime(time_unit="ns").dt.convert_time_zone("UTC")
    except (ValueError, pl.exceptions.PolarsError):
        first = s.filter(num.is_null() | ~zoned)[0]
        raise MalformedInput(
            f"time {first!r} is neither epoch seconds nor ISO-8601 with a zone",
            path=path,
            column=column,
        ) from None
    ns: pl.Series = t.dt.epoch("ns")
    return ns


def _device(s: pl.Series, path: PathLike, column: str) -> pl.Series:
    n: pl.Series = (
        s.str.strip_chars().str.replace(r"^(?i:card|gpu)\s*", "").cast(pl.Int64, strict=False)
    )
    bad = s.filter(n.is_null())
    if bad.len():
        raise MalformedInput(
            f"device {bad[0]!r} is not cardN or an index", path=path, column=column
        )
    return n


def _value(s: pl.Series, path: PathLike, column: str) -> pl.Series:
    text = s.str.strip_chars().replace("", None).replace("N/A", None)
    v: pl.Series = text.cast(pl.Float64, strict=False)
    bad = text.filter(v.is_null() & text.is_not_null())
    if bad.len():
        raise MalformedInput(f"value {bad[0]!r} is not a number", path=path, column=column)
    return v


@reader_entry("rocm_smi_csv")
def read_rocm_smi_csv(path: PathLike) -> Tables:
    """Read a rocm-smi / amd-smi CSV log into `gpu_samples`."""
    raw = read_content(path)
    if not raw.strip():
        raise MalformedInput("empty file", path=path)
    df = pl.read_csv(
        io.BytesIO(raw),
        infer_schema_length=0,
        truncate_ragged_lines=True,
    )
    cols = df.columns
    tcol, dcol = _pick(cols, _TIME), _pick(cols, _DEVICE)
    if tcol is None or dcol is None:
        raise MalformedInput("no time or device column (not a rocm-smi log)", path=path)
    # `<timestamp>,` rows close a sweep: no device, no value; not samples
    df = df.filter(pl.col(dcol).is_not_null() & (pl.col(dcol).str.strip_chars() != ""))
    out = {
        "device_id": _device(df[dcol], path, dcol),
        "timestamp_ns": _time_ns(df[tcol], path, tcol),
    }
    for col, names in _FIELDS.items():
        src = _pick(cols, names)
        if src is not None:
            out[col] = _value(df[src], path, src)
    samples = check_telemetry(pl.DataFrame(out), path=path, reader="rocm_smi_csv")
    tool = "amd-smi" if dcol.lower() == "gpu" else "rocm-smi"
    return Tables.build(
        sources=pl.DataFrame({"tool": [tool], "time_origin_epoch_ns": [0]}),
        gpu_samples=samples,
    )
