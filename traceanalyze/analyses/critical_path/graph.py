"""Stage 3 of `critical_path`: the dependency graph of one window (`build`, the entry).

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
iteration's last event and its length is `last end - iteration start` (`path`).

The graph is an edge dict here; `path.finish` turns it into arrays (not networkx: see `path`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .events import (
    CARRY,
    HOST,
    I64,
    IDLE,
    LAUNCH,
    NONE,
    SYNC,
    GpuSlice,
    HostSlice,
)

# A GPU event that starts this much after all its known predecessors were ready waited for
# something else: the latest event of another stream of its device that ended before it.
WAIT_TOLERANCE_NS = 5_000


@dataclass
class Built:
    """The graph: `edges` maps (u, v) to (w, w2, cat, ref); `ref` is the event an edge is
    charged to (host index, or `n_host + gpu index`; -1 for none). Nodes are `2 * event` (start)
    and `2 * event + 1` (end), the source is the last id. `path.finish` turns the edges into arrays
    (`src`, `dst`, `w`, `w2`, `cat`, `ref`) and a topological order of the nodes."""

    lo: int
    source: int
    n_host: int
    edges: dict[tuple[int, int], tuple[int, float, int, int]] = field(default_factory=dict)
    has_in: set[int] = field(default_factory=set)
    parent: list[int] = field(default_factory=list)
    # carry edges: (node, global id of the earlier GPU event, ns from its end to the node)
    carry: list[tuple[int, int, int]] = field(default_factory=list)
    # per node a carry edge enters: (ns of it after the earlier work ended, its category); that
    # much of the edge is charged there, not to carry (`path.longest`)
    carry_rest: dict[int, tuple[int, int]] = field(default_factory=dict)
    src: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    dst: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    w: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    w2: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    cat: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ref: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    order: list[int] = field(default_factory=list)
    pred_ptr: list[int] = field(default_factory=list)
    pred_edge: list[int] = field(default_factory=list)


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


class _RuleFactors(dict[int, float]):
    """Rule bits -> the product of those rules' factors: each rule once, however deeply the
    events it matches nest (`HostSlice.own_rules`)."""

    def __init__(self, factors: tuple[float, ...]) -> None:
        super().__init__()
        self.factors = factors

    def __missing__(self, bits: int) -> float:
        f = 1.0
        for r, rf in enumerate(self.factors):
            if bits >> r & 1:
                f *= rf
        self[bits] = f
        return f


def _host_edges(b: Built, h: HostSlice, lo: int) -> None:
    """Thread order: consecutive time points of each thread, owned by the innermost open event.
    After a gap outside every event, the next event waits for its own thread or for the
    latest-ending event of another thread of its process, whichever was ready last."""
    _nest(b, h)
    others = _OtherThreads(h)
    cur = -1
    stack: list[int] = []
    fac: list[float] = []  # per open event, the factor inside it
    rules: list[int] = []  # per open event, the `op:` rules matching it or an enclosing one
    factor_of = _RuleFactors(h.rule_factors)

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
                rules.pop()
            cur, prev_node, prev_t = int(h.thread[i]), b.source, lo
        s = int(h.start[i])
        while stack and int(h.end[stack[-1]]) <= s:
            close(stack.pop())
            fac.pop()
            rules.pop()
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
        rules.append((rules[-1] if rules else 0) | int(h.own_rules[i]))
        fac.append(factor_of[rules[-1]])
    while stack:
        close(stack.pop())
        fac.pop()
        rules.pop()


def _sync_edges(b: Built, h: HostSlice, g: GpuSlice) -> None:
    """A blocking call ends when the GPU event it waited for ends (plus the wake-up latency)."""
    for j in np.flatnonzero(h.is_sync & (h.wait_end != NONE)).tolist():
        lag = int(h.end[j]) - int(h.wait_end[j])
        k = int(h.wait_gpu[j])
        if k >= 0:
            _add(b, 2 * (b.n_host + k) + 1, 2 * j + 1, lag, float(lag), SYNC, j)
        elif not _earlier(h.wait_launch, j, b.lo):
            # waited for work outside the graph launched in this iteration: the call's own time
            w = int(h.end[j]) - int(h.start[j])
            _add(b, 2 * j, 2 * j + 1, w, float(w), SYNC, j)
        else:
            w = int(h.end[j]) - b.lo
            _add(b, b.source, 2 * j + 1, w, float(w), CARRY, j)
            b.carry.append((2 * j + 1, int(h.wait_global[j]), lag))
            _rest(b, 2 * j + 1, lag, SYNC)


def _rest(b: Built, node: int, ns: int, cat: int) -> None:
    """Record that a carry edge into `node` lasts `ns` past the end of the earlier work it waits
    for: no carry is longer than that work (a GPU op whose launch call is not in the trace
    started `ns` after it for reasons the trace does not show: idle)."""
    old = b.carry_rest.get(node)
    if old is None or ns < old[0]:
        b.carry_rest[node] = (max(ns, 0), cat)


def _earlier(launch: I64 | None, k: int, lo: int) -> bool:
    """Whether an event outside the graph was launched before the iteration's start (`lo`)."""
    return launch is None or int(launch[k]) < lo


