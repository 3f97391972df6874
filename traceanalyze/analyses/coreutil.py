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
  "separate CUDA core pipeline for fp16 and fp32"), so `pipe_fp16` may be absent there: FP16 is
  then `sm__inst_executed_pipe_fma_type_fp16` (FP16 instructions on the FMA pipe) where present,
  else null, with a warning, never a guess.
* Blackwell (sm_100/120) has no `sm__pipe_fp16_cycles_active`: FP16 is
  `sm__inst_executed_pipe_fma_type_fp16`; Tensor Cores are `sm__inst_executed_pipe_tc` (before
  the cycle counters) or `sm__pipe_tc_cycles_active` (tried before
  `sm__pipe_tensor_cycles_active`).

The table per pipe and generation is in docs/howto-ncu.md.

nvprof (Kepler…Volta) reports utilization *levels* 0–10 (`Idle (0)` … `Max (10)`), not percent:
`single_precision_fu_utilization`, `half_precision_fu_utilization`,
`tensor_precision_fu_utilization`, `special_fu_utilization` map onto the same four units with
`scale = "level"` (0–10, in the same `_pct` columns: read `scale` first, never mix the two on one
axis); they are aggregates per kernel name, so the only weight is `invocations_count` (every launch
counts once): `--weight cycles` falls back to it and says so in a warning, `--weight none` is the
same thing (also stated), `--weight duration` has no answer.

