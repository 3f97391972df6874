"""Helpers shared by readers: cheap file sniffing, read-only SQLite, unit tables, demangling."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import types
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from functools import lru_cache
from typing import TYPE_CHECKING, Any, BinaryIO, ParamSpec, TypeVar

import polars as pl

from ...errors import (
    MalformedInput,
    TraceanalyzeError,
    UnknownUnit,
)

if TYPE_CHECKING:
    import sqlite3

PathLike = str | os.PathLike[str]

GZIP_MAGIC = b"\x1f\x8b"
_inflate: Any
try:  # ISA-L: a 1 MiB gzip head in 0.7 ms instead of zlib's 5 ms (detection reads one per file)
    _inflate = importlib.import_module("isal.isal_zlib")
except ImportError:  # pragma: no cover - depends on the environment
    _inflate = zlib
SQLITE_MAGIC = b"SQLite format 3\x00"


def head_bytes(path: PathLike, n: int = 65536) -> bytes:
    """The first `n` bytes of the file, decompressed when it is gzip; b'' when unreadable.

    A damaged gzip (truncated, corrupt further on) gives what decompresses before the damage,
    so a truncated `.json.gz` is still recognized by its content and its reader can say what is
    wrong with it, instead of detection finding no reader.
    """
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
            if magic != GZIP_MAGIC:
                return magic[:n] + f.read(n - 2) if n > 2 else magic[:n]
            f.seek(0)
            return _gunzip_prefix(f, n)
    except OSError:
        return b""


def _gunzip_prefix(f: BinaryIO, n: int) -> bytes:
    """Up to `n` decompressed bytes from a gzip stream, stopping quietly at damage.

    The pieces are joined once at the end (a single piece is returned as it is): growing a
    bytearray and copying it out made a 1 MiB head cost 2.5 ms instead of 0.3 (the MLPerf sniff
    reads one of every gzip file detection sees)."""
    pieces: list[bytes] = []
    got = 0
    d = _inflate.decompressobj(31)
    data = b""
    while got < n:
        if not data:
            data = f.read(1 << 18)
            if not data:
                break
        try:
            piece = d.decompress(data, n - got)
        except _inflate.error:
            break
        pieces.append(piece)
        got += len(piece)
        data = d.unconsumed_tail
        if d.eof:  # next member, if any; trailing zero padding fails its header check: stop
            data, d = d.unused_data, _inflate.decompressobj(31)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def head_text(path: PathLike, n: int = 65536) -> str:
    """The first `n` bytes as text (BOM stripped, undecodable bytes replaced)."""
    return head_bytes(path, n).decode("utf-8", "replace").lstrip("\ufeff")


def is_sqlite(path: PathLike) -> bool:
    return head_bytes(path, 16) == SQLITE_MAGIC


def table_columns(con: sqlite3.Connection, table: str) -> list[str]:
    """Column names via PRAGMA table_info (empty when the table does not exist)."""
    # The table name comes from sqlite_master or a constant, but quote it anyway.
    quoted = '"' + table.replace('"', '""') + '"'
    return [r[1] for r in con.execute(f"PRAGMA table_info({quoted})").fetchall()]


# --- units ------------------------------------------------------------------------------------
# Every unit string a reader meets maps to (base unit, factor). Unknown units raise UnknownUnit:
# never guessed (house style). nvprof's KB/MB are binary (1 KB = 1024 B: a 320x320 float matrix,
# 409,600 B, prints as 400.000000 KB in the magus trace); ncu's Kbyte/Mbyte are decimal.

TIME_TO_NS: dict[str, float] = {
    "s": 1e9,
    "sec": 1e9,
    "second": 1e9,
    "ms": 1e6,
    "msecond": 1e6,
    "us": 1e3,
    "usecond": 1e3,
    "µs": 1e3,
    "ns": 1.0,
    "nsecond": 1.0,
}

NVPROF_SIZE_TO_BYTES: dict[str, float] = {
    "B": 1.0,
    "KB": 1024.0,
    "MB": 1024.0**2,
    "GB": 1024.0**3,
    "TB": 1024.0**4,
}

NVPROF_RATE_TO_BYTES_PER_S: dict[str, float] = {
    "B/s": 1.0,
    "KB/s": 1024.0,
    "MB/s": 1024.0**2,
    "GB/s": 1024.0**3,
    "TB/s": 1024.0**4,
}


def unit_factor(
    unit: str,
    table: dict[str, float],
    *,
    path: PathLike,
    line: int | None = None,
    column: str | None = None,
) -> float:
    try:
        return table[unit.strip()]
    except KeyError:
        raise UnknownUnit(
            f"unknown unit {unit!r} (known: {', '.join(sorted(table))})",
            path=path,
            line=line,
            column=column,
        ) from None


# --- demangling -------------------------------------------------------------------------------


@lru_cache(maxsize=200_000)
def demangle(name: str) -> str:
    """Demangle an Itanium C++ name (`_Z…`); other names come back unchanged.

    Uses cxxfilt (libstdc++'s __cxa_demangle). A name that fails to demangle stays as it was.
    """
    if not name.startswith("_Z"):
        return name
    import cxxfilt

    try:
        out: str = cxxfilt.demangle(name, external_only=False)
    except cxxfilt.InvalidName:
        return _demangle_tool(name)
    return out


def _demangle_tool(name: str) -> str:
    """`name` through binutils' or LLVM's cxxfilt, when one is installed; else unchanged.

    libstdc++'s __cxa_demangle before GCC 13 refuses newer manglings that ROCm kernels use
    (`DF16b`, std::bfloat16_t: `_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16b…`); the
    command-line tools carry their own, newer demangler. The name is one argument, no shell; it
    starts with `_Z`, so it cannot be read as an option.
    """
    import shutil
    import subprocess

    for tool in ("c++filt", "llvm-cxxfilt"):
        exe = shutil.which(tool)
        if exe is None:
            continue
        try:
            run = subprocess.run(
                [exe, name], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            continue
        out = run.stdout.strip()
        if run.returncode == 0 and out and out != name and "\n" not in out:
            return out
    return name


def demangle_column(s: pl.Series) -> pl.Series:
    """Demangle a string column, calling the demangler once per distinct name."""
    uniq = s.unique().drop_nulls()
    mapping = {n: demangle(n) for n in uniq.to_list()}
    out: pl.Series = s.replace_strict(mapping, default=None, return_dtype=pl.String)
    return out.alias(s.name)


def warn(message: str) -> None:
    """A data-quality note; notebooks show it, tests can assert it."""
    warnings.warn(message, stacklevel=3)


def require_columns(
    have: Iterable[str], need: Iterable[str], *, path: PathLike | None, table: str | None = None
) -> None:
    have = set(have)
    missing = [c for c in need if c not in have]
    if missing:
        from ...errors import MissingColumn

        raise MissingColumn(
            f"missing column(s) {', '.join(missing)}", path=path, table=table, column=missing[0]
        )


class _LazyModule(types.ModuleType):
    """A module imported on first attribute access.

    `detect_format` imports every reader to sniff a file; readers whose hot path needs pyarrow or
    numpy must not make sniffing a Kineto trace pay ~50 MB and ~150 ms to import them.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str) -> Any:
        mod = importlib.import_module(self.__dict__["_lazy_target"])
        self.__dict__.update(mod.__dict__)
        return getattr(mod, attr)


