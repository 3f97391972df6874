"""`stream_nsys_sqlite`'s tables: the whole-frame reader's tables (`nsys.tables`), one batch
of the source table at a time, in the order `read_nsys_sqlite` reads them (so a file with two
faults raises the same one). Each batch goes through the same row transforms (`nsys.rows`);
the checks over a whole table (time rule, unresolved names, dropped event classes) are counted
batch by batch and raised or warned when the table ends, as `read_nsys_sqlite` does. Only small
tables are held whole: StringIds, the enums, the device and metric descriptions, and NVTX's
DomainCreate rows (read first, in a pass of their own, to name each marker's domain).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import polars as pl

from ..common.sqlite import Fast
from ..common.sqlite_stream import TimeChecks
from .rows import (
    API_COLS,
    GRAPH_TRACE_COLS,
    KERNEL_COLS,
    KERNEL_NAMES,
    MEMCPY_COLS,
    MEMSET_COLS,
    METRIC_COLS,
    METRIC_SCHEMA,
    NVTX_COLS,
    NVTX_DOMAIN_CREATE,
    NVTX_SCHEMA,
    ApiNotes,
    NameNotes,
    api_classify,
    api_rows,
    graph_replay_rows,
    kernel_rows,
    marker_rows,
    memcpy_rows,
    memset_rows,
    metric_rows,
    nvtx_domains,
    nvtx_named,
    nvtx_nul_texts,
    untimed_replays,
    warn_nul_texts,
    warn_untimed_replays,
)
from .tables import (
    API_TABLES,
    GRAPH_TRACE,
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    NVTX_NAMES,
    _devices,
    _sources,
    api_classes,
    api_names,
    copy_kinds,
    event_classes,
    fetch_batches,
    graph_nodes,
    mem_kinds,
    metric_info,
    nvtx_where,
)

Chunk = tuple[str, pl.DataFrame]
_I = pl.Int64()


def stream_tables(
    con: sqlite3.Connection,
    names: set[str],
    strings: pl.DataFrame,
    bad_ids: set[int],
    fast: Fast | None,
    batch: int,
) -> Iterator[Chunk]:
    """Every table of the export as (table, chunk) pairs; `sources` once, with `devices`.
    `batch`: the rows of a sqlite3 batch (the whole read's, so that a bad cell's error is the
    same); ADBC batches are `fast.batch_rows`."""
    # As Python ints: a polars `unique()` of a batch's column can keep the batch's buffer alive.
    device_ids: set[int] = set()
    for name, df in _kernels(con, names, strings, bad_ids, fast, batch):
        device_ids.update(df["device_id"].drop_nulls().unique().to_list())
        yield name, df
    for name, df in _memcpy(con, names, fast, batch):
        device_ids.update(df["device_id"].drop_nulls().unique().to_list())
        yield name, df
    for name, df in _graph_replays(con, names, fast, batch):
        device_ids.update(df["device_id"].drop_nulls().unique().to_list())
        yield name, df
    yield "sources", _sources(con, names)
    yield "devices", _devices(con, names, [pl.Series("device_id", sorted(device_ids), dtype=_I)])
    yield from _api_calls(con, names, strings, bad_ids, fast, batch)
    yield from _markers(con, names, strings, bad_ids, batch)
    yield from _gpu_metrics(con, names, batch)


def _kernels(
    con: sqlite3.Connection,
    names: set[str],
    strings: pl.DataFrame,
    bad_ids: set[int],
    fast: Fast | None,
    batch: int,
) -> Iterator[Chunk]:
    if KERNEL not in names:
        return
    times = TimeChecks(KERNEL)
    notes = NameNotes(KERNEL_NAMES, strings, bad_ids)
    nodes = graph_nodes(con, names)
    first = 0
    for df in fetch_batches(
        con, KERNEL, KERNEL_COLS, dict.fromkeys(KERNEL_COLS, _I), fast=fast, strict_batch=batch
    ):
        times.add(df)
        notes.add(df)
        yield "kernels", kernel_rows(df, strings, first, nodes)
        first += df.height
    times.finish()
    notes.warn()


def _memcpy(
    con: sqlite3.Connection, names: set[str], fast: Fast | None, batch: int
) -> Iterator[Chunk]:
    mems = mem_kinds(con, names)
    nodes = graph_nodes(con, names)
    if MEMCPY in names:
        copies = copy_kinds(con, names)
        times = TimeChecks(MEMCPY)
        for df in fetch_batches(
            con, MEMCPY, MEMCPY_COLS, dict.fromkeys(MEMCPY_COLS, _I), fast=fast, strict_batch=batch
        ):
            times.add(df)
            yield "memcpy", memcpy_rows(df, copies, mems, nodes)
        times.finish()
    if MEMSET in names:
        times = TimeChecks(MEMSET)
        for df in fetch_batches(
            con, MEMSET, MEMSET_COLS, dict.fromkeys(MEMSET_COLS, _I), fast=fast, strict_batch=batch
        ):
            times.add(df)
            yield "memcpy", memset_rows(df, mems, nodes)
        times.finish()


def _graph_replays(
    con: sqlite3.Connection, names: set[str], fast: Fast | None, batch: int
) -> Iterator[Chunk]:
    if GRAPH_TRACE not in names:
        return
    times = TimeChecks(GRAPH_TRACE)
    untimed = first = 0
    cols = GRAPH_TRACE_COLS
    for df in fetch_batches(
        con, GRAPH_TRACE, cols, dict.fromkeys(cols, _I), fast=fast, strict_batch=batch
    ):
        times.add(df)
        untimed += untimed_replays(df)
        yield "graph_replays", graph_replay_rows(df, first)
        first += df.height
    times.finish()
    warn_untimed_replays(untimed)


def _api_calls(
    con: sqlite3.Connection,
    names: set[str],
    strings: pl.DataFrame,
    bad_ids: set[int],
    fast: Fast | None,
    batch: int,
) -> Iterator[Chunk]:
    classes = event_classes(con, names)
    for table, table_api in API_TABLES:
        if table not in names:
            continue
        by_class = api_classes(con, names, table, classes)
        times = TimeChecks(table)
        other = ApiNotes(table)
        notes = NameNotes(api_names(table), strings, bad_ids)
        for df in fetch_batches(
            con, table, API_COLS, dict.fromkeys(API_COLS, _I), fast=fast, strict_batch=batch
        ):
            times.add(df)
            calls = api_classify(df, by_class, table_api, other)
            notes.add(calls)
            yield "api_calls", api_rows(calls, strings)
        times.finish()
        other.warn()
        notes.warn()


def _markers(
    con: sqlite3.Connection, names: set[str], strings: pl.DataFrame, bad_ids: set[int], batch: int
) -> Iterator[Chunk]:
    if NVTX not in names:
        return
    # The domains' names first, from the DomainCreate rows alone (a few per process).
    creates = nvtx_where(con, only=(NVTX_DOMAIN_CREATE,))
    domains = pl.DataFrame(schema={"domain_id": _I, "domain": pl.String()})
    if creates:  # without an eventType column no row is a marker or a domain
        parts = [
            nvtx_named(df, strings)
            for df in fetch_batches(
                con, NVTX, NVTX_COLS, NVTX_SCHEMA, where=creates, strict_batch=batch
            )
        ]
        if parts:
            domains = nvtx_domains(pl.concat(parts))
    times = TimeChecks(NVTX, end_nullable=True)
    notes = NameNotes(NVTX_NAMES, strings, bad_ids)
    nul_texts = 0
    for df in fetch_batches(
        con, NVTX, NVTX_COLS, NVTX_SCHEMA, where=nvtx_where(con), strict_batch=batch
    ):
        times.add(df)
        nul_texts += nvtx_nul_texts(df)
        notes.add(df)
        yield "markers", marker_rows(nvtx_named(df, strings), domains)
    times.finish()
    warn_nul_texts(nul_texts)
    notes.warn()


def _gpu_metrics(con: sqlite3.Connection, names: set[str], batch: int) -> Iterator[Chunk]:
    info = metric_info(con, names)
    if info is None:
        return
    for m in fetch_batches(con, "GPU_METRICS", METRIC_COLS, METRIC_SCHEMA, strict_batch=batch):
        yield "gpu_metrics", metric_rows(m, info)
