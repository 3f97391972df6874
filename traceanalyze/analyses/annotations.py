"""GPU time and events per user annotation, nested names as paths (`outer/inner`).

Two ways to tie a GPU event (kernel, copy or memset) to an annotation, chosen per source:

* `gpu_user_annotation` (PyTorch profiler): Kineto already writes each `record_function` range
  onto the GPU, per device and stream. An event belongs to the innermost such range on its device
  and stream whose `[start, end)` holds the event's start; none: null.
* `launch_projection` (nsys, nvprof, or a PyTorch trace without GPU annotations): host ranges
  (NVTX push/pop and start/end ranges; PyTorch `user_annotation`) are projected onto the GPU
  through the launches, as Nsight Systems' `nvtx_gpu_proj` does: an event belongs to the
  innermost range on the thread of its launch call (same correlation id) whose interval holds
  the call's start. Events without a call, or launched outside every range: null.

"Innermost" is the range with the latest start among those holding the point; a range's path is
its enclosing ranges' names, outermost first, then its own. `depth` cuts paths to their first
`depth` levels, so `depth=1` sums by top-level range.
"""

# No `from __future__ import annotations`: it would shadow the `annotations` entry point.
import warnings
from collections.abc import Mapping

import polars as pl

from ..errors import NotAnswerable
from .launches import launch_calls
from .naming import source_name

Frame = pl.DataFrame | pl.LazyFrame

GPU_ANNOTATION = "gpu_user_annotation"
# the `event` of a whole-graph replay (nsys --cuda-graph-trace=graph: one row per replay, no
# kernel rows), tied to annotations through its graph launch call as a kernel is
GRAPH_REPLAY = "graph_replay"
HOST_RANGES = ("nvtx", "user_annotation")
# torch.autograd.profiler.emit_nvtx appends these to every op's range name
PYTORCH_IDS = r", (seq|op_id) = \d+"


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def innermost(ranges: pl.DataFrame, points: pl.DataFrame, lane: list[str]) -> pl.DataFrame:
    """For each point (`lane..., t_ns, _row`), the path (list of names, outermost first) of the
    innermost range of `ranges` (`lane..., name, start_ns, end_ns`) on the same lane with
    start <= t < end, else null.

    One sweep per lane in time order: ranges are pushed on a stack as they start (each range's
    path is the path of the range on top, the innermost open one, plus its own name); a range
    whose end has passed is popped when it comes to the top. The top then is always the open
    range that started last. Returns `_row, path`.
    """
    # Each distinct path once (a trace has few, and millions of events): per point its path's
    # number, and the paths as a small frame joined back at the end.
    rows: list[int] = []
    ids: list[int | None] = []
    known: dict[tuple[str, ...], int] = {}
    desc = [*([False] * len(lane)), False, True]  # same start: the longer (outer) range first
    rg = ranges.sort([*lane, "start_ns", "end_ns"], descending=desc)
    by_lane = dict(iter(rg.group_by(lane, maintain_order=True)))
    for key, pts in points.sort([*lane, "t_ns"]).group_by(lane, maintain_order=True):
        g = by_lane.get(key)
        starts = g["start_ns"].to_list() if g is not None else []
        ends = g["end_ns"].to_list() if g is not None else []
        names = g["name"].fill_null("?").to_list() if g is not None else []
        stack: list[tuple[int, tuple[str, ...], int]] = []  # (end, path, its number)
        i = 0
        for t, row in zip(pts["t_ns"].to_list(), pts["_row"].to_list(), strict=True):
            while i < len(starts) and starts[i] <= t:
                while stack and stack[-1][0] <= starts[i]:
                    stack.pop()
                path = (*stack[-1][1], names[i]) if stack else (names[i],)
                stack.append((ends[i], path, known.setdefault(path, len(known))))
                i += 1
            while stack and stack[-1][0] <= t:
                stack.pop()
            rows.append(row)
            ids.append(stack[-1][2] if stack else None)
    paths = pl.DataFrame(
        {"_p": range(len(known)), "path": [list(p) for p in known]},
        schema={"_p": pl.UInt32, "path": pl.List(pl.String)},
    )
    return (
        pl.DataFrame({"_row": rows, "_p": ids}, schema={"_row": pl.UInt32, "_p": pl.UInt32})
        .join(paths, on="_p", how="left", maintain_order="left")
        .select("_row", "path")
    )


def _events(kernels: Frame, memcpy: Frame, graph_replays: Frame | None = None) -> pl.LazyFrame:
    cols = ["source_id", "process_id", "device_id", "stream_id", "correlation_id"]
    times = ("start_ns", "end_ns", "duration_ns")
    k = _lazy(kernels).select(*cols, *times, pl.lit("kernel").alias("event"))
    if graph_replays is not None:
        r = _lazy(graph_replays).select(*cols, *times, pl.lit(GRAPH_REPLAY).alias("event"))
        k = pl.concat([k, r.cast(k.collect_schema())])
    c = _lazy(memcpy).select(
        *cols,
        *times,
        pl.when(pl.col("kind") == "memset")
        .then(pl.lit("memset"))
        .otherwise(pl.lit("memcpy"))
        .alias("event"),
    )
    return pl.concat([k, c]).filter(pl.col("start_ns").is_not_null())


