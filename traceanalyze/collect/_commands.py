"""A collection's configuration (`CollectConfig`) and the command lines it gives: the
workload, torchrun around it, and the profiler around both (`collect.run.plan` assembles them)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import CollectError
from . import profilers as P

WORKLOAD_MODULE = "traceanalyze.collect.resnet50"
RDZV_PORT = 29500


@dataclass(frozen=True)
class CollectConfig:
    out: Path
    batch_sizes: tuple[int, ...] = (64,)
    iterations: int = 500
    warmup: int | None = None  # None: min(10, max(1, iterations // 4))
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    image_size: int = 224
    device: str | None = None  # None: cuda if available
    data: Path | None = None
    workers: int = 4
    profiler: str = "none"
    profile_window: str | None = None
    torch_schedule: str | None = None
    record_shapes: bool = False
    gpu_metrics: bool = False
    ncu_metrics: tuple[str, ...] | None = None
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    run_id: str | None = None
    sampler: str = "auto"  # auto (on with CUDA) | on | off
    sample_interval_ms: float = 50.0
    ingest: bool = True
    python: str = sys.executable

    def effective_warmup(self) -> int:
        if self.warmup is not None:
            return self.warmup
        return min(10, max(1, self.iterations // 4))


def node_tag(cfg: CollectConfig) -> int | None:
    """The node rank that tags per-node output names, on a multi-node run only (every node's
    profiler writes into the one shared run directory)."""
    return cfg.node_rank if cfg.nnodes > 1 else None


def default_torch_schedule(iterations: int, warmup: int) -> str:
    """Skip the warm-up iterations, one profiler warm-up step, then up to 5 recorded steps."""
    active = max(1, min(5, iterations - 2))
    wait = max(0, min(warmup, iterations - active - 1))
    warm = 1 if iterations - wait - active >= 1 else 0
    return f"{wait},{warm},{active}"


def default_profile_window(profiler: str, iterations: int, warmup: int) -> str:
    """nsys: every steady-state iteration; ncu: one (it replays each kernel for every pass)."""
    start = warmup if warmup < iterations else 0
    end = start + 1 if profiler == "ncu" else iterations
    return f"{start}:{end}"


def workload_argv(cfg: CollectConfig, batch_size: int, run_dir: Path, device: str) -> list[str]:
    warmup = cfg.effective_warmup()
    argv = [
        cfg.python,
        "-m",
        WORKLOAD_MODULE,
        "--out",
        str(run_dir),
        "--batch-size",
        str(batch_size),
        "--iterations",
        str(cfg.iterations),
        "--warmup",
        str(warmup),
        "--precision",
        cfg.precision,
        "--image-size",
        str(cfg.image_size),
        "--device",
        device,
    ]
    if cfg.channels_last:
        argv.append("--channels-last")
    if cfg.compile:
        argv.append("--compile")
    if cfg.data is not None:
        argv += ["--data", str(cfg.data), "--workers", str(cfg.workers)]
    if cfg.profiler == "torch":
        sched = cfg.torch_schedule or default_torch_schedule(cfg.iterations, warmup)
        argv += ["--torch-profile", sched]
        if cfg.record_shapes:
            argv.append("--record-shapes")
    if cfg.profiler == "nsys":
        argv.append("--nvtx")  # the phases as NVTX ranges, so nsys records them (CPU too)
    if cfg.profiler in P.EXTERNAL and device == "cuda":
        window = cfg.profile_window or default_profile_window(cfg.profiler, cfg.iterations, warmup)
        argv += ["--profile-window", window]
    return argv


def torchrun_argv(cfg: CollectConfig, run_id: str) -> list[str]:
    """`torch.distributed.run` around the command that follows (`--no-python`: the command is an
    executable, so a profiler such as nsys can sit between torchrun and python, once per rank)."""
    argv = [cfg.python, "-m", "torch.distributed.run", "--nproc-per-node", str(cfg.nproc_per_node)]
    if cfg.nnodes > 1:
        if not cfg.rdzv_endpoint:
            raise CollectError("--nnodes > 1 needs --rdzv-endpoint HOST[:PORT]")
        endpoint = (
            cfg.rdzv_endpoint if ":" in cfg.rdzv_endpoint else f"{cfg.rdzv_endpoint}:{RDZV_PORT}"
        )
        argv += [
            "--nnodes",
            str(cfg.nnodes),
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={run_id}",
        ]
    return [*argv, "--no-python"]


def step_argv(
    cfg: CollectConfig,
    bs: int,
    run_dir: Path,
    device: str,
    run_id: str,
    ncu_metrics: Sequence[str] | None,
) -> tuple[list[str], dict[str, str]]:
    inner = workload_argv(cfg, bs, run_dir, device)
    distributed = cfg.nproc_per_node > 1 or cfg.nnodes > 1
    launcher = torchrun_argv(cfg, run_id) if distributed else []
    # Without torchrun the single process is rank 0; nsys' %q{RANK} needs the variable set.
    env = {} if distributed else {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    rd = str(run_dir)
    node = node_tag(cfg)
    if cfg.profiler == "nsys":
        prof = P.nsys_argv(
            rd,
            bs,
            inner,
            gpu_metrics=cfg.gpu_metrics,
            local_ranks=cfg.nproc_per_node,
            node=node,
            device=device,
        )
        return [*launcher, *prof], env
    if cfg.profiler == "ncu":
        assert ncu_metrics is not None
        return P.ncu_argv(rd, bs, [*launcher, *inner], ncu_metrics, node=node), env
    if cfg.profiler == "nvprof":
        return P.nvprof_argv(rd, [*launcher, *inner]), env
    return [*launcher, *inner], env
