"""Telemetry attribution: sample-and-hold means, counts, coverage, energy, clock alignment."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyze.analyses.telemetry import align_samples, attribute, attribute_iterations
from traceanalyze.errors import NotAnswerable
from traceanalyze.tables import Tables

MS = 1_000_000


def samples(sid: str = "a") -> pl.DataFrame:
    # Every 10 ms; power steps 100..500 W, SM clock 1000 then 1500 MHz; no temperature.
    return Tables.build(
        gpu_samples=pl.DataFrame(
            {
                "source_id": [sid] * 5,
                "device_id": [0] * 5,
                "timestamp_ns": [0, 10 * MS, 20 * MS, 30 * MS, 40 * MS],
                "power_w": [100.0, 200.0, 300.0, 400.0, 500.0],
                "sm_clock_mhz": [1000.0, 1000.0, 1500.0, 1500.0, 1500.0],
            }
        )
    ).gpu_samples


def intervals() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "source_id": ["a"] * 5,
            "device_id": [0] * 5,
            "kernel_id": [0, 1, 2, 3, 4],
            "start_ns": [5 * MS, 0, 38 * MS, 35 * MS, -5 * MS],
            "end_ns": [25 * MS, 40 * MS, 39 * MS, 45 * MS, 5 * MS],
        }
    )


def test_sample_and_hold_means_and_energy() -> None:
    df = attribute(intervals(), samples())
    assert df["kernel_id"].to_list() == [0, 1, 2, 3, 4]  # input order kept
    r = df.row(0, named=True)
    # [5, 25] ms: 100 W for 5 ms, 200 W for 10 ms, 300 W for 5 ms.
    assert r["power_w"] == pytest.approx((100 * 5 + 200 * 10 + 300 * 5) / 20)
    assert r["sm_clock_mhz"] == pytest.approx((1000 * 15 + 1500 * 5) / 20)
    assert r["energy_j"] == pytest.approx((100 * 5 + 200 * 10 + 300 * 5) / 1000)
    assert r["power_w_samples_count"] == 2 and r["coverage"] == "ok"
    assert r["temperature_c"] is None and r["temperature_c_samples_count"] == 0
    whole = df.row(1, named=True)
    assert whole["power_w"] == pytest.approx((100 + 200 + 300 + 400) / 4)
    assert whole["power_w_samples_count"] == 5


def test_coarse_and_outside_are_flagged_not_invented() -> None:
    df = attribute(intervals(), samples())
    short, late, early = df.row(2, named=True), df.row(3, named=True), df.row(4, named=True)
    assert short["coverage"] == "coarse" and short["power_w"] is None
    assert short["power_w_samples_count"] == 0 and short["energy_j"] is None
    assert late["coverage"] == "outside" and late["power_w"] is None
    assert early["coverage"] == "outside" and early["sm_clock_mhz"] is None


def test_fifty_us_kernel_under_fifty_ms_sampling() -> None:
    s = samples().with_columns(pl.col("timestamp_ns") * 5)  # 50 ms period
    k = pl.DataFrame(
        {"source_id": ["a"], "device_id": [0], "start_ns": [60 * MS], "end_ns": [60 * MS + 50_000]}
    )
    r = attribute(k, s).row(0, named=True)
    assert r["coverage"] == "coarse" and r["power_w"] is None


def test_iterations_with_duration_only_end() -> None:
    it = Tables.build(
        iterations=pl.DataFrame(
            {
                "source_id": ["a"],
                "device_id": [0],
                "iteration": [7],
                "start_ns": [0],
                "duration_ns": [20 * MS],
            }
        )
    ).iterations
    r = attribute_iterations(it, samples()).row(0, named=True)
    assert r["iteration"] == 7 and r["end_ns"] == 20 * MS
    assert r["energy_j"] == pytest.approx((100 * 10 + 200 * 10) / 1000)


def test_align_samples_through_epoch_origins() -> None:
    src = pl.DataFrame({"source_id": ["a", "b", "c"], "time_origin_epoch_ns": [1000, 500, None]})
    moved = align_samples(samples("b"), src, "a")
    assert moved["source_id"].unique().to_list() == ["a"]
    assert moved["timestamp_ns"].to_list() == [t - 500 for t in samples()["timestamp_ns"]]
    with pytest.raises(NotAnswerable, match="c have no recorded epoch origin"):
        align_samples(samples("c"), src, "a")
    with pytest.raises(NotAnswerable, match="source c has no recorded epoch origin"):
        align_samples(samples("a"), src, "c")


def test_other_source_samples_need_alignment() -> None:
    with pytest.raises(NotAnswerable, match="align"):
        attribute(intervals(), samples("b"))
