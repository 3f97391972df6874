"""`collect`'s batch-size sweep: median images/s by batch size, p10–p90 as error bars."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure


def throughput_figure(table: pl.DataFrame) -> Figure:
    """Median images/s by batch size, p10–p90 as error bars (`collect.throughput` columns)."""
    fig = Figure(figsize=(5, 3.5))
    ax = fig.add_subplot()
    bs = table["batch_size"].to_list()
    med = table["median_images_per_s"].to_list()
    lo = [m - p for m, p in zip(med, table["p10_images_per_s"].to_list(), strict=True)]
    hi = [p - m for m, p in zip(med, table["p90_images_per_s"].to_list(), strict=True)]
    ax.errorbar(bs, med, yerr=[lo, hi], marker="o", capsize=3)
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set_xlabel("batch size (images per rank)")
    ax.set_ylabel("throughput (images/s), median, p10–p90")
    ax.set_title("ResNet-50 training throughput")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig
