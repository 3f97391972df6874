"""Arrival spread per collective: when each rank arrived, after the first, at every instance.

One column of points per matched collective instance (`op #order`, in time order); each rank's
arrival after the instance's first arrival in ms, the last arriver drawn larger and outlined,
ranks in fixed colours so a straggler's colour stands at the top; a second panel counts how
often each rank came last.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure


def stragglers_figure(instances: pl.DataFrame, ranks: pl.DataFrame, verdict: str) -> Figure:
    """Dot plot of arrivals after the first (ms) per instance; bars of arrived_last per rank."""
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax, bars = fig.subplots(1, 2, width_ratios=[3, 1])
    inst = instances.with_columns(
        ((pl.col("arrival_ns") - pl.col("arrival_ns").min().over("instance")) / 1e6).alias("_ms")
    )
    labels = (
        inst.group_by("instance", maintain_order=True)
        .agg(pl.format("{} #{}", pl.col("op").first(), pl.col("order").first()).alias("l"))
        .sort("instance")
    )
    ranks_list = sorted(inst["rank"].unique().to_list())
    colours = [f"C{i % 10}" for i in range(len(ranks_list))]
    for r, c in zip(ranks_list, colours, strict=True):
        mine = inst.filter(pl.col("rank") == r)
        ax.scatter(mine["instance"], mine["_ms"], color=c, s=18, label=f"rank {r}", zorder=2)
        last = mine.filter(pl.col("last"))
        ax.scatter(last["instance"], last["_ms"], color=c, s=90, edgecolors="black", zorder=3)
    ax.set_xticks(labels["instance"].to_list(), labels["l"].to_list(), rotation=60, ha="right")
    ax.set_ylabel("arrival after the first rank (ms)")
    ax.set_xlabel("collective instance (outlined: the last to arrive)")
    ax.legend(fontsize="small", ncols=2)
    ax.set_title(verdict if len(verdict) <= 90 else verdict[:89] + "…", fontsize="medium")
    rk = ranks.sort("rank")
    bars.barh([f"rank {r}" for r in rk["rank"]], rk["arrived_last_pct"], color=colours)
    bars.invert_yaxis()
    bars.set_xlabel("arrived last (% of collectives)")
    return fig
