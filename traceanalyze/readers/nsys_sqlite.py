"""Nsight Systems SQLite export: `nsys export --type sqlite r.nsys-rep` (also written by
`nsys profile --export=sqlite`, `nsys profile --stats=true` and `nsys stats r.nsys-rep`).

Tested with real exports (formats.md §3): nsys 2022.2.1.31 (schema 2.9.1, non-lazy, metadata in
`EXPORT_META_DATA`, non-UTF-8 bytes in `TARGET_INFO_SYSTEM_ENV`), 2026.1.1.204 (schema 3.24.14)
and 2026.2.1.210 (schema 3.25.0, `META_DATA_EXPORT`, no `TARGET_INFO_GPU`), plus inline edge
cases (2.x without `ENUM_*` tables, `GPU_METRICS`, missing tables, extra columns).

Version drift is handled by discovery, never by version checks: tables are looked up in
`sqlite_master` (lazy exports create only tables that have rows; a missing table gives an empty
frame), columns via `PRAGMA table_info` and selected by name (extra columns, such as the `name`
column that post-processing appended to the 2022.2 sample, are ignored; a missing optional column
becomes null).

Bad input (issue 9): the columns in `REQUIRED` (present in every export) are checked by name, and
a missing or renamed one is MissingColumn naming table and column; a generated (computed) column
is refused. A file with `StringIds` and a metadata table but no nsys table is not an export. The
time rule shared with the nvprof reader (`_common.check_times`): a NULL start is an error, a NULL
end a warning (end and duration null), an `end - start` that overflows int64 an error. A name id
with no `StringIds` row leaves the name null with a warning giving the count.

Tables:

* `kernels` ← `CUPTI_ACTIVITY_KIND_KERNEL`. The three name columns are `StringIds` ids:
  `demangledName` → `name`, `shortName` → `short_name`, `mangledName` → `mangled_name`.
  `process_id` = `(globalPid >> 24) & 0xFFFFFF` (formats.md §3.2). `kernel_id` is the row's index
  in table (rowid) order.
* `memcpy` ← `CUPTI_ACTIVITY_KIND_MEMCPY` and `CUPTI_ACTIVITY_KIND_MEMSET` (kind `memset`, the
  set memory in `dst_kind`). `copyKind` is labelled from `ENUM_CUDA_MEMCPY_OPER` when present (3.x)
  else from the documented numbering (2.x has no `ENUM_*` tables); `srcKind`/`dstKind`/`memKind`
  from `ENUM_CUDA_MEM_KIND` else 0 Pageable, 1 Pinned, 2 Device, 3 Array, 4 Managed, 5 Device
  Static, 6 Managed Static (this is nsys's numbering, not CUPTI's). Labels are normalized to the
  schema's spelling (`HtoD`, `DtoD`, `PtoP`, `Unified HtoD`, …) whatever the enum's label text;
  the enums' "Unknown" entries become null (a missing value, not a kind).
* `api_calls` ← `CUPTI_ACTIVITY_KIND_RUNTIME` (and `…_DRIVER` when present). nsys writes CUDA
  driver calls (`cuLaunchKernelEx`, `cuKernelGetAttribute`, …) into the RUNTIME table too and
  tells them apart by `eventClass`, so `api` comes from each row's `eventClass` looked up in
  `ENUM_NSYS_EVENT_CLASS` (3.x: `TRACE_PROCESS_EVENT_CUDA_RUNTIME` → `runtime`,
  `…_CUDA_DRIVER` → `driver`); 2.x exports have no ENUM tables, so the same numbering is the
  documented fallback (`EVENT_CLASS_2X`: 0 runtime, 1 driver, 67 CUDA backtrace; the 2022.2
  sample agrees: class 1 holds `cuModuleGetLoadingMode`). A table without the column labels its
  rows by the table (`runtime` / `driver`). CUDA backtrace rows (class 67, `nsys
  --cudabacktrace`) are not calls: each repeats a runtime call of the same thread and correlation
  id, widened, to carry its `callchainId`, so they are dropped; rows of any other class are
  dropped with a warning. `nameId` → `StringIds` with the `_v7000`-style version suffix
  stripped; process and thread from `globalTid`; `returnValue` → `return_code`. Correlation ids
  restart per process, so join to kernels on (`process_id`, `correlation_id`).
* `markers` ← `NVTX_EVENTS` event types 59 (push/pop range), 60 (start/end range) and 34 (mark,
  null end). The name is `text`, else `StringIds[textId]`; the domain is the name of the
  DomainCreate (75) row with the same `domainId` (domain 0, the default domain, is null).
* `devices` ← `TARGET_INFO_GPU` (its `id` is not the CUDA ordinal: `device_id` is `cuDevice`) and
  `TARGET_INFO_CUDA_DEVICE` (2026: `cudaId` → `gpuId`), one row per device id; ordinals that the
  activity tables use but no info table describes get a row with null details. UUIDs get
  nvidia-smi's `GPU-` prefix so they match NVML/nvidia-smi sources.
* `gpu_metrics` ← `GPU_METRICS` joined to `TARGET_INFO_GPU_METRICS` on (`typeId`, `metricId`),
  `device_id` = `typeId & 0xFF`. metricIds depend on chip and metric set, so names always come from
  the join. `unit` comes from a bracketed name suffix (`[MHz]`, `[Throughput %]` → `%`) or a `%`
  in the name, else null. Rows with negative timestamps are kept.
* `sources`: tool `nsys`, `tool_version` = `EXPORT_PRODUCT_VERSION`,
  `time_origin_epoch_ns` = `TARGET_INFO_SESSION_START_TIME.utcEpochNs` (all times stay ns relative
  to the session start, as in the file).

Privacy: nsys exports embed the profiled process's whole environment (`META_DATA_CAPTURE`
`…ENVIRONMENT_VARIABLE` rows), host/user names (`META_DATA_EXPORT`), `TARGET_INFO_SYSTEM_ENV`, and
NUL-separated `KEY=VALUE` environment blocks inside `StringIds`. Only the two metadata keys above
are read; `META_DATA_CAPTURE` and `TARGET_INFO_SYSTEM_ENV` are never queried; a `StringIds` value
or NVTX text containing a NUL byte is never emitted (it becomes null, with a warning).

Speed: the kernel, copy and API tables are read as integer columns only, and names are resolved
afterwards by a gather from the small `StringIds` frame, so each distinct string is decoded once
however many launches share it. The integers come through `adbc-driver-sqlite` when it is
installed (Arrow arrays built in C, opened with the same read-only URI; `engine="auto"`), else
through Python's sqlite3 in `fetchmany` batches turned into numpy matrices. Decoding is ~80 % of
the time and single-threaded per statement, so a table of ≥ `PARALLEL_MIN_ROWS` rowids is cut
into min(CPUs, 4) rowid ranges: this process reads the first, worker processes
(`_sqlite_parallel`, plain subprocesses running only a checked read-only SELECT) read the others
and hand back Arrow files that are memory-mapped, and the parts are concatenated in rowid order,
the order of the serial scan. All paths give identical tables (tested).
`benchmarks/bench_nsys_sqlite.py` measures them (5 M kernels on 2 cores: ~1.0 M rows/s to
Parquet with 2 ranges, ~0.63 M rows/s in one process).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from ..errors import MalformedInput, TraceanalyzeError
from ..tables import Tables
from . import _sqlite_parallel
from ._common import (
    SQLITE_MAGIC,
    PathLike,
    bad_input_errors,
    check_times,
    connect_readonly,
    head_bytes,
    reader_entry,
    refuse_generated,
    require_columns,
    sqlite_tables,
    table_columns,
    warn,
)

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX = "NVTX_EVENTS"

# Documented numbering for schema 2.x exports, which have no ENUM_* tables (formats.md §3.2).
COPY_KIND_2X: dict[int, str | None] = {
    0: None,  # Unknown
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "Unified HtoD",
    12: "Unified DtoH",
    13: "Unified DtoD",
}
MEM_KIND_2X: dict[int, str | None] = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: None,  # Unknown
}
_MEM_KINDS = {v.upper().replace(" ", ""): v for v in MEM_KIND_2X.values() if v}
# `eventClass` of the API tables: the ids of ENUM_NSYS_EVENT_CLASS in the 3.x exports here
# (2026.1, 2026.2), used for 2.x exports, which have no ENUM tables. Values are `api` labels;
# "backtrace" rows are dropped (see the module docstring).
EVENT_CLASS_2X: dict[int, str | None] = {0: "runtime", 1: "driver", 67: "backtrace"}
_API_LABELS = ("runtime", "driver")

# NVTX eventType values (ENUM_NSYS_EVENT_TYPE): the ones that become markers, and DomainCreate.
NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 34, 59, 60, 75

# Columns without which a table's rows would be wrong, not just less complete (issue 9): they
# are present in every export here (2.x and 3.x) and a missing or renamed one raises
# MissingColumn naming it, instead of turning into a null for every row. Other columns are
# optional (version drift) and become null when absent.
REQUIRED: dict[str, tuple[str, ...]] = {
    "StringIds": ("id", "value"),
    KERNEL: ("start", "end", "deviceId", "demangledName"),
    MEMCPY: ("start", "end", "deviceId", "bytes", "copyKind"),
    MEMSET: ("start", "end", "deviceId", "bytes"),
    RUNTIME: ("start", "end", "nameId"),
    DRIVER: ("start", "end", "nameId"),
    NVTX: ("start", "end"),
    "TARGET_INFO_GPU": ("cuDevice",),
    "TARGET_INFO_CUDA_DEVICE": ("gpuId", "cudaId"),
    "TARGET_INFO_GPU_METRICS": ("typeId", "metricId", "metricName"),
    "GPU_METRICS": ("timestamp", "typeId", "metricId", "value"),
}
# Tables only an nsys export has: a file with `StringIds` and a metadata table but none of these
# (another program's database) is not claimed, and not read as an empty export.
_NSYS_FAMILIES = ("CUPTI_ACTIVITY_KIND_", "NVTX_", "TARGET_INFO_", "ENUM_NSYS_", "GPU_METRICS")

_BATCH = 1 << 16
# Tables with at least this many rows (by rowid span) are split over worker processes.
PARALLEL_MIN_ROWS = 500_000
# Rows this process reads beyond a worker's share: what one core decodes (~0.8 M rows/s through
# ADBC) while a worker starts (~0.2 s), so that both finish together (measured on 2 cores).
_LOCAL_HEAD_START = 160_000
_API_VERSION_SUFFIX = r"_v\d+$"


# --- sniffing ---------------------------------------------------------------------------------


def sniff(path: PathLike) -> bool:
    """SQLite magic plus `StringIds` and an nsys metadata or kernel table.

    nvprof's SQLite has `StringTable` instead of `StringIds`, so it is never claimed.
    """
    try:
        if head_bytes(path, 16) != SQLITE_MAGIC:
            return False
        names = sqlite_tables(path)
    except (OSError, sqlite3.Error):  # sniff must never raise, whatever the bytes
        return False
    return (
        "StringIds" in names
        and bool(names & {"EXPORT_META_DATA", "META_DATA_EXPORT", KERNEL})
        and _has_nsys_tables(names)
    )


def _has_nsys_tables(names: set[str]) -> bool:
    return any(n.startswith(_NSYS_FAMILIES) for n in names)


# --- helpers ----------------------------------------------------------------------------------


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _fetch(
    con: sqlite3.Connection,
    table: str,
    wanted: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
    *,
    where: str = "",
    fast: _Fast | None = None,
) -> pl.DataFrame:
    """Columns of `table` by name: {output name: source column}; absent columns become null.

    All-integer selections go through ADBC when `fast` is given (Arrow arrays built in C): split
    over worker processes by rowid range when the table is big (`_fetch_parallel`), else on
    `fast`'s in-process connection; otherwise in batches of tuples → one numpy int64 matrix; a
    batch with NULLs or non-integer cells falls back to polars' strict row constructor, which
    raises MalformedInput on bad cells.
    """
    have = set(table_columns(con, table))
    refuse_generated(con, table, wanted.values(), path=None)
    require_columns(have, REQUIRED.get(table, ()), path=None, table=table)
    present = {out: src for out, src in wanted.items() if src in have}
    out_schema = {out: schema[out] for out in present}
    if not present:
        n = con.execute(f"SELECT count(*) FROM {_q(table)} {where}").fetchone()[0]
        return pl.DataFrame({o: pl.Series(o, [None] * n, dtype=schema[o]) for o in wanted})
    sql = f"SELECT {', '.join(_q(s) for s in present.values())} FROM {_q(table)} {where}"
    all_int = all(dt == pl.Int64 for dt in out_schema.values())
    if fast is not None and all_int and not where:
        got = _fetch_parallel(con, fast, table, sql, list(present))
        if got is not None:
            return _add_missing(got, wanted, present, schema)
    if fast is not None and all_int:
        got = _fetch_adbc(fast.con, sql, list(present))
        if got is not None:
            return _add_missing(got, wanted, present, schema)
    cur = con.execute(sql)
    parts: list[pl.DataFrame] = []
    names = list(present)
    while rows := cur.fetchmany(_BATCH):
        parts.append(_rows_to_frame(rows, names, out_schema, all_int, table))
    frame = (
        pl.concat(parts, how="vertical", rechunk=True) if parts else pl.DataFrame(schema=out_schema)
    )
    return _add_missing(frame, wanted, present, schema)


def _add_missing(
    frame: pl.DataFrame,
    wanted: Mapping[str, str],
    present: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
) -> pl.DataFrame:
    missing = [pl.lit(None, dtype=schema[o]).alias(o) for o in wanted if o not in present]
    return frame.with_columns(missing) if missing else frame


@dataclass
class _Fast:
    """The ADBC engine: the file, its in-process read-only connection, and how many worker
    processes a big table may be split over (1: never)."""

    path: Path
    con: _AdbcConnection
    workers: int


def _fetch_parallel(
    con: sqlite3.Connection, fast: _Fast, table: str, sql: str, names: list[str]
) -> pl.DataFrame | None:
    """`sql` (all `table`'s rows, integer columns) read by `fast.workers` processes, one rowid
    range each (this process reads the first), concatenated in rowid order: the same frame as
    the serial read, whose full scan also returns rows in rowid order. None when the table is
    small (a worker costs ~0.15 s to start), has no rowid (WITHOUT ROWID), the driver refused the
    cells, or workers are unavailable here (no room for their files, no process could start): the
    caller's serial paths then decide, exactly as without workers. MalformedInput when a worker
    failed otherwise.
    """
    if fast.workers < 2:
        return None
    alias = _sqlite_parallel.rowid_alias(table_columns(con, table))
    if alias is None:
        return None
    try:
        # Two statements: SQLite answers a lone min()/max() of the rowid from the b-tree's ends,
        # but `SELECT min(rowid), max(rowid)` scans the whole table.
        lo = con.execute(f"SELECT min({alias}) FROM {_q(table)}").fetchone()[0]
        hi = con.execute(f"SELECT max({alias}) FROM {_q(table)}").fetchone()[0]
    except sqlite3.OperationalError:  # WITHOUT ROWID table: no such column
        return None
    # The rowid span bounds the row count from above without a scan; nsys writes dense rowids.
    if lo is None or hi - lo + 1 < PARALLEL_MIN_ROWS:
        return None
    ranges = _sqlite_parallel.split_ranges(lo, hi, fast.workers, head_start=_LOCAL_HEAD_START)

    def local_read(range_sql: str) -> Any:
        import adbc_driver_manager
        import pyarrow as pa

        try:
            return fast.con.read(range_sql, _BATCH)
        except (adbc_driver_manager.Error, pa.ArrowException, OSError) as e:
            raise _sqlite_parallel.DriverRefused(str(e)) from None

    try:
        # This process reads the first range itself (ADBC releases the GIL) while workers read
        # the others.
        parts = _sqlite_parallel.read_ranges(
            fast.path,
            sql,
            alias,
            ranges,
            batch_rows=_BATCH,
            local_read=local_read,
            scratch_bytes=(hi - ranges[0][1]) * len(names) * 8,
        )
    except (_sqlite_parallel.DriverRefused, _sqlite_parallel.Unavailable):
        return None
    except _sqlite_parallel.WorkerFailed as e:
        raise MalformedInput(f"parallel read failed: {e}", table=table) from None
    frames = []
    for part in parts:
        df = pl.from_arrow(part, rechunk=False)
        if not isinstance(df, pl.DataFrame) or df.width != len(names):
            return None
        df.columns = names
        # A range whose inference batch is all NULL gets Null columns (formats.md: nullable ids).
        if not all(dt == pl.Int64 or dt == pl.Null for dt in df.dtypes):
            return None
        frames.append(df.cast(pl.Int64))
    return pl.concat(frames, how="vertical", rechunk=False)


class _AdbcConnection:
    """A read-only ADBC SQLite connection through `adbc_driver_manager`'s low-level API.

    Not the DB-API module (`adbc_driver_sqlite.dbapi`): it imports pandas and pyarrow.dataset,
    ~0.35 s and ~90 MB for nothing this reader uses.
    """

    def __init__(self, uri: str) -> None:
        import adbc_driver_manager
        import adbc_driver_sqlite

        self._db = adbc_driver_sqlite.connect(uri)
        try:
            self._con = adbc_driver_manager.AdbcConnection(self._db)
        except BaseException:
            self._db.close()
            raise

    def read(self, sql: str, batch_rows: int) -> Any:
        """The whole result of `sql` as a pyarrow Table."""
        import adbc_driver_manager
        import pyarrow as pa

        with adbc_driver_manager.AdbcStatement(self._con) as stmt:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
            stmt.set_sql_query(sql)
            handle, _ = stmt.execute_query()
            return pa.RecordBatchReader._import_from_c(handle.address).read_all()

    def close(self) -> None:
        self._con.close()
        self._db.close()


def _adbc_connect(path: PathLike, engine: str) -> _AdbcConnection | None:
    """A read-only ADBC SQLite connection, or None for the stdlib engine.

    `adbc-driver-sqlite` (optional) reads rows into Arrow arrays in C, several times faster than
    Python's row-at-a-time sqlite3 API. Opened with the same `mode=ro` URI: writes through it fail
    with 'attempt to write a readonly database'.
    """
    if engine == "sqlite3":
        return None
    try:
        import adbc_driver_sqlite  # noqa: F401
    except ImportError:
        if engine == "adbc":
            raise TraceanalyzeError(
                "engine='adbc' needs the adbc-driver-sqlite package", path=path
            ) from None
        return None
    return _AdbcConnection(Path(path).resolve().as_uri() + "?mode=ro")


def _fetch_adbc(fast: _AdbcConnection, sql: str, names: list[str]) -> pl.DataFrame | None:
    """Integer columns via ADBC; None when the driver or the cells disagree (mixed types, …), so
    the caller's strict stdlib path decides what is wrong with the table."""
    import adbc_driver_manager
    import pyarrow as pa

    try:
        # Big record batches: the driver's default (1,024 rows) leaves thousands of chunks.
        df = pl.from_arrow(fast.read(sql, _BATCH * 4))
        if not isinstance(df, pl.DataFrame):
            return None
        df.columns = names
        ok = all(dt == pl.Int64 or dt == pl.Null for dt in df.dtypes)
        return df.cast(pl.Int64) if ok else None
    except (adbc_driver_manager.Error, pa.ArrowException, OSError, pl.exceptions.PolarsError):
        # A type change after the driver's inference batch arrives through the C stream
        # interface as OSError ('[SQLite] Type mismatch in column …').
        return None


def _rows_to_frame(
    rows: list[tuple[object, ...]],
    names: list[str],
    schema: Mapping[str, pl.DataType],
    all_int: bool,
    table: str,
) -> pl.DataFrame:
    if all_int:
        # Without a dtype, numpy infers int64 only when every cell is an integer; a NULL, REAL or
        # TEXT cell gives object/float/str, and the strict constructor below takes the batch.
        mat = np.array(rows)
        if mat.dtype == np.int64 and mat.ndim == 2:
            return pl.DataFrame({n: mat[:, i] for i, n in enumerate(names)})
    # Let polars infer each column's type from every cell, then check it: a schema-typed
    # constructor would silently truncate a REAL 2.5 in an integer column to 2.
    try:
        df = pl.DataFrame(rows, schema=names, orient="row", infer_schema_length=None)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError) as e:
        raise MalformedInput(f"cells of mixed types: {e}", table=table) from None
    for n in names:
        got, want = df.schema[n], schema[n]
        widening = want == pl.Float64 and got == pl.Int64  # GPU_METRICS values are INTEGER
        if got != want and got != pl.Null and want != pl.String and not widening:
            raise MalformedInput(f"{got} cells where {want} is expected", table=table, column=n)
    return df.cast(pl.Schema(schema))


