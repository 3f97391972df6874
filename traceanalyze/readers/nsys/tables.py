"""The nsys_sqlite reader's tables, one function each (what each holds: nsys_sqlite's
docstring). Every function takes the open read-only connection and the set of table names; the
big integer tables also take the ADBC engine (`common.sqlite.Fast`, None for sqlite3 alone).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence

import polars as pl

from ...rank_names import rank_columns
from ..common import sqlite as _sqlite
from ..common.core import check_times, table_columns, warn
from ..common.sqlite import Fast
from .enums import (
    COPY_KIND_2X,
    EVENT_CLASS_2X,
    MEM_KIND_2X,
    _class_label,
    _copy_label,
    _enum,
    _mem_label,
)
from .ranks import rank_hints
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
    NVTX_SCHEMA,
    NVTX_WANTED,
    ApiNotes,
    NameNotes,
    _drop_nul,
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

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX = "NVTX_EVENTS"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"

# Columns without which a table's rows would be wrong, not just less complete (issue 9): they
# are present in every export here (2.x and 3.x) and a missing or renamed one raises
# MissingColumn naming it, instead of turning into a null for every row. Other columns are
# optional (version drift) and become null when absent.
REQUIRED: dict[str, tuple[str, ...]] = {
    "StringIds": ("id", "value"),
    KERNEL: ("start", "end", "deviceId", "demangledName"),
    MEMCPY: ("start", "end", "deviceId", "bytes", "copyKind"),
    MEMSET: ("start", "end", "deviceId", "bytes"),
    RUNTIME: ("start", "end", "nameId"),
    DRIVER: ("start", "end", "nameId"),
    NVTX: ("start", "end"),
    GRAPH_TRACE: ("start", "end"),
    "TARGET_INFO_GPU": ("cuDevice",),
    "TARGET_INFO_CUDA_DEVICE": ("gpuId", "cudaId"),
    "TARGET_INFO_GPU_METRICS": ("typeId", "metricId", "metricName"),
    "GPU_METRICS": ("timestamp", "typeId", "metricId", "value"),
}


def _fetch(
    con: sqlite3.Connection,
    table: str,
    wanted: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
    *,
    where: str = "",
    fast: Fast | None = None,
) -> pl.DataFrame:
    """`common.sqlite.fetch` with this export's required columns (`REQUIRED`)."""
    required = REQUIRED.get(table, ())
    return _sqlite.fetch(con, table, wanted, schema, required=required, where=where, fast=fast)


def fetch_batches(
    con: sqlite3.Connection,
    table: str,
    wanted: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
    *,
    where: str = "",
    fast: Fast | None = None,
    strict_batch: int = _sqlite.BATCH,
) -> Iterator[pl.DataFrame]:
    """`common.sqlite.fetch_batches` with this export's required columns: `_fetch` a batch at a
    time."""
    required = REQUIRED.get(table, ())
    return _sqlite.fetch_batches(
        con,
        table,
        wanted,
        schema,
        required=required,
        where=where,
        fast=fast,
        strict_batch=strict_batch,
    )


def _meta(con: sqlite3.Connection, names: set[str]) -> dict[str, str]:
    """EXPORT_PRODUCT_VERSION / EXPORT_SCHEMA_VERSION, from whichever metadata table exists.

    Only these keys are queried: the metadata tables also hold host, user and paths.
    """
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if t in names and {"name", "value"} <= set(table_columns(con, t)):
            rows = con.execute(
                f"SELECT name, value FROM {t} WHERE name IN "
                "('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION')"
            ).fetchall()
            return {str(k): str(v) for k, v in rows if v is not None}
    return {}


def _strings(con: sqlite3.Connection, names: set[str]) -> pl.DataFrame:
    """StringIds as (id, value); values holding a NUL byte (environment blocks) become null."""
    schema = {"id": pl.Int64(), "value": pl.String()}
    if "StringIds" not in names:
        return pl.DataFrame(schema=schema)
    df = _fetch(con, "StringIds", {"id": "id", "value": "value"}, schema)
    return df.with_columns(_drop_nul(pl.col("value")))


_I = pl.Int64()
_S = pl.String()


GRAPH_NODES = "CUDA_GRAPH_NODE_EVENTS"


