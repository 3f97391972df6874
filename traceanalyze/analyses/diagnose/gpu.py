"""Rules on the GPU's own work: which kernels bound a GPU-bound step (`gpu_bound`), FP32
GEMMs and convolutions on a GPU with Tensor Cores (`no_tensor_cores`) and layout transposes
(`layout_transposes`). Thresholds and their reasons: docs/diagnose.md."""

from __future__ import annotations

from typing import Any

import polars as pl

from ...results import Finding
from .model import Inputs, Outcome, Skip, family, family_regex, ms, top_events

# GPU share of the iterations' own path (carry left out) from which the kernels are the bound.
GPU_SHARE = 0.5
TOP_GROUPS = 3
# FP32 SIMT GEMM/convolution kernels of cuBLAS/cuDNN (`volta_sgemm_*`, `*_scudnn_*`, cuDNN's
# `dgrad_engine<float…>`/`wgrad_alg0_engine<float…>`). Tensor Core kernels are named `s884`,
# `h1688`, `tensorop`, `xmma`, `hmma`…, and none of those contains these words.
FP32_MATH = r"sgemm|scudnn|(dgrad|wgrad)[A-Za-z0-9_]*engine<float"
# Assumed speed-up of those kernels on Tensor Cores (AMP FP16/BF16, or TF32): 2x, far under the
# peak ratios (V100 FP32 15.7 vs 125 TFLOPS FP16 Tensor; A100 19.5 vs 156 TF32) because
# convolutions and GEMMs are rarely at peak; stated in the finding as an assumption.
TENSOR_FACTOR = 0.5
# cuDNN's layout conversions around NCHW tensors (`nchwToNhwcKernel`, `nhwcToNchwKernel`).
TRANSPOSE = r"(?i)nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|FoldedNhwc"


def _kernel_ms(inp: Inputs, regex: str) -> tuple[pl.DataFrame, float]:
    k = inp.kernels.filter(pl.col("name").str.contains(regex).fill_null(False))
    return k, float((k["end_ns"] - k["start_ns"]).sum() or 0) / 1e6


def _groups(inp: Inputs) -> list[dict[str, Any]]:
    k = inp.kernels.select("name", d=pl.col("end_ns") - pl.col("start_ns"))
    names = k["name"].unique().drop_nulls().to_list()
    fam = pl.DataFrame({"name": names, "family": [family(n) for n in names]})
    gpu_ns = float(k["d"].sum() or 1)
    top = (
        k.join(fam, on="name")
        .group_by("family")
        .agg(total_ns=pl.col("d").sum(), count=pl.len())
        .sort("total_ns", "family", descending=[True, False])
        .head(TOP_GROUPS)
    )
    ev = inp.path_events.filter(pl.col("kind") == "kernel")
    out = []
    for r in top.iter_rows(named=True):
        rx = family_regex(r["family"])
        on = ev.filter(pl.col("name").str.contains(rx))
        by = on.group_by("launched_by").agg(pl.col("path_ms").sum()).sort("path_ms")
        out.append(
            {
                "name": r["family"],
                "count": r["count"],
                "total_ms": ms(r["total_ns"] / 1e6),
                "gpu_time_pct": ms(100 * r["total_ns"] / gpu_ns, 1),
                "on_path_ms_per_iteration": ms(float(on["path_ms"].sum()) / inp.iteration_count),
                "launched_by": by["launched_by"][-1] if by.height else None,
                "what_if": f"kernel:{rx}=0.5",
            }
        )
    return out


