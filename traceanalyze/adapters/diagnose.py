"""`Dataset.diagnose`: the frames the rules read (`analyses.diagnose.Inputs`), the rules, and
each finding's what-if replayed by the critical path over the same frames `critical-path`
reads, so that `traceanalyze critical-path SAME_INPUT --what-if SPEC --json` gives
mean(path_ms − predicted_ms) = the finding's `saving_ms_per_iteration`."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import polars as pl

from ..analyses import diagnose as dg
from ..analyses.critical_path import critical_path
from ..analyses.ops import host_ops
from ..analyses.timeline import with_replays
from ..errors import TraceanalyzeError
from ..results import Diagnosis
from . import DatasetView

_CP_TABLES = ("kernels", "memcpy", "api_calls", "ops", "markers", "iterations")
_KERNEL_COLS = (
    "source_id",
    "device_id",
    "stream_id",
    "correlation_id",
    "name",
    "start_ns",
    "end_ns",
    "graph_launch",  # small_kernels leaves out the kernels of graph replays
)


def _path(
    ds: DatasetView, names: dict[str, str], what_if: tuple[str, ...] = (), chain: bool = True
) -> Any:
    return critical_path(
        *path_tables(ds), names=names, what_if=what_if, by_event=not what_if, chain=chain
    )


def path_tables(ds: DatasetView) -> list[pl.LazyFrame]:
    """The critical path's inputs (`_CP_TABLES`), a whole-graph replay (`graph_replays`: nsys
    `--cuda-graph-trace=graph` writes one row per replay and no kernel rows) among the kernels as
    one GPU event named `CUDA graph <graph_id>`: on its stream, launched by its graph launch call
    (one launch edge), counted as GPU compute (what it ran is not in the export)."""
    scans = [ds.scan(t) for t in _CP_TABLES]
    scans[0] = with_replays(scans[0], ds.scan("graph_replays")).drop("whole_graph")
    return scans


def saving(ds: DatasetView, spec: str) -> float:
    """mean(path_ms − predicted_ms) with `spec` replayed on each iteration alone (as
    `critical-path --each-iteration --what-if SPEC` gives: the carry, the wait on earlier
    iterations' GPU work, keeps its length, so a saving never compounds across iterations);
    a source without iterations is one window."""
    it = _path(ds, ds.names(), (spec,), chain=False).iterations
    return float((it["path_ms"] - it["predicted_ms"]).mean() or 0.0)


def _stragglers(ds: DatasetView) -> tuple[pl.DataFrame, tuple[str, ...]] | None:
    from ..analyses.ranks.stragglers import identify

    ranks = identify(ds.scan("sources"), ds.scan("kernels"), ds.scan("ops"), ds.scan("markers"))
    if ranks["rank"].drop_nulls().n_unique() < 2:
        return None
    try:
        res = ds.stragglers()
    except TraceanalyzeError:
        return None
    return res.ranks, res.causes


def _telemetry(w: _Windowed, ds: DatasetView) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    from ..analyses import telemetry as tel

    samples = ds.scan_all("gpu_samples").collect()
    if samples.is_empty():
        return None, None
    try:
        a = tel.attribute_kernels(w.scan("kernels"), samples.lazy(), sources=ds.scan_all("sources"))
    except TraceanalyzeError:
        return None, samples
    return a, samples


def _overlap(ds: _Windowed, names: dict[str, str]) -> pl.DataFrame | None:
    from ..analyses.overlap import comm_overlap

    try:
        ov = comm_overlap(
            ds.scan("kernels"),
            ds.scan("memcpy"),
            ds.scan("iterations"),
            api_calls=ds.scan("api_calls"),
            names=names,
            graph_replays=ds.scan("graph_replays"),
        )
    except TraceanalyzeError:  # no GPU work at all (a CPU run)
        return None
    return ov if ov.height and float(ov["comm_ns"].sum() or 0) > 0 else None


class _Windowed:
    """`ds.scan` cut to the spans the critical path covers (per source: its first iteration's
    start to its last path end), so that a rule's "per iteration" totals are over the
    iterations the savings are measured on (a trace may hold far more than its profiled
    steps)."""

    def __init__(self, ds: DatasetView, path: pl.DataFrame) -> None:
        self.ds = ds
        self.win = path.group_by("source_id").agg(
            _lo=pl.col("start_ns").min(),
            _hi=(pl.col("start_ns") + (pl.col("path_ms") * 1e6).cast(pl.Int64)).max(),
        )

    def scan(self, table: str) -> pl.LazyFrame:
        lf = self.ds.scan(table)
        inside = (pl.col("start_ns") >= pl.col("_lo")) & (pl.col("start_ns") <= pl.col("_hi"))
        return lf.join(self.win.lazy(), on="source_id").filter(inside).drop("_lo", "_hi")


def _host(w: _Windowed) -> pl.DataFrame:
    """Host ranges: operators (or NVTX ranges) and the PyTorch profiler's user annotations
    (`record_function`: `ProfilerStep#N`, `enumerate(DataLoader)#…__next__`), which the
    critical path's `op:` what-ifs match too."""
    cols = ["source_id", "process_id", "thread_id", "name", "start_ns", "end_ns"]
    notes = (
        w.scan("markers")
        .filter(
            (pl.col("category") == "user_annotation")
            & pl.col("device_id").is_null()
            & pl.col("thread_id").is_not_null()
        )
        .drop_nulls(["start_ns", "end_ns"])
        .select(*cols, pl.lit("annotation").alias("basis"))
        .collect()
    )
    return pl.concat([host_ops(w.scan("ops"), w.scan("markers")), notes], how="diagonal_relaxed")


def inputs(ds: DatasetView) -> dg.Inputs:
    """Everything the rules read, collected once."""
    names = ds.names()
    cp = _path(ds, names)
    ev = cp.events if cp.events is not None else pl.DataFrame()
    if ev.height:
        ev = ev.filter(pl.col("scenario") == "trace")
    w = _Windowed(ds, cp.iterations)
    with warnings.catch_warnings():
        # "nothing to overlap" and the like: `not_checked` says it once, in its place
        warnings.simplefilter("ignore")
        ov = _overlap(w, names)
        strag = _stragglers(ds)
        attribute, samples = _telemetry(w, ds)
    calls = ("source_id", "correlation_id", "name", "start_ns", "end_ns", "duration_ns")
    return dg.Inputs(
        path=cp.iterations,
        path_events=ev,
        kernels=w.scan("kernels").select(_KERNEL_COLS).collect(),
        memcpy=w.scan("memcpy").collect(),
        api_calls=w.scan("api_calls").select(calls).collect(),
        host=_host(w),
        devices=ds.scan("devices").collect(),
        iterations=ds.scan("iterations").collect(),
        overlap=ov,
        stragglers=strag,
        attribute=attribute,
        samples=samples,
        names=names,
        ranks=dict(ds.scan("sources").select("source_id", "rank").collect().iter_rows()),
    )


def command_args(ds: DatasetView) -> tuple[str, ...]:
    """The input as command-line arguments (files, or --store DIR, and the filters)."""
    args: list[str] = ["--store", ds.origin] if ds.is_store else ds.origin.split(", ")
    for s in ds.source_filter:
        args += ["--source", s]
    for d in ds.device_filter:
        args += ["--device", str(d)]
    return tuple(args)


def diagnose(ds: DatasetView, *, replay: bool = True, groups: bool = False) -> Diagnosis:
    """The rules over `ds`; each finding's what-if replayed (`replay=False`: no savings;
    `groups`: also each kernel group's of `gpu_bound`, one replay each)."""
    inp = inputs(ds)
    found, skipped = dg.run(inp)
    todo = dg.specs(found, groups) if replay else []
    savings = {spec: saving(ds, spec) for spec in todo}
    findings = dg.finalize(found, savings, inp.mean_path_ms)
    return Diagnosis(
        verdict=dg.verdict(inp),
        findings=tuple(findings),
        not_checked=tuple(skipped),
        iterations=with_names(inp.path, inp.names),
        inputs=command_args(ds),
    )


def with_names(df: pl.DataFrame, names: Mapping[str, str]) -> pl.DataFrame:
    from ..analyses.naming import with_file

    return with_file(df, dict(names))


__all__ = ["command_args", "diagnose", "inputs", "saving"]
