"""Commands `ops` (host operators: self time, kernels they launched) and `mfu` (model FLOP
utilization, roofline). Found by `cli.analysis_commands` through `__all__`; each is option
parsing around one library call in `analyses.ops` / `analyses.mfu`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
import polars as pl

from .common import answers, dataset_input, draw, emit, figure_path, output_options, table

if TYPE_CHECKING:
    from ..dataset import Dataset
    from ..results import Comparison


@click.command()
@answers(
    "op", "kernel", "kernel_self_ns", "kernel_inclusive_ns", "kernel_ns", "self_ns", "inclusive_ns"
)
@dataset_input
@click.option("--top", default=25, show_default=True, help="Rows per source (0: all).")
@click.option(
    "--by",
    type=click.Choice(["op", "kernel"]),
    default="op",
    show_default=True,
    help="op: one row per operator name; kernel: one row per (operator, kernel name).",
)
@click.option(
    "--capture",
    type=click.Path(path_type=Path),
    help="Capture-time PyTorch-profiler trace (or store) of the CUDA/HIP graphs the input "
    "replays: replayed kernels go to the operators captured around their launches.",
)
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    callback=figure_path,
    help="Bars of GPU and host self time of the top operators (one source), PNG or SVG.",
)
@output_options
def ops(
    ds: Dataset,
    top: int,
    by: str,
    capture: Path | None,
    plot: Path | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Host operators: inclusive and self time, and the GPU time of the kernels they launched.

    \b
    inclusive_ns   the operator's duration (an instance inside another of the same name is
                   not added twice)
    self_ns        inclusive minus its child operators on the same thread
    kernel_self_ns GPU time of kernels whose launch call lies in this operator and in no
                   deeper one (launch = API call with the kernel's correlation id)
    kernel_inclusive_ns   the same, counting kernels of child operators too
    op = null      kernels launched outside every operator, or without a launch call

    Operators come from the PyTorch profiler. nsys and nvprof traces have none: their NVTX
    ranges stand in (basis = nvtx; PyTorch emit_nvtx names lose ', seq = …, op_id = …').
    --device keeps only those devices' kernels, and the operators of the processes that
    launched them.

    \b
    CUDA/HIP graphs: every kernel of a replay carries the graph launch's correlation id, so it
    goes to the operator around cudaGraphLaunch/hipGraphLaunch. --capture joins a trace recorded
    while the graph was captured: the replay's kernels and the launches captured between
    StreamBeginCapture and StreamEndCapture, in graph order, kinds and kernel names checked
    (docs/graph-capture.md). A matched kernel goes to its captured operators, below the one
    around the replay; GPU time only moves. Two more columns:
    captured_kernel_count     of kernel_count, replayed kernels given from the capture
    uncaptured_kernel_count   of kernel_count, replayed kernels that matched no captured launch
    """
    if plot is not None and by != "op":
        raise click.UsageError("--plot draws operators: leave out --by kernel")
    df = ds.ops(by=by, top=top, capture=capture)
    if plot is not None:  # the figure's own top, by the GPU time it draws, from every operator
        full = ds.ops(by=by, top=0, capture=capture)
        draw("ops", full, plot, source=ds.one_source("ops --plot"))
    emit(df, out_json, out_csv)


def print_ops_diff(res: Comparison, top: int, out_json: bool, out_csv: bool) -> None:
    """`compare A B --ops`: the operators' overview, then one row per operator."""
    from . import render

    ov, diff = res.overview, res.ops if res.ops is not None else pl.DataFrame()
    if out_json:
        click.echo(render.to_json(res.to_dict()))
    elif out_csv:
        click.echo(render.to_csv(ov), nl=False)
        click.echo("")
        click.echo(render.to_csv(diff), nl=False)
    else:
        click.echo(f"{res.a}\n{res.b}\n== operators overview")
        click.echo(table(ov))
        click.echo(f"\n== operators (top {min(top, diff.height)} of {diff.height} by time change)")
        click.echo(table(diff.head(top)))


@click.command()
@answers("gpu", "mfu_pct", "note", "achieved_flop_per_s", "peak_flop_per_s")
@dataset_input
@click.option("--gpu", help="GPU name to take the peak of (default: the source's device name).")
@click.option(
    "--precision",
    type=click.Choice(["fp32", "fp32-strict", "tf32", "fp16", "bf16", "amp-fp16", "amp-bf16"]),
    default="fp32",
    show_default=True,
    help="Training precision; fp32 = PyTorch's default (TF32 convolutions where the GPU has "
    "TF32), fp32-strict = the plain FP32 peak.",
)
@click.option("--batch-size", type=int, help="Images per iteration, when the input lacks it.")
@click.option(
    "--image-size",
    type=click.IntRange(min=1),
    default=None,
    help="Input images' side, pixels [default: the collect run's manifest.json beside the "
    "files; refused when there is none].",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=None,
    help="Iterations left out per GPU [default: the warm-up rule of docs/warmup.md].",
)
@output_options
def mfu(
    ds: Dataset,
    gpu: str | None,
    precision: str,
    batch_size: int | None,
    image_size: int | None,
    warmup: int | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Model FLOP utilization of ResNet-50 training: achieved FLOP/s over the GPU's peak.

    \b
    FLOPs per image  torchvision resnet50, forward + backward, counted by
                     torch.utils.flop_counter on the meta device (convolutions and matrix
                     products, 2 FLOPs per multiply-add); needs torch (the collect extra)
    achieved FLOP/s  median images/s over the iterations x FLOPs per image; images/s from
                     the iteration log, or --batch-size / iteration duration
    peak             dense peak of the GPU for the precision, from gpu_peaks.csv (datasheets
                     cited per row); an unknown GPU gives no number and a note
    mfu_pct          100 x achieved / peak
    """
    df = ds.mfu(
        gpu=gpu,
        precision=precision,
        batch_size=batch_size,
        image_size=image_size,
        warmup=warmup,
    )
    emit(df, out_json, out_csv)


@click.command()
@answers("name", "attainable_flop_per_s", "achieved_flop_per_s", "bound")
@dataset_input
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    callback=figure_path,
    help="Figure (.png or .svg).",
)
@click.option("--gpu", help="GPU whose FP32 peak (gpu_peaks.csv) is the compute roof.")
@click.option("--peak-tflops", type=float, help="Compute roof in TFLOP/s (instead of --gpu).")
@click.option("--bandwidth-gbps", type=float, help="DRAM bandwidth in GB/s: the memory roof.")
@output_options
def roofline(
    ds: Dataset,
    output: Path | None,
    gpu: str | None,
    peak_tflops: float | None,
    bandwidth_gbps: float | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Per-kernel roofline from Nsight Compute captures with FLOP and DRAM byte counters.

    FLOPs = add + mul + 2 x fma thread instructions (fp32, fp64, fp16 SASS counters, as ncu's
    roofline section counts them; tensor-core work is not in them); intensity = FLOPs / DRAM
    bytes. A capture without those counters is answered with the list of counters to collect.
    A separate command from `mfu`: its input is per-kernel counters, not iterations.
    """
    res = ds.roofline(gpu=gpu, peak_tflops=peak_tflops)
    draw("roofline", res, output, bandwidth_gbps=bandwidth_gbps)
    emit(res.points, out_json, out_csv)


__all__ = ["ops", "mfu", "roofline", "print_ops_diff"]
