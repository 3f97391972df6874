"""Core utilization as grouped bars: one group per batch size (or file), one bar per unit.

ncu percentages (0–100 % of peak) and nvprof utilization levels (0–10) are different quantities,
so they never share an axis: each scale present gets its own panel with its own y label and
range. Groups are labelled by batch size (`bs 64`) or, without one, by the file's short stem; a
unit without a value is marked `n/a` on the axis instead of looking like a zero bar, and a zero
is written `0`, so that the two never look alike. The legend
sits outside the bars and the titles are sized to the figure.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from ..analyses.naming import short_name

UNITS = (
    ("fma_pct", "FMA"),
    ("fp16_pct", "FP16"),
    ("tensor_pct", "Tensor Core"),
    ("sfu_pct", "SFU"),
)
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red")

SCALES = {
    # scale -> (y label, y upper limit)
    "pct": ("pipe utilization (% of peak)", 100.0),
    "level": ("nvprof utilization level (0 = idle … 10 = max)", 10.0),
}


def _labels(df: pl.DataFrame) -> list[str]:
    files = df["file"] if "file" in df.columns else df["source_id"]
    batch = df["batch_size"] if "batch_size" in df.columns else pl.Series([None] * df.height)
    labels = [
        f"bs {b}" if b is not None else short_name(str(f), 20)
        for b, f in zip(batch.to_list(), files.to_list(), strict=True)
    ]
    # Two files with the same batch size: tell them apart by file.
    dup = {x for x in labels if labels.count(x) > 1}
    return [
        f"{x}\n{short_name(str(f), 20)}" if x in dup else x
        for x, f in zip(labels, files.to_list(), strict=True)
    ]


def coreutil_figure(df: pl.DataFrame) -> Figure:
    """`core_utilization` rows (with `batch_size` and/or `file`, and `scale`) as grouped bars."""
    if "batch_size" in df.columns:
        df = df.sort("batch_size", nulls_last=True, maintain_order=True)
    if "scale" not in df.columns:
        df = df.with_columns(pl.lit("pct").alias("scale"))
    unknown = set(df["scale"].to_list()) - set(SCALES)
    if unknown:
        raise ValueError(f"unknown scale(s) {sorted(unknown)}; expected {sorted(SCALES)}")
    panels = [(s, df.filter(pl.col("scale") == s)) for s in SCALES]
    panels = [(s, d) for s, d in panels if d.height]
    widths = [max(1.6, 1.1 * d.height + 0.6) for _, d in panels]
    fig = Figure(
        figsize=(max(5.2, sum(widths) + 1.2 * len(panels) + 0.6), 4.8), layout="constrained"
    )
    axes = fig.subplots(1, len(panels), width_ratios=widths, squeeze=False)[0]
    for ax, (scale, d) in zip(axes, panels, strict=True):
        ylabel, top = SCALES[scale]
        x = np.arange(d.height)
        w = 0.8 / len(UNITS)
        for i, ((col, name), color) in enumerate(zip(UNITS, COLORS, strict=True)):
            vals = d[col].cast(pl.Float64).to_numpy()
            pos = x + (i - 1.5) * w
            ax.bar(pos, np.nan_to_num(vals, nan=0.0), w, label=name, color=color)
            for p, v in zip(pos, vals, strict=True):
                # no metric: say so, a missing bar is not a zero; and a zero is written, so that
                # it does not look like nothing drawn either (issue 32)
                mark = "n/a" if np.isnan(v) else "0" if v == 0 else None
                if mark is not None:
                    ax.text(p, top * 0.01, mark, rotation=90, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, _labels(d), fontsize=8)
        ax.set_ylim(0, top * 1.05 if scale == "level" else max(top * 0.2, _max(d) * 1.15))
        ax.set_ylabel(ylabel)
        has_bs = "batch_size" in d.columns and d["batch_size"].null_count() == 0
        ax.set_xlabel("batch size (images per iteration)" if has_bs else "file")
        weights = sorted({str(v) for v in d["weight"].to_list()}) if "weight" in d.columns else []
        source = "ncu, % of peak" if scale == "pct" else "nvprof, levels 0–10"
        ax.set_title(f"{source}\nweighted by {', '.join(weights) or '?'}", fontsize=9)
    handles, names = axes[0].get_legend_handles_labels()
    # Below the panels: never over a bar, never against the titles, whatever the figure's width.
    fig.legend(handles, names, loc="outside lower center", ncols=len(UNITS), fontsize=8)
    fig.suptitle("Core utilization per pipe, over all launches", fontsize=11)
    return fig


def _max(d: pl.DataFrame) -> float:
    vals = [d[c].cast(pl.Float64).max() for c, _ in UNITS]
    nums = [float(v) for v in vals if isinstance(v, int | float)]
    return max(nums) if nums else 0.0
