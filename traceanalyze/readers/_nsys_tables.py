"""The nsys_sqlite reader's tables, one function each (what each holds: nsys_sqlite's
docstring). Every function takes the open read-only connection and the set of table names; the
big integer tables also take the ADBC engine (`_sqlite.Fast`, None for sqlite3 alone).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence

import polars as pl

from . import _sqlite
from ._common import check_times, table_columns, warn
from ._nsys_enums import (
    _API_LABELS,
    COPY_KIND_2X,
    EVENT_CLASS_2X,
    MEM_KIND_2X,
    _class_label,
    _copy_label,
    _enum,
    _label,
    _mem_label,
)
from ._sqlite import Fast

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX = "NVTX_EVENTS"


# NVTX eventType values (ENUM_NSYS_EVENT_TYPE): the ones that become markers, and DomainCreate.
NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 34, 59, 60, 75

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
    "TARGET_INFO_GPU": ("cuDevice",),
    "TARGET_INFO_CUDA_DEVICE": ("gpuId", "cudaId"),
    "TARGET_INFO_GPU_METRICS": ("typeId", "metricId", "metricName"),
    "GPU_METRICS": ("timestamp", "typeId", "metricId", "value"),
}
# Tables only an nsys export has: a file with `StringIds` and a metadata table but none of these
# (another program's database) is not claimed, and not read as an empty export.
_API_VERSION_SUFFIX = r"_v\d+$"


def _fetch(
    con: sqlite3.Connection,
    table: str,
    wanted: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
    *,
    where: str = "",
    fast: Fast | None = None,
) -> pl.DataFrame:
    """`_sqlite.fetch` with this export's required columns (`REQUIRED`)."""
    required = REQUIRED.get(table, ())
    return _sqlite.fetch(con, table, wanted, schema, required=required, where=where, fast=fast)


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


def _drop_nul(e: pl.Expr) -> pl.Expr:
    # NUL-separated KEY=VALUE blocks are environments (formats.md §3.2): never emitted.
    # (`when(keep).then(e)` keeps e's name; a null literal in `then` would rename the column.)
    return pl.when(~e.str.contains("\x00", literal=True)).then(e)


def _resolve(ids: pl.Expr, strings: pl.DataFrame) -> pl.Expr:
    return ids.replace_strict(strings["id"], strings["value"], default=None, return_dtype=pl.String)


def _warn_dropped(frame: pl.DataFrame, id_col: str, strings_raw: set[int], what: str) -> None:
    if strings_raw and frame.height:
        n = frame.filter(pl.col(id_col).is_in(list(strings_raw))).height
        if n:
            warn(
                f"nsys_sqlite: {n} {what} named by a StringIds entry holding NUL bytes "
                "(an environment block); their names are left null"
            )


def _warn_unresolved(
    frame: pl.DataFrame, id_col: str, strings: pl.DataFrame, what: str, column: str
) -> None:
    """Warn with the count of rows whose StringIds id names no StringIds row (their name is
    left null): a damaged or hand-edited export, never guessed."""
    if not frame.height:
        return
    ids = pl.col(id_col)
    n = frame.filter(ids.is_not_null() & ~ids.is_in(strings["id"].implode())).height
    if n:
        warn(
            f"nsys_sqlite: {n} {what} whose {column} id is not in StringIds; "
            "their names are left null"
        )


