"""Command lines for each profiler: small pure argv builders, plus the checks run before them.

Each builder takes the run directory, the batch size and the inner command (the workload, or the
torchrun launcher around it) and returns the exact argv; tests pin them. Flags and why:

* nsys (Nsight Systems 2023–2025): `--capture-range=cudaProfilerApi` records only between the
  workload's `torch.cuda.profiler.start()/stop()`; `-o …_rank%q{RANK}` expands the RANK variable
  torchrun sets, so each rank writes its own report (nsys runs *inside* torchrun for that reason).
  Afterwards `nsys export --type sqlite` makes the SQLite file the `nsys_sqlite` reader takes.
* ncu (Nsight Compute 2020.1+): the TBD suite's core-utilization command (formats.md §4.3) —
  four pipe-utilization metrics, `gpc__cycles_elapsed.max` (the cycle weight) and
  `gpu__time_duration.sum`, `--target-processes all --profile-from-start off --csv`. Metric names
  differ by architecture, so they are chosen from `ncu --query-metrics` output
  (`choose_ncu_metrics`), with `NCU_FALLBACK` by compute capability when the query fails.
* nvprof (CUDA ≤ 11): exactly the SC22 study's flags (formats.md §0.1). nvprof does not support
  compute capability 8.0 and newer; `check_nvprof_supported` refuses those up front.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence

from ..errors import CollectError, ToolNotFound

PROFILERS: tuple[str, ...] = ("none", "torch", "nsys", "ncu", "nvprof")
EXTERNAL: tuple[str, ...] = ("nsys", "ncu", "nvprof")

NSYS_TRACE = "cuda,nvtx,cudnn,cublas"
METRIC_SUFFIX = ".avg.pct_of_peak_sustained_elapsed"
NCU_EXTRA_METRICS: tuple[str, ...] = ("gpc__cycles_elapsed.max", "gpu__time_duration.sum")

# Per pipe, candidate base names in order of preference; the first one `ncu --query-metrics`
# lists wins. Volta/Turing (ncu 2019–2020, TBD suite on a 2080 Ti) have `…_pipe_tensor`; Ampere
# and newer split the tensor pipe by instruction family and count HMMA (fp16/bf16/tf32 MMA, what
# cuDNN's convolutions issue) as `…_pipe_tensor_op_hmma`; Hopper's warpgroup MMA (wgmma) is
# counted separately as `…_pipe_tensor_op_gmma`, taken as an extra metric where listed.
NCU_CANDIDATES: dict[str, tuple[str, ...]] = {
    "fma": ("sm__inst_executed_pipe_fma",),
    "fp16": ("sm__inst_executed_pipe_fp16",),
    "tensor": ("sm__inst_executed_pipe_tensor_op_hmma", "sm__inst_executed_pipe_tensor"),
    "tensor_gmma": ("sm__inst_executed_pipe_tensor_op_gmma",),
    "xu": ("sm__inst_executed_pipe_xu",),
}
REQUIRED_PIPES: tuple[str, ...] = ("fma", "fp16", "tensor", "xu")

# When `ncu --query-metrics` cannot run (no permission to the GPU counters, a remote node), the
# base names by compute capability major version. 7.x: the TBD suite's names (formats.md §4.3);
# 8.x–12.x: from the Nsight Compute metric tables for GA100/GH100 (not verified against a GPU
# here; `ncu` silently reports `n/a` for a name a chip lacks, so a wrong guess costs a column, not
# the run).
NCU_FALLBACK: dict[int, tuple[str, ...]] = {
    7: (
        "sm__inst_executed_pipe_fma",
        "sm__inst_executed_pipe_fp16",
        "sm__inst_executed_pipe_tensor",
        "sm__inst_executed_pipe_xu",
    ),
    8: (
        "sm__inst_executed_pipe_fma",
        "sm__inst_executed_pipe_fp16",
        "sm__inst_executed_pipe_tensor_op_hmma",
        "sm__inst_executed_pipe_xu",
    ),
    9: (
        "sm__inst_executed_pipe_fma",
        "sm__inst_executed_pipe_fp16",
        "sm__inst_executed_pipe_tensor_op_hmma",
        "sm__inst_executed_pipe_tensor_op_gmma",
        "sm__inst_executed_pipe_xu",
    ),
}

NVPROF_MAX_CC = (8, 0)  # nvprof refuses devices of compute capability >= 8.0


def require_tool(name: str) -> str:
    """The absolute path of `name` on PATH, or `ToolNotFound`."""
    path = shutil.which(name)
    if path is None:
        hint = {
            "nsys": "install Nsight Systems (CUDA toolkit or standalone)",
            "ncu": "install Nsight Compute (CUDA toolkit or standalone)",
            "nvprof": "nvprof ships with CUDA <= 11; use --profiler nsys or ncu on newer setups",
        }.get(name, "install it")
        raise ToolNotFound(f"profiler binary {name!r} not found on PATH ({hint})")
    return path


def check_nvprof_supported(capabilities: Sequence[tuple[int, int]]) -> None:
    """CollectError when any GPU has compute capability >= 8.0 (nvprof cannot profile it)."""
    too_new = [cc for cc in capabilities if tuple(cc) >= NVPROF_MAX_CC]
    if too_new:
        cc = ", ".join(f"{a}.{b}" for a, b in sorted(set(too_new)))
        raise CollectError(
            f"nvprof does not support compute capability >= 8.0 (found {cc}); "
            "use --profiler nsys or --profiler ncu"
        )


def tool_version(tool: str) -> str | None:
    """First non-empty line of `<tool> --version`, or None when it cannot be run."""
    try:
        cp = subprocess.run(
            [tool, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in (cp.stdout + cp.stderr).splitlines() if ln.strip()]
    # nvprof prints a banner then "Release version …"; prefer a line naming the version.
    for ln in lines:
        if re.search(r"version", ln, re.IGNORECASE):
            return ln
    return lines[0] if lines else None


# --- nsys ------------------------------------------------------------------------------------


def nsys_report_base(run_dir: str, batch_size: int) -> str:
    return f"{run_dir}/nsys_bs{batch_size}_rank%q{{RANK}}"


def nsys_argv(
    run_dir: str, batch_size: int, inner: Sequence[str], *, gpu_metrics: bool = False
) -> list[str]:
    argv = [
        "nsys",
        "profile",
        f"--trace={NSYS_TRACE}",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--force-overwrite=true",
        "-o",
        nsys_report_base(run_dir, batch_size),
    ]
    if gpu_metrics:
        # Needs GPU performance-counter permission (root or NVreg_RestrictProfilingToAdminUsers=0).
        argv.append("--gpu-metrics-devices=all")
    return [*argv, *inner]


def nsys_export_argv(report: str) -> list[str]:
    """`report` is a `.nsys-rep` (or pre-2021.4 `.qdrep`) path; the SQLite goes next to it."""
    base = report
    for ext in (".nsys-rep", ".qdrep"):
        if report.endswith(ext):
            base = report[: -len(ext)]
    return [
        "nsys",
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        "--output",
        f"{base}.sqlite",
        report,
    ]


# --- ncu -------------------------------------------------------------------------------------

_METRIC_LINE = re.compile(r"^\s*([a-z0-9]+__[A-Za-z0-9_]+)\b")


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names from `ncu --query-metrics` output (first column of the table)."""
    return {m.group(1) for line in text.splitlines() if (m := _METRIC_LINE.match(line))}


