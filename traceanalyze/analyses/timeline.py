"""Timeline data: what `traceanalyze timeline` draws, as frames.

`lanes` gives one lane per (device, stream, activity) with either the raw intervals or, when a lane
has more intervals than `max_bars` (about the pixels across the plot), per-bin busy fractions
(`binned = True`): drawing 100 000 bars into 1 500 pixels would hide most of them, so the
density is shown instead and the plot says so. No row is ever dropped silently: `interval_count`
is the number of intervals behind each lane. Lanes come in this order: host annotations (markers),
host operators, then per GPU its annotations, copies and kernels. A thread's annotations, when it
has at most `ANNOTATION_ROWS_MAX` in the window (a training loop's steps and phases), are one lane
per nesting depth (`nesting_depth`), so that each can be drawn and named without overlap; more are
one lane, binned like any other past `max_bars`.

`iteration_window` finds an iteration's `[start, end]` from the `iterations` table, or from
`ProfilerStep#N` markers when the table has no times; `iteration_spans` lists them all.

Windows (one rule for the figure and the Perfetto export): an interval belongs to the window
`[t0, t1]` when it overlaps it, `start < t1 and end > t0` (an instant, end null, when
`t0 <= start <= t1`); the figure clips it for drawing. Filtering on the start alone drops every
interval that began before the window, e.g. the `ProfilerStep#101` range that opens a PyTorch
trace 100 ms before its first kernel. The default window (`extent`) spans everything that is drawn
or exported: kernels, copies, host operators, markers and iterations. Telemetry in a window
(`window_samples`) keeps the last sample before it (sample-and-hold: that value is what the
sensor read at `t0`), so a zoom shorter than the sampling period still shows a value.

Whole-graph replays (`graph_replays`: nsys `--cuda-graph-trace=graph`, one row per replay and no
kernel rows) are drawn and exported as one slice per replay on their device and stream, among
the kernels (`with_replays`: named `CUDA graph <graph_id>`, `whole_graph` true), so that a
replay's GPU time shows where it ran.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..errors import NotAnswerable, UsageProblem
from .busy import binned_busy
from .summary import replays_as_kernels

Frame = pl.DataFrame | pl.LazyFrame


def _c(df: Frame) -> pl.DataFrame:
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def with_replays(kernels: Frame, graph_replays: Frame | None) -> pl.LazyFrame:
    """`kernels` and, after them, one kernel-shaped row per whole-graph replay (name
    `CUDA graph <graph_id>`, the kernel-only columns null, `kernel_id` null); a `whole_graph`
    column tells them apart."""
    k = kernels.lazy().with_columns(pl.lit(False).alias("whole_graph"))
    if graph_replays is None:
        return k
    rows = graph_replays.lazy().with_columns(pl.lit(True).alias("whole_graph"))
    return replays_as_kernels(k, rows, ids=False)


def _name(df: Frame, column: str = "name") -> pl.Expr:
    """The interval's name when the frame has one (hand-built frames may not)."""
    if column in df.lazy().collect_schema().names():
        return pl.col(column).cast(pl.String).alias("name")
    return pl.lit(None, dtype=pl.String).alias("name")


