"""Communication vs computation per device: exposed and overlapped communication, in ms.

One group of bars per source and device from the `overlap` analysis's whole-trace rows
(`iteration` null); with iterations, one bar per iteration instead, so a slow step stands out.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from ._variability import gpu_label


def overlap_figure(df: pl.DataFrame) -> Figure:
    """Stacked bars: overlapped and exposed communication per device (or device and iteration)."""
    # Per iteration where a device has iterations, else its whole-trace row; devices without
    # any communication are left out (and said so when none is left).
    has_it = pl.col("iteration").is_not_null().any().over("source_id", "device_id")
    rows = df.filter(pl.when(has_it).then(pl.col("iteration").is_not_null()).otherwise(True))
    rows = rows.filter((pl.col("comm_ns") > 0).any().over("source_id", "device_id"))
    files = rows["file"].to_list() if "file" in rows.columns else [None] * rows.height
    labels = []
    for (s, d, it), f in zip(
        rows.select("source_id", "device_id", "iteration").iter_rows(), files, strict=True
    ):
        lab = gpu_label(str(s), d, f)
        labels.append(lab if it is None else f"{lab} · it {it}")
    over = [v / 1e6 for v in rows["overlapped_ns"].to_list()]
    exp = [v / 1e6 for v in rows["exposed_ns"].to_list()]
    fig = Figure(figsize=(9, 1.2 + 0.45 * max(1, rows.height)), layout="constrained")
    ax = fig.add_subplot()
    if not rows.height:
        ax.text(0.5, 0.5, "no communication kernels or copies", ha="center", va="center")
        ax.set_xticks([])
        ax.set_yticks([])
        return fig
    ax.barh(labels, over, color="#2ca02c", label="overlapped with compute")
    ax.barh(labels, exp, left=over, color="#d62728", label="exposed")
    ax.invert_yaxis()
    ax.set_xlabel("communication time (ms)")
    ax.set_title("Communication overlapped with computation")
    ax.legend(loc="lower right")
    return fig
