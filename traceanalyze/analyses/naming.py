"""How a source is named to a user: its file path (from the `sources` table), not its hash.

`source_id` is a content hash: stable and unique, the key to type after `--source`, but it says
nothing to a reader. Messages, plot labels and titles name the file instead, through the small
mapping built here. Where no path is recorded (frames built by hand), the id itself is used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import polars as pl

Frame = pl.DataFrame | pl.LazyFrame

# Suffixes stripped for a short label: `rank0.pt.trace.json.gz` -> `rank0`.
_SUFFIXES = re.compile(
    r"(\.(pt|trace|json|gz|csv|txt|log|sqlite|sql|nvvp|prof|nvprof|ncu-rep|nsys-rep|zst|bz2))+$",
    re.IGNORECASE,
)


class SourceNames(dict[str, str]):
    """`source_id -> path`, and `ranks`: `source_id -> rank` of the sources whose rank is known
    (what `with_file` adds as a `rank` column when rows come from several ranks)."""

    def __init__(self, paths: Mapping[str, str], ranks: Mapping[str, int] | None = None) -> None:
        super().__init__(paths)
        self.ranks: dict[str, int] = dict(ranks or {})


def source_paths(sources: Frame | None) -> SourceNames:
    """`source_id -> path` for every source with a recorded path (and the known ranks)."""
    if sources is None:
        return SourceNames({})
    lf = sources.lazy() if isinstance(sources, pl.DataFrame) else sources
    cols = lf.collect_schema().names()
    df = lf.select("source_id", "path", *(["rank"] if "rank" in cols else [])).collect()
    paths = {str(r[0]): str(r[1]) for r in df.iter_rows() if r[1] is not None}
    ranks = {str(r[0]): int(r[2]) for r in df.iter_rows() if len(r) > 2 and r[2] is not None}
    return SourceNames(paths, ranks)


def source_name(names: Mapping[str, str] | None, source_id: str | None) -> str:
    """The file path of `source_id` when known, else the id (never an empty string)."""
    if source_id is None:
        return "(unknown source)"
    if names and source_id in names:
        return names[source_id]
    return str(source_id)


def short_name(path: str, max_len: int = 32) -> str:
    """A file's stem without profiler suffixes, cut to `max_len` characters with '…'."""
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    stem = _SUFFIXES.sub("", base) or base
    return stem if len(stem) <= max_len else stem[: max_len - 1] + "…"


def with_file(
    df: pl.DataFrame, names: Mapping[str, str], column: str = "source_id", alias: str = "file"
) -> pl.DataFrame:
    """`df` with `alias` (the path of `column`'s source, or the id) right after `column`."""
    if column not in df.columns:
        return df
    named = pl.col(column).replace_strict(
        dict(names), default=pl.col(column), return_dtype=pl.String
    )
    out = df.with_columns(named.alias(alias))
    cols = [c for c in df.columns if c != alias]
    i = cols.index(column) + 1
    return _with_rank(out.select([*cols[:i], alias, *cols[i:]]), names, column, alias)


def _with_rank(df: pl.DataFrame, names: Mapping[str, str], column: str, alias: str) -> pl.DataFrame:
    """`df` with a `rank` column after `alias`, its rows in rank order (stable), when they come
    from sources of two or more known ranks (issue 32: the 8 DLRM ranks read in source-id
    order, with no rank column)."""
    ranks = getattr(names, "ranks", None)
    if not ranks or "rank" in df.columns or df.height == 0:
        return df
    rank = pl.col(column).replace_strict(
        {k: v for k, v in ranks.items()}, default=None, return_dtype=pl.Int64
    )
    out = df.with_columns(rank.alias("rank"))
    if out["rank"].drop_nulls().n_unique() < 2:
        return df
    cols = [c for c in df.columns]
    i = cols.index(alias) + 1
    out = out.select([*cols[:i], "rank", *cols[i:]])
    return out.sort("rank", nulls_last=True, maintain_order=True)


def abbreviate(v: str, n: int, tail: bool = False) -> str:
    """`v` in `n` characters: a path keeps its end (the file's own name), anything else its
    start and end (`void at::nat…float>(int)`), so that rows stay apart."""
    if len(v) <= n:
        return v
    if tail:
        return "…" + v[len(v) - (n - 1) :]
    head = n // 2
    return v[:head] + "…" + v[len(v) - (n - 1 - head) :]


