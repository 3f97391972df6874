"""Command lines for each profiler: small pure argv builders, plus the checks run before them.

Each builder takes the run directory, the batch size and the inner command (the workload, or the
torchrun launcher around it) and returns the exact argv; tests pin them. Flags and why:

* nsys (Nsight Systems 2023–2025): `--capture-range=cudaProfilerApi` records only between the
  workload's `torch.cuda.profiler.start()/stop()`; `-o …_rank%q{RANK}` expands the RANK variable
  torchrun sets, so each rank writes its own report (nsys runs *inside* torchrun for that reason);
  on a multi-node run the name also carries the node (`…_node<N>_rank%q{RANK}`), so each node
  exports only its own reports. Afterwards `nsys export --type sqlite` makes the SQLite file the
  `nsys_sqlite` reader takes. GPU metrics sampling (`--gpu-metrics-devices`) is a per-GPU
  hardware sampler: with several ranks per node, only local rank 0 samples (`all`), the others
  pass `none` (`nsys_argv`).
* ncu (Nsight Compute 2020.1+): the TBD suite's core-utilization command (formats.md §4.3) —
  the pipe-utilization metrics (FMA, Tensor, SFU/xu, and FP16 where the chip has an FP16 pipe),
  `gpc__cycles_elapsed.max` (the cycle weight) and `gpu__time_duration.sum`,
  `--target-processes all --profile-from-start off --csv`. Metric names differ by architecture,
  so they are chosen from `ncu --query-metrics` output (`select_ncu_metrics`), with
  `NCU_FALLBACK` by compute capability when the query cannot run. One log per batch size,
  `batch_<bs>.csv`, and on a multi-node run one per node, `batch_<bs>_node<N>.csv` (every node
  runs its own ncu into the shared run directory).
* nvprof (CUDA ≤ 11): exactly the SC22 study's flags (formats.md §0.1). nvprof does not support
  compute capability 8.0 and newer; `check_nvprof_supported` refuses those up front.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import CollectError, ToolNotFound

PROFILERS: tuple[str, ...] = ("none", "torch", "nsys", "ncu", "nvprof")
EXTERNAL: tuple[str, ...] = ("nsys", "ncu", "nvprof")

NSYS_TRACE = "cuda,nvtx,cudnn,cublas"
NSYS_TRACE_CPU = "osrt,nvtx"
METRIC_SUFFIX = ".avg.pct_of_peak_sustained_elapsed"
NCU_EXTRA_METRICS: tuple[str, ...] = ("gpc__cycles_elapsed.max", "gpu__time_duration.sum")

# Base metric names, one constant each so the tables below cannot drift apart.
FMA = "sm__inst_executed_pipe_fma"
FP16 = "sm__inst_executed_pipe_fp16"
TENSOR_VOLTA = "sm__inst_executed_pipe_tensor"
HMMA = "sm__inst_executed_pipe_tensor_op_hmma"
GMMA = "sm__inst_executed_pipe_tensor_op_gmma"
XU = "sm__inst_executed_pipe_xu"

# Per pipe, candidate base names in order of preference; the first one `ncu --query-metrics`
# lists wins. Volta/Turing (ncu 2019–2020, TBD suite on a 2080 Ti) have `…_pipe_tensor`; Ampere
# and newer split the tensor pipe by instruction family and count HMMA (fp16/bf16/tf32 MMA, what
# cuDNN's convolutions issue) as `…_pipe_tensor_op_hmma`; Hopper's warpgroup MMA (wgmma) is
# counted separately as `…_pipe_tensor_op_gmma`, taken as an extra metric where listed.
NCU_CANDIDATES: dict[str, tuple[str, ...]] = {
    "fma": (FMA,),
    "fp16": (FP16,),
    "tensor": (HMMA, TENSOR_VOLTA),
    "tensor_gmma": (GMMA,),
    "xu": (XU,),
}
# FP16 is not required: only Volta, Turing and GA100 have a separate FP16 pipe. On GA10x (8.6)
# and GH100 (9.0) FP16x2 instructions are dual-issued to the fmaheavy/fmalite pipes, so
# `ncu --query-metrics` lists no `sm__inst_executed_pipe_fp16` there (NVIDIA developer forum,
# "Separate CUDA core pipeline for FP16 and FP32",
# https://forums.developer.nvidia.com/t/separate-cuda-core-pipeline-for-fp16-and-fp32/302018/7).
# The FP16 unit is then left out and the run's notes say so; coreutil reports it as null.
REQUIRED_PIPES: tuple[str, ...] = ("fma", "tensor", "xu")
PIPE_LABELS: dict[str, str] = {
    "fma": "FMA",
    "fp16": "FP16",
    "tensor": "Tensor Core",
    "tensor_gmma": "Tensor Core (Hopper wgmma)",
    "xu": "SFU (xu)",
}

# When `ncu --query-metrics` cannot run (no GPU visible, a dry run on a login node), the base
# names by compute capability: an exact (major, minor) entry, else the (major, None) entry for
# the family. Only names with public evidence for that architecture are listed; a chip not in
# the table gets no guess (pass --ncu-metrics, or let the run ask `ncu --query-metrics`).
#
# * 7.x: the TBD suite's command (formats.md §4.3; Nsight Compute 2020.1 on Volta/Turing).
# * 8.0 (GA100): FP16 has its own pipe, shared with Tensor and FP64 (forum thread above);
#   Ampere's tensor pipe is split by instruction family, HMMA counted as `…_tensor_op_hmma`
#   (NVIDIA's own Nsight Compute rule `HighPipeUtilization.py`, which requests
#   `sm__inst_executed_pipe_tensor_op_{hmma,imma,dmma}`, `…_pipe_fp16` and `…_pipe_fma_type_fp16`
#   all as optional metrics because availability differs by chip).
# * 8.6/8.7/8.9 (GA10x, GA10B, AD10x): as GA100 but without an FP16 pipe (forum thread above:
#   "FP16x2 operations are dual-issued to both FMAheavy and FMAlite pipe").
# * 9.0 (GH100): HMMA plus warpgroup MMA, `…_tensor_op_gmma`; no FP16 pipe ("same as GA10x for
#   FMA pipes and FP16x2", same thread). Public H100 `ncu` pipe dumps list `…_tensor_op_hmma`,
#   `…_tensor_op_gmma`, `…_pipe_fma_type_fp16` and no `…_pipe_fp16`.
# * 10.x/12.x (Blackwell): left out on purpose. Public B200/GB10 captures show the MMA
#   instruction counter renamed (`sm__inst_executed_pipe_tensor_subpipe_hmma`) and tcgen05 work
#   on a separate pipe (`sm__pipe_tc_cycles_active`), and none shows Hopper's `…_tensor_op_gmma`;
#   which of these should stand for "Tensor Core utilization" there is an open question.
NCU_FALLBACK: dict[tuple[int, int | None], tuple[str, ...]] = {
    (7, None): (FMA, FP16, TENSOR_VOLTA, XU),
    (8, 0): (FMA, FP16, HMMA, XU),
    (8, None): (FMA, HMMA, XU),
    (9, 0): (FMA, HMMA, GMMA, XU),
}
# The `--metrics` value a dry run prints when no metric names can be known in advance.
NCU_METRICS_AT_RUN_TIME = "<chosen at run time from ncu --query-metrics>"

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


# --- the flags a tool has -------------------------------------------------------------------

# `nsys profile --help` lists `\t-t, --trace=` and `\t--capture-range-end=`; `nvprof --help`
# `  --print-gpu-trace` and `  -o,  --export-profile <filename>`; `ncu --help` `  --csv`,
# `  --metrics arg`. Flags are the `--long` (and `-x`) words at the start of a line.
_HELP_FLAG = re.compile(r"^\s*(?:(-[A-Za-z])(?:,\s*|\s*\[\s*))?(--[a-z][a-z0-9-]*)", re.MULTILINE)
_SHORT_ONLY = re.compile(r"^\s*(-[A-Za-z])\b[ =,]", re.MULTILINE)


def help_flags(text: str) -> set[str]:
    """The flags a tool's `--help` output lists."""
    flags = {m.group(2) for m in _HELP_FLAG.finditer(text)}
    flags |= {m.group(1) for m in _HELP_FLAG.finditer(text) if m.group(1)}
    flags |= {m.group(1) for m in _SHORT_ONLY.finditer(text)}
    return flags


