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
time rule shared with the nvprof reader (`common.core.check_times`): a NULL start is an error,
a NULL end a warning (end and duration null), an `end - start` that overflows int64 an error. A
name id with no `StringIds` row leaves the name null with a warning giving the count.

Tables:

* `kernels` ← `CUPTI_ACTIVITY_KIND_KERNEL`. The three name columns are `StringIds` ids:
  `demangledName` → `name`, `shortName` → `short_name`, `mangledName` → `mangled_name`.
  `process_id` = `(globalPid >> 24) & 0xFFFFFF` (formats.md §3.2). `kernel_id` is the row's index
  in table (rowid) order. `graphId`/`graphNodeId` (exports with `--cuda-graph-trace=node`; 0 or
  absent: none) → `graph_id`/`graph_node_id`, a cloned node mapped to the captured one through
  `CUDA_GRAPH_NODE_EVENTS.originalGraphNodeId`; `graph_launch` where either is set (kernels,
  copies and memsets).
* `graph_replays` ← `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`, the whole-graph rows of
  `--cuda-graph-trace=graph` (nsys's default; `META_DATA_CAPTURE`'s
  `CUDA_GRAPH_TRACE_OPTIONS:MODE` is `Graph`): one row per replay, kept as such (no per-node
  row exists in this mode, and none is made up). `start`/`end` are required (the kernel
  table's time rule); `deviceId`, `contextId`, `streamId`, `correlationId` (the graph launch
  call's: join to `api_calls` on (`process_id`, `correlation_id`)), `globalPid`, `graphId`,
  `graphExecId` are optional (`greenContextId` is not kept). `replay_id` is the row's index in
  table order. A row with start = end = 0 (CUPTI could not time it) has null times, with a
  warning giving the count.
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
  to the session start, as in the file); `rank`, `world_size`, `rank_from` where an NVTX thread
  name, thread name or process name names one rank (`nsys.ranks`; `MPI Rank 0` in the 2022.2
  MPI sample), only the number kept.

Privacy: nsys exports embed the profiled process's whole environment (`META_DATA_CAPTURE`
`…ENVIRONMENT_VARIABLE` rows), host/user names (`META_DATA_EXPORT`), `TARGET_INFO_SYSTEM_ENV`, and
NUL-separated `KEY=VALUE` environment blocks inside `StringIds`. Only the two metadata keys above
are read; `META_DATA_CAPTURE` and `TARGET_INFO_SYSTEM_ENV` are never queried; a `StringIds` value
or NVTX text containing a NUL byte is never emitted (it becomes null, with a warning).

Speed: the kernel, copy and API tables are read as integer columns only, and names are resolved
afterwards by a gather from the small `StringIds` frame, so each distinct string is decoded once
however many launches share it (the fetching is `common.sqlite`'s, shared with nvprof_sqlite; the
tables are built in `nsys.tables`). The integers come through `adbc-driver-sqlite` when it is
installed (Arrow arrays built in C, opened with the same read-only URI; `engine="auto"`), else
through Python's sqlite3 in `fetchmany` batches turned into numpy matrices. Decoding is ~80 % of
the time and single-threaded per statement, so a table of ≥ `PARALLEL_MIN_ROWS` rowids is cut
into min(CPUs, 4) rowid ranges: this process reads the first, worker processes
(`common.sqlite_parallel`, plain subprocesses running only a checked read-only SELECT) read the
others and hand back Arrow files that are memory-mapped, and the parts are concatenated in rowid
order, the order of the serial scan. All paths give identical tables (tested).
`benchmarks/bench_nsys_sqlite.py` measures them (5 M kernels on 2 cores: ~1.0 M rows/s to
Parquet with 2 ranges, ~0.63 M rows/s in one process).

Streaming (`stream_nsys_sqlite`, what `traceanalyze ingest` uses): the same tables, a batch of
each source table at a time, in this process (ADBC record batches of `_STREAM_BATCH` rows),
through the same row transforms (`nsys.rows`, `nsys.stream`). Table order is output order,
so nothing is sorted or spilled; name ids stay integers until a batch's names are gathered from
StringIds, and the gathered strings are views of StringIds' buffers until Parquet writes them
dictionary-encoded. `benchmarks/bench_ingest_memory_nsys.py`: 2.5-10 M kernels ingest in
~190-200 MB, flat in the input size (docs/scale.md).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common import sqlite as _sqlite
from ..common.core import (
    SQLITE_MAGIC,
    PathLike,
    bad_input_errors,
    head_bytes,
    reader_entry,
)
from ..common.sqlite import connect_readonly, sqlite_tables
from ..common.stream import stream_entry
from .stream import stream_tables
from .tables import (
    KERNEL,
    _api_calls,
    _devices,
    _gpu_metrics,
    _graph_replays,
    _kernels,
    _markers,
    _memcpy,
    _meta,
    _sources,
    _strings,
)

