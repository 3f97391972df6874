"""Analysis commands: summary, health, coreutil, busy, timeline, attribute, variability, compare.

Each is a thin wrapper: options -> one `Dataset` method (traceanalyze.dataset) -> render. Inputs
are FILE arguments (read in memory, nothing written) or `--store DIR`, with `--source` and
`--device` filters (`cli.common.dataset_input`). Found by `cli.analysis_commands` through
`__all__`. Sources are named to the user by their file path, not their hash.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..analyses.naming import abbreviate
from ..dataset import Dataset, open_side
from . import render
from .common import (
    answers,
    dataset_input,
    draw,
    emit,
    error_line,
    figure_path,
    filter_options,
    format_option,
    input_options,
    load,
    misuse_is_usage,
    notes,
    output_options,
    output_path,
    store_option,
    table,
    table_width,
    verbose,
    verbose_option,
    wrote,
)

if TYPE_CHECKING:
    import polars as pl

# Kept importable from here for command modules written against this one.
__all__ = [
    "input_options",
    "output_options",
    "filter_options",
    "notes",
    "load",
    "emit",
    "summary",
    "health",
    "coreutil",
    "busy",
    "timeline",
    "attribute",
    "variability",
    "compare",
]


# The input object of commands written before `Dataset` (same scan/scan_all/names/source_ids).
Frames = Dataset


def _one_source(ds: Dataset, what: str) -> str:
    return ds.one_source(what)


def _several_tables(out_csv: bool, name: str) -> None:
    if out_csv:
        raise click.UsageError(f"{name} has several tables; use --json, or query the store")


# --- summary, health -------------------------------------------------------------------------


@click.command()
@dataset_input
@click.option("--top", default=10, show_default=True, help="Top kernels and operators per source.")
@output_options
def summary(ds: Dataset, top: int, out_json: bool, out_csv: bool) -> None:
    """Per source: kernels, top kernels and operators, copies, telemetry, iterations, health.

    Top operators show inclusive time (the operator and what it calls) and, where the trace
    allows, self time. Health: requested vs achieved sampling interval, gaps, same-stream kernel
    overlaps, untimed events and negative durations per table, missing and duplicate iteration
    numbers. The table output names each file once, then its tables.
    """
    _several_tables(out_csv, "summary")
    rep = ds.summary(top=top)
    if out_json:
        click.echo(render.to_json(rep.to_dict()))
    else:
        tables = _without_graph_columns(rep.to_dict())
        click.echo(render.per_source(tables, width=table_width()), nl=False)


def _without_graph_columns(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """The text tables of an input without whole-graph replays (nsys `--cuda-graph-trace=graph`)
    leave out their columns (a count of 0, 0 ms, a `whole_graph` of False on every kernel);
    `--json` keeps them."""
    k = tables.get("kernels")
    if k is None or "graph_replay_count" not in k.columns or k["graph_replay_count"].sum():
        return tables
    out = dict(tables)
    out["kernels"] = k.drop("graph_replay_count", "total_graph_replay_ms", strict=False)
    if "top_kernels" in out:
        out["top_kernels"] = out["top_kernels"].drop("whole_graph", strict=False)
    return out


@click.command()
@dataset_input
@output_options
def health(ds: Dataset, out_json: bool, out_csv: bool) -> None:
    """Measurement health per source (also part of `summary`).

    Sampling (requested vs achieved interval, gaps), kernels overlapping on one stream, events
    without times or with negative durations, missing and duplicate iteration numbers.
    """
    _several_tables(out_csv, "health")
    rep = ds.health()
    if out_json:
        click.echo(render.to_json(rep.to_dict()))
    else:
        click.echo(render.per_source(rep.to_dict(), width=table_width()), nl=False)


# --- coreutil --------------------------------------------------------------------------------


@click.command()
@answers("kernel", "batch_size", "fma_pct", "fp16_pct", "tensor_pct", "sfu_pct")
@dataset_input
@click.option(
    "--weight",
    type=click.Choice(["cycles", "duration", "none"]),
    default="cycles",
    show_default=True,
    help="Per-launch weight: gpc__cycles_elapsed.max, gpu__time_duration.sum, or 1.",
)
@click.option("--by-kernel", is_flag=True, help="One row per kernel name instead of per file.")
@click.option(
    "--plot",
    "plot",
    type=click.Path(path_type=Path),
    callback=figure_path,
    help="Grouped bars to PNG/SVG.",
)
@output_options
def coreutil(
    ds: Dataset, weight: str, by_kernel: bool, plot: Path | None, out_json: bool, out_csv: bool
) -> None:
    """FMA, FP16, Tensor Core and SFU pipe utilization (ncu or nvprof metrics), per file.

    Cycle-weighted over all launches by default (the TBD suite's definition); batch size from
    `batch_<n>` in the file name. `scale` says what the numbers are: "pct" (ncu, % of peak) or
    "level" (nvprof's *_fu_utilization, 0-10, weighted by invocations). A file without the
    needed metrics is reported on its own line after the others' rows (exit code 1); --verbose
    lists every metric name looked for. --json/--csv carry every column, the source id and the
    metric each number came from (fma_metric, fp16_metric, tensor_metric, sfu_metric) included.
    """
    res = ds.coreutil(weight=weight, by_kernel=by_kernel)
    if res.table.height:
        draw("coreutil", res, plot)
    if res.table.height or out_json or out_csv:
        emit(res.exported if out_json or out_csv else res.printed, out_json, out_csv)
    for file, reason, details in res.unanswered.select("file", "reason", "details").iter_rows():
        error_line(f"{file}: {reason}" + (" [-v for details]" if details and not verbose() else ""))
        if details and verbose():
            click.echo(f"  {details}", err=True)
    if res.unanswered.height:
        click.get_current_context().exit(1)


# --- busy ------------------------------------------------------------------------------------


@click.command()
@answers("device_id", "activity", "busy_pct")
@dataset_input
@click.option(
    "--start",
    "start_ms",
    type=float,
    help="Window start, ms after the source's first event of any kind (timeline's origin).",
)
@click.option("--end", "end_ms", type=float, help="Window end, ms after that first event.")
@output_options
def busy(
    ds: Dataset, start_ms: float | None, end_ms: float | None, out_json: bool, out_csv: bool
) -> None:
    """Share of time at least one kernel (and one copy) ran, per source and device.

    The window is the first to the last kernel or copy; --start/--end count from the source's
    first event of any kind (kernel, copy, operator, marker, iteration), as `timeline`'s do.
    """
    if (start_ms is not None or end_ms is not None) and not (out_json or out_csv):
        note = "traceanalyze: note: --start/--end count from the source's first event"
        click.echo(note, err=True)
    emit(ds.busy(start_ms=start_ms, end_ms=end_ms), out_json, out_csv)


# --- timeline --------------------------------------------------------------------------------


@click.command()
@dataset_input
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(path_type=Path),
    callback=figure_path,
    help="Figure file (.png or .svg).",
)
@click.option(
    "--perfetto",
    type=click.Path(path_type=Path),
    callback=output_path,
    help="Trace for ui.perfetto.dev: .pftrace = Perfetto protobuf, else Chrome trace JSON.",
)
@click.option(
    "--start",
    "start_ms",
    type=float,
    help="Window start, ms after the trace's first event (kernel, copy, op, marker, iteration).",
)
@click.option("--end", "end_ms", type=float, help="Window end, ms after the trace's first event.")
@click.option("--iteration", type=int, help="Zoom on this iteration.")
@click.option(
    "--whole-trace",
    "whole",
    is_flag=True,
    help="Default window: every event (markers, iterations too), not the span of device "
    "activity and host operators.",
)
@click.option(
    "--samples-from",
    "samples_from",
    help="Telemetry tracks from this other source (aligned via epoch origins).",
)
@click.option(
    "--max-bars",
    default=1500,
    show_default=True,
    help="Per lane, bin into busy fractions above this many intervals.",
)
@click.option(
    "--critical-path",
    "critical_path",
    is_flag=True,
    help="Mark the events on each iteration's critical path (red bars; Perfetto: flows).",
)
def timeline(
    ds: Dataset,
    output: Path | None,
    perfetto: Path | None,
    start_ms: float | None,
    end_ms: float | None,
    iteration: int | None,
    samples_from: str | None,
    max_bars: int,
    whole: bool = False,
    critical_path: bool = False,
) -> None:
    """Kernels and copies per device/stream with iterations and SM clock/power/temperature.

    One source; or the ranks of one job (several traces with collectives, matched as in
    `stragglers`): one lane (Perfetto: one process) per rank on the common time base, the
    collective instances joined (Perfetto: flow arrows) across ranks, the longest --max-bars
    kernels per rank drawn. The default window spans device activity and host operators
    (--whole-trace: markers and iterations too); the title says where it starts, in ms after
    the trace's first event. An interval belongs to a window when it overlaps it. Lanes
    with more intervals than --max-bars are drawn as busy-fraction density, and the figure says
    so. Annotations (record_function, NVTX ranges) come first: up to 400 per thread, one row
    per nesting depth (a step, then its phases), a colour per name and a legend naming each with
    its time; more are one lane. Markers and iterations are labelled where they are wide enough;
    a legend names the kernels with the most time. Telemetry: the source's own samples, or
    --samples-from, or else the samples of another source of the same run (epoch origins,
    overlapping in time, matching devices).
    """
    if output is None and perfetto is None:
        raise click.UsageError("give -o FIGURE and/or --perfetto TRACE.json")
    if len(ds.source_ids()) > 1:  # ranks of one job: one process/lane per rank (cli.ranks)
        from .ranks import ranks_timeline

        windowed = any(x is not None for x in (start_ms, end_ms, iteration, samples_from))
        if ranks_timeline(ds, output, perfetto, max_bars, windowed):
            return
    res = ds.timeline(
        start_ms=start_ms,
        end_ms=end_ms,
        iteration=iteration,
        samples_from=samples_from,
        max_bars=max_bars,
        whole=whole,
    )
    if critical_path:
        path = ds.where(source=res.source_id).critical_path(iteration=iteration, by_event=True)
        res = res.with_critical_path(path.events)
    if perfetto is not None:
        res.to_perfetto(perfetto)
        wrote(perfetto)
    draw("timeline", res, output)


# --- attribute, variability ------------------------------------------------------------------


@click.command()
@answers("iteration", "kernel", "sm_clock_mhz", "power_w", "temperature_c", "energy_j")
@dataset_input
@click.option(
    "--per",
    type=click.Choice(["iteration", "kernel"]),
    default="iteration",
    show_default=True,
    help="Attribute telemetry to iterations or to kernels.",
)
@click.option(
    "--samples-from",
    "samples_from",
    help="Take telemetry from this other source (aligned via epoch origins).",
)
@output_options
def attribute(
    ds: Dataset, per: str, samples_from: str | None, out_json: bool, out_csv: bool
) -> None:
    """Time-weighted SM clock, power, temperature (and energy) per iteration or kernel.

    Samples are sample-and-hold; intervals with fewer than 2 samples or shorter than the median
    sampling period are flagged `coarse` and get no value. Telemetry comes from the interval's
    own source, or from another source of the same run whose epoch time span overlaps (an NVML or
    nvidia-smi log), matched by device; `samples_file` says which. --samples-from forces one.
    """
    emit(ds.attribute(per=per, samples_from=samples_from), out_json, out_csv)


@click.command()
@answers("system", "device_id", "median_iteration_ms", "perf_ratio", "outlier")
@dataset_input
@click.option(
    "--warmup",
    type=int,
    default=None,
    help="Iterations to drop per GPU [default: the warm-up rule of docs/warmup.md].",
)
@click.option("--top", default=3, show_default=True, help="Top kernels (fleet-wide) to time.")
@click.option(
    "--by",
    type=click.Choice(["system", "none"]),
    default=None,
    help="Sources of several systems or GPU models: compare within each system (a `system` "
    "column), or all as one fleet (none). Default: refuse, listing them.",
)
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    callback=figure_path,
    help="Box plots and perf-vs-telemetry to PNG/SVG.",
)
@output_options
def variability(
    ds: Dataset,
    warmup: int | None,
    top: int,
    by: str | None,
    plot: Path | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Per GPU: steady-state iteration time, top kernels, clock/power/temp, outlier rank.

    Telemetry is paired as in `attribute` (own samples, else an overlapping sample source of the
    same run by epoch origins and device). Robust z on the median iteration time: 1.4826·MAD,
    or 1.2533·mean absolute deviation when the MAD is 0 (`z_scale`); outlier when |z| > 3.5.
    """
    res = ds.variability(warmup=warmup, top=top, by=by)
    draw("variability", res, plot)
    if out_json or out_csv:
        emit(res.table, out_json, out_csv)
        return
    # Table: the fleet's top kernel names once above the table, not repeated in every row.
    width = table_width()
    for col, name in res.kernel_names.items():
        line = f"{col.removesuffix('_kernel')} = {name or '?'}"
        click.echo(line if width is None else abbreviate(line, width))
    emit(res.table.drop(list(res.kernel_names)), False, False)


# --- compare ---------------------------------------------------------------------------------


@click.command()
@answers("op", "delta_kernel_ms", "delta_self_ms", "kernel_ms_a", "kernel_ms_b", "metric", "a", "b")
@click.argument("a")
@click.argument("b")
@store_option(required=False)
@format_option
@filter_options
@click.option("--top", default=20, show_default=True, help="Kernel rows to print in the table.")
@click.option(
    "--ops",
    "by_ops",
    is_flag=True,
    help="Match host operators by name with their kernels (added, removed, changed; coverage "
    "= share of self and kernel time on operators of both sides); see `traceanalyze ops`.",
)
@click.option(
    "--pool",
    is_flag=True,
    help="Pool a store's GPU-runs into its side (refused otherwise); the side says how many.",
)
@click.option(
    "--by-role",
    is_flag=True,
    help="Match kernels by role (gemm, conv, attention, collective, …; a name heuristic), not "
    "by name: runs on different vendors' GPUs (an MI300X against an H100).",
)
@output_options
@verbose_option
@misuse_is_usage
def compare(
    a: str,
    b: str,
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    top: int,
    by_ops: bool,
    pool: bool,
    by_role: bool,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Compare A and B: two source ids in --store, or two files / store directories.

    Kernels are matched by name, grid and block; match coverage is the share of each side's
    kernel time that matched. Deltas are B - A, ratios B / A. A and B may be the same. With
    files or stores, --source keeps only those sources on each side; --device filters both.
    Each side is one GPU-run: the files of one `collect` run (iteration log, trace) are one,
    by its manifest or, without one, when their epoch times overlap on the same devices; and
    telemetry goes with the run whose work it overlaps on the same device. A store of
    several GPU-runs is refused with their list (choose with --source), unless --pool.
    --csv prints two CSV tables: the overview, an empty line, then every kernel row.
    """
    if store_dir is not None:
        if sources:
            raise click.UsageError(
                "A and B already name sources of --store; --source applies to files or stores"
            )
        res = load((), store_dir, fmt, (), devices).compare_sources(
            a, b, ops=by_ops, by_role=by_role
        )
    else:
        dev = devices or None
        side_a = open_side(a, "A", format=fmt, sources=sources).where(device=dev)
        side_b = open_side(b, "B", format=fmt, sources=sources).where(device=dev)
        res = side_a.compare(side_b, ops=by_ops, pool=pool, by_role=by_role)
    if res.ops is not None:
        from .ops import print_ops_diff

        return print_ops_diff(res, top, out_json, out_csv)
    if out_json:
        click.echo(render.to_json(res.to_dict()))
    elif out_csv:
        click.echo(render.to_csv(res.overview), nl=False)
        if res.kernels.height:
            click.echo("")
            click.echo(render.to_csv(res.kernels), nl=False)
    else:
        click.echo(f"{res.a}\n{res.b}\n== overview")
        click.echo(table(res.overview))
        if res.kernels.height:
            n = res.kernels.height
            click.echo(f"\n== kernels (top {min(top, n)} of {n} by time)")
            click.echo(table(res.kernels.head(top)))
