"""The profiler-specific part of `collect.run.plan`: ncu's metric names, nvprof's capability
check, and the flags every command line passes checked against the found tool's `--help`.

With `--device cpu` the external profilers are not refused: nsys traces the CPU side (OS runtime
calls, NVTX); nvprof and ncu run and say in their own words that there is nothing for them
(nvprof: "CUDA device error, GPU profiling skipped"; ncu: "No kernels were profiled"), and the
run fails with that reason (`_run_steps`), its manifest saying so.
"""

from __future__ import annotations

import warnings

from ..errors import CollectError
from . import profilers as P
from ._commands import CollectConfig, node_tag

CPU_NOTE = (
    "--device cpu: {tool} profiles CUDA work; with no GPU it has nothing to record, and the run "
    "fails with {tool}'s own reason"
)


UNKNOWN_CC = "compute capability unknown (no NVML, nvidia-smi or CUDA device via torch)"


def plan_ncu_metrics(
    cfg: CollectConfig,
    caps: list[tuple[int, int]],
    tool_path: str | None,
    dry_run: bool,
    notes: list[str],
    device: str = "cuda",
) -> list[str]:
    if device == "cpu":
        notes.append(CPU_NOTE.format(tool="ncu"))
    if cfg.ncu_metrics:
        notes.append("ncu metric names from --ncu-metrics")
        return list(cfg.ncu_metrics)
    # The live query is the primary source; a dry run does not run ncu (no GPU is needed).
    available = P.query_ncu_metrics() if tool_path else None
    if available is None and device == "cpu" and not dry_run:
        return _cpu_ncu_metrics(notes)
    if available is not None:
        sel = P.select_ncu_metrics(available)
    elif caps and P.ncu_fallback(caps[0]) is not None:
        sel = P.select_ncu_metrics(None, caps[0])
        if dry_run:
            notes.append(
                "dry run: ncu --query-metrics not run; the real run asks it first and uses "
                "these fallback names only if it fails"
            )
        else:
            warnings.warn(
                f"ncu --query-metrics failed; using the fallback metric names for compute "
                f"capability {caps[0][0]}.{caps[0][1]}",
                stacklevel=3,
            )
    elif dry_run:
        why = (
            UNKNOWN_CC
            if not caps
            else f"no fallback names for compute capability {caps[0][0]}.{caps[0][1]}"
        )
        notes.append(
            f"ncu metric names not known in advance: {why}; the real run takes them from "
            "ncu --query-metrics; pass --ncu-metrics to fix them"
        )
        return [P.NCU_METRICS_AT_RUN_TIME]
    elif not caps:
        raise CollectError(
            "cannot choose ncu metrics: `ncu --query-metrics` failed and the GPU's compute "
            "capability is unknown; pass --ncu-metrics"
        )
    else:
        sel = P.select_ncu_metrics(None, caps[0])  # raises: no fallback entry for this chip
    notes.extend(sel.notes())
    return list(sel.metrics)


def plan_nvprof(
    caps: list[tuple[int, int]], dry_run: bool, notes: list[str], device: str = "cuda"
) -> None:
    """nvprof refuses compute capability >= 8.0: checked when the capabilities are known, noted
    in a dry run, warned about (and noted) in a real run that cannot tell. With `--device cpu`
    there is no GPU to check: nvprof runs and says what it can do (`NOTHING_PROFILED`)."""
    if device == "cpu":
        notes.append(CPU_NOTE.format(tool="nvprof"))
        return
    if caps:
        P.check_nvprof_supported(caps)
    elif dry_run:
        notes.append(f"{UNKNOWN_CC}: the nvprof refusal on >= 8.0 was not checked")
    else:
        msg = (
            f"{UNKNOWN_CC}: cannot check that nvprof supports these GPUs; nvprof cannot "
            "profile compute capability >= 8.0 (A100, H100, …): use nsys or ncu there"
        )
        warnings.warn(msg, stacklevel=3)
        notes.append(msg)


def _cpu_ncu_metrics(notes: list[str]) -> list[str]:
    """`--device cpu` and `ncu --query-metrics` failed (no GPU, no driver): ncu still runs, with
    the architecture-independent metrics only, and the run fails with its own reason."""
    reason = P.ncu_query_error() or "no output"
    notes.append(f"ncu --query-metrics failed ({reason}): only the duration metrics are asked")
    return list(P.NCU_EXTRA_METRICS)


def check_profiler_flags(
    cfg: CollectConfig, device: str, tool_path: str, ncu_metrics: list[str] | None
) -> None:
    """Every flag the collector passes to the profiler exists in the found version's `--help`
    (`profilers.check_flags`); nsys's export flags too."""
    rd, bs, node, inner = str(cfg.out), cfg.batch_sizes[0], node_tag(cfg), ["CMD"]
    version = P.tool_version(tool_path)
    if cfg.profiler == "nsys":
        argv = P.nsys_argv(rd, bs, inner, gpu_metrics=cfg.gpu_metrics, node=node, device=device)
        P.check_flags("nsys", P.argv_flags(argv[2:-1]), P.tool_help(tool_path, "profile"), version)
        export = P.nsys_export_argv("r.nsys-rep")[2:-1]
        P.check_flags("nsys", P.argv_flags(export), P.tool_help(tool_path, "export"), version)
    elif cfg.profiler == "ncu":
        argv = P.ncu_argv(rd, bs, inner, ncu_metrics or ["m"], node=node)
        P.check_flags("ncu", P.argv_flags(argv[1:-1]), P.tool_help(tool_path), version)
    elif cfg.profiler == "nvprof":
        argv = P.nvprof_argv(rd, inner)
        P.check_flags("nvprof", P.argv_flags(argv[1:-1]), P.tool_help(tool_path), version)


__all__ = ["CPU_NOTE", "UNKNOWN_CC", "check_profiler_flags", "plan_ncu_metrics", "plan_nvprof"]
