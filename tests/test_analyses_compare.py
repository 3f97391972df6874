"""Compare two sources: kernel matching by name + launch configuration, coverage, deltas."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyze.analyses.compare import compare_kernels, compare_overview
from traceanalyze.errors import NotAnswerable
from traceanalyze.tables import Tables


def tables() -> Tables:
    # A: gemm (grid 4) 2 x 10 ns, relu (grid 8) 1 x 30 ns.
    # B: gemm (grid 4) 2 x 5 ns, relu (grid 16: another config, unmatched) 1 x 40 ns.
    k = pl.DataFrame(
        {
            "source_id": ["A", "A", "A", "B", "B", "B"],
            "kernel_id": [0, 1, 2, 0, 1, 2],
            "name": ["gemm", "gemm", "relu", "gemm", "gemm", "relu"],
            "grid_x": [4, 4, 8, 4, 4, 16],
            "block_x": [256] * 6,
            "start_ns": [0, 20, 40, 0, 10, 20],
            "end_ns": [10, 30, 70, 5, 15, 60],
        }
    )
    it = pl.DataFrame(
        {
            "source_id": ["A", "A", "B", "B"],
            "iteration": [0, 1, 0, 1],
            "duration_ns": [100_000_000, 300_000_000, 100_000_000, 100_000_000],
            "images_per_s": [64.0, 32.0, 64.0, 64.0],
        }
    )
    s = pl.DataFrame({"source_id": ["A", "B"], "timestamp_ns": [0, 0], "power_w": [200.0, 250.0]})
    return Tables.build(kernels=k, iterations=it, gpu_samples=s)


def test_compare_kernels() -> None:
    kc = compare_kernels(tables().kernels, "A", "B")
    assert kc.height == 3
    g = kc.filter(pl.col("name") == "gemm").row(0, named=True)
    assert (g["count_a"], g["count_b"], g["mean_us_a"], g["mean_us_b"]) == (2, 2, 0.01, 0.005)
    assert g["ratio_mean"] == pytest.approx(0.5) and g["matched"]
    relu = kc.filter(pl.col("name") == "relu").sort("grid_x")
    assert relu["matched"].to_list() == [False, False]
    assert relu["count_b"].to_list() == [None, 1]


def test_compare_overview() -> None:
    t = tables()
    ov = compare_overview(t.kernels, t.iterations, t.gpu_samples, "A", "B")
    m = {r["metric"]: r for r in ov.to_dicts()}
    # A: 50 ns total, 20 matched (40 %); B: 50 ns total, 10 matched (20 %).
    assert m["match_coverage_pct"]["a"] == pytest.approx(40.0)
    assert m["match_coverage_pct"]["b"] == pytest.approx(20.0)
    assert m["median_iteration_ms"]["a"] == 200.0 and m["median_iteration_ms"]["b"] == 100.0
    assert m["median_iteration_ms"]["delta"] == -100.0 and m["median_iteration_ms"]["ratio"] == 0.5
    assert m["median_images_per_s"]["a"] == 48.0
    assert m["median_power_w"]["ratio"] == pytest.approx(1.25)
    assert m["kernel_time_per_iteration_ms"]["a"] == pytest.approx(50e-6 / 2)


def test_compare_empty_side_names_it() -> None:
    with pytest.raises(NotAnswerable, match="^no kernels in C$"):
        compare_kernels(tables().kernels, "A", "C")
    with pytest.raises(NotAnswerable, match=r"^no kernels in B = b.txt and C = c.txt$"):
        compare_kernels(
            tables().kernels.filter(pl.col("source_id") == "A"),
            "B",
            "C",
            names={"B": "B = b.txt", "C": "C = c.txt"},
        )


def test_compare_a_source_with_itself() -> None:
    # The same source on both sides (the CLI relabels one copy A and one B): all matched, 1.0.
    k = tables().kernels.filter(pl.col("source_id") == "A")
    both = pl.concat([k, k.with_columns(pl.lit("B").alias("source_id"))])
    kc = compare_kernels(both, "A", "B")
    assert kc["matched"].all() and kc["ratio_mean"].to_list() == [1.0, 1.0]


def test_overview_with_nothing_to_compare_says_so() -> None:
    t = tables()
    with (
        pytest.warns(UserWarning, match="^kernel rows left out: no kernels in X and Y$"),
        pytest.raises(NotAnswerable, match="^X and Y have no kernels, iterations or telemetry$"),
    ):
        compare_overview(t.kernels, t.iterations, t.gpu_samples, "X", "Y")
