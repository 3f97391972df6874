"""nvprof SQLite export reader: the real CUDA 10.1 capture, and small databases built inline.

Expected values come from sqlite3 SQL on the same file (or from the values the test packs into
its own databases), never from the reader's output.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import stat
import struct
import warnings
from pathlib import Path

import cxxfilt
import polars as pl
import pytest

import traceanalyze as ta
from traceanalyze.errors import MalformedInput, MissingColumn, TraceanalyzeError
from traceanalyze.readers import READERS, detect_format
from traceanalyze.readers.nvprof.nvprof_sqlite import read_nvprof_sqlite, sniff

from .conftest import shared

REAL = "nvprof_sqlite/profilinglm_pytorch_lm_v100_pyprof_net.sql"
K = "CUPTI_ACTIVITY_KIND_"


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _one(path: Path, query: str):
    return _sql(path, query)[0][0]


@pytest.fixture(scope="module")
def real() -> tuple[Path, ta.Tables]:
    p = shared(REAL)
    return p, ta.read(p)


# --- the real capture -------------------------------------------------------------------------


def test_real_file_reads_without_data_quality_warnings() -> None:
    p = shared(REAL)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        read_nvprof_sqlite(p)
    assert [str(w.message) for w in rec if str(p) in str(w.message)] == []


def test_detected_and_registered(real) -> None:
    p, t = real
    assert "nvprof_sqlite" in READERS
    assert detect_format(p) == "nvprof_sqlite"
    src = t.sources.row(0, named=True)
    assert src["format"] == "nvprof_sqlite" and src["tool"] == "nvprof"
    assert src["time_origin_epoch_ns"] == 0
    version = _one(p, "SELECT version FROM Version")
    assert src["tool_version"] == f"nvprof db version {version}"


def test_kernels_counts_sums_and_fields(real) -> None:
    p, t = real
    n = _one(p, f"SELECT count(*) FROM {K}CONCURRENT_KERNEL") + _one(
        p, f"SELECT count(*) FROM {K}KERNEL"
    )
    dur = _one(
        p,
        f'SELECT sum(d) FROM (SELECT "end" - start AS d FROM {K}CONCURRENT_KERNEL '
        f'UNION ALL SELECT "end" - start FROM {K}KERNEL)',
    )
    k = t.kernels
    assert k.height == n == 160
    assert k["duration_ns"].sum() == dur
    assert k["kernel_id"].to_list() == list(range(n))
    assert k["start_ns"].is_sorted()
    # epoch ns stored as is
    assert k["start_ns"].min() == _one(p, f"SELECT min(start) FROM {K}CONCURRENT_KERNEL")
    grid = _one(p, f"SELECT sum(gridX * gridY * gridZ * blockX) FROM {K}CONCURRENT_KERNEL")
    assert (k["grid_x"] * k["grid_y"] * k["grid_z"] * k["block_x"]).sum() == grid
    regs = _one(p, f"SELECT sum(registersPerThread) FROM {K}CONCURRENT_KERNEL")
    assert k["registers_per_thread"].sum() == regs
    assert sorted(k["correlation_id"].to_list()) == sorted(
        r[0] for r in _sql(p, f"SELECT correlationId FROM {K}CONCURRENT_KERNEL")
    )
    # one process in the API tables → its pid on the GPU rows
    (pid,) = {r[0] for r in _sql(p, f"SELECT DISTINCT processId FROM {K}RUNTIME")}
    assert k["process_id"].unique().to_list() == [pid]


def test_kernel_names_are_demangled(real) -> None:
    p, t = real
    raw = [
        r[0]
        for r in _sql(
            p,
            f"SELECT s.value FROM {K}CONCURRENT_KERNEL k JOIN StringTable s ON s._id_ = k.name",
        )
    ]
    expected_names = sorted(cxxfilt.demangle(r) if r.startswith("_Z") else r for r in raw)
    k = t.kernels
    assert sorted(k["name"].to_list()) == expected_names
    assert k.filter(pl.col("name").str.starts_with("_Z")).height == 0
    assert sorted(k["mangled_name"].drop_nulls().to_list()) == sorted(
        r for r in raw if r.startswith("_Z")
    )
    # plain C names stay as they are, without a mangled name
    plain = k.filter(pl.col("name") == "volta_sgemm_128x64_tn")
    assert plain.height == sum(r == "volta_sgemm_128x64_tn" for r in raw) > 0
    assert plain["mangled_name"].null_count() == plain.height
    assert plain["short_name"].unique().to_list() == ["volta_sgemm_128x64_tn"]
    short = dict(k.select("name", "short_name").unique().iter_rows())
    name = (
        "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>"
        "(long, float, float const*, float*, float*)"
    )
    assert short[name] == "RowwiseMomentsCUDAKernel"
    assert all(s and "(" not in s and "<" not in s and "::" not in s for s in short.values())


def test_memcpy_and_memset(real) -> None:
    p, t = real
    m = t.memcpy
    n = sum(_one(p, f"SELECT count(*) FROM {K}{x}") for x in ("MEMCPY", "MEMCPY2", "MEMSET"))
    assert m.height == n == 29
    names = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}
    expected = {
        names[kind]: total
        for kind, total in _sql(p, f"SELECT copyKind, sum(bytes) FROM {K}MEMCPY GROUP BY 1")
    }
    expected["memset"] = _one(p, f"SELECT sum(bytes) FROM {K}MEMSET")
    got = dict(m.group_by("kind").agg(pl.col("size_bytes").sum()).iter_rows())
    assert got == expected
    # CUPTI memory kinds: the sample's copies are device (3) → pageable (1)
    src_dst = _sql(p, f"SELECT DISTINCT srcKind, dstKind FROM {K}MEMCPY")
    assert src_dst == [(3, 1)]
    copies = m.filter(pl.col("kind") != "memset")
    assert copies.select("src_kind", "dst_kind").unique().rows() == [("Device", "Pageable")]
    sets = m.filter(pl.col("kind") == "memset")
    assert _sql(p, f"SELECT DISTINCT memoryKind FROM {K}MEMSET") == [(3,)]
    assert sets["dst_kind"].unique().to_list() == ["Device"]
    assert sets["src_kind"].null_count() == sets.height
    dur = _one(
        p,
        f'SELECT sum(d) FROM (SELECT "end" - start AS d FROM {K}MEMCPY '
        f'UNION ALL SELECT "end" - start FROM {K}MEMSET)',
    )
    assert m["duration_ns"].sum() == dur


def test_api_calls(real) -> None:
    p, t = real
    a = t.api_calls
    assert a.height == _one(p, f"SELECT count(*) FROM {K}RUNTIME") + _one(
        p, f"SELECT count(*) FROM {K}DRIVER"
    )
    by_cbid = dict(_sql(p, f"SELECT cbid, count(*) FROM {K}RUNTIME GROUP BY cbid"))
    # CUPTI_RUNTIME_TRACE_CBID_* values from cupti_runtime_cbid.h
    known = {
        211: "cudaLaunchKernel",
        17: "cudaGetDevice",
        16: "cudaSetDevice",
        41: "cudaMemcpyAsync",
        51: "cudaMemsetAsync",
        131: "cudaStreamSynchronize",
    }
    counts = dict(a.group_by("name").len().iter_rows())
    for cbid, name in known.items():
        assert counts[name] == by_cbid[cbid], name
    assert a["name"].null_count() == 0
    assert a["api"].unique().to_list() == ["runtime"]
    assert sorted(a["callback_id"].unique().to_list()) == sorted(by_cbid)
    assert a["duration_ns"].sum() == _one(p, f'SELECT sum("end" - start) FROM {K}RUNTIME')
    # threadId is signed 32-bit in the file; the reader masks it to the unsigned value
    raw_tids = {r[0] for r in _sql(p, f"SELECT DISTINCT threadId FROM {K}RUNTIME")}
    assert any(x < 0 for x in raw_tids)
    assert set(a["thread_id"].unique().to_list()) == {x % 2**32 for x in raw_tids}


def test_markers_pairing(real) -> None:
    p, t = real
    mk = t.markers
    paired = _one(
        p,
        f"SELECT count(*) FROM {K}MARKER s JOIN {K}MARKER e ON e.id = s.id AND e.flags = 4 "
        "WHERE s.flags = 2",
    )
    non_end = _one(p, f"SELECT count(*) FROM {K}MARKER WHERE flags != 4")
    assert mk.height == non_end == 683
    assert mk["end_ns"].is_not_null().sum() == paired
    total = _one(
        p,
        f"SELECT sum(e.timestamp - s.timestamp) FROM {K}MARKER s "
        f"JOIN {K}MARKER e ON e.id = s.id AND e.flags = 4 WHERE s.flags = 2",
    )
    assert mk["duration_ns"].sum() == total
    names = sorted(
        r[0]
        for r in _sql(
            p,
            f"SELECT v.value FROM {K}MARKER m JOIN StringTable v ON v._id_ = m.name "
            "WHERE m.flags = 2",
        )
    )
    assert sorted(mk["name"].to_list()) == names
    assert mk["category"].unique().to_list() == ["nvtx"]
    assert mk["domain"].null_count() == mk.height  # domain 0: the default domain
    # objectId: little-endian uint32 pid, tid (objectKind 2 = thread)
    blobs = _sql(p, f"SELECT objectId FROM {K}MARKER WHERE flags = 2")
    ids = sorted(struct.unpack_from("<II", b) for (b,) in blobs)
    assert sorted(mk.select("process_id", "thread_id").rows()) == ids
    # the marker threads are the API threads (whose threadId is the masked signed value)
    api_tids = {r[0] % 2**32 for r in _sql(p, f"SELECT DISTINCT threadId FROM {K}RUNTIME")}
    assert set(mk["thread_id"].unique().to_list()) >= api_tids


def test_devices(real) -> None:
    p, t = real
    d = t.devices.row(0, named=True)
    assert t.devices.height == 1
    row = _sql(
        p,
        f"SELECT d.id, s.value, d.numMultiprocessors, d.globalMemorySize, "
        f"d.computeCapabilityMajor, d.computeCapabilityMinor, d.uuid "
        f"FROM {K}DEVICE d JOIN StringTable s ON s._id_ = d.name",
    )[0]
    assert d["device_id"] == row[0]
    assert d["name"] == row[1] == "Tesla V100-SXM2-16GB"
    assert d["sm_count"] == row[2]
    assert d["memory_bytes"] == row[3]
    assert d["compute_capability"] == f"{row[4]}.{row[5]}" == "7.0"
    assert re.fullmatch(
        r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", d["uuid"]
    )
    assert d["uuid"].replace("GPU-", "").replace("-", "") == row[6].hex()


def test_command_line_never_copied(real) -> None:
    p, t = real
    cmdline = _one(p, "SELECT value FROM StringTable WHERE _id_ = 1")
    for name, df in t.items():
        if name == "sources":
            continue
        for c, dt in df.schema.items():
            if dt == pl.String:
                assert cmdline not in df[c].drop_nulls().to_list(), f"{name}.{c}"


def test_read_only(real, tmp_path: Path) -> None:
    p, _ = real
    before = (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    listing = sorted(os.listdir(p.parent))
    read_nvprof_sqlite(p)
    assert (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) == before
    assert sorted(os.listdir(p.parent)) == listing  # no -journal / -wal / -shm left behind

    # a database in a read-only directory reads (and nothing is created next to it)
    d = tmp_path / "ro"
    d.mkdir()
    db = _make_db(d / "x.nvvp", kernels=[(100, 200, "_Z3fooPf")])
    mtime = db.stat().st_mtime_ns
    db.chmod(stat.S_IRUSR)
    d.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        t = read_nvprof_sqlite(db)
        assert os.listdir(d) == ["x.nvvp"]
        assert db.stat().st_mtime_ns == mtime
    finally:
        d.chmod(stat.S_IRWXU)
        db.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert t.kernels["name"].to_list() == ["foo(float*)"]


# --- inline databases -------------------------------------------------------------------------

_COLS = {
    "StringTable": "_id_ INTEGER PRIMARY KEY AUTOINCREMENT, value TEXT NOT NULL UNIQUE",
    "Version": "version INTEGER",
    "KERNEL": "_id_ INTEGER PRIMARY KEY AUTOINCREMENT, cacheConfig BLOB, registersPerThread INT, "
    "start INT, end INT, deviceId INT, contextId INT, streamId INT, gridX INT, gridY INT, "
    "gridZ INT, blockX INT, blockY INT, blockZ INT, staticSharedMemory INT, "
    "dynamicSharedMemory INT, correlationId INT, name INT",
    "RUNTIME": "_id_ INTEGER PRIMARY KEY AUTOINCREMENT, cbid INT, start INT, end INT, "
    "processId INT, threadId INT, correlationId INT, returnValue INT",
    "MEMCPY": "_id_ INTEGER PRIMARY KEY AUTOINCREMENT, copyKind INT, srcKind INT, dstKind INT, "
    "flags INT, bytes INT, start INT, end INT, deviceId INT, contextId INT, streamId INT, "
    "correlationId INT, runtimeCorrelationId INT",
    "MEMCPY2": "_id_ INTEGER PRIMARY KEY AUTOINCREMENT, copyKind INT, srcKind INT, dstKind INT, "
    "flags INT, bytes INT, start INT, end INT, deviceId INT, contextId INT, streamId INT, "
    "srcDeviceId INT, srcContextId INT, dstDeviceId INT, dstContextId INT, correlationId INT",
    "MEMSET": "_id_ INTEGER PRIMARY KEY AUTOINCREMENT, value INT, bytes INT, start INT, end INT, "
    "deviceId INT, contextId INT, streamId INT, correlationId INT, flags INT, memoryKind INT",
    "MARKER": "_id_ INTEGER PRIMARY KEY AUTOINCREMENT, flags INT, timestamp INT, id INT, "
    "objectKind INT, objectId BLOB, name INT, domain INT",
    "DEVICE": "_id_ INTEGER PRIMARY KEY AUTOINCREMENT, globalMemorySize INT, "
    "numMultiprocessors INT, computeCapabilityMajor INT, computeCapabilityMinor INT, id INT, "
    "uuid BLOB, name INT",
    "ENVIRONMENT": "_id_ INTEGER PRIMARY KEY AUTOINCREMENT, deviceId INT, timestamp INT, "
    "environmentKind INT, data BLOB",
}


def _make_db(
    path: Path,
    *,
    kernels: list[tuple[int, int, str]] | None = None,
    kernel_table: str = "KERNEL",
    strings: list[str] = (),
    **rows: list[tuple],
) -> Path:
    """An nvprof-shaped database: `kernels` as (start, end, name) in `kernel_table`, other
    tables' rows as tuples in their column order (without `_id_`)."""
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE StringTable ({_COLS['StringTable']})")
    con.execute(f"CREATE TABLE Version ({_COLS['Version']})")
    con.execute("INSERT INTO Version VALUES (12)")
    ids: dict[str, int] = {}
    # ids from 0 as nvprof's: 0 '-- null --', 1 the command line, then `strings` from 2
    for text in ["-- null --", "/usr/bin/python train.py --token=abc", *strings]:
        ids[text] = len(ids)
        con.execute("INSERT INTO StringTable VALUES (?, ?)", (ids[text], text))
    con.execute(f"CREATE TABLE {K}{kernel_table} ({_COLS['KERNEL']})")
    for i, (start, end, name) in enumerate(kernels or []):
        if name not in ids:
            ids[name] = len(ids)
            con.execute("INSERT INTO StringTable VALUES (?, ?)", (ids[name], name))
        con.execute(
            f"INSERT INTO {K}{kernel_table} (start, end, deviceId, correlationId, name, gridX) "
            "VALUES (?, ?, 0, ?, ?, 1)",
            (start, end, i + 1, ids[name]),
        )
    for table, values in rows.items():
        cols = [c.split()[0] for c in _COLS[table].split(", ")][1:]
        con.execute(f"CREATE TABLE {K}{table} ({_COLS[table]})")
        con.executemany(
            f"INSERT INTO {K}{table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            values,
        )
    con.commit()
    con.close()
    return path


