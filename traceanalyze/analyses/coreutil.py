"""Core (pipe) utilization: FMA, FP16, Tensor Core and SFU, weighted over kernel launches.

Input is the `kernel_metrics` table (long: one row per launch × metric) as the `ncu_csv` reader
writes it from `ncu --csv --metrics …` (Nsight Compute 2020.1 through 2026.2), or the aggregate rows
of `nvprof --metrics … --csv` (CUDA 10.x) for the nvprof `*_fu_utilization` levels.

Definition (the TBD suite's `coreutil.py`, formats.md §4.3), per source::

    util_f = Σ_k w_k · pct_{f,k} / Σ_k w_k

over ALL launches k, a launch being keyed by `(process_id, kernel_id)` (ncu's `ID` restarts per
session, not per process). Weights: `cycles` (default, `gpc__cycles_elapsed.max`), `duration`
(`gpu__time_duration.sum`) or `none` (every launch 1). Two TBD bugs are not reproduced: its loop
`range(max(ID))` skips the last launch, and its `int()` on values with thousands separators
(`"12,345"`) fails; the reader has already parsed those, and every launch is counted here.

Pipe metric names changed across architectures, so each unit has an ordered list of candidates and
the first one present in the data is used (the chosen name is reported):

* Volta/Turing (sm_70/75; TBD's Nsight Compute 2020.1 command): `sm__inst_executed_pipe_{fma,fp16,
  tensor,xu}.avg.pct_of_peak_sustained_elapsed`.
* Ampere, Ada, Hopper, Blackwell (sm_80/86/89/90/100/120): the tensor pipe is split by operation,
  `sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active` and
  `sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active` (plus `_imma`, `_dmma`
  on GA100/GH100, and `sm__pipe_tensor_op_gmma_cycles_active` for Hopper's warp-group MMA). On
  GA10x/GH100 FP16x2 is dual-issued to the fmaheavy/fmalite pipes (NVIDIA forum answer on
  "separate CUDA core pipeline for fp16 and fp32"), so `pipe_fp16` may be absent there; the unit is
  then null, with a warning, never a guess.

nvprof (Kepler…Volta) reports utilization *levels* 0–10 (`Idle (0)` … `Max (10)`), not percent:
`single_precision_fu_utilization`, `half_precision_fu_utilization`,
`tensor_precision_fu_utilization`, `special_fu_utilization` map onto the same four units with
`scale = "level_0_10"`; they are aggregates per kernel name, weighted by `invocations_count`.
"""

from __future__ import annotations

import re
import warnings

import polars as pl

from ..errors import NotAnswerable

Frame = pl.DataFrame | pl.LazyFrame

UNITS: tuple[str, ...] = ("fma", "fp16", "tensor", "sfu")


def _variants(base: str) -> list[str]:
    return [f"{base}.avg.pct_of_peak_sustained_{s}" for s in ("elapsed", "active")]


# Ordered candidates per unit (first present wins). `elapsed` first: the TBD definition.
PIPE_METRICS: dict[str, list[str]] = {
    "fma": [
        *_variants("sm__inst_executed_pipe_fma"),
        *_variants("sm__pipe_fma_cycles_active"),
    ],
    "fp16": [
        *_variants("sm__inst_executed_pipe_fp16"),
        *_variants("sm__pipe_fp16_cycles_active"),
    ],
    "tensor": [
        *_variants("sm__inst_executed_pipe_tensor"),  # sm_70/75
        *_variants("sm__inst_executed_pipe_tensor_op_hmma"),  # sm_80+
        *_variants("sm__pipe_tensor_op_hmma_cycles_active"),
        *_variants("sm__pipe_tensor_cycles_active"),
        *_variants("sm__pipe_tensor_op_gmma_cycles_active"),  # sm_90 wgmma
    ],
    "sfu": [
        *_variants("sm__inst_executed_pipe_xu"),
        *_variants("sm__pipe_xu_cycles_active"),
    ],
}

# nvprof --metrics names (levels 0–10).
NVPROF_LEVELS: dict[str, str] = {
    "fma": "single_precision_fu_utilization",
    "fp16": "half_precision_fu_utilization",
    "tensor": "tensor_precision_fu_utilization",
    "sfu": "special_fu_utilization",
}

WEIGHT_METRICS: dict[str, str | None] = {
    "cycles": "gpc__cycles_elapsed.max",
    "duration": "gpu__time_duration.sum",
    "none": None,
}