def graph_nodes(con: sqlite3.Connection, names: set[str]) -> dict[int, int]:
    """graphNodeId -> originalGraphNodeId for the nodes cloned at graph instantiation
    (`CUDA_GRAPH_NODE_EVENTS`, formats.md section 10), so that a replayed op names the node that
    was captured; empty when the export has no such table or column."""
    if GRAPH_NODES not in names:
        return {}
    cols = set(table_columns(con, GRAPH_NODES))
    if not {"graphNodeId", "originalGraphNodeId"} <= cols:
        return {}
    wanted = {"node": "graphNodeId", "original": "originalGraphNodeId"}
    df = _fetch(con, GRAPH_NODES, wanted, dict.fromkeys(wanted, _I))
    df = df.filter(
        pl.col("node").is_not_null()
        & pl.col("original").is_not_null()
        & (pl.col("original") != 0)
        & (pl.col("original") != pl.col("node"))
    ).unique("node", keep="first", maintain_order=True)
    return dict(zip(df["node"].to_list(), df["original"].to_list(), strict=True))


def _kernels(
    con: sqlite3.Connection,
    names: set[str],
    strings: pl.DataFrame,
    bad_ids: set[int],
    fast: Fast | None,
) -> pl.DataFrame | None:
    if KERNEL not in names:
        return None
    df = _fetch(con, KERNEL, KERNEL_COLS, dict.fromkeys(KERNEL_COLS, _I), fast=fast)
    check_times(df, path=None, table=KERNEL)
    notes = NameNotes(KERNEL_NAMES, strings, bad_ids)
    notes.add(df)
    notes.warn()
    return kernel_rows(df, strings, nodes=graph_nodes(con, names))


def _graph_replays(
    con: sqlite3.Connection, names: set[str], fast: Fast | None
) -> pl.DataFrame | None:
    """`graph_replays` <- CUPTI_ACTIVITY_KIND_GRAPH_TRACE (`--cuda-graph-trace=graph`)."""
    if GRAPH_TRACE not in names:
        return None
    wanted = GRAPH_TRACE_COLS
    df = _fetch(con, GRAPH_TRACE, wanted, dict.fromkeys(wanted, _I), fast=fast)
    check_times(df, path=None, table=GRAPH_TRACE)
    warn_untimed_replays(untimed_replays(df))
    return graph_replay_rows(df)


def mem_kinds(con: sqlite3.Connection, names: set[str]) -> dict[int, str | None]:
    return _enum(con, names, "ENUM_CUDA_MEM_KIND", MEM_KIND_2X, _mem_label)


def copy_kinds(con: sqlite3.Connection, names: set[str]) -> dict[int, str | None]:
    return _enum(con, names, "ENUM_CUDA_MEMCPY_OPER", COPY_KIND_2X, _copy_label)


def _memcpy(con: sqlite3.Connection, names: set[str], fast: Fast | None) -> pl.DataFrame | None:
    parts = []
    mems = mem_kinds(con, names)
    nodes = graph_nodes(con, names)
    if MEMCPY in names:
        copies = copy_kinds(con, names)
        df = _fetch(con, MEMCPY, MEMCPY_COLS, dict.fromkeys(MEMCPY_COLS, _I), fast=fast)
        check_times(df, path=None, table=MEMCPY)
        parts.append(memcpy_rows(df, copies, mems, nodes))
    if MEMSET in names:
        df = _fetch(con, MEMSET, MEMSET_COLS, dict.fromkeys(MEMSET_COLS, _I), fast=fast)
        check_times(df, path=None, table=MEMSET)
        parts.append(memset_rows(df, mems, nodes))
    return pl.concat(parts, how="vertical") if parts else None


API_TABLES = ((RUNTIME, "runtime"), (DRIVER, "driver"))


def api_classes(
    con: sqlite3.Connection, names: set[str], table: str, classes: dict[int, str | None]
) -> dict[int, str | None] | None:
    """How `table`'s rows get their `api` label: by eventClass (`classes`) when it has the
    column, else None (by the table)."""
    return classes if "eventClass" in table_columns(con, table) else None


def event_classes(con: sqlite3.Connection, names: set[str]) -> dict[int, str | None]:
    return _enum(con, names, "ENUM_NSYS_EVENT_CLASS", EVENT_CLASS_2X, _class_label)


def api_names(table: str) -> tuple[tuple[str, str, str, str]]:
    return (("name_id", "API calls", f"{table} rows", "nameId"),)


def _api_calls(
    con: sqlite3.Connection,
    names: set[str],
    strings: pl.DataFrame,
    bad_ids: set[int],
    fast: Fast | None,
) -> pl.DataFrame | None:
    parts = []
    classes = event_classes(con, names)
    for table, table_api in API_TABLES:
        if table not in names:
            continue
        df = _fetch(con, table, API_COLS, dict.fromkeys(API_COLS, _I), fast=fast)
        check_times(df, path=None, table=table)
        other = ApiNotes(table)
        df = api_classify(df, api_classes(con, names, table, classes), table_api, other)
        other.warn()
        notes = NameNotes(api_names(table), strings, bad_ids)
        notes.add(df)
        notes.warn()
        parts.append(api_rows(df, strings))
    return pl.concat(parts, how="vertical") if parts else None


