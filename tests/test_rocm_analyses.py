"""The analyses on the ROCm profilers' real outputs, against values computed from the raw files
(json, sqlite3, csv) here: busy and idle time, the summary, Perfetto export, per-kernel
telemetry. `diagnose` is left out (being written under another issue)."""

from __future__ import annotations

import contextlib
import csv
import gzip
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

import traceanalyze as ta

from .conftest import shared, shared_set

pytestmark = pytest.mark.filterwarnings("ignore:.*rocpd_monitor")


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def _v3() -> tuple[Path, list[tuple[int, int]]]:
    p = shared_set("rocm/rocprofv3_json/tracelens_908_mi350x_results.json.gz")
    tool = json.loads(gzip.decompress(p.read_bytes()))["rocprofiler-sdk-tool"][0]
    recs = tool["buffer_records"]["kernel_dispatch"]
    return p, [(r["start_timestamp"], r["end_timestamp"]) for r in recs]


def _rocprof() -> tuple[Path, list[tuple[int, int]]]:
    p = shared_set("rocm/rocprof_csv/hpctraining_laplacian_k1_mi250x_results.csv")
    with open(p, newline="") as f:
        return p, [(int(r["BeginNs"]), int(r["EndNs"])) for r in csv.DictReader(f)]


def _rpd() -> tuple[Path, list[tuple[int, int]]]:
    p = shared_set("rocm/rpd/rocmprofiledata_matmul_result.rpd")
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT o.start, o.end FROM rocpd_op o JOIN rocpd_string t ON t.id = o.opType_id "
        "WHERE t.string = 'KernelExecution'"
    ).fetchall()
    con.close()
    return p, rows


@pytest.mark.parametrize("load", [_v3, _rocprof, _rpd], ids=["rocprofv3", "rocprof", "rpd"])
def test_busy_idle_and_summary_equal_the_raw_file(load: object) -> None:
    path, iv = load()  # type: ignore[operator]
    ds = ta.open(path)
    busy = ds.busy().filter(activity="kernels").row(0, named=True)
    assert busy["interval_count"] == len(iv)
    assert busy["busy_ms"] == pytest.approx(_union_ns(iv) / 1e6)
    s = ds.summary().kernels.row(0, named=True)
    assert s["kernel_count"] == len(iv)
    assert s["total_kernel_ms"] == pytest.approx(sum(e - b for b, e in iv) / 1e6)
    with pytest.warns(UserWarning) if not ds.table("api_calls").height else _nothing():
        idle = ds.idle().filter(pl.col("stream_id").is_null()).row(0, named=True)
    assert idle["busy_ns"] == _union_ns(iv)


def test_perfetto_export_with_launch_flows(tmp_path: Path) -> None:
    path, iv = _rpd()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    linked = con.execute("SELECT count(DISTINCT op_id) FROM rocpd_api_ops").fetchone()[0]
    con.close()
    out = tmp_path / "t.json"
    ta.open(path).timeline(whole=True).to_perfetto(out)
    events = json.loads(out.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert len(kernels) == len(iv)
    assert sum(e.get("ph") == "s" and e.get("cat") == "launch" for e in events) == linked


def test_per_kernel_sm_clock_from_the_rpd_monitor() -> None:
    path, _ = _rpd()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    monitor = con.execute("SELECT start, CAST(value AS REAL) FROM rocpd_monitor").fetchall()
    con.close()
    per = ta.open(path).attribute(per="kernel")
    # sample-and-hold, time-weighted over each kernel: within the clocks the monitor logged
    clocks = per["sm_clock_mhz"].drop_nulls()
    assert clocks.len() > 0
    assert min(v for _, v in monitor) <= clocks.min() <= clocks.max() <= max(v for _, v in monitor)


def test_the_howto_commands_run_on_the_samples() -> None:
    """docs/howto-rocm.md's "Reading the samples" block, every line, exit 0."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "howto-rocm.md").read_text(encoding="utf-8")
    block = text.split("## Reading the samples", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [ln for ln in block.splitlines() if ln.startswith("traceanalyze ")]
    assert len(lines) >= 5
    for ln in lines:
        for arg in shlex.split(ln):  # skipped, with the reason, without ../shared
            if arg.startswith("../shared/sets/"):
                shared_set(arg.removeprefix("../shared/sets/"))
            elif arg.startswith("../shared/traces/"):
                shared(arg.removeprefix("../shared/traces/"))
        r = subprocess.run(
            [sys.executable, "-m", "traceanalyze", *shlex.split(ln)[1:]],
            cwd=root,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        assert r.returncode == 0, f"{ln}: {r.stderr}"
