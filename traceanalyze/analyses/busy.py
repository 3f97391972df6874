"""Busy time: the share of a window in which at least one kernel (or copy) was running.

Overlapping intervals are merged first (a union, so two concurrent kernels count once):
sort by start, carry the cumulative maximum of `end_ns`, and start a new merged segment wherever a
start lies after every earlier end. Columnar (polars `cum_max` over groups), no per-row Python.

Works on any source that has `kernels` / `memcpy` rows with start and end times (nvprof, nsys,
Kineto); rows without times are not counted (and a warning says how many). Whole-graph replays
(`graph_replays`: nsys `--cuda-graph-trace=graph` writes one row per replay and no kernel rows)
are kernel work: they count in the `kernels` activity, so a graph replay is busy time in either
nsys graph mode.
"""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl

from ..errors import NotAnswerable

Frame = pl.DataFrame | pl.LazyFrame


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def union_intervals(intervals: Frame, keys: list[str]) -> pl.LazyFrame:
    """Merge overlapping `[start_ns, end_ns)` intervals per `keys`; rows `keys, start_ns, end_ns`.

    Touching intervals (next start == previous end) merge too.
    """
    lf = (
        _lazy(intervals)
        .select(*keys, "start_ns", "end_ns")
        .filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .sort([*keys, "start_ns"])
    )
    prev_end = pl.col("end_ns").cum_max().shift(1).over(keys) if keys else None
    if prev_end is None:
        prev_end = pl.col("end_ns").cum_max().shift(1)
    new = (pl.col("start_ns") > prev_end).fill_null(True)
    seg = new.cast(pl.Int64).cum_sum().over(keys) if keys else new.cast(pl.Int64).cum_sum()
    return (
        lf.with_columns(seg.alias("_seg"))
        .group_by(*keys, "_seg")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_seg")
        .sort([*keys, "start_ns"])
    )


def busy_time(
    kernels: Frame,
    memcpy: Frame | None = None,
    *,
    window: tuple[int, int] | None = None,
    graph_replays: Frame | None = None,
) -> pl.DataFrame:
    """Per source, device and activity (`kernels`, `copies`): busy ns and share of the window.
    `graph_replays` (whole-graph rows) count as `kernels`.

    The window is `[first start, last end]` over the source's kernels and copies (all devices) by
    default, or `window=(start_ns, end_ns)` in the source's clock. Intervals are clipped to it.
    Columns: source_id, device_id, activity, interval_count, window_start_ns, window_end_ns,
    window_ns, busy_ns, busy_pct.
    """
    rows = _activity_rows(kernels, memcpy, graph_replays)
    untimed = rows.filter(pl.col("start_ns").is_null() | pl.col("end_ns").is_null()).height
    if untimed:
        warnings.warn(
            f"{untimed} kernel/copy rows without start or end time are not counted", stacklevel=2
        )
    rows = rows.drop_nulls(["start_ns", "end_ns"])
    if rows.height == 0:
        raise NotAnswerable("no kernels or copies with start and end times")
    return _busy_table(rows, _windows(rows, window))


def _activity_rows(
    kernels: Frame, memcpy: Frame | None, graph_replays: Frame | None = None
) -> pl.DataFrame:
    """Kernel (and copy) rows as source_id, device_id, start_ns, end_ns, activity; whole-graph
    replays are `kernels`."""
    work = [kernels] if graph_replays is None else [kernels, graph_replays]
    frames = [
        _lazy(f).select(
            "source_id", "device_id", "start_ns", "end_ns", pl.lit("kernels").alias("activity")
        )
        for f in work
    ]
    if memcpy is not None:
        frames.append(
            _lazy(memcpy).select(
                "source_id", "device_id", "start_ns", "end_ns", pl.lit("copies").alias("activity")
            )
        )
    return pl.concat(frames).collect()


def _busy_table(rows: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """Clip timed `rows` to the per-source windows `win`, merge overlaps and sum busy time."""
    clipped = rows.join(win, on="source_id").with_columns(
        pl.max_horizontal("start_ns", "window_start_ns").alias("start_ns"),
        pl.min_horizontal("end_ns", "window_end_ns").alias("end_ns"),
    )
    keys = ["source_id", "device_id", "activity"]
    counts = (
        clipped.filter(pl.col("end_ns") > pl.col("start_ns"))
        .group_by(keys)
        .agg(pl.len().cast(pl.Int64).alias("interval_count"))
    )
    merged = union_intervals(clipped, keys).collect()
    busy = merged.group_by(keys).agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("busy_ns"))
    out = (
        rows.select(keys)
        .unique()
        .join(win, on="source_id")
        .join(counts, on=keys, how="left", nulls_equal=True)
        .join(busy, on=keys, how="left", nulls_equal=True)
        .with_columns(
            pl.col("interval_count").fill_null(0),
            pl.col("busy_ns").fill_null(0),
            (pl.col("window_end_ns") - pl.col("window_start_ns")).alias("window_ns"),
        )
        .with_columns((100.0 * pl.col("busy_ns") / pl.col("window_ns")).alias("busy_pct"))
    )
    return out.select(
        "source_id",
        "device_id",
        "activity",
        "interval_count",
        "window_start_ns",
        "window_end_ns",
        "window_ns",
        "busy_ns",
        "busy_pct",
    ).sort(["source_id", "device_id", "activity"], nulls_last=True)


def _windows(rows: pl.DataFrame, window: tuple[int, int] | None) -> pl.DataFrame:
    """Per source_id: window_start_ns and window_end_ns (its first start and last end, or
    `window`); NotAnswerable for an empty `window`."""
    if window is None:
        return rows.group_by("source_id").agg(
            pl.col("start_ns").min().alias("window_start_ns"),
            pl.col("end_ns").max().alias("window_end_ns"),
        )
    if window[1] <= window[0]:
        raise NotAnswerable(f"empty window {window}")
    return (
        rows.select("source_id")
        .unique()
        .with_columns(
            pl.lit(window[0], dtype=pl.Int64).alias("window_start_ns"),
            pl.lit(window[1], dtype=pl.Int64).alias("window_end_ns"),
        )
    )


def binned_busy(starts: np.ndarray, ends: np.ndarray, t0: int, t1: int, nbins: int) -> np.ndarray:
    """Busy fraction (0–1) of each of `nbins` equal bins of `[t0, t1)` for one lane's intervals.

    Overlaps are merged first, so the fraction never exceeds 1. Vectorized: the cumulative busy
    time C(t) is piecewise linear over the merged segments, and a bin's busy time is C(b) - C(a).
    """
    if nbins <= 0 or t1 <= t0:
        raise ValueError("need nbins > 0 and t1 > t0")
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    keep = e > s
    s, e = s[keep], e[keep]
    edges = np.linspace(float(t0), float(t1), nbins + 1)
    if s.size == 0:
        return np.zeros(nbins)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    seg = np.cumsum(new) - 1
    ms = s[new]
    me = np.zeros(ms.size)
    np.maximum.at(me, seg, e)
    prefix = np.concatenate([[0.0], np.cumsum(me - ms)])

    def cum(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(ms, t, side="right") - 1
        ok = i >= 0
        out = np.zeros(t.size)
        ii = i[ok]
        out[ok] = prefix[ii] + np.clip(t[ok] - ms[ii], 0.0, me[ii] - ms[ii])
        return out

    c = cum(edges)
    return np.diff(c) / np.diff(edges)
