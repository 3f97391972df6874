"""The critical path on the timeline figure: a red bar along the bottom of the lane of each
event on the path (kernels on their device and stream, copies on their copy lane, operators and
runtime calls on their thread's "cpu ops" lane, annotations and NVTX ranges on its "markers"
lane). Events whose lane is not drawn (a thread without operators) are left out."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

COLOR = "red"


def _activity() -> pl.Expr:
    k = pl.col("kind")
    return (
        pl.when(k == "kernel")
        .then(pl.lit("kernels"))
        .when(k == "memcpy")
        .then(pl.lit("copies"))
        .when(k.is_in(["annotation", "nvtx"]))
        .then(pl.lit("markers"))
        .otherwise(pl.lit("cpu ops"))
    )


def draw_path(
    ax: Any,
    lanes: pl.DataFrame,
    lane_names: list[str],
    events: pl.DataFrame,
    t0_ns: int,
    min_w_ms: float,
) -> int:
    """Draw the marks; returns how many events were marked."""
    row = {name: i for i, name in enumerate(lane_names)}
    # A thread's annotations may take several lanes (one per nesting depth): the path marks
    # its first, so that an event is marked once.
    keys = lanes.select("device_id", "stream_id", "activity", "lane").unique(
        ["device_id", "stream_id", "activity"], keep="first", maintain_order=True
    )
    gpu = pl.col("kind").is_in(["kernel", "memcpy"])
    ev = events.filter(pl.col("kind").is_not_null()).select(
        pl.when(gpu).then(pl.col("device_id")).alias("device_id"),
        pl.when(gpu).then(pl.col("stream_id")).otherwise(pl.col("thread_id")).alias("stream_id"),
        _activity().alias("activity"),
        "start_ns",
        "end_ns",
    )
    j = ev.join(keys, on=["device_id", "stream_id", "activity"], nulls_equal=True)
    if j.height == 0:
        return 0
    y = np.array([row[n] for n in j["lane"].to_list()], dtype=np.float64)
    x = (j["start_ns"].to_numpy() - t0_ns) / 1e6
    w = np.maximum((j["end_ns"].to_numpy() - j["start_ns"].to_numpy()) / 1e6, min_w_ms)
    for yi in np.unique(y):
        sel = y == yi
        bars = list(zip(x[sel], w[sel], strict=True))
        ax.broken_barh(bars, (yi + 0.28, 0.14), facecolors=COLOR, zorder=5)
    ax.plot([], [], color=COLOR, lw=4, label="critical path")
    return int(j.height)
