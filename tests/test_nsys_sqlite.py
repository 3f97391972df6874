"""nsys_sqlite reader: real exports of three nsys eras, inline edge cases, privacy.

Expected values come from SQL run here against the same file (sqlite3, read-only), never from the
reader's output.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput
from traceanalyze.readers import detect_format
from traceanalyze.readers.nsys.nsys_sqlite import read_nsys_sqlite, schema_era, sniff

from .conftest import shared

F2022 = "nsys_sqlite/pipit_saxpy_mpi_cuda_a100_nsys2022.2.sqlite"
F2026_1 = "nsys_sqlite/nsysai_mock_torch_tiny_nsys2026.1.sqlite"
F2026_2 = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
ALL = [F2022, F2026_1, F2026_2]

# The documented copyKind / memory-kind numbering (formats.md §3.2), written out independently.
COPY = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP", 9: "HtoH"}
MEM = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed"}


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    return {r[0] for r in _sql(path, "SELECT name FROM sqlite_master WHERE type='table'")}


def _read(path: Path) -> ta.Tables:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the real files need no data-quality notes
        return ta.read(path)


# --- real files -------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", ALL)
def test_detected_and_schema_valid(rel: str) -> None:
    p = shared(rel)
    assert sniff(p)
    assert detect_format(p) == "nsys_sqlite"
    t = _read(p)
    for name, df in t.items():
        assert schema.validate(name, df) == [], name


@pytest.mark.parametrize("rel", ALL)
def test_kernels_match_sql(rel: str) -> None:
    p = shared(rel)
    k = _read(p).kernels
    n, dur, grid = _sql(
        p,
        'SELECT count(*), sum("end" - start), sum(gridX * gridY * gridZ) '
        "FROM CUPTI_ACTIVITY_KIND_KERNEL",
    )[0]
    assert k.height == n
    assert k["duration_ns"].sum() == dur
    assert (k["grid_x"] * k["grid_y"] * k["grid_z"]).sum() == grid
    assert k["kernel_id"].to_list() == list(range(n))
    # Names resolved through StringIds, all three kinds.
    names = _sql(
        p,
        "SELECT d.value, s.value, m.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName "
        "JOIN StringIds m ON m.id = k.mangledName",
    )
    assert Counter(names) == Counter(k.select("name", "short_name", "mangled_name").rows())
    pids = _sql(
        p, "SELECT DISTINCT globalPid / 16777216 % 16777216 FROM CUPTI_ACTIVITY_KIND_KERNEL"
    )
    assert sorted(k["process_id"].unique().to_list()) == sorted(r[0] for r in pids)
    geo = _sql(
        p,
        "SELECT deviceId, streamId, correlationId, blockX, registersPerThread, "
        "staticSharedMemory, dynamicSharedMemory FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid",
    )
    got = k.select(
        "device_id",
        "stream_id",
        "correlation_id",
        "block_x",
        "registers_per_thread",
        "static_smem_bytes",
        "dynamic_smem_bytes",
    ).rows()
    assert got == geo


@pytest.mark.parametrize("rel", ALL)
def test_memcpy_by_kind_matches_sql(rel: str) -> None:
    p = shared(rel)
    m = _read(p).memcpy
    expected: dict[tuple, tuple[int, int]] = {}
    for ck, sk, dk, n, b in _sql(
        p,
        "SELECT copyKind, srcKind, dstKind, count(*), sum(bytes) "
        "FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1, 2, 3",
    ):
        expected[(COPY[ck], MEM[sk], MEM[dk])] = (n, b)
    if "CUPTI_ACTIVITY_KIND_MEMSET" in _tables(p):
        for mk, n, b in _sql(
            p, "SELECT memKind, count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMSET GROUP BY 1"
        ):
            expected[("memset", None, MEM[mk])] = (n, b)
    got = {
        (r["kind"], r["src_kind"], r["dst_kind"]): (r["n"], r["b"])
        for r in m.group_by("kind", "src_kind", "dst_kind")
        .agg(pl.len().alias("n"), pl.col("size_bytes").sum().alias("b"))
        .iter_rows(named=True)
    }
    assert got == expected
    assert expected  # every sample has copies


# eventClass → api, in SQL: 3.x through the export's own ENUM_NSYS_EVENT_CLASS; 2.x (no ENUM
# tables) by the numbering those tables give (0 CUDA runtime, 1 CUDA driver), written out here.
_API_OF_CLASS_SQL = {
    "3": "(SELECT CASE e.name WHEN 'TRACE_PROCESS_EVENT_CUDA_RUNTIME' THEN 'runtime' "
    "WHEN 'TRACE_PROCESS_EVENT_CUDA_DRIVER' THEN 'driver' END "
    "FROM ENUM_NSYS_EVENT_CLASS e WHERE e.id = r.eventClass)",
    "2": "CASE r.eventClass WHEN 0 THEN 'runtime' WHEN 1 THEN 'driver' END",
}


def _era(p: Path) -> str:
    return "3" if "ENUM_NSYS_EVENT_CLASS" in _tables(p) else "2"


def test_driver_calls_of_the_2026_2_export() -> None:
    """The audit's figures: eventClass 0 (CUDA runtime) 6,392 rows, 1 (CUDA driver) 1,074."""
    p = shared(F2026_2)
    assert _sql(p, "SELECT id, name FROM ENUM_NSYS_EVENT_CLASS WHERE id IN (0, 1)") == [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME"),
        (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER"),
    ]
    by_class = dict(
        _sql(p, "SELECT eventClass, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1")
    )
    a = _read(p).api_calls
    assert dict(a.group_by("api").len().iter_rows()) == {
        "runtime": by_class[0],
        "driver": by_class[1],
    }
    assert by_class == {0: 6392, 1: 1074}
    launches = a.filter(pl.col("name") == "cuLaunchKernelEx")
    assert launches.height > 0 and set(launches["api"]) == {"driver"}


def test_backtrace_rows_of_the_2022_2_export_are_not_calls() -> None:
    """nsys 2022.2 writes a CUDA backtrace row (class 67) per slow runtime call: same thread and
    correlation id, a span around the call's. They are dropped, not counted twice."""
    p = shared(F2022)
    n_bt, n_twin = _sql(
        p,
        "SELECT count(*), sum(EXISTS(SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME b "
        "WHERE b.eventClass = 0 AND b.globalTid = a.globalTid "
        "AND b.correlationId = a.correlationId AND b.start >= a.start AND b.end <= a.end)) "
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME a WHERE a.eventClass = 67",
    )[0]
    assert n_bt > 0 and n_twin == n_bt
    (n_calls,) = _sql(
        p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass IN (0, 1)"
    )[0]
    a = _read(p).api_calls
    assert a.height == n_calls
    dup = a.group_by("process_id", "thread_id", "correlation_id").len().filter(pl.col("len") > 1)
    assert dup.height == 0


@pytest.mark.parametrize("rel", ALL)
def test_api_calls_markers_devices_sources(rel: str) -> None:
    p = shared(rel)
    t = _read(p)
    # nsys puts CUDA driver calls in the RUNTIME table too; eventClass tells them apart.
    raw = _sql(
        p,
        f"SELECT {_API_OF_CLASS_SQL[_era(p)]}, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId",
    )
    calls = [(api, v) for api, v in raw if api is not None]  # backtrace rows are no calls
    assert t.api_calls.height == len(calls)
    assert Counter(t.api_calls["api"]) == Counter(api for api, _ in calls)
    assert t.api_calls["name"].null_count() == 0
    # Only the export's version suffix goes: cudaStreamGetCaptureInfo_v2_v11030 is the real API
    # cudaStreamGetCaptureInfo_v2, so compare with SQL that strips the last `_v` part.
    assert Counter(t.api_calls.select("api", "name").iter_rows()) == Counter(
        (api, v[: v.rindex("_v")] if "_v" in v and v[v.rindex("_v") + 2 :].isdigit() else v)
        for api, v in calls
    )
    versioned = _sql(
        p,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
        "ON s.id = r.nameId WHERE s.value LIKE 'cudaLaunchKernel%' AND r.eventClass = 0",
    )[0][0]
    assert (t.api_calls["name"] == "cudaLaunchKernel").sum() == versioned
    # Driver calls are the cu* functions, runtime calls the cuda* ones.
    drv = t.api_calls.filter(pl.col("api") == "driver")["name"]
    rt = t.api_calls.filter(pl.col("api") == "runtime")["name"]
    assert (
        drv.len() > 0 and drv.str.starts_with("cu").all() and not drv.str.starts_with("cuda").any()
    )
    assert rt.str.starts_with("cuda").all()

    if "NVTX_EVENTS" in _tables(p):
        n_nvtx, n_marks = _sql(
            p,
            "SELECT count(*), sum(eventType = 34) FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60)",
        )[0]
    else:
        n_nvtx, n_marks = 0, 0
    assert t.markers.height == n_nvtx
    assert t.markers["end_ns"].null_count() == n_marks
    assert t.markers["name"].null_count() == 0
    assert set(t.markers["category"].unique()) <= {"nvtx"}

    (origin,) = _sql(p, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0]
    assert t.sources["time_origin_epoch_ns"].to_list() == [origin]
    assert t.sources["tool"].to_list() == ["nsys"]

    used = {
        r[0]
        for r in _sql(
            p,
            "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL "
            "UNION SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_MEMCPY",
        )
    }
    assert t.devices["device_id"].n_unique() == t.devices.height  # one row per device
    assert set(t.devices["device_id"]) >= used
    if "TARGET_INFO_GPU" in _tables(p):
        gpus = _sql(
            p,
            "SELECT cuDevice, name, uuid, smCount, totalMemory, computeMajor, "
            "computeMinor FROM TARGET_INFO_GPU",
        )
        for cu, name, uuid, sms, mem, ma, mi in gpus:
            row = t.devices.filter(pl.col("device_id") == cu).row(0, named=True)
            assert (row["name"], row["uuid"], row["sm_count"], row["memory_bytes"]) == (
                name,
                f"GPU-{uuid}",
                sms,
                mem,
            )
            assert row["compute_capability"] == f"{ma}.{mi}"


def test_era_and_versions() -> None:
    cases = {
        F2022: ("2022.2.1.31", "2.9.1", "EXPORT_META_DATA"),
        F2026_1: ("2026.1.1.204", "3.24.14", "META_DATA_EXPORT"),
        F2026_2: ("2026.2.1.210", "3.25.0", "META_DATA_EXPORT"),
    }
    for rel, (version, schema_version, meta_table) in cases.items():
        p = shared(rel)
        assert meta_table in _tables(p)
        assert schema_era(p) == (version, schema_version)
        assert _read(p).sources["tool_version"].to_list() == [version]


def test_2022_non_utf8_and_non_lazy() -> None:
    p = shared(F2022)
    # The GpuInfo row holds bytes that are not UTF-8 (formats.md §3.2): the default decoder fails.
    con = sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError):
        con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV").fetchall()
    con.close()
    # Non-lazy: an empty MEMSET table exists; it gives no rows, not an error.
    assert _sql(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET") == [(0,)]
    t = _read(p)
    assert (t.memcpy["kind"] == "memset").sum() == 0
    # NVTX names: 5 rows carry text, 17 carry a textId (2022 stores both styles).
    assert Counter(t.markers["name"]) == Counter(
        r[0]
        for r in _sql(
            p,
            "SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s "
            "ON s.id = e.textId WHERE eventType IN (34, 59, 60)",
        )
    )
    # Domain 1 is created by a DomainCreate (75) row named MPI.
    n_dom1 = _sql(p, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND domainId = 1")
    assert (t.markers["domain"] == "MPI").sum() == n_dom1[0][0]


def test_runtime_join_finds_every_launch_2026_2() -> None:
    p = shared(F2026_2)
    t = _read(p)
    expected = _sql(
        p,
        "SELECT count(*), count(DISTINCT k.rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
        "AND r.globalTid / 16777216 % 16777216 = k.globalPid / 16777216 % 16777216",
    )[0]
    n_pairs, n_found = expected
    # This file is a 0.3 s window cut from a longer capture: 24 of its 4,010 kernels (all in the
    # window's first 10 ms) were launched before the window began, so their calls are not here.
    assert (n_pairs, n_found) == (3986, 3986)
    joined = t.kernels.join(
        t.api_calls.select("process_id", "correlation_id", pl.col("name").alias("api")),
        on=["process_id", "correlation_id"],
        how="inner",
    )
    assert joined.height == n_pairs
    assert joined["kernel_id"].n_unique() == n_found
    # Joining on correlation id alone would pair launches across the two ranks' processes.
    assert t.kernels["process_id"].n_unique() == 2
    launch_names = Counter(
        r[0]
        for r in _sql(
            p,
            "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId AND r.globalTid / 16777216 % 16777216 = "
            "k.globalPid / 16777216 % 16777216 JOIN StringIds s ON s.id = r.nameId",
        )
    )
    stripped = Counter({n.rsplit("_v", 1)[0]: c for n, c in launch_names.items()})
    assert Counter(joined["api"]) == stripped


def test_2026_1_devices_from_cuda_device_table() -> None:
    p = shared(F2026_1)
    d = _read(p).devices
    (cuda_id, gpu_id, sms) = _sql(
        p, "SELECT cudaId, gpuId, numMultiprocessors FROM TARGET_INFO_CUDA_DEVICE"
    )[0]
    (name, uuid) = _sql(p, f"SELECT name, uuid FROM TARGET_INFO_GPU WHERE id = {gpu_id}")[0]
    assert d.height == 1
    row = d.row(0, named=True)
    # TARGET_INFO_CUDA_DEVICE.uuid is empty in this file: the GPU table's UUID is used.
    assert (row["device_id"], row["name"], row["uuid"], row["sm_count"]) == (
        cuda_id,
        name,
        f"GPU-{uuid}",
        sms,
    )


def test_2026_2_has_no_gpu_table_devices_from_activity() -> None:
    p = shared(F2026_2)
    assert "TARGET_INFO_GPU" not in _tables(p)
    d = _read(p).devices
    used = sorted(r[0] for r in _sql(p, "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    assert d["device_id"].to_list() == used
    assert d["name"].null_count() == d.height


# --- privacy ----------------------------------------------------------------------------------

SECRET = "planted-secret-123"


def _string_cells(t: ta.Tables) -> list[str]:
    out = []
    for _, df in t.items():
        for c, dt in df.schema.items():
            if dt == pl.String:
                out += [v for v in df[c].to_list() if v is not None]
    return out


@pytest.mark.parametrize("engine", ["sqlite3", "adbc"])
def test_environment_never_reaches_outputs(tmp_path: Path, engine: str) -> None:
    if engine == "adbc":
        pytest.importorskip("adbc_driver_sqlite")
    src = shared(F2026_2)
    p = tmp_path / "planted.sqlite"
    shutil.copyfile(src, p)
    block = f"PATH=/usr/bin\x00AWS_SECRET_ACCESS_KEY={SECRET}\x00HOME=/root\x00"
    con = sqlite3.connect(p)
    con.execute(
        "INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
        (f"AWS_SECRET_ACCESS_KEY={SECRET}",),
    )
    con.execute(
        "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_ENVIRONMENT_VARIABLE', ?)",
        (f"AWS_SECRET_ACCESS_KEY={SECRET}",),
    )
    con.execute(
        "INSERT INTO TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) "
        "VALUES (0, 'x', 'AWS_SECRET_ACCESS_KEY', 0, ?)",
        (SECRET,),
    )
    (sid,) = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()
    con.execute("INSERT INTO StringIds VALUES (?, ?)", (sid, block))
    con.execute("INSERT INTO StringIds VALUES (?, ?)", (sid + 1, f"AWS_SECRET_ACCESS_KEY={SECRET}"))
    # Point real rows at the environment block: a kernel's short name, a runtime call's name, an
    # NVTX textId, and an NVTX text that is itself a block.
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = ? WHERE rowid = 1", (sid,))
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ? WHERE rowid = 1", (sid,))
    con.execute(
        "UPDATE NVTX_EVENTS SET text = NULL, textId = ? WHERE rowid = (SELECT min(rowid) FROM "
        "NVTX_EVENTS)",
        (sid,),
    )
    con.execute(
        "UPDATE NVTX_EVENTS SET text = ? WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS)",
        (block,),
    )
    con.commit()
    con.close()

    with pytest.warns(UserWarning, match="NUL"):
        t = ta.read(p, engine=engine)
    cells = _string_cells(t)
    assert cells  # the scan looked at real text
    assert not [c for c in cells if SECRET in c or "\x00" in c]
    assert t.kernels.filter(pl.col("kernel_id") == 0)["short_name"].to_list() == [None]

    store = tmp_path / "store"
    with pytest.warns(UserWarning, match="NUL"):
        ta.ingest([p], store)
    st = ta.Store(store)
    assert not [c for c in _string_cells(st.tables()) if SECRET in c]
    files = [f for f in store.rglob("*") if f.is_file()]
    assert any(f.suffix == ".parquet" for f in files)
    for f in files:
        assert SECRET.encode() not in f.read_bytes(), f


# --- inline edge cases ------------------------------------------------------------------------


def _make(path: Path, ddl_and_rows: list[tuple[str, list[tuple]]]) -> Path:
    con = sqlite3.connect(path)
    for ddl, rows in ddl_and_rows:
        con.execute(ddl)
        if rows:
            table = ddl.split()[2]
            marks = ", ".join("?" * len(rows[0]))
            # rows may fill only the first columns (the rest take their defaults)
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")][: len(rows[0])]
            con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", rows)
    con.commit()
    con.close()
    return path


def _mini_2x(tmp_path: Path, extra: list[tuple[str, list[tuple]]] | None = None) -> Path:
    """A schema-2.x-like export: EXPORT_META_DATA, no ENUM_* tables, an appended `name` column,
    no mangledName column, marks, text vs textId, a DomainCreate row."""
    return _make(
        tmp_path / "mini2x.sqlite",
        [
            (
                "CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT)",
                [
                    ("EXPORT_PRODUCT_VERSION", "2021.5.2.53"),
                    ("EXPORT_SCHEMA_VERSION", "2.7.0"),
                    ("EXPORT_USER", "alice"),
                ],
            ),
            (
                "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
                [
                    (1, "void k<int>(int*)"),
                    (2, "k"),
                    (3, "cudaLaunchKernel_v7000"),
                    (4, "from textId"),
                    (5, "cudaMemcpy_v3020"),
                    (6, "cuLaunchKernel"),
                ],
            ),
            (
                "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId "
                "INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid "
                "INTEGER, demangledName INTEGER, shortName INTEGER, gridX INTEGER, gridY INTEGER, "
                "gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER, futureColumn TEXT)",
                [
                    (100, 150, 3, 1, 7, 11, (42 << 24) | 0, 1, 2, 4, 1, 1, 256, 1, 1, "x"),
                    (200, 260, 3, 1, 7, 12, (42 << 24), 1, 2, 8, 1, 1, 128, 1, 1, None),
                ],
            ),
            (
                "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId "
                "INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid "
                "INTEGER, bytes INTEGER, copyKind INTEGER, srcKind INTEGER, dstKind INTEGER, "
                "name TEXT)",
                [
                    (10, 20, 3, 1, 7, 13, 42 << 24, 4096, 1, 1, 2, "m"),
                    (30, 45, 3, 1, 7, 14, 42 << 24, 100, 10, 2, 2, None),
                    (50, 55, 3, 1, 7, 15, 42 << 24, 8, 0, 7, 6, None),
                ],
            ),
            (
                "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass "
                "INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue "
                "INTEGER, callchainId INTEGER)",
                [
                    # eventClass 0 CUDA runtime, 1 CUDA driver, 67 CUDA backtrace (a copy of the
                    # runtime call at 90-99 that carries a call chain)
                    (90, 99, 0, (42 << 24) | 43, 11, 3, 0, None),
                    (5, 9, 0, (42 << 24) | 43, 13, 5, 1, None),
                    (92, 97, 1, (42 << 24) | 43, 16, 6, 0, None),
                    (89, 100, 67, (42 << 24) | 43, 11, 3, 0, 0),
                ],
            ),
            (
                "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, rangeId "
                "INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
                "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)",
                [
                    (1, None, 75, None, None, None, "MyDomain", (42 << 24) | 43, None, None, 5),
                    (2, 9, 59, None, None, None, "with text", (42 << 24) | 43, None, None, 0),
                    (3, 8, 60, 1, None, None, None, (42 << 24) | 44, None, 4, 5),
                    (4, None, 34, None, None, None, "a mark", (42 << 24) | 43, None, None, 0),
                    (5, None, 39, None, None, None, "thread name", (42 << 24) | 43, None, None, 0),
                ],
            ),
            *(extra or []),
        ],
    )


def test_inline_2x_without_enum_tables(tmp_path: Path) -> None:
    p = _mini_2x(tmp_path)
    assert sniff(p)
    assert schema_era(p) == ("2021.5.2.53", "2.7.0")
    t = read_nsys_sqlite(p)
    k = t.kernels
    assert k["name"].to_list() == ["void k<int>(int*)"] * 2
    assert k["short_name"].to_list() == ["k", "k"]
    assert k["mangled_name"].null_count() == 2  # column absent in this export
    assert k["registers_per_thread"].null_count() == 2
    assert k["process_id"].to_list() == [42, 42]
    assert k["duration_ns"].to_list() == [50, 60]
    assert k["grid_x"].to_list() == [4, 8]
    m = t.memcpy.sort("start_ns")
    assert m["kind"].to_list() == ["HtoD", "PtoP", None]  # 0 = Unknown → null
    assert m["src_kind"].to_list() == ["Pinned", "Device", None]  # 7 = Unknown → null
    assert m["dst_kind"].to_list() == ["Device", "Device", "Managed Static"]
    a = t.api_calls.sort("start_ns")
    assert a["name"].to_list() == ["cudaMemcpy", "cudaLaunchKernel", "cuLaunchKernel"]
    assert a["api"].to_list() == ["runtime", "runtime", "driver"]  # 2.x: documented numbering
    assert a["thread_id"].to_list() == [43, 43, 43]
    assert a["return_code"].to_list() == [1, 0, 0]
    mk = t.markers.sort("start_ns")
    assert mk["name"].to_list() == ["with text", "from textId", "a mark"]
    assert mk["domain"].to_list() == [None, "MyDomain", None]
    assert mk["end_ns"].to_list() == [9, 8, None]
    assert mk["duration_ns"].to_list() == [7, 5, None]
    assert mk["thread_id"].to_list() == [43, 44, 43]
    assert t.sources["tool_version"].to_list() == ["2021.5.2.53"]
    assert t.sources["time_origin_epoch_ns"].to_list() == [None]  # no session-start table
    assert t.gpu_metrics.height == 0 and t.devices["device_id"].to_list() == [3]
    assert "alice" not in _string_cells(t)


def test_inline_enum_tables_with_other_label_text(tmp_path: Path) -> None:
    """3.x ENUM tables win over the numbering, and their label text is normalized."""
    p = _mini_2x(
        tmp_path,
        [
            (
                "CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER, name TEXT, label TEXT)",
                [
                    (1, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
                    (10, None, "Peer-to-Peer"),
                    (0, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
                ],
            ),
            (
                "CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER, name TEXT, label TEXT)",
                [
                    (1, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", None),
                    (2, None, "device static"),
                    (7, "X", "Pinned"),
                    (6, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
                ],
            ),
        ],
    )
    m = read_nsys_sqlite(p).memcpy.sort("start_ns")
    assert m["kind"].to_list() == ["DtoH", "PtoP", "Unified HtoD"]
    assert m["src_kind"].to_list() == ["Device", "Device Static", "Pinned"]
    assert m["dst_kind"].to_list() == ["Device Static", "Device Static", None]


def test_inline_event_class_enum_wins_over_the_numbering(tmp_path: Path) -> None:
    """With ENUM_NSYS_EVENT_CLASS present its ids decide, whatever they are; a class that is
    not a CUDA API (here OSRT runtime) is dropped with a warning naming it."""
    p = _mini_2x(
        tmp_path,
        [
            (
                "CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER, name TEXT, label TEXT)",
                [
                    (0, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
                    (1, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"),
                    (67, "TRACE_PROCESS_EVENT_OS_RUNTIME", "OSRT runtime"),
                ],
            )
        ],
    )
    with pytest.warns(UserWarning, match=r"1 of class 67 \(OSRT runtime\)"):
        a = read_nsys_sqlite(p).api_calls.sort("start_ns")
    # rows of class 0 (start 5, 90) are driver by this table, class 1 (start 92) runtime
    assert a.select("start_ns", "api").rows() == [(5, "driver"), (90, "driver"), (92, "runtime")]


def test_inline_runtime_table_without_event_class(tmp_path: Path) -> None:
    """An export whose RUNTIME table lacks eventClass labels its rows by the table."""
    p = _mini_2x(tmp_path)
    con = sqlite3.connect(p)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN eventClass")
    con.commit()
    con.close()
    a = read_nsys_sqlite(p).api_calls
    assert a.height == 4 and set(a["api"]) == {"runtime"}


def test_inline_gpu_metrics(tmp_path: Path) -> None:
    p = _mini_2x(
        tmp_path,
        [
            (
                "CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, sourceId INTEGER, typeName "
                "TEXT, metricId INTEGER, metricName TEXT)",
                [
                    (0x10001, 1, "GA100", 7, "SMs Active [Throughput %]"),
                    (0x10001, 1, "GA100", 3, "GPC Clock Frequency [MHz]"),
                    (0x10002, 1, "GA100", 7, "GR Active"),
                    (0x10002, 1, "GA100", 9, "Tensor Active %"),
                ],
            ),
            (
                "CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER, metricId INTEGER, "
                "value INTEGER)",
                [
                    (100, 0x10001, 7, 55),
                    (100, 0x10001, 3, 1410),
                    (200, 0x10002, 7, 12),
                    (200, 0x10002, 9, 3),
                    (-5, 0x10002, 9, 4),
                ],
            ),
        ],
    )
    g = read_nsys_sqlite(p).gpu_metrics.sort("timestamp_ns", "metric_name")
    assert g.rows() == [
        (None, 2, -5, "Tensor Active %", "%", 4.0),
        (None, 1, 100, "GPC Clock Frequency [MHz]", "MHz", 1410.0),
        (None, 1, 100, "SMs Active [Throughput %]", "%", 55.0),
        (None, 2, 200, "GR Active", None, 12.0),
        (None, 2, 200, "Tensor Active %", "%", 3.0),
    ]


def test_inline_missing_tables_give_empty_frames(tmp_path: Path) -> None:
    p = _make(
        tmp_path / "bare.sqlite",
        [
            (
                "CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)",
                [("EXPORT_PRODUCT_VERSION", "2024.5.1.113")],
            ),
            ("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)", []),
            (
                "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, "
                "localTime TEXT)",
                [(1700000000123456789, "x", "y")],
            ),
        ],
    )
    assert detect_format(p) == "nsys_sqlite"
    t = ta.read(p)
    assert {k: v for k, v in t.counts().items() if v} == {"sources": 1}
    assert t.sources["time_origin_epoch_ns"].to_list() == [1700000000123456789]
    assert t.sources["tool_version"].to_list() == ["2024.5.1.113"]
    for name, df in t.items():
        assert schema.validate(name, df) == [], name


@pytest.mark.parametrize("engine", ["sqlite3", "adbc"])
@pytest.mark.parametrize("cell", ["not a time", 2.5, b"\x01\x02"])
def test_inline_bad_cell_is_malformed(tmp_path: Path, engine: str, cell: object) -> None:
    if engine == "adbc":
        pytest.importorskip("adbc_driver_sqlite")
    p = _make(
        tmp_path / "bad.sqlite",
        [
            ("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)", []),
            (
                "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId "
                "INTEGER DEFAULT 0, demangledName INTEGER)",
                [(1, 3), (2, cell)],
            ),
        ],
    )
    with pytest.raises(MalformedInput) as e:
        ta.read(p, engine=engine)
    assert str(p) in str(e.value) and "CUPTI_ACTIVITY_KIND_KERNEL" in str(e.value)


def test_sniff_rejects_nvprof_sqlite_and_others(tmp_path: Path, write) -> None:
    nvprof = _make(
        tmp_path / "nvprof.sqlite",
        [
            ("CREATE TABLE StringTable (_id_ INTEGER PRIMARY KEY, value TEXT)", [(1, "k")]),
            ("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER)", [(1,)]),
        ],
    )
    assert not sniff(nvprof)
    other = _make(tmp_path / "other.sqlite", [("CREATE TABLE t (a)", [(1,)])])
    assert not sniff(other)
    assert not sniff(write("x.sqlite", b"SQLite format 3\x00" + b"\x00" * 100))
    assert not sniff(write("x.txt", "StringIds EXPORT_META_DATA"))
    assert not sniff(tmp_path / "missing.sqlite")
    with pytest.raises(MalformedInput):
        read_nsys_sqlite(other)


def test_file_is_opened_read_only(tmp_path: Path) -> None:
    src = shared(F2026_1)
    p = tmp_path / "ro.sqlite"
    shutil.copyfile(src, p)
    before = p.read_bytes()
    read_nsys_sqlite(p)
    assert p.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ro.sqlite"]  # no journal left behind


@pytest.mark.parametrize("rel", ALL)
def test_engines_give_identical_tables(rel: str) -> None:
    pytest.importorskip("adbc_driver_sqlite")
    p = shared(rel)
    a = read_nsys_sqlite(p, engine="sqlite3")
    b = read_nsys_sqlite(p, engine="adbc")
    for (name, x), (_, y) in zip(a.items(), b.items(), strict=True):
        assert x.equals(y, null_equal=True), name


def test_adbc_engine_is_read_only_and_falls_back_on_bad_cells(tmp_path: Path) -> None:
    pytest.importorskip("adbc_driver_sqlite")
    p = _mini_2x(tmp_path)
    before = p.read_bytes()
    t = read_nsys_sqlite(p, engine="adbc")
    assert t.kernels.height == 2
    assert p.read_bytes() == before
    bad = _make(
        tmp_path / "bad.sqlite",
        [
            ("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)", []),
            (
                "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId "
                "INTEGER DEFAULT 0, demangledName INTEGER)",
                [(1, 2), (3, "not a time")],
            ),
        ],
    )
    with pytest.raises(MalformedInput, match="CUPTI_ACTIVITY_KIND_KERNEL"):
        read_nsys_sqlite(bad, engine="adbc")


# --- parallel reads: big integer tables split over worker processes by rowid range ------------


def _force_parallel(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[int, int]]]:
    """Parallel reads even for tiny tables; returns the rowid ranges of every parallel read."""
    from traceanalyze.readers.common import sqlite_parallel as _sqlite_parallel
    from traceanalyze.readers.nsys import nsys_sqlite

    calls: list[list[tuple[int, int]]] = []
    real = _sqlite_parallel.read_ranges

    def spy(path: Path, sql: str, alias: str, ranges: list[tuple[int, int]], **kw: Any) -> Any:
        calls.append(list(ranges))
        return real(path, sql, alias, ranges, **kw)

    monkeypatch.setattr(_sqlite_parallel, "read_ranges", spy)
    monkeypatch.setattr(nsys_sqlite, "PARALLEL_MIN_ROWS", 1)
    return calls


@pytest.mark.parametrize("rel", ALL)
def test_parallel_equals_serial_on_real_files(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("adbc_driver_sqlite")
    p = shared(rel)
    serial = read_nsys_sqlite(p, engine="adbc", workers=1)
    calls = _force_parallel(monkeypatch)
    par = read_nsys_sqlite(p, engine="adbc", workers=3)
    # Every integer table was split (into fewer parts only where it has fewer than 3 rowids).
    assert calls and max(len(r) for r in calls) == 3
    for (name, x), (_, y) in zip(serial.items(), par.items(), strict=True):
        assert x.equals(y, null_equal=True), name
    want = _sql(
        p,
        "SELECT k.start, d.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "LEFT JOIN StringIds d ON d.id = k.demangledName ORDER BY k.rowid",
    )
    assert list(zip(par.kernels["start_ns"], par.kernels["name"], strict=True)) == want


def _gappy(tmp_path: Path) -> Path:
    """40 kernels, rowids with holes (deleted rows, a hole at the start), mangledName NULL in the
    first half, so one worker's range has an all-NULL column and another has ids."""
    rows = [
        (i * 10, i * 10 + 5, i % 2, 1, 7, 1000 + i, 42 << 24, 1 + i % 2, 3, None if i < 20 else 4)
        for i in range(40)
    ]
    p = _make(
        tmp_path / "gappy.sqlite",
        [
            (
                "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
                [(1, "void a()"), (2, "void b()"), (3, "short"), (4, "_Z1av")],
            ),
            (
                "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId "
                "INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid "
                "INTEGER, demangledName INTEGER, shortName INTEGER, mangledName INTEGER)",
                rows,
            ),
        ],
    )
    con = sqlite3.connect(p)
    con.execute(
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN (1, 2, 9, 10, 11, 12, 13, 30, 40)"
    )
    con.commit()
    con.close()
    return p


def test_parallel_with_rowid_gaps_equals_serial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("adbc_driver_sqlite")
    p = _gappy(tmp_path)
    serial = read_nsys_sqlite(p, engine="sqlite3")
    calls = _force_parallel(monkeypatch)
    par = read_nsys_sqlite(p, engine="adbc", workers=4)
    # Rowids 3..39 remain: four contiguous ranges cover them.
    [ranges] = calls
    assert len(ranges) == 4 and ranges[0][0] == 3 and ranges[-1][1] == 39
    assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:], strict=False))
    for (name, x), (_, y) in zip(serial.items(), par.items(), strict=True):
        assert x.equals(y, null_equal=True), name
    want = _sql(
        p,
        "SELECT k.correlationId, d.value, m.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds d ON d.id = k.demangledName "
        "LEFT JOIN StringIds m ON m.id = k.mangledName ORDER BY k.rowid",
    )
    k = par.kernels
    assert len(want) == 31 and k["kernel_id"].to_list() == list(range(31))
    assert list(zip(k["correlation_id"], k["name"], k["mangled_name"], strict=True)) == want


def test_parallel_worker_failure_is_malformed_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("adbc_driver_sqlite")
    from traceanalyze.readers.common import sqlite_parallel as _sqlite_parallel

    p = _gappy(tmp_path)
    _force_parallel(monkeypatch)
    fail = [sys.executable, "-c", "import sys; sys.exit('worker fell over')"]
    monkeypatch.setattr(_sqlite_parallel, "worker_command", lambda: fail)
    with pytest.raises(MalformedInput) as e:
        read_nsys_sqlite(p, engine="adbc", workers=2)
    msg = str(e.value)
    assert str(p) in msg and "CUPTI_ACTIVITY_KIND_KERNEL" in msg and "worker fell over" in msg


def test_parallel_driver_refusal_falls_back_to_the_strict_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("adbc_driver_sqlite")
    from traceanalyze.readers.nsys import nsys_sqlite

    rows: list[tuple[object, ...]] = [(i, i + 1) for i in range(100)]
    rows[70] = (70, "not a time")  # after the driver's inference batch of 16 rows
    p = _make(
        tmp_path / "late.sqlite",
        [
            ("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)", []),
            (
                "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId "
                "INTEGER DEFAULT 0, demangledName INTEGER)",
                rows,
            ),
        ],
    )
    calls = _force_parallel(monkeypatch)
    monkeypatch.setattr(nsys_sqlite, "_BATCH", 4)
    with pytest.raises(MalformedInput) as e:
        read_nsys_sqlite(p, engine="adbc", workers=2)
    assert calls  # the workers ran, were refused, and the strict path named the problem
    assert str(p) in str(e.value) and "CUPTI_ACTIVITY_KIND_KERNEL" in str(e.value)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_parallel_without_room_for_worker_files_reads_serially(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("adbc_driver_sqlite")
    from traceanalyze.readers.common import sqlite_parallel as _sqlite_parallel

    from .test_sqlite_parallel import _full_disk_worker

    p = _gappy(tmp_path)
    serial = read_nsys_sqlite(p, engine="adbc", workers=1)
    calls = _force_parallel(monkeypatch)
    monkeypatch.setattr(_sqlite_parallel, "worker_command", _full_disk_worker)
    par = read_nsys_sqlite(p, engine="adbc", workers=2)
    assert calls  # tried, the worker could not write, and the serial read took over
    for (name, x), (_, y) in zip(serial.items(), par.items(), strict=True):
        assert x.equals(y, null_equal=True), name


def test_reading_an_export_through_adbc_imports_neither_pyarrow_nor_numpy() -> None:
    # polars takes ADBC's Arrow C stream directly (PyCapsule): a small export is read without
    # pyarrow and numpy, and gives the same kernels as Python's sqlite3 path
    import subprocess

    path = shared(F2026_2)
    code = (
        "import sys, traceanalyze as ta\n"
        f"k = ta.read({str(path)!r}, engine='adbc').kernels\n"
        "print(k.height, k['duration_ns'].sum(), 'pyarrow' in sys.modules, 'numpy' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[1]
    got = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    ).stdout.split()
    ref = read_nsys_sqlite(path, engine="sqlite3").kernels
    expected = _sql(path, 'SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')[0]
    assert [int(got[0]), int(got[1])] == [ref.height, ref["duration_ns"].sum()] == list(expected)
    assert got[2:] == ["False", "False"]
