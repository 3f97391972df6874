"""Across ranks: the arrival spread per collective, and the ranks' timeline on one time base.

Arrival spread: when each rank arrived, after the first, at every instance.

One column of points per matched collective instance (`op #order`, in time order); each rank's
arrival after the instance's first arrival in ms, the last arriver drawn larger and outlined,
ranks in fixed colours so a straggler's colour stands at the top; a second panel counts how
often each rank came last.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from ..analyses import ranks

MAX_LABELS = 40


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
    if labels.height <= MAX_LABELS:  # beyond that, instance numbers (in time order)
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


def ranks_timeline_figure(
    instances: pl.DataFrame, kernels: pl.DataFrame, title: str, max_bars: int = 1500
) -> Figure:
    """One lane per rank on the common time base (ms from the first event): its kernels in
    grey, its matched collectives coloured by operation, and a line joining each instance
    across ranks at the arrivals (so the last arriver's end of the line leans right)."""
    t0 = int(pl.concat([instances["arrival_ns"], kernels["start_ns"].drop_nulls()]).min())  # type: ignore[arg-type]
    ranks_list = sorted(instances["rank"].unique().to_list())
    fig = Figure(figsize=(12, 1.5 + 0.5 * len(ranks_list)), layout="constrained")
    ax = fig.add_subplot()
    coll = ranks.NCCL_KERNEL
    for y, r in enumerate(ranks_list):
        k = kernels.filter(
            (pl.col("rank") == r)
            & pl.col("end_ns").is_not_null()
            & pl.col("name").str.extract(coll).is_null()
        ).sort("start_ns")
        if k.height > max_bars:  # keep the longest: a lane is a few hundred pixels wide
            k = k.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("_d")).top_k(
                max_bars, by="_d"
            )
        bars = [
            ((s - t0) / 1e6, (e - s) / 1e6) for s, e in k.select("start_ns", "end_ns").iter_rows()
        ]
        ax.broken_barh(bars, (y - 0.35, 0.7), color="#bbbbbb")
    ops = sorted(instances["op"].unique().to_list())
    for i, op in enumerate(ops):
        mine = instances.filter(pl.col("op") == op)
        for y, r in enumerate(ranks_list):
            rows = mine.filter(pl.col("rank") == r).select("arrival_ns", "end_ns").rows()
            bars = [((s - t0) / 1e6, (e - s) / 1e6) for s, e in rows]
            ax.broken_barh(bars, (y - 0.35, 0.7), color=f"C{i}", label=op if y == 0 else None)
    for _, g in instances.sort("rank").group_by("instance", maintain_order=True):
        ys = [ranks_list.index(r) for r in g["rank"]]
        ax.plot([(a - t0) / 1e6 for a in g["arrival_ns"]], ys, color="black", lw=0.6, alpha=0.6)
    ax.set_yticks(range(len(ranks_list)), [f"rank {r}" for r in ranks_list])
    ax.invert_yaxis()
    ax.set_xlabel("time from the first event (ms, common time base)")
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="upper right", fontsize="small", title="collectives")
    return fig
