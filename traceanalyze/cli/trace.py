"""Trace analyses: launches, idle, overlap, annotations.

Each command takes FILE... (read in memory) or `--store DIR`, `--source`/`--device` filters and
`--json`/`--csv`; builds a `Dataset`, makes one library call (`traceanalyze.analyses.<name>`)
and renders the frame with the file path beside each source id. A trace that cannot answer
(no API calls, no annotations) says so: an error line and exit code 1 when no source can, a
`traceanalyze: warning:` line per source otherwise. Found by `cli.analysis_commands` through
`__all__`.
"""

# No `from __future__ import annotations`: it would shadow the `annotations` command.

from pathlib import Path

import click

from ..dataset import Dataset
from .common import answers, dataset_input, draw, emit, figure_path, output_options, table

# --- launches --------------------------------------------------------------------------------


@click.command()
@answers(
    "device_id",
    "outlier",
    "name",
    "launch_count",
    "count",
    "median_delay_ns",
    "p95_delay_ns",
    "mean_delay_ns",
    "max_delay_ns",
)
@dataset_input
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
def launches(
    ds: Dataset,
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

    A CUDA/HIP graph replay (cudaGraphLaunch*, cuGraphLaunch*, hipGraphLaunch*) is one launch,
    named after its call: its CPU time once, gpu_ns its kernels' summed time, delay_ns to its
    first kernel. graph_launch_count and graph_kernel_count count the replays and the kernels
    they ran (the library's table gives each kernel's replay_offset_ns). A whole-graph row
    (nsys --cuda-graph-trace=graph: one timed row per replay, no kernel rows) is one launch
    too, gpu_ns its span: counted in launch_count, graph_launch_count and whole_graph_count,
    not in graph_kernel_count (kernels only).

    Outliers, per kernel name: short_kernel = the kernel ran shorter than its launch call took
    (gpu_ns < cpu_ns); long_delay = delay_ns above both the device's p95 delay and
    --delay-floor-us. Needs API calls with correlation ids: PyTorch profiler (cuda_runtime /
    cuda_driver), nsys and nvprof SQLite; not an nvprof --print-gpu-trace CSV alone.
    """
    res = ds.launches(by_kernel=by_kernel, delay_floor_ns=round(delay_floor_us * 1000))
    stats, outl = res.stats, res.outliers
    if only_outliers:
        emit(outl, out_json, out_csv)
        return
    if out_json or out_csv:
        emit(stats, out_json, out_csv)
        return
    click.echo(table(stats))
    if outl.height:
        click.echo(f"\n== outliers (top {min(top, outl.height)} of {outl.height}; --outliers)")
        click.echo(table(outl.head(top)))


# --- idle ------------------------------------------------------------------------------------


@click.command()
@answers(
    "device_id",
    "stream_id",
    "idle_ns",
    "idle_pct",
    "host_wait_ns",
    "launch_gap_ns",
    "sync_ns",
    "copy_ns",
    "unknown_ns",
)
@dataset_input
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    callback=figure_path,
    help="Stacked bars per device to PNG/SVG.",
)
@output_options
def idle(
    ds: Dataset,
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
    df = ds.idle()
    draw("idle", df, plot)
    emit(df, out_json, out_csv)


# --- overlap ---------------------------------------------------------------------------------


@click.command()
@answers("device_id", "iteration", "overlap_pct", "exposed_ns", "comm_ns", "compute_ns")
@dataset_input
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    callback=figure_path,
    help="Bars per device to PNG/SVG.",
)
@output_options
def overlap(
    ds: Dataset,
    plot: Path | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Communication against computation per device (and per iteration when known).

    Communication: NCCL/RCCL and collective kernels by name (AllReduce, AllGather,
    ReduceScatter, AllToAll, SendRecv, Broadcast) and copies leaving the device (peer PtoP,
    host HtoD/DtoH/…); computation: every other kernel. Device-local copies and memsets are
    neither. On interval unions: comm_ns, compute_ns, overlapped_ns = comm ∩ compute,
    exposed_ns = comm_ns - overlapped_ns, overlap_pct = overlapped / comm. A row with an
    iteration (ProfilerStep#N, iteration logs) holds the work that iteration launched (by the
    launch calls' correlation ids), whole, not clipped to the host's step window.
    """
    df = ds.overlap()
    draw("overlap", df, plot)
    emit(df, out_json, out_csv)


# --- annotations -----------------------------------------------------------------------------


@click.command()
@answers("annotation", "duration_ns", "gpu_time_pct")
@dataset_input
@click.option("--depth", type=click.IntRange(min=1), help="Cut paths to their first N ranges.")
@click.option(
    "--strip-ids",
    is_flag=True,
    help="Drop PyTorch emit_nvtx's ', seq = N' and ', op_id = N' so steps sum together.",
)
@click.option("--top", type=int, default=None, help="Rows to print in the table view.")
@output_options
def annotations(
    ds: Dataset,
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
    df = ds.annotations(depth=depth, strip_ids=strip_ids)
    if top is not None and not (out_json or out_csv):
        df = df.head(top)
    emit(df, out_json, out_csv)


__all__ = ["launches", "idle", "overlap", "annotations"]
