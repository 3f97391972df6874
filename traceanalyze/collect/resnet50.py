"""ResNet-50 training workload with device-synchronized per-iteration timing.

Run by `traceanalyze collect` (directly, under torchrun, or under a profiler); also usable alone::

    python -m traceanalyze.collect.resnet50 --out DIR --batch-size 64 --iterations 500 \
        [--device cuda|cpu] [--precision fp32|amp-fp16|amp-bf16] [--channels-last] [--compile] \
        [--data IMAGENET_DIR] [--profile-window START:END] [--torch-profile WAIT,WARMUP,ACTIVE] \
        [--cuda-graph]

Tested with torch 2.14 / torchvision 0.29 (CPU). torchvision `resnet50(weights=None)`: random
weights, never downloaded. Data are synthetic tensors made once on the device (no loader, so the
input pipeline is not measured) unless `--data` names an ImageNet-layout folder (ImageFolder,
DataLoader with workers and pinned memory).

Timing: on CUDA a pair of CUDA events brackets forward + backward + optimizer step and the end
event is synchronized at the end of every iteration, so `duration_ns` is device time of the step
(unlike the SC22 script's unsynchronized host deltas, formats.md §0.2). On CPU it is a
`time.perf_counter_ns` delta. Fetching the next batch happens before the timed region. `start_ns`
is the host epoch clock when the iteration began.
Every iteration is written to `iterations_bs<B>_rank<R>.csv` (the `iterlog` format), warm-up
iterations included; the first `--warmup` are excluded from the throughput statistics by the
collector, which records the count in the run manifest.

Each step's phases are `torch.profiler.record_function` ranges: `data` (the next batch, on the
device), `forward` (with the loss), `backward`, `optimizer` (step and scaler update); under the
PyTorch profiler they are `user_annotation` events inside `ProfilerStep#N` (and
`gpu_user_annotation` on CUDA), the names the timeline's annotation lane shows. Outside a profiler
they cost a few microseconds each.

With `--nvtx` (what `collect --profiler nsys` passes) the phases are NVTX ranges too, so that
nsys records them on a CPU-only run as well; on CPU the iteration then is one as well.
On CUDA each iteration is an NVTX range `iteration N`, and `torch.cuda.profiler.start()/stop()`
(cudaProfilerStart/Stop) bracket `--profile-window START:END` (iterations START..END-1) so that
nsys (`--capture-range=cudaProfilerApi`) and ncu (`--profile-from-start off`) record only that.

With `--cuda-graph` (CUDA, one process) the step is captured once as a CUDA graph and replayed
each iteration; with `--torch-profile` the capture gets a trace of its own (`collect.cuda_graph`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

# The iteration log is the `iterlog` reader's own format: one definition, written and read.
from traceanalyze.readers.iterlog import COLUMNS as ITERLOG_COLUMNS
from traceanalyze.readers.iterlog import MAGIC as ITERLOG_MAGIC

PRECISIONS = ("fp32", "amp-fp16", "amp-bf16")


def iterlog_name(batch_size: int, rank: int) -> str:
    return f"iterations_bs{batch_size}_rank{rank}.csv"


def parse_window(text: str) -> tuple[int, int]:
    """`START:END` → (START, END), END exclusive, 0 <= START < END."""
    try:
        a, b = text.split(":")
        start, end = int(a), int(b)
    except ValueError:
        raise ValueError(f"profile window must be START:END (integers), got {text!r}") from None
    if not 0 <= start < end:
        raise ValueError(f"profile window needs 0 <= START < END, got {text!r}")
    return start, end


def parse_schedule(text: str) -> tuple[int, int, int]:
    """`WAIT,WARMUP,ACTIVE` for torch.profiler.schedule."""
    try:
        w, wu, a = (int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(
            f"torch profiler schedule must be WAIT,WARMUP,ACTIVE, got {text!r}"
        ) from None
    if w < 0 or wu < 0 or a < 1:
        raise ValueError(
            f"torch profiler schedule needs WAIT,WARMUP >= 0 and ACTIVE >= 1: {text!r}"
        )
    return w, wu, a


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m traceanalyze.collect.resnet50", description="ResNet-50 training workload."
    )
    ap.add_argument("--out", required=True, help="Directory for the iteration log and traces.")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--precision", choices=PRECISIONS, default="fp32")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None)
    ap.add_argument("--data", default=None, help="ImageNet-layout folder (default synthetic).")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile-window", default=None, help="START:END for cudaProfilerStart/Stop.")
    ap.add_argument("--torch-profile", default=None, help="WAIT,WARMUP,ACTIVE: torch.profiler.")
    ap.add_argument("--record-shapes", action="store_true")
    ap.add_argument(
        "--nvtx", action="store_true", help="Phases (and, on CPU, iterations) as NVTX ranges too."
    )
    ap.add_argument(
        "--cuda-graph",
        action="store_true",
        help="Capture one step (forward, backward, SGD step) as a CUDA graph and replay it; with "
        "--torch-profile the capture is profiled too (collect/cuda_graph.py). CUDA only.",
    )
    return ap


@contextlib.contextmanager
def phase(name: str, nvtx: bool) -> Iterator[None]:
    """A step's phase: a `record_function` range and, with `nvtx`, an NVTX push/pop range of
    the same name. `torch.cuda.nvtx` needs no GPU: without a tool injected (nsys sets
    NVTX_INJECTION64_PATH) its calls do nothing; under `nsys profile --trace=nvtx` they are
    recorded on a CPU-only run too (checked with nsys 2022.4 and torch 2.14)."""
    import torch
    from torch.profiler import record_function

    tcuda: Any = torch.cuda
    with record_function(name):
        if nvtx:
            tcuda.nvtx.range_push(name)
        try:
            yield
        finally:
            if nvtx:
                tcuda.nvtx.range_pop()


def _batches(args: argparse.Namespace, device: Any, world: int, rank: int) -> Iterator[Any]:
    import torch

    if args.data is None:
        g = torch.Generator(device="cpu").manual_seed(args.seed + rank)
        x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=g)
        y = torch.randint(0, 1000, (args.batch_size,), generator=g)
        x, y = x.to(device), y.to(device)
        while True:
            yield x, y
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torchvision import datasets, transforms

    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(args.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    ds = datasets.ImageFolder(args.data, tf)
    sampler: Any = DistributedSampler(ds, num_replicas=world, rank=rank) if world > 1 else None
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        drop_last=True,
        persistent_workers=args.workers > 0,
    )
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        epoch += 1


def _setup_device(args: argparse.Namespace, world: int, local_rank: int) -> tuple[str, Any]:
    """("cuda" or "cpu", the torch.device) for this rank; the process group when world > 1."""
    import torch

    dev_type = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev_type == "cuda":
        # cuDNN autotuning, as in the usual ImageNet training scripts: the first iterations pick
        # the algorithms (one more reason for --warmup).
        torch.backends.cudnn.benchmark = True
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if dev_type == "cuda" else "gloo")
    return dev_type, device


def _model(args: argparse.Namespace, device: Any, mem_fmt: Any, world: int, local_rank: int) -> Any:
    """ResNet-50 on `device` in `mem_fmt`, wrapped in DDP when world > 1, compiled on request."""
    import torch
    import torchvision

    model: Any = torchvision.models.resnet50(weights=None).to(device)
    model = model.to(memory_format=mem_fmt)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(
            model, device_ids=[local_rank] if device.type == "cuda" else None
        )
    if args.compile:
        model = torch.compile(model)
    return model


def _torch_profiler(args: argparse.Namespace, rank: int, cuda: bool) -> Any:
    """torch.profiler over the `--torch-profile` schedule, else a no-op context."""
    if not args.torch_profile:
        return contextlib.nullcontext()
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    wait, warm, active = parse_schedule(args.torch_profile)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(
        activities=acts,
        schedule=schedule(wait=wait, warmup=warm, active=active, repeat=1),
        on_trace_ready=tensorboard_trace_handler(
            str(args.out), worker_name=f"torch_bs{args.batch_size}_rank{rank}", use_gzip=True
        ),
        record_shapes=args.record_shapes,
    )


def train(args: argparse.Namespace) -> Path:
    """Run the workload; returns the iteration log path."""
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev_type, device = _setup_device(args, world, local_rank)
    torch.manual_seed(args.seed)

    mem_fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = _model(args, device, mem_fmt, world, local_rank)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    amp_dtype = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(args.precision)
    scaler = torch.amp.GradScaler(dev_type, enabled=args.precision == "amp-fp16")
    device_id = device.index if device.type == "cuda" else None
    cuda = device.type == "cuda"
    tcuda: Any = torch.cuda  # untyped in torch's stubs

    window = parse_window(args.profile_window) if args.profile_window else None
    prof_ctx = _torch_profiler(args, rank, cuda)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / iterlog_name(args.batch_size, rank)
    data = _batches(args, device, world, rank)
    model.train()
    autocast = _autocast(args, dev_type, amp_dtype)
    step: Callable[[Any, Any], None]
    step = functools.partial(_train_step, model, opt, loss_fn, scaler, autocast, args.nvtx)
    if args.cuda_graph:
        step = _graphed(args, step, data, cuda, rank, out)
    with open(log_path, "w", newline="") as log, prof_ctx as prof:
        log.write(ITERLOG_MAGIC + "\n" + ",".join(ITERLOG_COLUMNS) + "\n")
        log.flush()
        for i in range(args.iterations):
            with phase("data", args.nvtx):
                x, y = next(data)
                x = x.contiguous(memory_format=mem_fmt)
            start_ns, dur_ns = _timed(step, x, y, i, window, tcuda if cuda else None, args.nvtx)
            ips = args.batch_size / (dur_ns / 1e9) if dur_ns > 0 else ""
            dev_cell = "" if device_id is None else device_id
            log.write(f"{rank},{dev_cell},{i},{start_ns},{dur_ns},{args.batch_size},{ips}\n")
            if prof is not None:
                prof.step()
            log.flush()  # every step: the collector shows progress from this file
    if cuda and window is not None and window[1] > args.iterations:
        tcuda.profiler.stop()
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return log_path


def _autocast(args: argparse.Namespace, dev_type: str, amp_dtype: Any) -> Callable[[], Any]:
    """`torch.autocast` for the step; under graph capture without its cast cache (the
    documentation of torch.cuda.graph asks for `cache_enabled=False`)."""
    import torch

    return functools.partial(
        torch.autocast,
        dev_type,
        dtype=amp_dtype,
        enabled=amp_dtype is not None,
        cache_enabled=not args.cuda_graph,
    )


def _graphed(
    args: argparse.Namespace,
    step: Callable[[Any, Any], None],
    data: Iterator[Any],
    cuda: bool,
    rank: int,
    out: Path,
) -> Callable[[Any, Any], None]:
    """The step captured as a CUDA graph on the first batch's shape (`collect.cuda_graph`), the
    capture profiled with `--torch-profile`."""
    from .cuda_graph import capture_trace_name, graphed_step

    if not cuda:
        raise SystemExit("resnet50: --cuda-graph needs a CUDA device; none is available")
    x, y = next(data)
    trace = out / capture_trace_name(args.batch_size, rank) if args.torch_profile else None
    return graphed_step(step, x, y, profile_to=trace, record_shapes=args.record_shapes)


def _train_step(
    model: Any,
    opt: Any,
    loss_fn: Any,
    scaler: Any,
    autocast: Callable[[], Any],
    nvtx: bool,
    x: Any,
    y: Any,
) -> None:
    """One optimizer step on the batch (x, y): forward under `autocast()`, backward, update,
    each phase a `record_function` range (`forward`, `backward`, `optimizer`; `data` is the
    caller's) that the profiler records as a user annotation and the timeline draws by name;
    with `nvtx` also an NVTX range (`phase`)."""
    opt.zero_grad(set_to_none=True)
    with phase("forward", nvtx), autocast():
        loss = loss_fn(model(x), y)
    with phase("backward", nvtx):
        scaler.scale(loss).backward()
    with phase("optimizer", nvtx):
        scaler.step(opt)
        scaler.update()


def _timed(
    step: Callable[[Any, Any], None],
    x: Any,
    y: Any,
    i: int,
    window: tuple[int, int] | None,
    tcuda: Any,
    nvtx: bool = False,
) -> tuple[int, int]:
    """Run `step(x, y)` as iteration `i`: (host epoch start ns, duration ns).

    With `tcuda` (torch.cuda) the step is an NVTX range timed by CUDA events and synchronized,
    and the profiler starts/stops at the window's edges; without it, a perf_counter delta.
    """
    if tcuda is not None:
        if window is not None and i == window[0]:
            tcuda.profiler.start()
        tcuda.nvtx.range_push(f"iteration {i}")
        ev0 = tcuda.Event(enable_timing=True)
        ev1 = tcuda.Event(enable_timing=True)
        start_ns = time.time_ns()
        ev0.record()
    else:
        if nvtx:  # on CUDA the iteration is an NVTX range anyway (above)
            _nvtx().range_push(f"iteration {i}")
        start_ns = time.time_ns()
        t0 = time.perf_counter_ns()
    step(x, y)
    if tcuda is not None:
        ev1.record()
        ev1.synchronize()
        dur_ns = round(ev0.elapsed_time(ev1) * 1e6)  # elapsed_time is ms
        tcuda.nvtx.range_pop()
        if window is not None and i == window[1] - 1:
            tcuda.profiler.stop()
    else:
        dur_ns = time.perf_counter_ns() - t0
        if nvtx:
            _nvtx().range_pop()
    return start_ns, dur_ns


def _nvtx() -> Any:
    import torch.cuda.nvtx as nvtx

    return nvtx


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .cuda_graph import refusal

    why = refusal(args)
    if why is not None:
        sys.stderr.write(f"resnet50: {why}\n")
        return 2
    if args.torch_profile:
        w, wu, a = parse_schedule(args.torch_profile)
        if w + wu + a > args.iterations:
            sys.stderr.write(
                f"resnet50: torch profiler schedule {args.torch_profile} needs "
                f"{w + wu + a} iterations, only {args.iterations} run\n"
            )
            return 2
    train(args)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
