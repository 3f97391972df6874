"""`stream_nvprof_sqlite`'s big tables: kernels, copies and API calls read a batch at a time in
their output order (the other tables and the order of them all: `nvprof_sqlite._stream_tables`).

The whole-frame reader sorts those tables by start (a stable sort of the tables' rows in
UNION ALL order; `kernel_id` numbers the sorted rows). The stream asks SQLite for that order:
the same UNION ALL with each row's table index `_t` and rowid `_r`, `ORDER BY start, _t, _r`
(ties broken as the stable sort breaks them). No export has an index on `start`, so SQLite
sorts with its external merge sorter: a few MB of memory (its cache) and temporary files that
it deletes itself (SQLITE_TMPDIR, else /var/tmp or /tmp); nothing is held here beyond a batch.
The per-row work is the whole-frame reader's (`kernel_rows`, `memcpy_rows`, …); the checks
over a whole table are counted batch by batch and raised or warned at its end. A batch with
cells of the wrong type re-reads its tables the whole-frame way (`whole`), to raise exactly
that error.

Held whole (small by nature): the kernel-name table (one row per distinct name), devices and
sources. NVTX markers and environment samples stream too, in `nvprof.nvtx`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

import polars as pl

from ...errors import MalformedInput
from ..common.core import PathLike as _PathLike
from ..common.core import warn
from ..common.sqlite import q as _q
from ..common.sqlite_stream import TimeChecks, query_batches
from .sql import (
    _K,
    _KERNEL_SCHEMA,
    _MEMCPY_SCHEMA,
    _MEMCPY_TABLE,
    _cbid_names,
    _order_cols,
    _select,
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

Chunk = tuple[str, pl.DataFrame]
_I = pl.Int64()
_ORDER = " ORDER BY start_ns, _t, _r"


def _sorted(
    con: sqlite3.Connection,
    path: _PathLike,
    label: str,
    sql: str,
    schema: dict[str, pl.DataType],
    batch: int,
    whole: Callable[[], object],
) -> Iterator[pl.DataFrame]:
    """`sql` ordered by (start, table, rowid), a batch at a time. A batch with cells of the
    wrong type: `whole()` (the whole-frame reader of these tables) raises its own error."""
    try:
        yield from query_batches(con, path, label, sql + _ORDER, schema, batch)
    except MalformedInput:
        whole()
        raise


def kernel_chunks(
    con: sqlite3.Connection,
    path: _PathLike,
    tables: set[str],
    pid: int | None,
    batch: int,
    whole: Callable[[], object],
) -> Iterator[Chunk]:
    sql, used = kernel_sql(con, path, tables)
    label = " + ".join(used)
    names = kernel_names(con, path, used)
    times = TimeChecks(label)
    n_dangling = first = 0
    for df in _sorted(con, path, label, sql, _KERNEL_SCHEMA, batch, whole):
        times.add(df)
        rows = kernel_rows(df, names, pid)
        n_dangling += dangling(rows, "raw_name", "name_id")
        yield (
            "kernels",
            rows.drop("raw_name", "name_id", "_t", "_r").with_columns(
                pl.int_range(first, first + pl.len(), dtype=_I).alias("kernel_id")
            ),
        )
        first += df.height
    times.finish(path)
    note_dangling(n_dangling, "kernels", path)


def memcpy_chunks(
    con: sqlite3.Connection,
    path: _PathLike,
    tables: set[str],
    pid: int | None,
    batch: int,
    whole: Callable[[], object],
) -> Iterator[Chunk]:
    sql = memcpy_sql(con, path, tables)
    if sql is None:
        return
    times = TimeChecks(_MEMCPY_TABLE)
    unknown = odd = 0
    for df in _sorted(con, path, _MEMCPY_TABLE, sql, _MEMCPY_SCHEMA, batch, whole):
        times.add(df)
        u, o = memcpy_counts(df)
        unknown, odd = unknown + u, odd + o
        yield "memcpy", memcpy_rows(df, pid)
    times.finish(path)
    warn_memcpy(unknown, odd, path)


_API_WANT: dict[str, str | None] = {
    "callback_id": "cbid",
    "start_ns": "start",
    "end_ns": "end",
    "process_id": "processId",
    "thread_id": "threadId",
    "correlation_id": "correlationId",
    "return_code": "returnValue",
}
_API_SCHEMA: dict[str, pl.DataType] = {c: _I for c in [*_API_WANT, "_t", "_r"]}
_APIS = (("runtime", f"{_K}RUNTIME"), ("driver", f"{_K}DRIVER"))


def api_chunks(
    con: sqlite3.Connection,
    path: _PathLike,
    tables: set[str],
    batch: int,
    whole: Callable[[], object],
) -> Iterator[Chunk]:
    parts, used = [], []
    for i, (api, table) in enumerate(_APIS):
        if table in tables:
            cols = _select(con, path, table, _API_WANT, ["cbid", "start", "end"])
            order = _order_cols(con, table, i)
            parts.append(f"SELECT {', '.join(cols)}, {order} FROM {_q(table)} t")
            used.append((i, api, table))
    if not parts:
        return
    names = pl.concat(
        [_cbid_names(api).with_columns(pl.lit(i, dtype=_I).alias("_t")) for i, api, _ in used]
    )
    times = {i: TimeChecks(table) for i, _, table in used}
    missing: dict[int, tuple[int, set[int]]] = {i: (0, set()) for i, _, _ in used}
    label = " + ".join(t for _, _, t in used)
    sql = " UNION ALL ".join(parts)
    for df in _sorted(con, path, label, sql, _API_SCHEMA, batch, whole):
        for key, part in df.partition_by("_t", as_dict=True, maintain_order=True).items():
            times[int(key[0])].add(part)
        df = df.join(names, on=["_t", "callback_id"], how="left", maintain_order="left")
        for i, _, _ in used:
            gone = df.filter(pl.col("_t") == i, pl.col("name").is_null())
            if gone.height:
                n, ids = missing[i]
                missing[i] = (n + gone.height, ids | set(gone["callback_id"].drop_nulls()))
        yield "api_calls", _api_rows(df, used)
    for i, api, _ in used:
        times[i].finish(path)
        n, ids = missing[i]
        if n:
            listed = ", ".join(map(str, sorted(ids)[:10]))
            warn(
                f"{path}: {n} {api} API call(s) with callback ids not in the CUPTI 13.0 table "
                f"({listed}); name left null"
            )


def _api_rows(df: pl.DataFrame, used: list[tuple[int, str, str]]) -> pl.DataFrame:
    api = pl.lit(None, dtype=pl.String)
    for i, label, _ in used:
        api = pl.when(pl.col("_t") == i).then(pl.lit(label)).otherwise(api)
    return df.with_columns(
        api.alias("api"),
        # threadId is stored as a signed 32-bit value (formats.md §2)
        (pl.col("thread_id") & 0xFFFFFFFF).alias("thread_id"),
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
    ).drop("_t", "_r")
