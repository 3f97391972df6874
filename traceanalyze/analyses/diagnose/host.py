"""Rules on the host side: the input pipeline (`data_loader`), the host as the bound
(`host_bound`), blocking synchronizations (`sync`) and launch-bound small kernels
(`small_kernels`). Thresholds and their reasons: docs/diagnose.md."""

from __future__ import annotations

import re

import polars as pl

from ...results import Finding
from ...schema import GRAPH_LAUNCH_API
from .model import Inputs, Outcome, Skip, ms, top_events, with_duration

# PyTorch profiler names the loader's step `enumerate(DataLoader)#_SingleProcessDataLoaderIter
# .__next__` (or _MultiProcessingDataLoaderIter); NVTX ranges of the same name count too.
DATA_LOADER = r"DataLoader"
# Host share of the iteration's own path (carry left out) above which the host is a finding.
HOST_SHARE = 0.20
# Host-side blocking calls (`idle.SYNC_CALL`'s synchronizations) and the operators that hide one
# (`Tensor.item()` reads a scalar back: a cudaMemcpyAsync plus a stream synchronization).
SYNC_CALL = r"Synchronize"
SYNC_OPS = r"^aten::(item|_local_scalar_dense)$"
# A kernel this short is dominated by its launch (~5 µs of launch call per kernel on current
# CUDA): many of them make the step launch-bound.
SMALL_KERNEL_NS = 10_000
SMALL_SHARE = 0.5
SMALL_PER_ITERATION = 100


def data_loader(inp: Inputs) -> Outcome:
    """Host time in the DataLoader's `__next__` (the critical path decides what it costs)."""
    if inp.host.is_empty():
        return Skip("no host operators or NVTX ranges (a PyTorch profiler trace names them)")
    dl = with_duration(
        inp.host.filter(pl.col("name").str.contains(DATA_LOADER)).with_columns(
            duration_ns=pl.lit(None, dtype=pl.Int64)
        )
    )
    if dl.is_empty():
        return []
    total = float(dl["duration_ns"].sum())
    per_it = inp.per_iteration(total)
    title = (
        f"DataLoader: {per_it:.1f} ms of host time per iteration in {dl.height} "
        f"`__next__` calls ({100 * per_it / (inp.mean_path_ms or 1):.0f} % of the path's length)"
    )
    return [
        Finding(
            rule="data_loader",
            severity="medium",
            title=title,
            advice="Load batches in worker processes: DataLoader(num_workers=N, "
            "pin_memory=True, persistent_workers=True, prefetch_factor=2); move decoding and "
            "augmentation off the training process (or onto the GPU, e.g. DALI).",
            evidence={
                "count": dl.height,
                "total_ms": ms(total / 1e6),
                "top": top_events(dl),
            },
            where=inp.where(dl),
            what_if=f"op:{DATA_LOADER}=0",
            problem_ms=ms(per_it),
        )
    ]


# At most this many outermost range names in the host-bound what-if's regex.
MAX_OUTER_NAMES = 256


def outer_regex(h: pl.DataFrame) -> str | None:
    """A regex matching exactly the names of the outermost host ranges (those inside no other
    range of their thread), digit runs generalized (`ProfilerStep#101` -> `ProfilerStep#\\d+`).
    An `op:` what-if applies once however deeply its matches nest, so `op:.=0.5` would give the
    same replay; the outermost names make the report's what-if say what it halves (the steps,
    the loader's ranges…). None when there are no ranges or too many names."""
    if h.is_empty():
        return None
    keys = [c for c in ("source_id", "process_id", "thread_id") if c in h.columns]
    o = h.sort([*keys, "start_ns", "end_ns"], descending=[False] * len(keys) + [False, True])
    prior_end = pl.col("end_ns").cum_max().shift(1).over(keys)
    outer = o.filter(prior_end.is_null() | (pl.col("start_ns") >= prior_end))
    names = sorted({re.sub(r"\d+", r"\\d+", re.escape(n)) for n in outer["name"].drop_nulls()})
    if not names or len(names) > MAX_OUTER_NAMES:
        return None
    return "^(" + "|".join(names) + ")$"


