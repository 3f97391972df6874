"""Operators: horizontal bars of the GPU time of the kernels each operator launched (inside it,
at any depth) beside its host inclusive time, the top operators by that GPU time, then host
time. Input: `analyses.ops.op_stats` (one source).

Issue 32: the figure ranked by one quantity and drew another (host self time, GPU self time),
so rows were empty and a legend entry had no bars. Now it ranks by what it draws, leaves out
operators with neither time, and a legend entry is there only for a series with bars."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from ..analyses.naming import abbreviate_distinct

SERIES = (
    ("kernel_inclusive_ns", "GPU: kernels launched inside"),
    ("inclusive_ns", "host: inclusive time"),
)


def ops_figure(stats: pl.DataFrame, top: int = 15, title: str = "Operators") -> Figure:
    cols = [c for c, _ in SERIES]
    df = (
        stats.filter(pl.any_horizontal(pl.col(c).fill_null(0) > 0 for c in cols))
        .sort(cols, descending=True, nulls_last=True)
        .head(top)
        .reverse()
    )
    # Long names cut so that different ones stay different, never silently.
    names = [n if n is not None else "(no operator)" for n in df["op"].to_list()]
    labels = abbreviate_distinct(names, 48)
    y = list(range(df.height))
    fig = Figure(figsize=(8, 0.35 * max(df.height, 4) + 1.2))
    ax = fig.add_subplot()
    h = 0.4
    drawn = [(c, lb) for c, lb in SERIES if (df[c].fill_null(0) > 0).any()]
    for i, (col, label) in enumerate(drawn):
        off = h / 2 if i == 0 else -h / 2
        ms = (df[col].fill_null(0) / 1e6).to_list()
        ax.barh([v + off for v in y], ms, h, label=label)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlabel("time (ms)")
    ax.set_title(f"{title}, top {df.height} by GPU time launched")
    if drawn:
        ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