_BATCH = re.compile(r"batch_(\d+)")


def batch_size_from_name(path: str | None) -> int | None:
    """`batch_<n>` in a file name (TBD's `profiled_data_ncu/batch_<bs>.csv`), else None."""
    if not path:
        return None
    m = _BATCH.search(path.replace("\\", "/").rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def _pick(present: set[str], candidates: list[str]) -> str | None:
    return next((c for c in candidates if c in present), None)


def _collect(df: Frame) -> pl.DataFrame:
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def core_utilization(
    kernel_metrics: Frame, *, weight: str = "cycles", by_kernel: bool = False
) -> pl.DataFrame:
    """Per source (and kernel name with `by_kernel`): weighted FMA/FP16/Tensor/SFU utilization.

    Columns: `source_id`, [`name`], `fma_pct`, `fp16_pct`, `tensor_pct`, `sfu_pct`, `launches`,
    `weight`, `scale` ("pct" or "level_0_10"; the `_pct` columns then hold levels 0–10), and
    `<unit>_metric` (the metric name used). NotAnswerable when no pipe metric or the weight is
    missing.
    """
    if weight not in WEIGHT_METRICS:
        raise ValueError(f"weight must be one of {list(WEIGHT_METRICS)}, got {weight!r}")
    wanted = {m for c in PIPE_METRICS.values() for m in c} | set(NVPROF_LEVELS.values())
    wanted |= {w for w in WEIGHT_METRICS.values() if w}
    km = _collect(
        kernel_metrics.lazy()
        .filter(pl.col("metric_name").is_in(sorted(wanted)))
        .select(
            "source_id",
            "process_id",
            "kernel_id",
            "name",
            "metric_name",
            "stat",
            "value",
            "invocations_count",
        )
    )
    if km.height == 0:
        raise NotAnswerable(
            "no pipe-utilization metrics in kernel_metrics; need one of "
            + ", ".join(PIPE_METRICS["fma"][:1] + PIPE_METRICS["tensor"][:2])
            + " … (ncu --metrics) or nvprof's *_fu_utilization"
        )
    parts = []
    for (sid,), sub in km.group_by(["source_id"], maintain_order=True):
        parts.append(_one_source(sub, str(sid), weight, by_kernel))
    return pl.concat(parts, how="diagonal_relaxed").sort(
        ["source_id", "name"] if by_kernel else ["source_id"]
    )


def _one_source(km: pl.DataFrame, sid: str, weight: str, by_kernel: bool) -> pl.DataFrame:
    present = set(km["metric_name"].unique().to_list())
    chosen = {u: _pick(present, PIPE_METRICS[u]) for u in UNITS}
    if any(chosen.values()):
        return _ncu(km, sid, chosen, weight, by_kernel)
    levels = {u: NVPROF_LEVELS[u] if NVPROF_LEVELS[u] in present else None for u in UNITS}
    if any(levels.values()):
        return _nvprof_levels(km, sid, levels, weight, by_kernel)
    raise NotAnswerable(
        f"source {sid}: no pipe-utilization metric; missing e.g. "
        + ", ".join(PIPE_METRICS[u][0] for u in UNITS)
    )


def _warn_missing(sid: str, chosen: dict[str, str | None]) -> None:
    missing = [u for u, m in chosen.items() if m is None]
    if missing:
        warnings.warn(
            f"source {sid}: no metric for {', '.join(missing)} "
            f"(looked for {', '.join(PIPE_METRICS[missing[0]][:2])} …); reported as null",
            stacklevel=3,
        )


def _ncu(
    km: pl.DataFrame, sid: str, chosen: dict[str, str | None], weight: str, by_kernel: bool
) -> pl.DataFrame:
    launches = km.filter(pl.col("kernel_id").is_not_null())
    wide = launches.pivot(
        on="metric_name",
        index=["process_id", "kernel_id"],
        values="value",
        aggregate_function="first",
    )
    names = launches.group_by("process_id", "kernel_id").agg(pl.col("name").first())
    wide = wide.join(names, on=["process_id", "kernel_id"], how="left", nulls_equal=True)
    # A metric seen only on aggregate rows (no launch id) cannot be weighted per launch.
    chosen = {u: m if m is not None and m in wide.columns else None for u, m in chosen.items()}
    if not any(chosen.values()):
        raise NotAnswerable(f"source {sid}: pipe metrics present but on no individual launch")
    wmetric = WEIGHT_METRICS[weight]
    if wmetric is not None:
        if wmetric not in wide.columns:
            raise NotAnswerable(
                f"source {sid}: weight {weight!r} needs metric {wmetric} "
                f"(add it to ncu --metrics, or use --weight none)"
            )
        n_null = wide[wmetric].null_count()
        if n_null:
            warnings.warn(
                f"source {sid}: {n_null} launch(es) without {wmetric} are left out", stacklevel=3
            )
        wide = wide.filter(pl.col(wmetric).is_not_null())
        w = pl.col(wmetric)
    else:
        w = pl.lit(1.0)
    _warn_missing(sid, chosen)
    keys = ["name"] if by_kernel else []
    aggs: list[pl.Expr] = [pl.len().alias("launches")]
    for u in UNITS:
        m = chosen[u]
        if m is None:
            aggs.append(pl.lit(None, dtype=pl.Float64).alias(f"{u}_pct"))
            continue
        ok = pl.col(m).is_not_null()
        # Σ w·pct / Σ w over the launches that have this metric (n/a values are null).
        aggs.append(
            ((w * pl.col(m)).filter(ok).sum() / w.filter(ok).sum())
            .cast(pl.Float64)
            .alias(f"{u}_pct")
        )
    out = wide.group_by(keys, maintain_order=True).agg(aggs) if keys else wide.select(aggs)
    return out.with_columns(
        pl.lit(sid).alias("source_id"),
        pl.lit(weight).alias("weight"),
        pl.lit("pct").alias("scale"),
        *[pl.lit(chosen[u], dtype=pl.String).alias(f"{u}_metric") for u in UNITS],
    ).select(_order(by_kernel))


def _nvprof_levels(
    km: pl.DataFrame, sid: str, levels: dict[str, str | None], weight: str, by_kernel: bool
) -> pl.DataFrame:
    if weight != "none" and weight != "cycles":
        raise NotAnswerable(
            f"source {sid}: nvprof *_fu_utilization levels are aggregates per kernel; "
            f"weight {weight!r} is not available (use --weight none)"
        )
    # Aggregate rows: use `avg`; per-launch rows (nvprof trace mode) have stat null.
    rows = km.filter(pl.col("stat").is_null() | (pl.col("stat") == "avg"))
    missing = [u for u, m in levels.items() if m is None]
    if missing:
        warnings.warn(
            f"source {sid}: no nvprof level metric for {', '.join(missing)}; reported as null",
            stacklevel=3,
        )
    keys = ["name"] if by_kernel else []
    # Each aggregate row stands for `invocations_count` launches (1 when per-launch).
    rows = rows.with_columns(
        pl.coalesce(pl.col("invocations_count").cast(pl.Float64), pl.lit(1.0)).alias("_w")
    )
    aggs: list[pl.Expr] = []
    for u in UNITS:
        m = levels[u]
        if m is None:
            aggs.append(pl.lit(None, dtype=pl.Float64).alias(f"{u}_pct"))
            continue
        sel = (pl.col("metric_name") == m) & pl.col("value").is_not_null()
        aggs.append(
            ((pl.col("_w") * pl.col("value")).filter(sel).sum() / pl.col("_w").filter(sel).sum())
            .cast(pl.Float64)
            .alias(f"{u}_pct")
        )
    first = next(m for m in levels.values() if m)
    aggs.append(
        pl.col("_w").filter(pl.col("metric_name") == first).sum().cast(pl.Int64).alias("launches")
    )
    out = rows.group_by(keys, maintain_order=True).agg(aggs) if keys else rows.select(aggs)
    return out.with_columns(
        pl.lit(sid).alias("source_id"),
        pl.lit("invocations").alias("weight"),
        pl.lit("level_0_10").alias("scale"),
        *[pl.lit(levels[u], dtype=pl.String).alias(f"{u}_metric") for u in UNITS],
    ).select(_order(by_kernel))


def _order(by_kernel: bool) -> list[str]:
    return [
        "source_id",
        *(["name"] if by_kernel else []),
        *[f"{u}_pct" for u in UNITS],
        "launches",
        "weight",
        "scale",
        *[f"{u}_metric" for u in UNITS],
    ]
