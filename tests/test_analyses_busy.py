"""Busy time (union of intervals), per-bin busy fractions, timeline lanes, Chrome trace export."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from traceanalyze.analyses.busy import binned_busy, busy_time, union_intervals
from traceanalyze.analyses.timeline import iteration_window, lanes
from traceanalyze.errors import NotAnswerable
from traceanalyze.export.perfetto import chrome_trace_json
from traceanalyze.tables import Tables


def tables() -> Tables:
    # Device 0: kernels [0,10) [5,12) (overlap) [20,25) [22,30) on two streams; a copy [40,50).
    # Device 1: one kernel [100,110).
    return Tables.build(
        kernels=pl.DataFrame(
            {
                "source_id": ["a"] * 5,
                "kernel_id": [0, 1, 2, 3, 4],
                "device_id": [0, 0, 0, 0, 1],
                "stream_id": [7, 8, 7, 8, 7],
                "name": ["k0", "k1", "k2", "k3", "k4"],
                "start_ns": [0, 5, 20, 22, 100],
                "end_ns": [10, 12, 25, 30, 110],
            }
        ),
        memcpy=pl.DataFrame(
            {
                "source_id": ["a"],
                "device_id": [0],
                "stream_id": [7],
                "kind": ["HtoD"],
                "start_ns": [40],
                "end_ns": [50],
            }
        ),
    )


def test_union_intervals() -> None:
    u = union_intervals(tables().kernels, ["device_id"]).collect()
    assert u.rows() == [(0, 0, 12), (0, 20, 30), (1, 100, 110)]


def test_busy_default_window_is_source_extent() -> None:
    t = tables()
    df = busy_time(t.kernels, t.memcpy)
    rows = {(r["device_id"], r["activity"]): r for r in df.to_dicts()}
    # Window [0, 110): kernels on device 0 busy 12 + 10 = 22 ns.
    k0 = rows[(0, "kernels")]
    assert (k0["window_ns"], k0["busy_ns"], k0["interval_count"]) == (110, 22, 4)
    assert k0["busy_pct"] == pytest.approx(100 * 22 / 110)
    assert rows[(0, "copies")]["busy_ns"] == 10
    assert rows[(1, "kernels")]["busy_ns"] == 10
    assert df.height == 3


def test_busy_given_window_clips() -> None:
    t = tables()
    df = busy_time(t.kernels, None, window=(6, 24))
    k0 = df.filter(pl.col("device_id") == 0).row(0, named=True)
    # [6,12) and [20,24): 6 + 4.
    assert k0["busy_ns"] == 10 and k0["window_ns"] == 18
    k1 = df.filter(pl.col("device_id") == 1).row(0, named=True)
    assert k1["busy_ns"] == 0 and k1["interval_count"] == 0


def test_busy_without_times_not_answerable() -> None:
    k = Tables.build(kernels=pl.DataFrame({"source_id": ["a"], "kernel_id": [0]})).kernels
    with pytest.warns(UserWarning, match="1 kernel/copy rows"), pytest.raises(NotAnswerable):
        busy_time(k)


def test_binned_busy() -> None:
    f = binned_busy(np.array([0, 5, 20, 22]), np.array([10, 12, 25, 30]), 0, 40, 4)
    assert f.tolist() == [1.0, 0.2, 1.0, 0.0]
    # Overlaps never exceed 1; an interval spanning bins is split between them.
    f = binned_busy(np.array([0, 0]), np.array([15, 15]), 0, 20, 2)
    assert f.tolist() == [1.0, 0.5]


def test_lanes_raw_and_binned() -> None:
    t = tables()
    raw = lanes(t.kernels, t.memcpy, max_bars=10)
    assert not raw["binned"].any()
    assert raw.height == 6
    assert sorted(set(raw["lane"].to_list())) == [
        "GPU 0 s7 copies",
        "GPU 0 s7 kernels",
        "GPU 0 s8 kernels",
        "GPU 1 s7 kernels",
    ]
    b = lanes(t.kernels, None, start_ns=0, end_ns=40, max_bars=1)
    # Every lane has more intervals than 1 bar -> binned; the count behind it is kept.
    s7 = b.filter(pl.col("lane") == "GPU 0 s7 kernels")
    assert s7["binned"].all() and s7["interval_count"].to_list() == [2]
    assert s7["busy_ratio"].to_list() == [pytest.approx((10 + 5) / 40)]


def test_iteration_window_from_markers() -> None:
    it = Tables.build(iterations=pl.DataFrame({"source_id": ["a"], "iteration": [3]})).iterations
    mk = Tables.build(
        markers=pl.DataFrame(
            {"source_id": ["a"], "name": ["ProfilerStep#3"], "start_ns": [5], "end_ns": [9]}
        )
    ).markers
    assert iteration_window(it, mk, 3) == (5, 9)
    with pytest.raises(NotAnswerable, match="iteration 4"):
        iteration_window(it, mk, 4)


def test_chrome_trace() -> None:
    t = tables()
    samples = Tables.build(
        gpu_samples=pl.DataFrame(
            {
                "source_id": ["a"] * 2,
                "device_id": [0, 0],
                "timestamp_ns": [0, 50_000],
                "power_w": [100.0, 200.0],
            }
        )
    ).gpu_samples
    mk = Tables.build(
        markers=pl.DataFrame(
            {
                "source_id": ["a"] * 2,
                "process_id": [9, 9],
                "thread_id": [1, 1],
                "name": ["ProfilerStep#0", "mark"],
                "start_ns": [0, 3],
                "end_ns": [2_000, None],
            }
        )
    ).markers
    doc = json.loads(chrome_trace_json(t.kernels, t.memcpy, mk, samples))
    ev = doc["traceEvents"]
    x = [e for e in ev if e["ph"] == "X" and e["cat"] == "kernel"]
    assert len(x) == 5
    k1 = next(e for e in x if e["name"] == "k1")
    assert (k1["ts"], k1["dur"], k1["pid"], k1["tid"]) == (0.005, 0.007, 0, 8)
    cp = next(e for e in ev if e.get("cat") == "memcpy")
    assert cp["name"] == "Memcpy HtoD" and cp["tid"] == 1_000_007
    c = [e for e in ev if e["ph"] == "C"]
    assert [(e["ts"], e["args"]["value"]) for e in c] == [(0.0, 100.0), (50.0, 200.0)]
    step = next(e for e in ev if e.get("name") == "ProfilerStep#0")
    assert step["pid"] == 1_000_009 and step["dur"] == 2.0
    assert any(e["ph"] == "i" and e["name"] == "mark" for e in ev)
    names = {(e["pid"], e["args"]["name"]) for e in ev if e["name"] == "process_name"}
    assert names == {(0, "GPU 0"), (1, "GPU 1"), (1_000_009, "host pid 9")}
    threads = {e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert {"stream 7", "stream 8", "copies stream 7", "thread 1"} <= threads
