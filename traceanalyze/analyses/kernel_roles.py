"""Kernel families by role, so that runs on different vendors' GPUs can be compared: a Tensile
GEMM on an MI300X (`Cijk_Ailk_Bljk_…`) and a cuBLAS one on an H100 (`sm90_xmma_gemm_…`,
`nvjet_…`, cutlass) do the same job under names that share nothing.

**A heuristic**: the role is the first rule of `ROLE_RULES` whose pattern the kernel name
matches (case insensitive), else `other`. The rules come from the libraries' naming:
Tensile/hipBLASLt (`Cijk_`, `Custom_Cijk`), cuBLAS (`gemm`, `gemv`, `nvjet`, `xmma_gemm`),
CUTLASS and Composable Kernel; MIOpen and cuDNN convolutions (`conv`, `igemm_fwd/bwd/wrw`,
`fprop`/`dgrad`/`wgrad`, `scudnn`) before GEMMs (an implicit-GEMM convolution is a
convolution); NCCL and RCCL collectives (both name kernels `nccl…`); attention
(FlashAttention, fMHA, paged attention); normalization; softmax; pooling; optimizer steps
(`multi_tensor_apply`); copies and fills (the runtimes' blit kernels `__amd_rocclr_*`,
PyTorch's copies and `cat`); reductions; element-wise kernels. A comparison by role says which
*kind* of work got faster or slower; a role's total can mix kernels that are not one-to-one
counterparts, so read it with its counts.
"""

from __future__ import annotations

import polars as pl

# (role, pattern): the first match wins, so the more specific rules come first.
ROLE_RULES: tuple[tuple[str, str], ...] = (
    ("collective", r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|cross_device"),
    ("attention", r"flash|fmha|attn|attention|mha_(fwd|bwd)"),
    # `conv` but not `convert`; scudnn kernels are cuDNN's implicit-GEMM convolutions
    ("conv", r"conv[^e]|conv$|igemm_(fwd|bwd|wrw)|fprop|dgrad|wgrad|scudnn|winograd"),
    ("gemm", r"^custom_cijk|^cijk_|gemm|gemv|nvjet|cutlass|matmul|wvsplitk|hipblaslt|_mfma_"),
    ("norm", r"norm|bn_(fw|bw)|gammabeta"),
    ("softmax", r"softmax"),
    ("pool", r"pool"),
    ("optimizer", r"multi_tensor_apply|adam|sgd_|lamb_"),
    ("copy", r"__amd_rocclr_|copybuffer|fillbuffer|memcpy|memset|copy|catarray|fill_kernel"),
    ("reduce", r"reduce|reduction"),
    ("elementwise", r"elementwise|vectorized|pointwise|triton_poi|unrolled|dropout"),
)


def kernel_role(name: pl.Expr) -> pl.Expr:
    """The role of each kernel name (`ROLE_RULES`), `other` when no rule matches."""
    low = name.str.to_lowercase()
    expr: pl.Expr = pl.lit("other", dtype=pl.String)
    for role, pattern in reversed(ROLE_RULES):
        expr = pl.when(low.str.contains(pattern)).then(pl.lit(role)).otherwise(expr)
    return pl.when(name.is_null()).then(None).otherwise(expr)


def by_role(kernels: pl.LazyFrame) -> pl.LazyFrame:
    """Kernels with `name` replaced by their role and the launch geometry dropped (set null), so
    that `compare.compare_kernels` and `compare_overview` match roles instead of names."""
    geometry = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    return kernels.with_columns(
        kernel_role(pl.col("name")).alias("name"),
        *[pl.lit(None, dtype=pl.Int64).alias(c) for c in geometry],
    )
