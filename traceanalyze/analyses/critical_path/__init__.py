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
operators (`op:REGEX=F`, their inclusive time) and on launch latencies (`launch=F`); the same
graph is replayed with the scaled weights, each GPU event starting when its latest predecessor
allows (`predicted_ms`). The carry edges keep their lengths: each iteration is predicted alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from ...errors import NotAnswerable
from ...results import CriticalPath
from ..naming import source_name
from . import graph as cg
from . import ranks as cr
from . import windows as cw
from .frames import SourceEvents
from .whatif import WhatIf, parse_what_if

Frame = pl.DataFrame | pl.LazyFrame

SPLIT_COLUMNS = tuple(f"{c}_ms" for c in cg.CATEGORIES)


@dataclass(frozen=True)
class _Scenario:
    path: cg.Path
    events: pl.DataFrame | None


def _path_events(
    ev: SourceEvents, it: cg.Built, sl: Any, path: cg.Path, weight: str
) -> pl.DataFrame:
    """The path's edges charged to their events, in order of first appearance (edges of no
    length, such as a stream-order edge with no gap, left out)."""
    acc: dict[tuple[int, int], float] = {}
    w = it.w if weight == "w" else it.w2
    for e in path.edges:
        key = (int(it.ref[e]), int(it.cat[e]))
        acc[key] = acc.get(key, 0.0) + float(w[e])
    rows = [ev.describe(sl, it, ref, cat, ns) for (ref, cat), ns in acc.items() if ns != 0]
    total = path.length or 1.0
    df = pl.DataFrame(rows, schema=ev.EVENT_SCHEMA, orient="row")
    return df.with_columns((pl.col("path_ms") * 1e6 / total * 100.0).alias("share_pct"))


def _split(path: cg.Path) -> dict[str, float]:
    return {c: ns / 1e6 for c, ns in zip(SPLIT_COLUMNS, path.split, strict=True)}


def _gpu_pct(path: cg.Path) -> float | None:
    """GPU share of the iteration's own path (the carry left out)."""
    own = path.length - path.split[cg.CARRY]
    return 100.0 * sum(path.split[: cg.GPU_MEMORY + 1]) / own if own > 0 else None


Ends = dict[tuple[int, int], float]  # GPU event (start, end) -> predicted end


def _predicted_ends(ev: SourceEvents, built: cg.Built, sl: Any, path: cg.Path, lo: int) -> Ends:
    out: Ends = {}
    for k, gid in enumerate(sl.gids.tolist()):
        d = path.dist[2 * (built.n_host + k) + 1]
        if d == d:  # reached
            out[(int(ev.g_start[gid]), int(ev.g_end[gid]))] = lo + d
    return out


def _carry_ends(ev: SourceEvents, ends: Ends) -> dict[int, float]:
    """`ends` keyed by this window's GPU ids, for `rebase_carry`."""
    if not ends:
        return {}
    out: dict[int, float] = {}
    for gid, (s, e) in enumerate(zip(ev.g_start.tolist(), ev.g_end.tolist(), strict=True)):
        if (s, e) in ends:
            out[gid] = ends[(s, e)]
    return out