def test_only_kernel_table(tmp_path: Path) -> None:
    db = _make_db(
        tmp_path / "a.prof",
        kernels=[(300, 450, "_ZN2ns6kernelIfEEvPT_i"), (100, 160, "volta_sgemm_128x64_tn")],
    )
    assert sniff(db) and detect_format(db) == "nvprof_sqlite"
    k = ta.read(db).kernels
    assert k["name"].to_list() == [
        "volta_sgemm_128x64_tn",
        cxxfilt.demangle("_ZN2ns6kernelIfEEvPT_i"),
    ]
    assert k["name"][1] == "void ns::kernel<float>(float*, int)"
    assert k["short_name"].to_list() == ["volta_sgemm_128x64_tn", "kernel"]
    assert k["mangled_name"].to_list() == [None, "_ZN2ns6kernelIfEEvPT_i"]
    assert k["duration_ns"].to_list() == [60, 150]
    assert k["kernel_id"].to_list() == [0, 1]
    assert k["process_id"].null_count() == 2  # no API table: the pid is unknown


def test_concurrent_and_kernel_tables_are_united(tmp_path: Path) -> None:
    db = _make_db(tmp_path / "b.nvvp", kernels=[(10, 20, "k1")], kernel_table="CONCURRENT_KERNEL")
    con = sqlite3.connect(db)
    con.execute(f"CREATE TABLE {K}KERNEL ({_COLS['KERNEL']})")
    con.execute(f"INSERT INTO {K}KERNEL (start, end, name) VALUES (5, 8, 0)")
    con.commit()
    con.close()
    k = read_nvprof_sqlite(db).kernels
    assert k["start_ns"].to_list() == [5, 10]
    assert k["name"].to_list() == [None, "k1"]  # StringTable id 0 is '-- null --'