def _pid(col: str) -> pl.Expr:
    # globalPid/globalTid pack (vm, pid, tid): pid = (g >> 24) & 0xFFFFFF (formats.md §3.2).
    return ((pl.col(col) // (1 << 24)) % (1 << 24)).alias("process_id")


def _tid(col: str) -> pl.Expr:
    return (pl.col(col) % (1 << 24)).alias("thread_id")


# --- tables -----------------------------------------------------------------------------------

_I = pl.Int64()
_S = pl.String()

_KERNEL_COLS = {
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
}


def _kernels(
    con: sqlite3.Connection,
    names: set[str],
    strings: pl.DataFrame,
    bad_ids: set[int],
    fast: Fast | None,
) -> pl.DataFrame | None:
    if KERNEL not in names:
        return None
    df = _fetch(con, KERNEL, _KERNEL_COLS, dict.fromkeys(_KERNEL_COLS, _I), fast=fast)
    check_times(df, path=None, table=KERNEL)
    for col in ("name_id", "short_id", "mangled_id"):
        _warn_dropped(df, col, bad_ids, f"kernels' {col.removesuffix('_id')}s")
        _warn_unresolved(df, col, strings, "kernels", _KERNEL_COLS[col])
    return df.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("kernel_id"),
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
        *[c for c in _KERNEL_COLS if c.startswith(("grid_", "block_"))],
        "registers_per_thread",
        "static_smem_bytes",
        "dynamic_smem_bytes",
    )


_COPY_COMMON = {
    "start_ns": "start",
    "end_ns": "end",
    "device_id": "deviceId",
    "context_id": "contextId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
    "size_bytes": "bytes",
}


def _memcpy(con: sqlite3.Connection, names: set[str], fast: Fast | None) -> pl.DataFrame | None:
    parts = []
    mem_kinds = _enum(con, names, "ENUM_CUDA_MEM_KIND", MEM_KIND_2X, _mem_label)
    head: list[pl.Expr | str] = [
        _pid("global_pid"),
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
    ]
    tail: list[pl.Expr | str] = [
        "size_bytes",
        "start_ns",
        "end_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
    ]
    if MEMCPY in names:
        copy_kinds = _enum(con, names, "ENUM_CUDA_MEMCPY_OPER", COPY_KIND_2X, _copy_label)
        cols = {**_COPY_COMMON, "copy_kind": "copyKind", "src": "srcKind", "dst": "dstKind"}
        df = _fetch(con, MEMCPY, cols, dict.fromkeys(cols, _I), fast=fast)
        check_times(df, path=None, table=MEMCPY)
        parts.append(
            df.select(
                *head,
                _label(pl.col("copy_kind"), copy_kinds, "kind"),
                _label(pl.col("src"), mem_kinds, "src_kind"),
                _label(pl.col("dst"), mem_kinds, "dst_kind"),
                *tail,
            )
        )
    if MEMSET in names:
        cols = {**_COPY_COMMON, "mem_kind": "memKind"}
        df = _fetch(con, MEMSET, cols, dict.fromkeys(cols, _I), fast=fast)
        check_times(df, path=None, table=MEMSET)
        parts.append(
            df.select(
                *head,
                pl.lit("memset", dtype=pl.String).alias("kind"),
                pl.lit(None, dtype=pl.String).alias("src_kind"),
                _label(pl.col("mem_kind"), mem_kinds, "dst_kind"),
                *tail,
            )
        )
    return pl.concat(parts, how="vertical") if parts else None


_API_COLS = {
    "start_ns": "start",
    "end_ns": "end",
    "global_tid": "globalTid",
    "correlation_id": "correlationId",
    "name_id": "nameId",
    "return_code": "returnValue",
    "event_class": "eventClass",
}


def _api_calls(
    con: sqlite3.Connection,
    names: set[str],
    strings: pl.DataFrame,
    bad_ids: set[int],
    fast: Fast | None,
) -> pl.DataFrame | None:
    parts = []
    classes = _enum(con, names, "ENUM_NSYS_EVENT_CLASS", EVENT_CLASS_2X, _class_label)
    for table, table_api in ((RUNTIME, "runtime"), (DRIVER, "driver")):
        if table not in names:
            continue
        df = _fetch(con, table, _API_COLS, dict.fromkeys(_API_COLS, _I), fast=fast)
        check_times(df, path=None, table=table)
        if "eventClass" in table_columns(con, table):
            df = df.with_columns(_label(pl.col("event_class"), classes, "api"))
            known = pl.col("api").is_in([*_API_LABELS, "backtrace"])
            other = df.filter(~known.fill_null(False))
            if other.height:
                counts = other.group_by("event_class", "api").len().sort("event_class")
                listed = ", ".join(
                    f"{n} of class {c} ({a or 'unknown'})" for c, a, n in counts.iter_rows()
                )
                warn(f"nsys_sqlite: {table} rows of non-CUDA-API event classes dropped: {listed}")
            df = df.filter(pl.col("api").is_in(_API_LABELS))
        else:
            df = df.with_columns(pl.lit(table_api, dtype=pl.String).alias("api"))
        _warn_dropped(df, "name_id", bad_ids, "API calls")
        _warn_unresolved(df, "name_id", strings, f"{table} rows", "nameId")
        parts.append(
            df.select(
                _pid("global_tid"),
                _tid("global_tid"),
                "correlation_id",
                "api",
                _resolve(pl.col("name_id"), strings)
                .str.replace(_API_VERSION_SUFFIX, "")
                .alias("name"),
                "return_code",
                "start_ns",
                "end_ns",
                (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
            )
        )
    return pl.concat(parts, how="vertical") if parts else None


_NVTX_COLS = {
    "start_ns": "start",
    "end_ns": "end",
    "event_type": "eventType",
    "text": "text",
    "global_tid": "globalTid",
    "text_id": "textId",
    "domain_id": "domainId",
}
_NVTX_SCHEMA = {**dict.fromkeys(_NVTX_COLS, _I), "text": _S}


def _markers(
    con: sqlite3.Connection, names: set[str], strings: pl.DataFrame, bad_ids: set[int]
) -> pl.DataFrame | None:
    if NVTX not in names:
        return None
    wanted = (NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE)
    have = set(table_columns(con, NVTX))
    where = f"WHERE eventType IN {wanted}" if "eventType" in have else ""
    df = _fetch(con, NVTX, _NVTX_COLS, _NVTX_SCHEMA, where=where)
    # marks and ranges still open at the end of the capture have no end (formats.md §3.2)
    check_times(df, path=None, table=NVTX, end_nullable=True)
    n_nul = df.filter(pl.col("text").str.contains("\x00", literal=True)).height
    if n_nul:
        warn(f"nsys_sqlite: {n_nul} NVTX texts hold NUL bytes (environment blocks); left null")
    _warn_dropped(df, "text_id", bad_ids, "NVTX events")
    _warn_unresolved(df, "text_id", strings, "NVTX events", "textId")
    df = df.with_columns(
        pl.coalesce(_drop_nul(pl.col("text")), _resolve(pl.col("text_id"), strings)).alias("name")
    )
    domains = (
        df.filter(pl.col("event_type") == NVTX_DOMAIN_CREATE, pl.col("domain_id") != 0)
        .group_by("domain_id")
        .agg(pl.col("name").drop_nulls().first().alias("domain"))
    )
    ev = df.filter(pl.col("event_type").is_in([NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND]))
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


def _gpu_metrics(con: sqlite3.Connection, names: set[str]) -> pl.DataFrame | None:
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
    info = info.with_columns(
        pl.col("metric_name").map_elements(_metric_unit, return_dtype=pl.String).alias("unit")
    )
    cols = {
        "timestamp_ns": "timestamp",
        "type_id": "typeId",
        "metric_id": "metricId",
        "value": "value",
    }
    m = _fetch(
        con,
        "GPU_METRICS",
        cols,
        {"timestamp_ns": _I, "type_id": _I, "metric_id": _I, "value": pl.Float64()},
    )
    return m.join(info, on=["type_id", "metric_id"], how="left", maintain_order="left").select(
        (pl.col("type_id") % 256).alias("device_id"),
        "timestamp_ns",
        "metric_name",
        "unit",
        "value",
    )


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
    )
