"""Sub-track placement of complete slices, streamed (the Perfetto exports, JSON and protobuf).

The complete slices of one track must nest (Perfetto requires it of JSON `ph: "X"` and of
protobuf begin/end pairs). Where two slices of a track overlap without one holding the other,
the later one goes to a sub-track `n` of the same process (`tid + n * LANE_TID_OFFSET`): the
first sub-track where it nests in the slices still open there, taking the track's slices in
order of start, longer first (then block, then row).

Streamed: the slices' keys (`pid, tid, s, e, b, r`: track, times, block and row) are sorted out
of memory (`extsort`: dealt into spill files by ranges of start time, each range sorted by
track, then start, longer first, block and row) and walked `BATCH_ROWS` at a time; per track its
latest end and the stacks of its sub-tracks' open slices carry from one batch to the next (the
tracks may take turns). Per batch, the tracks whose slices all nest on the track itself (the usual
case) are found without a loop (`_nested`: no slice ends strictly inside a later one that starts
before it ends, a range maximum over the ends); the others go through the loop, a slice that
overlaps nothing on its track skipped. What stays in memory for the whole trace is what the answer
holds: the rows placed on a sub-track (`n > 0`, few in real traces: kernels of one stream that
really ran concurrently, ranges that cross) and the distinct tracks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from .extsort import sorted_batches

LANE_TID_OFFSET = 10_000_000
BATCH_ROWS = 1 << 17

Frame = pl.DataFrame | pl.LazyFrame
Block = tuple[Frame | None, pl.Expr, pl.Expr]


@dataclass(frozen=True)
class Placement:
    """`lanes`: `b, r, n` of every slice placed on a sub-track (block, row within the block,
    sub-track n > 0), sorted by block and row. `tracks`: `pid, tid, base, n` of every track the
    slices use (`tid` with its sub-track; `base`, `n` null on a track itself)."""

    lanes: pl.DataFrame
    tracks: pl.DataFrame

    def of_block(self, b: int) -> pl.DataFrame:
        """`r, n` of block `b`'s rows on sub-tracks."""
        return self.lanes.filter(pl.col("b") == b).select("r", "n")

    def with_tracks(self, lf: pl.LazyFrame, b: int, pid: pl.Expr, tid: pl.Expr) -> pl.LazyFrame:
        """Block `b` (lazy, its rows in the order placed) with `_pid`, `_tid` (the sub-track's
        tid) added."""
        n = self.of_block(b).with_columns(pl.col("r").cast(pl.UInt32))
        out = lf.with_row_index("_r")
        if n.height:
            out = out.join(n.lazy(), left_on="_r", right_on="r", how="left", maintain_order="left")
        else:
            out = out.with_columns(pl.lit(None, pl.Int64).alias("n"))
        return out.with_columns(
            pid.cast(pl.Int64).alias("_pid"),
            (tid.cast(pl.Int64) + pl.col("n").fill_null(0) * LANE_TID_OFFSET).alias("_tid"),
        ).drop("_r", "n")


def lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def place(blocks: Sequence[Block], workdir: str) -> Placement:
    """The placement of the slices of `blocks` (frame, pid, tid; the frames' rows all timed),
    `BATCH_ROWS` keys at a time."""
    parts = [
        lazy(df)
        .select(
            p.cast(pl.Int64).alias("pid"),
            t.cast(pl.Int64).alias("tid"),
            pl.col("start_ns").cast(pl.Int64).alias("s"),
            pl.col("end_ns").cast(pl.Int64).alias("e"),
            pl.lit(i, pl.Int64).alias("b"),
        )
        .with_row_index("r")
        .with_columns(pl.col("r").cast(pl.Int64))
        for i, (df, p, t) in enumerate(blocks)
        if df is not None
    ]
    walk = _Walk()
    if parts:
        order = ["pid", "tid", "s", "e", "b", "r"]
        desc = [False, False, False, True, False, False]
        for batch in sorted_batches(
            pl.concat(parts), order, workdir, descending=desc, bucket_by="s", batch_rows=BATCH_ROWS
        ):
            walk.batch(*(batch[c].to_numpy() for c in order))
    return walk.result()


_NEG = -(1 << 62)