Several sources: each answers on its own (`core_utilization_each`); a source without the needed
metrics is listed with every unit and metric it lacks, by file path, and never stops the others.
"""

from __future__ import annotations

import re
import warnings
from typing import NamedTuple

import polars as pl

from ..errors import NotAnswerable, UsageProblem
from .naming import source_name, source_paths

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
        *_variants("sm__inst_executed_pipe_fma_type_fp16"),  # no FP16 pipe: GA10x, sm_90, sm_100+
    ],
    "tensor": [
        *_variants("sm__inst_executed_pipe_tensor"),  # sm_70/75
        *_variants("sm__inst_executed_pipe_tensor_op_hmma"),  # sm_80+
        *_variants("sm__inst_executed_pipe_tensor_op_gmma"),  # sm_90 wgmma instructions
        *_variants("sm__inst_executed_pipe_tc"),  # Blackwell
        *_variants("sm__pipe_tensor_op_hmma_cycles_active"),
        *_variants("sm__pipe_tc_cycles_active"),  # Blackwell
        *_variants("sm__pipe_tensor_cycles_active"),
        *_variants("sm__pipe_tensor_op_gmma_cycles_active"),  # sm_90 wgmma
    ],
    "sfu": [
        *_variants("sm__inst_executed_pipe_xu"),
        *_variants("sm__pipe_xu_cycles_active"),
    ],
}

# Hopper (sm_90) issues Tensor Core work as HMMA (`mma.sync`) and as GMMA (`wgmma`, what cuDNN
# and cuBLAS use there for most convolutions and GEMMs); both run on the same tensor cores, and
# ncu counts them in separate metrics, each as a percentage of that pipe's peak. Taking the first
# present name alone would report a wgmma-bound kernel as ~0 %. When both of a pair are present,
# a launch's Tensor Core utilization is their sum, capped at 100 (a launch missing one counts it
# as 0; missing both, null), and the reported metric name is "<hmma> + <gmma>".
TENSOR_SUMS: dict[str, str] = {
    **{
        h: g
        for base in ("sm__inst_executed_pipe_tensor_op_{}", "sm__pipe_tensor_op_{}_cycles_active")
        for h, g in zip(_variants(base.format("hmma")), _variants(base.format("gmma")), strict=True)
    },
}
_SUM_SEP = " + "

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


UNIT_LABELS: dict[str, str] = {"fma": "FMA", "fp16": "FP16", "tensor": "Tensor Core", "sfu": "SFU"}
_PCT_SUFFIX = ".avg.pct_of_peak_sustained_"


def _compact(candidates: list[str]) -> str:
    """`a.avg.pct_of_peak_sustained_{elapsed,active}` instead of the two names spelled out."""
    groups: dict[str, list[str]] = {}
    for c in candidates:
        base, sep, tail = c.partition(_PCT_SUFFIX)
        groups.setdefault(base if sep else c, []).append(tail if sep else "")
    out = []
    for base, tails in groups.items():
        tails = [t for t in tails if t]
        if not tails:
            out.append(base)
        elif len(tails) == 1:
            out.append(f"{base}{_PCT_SUFFIX}{tails[0]}")
        else:
            out.append(f"{base}{_PCT_SUFFIX}{{{','.join(tails)}}}")
    return ", ".join(out)


def _looked_for(units: list[str]) -> str:
    """Every candidate metric of every unit in `units` (the whole list, for each unit)."""
    return "; ".join(f"{UNIT_LABELS[u]}: {_compact(PIPE_METRICS[u])}" for u in units)


class CoreUtilization(NamedTuple):
    """`core_utilization_each`'s answer: the rows it could compute, and why the others failed.

    `unanswered` has one row per source that has no answer: `source_id`, `file` (the path, or the
    id), `reason` (one line) and `missing` (the units and metrics that are absent).
    """

    table: pl.DataFrame
    unanswered: pl.DataFrame


class _Unanswered(Exception):
    def __init__(self, reason: str, missing: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


def core_utilization_each(
    kernel_metrics: Frame,
    *,
    weight: str = "cycles",
    by_kernel: bool = False,
    sources: Frame | None = None,
) -> CoreUtilization:
    """Per source (and kernel name with `by_kernel`): weighted FMA/FP16/Tensor/SFU utilization.

    Columns of `table`: `source_id`, [`name`], `fma_pct`, `fp16_pct`, `tensor_pct`, `sfu_pct`,
    `launches`, `weight`, `scale` ("pct": percent of peak, 0–100; "level": nvprof's utilization
    level 0–10, held in the same `_pct` columns, so read `scale` before the numbers), and
    `<unit>_metric` (the metric name used).

    A source that cannot be answered (no pipe metric, the weight's metric absent, nvprof levels
    with `weight="duration"`) does not stop the others: it gets a row in `unanswered` saying which
    units and metrics are missing. With `sources` given, every source in it is accounted for (a
    source without any kernel metrics is unanswered too) and messages name its file path.
    """
    if weight not in WEIGHT_METRICS:
        raise UsageProblem(f"weight must be one of {list(WEIGHT_METRICS)}, got {weight!r}")
    names = source_paths(sources)
    km = _wanted_rows(kernel_metrics)
    expected = _expected_sources(km, sources)
    groups = {str(sid): sub for (sid,), sub in km.group_by(["source_id"], maintain_order=True)}
    parts: list[pl.DataFrame] = []
    failed: list[dict[str, object]] = []
    for sid in expected:
        label = source_name(names, sid)
        try:
            sub = groups.get(sid)
            if sub is None:
                raise _Unanswered(_no_pipes_reason(set(), weight), _all_missing(set(), weight))
            parts.append(_one_source(sub, sid, label, weight, by_kernel))
        except _Unanswered as e:
            failed.append(
                {"source_id": sid, "file": label, "reason": e.reason, "missing": e.missing}
            )
    table = (
        pl.concat(parts, how="diagonal_relaxed").sort(
            ["source_id", "name"] if by_kernel else ["source_id"]
        )
        if parts
        else _empty(by_kernel)
    )
    unanswered = _unanswered_frame(failed)
    return CoreUtilization(table, unanswered)


def _wanted_rows(kernel_metrics: Frame) -> pl.DataFrame:
    """The rows of every pipe, level and weight metric the analysis may use, and their columns."""
    wanted = {m for c in PIPE_METRICS.values() for m in c} | set(NVPROF_LEVELS.values())
    wanted |= {w for w in WEIGHT_METRICS.values() if w}
    return _collect(
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


def _expected_sources(km: pl.DataFrame, sources: Frame | None) -> list[str]:
    """Sorted ids of the sources to answer: those with metrics, plus all of `sources` if given."""
    expected: list[str] = sorted(str(s) for s in km["source_id"].unique().to_list())
    if sources is not None:
        listed = _collect(sources.lazy().select("source_id"))["source_id"].to_list()
        expected = sorted({str(s) for s in listed} | set(expected))
    return expected


def _unanswered_frame(failed: list[dict[str, object]]) -> pl.DataFrame:
    """`CoreUtilization.unanswered` from the collected failure rows."""
    return pl.DataFrame(
        failed,
        schema={
            "source_id": pl.String,
            "file": pl.String,
            "reason": pl.String,
            "missing": pl.List(pl.String),
        },
    )


def core_utilization(
    kernel_metrics: Frame,
    *,
    weight: str = "cycles",
    by_kernel: bool = False,
    sources: Frame | None = None,
) -> pl.DataFrame:
    """`core_utilization_each(...).table`, strict: NotAnswerable when any source has no answer.

    The message names every such source (its file path when `sources` is given) and everything
    it lacks; use `core_utilization_each` to keep the rows of the sources that do answer.
    """
    res = core_utilization_each(kernel_metrics, weight=weight, by_kernel=by_kernel, sources=sources)
    if res.unanswered.height:
        raise NotAnswerable(
            "; ".join(f"{f}: {r}" for f, r in res.unanswered.select("file", "reason").iter_rows())
        )
    return res.table


def _all_missing(present: set[str], weight: str) -> list[str]:
    missing = list(UNITS)
    wmetric = WEIGHT_METRICS[weight]
    if wmetric is not None and wmetric not in present:
        missing.append(wmetric)
    return missing


def _no_pipes_reason(present: set[str], weight: str) -> str:
    reason = (
        "no pipe-utilization metric for any of "
        + ", ".join(UNIT_LABELS[u] for u in UNITS)
        + f" (looked for {_looked_for(list(UNITS))}; or nvprof's "
        + ", ".join(NVPROF_LEVELS[u] for u in UNITS)
        + ")"
    )
    wmetric = WEIGHT_METRICS[weight]
    if wmetric is not None and wmetric not in present:
        reason += f"; weight {weight!r} also needs {wmetric}"
    return reason


def _one_source(
    km: pl.DataFrame, sid: str, label: str, weight: str, by_kernel: bool
) -> pl.DataFrame:
    present = set(km["metric_name"].unique().to_list())
    chosen = {u: _pick(present, PIPE_METRICS[u]) for u in UNITS}
    hmma = chosen["tensor"]
    if hmma in TENSOR_SUMS and TENSOR_SUMS[hmma] in present:
        chosen["tensor"] = f"{hmma}{_SUM_SEP}{TENSOR_SUMS[hmma]}"
    if any(chosen.values()):
        return _ncu(km, sid, label, chosen, weight, by_kernel)
    levels = {u: NVPROF_LEVELS[u] if NVPROF_LEVELS[u] in present else None for u in UNITS}
    if any(levels.values()):
        return _nvprof_levels(km, sid, label, levels, weight, by_kernel)
    raise _Unanswered(_no_pipes_reason(present, weight), _all_missing(present, weight))


def _warn_missing(label: str, chosen: dict[str, str | None]) -> None:
    missing = [u for u, m in chosen.items() if m is None]
    if missing:
        warnings.warn(
            f"{label}: no metric for {', '.join(missing)} "
            f"(looked for {_looked_for(missing)}); reported as null",
            stacklevel=4,
        )


def _ncu(
    km: pl.DataFrame,
    sid: str,
    label: str,
    chosen: dict[str, str | None],
    weight: str,
    by_kernel: bool,
) -> pl.DataFrame:
    launches = km.filter(pl.col("kernel_id").is_not_null())
    wmetric = WEIGHT_METRICS[weight]
    _check_launches(launches, chosen, weight)
    wide = _launch_table(launches, chosen)
    # A metric seen only on aggregate rows (no launch id) cannot be weighted per launch.
    chosen = {u: m if m is not None and m in wide.columns else None for u, m in chosen.items()}
    if not any(chosen.values()):
        raise _Unanswered(
            "pipe metrics present but on no individual launch (aggregate rows cannot be weighted)",
            [u for u in UNITS],
        )
    if wmetric is not None:
        n_null = wide[wmetric].null_count()
        if n_null:
            warnings.warn(
                f"{label}: {n_null} launch(es) without {wmetric} are left out", stacklevel=4
            )
        wide = wide.filter(pl.col(wmetric).is_not_null())
        w = pl.col(wmetric)
    else:
        w = pl.lit(1.0)
    _warn_missing(label, chosen)
    keys = ["name"] if by_kernel else []
    aggs: list[pl.Expr] = [pl.len().alias("launches"), *_pct_aggs(chosen, w)]
    out = wide.group_by(keys, maintain_order=True).agg(aggs) if keys else wide.select(aggs)
    return out.with_columns(
        pl.lit(sid).alias("source_id"),
        pl.lit(weight).alias("weight"),
        pl.lit("pct").alias("scale"),
        *[pl.lit(chosen[u], dtype=pl.String).alias(f"{u}_metric") for u in UNITS],
    ).select(_order(by_kernel))


def _check_launches(launches: pl.DataFrame, chosen: dict[str, str | None], weight: str) -> None:
    """_Unanswered when the weight's metric is on no launch, or there are no launch rows."""
    wmetric = WEIGHT_METRICS[weight]
    if wmetric is not None and wmetric not in set(launches["metric_name"].to_list()):
        absent = [u for u, m in chosen.items() if m is None]
        also = f"; also no metric for {_looked_for(absent)}" if absent else ""
        raise _Unanswered(
            f"weight {weight!r} needs metric {wmetric} on each launch "
            f"(add it to ncu --metrics, or use weight=none){also}",
            [*absent, wmetric],
        )
    if launches.height == 0:
        raise _Unanswered(
            "pipe metrics present but on no individual launch (aggregate rows cannot be weighted)",
            [u for u in UNITS],
        )


