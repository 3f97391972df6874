"""The nvprof_sqlite reader's NVTX markers (`CUPTI_ACTIVITY_KIND_MARKER`) and environment samples
(`CUPTI_ACTIVITY_KIND_ENVIRONMENT`): the whole-frame tables (`markers`, `gpu_samples`) and the
same tables a batch at a time for `stream_nvprof_sqlite` (`marker_chunks`, `sample_chunks`).

Markers: the whole read pairs each start row with the first end row of its `id` by a hash join
in polars (the fastest way to pair a table held whole). The stream has SQLite pair them: a LEFT
JOIN of the start and mark rows to the first end row of each id (a GROUP BY with `min(rowid)`,
whose bare column is that row's, sqlite.org/lang_select.html#bareagg), read in the whole
read's order (`ORDER BY timestamp, rowid`, what its stable sort by start gives). SQLite's
external sorter makes that order (`NOT INDEXED`: the export's index on `timestamp` would cost a
random row lookup per row, ~1.8x the time) and it keeps the GROUP BY and the automatic index on
`id` in its own temporary B-trees (cache-sized memory, temp files), so a batch is all this
process holds. The counts warned over the whole table (ranges without an end, ends without a start,
names absent from StringTable) are summed over the batches or counted by SQLite, and warned
once at the end with the whole read's text. Strings are fetched per batch (its distinct ids).

Environment samples: one function makes the rows of a frame of raw samples, whole table or
batch: kinds decoded, records of one (device, timestamp) merged. The stream reads the raw rows
in output order (`ORDER BY timestamp, deviceId, rowid`), so that one sample's records are
adjacent, and holds back the last (device, timestamp) of each batch until the next batch shows
whether more records of it follow.

Both streams need SQLite's order and pairing to be polars' on the same cells, which holds for
integer cells: a table with a cell of another storage class (text, real, a non-BLOB object id;
`typeof`, one scan) or a null flag/timestamp/id is read whole instead, by the whole-frame
function, so that the stream's rows, warnings and errors are the whole read's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl

from ...errors import MalformedInput
from ..common.core import (
    PathLike,
    check_telemetry,
    check_times,
    null_implausible,
    table_columns,
    warn,
    warn_implausible,
)
from ..common.sqlite import q, query_frame
from ..common.sqlite_parallel import rowid_alias
from ..common.sqlite_stream import query_batches
from .sql import _K, _STRINGS, _select, _with_strings, dangling, note_dangling

Chunk = tuple[str, pl.DataFrame]
MARKER_TABLE = f"{_K}MARKER"
ENV_TABLE = f"{_K}ENVIRONMENT"

# CUpti_ActivityFlag marker bits
_MARKER_INSTANTANEOUS, _MARKER_START, _MARKER_END = 1, 2, 4
# CUpti_ActivityObjectKind
_OBJECT_PROCESS, _OBJECT_THREAD = 1, 2
# CUpti_ActivityEnvironmentKind
_ENV_SPEED, _ENV_TEMPERATURE, _ENV_POWER, _ENV_COOLING = 1, 2, 3, 4
_KNOWN = [_ENV_SPEED, _ENV_TEMPERATURE, _ENV_POWER, _ENV_COOLING]
# CUpti_EnvironmentClocksThrottleReason values that mean "no reading"
_THROTTLE_UNKNOWN, _THROTTLE_UNSUPPORTED = 0x80000000, 0x40000000

_I = pl.Int64

_MARKER_WANT: dict[str, str | None] = {
    "flags": "flags",
    "timestamp": "timestamp",
    "id": "id",
    "object_kind": "objectKind",
    "object_id": "objectId",
    "name_id": "name",
    "domain_id": "domain",
}
_MARKER_REQUIRED = ["flags", "timestamp", "id", "name"]
_MARKER_SCHEMA: dict[str, pl.DataType] = {c: _I() for c in _MARKER_WANT}
_MARKER_SCHEMA["object_id"] = pl.Binary()

_ENV_WANT: dict[str, str | None] = {
    "device_id": "deviceId",
    "timestamp_ns": "timestamp",
    "env_kind": "environmentKind",
    "data": "data",
}
_ENV_REQUIRED = ["timestamp", "environmentKind", "data"]
_ENV_SCHEMA: dict[str, pl.DataType] = {c: _I() for c in _ENV_WANT}
_ENV_SCHEMA["data"] = pl.Binary()


def _u32(blob: str, offset: int) -> pl.Expr:
    """Little-endian uint32 at `offset` of a BLOB column; null when the BLOB is too short."""
    return pl.col(blob).bin.slice(offset, 4).bin.reinterpret(dtype=pl.UInt32, endianness="little")


def _col(have: list[str], col: str | None) -> str:
    return f"t.{q(col)}" if col is not None and col in have else "NULL"


def _clean(
    con: sqlite3.Connection, table: str, want: dict[str, str | None], blobs: set[str]
) -> bool:
    """Every cell of `want`'s columns an integer (a BLOB for `blobs`) or null: SQLite's order,
    joins and grouping then agree with polars' on the typed frame."""
    have = table_columns(con, table)
    bad = []
    for out, col in want.items():
        if col is None or col not in have:
            continue
        ok = "'blob'" if out in blobs else "'integer'"
        bad.append(f"typeof(t.{q(col)}) NOT IN ({ok}, 'null')")
    if not bad:
        return True
    sql = f"SELECT count(*) FROM (SELECT 1 FROM {q(table)} t WHERE {' OR '.join(bad)} LIMIT 1)"
    return int(con.execute(sql).fetchone()[0]) == 0


