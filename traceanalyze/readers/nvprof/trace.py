"""nvprof CSV: a GPU/API trace table (`--print-gpu-trace`, `--print-api-trace`) into kernels,
memcpy, api_calls and gpu_samples."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ...errors import MalformedInput
from ..common.core import (
    NVPROF_RATE_TO_BYTES_PER_S,
    NVPROF_SIZE_TO_BYTES,
    TIME_TO_NS,
    PathLike,
    lazy_import,
    warn,
)
from .rows import (
    _IGNORED_COLS,
    _INT_COLS,
    _RATE_COLS,
    _SAMPLE_NAMES,
    _SIZE_COLS,
    _STR_COLS,
    _TIME_COLS,
    _device_ids,
    _device_type,
    _factor,
    _first_bad,
    _line_of_row,
    _missing,
    _Out,
    _read_rows,
    _stem_of,
    _strip_id_suffix,
    _to_polars,
)
from .split import _Raw, _Section

if TYPE_CHECKING:
    import pyarrow as pa
else:  # imported on first use, so format detection stays light
    pa = lazy_import("pyarrow")


def _trace(raw: _Raw, sec: _Section, path: PathLike, out: _Out) -> None:
    df = _trace_frame(raw, sec, path, out)
    _kernels_and_api_calls(df, sec, out)
    _bracketed(df, raw, sec, path, out)


def _trace_table(raw: _Raw, sec: _Section, path: PathLike, out: _Out) -> pa.Table:
    """The section's rows, typed, with device ids; the checked-not-stored columns dropped."""
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
    if extra and not sec.warned:  # after the parse, which may be retried; once per section
        sec.warned = True
        warn(f"{path}: nvprof trace columns ignored: {', '.join(extra)}")
    if "Device" in hdr:
        tbl = _device_ids(tbl, raw, sec, path, out.devices)
    tbl = tbl.drop_columns([c for c in (*_RATE_COLS, *_IGNORED_COLS) if c in hdr])

    return tbl


def _conversions(raw: _Raw, sec: _Section, path: PathLike, tbl: pa.Table) -> list[pl.Expr]:
    """Per time and size column, the expression that converts it by its units row."""
    hdr = sec.header
    n = tbl.num_rows
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
    return conv


def _trace_frame(raw: _Raw, sec: _Section, path: PathLike, out: _Out) -> pl.DataFrame:
    """The section as a frame in ns and bytes, with `_bracketed`; its first bad row raised."""
    hdr = sec.header
    tbl = _trace_table(raw, sec, path, out)
    conv = _conversions(raw, sec, path, tbl)
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
        _raise_bad_row(df, bad, raw, sec, path, converted)
    return df.drop("_lost")


def _raise_bad_row(
    df: pl.DataFrame, bad: int, raw: _Raw, sec: _Section, path: PathLike, converted: list[str]
) -> None:
    """Raise for row `bad`: the value that did not convert, or the Name/Start/Duration missing."""
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
    raise MalformedInput(f"{row['Name']!r} row without a {col}", path=path, line=line, column=col)


def _shared_columns(sec: _Section) -> tuple[pl.Expr, list[pl.Expr], list[pl.Expr]]:
    """The process id, the time columns, and the ids (process, device, context, stream)."""
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

    return pid, times, common


def _kernels_and_api_calls(df: pl.DataFrame, sec: _Section, out: _Out) -> None:
    hdr = sec.header
    pid, times, common = _shared_columns(sec)
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


def _bracketed(df: pl.DataFrame, raw: _Raw, sec: _Section, path: PathLike, out: _Out) -> None:
    """Rows whose Name is bracketed: memcpy/memset, system samples, and kinds skipped (warned)."""
    _, times, common = _shared_columns(sec)
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
    for nm, c in other["Name"].value_counts().rows():
        out.skipped[nm] = out.skipped.get(nm, 0) + c


def warn_skipped(out: _Out, path: PathLike) -> None:
    """The note for the rows of unsupported kinds a section had (given when the section ends:
    the streaming reader sees it block by block), most frequent kinds first."""
    if out.skipped:
        counts = sorted(out.skipped.items(), key=lambda kv: (-kv[1], kv[0]))
        listed = ", ".join(f"{nm} ×{c}" for nm, c in counts[:5])
        total = sum(out.skipped.values())
        warn(f"{path}: skipped {total} nvprof row(s) of unsupported kinds: {listed}")
        out.skipped.clear()


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
        # mW × 0.001, not / 1000: polars divides a one-row frame exactly but multiplies longer
        # ones by the reciprocal (1 ulp apart), and a frame's rows must not depend on its length
        # (the streaming reader parses the same rows in blocks).
        pl.when(kind == "power").then(first * 1e-3).alias("power_w"),
        pl.when(kind == "power").then(second * 1e-3).alias("power_limit_w"),
        pl.when(kind == "temperature").then(first).alias("temperature_c"),
        pl.when(kind == "fan").then(first).alias("fan_pct"),
    )