def _launch_table(launches: pl.DataFrame, chosen: dict[str, str | None]) -> pl.DataFrame:
    """One row per launch (process_id, kernel_id): its name and a column per chosen metric."""
    wide = launches.pivot(
        on="metric_name",
        index=["process_id", "kernel_id"],
        values="value",
        aggregate_function="first",
    )
    names = launches.group_by("process_id", "kernel_id").agg(pl.col("name").first())
    wide = wide.join(names, on=["process_id", "kernel_id"], how="left", nulls_equal=True)
    # Summed pairs (TENSOR_SUMS) become one column named after both.
    for m in chosen.values():
        if m is not None and _SUM_SEP in m:
            a, b = (pl.col(x) if x in wide.columns else pl.lit(None) for x in m.split(_SUM_SEP))
            both_null = a.is_null() & b.is_null()
            total = pl.min_horizontal(a.fill_null(0.0) + b.fill_null(0.0), pl.lit(100.0))
            wide = wide.with_columns(pl.when(both_null).then(None).otherwise(total).alias(m))
    return wide


def _pct_aggs(chosen: dict[str, str | None], w: pl.Expr) -> list[pl.Expr]:
    """Per unit `<unit>_pct`: the `w`-weighted mean of its metric (null when it has none)."""
    aggs: list[pl.Expr] = []
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
    return aggs


