"""Interval-set arithmetic on sorted, disjoint half-open `[start, end)` int64 arrays (numpy).

Shared by `idle` and `overlap`. A set is a pair `(starts, ends)`; every function returns a
normalized set (sorted, disjoint, no empty pieces, touching pieces merged). Vectorized: each
operation is one sweep over the sorted boundaries with a cumulative sum, no per-interval loop.
Integers throughout: epoch-ns times (~1.7e18) do not fit a float64 exactly.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Arr = npt.NDArray[np.int64]
Set = tuple[Arr, Arr]

EMPTY: Set = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def as_set(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Set:
    """The union of possibly overlapping intervals (empty and reversed ones dropped)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]  # touching pieces merge, as busy.union_intervals does
    first = np.flatnonzero(new)
    last = np.append(first[1:], s.size) - 1
    return s[first], run_end[last]


def _sweep(a: Set, b: Set, want: int) -> Set:
    """Pieces where the coverage code equals `want`: 1 = in a only, 2 = in b only, 3 = both."""
    t = np.concatenate([a[0], a[1], b[0], b[1]])
    d = np.concatenate(
        [
            np.ones(a[0].size, dtype=np.int64),
            -np.ones(a[1].size, dtype=np.int64),
            np.full(b[0].size, 2, dtype=np.int64),
            np.full(b[1].size, -2, dtype=np.int64),
        ]
    )
    if t.size == 0:
        return EMPTY
    order = np.lexsort((d, t))
    t, d = t[order], d[order]
    code = np.cumsum(d)
    hit = code[:-1] == want
    return as_set(t[:-1][hit], t[1:][hit])


def intersect(a: Set, b: Set) -> Set:
    return _sweep(a, b, 3)


def subtract(a: Set, b: Set) -> Set:
    return _sweep(a, b, 1)


def union(a: Set, b: Set) -> Set:
    return as_set(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))


def complement(a: Set, lo: int, hi: int) -> Set:
    """`[lo, hi)` minus `a`."""
    whole = (np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64))
    return subtract(as_set(*whole), a)


def length(a: Set) -> int:
    return int((a[1] - a[0]).sum())


def clip(a: Set, lo: int, hi: int) -> Set:
    return as_set(np.clip(a[0], lo, hi), np.clip(a[1], lo, hi))
