"""Compare two sources (or two runs) A and B: kernels, iterations, throughput, telemetry.

Kernels are matched by name and launch configuration (grid x/y/z, block x/y/z; null geometry
matches null). Match coverage is the share of each side's kernel time whose key also occurs on
the other side: a comparison over 40 % of the time says little about the rest.

`compare_kernels` returns one row per key; `compare_overview` a metric/a/b/delta/ratio table
(delta = b − a, ratio = b / a).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import polars as pl

from ..errors import NotAnswerable
from .naming import source_name

Frame = pl.DataFrame | pl.LazyFrame

KERNEL_KEY: list[str] = ["name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]


def _collect(df: Frame) -> pl.DataFrame:
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def _dur() -> pl.Expr:
    return pl.coalesce("duration_ns", pl.col("end_ns") - pl.col("start_ns"))


def _side(kernels: pl.DataFrame, sid: str) -> pl.DataFrame:
    return (
        kernels.filter(pl.col("source_id") == sid)
        .group_by(KERNEL_KEY)
        .agg(pl.len().alias("count"), _dur().sum().alias("total_ns"))
    )


def compare_kernels(
    kernels: Frame, a: str, b: str, *, names: Mapping[str, str] | None = None
) -> pl.DataFrame:
    """Per kernel key: launches, total and mean time (µs) on each side, delta and ratio of means.

    `a` and `b` may be the same source (a self-comparison matches everything); `names` maps them
    to what messages call them (file paths), default the ids.
    """
    k = _collect(kernels.lazy().filter(pl.col("source_id").is_in([a, b])))
    ka, kb = _side(k, a), _side(k, b)
    if ka.height == 0 or kb.height == 0:
        empty = [source_name(names, s) for s, d in ((a, ka), (b, kb)) if d.height == 0]
        raise NotAnswerable(f"no kernels in {' and '.join(dict.fromkeys(empty))}")
    j = ka.join(kb, on=KERNEL_KEY, how="full", coalesce=True, nulls_equal=True, suffix="_b")
    j = j.rename({"count": "count_a", "total_ns": "total_ns_a"})
    return (
        j.with_columns(
            (pl.col("total_ns_a") / pl.col("count_a") / 1e3).alias("mean_us_a"),
            (pl.col("total_ns_b") / pl.col("count_b") / 1e3).alias("mean_us_b"),
            (pl.col("total_ns_a") / 1e6).alias("total_ms_a"),
            (pl.col("total_ns_b") / 1e6).alias("total_ms_b"),
        )
        .with_columns(
            (pl.col("mean_us_b") - pl.col("mean_us_a")).alias("delta_mean_us"),
            (pl.col("mean_us_b") / pl.col("mean_us_a")).alias("ratio_mean"),
            (pl.col("count_a").is_not_null() & pl.col("count_b").is_not_null()).alias("matched"),
        )
        .select(
            *KERNEL_KEY,
            "count_a",
            "count_b",
            "total_ms_a",
            "total_ms_b",
            "mean_us_a",
            "mean_us_b",
            "delta_mean_us",
            "ratio_mean",
            "matched",
        )
        .sort(
            pl.max_horizontal(pl.col("total_ms_a").fill_null(0), pl.col("total_ms_b").fill_null(0)),
            "name",
            descending=[True, False],
        )
    )


def compare_overview(
    kernels: Frame,
    iterations: Frame,
    gpu_samples: Frame,
    a: str,
    b: str,
    *,
    names: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Metric, a, b, delta (b − a), ratio (b / a): kernel time, match coverage, iterations,
    images/s, telemetry medians. Rows whose inputs are absent have nulls; kernel rows are left
    out (with a warning naming the side, by `names`) when a side has no kernels, e.g. two
    iteration logs."""
    rows: list[tuple[str, float | None, float | None]] = []
    kc: pl.DataFrame | None
    try:
        kc = compare_kernels(kernels, a, b, names=names)
    except NotAnswerable as e:
        warnings.warn(f"kernel rows left out: {e}", stacklevel=2)
        kc = None
    if kc is not None:
        rows += _kernel_rows(kc)
    it = _collect(
        iterations.lazy()
        .filter(pl.col("source_id").is_in([a, b]))
        .group_by("source_id")
        .agg(
            pl.len().alias("iteration_count"),
            (
                pl.coalesce("duration_ns", pl.col("end_ns") - pl.col("start_ns")).median() / 1e6
            ).alias("median_iteration_ms"),
            pl.col("images_per_s").median().alias("median_images_per_s"),
        )
    )
    tel = _collect(
        gpu_samples.lazy()
        .filter(pl.col("source_id").is_in([a, b]))
        .group_by("source_id")
        .agg(
            pl.col("sm_clock_mhz").median().alias("median_sm_clock_mhz"),
            pl.col("power_w").median().alias("median_power_w"),
            pl.col("temperature_c").median().alias("median_temperature_c"),
        )
    )
    for frame in (it, tel):
        vals = {r["source_id"]: r for r in frame.to_dicts()}
        for col in frame.columns:
            if col == "source_id":
                continue
            va = vals.get(a, {}).get(col)
            vb = vals.get(b, {}).get(col)
            rows.append((col, None if va is None else float(va), None if vb is None else float(vb)))
    counts = {r["source_id"]: r["iteration_count"] for r in it.to_dicts()}
    if kc is not None and counts.get(a) and counts.get(b):
        rows.append(
            (
                "kernel_time_per_iteration_ms",
                float(kc["total_ms_a"].sum()) / counts[a],
                float(kc["total_ms_b"].sum()) / counts[b],
            )
        )
    if all(va is None and vb is None for _, va, vb in rows):
        raise NotAnswerable(
            f"{source_name(names, a)} and {source_name(names, b)} have no kernels, iterations "
            "or telemetry"
        )
    df = pl.DataFrame(
        rows, schema={"metric": pl.String, "a": pl.Float64, "b": pl.Float64}, orient="row"
    )
    return df.with_columns(
        (pl.col("b") - pl.col("a")).alias("delta"),
        pl.when(pl.col("a") != 0).then(pl.col("b") / pl.col("a")).alias("ratio"),
    )


def _kernel_rows(kc: pl.DataFrame) -> list[tuple[str, float | None, float | None]]:
    def total(col: str, matched_only: bool = False) -> float:
        c = pl.col(col)
        return float(kc.select((c.filter(pl.col("matched")) if matched_only else c).sum()).item())

    ta, tb = total("total_ms_a"), total("total_ms_b")
    ma, mb = total("total_ms_a", True), total("total_ms_b", True)
    return [
        ("kernel_launch_count", total("count_a"), total("count_b")),
        ("kernel_time_ms", ta, tb),
        ("matched_kernel_time_ms", ma, mb),
        ("match_coverage_pct", 100.0 * ma / ta if ta else None, 100.0 * mb / tb if tb else None),
    ]
