"""ncu_csv reader: the real ncu 2026.2 captures, every header era inline, and the quirks."""

from __future__ import annotations

import csv
import io
import re
import sys
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput, UnknownUnit
from traceanalyze.readers import READERS, detect_format
from traceanalyze.readers.ncu.ncu_csv import ncu_unit, read_ncu_csv, sniff

from .conftest import shared

REAL = [
    "ncu_csv/roofline_ncu2026.2_rtx5070_saxpy_long.csv",
    "ncu_csv/roofline_ncu2026.2_rtx5070_gemm_tiled_long.csv",
]
# Unit factors written out by hand for the units the real files use.
HAND_UNITS = {"byte": ("bytes", 1.0), "ns": ("ns", 1.0), "%": ("%", 1.0), "sector": ("sector", 1.0)}

H2026 = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
    '"Metric Value"'
)
H2020 = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context",'
    '"Stream","Section Name","Metric Name","Metric Unit","Metric Value"'
)


FMA_PCT = "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_elapsed"


def _row2026(i: int, pid: int, name: str, metric: str, unit: str, value: str) -> str:
    return (
        f'"{i}","{pid}","app","host","{name}","1","7","(256, 1, 1)","(80, 2, 1)","0","9.0",'
        f'"Command line profiler metrics","{metric}","{unit}","{value}"'
    )


def _expected(path: Path) -> tuple[set[tuple[str, str]], int, dict[str, float]]:
    """Launch keys, metric row count and per-metric sums of converted values, via csv."""
    text = path.read_bytes().decode("utf-8").lstrip("\ufeff")
    rows = list(csv.reader(io.StringIO(text)))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    hdr = rows[start]
    launches, n, sums = set(), 0, defaultdict(float)
    for r in rows[start + 1 :]:
        if not r or r[0].startswith("=="):
            continue
        d = dict(zip(hdr, r, strict=True))
        launches.add((d["Process ID"], d["ID"]))
        n += 1
        value = float(d["Metric Value"].replace(",", ""))
        factor = HAND_UNITS[d["Metric Unit"]][1] if d["Metric Unit"] else 1.0
        sums[d["Metric Name"]] += value * factor
    return launches, n, dict(sums)


@pytest.mark.parametrize("rel", REAL)
def test_real_capture_counts_and_sums(rel: str) -> None:
    path = shared(rel)
    launches, n, sums = _expected(path)
    assert detect_format(path) == "ncu_csv"
    t = ta.read(path)
    for name, df in t.items():
        assert schema.validate(name, df) == [], name
    assert t.kernels.height == len(launches)
    assert t.kernel_metrics.height == n
    got: dict[str, float] = defaultdict(float)
    for r in t.kernel_metrics.iter_rows(named=True):
        got[r["metric_name"]] += r["value"]
    assert got.keys() == sums.keys()
    for k, v in sums.items():
        assert got[k] == pytest.approx(v, rel=1e-12), k
    assert t.sources["tool"].to_list() == ["ncu"]
    dev = t.devices.row(0, named=True)
    assert dev["device_id"] == 0 and dev["compute_capability"] == "12.0"
    k = t.kernels.row(0, named=True)
    assert k["duration_ns"] == int(sums["gpu__time_duration.sum"])
    assert k["start_ns"] is None and k["end_ns"] is None


