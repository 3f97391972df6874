"""Commands `ops` (host operators: self time, kernels they launched) and `mfu` (model FLOP
utilization, roofline). Registered lazily in `cli._LAZY`; each is option parsing around one
library call in `analyses.ops` / `analyses.mfu`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import polars as pl

from .cli import emit, format_option, output_options, store_option
from .errors import NotAnswerable, TraceanalyzeError


def _inputs(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--device", "devices", multiple=True, type=int, help="Only these device ids (repeatable)."
    )(f)
    f = click.option(
        "--source", "sources", multiple=True, help="Only these source ids (repeatable)."
    )(f)
    f = format_option(f)
    f = store_option(required=False)(f)
    return click.argument("files", nargs=-1, type=click.Path(exists=True, path_type=Path))(f)


def _dataset(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
) -> Any:
    from .dataset import open as ta_open

    if files and store_dir is not None:
        raise click.UsageError("give FILE arguments or --store, not both")
    if not files and store_dir is None:
        raise click.UsageError("give FILE arguments or --store DIR")
    ds = ta_open(*files, format=fmt) if files else ta_open(store=store_dir)
    return ds.where(source=sources or None, device=devices or None)


@click.command()
@_inputs
@click.option("--top", default=25, show_default=True, help="Rows per source (0: all).")
@click.option(
    "--by",
    type=click.Choice(["op", "kernel"]),
    default="op",
    show_default=True,
    help="op: one row per operator name; kernel: one row per (operator, kernel name).",
)
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    help="Bars of GPU and host self time of the top operators (one source), PNG or SVG.",
)
@output_options
def ops(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    top: int,
    by: str,
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
    """
    from .analyses.naming import with_file
    from .analyses.ops import op_kernels, op_stats

    ds = _dataset(files, store_dir, fmt, sources, devices)
    args = (ds.scan("ops"), ds.scan("api_calls"), ds.scan("kernels"), ds.scan("markers"))
    if by == "op":
        df = op_stats(*args, launching_processes_only=bool(devices))
        sort = ["source_id", "inclusive_ns"]
    else:
        df = (
            op_kernels(*args)
            .group_by("source_id", "op", "kernel")
            .agg(pl.len().alias("kernel_count"), pl.col("kernel_ns").sum().alias("kernel_ns"))
        )
        sort = ["source_id", "kernel_ns"]
    if df.height == 0 or (by == "op" and df["op"].drop_nulls().len() == 0):
        raise NotAnswerable(
            f"no host operators (PyTorch profiler ops) or NVTX ranges in {ds.origin}"
        )
    if plot is not None:
        from .analyses.naming import source_name
        from .plots.ops import ops_figure

        if by != "op":
            raise click.UsageError("--plot draws operators: leave out --by kernel")
        sid = ds.one_source("ops --plot")
        name = source_name(ds.names(), sid).replace("\\", "/").rsplit("/", 1)[-1]
        fig = ops_figure(df.filter(pl.col("source_id") == sid), title=f"{name}: operators")
        fig.savefig(plot, dpi=120)
        click.echo(f"wrote {plot}", err=True)
    df = df.sort(sort, descending=[False, True], nulls_last=True)
    if top > 0:
        df = df.group_by("source_id", maintain_order=True).head(top)
    emit(with_file(df, ds.names()), out_json, out_csv)


def print_ops_diff(
    scan: Callable[[str], pl.LazyFrame],
    desc: dict[str, str],
    top: int,
    out_json: bool,
    out_csv: bool,
) -> None:
    """`compare A B --ops`: sides relabelled `A` and `B` by the compare command."""
    from . import render
    from .analyses.compare import compare_ops, ops_diff_overview

    diff = compare_ops(
        scan("ops"), scan("api_calls"), scan("kernels"), scan("markers"), "A", "B", names=desc
    )
    ov = ops_diff_overview(diff)
    if out_json:
        click.echo(render.to_json({"a": desc["A"], "b": desc["B"], "overview": ov, "ops": diff}))
    elif out_csv:
        click.echo(render.to_csv(ov), nl=False)
        click.echo("")
        click.echo(render.to_csv(diff), nl=False)
    else:
        click.echo(f"{desc['A']}\n{desc['B']}\n== operators overview")
        click.echo(render.text_table(ov))
        click.echo(f"\n== operators (top {min(top, diff.height)} of {diff.height} by time change)")
        click.echo(render.text_table(diff.head(top)))


@click.command()
@_inputs
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
@click.option("--image-size", default=224, show_default=True, help="Input images' side, pixels.")
@click.option("--warmup", default=0, show_default=True, help="First iterations left out.")
@output_options
def mfu(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    gpu: str | None,
    precision: str,
    batch_size: int | None,
    image_size: int,
    warmup: int,
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
    from .analyses.mfu import mfu as compute
    from .analyses.naming import with_file

    ds = _dataset(files, store_dir, fmt, sources, devices)
    df = compute(
        ds.scan("iterations"),
        ds.scan("devices"),
        gpu=gpu,
        precision=precision,
        batch_size=batch_size,
        image_size=image_size,
        warmup=warmup,
    )
    emit(with_file(df, ds.names()), out_json, out_csv)


@click.command()
@_inputs
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Figure (.png or .svg).")
@click.option("--gpu", help="GPU whose FP32 peak (gpu_peaks.csv) is the compute roof.")
@click.option("--peak-tflops", type=float, help="Compute roof in TFLOP/s (instead of --gpu).")
@click.option("--bandwidth-gbps", type=float, help="DRAM bandwidth in GB/s: the memory roof.")
@output_options
def roofline(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
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
    from .analyses.mfu import find_peak, kernel_roofline
    from .analyses.naming import with_file

    ds = _dataset(files, store_dir, fmt, sources, devices)
    df = kernel_roofline(ds.scan("kernel_metrics"))
    peak = peak_tflops * 1e12 if peak_tflops else None
    if peak is None and gpu:
        row = find_peak(gpu)
        if row is None or row.fp32_tflops is None:
            raise TraceanalyzeError(f"no FP32 peak for GPU {gpu!r} in gpu_peaks.csv")
        peak = row.fp32_tflops * 1e12
    if output is not None:
        from .plots.roofline import roofline_figure

        bw = bandwidth_gbps * 1e9 if bandwidth_gbps else None
        roofline_figure(df, peak_flop_per_s=peak, peak_bytes_per_s=bw).savefig(output, dpi=120)
        click.echo(f"wrote {output}", err=True)
    emit(with_file(df, ds.names()), out_json, out_csv)
