"""Scaling: throughput against accelerators on log axes, per group, with each group's ideal
(linear from its smallest count) dashed and the efficiency written at each point past the
smallest (issue 32: the smallest count's "100 %", true by definition, overprinted another
group's "95 %" and labelled one-point families). Legend entries are wrapped, never cut."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import polars as pl
from matplotlib.figure import Figure


def _label(row: dict[str, object], by: Sequence[str]) -> str:
    parts = [str(row[k]) for k in by if row.get(k) is not None]
    return textwrap.fill(" · ".join(parts), 60) or "all runs"


def scaling_figure(table: pl.DataFrame, by: Sequence[str], title: str | None = None) -> Figure:
    fig = Figure(figsize=(8.0, 5.5))
    ax = fig.add_subplot(1, 1, 1)
    groups = table.partition_by(list(by), maintain_order=True) if by else [table]
    for i, g in enumerate(groups):
        g = g.sort("accelerators")
        color = f"C{i % 10}"
        n = g["accelerators"].to_list()
        tp = g["throughput_img_per_s"].to_list()
        ax.plot(n, tp, "o-", color=color, label=_label(g.row(0, named=True), by))
        if len(n) > 1:
            ax.plot(n, g["ideal_img_per_s"].to_list(), "--", color=color, alpha=0.5, lw=1)
        points = zip(n[1:], tp[1:], g["efficiency"].to_list()[1:], strict=True)
        for x, y, e in points:  # the smallest count is the ideal's base: 100 % by definition
            ax.annotate(
                f"{100 * e:.0f} %",
                (x, y),
                textcoords="offset points",
                xytext=(4, -11),
                fontsize=7,
                color=color,
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("accelerators")
    ax.set_ylabel("throughput (images/s)")
    ax.set_title(title or "Throughput against accelerators (dashed: linear from the smallest)")
    ax.grid(True, which="both", alpha=0.3)
    if groups:
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig
