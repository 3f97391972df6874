"""The nsys_sqlite reader's row transforms: one batch of a source table's integer columns (and
name ids) in, rows of a schema table out. The whole-frame reader (`nsys.tables`) applies them
to a whole table, the stream (`nsys.stream`) to each batch, so both give the same rows; the
checks that count over a table (`NameNotes`, `ApiNotes`) add up batch by batch and warn once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from ..common.core import warn
from .enums import _API_LABELS, _label

_I = pl.Int64()
_S = pl.String()
_API_VERSION_SUFFIX = r"_v\d+$"
# NVTX eventType values (ENUM_NSYS_EVENT_TYPE): the ones that become markers, and DomainCreate.
NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 34, 59, 60, 75


def _drop_nul(e: pl.Expr) -> pl.Expr:
    # NUL-separated KEY=VALUE blocks are environments (formats.md §3.2): never emitted.
    # (`when(keep).then(e)` keeps e's name; a null literal in `then` would rename the column.)
    return pl.when(~e.str.contains("\x00", literal=True)).then(e)


def _resolve(ids: pl.Expr, strings: pl.DataFrame) -> pl.Expr:
    """The StringIds text of each id, null for an id without a row. A gather from the small
    StringIds frame: the rows' strings are views of its buffers (polars' string views), so a
    kernel name shared by a million launches is stored once, not copied per row, and the ids
    stay integers until here, the end of the batch."""
    if strings.height == 0:
        return pl.lit(None, dtype=_S)
    pos = ids.replace_strict(
        strings["id"],
        pl.int_range(strings.height, eager=True, dtype=pl.UInt32),
        default=None,
        return_dtype=pl.UInt32,
    )
    return pl.lit(strings["value"]).gather(pos)


def _pid(col: str) -> pl.Expr:
    # globalPid/globalTid pack (vm, pid, tid): pid = (g >> 24) & 0xFFFFFF (formats.md §3.2).
    return ((pl.col(col) // (1 << 24)) % (1 << 24)).alias("process_id")


def _tid(col: str) -> pl.Expr:
    return (pl.col(col) % (1 << 24)).alias("thread_id")


class NameNotes:
    """Rows whose name id names an environment block (dropped: its text holds NUL bytes) or no
    StringIds row (unresolved), counted per id column over every batch of a table; `warn`
    once at its end. `checks`: (id column, what the dropped warning calls the rows, what the
    unresolved warning calls them, the source column)."""

    def __init__(
        self,
        checks: Sequence[tuple[str, str, str, str]],
        strings: pl.DataFrame,
        bad_ids: set[int],
    ) -> None:
        self.checks, self.strings, self.bad_ids = checks, strings, bad_ids
        self.dropped = [0] * len(checks)
        self.unresolved = [0] * len(checks)
        self._bad = list(bad_ids)

    def add(self, frame: pl.DataFrame) -> None:
        if not frame.height:
            return
        for i, (col, *_) in enumerate(self.checks):
            ids = pl.col(col)
            if self._bad:
                self.dropped[i] += frame.filter(ids.is_in(self._bad)).height
            known = ids.is_in(self.strings["id"].implode())
            self.unresolved[i] += frame.filter(ids.is_not_null() & ~known).height

    def warn(self) -> None:
        for (_, dropped_what, what, column), n_drop, n_unres in zip(
            self.checks, self.dropped, self.unresolved, strict=True
        ):
            if n_drop:
                warn(
                    f"nsys_sqlite: {n_drop} {dropped_what} named by a StringIds entry holding "
                    "NUL bytes (an environment block); their names are left null"
                )
            if n_unres:
                warn(
                    f"nsys_sqlite: {n_unres} {what} whose {column} id is not in StringIds; "
                    "their names are left null"
                )


# --- kernels ------------------------------------------------------------------------------------

KERNEL_COLS = {
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
    # `--cuda-graph-trace=node` only (formats.md section 10); null when absent
    "graph_id": "graphId",
    "graph_node_id": "graphNodeId",
}
KERNEL_NAMES = tuple(
    (col, f"kernels' {col.removesuffix('_id')}s", "kernels", KERNEL_COLS[col])
    for col in ("name_id", "short_id", "mangled_id")
)


def graph_columns(nodes: Mapping[int, int] | None) -> list[pl.Expr]:
    """`graph_id`, `graph_node_id` (a node cloned at instantiation mapped back to the captured
    node: `CUDA_GRAPH_NODE_EVENTS.originalGraphNodeId`, in `nodes`) and `graph_launch`. CUPTI
    writes 0 for an op outside any graph; it is no id."""
    gid: pl.Expr = pl.when(pl.col("graph_id") != 0).then(pl.col("graph_id"))
    node: pl.Expr = pl.when(pl.col("graph_node_id") != 0).then(pl.col("graph_node_id"))
    if nodes:
        node = node.replace(dict(nodes))
    return [
        gid.alias("graph_id"),
        node.alias("graph_node_id"),
        (gid.is_not_null() | node.is_not_null()).alias("graph_launch"),
    ]


def kernel_rows(
    df: pl.DataFrame,
    strings: pl.DataFrame,
    first_id: int = 0,
    nodes: Mapping[int, int] | None = None,
) -> pl.DataFrame:
    """Kernels of one batch; `kernel_id` counts rows in table order from `first_id`."""
    return df.select(
        pl.int_range(first_id, first_id + pl.len(), dtype=pl.Int64).alias("kernel_id"),
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
        *[c for c in KERNEL_COLS if c.startswith(("grid_", "block_"))],
        "registers_per_thread",
        "static_smem_bytes",
        "dynamic_smem_bytes",
        *graph_columns(nodes),
    )


# --- whole-graph replays ------------------------------------------------------------------------

# `--cuda-graph-trace=graph` (nsys's default): one row per graph launch, no row per node
# (formats.md section 10). Columns as the CUPTI record (CUpti_ActivityGraphTrace2) and public
# exports give them; `greenContextId` (2024+) is not kept.
GRAPH_TRACE_COLS = {
    "start_ns": "start",
    "end_ns": "end",
    "device_id": "deviceId",
    "context_id": "contextId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
    "graph_id": "graphId",
    "graph_exec_id": "graphExecId",
}


def graph_replay_rows(df: pl.DataFrame, first_id: int = 0) -> pl.DataFrame:
    """Whole-graph replays of one batch, kept as such (one row per replay, never split into
    kernels); `replay_id` counts rows in table order from `first_id`. CUPTI writes start = end
    = 0 when it could not time a replay: both become null."""
    untimed = (pl.col("start_ns") == 0) & (pl.col("end_ns") == 0)
    start = pl.when(~untimed).then(pl.col("start_ns"))
    end = pl.when(~untimed).then(pl.col("end_ns"))
    return df.select(
        pl.int_range(first_id, first_id + pl.len(), dtype=pl.Int64).alias("replay_id"),
        _pid("global_pid"),
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
        "graph_id",
        "graph_exec_id",
        start.alias("start_ns"),
        end.alias("end_ns"),
        (end - start).alias("duration_ns"),
    )


def untimed_replays(df: pl.DataFrame) -> int:
    """Rows CUPTI could not time (start = end = 0), for the reader's warning."""
    return df.filter((pl.col("start_ns") == 0) & (pl.col("end_ns") == 0)).height


