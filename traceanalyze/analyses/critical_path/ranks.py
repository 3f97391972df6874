"""`critical_path(across_ranks=True)`: one graph per iteration over every rank of a job.

Each rank's graph (`graph.build`) is kept whole, under one job source node at the earliest
rank's iteration start (an edge to each rank's own source, `idle`: that rank started later).
Collectives join them: the k-th collective kernel of a given name on each rank (in start order
within the iteration) is one collective when every rank has it; it cannot end on any rank before
the last rank has started it. So for each member, an edge from the last arrival's start to the
member's end (the exact gap, `gpu_comm`), and the member's own duration edge keeps only the part
after that arrival (its floor), as a launch edge's floor keeps only the call's duration. The
longest path can then run from one rank's host through its late collective into another rank.

Times must share a clock across ranks (Kineto's epoch `ts`; a group whose member ends before the
last arrival starts is left unjoined and counted). Each iteration is predicted alone under what-if
(the carry keeps its length).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from . import events as ce
from . import path as cp
from . import split as cs
from .events import Slice, SourceEvents
from .graph import Built
from .whatif import change_pct


@dataclass
class Part:
    ev: SourceEvents
    sl: Slice
    built: Built


@dataclass
class Joint:
    built: Built
    parts: list[Part]
    node_base: list[int]
    ref_base: list[int]
    joined: int  # collectives joined across ranks
    unjoined: int  # collective groups left alone (clocks disagree)

    def locate(self, ref: int) -> tuple[int, int]:
        """(part, its local ref) of a joint ref (-1: none)."""
        if ref < 0:
            return -1, -1
        i = bisect.bisect_right(self.ref_base, ref) - 1
        return i, ref - self.ref_base[i]


def _collectives(p: Part) -> dict[tuple[str, int], int]:
    """(name, occurrence) -> local GPU index of the part's collective kernels."""
    ks = np.flatnonzero(p.sl.gpu.cat == ce.GPU_COMM)
    ks = ks[np.argsort(p.sl.gpu.start[ks], kind="stable")]
    seen: dict[str, int] = defaultdict(int)
    out: dict[tuple[str, int], int] = {}
    for k in ks.tolist():
        name = str(p.ev.g_name[int(p.sl.gids[k])])
        out[(name, seen[name])] = k
        seen[name] += 1
    return out


def _link(j: Joint, edges: dict[tuple[int, int], tuple[int, float, int, int]]) -> None:
    """Cross-rank edges of the collectives every rank has."""
    colls = [_collectives(p) for p in j.parts]
    common = set(colls[0]).intersection(*colls[1:]) if colls else set()
    for key in sorted(common):
        members = [(r, colls[r][key]) for r in range(len(j.parts))]
        starts = [int(j.parts[r].sl.gpu.start[k]) for r, k in members]
        ends = [int(j.parts[r].sl.gpu.end[k]) for r, k in members]
        last = int(np.argmax(starts))
        if min(ends) < starts[last]:
            j.unjoined += 1
            continue
        lr, lk = members[last]
        src = j.node_base[lr] + 2 * (j.parts[lr].built.n_host + lk)
        for (r, k), s, e in zip(members, starts, ends, strict=True):
            b = j.parts[r].built
            node = j.node_base[r] + 2 * (b.n_host + k)
            factor = float(j.parts[r].sl.gpu.factor[k])
            ref = j.ref_base[r] + b.n_host + k
            own = e - max(s, starts[last])
            edges[(node, node + 1)] = (own, own * factor, ce.GPU_COMM, ref)
            if r != last:
                gap = e - starts[last]
                edges[(src, node + 1)] = (gap, gap * factor, ce.GPU_COMM, ref)
        j.joined += 1


def join(parts: list[Part]) -> Joint:
    """The job graph of one iteration from each rank's graph."""
    node_base, ref_base = [], []
    n_nodes = n_refs = 0
    for p in parts:
        node_base.append(n_nodes)
        ref_base.append(n_refs)
        n_nodes += p.built.source + 1
        n_refs += p.built.n_host + int(p.sl.gpu.start.size)
    lo = min(p.built.lo for p in parts)
    out = Built(lo=lo, source=n_nodes, n_host=0)
    j = Joint(out, parts, node_base, ref_base, 0, 0)
    edges: dict[tuple[int, int], tuple[int, float, int, int]] = {}
    for p, nb, rb in zip(parts, node_base, ref_base, strict=True):
        for (u, v), (w, w2, cat, ref) in p.built.edges.items():
            edges[(u + nb, v + nb)] = (w, w2, cat, ref + rb if ref >= 0 else -1)
        wait = p.built.lo - lo
        edges[(out.source, p.built.source + nb)] = (wait, float(wait), ce.IDLE, -1)
    _link(j, edges)
    out.edges = edges
    cp.finish(out)
    return j


def describe(j: Joint, ref: int, cat: int, ns: float) -> tuple[Any, ...]:
    """`split.describe` of a joint ref, with its source id first."""
    i, local = j.locate(ref)
    p = j.parts[max(i, 0)]
    return (p.ev.source_id if i >= 0 else None, *cs.describe(p.ev, p.sl, p.built, local, cat, ns))


def _joint_events(j: Joint, path: cp.Path, weight: str, it_no: int, scenario: str) -> pl.DataFrame:
    acc = cs.charged(j.built, path, weight)
    rows = [describe(j, ref, cat, ns) for (ref, cat), ns in acc.items() if ns != 0]
    schema = {"source_id": pl.String, **cs.EVENT_SCHEMA}
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


def _joint_row(
    j: Joint, it_no: int, hi: int, what_if: bool, by_event: bool
) -> tuple[dict[str, Any], list[pl.DataFrame]]:
    base = cp.longest(j.built, "w")
    lo = j.built.lo
    on_path = {j.locate(int(j.built.ref[e]))[0] for e in base.edges} - {-1}
    last = j.locate(int(j.built.ref[base.edges[-1]]))[0] if base.edges else -1
    row: dict[str, Any] = {
        "iteration": it_no,
        "rank_count": len(j.parts),
        "start_ns": lo,
        "duration_ms": (hi - lo) / 1e6,
        "path_ms": base.length / 1e6,
        **cs.split(base),
        "gpu_pct": cs.gpu_pct(base),
        "collectives_joined_count": j.joined,
        "sources_on_path_count": len(on_path),
        "end_source_id": j.parts[last].ev.source_id if last >= 0 else None,
    }
    frames = [_joint_events(j, base, "w", it_no, "ranks")] if by_event else []
    if what_if:
        new = cp.longest(j.built, "w2")
        row["predicted_ms"] = new.length / 1e6
        row["change_pct"] = change_pct(base.length, new.length)
        if by_event:
            frames.append(_joint_events(j, new, "w2", it_no, "ranks_what_if"))
    return row, frames


def across(
    parts: dict[int, list[Part]], ends: dict[int, int], what_if: bool, by_event: bool
) -> tuple[pl.DataFrame | None, list[pl.DataFrame]]:
    """Per iteration number that several sources share (`parts`: each source's window of it,
    `ends`: the latest end of the iteration over the sources): the job-wide path's row and,
    with `by_event`, its events."""
    rows: list[dict[str, Any]] = []
    frames: list[pl.DataFrame] = []
    for it_no, members in sorted(parts.items()):
        if len(members) < 2:
            continue
        row, fr = _joint_row(join(members), it_no, ends[it_no], what_if, by_event)
        rows.append(row)
        frames.extend(fr)
    if not rows:
        return None, []
    return pl.DataFrame(rows, infer_schema_length=None), frames
