"""One collect run is one GPU-run: the iteration log and the profiler trace that a `collect` run
writes for one rank and batch size describe the same GPU, so analyses that count GPUs
(`variability`) take them as one, and `compare` takes each side as one. Which sources belong
together is decided outside (the run's manifest, `runinfo.gpu_run_keys`); here the frames are
merged and the runs listed, purely."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import polars as pl


def representatives(counts: Mapping[str, int], keys: Mapping[str, str | None]) -> dict[str, str]:
    """source_id -> the source that stands for its GPU-run: of the sources sharing a key, the
    one with the most iterations (the iteration log covers every step, a trace only the profiled
    ones; ties to the smallest id). Sources without a key stand for themselves."""
    groups: dict[str, list[str]] = {}
    for sid, key in keys.items():
        if key is not None:
            groups.setdefault(key, []).append(sid)
    out = {sid: sid for sid in keys}
    for members in groups.values():
        best = min(members, key=lambda s: (-counts.get(s, 0), s))
        out.update({s: best for s in members})
    return out


def merge_gpu_runs(
    iterations: pl.LazyFrame, kernels: pl.LazyFrame, stand_for: Mapping[str, str]
) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """The iterations of the representative sources only, and every row of `kernels` (or of
    any per-source table: devices) under its representative's source id (a trace's kernels
    time the GPU its iteration log counts)."""
    merged = {s: r for s, r in stand_for.items() if s != r}
    if not merged:
        return iterations, kernels
    its = iterations.filter(~pl.col("source_id").is_in(list(merged)))
    ks = kernels.with_columns(pl.col("source_id").replace(merged))
    return its, ks


def group_runs(with_work: Iterable[str], stand_for: Mapping[str, str]) -> dict[str, list[str]]:
    """The GPU-runs among the sources that have work (kernels, copies, operators, iterations):
    representative source -> its sources, sorted, representatives in order. A source stands for
    itself unless `stand_for` (`representatives`) says otherwise. Telemetry-only sources are no
    GPU-run: their samples go with the work they pair with (`telemetry.pair_samples`)."""
    runs: dict[str, list[str]] = {}
    for sid in sorted(set(with_work)):
        runs.setdefault(stand_for.get(sid, sid), []).append(sid)
    return dict(sorted(runs.items()))


__all__ = ["group_runs", "merge_gpu_runs", "representatives"]
