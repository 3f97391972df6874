"""Rules on copies: synchronous copy calls (`sync_memcpy`) and copies from or to pageable host
memory (`pageable_memcpy`). Memory kinds are the readers': Nsight Systems' `srcKind`/`dstKind`
through its `ENUM_CUDA_MEM_KIND` table (0 Pageable, 1 Pinned, … — the documented numbering in
exports without the table), CUPTI's for nvprof (1 Pageable, 2 Pinned), the PyTorch profiler's
`Memcpy HtoD (Pageable -> Device)` names."""

from __future__ import annotations

import polars as pl

from ...results import Finding
from .model import Inputs, Outcome, Skip, ms, top_events, with_duration

# A copy or memset call without `Async` returns when the copy is done (CUDA runtime API,
# "API synchronization behavior"): the host cannot queue work behind it.
SYNC_COPY_CALL = r"^cu(da)?Mem(cpy|set)"


def sync_memcpy(inp: Inputs) -> Outcome:
    """Synchronous `cudaMemcpy*`/`cuMemcpy*` calls (no `Async`)."""
    if inp.api_calls.is_empty():
        return Skip("no runtime API calls (the trace did not record the CUDA runtime)")
    c = with_duration(
        inp.api_calls.filter(
            pl.col("name").str.contains(SYNC_COPY_CALL) & ~pl.col("name").str.contains("Async")
        )
    )
    if c.is_empty():
        return []
    per_it = inp.per_iteration(float(c["duration_ns"].sum()))
    share = per_it / (inp.mean_path_ms or 1)
    return [
        Finding(
            rule="sync_memcpy",
            severity="medium" if share >= 0.05 else "low",
            title=f"{c.height} synchronous copy calls: {per_it:.2f} ms per iteration of host "
            f"time blocked ({100 * share:.1f} % of the path's length)",
            advice="Copy asynchronously from pinned memory: tensor.to(device, "
            "non_blocking=True) with DataLoader(pin_memory=True); cudaMemcpyAsync on a "
            "stream instead of cudaMemcpy.",
            evidence={
                "count": c.height,
                "total_ms": ms(float(c["duration_ns"].sum()) / 1e6),
                "by_call": c.group_by("name")
                .len("count")
                .sort("count", descending=True)
                .to_dicts(),
                "top": top_events(c),
            },
            where=inp.where(c),
            problem_ms=ms(per_it),
        )
    ]


def pageable_memcpy(inp: Inputs) -> Outcome:
    """Copies with a pageable side: staged through a driver buffer, never overlapped."""
    m = inp.memcpy.filter(pl.col("kind") != "memset")
    if m.is_empty():
        return Skip("no copies")
    if m["src_kind"].null_count() == m.height and m["dst_kind"].null_count() == m.height:
        return Skip("the input names no memory kinds of its copies")
    pageable = with_duration(
        m.filter(
            (pl.col("src_kind").str.to_lowercase() == "pageable").fill_null(False)
            | (pl.col("dst_kind").str.to_lowercase() == "pageable").fill_null(False)
        )
    )
    if pageable.is_empty():
        return []
    total = float(pageable["duration_ns"].sum())
    per_it = inp.per_iteration(total)
    by_kind = (
        pageable.group_by("kind", "src_kind", "dst_kind")
        .agg(
            count=pl.len(),
            total_ms=pl.col("duration_ns").sum() / 1e6,
            bytes=pl.col("size_bytes").sum(),
        )
        .sort("count", descending=True)
    )
    size = int(pageable["size_bytes"].sum() or 0)
    return [
        Finding(
            rule="pageable_memcpy",
            severity="medium" if per_it >= 0.02 * (inp.mean_path_ms or 1) else "low",
            title=f"{pageable.height} copies with a pageable host side ({size / 1e6:.1f} MB, "
            f"{total / 1e6:.2f} ms): staged by the driver, they cannot overlap compute",
            advice="Pin host buffers: DataLoader(pin_memory=True) or tensor.pin_memory(), then "
            "tensor.to(device, non_blocking=True); cudaHostAlloc/cudaHostRegister in C++.",
            evidence={
                "count": pageable.height,
                "copy_count": m.height,
                "total_ms": ms(total / 1e6),
                "bytes": size,
                "by_kind": by_kind.to_dicts(),
                "top": top_events(pageable.with_columns(name=pl.col("kind")), name="name"),
            },
            where=inp.where(pageable),
            problem_ms=ms(per_it),
        )
    ]


__all__ = ["pageable_memcpy", "sync_memcpy"]