class _Walk:
    """The sorted keys, a batch at a time (each track's slices in order; the tracks may take
    turns from one batch to the next): per track its latest end so far and the stacks of its
    sub-tracks (the ends of their open slices, innermost last) carry over."""

    def __init__(self) -> None:
        self.reach: dict[tuple[int, int], int] = {}
        self.open: dict[tuple[int, int], list[list[int]]] = {}
        self.lanes: list[tuple[int, int, int]] = []
        self.sub: dict[tuple[int, int], tuple[int, int]] = {}

    def batch(self, pid: np.ndarray, tid: np.ndarray, s: np.ndarray, e: np.ndarray,
              b: np.ndarray, r: np.ndarray) -> None:  # fmt: skip
        n = pid.size
        if n == 0:
            return
        new_seg = np.ones(n, dtype=bool)
        new_seg[1:] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
        starts = np.flatnonzero(new_seg)
        keys = list(zip(pid[starts].tolist(), tid[starts].tolist(), strict=True))
        carry = np.array([self.reach.get(k, _NEG) for k in keys], dtype=np.int64)
        seg = np.cumsum(new_seg) - 1
        prev = (
            pl.DataFrame({"g": seg, "e": e})
            .select(pl.col("e").cum_max().shift(1).over("g").fill_null(_NEG))["e"]
            .to_numpy()
        )
        new_run = s >= np.maximum(prev, carry[seg])
        lone = new_run.copy()
        lone[:-1] &= new_run[1:] & ~new_seg[1:]
        lone[np.append(starts[1:] - 1, n - 1)] = False  # a track's last: it may go on later
        reach = np.maximum(np.maximum.reduceat(e, starts), carry)
        self.reach.update(zip(keys, reach.tolist(), strict=True))
        chains = [(self.open.get(k) or [[]])[0] for k in keys]
        ok, after = _nested(seg, s, e, chains, s[np.append(starts[1:] - 1, n - 1)])
        for g in np.flatnonzero(ok).tolist():  # every slice on the track itself
            lanes = self.open.get(keys[g]) or [[]]
            self.open[keys[g]] = [after[g], *lanes[1:]]
        idx = np.flatnonzero(~lone & ~ok[seg])
        self._loop(idx, seg, keys, pid, tid, s, e, b, r, new_run)

    def _loop(self, idx: np.ndarray, seg: np.ndarray, keys: list[tuple[int, int]],
              pid: np.ndarray, tid: np.ndarray, s: np.ndarray, e: np.ndarray, b: np.ndarray,
              r: np.ndarray, new_run: np.ndarray) -> None:  # fmt: skip
        """Each slice of `idx` on the first sub-track where it nests (`_nest`), a track at a
        time; the track itself (sub-track 0) is tried inline, the rest in `_nest`."""
        g = seg[idx]
        cuts = [0, *(np.flatnonzero(np.diff(g)) + 1).tolist(), idx.size]
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            if lo == hi:
                continue
            part = idx[lo:hi]
            key = keys[int(g[lo])]
            open_ = self.open.get(key) or [[]]
            lane0 = open_[0]
            rows = zip(
                part.tolist(), s[part].tolist(), e[part].tolist(), new_run[part].tolist(),
                strict=True,
            )  # fmt: skip
            for i, a, end, fresh in rows:
                if fresh:
                    lane0 = [end]
                    open_ = [lane0]
                    continue
                while lane0 and lane0[-1] <= a:
                    lane0.pop()
                if not lane0 or end <= lane0[-1]:
                    lane0.append(end)
                    continue
                lane = _nest(open_, a, end)
                self.lanes.append((int(b[i]), int(r[i]), lane))
                self.sub[(key[0], key[1] + lane * LANE_TID_OFFSET)] = (key[1], lane)
            self.open[key] = open_

    def result(self) -> Placement:
        lanes = pl.DataFrame(
            self.lanes, schema={"b": pl.Int64, "r": pl.Int64, "n": pl.Int64}, orient="row"
        ).sort("b", "r")
        schema = {"pid": pl.Int64, "tid": pl.Int64, "base": pl.Int64, "n": pl.Int64}
        rows: list[tuple[int, int, int | None, int | None]]
        rows = [(p, t, None, None) for p, t in self.reach]
        rows += [(p, t, base, n) for (p, t), (base, n) in self.sub.items()]
        return Placement(lanes, pl.DataFrame(rows, schema=schema, orient="row").sort("pid", "tid"))


