"""One collect run is one GPU-run: the iteration log and the profiler trace that a `collect` run
writes for one rank and batch size describe the same GPU, so analyses that count GPUs
(`variability`) take them as one, and `compare` takes each side as one. Which sources belong
together is decided outside from the run's manifest (`runinfo.gpu_run_keys`), or here, without
one, from the sources' own times (`concurrent_runs`); here the frames are merged and the runs
listed, purely."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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


# The tables whose rows are a source's work, each with its device column (None: host work).
WORK_TABLES = (("iterations", "device_id"), ("kernels", "device_id"), ("ops", None))


def run_windows(
    sources: pl.LazyFrame, work: Sequence[tuple[pl.LazyFrame, str | None]]
) -> pl.DataFrame:
    """`source_id, format, rank, start_epoch_ns, end_epoch_ns, devices` of the sources whose
    times reach the epoch (`time_origin_epoch_ns` known): their work's first start and last end
    in epoch ns, the sorted device ids it ran on (empty: host only) and the rank it states."""
    parts = [
        lf.select(
            "source_id",
            "start_ns",
            "end_ns",
            (pl.col(dev) if dev else pl.lit(None, pl.Int64)).alias("device_id"),
        )
        for lf, dev in work
    ]
    spans = (
        pl.concat(parts)
        .group_by("source_id")
        .agg(
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
            pl.col("device_id").drop_nulls().unique().sort().alias("devices"),
        )
    )
    origin = pl.col("time_origin_epoch_ns")
    return (
        sources.filter(origin.is_not_null())
        .select("source_id", "format", "rank", origin)
        .join(spans, on="source_id")
        .filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
        .select(
            "source_id",
            "format",
            "rank",
            (origin + pl.col("start_ns")).alias("start_epoch_ns"),
            (origin + pl.col("end_ns")).alias("end_epoch_ns"),
            "devices",
        )
        .sort("source_id")
        .collect()
    )


def concurrent_runs(windows: pl.DataFrame, log_format: str = "iterlog") -> dict[str, str]:
    """source_id -> a GPU-run key for the sources of one run found without its manifest: an
    iteration log and the traces whose epoch windows overlap it, on the same devices (the same
    set of device ids; none for a CPU run) and the same rank where both state one. A trace that
    would pair with several logs is left alone (no guess); a log without a trace stays unkeyed.
    Sources on other hosts cannot pass: their windows would have to overlap on the same device
    ids and rank, and a traced run pairs its own log first. (`windows`: `run_windows`.)"""
    rows = windows.to_dicts()
    logs = [r for r in rows if r["format"] == log_format]
    traces = [r for r in rows if r["format"] != log_format]
    partner: dict[str, list[str]] = {}
    for t in traces:
        partner[t["source_id"]] = [lg["source_id"] for lg in logs if _one_run(lg, t)]
    out: dict[str, str] = {}
    for sid, found in partner.items():
        if len(found) == 1:
            out[sid] = out[found[0]] = f"epoch|{found[0]}"
    return out


def _one_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """One run: the windows overlap, the devices are the same, the ranks do not differ."""
    start = max(int(a["start_epoch_ns"]), int(b["start_epoch_ns"]))
    end = min(int(a["end_epoch_ns"]), int(b["end_epoch_ns"]))
    ranks = {a["rank"], b["rank"]} - {None}
    return start < end and len(ranks) <= 1 and list(a["devices"]) == list(b["devices"])


__all__ = [
    "WORK_TABLES",
    "concurrent_runs",
    "group_runs",
    "merge_gpu_runs",
    "representatives",
    "run_windows",
]