def nvtx_where(con: sqlite3.Connection, only: Sequence[int] = NVTX_WANTED) -> str:
    """The NVTX rows read: those of the `only` event types (all rows when there is no
    eventType column: none of them is then a marker)."""
    if "eventType" not in set(table_columns(con, NVTX)):
        return ""
    wanted = ", ".join(str(int(t)) for t in only)
    return f"WHERE eventType IN ({wanted})"


NVTX_NAMES = (("text_id", "NVTX events", "NVTX events", "textId"),)


def _markers(
    con: sqlite3.Connection, names: set[str], strings: pl.DataFrame, bad_ids: set[int]
) -> pl.DataFrame | None:
    if NVTX not in names:
        return None
    df = _fetch(con, NVTX, NVTX_COLS, NVTX_SCHEMA, where=nvtx_where(con))
    # marks and ranges still open at the end of the capture have no end (formats.md §3.2)
    check_times(df, path=None, table=NVTX, end_nullable=True)
    warn_nul_texts(nvtx_nul_texts(df))
    notes = NameNotes(NVTX_NAMES, strings, bad_ids)
    notes.add(df)
    notes.warn()
    named = nvtx_named(df, strings)
    return marker_rows(named, nvtx_domains(named))


def _uuid(e: pl.Expr) -> pl.Expr:
    # nsys stores bare UUIDs; nvidia-smi/NVML spell them 'GPU-<uuid>'.
    e = pl.when(e.str.strip_chars() == "").then(None).otherwise(e.str.strip_chars())
    return (
        pl.when(e.str.starts_with("GPU-") | e.str.starts_with("MIG-"))
        .then(e)
        .otherwise(pl.lit("GPU-") + e)
    )


_DEVICE_INFO: dict[str, pl.DataType] = {
    "device_id": _I,
    "name": _S,
    "uuid": _S,
    "compute_capability": _S,
    "sm_count": _I,
    "memory_bytes": _I,
}


def _devices(
    con: sqlite3.Connection, names: set[str], activity_ids: Sequence[pl.Series]
) -> pl.DataFrame:
    gpu = _target_info_gpu(con, names)
    rows = [gpu.drop("gpu_id", "cu_device")]
    if "TARGET_INFO_CUDA_DEVICE" in names:
        rows.insert(0, _target_info_cuda_device(con, gpu))
    seen = [s.drop_nulls().unique() for s in activity_ids if s.len()]
    if seen:
        ids = pl.concat([s.cast(_I) for s in seen]).unique().sort()
        rows.append(
            pl.DataFrame({"device_id": ids}).with_columns(
                [
                    pl.lit(None, dtype=dt).alias(k)
                    for k, dt in _DEVICE_INFO.items()
                    if k != "device_id"
                ]
            )
        )
    allrows = pl.concat(rows, how="vertical").filter(pl.col("device_id").is_not_null())
    return _one_row_per_device(allrows)


def _target_info_gpu(con: sqlite3.Connection, names: set[str]) -> pl.DataFrame:
    """TARGET_INFO_GPU's devices, keyed by its own `gpu_id` and by `cu_device` (the ordinal)."""
    gpu = pl.DataFrame(schema={"gpu_id": _I, "cu_device": _I, **_DEVICE_INFO})
    if "TARGET_INFO_GPU" not in names:
        return gpu
    cols = {
        "gpu_id": "id",
        "cu_device": "cuDevice",
        "name": "name",
        "uuid": "uuid",
        "major": "computeMajor",
        "minor": "computeMinor",
        "sm_count": "smCount",
        "memory_bytes": "totalMemory",
    }
    sch: dict[str, pl.DataType] = {k: (_S if k in ("name", "uuid") else _I) for k in cols}
    g = _fetch(con, "TARGET_INFO_GPU", cols, sch)
    cc = pl.when(pl.col("major").is_not_null() & pl.col("minor").is_not_null()).then(
        pl.format("{}.{}", "major", "minor")
    )
    return g.select(
        "gpu_id",
        "cu_device",
        pl.col("cu_device").alias("device_id"),
        "name",
        _uuid(pl.col("uuid")).alias("uuid"),
        cc.alias("compute_capability"),
        "sm_count",
        "memory_bytes",
    )


