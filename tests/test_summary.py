"""analyses.summary on small inline frames with hand-computed answers."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyze import schema
from traceanalyze.analyses import summary as s


def frame(table: str, **cols: list) -> pl.DataFrame:
    return schema.conform(table, pl.DataFrame(cols))


def test_kernel_overview_and_top_kernels_with_shares() -> None:
    k = frame(
        "kernels",
        source_id=["a"] * 4 + ["b"],
        kernel_id=[0, 1, 2, 3, 0],
        device_id=[0, 0, 1, 0, 0],
        name=["conv", "conv", "relu", "gemm", "conv"],
        start_ns=[0, 100, 0, 300, 0],
        end_ns=[60, 160, 30, 310, 5],
        duration_ns=[None, None, None, None, 5],
    )
    ov = s.kernel_overview(k)
    assert ov.rows() == [("a", 4, 160, 2, 3), ("b", 1, 5, 1, 1)]
    top = s.top_kernels(k, n=2)
    # a: conv 120 of 160 = 75 %, relu 30 = 18.75 %; gemm (10) is cut by n=2
    assert top.select("source_id", "name", "launch_count", "total_ns").rows() == [
        ("a", "conv", 2, 120),
        ("a", "relu", 1, 30),
        ("b", "conv", 1, 5),
    ]
    assert top["share_pct"].to_list() == pytest.approx([75.0, 18.75, 100.0])


def test_copies_by_kind() -> None:
    m = frame(
        "memcpy",
        source_id=["a", "a", "a"],
        kind=["HtoD", "HtoD", "memset"],
        size_bytes=[100, 50, 8],
        start_ns=[0, 10, 20],
        end_ns=[5, 13, 21],
    )
    assert s.copies_by_kind(m).rows() == [("a", "HtoD", 2, 150, 8), ("a", "memset", 1, 8, 1)]
    unsized = frame("memcpy", source_id=["a"], kind=["HtoD"], start_ns=[0], end_ns=[4])
    assert s.copies_by_kind(unsized).rows() == [("a", "HtoD", 1, None, 4)]


def test_telemetry_stats_ignores_nulls_and_keeps_column_order() -> None:
    g = frame(
        "gpu_samples",
        source_id=["a"] * 4,
        device_id=[0] * 4,
        timestamp_ns=[0, 1, 2, 3],
        power_w=[100.0, 300.0, None, 200.0],
        sm_clock_mhz=[1410.0, None, None, 1410.0],
    )
    t = s.telemetry_stats(g)
    assert t.select("metric", "sample_count", "min", "median", "max").rows() == [
        ("sm_clock_mhz", 2, 1410.0, 1410.0, 1410.0),
        ("power_w", 3, 100.0, 200.0, 300.0),
    ]
    assert s.telemetry_stats(schema.empty("gpu_samples")).height == 0


def test_iteration_stats_in_ms() -> None:
    it = frame(
        "iterations",
        source_id=["a"] * 3,
        device_id=[0] * 3,
        iteration=[0, 1, 2],
        duration_ns=[100_000_000, 200_000_000, 600_000_000],
        images_per_s=[640.0, 320.0, 106.0],
    )
    row = s.iteration_stats(it).row(0, named=True)
    assert row["iteration_count"] == 3
    assert row["mean_ms"] == pytest.approx(300.0)
    assert row["median_ms"] == pytest.approx(200.0)
    assert (row["min_ms"], row["max_ms"]) == (100.0, 600.0)
    assert row["std_ms"] == pytest.approx((((200**2) + 100**2 + 300**2) / 2) ** 0.5)
    assert row["median_images_per_s"] == 320.0


def test_top_ops_inclusive_times() -> None:
    o = frame(
        "ops",
        source_id=["a"] * 4,
        name=["aten::conv2d", "aten::convolution", "aten::conv2d", "aten::relu"],
        start_ns=[0, 1, 100, 200],
        end_ns=[50, 49, 140, 205],
    )
    top = s.top_ops(o, n=2)
    # self: conv2d 50 - 48 (its child) + 40; convolution has no child.
    assert top.select("name", "call_count", "inclusive_ns", "self_ns").rows() == [
        ("aten::conv2d", 2, 90, 42),
        ("aten::convolution", 1, 48, 48),
    ]
