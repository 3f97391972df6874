"""The dependency graph of one iteration and its longest path (`critical_path`'s engine).

Nodes are the start and the end of every event of the iteration (host operators or NVTX ranges,
runtime calls, kernels, copies) plus one source node at the iteration's start. Every edge carries
two weights in ns: `w`, the time the trace shows, and `w2`, the time under the what-if factors.
The edges, in the words of the module docstring of `critical_path`: thread order (consecutive
time points of one thread, the segment owned by the innermost open event), a GPU event's
duration, launch (call start -> kernel start), stream order (previous event's end -> start), an
inferred cross-stream wait, a synchronization wait (GPU event's end -> blocking call's end), and
edges from the source (a thread's first event; the wait on an earlier iteration's work).

Weights are chosen so that replaying the graph with `w` puts every node back at its own time:
of a GPU event's incoming edges the *binding* one (the latest-ready predecessor) carries the
exact gap, the others a floor that is never more. So the longest path with `w` ends at the
iteration's last event and its length is `last end - iteration start`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
NONE = np.iinfo(np.int64).min  # "no such time" in the int64 arrays below

# Edge categories, in the order of the result's split columns.
CATEGORIES = (
    "gpu_compute",
    "gpu_comm",
    "gpu_memory",
    "host",
    "launch",
    "sync",
    "idle",
    "carry",
)
GPU_COMPUTE, GPU_COMM, GPU_MEMORY, HOST, LAUNCH, SYNC, IDLE, CARRY = range(8)

# A GPU event that starts this much after all its known predecessors were ready waited for
# something else: the latest event of another stream of its device that ended before it.
WAIT_TOLERANCE_NS = 5_000


@dataclass
class HostSlice:
    """Host events of one iteration, sorted by (thread, start, longer first).

    `thread`: a group number per (process, thread); `end` is clipped to the parent's end;
    `wait_gpu`: for a blocking call, the local index of the GPU event it waited for (-1: none);
    `wait_end`: that event's end, also when it lies outside the iteration (then a carry edge);
    `factor`: the product of the `op:` what-if factors matching the event or an enclosing one
    (filled in by `build`)."""

    thread: I64
    process: I64
    start: I64
    end: I64
    is_call: npt.NDArray[np.bool_]
    is_sync: npt.NDArray[np.bool_]
    wait_gpu: I64
    wait_end: I64
    own_factor: npt.NDArray[np.float64]
    wait_global: I64


@dataclass
class GpuSlice:
    """GPU events of one iteration: `cat` (GPU_COMPUTE, GPU_COMM or GPU_MEMORY), `call` (local
    host index of the launch call, -1: none in the iteration), `prev` (local index of the previous
    event on the stream, -1: none here) with `prev_end` (its end, NONE: no previous event),
    `wait` / `wait_end` (the latest event of another stream ended before the start) and `factor`
    (the what-if factor of the duration)."""

    start: I64
    end: I64
    cat: I64
    call: I64
    prev: I64
    prev_end: I64
    wait: I64
    wait_end: I64
    factor: npt.NDArray[np.float64]
    prev_global: I64
    wait_global: I64


@dataclass
class Built:
    """The graph (edge attributes `w`, `w2`, `cat`, `ref`) and its source node. `ref` is the
    event an edge is charged to: host index, or `n_host + gpu index`, -1 for none."""

    graph: Any
    source: int
    n_host: int
    edges: dict[tuple[int, int], tuple[int, float, int, int]] = field(default_factory=dict)
    has_in: set[int] = field(default_factory=set)
    parent: list[int] = field(default_factory=list)
    # carry edges: (node, global id of the earlier GPU event, ns from its end to the node)
    carry: list[tuple[int, int, int]] = field(default_factory=list)


def _add(b: Built, u: int, v: int, w: int, w2: float, cat: int, ref: int) -> None:
    old = b.edges.get((u, v))
    b.has_in.add(v)
    if old is None or w > old[0]:
        b.edges[(u, v)] = (w, w2, cat, ref)


def _nest(b: Built, h: HostSlice) -> None:
    """Each host event's parent (innermost enclosing event on its thread); a child that outlives
    its parent is cut at the parent's end."""
    b.parent = [-1] * h.start.size
    stack: list[int] = []
    cur = -1
    for i in range(h.start.size):
        if int(h.thread[i]) != cur:
            cur, stack = int(h.thread[i]), []
        while stack and h.end[stack[-1]] <= h.start[i]:
            stack.pop()
        if stack:
            b.parent[i] = stack[-1]
            if h.end[i] > h.end[stack[-1]]:
                h.end[i] = h.end[stack[-1]]
        stack.append(i)


