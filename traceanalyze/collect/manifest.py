"""The run manifest: `<run>/manifest.json`, what was run, where, with what, and how it ended.

Written atomically (temporary file + rename) at the start with `"status": "running"` and rewritten
at the end with `completed`, `failed` or `interrupted`, so even a killed run leaves one. It records
the command line, start/end UTC, exit status, versions (Python, torch, CUDA, driver, profiler),
GPUs (name, UUID, compute capability, enforced power limit), the hostname and
`CUDA_VISIBLE_DEVICES`. No other environment variable is ever copied in: environments carry
tokens and passwords.

Two CUDA versions, which differ in general: `versions.cuda` is the toolkit torch was built with
(`torch.version.cuda`); `versions.cuda_driver_version` is the newest CUDA the installed driver
supports (NVML `nvmlSystemGetCudaDriverVersion`, else the "CUDA Version" in `nvidia-smi`'s
banner), null where neither answers. `versions.driver` is the driver's own version (580.95.05).
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
import uuid
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

MANIFEST_VERSION = 1
# The only environment variable the manifest records.
ENV_ALLOWED: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def torch_versions() -> dict[str, str | None]:
    """torch and the CUDA it was built with; None when torch is not installed."""
    try:
        import torch
    except ImportError:
        return {"torch": None, "cuda": None, "cudnn": None}
    backends: Any = torch.backends
    with warnings.catch_warnings():
        # cudnn.is_available() asks torch.cuda, which warns "CUDA initialization: The NVIDIA
        # driver on your system is too old" where a CUDA driver library but no usable GPU is
        # installed (Debian's nvidia-profiler brings libcuda1): a version lookup, not a run
        # on the device, so not the user's concern
        warnings.filterwarnings("ignore", message="CUDA initialization", category=UserWarning)
        cudnn = backends.cudnn.version() if backends.cudnn.is_available() else None
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": None if cudnn is None else str(cudnn),
    }


def torchvision_version() -> str | None:
    try:
        import torchvision
    except ImportError:
        return None
    return str(torchvision.__version__)


def gpu_inventory(nvml: Any = None) -> tuple[str | None, list[dict[str, Any]]]:
    """(driver version, one dict per GPU) through NVML; (None, []) without a usable NVML."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return None, []
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None, []

    def ask(fn: str, *args: Any) -> Any:
        # A query the GPU or driver does not answer is recorded as null, not a failed run.
        try:
            return getattr(nvml, fn)(*args)
        except nvml.NVMLError:
            return None

    try:
        driver = ask("nvmlSystemGetDriverVersion")
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name, uuid_ = ask("nvmlDeviceGetName", h), ask("nvmlDeviceGetUUID", h)
            limit = ask("nvmlDeviceGetEnforcedPowerLimit", h)
            cc = ask("nvmlDeviceGetCudaComputeCapability", h)
            gpus.append(
                {
                    "index": i,
                    "name": None if name is None else _text(name),
                    "uuid": None if uuid_ is None else _text(uuid_),
                    "power_limit_w": None if limit is None else limit / 1000.0,
                    "compute_capability": None if cc is None else f"{cc[0]}.{cc[1]}",
                }
            )
        return None if driver is None else _text(driver), gpus
    finally:
        nvml.nvmlShutdown()


def _cuda_version_text(v: int) -> str:
    # NVML encodes CUDA 12.4 as 12040: major = v // 1000, minor = (v % 1000) // 10 (nvml.h,
    # NVML_CUDA_DRIVER_VERSION_MAJOR / _MINOR).
    return f"{v // 1000}.{(v % 1000) // 10}"


_SMI_CUDA = re.compile(r"CUDA Version:\s*(\d+\.\d+)")


def _nvml_cuda_driver(nvml: Any) -> str | None:
    if not hasattr(nvml, "nvmlSystemGetCudaDriverVersion"):
        return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        return _cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion()))
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()


def _smi_cuda_driver() -> str | None:
    try:
        cp = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _SMI_CUDA.search(cp.stdout) if cp.returncode == 0 else None
    return m.group(1) if m else None


def cuda_driver_version(nvml: Any = None) -> str | None:
    """The newest CUDA version the installed driver supports ("12.4"): NVML, else the banner of
    `nvidia-smi`; None when neither answers (no driver, a login node)."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return _smi_cuda_driver()
    return _nvml_cuda_driver(nvml) or _smi_cuda_driver()


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def build_manifest(
    *,
    run_id: str,
    argv: Sequence[str],
    config: dict[str, Any],
    profiler_version: str | None,
    nvml: Any = None,
    environ: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The manifest at the start of a run (status "running")."""
    env = os.environ if environ is None else environ
    driver, gpus = gpu_inventory(nvml)
    return {
        "manifest_version": MANIFEST_VERSION,
        "run_id": run_id,
        "status": "running",
        "exit_code": None,
        "error": None,
        "argv": list(argv),
        "start_utc": utc_now(),
        "end_utc": None,
        "hostname": socket.gethostname(),
        "env": {k: env[k] for k in ENV_ALLOWED if k in env},
        "versions": {
            "python": platform.python_version(),
            "python_executable": sys.executable,
            **torch_versions(),
            "torchvision": torchvision_version(),
            "driver": driver,
            "cuda_driver_version": cuda_driver_version(nvml),
            "profiler": profiler_version,
            "traceanalyze": _own_version(),
        },
        "gpus": gpus,
        "config": config,
        "commands": [],
        "outputs": [],
        "ingested": [],
        "not_ingested": [],
    }


def _own_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("traceanalyze")
    except PackageNotFoundError:
        return None


def write_manifest(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write JSON atomically: a reader sees the old or the new manifest, never half of one."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return data


__all__ = [
    "ENV_ALLOWED",
    "build_manifest",
    "write_manifest",
    "read_manifest",
    "gpu_inventory",
    "cuda_driver_version",
    "utc_now",
]
