"""`Dataset`: the one object every analysis takes, over files read in memory or over a store.

    import traceanalyze as ta
    ds = ta.open("run.pt.trace.json.gz", "nvml.csv")      # files, read (not written anywhere)
    ds = ta.open(store="store/")                          # a store, scanned lazily
    ds.where(source="ab12…", device=0).kernels            # polars LazyFrame, filtered

Filters narrow every table the same way: `source` (ids), `device` (device ids; host-side rows with
no device, such as iterations and markers, stay), `start`/`end` (ns in the source's clock; rows
whose interval overlaps the window stay). `scan_all` ignores the source filter: telemetry for the
selected sources may come from another source of the same run (aligned through epoch origins).

One method per analysis, each returning polars frames or a small frozen result of frames
(`traceanalyze.results`) with the numbers the CLI prints; times in ms:

    ds.summary(top=10)          -> Summary       ds.health()           -> Health
    ds.busy(start_ms, end_ms)   -> DataFrame     ds.attribute(per=...) -> DataFrame
    ds.coreutil(weight=...)     -> CoreUtil      ds.variability()      -> Variability
    ds.timeline(...)            -> Timeline      ds.compare(other)     -> Comparison
    ds.compare_sources(a, b)    -> Comparison   ds.stragglers()       -> Stragglers
    ds.ranks()                  -> DataFrame
    ds.critical_path(...)       -> CriticalPath  (what bounds each iteration; what-if)
    ds.diagnose()               -> Diagnosis     (what is wrong, and what fixing it saves)

Plots take those results: `traceanalyze.plot.timeline(ds.timeline(), "t.png")`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from .analyses.naming import source_paths, with_file
from .errors import TraceanalyzeError, UsageProblem
from .filters import DEVICE_WORK_TABLES, check_devices

if TYPE_CHECKING:
    from .results import (
        Comparison,
        CoreUtil,
        CriticalPath,
        Diagnosis,
        Health,
        Launches,
        Roofline,
        Scaling,
        Stragglers,
        Summary,
        Timeline,
        Variability,
    )

Scan = Callable[[str], pl.LazyFrame]
PathLike = str | os.PathLike[str]


def _ids(x: Any) -> tuple[Any, ...]:
    if x is None:
        return ()
    if isinstance(x, (str, int)):
        return (x,)
    return tuple(x)


@dataclass(frozen=True)
class Dataset:
    """Tables of files or of a store, with source/device/time filters; lazy throughout.

    Each table is an attribute (`ds.kernels`, a LazyFrame) except `ops` and `runs`, which are
    analyses (`ds.ops()`, `ds.runs()`): their tables are `ds.scan("ops")`, `ds.scan("runs")`."""

    _scan: Scan
    source_filter: tuple[str, ...] = ()
    device_filter: tuple[int, ...] = ()
    start_ns: int | None = None
    end_ns: int | None = None
    origin: str = ""  # what the data came from, for messages
    _store: Any = field(default=None, compare=False)

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def from_files(
        cls, paths: Iterable[PathLike], *, format: str | None = None, **options: Any
    ) -> Dataset:
        from .readers import read
        from .tables import Tables

        files = [os.fspath(p) for p in paths]
        if not files:
            raise TraceanalyzeError("no files given")
        tables = Tables.concat([read(f, format=format, **options) for f in files])
        return cls(_TablesScan(tables), origin=", ".join(files))

    @classmethod
    def from_store(cls, root: PathLike) -> Dataset:
        from .adapters.reports import open_store

        st = open_store(root)
        return cls(st.scan, origin=os.fspath(root), _store=st)

    @classmethod
    def from_tables(cls, tables: Any) -> Dataset:
        """Over `Tables` already in memory (e.g. from `ta.read`)."""
        return cls(_TablesScan(tables), origin="tables")

    def where(
        self,
        source: str | Sequence[str] | None = None,
        device: int | Sequence[int] | None = None,
        start: int | None = None,
        end: int | None = None,
    ) -> Dataset:
        """A narrower view; an unknown source id is an error naming it."""
        ds = self
        if source is not None:
            want = tuple(str(s) for s in _ids(source))
            have = set(self.all_source_ids())
            missing = sorted(set(want) - have)
            if missing:
                raise TraceanalyzeError(f"no such source(s): {', '.join(missing)}")
            ds = replace(ds, source_filter=want)
        if device is not None:
            want_dev = tuple(int(d) for d in _ids(device))
            check_devices(want_dev, ds.active_devices())
            ds = replace(ds, device_filter=want_dev)
        if start is not None:
            ds = replace(ds, start_ns=int(start))
        if end is not None:
            ds = replace(ds, end_ns=int(end))
        return ds

    # --- tables ---------------------------------------------------------------------------

    def scan(self, table: str) -> pl.LazyFrame:
        """One table, every filter applied."""
        lf = self.scan_all(table)
        if self.source_filter:
            lf = lf.filter(pl.col("source_id").is_in(list(self.source_filter)))
        return lf

    def scan_all(self, table: str) -> pl.LazyFrame:
        """One table, device and time filters only (every source)."""
        lf = self._scan(table)
        names = lf.collect_schema().names()
        if self.device_filter and "device_id" in names:
            keep = pl.col("device_id").is_in(list(self.device_filter))
            if table in ("iterations", "markers"):
                # Host-side steps and annotations (no device) frame every device's work.
                keep = keep | pl.col("device_id").is_null()
            lf = lf.filter(keep)
        if (self.start_ns is not None or self.end_ns is not None) and "start_ns" in names:
            end_col = pl.col("end_ns") if "end_ns" in names else pl.col("start_ns")
            if self.start_ns is not None:
                lf = lf.filter(end_col.fill_null(pl.col("start_ns")) >= self.start_ns)
            if self.end_ns is not None:
                lf = lf.filter(pl.col("start_ns") <= self.end_ns)
        return lf

    def table(self, table: str) -> pl.DataFrame:
        return self.scan(table).collect()

    def __getattr__(self, name: str) -> pl.LazyFrame:
        from . import schema

        if name in schema.TABLE_NAMES:
            return self.scan(name)
        raise AttributeError(name)

    def source_ids(self) -> list[str]:
        ids = self.scan("sources").select("source_id").collect()["source_id"].to_list()
        return sorted(str(i) for i in ids)

    def all_source_ids(self) -> list[str]:
        ids = self._scan("sources").select("source_id").collect()["source_id"].to_list()
        return sorted(str(i) for i in ids)

    def active_devices(self) -> set[int]:
        """Device ids with work or samples in the selected sources (kernels, copies, metrics,
        telemetry, iterations); a device listed only in a trace's metadata is not one."""
        found: set[int] = set()
        for table in DEVICE_WORK_TABLES:
            col = self.scan(table).select(pl.col("device_id").drop_nulls().unique()).collect()
            found.update(int(d) for d in col["device_id"].to_list())
        return found

    def names(self) -> dict[str, str]:
        """source_id -> file path, over every source (messages may name any of them)."""
        return source_paths(self._scan("sources"))

    @property
    def is_store(self) -> bool:
        return self._store is not None

    def one_source(self, what: str) -> str:
        """The one selected source id; a `UsageProblem` listing them when several (or none)."""
        from .analyses.naming import source_name

        ids = self.source_ids()
        if len(ids) != 1:
            names = self.names()
            listed = ", ".join(f"{i} ({source_name(names, i)})" if i in names else i for i in ids)
            raise UsageProblem(
                f"{what} works on one source; choose one with source=ID: "
                f"{listed or 'none selected'}"
            )
        return ids[0]

    # --- analyses (traceanalyze.adapters.reports, .views) --------------------------

    def summary(self, top: int = 10) -> Summary:
        """Per source: kernels, top kernels, top operators, copies, telemetry, iterations and
        measurement health; `top` rows of the top tables per source."""
        from .adapters import reports as report

        return report.summary(self, top)

    def health(self) -> Health:
        """Measurement health per source: sampling interval and gaps, same-stream kernel
        overlaps, untimed and negative events, missing and duplicate iterations."""
        from .adapters import reports as report

        return report.health(self)

    def busy(self, start_ms: float | None = None, end_ms: float | None = None) -> pl.DataFrame:
        """Share of time at least one kernel (and one copy) ran, per source, device, activity.

        `start_ms`/`end_ms`: a window in ms after the source's first event of any kind (one
        source; the origin of `timeline` too).
        Columns: source_id, file, device_id, activity, interval_count, window_ms, busy_ms,
        busy_pct."""
        from .adapters import reports as report

        return report.busy(self, start_ms, end_ms)

    def coreutil(self, weight: str = "cycles", by_kernel: bool = False) -> CoreUtil:
        """FMA/FP16/Tensor/SFU pipe utilization per file (ncu % of peak, or nvprof levels 0–10),
        weighted by `weight` ("cycles", "duration", "none"); batch size from `batch_<n>` in the
        file name. Files that cannot answer are in `unanswered`, never an exception."""
        from .adapters import reports as report

        return report.coreutil(self, weight, by_kernel)

    def timeline(
        self,
        start_ms: float | None = None,
        end_ms: float | None = None,
        iteration: int | None = None,
        samples_from: str | None = None,
        max_bars: int = 1500,
        whole: bool = False,
    ) -> Timeline:
        """The data behind the timeline of one source: lanes, iterations, telemetry, window.

        Window: `start_ms`/`end_ms` after the trace's first event (of any kind: the origin
        `busy` uses too), or `iteration`'s span; default the span of device activity and host
        operators (`whole`: every event, markers and iterations included). Telemetry: the
        source's own, `samples_from`'s, or a paired source's."""
        from .adapters import views as report_views

        return report_views.timeline(
            self, start_ms, end_ms, iteration, samples_from, max_bars, whole=whole
        )

    def attribute(self, per: str = "iteration", samples_from: str | None = None) -> pl.DataFrame:
        """Time-weighted SM clock, power, temperature and energy per iteration or kernel
        (`per`), with `file` and `samples_file` (where the telemetry came from)."""
        from .adapters import reports as report

        return report.attribute(self, per, samples_from)

    def variability(
        self, warmup: int | None = None, top: int = 3, by: str | None = None
    ) -> Variability:
        """Per GPU: steady iteration time, top kernels, telemetry, robust z and outliers, over
        the runs of one system and model (`adapters.fleet`); several are refused, listing them,
        unless `by="system"` (each on its own) or `by="none"` (all as one fleet)."""
        from .adapters import reports as report

        return report.variability(self, warmup, top, by)

    def compare(
        self, other: Dataset, *, ops: bool = False, pool: bool = False, by_role: bool = False
    ) -> Comparison:
        """This dataset (A) against `other` (B): overview and kernels matched by name and
        launch geometry; deltas B − A, ratios B / A. `ops=True`: host operators matched by
        name with their kernels, like HTA's ops_diff. A side of several GPU-runs is refused (a
        `UsageProblem` naming them) unless `pool=True`; its description then says how many.
        `by_role=True`: kernels matched by role (GEMM, convolution, collective, …: a stated
        heuristic, `analyses.kernel_roles`) instead of name, e.g. an AMD run against an NVIDIA
        one."""
        from .adapters import views as report_views

        a, b = f"A = {self.origin}", f"B = {other.origin}"
        return report_views.compare(self, other, a, b, ops=ops, pool=pool, by_role=by_role)

    def compare_sources(
        self, a: str, b: str, *, ops: bool = False, by_role: bool = False
    ) -> Comparison:
        """Two source ids of this dataset, A and B (the same id may be both)."""
        from .adapters import views as report_views

        return report_views.compare_sources(self, a, b, ops=ops, by_role=by_role)

    # --- trace analyses (traceanalyze.analyses.launches, idle, overlap, annotations) ---------

    def launches(self, *, by_kernel: bool = False, delay_floor_ns: int = 100_000) -> Launches:
        """Kernel launch statistics: each kernel joined to its launch API call (correlation id).

        `stats` per source and device (or kernel name, `by_kernel`): launch_count, mean, median,
        p95 of cpu_ns (the call), gpu_ns (the kernel), delay_ns (kernel start - call start), with
        whole-graph replays; `outliers`: short kernels (gpu_ns < cpu_ns), long delays (> device
        p95 and `delay_floor_ns`); `table`: one row per kernel. A `file` column names sources."""
        from .analyses.launches import kernel_launches

        names = self.names()
        k, a, g = (self.scan(t) for t in ("kernels", "api_calls", "graph_replays"))
        res = kernel_launches(
            k, a, by_kernel=by_kernel, delay_floor_ns=delay_floor_ns, names=names, graph_replays=g
        )
        files = {f: with_file(getattr(res, f), names) for f in ("stats", "outliers", "table")}
        return replace(res, **files)

    def idle(self) -> pl.DataFrame:
        """GPU idle time per device (stream_id null) and per stream, split by cause: copy_ns,
        launch_gap_ns, sync_ns, host_wait_ns, unknown_ns (they add up to idle_ns; a device row's
        idle_ns is `busy`'s window minus busy time). See `traceanalyze idle --help`."""
        from .analyses.idle import idle_time

        # the window: the Dataset's start/end when both are set, else busy's (first to last
        # kernel or copy of each source)
        window = None
        if self.start_ns is not None and self.end_ns is not None:
            window = (self.start_ns, self.end_ns)
        names = self.names()
        k, m, a, g = (self.scan(t) for t in ("kernels", "memcpy", "api_calls", "graph_replays"))
        return with_file(idle_time(k, m, a, window=window, names=names, graph_replays=g), names)

    def overlap(self) -> pl.DataFrame:
        """Communication (collective kernels, peer and host copies) against computation per
        device, and per iteration where known: comm_ns, compute_ns, overlapped_ns, exposed_ns,
        overlap_pct."""
        from .analyses.overlap import comm_overlap

        names = self.names()
        k, m, it, g = (self.scan(t) for t in ("kernels", "memcpy", "iterations", "graph_replays"))
        res = comm_overlap(k, m, it, api_calls=self.scan("api_calls"), names=names, graph_replays=g)
        return with_file(res, names)

    def annotations(self, *, depth: int | None = None, strip_ids: bool = False) -> pl.DataFrame:
        """GPU time and events per user annotation (gpu_user_annotation, or NVTX / host ranges
        projected through launches), nested names as 'outer/inner' paths cut to `depth`;
        `strip_ids` drops PyTorch's ', seq = N' / ', op_id = N'."""
        from .analyses.annotations import annotation_time

        names = self.names()
        k, m, a, mk, g = (
            self.scan(t) for t in ("kernels", "memcpy", "api_calls", "markers", "graph_replays")
        )
        res = annotation_time(
            k, m, a, mk, depth=depth, strip_ids=strip_ids, names=names, graph_replays=g
        )
        return with_file(res, names)

    # --- several ranks of one job (traceanalyze.analyses.ranks.stragglers) ------------------------

    def ranks(self) -> pl.DataFrame:
        """Who is which rank of which job, per source (`rank_from` says how it is known; one
        row per process for a file holding several ranks) and its collective_count."""
        from .analyses.ranks.stragglers import identify

        return identify(
            self.scan("sources"), self.scan("kernels"), self.scan("ops"), self.scan("markers")
        )

    def stragglers(self, *, job: str | None = None, align: bool | None = None) -> Stragglers:
        """Which rank holds the job back: collectives matched across ranks, who arrives last
        and how often, each rank's waiting and the waiting it causes, a verdict and, per
        straggler, why (SM clock/power/temperature where telemetry covers it, kernel time and
        GPU idle before its collectives). `job`: which job when the sources hold several;
        `align`: apply the clock offsets estimated from collective ends (default: only when
        some rank's trace has no epoch time). Rules in docs/stragglers.md."""
        from .analyses.ranks.stragglers import stragglers

        return stragglers(
            self.scan_all("sources"),  # sampler logs of the ranks may be other sources
            self.scan("kernels"),
            self.scan("ops"),
            self.scan("markers"),
            self.scan_all("gpu_samples"),
            api_calls=self.scan("api_calls"),
            gpu_metrics=self.scan_all("gpu_metrics"),
            job=job,
            align=align,
        )

    def critical_path(
        self,
        iteration: int | None = None,
        what_if: Sequence[str] = (),
        by_event: bool = False,
        across_ranks: bool = False,
        each_iteration: bool = False,
    ) -> CriticalPath:
        """What bounds each iteration: the longest dependency chain through host events,
        launches, stream order and waits, split by kind (`analyses.critical_path`); `what_if`
        specs ('kernel:REGEX=F', 'op:REGEX=F', 'launch=F') replay it with scaled times; with
        `by_event` the events on the path; `across_ranks` adds the job-wide path of iterations
        that several ranks share (joined at their collectives); `each_iteration`: every what-if
        replayed on each iteration alone, its carry kept (as `iteration=N` gives for each N; the
        savings `diagnose` reports). A `file` column names each source."""
        from .adapters.diagnose import path_tables
        from .analyses.critical_path import critical_path

        names = self.names()
        res = critical_path(
            *path_tables(self),
            names=names,
            iteration=iteration,
            what_if=tuple(what_if),
            by_event=by_event,
            across_ranks=across_ranks,
            chain=not each_iteration,
        )
        return replace(
            res,
            iterations=with_file(res.iterations, names),
            events=None if res.events is None else with_file(res.events, names),
            predicted=None if res.predicted is None else with_file(res.predicted, names),
            ranks=None
            if res.ranks is None
            else with_file(res.ranks, names, column="end_source_id", alias="end_file"),
        )

    def diagnose(self, *, replay: bool = True, groups: bool = False) -> Diagnosis:
        """What is wrong with this run and how much fixing it would save (docs/diagnose.md):
        a verdict (gpu/host/communication/mixed), findings sorted by the saving the critical
        path predicts for their `what_if` (`replay=False`: no replays, no savings; `groups`:
        the saving of each top kernel group of `gpu_bound` too) and the rules this input
        could not answer."""
        from .adapters import diagnose as report_diagnose

        return report_diagnose.diagnose(self, replay=replay, groups=groups)

    # --- host operators and model FLOP utilization (traceanalyze.adapters.ops) ----------------

    def ops(
        self, *, by: str = "op", top: int = 25, capture: PathLike | Dataset | None = None
    ) -> pl.DataFrame:
        """Host operators' times and their kernels' GPU time per name (`by="op"`) or (name, kernel)
        (`by="kernel"`), `top` per source (0: all); `capture`: docs/graph-capture.md, adapters."""
        from .adapters import ops as report_ops

        cap = capture if capture is None or isinstance(capture, Dataset) else open_side(capture, "")
        return report_ops.ops(self, by=by, top=top, capture=cap)

    def mfu(
        self,
        *,
        gpu: str | None = None,
        precision: str = "fp32",
        batch_size: int | None = None,
        image_size: int | None = None,
        warmup: int | None = None,
    ) -> pl.DataFrame:
        """ResNet-50 training model FLOP utilization: median images/s x FLOPs per image (counted
        from torchvision's model) over the GPU's dense peak for `precision`. `image_size`
        None: from the collect run's manifest, else an error (never assumed)."""
        from .adapters import ops as report_ops

        return report_ops.mfu(
            self,
            gpu=gpu,
            precision=precision,
            batch_size=batch_size,
            image_size=image_size,
            warmup=warmup,
        )

    def roofline(self, *, gpu: str | None = None, peak_tflops: float | None = None) -> Roofline:
        """Per-kernel roofline points from ncu FLOP and DRAM byte counters, and the compute roof
        in FLOP/s (from `peak_tflops` or `gpu`'s FP32 peak; None when neither is given). The
        result unpacks as `(points, peak)`."""
        from .adapters import ops as report_ops

        return report_ops.roofline(self, gpu=gpu, peak_tflops=peak_tflops)

    # --- training runs (traceanalyze.analyses.runs, scaling, history; docs/runs.md) ----------

    def runs(self, *, score: bool = False) -> pl.DataFrame:
        """The `runs` table (MLPerf logs, collect runs) with a `file` column, ordered by
        benchmark, org, system and start; `score=True`: the MLPerf score per system instead
        (mean time to train of the converged runs without the fastest and slowest)."""
        from .analyses import runs as r

        table = self.table("runs")
        return r.score(table) if score else with_file(r.runs_view(table), self.names())

    def scaling(self, by: Sequence[str] | None = None) -> Scaling:
        """Throughput against accelerators per group of runs (default org, accelerator_model,
        framework): median throughput per count, per accelerator, efficiency against the
        group's smallest count, time to train, global batch per accelerator."""
        from .analyses.scaling import DEFAULT_BY, scaling
        from .results import Scaling

        keys = tuple(DEFAULT_BY if by is None else by)
        return Scaling(scaling(self.table("runs"), keys), keys)

    def history(
        self,
        metric: str = "throughput_img_per_s",
        by: Sequence[str] | None = None,
        *,
        window: int = 20,
        min_history: int = 5,
        confidence: float = 0.999,
        min_change_pct: float = 3.0,
    ) -> pl.DataFrame:
        """Each run against the earlier runs of its group (default benchmark, org, system) in
        start order: baseline, change_pct, robust_z, confidence, verdict (the rule:
        `traceanalyze.analyses.history`, docs/runs.md)."""
        from .analyses.history import DEFAULT_BY, Rule, history

        rule = Rule(window, min_history, confidence, min_change_pct)
        keys = tuple(DEFAULT_BY if by is None else by)
        return with_file(history(self.table("runs"), metric, keys, rule), self.names())

    def __repr__(self) -> str:
        f = []
        if self.source_filter:
            f.append(f"source={list(self.source_filter)}")
        if self.device_filter:
            f.append(f"device={list(self.device_filter)}")
        if self.start_ns is not None:
            f.append(f"start={self.start_ns}")
        if self.end_ns is not None:
            f.append(f"end={self.end_ns}")
        return f"Dataset({self.origin!r}{', ' if f else ''}{', '.join(f)})"


