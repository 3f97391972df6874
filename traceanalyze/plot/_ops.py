"""Operators: horizontal bars of the GPU time each operator launched (its own kernels) beside its
host self time, top operators by GPU time. Input: `analyses.ops.op_stats` (one source)."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from ..analyses.naming import abbreviate


def ops_figure(stats: pl.DataFrame, top: int = 15, title: str = "Operators") -> Figure:
    df = stats.sort("kernel_self_ns", "self_ns", descending=True).head(top).reverse()
    # Long names cut in the middle with '…' (both ends tell operators apart), never silently.
    labels = [abbreviate(n if n is not None else "(no operator)", 48) for n in df["op"].to_list()]
    y = list(range(df.height))
    fig = Figure(figsize=(8, 0.35 * max(df.height, 4) + 1.2))
    ax = fig.add_subplot()
    h = 0.4
    ax.barh(
        [v + h / 2 for v in y],
        (df["kernel_self_ns"] / 1e6).to_list(),
        h,
        label="GPU (kernels launched)",
    )
    ax.barh([v - h / 2 for v in y], (df["self_ns"] / 1e6).to_list(), h, label="host self time")
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlabel("time (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