def _meta(con: sqlite3.Connection, names: set[str]) -> dict[str, str]:
    """EXPORT_PRODUCT_VERSION / EXPORT_SCHEMA_VERSION, from whichever metadata table exists.

    Only these keys are queried: the metadata tables also hold host, user and paths.
    """
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if t in names and {"name", "value"} <= set(table_columns(con, t)):
            rows = con.execute(
                f"SELECT name, value FROM {t} WHERE name IN "
                "('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION')"
            ).fetchall()
            return {str(k): str(v) for k, v in rows if v is not None}
    return {}


def schema_era(path: PathLike) -> tuple[str | None, str | None]:
    """(product version, schema version) as the export states them; None where it does not."""
    con = connect_readonly(path)
    try:
        m = _meta(con, sqlite_tables(con))
    finally:
        con.close()
    return m.get("EXPORT_PRODUCT_VERSION"), m.get("EXPORT_SCHEMA_VERSION")


def _strings(con: sqlite3.Connection, names: set[str]) -> pl.DataFrame:
    """StringIds as (id, value); values holding a NUL byte (environment blocks) become null."""
    schema = {"id": pl.Int64(), "value": pl.String()}
    if "StringIds" not in names:
        return pl.DataFrame(schema=schema)
    df = _fetch(con, "StringIds", {"id": "id", "value": "value"}, schema)
    return df.with_columns(_drop_nul(pl.col("value")))


def _drop_nul(e: pl.Expr) -> pl.Expr:
    # NUL-separated KEY=VALUE blocks are environments (formats.md §3.2): never emitted.
    # (`when(keep).then(e)` keeps e's name; a null literal in `then` would rename the column.)
    return pl.when(~e.str.contains("\x00", literal=True)).then(e)


def _resolve(ids: pl.Expr, strings: pl.DataFrame) -> pl.Expr:
    return ids.replace_strict(strings["id"], strings["value"], default=None, return_dtype=pl.String)


def _warn_dropped(frame: pl.DataFrame, id_col: str, strings_raw: set[int], what: str) -> None:
    if strings_raw and frame.height:
        n = frame.filter(pl.col(id_col).is_in(list(strings_raw))).height
        if n:
            warn(
                f"nsys_sqlite: {n} {what} named by a StringIds entry holding NUL bytes "
                "(an environment block); their names are left null"
            )


def _warn_unresolved(
    frame: pl.DataFrame, id_col: str, strings: pl.DataFrame, what: str, column: str
) -> None:
    """Warn with the count of rows whose StringIds id names no StringIds row (their name is
    left null): a damaged or hand-edited export, never guessed."""
    if not frame.height:
        return
    ids = pl.col(id_col)
    n = frame.filter(ids.is_not_null() & ~ids.is_in(strings["id"].implode())).height
    if n:
        warn(
            f"nsys_sqlite: {n} {what} whose {column} id is not in StringIds; "
            "their names are left null"
        )