@dataclass(frozen=True)
class _TablesScan:
    """`scan(table)` over `Tables` in memory (a picklable callable, unlike a lambda)."""

    tables: Any

    def __call__(self, table: str) -> pl.LazyFrame:
        return self.tables[table].lazy()  # type: ignore[no-any-return]


def open(
    *paths: PathLike, store: PathLike | None = None, format: str | None = None, **options: Any
) -> Dataset:  # noqa: A001 - `ta.open` mirrors the builtin on purpose
    """A `Dataset` over files (read in memory, nothing written) or over a store; not both."""
    if paths and store is not None:
        raise TraceanalyzeError("give files or store=, not both")
    if store is not None:
        return Dataset.from_store(store)
    if not paths:
        raise TraceanalyzeError("give files or store=")
    return Dataset.from_files([Path(p) for p in paths], format=format, **options)


def open_side(
    path: str | os.PathLike[str],
    label: str,
    *,
    format: str | None = None,
    sources: tuple[str, ...] = (),
) -> Dataset:
    """A file or a store directory as one side of a comparison, narrowed to those of `sources`
    it holds (all when none given; an error when it holds none of them)."""
    p = Path(path)
    if p.is_dir():
        ds = Dataset.from_store(p)
    elif p.is_file():
        ds = Dataset.from_files([p], format=format)
    else:
        raise TraceanalyzeError("no such file or store", path=path)
    ds = replace(ds, origin=os.fspath(path))  # what the user typed names the side
    if not sources:
        return ds
    keep = [i for i in ds.all_source_ids() if i in sources]
    if not keep:
        raise TraceanalyzeError(
            f"none of the sources {', '.join(sources)} is in {label}", path=path
        )
    return ds.where(source=keep)


__all__ = ["Dataset", "open", "open_side"]