def _one_window(
    ev: SourceEvents,
    window: tuple[int | None, int, int],
    what_if: WhatIf | None,
    by_event: bool,
    ends: Ends,
) -> tuple[dict[str, Any], list[pl.DataFrame], dict[str, Any] | None, Ends]:
    """One iteration: its row, its path events, its what-if row and its GPU events' predicted
    ends (for the next iteration's carry)."""
    it_no, lo, hi = window
    sl = ev.slice(lo, hi)
    built = cg.build(sl.host, sl.gpu, lo, what_if.launch if what_if else 1.0)
    base = cg.longest(built, "w")
    row: dict[str, Any] = {
        "source_id": ev.source_id,
        "iteration": it_no,
        "start_ns": lo,
        "duration_ms": (hi - lo) / 1e6,
        "event_count": int(sl.host.start.size + sl.gpu.start.size),
        "path_ms": base.length / 1e6,
        **_split(base),
        "gpu_pct": _gpu_pct(base),
    }
    frames: list[pl.DataFrame] = []
    if by_event:
        frames.append(_tag(_path_events(ev, built, sl, base, "w"), ev, it_no, "trace"))
    if what_if is None:
        return row, frames, None, {}
    cg.rebase_carry(built, _carry_ends(ev, ends))
    new = cg.longest(built, "w2")
    row["predicted_ms"] = new.length / 1e6
    row["change_pct"] = 100.0 * (new.length - base.length) / base.length if base.length else None
    pred = {"source_id": ev.source_id, "iteration": it_no, "path_ms": new.length / 1e6}
    pred["change_pct"] = row["change_pct"]  # the what-if table says it too (issue 32)
    pred |= _split(new)
    if by_event:
        frames.append(_tag(_path_events(ev, built, sl, new, "w2"), ev, it_no, "what_if"))
    return row, frames, pred, _predicted_ends(ev, built, sl, new, lo)


def _across(
    inp: cw.Inputs, its: pl.DataFrame, only: int | None, wi: WhatIf | None, by_event: bool
) -> tuple[pl.DataFrame | None, list[pl.DataFrame]]:
    """Per iteration number that several sources share: the job-wide path (`ranks`)."""
    by_it: dict[int, list[tuple[str, cw.Window]]] = {}
    for sid in cw.sources(inp):
        for w in cw.windows(inp, its, sid, only):
            if w[0] is not None:
                by_it.setdefault(w[0], []).append((sid, w))
    rows: list[dict[str, Any]] = []
    frames: list[pl.DataFrame] = []
    for it_no, members in sorted(by_it.items()):
        parts = []
        for sid, w in members:
            ev = cw.events(inp, sid, w, wi, not cw.has_calls(inp, sid))
            if ev is not None:
                sl = ev.slice(w[1], w[2])
                built = cg.build(sl.host, sl.gpu, w[1], wi.launch if wi else 1.0)
                parts.append(cr.Part(ev, sl, built))
        if len(parts) < 2:
            continue
        row, fr = _joint_row(cr.join(parts), it_no, max(w[2] for _, w in members), wi, by_event)
        rows.append(row)
        frames.extend(fr)
    if not rows:
        return None, []
    return pl.DataFrame(rows, infer_schema_length=None), frames


def _joint_row(
    j: cr.Joint, it_no: int, hi: int, wi: WhatIf | None, by_event: bool
) -> tuple[dict[str, Any], list[pl.DataFrame]]:
    base = cg.longest(j.built, "w")
    lo = j.built.lo
    on_path = {j.locate(int(j.built.ref[e]))[0] for e in base.edges} - {-1}
    last = j.locate(int(j.built.ref[base.edges[-1]]))[0] if base.edges else -1
    row: dict[str, Any] = {
        "iteration": it_no,
        "rank_count": len(j.parts),
        "start_ns": lo,
        "duration_ms": (hi - lo) / 1e6,
        "path_ms": base.length / 1e6,
        **_split(base),
        "gpu_pct": _gpu_pct(base),
        "collectives_joined_count": j.joined,
        "sources_on_path_count": len(on_path),
        "end_source_id": j.parts[last].ev.source_id if last >= 0 else None,
    }
    frames = [_joint_events(j, base, "w", it_no, "ranks")] if by_event else []
    if wi is not None:
        new = cg.longest(j.built, "w2")
        row["predicted_ms"] = new.length / 1e6
        change = 100.0 * (new.length - base.length) / base.length if base.length else None
        row["change_pct"] = change
        if by_event:
            frames.append(_joint_events(j, new, "w2", it_no, "ranks_what_if"))
    return row, frames


