"""Stage 5 of `critical_path`: a window's path as the result's rows (`rows`, the entry): the
path's time split by the category of its edges (`gpu_compute_ms` ... `carry_ms`, adding up to
`path_ms`), the GPU share without the carry (`gpu_pct`) and, with `by_event`, the path's edges
charged to their events (one row per event and category, in order of first appearance)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from .events import CARRY, CATEGORIES, GPU_MEMORY, Slice, SourceEvents, Window
from .graph import Built
from .path import Path, Paths

SPLIT_COLUMNS = tuple(f"{c}_ms" for c in CATEGORIES)

# One row of the path's events (`describe`)
EVENT_SCHEMA = {
    "category": pl.String,
    "kind": pl.String,
    "name": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "process_id": pl.Int64,
    "thread_id": pl.Int64,
    "device_id": pl.Int64,
    "stream_id": pl.Int64,
    "path_ms": pl.Float64,
    "launched_by": pl.String,
}


def split(path: Path) -> dict[str, float]:
    return {c: ns / 1e6 for c, ns in zip(SPLIT_COLUMNS, path.split, strict=True)}


def gpu_pct(path: Path) -> float | None:
    """GPU share of the iteration's own path (the carry left out)."""
    own = path.length - path.split[CARRY]
    return 100.0 * sum(path.split[: GPU_MEMORY + 1]) / own if own > 0 else None


def describe(
    ev: SourceEvents, sl: Slice, b: Built, ref: int, cat: int, ns: float
) -> tuple[Any, ...]:
    """One `EVENT_SCHEMA` row: the event `ref` (local) charged `ns` of category `cat`."""
    category = CATEGORIES[cat]
    if ref < 0:
        return (category, None, None, None, None, None, None, None, None, ns / 1e6, None)
    if ref < b.n_host:
        i = int(sl.hids[ref])
        return (
            category,
            ev.h_kind[i],
            ev.h_name[i],
            int(ev.h_start[i]),
            int(ev.h_end[i]),
            int(ev.h_pid[i]) if ev.h_pid[i] >= 0 else None,
            ev.h_tid[i],
            None,
            None,
            ns / 1e6,
            None,
        )
    k = ref - b.n_host
    i = int(sl.gids[k])
    c = int(sl.gpu.call[k])
    p = b.parent[c] if c >= 0 else -1
    by = ev.h_name[int(sl.hids[p])] if p >= 0 else None
    return (
        category,
        ev.g_kind[i],
        ev.g_name[i],
        int(ev.g_start[i]),
        int(ev.g_end[i]),
        None,
        None,
        ev.g_device[i],
        ev.g_stream[i],
        ns / 1e6,
        by,
    )


def charged(b: Built, path: Path, weight: str) -> dict[tuple[int, int], float]:
    """The path's ns per (event, category), in order of first appearance."""
    acc: dict[tuple[int, int], float] = {}
    w = b.w if weight == "w" else b.w2
    for e in path.edges:
        key = (int(b.ref[e]), int(b.cat[e]))
        acc[key] = acc.get(key, 0.0) + float(w[e])
    return acc


def _path_events(win: Window, b: Built, path: Path, weight: str, scenario: str) -> pl.DataFrame:
    """The path's edges charged to their events (edges of no length, such as a stream-order
    edge with no gap, left out), tagged with the window and the scenario."""
    acc = charged(b, path, weight)
    rows = [describe(win.ev, win.sl, b, ref, cat, ns) for (ref, cat), ns in acc.items() if ns != 0]
    total = path.length or 1.0
    df = pl.DataFrame(rows, schema=EVENT_SCHEMA, orient="row")
    df = df.with_columns((pl.col("path_ms") * 1e6 / total * 100.0).alias("share_pct"))
    return df.select(
        pl.lit(win.ev.source_id).alias("source_id"),
        pl.lit(win.iteration, dtype=pl.Int64).alias("iteration"),
        pl.lit(scenario).alias("scenario"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("step"),
        pl.all(),
    )


@dataclass(frozen=True)
class Rows:
    """A window's row (its path and split), its path events (`frames`: the trace's, then the
    what-if's) and the split of the what-if path (None without one)."""

    row: dict[str, Any]
    frames: list[pl.DataFrame]
    new_split: dict[str, float] | None


def rows(win: Window, built: Built, paths: Paths, by_event: bool) -> Rows:
    """The stage's entry: the window's row and, with `by_event`, its path events."""
    base, new = paths.base, paths.new
    row: dict[str, Any] = {
        "source_id": win.ev.source_id,
        "iteration": win.iteration,
        "start_ns": win.lo,
        "duration_ms": (win.hi - win.lo) / 1e6,
        "event_count": int(win.sl.host.start.size + win.sl.gpu.start.size),
        "path_ms": base.length / 1e6,
        **split(base),
        "gpu_pct": gpu_pct(base),
    }
    frames = [_path_events(win, built, base, "w", "trace")] if by_event else []
    if new is not None and by_event:
        frames.append(_path_events(win, built, new, "w2", "what_if"))
    return Rows(row, frames, None if new is None else split(new))