def lazy_import(name: str) -> Any:
    """`lazy_import("pyarrow")` stands in for `import pyarrow` until first use."""
    return _LazyModule(name)


# --- shared bad-input rules (issue 9) ----------------------------------------------------------


def check_telemetry(samples: pl.DataFrame, *, path: PathLike, reader: str) -> pl.DataFrame:
    """`gpu_samples` with every value outside `schema.PLAUSIBLE_RANGES` (or NaN) set to null,
    and one warning per column naming the count, the range and the first such value.

    The rule every reader applies to telemetry: a reading of 1e308 °C or -64 W is not a reading.
    It is nulled, not the row dropped, so the other fields of the sample stay.
    """
    fixed, hits = null_implausible(samples)
    warn_implausible(hits, path=path, reader=reader)
    return fixed


def null_implausible(samples: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, tuple[int, Any]]]:
    """`check_telemetry` without its warnings: the nulled frame and, per column that had any,
    (how many values were nulled, the first of them)."""
    from ...schema import PLAUSIBLE_RANGES

    fixes, hits = [], {}
    for col, (lo, hi) in PLAUSIBLE_RANGES.items():
        if col not in samples.columns or not samples.schema[col].is_numeric():
            continue
        c = pl.col(col).cast(pl.Float64)
        bad = c.is_not_null() & (c.is_nan() | (c < lo) | (c > hi))
        found = samples.filter(bad)
        if found.height:
            hits[col] = (found.height, found[col][0])
            fixes.append(pl.when(bad).then(None).otherwise(pl.col(col)).alias(col))
    return (samples.with_columns(fixes) if fixes else samples), hits