def test_api_calls_negative_thread_and_unknown_cbid(tmp_path: Path) -> None:
    tids = [-354666688, -1, 452974336]
    rows = [
        (211, 10, 20, 4242, tids[0], 1, 0),
        (17, 30, 35, 4242, tids[1], 2, 0),
        (99999, 40, 41, 4242, tids[2], 3, 0),
        (99999, 50, 52, 4242, tids[2], 4, 0),
    ]
    db = _make_db(tmp_path / "c.sql", kernels=[(1, 2, "k")], RUNTIME=rows)
    con = sqlite3.connect(db)
    con.execute(f"CREATE TABLE {K}DRIVER ({_COLS['RUNTIME']})")
    con.execute(
        f"INSERT INTO {K}DRIVER (cbid, start, end, processId, threadId) "
        "VALUES (307, 60, 70, 4242, -2)"
    )
    con.commit()
    con.close()
    with pytest.warns(UserWarning, match=r"2 runtime API call\(s\) with callback ids.*99999"):
        t = read_nvprof_sqlite(db)
    a = t.api_calls
    assert a["thread_id"].to_list() == [tids[0] + 2**32, 2**32 - 1, tids[2], tids[2], 2**32 - 2]
    # CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 = 211, cudaGetDevice_v3020 = 17,
    # CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel = 307
    assert a["name"].to_list() == [
        "cudaLaunchKernel",
        "cudaGetDevice",
        None,
        None,
        "cuLaunchKernel",
    ]
    assert a["api"].to_list() == ["runtime"] * 4 + ["driver"]
    assert a["callback_id"].to_list() == [211, 17, 99999, 99999, 307]
    assert a["duration_ns"].to_list() == [10, 5, 1, 2, 10]
    assert t.kernels["process_id"].to_list() == [4242]


