"""rocprof v1's per-dispatch rows (results.csv, results.db table `KERN`) into normalized tables;
shared by `rocprof_csv` and `rocprof_sqlite`.

Columns (rocprof 1.x `--stats --timestamp on`, tested with ROCm 5.7.1 on MI250X): `Index,
KernelName, gpu-id, queue-id, queue-index, pid, tid, grd, wgr, lds, scr, arch_vgpr, accum_vgpr
(or vgpr before ROCm 5.x), sgpr, wave_size, sig, obj, DispatchNs, BeginNs, EndNs, CompleteNs,
DurationNs`, then one column per counter asked with `--pmc`. Mapping:

* `gpu-id` is the KFD node id (8 on the MI250X sample, not a 0-based index): kept in
  `devices.node_id` and used as `device_id` as is, since nothing in the file maps it.
* `grd` and `wgr` are the dispatch's total work-items and work-group size (products over x, y,
  z): `grid_x` = ceil(grd / wgr) work-groups and `block_x` = wgr, with y and z = 1, so that
  blocks and threads per block stay right where the shape is lost.
* `registers_per_thread` = arch_vgpr + accum_vgpr (VGPRs per work-item); `lds` (bytes per
  work-group) -> `total_smem_bytes`; `queue-id` -> `stream_id`; `Index` -> `kernel_id`.
* Times are ns of the GPU's boot-relative clock (not epoch): `time_origin_epoch_ns` is null.
  `BeginNs`/`EndNs` bound the kernel; `DurationNs` is EndNs - BeginNs.
* `--pmc` counter columns go to `kernel_metrics` (one row per kernel and counter, unit null:
  rocprof gives none).
"""

from __future__ import annotations

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import PathLike, check_times, require_columns
from .devices import node_devices
from .names import clean_names, with_short_names

IDENTITY = ("Index", "KernelName", "gpu-id")  # every results.csv has these
NEEDED = (*IDENTITY, "BeginNs", "EndNs")  # with --timestamp on
KNOWN = frozenset(
    {
        *NEEDED,
        "queue-id",
        "queue-index",
        "pid",
        "tid",
        "grd",
        "wgr",
        "lds",
        "scr",
        "arch_vgpr",
        "accum_vgpr",
        "vgpr",
        "sgpr",
        "fbar",
        "wave_size",
        "sig",
        "obj",
        "DispatchNs",
        "CompleteNs",
        "DurationNs",
    }
)
STATS_HEADER = ("Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage")
_I = pl.Int64


def _int(raw: pl.DataFrame, name: str) -> pl.Expr:
    if name not in raw.columns:
        return pl.lit(None, dtype=_I)
    return pl.col(name).cast(_I, strict=True)


def kernels(raw: pl.DataFrame, *, path: PathLike, table: str | None) -> pl.DataFrame:
    """The `kernels` frame of rocprof v1 rows (columns as the file names them)."""
    require_columns(raw.columns, NEEDED, path=path, table=table)
    vgpr = (
        _int(raw, "arch_vgpr") + pl.coalesce(_int(raw, "accum_vgpr"), pl.lit(0, dtype=_I))
        if "arch_vgpr" in raw.columns
        else _int(raw, "vgpr")
    )
    wgr, grd = _int(raw, "wgr"), _int(raw, "grd")
    one = pl.when(wgr.is_not_null()).then(pl.lit(1, dtype=_I))
    df = raw.select(
        _int(raw, "Index").alias("kernel_id"),
        _int(raw, "pid").alias("process_id"),
        _int(raw, "gpu-id").alias("device_id"),
        _int(raw, "queue-id").alias("stream_id"),
        clean_names(pl.col("KernelName").cast(pl.String)).alias("name"),
        _int(raw, "BeginNs").alias("start_ns"),
        _int(raw, "EndNs").alias("end_ns"),
        ((grd + wgr - 1) // wgr).alias("grid_x"),
        one.alias("grid_y"),
        one.alias("grid_z"),
        wgr.alias("block_x"),
        one.alias("block_y"),
        one.alias("block_z"),
        vgpr.alias("registers_per_thread"),
        _int(raw, "lds").alias("total_smem_bytes"),
    )
    check_times(df, path=path, table=table or "results", columns=("BeginNs", "EndNs"))
    if df["kernel_id"].null_count():
        raise MalformedInput("a row without Index", path=path, table=table, column="Index")
    return df.with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
    ).pipe(with_short_names)


def _counters(raw: pl.DataFrame) -> list[str]:
    return [c for c in raw.columns if c not in KNOWN and raw.schema[c].is_numeric()]


def metrics(raw: pl.DataFrame, k: pl.DataFrame) -> pl.DataFrame | None:
    """`--pmc` counter columns (every column rocprof does not always write), long."""
    extra = _counters(raw)
    if not extra:
        return None
    wide = raw.select(
        pl.col("Index").cast(_I).alias("kernel_id"), *[pl.col(c).cast(pl.Float64) for c in extra]
    )
    long = wide.unpivot(index="kernel_id", variable_name="metric_name", value_name="value")
    return long.join(
        k.select("kernel_id", "process_id", "device_id", "name"), on="kernel_id", how="left"
    )


def tables(raw: pl.DataFrame, *, path: PathLike, table: str | None) -> Tables:
    """A run with `--timestamp on` gives kernels (and counters); a `--pmc` run without it only
    counters, per dispatch; a file with neither is refused, naming the missing timestamps."""
    src = pl.DataFrame({"tool": ["rocprof"]})  # no version in the file
    timed = all(c in raw.columns for c in NEEDED)
    if not timed and not (_counters(raw) and all(c in raw.columns for c in IDENTITY)):
        require_columns(raw.columns, NEEDED, path=path, table=table)
    if timed:
        k = kernels(raw, path=path, table=table)
    else:
        k = raw.select(
            _int(raw, "Index").alias("kernel_id"),
            _int(raw, "pid").alias("process_id"),
            _int(raw, "gpu-id").alias("device_id"),
            clean_names(pl.col("KernelName").cast(pl.String)).alias("name"),
        )
    m = metrics(raw, k)
    return Tables.build(
        sources=src,
        devices=node_devices(k["device_id"].to_list()),
        **({"kernels": k} if timed else {}),
        **({} if m is None else {"kernel_metrics": m}),
    )
