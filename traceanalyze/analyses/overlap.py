"""Communication against computation per device: how much communication the kernels hide.

Communication is (a) collective and point-to-point kernels, recognised by name (NCCL's
`ncclDevKernel_*` / `ncclKernel_*`, RCCL, and names holding AllReduce, AllGather, ReduceScatter,
AllToAll, SendRecv or Broadcast in any spelling), and (b) copies that leave the device: peer
copies (`PtoP`) and host copies (any kind with an `H`: `HtoD`, `DtoH`, `HtoH`, pinned or
unified). Device-local copies (`DtoD`) and memsets are neither. Computation is every other
kernel, and every whole-graph replay (nsys `--cuda-graph-trace=graph` writes one row per replay
and no kernel rows; what it ran is not in the export, so a warning says so).

Per device, intervals are merged first (unions), then: `comm_ns` = |communication|,
`compute_ns` = |computation|, `overlapped_ns` = |communication ∩ computation|, `exposed_ns` =
`comm_ns − overlapped_ns` (communication that nothing hides), `overlap_pct` = overlapped / comm.
With iterations known (the iterations table: `ProfilerStep#N` of the PyTorch profiler, iteration
logs on the same clock), one more row per iteration; the whole-trace row has `iteration` null.
**GPU work belongs to the iteration that launched it**: a kernel or copy goes to the iteration
whose window holds the start of its launch call (the API call with its correlation id, in the
same process where both give one: `launches.launch_calls`), whole, never clipped to the host's
step window (the host may run a step or more ahead of the GPU). Work without a launch call (no
API calls in the trace, or a call outside the capture) goes by its own start. An iteration row's
`window_ns` is the span of its work on the device (first start to last end; 0 when none).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import polars as pl

from ..errors import NotAnswerable
from . import _intervals as iv
from .launches import launch_calls
from .naming import source_name

Frame = pl.DataFrame | pl.LazyFrame

COMM_KERNEL = (
    r"(?i)nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv|broadcast"
)
COLUMNS = (
    "source_id",
    "device_id",
    "iteration",
    "window_ns",
    "compute_ns",
    "comm_ns",
    "comm_kernel_ns",
    "comm_copy_ns",
    "overlapped_ns",
    "exposed_ns",
    "overlap_pct",
)


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def _ids(df: pl.LazyFrame) -> list[pl.Expr]:
    """correlation_id and process_id, null where the frame lacks them."""
    have = set(df.collect_schema().names())
    return [
        pl.col(c) if c in have else pl.lit(None, pl.Int64).alias(c)
        for c in ("correlation_id", "process_id")
    ]


def classify(kernels: Frame, memcpy: Frame) -> pl.DataFrame:
    """Timed kernels and copies as `source_id, device_id, start_ns, end_ns, role,
    correlation_id, process_id` with role `compute`, `comm_kernel` or `comm_copy`; device-local
    copies and memsets left out."""
    k = _lazy(kernels).select(
        "source_id",
        "device_id",
        "start_ns",
        "end_ns",
        pl.when(pl.col("name").str.contains(COMM_KERNEL).fill_null(False))
        .then(pl.lit("comm_kernel"))
        .otherwise(pl.lit("compute"))
        .alias("role"),
        *_ids(_lazy(kernels)),
    )
    off_device = pl.col("kind").str.contains("H") | (pl.col("kind") == "PtoP")
    c = (
        _lazy(memcpy)
        .filter(off_device.fill_null(False) & (pl.col("kind") != "memset"))
        .select(
            "source_id",
            "device_id",
            "start_ns",
            "end_ns",
            pl.lit("comm_copy").alias("role"),
            *_ids(_lazy(memcpy)),
        )
    )
    return pl.concat([k, c.cast(k.collect_schema())]).drop_nulls(["start_ns", "end_ns"]).collect()


def _whole_graphs(
    kernels: Frame, graph_replays: Frame, names: Mapping[str, str] | None
) -> pl.LazyFrame:
    """The kernels and the whole-graph replays (nsys `--cuda-graph-trace=graph`: one row per
    replay, no kernel rows) as computation, one interval each, with a warning per source that
    has any: what a replay ran (computation or collectives captured in the graph) is not in the
    export, and `--cuda-graph-trace=node` records its kernels one by one."""
    from .summary import replays_as_kernels

    timed = _lazy(graph_replays).filter(pl.col("start_ns").is_not_null())
    counts = timed.group_by("source_id").len().sort("source_id").collect()
    for sid, n in counts.iter_rows():
        warnings.warn(
            f"{source_name(names, sid)}: {n} whole-graph replay(s) (nsys "
            "--cuda-graph-trace=graph) counted as computation: what they ran is not in the "
            "export (collectives captured in a graph would be communication); "
            "--cuda-graph-trace=node records their kernels",
            stacklevel=3,
        )
    return replays_as_kernels(kernels, graph_replays)


def _launched_at(rows: pl.DataFrame, api_calls: Frame | None) -> pl.DataFrame:
    """`rows` with `at_ns`: the start of the event's launch call, else the event's start."""
    if api_calls is None:
        return rows.with_columns(pl.col("start_ns").alias("at_ns"))
    j = launch_calls(rows, api_calls)
    return j.select(*rows.columns, pl.coalesce("call_start_ns", "start_ns").alias("at_ns"))


def _measure(rows: pl.DataFrame) -> dict[str, Any]:
    """The row's numbers over `rows` (whole intervals); window: first start to last end."""

    def part(role: tuple[str, ...]) -> iv.Set:
        r = rows.filter(pl.col("role").is_in(role))
        return iv.as_set(r["start_ns"].to_numpy(), r["end_ns"].to_numpy())

    compute, kern, copy = part(("compute",)), part(("comm_kernel",)), part(("comm_copy",))
    comm = iv.union(kern, copy)
    comm_ns = iv.length(comm)
    over = iv.length(iv.intersect(comm, compute))
    lo, hi = rows.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
    window = int(hi) - int(lo) if rows.height else 0
    return {
        "window_ns": window,
        "compute_ns": iv.length(compute),
        "comm_ns": comm_ns,
        "comm_kernel_ns": iv.length(kern),
        "comm_copy_ns": iv.length(copy),
        "overlapped_ns": over,
        "exposed_ns": comm_ns - over,
        "overlap_pct": 100.0 * over / comm_ns if comm_ns else None,
    }


