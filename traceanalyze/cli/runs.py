"""Training-run commands: runs, scaling, history (docs/runs.md).

Each is a thin wrapper: options -> one `Dataset` method -> render. Input: FILE arguments (MLPerf
logs, iteration logs; read in memory, nothing written) or `--store DIR`, with `--system FILE` for
logs whose system description is neither in the log nor at its place in the results layout.
Found by `cli.analysis_commands` through `__all__`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, TypeVar

import click

from ..dataset import Dataset
from .common import (
    answers,
    draw,
    emit,
    format_option,
    misuse_is_usage,
    output_options,
    store_option,
    verbose_option,
)

__all__ = ["runs", "scaling", "history"]

F = TypeVar("F", bound=Any)


def _columns(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(c.strip() for c in text.split(",") if c.strip())


def runs_input(f: F) -> F:
    """FILE... or --store, --format, --system FILE; handed to the command as `ds`."""

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        files: tuple[Path, ...],
        store_dir: Path | None,
        fmt: str | None,
        system: Path | None,
        **kwargs: Any,
    ) -> Any:
        from ..dataset import open as open_dataset

        if files and store_dir is not None:
            raise click.UsageError("give FILE arguments or --store, not both")
        if not files and store_dir is None:
            raise click.UsageError("give FILE arguments or --store DIR")
        if store_dir is not None:
            if system is not None:
                raise click.UsageError("--system applies to FILE arguments (and to ingest)")
            return f(*args, ds=open_dataset(store=store_dir), **kwargs)
        opts = {} if system is None else {"system": str(system)}
        return f(*args, ds=open_dataset(*files, format=fmt, **opts), **kwargs)

    w: Any = verbose_option(misuse_is_usage(wrapper))
    w = click.option(
        "--system",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="System description JSON for MLPerf logs that have none in the log or at its place "
        "in the results layout (looked at last). [mlperf_log]",
    )(w)
    w = format_option(w)
    w = store_option(required=False)(w)
    out: F = click.argument("files", nargs=-1, type=click.Path(exists=True, path_type=Path))(w)
    return out


@click.command()
@answers("system", "accelerators", "status", "time_to_train_s", "throughput_img_per_s", "score_s")
@runs_input
@click.option(
    "--score",
    is_flag=True,
    help="The MLPerf score per system: mean time to train of its converged runs after dropping "
    "the fastest and slowest, with the count used.",
)
@output_options
def runs(ds: Dataset, score: bool, out_json: bool, out_csv: bool) -> None:
    """Training runs, one row each: system, accelerators, status, time to train, throughput.

    From MLPerf Training result logs (`:::MLLOG`; the system JSON beside them in the results
    layout) and `collect` runs (manifest + iteration log). Throughput basis `logged` is the mean
    of the per-epoch rates the log records, `derived` is train_samples x epochs over the epochs'
    (or blocks') span. Columns and rules: docs/runs.md.
    """
    emit(ds.runs(score=score), out_json, out_csv)


@click.command()
@answers("org", "accelerators", "efficiency", "throughput_img_per_s", "per_accelerator_img_per_s")
@runs_input
@click.option(
    "--by",
    default=None,
    help="Comma-separated runs columns that form a group (default org,accelerator_model,"
    "framework; '' for one group of every run).",
)
@click.option(
    "--plot", type=click.Path(path_type=Path), help="Throughput against accelerators to PNG/SVG."
)
@output_options
def scaling(ds: Dataset, by: str | None, plot: Path | None, out_json: bool, out_csv: bool) -> None:
    """Throughput against accelerators: median per count, efficiency against the smallest.

    efficiency = (tp_N / N) / (tp_min / N_min) within each group; time to train is the median of
    the converged runs; global batch per accelerator = global batch / N.
    """
    res = ds.scaling(by=_columns(by))
    draw("scaling", res, plot)
    emit(res.table, out_json, out_csv)


@click.command()
@answers(
    "system",
    "time_to_train_s",
    "throughput_img_per_s",
    "change_pct",
    "verdict",
)
@runs_input
@click.option(
    "--metric",
    default="throughput_img_per_s",
    show_default=True,
    help="Numeric runs column to follow (time_to_train_s: lower is better).",
)
@click.option(
    "--by", default=None, help="Comma-separated group columns (default benchmark,org,system)."
)
@click.option(
    "--window",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Earlier runs compared with.",
)
@click.option(
    "--min-history",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Earlier runs needed to judge a run.",
)
@click.option(
    "--min-change-pct", default=3.0, show_default=True, help="Smallest change that is flagged."
)
@output_options
def history(
    ds: Dataset,
    metric: str,
    by: str | None,
    window: int,
    min_history: int,
    min_change_pct: float,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Each run against the earlier runs of its group: flags regressions and improvements.

    Baseline = median of the previous runs of the group's current segment (at most --window);
    spread = 1.4826 MAD; a change is flagged at 99.9 % confidence (Student's t prediction test,
    degrees of freedom for the MAD) and at least --min-change-pct; a flagged change starts a new
    segment. The rule in full: docs/runs.md.
    """
    res = ds.history(
        metric, _columns(by), window=window, min_history=min_history, min_change_pct=min_change_pct
    )
    emit(res, out_json, out_csv)
