"""GPU idle time per device and stream, split by cause.

The window and the busy time are `busy`'s: the window is `[first start, last end]` of the
source's kernels and copies (every device), or the one given; a device (or stream) is busy while
at least one of its kernels runs (a union). Idle = window − busy, cut into gaps. Each gap's time
goes to exactly one cause, checked in this order:

* `copy_ns`: a copy or memset (memcpy table) runs on the device (for a stream row: that stream);
* `launch_gap_ns`: the kernel that ends the gap was already launched (its launch call, by
  correlation id, had started) but had not started: launch overhead between queued kernels;
* `sync_ns`: the host sits in a blocking call (`*Synchronize`, or a copy call without `Async`)
  of a process that runs kernels on the device, and nothing is queued;
* `host_wait_ns`: nothing queued and the host busy elsewhere: the GPU waits for the host (the
  next kernel's launch call started after the previous kernel ended, or no kernel follows);
* `unknown_ns`: the kernel that ends the gap has no launch call (no API calls in the trace, e.g.
  nvprof `--print-gpu-trace` CSV, or a call outside the capture window).

So `host_wait_ns + launch_gap_ns + sync_ns + copy_ns + unknown_ns == idle_ns` on every row, and
a device row's `idle_ns` is `busy`'s `window_ns - busy_ns` for its kernels.

Whole-graph replays (`graph_replays`: nsys `--cuda-graph-trace=graph`, one row per replay, no
kernel rows) are busy time on their device and stream, as kernels are (`busy` counts them as
kernels too), and a gap that a replay ends is a launch gap when its graph launch call had
started.
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

# Host calls that block until the GPU reaches a point: explicit synchronization, and the
# synchronous copy/memset entry points (runtime `cudaMemcpy`, driver `cuMemcpyDtoH_v2`, …).
SYNC_CALL = pl.col("name").str.contains("Synchronize") | (
    pl.col("name").str.contains("^cu(da)?Mem(cpy|set)") & ~pl.col("name").str.contains("Async")
)

CAUSES = ("host_wait_ns", "launch_gap_ns", "sync_ns", "copy_ns", "unknown_ns")


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def _set(df: pl.DataFrame, lo: int, hi: int) -> iv.Set:
    return iv.clip(iv.as_set(df["start_ns"].to_numpy(), df["end_ns"].to_numpy()), lo, hi)


def _next_launch(k: pl.DataFrame, gaps: iv.Set, lo: int, hi: int) -> tuple[iv.Set, iv.Set]:
    """(queued, unknown) parts of the gaps, from the kernel that ends each gap: queued from its
    launch call's start to the gap's end; the whole gap unknown when it has no call. Several
    kernels starting at the gap's end: the earliest-launched one."""
    nxt = (
        k.select(pl.col("start_ns").clip(lo, hi).alias("g1"), "call_start_ns")
        .group_by("g1")
        .agg(pl.col("call_start_ns").min())
    )
    g = (
        pl.DataFrame({"g0": gaps[0], "g1": gaps[1]}, schema={"g0": pl.Int64, "g1": pl.Int64})
        .filter(pl.col("g1") < hi)  # the tail gap: no kernel follows, nothing is queued
        .join(nxt, on="g1", how="left")
    )
    known = g.filter(pl.col("call_start_ns").is_not_null())
    q0 = known.select(pl.max_horizontal("g0", "call_start_ns"))
    queued = iv.as_set(q0.to_series().to_numpy(), known["g1"].to_numpy())
    unk = g.filter(pl.col("call_start_ns").is_null())
    return queued, iv.as_set(unk["g0"].to_numpy(), unk["g1"].to_numpy())


def _span(*frames: pl.DataFrame) -> tuple[int, int]:
    """busy's default window: first start to last end over kernels and copies."""
    both = pl.concat([f.select("start_ns", "end_ns") for f in frames])
    return int(both["start_ns"].min()), int(both["end_ns"].max())  # type: ignore[arg-type]


def _lane(
    k: pl.DataFrame,
    copies: pl.DataFrame,
    sync: pl.DataFrame,
    lo: int,
    hi: int,
    have_calls: bool,
) -> dict[str, int]:
    """Busy, idle and the idle split of one lane's kernels in `[lo, hi)`."""
    busy = _set(k, lo, hi)
    gaps = iv.complement(busy, lo, hi)
    if have_calls:
        queued, unknown = _next_launch(k, gaps, lo, hi)
    else:
        queued, unknown = iv.EMPTY, gaps
    rest = gaps
    out = {"busy_ns": iv.length(busy), "idle_ns": iv.length(gaps), "gap_count": gaps[0].size}
    for name, cover in (
        ("copy_ns", _set(copies, lo, hi)),
        ("launch_gap_ns", queued),
        ("sync_ns", _set(sync, lo, hi)),
        ("unknown_ns", unknown),
    ):
        out[name] = iv.length(iv.intersect(rest, cover))
        rest = iv.subtract(rest, cover)
    out["host_wait_ns"] = iv.length(rest)
    return out