def distinct_files(paths: list[str]) -> dict[str, str]:
    """Each path's shortest name that still tells it from the others (one path: its stem):
    the fewest trailing components that differ, without the components and the trailing
    profiler suffix they all share (`…/dgxa100_n8_ngc21.09_mxnet/resnet/result_1.txt` ->
    `dgxa100_n8_ngc21.09_mxnet`; `worker7_step_12.1694128201553.pt.trace.json.gz` ->
    `worker7_step_12.1694128201553`)."""
    uniq = sorted(set(paths))
    if len(uniq) < 2:  # one file: its stem
        return {p: short_name(p, max_len=len(p)) for p in uniq}
    parts = {p: p.replace("\\", "/").split("/") for p in uniq}
    depth = max(len(x) for x in parts.values())
    k = 1
    while k < depth and len({tuple(x[-k:]) for x in parts.values()}) < len(uniq):
        k += 1
    tails = {p: x[-k:] for p, x in parts.items()}
    # positions (from the end) where every path has the same component: left out
    same = [
        j
        for j in range(1, k + 1)
        if len({t[-j] if len(t) >= j else None for t in tails.values()}) == 1
    ]
    out: dict[str, str] = {}
    for p, t in tails.items():
        kept = [c for j, c in enumerate(reversed(t), 1) if j not in same][::-1] or t
        out[p] = "/".join(kept)
    stems = {p: _SUFFIXES.sub("", n) or n for p, n in out.items()}
    if len(set(stems.values())) == len(uniq):
        out = stems
    return out if len(set(out.values())) == len(uniq) else {p: p for p in uniq}


def abbreviate_distinct(values: list[str], n: int) -> list[str]:
    """`values` each in about `n` characters (as `abbreviate`), but different values stay
    different: where two cut the same, the part where they differ is kept whole, with as much
    of the start and end as fits (`void at::…<float, …Mul…>(…` instead of the same cut for
    every `elementwise_kernel`); a value longer than `n` is printed longer when nothing
    shorter tells it apart."""
    cut = {v: abbreviate(v, n) for v in set(values)}
    for attempt in range(5):
        # a value cut apart from its own group may now read as one of another group's
        clashes = [g for g in _same_cut(cut) if len(g) > 1]
        if not clashes:
            break
        for group in clashes:
            cut.update(_apart(sorted(group), n) if attempt < 4 else {v: v for v in group})
    return [cut[v] for v in values]


def _same_cut(cut: dict[str, str]) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for v, c in cut.items():
        groups.setdefault(c, []).append(v)
    return list(groups.values())


def _apart(group: list[str], n: int) -> dict[str, str]:
    """Cuts of `group` (values that `abbreviate` made the same) that keep where they differ:
    the differing middle whole with what fits of the shared start and end around it, or, when
    the middles are too long themselves, the middles cut the same way (recursively: they share
    less, so this ends)."""
    pre = len(_common_prefix(group))
    suf = len(_common_prefix([g[::-1] for g in group]))
    ends = {v: min(suf, len(v) - pre) for v in group}
    mids = {v: v[pre : len(v) - ends[v]] for v in group}
    out: dict[str, str] = {}
    if max(len(m) for m in mids.values()) + 2 <= n:
        for v, mid in mids.items():
            room = n - len(mid) - 2
            head = min(pre, room // 2)
            tail = min(ends[v], room - head)
            head = min(pre, room - tail)
            left = v[:head] + ("…" if head < pre else "")
            right = ("…" if tail < ends[v] else "") + v[len(v) - tail :]
            out[v] = left + mid + right
    elif pre or suf:
        # the start (the kernel's own name) and a little of the end, the middles cut between
        head, tail = min(pre, n // 3), min(suf, n // 6)
        budget = n - head - tail - 2
        if budget >= 5:
            cuts = abbreviate_distinct(list(mids.values()), budget)
            for (v, _), cut in zip(mids.items(), cuts, strict=True):
                t = min(tail, ends[v])
                left = v[:head] + ("…" if head < pre else "")
                right = ("…" if t < ends[v] else "") + v[len(v) - t :]
                out[v] = (left + cut + right).replace("……", "…")
    if len(set(out.values())) < len(group):  # nothing shorter tells them apart
        out = {v: v for v in group}
    return out


def _common_prefix(values: list[str]) -> str:
    first, last = min(values), max(values)
    i = 0
    while i < min(len(first), len(last)) and first[i] == last[i]:
        i += 1
    return first[:i]
