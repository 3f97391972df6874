"""Rules on iterations: telemetry during kernels (`throttling`) and the iterations' spread
(`iteration_variability`, `warmup`)."""

from __future__ import annotations

import polars as pl

from ...results import Finding
from .model import Inputs, Outcome, Skip, ms

# SM clock during kernels below this share of the highest clock the device reached.
CLOCK_RATIO = 0.95
# An iteration this far from its source's median (and 3 robust sigmas) is an outlier.
OUTLIER_RATIO = 0.2
MIN_ITERATIONS = 3


def throttling(inp: Inputs) -> Outcome:
    """SM clock below the device's maximum while kernels run (power or thermal limits)."""
    a, s = inp.attribute, inp.samples
    if a is None or s is None or a.is_empty() or "sm_clock_mhz" not in a.columns:
        return Skip("no GPU telemetry covering the kernels (nvidia-smi / NVML samples)")
    a = a.drop_nulls("sm_clock_mhz").with_columns(d=(pl.col("end_ns") - pl.col("start_ns")))
    peak = s.group_by("source_id", "device_id").agg(max_mhz=pl.col("sm_clock_mhz").max())
    dev = (
        a.join(
            peak,
            left_on=["samples_source_id", "samples_device_id"],
            right_on=["source_id", "device_id"],
        )
        .group_by("source_id", "device_id")
        .agg(
            clock_mhz=(pl.col("sm_clock_mhz") * pl.col("d")).sum() / pl.col("d").sum(),
            max_mhz=pl.col("max_mhz").first(),
            kernel_ms=pl.col("d").sum() / 1e6,
        )
        .with_columns(ratio=pl.col("clock_mhz") / pl.col("max_mhz"))
        .sort("ratio")
    )
    if dev.is_empty():
        return Skip("no telemetry samples paired with the kernels")
    worst = dev.row(0, named=True)
    if worst["ratio"] >= CLOCK_RATIO:
        return []
    ratio = round(float(worst["ratio"]), 3)
    reasons = (
        s["clock_event_reasons"].drop_nulls().value_counts(sort=True).head(5).to_dicts()
        if "clock_event_reasons" in s.columns
        else []
    )
    return [
        Finding(
            rule="throttling",
            severity="medium",
            title=f"SM clock during kernels {worst['clock_mhz']:.0f} MHz, {100 * ratio:.0f} % of "
            f"the {worst['max_mhz']:.0f} MHz the GPU reached (device {worst['device_id']})",
            advice="Check power and cooling: nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE "
            "(clock event reasons), the power limit (nvidia-smi -pl), airflow; lock clocks for "
            "benchmarks (nvidia-smi -lgc).",
            evidence={
                "count": dev.height,
                "devices": dev.to_dicts(),
                "clock_event_reasons": reasons,
                "assumed": "kernel time proportional to 1 / SM clock",
            },
            where=inp.where(dev.head(1)),
            what_if=f"kernel:.={ratio}",
            problem_ms=ms(inp.per_iteration(float(worst["kernel_ms"]) * 1e6) * (1 - ratio)),
        )
    ]


def _robust(d: pl.DataFrame) -> pl.DataFrame:
    med = pl.col("duration_ms").median().over("source_id")
    mad = (pl.col("duration_ms") - med).abs().median().over("source_id") * 1.4826
    return d.with_columns(
        median_ms=med, z=(pl.col("duration_ms") - med) / pl.max_horizontal(mad, 1e-9)
    )


def iteration_variability(inp: Inputs) -> Outcome:
    """Iterations far from their source's median (after the leading warm-up ones)."""
    d = inp.path.select("source_id", "iteration", "duration_ms").drop_nulls("iteration")
    if d.height < MIN_ITERATIONS:
        return Skip(f"fewer than {MIN_ITERATIONS} iterations")
    d = _robust(d.sort("source_id", "iteration"))
    far = (pl.col("duration_ms") - pl.col("median_ms")).abs() > OUTLIER_RATIO * pl.col("median_ms")
    out = d.filter(far & (pl.col("z").abs() > 3))
    lead = _leading(d, far)
    steady = out.join(lead, on=["source_id", "iteration"], how="anti")
    findings = []
    if not lead.is_empty():
        findings.append(_finding(inp, "warmup", lead, "warm-up"))
    if not steady.is_empty():
        findings.append(_finding(inp, "iteration_variability", steady, "outlier"))
    return findings


def _leading(d: pl.DataFrame, far: pl.Expr) -> pl.DataFrame:
    """Each source's first iterations while they are far from the median."""
    first_ok = d.with_columns(f=far).with_columns(run=(~pl.col("f")).cum_sum().over("source_id"))
    return first_ok.filter((pl.col("run") == 0) & pl.col("f")).drop("f", "run")


def _finding(inp: Inputs, rule: str, rows: pl.DataFrame, what: str) -> Finding:
    its = rows["iteration"].to_list()
    listed = ", ".join(map(str, its[:6])) + ("…" if len(its) > 6 else "")
    med = float(rows["median_ms"][0])
    return Finding(
        rule=rule,
        severity="info" if rule == "warmup" else "low",
        title=f"{len(its)} {what} iteration{'s' if len(its) > 1 else ''} ({listed}) off the "
        f"{med:.1f} ms median by more than "
        f"{100 * OUTLIER_RATIO:.0f} %",
        advice="Leave warm-up iterations out of timings (profiler schedule(wait=, warmup=)); "
        "for steady outliers look at what else runs then: data loading, checkpointing, garbage "
        "collection (gc.freeze()), other processes on the GPU."
        if rule == "warmup"
        else "Compare an outlier with a median iteration (`traceanalyze compare`; "
        "`traceanalyze timeline --iteration N`): data loading stalls, checkpoints, GC pauses, "
        "clocks.",
        evidence={
            "count": len(its),
            "median_ms": ms(med),
            "iterations": rows.select(
                "source_id", "iteration", "duration_ms", z=pl.col("z").round(1)
            ).to_dicts(),
        },
        where=inp.where(rows.select("source_id")),
    )


__all__ = ["iteration_variability", "throttling"]