def _gpu_edges(b: Built, h: HostSlice, g: GpuSlice, lo: int, launch_factor: float) -> None:
    """Duration, launch, stream-order and cross-stream wait edges of each GPU event."""
    for k in range(g.start.size):
        node = 2 * (b.n_host + k)
        s, e = int(g.start[k]), int(g.end[k])
        _add(b, node, node + 1, e - s, (e - s) * float(g.factor[k]), int(g.cat[k]), b.n_host + k)
        c = int(g.call[k]) if g.launch_edge is None or g.launch_edge[k] else -1
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
            _stream_edge(b, h, g, k, ready == ready_prev, lo)
        if waited:
            _wait_edge(b, h, g, k, lo)
        if node not in b.has_in:
            _add(b, b.source, node, s - lo, float(s - lo), IDLE, b.n_host + k)


def _stream_edge(b: Built, h: HostSlice, g: GpuSlice, k: int, binding: bool, lo: int) -> None:
    """The previous event on the stream -> event k (the gap, idle); a previous event outside
    the graph is a carry when it was launched before the iteration, else unknown work."""
    node, s, ready_prev = 2 * (b.n_host + k), int(g.start[k]), int(g.prev_end[k])
    w = s - ready_prev if binding else min(0, s - ready_prev)
    p = int(g.prev[k])
    if p >= 0:
        _add(b, 2 * (b.n_host + p) + 1, node, w, float(w), IDLE, b.n_host + k)
    elif binding and ready_prev > lo and _earlier(g.prev_launch, k, lo):
        _add(b, b.source, node, s - lo, float(s - lo), CARRY, b.n_host + k)
        b.carry.append((node, int(g.prev_global[k]), s - ready_prev))
        _rest(b, node, s - ready_prev, IDLE)
    elif binding and ready_prev > lo:
        _unknown(b, h, g, k, lo)


def _wait_edge(b: Built, h: HostSlice, g: GpuSlice, k: int, lo: int) -> None:
    """The cross-stream wait of event k: from the waited-for event's end (sync), a carry when
    that event is outside the graph and was launched before the iteration, else unknown work."""
    node, s, wait = 2 * (b.n_host + k), int(g.start[k]), int(g.wait_end[k])
    q = int(g.wait[k])
    if q >= 0:
        _add(b, 2 * (b.n_host + q) + 1, node, s - wait, float(s - wait), SYNC, b.n_host + k)
    elif _earlier(g.wait_launch, k, lo):
        _add(b, b.source, node, s - lo, float(s - lo), CARRY, b.n_host + k)
        b.carry.append((node, int(g.wait_global[k]), s - wait))
        _rest(b, node, s - wait, SYNC)
    else:
        _unknown(b, h, g, k, lo)


def _unknown(b: Built, h: HostSlice, g: GpuSlice, k: int, lo: int) -> None:
    """Event k waited for GPU work outside the graph that was launched in this iteration (by no
    call in the trace, or by a thread it leaves out): not earlier work, so no carry. The wait is
    idle after its own launch call (no host-free step), or after the iteration's start without
    one."""
    node, s = 2 * (b.n_host + k), int(g.start[k])
    c = int(g.call[k])
    src, t0 = (b.source, lo) if c < 0 else (2 * c + 1, int(h.end[c]))
    if c >= 0 and t0 > s:  # a graph launch call still running when the op started
        src, t0 = 2 * c, int(h.start[c])
    _add(b, src, node, s - t0, float(s - t0), IDLE, b.n_host + k)


def build(h: HostSlice, g: GpuSlice, lo: int, launch_factor: float = 1.0) -> Built:
    """The stage's entry: the window's graph from its host and GPU events (`events.Window`'s
    slice), its edges not yet arrays (`path.finish`)."""
    n_host = int(h.start.size)
    b = Built(lo=lo, source=2 * (n_host + int(g.start.size)), n_host=n_host)
    _host_edges(b, h, lo)
    _sync_edges(b, h, g)
    _gpu_edges(b, h, g, lo, launch_factor)
    return b
