"""Timeline lanes for host operators: a CPU-only run still gets a timeline."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyze import schema
from traceanalyze.analyses.timeline import lanes
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
    with pytest.raises(NotAnswerable, match="no kernels, copies or CPU ops"):
        lanes(schema.empty("kernels"), schema.empty("memcpy"), ops=schema.empty("ops"))
