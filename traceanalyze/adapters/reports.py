"""The analyses behind `DatasetView`'s methods: inputs chosen from a `DatasetView`, one or more
`traceanalyze.analyses` functions, units in ms, sources named by file. `DatasetView.summary()` etc.
call these; so does the CLI, through the `DatasetView`. The timeline and compare ones live in
`adapters.views`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import polars as pl

from ..analyses import health as h
from ..analyses import summary as s
from ..analyses.naming import with_file
from ..errors import NotAnswerable, StoreError, TraceanalyzeError, UsageProblem
from ..results import CoreUtil, Health, Summary, Variability
from ..store import MARKER, Store
from .ops import one_per_gpu_run, run_first_steady

if TYPE_CHECKING:
    from . import DatasetView

Scan = Callable[[str], pl.LazyFrame]

# The one command that records what coreutil needs (pipe metrics and per-launch cycles).
NCU_HINT = "`traceanalyze collect --profiler ncu` records them"


def open_store(root: str | os.PathLike[str]) -> Store:
    """A Store that must already exist (for reading commands), pinned to one manifest: every
    table a command or a DatasetView reads comes from the same commit (docs/store.md)."""
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


def _top_ops(ops: pl.LazyFrame, top: int) -> pl.DataFrame:
    """Top operators in ms: `inclusive_ms` (an operator and what it calls) and, when the analysis
    gives it, `self_ms` (without its children: conv2d, convolution and mkldnn_convolution stop
    showing the same time)."""
    df = s.top_ops(ops, top)
    cols = []
    for ms, candidates in (
        ("inclusive_ms", ("inclusive_ns", "total_ns")),
        ("self_ms", ("self_ns",)),
    ):
        src = next((c for c in candidates if c in df.columns), None)
        if ms not in df.columns and src is not None:
            cols.append(pl.col(src).truediv(1e6).alias(ms))
    out = df.with_columns(*cols, (pl.col("mean_ns") / 1e3).alias("mean_us"))
    keep = ["source_id", "name", "call_count"]
    keep += [c for c in ("self_ms", "inclusive_ms") if c in out.columns] + ["mean_us"]
    return out.select(keep)


def summary_tables(
    scan: Scan, *, top: int = 10, first_steady: int | None = None
) -> dict[str, pl.DataFrame]:
    """`summary_report` over any `scan(table) -> LazyFrame` (no `file` columns); iteration
    statistics after the warm-up (`analyses.warmup`; `first_steady`: a collect run's own)."""
    srcs = (
        scan("sources")
        .select("source_id", "format", "tool", "tool_version", "path")
        .collect()  # in the files' order as given (`summary` sorts a store's by id)
    )
    return {
        "sources": srcs,
        "kernels": s.kernel_overview(scan("kernels"), scan("graph_replays"))
        .with_columns(
            (pl.col("total_kernel_ns") / 1e6).alias("total_kernel_ms"),
            (pl.col("total_graph_replay_ns") / 1e6).alias("total_graph_replay_ms"),
        )
        .drop("total_kernel_ns", "total_graph_replay_ns"),
        "top_kernels": s.top_kernels(scan("kernels"), top, scan("graph_replays"))
        .with_columns(
            (pl.col("total_ns") / 1e6).alias("total_ms"), (pl.col("mean_ns") / 1e3).alias("mean_us")
        )
        .select(
            "source_id", "name", "launch_count", "total_ms", "mean_us", "share_pct", "whole_graph"
        ),
        "top_ops": _top_ops(scan("ops"), top),
        "copies": s.copies_by_kind(scan("memcpy"))
        .with_columns((pl.col("total_ns") / 1e6).alias("total_ms"))
        .drop("total_ns"),
        "telemetry": s.telemetry_stats(scan("gpu_samples")),
        "iterations": s.iteration_stats(scan("iterations"), first_steady=first_steady),
        **health_tables(scan),
    }


def health_tables(scan: Scan) -> dict[str, pl.DataFrame]:
    # traceanalyze.analyses.health's docstring lists what is checked.
    return {
        "sampling_health": h.sampling_health(scan("gpu_samples"), scan("sources")),
        "kernel_health": h.kernel_health(scan("kernels")),
        "event_health": h.event_health(**{t: scan(t) for t in h.EVENT_TABLES}),
        "iteration_health": h.iteration_health(scan("iterations")),
    }


def summary(ds: DatasetView, top: int = 10) -> Summary:
    names = ds.names()
    t = {
        k: v if k == "sources" else with_file(v, names)
        for k, v in summary_tables(ds.scan, top=top, first_steady=run_first_steady(ds)).items()
    }
    if ds.is_store:  # files: in the order given; a store's scan order is its own: by id
        t["sources"] = t["sources"].sort("source_id")
    hl = Health(t["sampling_health"], t["kernel_health"], t["event_health"], t["iteration_health"])
    return Summary(
        t["sources"],
        t["kernels"],
        t["top_kernels"],
        t["top_ops"],
        t["copies"],
        t["telemetry"],
        t["iterations"],
        hl,
    )


def health(ds: DatasetView) -> Health:
    names = ds.names()
    t = {k: with_file(v, names) for k, v in health_tables(ds.scan).items()}
    return Health(
        t["sampling_health"], t["kernel_health"], t["event_health"], t["iteration_health"]
    )


def extent(
    ds: DatasetView, tables: tuple[str, ...] = ("kernels", "memcpy", "graph_replays")
) -> tuple[int, int]:
    """First start and last end over `tables` (ns, the source's clock)."""
    parts = [
        ds.scan(t).select(pl.col("start_ns").min().alias("a"), pl.col("end_ns").max().alias("b"))
        for t in tables
    ]
    ext = pl.concat(parts).collect()
    a, b = ext["a"].min(), ext["b"].max()
    if a is None or b is None:
        raise NotAnswerable(f"no {' or '.join(tables)} with start and end times")
    return int(a), int(b)  # type: ignore[arg-type]


def trace_origin(ds: DatasetView) -> int:
    """The source's first event of any kind (kernel, copy, operator, marker, iteration): where
    `--start`/`--end` of `busy` and `timeline` count from."""
    from ..analyses import timeline as tl

    tables = ("kernels", "memcpy", "ops", "markers", "iterations", "graph_replays")
    return tl.extent(**{t: ds.scan(t) for t in tables})[0]


def busy(
    ds: DatasetView, start_ms: float | None = None, end_ms: float | None = None
) -> pl.DataFrame:
    from ..analyses.busy import busy_time

    window = None
    if start_ms is not None or end_ms is not None:
        ds.one_source("a window (start_ms=MS or end_ms=MS)")
        t0, t1 = extent(ds)
        origin = trace_origin(ds)  # the timeline's origin: the first event of any kind
        window = (
            origin + round(start_ms * 1e6) if start_ms is not None else t0,
            origin + round(end_ms * 1e6) if end_ms is not None else t1,
        )
    df = busy_time(
        ds.scan("kernels"), ds.scan("memcpy"), window=window, graph_replays=ds.scan("graph_replays")
    )
    out = df.select(
        "source_id",
        "device_id",
        "activity",
        "interval_count",
        (pl.col("window_ns") / 1e6).alias("window_ms"),
        (pl.col("busy_ns") / 1e6).alias("busy_ms"),
        "busy_pct",
    )
    return with_file(out, ds.names())


# --- coreutil --------------------------------------------------------------------------------

_DETAIL = re.compile(r" \(looked for |; also ")


def _short(reason: str, missing: list[str]) -> tuple[str, str | None]:
    """One short line (what is missing, and the command that records it) and, when that cut
    something, the full reason as details."""
    short = _DETAIL.split(reason, maxsplit=1)[0]
    if any(u in missing for u in ("fma", "fp16", "tensor", "sfu")):
        short += f"; {NCU_HINT}"
    return short, (reason if short != reason else None)


def coreutil(ds: DatasetView, weight: str = "cycles", by_kernel: bool = False) -> CoreUtil:
    from ..analyses.coreutil import core_utilization_each

    srcs = ds.scan("sources").select("source_id", "path")
    if ds.is_store and not ds.source_filter:
        # A whole store: only the sources that have kernel metrics are meant.
        with_km = ds.scan("kernel_metrics").select("source_id").unique()
        srcs = srcs.join(with_km, on="source_id", how="semi")
    expected = srcs.collect()
    if expected.height == 0:
        raise NotAnswerable(f"no source has kernel metrics; {NCU_HINT}")
    res = core_utilization_each(
        ds.scan("kernel_metrics"), weight=weight, by_kernel=by_kernel, sources=expected
    )
    base = pl.col("path").str.replace(r"^.*[/\\]", "")
    table = (
        res.table.join(expected, on="source_id", how="left")
        .with_columns(
            pl.coalesce(pl.col("path"), pl.col("source_id")).alias("file"),
            # TBD's profiled_data_ncu/batch_<bs>.csv: the batch size is in the file name.
            base.str.extract(r"batch_(\d+)").cast(pl.Int64).alias("batch_size"),
        )
        .drop("path")
        .sort(["batch_size", "file"], nulls_last=True)
    )
    front = ["source_id", "file", "batch_size", *(["name"] if by_kernel else [])]
    table = table.select([*front, *[c for c in table.columns if c not in front]])
    short = [_short(r, m) for r, m in res.unanswered.select("reason", "missing").iter_rows()]
    unanswered = res.unanswered.with_columns(
        pl.Series("reason", [x for x, _ in short], dtype=pl.String),
        pl.Series("details", [d for _, d in short], dtype=pl.String),
    ).select("source_id", "file", "reason", "details", "missing")
    return CoreUtil(table, unanswered, by_kernel)


# --- telemetry per interval, fleet variability ------------------------------------------------


def check_source(ds: DatasetView, sid: str) -> None:
    if sid not in set(ds.all_source_ids()):
        raise TraceanalyzeError(f"no such source: {sid}")


def attribute(
    ds: DatasetView, per: str = "iteration", samples_from: str | None = None
) -> pl.DataFrame:
    from ..analyses import telemetry as tel

    if per not in ("iteration", "kernel"):
        raise UsageProblem(f"per must be 'iteration' or 'kernel', got {per!r}")
    if samples_from is not None:
        ds.one_source("samples from another source (samples_from=ID)")
        check_source(ds, samples_from)
    samples, srcs = ds.scan_all("gpu_samples"), ds.scan_all("sources")
    if per == "iteration":
        df = tel.attribute_iterations(
            ds.scan("iterations"), samples, sources=srcs, samples_from=samples_from
        )
    else:
        df = tel.attribute_kernels(
            ds.scan("kernels"), samples, sources=srcs, samples_from=samples_from
        )
    names = ds.names()
    return with_file(with_file(df, names), names, "samples_source_id", "samples_file")


def variability(
    ds: DatasetView, warmup: int | None = None, top: int = 3, by: str | None = None
) -> Variability:
    """`_variability` over one fleet (`adapters.fleet`): refused over several unless `by`
    is "system" (each fleet on its own, a `system` column) or "none" (all as one)."""
    from .fleet import check_one_fleet, fleets, label_rows

    groups = fleets(ds)
    check_one_fleet(groups, by)
    if by != "system" or len(groups) < 2:
        return _variability(ds, warmup, top)
    parts = [_variability(ds.where(source=ids), warmup, top) for ids in groups.values()]
    return Variability(
        label_rows(pl.concat([p.table for p in parts], how="diagonal_relaxed"), groups),
        pl.concat([p.steady for p in parts], how="diagonal_relaxed"),
        {k: v for p in parts for k, v in p.kernel_names.items()},
    )


def _variability(ds: DatasetView, warmup: int | None, top: int) -> Variability:
    from ..analyses import variability as v

    its, kernels = one_per_gpu_run(ds)
    df = v.variability(
        its,
        ds.scan_all("gpu_samples"),
        kernels,
        warmup=warmup,
        top=top,
        sources=ds.scan_all("sources"),
        first_steady=(first := run_first_steady(ds)),
    )
    names = ds.names()
    df = with_file(with_file(df, names), names, "samples_source_id", "samples_file")
    steady = (
        v.steady_iterations(its, warmup=warmup, first_steady=first)
        .select("source_id", "device_id", "duration_ns")
        .collect()
    )
    kernel_names: dict[str, str | None] = {}
    for c in df.columns:
        if c.startswith("top") and c.endswith("_kernel"):
            vals = df[c].drop_nulls().to_list()
            kernel_names[c] = str(vals[0]) if vals else None
    return Variability(df, steady, kernel_names)
