"""SQLite fetching shared by the two SQLite readers (nsys_sqlite, nvprof_sqlite).

`connect_readonly` opens the file (read-only URI, an authorizer, limits; `sqlite_damage` says
why one cannot be opened), and this module turns SELECTs on it into typed polars frames:

* `fetch`: named columns of one table, absent optional columns as nulls. All-integer selections
  go through ADBC when an engine (`Fast`) is given: split over worker processes by rowid range
  when the table is big (`common.sqlite_parallel`, plain subprocesses running only a checked
  read-only SELECT), else on the in-process ADBC connection; otherwise Python's sqlite3 in
  `fetchmany` batches turned into numpy matrices, with polars' strict row constructor deciding (and
  naming) bad cells. All paths give identical frames (tests/test_nsys_sqlite.py).
* `query_frame`: one query's rows into a frame of a given schema (the nvprof reader's queries,
  which join and UNION tables in SQL).

The worker side of the parallel reads stays in `common/sqlite_parallel.py`: each worker runs that
file as a script (`python -P`) that imports only the standard library, pyarrow and the ADBC driver,
so it cannot live in a module that imports polars.

`adbc-driver-sqlite` is a required dependency (pyproject.toml) and `engine="auto"` uses it; the
sqlite3 path is kept as the documented degraded mode (`engine="sqlite3"`, or the package
missing from a hand-made environment) and the strict decider for cells ADBC refuses.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ...errors import MalformedInput, TraceanalyzeError
from . import sqlite_parallel as _sqlite_parallel
from .core import (
    SQLITE_MAGIC,
    PathLike,
    is_sqlite,
    refuse_generated,
    require_columns,
    table_columns,
)

BATCH = 1 << 16
# Tables with at least this many rows (by rowid span) are split over worker processes.
PARALLEL_MIN_ROWS = 500_000
# Rows this process reads beyond a worker's share: what one core decodes (~0.8 M rows/s through
# ADBC) while a worker starts (~0.2 s), so that both finish together (measured on 2 cores).
LOCAL_HEAD_START = 160_000


def q(name: str) -> str:
    """An SQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


class AdbcConnection:
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

    def read(self, sql: str, batch_rows: int) -> pl.DataFrame:
        """The whole result of `sql`, one chunk per record batch.

        polars takes the driver's Arrow C stream through the PyCapsule interface
        (`__arrow_c_stream__`), not through pyarrow: reading a small export then imports neither
        pyarrow nor numpy (~70 ms, and numpy's OpenBLAS threads spin ~0.1 s of CPU). polars
        releases the GIL while the driver decodes, which `_fetch_parallel`'s local read needs.
        A cell the driver refuses after its inference batch raises polars' ComputeError.
        """
        import adbc_driver_manager

        with adbc_driver_manager.AdbcStatement(self._con) as stmt:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
            stmt.set_sql_query(sql)
            handle, _ = stmt.execute_query()
            return pl.DataFrame(handle)

    def batches(self, sql: str, batch_rows: int) -> Iterator[Any]:
        """The result of `sql` one pyarrow RecordBatch (of `batch_rows` rows) at a time: the
        statement stays open between batches, so only one batch is held."""
        import adbc_driver_manager
        import pyarrow as pa

        with adbc_driver_manager.AdbcStatement(self._con) as stmt:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
            stmt.set_sql_query(sql)
            handle, _ = stmt.execute_query()
            reader = pa.RecordBatchReader._import_from_c(handle.address)
            try:
                yield from reader
            finally:
                reader.close()

    def close(self) -> None:
        self._con.close()
        self._db.close()


