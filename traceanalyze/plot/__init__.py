"""Figures from `Dataset` results: `ta.plot.timeline(ds.timeline(), "t.png")`.

Each function takes the result of one analysis method, returns the matplotlib `Figure` and, given
a path, also writes it there (.png or .svg by its extension, any other name is an error;
written to a temporary name and renamed, so a failed write leaves no half file). Built with
`matplotlib.figure.Figure` directly (no pyplot global state), so it works headless; never
`plt.show()`. Every axis is labelled with its unit.

The figures are drawn in this package's private modules (`_timeline.py`, `_coreutil.py`, …: an
analysis frame in, a `Figure` out); the functions here take a `Dataset` result, pass its frames
and write the file. All the figures' code is in this one package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as _pl
from matplotlib.figure import Figure

from ..errors import NotAnswerable
from ..outpaths import check_figure
from ..results import CoreUtil, Roofline, Scaling, Stragglers, Timeline, Variability

if TYPE_CHECKING:  # annotations only: `ta.plot` offers figures, not these modules (issue 32)
    import os

    import polars as pl

DPI = 120


def _takes(result: object, kind: type | str, name: str, what: str) -> None:
    """A clear error for the wrong result (`ta.plot.timeline(ds.idle())` raised AttributeError
    deep in the drawing; issue 32): `kind` a result class, or a column its frame must have."""
    ok = (
        isinstance(result, _pl.DataFrame) and kind in result.columns
        if isinstance(kind, str)
        else isinstance(result, kind)
    )
    if not ok:
        raise TypeError(f"plot.{name} draws the result of {what}, not a {type(result).__name__}")


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
    _takes(result, Timeline, "timeline", "Dataset.timeline()")
    from ._timeline import timeline_figure

    fig = timeline_figure(
        result.lanes,
        t0_ns=result.start_ns,
        t1_ns=result.end_ns,
        iterations=result.iterations,
        samples=result.samples,
        title=result.title,
        top_kernels=result.top_kernels,
        critical_path=result.critical_path,
    )
    if path is not None:
        save(fig, path)
    return fig


def coreutil(result: CoreUtil, path: str | os.PathLike[str] | None = None) -> Figure:
    """Grouped bars per batch size (or file), one panel per scale (ncu % / nvprof levels)."""
    _takes(result, CoreUtil, "coreutil", "Dataset.coreutil()")
    from ._coreutil import coreutil_figure

    if result.table.height == 0:
        raise NotAnswerable("nothing to plot: no file has pipe-utilization metrics")
    fig = coreutil_figure(result.table)
    if path is not None:
        save(fig, path)
    return fig


def variability(result: Variability, path: str | os.PathLike[str] | None = None) -> Figure:
    """Box plots of steady iteration time per GPU; performance against clock, power, temp."""
    _takes(result, Variability, "variability", "Dataset.variability()")
    from ._variability import variability_figure

    fig = variability_figure(result.table, result.steady)
    if path is not None:
        save(fig, path)
    return fig


def scaling(
    result: Scaling, path: str | os.PathLike[str] | None = None, *, title: str | None = None
) -> Figure:
    """Throughput against accelerators (log axes) per group, the ideal line, efficiency at
    each point."""
    _takes(result, Scaling, "scaling", "Dataset.scaling()")
    from ._scaling import scaling_figure

    if result.table.height == 0:
        raise NotAnswerable(
            "nothing to plot: no run has both an accelerator count and a throughput"
        )
    fig = scaling_figure(result.table, result.by, title)
    if path is not None:
        save(fig, path)
    return fig


def stragglers(result: Stragglers, path: str | os.PathLike[str] | None = None) -> Figure:
    """Arrival spread per collective instance (ms after the first rank), the last arriver
    outlined; how often each rank came last."""
    _takes(result, Stragglers, "stragglers", "Dataset.stragglers()")
    from ._stragglers import stragglers_figure

    fig = stragglers_figure(result.instances, result.ranks, result.verdict)
    if path is not None:
        save(fig, path)
    return fig


def ranks_timeline(
    result: Stragglers, path: str | os.PathLike[str] | None = None, max_bars: int = 1500
) -> Figure:
    """One lane per rank on the common time base: kernels, matched collectives by operation,
    each instance joined across ranks at the arrivals."""
    _takes(result, Stragglers, "ranks_timeline", "Dataset.stragglers()")
    from ._stragglers import ranks_timeline_figure

    title = f"{result.job}: {result.ranks.height} ranks; {result.time_base}"
    fig = ranks_timeline_figure(result.instances, result.kernels, title, max_bars)
    if path is not None:
        save(fig, path)
    return fig


def idle(result: pl.DataFrame, path: str | os.PathLike[str] | None = None) -> Figure:
    """`Dataset.idle()`: stacked bars of idle time by cause per device."""
    _takes(result, "idle_ns", "idle", "Dataset.idle()")
    from ._idle import idle_figure

    fig = idle_figure(result)
    if path is not None:
        save(fig, path)
    return fig


def overlap(result: pl.DataFrame, path: str | os.PathLike[str] | None = None) -> Figure:
    """`Dataset.overlap()`: communication, its overlapped and exposed parts, per device."""
    _takes(result, "overlap_pct", "overlap", "Dataset.overlap()")
    from ._overlap import overlap_figure

    fig = overlap_figure(result)
    if path is not None:
        save(fig, path)
    return fig


def ops(
    result: pl.DataFrame,
    path: str | os.PathLike[str] | None = None,
    *,
    source: str | None = None,
    top: int = 15,
) -> Figure:
    """`Dataset.ops()` (by operator) of one source: the GPU time of the kernels each top
    operator launched and its host inclusive time, ranked by that GPU time. `source`: which,
    when the result holds several."""
    _takes(result, "kernel_self_ns", "ops", "Dataset.ops()")
    from ._ops import ops_figure

    if "op" not in result.columns:
        raise NotAnswerable("ops plots draw operators: use ds.ops(by='op')")
    sids = result["source_id"].unique(maintain_order=True).to_list()
    if source is None and len(sids) > 1:
        raise NotAnswerable(f"ops of {len(sids)} sources: say which one (source=…)")
    sid = source if source is not None else (sids[0] if sids else None)
    one = result.filter(_pl.col("source_id") == sid)
    if one.height == 0:
        raise NotAnswerable(f"no operators of source {sid}")
    name = str(one["file"][0]) if "file" in one.columns else str(sid)
    title = f"{name.replace(chr(92), '/').rsplit('/', 1)[-1]}: operators"
    fig = ops_figure(one.drop("file", strict=False), top=top, title=title)
    if path is not None:
        save(fig, path)
    return fig


def roofline(
    result: Roofline,
    path: str | os.PathLike[str] | None = None,
    *,
    bandwidth_gbps: float | None = None,
) -> Figure:
    """`Dataset.roofline()`: kernels by arithmetic intensity and FLOP/s, with the compute roof
    (when known) and the memory roof (`bandwidth_gbps`, when given)."""
    _takes(result, Roofline, "roofline", "Dataset.roofline()")
    from ._roofline import roofline_figure

    bw = bandwidth_gbps * 1e9 if bandwidth_gbps else None
    fig = roofline_figure(
        result.points, peak_flop_per_s=result.peak_flop_per_s, peak_bytes_per_s=bw
    )
    if path is not None:
        save(fig, path)
    return fig


def throughput(table: pl.DataFrame, path: str | os.PathLike[str] | None = None) -> Figure:
    """`collect`'s sweep (`throughput.csv`'s table): median images/s by batch size, p10–p90."""
    from ._throughput import throughput_figure

    fig = throughput_figure(table)
    if path is not None:
        save(fig, path)
    return fig


__all__ = [
    "timeline",
    "idle",
    "overlap",
    "ops",
    "roofline",
    "coreutil",
    "variability",
    "scaling",
    "stragglers",
    "ranks_timeline",
    "throughput",
    "save",
]

# Not figures: the names this module's imports bind (`ta.plot.annotations(...)` raised
# TypeError; issue 32).
del annotations, TYPE_CHECKING
