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
    it = _iteration_stats(iterations, a, b)
    for frame in (it, _telemetry_stats(gpu_samples, a, b)):
        rows += _stat_rows(frame, a, b)
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


def _iteration_stats(iterations: Frame, a: str, b: str) -> pl.DataFrame:
    """Per side: iteration count, median iteration ms and median images/s."""
    return _collect(
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


def _telemetry_stats(gpu_samples: Frame, a: str, b: str) -> pl.DataFrame:
    """Per side: median SM clock, power and temperature of the GPU samples."""
    return _collect(
        gpu_samples.lazy()
        .filter(pl.col("source_id").is_in([a, b]))
        .group_by("source_id")
        .agg(
            pl.col("sm_clock_mhz").median().alias("median_sm_clock_mhz"),
            pl.col("power_w").median().alias("median_power_w"),
            pl.col("temperature_c").median().alias("median_temperature_c"),
        )
    )


def _stat_rows(frame: pl.DataFrame, a: str, b: str) -> list[tuple[str, float | None, float | None]]:
    """One (metric, a, b) row per statistic column of `frame` (None where a side lacks it)."""
    rows: list[tuple[str, float | None, float | None]] = []
    vals = {r["source_id"]: r for r in frame.to_dicts()}
    for col in frame.columns:
        if col == "source_id":
            continue
        va = vals.get(a, {}).get(col)
        vb = vals.get(b, {}).get(col)
        rows.append((col, None if va is None else float(va), None if vb is None else float(vb)))
    return rows


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


# --- operators (`compare --ops`) ----------------------------------------------------------------

OPS_DIFF_COLUMNS: tuple[str, ...] = (
    "op",
    "status",
    "count_a",
    "count_b",
    "inclusive_ms_a",
    "inclusive_ms_b",
    "self_ms_a",
    "self_ms_b",
    "kernel_ms_a",
    "kernel_ms_b",
    "delta_self_ms",
    "delta_kernel_ms",
    "kernels_only_a",
    "kernels_only_b",
)


def compare_ops(
    ops: Frame,
    api_calls: Frame,
    kernels: Frame,
    markers: Frame | None,
    a: str,
    b: str,
    *,
    rel_tol: float = 0.05,
    names: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Operators of A and B matched by name (like HTA's `ops_diff`), with their kernels.

    Per name: calls, inclusive, self and kernel time (GPU time of the kernels it launched itself,
    `analyses.ops`) on each side, and the kernel names launched on one side only. `status`:
    `added` (only in B), `removed` (only in A), `changed` (call count or kernel names differ, or
    self or kernel time differs by more than `rel_tol` of the larger side), else `unchanged`.
    The row with a null `op` holds kernels launched outside every operator; it is no operator,
    so its status is `outside` on either side (never added, removed or matched).
    """
    from .ops import op_stats_kernels

    # One side at a time (half the memory of both at once), stats and kernels from one sweep.
    stats, kernel_ops = [], []
    for side in dict.fromkeys([a, b]):
        frames = (ops, api_calls, kernels, markers)
        args = [None if f is None else f.lazy().filter(pl.col("source_id") == side) for f in frames]
        st_side, kn_side = op_stats_kernels(*args)  # type: ignore[arg-type]
        stats.append(st_side)
        kernel_ops.append(kn_side.group_by("source_id", "op").agg(pl.col("kernel").unique()))
    st = pl.concat(stats)
    if st.filter(pl.col("op").is_not_null()).height == 0:
        warnings.warn(
            "no host operators (PyTorch profiler ops) or NVTX ranges: kernels cannot be "
            "attributed to operators",
            stacklevel=2,
        )
        raise NotAnswerable(
            f"no host operators or NVTX ranges in {source_name(names, a)} "
            f"or {source_name(names, b)}"
        )
    kn = pl.concat(kernel_ops).rename({"kernel": "_k"})
    st = st.join(kn, on=["source_id", "op"], how="left", nulls_equal=True)
    return _ops_side_by_side(st, a, b, rel_tol)


def _ops_side_by_side(st: pl.DataFrame, a: str, b: str, rel_tol: float) -> pl.DataFrame:
    """Per op: A's and B's stats side by side (`st`: op_stats plus each op's kernel names `_k`),
    the kernels on one side only, `status` and the deltas, sorted biggest change first."""

    def side(sid: str, sfx: str) -> pl.DataFrame:
        return st.filter(pl.col("source_id") == sid).select(
            "op",
            pl.col("call_count").alias(f"count_{sfx}"),
            (pl.col("inclusive_ns") / 1e6).alias(f"inclusive_ms_{sfx}"),
            (pl.col("self_ns") / 1e6).alias(f"self_ms_{sfx}"),
            (pl.col("kernel_self_ns") / 1e6).alias(f"kernel_ms_{sfx}"),
            pl.col("_k").fill_null([]).alias(f"_k_{sfx}"),
        )

    j = side(a, "a").join(side(b, "b"), on="op", how="full", coalesce=True, nulls_equal=True)
    only_a = pl.col("_k_a").list.set_difference(pl.col("_k_b")).list.len()
    only_b = pl.col("_k_b").list.set_difference(pl.col("_k_a")).list.len()
    return (
        j.with_columns(
            pl.col("_k_a").fill_null([]),
            pl.col("_k_b").fill_null([]),
        )
        .with_columns(only_a.alias("kernels_only_a"), only_b.alias("kernels_only_b"))
        .with_columns(
            _ops_status(rel_tol).alias("status"),
            (pl.col("self_ms_b").fill_null(0) - pl.col("self_ms_a").fill_null(0)).alias(
                "delta_self_ms"
            ),
            (pl.col("kernel_ms_b").fill_null(0) - pl.col("kernel_ms_a").fill_null(0)).alias(
                "delta_kernel_ms"
            ),
        )
        .select(OPS_DIFF_COLUMNS)
        .sort(
            pl.col("delta_kernel_ms").abs(),
            pl.col("delta_self_ms").abs(),
            pl.max_horizontal("kernel_ms_a", "kernel_ms_b"),
            pl.max_horizontal("self_ms_a", "self_ms_b"),
            "op",
            descending=[True, True, True, True, False],
            nulls_last=True,
        )
    )


def _ops_status(rel_tol: float) -> pl.Expr:
    """outside / added / removed / changed / unchanged (rules: `compare_ops`)."""

    def differs(c: str) -> pl.Expr:
        x, y = pl.col(f"{c}_a"), pl.col(f"{c}_b")
        return (x - y).abs() > rel_tol * pl.max_horizontal(x, y)

    return (
        pl.when(pl.col("op").is_null())
        .then(pl.lit("outside"))
        .when(pl.col("count_a").is_null())
        .then(pl.lit("added"))
        .when(pl.col("count_b").is_null())
        .then(pl.lit("removed"))
        .when(
            (pl.col("count_a") != pl.col("count_b"))
            | (pl.col("kernels_only_a") > 0)
            | (pl.col("kernels_only_b") > 0)
            | differs("self_ms")
            | differs("kernel_ms")
        )
        .then(pl.lit("changed"))
        .otherwise(pl.lit("unchanged"))
    )


def ops_diff_overview(diff: pl.DataFrame) -> pl.DataFrame:
    """Metric, a, b: operator names per status, and the matching coverage: the share of each
    side's self time and of its kernel time that falls on operators present on both sides.
    Self times do not overlap (unlike inclusive ones), so the shares are of a true total."""
    matched = pl.col("status").is_in(["changed", "unchanged"])
    rows: list[tuple[str, float | None, float | None]] = []
    for st in ("unchanged", "changed", "removed", "added"):
        n = float(diff.filter(pl.col("status") == st).height)
        rows.append((f"ops_{st}", n if st != "added" else None, n if st != "removed" else None))
    for col, label in (("self_ms", "self"), ("kernel_ms", "kernel")):
        for_side = []
        for sfx in ("a", "b"):
            c = pl.col(f"{col}_{sfx}")
            tot = diff.select(c.sum()).item() or 0.0
            got = diff.select(c.filter(matched).sum()).item() or 0.0
            for_side.append(100.0 * got / tot if tot else None)
        rows.append((f"matched_{label}_time_pct", for_side[0], for_side[1]))
    for col in ("self_ms", "kernel_ms"):
        rows.append(
            (
                f"total_{col}",
                float(diff[f"{col}_a"].sum() or 0.0),
                float(diff[f"{col}_b"].sum() or 0.0),
            )
        )
    return pl.DataFrame(
        rows, schema={"metric": pl.String, "a": pl.Float64, "b": pl.Float64}, orient="row"
    )
