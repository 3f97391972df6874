"""Communication vs computation per device: exposed and overlapped communication, in ms.

One group of bars per source and device from the `overlap` analysis's whole-trace rows
(`iteration` null); with iterations, one bar per iteration instead, so a slow step stands out.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from ._variability import gpu_labels


def _labels(rows: pl.DataFrame) -> list[str]:
    its = rows["iteration"].to_list()
    return [
        lab if it is None else f"{lab} · it {it}"
        for lab, it in zip(gpu_labels(rows, by_rank=True), its, strict=True)
    ]


def _no_communication(rows: pl.DataFrame) -> Figure:
    """No device communicates: its compute time per row, said so in the title, rather than an
    empty frame (issue 32: the ResNet trace's 1,600 device-to-device copies are no
    communication, as the warning says)."""
    fig = Figure(figsize=(9, 1.2 + 0.45 * max(1, rows.height)), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(_labels(rows), [v / 1e6 for v in rows["compute_ns"].to_list()], color="#7f7f7f")
    ax.invert_yaxis()
    ax.set_xlabel("compute time (ms)")
    ax.set_title(
        "No communication (NCCL/collective kernels, peer or host copies): nothing to overlap;\n"
        "compute time shown"
    )
    return fig


def overlap_figure(df: pl.DataFrame) -> Figure:
    """Stacked bars: overlapped and exposed communication per device (or device and iteration)."""
    # Per iteration where a device has iterations, else its whole-trace row; devices without
    # any communication are left out (when none is left: compute time, said so).
    has_it = pl.col("iteration").is_not_null().any().over("source_id", "device_id")
    rows = df.filter(pl.when(has_it).then(pl.col("iteration").is_not_null()).otherwise(True))
    with_comm = rows.filter((pl.col("comm_ns") > 0).any().over("source_id", "device_id"))
    if with_comm.height == 0:
        return _no_communication(rows)
    rows = with_comm
    labels = _labels(rows)
    over = [v / 1e6 for v in rows["overlapped_ns"].to_list()]
    exp = [v / 1e6 for v in rows["exposed_ns"].to_list()]
    fig = Figure(figsize=(9, 1.2 + 0.45 * max(1, rows.height)), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(labels, over, color="#2ca02c", label="overlapped with compute")
    ax.barh(labels, exp, left=over, color="#d62728", label="exposed")
    ax.invert_yaxis()
    ax.set_xlabel("communication time (ms)")
    ax.set_title("Communication overlapped with computation")
    ax.legend(loc="lower right")
    return fig
