"""nvprof SQLite export: `nvprof -o x.nvvp` (also `--export-profile x.prof|.nvprof|.sql`).

Tested with a CUDA 10.1 nvprof capture of a PyTorch language model on a V100 (`nvprof -f -o
net.sql --profile-from-start off`, db `Version` 12, apex.pyprof NVTX markers) and with small
databases built in the tests with the same tables (formats.md §2). `Version` 11 DBs (2018) are
not tested here; columns are selected by name (PRAGMA table_info) and absent optional ones become
null, so a missing required column raises MissingColumn naming the table.

The file is a plain SQLite 3 database, opened read-only (`common.sqlite.connect_readonly`). All
tables `CUPTI_ACTIVITY_KIND_*` exist even when empty. Text lives in `StringTable(_id_, value)` and
other tables store its ids; id 0 is `'-- null --'` (read as null) and id 1 is the profiled command
line, which no output ever copies: only the ids a table references are fetched, each distinct string
once, and joined to the rows in polars. Every activity table is read with one SQL query
(`fetchall` into a typed polars frame); pairing, enum mapping and BLOB decoding are polars
expressions, and Python loops only run over distinct kernel names (demangling, short names).

Tables:

* `kernels`: union of `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL` (default concurrent mode) and
  `CUPTI_ACTIVITY_KIND_KERNEL` (`--concurrent-kernels off`, analysis/metric mode). Names are
  stored mangled: `name` is demangled with cxxfilt (once per distinct name), `mangled_name` keeps
  the `_Z…` original (null for plain C names such as `volta_sgemm_128x64_tn`), `short_name` is the
  base function name without namespaces, template arguments or parameters. `kernel_id` is the
  launch index in start-time order.
* `memcpy`: `CUPTI_ACTIVITY_KIND_MEMCPY` plus `MEMCPY2` (peer-to-peer), with CUPTI's
  `CUpti_ActivityMemcpyKind` (1 HtoD … 10 PtoP) and `CUpti_ActivityMemoryKind` (1 Pageable,
  2 Pinned, 3 Device, 4 Array, 5 Managed, 6 Device Static, 7 Managed Static; 0 unknown → null),
  both checked against `cupti_activity.h` of CUDA 13.0. These differ from nsys's numbering.
  `CUPTI_ACTIVITY_KIND_MEMSET` rows have kind `memset` and `dst_kind` = their `memoryKind`.
* `api_calls`: `CUPTI_ACTIVITY_KIND_RUNTIME` (`api` runtime) and `_DRIVER` (driver). The API name
  is not stored, only CUPTI's callback id `cbid`: it is mapped through
  `traceanalyze/data/cupti_cbid_{runtime,driver}.csv`, generated from `cupti_runtime_cbid.h` and
  `cupti_driver_cbid.h` of CUDA 13.0 Update 1 (CUPTI_API_VERSION 130001; ids are append-only, so
  older traces map too). Runtime names drop CUPTI's `_vNNNN` suffix (`cudaLaunchKernel_v7000` →
  `cudaLaunchKernel`); `callback_id` keeps the id. An id missing from the table gives a null name
  and a warning. `threadId` is a signed 32-bit column that is often negative: it is masked with
  `& 0xFFFFFFFF` (the result matches the thread id packed in NVTX marker `objectId`s).
* `markers`: NVTX from `CUPTI_ACTIVITY_KIND_MARKER`. CUPTI writes a start row (flags
  `CUPTI_ACTIVITY_FLAG_MARKER_START` = 2) and an end row (`_END` = 4, name 0) with the same `id`;
  they are paired with a join on `id`. Instantaneous marks (`_INSTANTANEOUS` = 1) and the NVTX
  sync flags (8…64) have a null end; a start without an end keeps a null end (warned). `objectId`
  is the 12-byte `CUpti_ActivityObjectKindId` union: for `objectKind` 2 (thread) it is
  little-endian `uint32 processId, uint32 threadId`; for 1 (process) only the pid is meaningful.
  Other object kinds give null ids. `domain` is a StringTable id (0 = default domain → null).
* `sources`: `rank`, `rank_from` from an NVTX thread name (`CUPTI_ACTIVITY_KIND_NAME`) or the
  command line's `--local_rank` (`nvprof.ranks`); only the number is kept.
* `devices`: `CUPTI_ACTIVITY_KIND_DEVICE`; `uuid` (16-byte BLOB) → `GPU-8-4-4-4-12` hex.
* `gpu_samples` (`--system-profiling on`): `CUPTI_ACTIVITY_KIND_ENVIRONMENT(deviceId, timestamp,
  environmentKind, data BLOB)`, `data` being the `CUpti_ActivityEnvironment.data` union as
  little-endian `uint32`s: kind 1 speed (smClock MHz, memoryClock MHz, pcieLinkGen, pcieLinkWidth,
  clocksThrottleReasons), 2 temperature (gpuTemperature °C), 3 power (power mW, powerLimit mW),
  4 cooling (fanSpeed %). Records of one device and timestamp are merged into one wide row.
  CUPTI's throttle-reason bits 0x1–0x8 equal NVML's clock event reasons; the UNKNOWN
  (0x80000000) and UNSUPPORTED (0x40000000) values become null. PCIe generation/width have no
  schema column and are dropped. No public sample has these rows: the decoding follows the CUPTI
  header (the BLOB is assumed to hold the union alone, from offset 0) and is tested on databases
  built in the tests; a BLOB too short for its kind gives nulls and a warning.

Bad input follows the rules shared with the nsys reader (`common.core.check_times`, generated
columns refused, `common.core.check_telemetry` for environment samples outside
`schema.PLAUSIBLE_RANGES`).

Times are absolute Unix-epoch ns already: stored as is, `sources.time_origin_epoch_ns` = 0.
`sources.tool_version` is the export's db schema version (`Version` table), the only version the
file states. GPU rows (kernels, memcpy) carry no pid: when the API tables hold exactly one
`processId` (nvprof writes one DB per process, `%p`), that pid is filled in; otherwise it stays
null.

Streaming (`stream_nvprof_sqlite`, what `traceanalyze ingest` uses): the same tables, with
kernels, copies and API calls read a batch at a time in output order, which SQLite's own
external sort produces (`ORDER BY start, table, rowid`; see `nvprof.sqlite_stream`), and NVTX
markers and environment samples the same way, SQLite pairing start and end rows (see
`nvprof.nvtx`). Only small tables are held whole (kernel names, devices, sources).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from ...errors import MalformedInput, MissingColumn
from ...rank_names import rank_columns
from ...tables import Tables
from ..common.core import (
    PathLike,
    check_times,
    is_sqlite,
    reader_entry,
    require_columns,
    table_columns,
    warn,
)
from ..common.sqlite import connect_readonly, q, query_frame, sqlite_tables
from ..common.stream import stream_entry
from .nvtx import gpu_samples, marker_chunks, markers, sample_chunks
from .ranks import sqlite_rank_hints
from .short_names import short_name as _short_name  # noqa: F401  (tests import it from here)
from .sql import (
    _K,
    _KERNEL_SCHEMA,
    _MEMCPY_SCHEMA,
    _MEMCPY_TABLE,
    _STRINGS,
    KERNEL_TABLES,
    _cbid_names,
    _select,
    _string_join,
    dangling,
    kernel_names,
    kernel_rows,
    kernel_sql,
    memcpy_counts,
    memcpy_rows,
    memcpy_sql,
    note_dangling,
    warn_memcpy,
)
from .sqlite_stream import api_chunks, kernel_chunks, memcpy_chunks

TOOL = "nvprof"


_I = pl.Int64


def sniff(path: PathLike) -> bool:
    """SQLite with `StringTable` and a CUPTI kernel table, and without nsys's `StringIds`."""
    if not is_sqlite(path):
        return False
    try:
        tables = sqlite_tables(path)
    except (sqlite3.Error, OSError):
        return False
    return (
        _STRINGS in tables and any(t in tables for t in KERNEL_TABLES) and "StringIds" not in tables
    )


