"""Core utilization as grouped bars: one group per batch size (or file), one bar per unit."""

from __future__ import annotations

import numpy as np
import polars as pl
from matplotlib.figure import Figure

UNITS = (
    ("fma_pct", "FMA"),
    ("fp16_pct", "FP16"),
    ("tensor_pct", "Tensor Core"),
    ("sfu_pct", "SFU"),
)


def coreutil_figure(df: pl.DataFrame) -> Figure:
    """`core_utilization` rows (with `batch_size` and/or `file`) as grouped bars."""
    df = df.sort("batch_size", nulls_last=True) if "batch_size" in df.columns else df
    labels = [
        f"bs {b}" if b is not None else str(f)
        for b, f in zip(
            df["batch_size"] if "batch_size" in df.columns else [None] * df.height,
            df["file"] if "file" in df.columns else df["source_id"],
            strict=True,
        )
    ]
    scale = set(df["scale"].to_list()) if "scale" in df.columns else {"pct"}
    fig = Figure(figsize=(max(6.0, 1.2 * df.height + 2), 4.0))
    ax = fig.add_subplot()
    x = np.arange(df.height)
    w = 0.8 / len(UNITS)
    for i, (col, name) in enumerate(UNITS):
        vals = df[col].cast(pl.Float64).fill_null(np.nan).to_numpy()
        ax.bar(x + (i - 1.5) * w, vals, w, label=name)
    ax.set_xticks(x, labels)
    ax.set_xlabel("batch size (images per iteration)" if "batch_size" in df.columns else "file")
    ax.set_ylabel(
        "utilization level (0–10)" if scale == {"level_0_10"} else "pipe utilization (% of peak)"
    )
    weight = ", ".join(sorted(set(df["weight"].to_list()))) if "weight" in df.columns else "?"
    ax.set_title(f"Core utilization per pipe ({weight}-weighted over launches)")
    ax.legend()
    fig.tight_layout()
    return fig
