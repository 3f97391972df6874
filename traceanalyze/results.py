"""What `Dataset`'s analysis methods return when one frame is not enough: frozen dataclasses of
polars frames (and a few plain values). The CLI prints them (`--json` is `to_dict()`), plots take
them (`traceanalyze.plot`), notebooks read their fields.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl


@dataclass(frozen=True)
class Health:
    """Measurement health per source (`traceanalyze.analyses.health`), each with a `file` column:
    `sampling` (requested vs achieved interval, gaps), `kernels` (same-stream overlaps), `events`
    (untimed and negative durations per table), `iterations` (missing and duplicate numbers)."""

    sampling: pl.DataFrame
    kernels: pl.DataFrame
    events: pl.DataFrame
    iterations: pl.DataFrame

    def to_dict(self) -> dict[str, pl.DataFrame]:
        return {
            "sampling_health": self.sampling,
            "kernel_health": self.kernels,
            "event_health": self.events,
            "iteration_health": self.iterations,
        }


@dataclass(frozen=True)
class Summary:
    """Per source: identity, kernel overview, top kernels, top host operators (inclusive and,
    where the analysis gives it, self time), copies, telemetry, iterations, health. Every frame
    but `sources` has `source_id` and `file`; times in ms (`mean_us` in µs)."""

    sources: pl.DataFrame
    kernels: pl.DataFrame
    top_kernels: pl.DataFrame
    top_ops: pl.DataFrame
    copies: pl.DataFrame
    telemetry: pl.DataFrame
    iterations: pl.DataFrame
    health: Health

    def to_dict(self) -> dict[str, pl.DataFrame]:
        return {
            "sources": self.sources,
            "kernels": self.kernels,
            "top_kernels": self.top_kernels,
            "top_ops": self.top_ops,
            "copies": self.copies,
            "telemetry": self.telemetry,
            "iterations": self.iterations,
            **self.health.to_dict(),
        }


@dataclass(frozen=True)
class CoreUtil:
    """Pipe utilization per file (or per file and kernel name).

    `table`: `source_id, file, batch_size, [name], fma_pct, fp16_pct, tensor_pct, sfu_pct,
    launches, weight, scale, <unit>_metric…`, sorted by batch size then file; `scale` "pct" is %
    of peak (ncu), "level" nvprof's 0–10. `unanswered`: one row per source without an answer,
    `source_id, file, reason` (one short line), `details` (every metric looked for), `missing`.
    """

    table: pl.DataFrame
    unanswered: pl.DataFrame
    by_kernel: bool = False

    @property
    def printed(self) -> pl.DataFrame:
        """The columns the CLI prints as a table (no ids, no metric names), named as in
        `exported`."""
        keys = ["file", "batch_size", *(["name"] if self.by_kernel else [])]
        out = self.table.select([*keys, *_PIPES, "launches", "weight", "scale"])
        return out.rename(self._pipe_names())

    @property
    def exported(self) -> pl.DataFrame:
        """Every column of `table` (`--json`, `--csv`): ids and the `<unit>_metric` each number
        came from included. nvprof's 0-10 levels are not percentages: `fma_level`… when every
        row is a level, `fma`… (read with `scale`) when levels and percentages mix; `fma_pct`…
        only for percentages."""
        return self.table.rename(self._pipe_names())

    def _pipe_names(self) -> dict[str, str]:
        scales = set(self.table["scale"].drop_nulls().to_list())
        if "level" not in scales:
            return {}
        suffix = "_level" if scales == {"level"} else ""
        return {p: p.removesuffix("_pct") + suffix for p in _PIPES}


_PIPES = ("fma_pct", "fp16_pct", "tensor_pct", "sfu_pct")


@dataclass(frozen=True)
class Timeline:
    """The data behind the timeline picture of one source, for the window
    `[start_ns, end_ns]` (the source's clock; `first_ns` is the trace's first event).

    `lanes`: `analyses.timeline.lanes` (one lane per device/stream/activity, with `name`),
    made by `make_lanes` when first read (the figure reads it; the Perfetto export does not).
    `iterations`: `iteration, start_ns, end_ns` of every iteration. `samples`: telemetry for the
    window with the held value on each side (a `label` column when it comes from another file).
    `top_kernels`: `name, total_ms, launch_count` of the kernels with the most time in the window
    (the legend). `kernels`, `memcpy`, `markers`, `api_calls`, `ops`: rows overlapping the window;
    `telemetry`: the samples clipped to the window; `devices`, `sources` name the Perfetto tracks
    (all of these are what `to_perfetto` writes). `api_calls` and `ops` are lazy
    (`pl.LazyFrame`, `.collect()` them): the figure never needs them, and the export streams
    them.
    """

    source_id: str
    file: str
    start_ns: int
    end_ns: int
    first_ns: int
    title: str
    make_lanes: Callable[[], pl.DataFrame] = field(repr=False, compare=False)
    iterations: pl.DataFrame
    samples: pl.DataFrame
    top_kernels: pl.DataFrame
    kernels: pl.DataFrame = field(repr=False)
    memcpy: pl.DataFrame = field(repr=False)
    markers: pl.DataFrame = field(repr=False)
    telemetry: pl.DataFrame = field(repr=False)
    api_calls: pl.DataFrame | pl.LazyFrame | None = field(default=None, repr=False)
    ops: pl.DataFrame | pl.LazyFrame | None = field(default=None, repr=False)
    devices: pl.DataFrame | None = field(default=None, repr=False)
    sources: pl.DataFrame | None = field(default=None, repr=False)
    critical_path: pl.DataFrame | None = field(default=None, repr=False)

    @functools.cached_property
    def lanes(self) -> pl.DataFrame:
        return self.make_lanes()

    def with_critical_path(self, events: pl.DataFrame | None) -> Timeline:
        """This timeline with the critical path's events (`CriticalPath.events`) of its source
        that overlap its window: the figure marks them, the Perfetto export links them."""
        if events is None:
            return self
        mine = events.filter(
            (pl.col("source_id") == self.source_id)
            & (pl.col("scenario") == "trace")
            & (pl.col("end_ns") >= self.start_ns)
            & (pl.col("start_ns") <= self.end_ns)
        )
        return replace(self, critical_path=mine)

    def to_perfetto(self, path: str | os.PathLike[str]) -> None:
        """The window for ui.perfetto.dev (times from the window start): Perfetto's protobuf
        trace, streamed, when `path` ends in .pftrace, .perfetto-trace or .pb; Chrome trace JSON
        otherwise."""
        from .export.perfetto import write_chrome_trace
        from .export.perfetto_proto import is_proto_path, write_perfetto_proto

        write = write_perfetto_proto if is_proto_path(path) else write_chrome_trace
        write(
            path,
            kernels=self.kernels,
            memcpy=self.memcpy,
            markers=self.markers,
            gpu_samples=self.telemetry,
            api_calls=self.api_calls,
            ops=self.ops,
            devices=self.devices,
            sources=self.sources,
            origin_ns=self.start_ns,
            critical_path=self.critical_path,
        )


@dataclass(frozen=True)
class Variability:
    """Per GPU (`table`, one row per source and device, with `file` and `samples_file`): steady
    iteration time, top kernels, telemetry medians, robust z and outlier flag. `steady`: the
    steady-state iterations (`source_id, device_id, duration_ns`), for box plots.
    `kernel_names`: the fleet's top kernels, column (`top1_kernel`) -> kernel name."""

    table: pl.DataFrame
    steady: pl.DataFrame
    kernel_names: dict[str, str | None]


