"""smi_csv reader: nvidia-smi query logs, NVML sampler CSVs, dumpGpuPower and dcgmi dmon text."""

from __future__ import annotations

import csv
import io
import statistics
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput, MissingColumn, TraceanalyzeError, UnknownUnit
from traceanalyze.readers import READERS, detect_format
from traceanalyze.readers.smi_csv import (
    NVML_SAMPLER_HEADER,
    NVML_SAMPLER_MAGIC,
    local_timezone,
    nvml_sampler_magic_line,
    read_smi_csv,
    sniff,
)

from .conftest import shared


def _epoch_ns(stamp: str, tz: str) -> int:
    """nvidia-smi local stamp → epoch ns, by hand with datetime/zoneinfo."""
    dt = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=ZoneInfo(tz))
    return int(dt.timestamp()) * 10**9 + dt.microsecond * 1000


def _valid(t: ta.Tables) -> None:
    for name, df in t.items():
        assert schema.validate(name, df) == [], name


# --- real file ---------------------------------------------------------------------------------


def test_roofline_nvml_sampler_csv() -> None:
    path = shared("smi_logs/roofline_custom_nvml_sampler_rtx5070.csv")
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    stamps = [
        datetime.strptime(r["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
        for r in rows
    ]
    ns = [int(s.timestamp()) * 10**9 + s.microsecond * 1000 for s in stamps]
    assert detect_format(path) == "smi_csv"
    t = ta.read(path)
    _valid(t)
    gs = t.gpu_samples
    assert gs.height == len(rows)
    assert gs["power_w"].mean() == pytest.approx(statistics.mean(float(r["power_w"]) for r in rows))
    assert gs["timestamp_ns"].max() - gs["timestamp_ns"].min() == max(ns) - min(ns)
    assert gs["timestamp_ns"].to_list() == ns
    assert gs["mem_clock_mhz"].sum() == sum(float(r["memory_clock_mhz"]) for r in rows)
    assert gs["sm_clock_mhz"].sum() == sum(float(r["sm_clock_mhz"]) for r in rows)
    src = t.sources.row(0, named=True)
    assert src["time_origin_epoch_ns"] == 0 and src["tool"] == "nvml-sampler"


# --- nvidia-smi --query-gpu ---------------------------------------------------------------------

SMI_UNITS = """\
timestamp, index, uuid, name, power.draw [W], power.limit [W], clocks.current.sm [MHz], clocks.current.memory [MHz], temperature.gpu, fan.speed [%], utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], pstate, clocks_throttle_reasons.active
2024/06/01 12:00:00.125, 0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 77.08 W, 400.00 W, 1410 MHz, 1593 MHz, 35, [N/A], 0 %, 0 %, 3 MiB, 81920 MiB, P0, 0x0000000000000001
2024/06/01 12:00:00.131, 1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 250.50 W, 400.00 W, 1755 MHz, 1593 MHz, 61, [Not Supported], 97 %, 41 %, 81559 MiB, 81920 MiB, P0, 0x0000000000000004
2024/06/01 12:00:01.125, 0, GPU-aaaa, NVIDIA A100-SXM4-80GB, [N/A], 400.00 W, 1410 MHz, 1593 MHz, 36, [N/A], 1 %, 0 %, 3 MiB, 81920 MiB, P0, 0x0000000000000000
2024/06/01 12:00:01.131, 1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 251.00 W, 400.00 W, 1740 MHz, 1593 MHz, 62, [Not Supported], 98 %, 40 %, 81559 MiB, 81920 MiB, P0, 0x0000000000000044
"""  # noqa: E501 (real nvidia-smi lines are this long)


def test_nvidia_smi_with_units_two_gpus_and_tz(write) -> None:
    p = write("smi.csv", SMI_UNITS)
    assert detect_format(p) == "smi_csv"
    t = ta.read(p, tz="Europe/Berlin")
    _valid(t)
    gs = t.gpu_samples
    rows = [r.split(", ") for r in SMI_UNITS.splitlines()[1:]]
    assert gs.height == 4
    assert gs["timestamp_ns"].to_list() == [_epoch_ns(r[0], "Europe/Berlin") for r in rows]
    assert gs["device_id"].to_list() == [0, 1, 0, 1]
    assert gs["device_uuid"].to_list() == ["GPU-aaaa", "GPU-bbbb", "GPU-aaaa", "GPU-bbbb"]
    assert gs["power_w"].to_list() == [77.08, 250.5, None, 251.0]
    assert gs["power_kind"].to_list() == [None] * 4  # plain power.draw does not say
    assert gs["power_limit_w"].to_list() == [400.0] * 4
    assert gs["sm_clock_mhz"].to_list() == [1410.0, 1755.0, 1410.0, 1740.0]
    assert gs["temperature_c"].to_list() == [35.0, 61.0, 36.0, 62.0]
    assert gs["fan_pct"].null_count() == 4  # [N/A] and [Not Supported]
    assert gs["gpu_util_pct"].to_list() == [0.0, 97.0, 1.0, 98.0]
    assert gs["mem_util_pct"].to_list() == [0.0, 41.0, 0.0, 40.0]
    # The pre-535 name of the bitmask, hex.
    assert gs["clock_event_reasons"].to_list() == [1, 4, 0, 0x44]
    gm = t.gpu_metrics
    used = gm.filter(gm["metric_name"] == "memory.used")
    assert used["unit"].unique().to_list() == ["bytes"]
    assert used["value"].to_list() == [3 * 2**20, 81559 * 2**20, 3 * 2**20, 81559 * 2**20]
    assert "pstate" not in gm["metric_name"].to_list()  # text field, ignored
    dev = t.devices.sort("device_id")
    assert dev["uuid"].to_list() == ["GPU-aaaa", "GPU-bbbb"]
    assert dev["memory_bytes"].to_list() == [81920 * 2**20] * 2
    src = t.sources.row(0, named=True)
    assert src["timezone"] == "Europe/Berlin" and src["time_origin_epoch_ns"] == 0
    assert src["tool"] == "nvidia-smi"


def test_timezone_changes_epoch(write) -> None:
    p = write("smi.csv", SMI_UNITS)
    utc = read_smi_csv(p, tz="UTC").gpu_samples["timestamp_ns"][0]
    ny = read_smi_csv(p, tz="America/New_York").gpu_samples["timestamp_ns"][0]
    assert utc == _epoch_ns("2024/06/01 12:00:00.125", "UTC")
    assert ny - utc == 4 * 3600 * 10**9  # EDT is UTC-4 in June
    default = read_smi_csv(p)
    assert default.sources["timezone"][0] == local_timezone()
    with pytest.raises(TraceanalyzeError, match="unknown time zone"):
        read_smi_csv(p, tz="Mars/Olympus")


def test_dst_gap_is_an_error_and_repeat_hour_warns(write) -> None:
    gap = "timestamp, power.draw [W]\n2024/03/31 02:30:00.000, 5 W\n"
    with pytest.raises(MalformedInput, match="does not exist") as e:
        read_smi_csv(write("gap.csv", gap), tz="Europe/Berlin")
    assert "line 2" in str(e.value)
    rep = "timestamp, power.draw [W]\n2024/10/27 02:30:00.000, 5 W\n"
    with pytest.warns(UserWarning, match="repeated DST hour"):
        t = read_smi_csv(write("rep.csv", rep), tz="Europe/Berlin")
    # The earlier offset (CEST, UTC+2).
    assert t.gpu_samples["timestamp_ns"][0] == int(
        datetime(2024, 10, 27, 0, 30, tzinfo=timezone.utc).timestamp() * 10**9
    )


def test_nounits_and_new_field_names(write) -> None:
    text = (
        "timestamp, index, power.draw.instant, power.draw.average, enforced.power.limit, "
        "clocks.sm, clocks.mem, clocks_event_reasons.active, clocks_event_reasons.sw_power_cap\n"
        "2025/01/02 03:04:05.678, 3, 301.25, 280.00, 700.00, 1980, 2619, 0x0000000000000004, "
        "Active\n"
    )
    t = read_smi_csv(write("new.csv", text), tz="UTC")
    r = t.gpu_samples.row(0, named=True)
    assert r["power_w"] == 301.25 and r["power_kind"] == "instant"
    assert r["power_limit_w"] == 700.0
    assert (r["sm_clock_mhz"], r["mem_clock_mhz"]) == (1980.0, 2619.0)
    assert r["clock_event_reasons"] == 4 and r["device_id"] == 3
    assert r["timestamp_ns"] == _epoch_ns("2025/01/02 03:04:05.678", "UTC")
    # The averaged power is kept too, long; the Active/Not Active flags are not.
    gm = t.gpu_metrics
    assert gm.select("metric_name", "unit", "value").rows() == [("power.draw.average", None, 280.0)]


def test_other_bracketed_state_is_null_with_a_warning(write) -> None:
    text = (
        "timestamp, power.draw [W]\n"
        "2024/06/01 12:00:00.125, [Unknown Error]\n"
        "2024/06/01 12:00:00.225, [Some New State]\n"
        "2024/06/01 12:00:00.325, 70 W\n"
    )
    with pytest.warns(UserWarning, match="Some New State"):
        t = read_smi_csv(write("state.csv", text), tz="UTC")
    assert t.gpu_samples["power_w"].to_list() == [None, None, 70.0]


def test_power_draw_average_alone(write) -> None:
    text = "timestamp, power.draw.average [W]\n2025/01/02 03:04:05.678, 280.00 W\n"
    r = read_smi_csv(write("avg.csv", text), tz="UTC").gpu_samples.row(0, named=True)
    assert r["power_w"] == 280.0 and r["power_kind"] == "average"


def test_noheader_needs_fields(write) -> None:
    text = (
        "2024/06/01 12:00:00.125, 0, 77.08 W, 1410 MHz\n"
        "2024/06/01 12:00:00.225, 0, 78 W, 1410 MHz\n"
    )
    p = write("nohdr.csv", text)
    assert sniff(p) and detect_format(p) == "smi_csv"
    with pytest.raises(MissingColumn, match="fields="):
        ta.read(p)
    t = ta.read(p, fields="timestamp,index,power.draw,clocks.sm", tz="UTC")
    assert t.gpu_samples["power_w"].to_list() == [77.08, 78.0]
    t2 = read_smi_csv(p, fields=["timestamp", "index", "power.draw", "clocks.sm"], tz="UTC")
    assert t2.gpu_samples["timestamp_ns"].to_list() == [
        _epoch_ns("2024/06/01 12:00:00.125", "UTC"),
        _epoch_ns("2024/06/01 12:00:00.225", "UTC"),
    ]


def test_unknown_unit_and_wrong_unit(write) -> None:
    bad = "timestamp, power.draw [W], memory.used\n2024/06/01 12:00:00.125, 77 W, 5 furlongs\n"
    with pytest.raises(UnknownUnit) as e:
        read_smi_csv(write("u.csv", bad), tz="UTC")
    assert "'memory.used'" in str(e.value) and "line 2" in str(e.value)
    wrong = "timestamp, power.draw\n2024/06/01 12:00:00.125, 77 MHz\n"
    with pytest.raises(UnknownUnit, match="expected 'W'"):
        read_smi_csv(write("w.csv", wrong), tz="UTC")


def test_bad_timestamp_and_value(write) -> None:
    with pytest.raises(MalformedInput, match="timestamp") as e:
        read_smi_csv(write("t.csv", "timestamp, power.draw\nyesterday, 5\n"), tz="UTC")
    assert "line 2" in str(e.value)
    with pytest.raises(MalformedInput, match="not a number"):
        read_smi_csv(
            write("v.csv", "timestamp, power.draw\n2024/06/01 12:00:00.125, lots\n"), tz="UTC"
        )


# --- the project's own sampler format -----------------------------------------------------------


def test_own_sampler_format(write) -> None:
    from traceanalyze.collect import sampler

    # The collect helper writes exactly this format.
    assert tuple(sampler.COLUMNS) == NVML_SAMPLER_HEADER
    assert sampler.MAGIC == NVML_SAMPLER_MAGIC
    assert sampler.magic_line(50) == nvml_sampler_magic_line(50)
    rows = [
        "1732260000000000000,0,GPU-a,1980,2619,312.4,instant,700,61,,97,41,123456.789,0",
        "1732260000050000000,1,GPU-b,1980,2619,300.5,average,700,60,30,96,40,,4",
    ]
    text = nvml_sampler_magic_line(50) + "\n" + ",".join(NVML_SAMPLER_HEADER) + "\n"
    p = write("nvml.csv", text + "\n".join(rows) + "\n")
    assert detect_format(p) == "smi_csv"
    t = ta.read(p)
    _valid(t)
    gs = t.gpu_samples
    cells = [r.split(",") for r in rows]
    assert gs["timestamp_ns"].to_list() == [int(c[0]) for c in cells]
    assert gs["power_w"].to_list() == [312.4, 300.5]
    assert gs["power_kind"].to_list() == ["instant", "average"]
    assert gs["fan_pct"].to_list() == [None, 30.0]
    assert gs["energy_j"].to_list() == [123456.789, None]
    assert gs["clock_event_reasons"].to_list() == [0, 4]
    assert t.sources["time_origin_epoch_ns"].to_list() == [0]
    assert sorted(t.devices["uuid"].to_list()) == ["GPU-a", "GPU-b"]
    bad = write("nvml_bad.csv", nvml_sampler_magic_line(50) + "\ntimestamp_ns,power_w\n1,2\n")
    with pytest.raises(MalformedInput, match="header must be"):
        ta.read(bad)


# --- SC22 dumpGpuPower and dcgmi dmon -----------------------------------------------------------

DUMP = """\
Initializing NVML... Success
Getting device... Selected device 2: Tesla V100-SXM2-16GB


Starting power measurement with energy 1000000 at 1650000000000000000
[0] Power: 45.1230, Util: 0, CoreClockMhz: 1380, MemClockMHz: 877, Timestamp_ns: 1650000000001000000, Temp: 40
[1] Power: 250.5000, Util: 99, CoreClockMhz: 1530, MemClockMHz: 877, Timestamp_ns: 1650000000101000000, Temp: 55
Application terminated. Closing profiler with energy 1025000 at 1650000000200000000
Shutting down NVML... Success
"""  # noqa: E501


def test_dump_gpu_power(write) -> None:
    p = write("dump.txt", DUMP)
    assert detect_format(p) == "smi_csv"
    t = ta.read(p)
    _valid(t)
    gs = t.gpu_samples.sort("timestamp_ns")
    assert gs.height == 4
    assert gs["power_w"].to_list() == [None, 45.123, 250.5, None]
    assert gs["energy_j"].to_list() == [1000.0, None, None, 1025.0]
    assert gs["sm_clock_mhz"].to_list() == [None, 1380.0, 1530.0, None]
    assert gs["device_id"].unique().to_list() == [2]
    assert t.devices["name"].to_list() == ["Tesla V100-SXM2-16GB"]


DCGMI = """\
#Entity   SMCLK  POWER  GTEMP  GPUTL  SMACT
ID                W      C
GPU 0     1410   70.23  35     0      0.912
GPU 1     1410   N/A    36     5      0.100
GPU 0     1395   75.00  36     50     N/A
GPU 1     1410   80.50  37     60     0.200
#Entity   SMCLK  POWER  GTEMP  GPUTL  SMACT
ID                W      C
GPU 0     1380   77.00  37     55     0.500
"""


def test_dcgmi_dmon(write) -> None:
    p = write("dmon.txt", DCGMI)
    assert detect_format(p) == "smi_csv"
    with pytest.raises(TraceanalyzeError, match="interval_ms"):
        ta.read(p)
    t = ta.read(p, interval_ms=100)
    _valid(t)
    gs = t.gpu_samples.sort("device_id", "timestamp_ns")
    assert gs["device_id"].to_list() == [0, 0, 0, 1, 1]
    assert gs["timestamp_ns"].to_list() == [0, 100_000_000, 200_000_000, 0, 100_000_000]
    assert gs["power_w"].to_list() == [70.23, 75.0, 77.0, None, 80.5]
    assert gs["sm_clock_mhz"].to_list() == [1410.0, 1395.0, 1380.0, 1410.0, 1410.0]
    assert gs["temperature_c"].to_list() == [35.0, 36.0, 37.0, 36.0, 37.0]
    gm = t.gpu_metrics.sort("device_id", "timestamp_ns")
    assert gm["metric_name"].unique().to_list() == ["SMACT"]
    assert gm["value"].to_list() == [0.912, 0.5, 0.1, 0.2]
    assert t.sources["time_origin_epoch_ns"].to_list() == [None]


# --- detection ----------------------------------------------------------------------------------


def test_sniff_is_exclusive(write) -> None:
    smi = write("a.csv", SMI_UNITS)
    assert [s for s, r in READERS.items() if r.sniff(smi)] == ["smi_csv"]
    ncu = write("b.csv", '"ID","Process ID","Kernel Name"\n')
    nvprof = write("c.csv", '"Start","Duration","Name"\n')
    other = write("d.csv", "a,b,c\n1,2,3\n")
    for p in (ncu, nvprof, other):
        assert not sniff(p)
