"""GPU-to-GPU performance variability across a fleet (SC22 "Not All GPUs Are Created Equal").

One row per GPU, a GPU being a (source_id, device_id) pair of the `iterations` table: a run's
log, trace or sampler file per device (device_id may be null: PyTorch `ProfilerStep` ranges and
host-side iteration logs do not say which GPU). Steady state only: per GPU the first `warmup`
iterations (by iteration number) are dropped by the one warm-up rule of `analyses.warmup` (a
collect run's own --warmup, else `max(1, floor(10 % of the GPU's iterations))`, the SC22 scripts
having dropped the first iteration and longer runs needing more).

Telemetry: the samples are paired with each GPU by `telemetry.pair_samples` — the GPU's own
source's samples, else another source's (an NVML or nvidia-smi log of the same run) whose epoch
time span overlaps, aligned through `sources.time_origin_epoch_ns`; device ids matched where both
sides know them, a null device resolved only when the samples cover exactly one device, otherwise
a warning and nulls. `samples_source_id`/`samples_device_id` say where the values came from.
Medians use the samples inside the steady iterations' time span when iterations have timestamps,
else all of the paired series' samples (the SC22 stdout logs have durations only; then only a
source's own samples can be paired, and `telemetry_window` says "all").

Top kernels: the fleet's `top` kernel names by total time; per GPU and per kernel the median
launch duration, as columns `top<i>_kernel` (the name) and `top<i>_median_ms` (null when the GPU
never ran it). A GPU whose device is null takes its source's kernels when they ran on one device.

Performance is `1 / median iteration time`, normalized to the fleet: `perf_ratio = fleet median of
the GPUs' median iteration times / this GPU's` (> 1 is faster than the typical GPU).

Outliers, by a robust z-score on the median iteration time x (Iglewicz & Hoaglin's modified z;
the MAD = 0 fallback as in IBM SPSS's "modified z"):

* `z = (x - median) / (1.4826 · MAD)` when MAD > 0 (`z_scale = "mad"`);
* when MAD = 0 (more than half of the GPUs have exactly the fleet median) but some GPUs differ,
  `z = (x - median) / (1.2533 · MeanAD)`, MeanAD the mean absolute deviation from the median
  (`z_scale = "meanad"`): the scale is then never 0, so a GPU that differs gets a finite z that
  grows with its deviation (fleet 100, 100, 100, 100, 200 ms: MeanAD 20, z = 100 / 25.07 ≈ 3.99);
* when every deviation is 0, every z is 0 and there is no outlier (`z_scale = "none"`).

An infinite z could only come from dividing a non-zero deviation by a zero scale, which these
rules exclude (MeanAD is 0 only when every deviation is). A GPU is an `outlier` when |z| > 3.5;
`rank` 1 is the most deviant GPU (ties broken by source and device).
"""

from __future__ import annotations

import warnings

import polars as pl

from ..errors import NotAnswerable
from .naming import source_name, source_paths
from .telemetry import pair_samples, paired_samples
from .warmup import steady

Frame = pl.DataFrame | pl.LazyFrame

