"""nvprof CSV: the summary table, `--metrics`/`--events` summaries and per-instance
(`--print-metric-trace`) tables."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import polars as pl

from ...errors import MalformedInput, UnknownUnit
from ..common.core import TIME_TO_NS, PathLike, lazy_import
from .rows import (
    _LEVEL,
    _METRIC_UNITS,
    _NUMBER_WITH_UNIT,
    _device_ids,
    _device_type,
    _factor,
    _first_bad,
    _line_of_row,
    _missing,
    _Out,
    _read_rows,
    _to_polars,
)
from .split import _header_line, _Raw, _Section, _units_line

if TYPE_CHECKING:
    import pyarrow as pa
else:  # imported on first use, so format detection stays light
    pa = lazy_import("pyarrow")

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
    assert sec.units is not None
    pct_unit = sec.units[sec.header.index("Time(%)")].strip()
    if pct_unit != "%":
        raise UnknownUnit(
            f"unknown unit {pct_unit!r} for Time(%) (expected '%')",
            path=path,
            line=_units_line(raw, sec),
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
    # One frame per quantity, in this order (the streaming reader keeps each apart until the
    # section ends: the table has one quantity's rows after another).
    out.kernel_metrics.extend(f.with_columns(pid) for f in frames)


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
    distinct = _known_units(units, values, sec, raw, path)
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


def _known_units(
    units: pl.Series, values: pl.Series, sec: _Section, raw: _Raw, path: PathLike
) -> list[str]:
    """The distinct units of a column; UnknownUnit naming the first value with an unknown one."""
    distinct = [u for u in units.unique().to_list() if u is not None]
    for u in distinct:
        if u not in _METRIC_UNITS:
            i = int((units == u).arg_true()[0])
            raise UnknownUnit(
                f"unknown unit {u!r} in metric value {values[i]!r} "
                f"(known: {', '.join(k for k in _METRIC_UNITS if k)})",
                path=path,
                line=_line_of_row(sec, raw, i),
                column=values.name,
            )
    return distinct


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
            line=_header_line(raw, sec),
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
