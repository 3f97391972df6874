"""Stage 2 of `critical_path`: one window's events as numpy arrays (`window`, the entry).

From the frames `windows` cut to the window: host events (operators or NVTX ranges from
`ops.host_ops`, and runtime/driver calls) sorted by start, so that an iteration's host events are
one contiguous range; GPU events reached through their launch call's position (sorted by it), or
by start when they have no call. Per GPU event: the launch call (`launches.launch_calls`), the
previous event on its device and stream, and the latest event of another stream of its device
that ended before it started; per blocking call (`idle.SYNC_CALL`), the GPU event it waited for;
per event its what-if factor (`factor`, `gpu_op_factor`). Then the window's slice of them,
`HostSlice` / `GpuSlice`, which `graph` builds on. The categories of the path's time are named
here, where GPU events get theirs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from ...schema import GRAPH_LAUNCH_API
from ..idle import SYNC_CALL
from ..launches import launch_calls
from ..ops import host_ops
from ..overlap import COMM_KERNEL
from .windows import Job, WhatIf

Frame = pl.DataFrame | pl.LazyFrame
_COPY_CALL = pl.col("name").str.contains("^cu(da)?Mem(cpy|set)") & ~pl.col("name").str.contains(
    "Async"
)


I64 = npt.NDArray[np.int64]
NONE = np.iinfo(np.int64).min  # "no such time" in the int64 arrays below

# Edge categories, in the order of the result's split columns.
CATEGORIES = (
    "gpu_compute",
    "gpu_comm",
    "gpu_memory",
    "host",
    "launch",
    "sync",
    "idle",
    "carry",
)
GPU_COMPUTE, GPU_COMM, GPU_MEMORY, HOST, LAUNCH, SYNC, IDLE, CARRY = range(8)


@dataclass
class HostSlice:
    """Host events of one iteration, sorted by (thread, start, longer first).

    `thread`: a group number per (process, thread); `end` is clipped to the parent's end;
    `wait_gpu`: for a blocking call, the local index of the GPU event it waited for (-1: none);
    `wait_end`: that event's end, also when it lies outside the iteration (then a carry edge);
    `own_rules`: which `op:` what-if rules match the event (bit r: rule r, Python ints), and
    `rule_factors` their factors: the graph applies each rule matching the event or an enclosing
    one once, however deeply matches nest."""

    thread: I64
    process: I64
    start: I64
    end: I64
    is_call: npt.NDArray[np.bool_]
    is_sync: npt.NDArray[np.bool_]
    wait_gpu: I64
    wait_end: I64
    own_rules: npt.NDArray[np.object_]
    wait_global: I64
    # when the waited-for GPU event was launched (NONE: no wait); see `GpuSlice`
    wait_launch: I64 | None = None
    rule_factors: tuple[float, ...] = ()


@dataclass
class GpuSlice:
    """GPU events of one iteration: `cat` (GPU_COMPUTE, GPU_COMM or GPU_MEMORY), `call` (local
    host index of the launch call, -1: none in the iteration), `prev` (local index of the previous
    event on the stream, -1: none here) with `prev_end` (its end, NONE: no previous event),
    `wait` / `wait_end` (the latest event of another stream ended before the start, launched
    no later than this one), `factor` (the what-if factor of the duration), `launch_edge` (False:
    an op of a graph replay after the first of its stream, which follows in stream order and has
    no launch edge) and `prev_launch` / `wait_launch`: when those earlier events were launched
    (their call's start in the whole trace, else their own start). Only an event launched before
    the iteration's start is earlier work that a carry may wait for."""

    start: I64
    end: I64
    cat: I64
    call: I64
    prev: I64
    prev_end: I64
    wait: I64
    wait_end: I64
    factor: npt.NDArray[np.float64]
    prev_global: I64
    wait_global: I64
    # False for a graph replay's op after the first of its stream: no launch edge of its own
    launch_edge: npt.NDArray[np.bool_] | None = None
    prev_launch: I64 | None = None
    wait_launch: I64 | None = None


# A launch call this long blocked (the launch queue was full): it waits for the GPU like a
# synchronizing call.
QUEUE_FULL_NS = 50_000
_dur = pl.col("end_ns") - pl.col("start_ns")


def _i64(s: pl.Series, none: int = -1) -> np.ndarray[Any, Any]:
    out: np.ndarray[Any, Any] = s.fill_null(none).cast(pl.Int64).to_numpy().copy()
    return out


def _host(ops: Frame, markers: Frame, api_calls: Frame) -> pl.DataFrame:
    o = host_ops(ops, markers).select(
        "source_id",
        "process_id",
        "thread_id",
        "name",
        "start_ns",
        "end_ns",
        pl.when(pl.col("basis") == "nvtx")
        .then(pl.lit("nvtx"))
        .otherwise(pl.lit("op"))
        .alias("kind"),
    )
    notes = (
        markers.lazy()
        .filter(
            (pl.col("category") == "user_annotation")
            & pl.col("device_id").is_null()
            & pl.col("thread_id").is_not_null()
        )
        .drop_nulls(["start_ns", "end_ns"])
        .select(*o.columns[:-1], pl.lit("annotation").alias("kind"))
        .collect()
    )
    calls = (
        api_calls.lazy()
        .drop_nulls(["start_ns", "end_ns"])
        .select(
            "source_id",
            "process_id",
            "thread_id",
            "name",
            "start_ns",
            "end_ns",
            pl.lit("call").alias("kind"),
            "correlation_id",
            (SYNC_CALL | (pl.col("name").str.contains("Launch") & (_dur >= QUEUE_FULL_NS)))
            .fill_null(False)
            .alias("sync"),
            _COPY_CALL.fill_null(False).alias("copy_sync"),
        )
        .collect()
    )
    h = pl.concat([o, notes, calls], how="diagonal_relaxed").with_columns(
        pl.col("sync").fill_null(False), pl.col("copy_sync").fill_null(False)
    )
    h = h.sort("source_id", "start_ns", "end_ns", descending=[False, False, True])
    return h.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("source_id").alias("hid"))


