"""`critical_path` one iteration at a time: the sources, each source's windows, and the frames
cut to one window, so that only one iteration's events are in memory at once (over a store, the
cuts are predicates pushed into the Parquet scans).

A window is an iteration `[start, end)` (the iterations table) or, for a source without
iterations, its whole span. Host events (operators, annotations, NVTX ranges, runtime calls) are
the window's when they start in it; GPU events are read from those that end after the window's
start to the end of the next window (work launched in a step may run on into the next one; the
ones ending after the start are the earlier work the step may wait on).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from .frames import SourceEvents, window_events

Frame = pl.DataFrame | pl.LazyFrame
Window = tuple[int | None, int, int, int | None]  # iteration, lo, hi, GPU read limit


@dataclass(frozen=True)
class Inputs:
    kernels: pl.LazyFrame
    memcpy: pl.LazyFrame
    api_calls: pl.LazyFrame
    ops: pl.LazyFrame
    markers: pl.LazyFrame

    @classmethod
    def of(cls, *frames: Frame) -> Inputs:
        return cls(*(f.lazy() for f in frames))

    def all(self) -> tuple[pl.LazyFrame, ...]:
        return (self.kernels, self.memcpy, self.api_calls, self.ops, self.markers)


def sources(inp: Inputs) -> list[str]:
    ids: set[str] = set()
    for f in inp.all():
        ids |= set(f.select(pl.col("source_id").unique()).collect().to_series().to_list())
    return sorted(ids)


def _span(inp: Inputs, sid: str) -> tuple[int, int] | None:
    lo: list[int] = []
    hi: list[int] = []
    for f in inp.all():
        r = (
            f.filter(pl.col("source_id") == sid)
            .select(pl.col("start_ns").min(), pl.col("end_ns").max())
            .collect()
            .row(0)
        )
        if r[0] is not None and r[1] is not None:
            lo.append(int(r[0]))
            hi.append(int(r[1]))
    return (min(lo), max(hi) + 1) if lo else None


def windows(inp: Inputs, iterations: pl.DataFrame, sid: str, only: int | None) -> list[Window]:
    """The source's windows in order (one iteration with `only`)."""
    its = iterations.filter(pl.col("source_id") == sid).drop_nulls(["start_ns", "end_ns"])
    its = its.unique("iteration", keep="first").sort("start_ns")
    if its.height == 0:
        span = _span(inp, sid) if only is None else None
        return [] if span is None else [(None, span[0], span[1], span[1])]
    rows = its.select("iteration", "start_ns", "end_ns").rows()
    out: list[Window] = []
    for i, (it, lo, hi) in enumerate(rows):
        nxt = int(rows[i + 1][2]) if i + 1 < len(rows) else None
        if only is None or it == only:
            out.append((int(it), int(lo), int(hi), nxt))
    return out


def events(inp: Inputs, sid: str, w: Window, wi: object, orphans: bool) -> SourceEvents | None:
    """The window's events (see the module docstring)."""
    _, lo, hi, gpu_hi = w
    mine = pl.col("source_id") == sid
    host = mine & (pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi)
    gpu = mine & (pl.col("end_ns") >= lo)
    launched = mine  # the calls that launched the GPU events read: all before the last's start
    if gpu_hi is not None:
        gpu = gpu & (pl.col("start_ns") < gpu_hi)
        launched = launched & (pl.col("start_ns") < gpu_hi)
    return window_events(
        inp.kernels.filter(gpu),
        inp.memcpy.filter(gpu),
        inp.api_calls.filter(host),
        inp.ops.filter(host),
        inp.markers.filter(host),
        wi,  # type: ignore[arg-type]
        orphans=orphans,
        all_calls=inp.api_calls.filter(launched),
    )


def has_calls(inp: Inputs, sid: str) -> bool:
    n = inp.api_calls.filter(pl.col("source_id") == sid).select(pl.len()).collect().item()
    return bool(n)


def unlaunched(inp: Inputs, sid: str) -> tuple[int, int]:
    """(GPU events with a correlation id that no API call of the source has, timed GPU events)
    of a source: launched before the capture window or by an untraced thread. They are on no
    iteration's path (no launch call places them in one); the earlier work of the ops after
    them on their stream."""
    calls = (
        inp.api_calls.filter((pl.col("source_id") == sid) & pl.col("correlation_id").is_not_null())
        .select("correlation_id")
        .unique()
    )
    n = total = 0
    for f in (inp.kernels, inp.memcpy):
        g = f.filter((pl.col("source_id") == sid) & pl.col("start_ns").is_not_null())
        total += g.select(pl.len()).collect().item()
        lost = g.filter(pl.col("correlation_id").is_not_null()).join(
            calls, on="correlation_id", how="anti"
        )
        n += lost.select(pl.len()).collect().item()
    return n, total


def iterate(
    inp: Inputs, iterations: pl.DataFrame, only: int | None, wi: object
) -> Iterator[tuple[str, Window, SourceEvents]]:
    """(source, window, its events) for every window of every source, in order."""
    for sid in sources(inp):
        orphans = not has_calls(inp, sid)
        for w in windows(inp, iterations, sid, only):
            ev = events(inp, sid, w, wi, orphans)
            if ev is not None:
                yield sid, w, ev