def _shares(inp: Inputs) -> tuple[float, float]:
    p = inp.path
    own = float((p["path_ms"] - p["carry_ms"]).sum())
    host = float((p["host_ms"] + p["launch_ms"]).sum())
    return host, own


def host_bound(inp: Inputs) -> Outcome:
    """The host's share of the iterations' own paths: the GPU waits for the host."""
    if inp.path.is_empty():
        return Skip("no critical path (no timed events)")
    host, own = _shares(inp)
    if own <= 0 or host / own < HOST_SHARE:
        return []
    p = inp.path
    short = 0
    if not inp.kernels.is_empty() and not inp.api_calls.is_empty():
        calls = inp.api_calls.filter(pl.col("name").str.contains("Launch")).select(
            "source_id", "correlation_id", call_ns=pl.col("end_ns") - pl.col("start_ns")
        )
        k = inp.kernels.join(calls, on=["source_id", "correlation_id"], how="inner")
        short = k.filter((pl.col("end_ns") - pl.col("start_ns")) < pl.col("call_ns")).height
    per_it = host / inp.iteration_count
    graphs = graph_launch_count(inp)
    outer = outer_regex(inp.host)
    # A trace without GPU work (a CPU run, or one recorded without CUDA activities) is host work
    # by construction: no launch overhead to cut, so no GPU-side advice (CUDA graphs).
    gpu_cols = [c for c in ("gpu_compute_ms", "gpu_comm_ms", "gpu_memory_ms") if c in p.columns]
    on_path = float(sum(p[c].sum() for c in gpu_cols))
    gpu_work = on_path > 0 or not (inp.kernels.is_empty() and inp.memcpy.is_empty())
    title = (
        f"host-bound: {100 * host / own:.0f} % of the iterations' own path is host work and "
        f"launches ({per_it:.1f} ms per iteration); {short} kernels are shorter than their "
        "launch call"
        if gpu_work
        else f"host-bound: no GPU work in the trace (a CPU run, or CUDA activities not recorded): "
        f"the iterations are host work ({per_it:.1f} ms per iteration)"
    )
    return [
        Finding(
            rule="host_bound",
            severity="high",
            title=title,
            advice=_graph_advice(graphs)
            if gpu_work
            else "Run the step on a GPU, or record its CUDA activities (the PyTorch profiler's "
            "ProfilerActivity.CUDA, nsys -t cuda) if it did run on one; on the CPU, the "
            "operators that take the time are in `traceanalyze ops`.",
            evidence={
                "host_ms": ms(host),
                "own_path_ms": ms(own),
                "host_share_pct": ms(100 * host / own, 1),
                "kernels_shorter_than_launch_count": short,
                "graph_launch_count": graphs,
                "assumed": "host time inside the outermost operators or ranges halved",
            },
            where=inp.where(),
            what_if=f"op:{outer}=0.5" if outer else None,
            problem_ms=ms(per_it),
        )
    ]


def graph_launch_count(inp: Inputs) -> int:
    """The graph launch calls (`cudaGraphLaunch`, `cuGraphLaunch`, `hipGraphLaunch`, …) in the
    input: a step that already replays CUDA/HIP graphs."""
    if inp.api_calls.is_empty():
        return 0
    return int(inp.api_calls["name"].str.contains(GRAPH_LAUNCH_API).fill_null(False).sum())


def _graph_advice(graphs: int) -> str:
    """host_bound's advice: CUDA graphs first, unless the step already replays some."""
    rest = (
        "raise the batch size, fuse small operators (torch.compile), keep Python out of the loop."
    )
    if graphs:
        return (
            f"The step already replays CUDA graphs ({graphs} graph launches): capture more of it "
            "(the host work on the path runs outside them: torch.cuda.make_graphed_callables on "
            "the parts left out, torch.compile(mode='reduce-overhead') on the whole step), " + rest
        )
    return (
        "Cut host work per GPU step: capture the step in a CUDA graph (torch.cuda.graphs / "
        "torch.compile(mode='reduce-overhead')), " + rest
    )


