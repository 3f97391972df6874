# Verbatim nvprof CSV lines (formats.md §1.2.1) are longer than 100 characters:
# ruff: noqa: E501
"""nvprof_csv reader: real magus captures, the SC22 layout, summary/metrics modes, bad input.

Expected values are computed here from the text with the csv module and `decimal` (units applied
by hand), never taken from the reader.
"""

from __future__ import annotations

import csv
import gzip
import re
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput, MissingColumn, UnknownUnit
from traceanalyze.readers import READERS, detect_format
from traceanalyze.readers.nvprof.nvprof_csv import read_nvprof_csv, sniff

from .conftest import shared

GPUTRACE = "nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv"
METRICS = "nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv"

NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
BYTES = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}  # nvprof's binary multiples
RATE = {f"{u}/s": f for u, f in BYTES.items()}


def to_int(text: str, factor: int) -> int:
    """Decimal text × factor, rounded to an integer (half-even; exact for these inputs)."""
    return int((Decimal(text) * factor).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def csv_rows(path: Path) -> tuple[list[str], list[str], list[dict[str, str]]]:
    """Header, units row and data rows of a one-table nvprof CSV, '==' lines dropped."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("==")]
    rows = list(csv.reader(lines))
    header, units, data = rows[0], rows[1], rows[2:]
    return header, units, [dict(zip(header, r, strict=True)) for r in data]


def assert_valid(t: ta.Tables) -> None:
    for name, df in t.items():
        assert schema.validate(name, df) == [], name


# --- the real magus GPU trace (old 17-column layout, ` [NNNN]` suffixes) -------------------


def test_magus_gputrace_counts_and_sums() -> None:
    path = shared(GPUTRACE)
    assert detect_format(path) == "nvprof_csv"
    t = ta.read(path)
    assert_valid(t)
    header, units, rows = csv_rows(path)
    unit = dict(zip(header, units, strict=True))
    assert (unit["Start"], unit["Duration"], unit["Size"], unit["Static SMem"]) == (
        "ms",
        "ms",
        "KB",
        "KB",
    )

    kern = [r for r in rows if not r["Name"].startswith("[")]
    copies = [r for r in rows if r["Name"].startswith("[CUDA memcpy")]
    assert len(kern) + len(copies) == len(rows)
    assert t.kernels.height == len(kern) == 301
    assert t.memcpy.height == len(copies) == 3
    assert t.gpu_samples.height == 0 and t.kernel_metrics.height == 0

    def ns(r: dict[str, str], col: str) -> int:
        return to_int(r[col], NS[unit[col]])

    assert t.kernels["duration_ns"].sum() == sum(ns(r, "Duration") for r in kern)
    assert t.kernels["start_ns"].sum() == sum(ns(r, "Start") for r in kern)
    assert (t.kernels["end_ns"] - t.kernels["start_ns"]).to_list() == t.kernels[
        "duration_ns"
    ].to_list()
    assert t.memcpy["duration_ns"].sum() == sum(ns(r, "Duration") for r in copies)
    assert t.memcpy["size_bytes"].sum() == sum(
        to_int(r["Size"], BYTES[unit["Size"]]) for r in copies
    )
    # 320x320 and 640x320 float matrices: 400 KB and 800 KB are binary KB.
    assert sorted(t.memcpy["size_bytes"].to_list()) == [320 * 320 * 4, 640 * 320 * 4, 640 * 320 * 4]
    assert t.memcpy["kind"].to_list() == [
        re.match(r"\[CUDA memcpy (\w+)\]", r["Name"]).group(1) for r in copies
    ]
    assert t.kernels["static_smem_bytes"].sum() == sum(
        to_int(r["Static SMem"], BYTES[unit["Static SMem"]]) for r in kern
    )
    assert t.kernels["dynamic_smem_bytes"].sum() == 0

    # ` [NNNN]` suffix → correlation_id, stripped from the name; file order → kernel_id.
    ids = [int(re.search(r" \[(\d+)\]$", r["Name"]).group(1)) for r in kern]
    k = t.kernels.sort("kernel_id")
    assert k["kernel_id"].to_list() == list(range(len(kern)))
    assert k["correlation_id"].to_list() == ids
    assert set(k["name"]) == {"void matrixMulCUDA<int=32>(float*, float*, float*, int, int)"}
    geometry = {
        (int(r["Grid X"]), int(r["Grid Y"]), int(r["Block X"]), int(r["Block Y"])) for r in kern
    }
    assert set(k.select("grid_x", "grid_y", "block_x", "block_y").rows()) == geometry
    assert set(k["registers_per_thread"]) == {int(r["Registers Per Thread"]) for r in kern}

    # Device "GeForce GTX 1080 Ti (0)"; Context "1", Stream "7"; pid from the '==12400==' lines.
    assert t.devices.select("device_id", "name").rows() == [(0, "GeForce GTX 1080 Ti")]
    assert set(t.kernels["device_id"]) == {0}
    assert set(t.kernels["stream_id"]) == {int(r["Stream"]) for r in kern}
    assert set(t.kernels["context_id"]) == {int(r["Context"]) for r in kern}
    pids = set(re.findall(r"^==(\d+)==", path.read_text(), re.M))
    assert set(t.kernels["process_id"]) == {int(p) for p in pids}
    src = t.sources.row(0, named=True)
    assert src["tool"] == "nvprof" and src["tool_version"] is None
    assert src["time_origin_epoch_ns"] is None


# --- the real magus aggregate metrics (units glued to values) ------------------------------


def parse_metric(text: str) -> tuple[float, str | None]:
    """Independent parse of one aggregate metric value, by hand."""
    m = re.fullmatch(r"(Idle|Low|Mid|High|Max) \((\d+)\)", text)
    if m:
        return float(m.group(2)), "level"
    m = re.fullmatch(r"([0-9.]+)(%|[KMGT]?B/s)?", text)
    assert m, text
    num, u = float(m.group(1)), m.group(2)
    if u is None:
        return num, None
    if u == "%":
        return num, "%"
    return num * RATE[u], "bytes/s"


def test_magus_metrics_values_units_levels() -> None:
    path = shared(METRICS)
    assert detect_format(path) == "nvprof_csv"
    t = ta.read(path)
    assert_valid(t)
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("==")]
    rows = list(csv.DictReader(lines))
    assert t.kernel_metrics.height == 3 * len(rows) == 360
    assert t.kernels.height == 0

    km = t.kernel_metrics
    assert set(km["stat"]) == {"min", "max", "avg"}
    assert set(km["invocations_count"]) == {int(r["Invocations"]) for r in rows} == {301}
    assert km["kernel_id"].null_count() == km.height
    assert set(km["device_id"]) == {0}
    assert set(km["process_id"]) == {16702}

    got = {(r["metric_name"], r["stat"]): (r["value"], r["unit"]) for r in km.iter_rows(named=True)}
    assert len(got) == km.height
    for r in rows:
        for stat in ("Min", "Max", "Avg"):
            value, unit = parse_metric(r[stat])
            gv, gu = got[(r["Metric Name"], stat.lower())]
            assert gu == unit, (r["Metric Name"], stat)
            assert gv == pytest.approx(value, rel=1e-12), (r["Metric Name"], stat)
    by_unit = {u: sum(1 for (_, uu) in got.values() if uu == u) for u in ("%", "level", "bytes/s")}
    assert by_unit == {
        "%": 3 * sum(r["Min"].endswith("%") for r in rows),
        "level": 3 * sum(r["Min"].endswith(")") for r in rows),
        "bytes/s": 3 * sum(r["Min"].endswith("B/s") for r in rows),
    }
    # Levels: 'High (7)' / 'High (8)' for shared_utilization.
    assert got[("shared_utilization", "max")] == (8.0, "level")
    assert got[("dram_utilization", "min")] == (1.0, "level")

    # Binary multiples check on the data itself (module docstring): C = 640x320 floats stored
    # (gst) vs 5 sysmem write transactions of 32 B; the slowest launch gives both minima.
    gst = got[("gst_throughput", "min")][0]
    sysmem = got[("sysmem_write_throughput", "min")][0]
    sysmem_tx = int(next(r["Min"] for r in rows if r["Metric Name"] == "sysmem_write_transactions"))
    assert gst / sysmem == pytest.approx((640 * 320 * 4) / (sysmem_tx * 32), rel=1e-5)


# --- SC22-style capture (formats.md §1.2.1), built inline ------------------------------------

SC22_HEAD = """\
==1598336== NVPROF is profiling process 1598336, command: ./pagerank_spmv ./rajat30.mtx 2
==1598336== Profiling application: ./pagerank_spmv ./rajat30.mtx 2
==1598336== Profiling result:
"Start","Duration","Grid X","Grid Y","Grid Z","Block X","Block Y","Block Z","Registers Per Thread","Static SMem","Dynamic SMem","Size","Throughput","SrcMemType","DstMemType","Device","Context","Stream","System","Name","Correlation_ID"
s,ms,,,,,,,,B,B,MB,GB/s,,,,,,,,
0.174039,,,,,,,,,,,,,,,"NVIDIA TITAN V (0)",,,"135/850","[SM/Memory Clock (MHz)]",
0.174060,,,,,,,,,,,,,,,"NVIDIA TITAN V (0)",,,"58","[Temperature (C)]",
0.174422,,,,,,,,,,,,,,,"NVIDIA TITAN V (0)",,,"32535/250000","[Power/Limit (mW)]",
0.174558,,,,,,,,,,,,,,,"NVIDIA TITAN V (0)",,,"43","[Fan Speed (%)]",
"""
SC22_ROWS = """\
0.512345,1.234567,,,,,,,,,,16.000000,12.656250,"Pageable","Device","NVIDIA TITAN V (0)","1","7",,"[CUDA memcpy HtoD]",118
0.531717,0.020959,10063,1,1,64,1,1,16,0,0,,,,,"NVIDIA TITAN V (0)","1","7",,"inibuffer(float*, float*, int)",121
0.540001,0.100000,256,2,1,128,1,1,32,1024,512,,,,,"NVIDIA TITAN V (0)","1","14",,"void spmv<float, int>(int, float const*, int const*, float*)",125
0.600000,0.002000,,,,,,,,,,0.500000,0.244141,,"Device","NVIDIA TITAN V (0)","1","7",,"[CUDA memset]",130
0.700000,0.300000,,,,,,,,,,16.000000,52.083333,"Device","Pageable","NVIDIA TITAN V (0)","1","7",,"[CUDA memcpy DtoH]",131
"""


def test_sc22_layout_samples_kernels_memcpy(write) -> None:
    p = write("resnet_1598336_ts_host.csv", SC22_HEAD + SC22_ROWS)
    assert detect_format(p) == "nvprof_csv"
    t = ta.read(p)
    assert_valid(t)

    # Four sample rows → four gpu_samples rows (not merged), W from mW.
    g = t.gpu_samples.sort("timestamp_ns")
    assert g.select(
        "timestamp_ns",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "temperature_c",
        "power_w",
        "power_limit_w",
        "fan_pct",
    ).rows() == [
        (174_039_000, 135.0, 850.0, None, None, None, None),
        (174_060_000, None, None, 58.0, None, None, None),
        (174_422_000, None, None, None, pytest.approx(32.535, rel=1e-15), 250.0, None),
        (174_558_000, None, None, None, None, None, 43.0),
    ]
    assert set(g["device_id"]) == {0}

    # Kernels: quoted names with commas kept whole; Correlation_ID column; smem in bytes.
    k = t.kernels.sort("kernel_id")
    assert k.select("name", "correlation_id", "start_ns", "duration_ns", "stream_id").rows() == [
        ("inibuffer(float*, float*, int)", 121, 531_717_000, 20_959, 7),
        (
            "void spmv<float, int>(int, float const*, int const*, float*)",
            125,
            540_001_000,
            100_000,
            14,
        ),
    ]
    assert k.select("grid_x", "block_x", "registers_per_thread").rows() == [
        (10063, 64, 16),
        (256, 128, 32),
    ]
    assert k["static_smem_bytes"].to_list() == [0, 1024]
    assert k["dynamic_smem_bytes"].to_list() == [0, 512]

    # memcpy/memset: size in MB (binary) → bytes; Src/DstMemType → kinds.
    m = t.memcpy.sort("start_ns")
    assert m.select("kind", "src_kind", "dst_kind", "size_bytes", "correlation_id").rows() == [
        ("HtoD", "Pageable", "Device", 16 * 1024**2, 118),
        ("memset", None, "Device", 512 * 1024, 130),
        ("DtoH", "Device", "Pageable", 16 * 1024**2, 131),
    ]
    assert m["duration_ns"].to_list() == [1_234_567, 2_000, 300_000]
    assert t.devices.select("device_id", "name").rows() == [(0, "NVIDIA TITAN V")]
    assert set(t.kernels["process_id"]) == {1598336}


def test_system_column_absent_is_fine(write) -> None:
    """Newer layout without `--system-profiling` (no System column)."""
    text = SC22_HEAD.replace(',"System"', "").replace(
        "s,ms,,,,,,,,B,B,MB,GB/s,,,,,,,,", "s,ms,,,,,,,,B,B,MB,GB/s,,,,,,,"
    )
    head = "\n".join(text.splitlines()[:5]) + "\n"
    rows = "".join(
        ln.replace(',,"inibuffer', ',"inibuffer')
        .replace(',,"[CUDA', ',"[CUDA')
        .replace(',,"void', ',"void')
        + "\n"
        for ln in SC22_ROWS.splitlines()
    )
    t = ta.read(write("nosys.csv", head + rows))
    assert (t.kernels.height, t.memcpy.height, t.gpu_samples.height) == (2, 3, 0)
    assert t.kernels.sort("kernel_id")["name"][0] == "inibuffer(float*, float*, int)"


OLD_HEADER = '"Start","Duration","Grid X","Grid Y","Grid Z","Block X","Block Y","Block Z","Registers Per Thread","Static SMem","Dynamic SMem","Size","Throughput","Device","Context","Stream","Name"'


@pytest.mark.parametrize(
    "start_unit,dur_unit,start,dur,size_unit,size",
    [
        ("ms", "ms", "584.620743", "1.028854", "KB", "400.000000"),
        ("s", "us", "0.584620743", "1028.854", "B", "409600"),
        ("us", "ns", "584620.743", "1028854", "MB", "0.390625"),
        ("ns", "s", "584620743", "0.001028854", "GB", "0.000381469726562500"),
    ],
)
def test_units_row_applied_per_column(
    write, start_unit: str, dur_unit: str, start: str, dur: str, size_unit: str, size: str
) -> None:
    units = f"{start_unit},{dur_unit},,,,,,,,KB,B,{size_unit},MB/s,,,,"
    row = f'{start},{dur},,,,,,,,,,{size},379.670001,"GeForce GTX 1080 Ti (0)","1","7","[CUDA memcpy HtoD]"'
    t = read_nvprof_csv(write("u.csv", f"{OLD_HEADER}\n{units}\n{row}\n"))
    assert t.memcpy.select("start_ns", "duration_ns", "end_ns", "size_bytes").rows() == [
        (584_620_743, 1_028_854, 585_649_597, 409_600)
    ]


def test_rounding_not_truncation(write) -> None:
    units = "s,us,,,,,,,,KB,B,KB,MB/s,,,,"
    # 1.0007 us = 1000.7 ns → 1001 and 0.6 ns → 1 (truncation would give 1000 and 0).
    row = '0.0000000006,1.0007,1,1,1,1,1,1,8,0,0,,,"Tesla K80 (0)","1","7","k()"'
    t = read_nvprof_csv(write("r.csv", f"{OLD_HEADER}\n{units}\n{row}\n"))
    assert t.kernels.select("start_ns", "duration_ns").rows() == [(1, 1001)]


def test_envelope_lines_mid_file_and_suffix_and_device_12(write) -> None:
    units = "ms,us,,,,,,,,B,B,B,GB/s,,,,"
    rows = [
        '1.000000,2.500000,1,1,1,32,1,1,8,0,0,,,"Tesla V100-SXM2-16GB (12)","1","7","void k<int=32>(float*, int) [1073]"',
        "======== Warning: 3 records have invalid timestamps due to insufficient device buffer space. You can configure the buffer space using the option --device-buffer-size.",
        '2.000000,1.000000,2,1,1,64,1,1,8,0,0,,,"Tesla V100-SXM2-16GB (12)","1","7","foo_v2(int) [2]"',
        "==777== a note",
        '3.000000,1.000000,2,1,1,64,1,1,8,0,0,,,"Tesla V100-SXM2-16GB (12)","1","7","bar[2]() [31]"',
        '4.000000,1.000000,2,1,1,64,1,1,8,0,0,,,"Tesla V100-SXM2-16GB (12)","1","7","kernel_12"',
    ]
    p = write(
        "mid.csv",
        "==777== Profiling result:\n"
        + OLD_HEADER
        + "\n"
        + units
        + "\n"
        + "\n".join(rows)
        + "\n==777== Generated result\n",
    )
    with pytest.warns(UserWarning, match="invalid timestamps"):
        t = ta.read(p)
    k = t.kernels.sort("kernel_id")
    assert k.select("name", "correlation_id").rows() == [
        ("void k<int=32>(float*, int)", 1073),
        ("foo_v2(int)", 2),
        ("bar[2]()", 31),
        ("kernel_12", None),
    ]
    assert k["start_ns"].to_list() == [1_000_000, 2_000_000, 3_000_000, 4_000_000]
    assert k["duration_ns"].to_list() == [2_500, 1_000, 1_000, 1_000]
    assert set(k["device_id"]) == {12}
    assert t.devices.select("device_id", "name").rows() == [(12, "Tesla V100-SXM2-16GB")]


def test_envelope_line_with_as_many_commas_as_columns(write) -> None:
    """A '==' line that a CSV parser would take for a row (16 commas) is still skipped."""
    units = "ms,us,,,,,,,,B,B,B,GB/s,,,,"
    fake = "==5== " + ",".join(["x"] * 17)
    text = f"{OLD_HEADER}\n{units}\n{VALID_ROW}\n{fake}\n{VALID_ROW}\n==5== done\n\n"
    t = read_nvprof_csv(write("commas.csv", text))
    assert t.kernels.height == 2


def test_trailing_envelope_warning_once(write) -> None:
    units = "ms,us,,,,,,,,B,B,B,GB/s,,,,"
    text = f"==5== Profiling result:\n{OLD_HEADER}\n{units}\n{VALID_ROW}\n======== Warning: 1 records have invalid timestamps\n\n"
    with pytest.warns(UserWarning) as record:
        t = read_nvprof_csv(write("tail.csv", text))
    assert [str(w.message).split(": ", 1)[1] for w in record] == [
        "nvprof: ======== Warning: 1 records have invalid timestamps"
    ]
    assert t.kernels.height == 1 and set(t.kernels["process_id"]) == {5}


def test_two_processes_in_one_file(write) -> None:
    """`--profile-child-processes` into one log: one table per process, each after its '==PID=='."""
    units_ms = "ms,ms,,,,,,,,KB,B,KB,MB/s,,,,"
    units_us = "us,us,,,,,,,,KB,B,KB,MB/s,,,,"
    text = (
        f"==100== Profiling result:\n{OLD_HEADER}\n{units_ms}\n{VALID_ROW}\n"
        f"==200== Profiling result:\n{OLD_HEADER}\n{units_us}\n{VALID_ROW}\n{VALID_ROW}\n"
    )
    t = ta.read(write("two.csv", text))
    k = t.kernels.sort("kernel_id")
    assert k.select("kernel_id", "process_id", "start_ns").rows() == [
        (0, 100, 1_000_000),
        (1, 200, 1_000),
        (2, 200, 1_000),
    ]


def test_p2p_columns_tolerated(write) -> None:
    header = '"Start","Duration","Grid X","Grid Y","Grid Z","Block X","Block Y","Block Z","Registers Per Thread","Static SMem","Dynamic SMem","Size","Throughput","SrcMemType","DstMemType","Device","Context","Stream","Src Dev","Src Ctx","Dst Dev","Dst Ctx","Name","Correlation_ID"'
    units = "us,us,,,,,,,,B,B,KB,GB/s,,,,,,,,,,,"
    row = '10.5,20.25,,,,,,,,,,64.000000,3.0,"Device","Device","Tesla P100 (1)","2","13","Tesla P100 (1)","2","Tesla P100 (0)","1","[CUDA memcpy PtoP]",99'
    t = read_nvprof_csv(write("p2p.csv", f"{header}\n{units}\n{row}\n"))
    assert t.memcpy.select(
        "kind", "device_id", "size_bytes", "start_ns", "duration_ns", "correlation_id"
    ).rows() == [("PtoP", 1, 65536, 10_500, 20_250, 99)]


# --- summary mode ----------------------------------------------------------------------------


def test_summary_with_range_section(write) -> None:
    text = """\
==4242== Profiling application: ./train
==4242== Profiling result:
"Type","Time(%)","Time","Calls","Avg","Min","Max","Name"
,%,ms,,us,us,us,
"GPU activities",29.820746,6.659683,510,13.058000,10.944000,22.048000,"volta_sgemm_128x64_nn"
"GPU activities",10.5,1.000000,2,500.000000,400.000000,600.000000,"[CUDA memcpy HtoD]"
"API calls",78.020031,7570.567921,11,688233.447000,684120.984000,693194.046000,"cudaMemcpyAsync"
==4242== Range "forward, step 1"
"Type","Time(%)","Time","Calls","Avg","Min","Max","Name"
,%,s,,ns,ns,ns,
"GPU activities",100.0,0.000026,2,13000,12000,14000,"void k<float>(float*, int)"
"""
    t = ta.read(write("summary.csv", text))
    assert_valid(t)
    km = t.kernel_metrics
    assert km.height == 4 * 5  # 4 rows x (total, avg, min, max, pct)
    got = {
        (r["name"], r["metric_name"], r["stat"]): (r["value"], r["unit"], r["invocations_count"])
        for r in km.iter_rows(named=True)
    }
    assert got[("volta_sgemm_128x64_nn", "gpu_time", "total")] == (6_659_683.0, "ns", 510)
    assert got[("volta_sgemm_128x64_nn", "gpu_time", "avg")] == (13_058.0, "ns", 510)
    assert got[("volta_sgemm_128x64_nn", "gpu_time", "max")] == (22_048.0, "ns", 510)
    assert got[("volta_sgemm_128x64_nn", "gpu_time_pct", None)] == (29.820746, "%", 510)
    assert got[("cudaMemcpyAsync", "api_time", "total")][0] == pytest.approx(7_570_567_921.0)
    assert got[("cudaMemcpyAsync", "api_time", "min")][0] == pytest.approx(684_120_984.0)
    rng = "range[forward, step 1]."
    assert got[("void k<float>(float*, int)", rng + "gpu_time", "total")][0] == pytest.approx(
        26_000.0
    )
    assert got[("void k<float>(float*, int)", rng + "gpu_time", "min")] == (12_000.0, "ns", 2)
    assert set(km["process_id"]) == {4242}
    assert km["kernel_id"].null_count() == km.height


# --- per-instance metric traces ----------------------------------------------------------------


def test_per_instance_metrics(write) -> None:
    text = """\
==99== Profiling result:
==99== Metric result:
"Device","Context","Stream","Kernel","Correlation_ID","achieved_occupancy","dram_read_throughput","sm_efficiency","l2_utilization"
,,,,,,GB/s,%,
"Tesla V100-SXM2-16GB (3)","1","7","volta_scudnn_128x64_relu_medium_nn_v1",120,0.5,1.5,90.25,"High (10)"
"Tesla V100-SXM2-16GB (3)","1","7","void at::native::kernel<float, 4>(float*, int)",125,0.25,512.0MB/s,80.0,"Idle (0)"
"""
    t = ta.read(write("metric_trace.csv", text))
    assert_valid(t)
    k = t.kernels.sort("kernel_id")
    assert k.select("kernel_id", "correlation_id", "name", "device_id", "stream_id").rows() == [
        (0, 120, "volta_scudnn_128x64_relu_medium_nn_v1", 3, 7),
        (1, 125, "void at::native::kernel<float, 4>(float*, int)", 3, 7),
    ]
    assert k["start_ns"].null_count() == 2
    got = {
        (r["kernel_id"], r["metric_name"]): (r["value"], r["unit"])
        for r in t.kernel_metrics.iter_rows(named=True)
    }
    assert got == {
        (0, "achieved_occupancy"): (0.5, None),
        (1, "achieved_occupancy"): (0.25, None),
        (0, "dram_read_throughput"): (1.5 * 1024**3, "bytes/s"),
        (1, "dram_read_throughput"): (512.0 * 1024**2, "bytes/s"),  # glued unit wins
        (0, "sm_efficiency"): (90.25, "%"),
        (1, "sm_efficiency"): (80.0, "%"),
        (0, "l2_utilization"): (10.0, "level"),
        (1, "l2_utilization"): (0.0, "level"),
    }
    assert t.kernel_metrics["stat"].null_count() == t.kernel_metrics.height


def test_aggregate_metrics_inline_levels_and_mixed_units(write) -> None:
    text = """\
==5== Metric result:
"Device","Kernel","Invocations","Metric Name","Metric Description","Min","Max","Avg"
"Tesla K80 (10)","k(int, int)",3,"sysmem_write_throughput","System Memory Write Throughput",1.550690MB/s,1.956455MB/s,976.562500KB/s
"Tesla K80 (10)","k(int, int)",3,"dram_utilization","Device Memory Utilization","Idle (0)","Mid (5)","Max (10)"
"""
    t = ta.read(write("m.csv", text))
    rows = (
        t.kernel_metrics.sort("metric_name", "stat")
        .select("metric_name", "stat", "value", "unit")
        .rows()
    )
    assert rows == [
        ("dram_utilization", "avg", 10.0, "level"),
        ("dram_utilization", "max", 5.0, "level"),
        ("dram_utilization", "min", 0.0, "level"),
        ("sysmem_write_throughput", "avg", 976.5625 * 1024, "bytes/s"),
        ("sysmem_write_throughput", "max", pytest.approx(1.956455 * 1024**2), "bytes/s"),
        ("sysmem_write_throughput", "min", pytest.approx(1.550690 * 1024**2), "bytes/s"),
    ]
    assert t.devices.select("device_id", "name").rows() == [(10, "Tesla K80")]


# --- errors ----------------------------------------------------------------------------------------


def test_unknown_unit_names_file_line_column(write) -> None:
    p = write(
        "bad_unit.csv",
        "==1== Profiling result:\n" + OLD_HEADER + "\nms,fortnights,,,,,,,,KB,B,KB,MB/s,,,,\n",
    )
    with pytest.raises(UnknownUnit) as e:
        ta.read(p)
    assert str(e.value) == (
        f"{p}, line 3, column 'Duration': unknown unit 'fortnights' in the units row "
        "(known: s, sec, second, ms, msecond, us, usecond, µs, ns, nsecond)"
    )


def test_unknown_glued_unit(write) -> None:
    text = '"Device","Kernel","Invocations","Metric Name","Metric Description","Min","Max","Avg"\n"X (0)","k",1,"m","M",1.0furlongs,1,1\n'
    p = write("mu.csv", text)
    with pytest.raises(UnknownUnit) as e:
        ta.read(p)
    assert (e.value.line, e.value.column) == (2, "Min")
    assert "'furlongs'" in str(e.value) and str(p) in str(e.value)


VALID_ROW = '1.0,1.0,1,1,1,1,1,1,8,0,0,,,"Tesla K80 (0)","1","7","k()"'


@pytest.mark.parametrize(
    "body,line,match",
    [
        (VALID_ROW + "\n1.0,2.0,1,1", 5, "row has 4 fields, header has 17"),  # truncated
        (VALID_ROW + ',"extra"\n', 4, "row has 18 fields, header has 17"),
        (VALID_ROW.replace("1.0,1.0", "1.0,abc", 1) + "\n", 4, "'abc' is not a number"),
        (VALID_ROW.replace("1.0,1.0,1,", "1.0,1.0,1.5,", 1) + "\n", 4, "'1.5' is not an integer"),
        # broken timestamps: pyarrow would read `nan` as a missing value, nvprof never writes one
        (VALID_ROW.replace("1.0,1.0", "1.0,nan", 1) + "\n", 4, "'nan' is not a finite duration"),
        (VALID_ROW.replace("1.0,1.0", "inf,1.0", 1) + "\n", 4, "'inf' is not a finite start"),
        # 1e13 ms = 1e19 ns > 2**63
        (VALID_ROW.replace("1.0,1.0", "1e13,1.0", 1) + "\n", 4, "'1e13' is not a finite start"),
        (VALID_ROW.replace("1.0,1.0", "1.0,", 1) + "\n", 4, "'k\\(\\)' row without a Duration"),
        (VALID_ROW.replace("1.0,1.0", ",1.0", 1) + "\n", 4, "row without a Start"),
    ],
)
def test_bad_rows_name_line(write, body: str, line: int, match: str) -> None:
    p = write("bad.csv", f"{OLD_HEADER}\nms,ms,,,,,,,,KB,B,KB,MB/s,,,,\n{VALID_ROW}\n{body}")
    with pytest.raises(MalformedInput, match=match) as e:
        ta.read(p)
    assert e.value.line == line and e.value.path == str(p)


def test_bad_system_value_names_line(write) -> None:
    bad = '0.2,,,,,,,,,,,,,,,"NVIDIA TITAN V (0)",,,"58/","[Temperature (C)]",\n'
    p = write("sys.csv", SC22_HEAD + SC22_ROWS + bad)
    with pytest.raises(
        MalformedInput, match="'58/' for \\[Temperature \\(C\\)\\] is not a number"
    ) as e:
        ta.read(p)
    assert (e.value.line, e.value.column) == (15, "System")


def test_truncated_quoted_name_and_bad_utf8(write) -> None:
    head = f"==1== Profiling result:\n{OLD_HEADER}\nms,ms,,,,,,,,KB,B,KB,MB/s,,,,\n{VALID_ROW}\n"
    cut = VALID_ROW[: VALID_ROW.index('"k()"') + 2]  # file ends inside the quoted name
    with pytest.raises(MalformedInput) as e:
        ta.read(write("cut.csv", head + cut))
    assert e.value.line == 5
    bad = (head + VALID_ROW.replace("k()", "k\udcff()") + "\n").encode("utf-8", "surrogateescape")
    with pytest.raises(MalformedInput, match="not UTF-8") as e:
        ta.read(write("latin.csv", bad))
    assert e.value.line == 5


def test_header_without_units_row(write) -> None:
    p = write("h.csv", OLD_HEADER + "\n")
    with pytest.raises(MalformedInput, match="units row") as e:
        ta.read(p)
    assert e.value.line == 2


def test_units_row_wrong_width(write) -> None:
    p = write("w.csv", OLD_HEADER + "\nms,ms\n" + VALID_ROW + "\n")
    with pytest.raises(MalformedInput, match="units row has 2 fields, header has 17") as e:
        ta.read(p)
    assert e.value.line == 2


def test_empty_garbage_and_missing_column(write) -> None:
    with pytest.raises(MalformedInput, match="empty file"):
        ta.read(write("e.csv", ""), format="nvprof_csv")
    garbage = write("g.bin", bytes(range(256)) * 16)
    with pytest.raises(MalformedInput, match=re.escape(str(garbage))):
        ta.read(garbage, format="nvprof_csv")
    with pytest.raises(MalformedInput, match="no nvprof CSV header"):
        ta.read(write("n.csv", "==1== Profiling result:\nhello\n"), format="nvprof_csv")
    p = write("mc.csv", '"Start","Duration","Device"\nms,ms,\n1,1,"X (0)"\n')
    with pytest.raises(MissingColumn, match="Name") as e:
        ta.read(p)
    assert e.value.line == 1


def test_header_only_with_units_gives_empty_tables(write) -> None:
    t = read_nvprof_csv(write("h.csv", OLD_HEADER + "\nms,ms,,,,,,,,KB,B,KB,MB/s,,,,\n"))
    assert t.kernels.height == 0 and t.memcpy.height == 0


# --- detection -----------------------------------------------------------------------------------


def test_sniff_claims_nvprof_modes_only(write) -> None:
    assert sniff(write("a.csv", SC22_HEAD))
    assert sniff(write("b.csv", '\ufeff==1== x\n"Type","Time(%)","Time"\n'))
    assert sniff(write("c.csv", '"Device","Kernel","Invocations","Metric Name"\n'))
    assert sniff(write("d.csv", '"Device","Context","Stream","Kernel","Correlation_ID","ipc"\n'))
    ncu = '==PROF== Connected to process 1\n"ID","Process ID","Process Name","Host Name","Kernel Name"\n'
    assert not sniff(write("ncu.csv", ncu))
    smi = (
        "timestamp, name, index, power.draw [W]\n2024/01/01 00:00:00.000, NVIDIA A100, 0, 50.00 W\n"
    )
    assert not sniff(write("smi.csv", smi))
    assert not sniff(write("e.csv", ""))
    assert READERS["nvprof_csv"].sniff(write("f.csv", SC22_HEAD))


def test_app_output_before_header_is_skipped_with_warning(write) -> None:
    text = (
        "epoch 1 loss 0.3\n==9== Profiling result:\n"
        + OLD_HEADER
        + "\nms,ms,,,,,,,,KB,B,KB,MB/s,,,,\n"
        + VALID_ROW
        + "\n"
    )
    p = write("stderr.txt", text)
    with pytest.warns(UserWarning, match="skipped 1 line"):
        assert read_nvprof_csv(p).kernels.height == 1
    p2 = write(
        "stderr2.txt",
        "app says hi\n" + OLD_HEADER + "\nms,ms,,,,,,,,KB,B,KB,MB/s,,,,\n" + VALID_ROW + "\n",
    )
    with pytest.warns(UserWarning, match="skipped 1 line"):
        t = read_nvprof_csv(p2)
    assert t.kernels.height == 1


def test_gzipped_trace_and_bad_gzip(write) -> None:
    p = write("t.csv.gz", gzip.compress((SC22_HEAD + SC22_ROWS).encode()))
    assert detect_format(p) == "nvprof_csv"
    t = ta.read(p)
    assert (t.kernels.height, t.memcpy.height, t.gpu_samples.height) == (2, 3, 4)
    cut = write("cut.csv.gz", gzip.compress((SC22_HEAD + SC22_ROWS).encode())[:-20])
    with pytest.raises(MalformedInput, match="cut.csv.gz"):
        read_nvprof_csv(cut)


def test_api_trace(write) -> None:
    text = '"Start","Duration","Name","Correlation_ID"\nus,us,,\n10.0,2.5,"cudaMalloc",5\n20.0,1.0,"cuLaunchKernel",6\n'
    t = ta.read(write("api.csv", text))
    assert t.api_calls.sort("start_ns").select(
        "name", "api", "start_ns", "duration_ns", "correlation_id"
    ).rows() == [
        ("cudaMalloc", "runtime", 10_000, 2_500, 5),
        ("cuLaunchKernel", "driver", 20_000, 1_000, 6),
    ]
    assert t.kernels.height == 0
