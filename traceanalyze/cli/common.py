"""What every command shares: option decorators, the input -> `Dataset` step, output, one error
and warning path. Imports neither `cli` nor any command module, so that command modules (and
`collect/cli`) can import it without a cycle through `cli`'s lazy registry.

Error path (`guarded`): a `TraceanalyzeError` is one line `traceanalyze: error: …` and exit 1
(its `details` follow under `--verbose`); a `UsageProblem` (one source needed, several selected)
and click's usage errors are misuse, exit 2. Library `warnings.warn` notes print as one line each,
`traceanalyze: warning: …`, as they happen. An `OSError` about a path (a read-only store, a full
disk, `--store /dev/null`) is the user's environment, not a bug: one line with the path and the
system's reason, exit 1. Ctrl-C is one line `traceanalyze: interrupted`, exit 130 (128 + SIGINT,
as a shell reports it), not click's `Aborted!`.
"""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import TraceanalyzeError, UsageProblem, quote_path
from . import render

if TYPE_CHECKING:
    from ..dataset import Dataset

F = Callable[..., Any]
_VERBOSE = "traceanalyze.verbose"
_WIDE = "traceanalyze.wide"
_ANSWERS = "traceanalyze.answers"

# --- one error and warning path --------------------------------------------------------------


@contextmanager
def guarded(ctx: click.Context) -> Iterator[None]:
    """Run a command: warnings as one line each, library errors as one line and an exit code."""
    seen: set[str] = set()

    def show(message: Warning | str, *args: Any, **kwargs: Any) -> None:
        text = as_flags(ctx, str(message))
        if text not in seen:  # the same note from a loop once, not once per row
            seen.add(text)
            click.echo(f"traceanalyze: warning: {text}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        try:
            yield
        except UsageProblem as e:  # from a command without `misuse_is_usage`
            raise click.UsageError(as_flags(ctx, str(e))) from e
        except TraceanalyzeError as e:
            more = bool(e.details) and not ctx.meta.get(_VERBOSE) and _has_verbose(ctx)
            text = as_flags(ctx, str(e))
            click.echo(
                f"traceanalyze: error: {text}{' [-v for details]' if more else ''}", err=True
            )
            if e.details and ctx.meta.get(_VERBOSE):
                for line in e.details.splitlines():
                    click.echo(f"  {line}", err=True)
            ctx.exit(1)
        except OSError as e:
            if e.filename is None:  # not about a path: a bug, keep the traceback
                raise
            where = _user_path(os.fsdecode(e.filename))
            click.echo(f"traceanalyze: error: {quote_path(where)}: {e.strerror or e}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("traceanalyze: interrupted", err=True)
            ctx.exit(130)


def as_flags(ctx: click.Context, text: str) -> str:
    """A library message in the command's terms: the library names its parameters
    (`image_size=N`, never a flag; issue 32), the command line has options for them
    (`--image-size N`)."""
    import re

    name = ctx.invoked_subcommand
    cmd: click.Command | None = ctx.command
    if isinstance(cmd, click.Group):
        cmd = cmd.get_command(ctx, name) if name else None
    for p in cmd.params if cmd is not None else ():
        flags = [o for o in p.opts if o.startswith("--")]
        if isinstance(p, click.Option) and flags and p.name:
            # `sources` takes `source=ID`; `fmt` is `format=`, `store_dir` is `store=`
            names = {p.name, p.name.removesuffix("s"), flags[0][2:].replace("-", "_")}
            for name in sorted(names, key=len, reverse=True):
                if p.is_flag:  # `pool=True` is `--pool`
                    text = re.sub(rf"(?<![\w.]){re.escape(name)}=True\b", flags[0], text)
                text = re.sub(rf"(?<![\w.]){re.escape(name)}=", f"{flags[0]} ", text)
    return text


def _user_path(path: str) -> str:
    """The path the user gave for one inside a store's own `.staging` (issue 32: ingest into a
    read-only store named `…/.staging`, a directory the user never made): the store."""
    from ..store import STAGING

    parts = Path(path).parts
    return str(Path(*parts[: parts.index(STAGING)])) if STAGING in parts[1:] else path


def _has_verbose(ctx: click.Context) -> bool:
    """Whether the command being run takes --verbose (the hint would mislead otherwise)."""
    name = ctx.invoked_subcommand
    group = ctx.command
    cmd = group.get_command(ctx, name) if name and isinstance(group, click.Group) else None
    return cmd is not None and any(p.name == "verbose" for p in cmd.params)


def verbose_option(f: F) -> F:
    """`--verbose`: an error's details (every name looked for, …) after its one line."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            ctx.meta[_VERBOSE] = True  # `meta` is shared by the whole context chain

    return click.option(
        "--verbose",
        "-v",
        is_flag=True,
        expose_value=False,
        callback=remember,
        help="On an error, print its details too.",
    )(f)


def error_line(message: str) -> None:
    """One more `traceanalyze: error:` line (a command that answers in part, like coreutil)."""
    ctx = click.get_current_context(silent=True)
    click.echo(f"traceanalyze: error: {as_flags(ctx, message) if ctx else message}", err=True)


def verbose() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_VERBOSE))


# --- options ---------------------------------------------------------------------------------


def store_option(required: bool = True) -> Callable[[F], F]:
    return click.option(
        "--store",
        "store_dir",
        type=click.Path(file_okay=False, path_type=Path),
        required=required,
        help="Store directory (hive-partitioned Parquet).",
    )


def format_option(f: F) -> F:
    from ..readers import READERS

    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(READERS)),
        default=None,
        help="Input format (reader slug); detected when omitted.",
    )(f)


def output_options(f: F) -> F:
    """`--json` / `--csv` (exclusive), given to the command as `out_json`, `out_csv`; and
    `--wide`, which `table` reads (every column, names uncut), not given to the command."""

    @functools.wraps(f)
    def wrapper(*args: Any, out_json: bool, out_csv: bool, **kwargs: Any) -> Any:
        if out_json and out_csv:
            raise click.UsageError("--json and --csv are exclusive")
        return f(*args, out_json=out_json, out_csv=out_csv, **kwargs)

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            ctx.meta[_WIDE] = True

    w: F = click.option(
        "--wide",
        is_flag=True,
        expose_value=False,
        callback=remember,
        help=f"Table with every column, names uncut (default: fit {render.WIDTH} columns).",
    )(wrapper)
    w = click.option("--csv", "out_csv", is_flag=True, help="Print CSV instead of a table.")(w)
    return click.option("--json", "out_json", is_flag=True, help="Print JSON instead of a table.")(
        w
    )


def figure_path(_ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    """Callback of a figure option (`-o`, `--plot`): checked before any work is done."""
    from ..outpaths import check_figure

    return None if value is None else check_figure(value)


def output_path(_ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    """Callback of an output file option (`--perfetto`): checked before any work is done."""
    from ..outpaths import check_output

    return None if value is None else check_output(value)


def quiet_option(f: F) -> F:
    return click.option("--quiet", "-q", is_flag=True, help="No progress or chatter.")(f)


def filter_options(f: F) -> F:
    """`--source` and `--device`, the same on every analysis command."""
    f = click.option(
        "--device", "devices", multiple=True, type=int, help="Only these device ids (repeatable)."
    )(f)
    return click.option(
        "--source", "sources", multiple=True, help="Only these source ids (repeatable)."
    )(f)


def misuse_is_usage(f: F) -> F:
    """A `UsageProblem` from the library (one source needed, several selected; an empty
    window) is misuse: one `traceanalyze: error:` line like every other error, exit 2 (issue
    21: it came in click's style, a usage block and `Error:`)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except UsageProblem as e:
            ctx = click.get_current_context()
            click.echo(f"traceanalyze: error: {as_flags(ctx, str(e))}", err=True)
            ctx.exit(2)

    return wrapper


def input_options(f: F) -> F:
    """FILE... / --store / --format / --source / --device (and --verbose), given to the command
    as `files, store_dir, fmt, sources, devices`; `load(...)` turns them into a `Dataset`."""
    f = verbose_option(misuse_is_usage(f))
    f = filter_options(f)
    f = format_option(f)
    f = store_option(required=False)(f)
    # No `exists=True`: a missing or unreadable file is bad input, the library's one line and
    # exit 1 (as for `ingest` and `compare`), not click's usage error.
    return click.argument("files", nargs=-1, type=click.Path(path_type=Path))(f)


def dataset_input(f: F) -> F:
    """`input_options`, handed to the command as one `ds: Dataset` (filters applied)."""

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        files: tuple[Path, ...],
        store_dir: Path | None,
        fmt: str | None,
        sources: tuple[str, ...],
        devices: tuple[int, ...],
        **kwargs: Any,
    ) -> Any:
        return f(*args, ds=load(files, store_dir, fmt, sources, devices), **kwargs)

    return input_options(wrapper)


def load(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None = None,
    sources: tuple[str, ...] = (),
    devices: tuple[int, ...] = (),
) -> Dataset:
    """FILE arguments or `--store`, exactly one of them (else a usage error), filtered."""
    from ..dataset import open as open_dataset

    if files and store_dir is not None:
        raise click.UsageError("give FILE arguments or --store, not both")
    if not files and store_dir is None:
        raise click.UsageError("give FILE arguments or --store DIR")
    ds = open_dataset(*files, format=fmt) if files else open_dataset(store=store_dir)
    return ds.where(source=sources or None, device=devices or None)


def notes(f: F) -> F:
    """Kept for commands written before `guarded`: warnings already print one way for every
    command (`traceanalyze: warning: …`), so this adds nothing."""
    return f


# --- output ----------------------------------------------------------------------------------


def emit(df: Any, out_json: bool, out_csv: bool, title: str | None = None) -> None:
    """Print one frame as a table, JSON or CSV."""
    if out_json and out_csv:
        raise click.UsageError("--json and --csv are exclusive")
    df = _prose_flags(df)
    if out_json:
        click.echo(render.to_json(df))
    elif out_csv:
        click.echo(render.to_csv(df), nl=False)
    else:
        if title:
            click.echo(title)
        click.echo(table(df))


def _prose_flags(df: Any) -> Any:
    """A frame's sentences (a note, a reason) in the command's terms: the library's
    `gpu=NAME` is the command's `--gpu NAME` (`as_flags`)."""
    import polars as pl

    ctx = click.get_current_context(silent=True)
    if ctx is None or not isinstance(df, pl.DataFrame):
        return df
    prose = [c for c, t in df.schema.items() if c in render.PROSE_COLUMNS and t == pl.String]
    return df.with_columns(
        pl.col(c).map_elements(lambda v: as_flags(ctx, v), return_dtype=pl.String) for c in prose
    )


def answers(*columns: str) -> Callable[[F], F]:
    """Name a command's answer columns, once: printed first in its tables and never left out
    to fit the width (the rest fill it), and listed at the end of its help (docs/cli.md).
    Names as in `--json` (`kernel_self_ns`; the table prints it in its unit). Goes under
    `@click.command()`."""

    def deco(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = click.get_current_context(silent=True)
            if ctx is not None:
                ctx.meta[_ANSWERS] = columns
            return f(*args, **kwargs)

        listed = ", ".join(columns)
        wrapper.__doc__ = (
            f"{inspect.cleandoc(f.__doc__ or '')}\n\n"
            f"Answer columns (printed first, never left out): {listed}."
        )
        return wrapper

    return deco


def answer_columns() -> tuple[str, ...]:
    """The running command's answer columns (`answers`), or none."""
    ctx = click.get_current_context(silent=True)
    return tuple(ctx.meta.get(_ANSWERS, ())) if ctx is not None else ()


def table_width() -> int | None:
    """The width text tables fit: `render.WIDTH`, or None (no limit) under `--wide`."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is not None and ctx.meta.get(_WIDE) else render.WIDTH


def table(df: Any) -> str:
    """One frame as a text table fitting `table_width()`."""
    return render.text_table(df, width=table_width(), first=answer_columns())


def wrote(path: Path) -> None:
    click.echo(f"wrote {path}", err=True)


def draw(figure: str, result: Any, path: Path | None, **options: Any) -> None:
    """`ta.plot.<figure>(result, path, **options)` when a path is given, and say so; matplotlib
    (~0.7 s to import) is imported only then."""
    if path is None:
        return
    from .. import plot as plots

    getattr(plots, figure)(result, path, **options)
    wrote(path)