def _with_open(
    seg: np.ndarray, s: np.ndarray, e: np.ndarray, chains: list[list[int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Track, start and end of the open slices (`chains`) and the batch's rows: per track its
    open ones first (outermost first, starting before every time of the batch), then its rows
    in order (placed, not sorted: the rows come sorted)."""
    counts = np.fromiter((len(c) for c in chains), dtype=np.int64, count=len(chains))
    n, m = s.size, int(counts.sum())
    g_v = np.repeat(np.arange(len(chains)), counts)
    e_v = np.fromiter((x for c in chains for x in c), dtype=np.int64, count=m)
    before = np.cumsum(counts) - counts  # the open ones of the tracks before
    d_v = np.arange(m) - before[g_v]
    at_rows = np.arange(n) + before[seg] + counts[seg]
    at_v = np.searchsorted(seg, np.arange(len(chains)))[g_v] + before[g_v] + d_v
    g, s_, e_ = (np.empty(n + m, np.int64) for _ in range(3))
    g[at_rows], g[at_v] = seg, g_v
    lo = min(int(s.min()), int(e_v.min()) if m else int(s.min())) - 1 - m
    s_[at_rows], s_[at_v] = s, lo + d_v
    e_[at_rows], e_[at_v] = e, e_v
    return g, s_, e_


def _nested(
    seg: np.ndarray, s: np.ndarray, e: np.ndarray, chains: list[list[int]], last: np.ndarray
) -> tuple[np.ndarray, dict[int, list[int]]]:
    """Which tracks of a batch (`seg`: per row its track's index) have every slice nesting on
    the track itself, given the ends of the slices still open there (`chains`, outermost
    first), without the loop; and for those, the ends open after their last start (`last`).

    The slices of a track (the open ones first, then in order of start, longer first) nest
    exactly when none crosses another: no slice ends strictly inside a later one's span, after
    its start and before its end. The later slices that start before slice i ends are the next
    ones up to the first that starts at or after its end, so: the latest end among them (a
    range maximum, from a sparse table) is at most i's end, for every i."""
    g, s_, e_ = _with_open(seg, s, e, chains)
    base = int(s_.min())
    span = max(int(e_.max()), int(s_.max())) - base + 1
    if len(chains) * span < (1 << 62):
        bad = _crossed(g * span + (s_ - base), g * span + (e_ - base), e_)
    else:  # times too far apart to pack the track with them: a track at a time
        cut = np.flatnonzero(np.diff(g)) + 1
        parts = zip(np.split(s_, cut), np.split(e_, cut), strict=True)
        bad = np.concatenate([_crossed(a - a[0], b - a[0], b) for a, b in parts])
    ok = np.ones(len(chains), dtype=bool)
    ok[np.unique(g[bad])] = False
    after: dict[int, list[int]] = {}
    still = e_ > last[g]
    for i in np.flatnonzero(ok).tolist():
        ends = e_[(g == i) & still]
        after[i] = np.sort(ends)[::-1].tolist()
    return ok, after


def _crossed(key_s: np.ndarray, key_e: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per slice (`key_s`, `key_e`: start and end with the track packed in, ascending by
    start; `e`: its end), whether a later slice of its track that starts before it ends
    (strictly) ends after it."""
    k = e.size
    q = np.arange(k)
    stop = np.searchsorted(key_s, key_e, side="left")  # the later ones: q + 1 .. stop - 1
    width = np.maximum(stop - q - 1, 0)
    top = np.full(k, np.iinfo(np.int64).min)  # none later: nothing crosses
    live = np.flatnonzero(width)
    if live.size == 0:
        return np.zeros(k, dtype=bool)
    level = np.floor(np.log2(width[live])).astype(np.int64)
    table = [e]  # table[j][x]: the latest end of x .. x + 2^j - 1
    for j in range(1, int(level.max()) + 1):
        prev, h = table[-1], 1 << (j - 1)
        table.append(np.maximum(prev[:-h], prev[h:]))
    lo, hi = live + 1, stop[live] - (1 << level)
    for j in np.unique(level).tolist():
        at = level == j
        t = table[j]
        top[live[at]] = np.maximum(t[lo[at]], t[hi[at]])
    return top > e


def _nest(open_: list[list[int]], a: int, end: int) -> int:
    """The first sub-track where the slice `[a, end]` nests (a new one when none), its end
    pushed there; `open_`: per sub-track the ends of its open slices, innermost last."""
    for lane, ends_open in enumerate(open_):
        while ends_open and ends_open[-1] <= a:
            ends_open.pop()
        if not ends_open or end <= ends_open[-1]:
            ends_open.append(end)
            return lane
    open_.append([end])
    return len(open_) - 1
