"""Fleet variability: per-GPU box plots of iteration time; performance vs clock, power, temp.

GPUs are labelled by their file's short stem and device (`rank0 · GPU 0`, `GPU ?` when the
iterations do not say which device), from a `file` column when the frame has one (the CLI adds
the source's path), else by the first characters of the source id. A scatter panel is drawn
only for telemetry some GPU has; without any, the x label of the box plots says so.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from ..analyses.naming import short_name

PANELS = (
    ("median_sm_clock_mhz", "median SM clock (MHz)"),
    ("median_power_w", "median power (W)"),
    ("median_temperature_c", "median temperature (°C)"),
)


def gpu_label(source: str, device: int | None, file: str | None = None, max_len: int = 24) -> str:
    """`<file stem> · GPU <device>` (`GPU ?` for an unknown device)."""
    who = short_name(file, max_len) if file else str(source)[:8]
    return f"{who} · GPU {'?' if device is None else device}"


def _labels(df: pl.DataFrame) -> list[str]:
    files = df["file"].to_list() if "file" in df.columns else [None] * df.height
    n = 40 if df.height <= 6 else 24  # few boxes: room for longer names
    return [
        gpu_label(str(s), d, f, n)
        for (s, d), f in zip(df.select("source_id", "device_id").iter_rows(), files, strict=True)
    ]


def variability_figure(
    per_gpu: pl.DataFrame, steady: pl.DataFrame, *, max_boxes: int = 64
) -> Figure:
    """`per_gpu` is `variability(...)` (optionally with a `file` column); `steady` the steady
    iterations (source_id, device_id, duration_ns). Box plots show at most `max_boxes` GPUs (the
    most deviant first; the title says how many are shown), the scatter panels show every GPU
    with the telemetry, outliers in red and named."""
    # Only the panels some GPU has telemetry for (issue 21: three empty panels said nothing);
    # without any, the box plots alone and a line saying why.
    panels = [(c, lb) for c, lb in PANELS if per_gpu.drop_nulls([c, "perf_ratio"]).height]
    fig = Figure(figsize=(12.0, 8.0 if panels else 4.5), layout="constrained")
    gs = fig.add_gridspec(2 if panels else 1, max(len(panels), 1))
    ax = fig.add_subplot(gs[0, :])
    shown = per_gpu.sort("rank").head(max_boxes).sort("median_iteration_ms")
    data = []
    groups = steady.partition_by(["source_id", "device_id"], as_dict=True)
    for sid, dev in shown.select("source_id", "device_id").iter_rows():
        sub = groups.get((sid, dev))
        data.append([] if sub is None else (sub["duration_ns"] / 1e6).drop_nulls().to_list())
    labels = _labels(shown)
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(
        range(1, len(labels) + 1),
        labels,
        rotation=90 if len(labels) > 6 else 0,
        fontsize=7 if len(labels) > 6 else 8,
    )
    ax.set_ylabel("iteration time (ms)")
    ax.set_xlabel("GPU (file · device)")
    n = per_gpu.height
    ax.set_title(
        f"Steady-state iteration time per GPU ({len(labels)} of {n} GPUs shown"
        + (", most deviant first chosen)" if len(labels) < n else ")")
    )
    if not panels:
        ax.set_xlabel(
            "GPU (file · device); no SM clock, power or temperature telemetry for any GPU"
        )
    for i, (col, label) in enumerate(panels):
        a = fig.add_subplot(gs[1, i])
        a.set_xlabel(label)
        a.set_ylabel("performance / fleet median (ratio)")
        d = per_gpu.drop_nulls([col, "perf_ratio"])
        colors = ["tab:red" if o else "tab:blue" for o in d["outlier"].to_list()]
        a.scatter(d[col].to_numpy(), d["perf_ratio"].to_numpy(), s=14, c=colors)
        for (x, y, o), name in zip(
            d.select(col, "perf_ratio", "outlier").iter_rows(), _labels(d), strict=True
        ):
            if o:
                a.annotate(name, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        missing = per_gpu.height - d.height
        if missing:
            a.set_title(f"{d.height} of {per_gpu.height} GPUs have it", fontsize=8)
    return fig
