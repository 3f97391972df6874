"""Telemetry attribution: sample-and-hold means, counts, coverage, energy, clock alignment."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyze.analyses.telemetry import (
    align_samples,
    attribute,
    attribute_iterations,
    pair_samples,
)
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
    with pytest.raises(NotAnswerable, match="^c have no recorded epoch origin"):
        align_samples(samples("c"), src, "a")
    with pytest.raises(NotAnswerable, match="^c has no recorded epoch origin"):
        align_samples(samples("a"), src, "c")
    # Messages name the file when the sources table has its path.
    named = src.with_columns(pl.Series("path", ["a.json", "b.csv", "/runs/c.csv"]))
    with pytest.raises(NotAnswerable, match="^/runs/c.csv have no recorded epoch origin"):
        align_samples(samples("c"), named, "a")


def test_other_source_samples_need_alignment() -> None:
    with pytest.raises(NotAnswerable, match="align"):
        attribute(intervals(), samples("b"))


# --- pairing samples of another source (an iteration log + an NVML log of the same run) -------

LOG_ORIGIN = 10_000 * MS  # the log's clock starts 10 s after the sampler's epoch-ns clock


def log_iterations(device: int | None = None) -> pl.DataFrame:
    # Two iterations on the log's own clock: [0, 20) and [20, 40) ms.
    return Tables.build(
        iterations=pl.DataFrame(
            {
                "source_id": ["log"] * 2,
                "device_id": pl.Series([device] * 2, dtype=pl.Int64),
                "iteration": [0, 1],
                "start_ns": [0, 20 * MS],
                "end_ns": [20 * MS, 40 * MS],
            }
        )
    ).iterations


def nvml(devices: tuple[int, ...] = (0,), sid: str = "nvml", t0: int = LOG_ORIGIN) -> pl.DataFrame:
    # Epoch timestamps; on device d the power is 100..500 W + 1000·d, every 10 ms.
    rows = [
        {
            "source_id": sid,
            "device_id": d,
            "timestamp_ns": t0 + k * 10 * MS,
            "power_w": p + 1000 * d,
        }
        for d in devices
        for k, p in enumerate((100.0, 200.0, 300.0, 400.0, 500.0))
    ]
    return Tables.build(gpu_samples=pl.DataFrame(rows)).gpu_samples


def sources(**origins: int | None) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "source_id": list(origins),
            "path": [f"/run/{s}.csv" for s in origins],
            "time_origin_epoch_ns": pl.Series(list(origins.values()), dtype=pl.Int64),
        }
    )


def test_iteration_log_takes_the_one_device_of_an_overlapping_sampler() -> None:
    src = sources(log=LOG_ORIGIN, nvml=0)
    df = attribute_iterations(log_iterations(), nvml(), sources=src)
    # Iteration 0 holds 100 W for 10 ms then 200 W; iteration 1: 300 W then 400 W.
    assert df["power_w"].to_list() == pytest.approx([150.0, 350.0])
    assert df["energy_j"].to_list() == pytest.approx([150 * 0.02, 350 * 0.02])
    assert df["samples_source_id"].to_list() == ["nvml", "nvml"]
    assert df["samples_device_id"].to_list() == [0, 0]
    assert df["device_id"].to_list() == [None, None]  # the iterations' own device stays unknown


def test_null_device_with_several_sampled_devices_is_ambiguous_not_guessed() -> None:
    src = sources(log=LOG_ORIGIN, nvml=0)
    with pytest.raises(NotAnswerable) as e:
        attribute_iterations(log_iterations(), nvml((0, 1)), sources=src)
    assert str(e.value) == (
        "no telemetry for these iterations: /run/log.csv: ambiguous for unknown device "
        "(/run/nvml.csv device 0, /run/nvml.csv device 1)"
    )
    with pytest.warns(UserWarning, match="ambiguous for unknown device") as rec:
        pairs = pair_samples(log_iterations(), nvml((0, 1)), src, what="iterations")
    assert len(rec) == 1
    assert pairs.select("samples_source_id", "samples_device_id").row(0) == (None, None)


def test_known_devices_are_matched() -> None:
    src = sources(log=LOG_ORIGIN, nvml=0)
    df = attribute_iterations(log_iterations(device=1), nvml((0, 1)), sources=src)
    assert df["power_w"].to_list() == pytest.approx([1150.0, 1350.0])
    assert df["samples_device_id"].to_list() == [1, 1]


def test_only_sources_with_epoch_origins_that_overlap_are_used() -> None:
    # "far" overlaps nothing (a day later); "loose" has no epoch origin: not considered, said so.
    smp = pl.concat(
        [nvml(), nvml(sid="far", t0=LOG_ORIGIN + 86_400_000 * MS), nvml(sid="loose", t0=0)]
    )
    src = sources(log=LOG_ORIGIN, nvml=0, far=0, loose=None)
    pairs = pair_samples(log_iterations(), smp, src)
    assert pairs.select("samples_source_id", "shift_ns", "pairing").row(0) == (
        "nvml",
        -LOG_ORIGIN,
        "epoch overlap",
    )
    with pytest.warns(UserWarning, match="loose.csv have no recorded epoch origin"):
        pairs = pair_samples(log_iterations(), nvml(sid="loose", t0=0), src)
    assert pairs["samples_source_id"].to_list() == [None]
    # An iteration source without an epoch origin cannot use other sources' samples.
    with pytest.raises(NotAnswerable, match="no recorded epoch origin, so other sources"):
        attribute_iterations(log_iterations(), nvml(), sources=sources(log=None, nvml=0))


def test_own_samples_come_first_and_need_no_origin() -> None:
    own = samples("log")  # the log's own clock, 100..500 W every 10 ms from 0
    smp = pl.concat([own, nvml()], how="diagonal_relaxed")
    df = attribute_iterations(log_iterations(device=0), smp, sources=sources(log=None, nvml=0))
    assert df["samples_source_id"].to_list() == ["log", "log"]
    assert df["power_w"].to_list() == pytest.approx([150.0, 350.0])


def test_samples_from_forces_a_source() -> None:
    smp = pl.concat([nvml(), nvml(sid="other", t0=LOG_ORIGIN - 10 * MS)])
    src = sources(log=LOG_ORIGIN, nvml=0, other=0)
    # Both overlap the log: with a known device that is ambiguous; --samples-from settles it.
    with pytest.raises(NotAnswerable, match="ambiguous for device 0"):
        attribute_iterations(log_iterations(device=0), smp, sources=src)
    df = attribute_iterations(log_iterations(device=0), smp, sources=src, samples_from="other")
    # "other" runs 10 ms earlier, -10..30 ms on the log's clock: iteration 0 sees 200 W then
    # 300 W; iteration 1, [20, 40) ms, ends after its last sample.
    assert df["power_w"][0] == pytest.approx(250.0)
    assert df["coverage"].to_list() == ["ok", "outside"] and df["power_w"][1] is None
    assert df["samples_source_id"].to_list() == ["other", "other"]
