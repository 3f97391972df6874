"""rpd (rocmProfileData SQLite) reader: the matmul sample against SQL of our own."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from _trace_raw import sql

import traceanalyze as ta
from traceanalyze.readers import detect_format

from .conftest import shared_set

SAMPLE = "rocm/rpd/rocmprofiledata_matmul_result.rpd"


@pytest.fixture(scope="module")
def path() -> Path:
    return shared_set(SAMPLE)


@pytest.fixture(scope="module")
def tables(path: Path) -> ta.Tables:
    with pytest.warns(UserWarning, match="monitor's device 0 .* taken as the ops' gpuId 2"):
        return ta.read(path)


_OPS = (
    "SELECT o.id, o.gpuId, o.queueId, o.start, o.end, d.string FROM rocpd_op o "
    "JOIN rocpd_string d ON d.id = o.description_id JOIN rocpd_string t ON t.id = o.opType_id "
)


def test_kernels_are_the_kernel_ops(path: Path, tables: ta.Tables) -> None:
    want = sql(path, _OPS + "WHERE t.string = 'KernelExecution' ORDER BY o.id")
    k = tables.kernels
    assert detect_format(path) == "rpd"
    assert k.height == len(want) == 29
    assert k["duration_ns"].sum() == sum(e - s for _, _, _, s, e, _ in want)
    assert k.select("kernel_id", "device_id", "stream_id", "start_ns", "end_ns", "name").rows() == [
        (i, g, q, s, e, n) for i, g, q, s, e, n in want
    ]


def test_copies_with_their_bytes(path: Path, tables: ta.Tables) -> None:
    want = sql(
        path,
        "SELECT t.string, c.size FROM rocpd_op o JOIN rocpd_string t ON t.id = o.opType_id "
        "LEFT JOIN rocpd_api_ops ao ON ao.op_id = o.id "
        "LEFT JOIN rocpd_copyapi c ON c.api_ptr_id = ao.api_id "
        "WHERE t.string LIKE 'Copy%' OR t.string = 'FillBuffer' ORDER BY o.id",
    )
    kinds = {"CopyHostToDevice": "HtoD", "CopyDeviceToHost": "DtoH", "FillBuffer": "memset"}
    assert tables.memcpy.select("kind", "size_bytes").rows() == [(kinds[t], n) for t, n in want]


def test_calls_link_to_their_kernels(path: Path, tables: ta.Tables) -> None:
    hip = sql(
        path,
        "SELECT count(*) FROM rocpd_api a JOIN rocpd_string n ON n.id = a.apiName_id "
        "WHERE n.string LIKE 'hip%' OR n.string LIKE 'hsa%'",
    )[0][0]
    assert tables.api_calls.height == hip
    links = dict(
        sql(
            path,
            "SELECT ao.op_id, n.string FROM rocpd_api_ops ao JOIN rocpd_api a ON a.id = ao.api_id "
            "JOIN rocpd_string n ON n.id = a.apiName_id JOIN rocpd_op o ON o.id = ao.op_id "
            "JOIN rocpd_string t ON t.id = o.opType_id WHERE t.string = 'KernelExecution'",
        )
    )
    with pytest.warns(UserWarning):
        res = ta.open(path).launches()
    got = dict(res.table.select("kernel_id", "call_name").rows())
    assert got == links and set(links.values()) == {"hipLaunchKernel", "hipExtModuleLaunchKernel"}


def test_monitor_samples_are_sm_clock(path: Path, tables: ta.Tables) -> None:
    rows = sql(path, "SELECT start, CAST(value AS REAL) FROM rocpd_monitor ORDER BY start")
    s = tables.gpu_samples
    assert s.height == len(rows) == 15
    assert s["timestamp_ns"].to_list() == [r[0] for r in rows]
    assert s["sm_clock_mhz"].mean() == pytest.approx(sum(r[1] for r in rows) / len(rows))
    assert set(s["device_id"]) == {2}  # the ops' device, the one GPU of the file
    with pytest.warns(UserWarning):
        per_kernel = ta.open(path).attribute(per="kernel")
    assert per_kernel.height > 0 and per_kernel["sm_clock_mhz"].drop_nulls().len() > 0


def test_not_an_rpd_file(write: Any) -> None:
    p = write("x.rpd", b"")
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE rocpd_op (id INTEGER)")
    con.commit()
    con.close()
    assert not ta.readers.READERS["rpd"].sniff(p)


def _tiny_rpd(p: Path) -> Path:
    con = sqlite3.connect(p)
    con.executescript(
        """
        CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY, string TEXT);
        CREATE TABLE rocpd_op (id INTEGER PRIMARY KEY, gpuId INT, queueId INT, sequenceId INT,
          completionSignal TEXT, start INT, "end" INT, description_id INT, opType_id INT);
        CREATE TABLE rocpd_api (id INTEGER PRIMARY KEY, pid INT, tid INT, start INT, "end" INT,
          apiName_id INT, args_id INT);
        CREATE TABLE rocpd_api_ops (id INTEGER PRIMARY KEY, api_id INT, op_id INT);
        CREATE TABLE rocpd_kernelapi (api_ptr_id INTEGER PRIMARY KEY, stream TEXT, gridX INT,
          gridY INT, gridZ INT, workgroupX INT, workgroupY INT, workgroupZ INT,
          groupSegmentSize INT, privateSegmentSize INT, kernelName_id INT);
        INSERT INTO rocpd_string VALUES (1, ''), (2, 'KernelExecution'), (3, 'CopyDeviceToDevice'),
          (4, 'hipExtModuleLaunchKernel'), (5, 'Cijk_Alik_Bljk_HB'), (6, 'hipMemcpyAsync'),
          (7, 'UserMarker'), (8, 'step 3'), (9, 'OpTable::writeRows');
        INSERT INTO rocpd_op VALUES (1, 0, 1, 0, '', 100, 400, 1, 2),
          (2, 0, 1, 0, '', 500, 600, 1, 3);
        INSERT INTO rocpd_api VALUES (10, 7, 8, 50, 90, 4, 1), (11, 7, 8, 450, 470, 6, 1),
          (12, 7, 8, 40, 700, 7, 8), (13, 7, 9, 1, 2, 9, 1);
        INSERT INTO rocpd_api_ops VALUES (1, 10, 1), (2, 11, 2);
        INSERT INTO rocpd_kernelapi VALUES (10, '0x0', 1024, 2, 1, 256, 1, 1, 0, 0, 5);
        """
    )
    con.commit()
    con.close()
    return p


def test_names_from_the_launch_and_global_sizes(tmp_path: Path) -> None:
    t = ta.read(_tiny_rpd(tmp_path / "t.rpd"))
    k = t.kernels
    # the op's description is empty: the name comes from its launch's kernelName
    assert k.select("name", "correlation_id", "grid_x", "grid_y", "block_x").rows() == [
        ("Cijk_Alik_Bljk_HB", 10, 4, 2, 256)  # hipExtModuleLaunchKernel: work-items / 256
    ]
    assert t.memcpy.select("kind", "correlation_id", "size_bytes").rows() == [("DtoD", 11, None)]
    assert t.api_calls["name"].to_list() == ["hipExtModuleLaunchKernel", "hipMemcpyAsync"]
    assert t.markers.select("name", "start_ns", "end_ns").rows() == [("step 3", 40, 700)]
    assert t.gpu_samples.height == 0


def test_streamed_in_small_batches_equals_read(
    path: Path, tables: ta.Tables, monkeypatch: pytest.MonkeyPatch
) -> None:
    import traceanalyze.readers.rocm.rpd as rpd

    monkeypatch.setattr(rpd, "_BATCH", 7)
    parts: dict[str, list[Any]] = {}
    with pytest.warns(UserWarning):
        for name, df in ta.readers.stream(path):
            parts.setdefault(name, []).append(df)
    assert len(parts["kernels"]) > 1  # 85 ops, 7 at a time (empty chunks are not yielded)
    for name in ("kernels", "memcpy", "api_calls", "gpu_samples"):
        assert pl.concat(parts[name]).equals(tables[name]), name
