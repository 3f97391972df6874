"""Roofline: achieved FLOP/s against arithmetic intensity (FLOP per DRAM byte), one point per
profiled kernel, on log-log axes, under the compute roof (peak FLOP/s) and, when a bandwidth is
given, the memory roof (bandwidth x intensity). Input: `analyses.mfu.kernel_roofline`."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure


def roofline_figure(
    df: pl.DataFrame,
    *,
    peak_flop_per_s: float | None = None,
    peak_bytes_per_s: float | None = None,
    title: str = "Roofline (DRAM)",
) -> Figure:
    fig = Figure(figsize=(6.5, 4.5))
    ax = fig.add_subplot()
    pts = df.filter((pl.col("flop_per_byte_ratio") > 0) & (pl.col("achieved_flop_per_s") > 0))
    xs = pts["flop_per_byte_ratio"].to_list()
    ys = pts["achieved_flop_per_s"].to_list()
    ax.scatter(xs, ys, zorder=3)
    for x, y, n in zip(xs, ys, pts["name"].fill_null("?").to_list(), strict=True):
        label = n.split("(")[0][-40:]
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    lo = min(xs + [0.01]) / 4
    hi = max(xs + [100.0]) * 4
    if peak_flop_per_s:
        ax.axhline(
            peak_flop_per_s, color="k", lw=1, label=f"peak {peak_flop_per_s / 1e12:g} TFLOP/s"
        )
    if peak_bytes_per_s:
        top = peak_flop_per_s or max(ys + [1.0]) * 10
        ridge = top / peak_bytes_per_s
        ax.plot(
            [lo, ridge],
            [lo * peak_bytes_per_s, top],
            color="C1",
            lw=1,
            label=f"DRAM {peak_bytes_per_s / 1e9:g} GB/s",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP/byte of DRAM traffic)")
    ax.set_ylabel("achieved (FLOP/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if peak_flop_per_s or peak_bytes_per_s:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
