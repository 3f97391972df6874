"""The trace-analysis commands through click's CliRunner: output shapes, filters, stores, exit
codes and the one-line messages when a trace cannot answer."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest
from _trace_raw import NSYS2, NVPROF, NVPROF_CSV, RESNET
from click.testing import CliRunner
from conftest import shared

from traceanalyze.cli import main

matplotlib.use("Agg")

COMMANDS = ("launches", "idle", "overlap", "annotations")


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_states_definitions(name: str) -> None:
    r = run(name, "--help")
    assert r.exit_code == 0 and "--json" in r.output and "--store" in r.output
    words = {
        "launches": "delay_ns = kernel start - call start",
        "idle": "launch_gap_ns",
        "overlap": "exposed_ns",
        "annotations": "innermost",
    }
    assert words[name] in " ".join(r.output.split())


def test_launches_json_per_device_and_by_kernel() -> None:
    p = str(shared(NVPROF))
    r = run("launches", p, "--json")
    assert r.exit_code == 0
    rows = json.loads(r.output)
    assert [(x["device_id"], x["launch_count"], x["file"]) for x in rows] == [(0, 160, p)]
    for key in ("mean_cpu_ns", "mean_gpu_ns", "mean_delay_ns", "median_delay_ns", "p95_cpu_ns"):
        assert isinstance(rows[0][key], float)
    by = json.loads(run("launches", p, "--json", "--by-kernel").output)
    assert sum(x["launch_count"] for x in by) == 160 and all(x["name"] for x in by)
    out = json.loads(run("launches", p, "--json", "--outliers").output)
    assert {x["outlier"] for x in out} == {"short_kernel", "long_delay"}
    assert sum(x["count"] for x in out if x["outlier"] == "short_kernel") == 122


def test_launches_table_lists_outliers() -> None:
    r = run("launches", str(shared(NVPROF)), "--top", "2")
    assert r.exit_code == 0 and "== outliers (top 2 of" in r.output


def test_launches_without_api_calls_is_one_line_error() -> None:
    r = run("launches", str(shared(NVPROF_CSV)))
    assert r.exit_code == 1
    assert r.output.startswith("traceanalyze: error: no API calls with correlation ids")
    assert r.output.count("\n") == 1


def test_idle_csv_device_filter_and_plot(tmp_path: Path) -> None:
    p = str(shared(NSYS2))
    png = tmp_path / "idle.png"
    r = run("idle", p, "--device", "1", "--csv", "--plot", str(png))
    assert r.exit_code == 0 and png.stat().st_size > 0
    lines = [x for x in r.output.splitlines() if x and not x.startswith("wrote")]
    head = lines[0].split(",")
    assert head[:4] == ["source_id", "file", "device_id", "stream_id"]
    assert {x.split(",")[2] for x in lines[1:]} == {"1"}
    assert len(lines) == 3  # the device row and its one stream


def test_overlap_json_and_note(tmp_path: Path) -> None:
    r = run("overlap", str(shared(RESNET)), "--json", "--plot", str(tmp_path / "o.png"))
    assert r.exit_code == 0
    assert "traceanalyze: warning: " in r.output and "no communication" in r.output
    rows = json.loads(r.output[r.output.index("[") : r.output.rindex("]") + 1])
    assert [x["iteration"] for x in rows] == [None, 101, 102, 103, 104, 105]
    assert all(x["overlap_pct"] is None for x in rows)


def test_annotations_from_a_store(tmp_path: Path) -> None:
    st = str(tmp_path / "st")
    p = shared(NSYS2)
    assert run("ingest", str(p), "--store", st, "--quiet").exit_code == 0
    r = run("annotations", "--store", st, "--json", "--depth", "1", "--strip-ids")
    assert r.exit_code == 0
    rows = json.loads(r.output)
    assert {"annotation", "event_count", "duration_ns"} <= set(rows[0])
    assert sum(x["event_count"] for x in rows) == 5299
    top = max(rows, key=lambda x: x["duration_ns"])
    assert top["annotation"] == "FlashAttnFunc"


def test_files_and_store_are_exclusive(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["idle", str(shared(NVPROF)), "--store", str(tmp_path)])
    assert r.exit_code == 2 and "not both" in r.output
    r = CliRunner().invoke(main, ["overlap"])
    assert r.exit_code == 2 and "give FILE arguments or --store DIR" in r.output


def test_unknown_source_is_one_line_error() -> None:
    r = run("annotations", str(shared(NVPROF)), "--source", "nope")
    assert r.exit_code == 1 and r.output == "traceanalyze: error: no such source(s): nope\n"
