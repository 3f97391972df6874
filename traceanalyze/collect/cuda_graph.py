"""The ResNet-50 step as one CUDA graph (`python -m traceanalyze.collect.resnet50 --cuda-graph`):
forward, loss, backward and the SGD step captured once on static tensors, then replayed every
iteration, the batch copied into the static input first (PyTorch's "whole network capture"
recipe, torch.cuda.graph).

With `--torch-profile` the capture itself runs under the PyTorch profiler too and is written as
`torch_bs<B>_rank<R>_capture.pt.trace.json.gz` beside the replay traces: a capture-time trace
(launch calls between cudaStreamBeginCapture and cudaStreamEndCapture, inside the operators that
issued them, no kernels) for `traceanalyze ops REPLAY --capture CAPTURE` (docs/graph-capture.md).

Limits, checked before any work (`refusal`): CUDA only, one process, fp32 or amp-bf16 (the fp16
GradScaler's step is not capturable), no `--compile` (it captures graphs of its own).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

WARMUP_STEPS = 3  # eager steps on a side stream before capture (lazy init, cuDNN autotuning)


def refusal(args: argparse.Namespace) -> str | None:
    """Why `--cuda-graph` cannot run with these arguments, or None."""
    if not args.cuda_graph:
        return None
    if args.device == "cpu":
        return "--cuda-graph needs a CUDA device (graphs are captured on a CUDA stream)"
    if args.precision == "amp-fp16":
        return "--cuda-graph runs fp32 or amp-bf16: the fp16 GradScaler step is not capturable"
    if args.compile:
        return "--cuda-graph and --compile: torch.compile captures graphs of its own"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "--cuda-graph runs one process (WORLD_SIZE > 1 given)"
    return None


def capture_trace_name(batch_size: int, rank: int) -> str:
    return f"torch_bs{batch_size}_rank{rank}_capture.pt.trace.json.gz"


def graphed_step(
    train_step: Callable[[Any, Any], None],
    x: Any,
    y: Any,
    *,
    profile_to: Path | None,
    record_shapes: bool = False,
) -> Callable[[Any, Any], None]:
    """`train_step` captured as a CUDA graph on static copies of the batch (x, y); returns the
    replay step, which copies its batch into them and replays. `profile_to`: write the capture's
    PyTorch-profiler trace there."""
    import torch

    tcuda: Any = torch.cuda
    static_x, static_y = x.clone(), y.clone()
    side = tcuda.Stream()
    side.wait_stream(tcuda.current_stream())
    with tcuda.stream(side):  # warm-up outside the capture, as torch.cuda.graph asks
        for _ in range(WARMUP_STEPS):
            train_step(static_x, static_y)
    tcuda.current_stream().wait_stream(side)
    graph = tcuda.CUDAGraph()
    prof = _capture_profiler(record_shapes) if profile_to is not None else None
    if prof is not None:
        prof.start()
    # zero_grad(set_to_none=True) inside the step: the backward allocates the gradients from the
    # graph's private pool, and every replay writes them in place
    with tcuda.graph(graph):
        train_step(static_x, static_y)
    tcuda.synchronize()
    if prof is not None and profile_to is not None:
        prof.stop()
        prof.export_chrome_trace(str(profile_to))  # a `.gz` name is written gzipped

    def replay(xb: Any, yb: Any) -> None:
        static_x.copy_(xb, non_blocking=True)
        static_y.copy_(yb, non_blocking=True)
        graph.replay()

    return replay


def _capture_profiler(record_shapes: bool) -> Any:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    return profile(activities=acts, record_shapes=record_shapes)
