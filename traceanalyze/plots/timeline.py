"""Timeline: kernels and copies per device and stream, iteration boundaries, telemetry tracks.

Top panel: one lane per (device, stream, activity) from `analyses.timeline.lanes`; raw intervals
as `broken_barh` bars, binned lanes as a density strip (bar alpha = busy fraction per bin) with
"binned" in the lane label and the title. Below, on the same time axis (ms from the window start):
SM clock, power and temperature as step functions (sample-and-hold, like the attribution).
"""

from __future__ import annotations

import numpy as np
import polars as pl
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

TRACKS = (
    ("sm_clock_mhz", "SM clock (MHz)"),
    ("power_w", "power (W)"),
    ("temperature_c", "temperature (°C)"),
)


def timeline_figure(
    lanes: pl.DataFrame,
    *,
    t0_ns: int,
    t1_ns: int,
    boundaries_ns: list[int] | None = None,
    samples: pl.DataFrame | None = None,
    title: str = "",
    width_in: float = 14.0,
) -> Figure:
    """Draw `lanes` (see `analyses.timeline.lanes`) and the telemetry `samples` in one window."""
    tracks = [
        (c, label)
        for c, label in TRACKS
        if samples is not None and c in samples.columns and samples[c].drop_nulls().len() > 0
    ]
    lane_names = lanes["lane"].unique(maintain_order=True).to_list()
    h_top = max(2.0, 0.35 * len(lane_names) + 1.0)
    fig = Figure(figsize=(width_in, h_top + 1.6 * len(tracks)))
    ratios = [h_top] + [1.6] * len(tracks)
    axes = fig.subplots(1 + len(tracks), 1, sharex=True, height_ratios=ratios, squeeze=False)[:, 0]
    ax = axes[0]

    def ms(v: np.ndarray | pl.Series) -> np.ndarray:
        return (np.asarray(v, dtype=np.float64) - t0_ns) / 1e6

    any_binned = False
    labels = []
    for i, name in enumerate(lane_names):
        sub = lanes.filter(pl.col("lane") == name)
        binned = bool(sub["binned"][0])
        any_binned |= binned
        color = {"kernels": "tab:blue", "copies": "tab:orange"}.get(sub["activity"][0], "tab:green")
        x = ms(sub["start_ns"])
        w = ms(sub["end_ns"]) - x
        if binned:
            rgba = np.array([to_rgba(color)] * sub.height)
            rgba[:, 3] = sub["busy_ratio"].to_numpy()
            ax.broken_barh(list(zip(x, w, strict=True)), (i - 0.4, 0.8), facecolors=rgba)
        else:
            ax.broken_barh(list(zip(x, w, strict=True)), (i - 0.4, 0.8), facecolors=color)
        n = int(sub["interval_count"][0])
        labels.append(f"{name} ({n:,}{', binned' if binned else ''})")
    ax.set_yticks(range(len(lane_names)), labels, fontsize=7)
    ax.set_ylim(len(lane_names) - 0.5, -0.5)
    ax.set_ylabel("lane")
    for b in boundaries_ns or []:
        for a in axes:
            a.axvline((b - t0_ns) / 1e6, color="gray", lw=0.6, ls="--")
    note = (
        " — lanes with more intervals than pixels are binned: shade = busy fraction per bin"
        if any_binned
        else ""
    )
    ax.set_title((title + note).strip(" —"), fontsize=9)
    for a, (col, label) in zip(axes[1:], tracks, strict=True):
        assert samples is not None
        for (dev,), sub in (
            samples.drop_nulls(col)
            .sort("timestamp_ns")
            .group_by(["device_id"], maintain_order=True)
        ):
            a.step(ms(sub["timestamp_ns"]), sub[col].to_numpy(), where="post", label=f"GPU {dev}")
        a.set_ylabel(label)
        a.legend(fontsize=6, loc="upper right")
    axes[-1].set_xlabel("time since window start (ms)")
    axes[-1].set_xlim(0, (t1_ns - t0_ns) / 1e6)
    fig.tight_layout()
    return fig
