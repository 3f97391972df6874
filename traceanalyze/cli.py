"""The `traceanalyze` command: a thin click layer over the library.

Each command parses options and calls one library function; `TraceanalyzeError` becomes a
one-line message and exit code 1. Commands living in other modules are registered in `_LAZY` and
imported only when used, so `traceanalyze --help` stays fast and torch/matplotlib load on demand.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import schema
from .cli_common import (
    emit,
    format_option,
    guarded,
    output_options,
    quiet_option,
    store_option,
    verbose_option,
)
from .errors import TraceanalyzeError

__all__ = [
    "main",
    "emit",
    "format_option",
    "output_options",
    "quiet_option",
    "reader_options",
    "store_option",
    "verbose_option",
]

# name -> "module:attribute" of a click.Command defined elsewhere (imported only when used).
_LAZY: dict[str, str] = {
    "collect": "traceanalyze.collect.cli:collect",
}
# Modules whose click commands (the `click.Command`s named in their `__all__`) are analysis
# commands: a new analysis command is found by being defined and exported there, with no line
# to add here. Imported only when a command outside `main` and `_LAZY` is asked for, or listed.
COMMAND_MODULES: tuple[str, ...] = (
    "traceanalyze.cli_analyses",
    "traceanalyze.cli_trace",
    "traceanalyze.cli_ops",
)


def analysis_commands() -> dict[str, click.Command]:
    """Every command of `COMMAND_MODULES`, by name."""
    out: dict[str, click.Command] = {}
    for name in COMMAND_MODULES:
        mod = importlib.import_module(name)
        for attr in getattr(mod, "__all__", ()):
            obj = getattr(mod, attr)
            if isinstance(obj, click.Command):
                out[obj.name or attr] = obj
    return out


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY, *analysis_commands()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _LAZY:
            mod, attr = _LAZY[name].split(":")
            cmd: click.Command = getattr(importlib.import_module(mod), attr)
            return cmd
        own = super().get_command(ctx, name)
        if own is not None:
            return own
        return analysis_commands().get(name)

    def invoke(self, ctx: click.Context) -> Any:
        # One error and warning path for every command (cli_common.guarded).
        with guarded(ctx):
            return super().invoke(ctx)


@click.group(cls=_Group)
@click.version_option(package_name="traceanalyze")
def main() -> None:
    """Normalize GPU profiler outputs into Parquet tables and analyze them."""


# --- shared option decorators (defined in cli_common; re-exported for older imports) --------


def reader_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--tz, --fields, --interval-ms, given to the command as one dict `reader_opts` (unset ones
    left out). Each goes only to the readers that take it (`read_<slug>`'s keywords); one that no
    reader of the given files takes is a one-line error from the library."""
    import functools

    @functools.wraps(f)
    def wrapper(
        *args: Any, tz: str | None, fields: str | None, interval_ms: float | None, **kwargs: Any
    ) -> Any:
        given = {"tz": tz, "fields": fields, "interval_ms": interval_ms}
        kwargs["reader_opts"] = {k: v for k, v in given.items() if v is not None}
        return f(*args, **kwargs)

    w: Callable[..., Any] = wrapper
    w = click.option(
        "--interval-ms",
        "interval_ms",
        type=float,
        default=None,
        help="Sampling interval in ms of dcgmi dmon text (its -d; dcgmi's default is 1000), "
        "which has no timestamps: sample n is placed at n x interval. [smi_csv]",
    )(w)
    w = click.option(
        "--fields",
        default=None,
        help="Field list of an nvidia-smi log written with --format=csv,noheader (the "
        "--query-gpu value, e.g. 'timestamp,index,power.draw,clocks.sm'). [smi_csv]",
    )(w)
    w = click.option(
        "--tz",
        default=None,
        help="Timezone of local wall-clock stamps (nvidia-smi logs): an IANA name such as "
        "'Europe/Berlin', 'UTC', or an offset '+01:00'; default the machine's. [smi_csv]",
    )(w)
    return w


# --- commands --------------------------------------------------------------------------------


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@store_option()
@format_option
@click.option("--force", is_flag=True, help="Re-ingest files already in the store.")
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Parse files in N processes (the store is committed once, by this process).",
)
@click.option(
    "--dask",
    "dask_address",
    metavar="tcp://HOST:PORT",
    default=None,
    help="Parse files on the workers of this Dask scheduler (needs the [dask] extra; files and "
    "store on a file system the workers share).",
)
@reader_options
@quiet_option
def ingest(
    files: tuple[Path, ...],
    store_dir: Path,
    fmt: str | None,
    force: bool,
    jobs: int,
    dask_address: str | None,
    reader_opts: dict[str, Any],
    quiet: bool,
) -> None:
    """Read FILE... and add them to the store."""
    import functools

    from .store import ingest as do_ingest

    if dask_address is not None:
        if jobs != 1:
            raise click.UsageError("--jobs and --dask are exclusive")
        from .parallel import ingest_dask

        do_ingest = functools.partial(ingest_dask, scheduler=dask_address)
    elif jobs > 1:
        from .parallel import ingest_parallel

        do_ingest = functools.partial(ingest_parallel, jobs=jobs)

    show_progress = not quiet and sys.stderr.isatty()
    if show_progress:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} files"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("ingesting", total=len(files))
            results = do_ingest(
                files,
                store_dir,
                format=fmt,
                force=force,
                on_start=lambda p: progress.update(task, description=f"reading {Path(p).name}"),
                # advanced as each file is parsed and staged, not at the final commit
                on_result=lambda r: progress.advance(task),
                **reader_opts,
            )
    else:
        results = do_ingest(files, store_dir, format=fmt, force=force, **reader_opts)
    if not quiet:
        for r in results:
            click.echo(r.message())


@main.command("schema")
@click.argument("table", required=False)
@click.option("--markdown", is_flag=True, help="Print docs/schema.md.")
@output_options
def schema_cmd(table: str | None, markdown: bool, out_json: bool, out_csv: bool) -> None:
    """Show the normalized schema (all tables, or one TABLE)."""
    import polars as pl

    if markdown:
        click.echo(schema.render_markdown(), nl=False)
        click.echo("")
        return
    if table is not None and table not in schema.TABLES:
        raise TraceanalyzeError(f"unknown table {table!r}; tables: {', '.join(schema.TABLE_NAMES)}")
    names = [table] if table else list(schema.TABLE_NAMES)
    df = pl.DataFrame(
        [
            {
                "table": t,
                "column": c.name,
                "type": str(c.dtype),
                "nullable": c.nullable,
                "description": c.description,
            }
            for t in names
            for c in schema.TABLES[t].columns
        ]
    )
    emit(df, out_json, out_csv)


@main.command()
@output_options
def formats(out_json: bool, out_csv: bool) -> None:
    """List the input formats (reader slugs)."""
    import polars as pl

    from .readers import READERS

    df = pl.DataFrame([{"format": r.slug, "description": r.description} for r in READERS.values()])
    emit(df, out_json, out_csv)


if __name__ == "__main__":  # pragma: no cover
    main()
