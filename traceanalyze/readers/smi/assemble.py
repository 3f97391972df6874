"""nvidia-smi CSV: the fields it knows, their units, numbers from cells, and the tables built from
parsed columns (the fast and the careful path both end in `_assemble`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import polars as pl

from ...errors import MalformedInput, UnknownUnit
from ...tables import Tables
from ..common.core import TIME_TO_NS, PathLike, warn
from .variants import build_tables

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
# Cells read as null: the tokens with and without the space that follows nvidia-smi's ", ".
_SMI_NULL_CELLS = [*_NULL_TOKENS, *(" " + t for t in _NULL_TOKENS)]
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_Numbers = Callable[[str, bool], tuple[str | None, pl.Series | None]]


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
    numbers: _Numbers = functools.partial(_documented_unit, stated)
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

    gpu_metrics = _gpu_metrics(base, used, numbers, out.get("device_id"), ts, height)
    devices = _devices(base, numbers, out.get("device_id"), text, distinct_devices)
    return build_tables(
        sources=pl.DataFrame(
            {"tool": ["nvidia-smi"], "time_origin_epoch_ns": [0], "timezone": [zone]}
        ),
        gpu_samples=samples,
        gpu_metrics=gpu_metrics,
        devices=devices,
    )


def _documented_unit(
    stated: _Numbers, f: str, optional: bool
) -> tuple[str | None, pl.Series | None]:
    """`stated(f, optional)`, a field without units converted from its documented unit."""
    # A field without any unit (`nounits`) is in the unit nvidia-smi documents for it, so
    # `memory.used` is bytes whether or not the log was written with units.
    unit, vals = stated(f, optional)
    default = _nounits_unit(f) if unit is None and vals is not None else None
    if default is None or vals is None:
        return unit, vals
    b, factor = SMI_UNITS[default]
    return b, vals * factor if factor != 1.0 else vals


def _gpu_metrics(
    base: list[str],
    used: set[str],
    numbers: _Numbers,
    device_id: pl.Series | None,
    ts: pl.Series,
    height: int,
) -> pl.DataFrame | None:
    """The numeric fields not used for `gpu_samples`, long (one row per sample and field)."""
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
                    "device_id": (
                        device_id
                        if device_id is not None
                        else pl.repeat(None, height, dtype=pl.Int64, eager=True)
                    ),
                    "timestamp_ns": ts,
                    "metric_name": pl.repeat(f, height, dtype=pl.String, eager=True),
                    "unit": pl.repeat(unit, height, dtype=pl.String, eager=True),
                    "value": vals,
                }
            ).drop_nulls("value")
        )
    return pl.concat(metrics) if metrics else None


def _devices(
    base: list[str],
    numbers: _Numbers,
    device_id: pl.Series | None,
    text: dict[str, pl.Series],
    distinct_devices: pl.DataFrame | None,
) -> pl.DataFrame | None:
    """The distinct devices (id, uuid, name, memory where the log has them), vendor NVIDIA."""
    dev_cols = {}
    if device_id is not None:
        dev_cols["device_id"] = device_id
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
    return devices


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
    return _in_base_unit(col, num, vunit, header_unit, path, line_of)


def _in_base_unit(
    col: str,
    num: pl.Series,
    vunit: pl.Series,
    header_unit: str | None,
    path: PathLike,
    line_of: Any,
) -> tuple[str | None, pl.Series]:
    """(base unit, values in it) from the numbers and their units (values' and header's)."""
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
