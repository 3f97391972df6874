"""Per-source overview: kernels, top kernels, copies, telemetry, iterations.

Every function takes a LazyFrame or DataFrame of one schema table (any number of sources) and
returns a DataFrame keyed by `source_id`. They stay lazy until the end so that a store of many
sources is scanned, not loaded.
"""

from __future__ import annotations

import polars as pl

Frame = pl.DataFrame | pl.LazyFrame

TELEMETRY_COLUMNS: tuple[str, ...] = (
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "temperature_c",
    "fan_pct",
    "gpu_util_pct",
)


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def _dur() -> pl.Expr:
    # duration_ns where given, else end - start.
    return pl.coalesce(pl.col("duration_ns"), pl.col("end_ns") - pl.col("start_ns"))


def kernel_overview(kernels: Frame) -> pl.DataFrame:
    """Per source: kernel count, total kernel time, devices, distinct kernel names."""
    return (
        _lazy(kernels)
        .group_by("source_id")
        .agg(
            pl.len().alias("kernel_count"),
            _dur().sum().alias("total_kernel_ns"),
            pl.col("device_id").n_unique().alias("device_count"),
            pl.col("name").n_unique().alias("distinct_name_count"),
        )
        .sort("source_id")
        .collect()
    )


def top_kernels(kernels: Frame, n: int = 10) -> pl.DataFrame:
    """Per source, the `n` kernels (by name) with the most total time, with their share in %."""
    lf = _lazy(kernels).with_columns(_dur().alias("_d"))
    return (
        lf.group_by("source_id", "name")
        .agg(
            pl.len().alias("launch_count"),
            pl.col("_d").sum().alias("total_ns"),
            pl.col("_d").mean().alias("mean_ns"),
        )
        .with_columns(
            (100.0 * pl.col("total_ns") / pl.col("total_ns").sum().over("source_id")).alias(
                "share_pct"
            )
        )
        .sort(["source_id", "total_ns", "name"], descending=[False, True, False])
        .group_by("source_id", maintain_order=True)
        .head(n)
        .collect()
    )


def copies_by_kind(memcpy: Frame) -> pl.DataFrame:
    """Per source and copy kind: count, bytes, time."""
    return (
        _lazy(memcpy)
        .group_by("source_id", "kind")
        .agg(
            pl.len().alias("copy_count"),
            pl.col("size_bytes").sum().alias("total_bytes"),
            _dur().sum().alias("total_ns"),
        )
        .sort(["source_id", "total_ns", "kind"], descending=[False, True, False])
        .collect()
    )


def telemetry_stats(gpu_samples: Frame) -> pl.DataFrame:
    """Per source, device and telemetry column: sample count, min, median, max (nulls ignored)."""
    lf = _lazy(gpu_samples)
    long = lf.select("source_id", "device_id", *TELEMETRY_COLUMNS).unpivot(
        index=["source_id", "device_id"], variable_name="metric", value_name="v"
    )
    return (
        long.drop_nulls("v")
        .group_by("source_id", "device_id", "metric")
        .agg(
            pl.len().alias("sample_count"),
            pl.col("v").min().alias("min"),
            pl.col("v").median().alias("median"),
            pl.col("v").max().alias("max"),
        )
        .with_columns(
            pl.col("metric")
            .replace_strict({m: i for i, m in enumerate(TELEMETRY_COLUMNS)}, return_dtype=pl.Int64)
            .alias("_o")
        )
        .sort(["source_id", "device_id", "_o"], nulls_last=True)
        .drop("_o")
        .collect()
    )


def iteration_stats(iterations: Frame) -> pl.DataFrame:
    """Per source and device: iteration count and duration statistics in ms, images/s median."""
    ms = pl.col("duration_ns") / 1e6
    return (
        _lazy(iterations)
        .group_by("source_id", "device_id")
        .agg(
            pl.len().alias("iteration_count"),
            ms.mean().alias("mean_ms"),
            ms.median().alias("median_ms"),
            ms.min().alias("min_ms"),
            ms.max().alias("max_ms"),
            ms.std().alias("std_ms"),
            pl.col("images_per_s").median().alias("median_images_per_s"),
        )
        .sort(["source_id", "device_id"], nulls_last=True)
        .collect()
    )
