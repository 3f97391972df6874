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
returns. `ranks` (the job-wide path) joins the ranks' window graphs once all windows are done.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

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
    rows: list[dict[str, object]] = []
    frames: list[pl.DataFrame] = []
    preds: list[dict[str, object]] = []
    parts: dict[int, list[cr.Part]] = {}  # across ranks: each source's window graphs
    ends: cp.Ends = {}
    current = None
    for job in plan.jobs:
        win = ce.window(job, wi)
        if win is None:
            continue
        if job.source_id != current and job.note:
            warnings.warn(job.note, stacklevel=2)
        if job.source_id != current or not chain:
            current, ends = job.source_id, {}
        built = cg.build(win.sl.host, win.sl.gpu, win.lo, wi.launch if wi else 1.0)
        paths = cp.paths(win, built, ends, wi is not None)
        out = cs.rows(win, built, paths, by_event)
        row, pred = cwi.predict(out, paths)
        rows.append(row)
        frames.extend(out.frames)
        preds.extend([pred] if pred is not None else [])
        ends = paths.ends
        if across_ranks and job.iteration is not None:
            parts.setdefault(job.iteration, []).append(cr.Part(win.ev, win.sl, built))
    if not rows:
        raise NotAnswerable(plan.why_none)
    ranks, jframes = cr.across(parts, plan.ends, wi is not None, by_event)
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