def _device_rows(
    sid: str,
    dev: Any,
    kd: pl.DataFrame,
    cs: pl.DataFrame,
    sync: pl.DataFrame,
    span: tuple[int, int],
    has_calls: bool,
) -> list[dict[str, Any]]:
    """One device's row (`stream_id` null) and a row per stream: the device's kernels `kd`, the
    source's copies `cs`, the blocking calls of the processes that launched on it."""
    lo, hi = span
    procs = kd["process_id"].drop_nulls().unique().to_list()
    sy = sync.filter(pl.col("source_id") == sid)
    if procs:
        sy = sy.filter(pl.col("process_id").is_in(procs))
    cd = cs.filter(pl.col("device_id").eq_missing(dev))
    base = {"source_id": sid, "device_id": dev, "window_ns": hi - lo}
    rows = [{**base, "stream_id": None, **_lane(kd, cd, sy, lo, hi, has_calls)}]
    for (st,), kst in kd.group_by(["stream_id"], maintain_order=True):
        cst = cd.filter(pl.col("stream_id").eq_missing(st))
        rows.append({**base, "stream_id": st, **_lane(kst, cst, sy, lo, hi, has_calls)})
    return rows


def idle_time(
    kernels: Frame,
    memcpy: Frame,
    api_calls: Frame,
    *,
    window: tuple[int, int] | None = None,
    names: Mapping[str, str] | None = None,
    graph_replays: Frame | None = None,
) -> pl.DataFrame:
    """Idle time per source and device (`stream_id` null) and per stream, split by cause;
    `graph_replays` (whole-graph rows) are busy time as kernels are.

    Columns: source_id, device_id, stream_id, window_ns, busy_ns, idle_ns, idle_pct, gap_count,
    host_wait_ns, launch_gap_ns, sync_ns, copy_ns, unknown_ns.
    """
    # Only the columns used here are read (the kernels' names are most of a kernels table).
    lane = ["source_id", "device_id", "stream_id", "start_ns", "end_ns"]
    kern = _lazy(kernels).select(*lane, "process_id", "correlation_id")
    if graph_replays is not None:
        whole = _lazy(graph_replays).select(*lane, "process_id", "correlation_id")
        kern = pl.concat([kern, whole])
    k = launch_calls(kern.drop_nulls(["start_ns", "end_ns"]), api_calls)
    cp = _lazy(memcpy).select(lane).drop_nulls(["start_ns", "end_ns"]).collect()
    if k.height == 0:
        raise NotAnswerable("no kernels with start and end times")
    calls = _lazy(api_calls).drop_nulls(["start_ns", "end_ns"])
    sync = (
        calls.filter(SYNC_CALL.fill_null(False))
        .select("source_id", "process_id", "start_ns", "end_ns")
        .collect()
    )
    have = set(calls.select(pl.col("source_id").unique()).collect()["source_id"].to_list())
    rows: list[dict[str, Any]] = []
    for (sid,), ks in k.group_by(["source_id"], maintain_order=True):
        cs = cp.filter(pl.col("source_id") == sid)
        lo, hi = window if window is not None else _span(ks, cs)
        if sid not in have:
            warnings.warn(
                f"{source_name(names, sid)}: "
                "no API calls, so the causes of idle time other than copies are "
                "unknown (unknown_ns)",
                stacklevel=2,
            )
        for (dev,), kd in ks.group_by(["device_id"], maintain_order=True):
            rows += _device_rows(sid, dev, kd, cs, sync, (lo, hi), sid in have)
    out = pl.DataFrame(rows, schema_overrides={"device_id": pl.Int64, "stream_id": pl.Int64})
    return out.select(
        "source_id",
        "device_id",
        "stream_id",
        "window_ns",
        "busy_ns",
        "idle_ns",
        (100.0 * pl.col("idle_ns") / pl.col("window_ns")).alias("idle_pct"),
        "gap_count",
        *CAUSES,
    ).sort(["source_id", "device_id", "stream_id"], nulls_last=False)