def _gpu(
    kernels: Frame, memcpy: Frame, api_calls: Frame, h: pl.DataFrame, all_calls: Frame
) -> pl.DataFrame:
    cols = ["source_id", "process_id", "device_id", "stream_id", "correlation_id"]
    k = (
        kernels.lazy()
        .drop_nulls(["start_ns", "end_ns"])
        .select(
            *cols,
            "name",
            "start_ns",
            "end_ns",
            pl.when(pl.col("name").str.contains(COMM_KERNEL).fill_null(False))
            .then(pl.lit(GPU_COMM, dtype=pl.Int64))
            .otherwise(pl.lit(GPU_COMPUTE, dtype=pl.Int64))
            .alias("cat"),
            pl.lit("kernel").alias("kind"),
        )
    )
    m = (
        memcpy.lazy()
        .drop_nulls(["start_ns", "end_ns"])
        .select(
            *cols,
            pl.when(pl.col("kind") == "memset")
            .then(pl.lit("Memset"))
            .otherwise(pl.concat_str(pl.lit("Memcpy "), pl.col("kind").fill_null("?")))
            .alias("name"),
            "start_ns",
            "end_ns",
            pl.lit(GPU_MEMORY, dtype=pl.Int64).alias("cat"),
            pl.lit("memcpy").alias("kind"),
        )
    )
    both = pl.concat([k, m], how="vertical_relaxed")
    g = _launched(launch_calls(both, api_calls), both, all_calls)
    calls = h.filter(pl.col("kind") == "call").select(
        "source_id",
        pl.col("process_id").alias("call_process_id"),
        "thread_id",
        pl.col("start_ns").alias("call_start_ns"),
        "correlation_id",
        pl.col("hid").alias("call_hid"),
    )
    keys = ["source_id", "call_process_id", "thread_id", "call_start_ns", "correlation_id"]
    g = g.join(calls.unique(keys, keep="first"), on=keys, how="left", nulls_equal=True)
    g = g.with_columns(pl.coalesce("process_id", "call_process_id").alias("pid"))
    lane = ["source_id", "device_id", "stream_id"]
    g = g.sort([*lane, "start_ns", "end_ns"], nulls_last=True).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over("source_id").alias("gid")
    )
    # A graph replay (every op carries its launch call's correlation id) is launched once: the
    # launch edge goes to the first op of each stream it uses; the rest follow in stream order.
    graph = pl.col("call_name").str.contains(GRAPH_LAUNCH_API).fill_null(False)
    first = pl.col("gid").rank("ordinal").over([*lane, "call_hid"]) == 1
    return g.with_columns(
        pl.col("gid").shift(1).over(lane).alias("prev_gid"),
        pl.col("end_ns").shift(1).over(lane).alias("prev_end"),
        (~graph | first).alias("launch_edge"),
    )