@dataclass(frozen=True)
class Comparison:
    """A against B: `a`, `b` say what each side is; `overview` (metric, a, b, delta = b − a,
    ratio = b / a); `kernels` (one row per name and launch geometry; empty when a side has no
    kernels, with a warning). With `ops=True`: `overview` is the operators' overview (matched,
    added, removed, changed; coverage) and `ops` one row per operator name, `kernels` empty."""

    a: str
    b: str
    overview: pl.DataFrame
    kernels: pl.DataFrame
    ops: pl.DataFrame | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.ops is not None:
            return {"a": self.a, "b": self.b, "overview": self.overview, "ops": self.ops}
        return {"a": self.a, "b": self.b, "overview": self.overview, "kernels": self.kernels}


@dataclass(frozen=True)
class Launches:
    """Kernel launch statistics (`traceanalyze.analyses.launches`): `stats` (per source and
    device, or per kernel name), `outliers` (short kernels, long delays) and the per-launch
    `table`."""

    stats: pl.DataFrame
    outliers: pl.DataFrame
    table: pl.DataFrame

    def to_dict(self) -> dict[str, Any]:
        return {"stats": self.stats, "outliers": self.outliers, "table": self.table}


@dataclass(frozen=True)
class Roofline:
    """Per-kernel roofline points (`analyses.mfu.kernel_roofline`: FLOPs, DRAM bytes and
    intensity per kernel, with `file`) and the compute roof in FLOP/s (None when no peak was
    given). Unpacks as `(points, peak_flop_per_s)`, as `Dataset.roofline` returned before."""

    points: pl.DataFrame
    peak_flop_per_s: float | None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.points, self.peak_flop_per_s))

    def to_dict(self) -> dict[str, Any]:
        return {"peak_flop_per_s": self.peak_flop_per_s, "points": self.points}