def comm_overlap(
    kernels: Frame,
    memcpy: Frame,
    iterations: Frame | None = None,
    *,
    api_calls: Frame | None = None,
    names: Mapping[str, str] | None = None,
    graph_replays: Frame | None = None,
) -> pl.DataFrame:
    """Per source and device (and iteration): compute, communication, overlapped and exposed ns.

    Iterations with a null `device_id` (host-side steps) frame every device of their source;
    an iteration's work is what it launched (`api_calls` give the launches; module docstring).
    Columns: see `COLUMNS`. A source without any communication gets a warning, not a row of
    zeros only: its `overlap_pct` is null. `graph_replays`: see `_whole_graphs`.
    """
    if graph_replays is not None:
        kernels = _whole_graphs(kernels, graph_replays, names)
    rows = classify(kernels, memcpy)
    if rows.height == 0:
        raise NotAnswerable("no kernels or copies with start and end times")
    if iterations is not None:
        rows = _launched_at(rows, api_calls)
    its = (
        _lazy(iterations).drop_nulls(["start_ns", "end_ns"]).collect()
        if iterations is not None
        else None
    )
    out: list[dict[str, Any]] = []
    for (sid, dev), r in rows.group_by(["source_id", "device_id"], maintain_order=True):
        out.append({"source_id": sid, "device_id": dev, "iteration": None, **_measure(r)})
        if its is None:
            continue
        mine = its.filter(
            (pl.col("source_id") == sid)
            & (pl.col("device_id").is_null() | pl.col("device_id").eq_missing(dev))
        ).sort("iteration")
        for it, lo, hi in mine.select("iteration", "start_ns", "end_ns").iter_rows():
            m = _measure(r.filter((pl.col("at_ns") >= lo) & (pl.col("at_ns") < hi)))
            out.append({"source_id": sid, "device_id": dev, "iteration": it, **m})
    df = pl.DataFrame(
        out,
        schema_overrides={"device_id": pl.Int64, "iteration": pl.Int64, "overlap_pct": pl.Float64},
    ).select(COLUMNS)
    quiet = (
        df.filter(pl.col("iteration").is_null()).group_by("source_id").agg(pl.col("comm_ns").sum())
    )
    for sid in quiet.filter(pl.col("comm_ns") == 0)["source_id"].to_list():
        warnings.warn(
            f"{source_name(names, sid)}: "
            "no communication kernels (NCCL, collectives) or peer/host copies; "
            "nothing to overlap",
            stacklevel=2,
        )
    return df.sort(["source_id", "device_id", "iteration"], nulls_last=False)
