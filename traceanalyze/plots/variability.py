"""Fleet variability: per-GPU box plots of iteration time; performance vs clock, power, temp."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure


def variability_figure(
    per_gpu: pl.DataFrame, steady: pl.DataFrame, *, max_boxes: int = 64
) -> Figure:
    """`per_gpu` is `variability(...)`; `steady` the steady iterations (source_id, device_id,
    duration_ns). Box plots show at most `max_boxes` GPUs (the most deviant first; the title says
    how many are shown), the scatter panels show every GPU."""
    fig = Figure(figsize=(12.0, 8.0))
    gs = fig.add_gridspec(2, 3)
    ax = fig.add_subplot(gs[0, :])
    shown = per_gpu.sort("rank").head(max_boxes).sort("median_iteration_ms")
    data = []
    labels = []
    groups = steady.partition_by(["source_id", "device_id"], as_dict=True)
    for sid, dev in shown.select("source_id", "device_id").iter_rows():
        sub = groups.get((sid, dev))
        data.append([] if sub is None else (sub["duration_ns"] / 1e6).drop_nulls().to_list())
        labels.append(f"{str(sid)[:6]}:{dev}")
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=90, fontsize=6)
    ax.set_ylabel("iteration time (ms)")
    ax.set_xlabel("GPU (source:device)")
    n = per_gpu.height
    ax.set_title(
        f"Steady-state iteration time per GPU ({len(labels)} of {n} GPUs shown"
        + (", most deviant first chosen)" if len(labels) < n else ")")
    )
    for i, (col, label) in enumerate(
        (
            ("median_sm_clock_mhz", "median SM clock (MHz)"),
            ("median_power_w", "median power (W)"),
            ("median_temperature_c", "median temperature (°C)"),
        )
    ):
        a = fig.add_subplot(gs[1, i])
        d = per_gpu.drop_nulls([col, "perf_ratio"])
        colors = ["tab:red" if o else "tab:blue" for o in d["outlier"].to_list()]
        a.scatter(d[col].to_numpy(), d["perf_ratio"].to_numpy(), s=10, c=colors)
        a.set_xlabel(label)
        a.set_ylabel("performance / fleet median (ratio)")
        if d.height == 0:
            a.set_title("no telemetry")
    fig.tight_layout()
    return fig
