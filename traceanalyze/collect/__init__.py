"""Collection: ResNet-50 training runs under a profiler, with an NVML sampler and a manifest.

Modules: `resnet50` (the workload, `python -m traceanalyze.collect.resnet50`), `profilers` (pure
argv builders per profiler and the checks before them), `sampler` (NVML sampler process,
`python -m traceanalyze.collect.sampler`), `manifest`, `throughput` (batch-sweep table and plot),
`run` (orchestration) and `cli` (`traceanalyze collect`).

Importing this package does not import torch, torchvision or pynvml; they load inside the
functions that need them (the `collect` extra).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CollectConfig", "CollectResult", "collect", "plan"]


def __getattr__(name: str) -> Any:
    # Lazy: `python -m traceanalyze.collect.resnet50` (and `.sampler`) import this package first;
    # importing `run` here would import the module being executed a second time (runpy warns).
    if name in __all__:
        return getattr(importlib.import_module(".run", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