def _nvprof_levels(
    km: pl.DataFrame,
    sid: str,
    label: str,
    levels: dict[str, str | None],
    weight: str,
    by_kernel: bool,
) -> pl.DataFrame:
    _check_level_weight(label, weight)
    # Aggregate rows: use `avg`; per-launch rows (nvprof trace mode) have stat null.
    rows = km.filter(pl.col("stat").is_null() | (pl.col("stat") == "avg"))
    missing = [u for u, m in levels.items() if m is None]
    if missing:
        warnings.warn(
            f"{label}: no nvprof level metric for {', '.join(missing)} (looked for "
            + ", ".join(NVPROF_LEVELS[u] for u in missing)
            + "); reported as null",
            stacklevel=4,
        )
    keys = ["name"] if by_kernel else []
    # Each aggregate row stands for `invocations_count` launches (1 when per-launch).
    rows = rows.with_columns(
        pl.coalesce(pl.col("invocations_count").cast(pl.Float64), pl.lit(1.0)).alias("_w")
    )
    aggs = _level_aggs(levels)
    first = next(m for m in levels.values() if m)
    aggs.append(
        pl.col("_w").filter(pl.col("metric_name") == first).sum().cast(pl.Int64).alias("launches")
    )
    out = rows.group_by(keys, maintain_order=True).agg(aggs) if keys else rows.select(aggs)
    return out.with_columns(
        pl.lit(sid).alias("source_id"),
        pl.lit("invocations").alias("weight"),
        pl.lit("level").alias("scale"),
        *[pl.lit(levels[u], dtype=pl.String).alias(f"{u}_metric") for u in UNITS],
    ).select(_order(by_kernel))


def _check_level_weight(label: str, weight: str) -> None:
    """_Unanswered for weight "duration"; else warn that levels are weighted by invocations."""
    # nvprof --metrics aggregates per kernel name (Min/Max/Avg over `Invocations`); there is no
    # per-launch cycle count or duration to weight by.
    if weight == "duration":
        raise _Unanswered(
            "nvprof *_fu_utilization levels are aggregates per kernel name; weight 'duration' "
            "is not available (use weight=none: every launch counts once)",
            ["gpu__time_duration.sum"],
        )
    if weight == "cycles":
        warnings.warn(
            f"{label}: nvprof *_fu_utilization levels have no per-launch cycle count; weighted "
            "by invocations instead of cycles (every launch counts once); weight = invocations",
            stacklevel=5,
        )
    else:
        warnings.warn(
            f"{label}: nvprof *_fu_utilization levels are per-kernel averages; each is weighted "
            "by its invocations, so every launch counts once (weight = invocations)",
            stacklevel=5,
        )


def _level_aggs(levels: dict[str, str | None]) -> list[pl.Expr]:
    """Per unit `<unit>_pct`: the invocation-weighted mean level (null when it has none)."""
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
    return aggs


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


def _empty(by_kernel: bool) -> pl.DataFrame:
    schema: dict[str, type[pl.DataType] | pl.DataType] = {"source_id": pl.String}
    if by_kernel:
        schema["name"] = pl.String
    schema |= {f"{u}_pct": pl.Float64 for u in UNITS}
    schema |= {"launches": pl.Int64, "weight": pl.String, "scale": pl.String}
    schema |= {f"{u}_metric": pl.String for u in UNITS}
    return pl.DataFrame(schema=schema)
