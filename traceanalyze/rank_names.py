"""The rank (and world size) a profiler export states in its own content, for the formats that
have no `distributedInfo` (nsys, nvprof); docs/stragglers.md, "Which source is which rank".

A name *is* a rank when the whole name reads `rank 3`, `Rank 3 of 8`, `rank=3/8`, `rank_3`,
`worker-3` or `MPI Rank 3` (the name Nsight Systems' MPI tracing gives each rank's thread, an NVTX
thread name), case-insensitive. A name that only contains such words (`Rank 0 => Correct
results!`, `kworker/8:0`) is not one. A command line gives the local rank that
`torch.distributed.launch` passes each process (`--local_rank=3`; `--local-rank=3` from torch 2.0);
on one node it is the rank.

Each reader collects `Hint`s of several kinds, in the order it trusts them; the first kind that
names any rank decides: exactly one rank is the file's (`rank_from` = that kind), several (a
file of several processes, each its own rank) leave the file without one (the analysis then
splits it by process). Only numbers are kept: names and command lines never reach an output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import polars as pl

# Python and polars (Rust) regex alike; group 1 the rank, group 2 the world size.
NAMED_RANK = r"(?i)^\s*(?:mpi\s+)?(?:rank|worker)[\s_:=#-]*(\d+)(?:\s*(?:/|of)\s*(\d+))?\s*$"
_NAMED = re.compile(NAMED_RANK)
_LOCAL_RANK_ARG = re.compile(r"(?:^|\s)--local[_-]rank(?:=|\s+)(\d+)(?=\s|$)")

Hint = tuple[str, int, int | None]  # (kind, rank, world size)


def named_rank(name: object) -> tuple[int, int | None] | None:
    """(rank, world size or None) when the whole `name` names a rank, else None."""
    if not isinstance(name, str):
        return None
    m = _NAMED.match(name)
    if m is None:
        return None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) else None)


def local_rank_arg(command: object) -> int | None:
    """The `--local_rank` / `--local-rank` value of a command line, or None (also when it is
    given twice with different values)."""
    if not isinstance(command, str):
        return None
    found = {int(v) for v in _LOCAL_RANK_ARG.findall(command)}
    return found.pop() if len(found) == 1 else None


def hints_from_names(kind: str, names: Iterable[object]) -> list[Hint]:
    out: list[Hint] = []
    for n in names:
        r = named_rank(n)
        if r is not None:
            out.append((kind, r[0], r[1]))
    return out


def stated(hints: Sequence[Hint]) -> tuple[int | None, int | None, str | None]:
    """(rank, world size, rank_from) by the module doc's rule; (None, None, None) when no
    hint, or when the deciding kind names several ranks."""
    if not hints:
        return None, None, None
    kind = hints[0][0]
    mine = [h for h in hints if h[0] == kind]
    ranks = {h[1] for h in mine}
    if len(ranks) != 1:
        return None, None, None
    worlds = {h[2] for h in mine if h[2] is not None}
    return ranks.pop(), (worlds.pop() if len(worlds) == 1 else None), kind


def rank_columns(hints: Sequence[Hint]) -> dict[str, pl.Series]:
    """`sources` columns rank, world_size, rank_from for `hints` (nulls when not stated)."""
    rank, world, how = stated(hints)
    return {
        "rank": pl.Series("rank", [rank], dtype=pl.Int64),
        "world_size": pl.Series("world_size", [world], dtype=pl.Int64),
        "rank_from": pl.Series("rank_from", [how], dtype=pl.String),
    }