def _launched(g: pl.DataFrame, both: pl.LazyFrame, all_calls: Frame) -> pl.DataFrame:
    """`launch_ns`: when each op was launched, from the whole trace's calls (a window's calls
    miss the earlier and later steps'); an op with no launch call anywhere was launched no later
    than it started, so its start stands in."""
    at = launch_calls(both.select("source_id", "process_id", "correlation_id"), all_calls)
    return g.with_columns(pl.coalesce(at["call_start_ns"], pl.col("start_ns")).alias("launch_ns"))


def _cross_waits(g: pl.DataFrame) -> pl.DataFrame:
    """Per GPU event: the latest event of another stream of its device that ended by its start
    and was launched no later than it (`launch_ns`): a wait is set up by the host before the
    waiting op is launched, so work launched after it (in a later step) is never waited for."""
    wait_gid = np.full(g.height, -1, dtype=np.int64)
    wait_end = np.full(g.height, NONE, dtype=np.int64)
    for rows in g.with_row_index("_r").group_by(["source_id", "device_id"]).agg("_r")["_r"]:
        r = rows.to_numpy()
        _device_waits(g[r], r, wait_gid, wait_end)
    return g.with_columns(
        pl.Series("wait_gid", wait_gid).replace(-1, None),
        pl.Series("wait_end", wait_end).replace(NONE, None),
    )


def _device_waits(dev: pl.DataFrame, rows: Any, out_gid: Any, out_end: Any) -> None:
    start, end, launch = _i64(dev["start_ns"]), _i64(dev["end_ns"]), _i64(dev["launch_ns"])
    stream, gid = _i64(dev["stream_id"], NONE), _i64(dev["gid"])
    by_end = np.argsort(end, kind="stable")
    for sid in np.unique(stream).tolist():
        mine = np.flatnonzero(stream == sid)
        other = by_end[stream[by_end] != sid]
        if other.size == 0:
            continue
        ends, late = end[other], launch[other]
        pos = np.searchsorted(ends, start[mine], side="right") - 1
        for k, p in zip(mine.tolist(), pos.tolist(), strict=True):
            if p >= 0 and late[p] > launch[k]:  # the latest one came later: look further back
                ok = np.flatnonzero(late[: p + 1] <= launch[k])
                p = int(ok[-1]) if ok.size else -1
            if p >= 0:
                out_gid[rows[k]], out_end[rows[k]] = gid[other[p]], ends[p]


def _sync_waits(h: pl.DataFrame, g: pl.DataFrame) -> pl.DataFrame:
    """Per blocking call: the GPU event it waited for (`wait_gid`, `wait_end`), if any."""
    s = h.filter(pl.col("sync")).select(
        "source_id", "hid", "process_id", "start_ns", "end_ns", "copy_sync"
    )
    own = (
        g.filter(pl.col("call_hid").is_not_null())
        .group_by("source_id", "call_hid")
        .agg(pl.col("gid").sort_by("end_ns").last().alias("own_gid"), pl.col("end_ns").max())
        .rename({"call_hid": "hid", "end_ns": "own_end"})
    )
    gg = (
        g.filter(pl.col("pid").is_not_null())
        .select(
            "source_id",
            pl.col("pid").alias("process_id"),
            pl.col("end_ns").alias("wait_end"),
            pl.col("gid").alias("wait_gid"),
            pl.col("launch_ns").alias("wait_call"),
        )
        .sort("wait_end")
    )
    j = s.sort("end_ns").join_asof(
        gg,
        left_on="end_ns",
        right_on="wait_end",
        by=["source_id", "process_id"],
        strategy="backward",
        check_sortedness=False,  # sorted by `end_ns` as a whole, hence within each group
    )
    j = j.join(own, on=["source_id", "hid"], how="left")
    use_own = (
        pl.col("copy_sync")
        & pl.col("own_end").is_not_null()
        & (pl.col("own_end") > pl.col("start_ns"))
        & (pl.col("own_end") <= pl.col("end_ns"))
    )
    other_ok = (pl.col("wait_end") > pl.col("start_ns")) & (
        pl.col("wait_call") < pl.col("start_ns")
    )
    return j.select(
        "source_id",
        "hid",
        pl.when(use_own)
        .then(pl.col("own_gid"))
        .when(other_ok)
        .then(pl.col("wait_gid"))
        .alias("wait_gid"),
        pl.when(use_own)
        .then(pl.col("own_end"))
        .when(other_ok)
        .then(pl.col("wait_end"))
        .alias("wait_end"),
    )


