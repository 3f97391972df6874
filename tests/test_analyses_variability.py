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
        assert r["top1_kernel"] == "gemm"
        assert r["top1_median_ms"] == pytest.approx(3.0)  # median of gemm 2 and 4 ms
        assert r["samples_source_id"] == sid and r["samples_device_id"] == 0
        assert r["z_scale"] == "mad"
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


def iters(rows: list[dict]) -> pl.DataFrame:
    return Tables.build(iterations=pl.DataFrame(rows)).iterations


def one_gpu_iterations(sid: str, ms: float, n: int = 5, device: int | None = 0) -> list[dict]:
    return [
        {
            "source_id": sid,
            "device_id": device,
            "iteration": i,
            "start_ns": int(i * ms * MS),
            "end_ns": int((i + 1) * ms * MS),
            "duration_ns": int(ms * MS),
        }
        for i in range(n)
    ]


def test_mad_zero_falls_back_to_mean_absolute_deviation() -> None:
    # 100, 100, 100, 100, 200 ms: median 100, MAD 0; MeanAD = (0+0+0+0+100)/5 = 20.
    its = [
        r for k, ms in enumerate((100, 100, 100, 100, 200)) for r in one_gpu_iterations(f"g{k}", ms)
    ]
    df = variability(iters(its), warmup=0)
    by = {r["source_id"]: r for r in df.to_dicts()}
    assert by["g4"]["robust_z"] == pytest.approx(100 / (1.2533 * 20))  # 3.989…
    assert by["g4"]["outlier"] and by["g4"]["rank"] == 1
    assert [by[f"g{k}"]["robust_z"] for k in range(4)] == [0.0] * 4
    assert set(df["z_scale"].to_list()) == {"meanad"}
    assert df.filter(pl.col("outlier"))["source_id"].to_list() == ["g4"]
    assert by["g4"]["perf_ratio"] == pytest.approx(0.5)


def test_identical_fleet_has_no_outlier() -> None:
    its = [r for k in range(3) for r in one_gpu_iterations(f"g{k}", 100)]
    df = variability(iters(its), warmup=0)
    assert df["robust_z"].to_list() == [0.0] * 3 and not df["outlier"].any()
    assert set(df["z_scale"].to_list()) == {"none"}


def test_top_kernels_one_median_per_kernel() -> None:
    t = fleet()
    k = pl.concat(
        [
            t.kernels,
            # g0 also runs "softmax" for 50 ms (total 50 > gemm's 6 per GPU): the top kernel.
            Tables.build(
                kernels=pl.DataFrame(
                    {
                        "source_id": ["g0"],
                        "device_id": [0],
                        "kernel_id": [9],
                        "name": ["softmax"],
                        "start_ns": [0],
                        "end_ns": [50 * MS],
                    }
                )
            ).kernels,
        ]
    )
    df = variability(t.iterations, kernels=k, top=3)
    assert [c for c in df.columns if c.startswith("top")] == [
        "top1_kernel",
        "top1_median_ms",
        "top2_kernel",
        "top2_median_ms",
        "top3_kernel",
        "top3_median_ms",
    ]
    by = {r["source_id"]: r for r in df.to_dicts()}
    # Fleet totals: softmax 50 ms, gemm 5 x 6 ms = 30 ms, relu 5 x 1 ms = 5 ms.
    assert (by["g0"]["top1_kernel"], by["g0"]["top1_median_ms"]) == ("softmax", 50.0)
    assert (by["g1"]["top1_kernel"], by["g1"]["top1_median_ms"]) == ("softmax", None)
    assert (by["g1"]["top2_kernel"], by["g1"]["top2_median_ms"]) == ("gemm", 3.0)
    assert (by["g1"]["top3_kernel"], by["g1"]["top3_median_ms"]) == ("relu", 1.0)


def test_telemetry_from_a_separate_sampler_source() -> None:
    # An iteration log (device unknown, epoch origin 5 s) and an NVML log of one GPU (epoch ns).
    its = iters(one_gpu_iterations("log", 100, n=10, device=None))
    smp = Tables.build(
        gpu_samples=pl.DataFrame(
            {
                "source_id": ["nvml"] * 20,
                "device_id": [0] * 20,
                # 50 ms sampling over the log's 1 s; the first 100 ms (warm-up) at 500 MHz.
                "timestamp_ns": [5_000 * MS + k * 50 * MS for k in range(20)],
                "sm_clock_mhz": [500.0, 500.0] + [1400.0 + k for k in range(18)],
            }
        )
    ).gpu_samples
    src = pl.DataFrame(
        {
            "source_id": ["log", "nvml"],
            "path": ["/run/iterations.txt", "/run/nvml.csv"],
            "time_origin_epoch_ns": [5_000 * MS, 0],
        }
    )
    r = variability(its, smp, warmup=1, sources=src).row(0, named=True)
    # Steady span: 100..1000 ms on the log's clock = samples k = 2..19 (k=20 would be 1000 ms,
    # absent): clocks 1400..1417, median 1408.5.
    assert r["median_sm_clock_mhz"] == 1408.5 and r["telemetry_window"] == "steady"
    assert (r["samples_source_id"], r["samples_device_id"]) == ("nvml", 0)
    # Two sampled GPUs and an iteration log that does not say which: ambiguous, said, null.
    two = pl.concat([smp, smp.with_columns(pl.lit(1, dtype=pl.Int64).alias("device_id"))])
    with pytest.warns(
        UserWarning, match="^/run/iterations.txt: no telemetry for iterations: ambig"
    ):
        r = variability(its, two, warmup=1, sources=src).row(0, named=True)
    assert r["median_sm_clock_mhz"] is None and r["telemetry_window"] == "none"
    # Without the sources table only a source's own samples can serve.
    r = variability(its, smp, warmup=1).row(0, named=True)
    assert r["median_sm_clock_mhz"] is None
