"""Run history: is a run slower (or faster) than the runs before it?

Runs are grouped by `by` (default benchmark, org, system) and taken in start-time order (runs
without a start time, or without the metric, are left out). Each run is compared with the runs
before it in its group's current *segment*, at most `window` (20) of them, the most recent:

* baseline = their median; spread = 1.4826 x their MAD (median absolute deviation), floored at
  `floor_pct` (0.5) % of |baseline| so that a history of identical values does not make every
  tiny difference infinite;
* robust_z = (value - baseline) / spread; change_pct = 100 x (value - baseline) / |baseline|;
* confidence = P(|T| < robust_z / sqrt(1 + 1/n)) for Student's t, n the history's size: the
  prediction-interval test of a new value against n earlier ones. The MAD is as precise as a
  standard deviation from about 37 % of the values, so T gets floor(0.37 (n - 1)) degrees of
  freedom (at least 1): with little history only a large change is confident;
* a *change* is flagged when confidence >= `confidence` (0.999) **and** |change_pct| >=
  `min_change_pct` (3): a `regression` when it goes the bad way for the metric (lower
  throughput or accuracy, longer time to train), else an `improvement`;
* a run is judged only when its segment holds at least `min_history` (5) earlier runs (else
  `verdict` = "insufficient history");
* after a flagged change the segment restarts at that run: the runs after it are compared with
  the new level, so one step change is flagged once, not at every later run.

On 200 synthetic series of 100 runs with 1 % (2 %) normal noise the defaults flag 5 (8) of
20,000 runs; a step of 10 % or more on 1 % noise is flagged once, at the run where it happens
(a 5 % step there in about half the series): tests/test_analyses_runs.py, docs/runs.md.

Columns: the group columns, source_id, run_id, run_start_ns, <metric> (the value, named by its
metric and unit), history_count, baseline_<metric>, change_pct, robust_z, confidence, verdict
(ok | regression | improvement | insufficient history).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

DEFAULT_BY: tuple[str, ...] = ("benchmark", "org", "system")
LOWER_IS_BETTER = frozenset({"time_to_train_s"})
MAD_SCALE = 1.4826
MAD_EFFICIENCY = 0.37


@dataclass(frozen=True)
class Rule:
    window: int = 20
    min_history: int = 5
    confidence: float = 0.999
    min_change_pct: float = 3.0
    floor_pct: float = 0.5


_OUT: dict[str, type[pl.DataType]] = {
    "source_id": pl.String,
    "run_id": pl.String,
    "run_start_ns": pl.Int64,
    "value": pl.Float64,
    "history_count": pl.Int64,
    "baseline": pl.Float64,
    "change_pct": pl.Float64,
    "robust_z": pl.Float64,
    "confidence": pl.Float64,
    "verdict": pl.String,
}


def t_confidence(t: float, dof: int) -> float:
    """P(|T| < |t|) for Student's t with integer `dof` >= 1, in closed form (Abramowitz & Stegun
    26.7.3 and 26.7.4), so no statistics library is needed."""
    th = math.atan(abs(t) / math.sqrt(dof))
    s, c2 = math.sin(th), math.cos(th) ** 2
    if dof % 2 == 0:
        term = total = 1.0
        for k in range(2, dof - 1, 2):
            term *= (k - 1) / k * c2
            total += term
        return min(1.0, s * total)
    if dof == 1:
        return 2.0 * th / math.pi
    term = total = math.cos(th)
    for k in range(3, dof - 1, 2):
        term *= (k - 1) / k * c2
        total += term
    return min(1.0, 2.0 / math.pi * (th + s * total))


def _dof(n: int) -> int:
    """Degrees of freedom for a MAD-based spread of `n` values: the MAD is as precise as a
    standard deviation from about 37 % of the values (its asymptotic efficiency at the normal),
    so it gets 37 % of the n - 1 degrees of freedom, at least 1."""
    return max(1, math.floor(MAD_EFFICIENCY * (n - 1)))


def judge(
    values: Sequence[float], rule: Rule, lower_is_better: bool = False
) -> list[dict[str, object]]:
    """The rule on one group's values in time order: one dict per value (columns as above)."""
    out: list[dict[str, object]] = []
    seg_start = 0
    for i, x in enumerate(values):
        hist = list(values[max(seg_start, i - rule.window) : i])
        row: dict[str, object] = {"value": x, "history_count": len(hist)}
        if len(hist) < rule.min_history:
            out.append({**row, "verdict": "insufficient history"})
            continue
        base = statistics.median(hist)
        mad = statistics.median(abs(h - base) for h in hist)
        spread = max(MAD_SCALE * mad, rule.floor_pct / 100.0 * abs(base))
        z = (x - base) / spread if spread > 0 else 0.0
        conf = t_confidence(z / math.sqrt(1.0 + 1.0 / len(hist)), _dof(len(hist)))
        change = 100.0 * (x - base) / abs(base) if base else math.copysign(math.inf, x - base)
        flagged = conf >= rule.confidence and abs(change) >= rule.min_change_pct
        verdict = "ok"
        if flagged:
            worse = (x > base) if lower_is_better else (x < base)
            verdict = "regression" if worse else "improvement"
            seg_start = i
        row.update(
            baseline=base,
            change_pct=change,
            robust_z=z,
            confidence=conf,
            verdict=verdict,
        )
        out.append(row)
    return out


def history(
    runs: pl.DataFrame,
    metric: str = "throughput_img_per_s",
    by: Sequence[str] = DEFAULT_BY,
    rule: Rule | None = None,
) -> pl.DataFrame:
    from ..errors import UsageProblem

    rule = rule or Rule()
    keys = list(by)
    unknown = [c for c in (*keys, metric) if c not in runs.columns]
    if unknown:
        raise UsageProblem(f"unknown runs column(s): {', '.join(unknown)}")
    if not runs.schema[metric].is_numeric():
        raise UsageProblem(f"metric={metric}: not a numeric runs column")
    df = runs.filter(pl.col(metric).is_not_null() & pl.col("run_start_ns").is_not_null())
    df = df.sort(*keys, "run_start_ns", "source_id", nulls_last=True)
    rows: list[dict[str, object]] = []
    lower = metric in LOWER_IS_BETTER
    for _, part in df.group_by(keys or [pl.lit(0)], maintain_order=True):
        values = [float(v) for v in part[metric]]
        for src, judged in zip(part.iter_rows(named=True), judge(values, rule, lower), strict=True):
            rows.append(
                {
                    **{k: src[k] for k in keys},
                    "source_id": src["source_id"],
                    "run_id": src["run_id"],
                    "run_start_ns": src["run_start_ns"],
                    **judged,
                }
            )
    schema: dict[str, pl.DataType] = {k: runs.schema[k] for k in keys}
    schema.update({k: v() for k, v in _OUT.items()})
    out = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    # The value columns named by their metric and unit, not `value` (issue 32).
    return out.rename({"value": metric, "baseline": f"baseline_{metric}"})