@dataclass
class Slice:
    host: HostSlice
    gpu: GpuSlice
    hids: np.ndarray[Any, Any]
    gids: np.ndarray[Any, Any]


class SourceEvents:
    """One source's events as numpy columns (see the module docstring)."""

    def __init__(self, source_id: str, h: pl.DataFrame, g: pl.DataFrame, wi: WhatIf | None):
        self.source_id = source_id
        self.h_start, self.h_end = _i64(h["start_ns"]), _i64(h["end_ns"])
        self.h_thread = _i64(
            h.select(pl.struct("process_id", "thread_id").rank("dense")).to_series()
        )
        self.h_tid = h["thread_id"]
        self.h_pid = _i64(h["process_id"])
        self.h_kind, self.h_name = h["kind"], h["name"]
        self.h_is_call = (h["kind"] == "call").to_numpy()
        self.h_is_sync = h["sync"].to_numpy()
        self.h_wait_gid, self.h_wait_end = _i64(h["wait_gid"]), _i64(h["wait_end"], NONE)
        ops_only = pl.when(pl.col("kind") != "call").then(pl.col("name"))
        self.h_rules = rule_bits(h.select(ops_only).to_series(), wi.op if wi else ())
        self.rule_factors = tuple(f for _, f in wi.op) if wi else ()
        self.g_start, self.g_end = _i64(g["start_ns"]), _i64(g["end_ns"])
        self.g_cat, self.g_call = _i64(g["cat"]), _i64(g["call_hid"])
        self.g_launch_edge = g["launch_edge"].fill_null(True).to_numpy()
        self.g_prev, self.g_prev_end = _i64(g["prev_gid"]), _i64(g["prev_end"], NONE)
        self.g_wait, self.g_wait_end = _i64(g["wait_gid"]), _i64(g["wait_end"], NONE)
        self.g_launch = _i64(g["launch_ns"], NONE)
        # names and ids stay polars Series (no Python object per event): read only for
        # the events on a path (`describe`)
        self.g_name, self.g_kind = g["name"], g["kind"]
        self.g_stream, self.g_device = g["stream_id"], g["device_id"]
        kern = pl.when(pl.col("kind") == "kernel").then(pl.col("name"))
        self.g_factor = factor(g.select(kern).to_series(), wi.kernel if wi else ())
        if wi is not None and wi.gpu_op:
            self.g_factor *= gpu_op_factor(h, self.h_thread, self.g_call, wi.gpu_op)
        with_call = np.flatnonzero(self.g_call >= 0)
        self.by_call = with_call[np.argsort(self.g_call[with_call], kind="stable")]
        self.by_call_key = self.g_call[self.by_call]
        no_call = np.flatnonzero((self.g_call < 0) & g["orphan_ok"].to_numpy())
        self.no_call = no_call[np.argsort(self.g_start[no_call], kind="stable")]
        self.gmap = np.full(self.g_start.size, -1, dtype=np.int64)

    def slice(self, lo: int, hi: int) -> Slice:
        a, b = np.searchsorted(self.h_start, [lo, hi], side="left").tolist()
        c0, c1 = np.searchsorted(self.by_call_key, [a, b], side="left").tolist()
        n0, n1 = np.searchsorted(self.g_start[self.no_call], [lo, hi], side="left").tolist()
        gids = np.concatenate([self.by_call[c0:c1], self.no_call[n0:n1]])
        # Threads that launch nothing in the window (watchdogs, loaders) bound nothing here.
        launching = np.unique(self.h_thread[self.g_call[self.by_call[c0:c1]]])
        keep = (
            np.flatnonzero(np.isin(self.h_thread[a:b], launching))
            if launching.size
            else np.arange(b - a)  # a CPU-only window: every thread
        )
        order = keep[
            np.lexsort((-self.h_end[a + keep], self.h_start[a + keep], self.h_thread[a + keep]))
        ]
        hids = a + order
        hloc = np.full(b - a, -1, dtype=np.int64)
        hloc[order] = np.arange(order.size)
        gmap = self.gmap
        gmap[gids] = np.arange(gids.size)
        local = functools.partial(_local, gmap)
        call, launched = self.g_call[gids], self._launched
        host = HostSlice(
            thread=self.h_thread[hids],
            process=self.h_pid[hids],
            start=self.h_start[hids],
            end=self.h_end[hids].copy(),
            is_call=self.h_is_call[hids],
            is_sync=self.h_is_sync[hids],
            wait_gpu=local(self.h_wait_gid[hids]),
            wait_end=self.h_wait_end[hids],
            own_rules=self.h_rules[hids],
            rule_factors=self.rule_factors,
            wait_global=self.h_wait_gid[hids],
            wait_launch=launched(self.h_wait_gid[hids]),
        )
        gpu = GpuSlice(
            start=self.g_start[gids],
            end=self.g_end[gids],
            cat=self.g_cat[gids],
            call=np.where(call >= 0, hloc[np.clip(call - a, 0, max(b - a - 1, 0))], -1)
            if b > a
            else np.full(gids.size, -1, dtype=np.int64),
            prev=local(self.g_prev[gids]),
            prev_end=self.g_prev_end[gids],
            wait=local(self.g_wait[gids]),
            wait_end=self.g_wait_end[gids],
            factor=self.g_factor[gids],
            launch_edge=self.g_launch_edge[gids],
            prev_global=self.g_prev[gids],
            wait_global=self.g_wait[gids],
            prev_launch=launched(self.g_prev[gids]),
            wait_launch=launched(self.g_wait[gids]),
        )
        gmap[gids] = -1
        return Slice(host, gpu, hids, gids)

    def _launched(self, ix: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """When the GPU events `ix` (window ids, -1: none) were launched (NONE: none)."""
        if self.g_launch.size == 0:
            return np.full(ix.size, NONE, dtype=np.int64)
        return np.where(ix >= 0, self.g_launch[np.maximum(ix, 0)], NONE)


def window_events(
    kernels: Frame,
    memcpy: Frame,
    api_calls: Frame,
    ops: Frame,
    markers: Frame,
    wi: WhatIf | None,
    *,
    orphans: bool,
    all_calls: Frame | None = None,
) -> SourceEvents | None:
    """The `SourceEvents` of one source's window (frames already cut to it, see `windows`);
    None when it has no timed event. `orphans`: GPU events without a launch call in the window
    count as the window's own when they start in it (the source has no API calls at all, or
    the event carries no correlation id). `all_calls`: the source's calls beyond the window, to
    tell when each GPU op was launched (default: the window's)."""
    h = _host(ops, markers, api_calls)
    g = _gpu(kernels, memcpy, api_calls, h, api_calls if all_calls is None else all_calls)
    g = _cross_waits(g).sort("source_id", "gid")
    if h.height == 0 and g.height == 0:
        return None
    procs = h.filter(pl.col("kind") == "call")["process_id"].drop_nulls().unique()
    if procs.len() == 1:
        # Kineto leaves a kernel's process empty: the trace's one process ran the earlier
        # work that a call of this window may wait for.
        g = g.with_columns(pl.col("pid").fill_null(procs[0]))
    if h.height:
        h = h.join(_sync_waits(h, g), on=["source_id", "hid"], how="left")
        # A long launch that waited for no GPU event was slow on the host (module loading).
        blocked = pl.col("wait_gid").is_not_null() | ~pl.col("name").str.contains("Launch")
        h = h.with_columns((pl.col("sync") & blocked.fill_null(True)).alias("sync"))
    else:
        h = h.with_columns(
            pl.lit(None, dtype=pl.Int64).alias("wait_gid"),
            pl.lit(None, dtype=pl.Int64).alias("wait_end"),
        )
    sid = (g if g.height else h)["source_id"][0]
    own = pl.lit(True) if orphans else pl.col("correlation_id").is_null()
    g = g.with_columns(own.alias("orphan_ok"))
    return SourceEvents(sid, h, g, wi)


@dataclass(frozen=True)
class Window:
    """One window's events: its source's arrays (`ev`) and the window's slice of them (`sl`)."""

    source_id: str
    iteration: int | None
    lo: int
    hi: int
    ev: SourceEvents
    sl: Slice


def window(job: Job, wi: WhatIf | None) -> Window | None:
    """The stage's entry: the events of the window `job` (None when it has no timed event)."""
    c = job.cut
    ev = window_events(
        c.kernels,
        c.memcpy,
        c.api_calls,
        c.ops,
        c.markers,
        wi,
        orphans=job.orphans,
        all_calls=c.all_calls,
    )
    if ev is None:
        return None
    return Window(job.source_id, job.iteration, job.lo, job.hi, ev, ev.slice(job.lo, job.hi))


def _local(gmap: np.ndarray[Any, Any], ix: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Window ids `ix` (-1: none) as positions in the slice (`gmap`: window id -> position)."""
    if gmap.size == 0:
        return np.full(ix.size, -1, dtype=np.int64)
    return np.where(ix >= 0, gmap[np.maximum(ix, 0)], -1)


def rule_bits(names: pl.Series, rules: tuple[tuple[str, float], ...]) -> np.ndarray[Any, Any]:
    """Per name, the rules whose regex matches it as bits of a Python int (bit r: rule r)."""
    out = np.zeros(names.len(), dtype=object)
    for r, (rx, _) in enumerate(rules):
        hit = names.fill_null("").str.contains(rx).to_numpy()
        out[hit] |= 1 << r
    return out


def factor(names: pl.Series, rules: tuple[tuple[str, float], ...]) -> np.ndarray[Any, Any]:
    """Product of the factors of the rules whose regex matches each name (each rule once)."""
    out = np.ones(names.len(), dtype=np.float64)
    for rx, f in rules:
        hit = names.fill_null("").str.contains(rx).to_numpy()
        out[hit] *= f
    return out


def gpu_op_factor(
    h: pl.DataFrame, thread: np.ndarray[Any, Any], call: np.ndarray[Any, Any], rules: Sequence[Any]
) -> np.ndarray[Any, Any]:
    """Per GPU event (`call`: its launch call's host index, -1 without one): the product of the
    factors of the `gpu-op` rules whose regex matches an operator (a host event that is not a
    call) on the launch call's thread whose interval holds the call's start: the GPU time of
    the kernels that operator launched, at any depth below it. `thread`: each host event's
    thread number."""
    out = np.ones(call.size, dtype=np.float64)
    start, end = h["start_ns"].to_numpy(), h["end_ns"].to_numpy()
    is_call = (h["kind"] == "call").to_numpy()
    names = h["name"].fill_null("")
    has = call >= 0
    for rx, f in rules:
        match = ~is_call & names.str.contains(rx).to_numpy()
        inside = np.zeros(start.size, dtype=bool)
        for t in np.unique(thread[match]):
            m = np.flatnonzero(match & (thread == t))
            order = np.argsort(start[m], kind="stable")
            s, e = start[m][order], np.maximum.accumulate(end[m][order])
            calls = np.flatnonzero(is_call & (thread == t))
            i = np.searchsorted(s, start[calls], side="right") - 1
            inside[calls] = (i >= 0) & (start[calls] < e[np.maximum(i, 0)])
        hit = np.zeros(call.size, dtype=bool)
        hit[has] = inside[call[has]]
        out[hit] *= f
    return out
