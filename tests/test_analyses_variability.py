"""Fleet variability on a hand-made fleet of five GPUs; hand-computed medians, z-scores, ranks."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyze.analyses.variability import steady_iterations, variability
from traceanalyze.errors import NotAnswerable
from traceanalyze.tables import Tables

MS = 1_000_000
STEADY_MS = {"g0": 100, "g1": 101, "g2": 102, "g3": 103, "g4": 200}


def fleet() -> Tables:
    its, smp, kns = [], [], []
    for sid, ms in STEADY_MS.items():
        durs = [1000 * MS] + [ms * MS] * 9  # iteration 0 is a slow warm-up
        t = 0
        for i, d in enumerate(durs):
            its.append(
                {
                    "source_id": sid,
                    "device_id": 0,
                    "iteration": i,
                    "start_ns": t,
                    "end_ns": t + d,
                    "duration_ns": d,
                }
            )
            t += d
        # One sample inside the warm-up (500 MHz), three in the steady state.
        for ts, clk in (
            (10 * MS, 500.0),
            (1100 * MS, 1400.0),
            (1200 * MS, 1410.0),
            (1300 * MS, 1420.0),
        ):
            smp.append(
                {
                    "source_id": sid,
                    "device_id": 0,
                    "timestamp_ns": ts,
                    "sm_clock_mhz": clk,
                    "power_w": 250.0,
                }
            )
        for j, (name, d) in enumerate((("gemm", 2 * MS), ("gemm", 4 * MS), ("relu", MS))):
            kns.append(
                {
                    "source_id": sid,
                    "device_id": 0,
                    "kernel_id": j,
                    "name": name,
                    "start_ns": j * 10 * MS,
                    "end_ns": j * 10 * MS + d,
                }
            )
    return Tables.build(
        iterations=pl.DataFrame(its), gpu_samples=pl.DataFrame(smp), kernels=pl.DataFrame(kns)
    )


def test_default_warmup_rule() -> None:
    t = fleet()
    st = steady_iterations(t.iterations).collect()
    # max(1, 10 // 10) = 1 dropped per GPU.
    assert st.height == 5 * 9 and st["iteration"].min() == 1


def test_variability_per_gpu() -> None:
    t = fleet()
    df = variability(t.iterations, t.gpu_samples, t.kernels, top=1)
    assert df.height == 5
    by = {r["source_id"]: r for r in df.to_dicts()}
    fleet_median = 102.0
    mad = 1.0  # |x - 102| = 2, 1, 0, 1, 98 -> median 1
    for sid, ms in STEADY_MS.items():
        r = by[sid]
        assert r["median_iteration_ms"] == ms and r["steady_iteration_count"] == 9
        assert r["perf_ratio"] == pytest.approx(fleet_median / ms)
        assert r["robust_z"] == pytest.approx((ms - fleet_median) / (1.4826 * mad))
        # Steady-state window excludes the 500 MHz warm-up sample.
        assert r["median_sm_clock_mhz"] == 1410.0 and r["telemetry_window"] == "steady"
        assert r["top_kernels_median_ms"] == pytest.approx(3.0)  # median of gemm 2 and 4 ms
    assert df["source_id"].to_list()[0] == "g4" and by["g4"]["outlier"]
    assert df.filter(pl.col("outlier"))["source_id"].to_list() == ["g4"]
    assert df["rank"].to_list() == [1, 2, 3, 4, 5]
    # Ties in |z| (g1 and g3) break by source id.
    assert df["source_id"].to_list() == ["g4", "g0", "g1", "g3", "g2"]


def test_explicit_warmup_and_no_telemetry() -> None:
    t = fleet()
    df = variability(t.iterations, warmup=0)
    g0 = df.filter(pl.col("source_id") == "g0").row(0, named=True)
    assert g0["steady_iteration_count"] == 10 and g0["median_iteration_ms"] == 100
    assert g0["median_sm_clock_mhz"] is None and g0["telemetry_window"] == "none"


def test_no_iterations_not_answerable() -> None:
    t = Tables.build()
    with pytest.raises(NotAnswerable, match="no steady-state iterations"):
        variability(t.iterations)