# Tables only an nsys export has: a file with `StringIds` and a metadata table but none of these
# (another program's database) is not claimed, and not read as an empty export.
_NSYS_FAMILIES = ("CUPTI_ACTIVITY_KIND_", "NVTX_", "TARGET_INFO_", "ENUM_NSYS_", "GPU_METRICS")
# Read by `read_nsys_sqlite` at each call (tests shrink them): the engine's batch, the smallest
# table split over worker processes, and this process's head start (see `common.sqlite`).
_BATCH = _sqlite.BATCH
PARALLEL_MIN_ROWS = _sqlite.PARALLEL_MIN_ROWS
_LOCAL_HEAD_START = _sqlite.LOCAL_HEAD_START
# The stream's ADBC record batch: 16k rows of kernels are ~2.5 MB of integers (the driver's
# buffers and the frames made from them grow with it, by ~25 MB at 64k rows).
_STREAM_BATCH = 1 << 14


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


def schema_era(path: PathLike) -> tuple[str | None, str | None]:
    """(product version, schema version) as the export states them; None where it does not."""
    con = connect_readonly(path)
    try:
        m = _meta(con, sqlite_tables(con))
    finally:
        con.close()
    return m.get("EXPORT_PRODUCT_VERSION"), m.get("EXPORT_SCHEMA_VERSION")


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
    with _opened(path, engine, workers) as x:
        con, names, fast = x.con, x.names, x.fast
        kernels = _kernels(con, names, x.strings, x.bad_ids, fast)
        memcpy = _memcpy(con, names, fast)
        replays = _graph_replays(con, names, fast)
        activity = [f["device_id"] for f in (kernels, memcpy, replays) if f is not None]
        frames = {
            "sources": _sources(con, names),
            "devices": _devices(con, names, activity),
            "kernels": kernels,
            "memcpy": memcpy,
            "graph_replays": replays,
            "api_calls": _api_calls(con, names, x.strings, x.bad_ids, fast),
            "markers": _markers(con, names, x.strings, x.bad_ids),
            "gpu_metrics": _gpu_metrics(con, names),
        }
    return Tables.build(**{k: v for k, v in frames.items() if v is not None})


@stream_entry("nsys_sqlite")
def stream_nsys_sqlite(
    path: PathLike,
    *,
    workdir: Path,
    engine: Literal["auto", "sqlite3", "adbc"] = "auto",
    workers: int | None = None,
) -> Iterator[tuple[str, pl.DataFrame]]:
    """`read_nsys_sqlite` as (table, chunk) pairs for `ingest`, one batch of a source table at
    a time (`_STREAM_BATCH` rows through ADBC, `_BATCH` through sqlite3): the chunks of each
    table, concatenated, are its tables (rows, order, `kernel_id`s), and bad input raises the
    same errors. Memory is one batch plus the small tables (StringIds, enums, devices),
    whatever the file's size.

    `engine` as `read_nsys_sqlite`'s (ADBC record batches, else sqlite3 `fetchmany`). Every
    table is read in this process: `workers` is accepted (the options are `read`'s) but no
    worker process is started, since each costs ~60 MB of its own, more than the memory bound
    leaves on a small file. `workdir` is not needed: nothing is sorted (table order is the
    output order)."""
    del workers, workdir  # see the docstring
    with _opened(path, engine, 1, batch_rows=_STREAM_BATCH) as x:
        yield from stream_tables(x.con, x.names, x.strings, x.bad_ids, x.fast, _BATCH)


@dataclass
class _Export:
    con: sqlite3.Connection
    names: set[str]
    fast: _sqlite.Fast | None
    strings: pl.DataFrame
    bad_ids: set[int]


@contextlib.contextmanager
def _opened(
    path: PathLike, engine: str, workers: int | None, *, batch_rows: int | None = None
) -> Iterator[_Export]:
    """The export opened and checked, with its StringIds; the errors of a damaged file raised
    while the body reads it become MalformedInput naming it (for `read` and the stream)."""
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
        fast = _sqlite.open_fast(
            path,
            engine,
            workers,
            batch_rows=_BATCH if batch_rows is None else batch_rows,
            parallel_min_rows=PARALLEL_MIN_ROWS,
            local_head_start=_LOCAL_HEAD_START,
        )
        strings = _strings(con, names)
        raw_nul = con.execute(
            "SELECT id FROM StringIds WHERE instr(CAST(value AS BLOB), x'00') > 0"
        ).fetchall()
        bad_ids = {int(r[0]) for r in raw_nul}
        yield _Export(con, names, fast, strings, bad_ids)
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
