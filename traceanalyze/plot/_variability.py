"""Fleet variability: per-GPU box plots of iteration time; performance vs clock, power, temp.

GPUs are labelled by their file's shortest distinct name and device (`rank0 · GPU 0`; the file
alone when the iterations do not say which device), from a `file` column when the frame has one
(the CLI adds the source's path), else by the first characters of the source id. A scatter
panel is drawn only for telemetry some GPU has; without any, the x label of the box plots says
so.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from ..analyses.naming import abbreviate_distinct, distinct_files

PANELS = (
    ("median_sm_clock_mhz", "median SM clock (MHz)"),
    ("median_power_w", "median power (W)"),
    ("median_temperature_c", "median temperature (°C)"),
)


def gpu_labels(df: pl.DataFrame, n: int = 24, *, by_rank: bool = False) -> list[str]:
    """One label per row that tells the rows apart: each file by its shortest distinct name
    (`dgxa100_n8_ngc21.09_mxnet`, not `result_1` on every MLPerf row), cut so that different
    ones stay different, then `· GPU <device>` where the device is known (issue 32: ten
    identical "result_1 · GPU ?"). `by_rank`: `rank N` for the rows of a known rank."""
    files = df["file"].to_list() if "file" in df.columns else [None] * df.height
    ids = [str(s) for s in df["source_id"].to_list()]
    short = distinct_files([f for f in files if f is not None])
    names = [short[f] if f else s[:8] for f, s in zip(files, ids, strict=True)]
    if by_rank and "rank" in df.columns:  # ranks of one job (`with_file`): the rank says which
        names = [m if r is None else f"rank {r}" for m, r in zip(names, df["rank"], strict=True)]
    who = abbreviate_distinct(names, n)
    devices = df["device_id"].to_list()
    return [w if d is None else f"{w} · GPU {d}" for w, d in zip(who, devices, strict=True)]


def _labels(df: pl.DataFrame) -> list[str]:
    return gpu_labels(df, 40 if df.height <= 6 else 24)  # few boxes: room for longer names


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
    # seconds when steps are long (MLPerf epochs: an axis up to 400,000 ms said little)
    top = steady["duration_ns"].max() if steady.height else None
    div, unit = (1e9, "s") if isinstance(top, (int, float)) and top >= 1e10 else (1e6, "ms")
    for sid, dev in shown.select("source_id", "device_id").iter_rows():
        sub = groups.get((sid, dev))
        data.append([] if sub is None else (sub["duration_ns"] / div).drop_nulls().to_list())
    labels = _labels(shown)
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(
        range(1, len(labels) + 1),
        labels,
        rotation=90 if len(labels) > 6 else 0,
        fontsize=7 if len(labels) > 6 else 8,
    )
    ax.set_ylabel(f"iteration time ({unit})")
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