# --- markers ----------------------------------------------------------------------------------


def markers(con: sqlite3.Connection, path: PathLike, tables: set[str]) -> pl.DataFrame | None:
    """The whole `markers` table (the whole read)."""
    table = MARKER_TABLE
    if table not in tables:
        return None
    cols = _select(con, path, table, _MARKER_WANT, _MARKER_REQUIRED)
    sql = f"SELECT {', '.join(cols)} FROM {q(table)} t"
    df = query_frame(con, path, table, sql, _MARKER_SCHEMA)
    check_times(df, path=path, table=table, start="timestamp", end=None, columns=("timestamp", ""))
    # end rows carry name 0; only start/mark rows' strings are fetched
    ids = f"SELECT name FROM {q(table)} WHERE (flags & {_MARKER_END}) = 0"
    df = _with_strings(con, path, df, "name_id", "name", ids)
    note_dangling(dangling(df, "name", "name_id"), "markers", path)
    df = _with_domains(con, path, df, f"SELECT DISTINCT domain FROM {q(table)}")
    is_end = (pl.col("flags") & _MARKER_END) != 0
    ends = (
        df.filter(is_end)
        .select("id", pl.col("timestamp").alias("end_ns"))
        .unique("id", keep="first", maintain_order=True)
    )
    starts = df.filter(~is_end)
    out = starts.join(ends, on="id", how="left", maintain_order="left")
    is_range = (pl.col("flags") & _MARKER_START) != 0
    orphans = ends.join(starts.filter(is_range), on="id", how="anti").height
    rows, open_ranges = _marker_rows(out)
    _warn_markers(open_ranges, orphans, path)
    return rows.sort("start_ns", maintain_order=True, nulls_last=True)


def _with_domains(
    con: sqlite3.Connection, path: PathLike, df: pl.DataFrame, ids: str
) -> pl.DataFrame:
    if "domain" in table_columns(con, MARKER_TABLE):
        return _with_strings(con, path, df, "domain_id", "domain", ids)
    return df.with_columns(pl.lit(None, dtype=pl.String).alias("domain"))


_MARKER_COLUMNS = [
    *("name", "domain", "end_ns", "process_id", "thread_id"),
    *("start_ns", "duration_ns", "category"),
]