def _joint_events(
    j: cr.Joint, path: cg.Path, weight: str, it_no: int, scenario: str
) -> pl.DataFrame:
    acc: dict[tuple[int, int], float] = {}
    w = j.built.w if weight == "w" else j.built.w2
    for e in path.edges:
        key = (int(j.built.ref[e]), int(j.built.cat[e]))
        acc[key] = acc.get(key, 0.0) + float(w[e])
    rows = [cr.describe(j, ref, cat, ns) for (ref, cat), ns in acc.items() if ns != 0]
    schema = {"source_id": pl.String, **SourceEvents.EVENT_SCHEMA}
    df = pl.DataFrame(rows, schema=schema, orient="row")
    total = path.length or 1.0
    return df.select(
        "source_id",
        pl.lit(it_no, dtype=pl.Int64).alias("iteration"),
        pl.lit(scenario).alias("scenario"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("step"),
        pl.all().exclude("source_id"),
        (pl.col("path_ms") * 1e6 / total * 100.0).alias("share_pct"),
    )


def _tag(df: pl.DataFrame, ev: SourceEvents, it_no: int | None, scenario: str) -> pl.DataFrame:
    return df.select(
        pl.lit(ev.source_id).alias("source_id"),
        pl.lit(it_no, dtype=pl.Int64).alias("iteration"),
        pl.lit(scenario).alias("scenario"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("step"),
        pl.all(),
    )


def _note_unlaunched(inp: cw.Inputs, sid: str, names: Mapping[str, str] | None) -> None:
    """Warn of the GPU events whose launch call is not in the trace (`windows.unlaunched`)."""
    if not cw.has_calls(inp, sid):
        return
    n, total = cw.unlaunched(inp, sid)
    if n:
        warnings.warn(
            f"{source_name(names, sid)}: {n} of {total} GPU events have no launch call in the "
            "trace (launched before the capture or by an untraced thread): on no iteration's "
            "path, only the earlier work of what follows them on their stream",
            stacklevel=3,
        )


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
    wi = parse_what_if(what_if) if not isinstance(what_if, WhatIf | None) else what_if
    its = iterations.lazy().collect() if isinstance(iterations, pl.LazyFrame) else iterations
    rows: list[dict[str, Any]] = []
    frames: list[pl.DataFrame] = []
    preds: list[dict[str, Any]] = []
    inp = cw.Inputs.of(kernels, memcpy, api_calls, ops, markers)
    ends: Ends = {}
    current = None
    for sid, (it_no, lo, hi, _), ev in cw.iterate(inp, its, iteration, wi):
        if sid != current:
            _note_unlaunched(inp, sid, names)
        if sid != current or not chain:
            current, ends = sid, {}
        row, fr, pred, ends = _one_window(ev, (it_no, lo, hi), wi, by_event, ends)
        rows.append(row)
        frames.extend(fr)
        if pred is not None:
            preds.append(pred)
    if not rows:
        raise NotAnswerable(_nothing(its, iteration))
    out = pl.DataFrame(rows, infer_schema_length=None).with_columns(
        pl.col("iteration").cast(pl.Int64)
    )
    events = pl.concat(frames) if by_event and frames else None
    predicted = (
        pl.DataFrame(preds, infer_schema_length=None).with_columns(
            pl.col("iteration").cast(pl.Int64)
        )
        if wi is not None
        else None
    )
    specs = tuple(what_if) if isinstance(what_if, list | tuple) else ()
    ranks = None
    if across_ranks:
        ranks, jframes = _across(inp, its, iteration, wi, by_event)
        if by_event and jframes:
            events = (
                pl.concat([events, *jframes], how="diagonal_relaxed")
                if events is not None
                else pl.concat(jframes)
            )
    return CriticalPath(out, events, predicted, specs, ranks)


def _nothing(its: pl.DataFrame, iteration: int | None) -> str:
    """Why there is no window: no timed events, or no such iteration (listing those there are,
    as `timeline --iteration` does)."""
    if iteration is None:
        return "no timed events to build a critical path from"
    from ..timeline import _ranges

    timed = its.drop_nulls(["start_ns", "end_ns"])["iteration"].drop_nulls().unique().sort()
    have = f"iterations here: {_ranges([int(i) for i in timed])}" if timed.len() else "none here"
    return f"no iteration {iteration} to build a critical path from; {have}"