def test_cbid_tables_are_faithful() -> None:
    from importlib import resources

    for api, prefix in (
        ("runtime", "CUPTI_RUNTIME_TRACE_CBID_"),
        ("driver", "CUPTI_DRIVER_TRACE_CBID_"),
    ):
        ref = resources.files("traceanalyze") / "data" / f"cupti_cbid_{api}.csv"
        lines = ref.read_text().splitlines()
        assert lines[0].startswith("#") and "CUDA 13.0" in lines[0]
        body = [ln.split(",") for ln in lines if not ln.startswith("#")][1:]
        ids = [int(r[0]) for r in body]
        assert ids == list(range(1, len(ids) + 1))  # the enum is dense from 1
        for cbid, name, enum in body:
            assert enum.startswith(prefix)
            full = enum[len(prefix) :]
            if api == "runtime":
                assert re.fullmatch(re.escape(name) + r"_v\d{4,5}", full), cbid
            else:
                assert name == full


def test_memcpy_kinds(tmp_path: Path) -> None:
    db = _make_db(
        tmp_path / "d.nvvp",
        kernels=[(1, 2, "k")],
        MEMCPY=[
            (1, 1, 3, 0, 1000, 10, 20, 0, 1, 7, 5, 0),  # HtoD pageable → device
            (2, 3, 2, 0, 64, 30, 31, 0, 1, 7, 6, 0),  # DtoH device → pinned
            (8, 3, 5, 0, 8, 40, 42, 0, 1, 7, 7, 0),  # DtoD device → managed
            (1, 0, 3, 0, 16, 50, 51, 0, 1, 7, 8, 0),  # CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN
            (1, 42, 3, 0, 32, 52, 53, 0, 1, 7, 9, 0),  # not a CUPTI memory kind
        ],
        MEMCPY2=[(10, 3, 3, 0, 4096, 60, 70, 1, 2, 9, 0, 1, 1, 2, 9)],
        MEMSET=[(0, 128, 80, 81, 0, 1, 7, 10, 0, 3)],
    )
    with pytest.warns(UserWarning, match="1 memcpy/memset row.*unknown CUPTI memory kind"):
        m = read_nvprof_sqlite(db).memcpy
    assert m.select("kind", "src_kind", "dst_kind", "size_bytes").rows() == [
        ("HtoD", "Pageable", "Device", 1000),
        ("DtoH", "Device", "Pinned", 64),
        ("DtoD", "Device", "Managed", 8),
        ("HtoD", None, "Device", 16),
        ("HtoD", None, "Device", 32),
        ("PtoP", "Device", "Device", 4096),
        ("memset", None, "Device", 128),
    ]
    assert m["device_id"].to_list() == [0, 0, 0, 0, 0, 1, 0]
    assert m["correlation_id"].to_list() == [5, 6, 7, 8, 9, 9, 10]
    assert m["duration_ns"].to_list() == [10, 1, 2, 1, 1, 10, 1]


