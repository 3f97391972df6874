"""Training runs as data: the `runs` table, ordered, and the MLPerf score per system.

`runs_view(runs)`: one row per run, ordered by benchmark, org, system and start time.

`score(runs)`: per (benchmark, org, system) — `system` being the results-layout system name, else
the logged platform — the MLPerf Training score: the mean time to train of the system's
converged runs (status `success` with a time to train) after dropping the fastest and the
slowest, as the MLCommons summarizer does (`result_summarizer`; ResNet-50 is scored over 5
runs). With fewer than 3 converged runs nothing can be dropped from both ends: the mean is over
all of them and `dropped_count` is 0, so `used_count` always says what the mean is over.
Columns: benchmark, org, system, division, accelerators, runs_count, converged_count,
dropped_count, used_count, score_s, score_min.
"""

from __future__ import annotations

import polars as pl

_ORDER = ("benchmark", "org", "system", "run_start_ns")
SCORE_KEYS = ("benchmark", "org", "system")


def runs_view(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.sort(*_ORDER, nulls_last=True, maintain_order=True)


def _system_key(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.with_columns(pl.coalesce("system", "platform").alias("system"))


def score(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per system (see the module's docstring)."""
    df = _system_key(runs)
    converged = (pl.col("status") == "success") & pl.col("time_to_train_s").is_not_null()
    ttt = pl.col("time_to_train_s").filter(converged).sort()
    n = converged.sum()
    drop = pl.when(n >= 3).then(1).otherwise(0)
    used = ttt.slice(drop, n - 2 * drop)
    out = df.group_by(*SCORE_KEYS).agg(
        pl.col("division").drop_nulls().first(),
        pl.col("accelerators").drop_nulls().first(),
        pl.len().cast(pl.Int64).alias("runs_count"),
        n.cast(pl.Int64).alias("converged_count"),
        (2 * drop).cast(pl.Int64).alias("dropped_count"),
        used.len().cast(pl.Int64).alias("used_count"),
        used.mean().alias("score_s"),
    )
    return out.with_columns((pl.col("score_s") / 60.0).alias("score_min")).sort(
        *SCORE_KEYS, nulls_last=True
    )