def _target_info_cuda_device(con: sqlite3.Connection, gpu: pl.DataFrame) -> pl.DataFrame:
    """TARGET_INFO_CUDA_DEVICE's ordinals (`cudaId`), described by their TARGET_INFO_GPU row."""
    cols = {
        "gpu_id": "gpuId",
        "device_id": "cudaId",
        "uuid": "uuid",
        "sms": "numMultiprocessors",
    }
    sch_cd: dict[str, pl.DataType] = {k: (_S if k == "uuid" else _I) for k in cols}
    cd = _fetch(con, "TARGET_INFO_CUDA_DEVICE", cols, sch_cd)
    cd = cd.with_columns(_uuid(pl.col("uuid")).alias("uuid"))
    joined = cd.join(gpu.drop("device_id"), on="gpu_id", how="left", suffix="_gpu")
    return joined.select(
        "device_id",
        "name",
        pl.coalesce("uuid", "uuid_gpu").alias("uuid"),
        "compute_capability",
        pl.coalesce("sm_count", "sms").alias("sm_count"),
        "memory_bytes",
    )


def _one_row_per_device(allrows: pl.DataFrame) -> pl.DataFrame:
    """One row per device_id, the most complete description (info rows first); a warning when
    one ordinal has several UUIDs."""
    conflicts = (
        allrows.filter(pl.col("uuid").is_not_null())
        .group_by("device_id")
        .agg(pl.col("uuid").n_unique().alias("n"))
        .filter(pl.col("n") > 1)
    )
    if conflicts.height:
        warn(
            "nsys_sqlite: device ordinals "
            f"{sorted(conflicts['device_id'].to_list())} map to several GPUs (processes with "
            "different CUDA_VISIBLE_DEVICES); the first description is kept"
        )
    return (
        allrows.with_row_index("_order")
        .with_columns(pl.sum_horizontal(pl.all().exclude("_order").is_null()).alias("_nulls"))
        .sort("device_id", "_nulls", "_order")
        .unique("device_id", keep="first", maintain_order=True)
        .drop("_order", "_nulls")
        .with_columns(pl.lit("NVIDIA").alias("vendor"))
    )


_UNIT_RE = re.compile(r"\[([^\[\]]*)\]\s*$")


def _metric_unit(name: str | None) -> str | None:
    if not name:
        return None
    m = _UNIT_RE.search(name)
    if m:
        inner = m.group(1).strip()
        # nsys spells throughput metrics '… [Throughput %]'; the unit is the percent sign.
        return "%" if "%" in inner else (inner or None)
    return "%" if "%" in name else None


def metric_info(con: sqlite3.Connection, names: set[str]) -> pl.DataFrame | None:
    """TARGET_INFO_GPU_METRICS (metric names and units by (typeId, metricId)), or None when
    GPU_METRICS cannot be named (warned) or is absent."""
    if "GPU_METRICS" not in names or "TARGET_INFO_GPU_METRICS" not in names:
        if "GPU_METRICS" in names:
            warn("nsys_sqlite: GPU_METRICS without TARGET_INFO_GPU_METRICS; metric names unknown")
        return None
    info_cols = {"type_id": "typeId", "metric_id": "metricId", "metric_name": "metricName"}
    info = _fetch(
        con,
        "TARGET_INFO_GPU_METRICS",
        info_cols,
        {"type_id": _I, "metric_id": _I, "metric_name": _S},
    ).unique(["type_id", "metric_id"], keep="first", maintain_order=True)
    return info.with_columns(
        pl.col("metric_name").map_elements(_metric_unit, return_dtype=pl.String).alias("unit")
    )


def _gpu_metrics(con: sqlite3.Connection, names: set[str]) -> pl.DataFrame | None:
    info = metric_info(con, names)
    if info is None:
        return None
    return metric_rows(_fetch(con, "GPU_METRICS", METRIC_COLS, METRIC_SCHEMA), info)


def _sources(con: sqlite3.Connection, names: set[str]) -> pl.DataFrame:
    meta = _meta(con, names)
    origin = None
    t = "TARGET_INFO_SESSION_START_TIME"
    if t in names and "utcEpochNs" in table_columns(con, t):
        row = con.execute(f"SELECT utcEpochNs FROM {t} LIMIT 1").fetchone()
        if row is not None and row[0] is not None:
            origin = int(row[0])
    return pl.DataFrame(
        {
            "tool": ["nsys"],
            "tool_version": [meta.get("EXPORT_PRODUCT_VERSION")],
            "time_origin_epoch_ns": [origin],
        },
        schema={"tool": _S, "tool_version": _S, "time_origin_epoch_ns": _I},
    ).with_columns(**rank_columns(rank_hints(con, names)))