def test_saxpy_values_and_geometry() -> None:
    t = read_ncu_csv(shared(REAL[0]))
    km = t.kernel_metrics
    read = km.filter(km["metric_name"] == "dram__bytes_op_read.sum").row(0, named=True)
    # "134,221,568" with the thousands separators stripped.
    assert read["value"] == 134221568.0 and read["unit"] == "bytes"
    assert read["process_id"] == 58960 and read["kernel_id"] == 0
    assert read["name"] == "unnamed>::saxpy_kernel(float, const float *, float *, int)"
    # An empty Metric Unit (a plain count) is a null unit.
    req = km.filter(km["metric_name"] == "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    assert req["unit"].to_list() == [None] and req["value"].to_list() == [1048576.0]
    k = t.kernels.row(0, named=True)
    assert (k["block_x"], k["block_y"], k["block_z"]) == (256, 1, 1)
    assert (k["grid_x"], k["grid_y"], k["grid_z"]) == (65536, 1, 1)
    assert (k["context_id"], k["stream_id"], k["device_id"]) == (1, 7, 0)


def test_bom_stdout_and_prof_lines_between_rows(write) -> None:
    text = "\r\n".join(
        [
            "==PROF== Connected to process 4711 (/usr/bin/python3)",
            "hello from the app, with a comma",
            '==PROF== Profiling "k" - 0: 0%....50%....100% - 9 passes',
            H2026,
            _row2026(0, 4711, "k(int)", "gpu__time_duration.sum", "usecond", "1.5"),
            '==PROF== Profiling "k" - 1: 0%....50%....100% - 9 passes',
            "==WARNING== something odd",
            "app output between rows",
            _row2026(1, 4711, "k(int)", "gpu__time_duration.sum", "nsecond", "2,048"),
            "",
        ]
    )
    p = write("prof.csv", b"\xef\xbb\xbf" + text.encode())
    assert sniff(p) and detect_format(p) == "ncu_csv"
    with pytest.warns(UserWarning) as rec:
        t = ta.read(p)
    msgs = " | ".join(str(w.message) for w in rec)
    assert "==WARNING== something odd" in msgs and "skipped 3 non-data line" in msgs
    assert t.kernel_metrics["value"].to_list() == [1500.0, 2048.0]
    assert t.kernels["duration_ns"].to_list() == [1500, 2048]
    assert t.kernels["kernel_id"].to_list() == [0, 1]


def test_2020_header_with_kernel_time_and_scaled_units(write) -> None:
    rows = [
        ("gpu__time_duration.sum", "usecond", "41.28"),
        ("dram__bytes_read.sum", "Mbyte", "2.5"),
        ("dram__bytes_write.sum", "Kbyte", "640"),
        ("sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_elapsed", "%", "12.50"),
        ("gpc__cycles_elapsed.max", "cycle", "12,345"),
        ("dram__throughput.avg", "Gbyte/second", "1.5"),
        ("launch__shared_mem_per_block_driver", "Kbyte/block", "1.02"),
        ("sm__cycles_elapsed.avg.per_second", "cycle/nsecond", "1.41"),
        ("launch__registers_per_thread", "register/thread", "32"),
        ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed", "%", "n/a"),
    ]
    lines = [H2020] + [
        f'"0","12345","python","localhost","void k<float, 256>(float*)","2024-Jul-13 19:18:31",'
        f'"1","7","Command line profiler metrics","{m}","{u}","{v}"'
        for m, u, v in rows
    ]
    p = write("tbd.csv", "\n".join(lines) + "\n")
    t = read_ncu_csv(p)
    got = {
        r["metric_name"]: (r["unit"], r["value"]) for r in t.kernel_metrics.iter_rows(named=True)
    }
    assert got["gpu__time_duration.sum"] == ("ns", pytest.approx(41280.0))
    assert got["dram__bytes_read.sum"] == ("bytes", 2_500_000.0)
    assert got["dram__bytes_write.sum"] == ("bytes", 640_000.0)  # decimal Kbyte
    assert got["gpc__cycles_elapsed.max"] == ("cycle", 12345.0)
    assert got["dram__throughput.avg"] == ("bytes/s", 1.5e9)
    assert got["launch__shared_mem_per_block_driver"] == ("bytes/block", pytest.approx(1020.0))
    assert got["sm__cycles_elapsed.avg.per_second"] == ("cycle/s", pytest.approx(1.41e9))
    assert got["launch__registers_per_thread"] == ("register/thread", 32.0)
    # n/a: the chip does not support the metric: a null value, the row kept.
    assert got["sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed"] == ("%", None)
    k = t.kernels.row(0, named=True)
    assert k["duration_ns"] == 41280 and k["registers_per_thread"] == 32
    assert k["device_id"] is None and k["grid_x"] is None  # 2020 has no Device / Grid Size
    assert t.devices.height == 0


def test_nvtx_columns_with_doubled_quotes(write) -> None:
    hdr = (
        '"ID","Process ID","Process Name","Host Name",'
        '"thread Domain:Push/Pop_Range:PL_Type:PL_Value",'
        '"Id:Domain:Start/Stop_Range:PL_Type:PL_Value","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"'
    )
    row = (
        '"3","99","app","h"," ""0:<default domain>:linear_nvtx:none:none"" ","",'
        '"gemm(int, int)","1","7","(32, 32, 1)","(64, 64, 1)","1","8.0","s",'
        '"gpu__time_duration.sum","msecond","1.25"'
    )
    p = write("nvtx.csv", hdr + "\n" + row + "\n")
    t = read_ncu_csv(p)
    r = t.kernel_metrics.row(0, named=True)
    assert r["name"] == "gemm(int, int)" and r["value"] == 1_250_000.0 and r["device_id"] == 1
    assert t.kernels["duration_ns"].to_list() == [1_250_000]
    assert t.devices["compute_capability"].to_list() == ["8.0"]


def test_raw_wide_page_with_units_row(write) -> None:
    hdr = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","device__attribute_display_name",'
        '"dram__bytes.sum","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained'
        '_elapsed","launch__registers_per_thread"'
    )
    units = '"","","","","","","","","","","","","Kbyte","usecond","%","register/thread"'
    r0 = (
        '"0","10","a","h","k0(float*)","1","7","(128, 1, 1)","(10, 1, 1)","0","9.0",'
        '"NVIDIA H100 80GB HBM3","1,024.5","3.5","50.00","40"'
    )
    r1 = (
        '"1","10","a","h","k1()","1","7","(64, 2, 1)","(1, 1, 1)","0","9.0",'
        '"NVIDIA H100 80GB HBM3","n/a","7","n/a","16"'
    )
    p = write("raw.csv", "\n".join([hdr, units, r0, r1]) + "\n")
    assert detect_format(p) == "ncu_csv"
    with pytest.warns(UserWarning, match="device__attribute_display_name"):
        t = read_ncu_csv(p)
    km = t.kernel_metrics.sort("kernel_id", "metric_name")
    assert km.height == 8  # 2 launches × 4 numeric metrics (the display name is text)
    got = {
        (r["kernel_id"], r["metric_name"]): (r["unit"], r["value"])
        for r in km.iter_rows(named=True)
    }
    assert got[(0, "dram__bytes.sum")] == ("bytes", pytest.approx(1_024_500.0))
    assert got[(1, "dram__bytes.sum")] == ("bytes", None)
    assert got[(0, "gpu__time_duration.sum")] == ("ns", 3500.0)
    assert got[(1, "sm__throughput.avg.pct_of_peak_sustained_elapsed")] == ("%", None)
    assert t.kernels["duration_ns"].to_list() == [3500, 7000]
    assert t.kernels["registers_per_thread"].to_list() == [40, 16]
    assert t.kernels["block_y"].to_list() == [1, 2]
    assert t.devices["name"].to_list() == ["NVIDIA H100 80GB HBM3"]