def adbc_connect(path: PathLike, engine: str) -> AdbcConnection | None:
    """A read-only ADBC SQLite connection, or None for the stdlib engine.

    `adbc-driver-sqlite` (required, but its absence degrades to sqlite3: see the module
    docstring) reads rows into Arrow arrays in C, several times faster than Python's
    row-at-a-time sqlite3 API. Opened with the same `mode=ro` URI: writes through it fail
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
    return AdbcConnection(Path(path).resolve().as_uri() + "?mode=ro")


def _fetch_adbc(
    fast: AdbcConnection, sql: str, names: list[str], batch_rows: int
) -> pl.DataFrame | None:
    """Integer columns via ADBC; None when the driver or the cells disagree (mixed types, …), so
    the caller's strict stdlib path decides what is wrong with the table."""
    import adbc_driver_manager

    try:
        # Big record batches: the driver's default (1,024 rows) leaves thousands of chunks.
        df = fast.read(sql, batch_rows * 4)
        df.columns = names
        ok = all(dt == pl.Int64 or dt == pl.Null for dt in df.dtypes)
        return df.cast(pl.Int64) if ok else None
    except (adbc_driver_manager.Error, OSError, pl.exceptions.PolarsError):
        # A type change after the driver's inference batch arrives through the C stream as
        # polars' ComputeError ('[SQLite] Type mismatch in column …').
        return None


@dataclass
class Fast:
    """The ADBC engine: the file, its in-process read-only connection, how many worker
    processes a big table may be split over (1: never), and the reader's batch and size
    thresholds (taken from the reader module when it is called, so tests can shrink them)."""

    path: Path
    con: AdbcConnection
    workers: int
    batch_rows: int = BATCH
    parallel_min_rows: int = PARALLEL_MIN_ROWS
    local_head_start: int = LOCAL_HEAD_START


def open_fast(
    path: PathLike,
    engine: str,
    workers: int | None,
    *,
    batch_rows: int = BATCH,
    parallel_min_rows: int = PARALLEL_MIN_ROWS,
    local_head_start: int = LOCAL_HEAD_START,
) -> Fast | None:
    """The ADBC engine for `engine` ("auto", "adbc" or "sqlite3"), or None for sqlite3 alone.
    `workers` None is `common.sqlite_parallel.default_workers()`; the caller closes `fast.con`."""
    adbc_con = adbc_connect(path, engine)
    if adbc_con is None:
        return None
    n = _sqlite_parallel.default_workers() if workers is None else max(1, workers)
    return Fast(Path(path), adbc_con, n, batch_rows, parallel_min_rows, local_head_start)


def fetch(
    con: sqlite3.Connection,
    table: str,
    wanted: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
    *,
    required: Sequence[str] = (),
    where: str = "",
    fast: Fast | None = None,
) -> pl.DataFrame:
    """Columns of `table` by name: {output name: source column}; absent columns become null,
    a missing `required` column raises MissingColumn, a generated one MalformedInput.

    All-integer selections go through ADBC when `fast` is given (Arrow arrays built in C): split
    over worker processes by rowid range when the table is big (`_fetch_parallel`), else on
    `fast`'s in-process connection; otherwise in batches of tuples → one numpy int64 matrix; a
    batch with NULLs or non-integer cells falls back to polars' strict row constructor, which
    raises MalformedInput on bad cells.
    """
    present, out_schema, sql = _selection(con, table, wanted, schema, required, where)
    if not present:
        n = con.execute(f"SELECT count(*) FROM {q(table)} {where}").fetchone()[0]
        return _nulls(wanted, schema, n)
    all_int = all(dt == pl.Int64 for dt in out_schema.values())
    if fast is not None and all_int and not where:
        got = _fetch_parallel(con, fast, table, sql, list(present))
        if got is not None:
            return _add_missing(got, wanted, present, schema)
    if fast is not None and all_int:
        got = _fetch_adbc(fast.con, sql, list(present), fast.batch_rows)
        if got is not None:
            return _add_missing(got, wanted, present, schema)
    batch = fast.batch_rows if fast is not None else BATCH
    parts = list(_strict_batches(con, sql, list(present), out_schema, table, batch))
    frame = (
        pl.concat(parts, how="vertical", rechunk=True) if parts else pl.DataFrame(schema=out_schema)
    )
    return _add_missing(frame, wanted, present, schema)


def _selection(
    con: sqlite3.Connection,
    table: str,
    wanted: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
    required: Sequence[str],
    where: str,
) -> tuple[dict[str, str], dict[str, pl.DataType], str]:
    """What `fetch` and `fetch_batches` read, after their checks (generated columns refused,
    required ones present): {output name: source column} of the columns the table has, their
    schema, and the SELECT of them ('' when there are none)."""
    have = set(table_columns(con, table))
    refuse_generated(con, table, wanted.values(), path=None)
    require_columns(have, required, path=None, table=table)
    present = {out: src for out, src in wanted.items() if src in have}
    cols = ", ".join(q(s) for s in present.values())
    sql = f"SELECT {cols} FROM {q(table)} {where}" if present else ""
    return present, {out: schema[out] for out in present}, sql


