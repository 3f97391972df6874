"""rocprof v1 `results.db`: SQLite with one table `KERN` holding results.csv's columns
(`rocprof --stats --timestamp on -o results.csv ./app` writes it beside the CSV; tested with
ROCm 5.7.1 on MI250X). `KernelName` keeps the CSV's double quotes; `sig`/`obj` are hex text.
Mapping: `rocm.v1`."""

from __future__ import annotations

import sqlite3

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import PathLike, is_sqlite, reader_entry, table_columns
from ..common.sqlite import connect_readonly, q, query_frame, sqlite_tables
from . import v1


def sniff(path: PathLike) -> bool:
    """SQLite with a table KERN that has KernelName and gpu-id."""
    if not is_sqlite(path):
        return False
    try:
        if "KERN" not in sqlite_tables(path):
            return False
        con = connect_readonly(path)
        try:
            cols = table_columns(con, "KERN")
        finally:
            con.close()
    except (sqlite3.Error, OSError, MalformedInput):
        return False
    return "KernelName" in cols and "gpu-id" in cols


@reader_entry("rocprof_sqlite")
def read_rocprof_sqlite(path: PathLike) -> Tables:
    """Read rocprof v1 results.db into normalized tables."""
    con = connect_readonly(path)
    try:
        cols = table_columns(con, "KERN")
        if not cols:
            raise MalformedInput("no table KERN (not a rocprof results.db)", path=path)
        # sig/obj (hex text) are not kept; a --pmc counter may be fractional
        types: dict[str, pl.DataType] = {
            c: pl.String() if c == "KernelName" else pl.Int64() if c in v1.KNOWN else pl.Float64()
            for c in cols
            if c not in ("sig", "obj")
        }
        sql = f"SELECT {', '.join(q(c) for c in types)} FROM KERN ORDER BY rowid"
        raw = query_frame(con, path, "KERN", sql, types)
    finally:
        con.close()
    return v1.tables(raw, path=path, table="KERN")