def test_unknown_unit_names_file_line_and_column(write) -> None:
    lines = [
        "some stdout",
        H2026,
        _row2026(0, 1, "k", "gpu__time_duration.sum", "ns", "5"),
        _row2026(0, 1, "k", "weird.metric", "furlong/fortnight", "5"),
        _row2026(0, 1, "k", FMA_PCT, "furlong/fortnight", "5"),
    ]
    p = write("bad_unit.csv", "\n".join(lines) + "\n")
    with pytest.raises(UnknownUnit) as e:
        ta.read(p)
    msg = str(e.value)
    # the first row with it on a metric coreutil needs, not the kept `weird.metric` one
    assert str(p) in msg and "line 5" in msg and "'Metric Unit'" in msg and "furlong" in msg


def test_unknown_unit_in_raw_page_names_the_metric_column(write) -> None:
    hdr = '"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__bytes.sum"'
    text = "\n".join([hdr, '"","","","ns","bogon"', '"0","1","k","5","6"']) + "\n"
    with pytest.raises(UnknownUnit) as e:
        read_ncu_csv(write("raw_bad.csv", text))
    assert "line 2" in str(e.value) and "'dram__bytes.sum'" in str(e.value)


# A Blackwell raw page (`ncu --import x.ncu-rep --page raw --csv`) as the real export has
# it: `launch__cluster_max_active` in unit `cluster`, a unit the reader does not know, next to
# the metrics the reader and analyses read.
BLACKWELL_RAW = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    '"Grid Size","Device","CC","gpu__time_duration.sum","launch__cluster_max_active",'
    '"launch__registers_per_thread","sm__pipe_tc_cycles_active.avg.pct_of_peak_sustained_active"\n'
    '"","","","","","","","","","","","nsecond","cluster","register/thread","%"\n'
    '"0","4242","train","node1","gemm_kernel","1","7","(256, 1, 1)","(148, 1, 1)","0","12.0",'
    '"12,480","8","168","61.25"\n'
    '"1","4242","train","node1","relu_kernel","1","7","(128, 1, 1)","(296, 1, 1)","0","12.0",'
    '"2,016","0","16","0"\n'
)


def test_unknown_unit_on_a_kept_metric_does_not_reject_the_file(write) -> None:
    t = read_ncu_csv(write("blackwell_raw.csv", BLACKWELL_RAW))
    rows = list(csv.reader(io.StringIO(BLACKWELL_RAW)))
    hdr, units, data = rows[0], rows[1], rows[2:]
    col = hdr.index("launch__cluster_max_active")
    km = t.kernel_metrics.filter(pl.col("metric_name") == "launch__cluster_max_active")
    assert km.sort("kernel_id").select("kernel_id", "unit", "value").rows() == [
        (int(r[0]), units[col], float(r[col])) for r in data
    ]
    # the other metrics still converted as usual
    dur = hdr.index("gpu__time_duration.sum")
    assert t.kernels["duration_ns"].to_list() == [int(r[dur].replace(",", "")) for r in data]
    tc = t.kernel_metrics.filter(pl.col("metric_name").str.starts_with("sm__pipe_tc"))
    assert tc["unit"].to_list() == ["%", "%"]