def gpu_bound(inp: Inputs) -> Outcome:
    """The kernels bound the step: the top kernel families, each with its what-if (×0.5)."""
    if inp.kernels.is_empty() or inp.path.is_empty():
        return Skip("no kernels")
    p = inp.path
    own = float((p["path_ms"] - p["carry_ms"]).sum())
    gpu = float((p["gpu_compute_ms"] + p["gpu_memory_ms"]).sum())
    if own <= 0 or gpu / own < GPU_SHARE:
        return []
    groups = _groups(inp)
    top = groups[0]
    return [
        Finding(
            rule="gpu_bound",
            severity="info",
            title=f"GPU-bound: {100 * gpu / own:.0f} % of the iterations' own path is GPU work; "
            f"the top kernel family {top['name']} is {top['gpu_time_pct']} % of GPU time "
            "(saving shown: that family twice as fast)",
            advice="Speed up the top kernels: mixed precision (torch.autocast) or TF32 "
            "(torch.backends.cuda.matmul.allow_tf32 = True), channels_last for convolutions, "
            "torch.compile to fuse elementwise kernels, cudnn.benchmark = True.",
            evidence={"gpu_share_pct": ms(100 * gpu / own, 1), "groups": groups},
            where=inp.where(),
            what_if=str(top["what_if"]),
            problem_ms=ms(float(top["on_path_ms_per_iteration"] or 0)),
        )
    ]


def _tensor_core_devices(inp: Inputs) -> list[str] | None:
    cc = inp.devices["compute_capability"].drop_nulls().to_list() if inp.devices.height else []
    if not cc:
        return None
    return sorted({str(c) for c in cc if float(str(c).split(".")[0]) >= 7})


def no_tensor_cores(inp: Inputs) -> Outcome:
    """FP32 GEMM/convolution kernels on a GPU with Tensor Cores (compute capability >= 7.0)."""
    if inp.kernels.is_empty():
        return Skip("no kernels")
    tc = _tensor_core_devices(inp)
    if tc is None:
        return Skip("the input does not give the GPU's compute capability")
    if not tc:
        return []
    k, total = _kernel_ms(inp, FP32_MATH)
    if k.is_empty():
        return []
    gpu_ms = float((inp.kernels["end_ns"] - inp.kernels["start_ns"]).sum()) / 1e6
    share = 100 * total / (gpu_ms or 1)
    return [
        Finding(
            rule="no_tensor_cores",
            severity="medium",
            title=f"{k.height} FP32 GEMM/convolution kernels ({share:.0f} % of GPU time) on a "
            f"GPU with Tensor Cores (compute capability {', '.join(tc)}); saving assumes them "
            "2x faster",
            advice="Run matmuls and convolutions on Tensor Cores: torch.autocast('cuda', "
            "dtype=torch.bfloat16 or float16) with GradScaler for FP16, or TF32 on Ampere+ "
            "(torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = "
            "True).",
            evidence={
                "count": k.height,
                "total_ms": ms(total),
                "gpu_time_pct": ms(share, 1),
                "assumed_factor": TENSOR_FACTOR,
                "assumed": True,
                "top": top_events(
                    k.with_columns(duration_ns=pl.col("end_ns") - pl.col("start_ns"))
                ),
            },
            where=inp.where(k),
            what_if=f"kernel:{FP32_MATH}={TENSOR_FACTOR}",
            problem_ms=ms(inp.per_iteration(total * 1e6)),
        )
    ]


def layout_transposes(inp: Inputs) -> Outcome:
    """NCHW <-> NHWC conversion kernels: the model's layout is not the kernels' layout."""
    if inp.kernels.is_empty():
        return Skip("no kernels")
    k, total = _kernel_ms(inp, TRANSPOSE)
    if k.is_empty():
        return []
    return [
        Finding(
            rule="layout_transposes",
            severity="low",
            title=f"{k.height} NCHW/NHWC layout transposes ({total:.2f} ms): the convolutions "
            "convert their tensors' layout",
            advice="Keep tensors in channels_last: model.to(memory_format=torch.channels_last) "
            "and input.to(memory_format=torch.channels_last) (with AMP on Tensor Cores).",
            evidence={
                "count": k.height,
                "total_ms": ms(total),
                "top": top_events(
                    k.with_columns(duration_ns=pl.col("end_ns") - pl.col("start_ns"))
                ),
            },
            where=inp.where(k),
            what_if=f"kernel:{TRANSPOSE}=0",
            problem_ms=ms(inp.per_iteration(total * 1e6)),
        )
    ]


__all__ = ["gpu_bound", "layout_transposes", "no_tensor_cores"]
