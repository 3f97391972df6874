"""Analysis commands through click's CliRunner: exact outputs on small inputs, exit codes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import shared
from test_analyses_coreutil import FMA, FP16, LAUNCHES, TENSOR, XU, expected, tbd_csv

from traceanalyze import cli
from traceanalyze.analyses.coreutil import PIPE_METRICS
from traceanalyze.cli import main
from traceanalyze.store import Store
from traceanalyze.tables import Tables

MS = 1_000_000


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def make_store(root: Path) -> str:
    """Two sources with one device each: kernels, a copy, iterations, 10 ms samples."""
    st = Store(root)
    for sid, speed in (("aaaaaaaaaaaaaaaa", 1.0), ("bbbbbbbbbbbbbbbb", 2.0)):
        d = int(100 * MS * speed)
        it = pl.DataFrame(
            {
                "device_id": [0] * 4,
                "iteration": [0, 1, 2, 3],
                "start_ns": [i * d for i in range(4)],
                "duration_ns": [d] * 4,
                "end_ns": [(i + 1) * d for i in range(4)],
            }
        )
        ts = list(range(0, 4 * d + 1, 10 * MS))
        gs = pl.DataFrame(
            {
                "device_id": [0] * len(ts),
                "timestamp_ns": ts,
                "power_w": [200.0 * speed] * len(ts),
                "sm_clock_mhz": [1500.0 / speed] * len(ts),
                "temperature_c": [60.0] * len(ts),
            }
        )
        kn = pl.DataFrame(
            {
                "kernel_id": [0, 1, 2, 3],
                "device_id": [0] * 4,
                "stream_id": [7] * 4,
                "name": ["gemm", "relu", "gemm", "relu"],
                "grid_x": [4] * 4,
                "block_x": [256] * 4,
                "start_ns": [0, 10 * MS, d, d + 10 * MS],
                "end_ns": [
                    int(10 * MS * speed),
                    int(10 * MS * speed) + 5 * MS,
                    d + int(10 * MS * speed),
                    d + int(10 * MS * speed) + 5 * MS,
                ],
            }
        )
        cp = pl.DataFrame(
            {
                "device_id": [0],
                "stream_id": [7],
                "kind": ["HtoD"],
                "start_ns": [50 * MS],
                "end_ns": [60 * MS],
                "size_bytes": [1024],
            }
        )
        src = pl.DataFrame(
            {
                "source_id": [sid],
                "path": [f"{sid}.csv"],
                "format": ["iterlog"],
                "time_origin_epoch_ns": [0],
            }
        )
        t = Tables.build(sources=src, iterations=it, gpu_samples=gs, kernels=kn, memcpy=cp)
        st.write(t.with_source_id(sid))
    return str(root)


@pytest.fixture
def store(tmp_path: Path) -> str:
    return make_store(tmp_path / "st")


def test_commands_have_help() -> None:
    for name in ("coreutil", "busy", "timeline", "attribute", "variability", "compare"):
        r = run(name, "--help")
        assert r.exit_code == 0 and "Usage:" in r.output, name


def test_coreutil_json_several_files(write) -> None:
    a = write("batch_16.csv", tbd_csv())
    # batch_8: only the first launch.
    first = "\n".join(tbd_csv().splitlines()[:8]) + "\n"
    b = write("batch_8.csv", first)
    r = run("coreutil", str(a), str(b), "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    # Every column the library's table has, the metric each number came from included (the
    # CSV's own metric names: FMA, FP16, TENSOR, XU are the names written into it above).
    assert [list(x) for x in got] == [
        [
            "source_id",
            "file",
            "batch_size",
            "fma_pct",
            "fp16_pct",
            "tensor_pct",
            "sfu_pct",
            "launches",
            "weight",
            "scale",
            "fma_metric",
            "fp16_metric",
            "tensor_metric",
            "sfu_metric",
        ]
    ] * 2
    metrics = [FMA, FP16, TENSOR, XU]
    assert all([x[f"{u}_metric"] for u in ("fma", "fp16", "tensor", "sfu")] == metrics for x in got)
    assert [(x["file"], x["batch_size"], x["launches"]) for x in got] == [
        (str(b), 8, 1),
        (str(a), 16, 3),
    ]
    assert got[0]["fma_pct"] == pytest.approx(10.0)
    assert got[1]["tensor_pct"] == pytest.approx(expected(3, 2))
    assert got[1]["weight"] == "cycles" and got[1]["scale"] == "pct"


def test_coreutil_weight_none_and_plot(write, tmp_path: Path) -> None:
    a = write("batch_4.csv", tbd_csv())
    png = tmp_path / "cu.png"
    r = run("coreutil", str(a), "--weight", "none", "--csv", "--plot", str(png))
    assert r.exit_code == 0
    rows = r.stdout.splitlines()
    assert rows[0] == (
        "source_id,file,batch_size,fma_pct,fp16_pct,tensor_pct,sfu_pct,launches,weight,scale,"
        "fma_metric,fp16_metric,tensor_metric,sfu_metric"
    )
    fma = sum(x[5] for x in LAUNCHES) / 3
    sid = hashlib.sha256(a.read_bytes()).hexdigest()[:16]
    assert rows[1].startswith(f"{sid},{a},4,{fma!r},")
    assert rows[1].endswith(f",3,none,pct,{FMA},{FP16},{TENSOR},{XU}")
    assert png.read_bytes().startswith(b"\x89PNG")


SHORT_NO_PIPES = (
    "no pipe-utilization metric for any of FMA, FP16, Tensor Core, SFU; "
    "`traceanalyze collect --profiler ncu` records them"
)


def test_coreutil_not_answerable_is_one_short_line(write) -> None:
    p = write("x.csv", "\n".join(ln for ln in tbd_csv().splitlines() if "pipe" not in ln) + "\n")
    r = CliRunner().invoke(main, ["coreutil", str(p)])
    assert r.exit_code == 1
    assert r.stdout == ""
    assert r.stderr == f"traceanalyze: error: {p}: {SHORT_NO_PIPES} [-v for details]\n"
    assert len(r.stderr.splitlines()[0]) < 160 + len(str(p))


def test_coreutil_prints_what_it_can_then_each_bad_file(write, monkeypatch) -> None:
    monkeypatch.chdir(write("batch_16.csv", tbd_csv()).parent)
    write("batch_8.csv", "\n".join(tbd_csv().splitlines()[:8]) + "\n")
    write("bad.csv", "\n".join(ln for ln in tbd_csv().splitlines() if "pipe" not in ln) + "\n")
    r = CliRunner().invoke(main, ["coreutil", "batch_16.csv", "batch_8.csv", "bad.csv"])
    assert r.exit_code == 1
    # batch_16 by hand: cycles 1,000 + 12,345 + 2,000,000 = 2,013,345;
    # FMA (10,000 + 370,350 + 40,000,000) / 2,013,345 = 20.0563…; FP16 61,725 / … = 0.0307…;
    # Tensor 120,657,250 / … = 59.9288…; SFU 1,025,690 / … = 0.5094…
    assert r.stdout == (
        "file      batch_size  fma_pct  fp16_pct  tensor_pct  sfu_pct  launches  weight"
        "  scale\n"
        "--------  ----------  -------  --------  ----------  -------  --------  ------"
        "  -----\n"
        "batch_8            8       10         0          40        1         1  cycles  pct\n"
        "batch_16          16   20.056     0.031      59.929    0.509         3  cycles  pct\n"
    )
    assert r.stderr == f"traceanalyze: error: bad.csv: {SHORT_NO_PIPES} [-v for details]\n"
    # --verbose: the same line, then every unit and every candidate metric looked for.
    r = CliRunner().invoke(main, ["coreutil", "batch_16.csv", "bad.csv", "--verbose"])
    assert r.exit_code == 1
    line, details = r.stderr.splitlines()
    assert line == f"traceanalyze: error: bad.csv: {SHORT_NO_PIPES}"
    assert details.startswith(
        "  no pipe-utilization metric for any of FMA, FP16, Tensor Core, SFU (looked for FMA: "
    )
    for unit in ("fma", "fp16", "tensor", "sfu"):
        for m in PIPE_METRICS[unit]:
            assert m.split(".avg.")[0] in details, m
    assert details.endswith(
        "; or nvprof's single_precision_fu_utilization, half_precision_fu_utilization, "
        "tensor_precision_fu_utilization, special_fu_utilization)"
    )
    r = CliRunner().invoke(main, ["coreutil", "batch_16.csv", "bad.csv", "--json"])
    assert r.exit_code == 1
    assert [x["file"] for x in json.loads(r.stdout)] == ["batch_16.csv"]
    assert r.stderr.startswith("traceanalyze: error: bad.csv: no pipe-utilization metric")


def test_coreutil_nvprof_levels_keep_their_scale(write) -> None:
    p = shared("nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv")
    a = write("batch_16.csv", tbd_csv())
    r = CliRunner().invoke(main, ["coreutil", str(a), str(p), "--json"])
    assert r.exit_code == 0
    got = {Path(x["file"]).name: x for x in json.loads(r.stdout)}
    lv = got[p.name]
    # The file's own `Avg` level of single_precision_fu_utilization is "Low (3)".
    # Levels and percentages mixed: plain `fma`, read with `scale` (issue 21: a 0-10 level
    # is no percentage, so not under `fma_pct`).
    assert (lv["fma"], lv["scale"], lv["weight"]) == (3.0, "level", "invocations")
    assert got["batch_16.csv"]["scale"] == "pct" and "fma_pct" not in lv
    # Levels alone: `fma_level`.
    r = CliRunner().invoke(main, ["coreutil", str(p)])
    # one file: named above the table (issue 32)
    assert r.stdout.splitlines()[1].split()[:2] == ["batch_size", "fma_level"]
    assert (
        f"traceanalyze: warning: {p}: nvprof *_fu_utilization levels have no per-launch cycle "
        "count; weighted by invocations instead of cycles"
    ) in r.stderr


def test_input_usage_errors(store: str, write) -> None:
    r = CliRunner().invoke(main, ["busy"])
    assert r.exit_code == 2 and "give FILE arguments or --store DIR" in r.output
    r = CliRunner().invoke(main, ["busy", "--store", store, "--source", "nope"])
    assert r.exit_code == 1 and r.output == "traceanalyze: error: no such source(s): nope\n"


def test_busy_csv_exact(store: str) -> None:
    # a: kernels [0,10) [10,15) [100,110) [110,115) ms, copy [50,60): window 115, busy 30.
    # b: kernels [0,20) [10,25) [200,220) [210,225): window 225, union [0,25) + [200,225) = 50.
    r = run("busy", "--store", store, "--csv")
    a, b = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
    assert r.output == (
        "source_id,file,device_id,activity,interval_count,window_ms,busy_ms,busy_pct\n"
        f"{a},{a}.csv,0,copies,1,115.0,10.0,8.695652173913043\n"
        f"{a},{a}.csv,0,kernels,4,115.0,30.0,26.08695652173913\n"
        f"{b},{b}.csv,0,copies,1,225.0,10.0,{100 * 10 / 225!r}\n"
        f"{b},{b}.csv,0,kernels,4,225.0,50.0,{100 * 50 / 225!r}\n"
    )
    r = run(
        "busy",
        "--store",
        store,
        "--source",
        "aaaaaaaaaaaaaaaa",
        "--start",
        "0",
        "--end",
        "20",
        "--json",
    )
    k = [x for x in json.loads(r.output) if x["activity"] == "kernels"][0]
    assert (k["window_ms"], k["busy_ms"]) == (20.0, 15.0)  # [0,10) + [10,15)


def test_busy_table_exact(store: str) -> None:
    # Every column under --wide; by default the file alone names each source (issue 21); the
    # answer (busy_pct) right after what names the row, files by their shortest distinct names
    # (issue 32).
    r = run("busy", "--store", store, "--wide")
    assert r.output == (
        "file              device_id  activity  busy_pct  source_id         interval_count"
        "  window_ms  busy_ms\n"
        "----------------  ---------  --------  --------  ----------------  --------------"
        "  ---------  -------\n"
        "aaaaaaaaaaaaaaaa          0  copies       8.696  aaaaaaaaaaaaaaaa               1"
        "        115       10\n"
        "aaaaaaaaaaaaaaaa          0  kernels     26.087  aaaaaaaaaaaaaaaa               4"
        "        115       30\n"
        "bbbbbbbbbbbbbbbb          0  copies       4.444  bbbbbbbbbbbbbbbb               1"
        "        225       10\n"
        "bbbbbbbbbbbbbbbb          0  kernels     22.222  bbbbbbbbbbbbbbbb               4"
        "        225       50\n"
    )
    default = run("busy", "--store", store).output.splitlines()
    assert default[0].startswith("file              device_id  activity  busy_pct  interval_")
    assert default[2].startswith("aaaaaaaaaaaaaaaa          0  copies       8.696")


def test_variability_and_plot(store: str, tmp_path: Path) -> None:
    png = tmp_path / "v.png"
    r = run("variability", "--store", store, "--json", "--plot", str(png))
    got = json.loads(r.stdout)
    assert [
        (x["source_id"], x["median_iteration_ms"], x["steady_iteration_count"]) for x in got
    ] == [("aaaaaaaaaaaaaaaa", 100.0, 3), ("bbbbbbbbbbbbbbbb", 200.0, 3)]
    # Fleet median 150 ms; MAD 50 -> z = -+50 / (1.4826 * 50).
    assert got[0]["perf_ratio"] == 1.5 and got[1]["robust_z"] == pytest.approx(1 / 1.4826)
    assert got[1]["median_power_w"] == 400.0
    assert png.read_bytes().startswith(b"\x89PNG")


def test_attribute_iterations(store: str) -> None:
    r = run("attribute", "--store", store, "--source", "bbbbbbbbbbbbbbbb", "--json")
    got = json.loads(r.stdout)
    assert [x["iteration"] for x in got] == [0, 1, 2, 3]
    # 200 ms at a constant 400 W = 80 J per iteration.
    assert [x["energy_j"] for x in got] == [pytest.approx(80.0)] * 4
    assert {x["coverage"] for x in got} == {"ok"}


def test_timeline_and_perfetto(store: str, tmp_path: Path) -> None:
    svg, tr = tmp_path / "t.svg", tmp_path / "t.json"
    r = run(
        "timeline",
        "--store",
        store,
        "--source",
        "aaaaaaaaaaaaaaaa",
        "-o",
        str(svg),
        "--perfetto",
        str(tr),
        "--iteration",
        "1",
    )
    assert r.exit_code == 0, r.output
    assert svg.read_text().lstrip().startswith("<?xml")
    ev = json.loads(tr.read_text())["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    # Iteration 1 is [100, 200) ms: kernels 2 and 3 (relative to the window start).
    assert [(e["name"], e["ts"], e["dur"]) for e in kernels] == [
        ("gemm", 0.0, 10000.0),
        ("relu", 10000.0, 5000.0),
    ]
    r = CliRunner().invoke(main, ["timeline", "--store", store, "-o", str(svg)])
    assert r.exit_code == 2 and "works on one source" in r.output


def test_compare_store_sources(store: str) -> None:
    r = run("compare", "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "--store", store, "--json")
    got = json.loads(r.stdout)
    ov = {x["metric"]: x for x in got["overview"]}
    assert ov["median_iteration_ms"]["ratio"] == 2.0
    assert ov["match_coverage_pct"]["a"] == 100.0
    k = {x["name"]: x for x in got["kernels"]}
    assert k["gemm"]["mean_us_a"] == 10000.0 and k["gemm"]["mean_us_b"] == 20000.0


def test_summary_shows_health(store: str) -> None:
    r = run("summary", "--store", store, "--json")
    rep = json.loads(r.output)
    sh = {x["source_id"]: x for x in rep["sampling_health"]}
    assert sh["aaaaaaaaaaaaaaaa"]["median_gap_ms"] == 10.0
    assert sh["aaaaaaaaaaaaaaaa"]["sample_count"] == 41
    kh = rep["kernel_health"]
    # Source b: gemm [0, 20) ms and relu [10, 15) ms on stream 7, twice.
    assert [x["overlapping_kernel_count"] for x in kh] == [0, 2]
    assert [x["missing_iteration_count"] for x in rep["iteration_health"]] == [0, 0]


def test_attribute_samples_from_other_source(store: str) -> None:
    st = Store(store)
    # c's clock starts 50 ms after a's (epoch origins 0 and 50 ms): its sample at its t=0 is
    # a's t=50 ms. 123 W until c's t=100 ms (a's 150 ms), then 321 W.
    ts = list(range(0, 400 * MS, 10 * MS))
    for sid, origin in (("cccccccccccccccc", 50 * MS), ("dddddddddddddddd", None)):
        gs = pl.DataFrame(
            {
                "device_id": [0] * len(ts),
                "timestamp_ns": ts,
                "power_w": [123.0 if t < 100 * MS else 321.0 for t in ts],
            }
        )
        src = pl.DataFrame(
            {"source_id": [sid], "time_origin_epoch_ns": [origin]},
            schema_overrides={"time_origin_epoch_ns": pl.Int64},
        )
        st.write(Tables.build(sources=src, gpu_samples=gs).with_source_id(sid))
    r = run(
        "attribute",
        "--store",
        store,
        "--source",
        "aaaaaaaaaaaaaaaa",
        "--samples-from",
        "cccccccccccccccc",
        "--json",
    )
    got = {x["iteration"]: x for x in json.loads(r.stdout)}
    assert got[0]["coverage"] == "outside"  # [0, 100) ms starts before c's first sample
    assert got[1]["power_w"] == pytest.approx((123 * 50 + 321 * 50) / 100)
    assert got[2]["power_w"] == 321.0
    r = CliRunner().invoke(
        main,
        [
            "attribute",
            "--store",
            store,
            "--source",
            "aaaaaaaaaaaaaaaa",
            "--samples-from",
            "dddddddddddddddd",
        ],
    )
    assert r.exit_code == 1
    assert r.output == (
        "traceanalyze: error: dddddddddddddddd have no recorded epoch origin; "
        "their samples cannot be aligned to another source's clock\n"
    )


SC22_A = (
    "Iteration Duration 0 0 : 0.5\nIteration Duration 1 0 : 0.25\nIteration Duration 2 0 : 0.75\n"
)
SC22_B = (
    "Iteration Duration 0 0 : 0.5\nIteration Duration 1 0 : 0.5\nIteration Duration 2 0 : 1.0\n"
)


def test_compare_two_iteration_logs_notes_missing_kernels(write) -> None:
    a, b = write("a.txt", SC22_A), write("b.txt", SC22_B)
    r = run("compare", str(a), str(b), "--csv")
    assert r.stdout.splitlines()[:3] == [
        "metric,a,b,delta,ratio",
        "iteration_count,3.0,3.0,0.0,1.0",
        "median_iteration_ms,500.0,500.0,0.0,1.0",
    ]
    assert r.stdout.count("\n\n") == 0  # no kernel table after the overview
    assert f"traceanalyze: warning: kernel rows left out: no kernels in A = {a} and B = {b}" in (
        r.stderr
    )


def test_device_filter(store: str) -> None:
    r = CliRunner().invoke(main, ["busy", "--store", store, "--device", "1"])
    assert r.exit_code == 1
    # Issue 21: a filter that matches nothing says so, naming the devices there are.
    assert r.output == (
        "traceanalyze: error: no work or samples on device 1 in these sources "
        "(devices with work: 0)\n"
    )


# --- compare: exact table, self-comparison, CSV with both tables, filters ---------------------


def test_compare_table_exact(store: str) -> None:
    a, b = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
    r = run("compare", a, b, "--store", store, "--wide")  # every column (156 wide)
    # By hand: a's kernels gemm 2 x 10 ms, relu 2 x 5 ms (30 ms); b's gemm 2 x 20 ms, relu
    # 2 x 15 ms (70 ms); both match by name and grid/block. Iterations 100 vs 200 ms; samples
    # 1500 vs 750 MHz, 200 vs 400 W, 60 °C. Per iteration: 30 / 4 and 70 / 4 ms.
    assert r.output == (
        f"A = {a} ({a}.csv)\n"
        f"B = {b} ({b}.csv)\n"
        "== overview\n"
        "metric                              a     b  delta  ratio\n"
        "----------------------------  -------  ----  -----  -----\n"
        "kernel_launch_count                 4     4      0      1\n"
        "kernel_time_ms                     30    70     40  2.333\n"
        "matched_kernel_time_ms             30    70     40  2.333\n"
        "match_coverage_pct                100   100      0      1\n"
        "iteration_count                     4     4      0      1\n"
        "median_iteration_ms               100   200    100      2\n"
        "median_images_per_s                 -     -      -      -\n"
        "median_sm_clock_mhz           1,500.0   750   -750    0.5\n"
        "median_power_w                    200   400    200      2\n"
        "median_temperature_c               60    60      0      1\n"
        "kernel_time_per_iteration_ms      7.5  17.5     10  2.333\n"
        "\n"
        "== kernels (top 2 of 2 by time)\n"
        "name  grid_x  grid_y  grid_z  block_x  block_y  block_z  count_a  count_b  total_ms_a"
        "  total_ms_b  mean_us_a  mean_us_b  delta_mean_us  ratio_mean  matched\n"
        "----  ------  ------  ------  -------  -------  -------  -------  -------  ----------"
        "  ----------  ---------  ---------  -------------  ----------  -------\n"
        "gemm       4       -       -      256        -        -        2        2          20"
        "          40   10,000.0   20,000.0       10,000.0           2  True\n"
        "relu       4       -       -      256        -        -        2        2          10"
        "          30    5,000.0   15,000.0       10,000.0           3  True\n"
    )


def test_compare_a_source_with_itself(store: str) -> None:
    a = "aaaaaaaaaaaaaaaa"
    r = run("compare", a, a, "--store", store, "--json")
    assert r.stderr == ""  # no "no kernels in …" note: both sides have a's kernels
    got = json.loads(r.stdout)
    assert (got["a"], got["b"]) == (f"A = {a} ({a}.csv)", f"B = {a} ({a}.csv)")
    ov = {x["metric"]: x for x in got["overview"]}
    assert ov["kernel_time_ms"]["a"] == ov["kernel_time_ms"]["b"] == 30.0
    assert ov["match_coverage_pct"]["b"] == 100.0 and ov["median_iteration_ms"]["ratio"] == 1.0
    assert {x["name"]: x["ratio_mean"] for x in got["kernels"]} == {"gemm": 1.0, "relu": 1.0}


def test_compare_csv_has_both_tables(store: str) -> None:
    r = run("compare", "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "--store", store, "--csv")
    overview, kernels = r.stdout.split("\n\n")
    assert overview.splitlines()[0] == "metric,a,b,delta,ratio"
    assert len(overview.splitlines()) == 1 + 11
    lines = kernels.splitlines()
    assert lines[0] == (
        "name,grid_x,grid_y,grid_z,block_x,block_y,block_z,count_a,count_b,total_ms_a,"
        "total_ms_b,mean_us_a,mean_us_b,delta_mean_us,ratio_mean,matched"
    )
    assert lines[1:] == [
        "gemm,4,,,256,,,2,2,20.0,40.0,10000.0,20000.0,10000.0,2.0,true",
        "relu,4,,,256,,,2,2,10.0,30.0,5000.0,15000.0,10000.0,3.0,true",
    ]


def test_compare_source_and_device_filters(store: str, tmp_path: Path) -> None:
    # Two stores holding both sources each; --source picks the same one on both sides.
    other = make_store(tmp_path / "other")
    r = run("compare", store, other, "--source", "bbbbbbbbbbbbbbbb", "--json")
    ov = {x["metric"]: x for x in json.loads(r.stdout)["overview"]}
    assert ov["kernel_time_ms"]["a"] == ov["kernel_time_ms"]["b"] == 70.0
    # Without --source each side holds two GPU-runs: refused as misuse, naming them (issue
    # 21) ...
    r = CliRunner().invoke(main, ["compare", store, other])
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"traceanalyze: error: {store}: side A holds 2 GPU-runs: aaaa")
    # ... pooled with --pool (30 + 70 ms), each side saying so.
    r = run("compare", store, other, "--json", "--pool")
    doc = json.loads(r.stdout)
    ov = {x["metric"]: x for x in doc["overview"]}
    assert ov["kernel_time_ms"]["a"] == 100.0
    assert doc["a"] == f"A = {store} (pooled: 2 GPU-runs)"
    r = CliRunner().invoke(main, ["compare", store, other, "--source", "cccc"])
    assert r.exit_code == 1
    assert r.stderr == f"traceanalyze: error: {store}: none of the sources cccc is in A\n"
    r = CliRunner().invoke(main, ["compare", "a", "b", "--store", store, "--source", "a"])
    assert r.exit_code == 2 and "--source applies to files or stores" in r.output
    # --device 1: nobody ran there.
    r = CliRunner().invoke(
        main, ["compare", "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "--store", store, "--device", "1"]
    )
    assert r.exit_code == 1
    assert r.stderr.endswith(  # said by the filter (issue 21), before the comparison
        "traceanalyze: error: no work or samples on device 1 in these sources "
        "(devices with work: 0)\n"
    )


# --- an iteration log plus an NVML log of the same run (two files, two clocks) ----------------

T0 = 1_732_260_000_000_000_000  # epoch ns


def iterlog(path_write) -> Path:
    # Device unknown (empty cell): three 100 ms iterations from T0.
    rows = [f"0,,{i},{T0 + i * 100 * MS},{100 * MS},64,640.0" for i in range(3)]
    return path_write(
        "iterations.csv",
        "# traceanalyze-iterlog v1\nrank,device_id,iteration,start_ns,duration_ns,batch_size,"
        "images_per_s\n" + "\n".join(rows) + "\n",
    )


def nvml_log(path_write, devices: tuple[int, ...]) -> Path:
    from traceanalyze.readers.smi.smi_csv import NVML_SAMPLER_HEADER, NVML_SAMPLER_MAGIC

    # Every 25 ms from T0 for 300 ms: power 100 + 10·k W on device 0, 1000 + 10·k on device 1.
    lines = [f"{NVML_SAMPLER_MAGIC} interval_ms=25", ",".join(NVML_SAMPLER_HEADER)]
    for k in range(13):
        for d in devices:
            row = {
                "timestamp_ns": T0 + k * 25 * MS,
                "device_id": d,
                "power_w": 100.0 + 1000 * d + 10 * k,
                "power_kind": "instant",
            }
            lines.append(",".join(str(row.get(c, "")) for c in NVML_SAMPLER_HEADER))
    return path_write("nvml.csv", "\n".join(lines) + "\n")


def test_attribute_iteration_log_with_a_separate_nvml_log(write) -> None:
    log, smi = iterlog(write), nvml_log(write, (0,))
    r = run("attribute", str(log), str(smi), "--json")
    got = json.loads(r.stdout)
    # Iteration 0 [0, 100) ms holds 100, 110, 120, 130 W for 25 ms each: 115 W, 11.5 J; then
    # 155 W and 195 W.
    assert [x["power_w"] for x in got] == pytest.approx([115.0, 155.0, 195.0])
    assert [x["energy_j"] for x in got] == pytest.approx([11.5, 15.5, 19.5])
    assert {(x["samples_file"], x["samples_device_id"]) for x in got} == {(str(smi), 0)}
    assert {x["file"] for x in got} == {str(log)}


def test_ambiguous_device_is_said_and_device_filter_settles_it(write) -> None:
    log, smi = iterlog(write), nvml_log(write, (0, 1))
    r = CliRunner().invoke(main, ["attribute", str(log), str(smi)])
    assert r.exit_code == 1
    assert r.stderr == (
        f"traceanalyze: error: no telemetry for these iterations: {log}: ambiguous for unknown "
        f"device ({smi} device 0, {smi} device 1)\n"
    )
    r = run("attribute", str(log), str(smi), "--device", "1", "--json")
    got = json.loads(r.stdout)
    assert got[0]["power_w"] == pytest.approx(1115.0) and got[0]["samples_device_id"] == 1
    # variability: one GPU, warm-up max(1, 3 // 10) = 1 iteration; steady span 100..300 ms holds
    # samples k = 4..12 (140..220 W): median 180 W.
    r = run("variability", str(log), str(smi), "--json")
    (v,) = json.loads(r.stdout)
    assert v["median_power_w"] is None and v["telemetry_window"] == "none"
    assert (
        f"traceanalyze: warning: {log}: no telemetry for iterations: ambiguous for unknown device"
    ) in r.stderr
    r = run("variability", str(log), str(smi), "--device", "0", "--json")
    (v,) = json.loads(r.stdout)
    assert v["median_power_w"] == 180.0 and v["samples_file"] == str(smi)
    assert v["file"] == str(log) and v["device_id"] is None


# --- summary: FILE... or --store, --device, health with the requested interval ----------------


@pytest.fixture
def lazy_summary(monkeypatch):
    # The analysis-side `summary` (FILE..., --device); cli.py registers it in _LAZY.
    monkeypatch.setitem(cli._LAZY, "summary", "traceanalyze.cli.analyses:summary")


def test_summary_takes_files_and_device(write, lazy_summary) -> None:
    log, smi = iterlog(write), nvml_log(write, (0, 1))
    r = run("summary", str(log), str(smi), "--json")
    rep = json.loads(r.stdout)
    assert {x["path"] for x in rep["sources"]} == {str(log), str(smi)}
    (sh,) = rep["sampling_health"]
    assert sh["file"] == str(smi)  # every per-source table names the file
    # 13 samples per device, 25 ms apart, 25 ms asked for (the sampler's header says so).
    assert (sh["sample_count"], sh["requested_interval_ms"], sh["median_gap_ms"]) == (
        26,
        25.0,
        25.0,
    )
    assert sh["interval_ratio"] == 1.0
    (ev,) = rep["event_health"]
    assert (ev["table"], ev["row_count"], ev["untimed_count"], ev["negative_count"]) == (
        "iterations",
        3,
        0,
        0,
    )
    r = run("summary", str(log), str(smi), "--device", "1", "--json")
    (sh,) = json.loads(r.stdout)["sampling_health"]
    assert sh["sample_count"] == 13
    r = CliRunner().invoke(main, ["summary", str(log), "--csv"])
    assert r.exit_code == 2 and "summary has several tables" in r.output


def test_summary_store_still_works(store: str, lazy_summary) -> None:
    r = run("summary", "--help")
    assert r.exit_code == 0 and "[FILES]..." in r.output and "--device" in r.output
    r = run("summary", "--store", store, "--source", "aaaaaaaaaaaaaaaa", "--json")
    rep = json.loads(r.stdout)
    assert [x["source_id"] for x in rep["sampling_health"]] == ["aaaaaaaaaaaaaaaa"]
    assert [x["overlapping_kernel_count"] for x in rep["kernel_health"]] == [0]


# --- timeline on a real PyTorch trace: nothing before the first kernel is lost ----------------


def test_timeline_keeps_markers_that_start_before_the_first_kernel(tmp_path: Path) -> None:
    import traceanalyze as ta

    p = shared("kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz")
    t = ta.read(p)
    first_kernel = t.kernels["start_ns"].min()
    early = t.markers.filter(pl.col("start_ns") < first_kernel)["name"].to_list()
    assert "ProfilerStep#101" in early and any(n.startswith("Iteration Start") for n in early)
    tr, png = tmp_path / "t.json", tmp_path / "t.png"
    # --whole-trace: every event; the default window is the span of device work and host
    # operators (issue 21), which markers far from any work do not stretch.
    r = run("timeline", str(p), "--perfetto", str(tr), "-o", str(png), "--whole-trace")
    assert r.exit_code == 0
    ev = json.loads(tr.read_text())["traceEvents"]
    gpu_or_api = ("kernel", "memcpy", "cpu_op", "cuda_runtime", "cuda_driver")
    marks = [e for e in ev if e["ph"] in ("X", "i") and e["cat"] not in gpu_or_api]
    assert len(marks) == t.markers.height  # all 87, the early ones included
    assert set(early) <= {e["name"] for e in marks}
    assert min(e["ts"] for e in ev if "ts" in e) == 0.0  # never negative (Perfetto rejects it)
    assert png.read_bytes().startswith(b"\x89PNG")


def test_timeline_zoom_shorter_than_the_sampling_period_holds_telemetry(
    store: str, tmp_path: Path
) -> None:
    # Samples every 10 ms; a 4 ms window from 12 to 16 ms has none inside: the 10 ms sample holds.
    tr = tmp_path / "z.json"
    r = run(
        "timeline",
        "--store",
        store,
        "--source",
        "aaaaaaaaaaaaaaaa",
        "--start",
        "12",
        "--end",
        "16",
        "--perfetto",
        str(tr),
    )
    assert r.exit_code == 0
    ev = json.loads(tr.read_text())["traceEvents"]
    power = [(e["ts"], e["args"]["value"]) for e in ev if e["ph"] == "C" and e["name"] == "power_w"]
    # The relu kernel [10, 15) ms overlaps the window from before: the origin is its start,
    # and the held sample sits at the window start, 2 ms later.
    assert power == [(2000.0, 200.0)]
    kernels = [(e["name"], e["ts"], e["dur"]) for e in ev if e.get("cat") == "kernel"]
    assert kernels == [("relu", 0.0, 5000.0)]
