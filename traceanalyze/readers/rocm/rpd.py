"""rocmProfileData (`rpd`): the SQLite file rpd_tracer writes (`runTracer.sh python app.py`, or
`rpd_tracer` loaded into the process; `rocpd` schema_version 2, tested with the matmul example of
ROCm/rocmProfileData on gfx90a).

* `rocpd_op` (GPU work; names and op types through `rocpd_string`): opType `KernelExecution`
  -> `kernels` (name = description), `Copy*` and `FillBuffer` -> `memcpy` (kinds HtoD, DtoH,
  DtoD, PtoP, HtoH, memset; bytes from `rocpd_copyapi.size` where the op's call has one);
  `gpuId` -> device_id (the HIP device the runtime reported), `queueId` -> stream_id.
* `rocpd_api` (host calls) -> `api_calls` for `hip*` / `hsa*` names (api 'runtime'), markers
  (`UserMarker`, `roctx*`: the text is in args) -> `markers`; rpd's own instrumentation
  (`OpTable::writeRows`, `hcc_activity_callback`, …) is left out. `rocpd_api_ops` links a call
  to the ops it caused: the call's id is the correlation id on both sides, which is what
  `launches` joins on.
* `rocpd_kernelapi` gives the launch's grid and work-group: grid in work-groups for
  `hipLaunchKernel`/`hipModuleLaunchKernel`, in work-items for `hipExtModuleLaunchKernel` and
  `hipHccModuleLaunchKernel` (whose arguments are global work sizes): divided there.
* `rocpd_monitor` (`deviceType` 'gpu', `monitorType` 'sclk' / 'mclk', text values in MHz,
  intervals [start, end) during which the clock held) -> `gpu_samples` (sm_clock_mhz /
  mem_clock_mhz), one sample at each interval's start; other monitor types -> `gpu_metrics`.
  Its deviceId is rocm-smi's device index, which need not be the ops' gpuId (the sample: 0 vs
  2): with one GPU on each side the samples go to the ops' device (with a warning saying so),
  otherwise they are kept as given, with a warning.
* Times are ns of the boot-relative clock rpd reads (not epoch).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import PathLike, check_stop, check_times, is_sqlite, reader_entry, warn
from ..common.sqlite import connect_readonly, query_frame, sqlite_tables
from ..common.stream import stream_entry
from .names import clean_names, with_short_names

_I, _S = pl.Int64(), pl.String()
_NEED = ("rocpd_op", "rocpd_string", "rocpd_api", "rocpd_api_ops")
_BATCH = 1 << 16  # rows per chunk of ops or calls (a GEMM's name is ~1 kB)
_COPY_KIND = {
    "CopyHostToDevice": "HtoD",
    "CopyDeviceToHost": "DtoH",
    "CopyDeviceToDevice": "DtoD",
    "CopyPeerToPeer": "PtoP",
    "CopyHostToHost": "HtoH",
    "FillBuffer": "memset",
}
# launch calls whose grid arguments are global work sizes (work-items), not work-groups
_GLOBAL_SIZE_LAUNCHES = ("hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel")


def sniff(path: PathLike) -> bool:
    """SQLite with rocpd_op, rocpd_string, rocpd_api and rocpd_api_ops."""
    if not is_sqlite(path):
        return False
    try:
        tables = sqlite_tables(path)
    except (sqlite3.Error, OSError, MalformedInput):
        return False
    return all(t in tables for t in _NEED)


_OPS_SQL = """
SELECT o.id, o.gpuId, o.queueId, o.start, o."end", {name}, t.string, ao.api_id, a.pid,
       {launch}, n.string, {size}
FROM rocpd_op o
JOIN rocpd_string d ON d.id = o.description_id
JOIN rocpd_string t ON t.id = o.opType_id
LEFT JOIN (SELECT op_id, min(api_id) AS api_id FROM rocpd_api_ops GROUP BY op_id) ao
  ON ao.op_id = o.id
LEFT JOIN rocpd_api a ON a.id = ao.api_id
LEFT JOIN rocpd_string n ON n.id = a.apiName_id
{joins}
ORDER BY o.id
"""
_LAUNCH = (
    "ka.gridX, ka.gridY, ka.gridZ, ka.workgroupX, ka.workgroupY, ka.workgroupZ, ka.groupSegmentSize"
)
_OPS_TYPES = {
    "op_id": _I,
    "device_id": _I,
    "stream_id": _I,
    "start_ns": _I,
    "end_ns": _I,
    "description": _S,
    "op_type": _S,
    "correlation_id": _I,
    "process_id": _I,
    "gx": _I,
    "gy": _I,
    "gz": _I,
    "block_x": _I,
    "block_y": _I,
    "block_z": _I,
    "total_smem_bytes": _I,
    "call": _S,
    "size_bytes": _I,
}


def _ops_sql(tables: set[str]) -> str:
    """Every op with its launching call (the first call rocpd_api_ops links it to) and that
    call's launch or copy arguments, where the file has those tables."""
    ka, ca = "rocpd_kernelapi" in tables, "rocpd_copyapi" in tables
    joins = [
        "LEFT JOIN rocpd_kernelapi ka ON ka.api_ptr_id = ao.api_id" if ka else "",
        "LEFT JOIN rocpd_copyapi ca ON ca.api_ptr_id = ao.api_id" if ca else "",
    ]
    # a kernel op's name is its description; some tracers leave that empty and name the kernel
    # only in its launch's arguments (rocpd_kernelapi.kernelName_id)
    if ka:
        joins.append("LEFT JOIN rocpd_string kn ON kn.id = ka.kernelName_id")
    return _OPS_SQL.format(
        name=(
            "CASE WHEN d.string <> '' OR kn.string IS NULL THEN d.string ELSE kn.string END"
            if ka
            else "d.string"
        ),
        launch=_LAUNCH if ka else ", ".join(["NULL"] * 7),
        size="ca.size" if ca else "NULL",
        joins="\n".join(joins),
    )


