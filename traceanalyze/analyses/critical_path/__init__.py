"""What bounds an iteration: the longest dependency chain through host and GPU, and what-if.

Per iteration (the iterations table: `ProfilerStep#N` of the PyTorch profiler; a source without
iterations is one window from its first to its last event, `iteration` null) a graph is built
from the iteration's events (`graph`): the host events that start in the iteration (operators,
or NVTX ranges where a source has no operators, as in `ops`; and runtime/driver calls) and the
GPU events (kernels, copies, memsets) their calls launched (correlation ids, `launches`'s
pairing), plus GPU events without a launch call that start in the window. Edges:

* **thread order**: on each (process, thread), consecutive start/end points, nesting respected;
  a segment is host time of the innermost open event (`host`), or `idle` outside every event;
* **launch**: launch call start -> kernel start (`launch`, the launch latency);
* **stream order**: previous event on the same device and stream -> next (`idle`: the gap);
* **waits**: a blocking call (`*Synchronize`, a synchronous copy or memset: `idle.SYNC_CALL`)
  ends after the GPU event it waited for (the copy it issued, else the latest GPU event of its
  process that ended inside the call and was launched before it) -- `sync`, the wake-up lag; a
  GPU event that starts more than 5 µs after its launch and stream predecessor were ready waited
  for the latest event of another stream of its device that ended before it and was launched no
  later than it (`sync`; event and stream waits, collectives). *Launched*: the launch call's start
  over the whole trace (without a call: the op's start), so no wait is on a later step's work;
* **carry**: a GPU event or a blocking call whose binding predecessor was launched before the
  iteration's start (the GPU still busy with the previous step) hangs on the iteration's start
  (`carry`, the wait on earlier work). No carry is longer than that work: the time from its end
  to the event's start is idle (sync for a blocking call's wake-up).
* **graph replays**: a `cudaGraphLaunch*` / `cuGraphLaunch*` / `hipGraphLaunch*` call has one
  launch edge to the first op of each stream its replay uses; the replay's other ops follow in
  stream order.

The longest path from the iteration's start gives `path_ms` and its split by edge category
(`gpu_compute_ms`, `gpu_comm_ms` (collective kernels, `overlap.COMM_KERNEL`), `gpu_memory_ms`
(copies, memsets), `host_ms`, `launch_ms`, `sync_ms`, `idle_ms`, `carry_ms`; they add up to
`path_ms`). With the trace's own times the path ends at the iteration's last event, so `path_ms`
= last end - iteration start (more than `duration_ms` where GPU work outlives the step).

What-if: factors on kernel durations (`kernel:REGEX=F`), on the host time inside matching
operators (`op:REGEX=F`, their inclusive time), on the kernels launched inside matching operators
(`gpu-op:REGEX=F`) and on launch latencies (`launch=F`); the same graph is replayed with the
scaled weights, each GPU event starting when its latest predecessor allows (`predicted_ms`).
Iterations are replayed in order: a carry edge starts from the previous iteration's predicted end
of the event it waits for (`chain=False`: each iteration alone, the carry keeping its length).

The data flows one way, through one stage per module, each called once per window by the entry
below and importing only the stages before it (tests/test_architecture.py): `windows` (what to
analyse: the what-if rules, sources, windows, each window's frames) -> `events` (the window's event
arrays) -> `graph` (the dependency graph) -> `path` (its longest paths) -> `split` (the result's
rows) -> `whatif` (predicted times). What a later stage needs travels in what an earlier one
returns. `ranks` (the job-wide path) joins an iteration's window graphs over the ranks as soon as
every rank has given its window of it (`_Joint`; the ranks' k-th windows are visited together).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from ...errors import NotAnswerable
from ...results import CriticalPath
from . import events as ce
from . import graph as cg
from . import path as cp
from . import ranks as cr
from . import split as cs
from . import whatif as cwi
from . import windows as cw
from .windows import WhatIf, parse_what_if

__all__ = ["WhatIf", "critical_path", "parse_what_if"]

Frame = pl.DataFrame | pl.LazyFrame


def critical_path(
    kernels: Frame,
    memcpy: Frame,
    api_calls: Frame,
    ops: Frame,
    markers: Frame,
    iterations: Frame,
    *,
    iteration: int | None = None,
    what_if: Sequence[str] | WhatIf | None = None,
    by_event: bool = False,
    across_ranks: bool = False,
    names: Mapping[str, str] | None = None,
    chain: bool = True,
) -> CriticalPath:
    """Per source and iteration: the critical path's length and split (see the module doc).
    `chain=False`: each iteration's what-if replayed alone, its carry kept (as `iteration=N`
    gives for each N; `diagnose`'s savings)."""
    plan = cw.plan(
        (kernels, memcpy, api_calls, ops, markers), iterations, iteration, what_if, names
    )
    wi = plan.what_if
    # across ranks: each iteration's window graphs, joined as soon as every source has given its
    # window of it (the k-th windows of all sources are visited together), then let go
    joint = _Joint(plan, wi is not None, by_event) if across_ranks else None
    done = _analyse(plan, by_event, chain, joint)
    rows = [d.row for d in done]
    frames = [f for d in done for f in d.frames]
    preds = [d.pred for d in done if d.pred is not None]
    if not rows:
        raise NotAnswerable(plan.why_none)
    ranks, jframes = joint.result() if joint is not None else (None, [])
    events = pl.concat(frames) if by_event else None
    if events is not None and jframes:
        events = pl.concat([events, *jframes], how="diagonal_relaxed")
    it64 = pl.col("iteration").cast(pl.Int64)
    table = pl.DataFrame(rows, infer_schema_length=None).with_columns(it64)
    predicted = pl.DataFrame(preds, infer_schema_length=None) if wi is not None else None
    if predicted is not None:
        predicted = predicted.with_columns(it64)
    specs = tuple(what_if) if isinstance(what_if, list | tuple) else ()
    return CriticalPath(table, events, predicted, specs, ranks)


