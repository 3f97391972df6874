"""rocm-smi / amd-smi CSV logs: the MI300X sampler logs against csv, and inline variants."""

from __future__ import annotations

import csv
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

import traceanalyze as ta
from traceanalyze.errors import MalformedInput
from traceanalyze.readers import detect_format

from .conftest import shared_set

DIR = "rocm/rocm_smi/amdbench_mi300x8_llama8b_bs1_mem0.8_gpu_"


def _samples(kind: str) -> list[dict[str, str]]:
    with open(shared_set(DIR + kind + ".csv"), newline="") as f:
        # a row with a time and no device closes a sweep
        return [r for r in csv.DictReader(f) if r["device"]]


def test_power_log() -> None:
    rows = _samples("power")
    path = shared_set(DIR + "power.csv")
    assert detect_format(path) == "rocm_smi_csv"
    t = ta.read(path)
    s = t.gpu_samples
    assert s.height == len(rows) == 4312
    assert s["power_w"].mean() == pytest.approx(mean(float(r["power_watts"]) for r in rows))
    assert s["power_limit_w"].null_count() == s.height  # the cap column is empty
    assert sorted(set(s["device_id"])) == sorted({int(r["device"][4:]) for r in rows})
    assert s["timestamp_ns"][0] == int(rows[0]["timestamp"]) * 10**9
    assert t.sources["time_origin_epoch_ns"][0] == 0


def test_temperature_log_junction_is_the_temperature() -> None:
    rows = _samples("temp")
    s = ta.read(shared_set(DIR + "temp.csv")).gpu_samples
    assert s.height == len(rows)
    junction = mean(float(r["temp_junction_celsius"]) for r in rows)
    edge = mean(float(r["temp_edge_celsius"]) for r in rows)
    assert s["temperature_c"].mean() == pytest.approx(junction)
    assert s["edge_temperature_c"].mean() == pytest.approx(edge)
    per_dev = ta.read(shared_set(DIR + "temp.csv")).gpu_samples.group_by("device_id").len()
    assert per_dev.height == 8


def test_amd_smi_columns_iso_times_and_na(write: Any) -> None:
    body = (
        "timestamp,gpu,power_usage,hotspot_temperature,edge_temperature,gfx_clk,gfx_activity\n"
        "2025-08-07T18:58:23Z,0,500,70,60,2100,98\n"
        "2025-08-07T20:58:24+02:00,1,N/A,71,61,2000,\n"
        "2025-08-07T18:58:25Z,\n"
    )
    t = ta.read(write("amd.csv", body))
    s = t.gpu_samples
    assert s.select("device_id", "power_w", "temperature_c", "edge_temperature_c").rows() == [
        (0, 500.0, 70.0, 60.0),
        (1, None, 71.0, 61.0),
    ]
    assert s["timestamp_ns"][1] - s["timestamp_ns"][0] == 1_000_000_000
    assert s["sm_clock_mhz"].to_list() == [2100.0, 2000.0]
    assert s["gpu_util_pct"].to_list() == [98.0, None]
    assert t.sources["tool"][0] == "amd-smi"


def test_bad_values_name_their_column(write: Any) -> None:
    with pytest.raises(MalformedInput, match=r"column 'power_watts'.*'hot'"):
        ta.read(write("a.csv", "timestamp,device,power_watts\n1,card0,hot\n"))
    with pytest.raises(MalformedInput, match=r"neither epoch seconds nor ISO-8601 with a zone"):
        ta.read(write("b.csv", "timestamp,device,power_watts\n2025-08-07 18:58:23,card0,5\n"))
    with pytest.raises(MalformedInput, match=r"'gpuX' is not cardN"):
        ta.read(write("c.csv", "timestamp,device,power_watts\n1,gpuX,5\n"), format="rocm_smi_csv")


def test_implausible_values_are_nulled(write: Any) -> None:
    with pytest.warns(UserWarning, match="temperature_c value"):
        t = ta.read(write("a.csv", "timestamp,device,temp_junction_celsius\n1,card0,9999\n"))
    assert t.gpu_samples["temperature_c"].to_list() == [None]


def test_attribute_and_variability_take_rocm_smi_power(tmp_path: Path) -> None:
    """An iteration log (epoch times) and a rocm-smi log of the same GPU: attribute gives each
    iteration the time-weighted power of the sample-and-hold series, computed here by hand."""
    src = shared_set(DIR + "power.csv")
    card3 = [r for r in _samples("power") if r["device"] == "card3"]
    ts, vs = [int(r["timestamp"]) for r in card3], [float(r["power_watts"]) for r in card3]
    log = tmp_path / "iters.csv"
    lines = [
        "# traceanalyze-iterlog v1",
        "rank,device_id,iteration,start_ns,duration_ns,batch_size,images_per_s",
    ]
    for n, i in enumerate(range(0, 20, 2)):  # iterations of two sweeps each
        lines.append(f"0,3,{n},{ts[i] * 10**9},{(ts[i + 2] - ts[i]) * 10**9},8,")
    log.write_text("\n".join(lines) + "\n")
    ds = ta.open(log, src)
    got = ds.attribute(per="iteration").sort("iteration")
    want = [
        (vs[i] * (ts[i + 1] - ts[i]) + vs[i + 1] * (ts[i + 2] - ts[i + 1])) / (ts[i + 2] - ts[i])
        for i in range(0, 20, 2)
    ]
    assert got["power_w"].to_list() == pytest.approx(want)
    assert set(got["samples_device_id"]) == {3}
    row = ds.variability(warmup=0).table.row(0, named=True)
    assert row["device_id"] == 3 and row["samples_device_id"] == 3
    assert min(vs[:20]) <= row["median_power_w"] <= max(vs[:20])


def test_generic_sampler_logs_are_not_claimed(write: Any) -> None:
    # generic names and integer devices: an NVIDIA sampler's as much as AMD's, left to smi_csv
    p = write("n.csv", "timestamp,gpu,power_watts\n1700000000,0,250\n")
    assert not ta.readers.READERS["rocm_smi_csv"].sniff(p)
    # the same names with rocm-smi's card devices are AMD's
    p = write("a.csv", "timestamp,device,power_watts\n1700000000,card0,250\n")
    assert detect_format(p) == "rocm_smi_csv"