KEYS: list[str] = ["source_id", "device_id"]
Z_OUTLIER = 3.5
MAD_K = 1.4826  # 1 / Φ⁻¹(3/4): MAD -> σ for normal data
MEANAD_K = 1.2533  # √(π/2): mean absolute deviation -> σ for normal data
TELEMETRY = ("median_sm_clock_mhz", "median_power_w", "median_temperature_c")


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def steady_iterations(
    iterations: Frame, *, warmup: int | None = None, first_steady: int | None = None
) -> pl.LazyFrame:
    """Iterations after each GPU's warm-up (`analyses.warmup`, the one rule)."""
    lf = _lazy(iterations).with_columns(
        pl.coalesce("duration_ns", pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns")
    )
    return steady(lf, KEYS, warmup=warmup, first_steady=first_steady)


def robust_z(x: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(z, scale name) for the values of `x` over the frame (the module doc's rule)."""
    dev = x - x.median()
    mad = dev.abs().median()
    meanad = dev.abs().mean()
    scale = (
        pl.when(mad > 0).then(MAD_K * mad).when(meanad > 0).then(MEANAD_K * meanad).otherwise(None)
    )
    z = pl.when(scale.is_not_null()).then(dev / scale).otherwise(0.0)
    name = (
        pl.when(mad > 0)
        .then(pl.lit("mad"))
        .when(meanad > 0)
        .then(pl.lit("meanad"))
        .otherwise(pl.lit("none"))
    )
    return z, name


def variability(
    iterations: Frame,
    gpu_samples: Frame | None = None,
    kernels: Frame | None = None,
    *,
    warmup: int | None = None,
    top: int = 3,
    sources: Frame | None = None,
    first_steady: int | None = None,
) -> pl.DataFrame:
    """Per GPU: steady-state medians, fleet-normalized performance, robust z and outlier rank.

    `sources` (the sources table) lets samples of other sources be paired through epoch origins
    and lets warnings name files; without it only each source's own samples are used.
    """
    per = _per_gpu(steady_iterations(iterations, warmup=warmup, first_steady=first_steady))
    per = _with_telemetry(per, gpu_samples, sources)
    per = per.with_columns(pl.col("telemetry_window").fill_null("none"))
    top_cols: list[str] = []
    if kernels is not None:
        tk, top_cols = _top_kernels(kernels, per.select(KEYS), top, sources)
        per = per.join(tk, on=KEYS, how="left", nulls_equal=True, maintain_order="left")
    z, scale = robust_z(pl.col("median_iteration_ms"))
    out = per.with_columns(
        (pl.col("median_iteration_ms").median() / pl.col("median_iteration_ms")).alias(
            "perf_ratio"
        ),
        z.alias("robust_z"),
        scale.alias("z_scale"),
    ).with_columns(
        (pl.col("robust_z").abs() > Z_OUTLIER).alias("outlier"),
        pl.col("robust_z").abs().rank("ordinal", descending=True).cast(pl.Int64).alias("rank"),
    )
    return out.select(
        *KEYS,
        "steady_iteration_count",
        "median_iteration_ms",
        "median_images_per_s",
        *top_cols,
        *TELEMETRY,
        "telemetry_window",
        "samples_source_id",
        "samples_device_id",
        "perf_ratio",
        "robust_z",
        "z_scale",
        "outlier",
        "rank",
    ).sort("rank", *KEYS)


def _per_gpu(steady: pl.LazyFrame) -> pl.DataFrame:
    """Per GPU (`KEYS`): steady iteration count, medians and the steady window (`_w0`, `_w1`);
    NotAnswerable when no GPU has a steady iteration with a duration."""
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
    return per


def _with_telemetry(
    per: pl.DataFrame, gpu_samples: Frame | None, sources: Frame | None
) -> pl.DataFrame:
    """`per` with each GPU's telemetry over its steady window (nulls and "none" without)."""
    tel = None if gpu_samples is None else _telemetry(gpu_samples, per, sources)
    if tel is not None:
        return per.join(tel, on=KEYS, how="left", nulls_equal=True, maintain_order="left")
    return per.with_columns(
        *[pl.lit(None, dtype=pl.Float64).alias(c) for c in TELEMETRY],
        pl.lit(None, dtype=pl.String).alias("samples_source_id"),
        pl.lit(None, dtype=pl.Int64).alias("samples_device_id"),
        pl.lit("none").alias("telemetry_window"),
    )


def _telemetry(gpu_samples: Frame, per: pl.DataFrame, sources: Frame | None) -> pl.DataFrame:
    cols = ["source_id", "device_id", "timestamp_ns", "sm_clock_mhz", "power_w", "temperature_c"]
    smp = _lazy(gpu_samples).select(cols)
    gpus = per.select(*KEYS, pl.col("_w0").alias("start_ns"), pl.col("_w1").alias("end_ns"))
    pairs = pair_samples(gpus, smp, sources, what="iterations")
    win = (
        pairs.with_row_index("_g")
        .with_columns(pl.col("_g").cast(pl.Int64))
        .join(per.select(*KEYS, "_w0", "_w1"), on=KEYS, how="left", nulls_equal=True)
    )
    timed = pl.col("_w0").is_not_null() & pl.col("_w1").is_not_null()
    in_win = (pl.col("timestamp_ns") >= pl.col("_w0")) & (pl.col("timestamp_ns") <= pl.col("_w1"))
    med = (
        paired_samples(smp, pairs)
        .join(win.select("_g", "_w0", "_w1").lazy(), on="_g", how="inner")
        .filter(~timed | in_win)
        .group_by("_g")
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
    return win.join(med, on="_g", how="left").select(
        *KEYS, *TELEMETRY, "telemetry_window", "samples_source_id", "samples_device_id"
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


def _top_kernels(
    kernels: Frame, gpus: pl.DataFrame, top: int, sources: Frame | None
) -> tuple[pl.DataFrame, list[str]]:
    """Wide per-GPU columns `top<i>_kernel`, `top<i>_median_ms` for the fleet's top kernels."""
    names = top_kernel_names(kernels, top)
    cols = [c for i in range(1, len(names) + 1) for c in (f"top{i}_kernel", f"top{i}_median_ms")]
    km = kernel_medians(kernels, names)
    # A GPU of unknown device (ProfilerStep iterations) takes its source's kernels when those ran
    # on one device; on several, which one the iterations belong to is not known: say so.
    kdev = km.group_by("source_id").agg(pl.col("device_id").unique().alias("_devs"))
    resolved = gpus.join(kdev, on="source_id", how="left").with_columns(
        pl.when(pl.col("device_id").is_not_null())
        .then(pl.col("device_id"))
        .when(pl.col("_devs").list.len() == 1)
        .then(pl.col("_devs").list.first())
        .alias("_kdev")
    )
    amb = resolved.filter(pl.col("device_id").is_null() & (pl.col("_devs").list.len() > 1))
    if amb.height:
        paths = source_paths(sources)
        warnings.warn(
            "top kernels left null for "
            + ", ".join(
                f"{source_name(paths, s)} (iterations of unknown device; kernels on devices "
                f"{', '.join(str(d) for d in sorted(x for x in ds if x is not None))})"
                for s, ds in amb.select("source_id", "_devs").iter_rows()
            ),
            stacklevel=3,
        )
    out = resolved.select(*KEYS, "_kdev")
    for i, name in enumerate(names, start=1):
        one = km.filter(pl.col("name") == name).select(
            "source_id", pl.col("device_id").alias("_kdev"), pl.col("median_ms")
        )
        out = (
            out.join(one, on=["source_id", "_kdev"], how="left", nulls_equal=False)
            .with_columns(
                pl.lit(name).alias(f"top{i}_kernel"),
                pl.col("median_ms").alias(f"top{i}_median_ms"),
            )
            .drop("median_ms")
        )
    return out.select(*KEYS, *cols), cols
