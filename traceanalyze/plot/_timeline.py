"""Timeline: kernels and copies per device and stream, iteration boundaries, telemetry tracks.

Top panel: one lane per (device, stream, activity) from `analyses.timeline.lanes`; raw intervals
as `broken_barh` bars (markers translucent, as they nest; instant markers as ticks), binned
lanes as a density strip (bar alpha = busy fraction per bin; a kernel lane's bin in the colour
of its main kernel) with "binned" in the lane label and the title; a raw interval narrower than
a pixel is drawn one pixel wide (as trace viewers do), so that none vanishes; iteration starts
and ends as dashed lines, the iteration number above when its span is wide enough for it.
Markers wide enough for their name are labelled inside (nested ones when the label clears the
ones already placed), and so are host operators drawn one by one. The kernels with the most time
in the window (`top_kernels`) get a colour each and a legend naming them; other kernels are
grey. Annotations (a step's phases, one row per nesting depth) get a colour per name when they
have at most ten names (`ProfilerStep#2` and `#3` are one), and a legend above the kernels'
naming each with its time in the window, so that a phase too narrow for its label is still
named.
Below, on the same time axis (ms from the window start): SM clock, power and temperature as step
functions (sample-and-hold, like the attribution), clipped at the window's edges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

COLORS = {
    "kernels": "tab:blue",
    "copies": "tab:orange",
    "markers": "tab:purple",
    "cpu ops": "slategray",
}
# One colour per named top kernel; copies (orange) and markers (purple) keep theirs.
KERNEL_COLORS = (
    "tab:blue",
    "tab:red",
    "tab:green",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "gold",
)
OTHER_KERNELS = "silver"
# One colour per annotation name (a step's phases), when the drawn annotations have this few
# names; numbered names (`ProfilerStep#3`, NVTX `iteration 3`) count as one.
ANNOTATION_COLORS = (
    "#b8a9d9",  # light purple: the outermost range (ProfilerStep) usually comes first
    "#8dd3c7",
    "#fdb462",
    "#fb8072",
    "#80b1d3",
    "#b3de69",
    "#fccde5",
    "#bc80bd",
    "#ffed6f",
    "#d9d9d9",
)
_NUMBERED = re.compile(r"[#\s]*\d+$")
_PYTORCH_IDS = re.compile(r", (seq|op_id) = \d+")
LABEL_PT = 6.5  # font size of marker and iteration labels
LEGEND_NAME = 60  # characters of a kernel name in the legend


def _text_in(n_chars: int, pt: float = LABEL_PT) -> float:
    """About how wide `n_chars` characters of text are, in inches (0.6 em per character)."""
    return n_chars * 0.6 * pt / 72 + 0.04


_QUALIFIER = re.compile(r"\b[A-Za-z_]\w*::")


def kernel_label(name: str, n: int = LEGEND_NAME) -> str:
    """A C++ kernel name as a short label: no `void`, no argument list, no namespaces
    (`void at::native::k<4, at::native::F<float>>(int, …)` -> `k<4, F<float>>`), cut to `n`."""
    s = name.removeprefix("void ").strip()
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            s = s[:i]
            break
    s = _QUALIFIER.sub("", s) or name
    return s if len(s) <= n else s[: n - 1] + "…"


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
    iterations: pl.DataFrame | None = None,
    top_kernels: pl.DataFrame | None = None,
    critical_path: pl.DataFrame | None = None,
) -> Figure:
    """Draw `lanes` (see `analyses.timeline.lanes`) and the telemetry `samples` in one window.

    `iterations` (`iteration, start_ns, end_ns`, from `analyses.timeline.iteration_spans`) draws a
    dashed line at every iteration's start and end inside the window and its number above the
    lanes; `boundaries_ns` adds plain lines. `samples` may hold one sample on each side of the
    window (`window_samples`): steps are drawn from them and clipped at the window's edges; one
    line per value of a `label` column when `samples` has one (the CLI names another source's
    samples by file), else one per device. `top_kernels` (`name, total_ms`, most time first)
    colours those kernels and names them in a legend. `critical_path` (the path's events,
    `CriticalPath.events`) marks each event on the path with a red bar under its lane.
    """
    tracks = [
        (c, label)
        for c, label in TRACKS
        if samples is not None and c in samples.columns and samples[c].drop_nulls().len() > 0
    ]
    lane_names = lanes["lane"].unique(maintain_order=True).to_list()
    h_top = max(2.0, 0.35 * len(lane_names) + 1.0)
    kcolor = _kernel_colors(top_kernels)
    acolor = annotation_colors(lanes)
    h_plots = h_top + 1.6 * len(tracks)
    fig = Figure(figsize=(width_in, h_plots))
    ratios = [h_top] + [1.6] * len(tracks)
    axes = fig.subplots(1 + len(tracks), 1, sharex=True, height_ratios=ratios, squeeze=False)[:, 0]
    span_ms = (t1_ns - t0_ns) / 1e6
    win = _Window(t0_ns, t1_ns, span_ms / (width_in * 100), width_in * 0.72 / span_ms)
    any_binned = _draw_lanes(axes[0], lanes, lane_names, win, _Colors(kcolor, acolor))
    if critical_path is not None and critical_path.height:
        from ._timeline_path import draw_path

        draw_path(axes[0], lanes, lane_names, critical_path, win.t0_ns, win.min_w)
    _draw_boundaries(axes, boundaries_ns, iterations, win)
    note = "lanes with more intervals than pixels are binned: shade = busy fraction per bin"
    axes[0].set_title(title + (f"\n{note}" if any_binned else ""), fontsize=9, pad=14)
    for a, (col, label) in zip(axes[1:], tracks, strict=True):
        assert samples is not None
        _draw_track(a, samples, col, label, win)
    axes[-1].set_xlabel("time since window start (ms)")
    # A small margin, so that what sits exactly on the window's edges (an instant marker at
    # its start, an iteration's end) is not hidden under the axis frame.
    pad = span_ms * 0.004
    axes[-1].set_xlim(-pad, span_ms + pad)
    _layout(fig, lanes, top_kernels, _Colors(kcolor, acolor), h_plots)
    return fig


def _draw_boundaries(
    axes: Any, boundaries_ns: list[int] | None, iterations: pl.DataFrame | None, win: _Window
) -> None:
    """Dashed lines on every axis at the boundaries and iteration edges inside the window
    (iteration numbers go above the lanes)."""
    t0_ns, t1_ns = win.t0_ns, win.t1_ns
    lines = set(boundaries_ns or [])
    if iterations is not None and iterations.height:
        lines |= _draw_iterations(axes[0], iterations, win)
    for b in sorted(x for x in lines if t0_ns <= x <= t1_ns):
        for a in axes:
            a.axvline((b - t0_ns) / 1e6, color="gray", lw=0.6, ls="--")


def _layout(
    fig: Figure,
    lanes: pl.DataFrame,
    top_kernels: pl.DataFrame | None,
    colors: _Colors,
    h_plots: float,
) -> None:
    """The legends below everything, across the figure (they never narrow the lanes): the
    kernels' at the bottom, the annotations' above it, stacked by their measured heights; the
    figure grows by that much and the panels keep `h_plots` inches."""
    legends = []
    if colors.kernels:
        legends.append(_kernel_legend(fig, top_kernels, colors.kernels))
    if colors.annotations:
        legends.append(_annotation_legend(fig, lanes, colors.annotations))
    if not legends:
        fig.tight_layout()
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # type: ignore[no-untyped-call]
    heights = [leg.get_window_extent(renderer).height / fig.dpi + 0.05 for leg in legends]
    fig.set_figheight(h_plots + sum(heights))
    y = 0.0
    for leg, h in zip(legends, heights, strict=True):
        leg.set_bbox_to_anchor((0.5, y / fig.get_figheight()), transform=fig.transFigure)
        y += h
    fig.tight_layout(rect=(0.0, y / fig.get_figheight(), 1.0, 1.0))


@dataclass(frozen=True)
class _Window:
    t0_ns: int
    t1_ns: int
    # A raw interval narrower than a pixel would vanish (or fade to nothing when antialiased):
    # it is drawn `min_w` (one pixel, in ms) wide, as trace viewers do.
    min_w: float
    in_per_ms: float  # inches per ms: the lanes take about 72 % of the figure's width

    def ms(self, v: np.ndarray | pl.Series) -> np.ndarray:
        return (np.asarray(v, dtype=np.float64) - self.t0_ns) / 1e6


@dataclass(frozen=True)
class _Colors:
    kernels: dict[str, str]  # kernel name -> colour
    annotations: dict[str, str]  # annotation name, numbers dropped -> colour


def annotation_key(name: object) -> str:
    """An annotation's name as coloured and listed: `ProfilerStep#3` -> `ProfilerStep`,
    `aten::mm, seq = 12, op_id = 40` (PyTorch emit_nvtx) -> `aten::mm`."""
    text = _PYTORCH_IDS.sub("", str(name))
    return _NUMBERED.sub("", text) or text


def annotation_colors(lanes: pl.DataFrame) -> dict[str, str]:
    """A colour per annotation name, in order of appearance, when they have at most
    `len(ANNOTATION_COLORS)` names. More names in a binned lane (nsys/nvprof NVTX ranges, each
    bin drawn in its main range's colour; issue 32: one colour, no legend): the names with the
    most time get a colour each, the rest stay purple. Else none (all purple)."""
    drawn = lanes.filter(pl.col("activity") == "markers").drop_nulls("name")
    keys = dict.fromkeys(annotation_key(n) for n in drawn["name"].to_list())
    if len(keys) > len(ANNOTATION_COLORS):
        if not drawn["binned"].any():
            return {}
        ms = _annotation_ms(drawn)
        top = set(sorted(ms, key=lambda k: (-ms[k], k))[: len(ANNOTATION_COLORS) - 1])
        keys = {k: None for k in keys if k in top}
    return dict(zip(keys, ANNOTATION_COLORS, strict=False))


def _annotation_ms(drawn: pl.DataFrame) -> dict[str, float]:
    """Time per annotation name in the window; a binned lane's bin counts for its main
    annotation, its busy fraction of the bin."""
    ms: dict[str, float] = {}
    for n, a, b, f in drawn.select("name", "start_ns", "end_ns", "busy_ratio").iter_rows():
        key = annotation_key(n)
        ms[key] = ms.get(key, 0.0) + (b - a) * f / 1e6
    return ms


def _draw_markers(ax: Any, i: int, sub: pl.DataFrame, win: _Window, acolor: dict[str, str]) -> None:
    """A row of annotations: one bar each, coloured by name when `acolor` names them, labelled
    where the name fits; translucent when ranges nest in the row, so depth shows."""
    x = win.ms(sub["start_ns"])
    w = win.ms(sub["end_ns"]) - x
    names = sub["name"].to_list()
    inst = w == 0
    wide = np.maximum(w, win.min_w)
    order = np.argsort(x, kind="stable")
    nested = bool(np.any(x[order][1:] < (x + w)[order][:-1]))
    colors: str | list[str] = COLORS["markers"]
    if acolor:
        colors = [acolor.get(annotation_key(n), COLORS["markers"]) for n in names]
        colors = [c for c, keep in zip(colors, ~inst, strict=True) if keep]
    bars = list(zip(x[~inst], wide[~inst], strict=True))
    alpha = 0.35 if nested or not acolor else 0.9
    ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=colors, alpha=alpha, edgecolor="white", lw=0.5)
    if inst.any():  # instant markers: a tick, a zero-width bar would be invisible
        color = COLORS["markers"]
        ax.plot(x[inst], np.full(int(inst.sum()), i), "|", color=color, ms=12, mew=1.5)
    _label_markers(ax, i, x, w, names, win.in_per_ms)


def _draw_lanes(
    ax: Any, lanes: pl.DataFrame, lane_names: list[str], win: _Window, palette: _Colors
) -> bool:
    """One row per lane; returns whether any lane is binned."""
    any_binned = False
    labels = []
    kcolor = palette.kernels
    for i, name in enumerate(lane_names):
        sub = lanes.filter(pl.col("lane") == name)
        binned = bool(sub["binned"][0])
        any_binned |= binned
        act = sub["activity"][0]
        color = COLORS.get(act, "tab:green")
        x = win.ms(sub["start_ns"])
        w = win.ms(sub["end_ns"]) - x
        if act == "markers" and not binned:
            _draw_markers(ax, i, sub, win, palette.annotations)
        elif binned:
            rgba = np.array([to_rgba(color)] * sub.height)
            if act == "kernels" and kcolor:  # each bin in its main kernel's colour
                names = sub["name"].to_list()
                rgba = np.array([to_rgba(kcolor.get(str(n), OTHER_KERNELS)) for n in names])
            elif act == "markers" and palette.annotations:  # or its main annotation's
                keys = [annotation_key(n) for n in sub["name"].to_list()]
                rgba = np.array([to_rgba(palette.annotations.get(k, color)) for k in keys])
            rgba[:, 3] = sub["busy_ratio"].to_numpy()
            ax.broken_barh(list(zip(x, w, strict=True)), (i - 0.4, 0.8), facecolors=rgba)
        else:
            wide = np.maximum(w, win.min_w)
            colors: str | list[str] = color
            if act == "kernels" and kcolor:
                colors = [kcolor.get(str(n), OTHER_KERNELS) for n in sub["name"].to_list()]
            ax.broken_barh(list(zip(x, wide, strict=True)), (i - 0.4, 0.8), facecolors=colors)
            if act == "cpu ops":  # operator names where they fit: what the host was doing
                _label_markers(ax, i, x, w, sub["name"].to_list(), win.in_per_ms, "white")
        n = int(sub["interval_count"][0])
        labels.append(f"{name} ({n:,}{', binned' if binned else ''})")
    ax.set_yticks(range(len(lane_names)), labels, fontsize=7)
    ax.set_ylim(len(lane_names) - 0.5, -0.5)
    ax.set_ylabel("lane")
    return any_binned


def _draw_iterations(ax: Any, iterations: pl.DataFrame, win: _Window) -> set[int]:
    """The number of every iteration wide enough for it above the lanes; returns the
    boundaries to draw as dashed lines."""
    t0_ns, t1_ns = win.t0_ns, win.t1_ns
    lines: set[int] = set()
    span = iterations.filter((pl.col("start_ns") <= t1_ns) & (pl.col("end_ns") >= t0_ns))
    for n, a_ns, b_ns in span.select("iteration", "start_ns", "end_ns").iter_rows():
        lines |= {int(a_ns), int(b_ns)}
        mid = (max(a_ns, t0_ns) + min(b_ns, t1_ns)) / 2
        shown_ms = (min(b_ns, t1_ns) - max(a_ns, t0_ns)) / 1e6
        if shown_ms * win.in_per_ms < _text_in(len(f"iter {n}"), 7):
            continue  # too narrow for its number: the dashed lines still show it
        ax.text(
            (mid - t0_ns) / 1e6,
            -0.55,
            f"iter {n}",
            ha="center",
            va="bottom",
            fontsize=7,
            color="dimgray",
            clip_on=False,
        )
    return lines


def _draw_track(a: Any, samples: pl.DataFrame, col: str, label: str, win: _Window) -> None:
    by = "label" if "label" in samples.columns else "device_id"
    for (key,), sub in (
        samples.drop_nulls(col).sort("timestamp_ns").group_by([by], maintain_order=True)
    ):
        name = str(key) if by == "label" else f"GPU {key}"
        a.step(win.ms(sub["timestamp_ns"]), sub[col].to_numpy(), where="post", label=name)
    a.set_ylabel(label)
    a.legend(fontsize=6, loc="upper right")


def _kernel_colors(top: pl.DataFrame | None) -> dict[str, str]:
    if top is None or top.height == 0:
        return {}
    names = [str(n) for n in top["name"].to_list()[: len(KERNEL_COLORS)]]
    return dict(zip(names, KERNEL_COLORS, strict=False))


def _annotation_legend(fig: Figure, lanes: pl.DataFrame, acolor: dict[str, str]) -> Any:
    """The annotations' names and time in the window: every phase is named here, even where
    its bar is too narrow for its label."""
    from matplotlib.patches import Patch

    ms = _annotation_ms(lanes.filter(pl.col("activity") == "markers").drop_nulls("name"))
    handles = [Patch(color=c, label=f"{k} ({_ms(ms.get(k, 0.0))})") for k, c in acolor.items()]
    rest = sum(v for k, v in ms.items() if k not in acolor)
    if rest > 0:  # the names without a colour of their own, drawn purple
        handles.append(Patch(color=COLORS["markers"], label=f"other annotations ({_ms(rest)})"))
    # One row when the names fit across the figure (read left to right, in order of appearance).
    longest = _text_in(max(len(str(h.get_label())) for h in handles) + 4, 6.5)
    ncols = max(1, min(len(handles), int(fig.get_figwidth() * 0.95 / longest)))
    return fig.legend(
        handles=handles,
        title="annotations by name (total time in the window)",
        title_fontsize=7,
        fontsize=6.5,
        loc="lower center",
        ncols=ncols,
        frameon=False,
    )


def _ms(v: float) -> str:
    """A duration in ms with the digits that matter: `6,682 ms`, `351.5 ms`, `0.031 ms`."""
    return f"{v:,.0f} ms" if v >= 100 else f"{v:.1f} ms" if v >= 1 else f"{v:.3f} ms"


def _kernel_legend(fig: Figure, top: pl.DataFrame | None, kcolor: dict[str, str]) -> Any:
    from matplotlib.patches import Patch

    assert top is not None
    ms = dict(zip(top["name"].cast(pl.String).to_list(), top["total_ms"].to_list(), strict=True))
    # Raw bars and binned lanes alike (a bin in its main kernel's colour): swatches for all.
    handles = [
        Patch(color=c, label=f"{kernel_label(n)} ({ms.get(n, 0.0):,.2f} ms)")
        for n, c in kcolor.items()
    ]
    handles.append(Patch(color=OTHER_KERNELS, label="other kernels"))
    title = "kernels with the most time in the window"
    return fig.legend(
        handles=handles,
        title=title,
        title_fontsize=7,
        fontsize=6.5,
        loc="lower center",
        ncols=2,
        frameon=False,
    )


def _label_markers(
    ax: Any,
    row: int,
    x: np.ndarray,
    w: np.ndarray,
    names: list[Any],
    in_per_ms: float,
    color: str = "black",
) -> None:
    """A marker's name inside its bar when the bar is wide enough for it and the text clears
    the labels already placed in the lane (widest markers first: the outer range wins)."""
    placed: list[tuple[float, float]] = []
    order = np.argsort(-w, kind="stable")
    for j in order[:400]:
        name = names[j]
        if name is None or w[j] <= 0:
            continue
        text_ms = _text_in(len(str(name))) / in_per_ms
        if text_ms > w[j]:
            continue
        a, b = float(x[j]), float(x[j]) + text_ms
        if any(a < q and p < b for p, q in placed):
            continue
        placed.append((a, b))
        ax.text(
            a + 0.15 * text_ms / max(len(str(name)), 1),
            row,
            str(name),
            va="center",
            ha="left",
            fontsize=LABEL_PT,
            color=color,
            clip_on=True,
        )