def warn_untimed_replays(n: int) -> None:
    if n:
        warn(
            f"nsys_sqlite: {n} CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows with start = end = 0 (CUPTI "
            "could not time the replay); their times are left null"
        )


# --- memcpy / memset ----------------------------------------------------------------------------

_COPY_COMMON = {
    "start_ns": "start",
    "end_ns": "end",
    "device_id": "deviceId",
    "context_id": "contextId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
    "size_bytes": "bytes",
    "graph_id": "graphId",
    "graph_node_id": "graphNodeId",
}
MEMCPY_COLS = {**_COPY_COMMON, "copy_kind": "copyKind", "src": "srcKind", "dst": "dstKind"}
MEMSET_COLS = {**_COPY_COMMON, "mem_kind": "memKind"}
_HEAD: list[pl.Expr | str] = [
    _pid("global_pid"),
    "device_id",
    "context_id",
    "stream_id",
    "correlation_id",
]
_TAIL: list[pl.Expr | str] = [
    "size_bytes",
    "start_ns",
    "end_ns",
    (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
]


def memcpy_rows(
    df: pl.DataFrame,
    copy_kinds: dict[int, str | None],
    mem_kinds: dict[int, str | None],
    nodes: Mapping[int, int] | None = None,
) -> pl.DataFrame:
    return df.select(
        *_HEAD,
        _label(pl.col("copy_kind"), copy_kinds, "kind"),
        _label(pl.col("src"), mem_kinds, "src_kind"),
        _label(pl.col("dst"), mem_kinds, "dst_kind"),
        *_TAIL,
        *graph_columns(nodes),
    )


def memset_rows(
    df: pl.DataFrame, mem_kinds: dict[int, str | None], nodes: Mapping[int, int] | None = None
) -> pl.DataFrame:
    return df.select(
        *_HEAD,
        pl.lit("memset", dtype=pl.String).alias("kind"),
        pl.lit(None, dtype=pl.String).alias("src_kind"),
        _label(pl.col("mem_kind"), mem_kinds, "dst_kind"),
        *_TAIL,
        *graph_columns(nodes),
    )


# --- API calls ----------------------------------------------------------------------------------

API_COLS = {
    "start_ns": "start",
    "end_ns": "end",
    "global_tid": "globalTid",
    "correlation_id": "correlationId",
    "name_id": "nameId",
    "return_code": "returnValue",
    "event_class": "eventClass",
}


class ApiNotes:
    """Rows of a CUDA API table whose event class is not a CUDA API call, counted per (class,
    label) over every batch, warned about once (then dropped; backtraces silently)."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.counts: list[pl.DataFrame] = []

    def add(self, other: pl.DataFrame) -> None:
        if other.height:
            self.counts.append(other.group_by("event_class", "api").len())

    def warn(self) -> None:
        if not self.counts:
            return
        counts = (
            pl.concat(self.counts)
            .group_by("event_class", "api")
            .agg(pl.col("len").sum())
            .sort("event_class")
        )
        listed = ", ".join(f"{n} of class {c} ({a or 'unknown'})" for c, a, n in counts.iter_rows())
        warn(f"nsys_sqlite: {self.table} rows of non-CUDA-API event classes dropped: {listed}")


def api_classify(
    df: pl.DataFrame,
    classes: dict[int, str | None] | None,
    table_api: str,
    notes: ApiNotes,
) -> pl.DataFrame:
    """The batch's CUDA API calls with their `api` label: by `eventClass` when the table has
    it (`classes`), else the table's own; other classes are counted into `notes`."""
    if classes is None:
        return df.with_columns(pl.lit(table_api, dtype=pl.String).alias("api"))
    df = df.with_columns(_label(pl.col("event_class"), classes, "api"))
    known = pl.col("api").is_in([*_API_LABELS, "backtrace"])
    notes.add(df.filter(~known.fill_null(False)))
    return df.filter(pl.col("api").is_in(_API_LABELS))


def api_rows(df: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    return df.select(
        _pid("global_tid"),
        _tid("global_tid"),
        "correlation_id",
        "api",
        _resolve(pl.col("name_id"), strings).str.replace(_API_VERSION_SUFFIX, "").alias("name"),
        "return_code",
        "start_ns",
        "end_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
    )


# --- NVTX markers -------------------------------------------------------------------------------

NVTX_COLS = {
    "start_ns": "start",
    "end_ns": "end",
    "event_type": "eventType",
    "text": "text",
    "global_tid": "globalTid",
    "text_id": "textId",
    "domain_id": "domainId",
}
NVTX_SCHEMA = {**dict.fromkeys(NVTX_COLS, _I), "text": _S}
NVTX_WANTED = (NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE)


def nvtx_nul_texts(df: pl.DataFrame) -> int:
    return df.filter(pl.col("text").str.contains("\x00", literal=True)).height


def warn_nul_texts(n: int) -> None:
    if n:
        warn(f"nsys_sqlite: {n} NVTX texts hold NUL bytes (environment blocks); left null")


def nvtx_named(df: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """The batch with its `name`: `text`, else `StringIds[textId]` (formats.md §3.2)."""
    return df.with_columns(
        pl.coalesce(_drop_nul(pl.col("text")), _resolve(pl.col("text_id"), strings)).alias("name")
    )


def nvtx_domains(named: pl.DataFrame) -> pl.DataFrame:
    """Domain names: the first name of each domain's DomainCreate rows (domain 0, the default
    domain, has none)."""
    return (
        named.filter(pl.col("event_type") == NVTX_DOMAIN_CREATE, pl.col("domain_id") != 0)
        .group_by("domain_id")
        .agg(pl.col("name").drop_nulls().first().alias("domain"))
    )


def marker_rows(named: pl.DataFrame, domains: pl.DataFrame) -> pl.DataFrame:
    ev = named.filter(pl.col("event_type").is_in([NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND]))
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


# --- GPU metrics --------------------------------------------------------------------------------

METRIC_COLS = {
    "timestamp_ns": "timestamp",
    "type_id": "typeId",
    "metric_id": "metricId",
    "value": "value",
}
METRIC_SCHEMA = {"timestamp_ns": _I, "type_id": _I, "metric_id": _I, "value": pl.Float64()}


def metric_rows(m: pl.DataFrame, info: pl.DataFrame) -> pl.DataFrame:
    return m.join(info, on=["type_id", "metric_id"], how="left", maintain_order="left").select(
        (pl.col("type_id") % 256).alias("device_id"),
        "timestamp_ns",
        "metric_name",
        "unit",
        "value",
    )