class _OtherThreads:
    """The latest-ending host event of another thread of the same process before a time."""

    def __init__(self, h: HostSlice) -> None:
        self.lanes: dict[int, tuple[I64, I64]] = {}
        self.h = h
        for t in np.unique(h.thread).tolist():
            first = int(np.flatnonzero(h.thread == t)[0])
            mask = (h.thread != t) & (h.process == h.process[first])
            ids = np.flatnonzero(mask)
            order = np.argsort(h.end[ids], kind="stable")
            self.lanes[t] = (h.end[ids][order], ids[order])

    def before(self, i: int) -> int:
        ends, ids = self.lanes[int(self.h.thread[i])]
        k = int(np.searchsorted(ends, self.h.start[i], side="left"))
        return int(ids[k - 1]) if k > 0 else -1


def _host_edges(b: Built, h: HostSlice, lo: int) -> None:
    """Thread order: consecutive time points of each thread, owned by the innermost open event.
    After a gap outside every event, the next event waits for its own thread or for the
    latest-ending event of another thread of its process, whichever was ready last."""
    _nest(b, h)
    others = _OtherThreads(h)
    cur = -1
    stack: list[int] = []
    fac: list[float] = []
    prev_node, prev_t = b.source, lo

    def close(j: int) -> None:
        nonlocal prev_node, prev_t
        seg = int(h.end[j]) - prev_t
        if h.is_sync[j] and h.wait_end[j] != NONE:
            _add(b, prev_node, 2 * j + 1, 0, 0.0, SYNC, j)  # the call waits: see `_sync_edges`
        else:
            cat = SYNC if h.is_sync[j] else HOST
            _add(b, prev_node, 2 * j + 1, seg, seg * fac[-1], cat, j)
        prev_node, prev_t = 2 * j + 1, int(h.end[j])

    for i in range(h.start.size):
        if int(h.thread[i]) != cur:
            while stack:
                close(stack.pop())
                fac.pop()
            cur, prev_node, prev_t = int(h.thread[i]), b.source, lo
        s = int(h.start[i])
        while stack and int(h.end[stack[-1]]) <= s:
            close(stack.pop())
            fac.pop()
        seg = s - prev_t
        if stack:
            _add(b, prev_node, 2 * i, seg, seg * fac[-1], HOST, stack[-1])
        else:
            o = others.before(i)
            if o >= 0 and int(h.end[o]) > prev_t:
                _add(b, prev_node, 2 * i, 0, 0.0, IDLE, -1)
                gap = s - int(h.end[o])
                _add(b, 2 * o + 1, 2 * i, gap, float(gap), IDLE, -1)
            else:
                _add(b, prev_node, 2 * i, seg, float(seg), IDLE, -1)
        prev_node, prev_t = 2 * i, s
        stack.append(i)
        fac.append((fac[-1] if fac else 1.0) * float(h.own_factor[i]))
    while stack:
        close(stack.pop())
        fac.pop()


def _sync_edges(b: Built, h: HostSlice, g: GpuSlice) -> None:
    """A blocking call ends when the GPU event it waited for ends (plus the wake-up latency)."""
    for j in np.flatnonzero(h.is_sync & (h.wait_end != NONE)).tolist():
        lag = int(h.end[j]) - int(h.wait_end[j])
        k = int(h.wait_gpu[j])
        if k >= 0:
            _add(b, 2 * (b.n_host + k) + 1, 2 * j + 1, lag, float(lag), SYNC, j)
        else:
            w = int(h.end[j]) - int(b.graph.graph["lo"])
            _add(b, b.source, 2 * j + 1, w, float(w), CARRY, j)
            b.carry.append((2 * j + 1, int(h.wait_global[j]), lag))


