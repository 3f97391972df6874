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
from traceanalyze.readers.smi.smi_csv import (
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
    # The averaged power is kept too, long, in the unit nvidia-smi documents for it (W); the
    # Active/Not Active flags are not.
    gm = t.gpu_metrics
    assert gm.select("metric_name", "unit", "value").rows() == [("power.draw.average", "W", 280.0)]


def test_nounits_gives_the_same_numbers_as_units(write) -> None:
    with_units = (
        "timestamp, index, memory.used [MiB], memory.total [MiB], clocks.max.sm [MHz], "
        "pcie.link.gen.current\n"
        "2025/01/02 03:04:05.678, 0, 1024 MiB, 81559 MiB, 1980 MHz, 5\n"
    )
    nounits = (
        "timestamp, index, memory.used [MiB], memory.total [MiB], clocks.max.sm [MHz], "
        "pcie.link.gen.current\n"
    ).replace(" [MiB]", "").replace(" [MHz]", "") + (
        "2025/01/02 03:04:05.678, 0, 1024, 81559, 1980, 5\n"
    )
    a = read_smi_csv(write("u.csv", with_units), tz="UTC")
    b = read_smi_csv(write("nu.csv", nounits), tz="UTC")
    want = [
        ("memory.used", "bytes", 1024.0 * 2**20),
        ("memory.total", "bytes", 81559.0 * 2**20),
        ("clocks.max.sm", "MHz", 1980.0),
        ("pcie.link.gen.current", None, 5.0),  # a count: no unit either way
    ]
    for t in (a, b):
        assert sorted(t.gpu_metrics.select("metric_name", "unit", "value").rows()) == sorted(want)
        assert t.devices["memory_bytes"].to_list() == [81559 * 2**20]


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
    assert t.sources["requested_interval_ns"].to_list() == [50_000_000]  # from the magic line
    assert sorted(t.devices["uuid"].to_list()) == ["GPU-a", "GPU-b"]
    frac = write(
        "nvml_frac.csv", nvml_sampler_magic_line(2.5) + "\n" + text.split("\n", 1)[1] + rows[0]
    )
    assert ta.read(frac).sources["requested_interval_ns"].to_list() == [2_500_000]
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
    assert t.sources["requested_interval_ns"].to_list() == [100_000_000]
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


# --- fast path (streaming polars scan) vs careful path (pyarrow) -------------------------------
# A clean log is read by `smi.fast`; anything it is not sure about goes to
# `_read_smi_careful`. Both must give the same tables, errors and warnings.

_BIG_HEADER = (
    "timestamp, index, uuid, name, power.draw [W], clocks.current.sm [MHz], temperature.gpu, "
    "fan.speed [%], memory.used [MiB], pstate, clocks_event_reasons.active"
)


def _big_rows(n: int) -> list[list[str]]:
    """`n` nvidia-smi rows (4 GPUs, 20 ms apart) as cells; every 7th power is [N/A], every fan
    [Not Supported] on GPU 3. Over 64 KiB from about 700 rows, so the file is scanned by path."""
    rows = []
    for i in range(n):
        gpu, sample = i % 4, i // 4
        ms = 125 + sample * 20
        stamp = f"2024/06/01 12:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"
        power = "[N/A]" if i % 7 == 3 else f"{100 + (i * 37) % 500}.{i % 100:02d} W"
        fan = "[Not Supported]" if gpu == 3 else f"{(i * 13) % 101} %"
        rows.append(
            [
                stamp,
                str(gpu),
                f"GPU-{gpu:04d}-aaaa",
                "NVIDIA H100 80GB HBM3",
                power,
                f"{1980 - (i % 3) * 15} MHz",
                str(30 + i % 50),
                fan,
                f"{(i * 101) % 81559} MiB",
                "P0" if i % 2 else "P2",
                f"0x{(4 if i % 5 else 1):016x}",
            ]
        )
    return rows


def _log(rows: list[list[str]], header: str | None = _BIG_HEADER) -> str:
    lines = ([header] if header is not None else []) + [", ".join(r) for r in rows]
    return "\n".join(lines) + "\n"


@pytest.fixture
def paths(monkeypatch):
    """Which path read each file: a list that gets "careful" for every careful read."""
    import traceanalyze.readers.smi.smi_csv as m

    seen: list[str] = []
    careful = m._read_smi_careful

    def spy(*a, **k):
        seen.append("careful")
        return careful(*a, **k)

    monkeypatch.setattr(m, "_read_smi_careful", spy)
    return seen


def _careful_only(monkeypatch, fn):
    """Run `fn` with the fast path switched off."""
    import traceanalyze.readers.smi.smi_csv as m

    with monkeypatch.context() as mp:
        mp.setattr(m, "_smi_fast", lambda *a, **k: None)
        return fn()


def _same_tables(a: ta.Tables, b: ta.Tables) -> None:
    for name, df in a.items():
        assert df.equals(b[name]), name


def test_big_clean_log_takes_the_fast_path_and_matches_the_careful_one(
    write, paths, monkeypatch
) -> None:
    rows = _big_rows(3000)
    p = write("big.csv", _log(rows))
    assert p.stat().st_size > 65536 + 3  # scanned by path, not from memory
    t = ta.read(p, tz="Europe/Berlin")
    assert paths == []
    _valid(t)
    gs = t.gpu_samples
    assert gs.height == 3000
    assert gs["timestamp_ns"].to_list() == [_epoch_ns(r[0], "Europe/Berlin") for r in rows]
    assert gs["device_id"].to_list() == [int(r[1]) for r in rows]
    assert gs["device_uuid"].to_list() == [r[2] for r in rows]
    powers = [None if r[4] == "[N/A]" else float(r[4][:-2]) for r in rows]
    assert gs["power_w"].to_list() == powers
    assert gs["sm_clock_mhz"].sum() == sum(float(r[5][:-4]) for r in rows)
    assert gs["temperature_c"].sum() == sum(int(r[6]) for r in rows)
    assert gs["fan_pct"].null_count() == sum(r[7] == "[Not Supported]" for r in rows)
    assert gs["clock_event_reasons"].to_list() == [int(r[10], 16) for r in rows]
    gm = t.gpu_metrics
    assert gm["metric_name"].unique().to_list() == ["memory.used"]  # pstate is text: ignored
    assert gm["value"].sum() == sum(int(r[8][:-4]) * 2**20 for r in rows)
    assert t.devices.select("device_id", "uuid", "name").rows() == [
        (g, f"GPU-{g:04d}-aaaa", "NVIDIA H100 80GB HBM3") for g in range(4)
    ]
    _same_tables(t, _careful_only(monkeypatch, lambda: ta.read(p, tz="Europe/Berlin")))
    assert paths == ["careful"]


def test_fast_path_with_memory_total_gzip_and_bom(write, paths, monkeypatch) -> None:
    import gzip

    rows = [[*r, "81559 MiB"] for r in _big_rows(2000)]
    text = _log(rows, _BIG_HEADER + ", memory.total [MiB]")
    plain = write("mt.csv", "\ufeff" + text)
    gz = write("mt.csv.gz", gzip.compress(text.encode()))
    a, b = read_smi_csv(plain, tz="UTC"), read_smi_csv(gz, tz="UTC")
    assert paths == []
    _same_tables(a, b)
    assert a.gpu_samples["timestamp_ns"][0] == _epoch_ns(rows[0][0], "UTC")
    assert a.devices["memory_bytes"].to_list() == [81559 * 2**20] * 4
    _same_tables(a, _careful_only(monkeypatch, lambda: read_smi_csv(plain, tz="UTC")))


def test_noheader_big_log_with_bom_units_in_values_or_none(write, paths) -> None:
    rows = _big_rows(2000)
    fields = "timestamp,index,uuid,name,power.draw,clocks.sm,temperature.gpu,fan.speed,memory.used,pstate,clocks_event_reasons.active"  # noqa: E501
    # Without a header the values carry units but the field names do not: the careful path
    # reads units from the values (the fast path only strips a header unit).
    p = write("nohdr_big.csv", "\ufeff" + _log(rows, None))
    t = read_smi_csv(p, fields=fields, tz="UTC")
    assert paths == ["careful"]
    assert t.gpu_samples["timestamp_ns"][0] == _epoch_ns(rows[0][0], "UTC")
    assert t.gpu_samples["power_w"].null_count() == sum(r[4] == "[N/A]" for r in rows)
    nounits = [
        [r[0]] + [c.rsplit(" ", 1)[0] if c[:1].isdigit() else c for c in r[1:]] for r in rows
    ]
    q = write("nohdr_nounits.csv", "\ufeff" + _log(nounits, None))
    t2 = read_smi_csv(q, fields=fields, tz="UTC")
    assert paths == ["careful"]  # no units anywhere: fast
    assert t2.gpu_samples["timestamp_ns"].to_list() == t.gpu_samples["timestamp_ns"].to_list()
    assert t2.gpu_samples["power_w"].to_list() == t.gpu_samples["power_w"].to_list()


@pytest.mark.parametrize(
    ("col", "value", "error", "match"),
    [
        (4, "77 MHz", MalformedInput, r"mixed units \['MHz', 'W'\]"),  # a gpu_samples field
        (8, "5 GiB", MalformedInput, r"mixed units \['GiB', 'MiB'\]"),  # a gpu_metrics field
        (6, "hot", MalformedInput, "not a number: 'hot'"),
        (10, "0xZZ", MalformedInput, "not a hex bitmask"),
        (1, "x", MalformedInput, "not an integer"),
        (0, "2024-06-01 12:00:00.125", MalformedInput, "bad nvidia-smi timestamp"),
    ],
)
def test_one_bad_row_late_in_a_big_log_fails_as_before(
    write, paths, monkeypatch, col, value, error, match
) -> None:
    rows = _big_rows(3000)
    rows[2500][col] = value
    p = write("bad.csv", _log(rows))
    with pytest.raises(error, match=match) as fast:
        read_smi_csv(p, tz="UTC")
    with pytest.raises(error) as careful:
        _careful_only(monkeypatch, lambda: read_smi_csv(p, tz="UTC"))
    assert str(fast.value) == str(careful.value)
    if "mixed" not in match:  # mixed units are a per-column error without a line
        assert f"line {2500 + 2}" in str(fast.value)


def test_unknown_unit_in_a_metrics_field_of_a_big_log(write, paths) -> None:
    rows = _big_rows(3000)
    for i, r in enumerate(rows):
        r[8] = "[N/A]" if i < 1500 else "7 furlongs"
    header = _BIG_HEADER.replace("memory.used [MiB]", "memory.used")
    with pytest.raises(UnknownUnit) as e:
        read_smi_csv(write("furl.csv", _log(rows, header)), tz="UTC")
    assert paths == []  # decided on the fast path's cells, same line numbering
    assert "'furlongs'" in str(e.value) and f"line {1500 + 2}" in str(e.value)
    assert e.value.column == "memory.used"


def test_new_state_late_in_a_big_log_warns_and_is_null(write, paths, monkeypatch) -> None:
    rows = _big_rows(3000)
    rows[2999][4] = "[GPU is lost]"
    p = write("lost.csv", _log(rows))
    with pytest.warns(UserWarning, match=r"1 value\(s\) like '\[GPU is lost\]'"):
        t = read_smi_csv(p, tz="UTC")
    assert paths == ["careful"]
    assert t.gpu_samples["power_w"][2999] is None
    assert t.gpu_samples["power_w"].null_count() == 1 + sum(r[4] == "[N/A]" for r in rows)


def test_ragged_row_blank_line_and_other_stamps_take_the_careful_path(write, paths) -> None:
    rows = _big_rows(3000)
    short = _log(rows).splitlines()
    short[2001] = short[2001].rsplit(", ", 1)[0]  # data row 2000 lost its last field
    with pytest.raises(MalformedInput, match="Expected 11 columns, got 10"):
        read_smi_csv(write("short.csv", "\n".join(short) + "\n"), tz="UTC")
    blank = _log(rows).splitlines()
    blank.insert(1500, "")
    t = read_smi_csv(write("blank.csv", "\n".join(blank) + "\n"), tz="UTC")
    assert t.gpu_samples.height == 3000  # the blank line is skipped, as pyarrow always did
    assert paths == ["careful", "careful"]
    # Two decimals, none, and "0X": not what the fast path parses, same values as by hand.
    rows[10][0], rows[11][0] = "2024/06/01 12:00:00.12", "2024/06/01 12:00:01"
    rows[12][10] = "0X0000000000000044"
    t = read_smi_csv(write("stamps.csv", _log(rows)), tz="UTC")
    assert paths == ["careful"] * 3
    gs = t.gpu_samples
    assert gs["timestamp_ns"][10] == _epoch_ns("2024/06/01 12:00:00.120", "UTC")
    assert gs["timestamp_ns"][11] == _epoch_ns("2024/06/01 12:00:01.000", "UTC")
    assert gs["clock_event_reasons"][12] == 0x44