def test_markers_inline(tmp_path: Path) -> None:
    thread = struct.pack("<III", 4242, 3940300608, 0)
    process = struct.pack("<III", 4242, 0, 0)
    db = _make_db(
        tmp_path / "e.nvvp",
        kernels=[(1, 2, "k")],
        strings=["range-a", "mark-b", "open-c", "my-domain"],
        MARKER=[
            (2, 100, 7, 2, thread, 2, 5),  # start of range-a in my-domain
            (1, 150, 8, 1, process, 3, 0),  # an instantaneous mark (process object)
            (2, 160, 9, 2, thread, 4, 0),  # a range that never ends
            (4, 400, 7, 2, thread, 0, 0),  # end of range-a
        ],
    )
    with pytest.warns(UserWarning, match="1 NVTX range"):
        mk = read_nvprof_sqlite(db).markers
    assert mk.select("name", "domain", "start_ns", "end_ns", "duration_ns").rows() == [
        ("range-a", "my-domain", 100, 400, 300),
        ("mark-b", None, 150, None, None),
        ("open-c", None, 160, None, None),
    ]
    assert mk["process_id"].to_list() == [4242, 4242, 4242]
    assert mk["thread_id"].to_list() == [3940300608, None, 3940300608]


def _env(kind: int, *values: int) -> bytes:
    # CUpti_ActivityEnvironment.data: a union of uint32 structs, 20 bytes (speed is the largest)
    return struct.pack("<5I", *values, *([0] * (5 - len(values))))


