"""Kernel launch statistics: each kernel joined to the host API call that launched it.

A kernel's launch call is the runtime or driver API call with the same correlation id (CUPTI
gives the call and the activity it causes one id): `cudaLaunchKernel`, `cuLaunchKernelEx`,
`cudaGraphLaunch`, … whatever the name. Correlation ids restart per process in nsys exports, so
the join is on (`source_id`, `correlation_id`) and the process ids must agree where both sides
have one (Kineto and nvprof CSV leave the kernel's process null; one process writes one trace).
When several calls share the id (a runtime call and the driver call beneath it) the outermost,
the earliest-starting one, is the launch.

Per launch: `cpu_ns` = the call's duration, `gpu_ns` = the kernel's duration, `delay_ns` = kernel
start − call start (queueing plus launch latency). A graph replay (`cudaGraphLaunch*`,
`cuGraphLaunch*`, `hipGraphLaunch*`: every GPU op of the replay carries the call's correlation id)
is one launch: its CPU time once, its kernels' summed time as `gpu_ns`, its delay to the replay's
first kernel; each kernel's place inside the replay is `replay_offset_ns` in the table, not a
delay. `graph_launch_count` and `graph_kernel_count` count the replays and the kernels they ran.

Whole-graph rows (`graph_replays`: nsys `--cuda-graph-trace=graph`, one timed row per replay and
no kernel rows) are launches too: a row whose correlation id matches a launch call is one
launch (in `launch_count` and `graph_launch_count`), `gpu_ns` the replay's span, `delay_ns` its
start - the call's start. `graph_kernel_count` stays kernels only (such a replay shows none);
`whole_graph_count` counts these launches.

Formats: Kineto JSON (`cuda_runtime` /
`cuda_driver` events with `correlation`), nsys SQLite, nvprof SQLite; nvprof `--print-gpu-trace`
CSV has no API calls (only with a `--print-api-trace` CSV of the same run beside it).

Outliers, per kernel name:
* `short_kernel`: launches whose kernel ran shorter than its launch call took on the CPU (the GPU
  drains these faster than the host can issue them);
* `long_delay`: launches whose delay exceeds both the 95th percentile of their source and device
  and an absolute floor (`delay_floor_ns`, 100 µs by default, HTA's launch-delay cutoff).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import polars as pl

from ..errors import NotAnswerable
from ..results import Launches
from ..schema import GRAPH_LAUNCH_API
from .naming import source_name

Frame = pl.DataFrame | pl.LazyFrame

DELAY_FLOOR_NS = 100_000


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def launch_calls(events: Frame, api_calls: Frame) -> pl.DataFrame:
    """`events` (kernels or memcpy rows) with their launch call, left-joined.

    Adds `call_name`, `call_api`, `call_process_id`, `thread_id`, `call_start_ns`, `call_end_ns`
    and `cpu_ns` (null where no call has the event's correlation id), keeping every event row
    in its order.
    """
    ev = _lazy(events).with_row_index("_lrow")
    calls = (
        _lazy(api_calls)
        .filter(pl.col("correlation_id").is_not_null() & pl.col("start_ns").is_not_null())
        .select(
            "source_id",
            "correlation_id",
            pl.col("process_id").alias("call_process_id"),
            "thread_id",
            pl.col("name").alias("call_name"),
            pl.col("api").alias("call_api"),
            pl.col("start_ns").alias("call_start_ns"),
            pl.col("end_ns").alias("call_end_ns"),
            pl.col("duration_ns").alias("cpu_ns"),
        )
    )
    same_process = (
        pl.col("process_id").is_null()
        | pl.col("call_process_id").is_null()
        | (pl.col("process_id") == pl.col("call_process_id"))
    )
    matched = (
        ev.select("_lrow", "source_id", "correlation_id", "process_id")
        .filter(pl.col("correlation_id").is_not_null())
        .join(calls, on=["source_id", "correlation_id"])
        .filter(same_process)
        .sort("_lrow", "call_start_ns")
        .unique("_lrow", keep="first")
        .drop("source_id", "correlation_id", "process_id")
    )
    return ev.join(matched, on="_lrow", how="left").sort("_lrow").drop("_lrow").collect()


def launch_table(kernels: Frame, api_calls: Frame) -> pl.DataFrame:
    """One row per timed kernel with a launch call: ids, name, call, cpu/gpu/delay ns.

    `graph_launch`: the call replays a graph (`cudaGraphLaunch*`, `cuGraphLaunch*`,
    `hipGraphLaunch*`). For such a kernel `delay_ns` is its replay's delay (first kernel of the
    replay on the device − call start) and `replay_offset_ns` its start − that first kernel's
    start: its place inside the replay, not a launch delay. Null for eager kernels.
    """
    k = _lazy(kernels).filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    j = launch_calls(k, api_calls).filter(pl.col("call_start_ns").is_not_null())
    replay = ["source_id", "device_id", "correlation_id", "call_start_ns"]
    graph = pl.col("call_name").str.contains(GRAPH_LAUNCH_API).fill_null(False)
    first = pl.col("start_ns").min().over(replay)
    return j.select(
        "source_id",
        "device_id",
        "stream_id",
        "kernel_id",
        "correlation_id",
        "name",
        "call_name",
        "call_api",
        "call_start_ns",
        "start_ns",
        "cpu_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("gpu_ns"),
        (pl.when(graph).then(first).otherwise(pl.col("start_ns")) - pl.col("call_start_ns")).alias(
            "delay_ns"
        ),
        graph.alias("graph_launch"),
        pl.when(graph).then(pl.col("start_ns") - first).alias("replay_offset_ns"),
    )


def whole_graph_calls(graph_replays: Frame, api_calls: Frame) -> pl.DataFrame:
    """Whole-graph replay rows with their launch call, as `per_call` rows: named after the
    call, `cpu_ns` the call's, `gpu_ns` the replay's span, `delay_ns` its start - the call's
    start, kernel_count 0 (no kernel row exists), `whole_graph` True. Rows without a launch
    call are left out (`kernel_launches` warns)."""
    r = _lazy(graph_replays).filter(
        pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()
    )
    j = launch_calls(r, api_calls).filter(pl.col("call_start_ns").is_not_null())
    return j.select(
        "source_id",
        "device_id",
        pl.col("call_name").alias("name"),
        "cpu_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("gpu_ns"),
        (pl.col("start_ns") - pl.col("call_start_ns")).alias("delay_ns"),
        pl.lit(True).alias("graph_launch"),
        pl.lit(0, dtype=pl.Int64).alias("kernel_count"),
        pl.lit(True).alias("whole_graph"),
    )


def per_call(table: pl.DataFrame, whole: pl.DataFrame | None = None) -> pl.DataFrame:
    """`launch_table` with each graph replay made one row (per device): named after its call,
    `cpu_ns` once, `gpu_ns` its kernels' summed time, `delay_ns` to its first kernel and
    `kernel_count` its kernels; eager kernels stay one row each (kernel_count 1). `whole`: the
    whole-graph replays' rows (`whole_graph_calls`), appended; `whole_graph` tells them."""
    eager = table.filter(~pl.col("graph_launch")).with_columns(
        pl.lit(1, dtype=pl.Int64).alias("kernel_count")
    )
    replays = (
        table.filter(pl.col("graph_launch"))
        .group_by("source_id", "device_id", "correlation_id", "call_start_ns", maintain_order=True)
        .agg(
            pl.col("call_name").first().alias("name"),
            pl.col("cpu_ns").first(),
            pl.col("gpu_ns").sum(),
            pl.col("delay_ns").first(),
            pl.len().cast(pl.Int64).alias("kernel_count"),
        )
        .with_columns(pl.lit(True).alias("graph_launch"))
    )
    cols = ["source_id", "device_id", "name", "cpu_ns", "gpu_ns", "delay_ns"]
    no = pl.lit(False).alias("whole_graph")
    parts = [
        eager.select(*cols, "graph_launch", "kernel_count", no),
        replays.select(*cols, "graph_launch", "kernel_count", no),
    ]
    if whole is not None:
        parts.append(whole.select(*cols, "graph_launch", "kernel_count", "whole_graph"))
    return pl.concat(parts, how="vertical_relaxed")


