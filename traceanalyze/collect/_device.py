"""What `collect` checks about the machine before it runs: torch and torchvision importable (the
`collect` extra), and the cost of a CPU run, told before one is started."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Protocol

from ..errors import CollectError


class RunShape(Protocol):
    """What the cost estimate reads of a `run.CollectConfig` (which satisfies it; not imported
    here, so `run` and this module do not import each other)."""

    @property
    def image_size(self) -> int: ...
    @property
    def iterations(self) -> int: ...
    @property
    def batch_sizes(self) -> Sequence[int]: ...


# What a user without the extra is told (torch and torchvision are imported lazily).
COLLECT_EXTRA = "pip install 'traceanalyze[collect]'"
# One ResNet-50 training step at batch 64, 224x224 px, fp32, on the 2-core CPU this project is
# developed on (issue 21): the scale a user is warned of before a CPU run.
CPU_SECONDS_PER_STEP_BS64_224 = 35.0


def require_torch() -> None:
    """A `CollectError` naming the extra when torch or torchvision cannot be imported."""
    missing = [m for m in ("torch", "torchvision") if importlib.util.find_spec(m) is None]
    if missing:
        raise CollectError(
            f"collect trains ResNet-50 with PyTorch; {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed: {COLLECT_EXTRA}"
        )


def cpu_cost(cfg: RunShape) -> str:
    """Roughly how long `cfg` runs on a CPU, scaled from `CPU_SECONDS_PER_STEP_BS64_224` by
    images per step and image area (ResNet-50's FLOPs grow with both)."""
    per_image = CPU_SECONDS_PER_STEP_BS64_224 / 64 * (cfg.image_size / 224) ** 2
    total = per_image * sum(bs * cfg.iterations for bs in cfg.batch_sizes)
    if total >= 3600:
        took = f"{total / 3600:.1f} hours"
    elif total >= 90:
        took = f"{total / 60:.0f} minutes"
    else:
        took = f"{max(total, 1):.0f} s"
    return (
        f"{cfg.iterations} steps at batch {','.join(map(str, cfg.batch_sizes))}, "
        f"{cfg.image_size}x{cfg.image_size} px take about {took} on the CPU "
        f"(measured: {CPU_SECONDS_PER_STEP_BS64_224:g} s a step at batch 64, 224 px, on 2 cores)"
    )


__all__ = ["COLLECT_EXTRA", "CPU_SECONDS_PER_STEP_BS64_224", "cpu_cost", "require_torch"]
