"""Figures from `Dataset` results: `ta.plot.timeline(ds.timeline(), "t.png")`.

Each function takes the result of one analysis method, returns the matplotlib `Figure` and, given
a path, also writes it there (.png or .svg by its extension, any other name is an error;
written to a temporary name and renamed, so a failed write leaves no half file). Built without
pyplot, so it works headless; never `plt.show()`.
"""

from __future__ import annotations

import os

from matplotlib.figure import Figure

from .errors import NotAnswerable
from .outpaths import check_figure
from .results import CoreUtil, Timeline, Variability

DPI = 120


def save(fig: Figure, path: str | os.PathLike[str]) -> None:
    """Write `fig` to `path` atomically; the format is the path's suffix."""
    p = check_figure(path)  # a missing directory or an unknown extension: one clear error
    fmt = p.suffix.lstrip(".").lower()
    tmp = p.with_name(f".{p.name}.tmp")
    try:
        # bbox_inches="tight": a long title or label grows the picture instead of being cut off
        fig.savefig(tmp, dpi=DPI, format=fmt, bbox_inches="tight", pad_inches=0.1)
        tmp.replace(p)
    finally:
        tmp.unlink(missing_ok=True)


def timeline(result: Timeline, path: str | os.PathLike[str] | None = None) -> Figure:
    """Lanes per device/stream, iterations, telemetry tracks and a legend of the top kernels."""
    from .plots.timeline import timeline_figure

    fig = timeline_figure(
        result.lanes,
        t0_ns=result.start_ns,
        t1_ns=result.end_ns,
        iterations=result.iterations,
        samples=result.samples,
        title=result.title,
        top_kernels=result.top_kernels,
    )
    if path is not None:
        save(fig, path)
    return fig


def coreutil(result: CoreUtil, path: str | os.PathLike[str] | None = None) -> Figure:
    """Grouped bars per batch size (or file), one panel per scale (ncu % / nvprof levels)."""
    from .plots.coreutil import coreutil_figure

    if result.table.height == 0:
        raise NotAnswerable("nothing to plot: no file has pipe-utilization metrics")
    fig = coreutil_figure(result.table)
    if path is not None:
        save(fig, path)
    return fig


def variability(result: Variability, path: str | os.PathLike[str] | None = None) -> Figure:
    """Box plots of steady iteration time per GPU; performance against clock, power, temp."""
    from .plots.variability import variability_figure

    fig = variability_figure(result.table, result.steady)
    if path is not None:
        save(fig, path)
    return fig


__all__ = ["timeline", "coreutil", "variability", "save"]
