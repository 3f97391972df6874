"""The one warm-up rule, used by `summary`, `variability`, `mfu` and `collect`'s throughput.csv
(docs/warmup.md states it for users).

1. A `collect` run's own `--warmup` W, read from its manifest beside the files: iterations
   numbered below W are warm-up (throughput.csv's rule; a profiler trace of the run numbers its
   steps the same way, so it loses only steps that really were warm-up).
2. Else `warmup` given by the user: the first `warmup` iterations of each GPU (by number).
3. Else the first `max(1, floor(10 % of the GPU's iterations))` of each GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

RULE = "max(1, floor(10 % of each GPU's iterations))"


def steady(
    iterations: pl.LazyFrame,
    keys: Sequence[str],
    *,
    warmup: int | None = None,
    first_steady: int | None = None,
) -> pl.LazyFrame:
    """The rows of `iterations` after the warm-up (the module doc's rule), per `keys` (a GPU:
    source and device, or source and rank)."""
    if first_steady is not None and warmup is None:
        return iterations.filter(pl.col("iteration") >= first_steady)
    pos = pl.col("iteration").rank("ordinal").over(keys) - 1
    n = pl.len().over(keys)
    drop = pl.lit(warmup) if warmup is not None else pl.max_horizontal(pl.lit(1), n // 10)
    return iterations.filter(pos >= drop)


__all__ = ["RULE", "steady"]