def sync(inp: Inputs) -> Outcome:
    """Blocking synchronizations: `*Synchronize` calls and `.item()`-style scalar reads."""
    if inp.api_calls.is_empty() and inp.host.is_empty():
        return Skip("no runtime API calls or host operators")
    calls = with_duration(inp.api_calls.filter(pl.col("name").str.contains(SYNC_CALL)))
    items = inp.host.filter(pl.col("name").str.contains(SYNC_OPS)).with_columns(
        duration_ns=pl.col("end_ns") - pl.col("start_ns")
    )
    if calls.is_empty() and items.is_empty():
        return []
    on_path = float(inp.path["sync_ms"].sum()) / inp.iteration_count
    by_name = (
        calls.group_by("name")
        .agg(count=pl.len(), total_ms=pl.col("duration_ns").sum() / 1e6)
        .sort("total_ms", descending=True)
    )
    item_ms = inp.per_iteration(float(items["duration_ns"].sum() or 0))
    call_ms = inp.per_iteration(float(calls["duration_ns"].sum() or 0))
    n = calls.height + items.height
    return [
        Finding(
            rule="sync",
            severity="medium" if on_path >= 0.05 * (inp.mean_path_ms or 1) else "low",
            title=f"{n} blocking synchronization{'s' * (n != 1)} ({calls.height} sync calls, "
            f"{items.height} scalar reads): {call_ms:.1f} ms per iteration in sync calls, "
            f"{on_path:.2f} ms of waiting on the critical path",
            advice="Drop torch.cuda.synchronize() and .item()/.cpu()/print of GPU tensors "
            "from the step (log every N steps); copy with non_blocking=True; use CUDA events "
            "(torch.cuda.Event) to time.",
            evidence={
                "count": n,
                "calls": by_name.to_dicts(),
                "scalar_reads_count": items.height,
                "sync_on_path_ms_per_iteration": ms(on_path),
                "top": top_events(calls) + top_events(items),
            },
            where=inp.where(pl.concat([calls.select("source_id"), items.select("source_id")])),
            what_if=f"op:{SYNC_OPS}=0" if not items.is_empty() else None,
            problem_ms=ms(item_ms + on_path),
        )
    ]


def small_kernels(inp: Inputs) -> Outcome:
    """Many kernels shorter than a launch: the step pays one launch each (kernels of graph
    replays, launched together, are left out)."""
    if inp.kernels.is_empty():
        return Skip("no kernels")
    k = inp.kernels.with_columns(d=pl.col("end_ns") - pl.col("start_ns"))
    # a graph replay launches its kernels together: only kernels launched one by one pay a launch
    replayed = pl.col("graph_launch").fill_null(False) if "graph_launch" in k.columns else None
    graph_kernels = 0 if replayed is None else int(k.select(replayed.sum()).item())
    if replayed is not None and graph_kernels:
        k = k.filter(~replayed)
    if k.is_empty():  # every kernel ran in a graph replay: no launch per kernel to cut
        return []
    small = k.filter(pl.col("d") < SMALL_KERNEL_NS)
    per_it = small.height / inp.iteration_count
    if small.height < SMALL_SHARE * k.height or per_it < SMALL_PER_ITERATION:
        return []
    launch_ms = float(inp.path["launch_ms"].sum()) / inp.iteration_count
    return [
        Finding(
            rule="small_kernels",
            severity="medium",
            title=f"{small.height} of {k.height} kernels ({100 * small.height / k.height:.0f} "
            f"%) run under {SMALL_KERNEL_NS // 1000} µs: {per_it:.0f} per iteration"
            + (f" ({graph_kernels} kernels of graph replays left out)" if graph_kernels else ""),
            advice="Fewer, larger kernels: torch.compile (fusion), CUDA graphs to replay the "
            "launches, fused optimizers (foreach=True / fused=True), larger batches.",
            evidence={
                "count": small.height,
                "kernel_count": k.height,
                "graph_kernel_count": graph_kernels,
                "small_total_ms": ms(float(small["d"].sum()) / 1e6),
                "launch_on_path_ms_per_iteration": ms(launch_ms),
                "top": top_events(small.with_columns(duration_ns=pl.col("d"))),
            },
            where=inp.where(small),
            what_if="launch=0",
            problem_ms=ms(launch_ms),
        )
    ]


__all__ = ["data_loader", "host_bound", "small_kernels", "sync"]