def _pid(col: str) -> pl.Expr:
    # globalPid/globalTid pack (vm, pid, tid): pid = (g >> 24) & 0xFFFFFF (formats.md §3.2).
    return ((pl.col(col) // (1 << 24)) % (1 << 24)).alias("process_id")


def _tid(col: str) -> pl.Expr:
    return (pl.col(col) % (1 << 24)).alias("thread_id")


# --- enums ------------------------------------------------------------------------------------

_ENDPOINT = {"HOST": "H", "DEVICE": "D", "ARRAY": "A", "PEER": "P"}
_COPY_RE = re.compile(r"(H|D|A|P)TO(H|D|A|P)$")


def _copy_label(name: str | None, label: str | None) -> str | None:
    """'CUDA_MEMCPY_KIND_HTOD' or 'Host-to-Device' → 'HtoD'; 'Unified …' keeps its prefix."""
    for text in (name, label):
        if not text:
            continue
        t = text.upper()
        for word, letter in _ENDPOINT.items():
            t = t.replace(word, letter)
        t = re.sub(r"[^A-Z]", "", t)
        if t.endswith("UNKNOWN"):
            return None
        m = _COPY_RE.search(t)
        if m:
            base = f"{m.group(1)}to{m.group(2)}"
            return f"Unified {base}" if ("UVM" in t or "UNIFIED" in t) else base
    return label or name


def _mem_label(name: str | None, label: str | None) -> str | None:
    """'CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC' or 'Device Static' → 'Device Static'."""
    for text in (label, name):
        if not text:
            continue
        t = re.sub(r"[^A-Z]", "", text.upper())
        if t.endswith("UNKNOWN"):
            return None
        for key in sorted(_MEM_KINDS, key=len, reverse=True):
            if t.endswith(key):
                return _MEM_KINDS[key]
    return label or name


def _class_label(name: str | None, label: str | None) -> str | None:
    """'TRACE_PROCESS_EVENT_CUDA_DRIVER' or 'CUDA driver' → 'driver'; CUDA runtime → 'runtime';
    CUDA backtrace → 'backtrace'; any other class keeps its label text."""
    for text in (name, label):
        t = re.sub(r"[^A-Z]", "", (text or "").upper())
        # "CUDA EGL driver" (CUDAEGLDRIVER) and "OSRT runtime" do not match.
        for key, api in (("CUDARUNTIME", "runtime"), ("CUDADRIVER", "driver")):
            if t.endswith(key):
                return api
        if t.endswith("CUDABACKTRACE"):
            return "backtrace"
    return label or name


def _enum(
    con: sqlite3.Connection,
    names: set[str],
    table: str,
    fallback: dict[int, str | None],
    label_fn: Callable[[str | None, str | None], str | None],
) -> dict[int, str | None]:
    if table not in names:
        return dict(fallback)
    cols = set(table_columns(con, table))
    if "id" not in cols:
        return dict(fallback)
    sel = ", ".join(c if c in cols else "NULL" for c in ("id", "name", "label"))
    out: dict[int, str | None] = {}
    for i, n, lab in con.execute(f"SELECT {sel} FROM {table}").fetchall():
        if type(i) is not int:
            raise MalformedInput(f"enum id {i!r} is not an integer", table=table, column="id")
        out[i] = label_fn(_enum_text(n), _enum_text(lab))
    return out


def _enum_text(v: object) -> str | None:
    """An ENUM_* name or label cell as text: a BLOB (a damaged export) is decoded leniently."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _label(col: pl.Expr, mapping: dict[int, str | None], alias: str) -> pl.Expr:
    keys = list(mapping)
    return col.replace_strict(
        keys, [mapping[k] for k in keys], default=None, return_dtype=pl.String
    ).alias(alias)


# --- tables -----------------------------------------------------------------------------------

_I = pl.Int64()
_S = pl.String()

_KERNEL_COLS = {
    "start_ns": "start",
    "end_ns": "end",
    "device_id": "deviceId",
    "context_id": "contextId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
    "name_id": "demangledName",
    "short_id": "shortName",
    "mangled_id": "mangledName",
    "registers_per_thread": "registersPerThread",
    "grid_x": "gridX",
    "grid_y": "gridY",
    "grid_z": "gridZ",
    "block_x": "blockX",
    "block_y": "blockY",
    "block_z": "blockZ",
    "static_smem_bytes": "staticSharedMemory",
    "dynamic_smem_bytes": "dynamicSharedMemory",
}


def _kernels(
    con: sqlite3.Connection,
    names: set[str],
    strings: pl.DataFrame,
    bad_ids: set[int],
    fast: _Fast | None,
) -> pl.DataFrame | None:
    if KERNEL not in names:
        return None
    df = _fetch(con, KERNEL, _KERNEL_COLS, dict.fromkeys(_KERNEL_COLS, _I), fast=fast)
    check_times(df, path=None, table=KERNEL)
    for col in ("name_id", "short_id", "mangled_id"):
        _warn_dropped(df, col, bad_ids, f"kernels' {col.removesuffix('_id')}s")
        _warn_unresolved(df, col, strings, "kernels", _KERNEL_COLS[col])
    return df.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("kernel_id"),
        _pid("global_pid"),
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
        _resolve(pl.col("name_id"), strings).alias("name"),
        _resolve(pl.col("short_id"), strings).alias("short_name"),
        _resolve(pl.col("mangled_id"), strings).alias("mangled_name"),
        "start_ns",
        "end_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
        *[c for c in _KERNEL_COLS if c.startswith(("grid_", "block_"))],
        "registers_per_thread",
        "static_smem_bytes",
        "dynamic_smem_bytes",
    )


_COPY_COMMON = {
    "start_ns": "start",
    "end_ns": "end",
    "device_id": "deviceId",
    "context_id": "contextId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
    "size_bytes": "bytes",
}


def _memcpy(con: sqlite3.Connection, names: set[str], fast: _Fast | None) -> pl.DataFrame | None:
    parts = []
    mem_kinds = _enum(con, names, "ENUM_CUDA_MEM_KIND", MEM_KIND_2X, _mem_label)
    head: list[pl.Expr | str] = [
        _pid("global_pid"),
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
    ]
    tail: list[pl.Expr | str] = [
        "size_bytes",
        "start_ns",
        "end_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
    ]
    if MEMCPY in names:
        copy_kinds = _enum(con, names, "ENUM_CUDA_MEMCPY_OPER", COPY_KIND_2X, _copy_label)
        cols = {**_COPY_COMMON, "copy_kind": "copyKind", "src": "srcKind", "dst": "dstKind"}
        df = _fetch(con, MEMCPY, cols, dict.fromkeys(cols, _I), fast=fast)
        check_times(df, path=None, table=MEMCPY)
        parts.append(
            df.select(
                *head,
                _label(pl.col("copy_kind"), copy_kinds, "kind"),
                _label(pl.col("src"), mem_kinds, "src_kind"),
                _label(pl.col("dst"), mem_kinds, "dst_kind"),
                *tail,
            )
        )
    if MEMSET in names:
        cols = {**_COPY_COMMON, "mem_kind": "memKind"}
        df = _fetch(con, MEMSET, cols, dict.fromkeys(cols, _I), fast=fast)
        check_times(df, path=None, table=MEMSET)
        parts.append(
            df.select(
                *head,
                pl.lit("memset", dtype=pl.String).alias("kind"),
                pl.lit(None, dtype=pl.String).alias("src_kind"),
                _label(pl.col("mem_kind"), mem_kinds, "dst_kind"),
                *tail,
            )
        )
    return pl.concat(parts, how="vertical") if parts else None


_API_COLS = {
    "start_ns": "start",
    "end_ns": "end",
    "global_tid": "globalTid",
    "correlation_id": "correlationId",
    "name_id": "nameId",
    "return_code": "returnValue",
    "event_class": "eventClass",
}


def _api_calls(
    con: sqlite3.Connection,
    names: set[str],
    strings: pl.DataFrame,
    bad_ids: set[int],
    fast: _Fast | None,
) -> pl.DataFrame | None:
    parts = []
    classes = _enum(con, names, "ENUM_NSYS_EVENT_CLASS", EVENT_CLASS_2X, _class_label)
    for table, table_api in ((RUNTIME, "runtime"), (DRIVER, "driver")):
        if table not in names:
            continue
        df = _fetch(con, table, _API_COLS, dict.fromkeys(_API_COLS, _I), fast=fast)
        check_times(df, path=None, table=table)
        if "eventClass" in table_columns(con, table):
            df = df.with_columns(_label(pl.col("event_class"), classes, "api"))
            known = pl.col("api").is_in([*_API_LABELS, "backtrace"])
            other = df.filter(~known.fill_null(False))
            if other.height:
                counts = other.group_by("event_class", "api").len().sort("event_class")
                listed = ", ".join(
                    f"{n} of class {c} ({a or 'unknown'})" for c, a, n in counts.iter_rows()
                )
                warn(f"nsys_sqlite: {table} rows of non-CUDA-API event classes dropped: {listed}")
            df = df.filter(pl.col("api").is_in(_API_LABELS))
        else:
            df = df.with_columns(pl.lit(table_api, dtype=pl.String).alias("api"))
        _warn_dropped(df, "name_id", bad_ids, "API calls")
        _warn_unresolved(df, "name_id", strings, f"{table} rows", "nameId")
        parts.append(
            df.select(
                _pid("global_tid"),
                _tid("global_tid"),
                "correlation_id",
                "api",
                _resolve(pl.col("name_id"), strings)
                .str.replace(_API_VERSION_SUFFIX, "")
                .alias("name"),
                "return_code",
                "start_ns",
                "end_ns",
                (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
            )
        )
    return pl.concat(parts, how="vertical") if parts else None


_NVTX_COLS = {
    "start_ns": "start",
    "end_ns": "end",
    "event_type": "eventType",
    "text": "text",
    "global_tid": "globalTid",
    "text_id": "textId",
    "domain_id": "domainId",
}
_NVTX_SCHEMA = {**dict.fromkeys(_NVTX_COLS, _I), "text": _S}


def _markers(
    con: sqlite3.Connection, names: set[str], strings: pl.DataFrame, bad_ids: set[int]
) -> pl.DataFrame | None:
    if NVTX not in names:
        return None
    wanted = (NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE)
    have = set(table_columns(con, NVTX))
    where = f"WHERE eventType IN {wanted}" if "eventType" in have else ""
    df = _fetch(con, NVTX, _NVTX_COLS, _NVTX_SCHEMA, where=where)
    # marks and ranges still open at the end of the capture have no end (formats.md §3.2)
    check_times(df, path=None, table=NVTX, end_nullable=True)
    n_nul = df.filter(pl.col("text").str.contains("\x00", literal=True)).height
    if n_nul:
        warn(f"nsys_sqlite: {n_nul} NVTX texts hold NUL bytes (environment blocks); left null")
    _warn_dropped(df, "text_id", bad_ids, "NVTX events")
    _warn_unresolved(df, "text_id", strings, "NVTX events", "textId")
    df = df.with_columns(
        pl.coalesce(_drop_nul(pl.col("text")), _resolve(pl.col("text_id"), strings)).alias("name")
    )
    domains = (
        df.filter(pl.col("event_type") == NVTX_DOMAIN_CREATE, pl.col("domain_id") != 0)
        .group_by("domain_id")
        .agg(pl.col("name").drop_nulls().first().alias("domain"))
    )
    ev = df.filter(pl.col("event_type").is_in([NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND]))
    ev = ev.join(domains, on="domain_id", how="left", maintain_order="left")
    is_mark = pl.col("event_type") == NVTX_MARK
    end = pl.when(is_mark).then(None).otherwise(pl.col("end_ns"))
    return ev.select(
        _pid("global_tid"),
        _tid("global_tid"),
        "name",
        "domain",
        pl.lit("nvtx", dtype=pl.String).alias("category"),
        "start_ns",
        end.alias("end_ns"),
        (end - pl.col("start_ns")).alias("duration_ns"),
    )


def _uuid(e: pl.Expr) -> pl.Expr:
    # nsys stores bare UUIDs; nvidia-smi/NVML spell them 'GPU-<uuid>'.
    e = pl.when(e.str.strip_chars() == "").then(None).otherwise(e.str.strip_chars())
    return (
        pl.when(e.str.starts_with("GPU-") | e.str.starts_with("MIG-"))
        .then(e)
        .otherwise(pl.lit("GPU-") + e)
    )


def _devices(
    con: sqlite3.Connection, names: set[str], activity_ids: Sequence[pl.Series]
) -> pl.DataFrame:
    info_schema = {
        "device_id": _I,
        "name": _S,
        "uuid": _S,
        "compute_capability": _S,
        "sm_count": _I,
        "memory_bytes": _I,
    }
    gpu = pl.DataFrame(schema={"gpu_id": _I, "cu_device": _I, **info_schema})
    if "TARGET_INFO_GPU" in names:
        cols = {
            "gpu_id": "id",
            "cu_device": "cuDevice",
            "name": "name",
            "uuid": "uuid",
            "major": "computeMajor",
            "minor": "computeMinor",
            "sm_count": "smCount",
            "memory_bytes": "totalMemory",
        }
        sch: dict[str, pl.DataType] = {k: (_S if k in ("name", "uuid") else _I) for k in cols}
        g = _fetch(con, "TARGET_INFO_GPU", cols, sch)
        cc = pl.when(pl.col("major").is_not_null() & pl.col("minor").is_not_null()).then(
            pl.format("{}.{}", "major", "minor")
        )
        gpu = g.select(
            "gpu_id",
            "cu_device",
            pl.col("cu_device").alias("device_id"),
            "name",
            _uuid(pl.col("uuid")).alias("uuid"),
            cc.alias("compute_capability"),
            "sm_count",
            "memory_bytes",
        )
    rows = [gpu.drop("gpu_id", "cu_device")]
    if "TARGET_INFO_CUDA_DEVICE" in names:
        cols = {
            "gpu_id": "gpuId",
            "device_id": "cudaId",
            "uuid": "uuid",
            "sms": "numMultiprocessors",
        }
        sch_cd: dict[str, pl.DataType] = {k: (_S if k == "uuid" else _I) for k in cols}
        cd = _fetch(con, "TARGET_INFO_CUDA_DEVICE", cols, sch_cd)
        cd = cd.with_columns(_uuid(pl.col("uuid")).alias("uuid"))
        joined = cd.join(gpu.drop("device_id"), on="gpu_id", how="left", suffix="_gpu")
        rows.insert(
            0,
            joined.select(
                "device_id",
                "name",
                pl.coalesce("uuid", "uuid_gpu").alias("uuid"),
                "compute_capability",
                pl.coalesce("sm_count", "sms").alias("sm_count"),
                "memory_bytes",
            ),
        )
    seen = [s.drop_nulls().unique() for s in activity_ids if s.len()]
    if seen:
        ids = pl.concat([s.cast(_I) for s in seen]).unique().sort()
        rows.append(
            pl.DataFrame({"device_id": ids}).with_columns(
                [
                    pl.lit(None, dtype=dt).alias(k)
                    for k, dt in info_schema.items()
                    if k != "device_id"
                ]
            )
        )
    allrows = pl.concat(rows, how="vertical").filter(pl.col("device_id").is_not_null())
    conflicts = (
        allrows.filter(pl.col("uuid").is_not_null())
        .group_by("device_id")
        .agg(pl.col("uuid").n_unique().alias("n"))
        .filter(pl.col("n") > 1)
    )
    if conflicts.height:
        warn(
            "nsys_sqlite: device ordinals "
            f"{sorted(conflicts['device_id'].to_list())} map to several GPUs (processes with "
            "different CUDA_VISIBLE_DEVICES); the first description is kept"
        )
    # Deduplicate per device_id, preferring the most complete description (info rows first).
    return (
        allrows.with_row_index("_order")
        .with_columns(pl.sum_horizontal(pl.all().exclude("_order").is_null()).alias("_nulls"))
        .sort("device_id", "_nulls", "_order")
        .unique("device_id", keep="first", maintain_order=True)
        .drop("_order", "_nulls")
        .with_columns(pl.lit("NVIDIA").alias("vendor"))
    )


_UNIT_RE = re.compile(r"\[([^\[\]]*)\]\s*$")


def _metric_unit(name: str | None) -> str | None:
    if not name:
        return None
    m = _UNIT_RE.search(name)
    if m:
        inner = m.group(1).strip()
        # nsys spells throughput metrics '… [Throughput %]'; the unit is the percent sign.
        return "%" if "%" in inner else (inner or None)
    return "%" if "%" in name else None


def _gpu_metrics(con: sqlite3.Connection, names: set[str]) -> pl.DataFrame | None:
    if "GPU_METRICS" not in names or "TARGET_INFO_GPU_METRICS" not in names:
        if "GPU_METRICS" in names:
            warn("nsys_sqlite: GPU_METRICS without TARGET_INFO_GPU_METRICS; metric names unknown")
        return None
    info_cols = {"type_id": "typeId", "metric_id": "metricId", "metric_name": "metricName"}
    info = _fetch(
        con,
        "TARGET_INFO_GPU_METRICS",
        info_cols,
        {"type_id": _I, "metric_id": _I, "metric_name": _S},
    ).unique(["type_id", "metric_id"], keep="first", maintain_order=True)
    info = info.with_columns(
        pl.col("metric_name").map_elements(_metric_unit, return_dtype=pl.String).alias("unit")
    )
    cols = {
        "timestamp_ns": "timestamp",
        "type_id": "typeId",
        "metric_id": "metricId",
        "value": "value",
    }
    m = _fetch(
        con,
        "GPU_METRICS",
        cols,
        {"timestamp_ns": _I, "type_id": _I, "metric_id": _I, "value": pl.Float64()},
    )
    return m.join(info, on=["type_id", "metric_id"], how="left", maintain_order="left").select(
        (pl.col("type_id") % 256).alias("device_id"),
        "timestamp_ns",
        "metric_name",
        "unit",
        "value",
    )


def _sources(con: sqlite3.Connection, names: set[str]) -> pl.DataFrame:
    meta = _meta(con, names)
    origin = None
    t = "TARGET_INFO_SESSION_START_TIME"
    if t in names and "utcEpochNs" in table_columns(con, t):
        row = con.execute(f"SELECT utcEpochNs FROM {t} LIMIT 1").fetchone()
        if row is not None and row[0] is not None:
            origin = int(row[0])
    return pl.DataFrame(
        {
            "tool": ["nsys"],
            "tool_version": [meta.get("EXPORT_PRODUCT_VERSION")],
            "time_origin_epoch_ns": [origin],
        },
        schema={"tool": _S, "tool_version": _S, "time_origin_epoch_ns": _I},
    )


# --- entry point ------------------------------------------------------------------------------


@reader_entry("nsys_sqlite")
def read_nsys_sqlite(
    path: PathLike,
    *,
    engine: Literal["auto", "sqlite3", "adbc"] = "auto",
    workers: int | None = None,
) -> Tables:
    """Read an Nsight Systems SQLite export (schema 2.x or 3.x) into normalized tables.

    `engine`: how the big integer tables (kernels, copies, API calls) are read. "auto" uses
    `adbc-driver-sqlite` when it is installed, else Python's sqlite3; both give identical tables.
    `workers` (ADBC only): how many processes may read one table of ≥ `PARALLEL_MIN_ROWS` rows
    by rowid range; None is min(CPUs, 4), 1 reads everything in this process. The result is the
    same either way.
    """
    con = connect_readonly(path)
    fast = None
    try:
        names = sqlite_tables(con)
        if "StringIds" not in names:
            raise MalformedInput("no StringIds table: not an Nsight Systems export", path=path)
        if not _has_nsys_tables(names):
            raise MalformedInput(
                "no Nsight Systems table (CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS, TARGET_INFO_*, "
                "ENUM_NSYS_*, GPU_METRICS): not an Nsight Systems export",
                path=path,
            )
        adbc_con = _adbc_connect(path, engine)
        if adbc_con is not None:
            n = _sqlite_parallel.default_workers() if workers is None else max(1, workers)
            fast = _Fast(Path(path), adbc_con, n)
        strings = _strings(con, names)
        raw_nul = con.execute(
            "SELECT id FROM StringIds WHERE instr(CAST(value AS BLOB), x'00') > 0"
        ).fetchall()
        bad_ids = {int(r[0]) for r in raw_nul}
        kernels = _kernels(con, names, strings, bad_ids, fast)
        memcpy = _memcpy(con, names, fast)
        activity = [f["device_id"] for f in (kernels, memcpy) if f is not None]
        frames = {
            "sources": _sources(con, names),
            "devices": _devices(con, names, activity),
            "kernels": kernels,
            "memcpy": memcpy,
            "api_calls": _api_calls(con, names, strings, bad_ids, fast),
            "markers": _markers(con, names, strings, bad_ids),
            "gpu_metrics": _gpu_metrics(con, names),
        }
    except MalformedInput as e:
        if e.path is None:  # raised below the entry point, which alone knows the path
            e.path = str(path)
        raise
    except sqlite3.DatabaseError as e:
        # a damaged page is found only when a query reaches it
        raise MalformedInput(f"cannot read the SQLite database ({e})", path=path) from None
    except bad_input_errors() as e:  # undecodable error text (a corrupt schema), …
        first = str(e).strip().split("\n", 1)[0]
        raise MalformedInput(f"unreadable export: {type(e).__name__}: {first}", path=path) from e
    finally:
        if fast is not None:
            fast.con.close()
        con.close()
    return Tables.build(**{k: v for k, v in frames.items() if v is not None})
