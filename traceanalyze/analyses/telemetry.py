"""Telemetry attribution: SM clock, power and temperature per kernel or iteration; energy.

Rule (stated once, used everywhere): a telemetry sample holds its value from its timestamp until the
next sample of the same (source, device) — *sample-and-hold*, a step function. The mean over an
interval `[s, e]` is the time-weighted mean of that step function, `∫ v dt / (e - s)`, computed from
a cumulative integral `I(t)` at the sample times and one `join_asof` (backward) for each end of
every interval; no Python loop per interval. Energy is `∫ power dt` in joules.

Coverage: an interval is `outside` when it is not inside the sampled span `[first, last sample]`
(values null), `coarse` when fewer than 2 samples fall inside it or it is shorter than the median
sampling period (values null: a 50 µs kernel under 50 ms sampling only sees one held sample, and
the mean would be that sample, not a measurement of the kernel), else `ok`.

Clocks: samples and intervals of the same source share a clock. Samples from another source are
moved onto the interval source's clock only through recorded epoch origins
(`sources.time_origin_epoch_ns`); if either is null the answer is NotAnswerable.
"""

from __future__ import annotations

import polars as pl

from ..errors import NotAnswerable

Frame = pl.DataFrame | pl.LazyFrame

METRICS: tuple[str, ...] = ("sm_clock_mhz", "power_w", "temperature_c")


def _collect(df: Frame) -> pl.DataFrame:
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def align_samples(samples: Frame, sources: Frame, to_source: str) -> pl.DataFrame:
    """Samples of other sources moved onto `to_source`'s clock via epoch origins.

    `t' = t + origin(sample source) - origin(to_source)`; `source_id` becomes `to_source`.
    """
    src = _collect(sources).select("source_id", "time_origin_epoch_ns")
    smp = _collect(samples)
    origins = dict(src.iter_rows())
    target = origins.get(to_source)
    if target is None:
        raise NotAnswerable(
            f"source {to_source} has no recorded epoch origin (time_origin_epoch_ns); "
            "samples from another source cannot be aligned to it"
        )
    others = [s for s in smp["source_id"].unique().to_list() if s != to_source]
    bad = [s for s in others if origins.get(s) is None]
    if bad:
        raise NotAnswerable(
            f"source(s) {', '.join(sorted(bad))} have no recorded epoch origin; "
            "their samples cannot be aligned to another source's clock"
        )
    shift = pl.col("source_id").replace_strict(
        {s: origins[s] - target for s in smp["source_id"].unique().to_list()},
        return_dtype=pl.Int64,
    )
    return smp.with_columns(
        (pl.col("timestamp_ns") + shift).alias("timestamp_ns"),
        pl.lit(to_source).alias("source_id"),
    ).sort("source_id", "device_id", "timestamp_ns")


def _cumulative(samples: pl.DataFrame, metric: str) -> pl.DataFrame:
    """Per (source, device): sample times, held value and cumulative integral up to each sample."""
    keys = ["source_id", "device_id"]
    s = (
        samples.select(*keys, "timestamp_ns", metric)
        .drop_nulls(metric)
        .sort([*keys, "timestamp_ns"])
        .unique([*keys, "timestamp_ns"], keep="last", maintain_order=True)
    )
    dt = (pl.col("timestamp_ns").shift(-1).over(keys) - pl.col("timestamp_ns")).fill_null(0)
    return s.with_columns(
        pl.col(metric).alias("_v"),
        (pl.col(metric) * dt.cast(pl.Float64))
        .cum_sum()
        .shift(1)
        .over(keys)
        .fill_null(0.0)
        .alias("_I"),
        pl.int_range(pl.len()).over(keys).alias("_n"),
        pl.col("timestamp_ns").min().over(keys).alias("_first"),
        pl.col("timestamp_ns").max().over(keys).alias("_last"),
        pl.col("timestamp_ns").diff().median().over(keys).alias("_period"),
    ).select(*keys, "timestamp_ns", "_v", "_I", "_n", "_first", "_last", "_period")