@reader_entry("nvprof_sqlite")
def read_nvprof_sqlite(path: PathLike) -> Tables:
    """Read an nvprof SQLite export into normalized tables."""
    with _opened(path) as con:
        return _read(con, path)


# Rows per sqlite3 batch of the stream (tests shrink it).
_BATCH = 1 << 14


@stream_entry("nvprof_sqlite")
def stream_nvprof_sqlite(path: PathLike, *, workdir: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    """`read_nvprof_sqlite` as (table, chunk) pairs for `ingest`: kernels, copies and API
    calls a batch (`_BATCH` rows) at a time, sorted by SQLite (see `nvprof.sqlite_stream`); the
    chunks of each table, concatenated, are `read_nvprof_sqlite`'s table (rows, order,
    `kernel_id`s) and bad input raises the same errors. `workdir` is not needed: SQLite's
    sorter keeps its own temporary files."""
    del workdir
    with _opened(path) as con:
        yield from _stream_tables(con, path, _check(con, path))


def _stream_tables(
    con: sqlite3.Connection, path: PathLike, tables: set[str]
) -> Iterator[tuple[str, pl.DataFrame]]:
    """`_read`'s tables in `_read`'s order, the big ones in sorted batches (see
    `nvprof.sqlite_stream`);
    each gets its whole-frame reader, which raises `read`'s error for a badly typed batch."""
    pids: set[int] = set()
    whole_api = lambda: _api_calls(con, path, tables)  # noqa: E731
    for name, df in api_chunks(con, path, tables, _BATCH, whole_api):
        pids.update(df["process_id"].drop_nulls().unique().to_list())
        yield name, df
    pid = next(iter(pids)) if len(pids) == 1 else None
    devices = _devices(con, path, tables)
    if devices is not None:
        yield "devices", devices
    yield "sources", _sources(con, tables)
    whole_kernels = lambda: _kernels(con, path, tables, pid)  # noqa: E731
    yield from kernel_chunks(con, path, tables, pid, _BATCH, whole_kernels)
    whole_memcpy = lambda: _memcpy(con, path, tables, pid)  # noqa: E731
    yield from memcpy_chunks(con, path, tables, pid, _BATCH, whole_memcpy)
    yield from marker_chunks(con, path, tables, _BATCH, lambda: markers(con, path, tables))
    whole_samples = lambda: gpu_samples(con, path, tables, devices)  # noqa: E731
    yield from sample_chunks(con, path, tables, devices, _BATCH, whole_samples)


@contextlib.contextmanager
def _opened(path: PathLike) -> Iterator[sqlite3.Connection]:
    """The export opened read-only; errors of a damaged file met while the body reads it
    become MalformedInput naming it."""
    if not is_sqlite(path):
        raise MalformedInput("not an SQLite database (nvprof -o export expected)", path=path)
    con = connect_readonly(path)
    try:
        yield con
    except sqlite3.DatabaseError as e:
        # a truncated or corrupt file fails only when a damaged page is reached
        raise MalformedInput(f"cannot read the SQLite database ({e})", path=path) from None
    except UnicodeDecodeError:
        # SQLite's message quotes damaged schema text, which Python fails to decode
        raise MalformedInput(
            "cannot read the SQLite database (its schema holds bytes that are not UTF-8)",
            path=path,
        ) from None
    finally:
        con.close()


def _check(con: sqlite3.Connection, path: PathLike) -> set[str]:
    """The export's tables, once it is known to be an nvprof export."""
    tables = sqlite_tables(con)
    if not any(t in tables for t in KERNEL_TABLES):
        raise MissingColumn(
            f"not an nvprof export: no {' or '.join(KERNEL_TABLES)} table",
            path=path,
            table=KERNEL_TABLES[0],
        )
    if _STRINGS not in tables:
        raise MissingColumn("not an nvprof export: no StringTable", path=path, table=_STRINGS)
    require_columns(table_columns(con, _STRINGS), ["_id_", "value"], path=path, table=_STRINGS)
    return tables


def _read(con: sqlite3.Connection, path: PathLike) -> Tables:
    tables = _check(con, path)
    api_calls = _api_calls(con, path, tables)
    pids = api_calls["process_id"].drop_nulls().unique()
    pid = int(pids[0]) if pids.len() == 1 else None
    devices = _devices(con, path, tables)
    frames = {
        "sources": _sources(con, tables),
        "devices": devices,
        "kernels": _kernels(con, path, tables, pid),
        "memcpy": _memcpy(con, path, tables, pid),
        "api_calls": api_calls,
        "markers": markers(con, path, tables),
        "gpu_samples": gpu_samples(con, path, tables, devices),
    }
    return Tables.build(**{name: df for name, df in frames.items() if df is not None})


# --- tables -----------------------------------------------------------------------------------


def _sources(con: sqlite3.Connection, tables: set[str]) -> pl.DataFrame:
    version = None
    if "Version" in tables and "version" in table_columns(con, "Version"):
        row = con.execute("SELECT version FROM Version LIMIT 1").fetchone()
        if row is not None and row[0] is not None:
            version = f"nvprof db version {row[0]}"
    return pl.DataFrame(
        {"tool": [TOOL], "tool_version": [version], "time_origin_epoch_ns": [0]},
        schema={"tool": pl.String, "tool_version": pl.String, "time_origin_epoch_ns": _I},
    ).with_columns(**rank_columns(sqlite_rank_hints(con, tables)))


def _kernels(
    con: sqlite3.Connection, path: PathLike, tables: set[str], pid: int | None
) -> pl.DataFrame:
    sql, used = kernel_sql(con, path, tables)
    df = query_frame(con, path, " + ".join(used), sql, _KERNEL_SCHEMA)
    check_times(df, path=path, table=" + ".join(used))
    rows = kernel_rows(df, kernel_names(con, path, used), pid)
    note_dangling(dangling(rows, "raw_name", "name_id"), "kernels", path)
    return (
        rows.drop("raw_name", "name_id", "_t", "_r")
        .sort("start_ns", maintain_order=True, nulls_last=True)
        .with_columns(pl.int_range(pl.len(), dtype=_I).alias("kernel_id"))
    )


def _memcpy(
    con: sqlite3.Connection, path: PathLike, tables: set[str], pid: int | None
) -> pl.DataFrame | None:
    sql = memcpy_sql(con, path, tables)
    if sql is None:
        return None
    df = query_frame(con, path, _MEMCPY_TABLE, sql, _MEMCPY_SCHEMA)
    check_times(df, path=path, table=_MEMCPY_TABLE)
    warn_memcpy(*memcpy_counts(df), path)
    return memcpy_rows(df, pid).sort("start_ns", maintain_order=True, nulls_last=True)


def _api_calls(con: sqlite3.Connection, path: PathLike, tables: set[str]) -> pl.DataFrame:
    want = {
        "callback_id": "cbid",
        "start_ns": "start",
        "end_ns": "end",
        "process_id": "processId",
        "thread_id": "threadId",
        "correlation_id": "correlationId",
        "return_code": "returnValue",
    }
    schema: dict[str, pl.DataType] = {c: _I() for c in want}
    frames = []
    for api, table in (("runtime", f"{_K}RUNTIME"), ("driver", f"{_K}DRIVER")):
        if table not in tables:
            continue
        cols = _select(con, path, table, want, ["cbid", "start", "end"])
        df = query_frame(con, path, table, f"SELECT {', '.join(cols)} FROM {q(table)} t", schema)
        check_times(df, path=path, table=table)
        if df.height == 0:
            continue
        df = df.join(_cbid_names(api), on="callback_id", how="left", maintain_order="left")
        missing = df.filter(pl.col("name").is_null())
        if missing.height:
            ids = sorted(missing["callback_id"].drop_nulls().unique().to_list())
            warn(
                f"{path}: {missing.height} {api} API call(s) with callback ids not in the CUPTI "
                f"13.0 table ({', '.join(map(str, ids[:10]))}); name left null"
            )
        frames.append(df.with_columns(pl.lit(api).alias("api")))
    if not frames:
        return pl.DataFrame(schema={**schema, "name": pl.String(), "api": pl.String()})
    return (
        pl.concat(frames, how="vertical")
        .with_columns(
            # threadId is stored as a signed 32-bit value (formats.md §2)
            (pl.col("thread_id") & 0xFFFFFFFF).alias("thread_id"),
            (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
        )
        .sort("start_ns", maintain_order=True, nulls_last=True)
    )


def _devices(con: sqlite3.Connection, path: PathLike, tables: set[str]) -> pl.DataFrame | None:
    table = f"{_K}DEVICE"
    if table not in tables:
        return None
    want = {
        "device_id": "id",
        "memory_bytes": "globalMemorySize",
        "sm_count": "numMultiprocessors",
        "cc_major": "computeCapabilityMajor",
        "cc_minor": "computeCapabilityMinor",
        "uuid_blob": "uuid",
    }
    cols = _select(con, path, table, want, ["id"])
    sel, join = _string_join("t", "name", "name")
    if "name" not in table_columns(con, table):
        sel, join = "NULL AS name", ""
    schema: dict[str, pl.DataType] = {c: _I() for c in want}
    schema["uuid_blob"] = pl.Binary()
    schema["name"] = pl.String()
    df = query_frame(
        con, path, table, f"SELECT {', '.join(cols)}, {sel} FROM {q(table)} t {join}", schema
    )
    hexed = pl.col("uuid_blob").bin.encode("hex")
    uuid = pl.concat_str(
        pl.lit("GPU-"),
        hexed.str.slice(0, 8),
        pl.lit("-"),
        hexed.str.slice(8, 4),
        pl.lit("-"),
        hexed.str.slice(12, 4),
        pl.lit("-"),
        hexed.str.slice(16, 4),
        pl.lit("-"),
        hexed.str.slice(20, 12),
    )
    return (
        df.with_columns(
            pl.when(pl.col("uuid_blob").bin.size() == 16).then(uuid).alias("uuid"),
            pl.concat_str(
                pl.col("cc_major").cast(pl.String), pl.lit("."), pl.col("cc_minor").cast(pl.String)
            ).alias("compute_capability"),
            pl.lit("NVIDIA").alias("vendor"),
        )
        .drop("uuid_blob", "cc_major", "cc_minor")
        .sort("device_id")
    )
