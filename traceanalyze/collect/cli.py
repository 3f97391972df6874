"""`traceanalyze collect`: run ResNet-50 training under a profiler and ingest what it wrote."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import click

from ..cli.common import quiet_option
from ..errors import CollectError
from ._device import cpu_cost
from .profilers import PROFILERS
from .resnet50 import PRECISIONS
from .run import (
    CollectConfig,
    CollectResult,
    Plan,
    Terminated,
    check_run_id,
    parse_batch_sizes,
    plan,
)
from .run import collect as do_collect


def _run_id_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    try:
        return None if value is None else check_run_id(value)
    except CollectError as e:
        raise click.BadParameter(e.message) from None


@click.command("collect")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Parent directory; the run goes to OUT/<run-id>/.",
)
@click.option(
    "--profiler",
    type=click.Choice(PROFILERS),
    default="none",
    show_default=True,
    help="Profiler to run the training under.",
)
@click.option(
    "--batch-size",
    "batch_size",
    default="64",
    show_default=True,
    help="Images per GPU per step; a comma list (32,64,128) sweeps and writes throughput.csv.",
)
@click.option("--iterations", default=500, show_default=True, help="Training steps per size.")
@click.option(
    "--warmup",
    type=int,
    default=None,
    help="Steps logged but left out of throughput stats [default: min(10, iterations/4)].",
)
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default="fp32",
    show_default=True,
    help="fp32, or torch.autocast to fp16 (with a GradScaler) or bf16.",
)
@click.option("--channels-last", is_flag=True, help="NHWC memory format.")
@click.option("--compile", "use_compile", is_flag=True, help="torch.compile the model.")
@click.option("--image-size", default=224, show_default=True, help="Input height and width.")
@click.option(
    "--device",
    type=click.Choice(["cuda", "cpu"]),
    default=None,
    help="[default: cuda if available, else cpu]",
)
@click.option(
    "--data",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="ImageNet-layout folder (class subfolders); default synthetic data on the device.",
)
@click.option("--workers", default=4, show_default=True, help="DataLoader workers with --data.")
@click.option(
    "--profile-window",
    default=None,
    help="START:END steps between cudaProfilerStart/Stop (nsys, ncu) "
    "[default: nsys warmup:iterations, ncu warmup:warmup+1].",
)
@click.option(
    "--torch-schedule",
    default=None,
    help="WAIT,WARMUP,ACTIVE steps for torch.profiler [default: skip warm-up, 1, up to 5].",
)
@click.option("--record-shapes", is_flag=True, help="torch.profiler: record input shapes.")
@click.option(
    "--gpu-metrics",
    is_flag=True,
    help="nsys: sample GPU metrics (--gpu-metrics-devices; with several ranks per node only "
    "local rank 0 samples, all GPUs). Needs GPU counter permission.",
)
@click.option(
    "--ncu-metrics", default=None, help="Comma list of ncu metrics instead of the chosen ones."
)
@click.option("--nproc-per-node", default=1, show_default=True, help="Ranks per node (torchrun).")
@click.option("--nnodes", default=1, show_default=True, help="Nodes (torchrun rendezvous).")
@click.option("--node-rank", default=0, show_default=True, help="This node's index (manifest).")
@click.option("--rdzv-endpoint", default=None, help="HOST[:PORT] of the c10d rendezvous.")
@click.option(
    "--run-id",
    default=None,
    callback=_run_id_option,
    help="Run id, a plain name [default: UTC time + random suffix].",
)
@click.option(
    "--sampler",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="NVML sampler process (auto: on with CUDA).",
)
@click.option("--sample-interval-ms", default=50.0, show_default=True, help="Sampler interval.")
@click.option("--no-ingest", is_flag=True, help="Do not ingest the outputs into a store.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the commands (and, as # lines, what could not be checked); run and create "
    "nothing. Needs no GPU or profiler binary.",
)
@quiet_option
def collect(
    out: Path,
    profiler: str,
    batch_size: str,
    iterations: int,
    warmup: int | None,
    precision: str,
    channels_last: bool,
    use_compile: bool,
    image_size: int,
    device: str | None,
    data: Path | None,
    workers: int,
    profile_window: str | None,
    torch_schedule: str | None,
    record_shapes: bool,
    gpu_metrics: bool,
    ncu_metrics: str | None,
    nproc_per_node: int,
    nnodes: int,
    node_rank: int,
    rdzv_endpoint: str | None,
    run_id: str | None,
    sampler: str,
    sample_interval_ms: float,
    no_ingest: bool,
    dry_run: bool,
    quiet: bool,
) -> None:
    """Train ResNet-50 under a profiler; write OUT/<run-id>/ with a manifest and a store."""
    # the options named as CollectConfig fields go over as they are; the others are converted
    opts = dict(locals())
    for k in ("batch_size", "use_compile", "ncu_metrics", "no_ingest", "dry_run", "quiet"):
        opts.pop(k)
    cfg = CollectConfig(
        **opts,
        batch_sizes=parse_batch_sizes(batch_size),
        compile=use_compile,
        ncu_metrics=tuple(m for m in ncu_metrics.split(",") if m) if ncu_metrics else None,
        ingest=not no_ingest,
    )
    p = plan(cfg, dry_run=dry_run)
    if dry_run:
        _echo_dry_run(p)
        return

    def say(msg: str) -> None:
        if not quiet:
            click.echo(msg, err=True)

    if p.device == "cpu":  # chosen with --device cpu: what it costs, before it starts
        say(f"CPU run: {cpu_cost(cfg)}")
    res = _run(cfg, p, say)
    if not quiet:
        _echo_result(res)


def _run(cfg: CollectConfig, p: Plan, say: Callable[[str], None]) -> CollectResult:
    """Run the plan; Ctrl-C and SIGTERM end the process with one line naming the manifest
    (exit 130 and 143, as a shell reports them)."""
    argv = _given_argv(click.get_current_context())
    try:
        return do_collect(cfg, argv, progress=say, pl=p)
    except KeyboardInterrupt:
        click.echo(f"traceanalyze: interrupted; manifest in {p.run_dir}", err=True)
        sys.exit(130)
    except Terminated:
        click.echo(f"traceanalyze: terminated (SIGTERM); manifest in {p.run_dir}", err=True)
        sys.exit(143)


def _echo_dry_run(p: Plan) -> None:
    """The plan as a shell script: notes as comments, the sampler in the background."""
    # Notes as shell comments: the output stays a script one can run.
    for note in p.notes:
        click.echo(f"# {note}")
    if p.sampler_argv is not None:
        click.echo(shlex.join(p.sampler_argv) + " &")
    for step in p.steps:
        click.echo(step.shell())
        for line in p.post_commands(step):
            click.echo(line)


def _echo_result(res: CollectResult) -> None:
    """Where the run went, its throughput and what was ingested."""
    click.echo(f"run directory: {res.run_dir}")
    click.echo(f"manifest:      {res.manifest}")
    if res.throughput is not None and res.throughput.height:
        click.echo(f"throughput:    {res.run_dir / 'throughput.csv'}")
        for row in res.throughput.iter_rows(named=True):
            click.echo(
                f"  batch {row['batch_size']}: median {row['median_images_per_s']:.1f} images/s "
                f"(p10 {row['p10_images_per_s']:.1f}, p90 {row['p90_images_per_s']:.1f}, "
                f"{row['iterations']} steady-state iterations)"
            )
    if res.store is not None:
        click.echo(f"store:         {res.store}  ({len(res.ingested)} files ingested)")
        for rel in res.ingested:
            click.echo(f"  ingested {rel}")
        for item in res.not_ingested:
            click.echo(f"  not ingested {item['path']}: {item['reason']}")
        click.echo(f"next: traceanalyze summary --store {res.store}")


def _given_argv(ctx: click.Context) -> list[str]:
    """The command line as given (options set on the command line, in declaration order).

    Rebuilt from click's parameter sources rather than `sys.argv`, which is the host program's
    under a test runner or an embedding application.
    """
    argv = ["traceanalyze", ctx.info_name or "collect"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        if ctx.get_parameter_source(param.name) is not click.core.ParameterSource.COMMANDLINE:
            continue
        value = ctx.params[param.name]
        if param.is_flag:
            if value:
                argv.append(param.opts[0])
            continue
        argv += [param.opts[0], str(value)]
    return argv
