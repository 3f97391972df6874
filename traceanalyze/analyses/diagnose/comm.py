"""Rules across GPUs and ranks: communication not hidden by compute (`exposed_comm`) and the
rank that holds the job back (`straggler`, from `analyses.ranks.stragglers`)."""

from __future__ import annotations

import polars as pl

from ...results import Finding
from ..overlap import COMM_KERNEL
from .model import Inputs, Outcome, Skip, ms

# Exposed communication below this share of the path is not worth a finding.
EXPOSED_SHARE = 0.02


def exposed_comm(inp: Inputs) -> Outcome:
    """Collective kernels and peer copies that no compute overlaps (`overlap`'s exposed time)."""
    if inp.overlap is None:
        return Skip("no collective kernels or peer/host copies to overlap (one GPU)")
    dev = inp.overlap.filter(pl.col("iteration").is_null() & (pl.col("comm_ns") > 0))
    if dev.is_empty():
        return Skip("no collective kernels or peer/host copies to overlap (one GPU)")
    # per source and iteration, as the savings are (one device per source)
    exposed = inp.per_iteration(float(dev["exposed_ns"].sum()))
    comm = inp.per_iteration(float(dev["comm_ns"].sum()))
    if exposed < EXPOSED_SHARE * (inp.mean_path_ms or 1):
        return []
    on_path = float(inp.path["gpu_comm_ms"].sum()) / inp.iteration_count
    rows = dev.select(
        "source_id",
        "device_id",
        comm_ms=pl.col("comm_ns") / 1e6,
        exposed_ms=pl.col("exposed_ns") / 1e6,
        overlap_pct=pl.col("overlap_pct").round(1),
    ).sort("exposed_ms", descending=True)
    return [
        Finding(
            rule="exposed_comm",
            severity="medium",
            title=f"communication exposed: {exposed:.2f} of {comm:.2f} ms per GPU and iteration "
            f"runs with no compute beside it ({on_path:.2f} ms of collectives on the path)",
            advice="Overlap communication with compute: DDP(bucket_cap_mb=…) and "
            "gradient_as_bucket_view=True, FSDP prefetching (forward_prefetch/backward_prefetch)"
            ", no_sync() for gradient accumulation; check the fabric (NCCL_DEBUG=INFO).",
            evidence={
                "count": dev.height,
                "exposed_ms_per_iteration": ms(exposed),
                "comm_ms_per_iteration": ms(comm),
                "comm_on_path_ms_per_iteration": ms(on_path),
                "devices": rows.head(8).to_dicts(),
            },
            where=inp.where(dev),
            what_if=f"kernel:{COMM_KERNEL}=0",
            problem_ms=ms(comm),
        )
    ]


def straggler(inp: Inputs) -> Outcome:
    """The rank the others wait for, its cause, and the waiting it causes."""
    if inp.stragglers is None:
        return Skip("one rank: stragglers need the traces of several ranks of one job")
    ranks, causes = inp.stragglers
    slow = ranks.filter(pl.col("straggler"))
    if slow.is_empty():
        return []
    out = []
    per_it = max(inp.iterations["iteration"].n_unique(), 1) if inp.iterations.height else 1
    for r in slow.iter_rows(named=True):
        cause = next((c for c in causes if c.startswith(f"rank {r['rank']}:")), r.get("cause"))
        out.append(
            Finding(
                rule="straggler",
                severity="high" if r["arrived_last_pct"] >= 50 else "medium",
                title=f"straggler: rank {r['rank']} arrives last at {r['arrived_last']} of "
                f"{r['collectives']} collectives ({r['arrived_last_pct']:.0f} %); the others "
                f"wait {r['wait_caused_ms']:.2f} ms on it",
                advice="Find what delays that rank (its cause below): uneven data shards or "
                "sequence lengths, a slower or throttled GPU, host contention (CPU affinity, "
                "dataloader workers), a noisy neighbour; `traceanalyze stragglers` has the "
                "per-collective detail.",
                evidence={
                    "count": int(r["arrived_last"]),
                    "collectives": int(r["collectives"]),
                    "wait_caused_ms": ms(r["wait_caused_ms"]),
                    "cause": cause,
                    "ranks": ranks.select(
                        "rank", "arrived_last", "arrived_last_pct", "wait_ms", "wait_caused_ms"
                    ).to_dicts(),
                },
                where=inp.where(slow.filter(pl.col("rank") == r["rank"]), rank=r["rank"]),
                problem_ms=ms(float(r["wait_caused_ms"]) / per_it),
            )
        )
    return out


__all__ = ["exposed_comm", "straggler"]
