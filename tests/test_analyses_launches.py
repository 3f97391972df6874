"""Launch statistics: small frames with hand-computed answers, and the real traces against
values computed from the raw files (json for Kineto, SQL for nsys and nvprof)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from _trace_raw import NSYS2, NVPROF, NVPROF_CSV, RESNET, kineto_events, sql
from conftest import shared

import traceanalyze as ta
from traceanalyze.analyses.launches import kernel_launches, launch_calls
from traceanalyze.errors import NotAnswerable


def _k(**cols: list) -> pl.DataFrame:
    n = len(next(iter(cols.values())))
    base = {"source_id": ["s"] * n, "device_id": [0] * n, "stream_id": [7] * n}
    base["process_id"] = [None] * n
    base["kernel_id"] = list(range(n))
    return pl.DataFrame({**base, **cols}, schema_overrides={"process_id": pl.Int64})


def _a(**cols: list) -> pl.DataFrame:
    n = len(next(iter(cols.values())))
    base = {"source_id": ["s"] * n, "api": ["runtime"] * n, "thread_id": [1] * n}
    out = pl.DataFrame({**base, **cols})
    return out.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"))


KERNELS = _k(
    name=["a", "b", "a", "c"],
    correlation_id=[1, 2, 3, 99],
    start_ns=[100, 200, 1_000_000, 50],
    end_ns=[110, 400, 1_000_005, 60],
)
CALLS = _a(
    name=["cudaLaunchKernel"] * 3 + ["cudaEventRecord"],
    process_id=[5, 5, 5, 5],
    correlation_id=[1, 2, 3, 4],
    start_ns=[50, 150, 180, 0],
    end_ns=[70, 160, 200, 1],
)


def test_small_frame_by_hand() -> None:
    with pytest.warns(UserWarning, match="1 of 4 kernels have no launch call"):
        r = kernel_launches(KERNELS, CALLS, delay_floor_ns=1000)
    # cpu 20, 10, 20; gpu 10, 200, 5; delay 50, 50, 999_820
    row = r.stats.row(0, named=True)
    assert row["launch_count"] == 3
    assert row["mean_cpu_ns"] == pytest.approx(50 / 3)
    assert row["median_gpu_ns"] == 10
    assert row["mean_delay_ns"] == pytest.approx((50 + 50 + 999_820) / 3)
    assert row["p95_delay_ns"] == pytest.approx(np.percentile([50, 50, 999_820], 95))
    # short: a (gpu 10 < cpu 20) and a (5 < 20); b is long enough
    assert row["short_kernel_count"] == 2
    # p95 of (50, 50, 999_820) interpolates to 899_843: 999_820 is above it and the floor
    assert row["long_delay_count"] == 1
    out = r.outliers.select("outlier", "name", "count").rows()
    assert out == [("long_delay", "a", 1), ("short_kernel", "a", 2)]


def test_by_kernel_and_floor() -> None:
    with pytest.warns(UserWarning):
        r = kernel_launches(KERNELS, CALLS, by_kernel=True, delay_floor_ns=10**9)
    assert r.stats.select("name", "launch_count", "long_delay_count").rows() == [
        ("b", 1, 0),
        ("a", 2, 0),
    ]


def test_outermost_call_wins_and_process_must_agree() -> None:
    k = _k(name=["x"], correlation_id=[1], start_ns=[100], end_ns=[200]).with_columns(
        pl.lit(5, dtype=pl.Int64).alias("process_id")
    )
    calls = _a(
        name=["cuLaunchKernel", "cudaLaunchKernel", "cudaLaunchKernel"],
        process_id=[5, 5, 6],
        correlation_id=[1, 1, 1],
        start_ns=[20, 10, 0],
        end_ns=[30, 40, 50],
    )
    j = launch_calls(k, calls)
    assert j.select("call_name", "call_start_ns", "cpu_ns").rows() == [("cudaLaunchKernel", 10, 30)]


def test_no_api_calls_is_not_answerable() -> None:
    with pytest.raises(NotAnswerable, match="no API calls with correlation ids"):
        kernel_launches(KERNELS, CALLS.clear())


def _check(stats: pl.DataFrame, dev: int, cpu: list[int], gpu: list[int], delay: list[int]):
    row = stats.filter(pl.col("device_id") == dev).row(0, named=True)
    assert row["launch_count"] == len(cpu)
    for what, xs in (("cpu", cpu), ("gpu", gpu), ("delay", delay)):
        a = np.array(xs, dtype=np.float64)
        assert row[f"mean_{what}_ns"] == pytest.approx(a.mean(), rel=1e-12), what
        assert row[f"median_{what}_ns"] == pytest.approx(np.median(a), rel=1e-12), what
        assert row[f"p95_{what}_ns"] == pytest.approx(np.percentile(a, 95), rel=1e-12), what
    assert row["short_kernel_count"] == sum(g < c for g, c in zip(gpu, cpu, strict=True))


def test_resnet_kineto_against_json() -> None:
    p = shared(RESNET)
    ev = kineto_events(p)
    calls = {
        e["args"]["correlation"]: e
        for e in ev
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]
    }
    cpu, gpu, delay = [], [], []
    for k in (e for e in ev if e.get("cat") == "kernel"):
        c = calls[k["args"]["correlation"]]
        cpu.append(c["dur_ns"])
        gpu.append(k["end"] - k["start"])
        delay.append(k["start"] - c["start"])
    r = ta.open(p).launches()
    assert len(cpu) == 4350
    _check(r.stats, 0, cpu, gpu, delay)


def test_nsys_two_gpus_against_sql() -> None:
    p = shared(NSYS2)
    rows = sql(
        p,
        "SELECT k.deviceId, r.end - r.start, k.end - k.start, k.start - r.start "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)",
    )
    with pytest.warns(UserWarning, match="24 of 4010 kernels have no launch call"):
        r = ta.open(p).launches()
    for dev in (0, 1):
        mine = [x for x in rows if x[0] == dev]
        _check(r.stats, dev, *[[x[i] for x in mine] for i in (1, 2, 3)])
    assert r.stats["launch_count"].to_list() == [1981, 2005]
    # outliers name their kernels; the NCCL kernel waits long on both GPUs
    longs = r.outliers.filter(pl.col("outlier") == "long_delay")["name"].to_list()
    assert any(n.startswith("ncclDevKernel_SendRecv") for n in longs)


def test_nvprof_sqlite_against_sql() -> None:
    p = shared(NVPROF)
    rows = sql(
        p,
        "SELECT r.end - r.start, k.end - k.start, k.start - r.start "
        "FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k JOIN ("
        " SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        " UNION ALL SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_DRIVER) r "
        "ON r.correlationId = k.correlationId",
    )
    r = ta.open(p).launches()
    assert len(rows) == 160
    _check(r.stats, 0, *[[x[i] for x in rows] for i in (0, 1, 2)])


def test_nvprof_csv_cannot_answer() -> None:
    with pytest.raises(NotAnswerable, match="no API calls"):
        ta.open(shared(NVPROF_CSV)).launches()
