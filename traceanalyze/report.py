"""Reports that combine several analyses over a store (what `traceanalyze summary` prints)."""

from __future__ import annotations

import os
from collections.abc import Callable

import polars as pl

from .analyses import health
from .analyses import summary as s
from .errors import StoreError
from .store import MARKER, Store

Scan = Callable[[str], pl.LazyFrame]


def open_store(root: str | os.PathLike[str]) -> Store:
    """A Store that must already exist (for reading commands), pinned to one manifest: every
    table a command or a Dataset reads comes from the same commit (docs/store.md)."""
    st = Store(root)
    if not (st.root / MARKER).exists():
        raise StoreError("no traceanalyze store here (ingest something first)", path=st.root)
    return st.snapshot()


def summary_report(
    store: Store | str | os.PathLike[str], *, sources: list[str] | None = None, top: int = 10
) -> dict[str, pl.DataFrame]:
    """Per source: identity, kernel overview, top kernels, copies, telemetry, iterations, health."""
    st = store if isinstance(store, Store) else open_store(store)

    def scan(table: str) -> pl.LazyFrame:
        lf = st.scan(table)
        if sources:
            lf = lf.filter(pl.col("source_id").is_in(sources))
        return lf

    if sources:
        have = set(scan("sources").select("source_id").collect()["source_id"].to_list())
        missing = sorted(set(sources) - have)
        if missing:
            raise StoreError(f"no such source(s): {', '.join(missing)}", path=st.root)
    return summary_tables(scan, top=top)


def summary_tables(scan: Scan, *, top: int = 10) -> dict[str, pl.DataFrame]:
    """`summary_report` over any `scan(table) -> LazyFrame` (a store, files read in memory, with
    or without source/device filters)."""
    srcs = (
        scan("sources")
        .select("source_id", "format", "tool", "tool_version", "path")
        .sort("source_id")
        .collect()
    )
    return {
        "sources": srcs,
        "kernels": s.kernel_overview(scan("kernels"))
        .with_columns((pl.col("total_kernel_ns") / 1e6).alias("total_kernel_ms"))
        .drop("total_kernel_ns"),
        "top_kernels": s.top_kernels(scan("kernels"), top)
        .with_columns(
            (pl.col("total_ns") / 1e6).alias("total_ms"), (pl.col("mean_ns") / 1e3).alias("mean_us")
        )
        .select("source_id", "name", "launch_count", "total_ms", "mean_us", "share_pct"),
        "top_ops": s.top_ops(scan("ops"), top)
        .with_columns(
            (pl.col("total_ns") / 1e6).alias("inclusive_ms"),
            (pl.col("mean_ns") / 1e3).alias("mean_us"),
        )
        .select("source_id", "name", "call_count", "inclusive_ms", "mean_us"),
        "copies": s.copies_by_kind(scan("memcpy"))
        .with_columns((pl.col("total_ns") / 1e6).alias("total_ms"))
        .drop("total_ns"),
        "telemetry": s.telemetry_stats(scan("gpu_samples")),
        "iterations": s.iteration_stats(scan("iterations")),
        # Measurement health (traceanalyze.analyses.health, whose docstring lists what is
        # checked): requested vs achieved sampling interval and gaps, same-stream kernel overlaps,
        # untimed events and negative durations per table, missing iteration numbers.
        "sampling_health": health.sampling_health(scan("gpu_samples"), scan("sources")),
        "kernel_health": health.kernel_health(scan("kernels")),
        "event_health": health.event_health(**{t: scan(t) for t in health.EVENT_TABLES}),
        "iteration_health": health.iteration_health(scan("iterations")),
    }
