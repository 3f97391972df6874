"""Measurement health on inline frames with hand-counted problems."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyze.analyses.health import (
    event_health,
    health,
    iteration_health,
    kernel_health,
    sampling_health,
)
from traceanalyze.tables import Tables

MS = 1_000_000


def tables() -> Tables:
    return Tables.build(
        # Stream 7: [0,10) then [5,12) overlaps, [20,15) has end < start. Stream 8 overlaps
        # nothing (a different stream may run concurrently). One kernel without times.
        kernels=pl.DataFrame(
            {
                "source_id": ["a"] * 5,
                "kernel_id": [0, 1, 2, 3, 4],
                "device_id": [0] * 5,
                "stream_id": [7, 7, 7, 8, 8],
                "start_ns": [0, 5, 20, 6, None],
                "end_ns": [10, 12, 15, 9, None],
            }
        ),
        memcpy=pl.DataFrame({"source_id": ["a"], "start_ns": [10], "end_ns": [3]}),
        # Gaps 10, 10, 10, 70 ms on device 0 and 20 ms on device 1 (another source b).
        gpu_samples=pl.DataFrame(
            {
                "source_id": ["a"] * 5 + ["b"] * 2,
                "device_id": [0] * 5 + [1] * 2,
                "timestamp_ns": [0, 10 * MS, 20 * MS, 30 * MS, 100 * MS, 0, 20 * MS],
            }
        ),
        # Device 0: numbers 0, 1, 3, 3 -> number 2 missing, number 3 duplicated.
        iterations=pl.DataFrame(
            {"source_id": ["a"] * 4, "device_id": [0] * 4, "iteration": [0, 1, 3, 3]}
        ),
    )


def test_sampling_health() -> None:
    df = sampling_health(tables().gpu_samples, requested_interval_ms=1.0)
    a = df.row(0, named=True)
    assert a["source_id"] == "a" and a["sample_count"] == 5
    assert a["median_gap_ms"] == 10.0 and a["max_gap_ms"] == 70.0
    # numpy-style linear p95 of [10, 10, 10, 70]: 10 + 0.85 * 60.
    assert a["p95_gap_ms"] == pytest.approx(10 + 0.85 * 60)
    assert a["long_gap_count"] == 1 and a["requested_interval_ms"] == 1.0
    assert a["interval_ratio"] == 10.0  # achieved 10 ms where 1 ms was asked
    b = df.row(1, named=True)
    assert (b["sample_count"], b["median_gap_ms"], b["long_gap_count"]) == (2, 20.0, 0)


def test_requested_interval_from_the_sources_table() -> None:
    # a's sampler asked for 8 ms (the NVML sampler records it); b's log does not say.
    src = pl.DataFrame(
        {"source_id": ["a", "b"], "requested_interval_ns": [8 * MS, None]},
        schema_overrides={"requested_interval_ns": pl.Int64},
    )
    df = sampling_health(tables().gpu_samples, src)
    assert df["requested_interval_ms"].to_list() == [8.0, None]
    assert df["interval_ratio"].to_list() == [10 / 8, None]


def test_kernel_health() -> None:
    t = tables()
    r = kernel_health(t.kernels).row(0, named=True)
    assert r == {"source_id": "a", "overlapping_kernel_count": 1}


def test_event_health_per_table() -> None:
    t = tables()
    extra = Tables.build(
        # An instant marker (no end) is fine; one without a start is not; [9, 4) is negative.
        markers=pl.DataFrame(
            {"source_id": ["a"] * 3, "start_ns": [1, None, 9], "end_ns": [None, 5, 4]}
        ),
        # Iterations: a duration only (fine), nothing (untimed), a negative duration.
        iterations=pl.DataFrame(
            {
                "source_id": ["c"] * 3,
                "iteration": [0, 1, 2],
                "duration_ns": [5, None, -3],
            }
        ),
    )
    df = event_health(
        kernels=t.kernels, memcpy=t.memcpy, markers=extra.markers, iterations=extra.iterations
    )
    assert df.rows() == [
        # kernels: one without times, [20, 15) negative; the copy [10, 3) negative.
        ("a", "kernels", 5, 1, 1),
        ("a", "memcpy", 1, 0, 1),
        ("a", "markers", 3, 1, 1),
        ("c", "iterations", 3, 1, 1),
    ]
    with pytest.raises(ValueError, match="unknown event table"):
        event_health(samples=t.gpu_samples)


def test_iteration_health() -> None:
    r = iteration_health(tables().iterations).row(0, named=True)
    assert r == {
        "source_id": "a",
        "iteration_count": 4,
        "missing_iteration_count": 1,
        "duplicate_iteration_count": 1,
    }


def test_health_joins_every_source() -> None:
    t = tables()
    df = health(t.kernels, t.memcpy, t.gpu_samples, t.iterations)
    assert df["source_id"].to_list() == ["a", "b"]
    assert df.filter(pl.col("source_id") == "b")["overlapping_kernel_count"].to_list() == [None]
    a = df.filter(pl.col("source_id") == "a").row(0, named=True)
    # Kernels: 1 untimed, 1 negative; the copy: 1 negative; the four iterations have neither a
    # duration nor start/end times: untimed.
    assert (a["untimed_event_count"], a["negative_event_count"]) == (1 + 4, 2)