def test_environment_samples(tmp_path: Path) -> None:
    uuid = bytes(range(16))
    unsupported = 0x40000000
    db = _make_db(
        tmp_path / "f.nvvp",
        kernels=[(1, 2, "k")],
        strings=["Tesla V100-SXM2-16GB"],
        DEVICE=[(16914055168, 80, 7, 0, 0, uuid, 2)],
        ENVIRONMENT=[
            (0, 1000, 1, _env(1, 1530, 877, 3, 16, 0x4)),  # speed, SW power cap
            (0, 1000, 2, _env(2, 41)),  # temperature °C
            (0, 1000, 3, _env(3, 251_500, 300_000)),  # power mW, limit mW
            (0, 1000, 4, _env(4, 35)),  # fan %
            (0, 2000, 1, _env(1, 1380, 877, 3, 16, unsupported)),
            (0, 2000, 9, _env(9, 1)),  # unknown kind
            (0, 3000, 2, b"\x29\x00"),  # temperature with a 2-byte BLOB
        ],
    )
    with pytest.warns(UserWarning) as rec:
        t = read_nvprof_sqlite(db)
    messages = sorted(str(w.message).split(": ", 1)[1] for w in rec)
    assert messages == [
        "1 environment sample(s) of an unknown kind; dropped",
        "1 environment sample(s) with a short data BLOB; values left null",
    ]
    g = t.gpu_samples
    cols = [
        "device_id",
        "timestamp_ns",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "clock_event_reasons",
        "temperature_c",
        "power_w",
        "power_limit_w",
        "fan_pct",
    ]
    assert g.select(cols).rows() == [
        (0, 1000, 1530.0, 877.0, 4, 41.0, 251.5, 300.0, 35.0),
        (0, 2000, 1380.0, 877.0, None, None, None, None, None),
        (0, 3000, None, None, None, None, None, None, None),
    ]
    expected_uuid = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert g["device_uuid"].unique().to_list() == [expected_uuid]
    d = t.devices.row(0, named=True)
    assert d["uuid"] == expected_uuid and d["name"] == "Tesla V100-SXM2-16GB"
    assert d["sm_count"] == 80 and d["memory_bytes"] == 16914055168


