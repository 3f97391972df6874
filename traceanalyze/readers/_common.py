"""Helpers shared by readers: cheap file sniffing, read-only SQLite, unit tables, demangling."""

from __future__ import annotations

import importlib
import os
import sqlite3
import types
import warnings
import zlib
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from ..errors import MalformedInput, UnknownUnit

PathLike = str | os.PathLike[str]

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def head_bytes(path: PathLike, n: int = 65536) -> bytes:
    """The first `n` bytes of the file, decompressed when it is gzip; b'' when unreadable.

    A damaged gzip (truncated, corrupt further on) gives what decompresses before the damage,
    so a truncated `.json.gz` is still recognized by its content and its reader can say what is
    wrong with it, instead of detection finding no reader.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
            if not raw.startswith(GZIP_MAGIC):
                return raw
            f.seek(0)
            return _gunzip_prefix(f, n)
    except OSError:
        return b""


def _gunzip_prefix(f: BinaryIO, n: int) -> bytes:
    """Up to `n` decompressed bytes from a gzip stream, stopping quietly at damage."""
    out = bytearray()
    d = zlib.decompressobj(31)
    data = b""
    while len(out) < n:
        if not data:
            data = f.read(1 << 16)
            if not data:
                break
        try:
            out += d.decompress(data, n - len(out))
        except zlib.error:
            break
        data = d.unconsumed_tail
        if d.eof:  # next member, if any; trailing zero padding fails its header check: stop
            data, d = d.unused_data, zlib.decompressobj(31)
    return bytes(out[:n])


def gunzip_stream(
    f: BinaryIO, path: PathLike, *, out_chunk: int, inflate: Any = zlib
) -> Iterator[bytes]:
    """The decompressed bytes of the gzip file `f` (at its start), in pieces of at most
    `out_chunk`: every member in turn, trailing zero padding ignored, as `gzip` does.

    `inflate` is a zlib-compatible module (zlib, or ISA-L's `isal.isal_zlib`): with wbits=31 it
    checks each member's header and CRC in C, skipping `gzip.GzipFile`'s Python-level buffering.
    Raises MalformedInput "truncated gzip (no end of stream)" or "corrupt gzip (…)".
    """
    errors = (zlib.error, getattr(inflate, "error", zlib.error))
    d = inflate.decompressobj(31)
    started = False  # inside a member
    data = b""
    try:
        while True:
            if not data:
                data = f.read(1 << 20)
                if not data:
                    if started:
                        raise MalformedInput("truncated gzip (no end of stream)", path=path)
                    return
            if not started and not data.strip(b"\x00"):
                data = b""
                continue
            started = True
            out = d.decompress(data, out_chunk)
            data = d.unconsumed_tail
            if out:
                yield out
            if d.eof:
                data, d, started = d.unused_data, inflate.decompressobj(31), False
    except errors as e:
        raise MalformedInput(f"corrupt gzip ({e})", path=path) from None


def gzip_damage(path: PathLike) -> str | None:
    """Why a gzip file cannot be decompressed to its end ("truncated gzip …", "corrupt gzip …"),
    or None when it can (or is not gzip). Reads the whole file: only for diagnosing errors."""
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            return None
        f.seek(0)
        try:
            for _ in gunzip_stream(f, path, out_chunk=1 << 22):
                pass
        except MalformedInput as e:
            return e.message
    return None


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


def head_text(path: PathLike, n: int = 65536) -> str:
    """The first `n` bytes as text (BOM stripped, undecodable bytes replaced)."""
    return head_bytes(path, n).decode("utf-8", "replace").lstrip("\ufeff")


def is_sqlite(path: PathLike) -> bool:
    return head_bytes(path, 16) == SQLITE_MAGIC


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
        con.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.DatabaseError as e:
        raise MalformedInput(
            f"unreadable SQLite database ({e}); truncated or corrupt", path=path
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
        return name
    return out


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
    have: Iterable[str], need: Iterable[str], *, path: PathLike, table: str | None = None
) -> None:
    have = set(have)
    missing = [c for c in need if c not in have]
    if missing:
        from ..errors import MissingColumn

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
