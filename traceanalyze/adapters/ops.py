"""The DatasetView entry points of `ops`, `mfu` and `roofline`: inputs from a dataset view, the
analyses in `analyses.ops` / `analyses.mfu`, a `file` column naming each source."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import polars as pl

from ..analyses.naming import with_file
from ..errors import NotAnswerable, TraceanalyzeError, UsageProblem
from ..results import Roofline

if TYPE_CHECKING:
    from . import DatasetView


def ops(
    ds: DatasetView, by: str = "op", top: int = 25, capture: DatasetView | None = None
) -> pl.DataFrame:
    """Per source, the `top` operators by inclusive time (`by="op"`), or the `top` (operator,
    kernel name) pairs by kernel time (`by="kernel"`); `top=0` keeps all. `capture`: a
    capture-time trace of the graphs `ds` replays, whose operators then get the replayed kernels
    (`graph_stacks`)."""
    from ..analyses.ops import op_kernels, op_stats
    from ..analyses.summary import replays_as_kernels

    if by not in ("op", "kernel"):
        raise UsageProblem(f"by must be 'op' or 'kernel', not {by!r}")
    # a whole-graph replay (nsys --cuda-graph-trace=graph) is one GPU event of its launch call
    kernels = replays_as_kernels(ds.scan("kernels"), ds.scan("graph_replays"))
    args = (ds.scan("ops"), ds.scan("api_calls"), kernels, ds.scan("markers"))
    grafted = None if capture is None else graph_stacks(ds, capture)
    if by == "op":
        df = op_stats(*args, launching_processes_only=bool(ds.device_filter), grafted=grafted)
        # with a capture, where the replays' GPU time went: captured operators ran no host time
        sort = ["source_id", "kernel_self_ns" if grafted is not None else "inclusive_ns"]
    else:
        kern = op_kernels(*args)
        if grafted is not None:  # a replayed kernel's operator: its captured innermost one
            inner = grafted.filter(pl.col("depth") == 0).drop_nulls("op").drop("depth")
            on = ["source_id", "kernel_id"]
            kern = kern.join(inner.rename({"op": "_cap"}), on=on, how="left")
            kern = kern.with_columns(pl.coalesce("_cap", "op").alias("op")).drop("_cap")
        df = kern.group_by("source_id", "op", "kernel").agg(
            pl.len().alias("kernel_count"), pl.col("kernel_ns").sum().alias("kernel_ns")
        )
        sort = ["source_id", "kernel_ns"]
    if by == "kernel" and df.height == 0 and kernels.head(1).collect().height == 0:
        raise NotAnswerable(f"no GPU kernels in {ds.origin} (a CPU run?): try by=op")
    if df.height == 0 or (by == "op" and df["op"].drop_nulls().len() == 0):
        raise NotAnswerable(
            f"no host operators (PyTorch profiler ops) or NVTX ranges in {ds.origin}"
        )
    # names break ties, so that the same input always prints in the same order
    ties = ["op", *(["kernel"] if by == "kernel" else [])]
    df = df.sort([*sort, *ties], descending=[False, True, *(False for _ in ties)], nulls_last=True)
    if top > 0:
        df = df.group_by("source_id", maintain_order=True).head(top)
    return with_file(df, ds.names())


def graph_stacks(ds: DatasetView, capture: DatasetView) -> pl.DataFrame:
    """Per graph-replay kernel of `ds`, the operator stack captured in `capture`
    (`analyses.graph_capture.graft`); an error when `capture` holds no stream capture, warnings
    when `ds` has no replay and for replayed kernels that matched no captured launch."""
    from ..analyses import graph_capture as gc

    cap = gc.captured_launches(
        capture.scan("api_calls"), capture.scan("ops"), capture.scan("markers")
    )
    if cap.height == 0:
        raise TraceanalyzeError(
            f"{capture.origin} is not a capture-time trace: no launch call between a "
            "cudaStreamBeginCapture/hipStreamBeginCapture and its StreamEndCapture (record one "
            "with the profiler on during torch.cuda.graph capture)"
        )
    rep = gc.replayed_ops(ds.scan("api_calls"), ds.scan("kernels"), ds.scan("memcpy"))
    if rep.height == 0:
        warnings.warn(
            f"no graph replays (cudaGraphLaunch, hipGraphLaunch) in {ds.origin}: the capture "
            f"{capture.origin} changes nothing",
            stacklevel=3,
        )
    grafted = gc.graft(cap, rep)
    took, left = gc.graft_counts(grafted)
    if left:
        warnings.warn(
            f"{left} of {took + left} graph-replay kernels matched no launch captured in "
            f"{capture.origin}: they stay with the operator around the replay "
            "(uncaptured_kernel_count)",
            stacklevel=3,
        )
    return grafted


def mfu(
    ds: DatasetView,
    *,
    gpu: str | None = None,
    precision: str = "fp32",
    batch_size: int | None = None,
    image_size: int | None = None,
    warmup: int | None = None,
) -> pl.DataFrame:
    """ResNet-50 training model FLOP utilization per source and device (see `analyses.mfu.mfu`).
    `image_size` None: the collect manifest's beside the sources' files (`runinfo`), else an
    error saying so."""
    from ..analyses.mfu import mfu as compute

    has_iterations = ds.scan("iterations").select(pl.len()).collect().item() > 0
    if image_size is None and has_iterations:  # without iterations: compute says that first
        from ..runinfo import image_size as manifest_image_size

        image_size = manifest_image_size(source_files(ds))

    # One collect GPU-run is one row (its iteration log; the trace's device names go with it).
    from ..analyses.gpu_runs import merge_gpu_runs

    its, devices = merge_gpu_runs(ds.scan("iterations"), ds.scan("devices"), gpu_run_map(ds))
    df = compute(
        its,
        devices,
        gpu=gpu,
        precision=precision,
        batch_size=batch_size,
        image_size=image_size or 224,  # 224 only reached without iterations (an error)
        warmup=warmup,
        first_steady=run_first_steady(ds),
    )
    return with_file(df, ds.names())


def source_files(ds: DatasetView) -> dict[str, str]:
    """source_id -> its file, found again for a store ingested from another directory."""
    from ..runinfo import located

    names = ds.names()
    root = ds.origin if ds.is_store else None
    return {s: located(names.get(s, s), root) for s in ds.source_ids()}


def run_first_steady(ds: DatasetView) -> int | None:
    """The collect run's own --warmup for these sources (`runinfo.first_steady`)."""
    from ..runinfo import first_steady

    return first_steady(source_files(ds))


