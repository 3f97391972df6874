"""Timeline lanes for host operators: a CPU-only run still gets a timeline."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyze import schema
from traceanalyze.analyses.timeline import (
    ANNOTATION_ROWS_MAX,
    check_window,
    extent,
    iteration_spans,
    lanes,
    nesting_depth,
    overlapping,
    window_samples,
)
from traceanalyze.errors import NotAnswerable


def test_cpu_ops_lane_per_thread_and_window_clipping() -> None:
    ops = schema.conform(
        "ops",
        pl.DataFrame(
            {
                "thread_id": [7, 7, 9],
                "start_ns": [0, 10, 5],
                "end_ns": [20, 15, 50],
                "name": ["aten::conv2d", "aten::convolution", "aten::relu"],
            }
        ),
    )
    ln = lanes(schema.empty("kernels"), schema.empty("memcpy"), ops=ops, start_ns=0, end_ns=30)
    got = ln.select("lane", "start_ns", "end_ns", "interval_count").sort("lane", "start_ns").rows()
    assert got == [
        ("CPU thread 7 ops", 0, 20, 2),
        ("CPU thread 7 ops", 10, 15, 2),
        ("CPU thread 9 ops", 5, 30, 1),  # clipped to the window end
    ]
    assert ln["device_id"].null_count() == ln.height


def test_nothing_to_draw_says_why() -> None:
    with pytest.raises(NotAnswerable, match="no kernels, copies, CPU ops or markers"):
        lanes(schema.empty("kernels"), schema.empty("memcpy"), ops=schema.empty("ops"))


@pytest.mark.parametrize(
    ("start", "end", "empty"),
    [
        (0, 30, False),
        (21, 24, False),
        (40, 50, False),  # the instant on the window's end
        (50, 60, False),  # and on its start
        (30, 40, True),
        (51, 99, True),
    ],
)
def test_check_window_refuses_what_lanes_refuses(start: int, end: int, empty: bool) -> None:
    """`Dataset.timeline` checks the window up front (`check_window`) and makes the figure's
    lanes only when they are read: both must refuse the same windows. Ops at [0, 20), [22, 23)
    and [5, 30); an instant marker at 50 (an instant on the window's start or end is in it)."""
    ops = schema.conform(
        "ops",
        pl.DataFrame({"thread_id": [7, 7, 9], "start_ns": [0, 22, 5], "end_ns": [20, 23, 30]}),
    )
    marks = schema.conform(
        "markers", pl.DataFrame({"thread_id": [7], "start_ns": [50], "end_ns": [50]})
    )
    k, m = schema.empty("kernels"), schema.empty("memcpy")
    refused = []
    for check in (lanes, check_window):
        try:
            check(k, m, ops=ops, markers=marks, start_ns=start, end_ns=end)
        except NotAnswerable as e:
            assert "no kernels, copies, CPU ops or markers" in str(e)
            refused.append(check.__name__)
    assert refused == (["lanes", "check_window"] if empty else [])


# --- windows: overlap, not start-in-window; the default window spans everything exported -----


def test_extent_spans_markers_and_iterations() -> None:
    k = schema.conform("kernels", pl.DataFrame({"start_ns": [100], "end_ns": [200]}))
    # A step range that opens 60 ns before the first kernel, an instant marker at 30 ns, and an
    # iteration (duration only for its end) that ends after the last kernel.
    mk = schema.conform(
        "markers",
        pl.DataFrame(
            {"name": ["Iteration Start", "ProfilerStep#1"], "start_ns": [30, 40]}
        ).with_columns(pl.Series("end_ns", [None, 190], dtype=pl.Int64)),
    )
    it = schema.conform(
        "iterations", pl.DataFrame({"iteration": [1], "start_ns": [40], "duration_ns": [250]})
    )
    assert extent(k, None, None, mk, it) == (30, 290)
    assert extent(k) == (100, 200)
    with pytest.raises(NotAnswerable, match="with start and end times"):
        extent(schema.empty("kernels"))


def test_overlapping_keeps_intervals_that_began_before_the_window() -> None:
    mk = schema.conform(
        "markers",
        pl.DataFrame(
            {
                "name": [
                    "before",
                    "straddles start",
                    "inside",
                    "straddles end",
                    "after",
                    "instant",
                ],
                "start_ns": [0, 5, 12, 18, 30, 15],
            }
        ).with_columns(pl.Series("end_ns", [9, 11, 14, 40, 35, None], dtype=pl.Int64)),
    )
    got = overlapping(mk, 10, 20).collect()["name"].to_list()
    assert got == ["straddles start", "inside", "straddles end", "instant"]
    # Touching is not overlapping: [0, 10) ends where the window starts.
    assert overlapping(mk, 9, 10).collect()["name"].to_list() == ["straddles start"]


def test_window_samples_hold_the_last_value_before_the_window() -> None:
    s = schema.conform(
        "gpu_samples",
        pl.DataFrame(
            {
                "source_id": ["a"] * 4 + ["a"],
                "device_id": [0] * 4 + [1],
                "timestamp_ns": [0, 50, 100, 150, 60],
                "power_w": [1.0, 2.0, 3.0, 4.0, 9.0],
                "sm_clock_mhz": [10.0, None, 30.0, 40.0, 90.0],
            }
        ),
    )
    # A 10 ns zoom between samples (period 50): device 0 holds 2 W (t=50) and, for the clock,
    # 10 MHz (t=0; the t=50 row has no clock); device 1 holds its only sample.
    w = window_samples(s, 70, 80)
    assert w.select("device_id", "timestamp_ns").rows() == [(0, 0), (0, 50), (0, 100), (1, 60)]
    clipped = window_samples(s, 70, 80, after=False, clip=True)
    assert clipped.select("device_id", "timestamp_ns", "power_w").rows() == [
        (0, 70, 1.0),
        (0, 70, 2.0),
        (1, 70, 9.0),
    ]
    # A sample exactly at the window start is the value there: no earlier one is added.
    assert window_samples(s, 100, 120, after=False)["timestamp_ns"].to_list() == [100, 60]


def test_iteration_spans_from_table_or_profiler_steps() -> None:
    it = schema.conform(
        "iterations",
        pl.DataFrame(
            {
                "device_id": [0, 1, 0],
                "iteration": [7, 7, 8],
                "start_ns": [100, 105, 200],
                "end_ns": [190, 195, None],
                "duration_ns": [None, None, 80],
            }
        ),
    )
    assert iteration_spans(it).rows() == [(7, 100, 195), (8, 200, 280)]
    mk = schema.conform(
        "markers",
        pl.DataFrame(
            {
                "name": ["ProfilerStep#101", "## forward ##", "ProfilerStep#102"],
                "start_ns": [10, 12, 40],
                "end_ns": [40, 20, 70],
            }
        ),
    )
    assert iteration_spans(schema.empty("iterations"), mk).rows() == [(101, 10, 40), (102, 40, 70)]


def test_marker_lanes_with_instants() -> None:
    mk = schema.conform(
        "markers",
        pl.DataFrame({"thread_id": [5, 5, None], "start_ns": [0, 10, 0]}).with_columns(
            pl.Series("end_ns", [30, 20, None], dtype=pl.Int64)
        ),
    )
    k = schema.conform(
        "kernels",
        pl.DataFrame({"device_id": [0], "stream_id": [7], "start_ns": [40], "end_ns": [50]}),
    )
    ln = lanes(k, None, markers=mk)
    got = ln.select("lane", "start_ns", "end_ns", "interval_count").rows()
    # Annotations first, one row per nesting depth (the range inside the other one level down),
    # then the GPU's lanes.
    assert got == [
        ("CPU thread 5 annotations", 0, 30, 1),
        ("CPU thread 5 annotations, depth 1", 10, 20, 1),
        ("annotations (no thread)", 0, 0, 1),  # the instant at the window start is kept
        ("GPU 0 s7 kernels", 40, 50, 1),
    ]


def test_nesting_depth_of_ranges_nested_overlapping_and_instant() -> None:
    # step [0, 100) holds forward [0, 40) (holding conv [5, 10)) and backward [40, 90); an
    # instant at 40 (forward has ended, backward has begun: inside backward); a range [95, 120)
    # that outlives the step; one after everything [130, 140).
    starts = [0, 0, 5, 40, 40, 95, 130]
    ends = [100, 40, 10, 90, 40, 120, 140]
    assert nesting_depth(starts, ends) == [0, 1, 2, 1, 2, 1, 0]


def test_annotation_lanes_order_gpu_side_and_too_many_to_label() -> None:
    # Host annotations on thread 3, a GPU-side annotation on device 0 stream 7 (no thread), a
    # host operator on thread 3 and a kernel: annotations, operators, GPU annotations, kernels.
    mk = schema.conform(
        "markers",
        pl.DataFrame(
            {
                "thread_id": [3, 3, None],
                "device_id": [None, None, 0],
                "stream_id": [None, None, 7],
                "name": ["ProfilerStep#1", "forward", "forward"],
                "start_ns": [0, 1, 2],
                "end_ns": [10, 5, 6],
            }
        ),
    )
    ops = pl.DataFrame({"thread_id": [3], "name": ["aten::mm"], "start_ns": [1], "end_ns": [4]})
    ops = schema.conform("ops", ops)
    k = schema.conform(
        "kernels",
        pl.DataFrame({"device_id": [0], "stream_id": [7], "start_ns": [2], "end_ns": [6]}),
    )
    ln = lanes(k, None, ops=ops, markers=mk)
    assert ln.select("lane", "name").rows() == [
        ("CPU thread 3 annotations", "ProfilerStep#1"),
        ("CPU thread 3 annotations, depth 1", "forward"),
        ("CPU thread 3 ops", "aten::mm"),
        ("GPU 0 s7 annotations", "forward"),
        ("GPU 0 s7 kernels", None),
    ]
    # Past ANNOTATION_ROWS_MAX a thread's annotations are one lane (names cannot be read);
    # past max_bars that lane is binned.
    n = ANNOTATION_ROWS_MAX + 1
    many = schema.conform(
        "markers",
        pl.DataFrame({"thread_id": [3] * n, "start_ns": list(range(0, 2 * n, 2))}).with_columns(
            end_ns=pl.col("start_ns") + 1, name=pl.lit("x")
        ),
    )
    one = lanes(k, None, markers=many)
    assert one.filter(pl.col("activity") == "markers")["lane"].unique().to_list() == [
        "CPU thread 3 annotations"
    ]
    binned = lanes(k, None, markers=many, max_bars=100)
    row = binned.filter(pl.col("activity") == "markers")
    assert row["binned"].all() and row["interval_count"].unique().to_list() == [n]