def _analyse(plan: cw.Plan, by_event: bool, chain: bool, joint: _Joint | None) -> list[_Done]:
    """Every job through the stages, once each; what each gave, in plan order."""
    wi = plan.what_if
    done: list[tuple[int, _Done]] = []  # (the job's place in plan.jobs, what it gave)
    ends_of: dict[str, cp.Ends] = {}  # per source: the last window's ends (the next one's carry)
    warned: set[str] = set()
    for n in _order(plan.jobs, joint is not None):
        job = plan.jobs[n]
        win = ce.window(job, wi)
        if win is None:
            if joint is not None:
                joint.skip(job)
            continue
        if job.note and job.source_id not in warned:
            warnings.warn(job.note, stacklevel=3)
        warned.add(job.source_id)
        ends = ends_of.get(job.source_id, {}) if chain else {}
        built = cg.build(win.sl.host, win.sl.gpu, win.lo, wi.launch if wi else 1.0)
        paths = cp.paths(win, built, ends, wi is not None)
        out = cs.rows(win, built, paths, by_event)
        row, pred = cwi.predict(out, paths)
        done.append((n, _Done(row, out.frames, pred)))
        ends_of[job.source_id] = paths.ends
        if joint is not None:
            joint.add(job, cr.Part(win.ev, win.sl, built))
    done.sort(key=lambda d: d[0])  # source by source, as the plan lists them
    return [d for _, d in done]


@dataclass
class _Done:
    row: dict[str, object]
    frames: list[pl.DataFrame]
    pred: dict[str, object] | None


def _order(jobs: list[cw.Job], across_ranks: bool) -> list[int]:
    """The jobs' visiting order: the plan's (source by source), or across ranks the first window
    of every source, then the second of every source, …: each source's windows stay in order
    (their carry chains), and an iteration's windows over the ranks come close together."""
    if not across_ranks:
        return list(range(len(jobs)))
    place: dict[str, int] = {}
    keyed = []
    for n, job in enumerate(jobs):
        k = place.get(job.source_id, 0)
        place[job.source_id] = k + 1
        keyed.append((k, n))
    return [n for _, n in sorted(keyed)]


class _Joint:
    """`ranks.across` one iteration at a time: an iteration's parts are joined once every job of
    that iteration number has been visited (or skipped: no events), and dropped then, so memory
    holds the graphs of the iterations still open, not of the whole job."""

    def __init__(self, plan: cw.Plan, what_if: bool, by_event: bool) -> None:
        self.ends, self.what_if, self.by_event = plan.ends, what_if, by_event
        self.left: dict[int, int] = {}
        for job in plan.jobs:
            if job.iteration is not None:
                self.left[job.iteration] = self.left.get(job.iteration, 0) + 1
        self.parts: dict[int, list[cr.Part]] = {}
        self.out: list[tuple[int, pl.DataFrame | None, list[pl.DataFrame]]] = []

    def add(self, job: cw.Job, part: cr.Part) -> None:
        if job.iteration is not None:
            self.parts.setdefault(job.iteration, []).append(part)
            self._seen(job.iteration)

    def skip(self, job: cw.Job) -> None:
        if job.iteration is not None:
            self._seen(job.iteration)

    def _seen(self, it: int) -> None:
        self.left[it] -= 1
        if self.left[it] == 0:
            members = self.parts.pop(it, [])
            row, frames = cr.across({it: members}, self.ends, self.what_if, self.by_event)
            self.out.append((it, row, frames))

    def result(self) -> tuple[pl.DataFrame | None, list[pl.DataFrame]]:
        """The job-wide rows (by iteration number) and their events, as `ranks.across` gives."""
        self.out.sort(key=lambda o: o[0])
        rows = [r for _, r, _ in self.out if r is not None]
        frames = [f for _, _, fs in self.out for f in fs]
        return (pl.concat(rows, how="diagonal_relaxed") if rows else None), frames
