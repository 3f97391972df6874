"""The nvprof_sqlite reader's SQL helpers and the row transforms its whole-frame reader and its
stream share (kernels, copies): one query per group of tables, and the per-row work on a frame
of that query's rows, whether it holds the whole table or a batch of it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from importlib import resources

import polars as pl

from ..common.core import (
    PathLike,
    demangle_column,
    refuse_generated,
    require_columns,
    table_columns,
    warn,
)
from ..common.cupti import COPY_KINDS, MEMORY_KINDS
from ..common.sqlite import q, query_frame
from ..common.sqlite_parallel import rowid_alias
from .short_names import short_name as _short_name

_K = "CUPTI_ACTIVITY_KIND_"
KERNEL_TABLES = (f"{_K}CONCURRENT_KERNEL", f"{_K}KERNEL")
_STRINGS = "StringTable"
_I = pl.Int64


# --- SQL helpers ------------------------------------------------------------------------------


def _select(
    con: sqlite3.Connection,
    path: PathLike,
    table: str,
    want: Mapping[str, str | None],
    required: list[str],
    alias: str = "t",
) -> list[str]:
    """`alias."col" AS out` for each wanted column; NULL for a column the table lacks (or None)."""
    have = table_columns(con, table)
    refuse_generated(con, table, [c for c in want.values() if c is not None], path=path)
    require_columns(have, required, path=path, table=table)
    return [
        f"{alias}.{q(col)} AS {out}" if col is not None and col in have else f"NULL AS {out}"
        for out, col in want.items()
    ]


def _with_strings(
    con: sqlite3.Connection, path: PathLike, df: pl.DataFrame, ref: str, out: str, ids_sql: str
) -> pl.DataFrame:
    """Add column `out` = StringTable text of the ids in column `ref`; id 0 ('-- null --') is null.

    Only the ids that `ids_sql` selects are fetched (never the whole table, whose id 1 is the
    command line), and each distinct string is decoded once, not once per row."""
    sql = f"SELECT _id_, value FROM {_STRINGS} WHERE _id_ <> 0 AND _id_ IN ({ids_sql})"
    strings = query_frame(con, path, _STRINGS, sql, {ref: _I(), out: pl.String()})
    return df.join(strings, on=ref, how="left", maintain_order="left")


def _string_join(alias: str, column: str, out: str) -> tuple[str, str]:
    """(select expr, join clause) resolving a StringTable id; id 0 ('-- null --') is null."""
    s, ref = f"s_{out}", f"{alias}.{q(column)}"
    return f"{s}.value AS {out}", f"LEFT JOIN {_STRINGS} {s} ON {s}._id_ = {ref} AND {ref} <> 0"


_KERNEL_COLS = {
    "device_id": "deviceId",
    "context_id": "contextId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "start_ns": "start",
    "end_ns": "end",
    "grid_x": "gridX",
    "grid_y": "gridY",
    "grid_z": "gridZ",
    "block_x": "blockX",
    "block_y": "blockY",
    "block_z": "blockZ",
    "registers_per_thread": "registersPerThread",
    "static_smem_bytes": "staticSharedMemory",
    "dynamic_smem_bytes": "dynamicSharedMemory",
    "name_id": "name",
}


def kernel_sql(con: sqlite3.Connection, path: PathLike, tables: set[str]) -> tuple[str, list[str]]:
    """The kernel tables' rows as one UNION ALL query (with `_t`, the table's index, and `_r`,
    its rowid: the order a stable sort by start keeps), and the tables used."""
    parts: list[str] = []
    used: list[str] = []
    for table in KERNEL_TABLES:
        if table not in tables:
            continue
        cols = _select(con, path, table, _KERNEL_COLS, ["start", "end", "name"])
        parts.append(
            f"SELECT {', '.join(cols)}, {_order_cols(con, table, len(used))} FROM {q(table)} t"
        )
        used.append(table)
    return " UNION ALL ".join(parts), used


def _order_cols(con: sqlite3.Connection, table: str, index: int) -> str:
    alias = rowid_alias(table_columns(con, table))
    return f"{index} AS _t, " + (f"t.{alias} AS _r" if alias else "NULL AS _r")


_KERNEL_SCHEMA: dict[str, pl.DataType] = {c: _I() for c in [*_KERNEL_COLS, "_t", "_r"]}


def kernel_names(con: sqlite3.Connection, path: PathLike, used: list[str]) -> pl.DataFrame:
    """(name_id, raw_name, name, short_name, mangled_name) of every name id the kernel tables
    use: each distinct name fetched, demangled and shortened once, then joined to the rows."""
    ids = " UNION ".join(f"SELECT name FROM {q(t)}" for t in used)
    sql = f"SELECT _id_, value FROM {_STRINGS} WHERE _id_ <> 0 AND _id_ IN ({ids})"
    names = query_frame(con, path, _STRINGS, sql, {"name_id": _I(), "raw_name": pl.String()})
    raw = names["raw_name"]
    demangled = demangle_column(raw)
    uniq = demangled.unique().drop_nulls().to_list()
    shorts = {n: _short_name(n) for n in uniq}
    failed = raw.filter(raw.str.starts_with("_Z") & (demangled == raw)).n_unique()
    if failed:
        warn(f"{path}: {failed} distinct kernel name(s) could not be demangled; kept mangled")
    return names.with_columns(
        demangled.alias("name"),
        demangled.replace_strict(shorts, default=None, return_dtype=pl.String).alias("short_name"),
        pl.when(pl.col("raw_name").str.starts_with("_Z"))
        .then(pl.col("raw_name"))
        .alias("mangled_name"),
    )


def kernel_rows(df: pl.DataFrame, names: pl.DataFrame, pid: int | None) -> pl.DataFrame:
    """Kernels of one batch (names joined by id), with `raw_name` kept for `dangling`."""
    return df.join(names, on="name_id", how="left", maintain_order="left").with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
        pl.lit(pid, dtype=_I).alias("process_id"),
    )


def dangling(df: pl.DataFrame, text: str, ref: str) -> int:
    """Rows naming a StringTable id that the table does not hold."""
    return df.filter(pl.col(text).is_null() & pl.col(ref).is_not_null() & (pl.col(ref) != 0)).height


_MEMCPY_TABLE = f"{_K}MEMCPY/MEMSET"


def memcpy_sql(con: sqlite3.Connection, path: PathLike, tables: set[str]) -> str | None:
    """MEMCPY, MEMCPY2 and MEMSET as one UNION ALL query (with `_t` and `_r`, as `kernel_sql`),
    or None when none exists."""
    common: dict[str, str | None] = {
        "device_id": "deviceId",
        "context_id": "contextId",
        "stream_id": "streamId",
        "correlation_id": "correlationId",
        "size_bytes": "bytes",
        "start_ns": "start",
        "end_ns": "end",
    }
    copy_cols = {**common, "copy_kind": "copyKind", "src_mem": "srcKind", "dst_mem": "dstKind"}
    # a memset has one memory kind, its destination
    set_cols = {**common, "copy_kind": None, "src_mem": None, "dst_mem": "memoryKind"}
    parts = []
    for i, (table, want) in enumerate(
        ((f"{_K}MEMCPY", copy_cols), (f"{_K}MEMCPY2", copy_cols), (f"{_K}MEMSET", set_cols))
    ):
        if table in tables:
            cols = _select(con, path, table, want, ["start", "end", "bytes"])
            memset = 1 if table.endswith("MEMSET") else 0
            order = _order_cols(con, table, i)
            parts.append(
                f"SELECT {', '.join(cols)}, {memset} AS is_memset, {order} FROM {q(table)} t"
            )
    return " UNION ALL ".join(parts) if parts else None


_MEMCPY_SCHEMA: dict[str, pl.DataType] = {
    c: _I()
    for c in [
        *("device_id", "context_id", "stream_id", "correlation_id", "size_bytes"),
        *("start_ns", "end_ns", "copy_kind", "src_mem", "dst_mem", "is_memset", "_t", "_r"),
    ]
}


def memcpy_counts(df: pl.DataFrame) -> tuple[int, int]:
    """Rows with an unknown CUPTI copy kind, and with an unknown memory kind."""
    unknown = df.filter(
        (pl.col("is_memset") == 0) & ~pl.col("copy_kind").is_in(list(COPY_KINDS))
    ).height
    odd = df.filter(
        pl.any_horizontal(
            pl.col(c).is_not_null() & ~pl.col(c).is_in([0, *MEMORY_KINDS])
            for c in ("src_mem", "dst_mem")
        )
    ).height
    return unknown, odd


def warn_memcpy(unknown: int, odd: int, path: PathLike) -> None:
    if unknown:
        warn(f"{path}: {unknown} memcpy row(s) with an unknown CUPTI copyKind; kind left null")
    if odd:
        warn(f"{path}: {odd} memcpy/memset row(s) with an unknown CUPTI memory kind; left null")


def memcpy_rows(df: pl.DataFrame, pid: int | None) -> pl.DataFrame:
    def mem(c: str) -> pl.Expr:
        return pl.col(c).replace_strict(MEMORY_KINDS, default=None, return_dtype=pl.String)

    copy = pl.col("copy_kind").replace_strict(COPY_KINDS, default=None, return_dtype=pl.String)
    return df.with_columns(
        pl.when(pl.col("is_memset") == 1).then(pl.lit("memset")).otherwise(copy).alias("kind"),
        mem("src_mem").alias("src_kind"),
        mem("dst_mem").alias("dst_kind"),
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
        pl.lit(pid, dtype=_I).alias("process_id"),
    ).drop("copy_kind", "src_mem", "dst_mem", "is_memset", "_t", "_r")


def note_dangling(n: int, what: str, path: PathLike) -> None:
    """Warn about `n` rows naming StringTable ids that the table does not hold (never guessed)."""
    if n:
        warn(f"{path}: {n} {what} row(s) name a StringTable id that is absent; name left null")


def _cbid_names(api: str) -> pl.DataFrame:
    """The shipped CUPTI callback-id table for `api` ('runtime' or 'driver')."""
    ref = resources.files("traceanalyze") / "data" / f"cupti_cbid_{api}.csv"
    with resources.as_file(ref) as p:
        df = pl.read_csv(
            p,
            comment_prefix="#",
            schema={"cbid": _I(), "name": pl.String(), "cupti_enum": pl.String()},
        )
    return df.select(pl.col("cbid").alias("callback_id"), "name")
