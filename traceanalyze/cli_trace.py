"""Trace analyses: launches, idle, overlap, annotations.

Each command takes FILE... (read in memory) or `--store DIR`, `--source`/`--device` filters and
`--json`/`--csv`; builds a `Dataset`, makes one library call (`traceanalyze.analyses.<name>`)
and renders the frame with the file path beside each source id. A trace that cannot answer
(no API calls, no annotations) says so: an error line and exit code 1 when no source can, a
`traceanalyze: note:` line per source otherwise. Registered lazily in `cli._LAZY`.
"""

# No `from __future__ import annotations`: it would shadow the `annotations` command.

from pathlib import Path

import click

from . import render
from .analyses.naming import with_file
from .cli import emit, output_options
from .cli_analyses import _save, input_options, notes
from .dataset import Dataset


def _dataset(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
) -> Dataset:
    from .dataset import open as open_dataset

    if files and store_dir is not None:
        raise click.UsageError("give FILE arguments or --store, not both")
    if not files and store_dir is None:
        raise click.UsageError("give FILE arguments or --store DIR")
    ds = open_dataset(*files, store=store_dir, format=fmt)
    return ds.where(source=sources or None, device=devices or None)


def _exclusive(out_json: bool, out_csv: bool) -> None:
    if out_json and out_csv:
        raise click.UsageError("--json and --csv are exclusive")


# --- launches --------------------------------------------------------------------------------