def _nulls(wanted: Mapping[str, str], schema: Mapping[str, pl.DataType], n: int) -> pl.DataFrame:
    """`n` rows of nulls: a table that has none of the wanted columns."""
    return pl.DataFrame({o: pl.Series(o, [None] * n, dtype=schema[o]) for o in wanted})


def _strict_batches(
    con: sqlite3.Connection,
    sql: str,
    names: list[str],
    schema: Mapping[str, pl.DataType],
    table: str,
    batch: int,
    skip: int = 0,
) -> Iterator[pl.DataFrame]:
    """`sql`'s rows through Python's sqlite3, `batch` rows per frame (`_rows_to_frame` decides,
    and names, bad cells), without the first `skip` rows. The batches are cut from the first
    row whatever `skip` is, so a bad cell gives the same error as in a whole read."""
    all_int = all(dt == pl.Int64 for dt in schema.values())
    cur = con.execute(sql)
    while rows := cur.fetchmany(batch):
        frame = _rows_to_frame(rows, names, schema, all_int, table)
        if skip >= frame.height:
            skip -= frame.height
            continue
        yield frame.slice(skip) if skip else frame
        skip = 0


def fetch_batches(
    con: sqlite3.Connection,
    table: str,
    wanted: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
    *,
    required: Sequence[str] = (),
    where: str = "",
    fast: Fast | None = None,
    strict_batch: int = BATCH,
) -> Iterator[pl.DataFrame]:
    """`fetch` one batch at a time, in table order: the frames concatenated equal `fetch`'s
    frame, and a bad table raises the same error, but only a batch is held. All-integer
    selections go through `fast`'s in-process connection one record batch (`fast.batch_rows`
    rows) at a time, never worker processes (each costs ~60 MB of its own); the rest, and a
    table whose cells the driver refuses, through Python's sqlite3 in batches of `strict_batch`
    rows (pass the whole read's batch: the same cut gives the same error), read from its first
    row and yielding only the rows not yielded yet."""
    present, out_schema, sql = _selection(con, table, wanted, schema, required, where)
    batch = strict_batch
    if not present:
        n = con.execute(f"SELECT count(*) FROM {q(table)} {where}").fetchone()[0]
        for lo in range(0, n, batch):
            yield _nulls(wanted, schema, min(batch, n - lo))
        return
    names = list(present)
    done = 0
    if fast is not None and all(dt == pl.Int64 for dt in out_schema.values()):
        for frame in _adbc_batches(fast, sql, names, fast.batch_rows):
            if frame is None:
                break  # refused: the strict path below decides
            done += frame.height
            yield _add_missing(frame, wanted, present, schema)
        else:
            return
    for frame in _strict_batches(con, sql, names, out_schema, table, batch, skip=done):
        yield _add_missing(frame, wanted, present, schema)


def _adbc_batches(
    fast: Fast, sql: str, names: list[str], batch: int
) -> Iterator[pl.DataFrame | None]:
    """Integer frames of `sql` through ADBC, one record batch each; a last None when the driver
    refuses a batch or its cells are not all integers (as `_fetch_adbc`)."""
    import adbc_driver_manager
    import pyarrow as pa

    try:
        for rb in fast.con.batches(sql, batch):
            df = pl.from_arrow(rb)
            if not isinstance(df, pl.DataFrame) or df.width != len(names):
                yield None
                return
            df.columns = names
            if not all(dt == pl.Int64 or dt == pl.Null for dt in df.dtypes):
                yield None
                return
            yield df.cast(pl.Int64)
    except (adbc_driver_manager.Error, pa.ArrowException, OSError, pl.exceptions.PolarsError):
        yield None


def _add_missing(
    frame: pl.DataFrame,
    wanted: Mapping[str, str],
    present: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
) -> pl.DataFrame:
    missing = [pl.lit(None, dtype=schema[o]).alias(o) for o in wanted if o not in present]
    return frame.with_columns(missing) if missing else frame


