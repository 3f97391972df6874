"""rpd (rocmProfileData SQLite) reader: the matmul sample against SQL of our own."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import traceanalyze as ta
from traceanalyze.readers import detect_format

from .conftest import shared_set

SAMPLE = "rocm/rpd/rocmprofiledata_matmul_result.rpd"


def _sql(path: Path, q: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


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
    want = _sql(path, _OPS + "WHERE t.string = 'KernelExecution' ORDER BY o.id")
    k = tables.kernels
    assert detect_format(path) == "rpd"
    assert k.height == len(want) == 29
    assert k["duration_ns"].sum() == sum(e - s for _, _, _, s, e, _ in want)
    assert k.select("kernel_id", "device_id", "stream_id", "start_ns", "end_ns", "name").rows() == [
        (i, g, q, s, e, n) for i, g, q, s, e, n in want
    ]


def test_copies_with_their_bytes(path: Path, tables: ta.Tables) -> None:
    want = _sql(
        path,
        "SELECT t.string, c.size FROM rocpd_op o JOIN rocpd_string t ON t.id = o.opType_id "
        "LEFT JOIN rocpd_api_ops ao ON ao.op_id = o.id "
        "LEFT JOIN rocpd_copyapi c ON c.api_ptr_id = ao.api_id "
        "WHERE t.string LIKE 'Copy%' OR t.string = 'FillBuffer' ORDER BY o.id",
    )
    kinds = {"CopyHostToDevice": "HtoD", "CopyDeviceToHost": "DtoH", "FillBuffer": "memset"}
    assert tables.memcpy.select("kind", "size_bytes").rows() == [(kinds[t], n) for t, n in want]


def test_calls_link_to_their_kernels(path: Path, tables: ta.Tables) -> None:
    hip = _sql(
        path,
        "SELECT count(*) FROM rocpd_api a JOIN rocpd_string n ON n.id = a.apiName_id "
        "WHERE n.string LIKE 'hip%' OR n.string LIKE 'hsa%'",
    )[0][0]
    assert tables.api_calls.height == hip
    links = dict(
        _sql(
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
    rows = _sql(path, "SELECT start, CAST(value AS REAL) FROM rocpd_monitor ORDER BY start")
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