def warn_implausible(hits: dict[str, tuple[int, Any]], *, path: PathLike, reader: str) -> None:
    """`check_telemetry`'s warnings for `null_implausible`'s counts, in the ranges' order."""
    from ...schema import PLAUSIBLE_RANGES

    for col, (lo, hi) in PLAUSIBLE_RANGES.items():
        if col in hits:
            n, first = hits[col]
            warn(
                f"{path}: {reader}: {n} {col} value(s) outside the plausible range "
                f"[{lo:g}, {hi:g}] (first: {first!r}); set to null"
            )


def check_times(
    df: pl.DataFrame,
    *,
    path: PathLike | None,
    table: str,
    start: str = "start_ns",
    end: str | None = "end_ns",
    end_nullable: bool = False,
    columns: tuple[str, str] = ("start", "end"),
) -> None:
    """The time rule every SQLite reader applies (as the Kineto reader does for `ts`/`dur`):

    * a row without a start time is an error (MalformedInput naming the source table, column and
      the count), never a row with a null start: Kineto's reader rejects a null `ts` the same way;
    * a row without an end is kept with a null end and duration and a warning with the count,
      as Kineto's reader does for a complete event without `dur` (silently when `end_nullable`:
      NVTX marks and ranges still open at the end of a capture have no end by definition);
    * `end - start` must fit int64: start = -2^63 with end = 2^63 - 1 would wrap around to a
      duration of -1 ns.

    `columns` are the source's spellings of start and end, for the message.
    """
    if df.height == 0:
        return
    n = df[start].null_count()
    if n:
        raise MalformedInput(
            f"{n} row(s) without a start time (NULL)", path=path, table=table, column=columns[0]
        )
    if end is None:
        return
    if not end_nullable:
        n = df[end].null_count()
        if n:
            where = f"{path}: " if path is not None else ""
            warn(
                f"{where}{table}: {n} row(s) without an end time ({columns[1]} is NULL); "
                "end and duration left null"
            )
    s, e = pl.col(start), pl.col(end)
    d = e - s  # int64 arithmetic wraps: the sign then disagrees with the comparison
    wrapped = e.is_not_null() & (((e >= s) & (d < 0)) | ((e < s) & (d >= 0)))
    bad = df.filter(wrapped)
    if bad.height:
        first = bad.row(0, named=True)
        raise MalformedInput(
            f"{bad.height} row(s) whose end - start does not fit int64 ns (first: "
            f"{columns[0]}={first[start]}, {columns[1]}={first[end]})",
            path=path,
            table=table,
            column=columns[1],
        )


def bad_input_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that parsers we call raise on bad bytes (not on bugs of ours)."""
    import gzip
    import lzma
    import sqlite3  # here, not at import: a JSON or CSV read never needs it (~1.4 ms)

    import orjson  # a runtime dependency; its decode error subclasses ValueError

    return (
        orjson.JSONDecodeError,
        UnicodeDecodeError,
        sqlite3.DatabaseError,
        gzip.BadGzipFile,
        zlib.error,
        EOFError,
        lzma.LZMAError,
        RecursionError,
        pl.exceptions.ComputeError,
        pl.exceptions.NoDataError,
        # A strict cast of a value from the file that does not fit (inf or 1e30 seconds to int64
        # ns, a 20-digit id): the reader should have checked and named the line; this net keeps
        # an unchecked one from surfacing as a traceback.
        pl.exceptions.InvalidOperationError,
        OverflowError,
    )


def as_bad_input(e: BaseException, *, path: PathLike, reader: str) -> MalformedInput:
    """A one-line MalformedInput naming the file for an exception from `bad_input_errors()`."""
    if isinstance(e, RecursionError):
        return MalformedInput("nested too deeply (more levels than the parser's limit)", path=path)
    first = str(e).strip().split("\n", 1)[0]
    return MalformedInput(f"cannot parse as {reader}: {type(e).__name__}: {first}", path=path)


def generated_columns(con: sqlite3.Connection, table: str) -> set[str]:
    """Columns of `table` that SQLite computes on read (GENERATED ... VIRTUAL) or at write
    (STORED): PRAGMA table_xinfo's `hidden` 2 and 3. PRAGMA table_info does not list them."""
    quoted = '"' + table.replace('"', '""') + '"'
    rows = con.execute(f"PRAGMA table_xinfo({quoted})").fetchall()
    return {r[1] for r in rows if r[6] in (2, 3)}