@click.command()
@input_options
@click.option("--by-kernel", is_flag=True, help="One row per kernel name instead of per device.")
@click.option("--outliers", "only_outliers", is_flag=True, help="Print the outliers only.")
@click.option(
    "--delay-floor-us",
    type=float,
    default=100.0,
    show_default=True,
    help="A long delay exceeds both its device's p95 delay and this many µs.",
)
@click.option("--top", default=10, show_default=True, help="Outlier rows in the table view.")
@output_options
@notes
def launches(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    by_kernel: bool,
    only_outliers: bool,
    delay_floor_us: float,
    top: int,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Kernel launch statistics: each kernel joined to its launch API call.

    The launch call is the runtime or driver API call with the kernel's correlation id
    (cudaLaunchKernel, cuLaunchKernelEx, …; the outermost when several). Per launch: cpu_ns =
    the call's duration, gpu_ns = the kernel's duration, delay_ns = kernel start - call start.
    Per source and device (or kernel name): launch_count and mean, median and p95 of each;
    short_kernel_count and long_delay_count.

    Outliers, per kernel name: short_kernel = the kernel ran shorter than its launch call took
    (gpu_ns < cpu_ns); long_delay = delay_ns above both the device's p95 delay and
    --delay-floor-us. Needs API calls with correlation ids: PyTorch profiler (cuda_runtime /
    cuda_driver), nsys and nvprof SQLite; not an nvprof --print-gpu-trace CSV alone.
    """
    from .analyses.launches import launches as run

    _exclusive(out_json, out_csv)
    ds = _dataset(files, store_dir, fmt, sources, devices)
    res = run(ds, by_kernel=by_kernel, delay_floor_ns=round(delay_floor_us * 1000))
    names = ds.names()
    stats, outl = with_file(res.stats, names), with_file(res.outliers, names)
    if only_outliers:
        emit(outl, out_json, out_csv)
        return
    if out_json or out_csv:
        emit(stats, out_json, out_csv)
        return
    click.echo(render.text_table(stats))
    if outl.height:
        click.echo(f"\n== outliers (top {min(top, outl.height)} of {outl.height}; --outliers)")
        click.echo(render.text_table(outl.head(top)))


# --- idle ------------------------------------------------------------------------------------


@click.command()
@input_options
@click.option("--plot", type=click.Path(path_type=Path), help="Stacked bars per device to PNG/SVG.")
@output_options
@notes
def idle(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    plot: Path | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """GPU idle time per device (stream_id empty) and per stream, split by cause.

    Window and busy time are those of `busy`: first to last kernel or copy of the source; busy
    while at least one kernel runs. idle_ns = window_ns - busy_ns, cut into gaps; each
    nanosecond of a gap goes to the first cause that holds:

    \b
    copy_ns        a copy or memset runs on the device (stream rows: that stream)
    launch_gap_ns  the next kernel was already launched (its launch call had
                   started) but had not started: launch overhead
    sync_ns        nothing queued; the host is in a blocking call (*Synchronize,
                   or a copy call without Async) of the device's process
    host_wait_ns   nothing queued; the GPU waits for the host (the next launch
                   call started after the previous kernel ended, or none follows)
    unknown_ns     the next kernel has no launch call (no API calls in the trace)

    The causes add up to idle_ns on every row, and a device row's idle_ns equals busy's
    window minus busy time.
    """
    from .analyses.idle import idle as run

    _exclusive(out_json, out_csv)
    ds = _dataset(files, store_dir, fmt, sources, devices)
    df = with_file(run(ds), ds.names())
    if plot is not None:
        from .plots.idle import idle_figure

        _save(idle_figure(df), plot)
    emit(df, out_json, out_csv)


# --- overlap ---------------------------------------------------------------------------------


@click.command()
@input_options
@click.option("--plot", type=click.Path(path_type=Path), help="Bars per device to PNG/SVG.")
@output_options
@notes
def overlap(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    plot: Path | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Communication against computation per device (and per iteration when known).

    Communication: NCCL/RCCL and collective kernels by name (AllReduce, AllGather,
    ReduceScatter, AllToAll, SendRecv, Broadcast) and copies leaving the device (peer PtoP,
    host HtoD/DtoH/…); computation: every other kernel. Device-local copies and memsets are
    neither. On interval unions: comm_ns, compute_ns, overlapped_ns = comm ∩ compute,
    exposed_ns = comm_ns - overlapped_ns, overlap_pct = overlapped / comm. Rows with an
    iteration clip everything to it (iterations table: ProfilerStep#N, iteration logs).
    """
    from .analyses.overlap import overlap as run

    _exclusive(out_json, out_csv)
    ds = _dataset(files, store_dir, fmt, sources, devices)
    df = with_file(run(ds), ds.names())
    if plot is not None:
        from .plots.overlap import overlap_figure

        _save(overlap_figure(df), plot)
    emit(df, out_json, out_csv)


# --- annotations -----------------------------------------------------------------------------


@click.command()
@input_options
@click.option("--depth", type=click.IntRange(min=1), help="Cut paths to their first N ranges.")
@click.option(
    "--strip-ids",
    is_flag=True,
    help="Drop PyTorch emit_nvtx's ', seq = N' and ', op_id = N' so steps sum together.",
)
@click.option("--top", type=int, default=None, help="Rows to print in the table view.")
@output_options
@notes
def annotations(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    depth: int | None,
    strip_ids: bool,
    top: int | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """GPU time and events per user annotation; nested names as paths 'outer/inner'.

    PyTorch profiler traces with gpu_user_annotation events: each kernel, copy and memset
    belongs to the innermost gpu_user_annotation on its device and stream whose interval holds
    the event's start. Otherwise (nsys, nvprof, PyTorch without GPU annotations): host ranges
    (NVTX, user_annotation) are projected through the launches, like nsys' nvtx_gpu_proj: an
    event belongs to the innermost range on its launch call's thread holding the call's start.
    Events in no annotation have annotation null. duration_ns sums the events' durations.
    """
    from .analyses.annotations import annotations as run

    _exclusive(out_json, out_csv)
    ds = _dataset(files, store_dir, fmt, sources, devices)
    df = with_file(run(ds, depth=depth, strip_ids=strip_ids), ds.names())
    if top is not None and not (out_json or out_csv):
        df = df.head(top)
    emit(df, out_json, out_csv)
