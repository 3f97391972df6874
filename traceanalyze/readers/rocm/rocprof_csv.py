"""rocprof v1 `results.csv`: one row per kernel dispatch (`rocprof --stats --timestamp on
./app`; tested with rocprof of ROCm 5.7.1 on MI250X). Columns and their mapping: `rocm.v1`.

`results.stats.csv` (the per-kernel summary `--stats` writes beside it: Name, Calls,
TotalDurationNs, AverageNs, Percentage) is recognized and refused: it holds no dispatch, and
results.csv gives the same totals and more.
"""

from __future__ import annotations

import io

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import PathLike, head_text, reader_entry
from ..common.limits import read_content
from . import v1


def _header(path: PathLike) -> list[str]:
    text = head_text(path, 4096)
    if "\x00" in text:
        return []
    first = text.split("\n", 1)[0].strip("\r")
    return [c.strip().strip('"') for c in first.split(",")]


def sniff(path: PathLike) -> bool:
    """A header with Index, KernelName and gpu-id, or the `--stats` summary header."""
    cols = _header(path)
    return tuple(cols) == v1.STATS_HEADER or all(c in cols for c in v1.IDENTITY)


@reader_entry("rocprof_csv")
def read_rocprof_csv(path: PathLike) -> Tables:
    """Read rocprof v1 results.csv into normalized tables."""
    if tuple(_header(path)) == v1.STATS_HEADER:
        raise MalformedInput(
            "this is rocprof's per-kernel summary (results.stats.csv), not its dispatches; "
            "pass the results.csv beside it",
            path=path,
        )
    raw = read_content(path)
    if not raw.strip():
        raise MalformedInput("empty file", path=path)
    df = pl.read_csv(io.BytesIO(raw), infer_schema_length=0)  # all text; cast per column
    numeric = [c for c in df.columns if c not in ("KernelName", "sig", "obj")]
    df = df.with_columns(pl.col(c).cast(pl.Int64, strict=False).alias(c) for c in numeric)
    return v1.tables(df, path=path, table=None)
