"""Analysis commands through click's CliRunner: exact outputs on small inputs, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from test_analyses_coreutil import LAUNCHES, expected, tbd_csv

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
    assert [list(x) for x in got] == [
        ["file", "batch_size", "fma_pct", "fp16_pct", "tensor_pct", "sfu_pct", "launches", "weight"]
    ] * 2
    assert [(x["file"], x["batch_size"], x["launches"]) for x in got] == [
        (str(b), 8, 1),
        (str(a), 16, 3),
    ]
    assert got[0]["fma_pct"] == pytest.approx(10.0)
    assert got[1]["tensor_pct"] == pytest.approx(expected(3, 2))
    assert got[1]["weight"] == "cycles"


def test_coreutil_weight_none_and_plot(write, tmp_path: Path) -> None:
    a = write("batch_4.csv", tbd_csv())
    png = tmp_path / "cu.png"
    r = run("coreutil", str(a), "--weight", "none", "--csv", "--plot", str(png))
    assert r.exit_code == 0
    rows = r.stdout.splitlines()
    assert rows[0] == "file,batch_size,fma_pct,fp16_pct,tensor_pct,sfu_pct,launches,weight"
    fma = sum(x[5] for x in LAUNCHES) / 3
    assert rows[1].startswith(f"{a},4,{fma!r},")
    assert rows[1].endswith(",3,none")
    assert png.read_bytes().startswith(b"\x89PNG")


def test_coreutil_not_answerable(write) -> None:
    p = write("x.csv", "\n".join(ln for ln in tbd_csv().splitlines() if "pipe" not in ln) + "\n")
    r = CliRunner().invoke(main, ["coreutil", str(p)])
    assert r.exit_code == 1
    assert r.output.startswith("traceanalyze: error: source ")
    assert "no pipe-utilization metric; missing e.g. sm__inst_executed_pipe_fma" in r.output


def test_input_usage_errors(store: str, write) -> None:
    r = CliRunner().invoke(main, ["busy"])
    assert r.exit_code == 2 and "give FILE arguments or --store DIR" in r.output
    r = CliRunner().invoke(main, ["busy", "--store", store, "--source", "nope"])
    assert r.exit_code == 1 and r.output == "traceanalyze: error: no such source(s): nope\n"


def test_busy_csv_exact(store: str) -> None:
    # a: kernels [0,10) [10,15) [100,110) [110,115) ms, copy [50,60): window 115, busy 30.
    # b: kernels [0,20) [10,25) [200,220) [210,225): window 225, union [0,25) + [200,225) = 50.
    r = run("busy", "--store", store, "--csv")
    assert r.output == (
        "source_id,device_id,activity,interval_count,window_ms,busy_ms,busy_pct\n"
        "aaaaaaaaaaaaaaaa,0,copies,1,115.0,10.0,8.695652173913043\n"
        "aaaaaaaaaaaaaaaa,0,kernels,4,115.0,30.0,26.08695652173913\n"
        f"bbbbbbbbbbbbbbbb,0,copies,1,225.0,10.0,{100 * 10 / 225!r}\n"
        f"bbbbbbbbbbbbbbbb,0,kernels,4,225.0,50.0,{100 * 50 / 225!r}\n"
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
        "traceanalyze: error: source(s) dddddddddddddddd have no recorded epoch origin; "
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
    assert "traceanalyze: note: kernel rows left out: no kernels in source(s) A, B" in r.stderr


def test_device_filter(store: str) -> None:
    r = CliRunner().invoke(main, ["busy", "--store", store, "--device", "1"])
    assert r.exit_code == 1
    assert r.output == "traceanalyze: error: no kernels or copies with start and end times\n"