@dataclass(frozen=True)
class Scaling:
    """Throughput against accelerators (`traceanalyze.analyses.scaling`): `table` has the group
    columns `by`, then accelerators, runs_count, throughput_img_per_s, per_accelerator_img_per_s,
    efficiency, ideal_img_per_s, time_to_train_s, global_batch_per_accelerator."""

    table: pl.DataFrame
    by: tuple[str, ...]


@dataclass(frozen=True)
class Stragglers:
    """Which rank holds a job back (`traceanalyze.analyses.ranks.stragglers`, rules in
    docs/stragglers.md). `ranks`: one row per rank (`rank, collectives, arrived_last,
    arrived_last_pct, wait_ms, wait_caused_ms, clock_offset_us, offset_spread_us, world_size,
    rank_from, job, source_id, file, straggler, cause`); `instances`: one row per matched
    collective instance and rank (`instance, stream, op, order, rank, arrival_ns, end_ns,
    wait_ns, spread_ns, last`, times on the common base); `verdict`: one line; `stragglers`
    and `causes`: the straggler ranks and one line each saying why; `time_base`: how the ranks'
    clocks were put on one base; `notes`: what was left out; `host` and `telemetry`: per rank,
    the numbers the causes compare; `kernels`: every kernel of the ranks on the common base
    (`rank, stream_id, name, start_ns, end_ns`), for `to_perfetto`."""

    ranks: pl.DataFrame
    instances: pl.DataFrame
    verdict: str
    stragglers: tuple[int, ...]
    causes: tuple[str, ...]
    time_base: str
    job: str
    notes: tuple[str, ...]
    host: pl.DataFrame = field(repr=False)
    telemetry: pl.DataFrame = field(repr=False)
    kernels: pl.DataFrame = field(repr=False)

    def to_perfetto(self, path: str | os.PathLike[str]) -> None:
        """Chrome trace JSON: one process per rank on the common time base, each collective
        instance linked across ranks (from the last arriver to the ranks that waited)."""
        from .errors import UsageProblem
        from .export.perfetto_proto import is_proto_path
        from .export.perfetto_ranks import write_chrome_trace_ranks

        if is_proto_path(path):
            raise UsageProblem(
                "the protobuf trace is written for one source's timeline; name the ranks' "
                "trace .json",
                path=path,
            )
        files = dict(self.ranks.select("rank", "file").iter_rows())
        write_chrome_trace_ranks(path, self.instances, self.kernels, files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "verdict": self.verdict,
            "stragglers": list(self.stragglers),
            "causes": list(self.causes),
            "time_base": self.time_base,
            "notes": list(self.notes),
            "ranks": self.ranks,
            "instances": self.instances,
        }