def _stats(col: str, what: str) -> list[pl.Expr]:
    c = pl.col(col)
    return [
        c.mean().alias(f"mean_{what}_ns"),
        c.median().alias(f"median_{what}_ns"),
        c.quantile(0.95, interpolation="linear").alias(f"p95_{what}_ns"),
    ]


def _delay_cut(table: pl.DataFrame, delay_floor_ns: int) -> pl.Expr:
    p95 = pl.col("delay_ns").quantile(0.95, interpolation="linear").over("source_id", "device_id")
    return (pl.col("delay_ns") > p95) & (pl.col("delay_ns") > delay_floor_ns)


def launch_stats(
    table: pl.DataFrame,
    *,
    by_kernel: bool = False,
    delay_floor_ns: int = DELAY_FLOOR_NS,
    whole: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per source and device (and kernel name with `by_kernel`): launch_count, graph_launch_count,
    graph_kernel_count (kernels only), whole_graph_count (launches of whole-graph rows,
    `whole`), mean / median / p95 of cpu, gpu and delay ns, short_kernel_count and
    long_delay_count."""
    keys = ["source_id", "device_id", *(["name"] if by_kernel else [])]
    calls = per_call(table, whole)
    t = calls.with_columns(_delay_cut(calls, delay_floor_ns).alias("_long"))
    out = t.group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("launch_count"),
        pl.col("graph_launch").sum().cast(pl.Int64).alias("graph_launch_count"),
        pl.col("kernel_count")
        .filter("graph_launch")
        .sum()
        .cast(pl.Int64)
        .alias("graph_kernel_count"),
        pl.col("whole_graph").sum().cast(pl.Int64).alias("whole_graph_count"),
        *_stats("cpu_ns", "cpu"),
        *_stats("gpu_ns", "gpu"),
        *_stats("delay_ns", "delay"),
        (pl.col("gpu_ns") < pl.col("cpu_ns")).sum().cast(pl.Int64).alias("short_kernel_count"),
        pl.col("_long").sum().cast(pl.Int64).alias("long_delay_count"),
    )
    order = ["source_id", "device_id"]
    if by_kernel:
        out = out.with_columns((pl.col("mean_gpu_ns") * pl.col("launch_count")).alias("_t"))
        return out.sort(  # the name breaks ties: the same input, the same order
            [*order, "_t", "name"], descending=[False, False, True, False], nulls_last=True
        ).drop("_t")
    return out.sort(order, nulls_last=True)


def launch_outliers(
    table: pl.DataFrame,
    *,
    delay_floor_ns: int = DELAY_FLOOR_NS,
    whole: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per source, device, outlier kind and kernel name (a graph replay: its call's name, one
    row per replay, whole-graph rows `whole` included): count and mean/max times."""
    table = per_call(table, whole)
    t = table.with_columns(
        (pl.col("gpu_ns") < pl.col("cpu_ns")).alias("short_kernel"),
        _delay_cut(table, delay_floor_ns).alias("long_delay"),
    )
    parts = [
        t.filter(pl.col(kind)).with_columns(pl.lit(kind).alias("outlier"))
        for kind in ("short_kernel", "long_delay")
    ]
    rows = pl.concat(parts)
    return (
        rows.group_by("source_id", "device_id", "outlier", "name")
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("cpu_ns").mean().alias("mean_cpu_ns"),
            pl.col("gpu_ns").mean().alias("mean_gpu_ns"),
            pl.col("delay_ns").mean().alias("mean_delay_ns"),
            pl.col("delay_ns").max().alias("max_delay_ns"),
        )
        .sort(
            ["source_id", "device_id", "outlier", "count", "name"],
            descending=[False, False, False, True, False],
            nulls_last=True,
        )
    )