# --- detection and bad input ------------------------------------------------------------------


def test_nsys_sqlite_is_not_claimed(tmp_path: Path) -> None:
    db = tmp_path / "nsys.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute(f"CREATE TABLE {K}KERNEL (start INT, end INT, shortName INT)")
    con.execute("CREATE TABLE StringTable (_id_ INTEGER PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    assert not sniff(db)


def test_sqlite_without_cupti_tables(tmp_path: Path) -> None:
    db = tmp_path / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringTable (_id_ INTEGER PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    assert not sniff(db)
    with pytest.raises(MissingColumn) as e:
        ta.read(db, format="nvprof_sqlite")
    assert str(db) in str(e.value) and f"{K}CONCURRENT_KERNEL" in str(e.value)
    assert e.value.table == f"{K}CONCURRENT_KERNEL"


def test_kernel_table_missing_a_required_column(tmp_path: Path) -> None:
    db = tmp_path / "bad.nvvp"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringTable (_id_ INTEGER PRIMARY KEY, value TEXT)")
    con.execute(f"CREATE TABLE {K}KERNEL (start INT, name INT)")
    con.commit()
    con.close()
    with pytest.raises(MissingColumn) as e:
        read_nvprof_sqlite(db)
    assert e.value.table == f"{K}KERNEL" and e.value.column == "end"
    assert str(db) in str(e.value)


def test_truncated_database(tmp_path: Path) -> None:
    data = shared(REAL).read_bytes()
    p = tmp_path / "cut.sql"
    p.write_bytes(data[:700_000])
    with pytest.raises(MalformedInput) as e:
        ta.read(p, format="nvprof_sqlite")
    assert str(p) in str(e.value)


def test_garbage_and_empty(tmp_path: Path) -> None:
    g = tmp_path / "garbage.nvvp"
    g.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)
    assert not sniff(g)
    with pytest.raises(TraceanalyzeError) as e:
        read_nvprof_sqlite(g)
    assert str(g) in str(e.value)
    empty = tmp_path / "empty.nvvp"
    empty.write_bytes(b"")
    with pytest.raises(MalformedInput) as e2:
        read_nvprof_sqlite(empty)
    assert str(empty) in str(e2.value)


def test_text_in_an_integer_column(tmp_path: Path) -> None:
    db = _make_db(tmp_path / "g.nvvp", kernels=[(1, 2, "k")])
    con = sqlite3.connect(db)
    con.execute(f"UPDATE {K}KERNEL SET start = 'yesterday'")
    con.commit()
    con.close()
    with pytest.raises(MalformedInput) as e:
        read_nvprof_sqlite(db)
    assert str(db) in str(e.value) and f"{K}KERNEL" in str(e.value)
    assert "\n" not in str(e.value)


# (demangled name, base name written out by hand)
SHORT_NAMES = [
    ("void foo::operator()<int>(int)", "operator()"),
    ("std::ostream& operator<<(std::ostream&, X const&)", "operator<<"),
    ("void operator<< <int>(int)", "operator<<"),
    ("bool operator< <int>(int, int)", "operator<"),
    ("bool X::operator<(X const&) const", "operator<"),
    ("X::operator>>=(int)", "operator>>="),
    ("X::operator->() const", "operator->"),
    ("X::operator<=>(X const&) const", "operator<=>"),
    ("operator new(unsigned long, void*)", "operator new"),
    ("void operator delete[](void*)", "operator delete[]"),
    ("X::operator bool() const", "operator bool"),
    ("void at::native::k<float>(float*)", "k"),
    ("void k<(int)3>(float*)", "k"),
    ("void ns::Foo<(anonymous namespace)::T>::run<2>(int)", "run"),
    ("ns::Foo<int>::~Foo()", "~Foo"),
    ("ns::Foo<int>::Foo(int)", "Foo"),
    ("unsigned int ns::f(int)", "f"),
    (
        "at::native::add_kernel_cuda(at::TensorIterator&)::{lambda()#1}::operator()() const",
        "operator()",
    ),
    (
        "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<int> >"
        "(cutlass::gemm::kernel::Gemm<int>::Params)",
        "Kernel",
    ),
    ("volta_sgemm_128x64_tn", "volta_sgemm_128x64_tn"),
]


@pytest.mark.parametrize(("name", "short"), SHORT_NAMES, ids=[s for _, s in SHORT_NAMES])
def test_short_name_of_operators_templates_and_scopes(name: str, short: str) -> None:
    from traceanalyze.readers.nvprof.nvprof_sqlite import _short_name

    assert _short_name(name) == short


@pytest.mark.parametrize(
    ("mangled", "short"),
    [
        ("_ZN3fooclIiEEvi", "operator()"),  # void foo::operator()<int>(int)
        ("_ZlsIiEvT_", "operator<<"),  # void operator<< <int>(int)
        ("_ZltIiEbT_S0_", "operator<"),  # bool operator< <int>(int, int)
        ("_ZnwmPv", "operator new"),  # operator new(unsigned long, void*)
        ("_ZN1XcvbEv", "operator bool"),  # X::operator bool()
        ("_ZN2at6native1kIfEEvPf", "k"),  # void at::native::k<float>(float*)
    ],
)
def test_short_name_through_the_demangler(tmp_path: Path, mangled: str, short: str) -> None:
    """Names as the reader sees them: mangled in StringTable, demangled by cxxfilt."""
    p = tmp_path / "ops.nvvp"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE StringTable (_id_ INTEGER PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO StringTable VALUES (0, '-- null --'), (1, ?)", (mangled,))
    con.execute(f"CREATE TABLE {K}CONCURRENT_KERNEL (start INT, end INT, name INT)")
    con.execute(f"INSERT INTO {K}CONCURRENT_KERNEL VALUES (10, 20, 1)")
    con.commit()
    con.close()
    k = read_nvprof_sqlite(p).kernels
    assert k["name"].to_list() == [cxxfilt.demangle(mangled)]
    assert k["short_name"].to_list() == [short]