def _marker_rows(df: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Output rows of start and mark rows joined to their end's time (`end_ns`), whole table
    or batch, and how many of them are ranges without an end."""
    is_range = (pl.col("flags") & _MARKER_START) != 0
    # only ranges end: a mark or a sync-flag row keeps a null end even when an end row shares
    # its id
    df = df.with_columns(pl.when(is_range).then(pl.col("end_ns")).alias("end_ns"))
    open_ranges = df.filter(is_range & pl.col("end_ns").is_null()).height
    kind = pl.col("object_kind")
    out = df.with_columns(
        pl.when(kind.is_in([_OBJECT_PROCESS, _OBJECT_THREAD]))
        .then(_u32("object_id", 0))
        .cast(_I)
        .alias("process_id"),
        pl.when(kind == _OBJECT_THREAD).then(_u32("object_id", 4)).cast(_I).alias("thread_id"),
        pl.col("timestamp").alias("start_ns"),
        (pl.col("end_ns") - pl.col("timestamp")).alias("duration_ns"),
        pl.lit("nvtx").alias("category"),
    ).select(_MARKER_COLUMNS)
    return out, open_ranges


def _warn_markers(open_ranges: int, orphans: int, path: PathLike) -> None:
    if open_ranges:
        warn(f"{path}: {open_ranges} NVTX range(s) without an end row; end left null")
    if orphans:
        warn(f"{path}: {orphans} NVTX end row(s) without a start row; dropped")


def _plan(
    con: sqlite3.Connection,
    path: PathLike,
    table: str,
    want: dict[str, str | None],
    required: list[str],
    blobs: set[str],
) -> tuple[list[str], list[str], str] | None:
    """(select list, the table's columns, its rowid alias) of a table the stream can read in
    batches; None when the whole read must take it (no rowid: WITHOUT ROWID; a cell that is
    not an integer, or a BLOB for `blobs`). A missing required column raises, as in `read`."""
    cols = _select(con, path, table, want, required)
    have = table_columns(con, table)
    rowid = rowid_alias(have)
    if rowid is None or not _clean(con, table, want, blobs):
        return None
    return cols, have, rowid


def _whole_table(name: str, whole: Callable[[], pl.DataFrame | None]) -> Iterator[Chunk]:
    """The table read whole, as one chunk (nothing when the whole read has none)."""
    df = whole()
    if df is not None:
        yield name, df


def marker_chunks(
    con: sqlite3.Connection,
    path: PathLike,
    tables: set[str],
    batch: int,
    whole: Callable[[], pl.DataFrame | None],
) -> Iterator[Chunk]:
    """`markers(...)` a batch at a time (its rows, order, warnings and errors)."""
    table = MARKER_TABLE
    if table not in tables:
        return
    plan = _plan(con, path, table, _MARKER_WANT, _MARKER_REQUIRED, {"object_id"})
    if plan is None or _null_keys(con):
        yield from _whole_table("markers", whole)
        return
    cols, _, rowid = plan
    end, start = f"(e.flags & {_MARKER_END}) != 0", f"(t.flags & {_MARKER_START}) != 0"
    sql = (
        f"SELECT {', '.join(cols)}, e.end_ns FROM {q(table)} t NOT INDEXED LEFT JOIN "
        f"(SELECT e.id AS id, e.timestamp AS end_ns, min(e.{rowid}) FROM {q(table)} e "
        f"WHERE {end} GROUP BY e.id) e ON e.id = t.id AND {start} "
        f"WHERE (t.flags & {_MARKER_END}) = 0 ORDER BY t.timestamp, t.{rowid}"
    )
    schema = {**_MARKER_SCHEMA, "end_ns": _I()}
    n_dangling = _dangling_ends(con)
    open_ranges = 0
    try:
        for df in query_batches(con, path, table, sql, schema, batch):
            df = _with_strings(con, path, df, "name_id", "name", _id_list(df, "name_id"))
            n_dangling += dangling(df, "name", "name_id")
            df = _with_domains(con, path, df, _id_list(df, "domain_id"))
            rows, n = _marker_rows(df)
            open_ranges += n
            yield "markers", rows
    except MalformedInput:
        whole()  # the whole read's error for the same cells
        raise
    note_dangling(n_dangling, "markers", path)
    _warn_markers(open_ranges, _orphan_ends(con), path)


def _id_list(df: pl.DataFrame, col: str) -> str:
    """The distinct ids of a batch as an SQL list (integers: `_clean` checked the table)."""
    ids = df[col].drop_nulls().unique().to_list()
    return ", ".join(str(int(i)) for i in ids) if ids else "NULL"


def _null_keys(con: sqlite3.Connection) -> bool:
    """A row without flags, timestamp or id: the whole read's rules (an error, or a row that
    pairs with nothing) are left to it."""
    sql = (
        f"SELECT count(*) FROM (SELECT 1 FROM {q(MARKER_TABLE)} "
        "WHERE flags IS NULL OR timestamp IS NULL OR id IS NULL LIMIT 1)"
    )
    return int(con.execute(sql).fetchone()[0]) > 0


def _dangling_ends(con: sqlite3.Connection) -> int:
    """End rows that the whole read counts as naming an absent string: a name id other than 0
    that no start or mark row uses (only their strings are fetched) or that StringTable lacks."""
    m = q(MARKER_TABLE)
    sql = (
        f"SELECT count(*) FROM {m} e WHERE (e.flags & {_MARKER_END}) != 0 "
        "AND e.name IS NOT NULL AND e.name <> 0 AND NOT ("
        f"e.name IN (SELECT name FROM {m} WHERE (flags & {_MARKER_END}) = 0 "
        "AND name IS NOT NULL) AND EXISTS ("
        f"SELECT 1 FROM {_STRINGS} s WHERE s._id_ = e.name AND s.value IS NOT NULL))"
    )
    return int(con.execute(sql).fetchone()[0])


def _orphan_ends(con: sqlite3.Connection) -> int:
    """Distinct ids of end rows with no range start row of that id."""
    start = f"(flags & {_MARKER_START}) != 0 AND (flags & {_MARKER_END}) = 0"
    sql = (
        f"SELECT count(*) FROM (SELECT max({start}) AS s FROM {q(MARKER_TABLE)} GROUP BY id "
        f"HAVING max((flags & {_MARKER_END}) != 0) = 1) WHERE s = 0"
    )
    return int(con.execute(sql).fetchone()[0])


# --- environment samples ----------------------------------------------------------------------


def gpu_samples(
    con: sqlite3.Connection, path: PathLike, tables: set[str], devices: pl.DataFrame | None
) -> pl.DataFrame | None:
    """The whole `gpu_samples` table (the whole read)."""
    table = ENV_TABLE
    if table not in tables:
        return None
    cols = _select(con, path, table, _ENV_WANT, _ENV_REQUIRED)
    df = query_frame(con, path, table, f"SELECT {', '.join(cols)} FROM {q(table)} t", _ENV_SCHEMA)
    if df.height == 0:
        return None
    _warn_samples(_sample_counts(df), path)
    wide = _merged(_decoded(df), devices)
    return check_telemetry(wide, path=path, reader="nvprof_sqlite")


def _sample_counts(df: pl.DataFrame) -> tuple[int, int, int]:
    """Raw records of an unknown kind, without a timestamp, and with a short data BLOB."""
    k = pl.col("env_kind")
    unknown = df.filter(~k.is_in(_KNOWN)).height
    no_time = df.filter(pl.col("timestamp_ns").is_null() | (pl.col("timestamp_ns") == 0)).height
    # bytes each kind's struct needs: speed 5 x uint32, temperature 1, power 2, cooling 1
    need = k.replace_strict({1: 20, 2: 4, 3: 8, 4: 4}, default=0, return_dtype=pl.Int64)
    short = df.filter(k.is_in(_KNOWN) & (pl.col("data").bin.size().fill_null(0) < need)).height
    return unknown, no_time, short


def _warn_samples(counts: tuple[int, int, int], path: PathLike) -> None:
    unknown, no_time, short = counts
    if unknown:
        warn(f"{path}: {unknown} environment sample(s) of an unknown kind; dropped")
    if no_time:
        # CUPTI: a timestamp of 0 means it could not be collected
        warn(f"{path}: {no_time} environment sample(s) without a timestamp; dropped")
    if short:
        warn(f"{path}: {short} environment sample(s) with a short data BLOB; values left null")


def _decoded(df: pl.DataFrame) -> pl.DataFrame:
    """Records of known kinds with a timestamp, their union decoded into the value columns."""
    k = pl.col("env_kind")

    def field(kind: int, offset: int) -> pl.Expr:
        return pl.when(k == kind).then(_u32("data", offset)).cast(pl.Float64)

    reasons = pl.when(k == _ENV_SPEED).then(_u32("data", 16)).cast(_I)
    return (
        df.filter(k.is_in(_KNOWN) & (pl.col("timestamp_ns") > 0))
        .with_columns(
            field(_ENV_SPEED, 0).alias("sm_clock_mhz"),
            field(_ENV_SPEED, 4).alias("mem_clock_mhz"),
            pl.when(~reasons.is_in([_THROTTLE_UNKNOWN, _THROTTLE_UNSUPPORTED]))
            .then(reasons)
            .alias("clock_event_reasons"),
            field(_ENV_TEMPERATURE, 0).alias("temperature_c"),
            (field(_ENV_POWER, 0) / 1000.0).alias("power_w"),
            (field(_ENV_POWER, 4) / 1000.0).alias("power_limit_w"),
            field(_ENV_COOLING, 0).alias("fan_pct"),
        )
        .drop("env_kind", "data")
    )


def _merge(wide: pl.DataFrame) -> pl.DataFrame:
    """Decoded records of one (device, timestamp) merged into one row (each value the first
    non-null one), by time then device. Merging merged rows with more records of theirs gives
    what merging all the records at once gives."""
    values = [c for c in wide.columns if c not in ("device_id", "timestamp_ns")]
    return (
        wide.group_by("device_id", "timestamp_ns", maintain_order=True)
        .agg(pl.col(c).drop_nulls().first() for c in values)
        .sort("timestamp_ns", "device_id", maintain_order=True)
    )


def _merged(wide: pl.DataFrame, devices: pl.DataFrame | None) -> pl.DataFrame:
    """`_merge`, with the devices' uuids."""
    wide = _merge(wide)
    if devices is not None and devices.height:
        uuids = devices.select("device_id", pl.col("uuid").alias("device_uuid"))
        wide = wide.join(uuids, on="device_id", how="left", maintain_order="left")
    return wide


def sample_chunks(
    con: sqlite3.Connection,
    path: PathLike,
    tables: set[str],
    devices: pl.DataFrame | None,
    batch: int,
    whole: Callable[[], pl.DataFrame | None],
) -> Iterator[Chunk]:
    """`gpu_samples(...)` a batch at a time (its rows, order, warnings and errors)."""
    table = ENV_TABLE
    if table not in tables:
        return
    plan = _plan(con, path, table, _ENV_WANT, _ENV_REQUIRED, {"data"})
    if plan is None:
        yield from _whole_table("gpu_samples", whole)
        return
    cols, have, rowid = plan
    order = f"{_col(have, 'timestamp')}, {_col(have, 'deviceId')}, t.{rowid}"
    sql = f"SELECT {', '.join(cols)} FROM {q(table)} t NOT INDEXED ORDER BY {order}"
    counts = [0, 0, 0]
    plausible = _Plausible(path)
    held: pl.DataFrame | None = None
    seen = False
    try:
        for df in query_batches(con, path, table, sql, _ENV_SCHEMA, batch):
            seen = True
            counts = [a + b for a, b in zip(counts, _sample_counts(df), strict=True)]
            rows = _decoded(df) if held is None else pl.concat([held, _decoded(df)])
            if rows.height == 0:
                continue
            # the last sample may go on in the next batch
            d, t = rows.row(-1)[:2]
            last = (pl.col("timestamp_ns") == t) & pl.col("device_id").eq_missing(d)
            held = _merge(rows.filter(last))  # one row, however many records
            done = rows.filter(~last)
            if done.height:
                yield "gpu_samples", plausible.check(_merged(done, devices))
    except MalformedInput:
        whole()  # the whole read's error for the same cells
        raise
    if not seen:
        return
    _warn_samples((counts[0], counts[1], counts[2]), path)
    if held is not None:
        yield "gpu_samples", plausible.check(_merged(held, devices))
    plausible.finish()


class _Plausible:
    """`common.core.check_telemetry` over a table that arrives in batches: `check` nulls each
    batch's implausible values, `finish` warns once per column with check_telemetry's text
    (the count over all batches, the first value in output order)."""

    def __init__(self, path: PathLike) -> None:
        self.path = path
        self.hits: dict[str, tuple[int, Any]] = {}

    def check(self, samples: pl.DataFrame) -> pl.DataFrame:
        fixed, hits = null_implausible(samples)
        for col, (n, first) in hits.items():
            before, first = self.hits.get(col, (0, first))
            self.hits[col] = (before + n, first)
        return fixed

    def finish(self) -> None:
        warn_implausible(self.hits, path=self.path, reader="nvprof_sqlite")
