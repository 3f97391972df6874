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
    row = s.iteration_stats(it, warmup=0).row(0, named=True)
    assert (row["iteration_count"], row["warmup_count"]) == (3, 0)
    assert row["mean_ms"] == pytest.approx(300.0)
    assert row["median_ms"] == pytest.approx(200.0)
    assert (row["min_ms"], row["max_ms"]) == (100.0, 600.0)
    assert row["std_ms"] == pytest.approx((((200**2) + 100**2 + 300**2) / 2) ** 0.5)
    assert row["median_images_per_s"] == 320.0
    # By default the one warm-up rule (issue 21): max(1, 3 // 10) = 1 iteration dropped.
    row = s.iteration_stats(it).row(0, named=True)
    assert (row["iteration_count"], row["warmup_count"]) == (3, 1)
    assert (row["median_ms"], row["min_ms"]) == (400.0, 200.0)
    # A collect run's own --warmup 2 (from its manifest): iterations numbered below 2 go.
    row = s.iteration_stats(it, first_steady=2).row(0, named=True)
    assert (row["warmup_count"], row["median_ms"]) == (2, 600.0)


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


# --- the text rendering of per-source tables (render.py) --------------------------------------


def test_top_ops_in_the_report_have_self_time_when_the_analysis_gives_it(monkeypatch) -> None:
    from traceanalyze.adapters import reports as report

    o = frame(
        "ops",
        source_id=["a"] * 2,
        name=["aten::conv2d", "aten::convolution"],
        start_ns=[0, 1_000_000],
        end_ns=[5_000_000, 4_000_000],
    )
    got = report._top_ops(o.lazy(), 5)
    assert got.columns[:3] == ["source_id", "name", "call_count"]
    assert got.filter(pl.col("name") == "aten::conv2d")["inclusive_ms"].to_list() == [5.0]
    # An analysis that also gives self time (conv2d: 5 ms minus its child's 3 ms = 2 ms).
    with_self = s.top_ops(o, 5).with_columns(pl.Series("self_ns", [2_000_000, 3_000_000]))
    monkeypatch.setattr(report.s, "top_ops", lambda ops, n: with_self)
    got = report._top_ops(o.lazy(), 5)
    assert got.columns == ["source_id", "name", "call_count", "self_ms", "inclusive_ms", "mean_us"]
    assert got["self_ms"].to_list() == [2.0, 3.0]


def test_text_table_fits_the_width_cutting_text_not_numbers() -> None:
    from traceanalyze.cli.render import text_table

    long = "void kernel<" + "float, " * 30 + ">(int)"
    df = pl.DataFrame({"name": [long, "short"], "file": ["/a/b/c/run_rank0.csv"] * 2, "n": [1, 2]})
    out = text_table(df, width=60)
    # One file: named once above the table, not in a column (issue 32).
    head, *lines = out.splitlines()
    assert head == "file: /a/b/c/run_rank0.csv" and "file" not in lines[0]
    assert max(len(x) for x in lines) == 60
    # name is cut first (the widest), in its middle (issue 21: both ends tell rows apart);
    # n keeps every digit.
    assert lines[2].startswith("void kernel<float") and "…" in lines[2]
    assert lines[2].split("  ")[0].endswith(", >(int)")
    assert lines[3].split()[0] == "short" and lines[3].endswith("2")
    # Wide enough: nothing is cut.
    assert "…" not in text_table(df.with_columns(pl.lit("x").alias("name")), width=120)
    # A path is cut at its start: the file name stays.
    long_dir = "/very/long/directory/" * 5
    paths = pl.DataFrame({"file": [long_dir + "run_rank0.log", long_dir + "x/run_rank0.log"]})
    rows = text_table(paths.with_columns(n=pl.Series([1, 2])), width=12).splitlines()[2:]
    # several files: their shortest distinct names (issue 32), cut at the start when too long
    assert [r.split()[0] for r in rows] == ["directory", "x"]


def test_per_source_names_each_file_once_then_its_tables() -> None:
    from traceanalyze.cli.render import per_source

    k = pl.DataFrame({"source_id": ["b", "a"], "file": ["b.csv", "a.csv"], "kernel_count": [2, 1]})
    it = pl.DataFrame({"source_id": ["a"], "file": ["a.csv"], "iteration_count": [7]})
    srcs = pl.DataFrame(
        {"source_id": ["a", "b"], "format": ["iterlog", "ncu_csv"], "tool": [None, "ncu"]}
    )
    srcs = srcs.with_columns(pl.col("tool").cast(pl.String), pl.lit(None).alias("tool_version"))
    out = per_source({"sources": srcs, "kernels": k, "iterations": it})
    assert out.splitlines() == [
        "== a.csv",
        "   iterlog, source a",
        "-- kernels",
        "kernel_count",
        "------------",
        "           1",
        "-- iterations",
        "iteration_count",
        "---------------",
        "              7",
        "",
        "== b.csv",
        "   ncu_csv, ncu, source b",
        "-- kernels",
        "kernel_count",
        "------------",
        "           2",
        "",
    ]
