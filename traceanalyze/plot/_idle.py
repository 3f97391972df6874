"""Idle time per device, one horizontal bar split by cause (the `idle` analysis's device rows).

Bars are in ms and labelled `<file stem> · GPU <n>`; busy time is drawn first, in grey, so each
bar spans the window and the causes read as shares of it.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from ._variability import gpu_labels

SEGMENTS = (
    ("busy_ns", "busy (kernels)", "#bdbdbd"),
    ("host_wait_ns", "waiting for host", "#d62728"),
    ("launch_gap_ns", "launch gaps", "#ff7f0e"),
    ("sync_ns", "synchronization", "#9467bd"),
    ("copy_ns", "copies", "#1f77b4"),
    ("unknown_ns", "unknown", "#7f7f7f"),
)


def idle_figure(df: pl.DataFrame) -> Figure:
    """Stacked bars of busy time and idle causes per source and device (stream rows ignored)."""
    dev = df.filter(pl.col("stream_id").is_null())
    labels = gpu_labels(dev, by_rank=True)
    fig = Figure(figsize=(9, 1.2 + 0.5 * max(1, dev.height)), layout="constrained")
    ax = fig.add_subplot()
    left = [0.0] * dev.height
    for col, label, color in SEGMENTS:
        ms = [v / 1e6 for v in dev[col].to_list()]
        if not any(ms):
            continue
        ax.barh(labels, ms, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, ms, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("time in window (ms)")
    ax.set_title("GPU idle time by cause")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig
