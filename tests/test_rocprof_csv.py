"""rocprof v1 results.csv / results.db readers: the MI250X sample against csv and sqlite3."""

from __future__ import annotations

import csv
import sqlite3
from typing import Any

import pytest

import traceanalyze as ta
from traceanalyze.errors import MalformedInput, MissingColumn
from traceanalyze.readers import detect_format

from .conftest import shared_set

DIR = "rocm/rocprof_csv/hpctraining_laplacian_k1_mi250x_results"


def _rows() -> list[dict[str, str]]:
    with open(shared_set(DIR + ".csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_csv_equals_the_file() -> None:
    rows = _rows()
    path = shared_set(DIR + ".csv")
    assert detect_format(path) == "rocprof_csv"
    t = ta.read(path)
    k = t.kernels
    assert k.height == len(rows) == 1004
    assert k["duration_ns"].sum() == sum(int(r["DurationNs"]) for r in rows)
    assert k["start_ns"].to_list() == [int(r["BeginNs"]) for r in rows]
    names = [r["KernelName"].removesuffix(".kd") for r in rows]
    assert k["name"].to_list() == names
    # gpu-id is a KFD node id, kept as such: no 0-based index is made up
    assert set(k["device_id"]) == {int(r["gpu-id"]) for r in rows} == {8}
    assert t.devices.select("device_id", "node_id", "vendor").rows() == [(8, 8, "AMD")]
    r0 = rows[0]
    assert k["grid_x"][0] == -(-int(r0["grd"]) // int(r0["wgr"]))
    assert k["block_x"][0] == int(r0["wgr"])
    assert k["registers_per_thread"][0] == int(r0["arch_vgpr"]) + int(r0["accum_vgpr"])


def test_db_equals_the_csv() -> None:
    db = shared_set(DIR + ".db")
    assert detect_format(db) == "rocprof_sqlite"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    n, total = con.execute('SELECT count(*), sum("DurationNs") FROM KERN').fetchone()
    con.close()
    a, b = ta.read(shared_set(DIR + ".csv")).kernels, ta.read(db).kernels
    assert b.height == n and b["duration_ns"].sum() == total
    assert a.drop("source_id").equals(b.drop("source_id"))
    assert not b["name"].str.contains('"').any()  # results.db keeps the CSV's quotes


def test_stats_csv_is_recognized_and_refused() -> None:
    p = shared_set(DIR + ".stats.csv")
    assert detect_format(p) == "rocprof_csv"
    with pytest.raises(MalformedInput, match=r"results\.stats\.csv.*pass the results\.csv"):
        ta.read(p)


_HEAD = (
    '"Index","KernelName","gpu-id","queue-id","queue-index","pid","tid","grd","wgr","lds",'
    '"scr","vgpr","sgpr","fbar","sig","obj","DispatchNs","BeginNs","EndNs","CompleteNs",'
    '"DurationNs","SQ_WAVES"\n'
)


def test_older_columns_clone_suffix_and_counters(write: Any) -> None:
    body = _HEAD + (
        '0,"void k<int>(int*) [clone .kd]",2,0,0,5,5,1024,256,512,0,12,16,0,"0x0","0x1",'
        "10,20,50,55,30,16\n"
        '1,"g.kd",3,1,0,5,5,256,256,0,0,4,8,0,"0x0","0x1",60,70,75,80,5,4\n'
    )
    t = ta.read(write("results.csv", body))
    assert t.kernels.select(
        "name", "short_name", "device_id", "grid_x", "total_smem_bytes"
    ).rows() == [
        ("void k<int>(int*)", "k", 2, 4, 512),
        ("g", "g", 3, 1, 0),
    ]
    assert t.kernels["registers_per_thread"].to_list() == [12, 4]
    m = t.kernel_metrics.sort("kernel_id")
    assert m.select("kernel_id", "metric_name", "value").rows() == [
        (0, "SQ_WAVES", 16.0),
        (1, "SQ_WAVES", 4.0),
    ]


def test_without_timestamps_is_a_named_error(write: Any) -> None:
    p = write("results.csv", '"Index","KernelName","gpu-id","BeginNs"\n0,"k",1,5\n')
    with pytest.raises(MissingColumn, match="EndNs"):
        ta.read(p)


def test_counters_without_timestamps(write: Any) -> None:
    body = '"Index","KernelName","gpu-id","pid","SQ_WAVES","GRBM_GUI_ACTIVE"\n0,"k.kd",4,9,8,1200\n'
    t = ta.read(write("results.csv", body))
    assert t.kernels.height == 0
    assert t.kernel_metrics.sort("metric_name").select("name", "metric_name", "value").rows() == [
        ("k", "GRBM_GUI_ACTIVE", 1200.0),
        ("k", "SQ_WAVES", 8.0),
    ]
