"""Timeline data: what `traceanalyze timeline` draws, as frames.

`lanes` gives one lane per (device, stream, activity) with either the raw intervals or, when a lane
has more intervals than `max_bars` (about the pixels across the plot), per-bin busy fractions
(`binned = True`): drawing 100 000 bars into 1 500 pixels would hide most of them, so the
density is shown instead and the plot says so. No row is ever dropped silently: `interval_count`
is the number of intervals behind each lane.

`iteration_window` finds an iteration's `[start, end]` from the `iterations` table, or from
`ProfilerStep#N` markers when the table has no times.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..errors import NotAnswerable
from .busy import binned_busy

Frame = pl.DataFrame | pl.LazyFrame


def _c(df: Frame) -> pl.DataFrame:
    return df.collect() if isinstance(df, pl.LazyFrame) else df


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
    raise NotAnswerable(f"iteration {n} has no start/end times (iterations or ProfilerStep#{n})")


def lanes(
    kernels: Frame,
    memcpy: Frame | None,
    *,
    ops: Frame | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    max_bars: int = 1500,
) -> pl.DataFrame:
    """Lanes of intervals in `[start_ns, end_ns]` (default: everything).

    Columns: device_id, stream_id, activity, lane, start_ns, end_ns, busy_ratio (1 for a raw
    interval, the bin's busy fraction when binned), binned, interval_count (per lane).

    `ops` (host framework operators) adds one "cpu ops" lane per thread, with the thread id in
    `stream_id` and a null `device_id`: a CPU-only run (no kernels) still has a timeline, and on a
    GPU run the host lanes show launch-bound stretches. Nested operators overlap in their lane.
    """
    frames = [
        _c(kernels.lazy().select("device_id", "stream_id", "start_ns", "end_ns")).with_columns(
            pl.lit("kernels").alias("activity")
        )
    ]
    if memcpy is not None:
        frames.append(
            _c(memcpy.lazy().select("device_id", "stream_id", "start_ns", "end_ns")).with_columns(
                pl.lit("copies").alias("activity")
            )
        )
    if ops is not None:
        frames.append(
            _c(
                ops.lazy().select(
                    pl.lit(None, dtype=pl.Int64).alias("device_id"),
                    pl.col("thread_id").alias("stream_id"),
                    "start_ns",
                    "end_ns",
                )
            ).with_columns(pl.lit("cpu ops").alias("activity"))
        )
    rows = pl.concat(frames).drop_nulls(["start_ns", "end_ns"])
    if rows.height == 0:
        raise NotAnswerable("no kernels, copies or CPU ops with start and end times")
    t0 = int(rows["start_ns"].min()) if start_ns is None else start_ns  # type: ignore[arg-type]
    t1 = int(rows["end_ns"].max()) if end_ns is None else end_ns  # type: ignore[arg-type]
    if t1 <= t0:
        raise NotAnswerable(f"empty time window [{t0}, {t1}] ns")
    rows = rows.filter((pl.col("end_ns") > t0) & (pl.col("start_ns") < t1)).with_columns(
        pl.col("start_ns").clip(t0, t1), pl.col("end_ns").clip(t0, t1)
    )
    if rows.height == 0:
        raise NotAnswerable("no kernels, copies or CPU ops in the window")
    keys = ["device_id", "stream_id", "activity"]
    out: list[pl.DataFrame] = []
    for key, sub in rows.sort(keys, nulls_last=True).group_by(keys, maintain_order=True):
        dev, stream, act = key
        lane = f"CPU thread {stream} ops" if act == "cpu ops" else f"GPU {dev} s{stream} {act}"
        n = sub.height
        if n <= max_bars:
            out.append(
                sub.select(
                    "device_id",
                    "stream_id",
                    "activity",
                    pl.lit(lane).alias("lane"),
                    "start_ns",
                    "end_ns",
                    pl.lit(1.0).alias("busy_ratio"),
                    pl.lit(False).alias("binned"),
                    pl.lit(n, dtype=pl.Int64).alias("interval_count"),
                )
            )
            continue
        frac = binned_busy(sub["start_ns"].to_numpy(), sub["end_ns"].to_numpy(), t0, t1, max_bars)
        edges = np.linspace(t0, t1, max_bars + 1).astype(np.int64)
        out.append(
            pl.DataFrame(
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
                }
            )
        )
    return pl.concat(out)
