"""Kernel roles (a name heuristic) and `compare --by-role` across an AMD and an NVIDIA run."""

from __future__ import annotations

import polars as pl
import pytest

import traceanalyze as ta
from traceanalyze.analyses.kernel_roles import by_role, kernel_role

from .conftest import shared, shared_set

# real names from the ROCm and CUDA samples, with the role a person gives them
NAMES = {
    "Cijk_Ailk_Bljk_SB_MT128x64x16_MI32x32x2x1_SN_1LDSB1": "gemm",
    "Custom_Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64": "gemm",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1": "gemm",
    "nvjet_tst_192x192_64x4_1x2_h_bz_coopB_TNT": "gemm",
    "volta_sgemm_128x64_nn": "gemm",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4>(Params)": (
        "gemm"
    ),
    "igemm_fwd_gtcx3_nhwc_fp16_bx0_ex1_bt256x128x32": "conv",
    "miopenSp3AsmConv_v21_1_3_gfx9_fp32_f2x3_stride1": "conv",
    "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1": "conv",
    "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int)": "conv",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)": "collective",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": "collective",
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>(Flash_fwd_params)": (
        "attention"
    ),
    "fmha_bwd_hd128_bf16_causal_a16_pssk": "attention",
    "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float)": "norm",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>(int)": "norm",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)": "softmax",
    "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int)": "pool",
    "void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>": (
        "optimizer"
    ),
    "__amd_rocclr_copyBuffer": "copy",
    "__amd_rocclr_fillBufferAligned": "copy",
    "void at::native::elementwise_kernel<128, 2, copy_kernel_impl(TensorIteratorBase&)>": "copy",
    "void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<float, float>>>": "reduce",
    "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>(int)": (
        "elementwise"
    ),
    "void at::native::unrolled_elementwise_kernel<BFloat16, float_to_bf16_convert>": "elementwise",
    "void rocprim::detail::partition_kernel<select_method 0>": "other",
}


def test_roles_of_real_names() -> None:
    got = pl.DataFrame({"name": list(NAMES)}).select(kernel_role(pl.col("name")))
    assert dict(zip(NAMES, got.to_series().to_list(), strict=True)) == NAMES


def test_by_role_drops_geometry_and_keeps_nulls() -> None:
    k = pl.DataFrame({"name": ["volta_sgemm_128x64_nn", None], "grid_x": [4, 5]})
    out = by_role(k.lazy()).collect()
    assert out["name"].to_list() == ["gemm", None]
    assert out["grid_x"].to_list() == [None, None]


@pytest.mark.filterwarnings("ignore:.*rocpd_monitor")
def test_compare_amd_against_nvidia_by_role() -> None:
    amd = shared_set("rocm/rpd/rocmprofiledata_matmul_result.rpd")
    nv = shared("kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz")
    with pytest.warns(UserWarning):
        res = ta.open(amd).compare(ta.open(nv), by_role=True)
    k = res.kernels
    gemm = k.filter(pl.col("name") == "gemm").row(0, named=True)
    # A: the one Tensile GEMM of the rpd sample, from SQL-independent reading of its name
    a = ta.read(amd).kernels.filter(pl.col("name").str.starts_with("Cijk_"))
    assert gemm["count_a"] == a.height == 1
    assert gemm["total_ms_a"] == pytest.approx(a["duration_ns"].sum() / 1e6)
    b = ta.read(nv).kernels.filter(pl.col("name").str.to_lowercase().str.contains("gemm"))
    b = b.filter(~pl.col("name").str.to_lowercase().str.contains("scudnn|conv|dgrad|wgrad"))
    assert gemm["count_b"] == b.height
    assert gemm["matched"]
    by_name = ta.open(amd).compare(ta.open(nv))
    assert by_name.kernels["matched"].sum() == 0  # by name, nothing of the two vendors matches