def kernel_launches(
    kernels: Frame,
    api_calls: Frame,
    *,
    by_kernel: bool = False,
    delay_floor_ns: int = DELAY_FLOOR_NS,
    names: Mapping[str, str] | None = None,
    graph_replays: Frame | None = None,
) -> Launches:
    """Launch statistics; NotAnswerable when no kernel (or whole-graph replay, `graph_replays`)
    has a launch call (e.g. nvprof CSV without its API trace). Kernels and replays without a
    call are counted in a warning. `table` holds kernels only."""
    k = _lazy(kernels).filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    n_kernels = k.select(pl.len()).collect().item()
    n_replays = 0 if graph_replays is None else _timed_count(graph_replays)
    if n_kernels == 0 and n_replays == 0:
        raise NotAnswerable("no timed kernels")
    n_calls = (
        (_lazy(api_calls).filter(pl.col("correlation_id").is_not_null()).select(pl.len()))
        .collect()
        .item()
    )
    if n_calls == 0:
        raise NotAnswerable(
            "no API calls with correlation ids: this trace cannot pair kernels with their "
            "launches (nvprof --print-gpu-trace CSV needs its --print-api-trace CSV beside it)"
        )
    table = launch_table(k, api_calls)
    whole = None
    if graph_replays is not None and n_replays:
        whole = whole_graph_calls(graph_replays, api_calls)
        _warn_unlaunched_replays(n_replays, whole.height)
    if table.height == 0 and (whole is None or whole.height == 0):
        raise NotAnswerable("no kernel shares a correlation id with an API call")
    _warn_unlaunched_kernels(k, table, names)
    return Launches(
        stats=launch_stats(table, by_kernel=by_kernel, delay_floor_ns=delay_floor_ns, whole=whole),
        outliers=launch_outliers(table, delay_floor_ns=delay_floor_ns, whole=whole),
        table=table,
    )


def _warn_unlaunched_kernels(
    k: pl.LazyFrame, table: pl.DataFrame, names: Mapping[str, str] | None
) -> None:
    """Per source: its kernels without a launch call, counted in a warning."""
    per = (
        k.group_by("source_id")
        .agg(pl.len().alias("n"))
        .collect()
        .join(table.group_by("source_id").agg(pl.len().alias("m")), on="source_id", how="left")
        .sort("source_id")
    )
    for sid, n, m in per.iter_rows():
        if m is None:
            warnings.warn(
                f"{source_name(names, sid)}: "
                "no kernel has a launch call (no API calls with its correlation ids); "
                "left out",
                stacklevel=3,
            )
        elif m < n:
            warnings.warn(
                f"{source_name(names, sid)}: "
                f"{n - m} of {n} kernels have no launch call with their correlation id "
                "(outside the capture window or not traced); left out",
                stacklevel=3,
            )


def _timed_count(frame: Frame) -> int:
    timed = pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()
    n: int = _lazy(frame).filter(timed).select(pl.len()).collect().item()
    return n


def _warn_unlaunched_replays(n: int, launched: int) -> None:
    if launched < n:
        warnings.warn(
            f"{n - launched} of {n} whole-graph replays have no launch call with their "
            "correlation id (outside the capture window or not traced); left out",
            stacklevel=3,
        )
