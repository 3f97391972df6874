"""Scale benchmark: `stragglers` over many ranks with many collectives.

    python benchmarks/bench_stragglers.py [--ranks 64] [--steps 200] [--collectives 8]
        [--kernels 50]

Builds in memory (no files) a synchronous job: per rank and step, `--kernels` compute kernels
then `--collectives` NCCL AllReduce kernels on their own stream, one rank slower (its kernels
10 % longer), every rank's collective ending when the last one arrives; with launch calls
(correlation ids) for every kernel and an NVML-like sample every 100 ms per rank. Then times
`Dataset.stragglers()` (matching, arrivals, verdict, causes with launch gaps and telemetry) and
prints one JSON line: ranks, instances, kernels, seconds, the verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build(n_ranks: int, steps: int, n_coll: int, n_kern: int) -> object:
    import numpy as np
    import polars as pl

    from traceanalyze.tables import Tables

    rng = np.random.default_rng(7)
    slow = n_ranks - 1
    scale = np.where(np.arange(n_ranks) == slow, 1.10, 1.0)[:, None]
    t = np.zeros(n_ranks, dtype=np.int64)
    starts, ends, streams, names = [], [], [], []
    for _ in range(steps * n_coll):
        d = (rng.integers(20_000, 80_000, size=n_kern)[None, :] * scale).astype(np.int64)
        e = t[:, None] + np.cumsum(d + 2_000, axis=1) - 2_000  # kernels 2 µs apart
        s = e - d
        arrive = e[:, -1] + 2_000
        done = arrive.max() + 50_000  # a collective ends when the last rank is in, + transfer
        starts += [s, arrive[:, None]]
        ends += [e, np.full((n_ranks, 1), done)]
        streams += [np.full(s.shape, 7), np.full((n_ranks, 1), 13)]
        names += [np.full(s.shape, 0), np.full((n_ranks, 1), 1)]
        t = np.full(n_ranks, done + 2_000, dtype=np.int64)
    cols = [np.concatenate([x.ravel() for x in a]) for a in (starts, ends, streams, names)]
    # per round, ravel order: each rank's n_kern kernels, then each rank's collective
    rk = np.concatenate(
        [
            np.concatenate([np.repeat(np.arange(n_ranks), n_kern), np.arange(n_ranks)])
            for _ in range(steps * n_coll)
        ]
    )
    kind = np.array(["gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"])
    k = pl.DataFrame(
        {
            "rank": rk,
            "start_ns": cols[0],
            "end_ns": cols[1],
            "stream_id": cols[2],
            "name": kind[cols[3]],
        }
    ).with_columns(
        pl.format("{}", pl.col("rank").cast(pl.String).str.zfill(16)).alias("source_id"),
        pl.col("rank").alias("device_id"),
        pl.lit(1).alias("process_id"),
        pl.int_range(pl.len()).over("rank").alias("correlation_id"),
    )
    calls = k.select(
        "source_id",
        "correlation_id",
        pl.lit("runtime").alias("api"),
        pl.lit("cudaLaunchKernel").alias("name"),
        (pl.col("start_ns") - 5_000).alias("start_ns"),
        (pl.col("start_ns") - 1_000).alias("end_ns"),
        pl.lit(1).alias("process_id"),
    )
    span = int(k["end_ns"].max())  # type: ignore[arg-type]
    ts = np.arange(0, span, 100_000_000, dtype=np.int64)
    samples = pl.concat(
        pl.DataFrame(
            {
                "source_id": f"{r:016d}",
                "device_id": r,
                "timestamp_ns": ts,
                "sm_clock_mhz": 1400.0 if r == slow else 1700.0,
            }
        )
        for r in range(n_ranks)
    )
    sources = pl.DataFrame(
        {
            "source_id": [f"{r:016d}" for r in range(n_ranks)],
            "path": [f"job/rank{r}.sqlite" for r in range(n_ranks)],
            "time_origin_epoch_ns": [0] * n_ranks,
        }
    )
    return Tables.build(
        sources=sources,
        kernels=k.drop("rank"),
        api_calls=calls,
        gpu_samples=samples,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--collectives", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=50)
    a = ap.parse_args(argv)
    from traceanalyze.dataset import Dataset

    tables = build(a.ranks, a.steps, a.collectives, a.kernels)
    ds = Dataset.from_tables(tables)
    t0 = time.perf_counter()
    res = ds.stragglers()
    secs = time.perf_counter() - t0
    out = {
        "ranks": res.ranks.height,
        "instances": int(res.instances["instance"].n_unique()),
        "kernels": tables.kernels.height,  # type: ignore[attr-defined]
        "seconds": round(secs, 2),
        "verdict": res.verdict,
        "causes": list(res.causes),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