def attribute(
    intervals: Frame, samples: Frame, *, id_columns: list[str] | None = None
) -> pl.DataFrame:
    """Time-weighted mean SM clock, power and temperature over each interval; energy in J.

    `intervals` needs source_id, device_id, start_ns, end_ns (kernels, iterations, or any frame
    with those); `id_columns` are carried through (default: every other column). Samples must be on
    the same clock (same source, or aligned with `align_samples`). Adds per metric
    `<metric>` (mean), `<metric>_samples_count`, and `energy_j`, `coverage`.
    """
    iv = _collect(intervals)
    sm = _collect(samples)
    need = {"source_id", "device_id", "start_ns", "end_ns"}
    if not need <= set(iv.columns):
        raise NotAnswerable(f"intervals lack {sorted(need - set(iv.columns))}")
    iv = iv.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    if iv.height == 0:
        raise NotAnswerable("no intervals with start and end times (iterations need timestamps)")
    if sm.height == 0:
        raise NotAnswerable("no telemetry samples for these sources")
    keys = ["source_id", "device_id"]
    common = set(iv["source_id"].unique().to_list()) & set(sm["source_id"].unique().to_list())
    if not common:
        raise NotAnswerable(
            "telemetry samples come from other sources; align them first (align_samples, "
            "needs epoch origins)"
        )
    carry = id_columns if id_columns is not None else [c for c in iv.columns if c not in need]
    base = iv.select(*keys, *carry, "start_ns", "end_ns").with_row_index("_row")
    out = base.sort("start_ns")
    for metric in METRICS:
        if metric not in sm.columns:
            continue
        cum = _cumulative(sm, metric)
        if cum.height == 0:
            out = out.with_columns(
                pl.lit(None, dtype=pl.Float64).alias(metric),
                pl.lit(0, dtype=pl.Int64).alias(f"{metric}_samples_count"),
            )
            continue
        per = cum.select(*keys, "_first", "_last", "_period").unique(keys)
        at_s = cum.rename({c: f"{c}_s" for c in ("timestamp_ns", "_v", "_I", "_n")}).drop(
            "_first", "_last", "_period"
        )
        at_e = cum.rename({c: f"{c}_e" for c in ("timestamp_ns", "_v", "_I", "_n")}).drop(
            "_first", "_last", "_period"
        )
        j = (
            out.sort("start_ns")
            .join_asof(
                at_s.sort("timestamp_ns_s"),
                left_on="start_ns",
                right_on="timestamp_ns_s",
                by=keys,
                strategy="backward",
                check_sortedness=False,
            )
            .sort("end_ns")
            .join_asof(
                at_e.sort("timestamp_ns_e"),
                left_on="end_ns",
                right_on="timestamp_ns_e",
                by=keys,
                strategy="backward",
                check_sortedness=False,
            )
            .join(per, on=keys, how="left", nulls_equal=True)
        )
        integ = (
            pl.col("_I_e") + pl.col("_v_e") * (pl.col("end_ns") - pl.col("timestamp_ns_e"))
        ) - (pl.col("_I_s") + pl.col("_v_s") * (pl.col("start_ns") - pl.col("timestamp_ns_s")))
        dur = (pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64)
        # Samples with s <= t <= e: index of last sample <= e minus index of last sample < s.
        n_in = pl.col("_n_e") - pl.col("_n_s") + (pl.col("timestamp_ns_s") == pl.col("start_ns"))
        n_in = pl.when(pl.col("_n_s").is_null()).then(pl.col("_n_e") + 1).otherwise(n_in)
        inside = (pl.col("start_ns") >= pl.col("_first")) & (pl.col("end_ns") <= pl.col("_last"))
        coarse = (n_in < 2) | (dur < pl.col("_period"))
        j = j.with_columns(
            pl.coalesce(n_in, pl.lit(0)).cast(pl.Int64).alias(f"{metric}_samples_count"),
            pl.when(inside.fill_null(False).not_())
            .then(pl.lit("outside"))
            .when(coarse.fill_null(True))
            .then(pl.lit("coarse"))
            .otherwise(pl.lit("ok"))
            .alias(f"_cov_{metric}"),
            (integ / dur).alias(f"_mean_{metric}"),
            integ.alias(f"_int_{metric}"),
        ).with_columns(
            pl.when(pl.col(f"_cov_{metric}") == "ok").then(pl.col(f"_mean_{metric}")).alias(metric),
        )
        if metric == "power_w":
            j = j.with_columns(
                pl.when(pl.col(f"_cov_{metric}") == "ok")
                .then(pl.col("_int_power_w") / 1e9)
                .alias("energy_j")
            )
        keep = [*out.columns, metric, f"{metric}_samples_count", f"_cov_{metric}"]
        if metric == "power_w":
            keep.append("energy_j")
        out = j.select(keep)
    covs = [c for c in out.columns if c.startswith("_cov_")]
    if not covs:
        raise NotAnswerable("samples have none of " + ", ".join(METRICS))
    # Overall coverage: the worst over the metrics present (outside > coarse > ok).
    rank = {"ok": 0, "coarse": 1, "outside": 2}
    out = out.with_columns(
        pl.max_horizontal([pl.col(c).replace_strict(rank, return_dtype=pl.Int8) for c in covs])
        .replace_strict({v: k for k, v in rank.items()}, return_dtype=pl.String)
        .alias("coverage")
    ).drop(covs)
    for metric in METRICS:
        if metric not in out.columns:
            out = out.with_columns(
                pl.lit(None, dtype=pl.Float64).alias(metric),
                pl.lit(0, dtype=pl.Int64).alias(f"{metric}_samples_count"),
            )
    if "energy_j" not in out.columns:
        out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias("energy_j"))
    return (
        out.sort("_row")
        .drop("_row")
        .select(
            *keys,
            *carry,
            "start_ns",
            "end_ns",
            *METRICS,
            *[f"{m}_samples_count" for m in METRICS],
            "energy_j",
            "coverage",
        )
    )


def attribute_kernels(kernels: Frame, samples: Frame) -> pl.DataFrame:
    """`attribute` over kernels, keeping kernel_id, stream_id and name."""
    k = _lazy_select(
        kernels, ["source_id", "device_id", "kernel_id", "stream_id", "name", "start_ns", "end_ns"]
    )
    return attribute(k, samples, id_columns=["kernel_id", "stream_id", "name"])


def attribute_iterations(iterations: Frame, samples: Frame) -> pl.DataFrame:
    """`attribute` over iterations (energy per iteration in J), keeping iteration and duration."""
    it = _collect(
        iterations.lazy().select(
            "source_id",
            "device_id",
            "iteration",
            "start_ns",
            pl.coalesce("end_ns", pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns"),
        )
    )
    return attribute(it, samples, id_columns=["iteration"])


def _lazy_select(df: Frame, cols: list[str]) -> pl.DataFrame:
    return _collect(df.lazy().select(cols))
