"""Stage 1 of `critical_path`: what to analyse (`plan`, the entry). The what-if rules parsed
(`WhatIf`), the sources, each source's windows in order, and per window the frames cut to it, so
that only one iteration's events are in memory at once (over a store, the cuts are predicates
pushed into the Parquet scans; nothing is read here but the sources' spans and counts).

A window is an iteration `[start, end)` (the iterations table) or, for a source without
iterations, its whole span. Host events (operators, annotations, NVTX ranges, runtime calls) are
the window's when they start in it; GPU events are read from those that end after the window's
start to the end of the next window (work launched in a step may run on into the next one; the
ones ending after the start are the earlier work the step may wait on).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from ...errors import UsageProblem
from ..naming import source_name

Frame = pl.DataFrame | pl.LazyFrame
Window = tuple[int | None, int, int, int | None]  # iteration, lo, hi, GPU read limit

_WHAT_IF = re.compile(r"^(?:(kernel|op|gpu-op):(.+)|(launch))=([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)$")


@dataclass(frozen=True)
class WhatIf:
    """Scaling factors: (regex, factor) per kernel-name rule, operator-name rule (the host time
    inside), GPU-operator rule (the kernels launched inside matching operators), and launch."""

    kernel: tuple[tuple[str, float], ...] = ()
    op: tuple[tuple[str, float], ...] = ()
    launch: float = 1.0
    gpu_op: tuple[tuple[str, float], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.kernel and not self.op and not self.gpu_op and self.launch == 1.0


def parse_what_if(specs: Sequence[str]) -> WhatIf | None:
    """`kernel:REGEX=F`, `op:REGEX=F`, `gpu-op:REGEX=F`, `launch=F` (repeatable; F >= 0).
    None when no spec."""
    if not specs:
        return None
    kernel: list[tuple[str, float]] = []
    op: list[tuple[str, float]] = []
    gpu_op: list[tuple[str, float]] = []
    launch = 1.0
    for spec in specs:
        m = _WHAT_IF.match(spec.strip())
        if m is None:
            raise UsageProblem(
                f"bad what-if {spec!r}: expected kernel:REGEX=FACTOR, op:REGEX=FACTOR, "
                "gpu-op:REGEX=FACTOR or launch=FACTOR (FACTOR a number >= 0)"
            )
        kind, rx, is_launch, f = m.group(1), m.group(2), m.group(3), float(m.group(4))
        if is_launch:
            launch *= f
            continue
        try:
            re.compile(rx)
        except re.error as e:
            raise UsageProblem(f"bad what-if {spec!r}: {e}") from None
        {"kernel": kernel, "op": op, "gpu-op": gpu_op}[kind].append((rx, f))
    return WhatIf(tuple(kernel), tuple(op), launch, tuple(gpu_op))


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


@dataclass(frozen=True)
class Cut:
    """A window's frames (lazy): host events that start in it, the GPU events read for it, and
    `all_calls`, the source's calls up to the GPU read limit (when each GPU op was launched)."""

    kernels: pl.LazyFrame
    memcpy: pl.LazyFrame
    api_calls: pl.LazyFrame
    ops: pl.LazyFrame
    markers: pl.LazyFrame
    all_calls: pl.LazyFrame


@dataclass(frozen=True)
class Job:
    """One window to analyse: its source, iteration (None: the source's whole span), bounds,
    frames, `orphans` (the source has no API calls: GPU events without a call are the window's
    own when they start in it) and `note`, the source's warning of unlaunched GPU events."""

    source_id: str
    iteration: int | None
    lo: int
    hi: int
    cut: Cut
    orphans: bool
    note: str | None


@dataclass(frozen=True)
class Plan:
    """`jobs` in order (source by source, each source's windows by start), the parsed what-if,
    each iteration's latest end over the sources (the job-wide window of `ranks`) and why there
    is nothing to analyse when no job has events."""

    jobs: list[Job]
    what_if: WhatIf | None
    ends: dict[int, int]
    why_none: str


def _cut(inp: Inputs, sid: str, w: Window) -> Cut:
    """The window's frames (see the module docstring)."""
    _, lo, hi, gpu_hi = w
    mine = pl.col("source_id") == sid
    host = mine & (pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi)
    gpu = mine & (pl.col("end_ns") >= lo)
    launched = mine  # the calls that launched the GPU events read: all before the last's start
    if gpu_hi is not None:
        gpu = gpu & (pl.col("start_ns") < gpu_hi)
        launched = launched & (pl.col("start_ns") < gpu_hi)
    return Cut(
        inp.kernels.filter(gpu),
        inp.memcpy.filter(gpu),
        inp.api_calls.filter(host),
        inp.ops.filter(host),
        inp.markers.filter(host),
        inp.api_calls.filter(launched),
    )


def _note(inp: Inputs, sid: str, names: Mapping[str, str] | None) -> str | None:
    """The warning of the GPU events whose launch call is not in the trace (`unlaunched`)."""
    n, total = unlaunched(inp, sid)
    if not n:
        return None
    return (
        f"{source_name(names, sid)}: {n} of {total} GPU events have no launch call in the "
        "trace (launched before the capture or by an untraced thread): on no iteration's "
        "path, only the earlier work of what follows them on their stream"
    )


def _nothing(its: pl.DataFrame, iteration: int | None) -> str:
    """Why there is no window: no timed events, or no such iteration (listing those there are,
    as `timeline --iteration` does)."""
    if iteration is None:
        return "no timed events to build a critical path from"
    from ..timeline import _ranges

    timed = its.drop_nulls(["start_ns", "end_ns"])["iteration"].drop_nulls().unique().sort()
    have = f"iterations here: {_ranges([int(i) for i in timed])}" if timed.len() else "none here"
    return f"no iteration {iteration} to build a critical path from; {have}"


def plan(
    frames: tuple[Frame, ...],
    iterations: Frame,
    only: int | None,
    what_if: Sequence[str] | WhatIf | None,
    names: Mapping[str, str] | None,
) -> Plan:
    """The stage's entry: what `critical_path` analyses (`frames`: kernels, memcpy, api_calls,
    ops, markers; `only`: one iteration)."""
    wi = what_if if isinstance(what_if, WhatIf | None) else parse_what_if(what_if)
    its = iterations.lazy().collect() if isinstance(iterations, pl.LazyFrame) else iterations
    inp = Inputs.of(*frames)
    jobs: list[Job] = []
    ends: dict[int, int] = {}
    for sid in sources(inp):
        orphans = not has_calls(inp, sid)
        ws = windows(inp, its, sid, only)
        note = _note(inp, sid, names) if ws and not orphans else None
        for w in ws:
            jobs.append(Job(sid, w[0], w[1], w[2], _cut(inp, sid, w), orphans, note))
            if w[0] is not None:
                ends[w[0]] = max(ends.get(w[0], w[2]), w[2])
    return Plan(jobs, wi, ends, _nothing(its, only))
