"""GPU-to-GPU performance variability across a fleet (SC22 "Not All GPUs Are Created Equal").

One row per GPU, a GPU being a (source_id, device_id) pair: a run's log, trace or sampler file per
device. Steady state only: per GPU the first `warmup` iterations (by iteration number) are dropped;
the default rule is `max(1, floor(10 % of the GPU's iterations))`, the SC22 scripts having dropped
the first iteration and longer runs needing more. Telemetry medians use the samples inside the
steady iterations' time span when iterations have timestamps, else all of the GPU's samples (the
SC22 stdout logs have durations only; `telemetry_window` says which).

Performance is `1 / median iteration time`, normalized to the fleet: `perf_ratio = fleet median of
the GPUs' median iteration times / this GPU's` (> 1 is faster than the typical GPU). Outliers by a
robust z-score on the median iteration time, `z = (x - median) / (1.4826 · MAD)`, flagged when
|z| > 3.5 (Iglewicz & Hoaglin); `rank` 1 is the most deviant GPU.
"""

from __future__ import annotations

import polars as pl

from ..errors import NotAnswerable

Frame = pl.DataFrame | pl.LazyFrame

KEYS: list[str] = ["source_id", "device_id"]
Z_OUTLIER = 3.5


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def steady_iterations(iterations: Frame, *, warmup: int | None = None) -> pl.LazyFrame:
    """Iterations after each GPU's warm-up (see the module doc for the rule)."""
    lf = _lazy(iterations).with_columns(
        pl.coalesce("duration_ns", pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns")
    )
    pos = pl.col("iteration").rank("ordinal").over(KEYS) - 1
    n = pl.len().over(KEYS)
    drop = pl.lit(warmup) if warmup is not None else pl.max_horizontal(pl.lit(1), n // 10)
    return lf.filter(pos >= drop)


def variability(
    iterations: Frame,
    gpu_samples: Frame | None = None,
    kernels: Frame | None = None,
    *,
    warmup: int | None = None,
    top: int = 3,
) -> pl.DataFrame:
    """Per GPU: steady-state medians, fleet-normalized performance, robust z and outlier rank."""
    steady = steady_iterations(iterations, warmup=warmup)
    per = (
        steady.group_by(KEYS)
        .agg(
            pl.len().alias("steady_iteration_count"),
            (pl.col("duration_ns").median() / 1e6).alias("median_iteration_ms"),
            pl.col("images_per_s").median().alias("median_images_per_s"),
            pl.col("start_ns").min().alias("_w0"),
            pl.coalesce("end_ns", pl.col("start_ns") + pl.col("duration_ns")).max().alias("_w1"),
        )
        .collect()
    )
    # Sorted so that ties in the outlier rank break the same way every run.
    per = per.filter(pl.col("median_iteration_ms").is_not_null()).sort(KEYS, nulls_last=True)
    if per.height == 0:
        raise NotAnswerable("no steady-state iterations with durations (after dropping warm-up)")
    if gpu_samples is not None:
        per = per.join(
            _telemetry(gpu_samples, per),
            on=KEYS,
            how="left",
            nulls_equal=True,
            maintain_order="left",
        )
    else:
        per = per.with_columns(
            pl.lit(None, dtype=pl.Float64).alias(c)
            for c in ("median_sm_clock_mhz", "median_power_w", "median_temperature_c")
        ).with_columns(pl.lit("none").alias("telemetry_window"))
    if kernels is not None:
        per = per.join(
            _top_kernels(kernels, top), on=KEYS, how="left", nulls_equal=True, maintain_order="left"
        )
    else:
        per = per.with_columns(pl.lit(None, dtype=pl.Float64).alias("top_kernels_median_ms"))
    per = per.with_columns(pl.col("telemetry_window").fill_null("none"))
    x = pl.col("median_iteration_ms")
    med = x.median()
    mad = (x - med).abs().median()
    z = pl.when(mad > 0).then((x - med) / (1.4826 * mad)).otherwise(0.0)
    out = per.with_columns(
        (med / x).alias("perf_ratio"),
        z.alias("robust_z"),
    ).with_columns(
        (pl.col("robust_z").abs() > Z_OUTLIER).alias("outlier"),
        pl.col("robust_z").abs().rank("ordinal", descending=True).cast(pl.Int64).alias("rank"),
    )
    return out.select(
        *KEYS,
        "steady_iteration_count",
        "median_iteration_ms",
        "median_images_per_s",
        "top_kernels_median_ms",
        "median_sm_clock_mhz",
        "median_power_w",
        "median_temperature_c",
        "telemetry_window",
        "perf_ratio",
        "robust_z",
        "outlier",
        "rank",
    ).sort("rank", *KEYS)


def _telemetry(gpu_samples: Frame, per: pl.DataFrame) -> pl.DataFrame:
    win = per.select(*KEYS, "_w0", "_w1")
    s = (
        _lazy(gpu_samples)
        .select(*KEYS, "timestamp_ns", "sm_clock_mhz", "power_w", "temperature_c")
        .join(win.lazy(), on=KEYS, how="inner", nulls_equal=True)
    )
    timed = pl.col("_w0").is_not_null() & pl.col("_w1").is_not_null()
    in_win = (pl.col("timestamp_ns") >= pl.col("_w0")) & (pl.col("timestamp_ns") <= pl.col("_w1"))
    return (
        s.filter(~timed | in_win)
        .group_by(KEYS)
        .agg(
            pl.col("sm_clock_mhz").median().alias("median_sm_clock_mhz"),
            pl.col("power_w").median().alias("median_power_w"),
            pl.col("temperature_c").median().alias("median_temperature_c"),
            pl.when(timed.first())
            .then(pl.lit("steady"))
            .otherwise(pl.lit("all"))
            .alias("telemetry_window"),
        )
        .collect()
    )


def top_kernel_names(kernels: Frame, top: int) -> list[str]:
    """The fleet's `top` kernel names by total time."""
    dur = pl.coalesce("duration_ns", pl.col("end_ns") - pl.col("start_ns"))
    names = (
        _lazy(kernels)
        .group_by("name")
        .agg(dur.sum().alias("t"))
        .sort(["t", "name"], descending=[True, False])
        .head(top)
        .collect()
    )
    return [str(n) for n in names["name"].to_list()]


def kernel_medians(kernels: Frame, names: list[str]) -> pl.DataFrame:
    """Per GPU and kernel name (in `names`): launch count and median duration in ms."""
    dur = pl.coalesce("duration_ns", pl.col("end_ns") - pl.col("start_ns"))
    return (
        _lazy(kernels)
        .filter(pl.col("name").is_in(names))
        .group_by(*KEYS, "name")
        .agg(pl.len().alias("launch_count"), (dur.median() / 1e6).alias("median_ms"))
        .sort([*KEYS, "name"], nulls_last=True)
        .collect()
    )


def _top_kernels(kernels: Frame, top: int) -> pl.DataFrame:
    # Sum of the medians of the fleet's top kernels: one comparable number per GPU.
    names = top_kernel_names(kernels, top)
    km = kernel_medians(kernels, names)
    return km.group_by(KEYS).agg(
        pl.when(pl.len() == len(names))
        .then(pl.col("median_ms").sum())
        .otherwise(None)
        .alias("top_kernels_median_ms")
    )