def _gpu_edges(b: Built, h: HostSlice, g: GpuSlice, lo: int, launch_factor: float) -> None:
    """Duration, launch, stream-order and cross-stream wait edges of each GPU event."""
    for k in range(g.start.size):
        node = 2 * (b.n_host + k)
        s, e = int(g.start[k]), int(g.end[k])
        ref = b.n_host + k
        cat = int(g.cat[k])
        _add(b, node, node + 1, e - s, (e - s) * float(g.factor[k]), cat, ref)
        c = int(g.call[k])
        ready_call = int(h.end[c]) if c >= 0 else NONE
        ready_prev = int(g.prev_end[k])
        ready = max(ready_call, ready_prev)
        wait = int(g.wait_end[k])
        waited = wait != NONE and wait > ready and s - ready > WAIT_TOLERANCE_NS
        if waited:
            ready = wait
        if c >= 0:
            cs = int(h.start[c])
            w = s - cs if ready == ready_call else min(int(h.end[c]) - cs, s - cs)
            _add(b, 2 * c, node, w, w * launch_factor, LAUNCH, c)
        if ready_prev != NONE:
            w = s - ready_prev if ready == ready_prev else min(0, s - ready_prev)
            p = int(g.prev[k])
            if p >= 0:
                _add(b, 2 * (b.n_host + p) + 1, node, w, float(w), IDLE, ref)
            elif ready == ready_prev and ready_prev > lo:
                _add(b, b.source, node, s - lo, float(s - lo), CARRY, ref)
                b.carry.append((node, int(g.prev_global[k]), s - ready_prev))
        if waited:
            q = int(g.wait[k])
            src = 2 * (b.n_host + q) + 1 if q >= 0 else b.source
            w = s - wait if q >= 0 else s - lo
            _add(b, src, node, w, float(w), SYNC if q >= 0 else CARRY, ref)
            if q < 0:
                b.carry.append((node, int(g.wait_global[k]), s - wait))
        if node not in b.has_in:
            _add(b, b.source, node, s - lo, float(s - lo), IDLE, ref)


def build(h: HostSlice, g: GpuSlice, lo: int, launch_factor: float = 1.0) -> Built:
    """The iteration's graph (a networkx DiGraph) from its host and GPU events."""
    n_host = int(h.start.size)
    graph = nx.DiGraph(lo=lo)
    b = Built(graph=graph, source=2 * (n_host + int(g.start.size)), n_host=n_host)
    graph.add_node(b.source)
    _host_edges(b, h, lo)
    _sync_edges(b, h, g)
    _gpu_edges(b, h, g, lo, launch_factor)
    graph.add_edges_from(
        (u, v, {"w": w, "w2": w2, "cat": cat, "ref": ref})
        for (u, v), (w, w2, cat, ref) in b.edges.items()
    )
    return b


def rebase_carry(b: Built, ends: dict[int, float]) -> None:
    """What-if carry: a carry edge from an earlier GPU event whose predicted end is known
    (`ends`: global id -> predicted end, ns in the source's clock) gets `w2` from it."""
    lo = int(b.graph.graph["lo"])
    for node, gid, extra in b.carry:
        if gid in ends:
            b.graph.edges[b.source, node]["w2"] = max(0.0, ends[gid] + extra - lo)


@dataclass(frozen=True)
class Path:
    """A longest path: its length (ns, float under what-if weights), the ns per category,
    the path's edges as (u, v) in order and every node's distance from the source."""

    length: float
    split: tuple[float, ...]
    edges: tuple[tuple[int, int], ...]
    dist: dict[int, float]


def longest(b: Built, weight: str = "w") -> Path:
    """The longest path from the source (dynamic programming in topological order)."""
    g = b.graph
    dist: dict[int, float] = {b.source: 0.0}
    pred: dict[int, int] = {}
    try:
        order = list(nx.topological_sort(g))
    except nx.NetworkXUnfeasible as e:  # pragma: no cover - guarded by construction
        raise AssertionError("critical-path graph has a cycle") from e
    for v in order:
        best: float | None = None
        for u, attrs in g.pred[v].items():
            du = dist.get(u)
            if du is None:
                continue
            d = du + attrs[weight]
            if best is None or d > best:
                best, pred[v] = d, u
        if best is not None:
            dist[v] = best
    sink = max(dist, key=lambda n: (dist[n], n != b.source))
    edges: list[tuple[int, int]] = []
    v = sink
    while v in pred:
        edges.append((pred[v], v))
        v = pred[v]
    edges.reverse()
    split = [0.0] * len(CATEGORIES)
    for u, v in edges:
        a = g.edges[u, v]
        split[a["cat"]] += a[weight]
    return Path(length=dist[sink], split=tuple(split), edges=tuple(edges), dist=dist)
