"""The commands that are not analyses: ingest, schema, formats (and the --tz/--fields/
--interval-ms decorator `reader_options`). Registered in `cli._LAZY` and imported only when one of
them runs, so that `traceanalyze --help` (which lists them from the command index) stays light.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import schema
from ..errors import TraceanalyzeError
from .common import (
    emit,
    format_option,
    output_options,
    quiet_option,
    store_option,
)

__all__ = ["formats", "ingest", "reader_options", "schema_cmd"]


# --- shared option decorators (defined in cli.common; re-exported for older imports) --------


def reader_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--tz, --fields, --interval-ms, --system, given to the command as one dict `reader_opts`
    (unset ones left out). Each goes only to the readers that take it (`read_<slug>`'s
    keywords); one that no reader of the given files takes is a one-line error from the library."""
    import functools

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        tz: str | None,
        fields: str | None,
        interval_ms: float | None,
        system: str | None,
        **kwargs: Any,
    ) -> Any:
        given = {"tz": tz, "fields": fields, "interval_ms": interval_ms, "system": system}
        kwargs["reader_opts"] = {k: v for k, v in given.items() if v is not None}
        return f(*args, **kwargs)

    w: Callable[..., Any] = wrapper
    w = click.option(
        "--system",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help="System description JSON for MLPerf logs that have none in the log or at its place "
        "in the results layout (looked at last). [mlperf_log]",
    )(w)
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


@click.command()
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

    from ..store import ingest as do_ingest

    if dask_address is not None:
        if jobs != 1:
            raise click.UsageError("--jobs and --dask are exclusive")
        from ..parallel import ingest_dask

        do_ingest = functools.partial(ingest_dask, scheduler=dask_address)
    elif jobs > 1:
        from ..parallel import ingest_parallel

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
            click.echo(_with_devices_at_work(r, store_dir))


def _with_devices_at_work(r: Any, store_dir: Path) -> str:
    """`r.message()`, its "N devices" (every device the file lists, as a trace's metadata names
    all GPUs of the node) followed by how many have work (issue 21: "8 devices" for a one-GPU
    trace)."""
    msg: str = r.message()
    listed = r.counts.get("devices", 0) if r.status != "unchanged" else 0
    if not listed:
        return msg
    from ..dataset import Dataset

    busy = len(Dataset.from_store(store_dir).where(source=r.source_id).active_devices())
    if busy == listed:
        return msg
    return msg.replace(f"{listed:,} devices", f"{listed:,} devices listed, {busy:,} with work", 1)


@click.command("schema")
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


@click.command()
@output_options
def formats(out_json: bool, out_csv: bool) -> None:
    """List the input formats (reader slugs), and whether ingest streams each one.

    streams: true when ingest reads the format in bounded memory (chunks written as they are
    read); false when it reads the file whole, so memory grows with the file.
    """
    import polars as pl

    from ..readers import READERS

    df = pl.DataFrame(
        [
            {"format": r.slug, "description": r.description, "streams": r.streams}
            for r in READERS.values()
        ]
    )
    emit(df, out_json, out_csv)
