"""Scaling efficiency: how a system family's throughput grows with its accelerators.

Runs are grouped by `by` (default org, accelerator_model, framework); within a group, one row per
accelerator count N with a throughput (`runs` rows whose `accelerators` and
`throughput_img_per_s` are known):

* `throughput_img_per_s`: the median of that count's runs, `runs_count` of them;
* `per_accelerator_img_per_s` = throughput / N;
* `efficiency` = (tp_N / N) / (tp_min / N_min), against the smallest count of the group (1.0
  there; 0.885 means 88.5 % of linear scaling);
* `ideal_img_per_s` = tp_min / N_min x N, the linear line the plot draws;
* `time_to_train_s`: the median over that count's converged (status `success`) runs;
* `global_batch_per_accelerator`: the median global batch size / N.

A group with one count has efficiency 1.0 for it and says nothing about scaling.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

DEFAULT_BY: tuple[str, ...] = ("org", "accelerator_model", "framework")
COLUMNS = (
    "accelerators",
    "runs_count",
    "throughput_img_per_s",
    "per_accelerator_img_per_s",
    "efficiency",
    "ideal_img_per_s",
    "time_to_train_s",
    "global_batch_per_accelerator",
    "throughput_basis",
)


def check_by(by: Sequence[str], columns: Sequence[str]) -> None:
    from ..errors import UsageProblem

    unknown = [c for c in by if c not in columns]
    if unknown:
        raise UsageProblem(
            f"unknown runs column(s) {', '.join(unknown)} in by= (columns: {', '.join(columns)})"
        )
    if "accelerators" in by:
        raise UsageProblem("by= cannot hold 'accelerators': it is what each group scales over")


def scaling(runs: pl.DataFrame, by: Sequence[str] = DEFAULT_BY) -> pl.DataFrame:
    keys = list(by)
    check_by(keys, runs.columns)
    usable = runs.filter(
        pl.col("accelerators").is_not_null()
        & (pl.col("accelerators") > 0)
        & pl.col("throughput_img_per_s").is_not_null()
    )
    ok = pl.col("status") == "success"
    if "throughput_basis" not in usable.columns:
        usable = usable.with_columns(pl.lit(None, dtype=pl.String).alias("throughput_basis"))
    # logged or derived, per point ("mixed" when its runs differ): the figure draws them apart
    b = pl.col("throughput_basis").drop_nulls().unique()
    basis = pl.when(b.len() == 1).then(b.first()).when(b.len() > 1).then(pl.lit("mixed"))
    per_n = usable.group_by(*keys, "accelerators").agg(
        basis.alias("throughput_basis"),
        pl.len().cast(pl.Int64).alias("runs_count"),
        pl.col("throughput_img_per_s").median(),
        pl.col("time_to_train_s").filter(ok).median(),
        pl.col("global_batch_size").median().alias("gbs"),
    )
    n = pl.col("accelerators")
    per_acc = pl.col("throughput_img_per_s") / n
    first = per_acc.sort_by(n).first()
    over = keys if keys else None
    base = first.over(over) if over else first
    out = per_n.with_columns(per_acc.alias("per_accelerator_img_per_s")).with_columns(
        (pl.col("per_accelerator_img_per_s") / base).alias("efficiency"),
        (base * n).alias("ideal_img_per_s"),
        (pl.col("gbs") / n).alias("global_batch_per_accelerator"),
    )
    return out.select(*keys, *COLUMNS).sort(*keys, "accelerators", nulls_last=True)