def test_unit_needed_covers_what_the_analyses_read() -> None:
    from traceanalyze.analyses import coreutil, mfu

    UNIT_NEEDED = READERS["ncu_csv"].module.UNIT_NEEDED

    read = [m for c in coreutil.PIPE_METRICS.values() for m in c]
    read += [m for m in coreutil.WEIGHT_METRICS.values() if m]
    read += [m for ms in mfu._FLOP_METRICS.values() for m in ms]
    read += [*mfu._BYTES, *(m for p in mfu._BYTES_PAIRS for m in p), mfu._TIME]
    assert [m for m in read if not re.match(UNIT_NEEDED, m)] == []
    assert not re.match(UNIT_NEEDED, "launch__cluster_max_active")


def test_same_id_in_two_processes_is_two_launches(write) -> None:
    lines = [
        H2026,
        _row2026(0, 100, "k", "gpu__time_duration.sum", "ns", "10"),
        _row2026(0, 200, "k", "gpu__time_duration.sum", "ns", "20"),
    ]
    t = read_ncu_csv(write("two.csv", "\n".join(lines) + "\n"))
    assert sorted(t.kernels.select("process_id", "duration_ns").rows()) == [(100, 10), (200, 20)]


def test_bad_value_and_truncated_row(write) -> None:
    bad = [H2026, _row2026(0, 1, "k", "gpu__time_duration.sum", "ns", "5"), '"1","1","app"']
    with pytest.raises(MalformedInput) as e:
        ta.read(write("trunc.csv", "\n".join(bad) + "\n"), format="ncu_csv")
    assert "line 3" in str(e.value)
    bad_id = [H2026, _row2026(0, 1, "k", "m", "ns", "5").replace('"0"', '"x"', 1)]
    with pytest.raises(MalformedInput, match="not an integer"):
        read_ncu_csv(write("badid.csv", "\n".join(bad_id) + "\n"))


def test_no_header(write) -> None:
    with pytest.raises(MalformedInput, match="no Nsight Compute CSV header"):
        ta.read(write("x.csv", "==PROF== nothing\nhello\n"), format="ncu_csv")


def test_unit_table() -> None:
    assert ncu_unit("nsecond") == ("ns", 1.0)
    assert ncu_unit("msecond") == ("ns", 1e6)
    assert ncu_unit("second") == ("ns", 1e9)
    assert ncu_unit("Gbyte") == ("bytes", 1e9)
    assert ncu_unit("byte/second") == ("bytes/s", 1.0)
    assert ncu_unit("Mhz") == ("Hz", 1e6)
    assert ncu_unit("inst/cycle") == ("inst/cycle", 1.0)
    assert ncu_unit("") == (None, 1.0)
    assert ncu_unit("KB") is None  # nvprof's spelling is not ncu's: never guessed
    assert ncu_unit("parsec") is None


def test_sniffers_are_mutually_exclusive(write) -> None:
    ncu = write("a.csv", H2026 + "\n" + _row2026(0, 1, "k", "m", "ns", "1") + "\n")
    nvprof_trace = write("b.csv", '"Start","Duration","Name"\ns,us,\n1.0,2.0,"k"\n')
    nvprof_metrics = write("c.csv", '"Device","Kernel","Invocations","Metric Name"\n')
    smi = write("d.csv", "timestamp, index, power.draw [W]\n2024/01/01 00:00:00.000, 0, 5 W\n")
    assert [s for s, r in READERS.items() if r.sniff(ncu)] == ["ncu_csv"]
    for p in (nvprof_trace, nvprof_metrics, smi):
        assert not sniff(p)


def test_ncu_rep_without_ncu_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "x.ncu-rep"
    p.write_bytes(b"\x00\x01not a report")
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # import fails
    with pytest.raises(MalformedInput) as e:
        ta.read(p, format="ncu_csv")
    assert "ncu --import x.ncu-rep --csv --page raw" in str(e.value) and str(p) in str(e.value)


def test_ncu_rep_garbage_with_ncu_report(tmp_path: Path) -> None:
    pytest.importorskip("ncu_report")
    p = tmp_path / "y.ncu-rep"
    p.write_bytes(b"\x00\x01not a report" * 10)
    with pytest.raises(MalformedInput, match="ncu_report cannot load"):
        ta.read(p, format="ncu_csv")