def choose_ncu_metrics(
    available: set[str] | None, capability: tuple[int, int] | None = None
) -> list[str]:
    """Full metric names for `--metrics`: pipes chosen from `available` (base names), else from
    `NCU_FALLBACK` by compute capability, then the cycle and duration metrics."""
    if available:
        bases = []
        for pipe, cands in NCU_CANDIDATES.items():
            hit = next((c for c in cands if c in available), None)
            if hit is None and pipe in REQUIRED_PIPES:
                raise CollectError(
                    f"ncu --query-metrics lists none of {', '.join(cands)} for the {pipe} pipe"
                )
            if hit is not None:
                bases.append(hit)
    else:
        if capability is None:
            raise CollectError("cannot choose ncu metrics: no --query-metrics output and no GPU")
        major = capability[0]
        table = NCU_FALLBACK.get(major) or NCU_FALLBACK[9 if major > 9 else 7]
        bases = list(table)
    return [b + METRIC_SUFFIX for b in bases] + list(NCU_EXTRA_METRICS)


def query_ncu_metrics() -> set[str] | None:
    """Run `ncu --query-metrics` on device 0; None when it fails."""
    try:
        cp = subprocess.run(
            ["ncu", "--query-metrics"], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = parse_query_metrics(cp.stdout)
    return found if cp.returncode == 0 and found else None


def ncu_argv(
    run_dir: str, batch_size: int, inner: Sequence[str], metrics: Sequence[str]
) -> list[str]:
    return [
        "ncu",
        "--target-processes",
        "all",
        "--profile-from-start",
        "off",
        "--metrics",
        ",".join(metrics),
        "--csv",
        "--log-file",
        f"{run_dir}/batch_{batch_size}.csv",
        *inner,
    ]


# --- nvprof ----------------------------------------------------------------------------------


def nvprof_argv(run_dir: str, inner: Sequence[str]) -> list[str]:
    # SC22 `run-resnet.sh` flags verbatim (formats.md §0.1); %p = one CSV per process.
    return [
        "nvprof",
        "--print-gpu-trace",
        "--system-profiling",
        "on",
        "--kernel-latency-timestamps",
        "on",
        "--csv",
        "--log-file",
        f"{run_dir}/nvprof_%p.csv",
        "--profile-child-processes",
        *inner,
    ]


__all__ = [
    "PROFILERS",
    "EXTERNAL",
    "NCU_CANDIDATES",
    "NCU_FALLBACK",
    "require_tool",
    "check_nvprof_supported",
    "tool_version",
    "nsys_argv",
    "nsys_export_argv",
    "nsys_report_base",
    "parse_query_metrics",
    "choose_ncu_metrics",
    "query_ncu_metrics",
    "ncu_argv",
    "nvprof_argv",
]