def argv_flags(argv: Sequence[str]) -> list[str]:
    """The flags in a builder's argv, values dropped (`--trace=cuda` -> `--trace`); only the
    profiler's own part is given (up to the command it runs)."""
    return [a.split("=", 1)[0] for a in argv if a.startswith("-")]


def tool_help(tool: str, *sub: str) -> str | None:
    """`<tool> [sub…] --help` output, or None when it cannot run."""
    try:
        cp = subprocess.run(
            [tool, *sub, "--help"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return cp.stdout + cp.stderr


def check_flags(
    tool: str, flags: Sequence[str], help_text: str | None, version: str | None
) -> None:
    """CollectError, before anything runs, when a flag the collector would pass is not in the
    found tool's `--help` (it needs a newer version: `--gpu-metrics-devices` is
    `--gpu-metrics-device` in nsys 2022.4, for one)."""
    if not help_text:
        return
    known = help_flags(help_text)
    if not known:  # not a help text (a wrapper or stand-in that prints none): nothing to check
        return
    missing = [f for f in dict.fromkeys(flags) if f not in known]
    if missing:
        raise CollectError(
            f"{tool} ({version or 'version unknown'}) has no {', '.join(missing)}, which "
            f"this collection needs; install a newer {tool} or leave out the option that "
            "asks for it"
        )


# --- nsys ------------------------------------------------------------------------------------


def nsys_report_stem(batch_size: int, node: int | None = None) -> str:
    """File-name stem of the reports of one batch size, up to the rank number."""
    return f"nsys_bs{batch_size}" + ("" if node is None else f"_node{node}") + "_rank"


def nsys_report_base(run_dir: str, batch_size: int, node: int | None = None) -> str:
    return f"{run_dir}/{nsys_report_stem(batch_size, node)}%q{{RANK}}"


# GPU metrics are sampled per physical GPU, by one process at a time: local rank 0 samples every
# GPU of the node, the other ranks none. `--gpu-metrics-devices` takes `all`, `none` or GPU ids
# as `nsys profile --gpu-metrics-devices=help` lists them (public nsys scripts use all four
# forms; `cuda-visible` only exists from nsys 2024.5 on). Those ids are physical GPUs, not CUDA
# ordinals once CUDA_VISIBLE_DEVICES reorders or hides GPUs, so "each rank its own GPU" cannot
# be spelled portably; one sampler per node can. The argv is the same for every rank (torchrun
# starts it), so a POSIX sh reads torchrun's LOCAL_RANK and then execs nsys.
_GM_PICK = 'gm=none; if [ "${LOCAL_RANK:-0}" = 0 ]; then gm=all; fi; exec '
_GM_TAIL = ' "--gpu-metrics-devices=$gm" "$@"'


def nsys_argv(
    run_dir: str,
    batch_size: int,
    inner: Sequence[str],
    *,
    gpu_metrics: bool = False,
    local_ranks: int = 1,
    node: int | None = None,
    device: str = "cuda",
) -> list[str]:
    """`local_ranks`: processes per node sharing the GPUs (torchrun --nproc-per-node); with
    `gpu_metrics` and more than one, only local rank 0 samples. `node`: tag the report names
    with this node rank (multi-node runs). `device` "cpu": `nsys_cpu_argv`."""
    if device == "cpu":
        return nsys_cpu_argv(run_dir, batch_size, inner, node=node)
    argv = [
        "nsys",
        "profile",
        f"--trace={NSYS_TRACE}",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--force-overwrite=true",
        "-o",
        nsys_report_base(run_dir, batch_size, node),
    ]
    if not gpu_metrics:
        return [*argv, *inner]
    # Needs GPU performance-counter permission (root or NVreg_RestrictProfilingToAdminUsers=0).
    if local_ranks <= 1:
        return [*argv, "--gpu-metrics-devices=all", *inner]
    script = _GM_PICK + shlex.join(argv) + _GM_TAIL
    return ["sh", "-c", script, "nsys", *inner]


def nsys_cpu_argv(
    run_dir: str, batch_size: int, inner: Sequence[str], *, node: int | None = None
) -> list[str]:
    """A CPU-only run (no GPU: `--device cpu`): OS runtime calls and NVTX ranges (the workload's
    phases, `--nvtx`) from the start, since no cudaProfilerStart ever comes; no CPU sampling or
    context switches (`--sample=none --cpuctxsw=none`), which would make the report tens of MB
    a second and need perf_event access."""
    return [
        "nsys",
        "profile",
        f"--trace={NSYS_TRACE_CPU}",
        "--sample=none",
        "--cpuctxsw=none",
        "--force-overwrite=true",
        "-o",
        nsys_report_base(run_dir, batch_size, node),
        *inner,
    ]


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


def nsys_export_loop(run_dir: str, batch_size: int, node: int | None = None) -> str:
    """A shell loop exporting every report of one batch size (for a dry run, where the global
    ranks a node gets from the rendezvous are not known in advance)."""
    pattern = shlex.quote(f"{run_dir}/{nsys_report_stem(batch_size, node)}") + "*.nsys-rep"
    cmd = nsys_export_argv("REP")[:-2]
    return f'for rep in {pattern}; do {shlex.join(cmd)} "${{rep%.nsys-rep}}.sqlite" "$rep"; done'


# --- ncu -------------------------------------------------------------------------------------

_METRIC_LINE = re.compile(r"^\s*([a-z0-9]+__[A-Za-z0-9_]+)\b")


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names from `ncu --query-metrics` output (first column of the table)."""
    return {m.group(1) for line in text.splitlines() if (m := _METRIC_LINE.match(line))}


def ncu_fallback(capability: tuple[int, int]) -> tuple[str, ...] | None:
    """`NCU_FALLBACK` base names for a compute capability, or None when the table has none."""
    major, minor = capability
    return NCU_FALLBACK.get((major, minor)) or NCU_FALLBACK.get((major, None))


@dataclass(frozen=True)
class NcuSelection:
    """The `--metrics` list and where it came from; `omitted` names the pipes left out."""

    metrics: tuple[str, ...]
    source: str
    omitted: tuple[str, ...] = ()

    def notes(self) -> list[str]:
        out = [f"ncu metric names from {self.source}"]
        for pipe in self.omitted:
            wanted = ", ".join(NCU_CANDIDATES[pipe])
            out.append(
                f"ncu: {PIPE_LABELS[pipe]} pipe not collected ({self.source} has no {wanted}; "
                "on GA10x/Hopper FP16x2 runs on the FMA pipes); its utilization will be null"
            )
        return out


def _pipe_of(base: str) -> str | None:
    return next((p for p, cands in NCU_CANDIDATES.items() if base in cands), None)


def select_ncu_metrics(
    available: set[str] | None, capability: tuple[int, int] | None = None
) -> NcuSelection:
    """Pipes chosen from `available` (base names from `ncu --query-metrics`), else from
    `NCU_FALLBACK` by compute capability, then the cycle and duration metrics.

    CollectError when a required pipe (FMA, Tensor, SFU) has no name, or when there is neither
    a query result nor a fallback entry for `capability`.
    """
    if available:
        source = "ncu --query-metrics"
        bases = []
        for pipe, cands in NCU_CANDIDATES.items():
            hit = next((c for c in cands if c in available), None)
            if hit is None and pipe in REQUIRED_PIPES:
                raise CollectError(
                    f"ncu --query-metrics lists none of {', '.join(cands)} for the "
                    f"{PIPE_LABELS[pipe]} pipe; pass --ncu-metrics"
                )
            if hit is not None:
                bases.append(hit)
    else:
        if capability is None:
            raise CollectError("cannot choose ncu metrics: no --query-metrics output and no GPU")
        cc = f"{capability[0]}.{capability[1]}"
        table = ncu_fallback(capability)
        if table is None:
            raise CollectError(
                f"no fallback ncu metric names for compute capability {cc} and "
                "`ncu --query-metrics` gave none; pass --ncu-metrics"
            )
        source = f"the fallback table for compute capability {cc}"
        bases = list(table)
    chosen = {_pipe_of(b) for b in bases}
    # Only FP16 may be missing among the four units the issue names (gmma is Hopper-only).
    omitted = tuple(p for p in ("fp16",) if p not in chosen)
    metrics = tuple(b + METRIC_SUFFIX for b in bases) + NCU_EXTRA_METRICS
    return NcuSelection(metrics, source, omitted)


def choose_ncu_metrics(
    available: set[str] | None, capability: tuple[int, int] | None = None
) -> list[str]:
    """Full metric names for `--metrics` (`select_ncu_metrics` without the provenance)."""
    return list(select_ncu_metrics(available, capability).metrics)


def ncu_query_error() -> str | None:
    """ncu's own reason when `ncu --query-metrics` fails (`==ERROR== Driver could not be
    loaded.` without a GPU driver), else None."""
    try:
        cp = subprocess.run(
            ["ncu", "--query-metrics"], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    errs = [ln.strip() for ln in (cp.stdout + cp.stderr).splitlines() if "==ERROR==" in ln]
    if cp.returncode == 0 and not errs:
        return None
    return "; ".join(errs) if errs else f"exit status {cp.returncode}"


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


def ncu_log_name(batch_size: int, node: int | None = None) -> str:
    """`batch_<bs>.csv`, or `batch_<bs>_node<N>.csv` on a multi-node run; coreutil reads the
    batch size from `batch_<n>` in the name."""
    return f"batch_{batch_size}" + ("" if node is None else f"_node{node}") + ".csv"


def ncu_argv(
    run_dir: str,
    batch_size: int,
    inner: Sequence[str],
    metrics: Sequence[str],
    *,
    node: int | None = None,
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
        f"{run_dir}/{ncu_log_name(batch_size, node)}",
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
    "NCU_METRICS_AT_RUN_TIME",
    "NcuSelection",
    "require_tool",
    "check_nvprof_supported",
    "tool_version",
    "nsys_argv",
    "nsys_export_argv",
    "nsys_export_loop",
    "nsys_report_base",
    "nsys_report_stem",
    "parse_query_metrics",
    "ncu_fallback",
    "select_ncu_metrics",
    "choose_ncu_metrics",
    "query_ncu_metrics",
    "ncu_query_error",
    "help_flags",
    "argv_flags",
    "tool_help",
    "check_flags",
    "nsys_cpu_argv",
    "ncu_log_name",
    "ncu_argv",
    "nvprof_argv",
]
