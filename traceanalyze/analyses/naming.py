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


def source_paths(sources: Frame | None) -> dict[str, str]:
    """`source_id -> path` for every source with a recorded path."""
    if sources is None:
        return {}
    lf = sources.lazy() if isinstance(sources, pl.DataFrame) else sources
    df = lf.select("source_id", "path").drop_nulls().collect()
    return {str(s): str(p) for s, p in df.iter_rows()}


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
    return out.select([*cols[:i], alias, *cols[i:]])


def abbreviate(v: str, n: int, tail: bool = False) -> str:
    """`v` in `n` characters: a path keeps its end (the file's own name), anything else its
    start and end (`void at::nat…float>(int)`), so that rows stay apart."""
    if len(v) <= n:
        return v
    if tail:
        return "…" + v[len(v) - (n - 1) :]
    head = n // 2
    return v[:head] + "…" + v[len(v) - (n - 1 - head) :]
