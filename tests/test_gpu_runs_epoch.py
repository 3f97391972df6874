"""The iteration log and the PyTorch trace of one run, ingested without the collect manifest
beside them, are one GPU-run (issue 35): both carry epoch times, on the same devices, and their
windows overlap. Real data: the project's ResNet-50 CPU pair (fixtures/, one `collect` run);
expected values from the raw CSV and JSON; the rule itself on inline frames."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze.analyses.gpu_runs import concurrent_runs
from traceanalyze.cli import main

from .conftest import fixture

LOG = "iterlog-resnet50-cpu/iterations_bs2_rank0.csv"
TRACE = "kineto_json-resnet50-cpu/torch_bs2_rank0.pt.trace.json.gz"
DAY_NS = 86_400 * 10**9


def log_rows(path: Path) -> list[dict[str, str]]:
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(lines))


def trace_window_epoch_ns(path: Path) -> tuple[int, int]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    base = int(doc["baseTimeNanoseconds"])
    evs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    return (
        base + round(min(e["ts"] for e in evs) * 1000),
        base + round(max(e["ts"] + e["dur"] for e in evs) * 1000),
    )


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """The two files copied where no manifest is beside them (fixtures/ has none either)."""
    a, b = tmp_path / Path(LOG).name, tmp_path / Path(TRACE).name
    shutil.copyfile(fixture(LOG), a)
    shutil.copyfile(fixture(TRACE), b)
    assert not list(tmp_path.glob("manifest*.json"))
    return a, b


def test_the_pair_overlaps_in_epoch_time(pair: tuple[Path, Path]) -> None:
    """The premise, from the raw files: the log's iterations and the trace's events overlap."""
    log, trace = pair
    rows = log_rows(log)
    start = min(int(r["start_ns"]) for r in rows)
    end = max(int(r["start_ns"]) + int(r["duration_ns"]) for r in rows)
    t0, t1 = trace_window_epoch_ns(trace)
    assert max(start, t0) < min(end, t1)
    assert {r["device_id"] for r in rows} == {""}  # a CPU run: no device on either side


def test_variability_takes_the_pair_as_one_gpu_run(pair: tuple[Path, Path], tmp_path) -> None:
    log, trace = pair
    rows = log_rows(log)
    steady = len(rows) - 1  # warm-up: max(1, 10 %) of 4 iterations
    durations = sorted(int(r["duration_ns"]) for r in rows[1:])
    for ds in (ta.open(log, trace), ta.open(store=_ingested(tmp_path / "st", log, trace))):
        (row,) = ds.variability().table.rows(named=True)
        assert row["file"].endswith(log.name)  # the log, with every iteration, stands for it
        assert row["steady_iteration_count"] == steady
        assert row["median_iteration_ms"] == pytest.approx(durations[len(durations) // 2] / 1e6)
    r = CliRunner().invoke(main, ["variability", str(log), str(trace), "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)) == 1


def test_a_log_of_another_day_is_another_run(pair: tuple[Path, Path], tmp_path) -> None:
    """The same log moved a day later no longer overlaps the trace: two GPU-runs."""
    log, trace = pair
    text = log.read_text().splitlines()
    head, rows = text[:2], log_rows(log)
    moved = tmp_path / "later" / "iterations_bs2_rank0.csv"
    moved.parent.mkdir()
    lines = [
        ",".join(str(int(v) + DAY_NS) if k == "start_ns" else v for k, v in r.items()) for r in rows
    ]
    moved.write_text("\n".join([*head, *lines]) + "\n")
    assert len(ta.open(moved, trace).variability().table) == 2


def _ingested(store: Path, *files: Path) -> Path:
    ta.ingest([str(f) for f in files], str(store))
    return store


def windows(*rows: tuple[str, str, int | None, int, int, list[int]]) -> pl.DataFrame:
    cols = ["source_id", "format", "rank", "start_epoch_ns", "end_epoch_ns", "devices"]
    return pl.DataFrame(
        [dict(zip(cols, r, strict=True)) for r in rows],
        schema={
            "source_id": pl.String,
            "format": pl.String,
            "rank": pl.Int64,
            "start_epoch_ns": pl.Int64,
            "end_epoch_ns": pl.Int64,
            "devices": pl.List(pl.Int64),
        },
    )


def test_the_rule_on_inline_windows() -> None:
    log = ("log", "iterlog", 0, 100, 200, [0])
    # overlapping, same device and rank: one run
    assert concurrent_runs(windows(log, ("t", "kineto_json", 0, 150, 250, [0]))) == {
        "log": "epoch|log",
        "t": "epoch|log",
    }
    # rank unknown on one side does not contradict
    assert len(concurrent_runs(windows(log, ("t", "kineto_json", None, 150, 250, [0])))) == 2
    # each of these differs: no overlap (touching ends), another device, another rank
    assert concurrent_runs(windows(log, ("t", "kineto_json", 0, 200, 300, [0]))) == {}
    assert concurrent_runs(windows(log, ("t", "kineto_json", 0, 150, 250, [1]))) == {}
    assert concurrent_runs(windows(log, ("t", "kineto_json", 1, 150, 250, [0]))) == {}
    # two traces without a log (two ranks of one job) are never merged
    two = windows(("a", "kineto_json", 0, 100, 200, [0]), ("b", "kineto_json", 0, 100, 200, [0]))
    assert concurrent_runs(two) == {}
    # a trace that two logs overlap is left alone: no guess
    amb = windows(
        log, ("log2", "iterlog", 0, 120, 220, [0]), ("t", "nsys_sqlite", 0, 150, 250, [0])
    )
    assert concurrent_runs(amb) == {}
