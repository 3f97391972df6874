"""The `critical-path` command: what bounds each iteration, and what-if.

Option parsing around one `Dataset.critical_path` call plus rendering (found by
`cli.analysis_commands` through `__all__`).
"""

from __future__ import annotations

import click
import polars as pl

from ..dataset import Dataset
from .common import answers, dataset_input, emit, output_options, table, table_width

_TABLE_DROP = ("source_id", "start_ns")


@click.command("critical-path")
@answers("iteration", "path_ms", "predicted_ms", "change_pct", "duration_ms")
@dataset_input
@click.option("--iteration", type=int, help="Only this iteration (the iterations table's number).")
@click.option(
    "--what-if",
    "what_if",
    multiple=True,
    metavar="SPEC",
    help="Scale and replay: 'kernel:REGEX=F' (kernel durations), 'op:REGEX=F' (host time "
    "inside matching operators or NVTX ranges), 'gpu-op:REGEX=F' (the kernels launched inside "
    "matching operators), 'launch=F' (launch latencies). Repeatable.",
)
@click.option(
    "--each-iteration",
    is_flag=True,
    help="Replay each iteration's what-if alone, its carry kept (as --iteration N for each N): "
    "the savings diagnose reports.",
)
@click.option("--by-event", is_flag=True, help="The events on the path, with their share.")
@click.option(
    "--across-ranks",
    is_flag=True,
    help="Also the job-wide path of each iteration the ranks share, joined at collectives "
    "(--json: those rows).",
)
@click.option("--top", default=15, show_default=True, help="Path events per iteration (table).")
@output_options
def critical_path(
    ds: Dataset,
    iteration: int | None,
    what_if: tuple[str, ...],
    each_iteration: bool,
    by_event: bool,
    across_ranks: bool,
    top: int,
    out_json: bool,
    out_csv: bool,
) -> None:
    """What bounds each iteration: the longest dependency chain and its split.

    Per iteration (PyTorch profiler ProfilerStep#N; a trace without iterations is one window),
    a graph of the iteration's host events (operators, or NVTX ranges in nsys/nvprof traces;
    runtime calls; per thread, nesting respected) and the GPU events they launched: launch ->
    kernel (correlation ids), stream order, waits (synchronizing calls, copies, cross-stream
    waits) and the carry (the GPU still busy with the previous iteration). path_ms is the
    longest path from the iteration's start; its split gpu_compute_ms, gpu_comm_ms,
    gpu_memory_ms, host_ms, launch_ms, sync_ms, idle_ms and carry_ms adds up to path_ms;
    gpu_pct is the GPU share of the path without the carry.

    --what-if scales matching events and replays the same graph: predicted_ms and change_pct
    per iteration (a factor of 1 gives path_ms back). --by-event lists the events on the path
    with their share and the operator that launched each kernel (--json: one row per event).
    --across-ranks (several ranks of one job, as files or a store) joins the ranks' graphs of
    each shared iteration at their collectives (the k-th collective of a name on every rank;
    none ends before the last rank started it): the job's path, which rank it ends on and how
    many it crosses.
    """
    res = ds.critical_path(
        iteration=iteration,
        what_if=what_if,
        by_event=by_event,
        across_ranks=across_ranks,
        each_iteration=each_iteration,
    )
    if out_json or out_csv:
        main = res.ranks if across_ranks and res.ranks is not None else res.iterations
        emit(res.events if by_event and res.events is not None else main, out_json, out_csv)
        return
    # --wide: every column (issue 32), the start time too
    drop = _TABLE_DROP if table_width() is not None else ()
    click.echo(table(res.iterations.drop(drop, strict=False)))
    if res.ranks is not None:
        click.echo("\n== across ranks: one path through every rank, joined at collectives")
        click.echo(table(res.ranks.drop(drop, strict=False)))
    if res.predicted is not None:
        click.echo(f"\n== what-if {' '.join(what_if)}: the new path")
        click.echo(table(res.predicted.drop("source_id", strict=False)))
    if res.events is not None:
        ev = res.events.sort("path_ms", descending=True).group_by(
            "file", "iteration", "scenario", maintain_order=True
        )
        top_rows = ev.head(top).sort("file", "iteration", "scenario", "step")
        click.echo(f"\n== events on the path (top {top} per iteration by path_ms)")
        keep = ["iteration", "scenario", "category", "kind", "name", "path_ms", "share_pct"]
        click.echo(table(top_rows.select([*keep, pl.col("launched_by")])))


__all__ = ["critical_path"]