@dataclass(frozen=True)
class CriticalPath:
    """`Dataset.critical_path()`: what bounds each iteration (`analyses.critical_path`).

    `iterations`: one row per source and iteration: `duration_ms` (the iteration's span),
    `path_ms` (the longest dependency chain from its start) and its split `gpu_compute_ms`,
    `gpu_comm_ms`, `gpu_memory_ms`, `host_ms`, `launch_ms`, `sync_ms`, `idle_ms`, `carry_ms`
    (adding up to `path_ms`), `gpu_pct` (GPU share of the path without the carry); with a
    what-if also `predicted_ms` and `change_pct`. `events` (with `by_event`): the events on the
    path, each with its category, `path_ms`, `share_pct` and `launched_by` (the operator that
    launched a kernel), `scenario` "trace" or "what_if". `predicted`: the what-if path's split
    (its path_ms, change_pct, …).
    """

    iterations: pl.DataFrame
    events: pl.DataFrame | None = None
    predicted: pl.DataFrame | None = None
    what_if: tuple[str, ...] = ()
    ranks: pl.DataFrame | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"iterations": self.iterations}
        if self.ranks is not None:
            out["ranks"] = self.ranks
        if self.predicted is not None:
            out["what_if"] = list(self.what_if)
            out["predicted"] = self.predicted
        if self.events is not None:
            out["events"] = self.events
        return out


DOC_URL = "docs/diagnose.md"


@dataclass(frozen=True)
class Finding:
    """One problem `diagnose` found (`traceanalyze.analyses.diagnose`). `saving_ms` and
    `saving_pct` are the critical path's replay of `what_if` (mean over iterations of path_ms −
    predicted_ms; None when no replay expresses the fix); `problem_ms` is the problem's own time
    per iteration (the most a fix can save). `evidence` and `where` are plain JSON values."""

    rule: str
    severity: str
    title: str
    advice: str
    evidence: dict[str, Any]
    where: dict[str, Any]
    what_if: str | None = None
    problem_ms: float | None = None
    saving_ms: float | None = None
    saving_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "title": self.title,
            "saving_ms_per_iteration": self.saving_ms,
            "saving_pct": self.saving_pct,
            "what_if": self.what_if,
            "problem_ms_per_iteration": self.problem_ms,
            "evidence": self.evidence,
            "where": self.where,
            "advice": self.advice,
            "doc": f"{DOC_URL}#{self.rule.replace('_', '-')}",
        }


@dataclass(frozen=True)
class Diagnosis:
    """`Dataset.diagnose()`: what is wrong with this run and how much fixing it would save
    (docs/diagnose.md). `verdict`: `bound` ("gpu", "host", "communication", "mixed"), the
    shares it is decided from and the median iteration time; `findings`: sorted by predicted
    saving, largest first, those without a prediction after them by severity; `not_checked`:
    (rule, why) for each rule this input could not answer; `iterations`: the critical path's
    rows the savings are measured against; `inputs`: what was diagnosed (file names or the
    store), for the reproducing commands."""

    verdict: dict[str, Any]
    findings: tuple[Finding, ...]
    not_checked: tuple[tuple[str, str], ...]
    iterations: pl.DataFrame
    inputs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "inputs": list(self.inputs),
            "verdict": self.verdict,
            "findings": [f.to_dict() for f in self.findings],
            "not_checked": [{"rule": r, "reason": why} for r, why in self.not_checked],
        }

    def to_markdown(self) -> str:
        """The report as Markdown (for an issue tracker): the same text as `to_html`."""
        from .export.diagnose_report import markdown

        return markdown(self)

    def to_html(self, path: str | os.PathLike[str]) -> None:
        """One self-contained HTML file (figures inline as SVG; nothing from the network),
        written to a temporary name and renamed."""
        from .export.diagnose_report import write_html

        write_html(self, path)


__all__ = [
    "Health",
    "Summary",
    "CoreUtil",
    "Timeline",
    "Variability",
    "Comparison",
    "Launches",
    "Roofline",
    "Stragglers",
    "Scaling",
    "CriticalPath",
    "Finding",
    "Diagnosis",
]
