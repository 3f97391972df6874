"""Analyses across the ranks of one job: stragglers.

FILE... (each rank's trace, read in memory) or `--store DIR`; one `Dataset.stragglers()` call,
rendered. Found by `cli.analysis_commands` through `__all__`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import click
import polars as pl

from ..dataset import Dataset
from .common import answers, dataset_input, draw, emit, output_options, table, wrote

_SHOWN = [
    "rank",
    "collectives",
    "arrived_last",
    "arrived_last_pct",
    "wait_ms",
    "wait_caused_ms",
    "clock_offset_us",
    "rank_from",
    "file",
]


@click.command()
@answers("rank", "arrived_last_pct", "wait_caused_ms")
@dataset_input
@click.option("--job", help="Which job, when the sources hold ranks of several (see the error).")
@click.option(
    "--align/--no-align",
    default=None,
    help="Apply the clock offsets estimated from collective ends (default: only when some "
    "rank's trace has no epoch time).",
)
@click.option("--plot", type=click.Path(path_type=Path), help="Arrival spread per collective.")
@click.option(
    "--perfetto",
    type=click.Path(path_type=Path),
    help="Chrome trace JSON: one process per rank, collectives linked across ranks.",
)
@output_options
def stragglers(
    ds: Dataset,
    job: str | None,
    align: bool | None,
    plot: Path | None,
    perfetto: Path | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Which rank holds a synchronous job back, and why.

    Collectives (NCCL/RCCL kernels ncclKernel_* and ncclDevKernel_*, or gloo operators) are
    matched across ranks by stream, operation and order; per instance the last rank to arrive
    (start) is the one the others wait for. Per rank: collectives, arrived_last (and %),
    wait_ms (its own waiting), wait_caused_ms (the others' waiting where it came last) and its
    clock offset estimated from collective ends. Then a verdict (the straggler ranks, or "no
    clear straggler") and, per straggler, one line naming the largest difference from the
    other ranks: SM clock, power, temperature, throttle reasons (where telemetry covers the
    rank), GPU idle or data-loader time before its collectives, or kernel time. Rank: the
    trace's distributedInfo, else rank<N>/worker<N> in the file name, else (one nsys/nvprof
    file of several processes) one rank per process in GPU order. Job: the file's directory
    (--job picks one). --json/--csv: the per-rank rows (with straggler and cause). Rules:
    docs/stragglers.md.
    """
    res = ds.stragglers(job=job, align=align)
    draw("stragglers", res, plot)
    if perfetto is not None:
        res.to_perfetto(perfetto)
        wrote(perfetto)
    if out_json or out_csv:
        emit(res.ranks, out_json, out_csv)
        return
    world = res.ranks["world_size"].drop_nulls()
    size = f"world size {world[0]}" if world.len() else "world size unknown"
    how = res.ranks["job_from"].drop_nulls()
    click.echo(f"job: {res.job} ({'from the ' + how[0] + '; ' if how.len() else ''}{size})")
    click.echo(f"time base: {res.time_base}")
    shown = res.ranks.select(_SHOWN)
    # The file's stem (`worker7_step_12…`), not a path cut from the left.
    names = pl.Series("name", _stems(shown["file"]))
    click.echo(table(shown.drop("file").with_columns(names)))
    click.echo(f"\n{res.verdict}")
    for line in res.causes:
        # fits the 120 columns of the default tables, continuation lines indented under it
        click.echo(textwrap.fill(line, 120, initial_indent="  why: ", subsequent_indent=" " * 7))
    for note in res.notes:
        click.echo(f"note: {note}")


def ranks_timeline(
    ds: Dataset, output: Path | None, perfetto: Path | None, max_bars: int, windowed: bool
) -> bool:
    """`timeline` over several sources: when they are ranks of one job (collectives on at
    least two ranks), draw them on one time base and return True; otherwise False, and the
    one-source timeline says what it needs."""
    from ..errors import NotAnswerable

    try:
        res = ds.stragglers()
    except NotAnswerable:
        return False
    if windowed:
        raise click.UsageError(
            "with several ranks the timeline spans their matched collectives; --start, --end, "
            "--iteration and --samples-from take one source (--source ID)"
        )
    if perfetto is not None:
        res.to_perfetto(perfetto)
        wrote(perfetto)
    draw("ranks_timeline", res, output, max_bars=max_bars)
    return True


def _stems(files: pl.Series) -> list[str]:
    from ..analyses.naming import short_name

    return [short_name(f) for f in files.to_list()]


__all__ = ["stragglers"]
