"""Device filters over a `Dataset`: which tables hold per-device rows, and a filter that matches
no device says so."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import TraceanalyzeError

# The tables whose rows are work or samples on a device (`devices` only lists the hardware).
DEVICE_WORK_TABLES = (
    "kernels",
    "memcpy",
    "graph_replays",
    "kernel_metrics",
    "gpu_samples",
    "gpu_metrics",
    "iterations",
)


def check_devices(want: Sequence[int], active: set[int]) -> None:
    """A device filter that matches nothing says so (issue 21: `--device 7` on a one-GPU trace
    printed an empty summary): an error naming the devices with work when there are some, a
    warning when the sources have no per-device data at all (a CPU run) or some devices match."""
    import warnings

    missing = sorted(set(want) - active)
    if not missing:
        return
    names = ", ".join(map(str, missing))
    if not active:
        warnings.warn(f"device={names}: these sources have no per-device data", stacklevel=3)
        return
    there = f"devices with work: {', '.join(map(str, sorted(active)))}"
    if len(missing) == len(set(want)):
        raise TraceanalyzeError(f"no work or samples on device {names} in these sources ({there})")
    warnings.warn(f"no work or samples on device {names} ({there})", stacklevel=3)