def refuse_generated(
    con: sqlite3.Connection, table: str, wanted: Iterable[str], *, path: PathLike | None
) -> None:
    """MalformedInput when a column a reader would read is a generated column: profiler exports
    store their data; an expression evaluated per row can cost minutes of CPU (issue 9)."""
    gen = generated_columns(con, table)
    hit = [c for c in wanted if c in gen]
    if hit:
        from ...errors import MalformedInput as _Malformed

        raise _Malformed(
            f"column {hit[0]!r} is a generated (computed) column, not stored data; refused",
            path=path,
            table=table,
            column=hit[0],
        )


_P = ParamSpec("_P")
_R = TypeVar("_R")


def reader_entry(slug: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorate a `read_<slug>(path, …)`: whatever the bytes, it returns or raises a
    TraceanalyzeError naming the file. A TraceanalyzeError raised below the entry point gets the
    path; an error of a parser we call on bad bytes (`bad_input_errors()`: a polars cast, a
    sqlite3 error, a RecursionError, …) becomes a one-line MalformedInput. Anything else is a bug
    of ours and keeps its traceback (the fuzz harness, benchmarks/fuzz_readers.py, looks for
    those)."""

    def wrap(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def read(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            path = args[0] if args else kwargs.get("path")
            with naming_errors(slug, path):  # type: ignore[arg-type]
                return fn(*args, **kwargs)

        return read

    return wrap


# `-P` (Python 3.11+) for the helper processes readers start: neither the script's directory nor
# the current one goes on their sys.path, so no file there can shadow a module they import.
# Python 3.10 has no such flag (it refuses it: every helper would fail): there, helpers started
# with `-m` or `-c` are run in a directory chosen for it (`cwd`), and a script's own directory
# (readers/common) holds no module named like one of the standard library's.
SAFE_PATH: list[str] = ["-P"] if sys.version_info >= (3, 11) else []


class ReadStopped(Exception):
    """A read stopped because its caller asked (`stop_reading_when`), not because of the file:
    e.g. `ingest` learned from the hash, computed meanwhile, that the store has the file."""


# (stop, settled) of the innermost `stop_reading_when` block
_STOP: ContextVar[tuple[Callable[[], bool], Callable[[], bool]] | None] = ContextVar(
    "traceanalyze_read_stop", default=None
)


@contextlib.contextmanager
def stop_reading_when(
    stop: Callable[[], bool], settled: Callable[[], bool] = lambda: True
) -> Iterator[None]:
    """Readers that poll `check_stop` between pieces of a file raise ReadStopped once `stop()`
    is true, in this block (this thread and context). `settled()` says that `stop()` can no
    longer become true (`read_settled`)."""
    token = _STOP.set((stop, settled))
    try:
        yield
    finally:
        _STOP.reset(token)


def check_stop() -> None:
    """Raise ReadStopped when the block's `stop_reading_when` condition holds (cheap: a reader
    calls it per piece of ~8 MiB)."""
    conditions = _STOP.get()
    if conditions is not None and conditions[0]():
        raise ReadStopped()


def read_settled() -> bool:
    """No `stop_reading_when` is in force, or its read can no longer be stopped: extra work
    for this read (a helper process) is worth starting now, not wasted."""
    conditions = _STOP.get()
    return conditions is None or conditions[1]()


@contextlib.contextmanager
def naming_errors(slug: str, path: PathLike | None) -> Iterator[None]:
    """What `reader_entry` does, for any block that reads `path` with reader `slug`: a
    TraceanalyzeError gets the path when it has none; a parser's error on bad bytes
    (`bad_input_errors()`) becomes a one-line MalformedInput."""
    try:
        yield
    except TraceanalyzeError as e:
        if e.path is None and path is not None:
            e.path = os.fspath(path)
        raise
    except bad_input_errors() as e:
        raise as_bad_input(e, path=path, reader=slug) from e  # type: ignore[arg-type]