def _fetch_parallel(
    con: sqlite3.Connection, fast: Fast, table: str, sql: str, names: list[str]
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
        lo = con.execute(f"SELECT min({alias}) FROM {q(table)}").fetchone()[0]
        hi = con.execute(f"SELECT max({alias}) FROM {q(table)}").fetchone()[0]
    except sqlite3.OperationalError:  # WITHOUT ROWID table: no such column
        return None
    # The rowid span bounds the row count from above without a scan; nsys writes dense rowids.
    if lo is None or hi - lo + 1 < fast.parallel_min_rows:
        return None
    ranges = _sqlite_parallel.split_ranges(lo, hi, fast.workers, head_start=fast.local_head_start)

    def local_read(range_sql: str) -> pl.DataFrame:
        import adbc_driver_manager

        try:
            return fast.con.read(range_sql, fast.batch_rows)
        except (adbc_driver_manager.Error, OSError, pl.exceptions.PolarsError) as e:
            raise _sqlite_parallel.DriverRefused(str(e)) from None

    try:
        # This process reads the first range itself (ADBC releases the GIL) while workers read
        # the others.
        parts = _sqlite_parallel.read_ranges(
            fast.path,
            sql,
            alias,
            ranges,
            batch_rows=fast.batch_rows,
            local_read=local_read,
            scratch_bytes=(hi - ranges[0][1]) * len(names) * 8,
        )
    except (_sqlite_parallel.DriverRefused, _sqlite_parallel.Unavailable):
        return None
    except _sqlite_parallel.WorkerFailed as e:
        raise MalformedInput(f"parallel read failed: {e}", table=table) from None
    return _concat_parts(parts, names)


def _concat_parts(parts: list[Any], names: list[str]) -> pl.DataFrame | None:
    """The ranges' frames as one Int64 frame named `names`; None when one is not all integers."""
    frames = []
    for part in parts:
        # the local range is a polars frame already; the workers' are mapped pyarrow Tables
        df = part if isinstance(part, pl.DataFrame) else pl.from_arrow(part, rechunk=False)
        if not isinstance(df, pl.DataFrame) or df.width != len(names):
            return None
        df.columns = names
        # A range whose inference batch is all NULL gets Null columns (formats.md: nullable ids).
        if not all(dt == pl.Int64 or dt == pl.Null for dt in df.dtypes):
            return None
        frames.append(df.cast(pl.Int64))
    return pl.concat(frames, how="vertical", rechunk=False)


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
        import numpy as np  # here, not at import: format detection stays light

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


def query_frame(
    con: sqlite3.Connection,
    path: PathLike,
    table: str,
    sql: str,
    schema: dict[str, pl.DataType],
) -> pl.DataFrame:
    """Run a query and build a frame typed by `schema` (which lists the SELECT's columns).

    SQLite columns are dynamically typed: text or a BLOB in an INT column is bad input."""
    rows = con.execute(sql).fetchall()
    try:
        return pl.DataFrame(rows, schema=schema, orient="row")
    except pl.exceptions.ComputeError as e:
        msg = str(e).split("\n", 1)[0]
        raise MalformedInput(
            f"a column holds values of the wrong type: {msg}", path=path, table=table
        ) from None


# --- opening an untrusted file ---------------------------------------------------------------


def sqlite_damage(path: PathLike) -> str | None:
    """Why a file with the SQLite magic cannot be opened and listed, or None when it can (or
    is not SQLite). A truncated export usually fails here, on its schema pages."""
    if not is_sqlite(path):
        return None
    try:
        con = connect_readonly(path)
    except MalformedInput as e:
        return e.message
    try:
        sqlite_tables(con)
    except sqlite3.DatabaseError as e:
        return f"unreadable SQLite database ({e}); truncated or corrupt"
    finally:
        con.close()
    return None


def sqlite_truncation(path: PathLike) -> str | None:
    """Why an SQLite file is shorter than its header says, or None.

    SQLite reads pages past the end of a truncated file as zeros, so a file cut in a table the
    query does not touch reads without error. The header (sqlite.org/fileformat.html §1.3) has
    the page size (offset 16, 1 meaning 65536) and the page count (offset 28), which is valid
    when the change counter (24) equals the version-valid-for number (92).
    """
    try:
        with open(path, "rb") as f:
            h = f.read(100)
        size = os.path.getsize(path)
    except OSError:
        return None
    if len(h) < 100 or not h.startswith(SQLITE_MAGIC):
        return None
    page = int.from_bytes(h[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(h[28:32], "big")
    if h[24:28] != h[92:96] or pages == 0 or size >= page * pages:
        return None
    return (
        f"unreadable SQLite database: truncated ({size:,} bytes; its header says {pages:,} "
        f"pages of {page:,} bytes = {page * pages:,})"
    )


def connect_readonly(path: PathLike) -> sqlite3.Connection:
    """Open an SQLite file read-only (URI mode=ro), tolerant of non-UTF-8 text.

    Untrusted input: never opened writable, so a reader can't modify or create the file. A file
    shorter than its header says (an incomplete copy) is refused: see `sqlite_truncation`.
    """
    cut = sqlite_truncation(path)
    if cut is not None:
        raise MalformedInput(cut, path=path)
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True)
        # nsys TARGET_INFO_SYSTEM_ENV holds non-UTF-8 bytes (formats.md §3.2).
        con.text_factory = lambda b: b.decode("utf-8", "replace")
        con.execute("PRAGMA query_only = ON")
        guard_sqlite(con)
        con.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.DatabaseError as e:
        raise MalformedInput(
            f"unreadable SQLite database ({e}); truncated or corrupt", path=path
        ) from None
    except UnicodeDecodeError:
        # SQLite's message quotes the damaged schema text, which Python then fails to decode
        raise MalformedInput(
            "unreadable SQLite database (its schema holds bytes that are not UTF-8); corrupt",
            path=path,
        ) from None
    return con


def sqlite_tables(path_or_con: PathLike | sqlite3.Connection) -> set[str]:
    """Table names of an SQLite file; empty when it is not one."""
    if isinstance(path_or_con, sqlite3.Connection):
        rows = path_or_con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        return {r[0] for r in rows}
    if not is_sqlite(path_or_con):
        return set()
    try:
        con = connect_readonly(path_or_con)
    except MalformedInput:
        return set()
    try:
        return sqlite_tables(con)
    finally:
        con.close()


# What the readers' own SQL needs on the main connection: the parallel workers' rule (only
# SELECT and column reads, `common.sqlite_parallel._authorize`) plus the PRAGMAs that list
# columns and the few functions the readers call. Everything else (ATTACH, writes, other
# PRAGMAs, functions) is refused when a statement is prepared.
_SQL_FUNCTIONS = frozenset({"count", "min", "max", "instr", "typeof"})
_SQL_PRAGMAS = frozenset({"table_info", "table_xinfo"})
# Limits (sqlite.org/limits.html) well above anything an export holds: no ATTACH at all, and a
# string or BLOB over 256 MiB (an nsys environment block is a few KiB) is an error, not memory.
_SQL_LIMITS = {
    "SQLITE_LIMIT_ATTACHED": 0,
    "SQLITE_LIMIT_LENGTH": 256 << 20,
    "SQLITE_LIMIT_SQL_LENGTH": 1 << 20,
    "SQLITE_LIMIT_EXPR_DEPTH": 100,
}


def _authorize_main(action: int, arg1: str | None, arg2: str | None, *_: object) -> int:
    ok = (
        action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ)
        or (action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _SQL_FUNCTIONS)
        or (action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _SQL_PRAGMAS)
    )
    return sqlite3.SQLITE_OK if ok else sqlite3.SQLITE_DENY


def guard_sqlite(con: sqlite3.Connection) -> None:
    """Give a reader's connection to an untrusted file the parallel workers' protection: an
    authorizer that allows only reads (plus column listing and the readers' few functions) and
    tight limits. A generated column is refused separately (`generated_columns`): SQLite
    evaluates its expression on every read without asking the authorizer."""
    con.set_authorizer(_authorize_main)
    setlimit = getattr(con, "setlimit", None)  # Python >= 3.11
    for name, value in _SQL_LIMITS.items():
        category = getattr(sqlite3, name, None)
        if setlimit is not None and category is not None:
            setlimit(category, value)
