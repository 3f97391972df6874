"""Scaling: throughput against accelerators on log axes, per group, with each group's ideal
(linear from its smallest count) dashed and the efficiency written at each point past the
smallest (issue 32: the smallest count's "100 %", true by definition, overprinted another
group's "95 %" and labelled one-point families). Legend entries are wrapped, never cut. A point
whose throughput is derived (samples over time, `throughput_basis`) is hollow, a logged one
filled: they are not the same measurement."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import polars as pl
from matplotlib.figure import Figure


def _label(row: dict[str, object], by: Sequence[str]) -> str:
    parts = [str(row[k]) for k in by if row.get(k) is not None]
    return textwrap.fill(" · ".join(parts), 60) or "all runs"


def _basis_note(table: pl.DataFrame) -> str | None:
    col = table["throughput_basis"] if "throughput_basis" in table.columns else None
    if col is None or not col.is_in(["derived", "mixed"]).any():
        return None
    return "filled: logged throughput; hollow: derived (samples / time)"


def scaling_figure(table: pl.DataFrame, by: Sequence[str], title: str | None = None) -> Figure:
    fig = Figure(figsize=(8.0, 5.5))
    ax = fig.add_subplot(1, 1, 1)
    groups = table.partition_by(list(by), maintain_order=True) if by else [table]
    for i, g in enumerate(groups):
        g = g.sort("accelerators")
        color = f"C{i % 10}"
        n = g["accelerators"].to_list()
        tp = g["throughput_img_per_s"].to_list()
        ax.plot(n, tp, "-", color=color, label=_label(g.row(0, named=True), by))
        # logged throughput filled, derived (samples / time) hollow: not the same measurement
        basis = g["throughput_basis"].to_list() if "throughput_basis" in g.columns else []
        for x, y, bs in zip(n, tp, basis or [None] * len(n), strict=True):
            hollow = bs in ("derived", "mixed")
            ax.plot([x], [y], "o", color=color, mfc="none" if hollow else color, ms=6)
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
        ax.legend(fontsize=7, loc="upper left", title=_basis_note(table), title_fontsize=7)
    fig.tight_layout()
    return fig
