"""Stage 4 of `critical_path`: the longest path through a window's graph (`paths`, the entry),
with the trace's weights and, under what-if, the scaled ones after the carry is rebased on the
previous iteration's predicted ends.

The graph becomes plain arrays (`finish`: edge lists, predecessor lists by destination, Kahn's
topological order) and the longest path a dynamic program over that order, not networkx: on the
ResNet-50 trace the same graph and path took 2-3x longer through `networkx.DiGraph` (building its
dict-of-dicts and `topological_sort` dominated); see docs/critical-path.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import NotAnswerable
from .events import CARRY, CATEGORIES, Window
from .graph import Built

# GPU event (start, end) -> its predicted end as (window start, ns after it). Kept apart: epoch
# times in ns (~1.7e18) are past float64's exact integers (2**53), so `start + ns` as a float is
# off by up to 256 ns, and a factor of 1 would not give the trace's path back.
Ends = dict[tuple[int, int], tuple[int, float]]


def finish(b: Built) -> None:
    """Edge arrays, predecessor lists (CSR by destination) and a topological order (Kahn)."""
    n = b.source + 1
    uv = np.array(list(b.edges), dtype=np.int64).reshape(-1, 2)
    vals = np.array(list(b.edges.values()), dtype=np.float64).reshape(-1, 4)
    b.src, b.dst = uv[:, 0].copy(), uv[:, 1].copy()
    b.w, b.w2 = vals[:, 0].copy(), vals[:, 1].copy()
    b.cat, b.ref = vals[:, 2].astype(np.int64), vals[:, 3].astype(np.int64)
    by_dst = np.argsort(b.dst, kind="stable")
    b.pred_edge = by_dst.tolist()
    b.pred_ptr = np.searchsorted(b.dst[by_dst], np.arange(n + 1)).tolist()
    by_src = np.argsort(b.src, kind="stable")
    succ = b.dst[by_src].tolist()
    sptr = np.searchsorted(b.src[by_src], np.arange(n + 1)).tolist()
    indeg = np.bincount(b.dst, minlength=n).tolist()
    present = np.zeros(n, dtype=bool)
    present[b.src] = True
    present[b.dst] = True
    present[b.source] = True
    stack = [v for v in np.flatnonzero(present).tolist() if indeg[v] == 0]
    order: list[int] = []
    while stack:
        u = stack.pop()
        order.append(u)
        for v in succ[sptr[u] : sptr[u + 1]]:
            indeg[v] -= 1
            if indeg[v] == 0:
                stack.append(v)
    if len(order) != int(present.sum()):  # pragma: no cover - edges go forward in time
        raise NotAnswerable(
            "the dependency graph has a cycle (events out of order beyond clock rounding)"
        )
    b.order = order


def rebase_carry(b: Built, ends: dict[int, tuple[int, float]]) -> None:
    """What-if carry: a carry edge from an earlier GPU event whose predicted end is known
    (`ends`: global id -> (its window's start, ns in the source's clock; ns after it)) gets `w2`
    from it. The window starts' difference is taken first, in integers: exact."""
    if not b.carry:
        return
    pos = {int(v): i for i in np.flatnonzero(b.src == b.source).tolist() for v in [b.dst[i]]}
    for node, gid, extra in b.carry:
        if gid in ends and node in pos:
            lo, ns = ends[gid]
            b.w2[pos[node]] = max(0.0, (lo - b.lo) + ns + extra)


@dataclass(frozen=True)
class Path:
    """A longest path: its length (ns, float under what-if weights), the ns per category,
    the path's edges (indices into the edge arrays) in order and every node's distance from
    the source (NaN: not reached)."""

    length: float
    split: tuple[float, ...]
    edges: tuple[int, ...]
    dist: list[float]


def longest(b: Built, weight: str = "w") -> Path:
    """The longest path from the source: dynamic programming in topological order."""
    w = (b.w if weight == "w" else b.w2).tolist()
    src = b.src.tolist()
    ptr, pe = b.pred_ptr, b.pred_edge
    nan = float("nan")
    dist = [nan] * (b.source + 1)
    via = [-1] * (b.source + 1)
    dist[b.source] = 0.0
    for v in b.order:
        best = nan
        for e in pe[ptr[v] : ptr[v + 1]]:
            d = dist[src[e]] + w[e]
            if (d > best or best != best) and d == d:
                best, via[v] = d, e
        if best == best and v != b.source:
            dist[v] = best
    sink = b.source
    for v in b.order:
        if dist[v] == dist[v] and dist[v] > dist[sink]:
            sink = v
    edges: list[int] = []
    v = sink
    while via[v] >= 0:
        edges.append(via[v])
        v = src[via[v]]
    edges.reverse()
    split = [0.0] * len(CATEGORIES)
    cats = b.cat.tolist()
    dst = b.dst.tolist()
    for e in edges:
        rest = b.carry_rest.get(dst[e]) if cats[e] == CARRY else None
        if rest is not None:
            part = min(float(rest[0]), w[e])
            split[rest[1]] += part
            split[CARRY] += w[e] - part
        else:
            split[cats[e]] += w[e]
    return Path(length=dist[sink], split=tuple(split), edges=tuple(edges), dist=dist)


@dataclass(frozen=True)
class Paths:
    """A window's longest paths: `base` (the trace's weights), `new` (the what-if's; None
    without one) and `ends`, its GPU events' predicted ends (the next iteration's carry)."""

    base: Path
    new: Path | None
    ends: Ends


def _carry_ends(win: Window, ends: Ends) -> dict[int, tuple[int, float]]:
    """`ends` keyed by this window's GPU ids, for `rebase_carry`."""
    if not ends:
        return {}
    ev = win.ev
    out: dict[int, tuple[int, float]] = {}
    for gid, (s, e) in enumerate(zip(ev.g_start.tolist(), ev.g_end.tolist(), strict=True)):
        if (s, e) in ends:
            out[gid] = ends[(s, e)]
    return out


def _predicted_ends(win: Window, built: Built, path: Path) -> Ends:
    out: Ends = {}
    for k, gid in enumerate(win.sl.gids.tolist()):
        d = path.dist[2 * (built.n_host + k) + 1]
        if d == d:  # reached
            out[(int(win.ev.g_start[gid]), int(win.ev.g_end[gid]))] = (win.lo, d)
    return out


def paths(win: Window, built: Built, ends: Ends, what_if: bool) -> Paths:
    """The stage's entry: the window's longest path, and with `what_if` the one under the
    scaled weights, its carry starting from `ends` (the previous iteration's predicted ends of
    the GPU events it waits for; empty: the carry keeps its length)."""
    finish(built)
    base = longest(built, "w")
    if not what_if:
        return Paths(base, None, {})
    rebase_carry(built, _carry_ends(win, ends))
    new = longest(built, "w2")
    return Paths(base, new, _predicted_ends(win, built, new))