def _batches(
    con: sqlite3.Connection, path: PathLike, table: str, sql: str, types: dict[str, Any]
) -> Iterator[pl.DataFrame]:
    """The query's rows as frames of at most `_BATCH` rows (what `query_frame` makes of them),
    each with its duration, so that a big file is never held whole."""
    cur = con.execute(sql)
    while rows := cur.fetchmany(_BATCH):
        check_stop()
        try:
            df = pl.DataFrame(rows, schema=types, orient="row")
        except pl.exceptions.ComputeError as e:
            msg = str(e).split("\n", 1)[0]
            raise MalformedInput(
                f"a column holds values of the wrong type: {msg}", path=path, table=table
            ) from None
        check_times(df, path=path, table=table, columns=("start", "end"))
        yield df.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"))


def _kernels(ops: pl.DataFrame) -> pl.DataFrame:
    k = ops.filter(pl.col("op_type") == "KernelExecution")
    per_item = pl.col("call").is_in(_GLOBAL_SIZE_LAUNCHES)

    def grid(g: str, b: str) -> pl.Expr:
        return pl.when(per_item).then((pl.col(g) + pl.col(b) - 1) // pl.col(b)).otherwise(g)

    return k.select(
        pl.col("op_id").alias("kernel_id"),
        "process_id",
        "device_id",
        "stream_id",
        "correlation_id",
        clean_names(pl.col("description")).alias("name"),
        "start_ns",
        "end_ns",
        "duration_ns",
        grid("gx", "block_x").alias("grid_x"),
        grid("gy", "block_y").alias("grid_y"),
        grid("gz", "block_z").alias("grid_z"),
        "block_x",
        "block_y",
        "block_z",
        "total_smem_bytes",
    ).pipe(with_short_names)


def _memcpy(ops: pl.DataFrame) -> pl.DataFrame:
    """Copy and fill ops; a `Copy…` type not in `_COPY_KIND` is kept with a null kind."""
    t = pl.col("op_type")
    m = ops.filter(t.str.starts_with("Copy") | t.is_in(list(_COPY_KIND)))
    return m.select(
        "process_id",
        "device_id",
        "stream_id",
        "correlation_id",
        t.replace_strict(_COPY_KIND, default=None, return_dtype=_S).alias("kind"),
        "size_bytes",
        "start_ns",
        "end_ns",
        "duration_ns",
    )


_API_SQL = """
SELECT a.id, a.pid, a.tid, a.start, a."end", n.string, g.string
FROM rocpd_api a
JOIN rocpd_string n ON n.id = a.apiName_id
LEFT JOIN rocpd_string g ON g.id = a.args_id
ORDER BY a.id
"""
_API_TYPES = {
    "correlation_id": _I,
    "process_id": _I,
    "thread_id": _I,
    "start_ns": _I,
    "end_ns": _I,
    "name": _S,
    "args": _S,
}


def _api_parts(api: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(api_calls, markers) of a batch of rocpd_api rows."""
    name = pl.col("name")
    calls = api.filter(name.str.starts_with("hip") | name.str.starts_with("hsa")).with_columns(
        pl.lit("runtime").alias("api")
    )
    is_marker = (name == "UserMarker") | name.str.starts_with("roctx")
    markers = api.filter(is_marker).select(
        "process_id",
        "thread_id",
        pl.coalesce(pl.col("args").replace("", None), name).alias("name"),
        pl.lit("roctx").alias("category"),
        "start_ns",
        "end_ns",
        "duration_ns",
    )
    return calls.drop("args"), markers


_MONITOR_TYPES = {
    "device_type": _S,
    "device_id": _I,
    "monitor": _S,
    "timestamp_ns": _I,
    "end_ns": _I,
    "value": _S,
}
_MONITOR_COLUMN = {"sclk": "sm_clock_mhz", "mclk": "mem_clock_mhz"}


def _monitor(con: sqlite3.Connection, path: PathLike) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(gpu_samples, gpu_metrics) from rocpd_monitor: one sample at each interval's start."""
    sql = (
        'SELECT deviceType, deviceId, monitorType, start, "end", CAST(value AS TEXT) '
        "FROM rocpd_monitor ORDER BY start, id"
    )
    mon = query_frame(con, path, "rocpd_monitor", sql, dict(_MONITOR_TYPES))
    mon = mon.filter(pl.col("device_type").str.to_lowercase() == "gpu")
    check_times(mon, path=path, table="rocpd_monitor", start="timestamp_ns", end=None)
    value = pl.col("value").str.strip_chars().cast(pl.Float64, strict=False)
    bad = mon.filter(value.is_null())
    if bad.height:
        raise MalformedInput(
            f"{bad.height} value(s) that are not numbers (first: {bad['value'][0]!r})",
            path=path,
            table="rocpd_monitor",
            column="value",
        )
    mon = mon.with_columns(value.alias("value"))
    known = mon.filter(pl.col("monitor").is_in(list(_MONITOR_COLUMN)))
    samples = known.pivot(
        on="monitor",
        index=["device_id", "timestamp_ns"],
        values="value",
        aggregate_function="first",
    ).rename({k: v for k, v in _MONITOR_COLUMN.items()}, strict=False)
    other = mon.filter(~pl.col("monitor").is_in(list(_MONITOR_COLUMN))).select(
        "device_id", "timestamp_ns", pl.col("monitor").alias("metric_name"), "value"
    )
    return samples.sort("timestamp_ns", "device_id", maintain_order=True), other


def _sources(con: sqlite3.Connection, tables: set[str]) -> pl.DataFrame:
    version = None
    if "rocpd_metadata" in tables:
        row = con.execute(
            "SELECT value FROM rocpd_metadata WHERE tag = 'schema_version' LIMIT 1"
        ).fetchone()
        version = None if row is None else f"rocpd schema {row[0]}"
    return pl.DataFrame(
        {"tool": ["rpd_tracer"], "tool_version": [version]}, schema={"tool": _S, "tool_version": _S}
    )


def _monitor_devices(samples: pl.DataFrame, devices: list[int], path: PathLike) -> pl.DataFrame:
    """The monitor's devices (rocm-smi indices) put on the ops' (gpuId): one-to-one when the
    file has one GPU on each side, as every single-GPU run does (the sample: monitor 0, ops 2);
    kept as given, with a warning, when the numbers differ otherwise."""
    watched = sorted(set(samples["device_id"].to_list()))
    if not devices or not watched or watched == devices:
        return samples
    if len(watched) == 1 and len(devices) == 1:
        warn(
            f"{path}: rpd: rocpd_monitor's device {watched[0]} (a rocm-smi index) taken as the "
            f"ops' gpuId {devices[0]}: the file has one GPU on each side"
        )
        return samples.with_columns(pl.lit(devices[0], dtype=_I).alias("device_id"))
    warn(
        f"{path}: rpd: rocpd_monitor samples are for device(s) {watched} while the ops ran on "
        f"{devices}: the monitor numbers devices as rocm-smi does; kept as given"
    )
    return samples


def _open(path: PathLike) -> tuple[sqlite3.Connection, set[str]]:
    con = connect_readonly(path)
    tables = sqlite_tables(con)
    missing = [t for t in _NEED if t not in tables]
    if missing:
        con.close()
        raise MalformedInput(f"no table {missing[0]} (not an rpd file)", path=path)
    return con, tables


@stream_entry("rpd")
def stream_rpd(path: PathLike, *, workdir: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    """The file as `(table, frame)` chunks: ops and calls `_BATCH` rows at a time, then the
    monitor's samples (few), the devices and the sources row."""
    del workdir  # nothing spilled: SQLite gives the rows in order, a batch at a time
    con, tables = _open(path)
    try:
        devices: set[int] = set()
        for ops in _batches(con, path, "rocpd_op", _ops_sql(tables), dict(_OPS_TYPES)):
            devices.update(ops["device_id"].drop_nulls().to_list())
            yield "kernels", _kernels(ops)
            yield "memcpy", _memcpy(ops)
        for api in _batches(con, path, "rocpd_api", _API_SQL, dict(_API_TYPES)):
            calls, markers = _api_parts(api)
            yield "api_calls", calls
            yield "markers", markers
        if "rocpd_monitor" in tables:
            samples, metrics = _monitor(con, path)
            yield "gpu_samples", _monitor_devices(samples, sorted(devices), path)
            yield "gpu_metrics", metrics
        src = _sources(con, tables)
    finally:
        con.close()
    ids = sorted(devices)
    yield (
        "devices",
        pl.DataFrame(
            {"device_id": ids, "vendor": ["AMD"] * len(ids)}, schema={"device_id": _I, "vendor": _S}
        ),
    )
    yield "sources", src


@reader_entry("rpd")
def read_rpd(path: PathLike) -> Tables:
    """Read an rpd (rocmProfileData SQLite) file into normalized tables."""
    parts: dict[str, list[pl.DataFrame]] = {}
    for name, df in stream_rpd(path, workdir=Path(".")):
        parts.setdefault(name, []).append(df)
    return Tables.build(**{name: pl.concat(dfs) for name, dfs in parts.items()})