def roofline(
    ds: DatasetView, *, gpu: str | None = None, peak_tflops: float | None = None
) -> Roofline:
    """Per-kernel FLOPs, DRAM bytes and intensity from ncu counters, and the compute roof in
    FLOP/s (`peak_tflops`, else `gpu`'s FP32 peak from gpu_peaks.csv, else None)."""
    from ..analyses.mfu import find_peak, kernel_roofline

    df = kernel_roofline(ds.scan("kernel_metrics"))
    peak = peak_tflops * 1e12 if peak_tflops else None
    if peak is None and gpu:
        row = find_peak(gpu)
        if row is None or row.fp32_tflops is None:
            raise TraceanalyzeError(f"no FP32 peak for GPU {gpu!r} in gpu_peaks.csv")
        peak = row.fp32_tflops * 1e12
    return Roofline(with_file(df, ds.names()), peak)


def one_per_gpu_run(ds: DatasetView) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Iterations and kernels with the sources of one collect GPU-run taken as one GPU (the
    iteration log stands for the run, the trace's kernels go with it): `analyses.runs`."""
    from ..analyses.gpu_runs import merge_gpu_runs

    its = ds.scan("iterations")
    stand_for = gpu_run_map(ds)
    if not stand_for:
        return its, ds.scan("kernels")
    return merge_gpu_runs(its, ds.scan("kernels"), stand_for)


def gpu_runs(ds: DatasetView) -> dict[str, list[str]]:
    """The GPU-runs of the selected sources (`analyses.gpu_runs.group_runs`): representative
    source -> its sources, over the sources with kernels, copies, operators or iterations."""
    from ..analyses.gpu_runs import group_runs

    tables = ("kernels", "memcpy", "ops", "iterations")
    work = pl.concat([ds.scan(t).select("source_id").unique() for t in tables]).collect()
    return group_runs((str(s) for s in work["source_id"].to_list()), gpu_run_map(ds))


def gpu_run_map(ds: DatasetView) -> dict[str, str]:
    """source_id -> the source standing for its GPU-run (`analyses.runs`): the sources of one
    collect run by its manifest, else an iteration log and the traces its epoch window overlaps
    on the same devices (`analyses.gpu_runs.concurrent_runs`); empty when no sources pair."""
    from ..analyses.gpu_runs import representatives
    from ..runinfo import gpu_run_keys

    keys = gpu_run_keys(source_files(ds))
    unkeyed = [sid for sid, key in keys.items() if key is None]
    if len(unkeyed) >= 2:
        keys |= _concurrent_keys(ds, unkeyed)
    if not any(keys.values()):
        return {}
    counts = dict(ds.scan("iterations").group_by("source_id").len().collect().iter_rows())
    return representatives(counts, keys)


def _concurrent_keys(ds: DatasetView, ids: list[str]) -> dict[str, str]:
    """GPU-run keys, from their own times, for sources without a collect manifest."""
    from ..analyses.gpu_runs import WORK_TABLES, concurrent_runs, run_windows

    def only(lf: pl.LazyFrame) -> pl.LazyFrame:
        return lf.filter(pl.col("source_id").is_in(ids))

    sources = only(ds.scan("sources"))
    if not sources.select((pl.col("format") == "iterlog").any()).collect().item():
        return {}  # no iteration log: nothing to pair a trace with
    work = [(only(ds.scan(table)), dev) for table, dev in WORK_TABLES]
    return concurrent_runs(run_windows(sources, work))
