"""Dataset: filters, one method per analysis, and every analysis command printing exactly what
the library returns (on real traces from ../shared/traces)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import shared
from test_cli_analyses import iterlog, make_store, nvml_log

import traceanalyze as ta
from traceanalyze.cli import main, render
from traceanalyze.errors import TraceanalyzeError, UsageProblem

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
H100X2 = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
NVPROF_METRICS = "nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv"
NCU = "ncu_csv/roofline_ncu2026.2_rtx5070_gemm_tiled_long.csv"


def cli(*args: str, code: int = 0) -> Any:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == code, r.output
    return r


def as_json(obj: Any) -> Any:
    """What the library's result looks like after a JSON round trip (the CLI's --json)."""
    return json.loads(render.to_json(obj))


# --- --json output == the library call, for every analysis command ---------------------------

# Each command and the test below that checks its output against the library.
COVERED = {
    "summary": "test_summary_and_health_json_equal_the_library",
    "health": "test_summary_and_health_json_equal_the_library",
    "busy": "test_busy_json_equals_the_library",
    "coreutil": "test_coreutil_json_equals_the_library_and_unanswered_files_are_named",
    "attribute": "test_attribute_json_equals_the_library",
    "variability": "test_variability_json_equals_the_library",
    "compare": "test_compare_json_equals_the_library",
    "timeline": "test_timeline_perfetto_equals_the_library",
    "launches": "test_trace_analyses_json_equal_the_library",
    "idle": "test_trace_analyses_json_equal_the_library",
    "overlap": "test_trace_analyses_json_equal_the_library",
    "annotations": "test_trace_analyses_json_equal_the_library",
    "ops": "test_ops_and_mfu_json_equal_the_library",
    "mfu": "test_ops_and_mfu_json_equal_the_library",
    "roofline": "tests/test_analyses_mfu.py::test_roofline_cli_json_equals_the_library",
    "runs": "tests/test_analyses_runs.py::test_runs_scaling_history_json_equal_the_library",
    "scaling": "tests/test_analyses_runs.py::test_runs_scaling_history_json_equal_the_library",
    "history": "tests/test_analyses_runs.py::test_runs_scaling_history_json_equal_the_library",
    "stragglers": "tests/test_stragglers.py::test_cli_json_equals_the_library",
    "critical-path": "tests/test_critical_path.py::test_cli_json_equals_the_library",
    "diagnose": "tests/test_diagnose.py::test_cli_json_equals_the_library",
}


def test_summary_and_health_json_equal_the_library() -> None:
    a, b = str(shared(RESNET)), str(shared(H100X2))
    got = json.loads(cli("summary", a, b, "--json").stdout)
    assert got == as_json(ta.open(a, b).summary().to_dict())
    assert {x["file"] for x in got["top_kernels"]} == {a, b}
    got = json.loads(cli("health", a, "--json").stdout)
    assert got == as_json(ta.open(a).health().to_dict())


def test_busy_json_equals_the_library() -> None:
    p = str(shared(H100X2))
    got = json.loads(cli("busy", p, "--json").stdout)
    lib = ta.open(p).busy()
    assert got == as_json(lib)
    # Independently: device 0's kernel count from the trace itself.
    n0 = ta.read(p).kernels.filter(pl.col("device_id") == 0).height
    assert [x["interval_count"] for x in got if x["activity"] == "kernels"][0] == n0
    got = json.loads(cli("busy", p, "--start", "10", "--end", "50", "--json").stdout)
    assert got == as_json(ta.open(p).busy(start_ms=10, end_ms=50))
    assert {x["window_ms"] for x in got} == {40.0}


def test_coreutil_json_equals_the_library_and_unanswered_files_are_named() -> None:
    a, b = str(shared(NVPROF_METRICS)), str(shared(NCU))
    r = cli("coreutil", a, b, "--json", code=1)
    res = ta.open(a, b).coreutil()
    got = json.loads(r.stdout)
    assert got == as_json(res.exported)
    assert res.unanswered["file"].to_list() == [b]
    assert f"traceanalyze: error: {b}: no pipe-utilization metric" in r.stderr
    (row,) = res.table.rows(named=True)
    assert (row["file"], row["scale"], row["fma_pct"]) == (a, "level", 3.0)
    # Every column the library's table has (issue 35: the `<unit>_metric` columns were dropped):
    # levels renamed (`fma_level`, not a percentage), the metric names those of the file.
    renamed = {c.replace("_pct", "_level") for c in res.table.columns}
    assert [set(x) for x in got] == [renamed]
    rows = csv.reader(ln for ln in Path(a).read_text().splitlines() if not ln.startswith("=="))
    names = {r[3] for r in rows}  # the file's `Metric Name` column
    assert got[0]["fma_metric"] == "single_precision_fu_utilization" in names
    assert got[0]["sfu_metric"] == "special_fu_utilization" in names
    csv_head = cli("coreutil", a, b, "--csv", code=1).stdout.splitlines()[0].split(",")
    assert set(csv_head) == renamed


def test_attribute_json_equals_the_library(write) -> None:
    log, smi = iterlog(write), nvml_log(write, (0,))
    got = json.loads(cli("attribute", str(log), str(smi), "--json").stdout)
    assert got == as_json(ta.open(log, smi).attribute())


def test_variability_json_equals_the_library() -> None:
    a, b = str(shared(RESNET)), str(shared(H100X2))
    got = json.loads(cli("variability", a, b, "--json").stdout)
    res = ta.open(a, b).variability()
    assert got == as_json(res.table)
    # The resnet trace's 5 ProfilerStep iterations, minus max(1, 10 %) warm-up: 4 steady.
    assert [(x["file"], x["steady_iteration_count"]) for x in got] == [(a, 4)]
    assert set(res.kernel_names) == {"top1_kernel", "top2_kernel", "top3_kernel"}


def test_compare_json_equals_the_library(tmp_path: Path) -> None:
    a, b = str(shared(RESNET)), str(shared(H100X2))
    got = json.loads(cli("compare", a, b, "--json").stdout)
    assert got == as_json(ta.open(a).compare(ta.open(b)).to_dict())
    assert (got["a"], got["b"]) == (f"A = {a}", f"B = {b}")
    # Two sources of one store.
    st = make_store(tmp_path / "st")
    x, y = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
    got = json.loads(cli("compare", x, y, "--store", st, "--json").stdout)
    assert got == as_json(ta.open(store=st).compare_sources(x, y).to_dict())


def test_timeline_perfetto_equals_the_library(tmp_path: Path) -> None:
    p = str(shared(RESNET))
    out, png = tmp_path / "cli.json", tmp_path / "t.png"
    cli("timeline", p, "--iteration", "102", "--perfetto", str(out), "-o", str(png))
    res = ta.open(p).timeline(iteration=102)
    res.to_perfetto(tmp_path / "lib.json")
    assert out.read_text() == (tmp_path / "lib.json").read_text()
    assert png.read_bytes().startswith(b"\x89PNG")


def test_trace_analyses_json_equal_the_library() -> None:
    p = str(shared(H100X2))
    ds = ta.open(p)
    got = json.loads(cli("launches", p, "--json").stdout)
    assert got == as_json(ds.launches().stats)
    got = json.loads(cli("launches", p, "--by-kernel", "--json").stdout)
    assert got == as_json(ds.launches(by_kernel=True).stats)
    assert json.loads(cli("idle", p, "--json").stdout) == as_json(ds.idle())
    assert json.loads(cli("overlap", p, "--json").stdout) == as_json(ds.overlap())
    got = json.loads(cli("annotations", p, "--depth", "1", "--json").stdout)
    assert got == as_json(ds.annotations(depth=1))


def test_ops_and_mfu_json_equal_the_library() -> None:
    p = str(shared(RESNET))
    ds = ta.open(p)
    assert json.loads(cli("ops", p, "--json").stdout) == as_json(ds.ops())
    got = json.loads(cli("ops", p, "--by", "kernel", "--top", "5", "--json").stdout)
    assert got == as_json(ds.ops(by="kernel", top=5))
    got = json.loads(cli("mfu", p, "--batch-size", "32", "--image-size", "224", "--json").stdout)
    assert got == as_json(ds.mfu(batch_size=32, image_size=224))
    a, b = p, str(shared("kineto_json/hta_alexnet_a100_param_benchmark_trace.json.gz"))
    got = json.loads(cli("compare", a, b, "--ops", "--json").stdout)
    assert got == as_json(ta.open(a).compare(ta.open(b), ops=True).to_dict())


def test_every_analysis_command_is_covered() -> None:
    from traceanalyze.cli import analysis_commands

    commands = set(analysis_commands())
    assert commands == set(COVERED)
    assert all(callable(globals()[t]) for t in COVERED.values() if "::" not in t)


# --- Dataset: filters, results, errors ---------------------------------------------------------


def test_where_filters_and_lazy_tables() -> None:
    p = shared(H100X2)
    ds = ta.open(p)
    assert isinstance(ds.kernels, pl.LazyFrame)
    assert isinstance(ds.sources, pl.LazyFrame)  # a table, like every other one
    k = ta.read(p).kernels
    assert ds.where(device=1).kernels.collect().height == k.filter(pl.col("device_id") == 1).height
    with pytest.raises(TraceanalyzeError, match="no such source"):
        ds.where(source="nope")


def test_one_source_analyses_say_so_as_misuse(tmp_path: Path) -> None:
    st = make_store(tmp_path / "st")
    ds = ta.open(store=st)
    with pytest.raises(UsageProblem, match="works on one source"):
        ds.timeline()
    with pytest.raises(UsageProblem, match="works on one source"):
        ds.busy(start_ms=0, end_ms=1)
    r = cli("busy", "--store", st, "--start", "0", code=2)
    assert "works on one source" in r.output
    t = ds.where(source="aaaaaaaaaaaaaaaa").timeline(iteration=1)
    # Iteration 1 of source a is [100, 200) ms: gemm (10 ms) and relu (5 ms) in it.
    assert (t.start_ns, t.end_ns) == (100_000_000, 200_000_000)
    assert t.top_kernels.rows() == [("gemm", 10.0, 1), ("relu", 5.0, 1)]
    # the figure's lanes are made when first read, not for an export (Timeline.make_lanes)
    t.to_perfetto(tmp_path / "t.pftrace")
    assert "lanes" not in vars(t)
    assert set(t.lanes["name"].drop_nulls()) == {"gemm", "relu"}
    assert t.lanes is t.lanes  # made once


def test_summary_result_matches_hand_counts() -> None:
    p = shared(RESNET)
    t = ta.read(p)
    rep = ta.open(p).summary(top=3)
    assert rep.kernels["kernel_count"].to_list() == [t.kernels.height]
    assert rep.top_kernels.height == 3 and rep.top_ops.height == 3
    assert "inclusive_ms" in rep.top_ops.columns
    # conv2d's inclusive time by hand: the sum of its durations.
    conv = t.ops.filter(pl.col("name") == "aten::conv2d")
    by_hand = (conv["end_ns"] - conv["start_ns"]).sum() / 1e6
    full = ta.open(p).summary(top=50).top_ops
    assert full.filter(pl.col("name") == "aten::conv2d")["inclusive_ms"][0] == pytest.approx(
        by_hand
    )


def test_summary_text_fits_120_columns_names_each_file_once() -> None:
    a, b = str(shared(RESNET)), str(shared(H100X2))
    out = cli("summary", a, b).stdout
    assert max(len(line) for line in out.splitlines()) <= 120
    assert out.count(a) == 1 and out.count(b) == 1
    assert out.splitlines()[0] == f"== {a}"
    assert "…" in out  # the long C++ kernel names are cut in the text table only
    got = json.loads(cli("summary", a, "--json").stdout)
    assert max(len(x["name"]) for x in got["top_kernels"]) > 120


def test_plots_take_results(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    p = shared(RESNET)
    res = ta.open(p).timeline(iteration=102)
    fig = ta.plot.timeline(res, tmp_path / "t.svg")
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "iter 102" in texts and "ProfilerStep#102" in texts
    # The kernels' legend (the annotations have their own: test_collect_run, test_plots).
    (legend,) = [x for x in fig.legends if x.get_title().get_text().startswith("kernels")]
    names = [t.get_text() for t in legend.get_texts()]
    assert names[-1] == "other kernels" and len(names) == len(res.top_kernels) + 1
    top = res.top_kernels["name"][0]
    assert names[0].startswith(top.removeprefix("void ").split("<")[0].split("::")[-1])
    st = ta.open(shared(NVPROF_METRICS)).coreutil()
    ta.plot.coreutil(st, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")
    assert not list(tmp_path.glob(".*.tmp"))


# --- --json carries every column the library's result has (over docs/cli.md) ---------------------

# A real input for each command: `--json` is run on it while the Dataset method is watched.
# (argv, exit code, the result's frame that `--json` prints by default when it prints one of
# several: `launches` its stats, `--only-outliers` the outliers; `critical-path` its
# iterations, `--by-event` the events)
JSON_RUNS: dict[str, tuple[list[str], int] | tuple[list[str], int, str]] = {
    "summary": ([RESNET], 0),
    "health": ([RESNET], 0),
    "busy": ([H100X2], 0),
    "coreutil": ([NVPROF_METRICS, NCU], 1),
    "variability": ([RESNET], 0),
    "launches": ([H100X2], 0, "stats"),
    "idle": ([H100X2], 0),
    "overlap": ([H100X2], 0),
    "annotations": ([H100X2], 0),
    "ops": ([RESNET], 0),
    "critical-path": ([RESNET], 0, "iterations"),
    "mfu": ([RESNET, "--batch-size", "32", "--image-size", "224"], 0),
}
# Commands whose input a FILE argument cannot give here (a store of several runs, several
# ranks, ncu roofline metrics, a telemetry log beside an iteration log): the test named in
# COVERED compares their whole `--json` with the library's result.
ELSEWHERE = {"attribute", "compare", "roofline", "runs", "scaling", "history", "stragglers"}
ELSEWHERE |= {"timeline"}  # no --json: --perfetto, checked equal to the library's export
ELSEWHERE |= {"diagnose"}  # findings, not frames: tests/test_diagnose.py checks --json against it
NOT_ANALYSES = {"formats", "schema"}  # the registry and the schema: tests/test_cli.py


def _json_commands() -> set[str]:
    text = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    sections = re.split(r"^## `traceanalyze ([\w-]+)`$", text, flags=re.M)[1:]
    pairs = zip(sections[::2], sections[1::2], strict=True)
    return {name for name, body in pairs if "--json" in body}


def _frames(obj: Any, key: str = "") -> dict[str, pl.DataFrame]:
    """The frames of a library result by their key in its JSON (`""`: the top level)."""
    if isinstance(obj, pl.DataFrame):
        return {key: obj}
    if hasattr(obj, "exported"):
        return {key: obj.exported}
    if hasattr(obj, "to_dict"):
        out: dict[str, pl.DataFrame] = {}
        for k, v in obj.to_dict().items():
            out |= _frames(v, k) if isinstance(v, pl.DataFrame) else {}
        return out
    return {key: obj.table}


def test_every_command_in_the_docs_with_json_is_checked() -> None:
    documented = _json_commands()
    assert {"summary", "coreutil", "busy"} <= documented  # the parse finds them
    assert documented - NOT_ANALYSES <= set(JSON_RUNS) | ELSEWHERE
    assert set(COVERED) >= ELSEWHERE


@pytest.mark.parametrize("command", sorted(JSON_RUNS))
def test_json_carries_every_column_the_library_has(command: str, monkeypatch) -> None:
    from traceanalyze.dataset import Dataset

    argv, code, *part = JSON_RUNS[command]
    method = command.replace("-", "_")
    seen: list[Any] = []
    real = getattr(Dataset, method)

    def watched(self: Dataset, *a: Any, **kw: Any) -> Any:
        seen.append(real(self, *a, **kw))
        return seen[-1]

    monkeypatch.setattr(Dataset, method, watched)
    files = [str(shared(x)) if "/" in x else x for x in argv]
    got = json.loads(cli(command, *files, "--json", code=code).stdout)
    (result,) = seen
    frames = {"": getattr(result, part[0])} if part else _frames(result)
    for key, frame in frames.items():
        rows = got[key] if key else got
        rows = rows if isinstance(rows, list) else [rows]
        assert len(rows) == frame.height, (command, key)
        missing = [set(frame.columns) - set(r) for r in rows]
        assert missing == [set()] * len(rows), (command, key)