def attribute_events(
    kernels: Frame,
    memcpy: Frame,
    api_calls: Frame,
    markers: Frame,
    *,
    strip_ids: bool = False,
    graph_replays: Frame | None = None,
) -> pl.DataFrame:
    """Every GPU event with `path` (list of range names, outermost first, or null) and
    `method` (how it was tied). `strip_ids` drops `emit_nvtx`'s `, seq = N` / `, op_id = N`;
    `graph_replays`: whole-graph replays are events too (`GRAPH_REPLAY`)."""
    ev = _events(kernels, memcpy, graph_replays).collect().with_row_index("_row")
    mk = _lazy(markers).filter(pl.col("end_ns").is_not_null()).collect()
    if strip_ids:
        mk = mk.with_columns(pl.col("name").str.replace_all(PYTORCH_IDS, ""))
    gpu_sources = set(mk.filter(pl.col("category") == GPU_ANNOTATION)["source_id"].to_list())
    on_gpu = ev.filter(pl.col("source_id").is_in(list(gpu_sources)))
    lane = ["source_id", "device_id", "stream_id"]
    parts = []
    if on_gpu.height:
        rng = mk.filter(pl.col("category") == GPU_ANNOTATION)
        got = innermost(rng, on_gpu.select(*lane, pl.col("start_ns").alias("t_ns"), "_row"), lane)
        parts.append(got.with_columns(pl.lit(GPU_ANNOTATION).alias("method")))
    host = ev.filter(~pl.col("source_id").is_in(list(gpu_sources)))
    if host.height:
        j = launch_calls(host, api_calls).filter(pl.col("call_start_ns").is_not_null())
        tl = ["source_id", "process_id", "thread_id"]
        pts = j.select(
            "source_id",
            pl.coalesce("call_process_id", "process_id").alias("process_id"),
            "thread_id",
            pl.col("call_start_ns").alias("t_ns"),
            "_row",
        )
        rng = mk.filter(pl.col("category").is_in(HOST_RANGES) & pl.col("thread_id").is_not_null())
        got = innermost(rng, pts, tl)
        parts.append(got.with_columns(pl.lit("launch_projection").alias("method")))
    done = (
        pl.concat(parts)
        if parts
        else pl.DataFrame(
            schema={"_row": pl.UInt32, "path": pl.List(pl.String), "method": pl.String}
        )
    )
    out = ev.join(done, on="_row", how="left").with_columns(
        pl.col("method").fill_null(
            pl.when(pl.col("source_id").is_in(list(gpu_sources)))
            .then(pl.lit(GPU_ANNOTATION))
            .otherwise(pl.lit("launch_projection"))
        )
    )
    return out.drop("_row").sort("source_id", "start_ns")


def annotation_time(
    kernels: Frame,
    memcpy: Frame,
    api_calls: Frame,
    markers: Frame,
    *,
    depth: int | None = None,
    strip_ids: bool = False,
    names: Mapping[str, str] | None = None,
    graph_replays: Frame | None = None,
) -> pl.DataFrame:
    """Per source, device and annotation path (null: none): event_count, kernel_count,
    memcpy_count, memset_count, duration_ns (sum of the events' durations) and gpu_time_pct (of
    the device's event time); sorted by time. `method` says how events were tied. Paths join
    names with '/' (a name may hold '/' itself; `depth` counts ranges, not slashes).
    A whole-graph replay (`graph_replays`) is one event, in event_count and duration_ns but
    none of the three kinds."""
    ev = attribute_events(
        kernels, memcpy, api_calls, markers, strip_ids=strip_ids, graph_replays=graph_replays
    )
    if ev.height == 0:
        raise NotAnswerable("no GPU events (kernels, copies, memsets) with start times")
    for sid, n in ev.group_by("source_id").agg(pl.col("path").is_not_null().sum()).iter_rows():
        if n == 0:
            warnings.warn(
                f"{source_name(names, sid)}: "
                "no GPU event falls in an annotation (no gpu_user_annotation, NVTX or "
                "user_annotation ranges, or no API calls to project them through)",
                stacklevel=2,
            )
    path = pl.col("path")
    if depth is not None:
        if depth < 1:
            raise NotAnswerable(f"depth must be >= 1, got {depth}")
        path = path.list.head(depth)
    ev = ev.with_columns(path.list.join("/").alias("annotation"))
    # the duration the source states (Kineto `dur`), else end - start
    dur = pl.coalesce("duration_ns", pl.col("end_ns") - pl.col("start_ns")).fill_null(0)
    out = ev.group_by("source_id", "device_id", "method", "annotation").agg(
        pl.len().cast(pl.Int64).alias("event_count"),
        (pl.col("event") == "kernel").sum().cast(pl.Int64).alias("kernel_count"),
        (pl.col("event") == "memcpy").sum().cast(pl.Int64).alias("memcpy_count"),
        (pl.col("event") == "memset").sum().cast(pl.Int64).alias("memset_count"),
        dur.sum().alias("duration_ns"),
    )
    total = pl.col("duration_ns").sum().over("source_id", "device_id")
    return out.with_columns((100.0 * pl.col("duration_ns") / total).alias("gpu_time_pct")).sort(
        ["source_id", "device_id", "duration_ns", "annotation"],
        descending=[False, False, True, False],
        nulls_last=True,
    )