def iteration_window(iterations: Frame, markers: Frame | None, n: int) -> tuple[int, int]:
    """`(start_ns, end_ns)` of iteration `n` (first device that has it)."""
    it = _c(
        iterations.lazy()
        .filter(pl.col("iteration") == n)
        .select(
            "start_ns",
            pl.coalesce("end_ns", pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns"),
        )
        .drop_nulls()
    )
    if it.height:
        return int(it["start_ns"].min()), int(it["end_ns"].max())  # type: ignore[arg-type]
    if markers is not None:
        mk = _c(
            markers.lazy()
            .filter(pl.col("name") == f"ProfilerStep#{n}")
            .select("start_ns", "end_ns")
            .drop_nulls()
        )
        if mk.height:
            return int(mk["start_ns"].min()), int(mk["end_ns"].max())  # type: ignore[arg-type]
    have = _c(iterations.lazy().select(pl.col("iteration").drop_nulls().unique().sort()))
    numbers = [int(i) for i in have["iteration"].to_list()]
    if not numbers and markers is not None:
        steps = _c(
            markers.lazy()
            .select(pl.col("name").str.extract(r"^ProfilerStep#(\d+)$").cast(pl.Int64))
            .drop_nulls()
            .unique()
            .sort("name")
        )
        numbers = [int(i) for i in steps["name"].to_list()]
    known = f"iterations here: {_ranges(numbers)}" if numbers else "no iterations here"
    raise NotAnswerable(
        f"iteration {n} has no start/end times (iterations or ProfilerStep#{n}); {known}"
    )


def _ranges(numbers: list[int]) -> str:
    """Sorted integers as runs: [101, 102, 103, 105] -> '101-103, 105'."""
    runs: list[list[int]] = []
    for x in numbers:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def _intervals(
    kernels: Frame, memcpy: Frame | None, ops: Frame | None, markers: Frame | None
) -> dict[str, pl.LazyFrame]:
    """Every interval to draw, lazily, by activity: device, stream (a host thread for ops and
    markers), times, name, activity; those without both times left out."""
    frames = {
        "kernels": kernels.lazy().select(
            "device_id", "stream_id", "start_ns", "end_ns", _name(kernels), _act("kernels")
        )
    }
    if memcpy is not None:
        frames["copies"] = memcpy.lazy().select(
            "device_id", "stream_id", "start_ns", "end_ns", _name(memcpy, "kind"), _act("copies")
        )
    # Host rows: no device, the thread as the lane; an instant marker ends where it starts.
    # A GPU-side annotation (Kineto's gpu_user_annotation: a device and a stream, no thread)
    # keeps its device and stream, so that it gets its own lane beside that GPU's.
    for host, label in ((ops, "cpu ops"), (markers, "markers")):
        if host is not None:
            cols = host.lazy().collect_schema().names()
            gpu_side = label == "markers" and {"device_id", "stream_id"} <= set(cols)
            on_gpu = pl.col("thread_id").is_null() & pl.col("device_id").is_not_null()
            frames[label] = host.lazy().select(
                pl.when(on_gpu).then(pl.col("device_id")).alias("device_id")
                if gpu_side
                else pl.lit(None, dtype=pl.Int64).alias("device_id"),
                pl.when(on_gpu)
                .then(pl.col("stream_id"))
                .otherwise(pl.col("thread_id"))
                .alias("stream_id")
                if gpu_side
                else pl.col("thread_id").alias("stream_id"),
                "start_ns",
                pl.coalesce("end_ns", "start_ns").alias("end_ns"),
                _name(host),
                _act(label),
            )
    cast = {"device_id": pl.Int64, "stream_id": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}
    return {k: f.cast(cast).drop_nulls(["start_ns", "end_ns"]) for k, f in frames.items()}  # type: ignore[arg-type]


def _act(label: str) -> pl.Expr:
    return pl.lit(label).alias("activity")


_KEYS = ["device_id", "stream_id", "activity"]


def _windowed(
    kernels: Frame,
    memcpy: Frame | None,
    ops: Frame | None,
    markers: Frame | None,
    start_ns: int | None,
    end_ns: int | None,
) -> tuple[dict[str, pl.LazyFrame], int, int]:
    """The intervals per activity that the window shows (`lanes`), and the window."""
    by_act = _intervals(kernels, memcpy, ops, markers)
    t0, t1 = _span(by_act, start_ns, end_ns)
    s, e = pl.col("start_ns"), pl.col("end_ns")
    inside = ((e > t0) & (s < t1)) | ((e == s) & s.is_between(t0, t1))
    return {k: f.filter(inside) for k, f in by_act.items()}, t0, t1


def check_window(
    kernels: Frame,
    memcpy: Frame | None,
    ops: Frame | None = None,
    markers: Frame | None = None,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> None:
    """What `lanes` would refuse for its window, found without making them (they are made when
    a figure reads them): nothing in the window (NotAnswerable). `check_max_bars` is the
    other."""
    by_act, _, _ = _windowed(kernels, memcpy, ops, markers, start_ns, end_ns)
    if pl.concat([f.select("start_ns").head(1) for f in by_act.values()]).collect().height == 0:
        raise NotAnswerable("no kernels, copies, CPU ops or markers in the window")


def check_max_bars(max_bars: int) -> None:
    """`max_bars` is at least 1 (checked when the timeline is asked for, before the lanes are
    made: they are made when the figure reads them)."""
    if max_bars < 1:
        raise UsageProblem(f"max_bars={max_bars}: must be at least 1")


def lanes(
    kernels: Frame,
    memcpy: Frame | None,
    *,
    ops: Frame | None = None,
    markers: Frame | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    max_bars: int = 1500,
) -> pl.DataFrame:
    """Lanes of intervals overlapping `[start_ns, end_ns]` (default: everything), clipped to it.

    Columns: device_id, stream_id, activity, lane, start_ns, end_ns, busy_ratio (1 for a raw
    interval, the bin's busy fraction when binned), binned, interval_count (per lane), name (the
    kernel, operator or marker name, a copy's kind; in a binned kernel lane the kernel with the
    most time in the bin; null in other binned lanes or when not given).

    `ops` (host framework operators) adds one "cpu ops" lane per thread, with the thread id in
    `stream_id` and a null `device_id`: a CPU-only run (no kernels) still has a timeline, and on a
    GPU run the host lanes show launch-bound stretches. Nested operators overlap in their lane.
    `markers` (NVTX ranges, PyTorch annotations) add one "markers" lane per thread the same way;
    an instant marker (no end) is a zero-length interval, `start_ns == end_ns`.

    Lazy frames are read lane by lane: the intervals of a lane that is drawn raw (at most
    `max_bars`), only the times of one that is binned, so memory follows the largest lane, not
    the trace.
    """
    check_max_bars(max_bars)
    by_act, t0, t1 = _windowed(kernels, memcpy, ops, markers, start_ns, end_ns)
    s, e = pl.col("start_ns"), pl.col("end_ns")
    clip = [s.clip(t0, t1), e.clip(t0, t1)]
    parts = list(by_act.values())
    counts = pl.concat([f.group_by(_KEYS).agg(pl.len().alias("n")) for f in parts]).collect()
    if counts.height == 0:
        raise NotAnswerable("no kernels, copies, CPU ops or markers in the window")
    counts = counts.sort([_lane_order(), *_KEYS], nulls_last=True)
    raw = _raw_lanes(parts, counts.filter(pl.col("n") <= max_bars), clip)
    out = []
    for dev, stream, act, n in counts.rows():
        same = pl.col("device_id").eq_missing(dev) & pl.col("stream_id").eq_missing(stream)
        if n <= max_bars:
            sub = raw.filter(same & (pl.col("activity") == act))
        else:
            # each bin's main kernel, or annotation (issue 32: NVTX lanes were one colour)
            named = [pl.col("name")] if act in ("kernels", "markers") else []
            sub = by_act[act].filter(same).select(*clip, *named).collect()
        out.append(_lane(sub, (dev, stream, act), t0, t1, max_bars, n))
    return pl.concat(out)


def _lane_order() -> pl.Expr:
    """Annotations on top (what the program says it is doing), then host operators, then the
    GPU's annotations, copies and kernels: a step's phases sit above the work they contain, and
    GPU-side annotations just above their GPU's lanes."""
    act, on_gpu = pl.col("activity"), pl.col("device_id").is_not_null()
    return (
        pl.when((act == "markers") & ~on_gpu)
        .then(0)
        .when(act == "cpu ops")
        .then(1)
        .when(act == "markers")
        .then(2)
        .otherwise(3)
    )


def _span(
    by_act: dict[str, pl.LazyFrame], start_ns: int | None, end_ns: int | None
) -> tuple[int, int]:
    """The window: `[start_ns, end_ns]`, each by default the intervals' first start, last end."""
    ends = pl.concat(
        [f.select(pl.col("start_ns").min(), pl.col("end_ns").max()) for f in by_act.values()]
    )
    a, b = ends.select(pl.col("start_ns").min(), pl.col("end_ns").max()).collect().row(0)
    if a is None:
        raise NotAnswerable("no kernels, copies, CPU ops or markers with start and end times")
    t0 = int(a) if start_ns is None else start_ns
    t1 = int(b) if end_ns is None else end_ns
    if t1 <= t0:
        raise NotAnswerable(f"empty time window [{t0}, {t1}] ns")
    return t0, t1


def _raw_lanes(parts: list[pl.LazyFrame], small: pl.DataFrame, clip: list[pl.Expr]) -> pl.DataFrame:
    """The clipped intervals of the lanes `small` (`_KEYS`: those drawn as bars), by lane."""
    if small.height == 0:
        return pl.DataFrame()
    keys = small.lazy().select(_KEYS)
    joined = [f.join(keys, on=_KEYS, nulls_equal=True, maintain_order="left") for f in parts]
    return (
        pl.concat(joined)
        .with_columns(clip)
        .collect()
        .sort(_KEYS, nulls_last=True, maintain_order=True)
    )


# A thread's annotations are drawn one row per nesting depth, each bar named, when there are at
# most this many in the window (a training loop's steps and phases); more are one lane (binned
# past `max_bars`), as names could not be read anyway.
ANNOTATION_ROWS_MAX = 400
ANNOTATION_DEPTHS = 4  # rows per thread; deeper ranges share the last row


def nesting_depth(start_ns: list[int], end_ns: list[int]) -> list[int]:
    """Each interval's nesting depth among `start_ns`/`end_ns` (0: enclosed by none), as a
    stack of open ranges: how many ranges enclose it. Intervals at one depth never overlap, even
    when ranges overlap without nesting (NVTX start/end ranges may): a range still open keeps
    its depth taken until it and those above it have ended."""
    order = sorted(range(len(start_ns)), key=lambda i: (start_ns[i], -end_ns[i]))
    depth = [0] * len(start_ns)
    stack: list[int] = []  # the end of each open interval, outermost first
    for i in order:
        while stack and stack[-1] <= start_ns[i]:
            stack.pop()
        depth[i] = len(stack)
        stack.append(end_ns[i])
    return depth


def _lane(
    sub: pl.DataFrame, key: tuple[object, ...], t0: int, t1: int, max_bars: int, n: int
) -> pl.DataFrame:
    """One lane's rows: its `n` intervals (`sub`), or `max_bars` bins of busy fraction when it
    has more (`sub`: their times only)."""
    dev, stream, act = key
    if act == "cpu ops":
        lane = f"CPU thread {stream} ops"
    elif act == "markers" and dev is not None:
        lane = f"GPU {dev} s{stream} annotations"
    elif act == "markers":
        lane = "annotations (no thread)" if stream is None else f"CPU thread {stream} annotations"
    else:
        lane = f"GPU {dev} s{stream} {act}"
    if act == "markers" and n <= min(max_bars, ANNOTATION_ROWS_MAX):
        return _depth_rows(sub, lane)
    if n <= max_bars:
        return _raw_rows(sub, pl.lit(lane))
    frac = binned_busy(sub["start_ns"].to_numpy(), sub["end_ns"].to_numpy(), t0, t1, max_bars)
    edges = np.linspace(t0, t1, max_bars + 1).astype(np.int64)
    return pl.DataFrame(
        {
            "device_id": pl.Series([dev] * max_bars, dtype=pl.Int64),
            "stream_id": pl.Series([stream] * max_bars, dtype=pl.Int64),
            "activity": [act] * max_bars,
            "lane": [lane] * max_bars,
            "start_ns": edges[:-1],
            "end_ns": edges[1:],
            "busy_ratio": frac,
            "binned": [True] * max_bars,
            "interval_count": pl.Series([n] * max_bars, dtype=pl.Int64),
            "name": pl.Series(_dominant(sub, edges), dtype=pl.String),
        }
    )


def _dominant(sub: pl.DataFrame, edges: np.ndarray) -> list[str | None]:
    """Per bin of a binned lane, the name with the most time among the intervals centred in
    it (issue 32: binned kernel lanes were one colour); none without names."""
    bins = edges.size - 1
    out: list[str | None] = [None] * bins
    if "name" not in sub.columns or sub.height == 0:
        return out
    a, b = sub["start_ns"].to_numpy(), sub["end_ns"].to_numpy()
    at = np.clip(np.searchsorted(edges, (a + b) // 2, side="right") - 1, 0, bins - 1)
    per = (
        pl.DataFrame({"bin": at, "name": sub["name"], "d": b - a})
        .group_by("bin", "name")
        .agg(pl.col("d").sum())
        .sort("d", "name", descending=[True, False], nulls_last=True)
        .unique("bin", keep="first")
    )
    for i, name in per.select("bin", "name").iter_rows():
        out[int(i)] = name
    return out


def _raw_rows(sub: pl.DataFrame, lane: pl.Expr) -> pl.DataFrame:
    """The intervals as drawn one by one, each lane's count per lane."""
    return sub.select(
        "device_id",
        "stream_id",
        "activity",
        lane.alias("lane"),
        "start_ns",
        "end_ns",
        pl.lit(1.0).alias("busy_ratio"),
        pl.lit(False).alias("binned"),
        pl.len().over(lane).cast(pl.Int64).alias("interval_count"),
        "name",
    ).sort("lane", "start_ns", maintain_order=True)


def _depth_rows(sub: pl.DataFrame, lane: str) -> pl.DataFrame:
    """A thread's annotations, one lane per nesting depth (`lane`, then `lane, depth d`)."""
    depth = nesting_depth(sub["start_ns"].to_list(), sub["end_ns"].to_list())
    d = pl.Series("_depth", depth, dtype=pl.Int64).clip(upper_bound=ANNOTATION_DEPTHS - 1)
    deeper = pl.lit(f"{lane}, depth ") + pl.col("_depth").cast(pl.String)
    name = pl.when(pl.col("_depth") == 0).then(pl.lit(lane)).otherwise(deeper)
    return _raw_rows(sub.with_columns(d).sort("_depth", maintain_order=True), name)


def _bounds(df: Frame, start: pl.Expr, end: pl.Expr) -> pl.LazyFrame:
    return df.lazy().select(start.min().alias("a"), end.max().alias("b"))


def extent(
    kernels: Frame | None = None,
    memcpy: Frame | None = None,
    ops: Frame | None = None,
    markers: Frame | None = None,
    iterations: Frame | None = None,
    graph_replays: Frame | None = None,
) -> tuple[int, int]:
    """`(first start, last end)` over every table given: the default timeline window.

    Iterations count with `end_ns`, or `start_ns + duration_ns`; markers without an end count by
    their start. NotAnswerable when nothing has times.
    """
    parts: list[pl.LazyFrame] = []
    for df in (kernels, memcpy, graph_replays, ops):
        if df is not None:
            parts.append(_bounds(df, pl.col("start_ns"), pl.col("end_ns")))
    if markers is not None:
        parts.append(
            _bounds(markers, pl.col("start_ns"), pl.coalesce("end_ns", pl.col("start_ns")))
        )
    if iterations is not None:
        parts.append(
            _bounds(
                iterations,
                pl.col("start_ns"),
                pl.coalesce("end_ns", pl.col("start_ns") + pl.col("duration_ns")),
            )
        )
    if not parts:
        raise NotAnswerable("nothing to draw: no kernels, copies, operators, markers or iterations")
    ext = pl.concat(parts).collect()
    a, b = ext["a"].min(), ext["b"].max()
    if a is None or b is None:
        raise NotAnswerable(
            "no kernels, copies, operators, markers or iterations with start and end times"
        )
    return int(a), int(b)  # type: ignore[arg-type]


def overlapping(df: Frame, t0: int, t1: int) -> pl.LazyFrame:
    """Rows of an interval table that overlap `[t0, t1]` (instants: start inside it)."""
    s, e = pl.col("start_ns"), pl.col("end_ns")
    ranged = e.is_not_null() & (s < t1) & (e > t0)
    instant = e.is_null() & s.is_between(t0, t1)
    return df.lazy().filter(ranged | instant)


def window_samples(
    samples: Frame,
    t0: int,
    t1: int,
    *,
    after: bool = True,
    clip: bool = False,
    metrics: tuple[str, ...] = ("sm_clock_mhz", "power_w", "temperature_c"),
) -> pl.DataFrame:
    """Telemetry samples for the window `[t0, t1]`, per (source, device) and metric.

    The samples inside the window, plus the last sample before it (its value holds at `t0`) and,
    with `after`, the first one after it (where the last held value ends). `clip` moves those two
    onto `t0` / `t1` (for formats that have no notion of a view window, like a Chrome trace).
    Kept per metric, so a row whose metric is null does not hide the value held before.
    """
    lf = samples.lazy()
    keys = ["source_id", "device_id"]
    cols = lf.collect_schema().names()
    present = [m for m in metrics if m in cols]
    ts = pl.col("timestamp_ns")
    edge_ts: list[pl.LazyFrame] = []
    for m in present:
        has = lf.filter(pl.col(m).is_not_null())
        # `<=`: a sample exactly at t0 is the value at t0, and no earlier one is needed.
        edge_ts.append(has.filter(ts <= t0).group_by(keys).agg(ts.max()))
        if after:
            edge_ts.append(has.filter(ts >= t1).group_by(keys).agg(ts.min()))
    inside = lf.filter(ts.is_between(t0, t1))
    parts = [inside]
    if edge_ts:
        edges = pl.concat(edge_ts).unique()
        parts.append(lf.join(edges, on=[*keys, "timestamp_ns"], how="semi", nulls_equal=True))
    out = pl.concat(parts).unique(maintain_order=True).sort([*keys, "timestamp_ns"])
    if clip:
        out = out.with_columns(ts.clip(t0, t1))
    return out.collect()


def iteration_spans(iterations: Frame, markers: Frame | None = None) -> pl.DataFrame:
    """`iteration, start_ns, end_ns` of every iteration with times (one row per number).

    From the `iterations` table (end = `end_ns` or start + duration), else from `ProfilerStep#N`
    markers. Devices are merged: the span of number N is the earliest start to the latest end.
    """
    it = _c(
        iterations.lazy()
        .select(
            "iteration",
            "start_ns",
            pl.coalesce("end_ns", pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns"),
        )
        .drop_nulls()
    )
    if it.height == 0 and markers is not None:
        it = _c(
            markers.lazy()
            .filter(pl.col("name").str.contains(r"^ProfilerStep#\d+$"))
            .select(
                pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64).alias("iteration"),
                "start_ns",
                "end_ns",
            )
            .drop_nulls()
        )
    return (
        it.group_by("iteration")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort("iteration")
    )
