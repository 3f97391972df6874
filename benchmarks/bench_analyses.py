"""Scale benchmark: `summary` and `variability` over a store of a fleet of sources.

    python benchmarks/bench_analyses.py [--sources 1000] [--iterations 500] [--kernels 300]

Makes (once, cached under bench-data/analyses-<params>/) a store like the SC22 variability study's
fleet: per source one GPU with `--iterations` iterations (iterlog-like, ~200 ms each with per-GPU
speed differences), gpu_samples every 50 ms (SM clock, power, temperature), and `--kernels`
kernel launches; written with `Store.write(Tables…)` directly. Then times, each in its own
subprocess with peak RSS from `resource.getrusage` in the child:

* `summary`      — `report.summary_report(store)` (every section, health included), lazy scans;
* `variability`  — `analyses.variability.variability(iterations, gpu_samples, kernels)`, lazy;
* `scan-only`    — collecting the three big tables' row counts (the cost of opening the store);
* `eager`        — peer: `Store.table()` of the three tables into memory first, then variability
  on the DataFrames (what a naive "load everything" script does).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_store(path: Path, n_sources: int, n_iter: int, n_kernels: int) -> None:
    import numpy as np
    import polars as pl

    from traceanalyze.store import Store
    from traceanalyze.tables import Tables

    rng = np.random.default_rng(42)
    st = Store(path)
    names = [f"kernel_{j}" for j in range(20)]
    for i in range(n_sources):
        sid = f"{i:016x}"
        speed = 1.0 + 0.05 * rng.standard_normal()
        dur = (200e6 * speed * (1 + 0.01 * rng.standard_normal(n_iter))).astype(np.int64)
        start = np.concatenate([[0], np.cumsum(dur)[:-1]]).astype(np.int64)
        it = pl.DataFrame(
            {
                "device_id": np.zeros(n_iter, np.int64),
                "rank": np.zeros(n_iter, np.int64),
                "iteration": np.arange(n_iter),
                "start_ns": start,
                "end_ns": start + dur,
                "duration_ns": dur,
                "batch_size": np.full(n_iter, 64),
                "images_per_s": 64 / (dur / 1e9),
            }
        )
        ts = np.arange(0, int(start[-1] + dur[-1]), 50_000_000, dtype=np.int64)
        m = ts.size
        gs = pl.DataFrame(
            {
                "device_id": np.zeros(m, np.int64),
                "timestamp_ns": ts,
                "sm_clock_mhz": 1410 - 60 * (speed - 1) + rng.normal(0, 5, m),
                "power_w": 300 + rng.normal(0, 10, m),
                "temperature_c": 65 + rng.normal(0, 2, m),
            }
        )
        ks = np.sort(rng.integers(0, int(start[-1]), n_kernels))
        kd = rng.integers(10_000, 2_000_000, n_kernels)
        kn = pl.DataFrame(
            {
                "kernel_id": np.arange(n_kernels),
                "device_id": np.zeros(n_kernels, np.int64),
                "stream_id": np.full(n_kernels, 7),
                "name": [names[j % 20] for j in range(n_kernels)],
                "start_ns": ks,
                "end_ns": ks + kd,
                "duration_ns": kd,
            }
        )
        src = pl.DataFrame(
            {
                "source_id": [sid],
                "path": [f"gpu{i}.csv"],
                "format": ["iterlog"],
                "tool": ["traceanalyze-collect"],
                "time_origin_epoch_ns": [0],
            }
        )
        t = Tables.build(sources=src, iterations=it, gpu_samples=gs, kernels=kn)
        st.write(t.with_source_id(sid))


def child(task: str, store: str) -> None:
    import polars as pl

    from traceanalyze.adapters.reports import open_store, summary_report
    from traceanalyze.analyses import variability as v

    st = open_store(store)
    t0 = time.perf_counter()
    if task == "summary":
        rep = summary_report(st)
        rows = sum(df.height for df in rep.values())
    elif task == "variability":
        df = v.variability(st.scan("iterations"), st.scan("gpu_samples"), st.scan("kernels"))
        rows = df.height
    elif task == "scan-only":
        rows = sum(
            st.scan(t).select(pl.len()).collect().item()
            for t in ("iterations", "gpu_samples", "kernels")
        )
    elif task == "eager":
        it, gs, kn = (st.table(t) for t in ("iterations", "gpu_samples", "kernels"))
        df = v.variability(it, gs, kn)
        rows = df.height
    else:
        raise SystemExit(f"unknown task {task}")
    wall = time.perf_counter() - t0
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"task": task, "wall_s": wall, "peak_rss_mib": rss_mib, "rows": rows}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sources", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=500)
    ap.add_argument("--kernels", type=int, default=300)
    ap.add_argument("--child", nargs=2, metavar=("TASK", "STORE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    store = ROOT / "bench-data" / f"analyses-{a.sources}x{a.iterations}x{a.kernels}"
    if not (store / "traceanalyze-store.json").exists():
        t0 = time.perf_counter()
        make_store(store, a.sources, a.iterations, a.kernels)
        print(f"made {store} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    results = []
    for task in ("scan-only", "summary", "variability", "eager"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", task, str(store)],
            check=True,
            capture_output=True,
            text=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = next(r for r in results if r["task"] == "variability")
    print(
        f"store: {a.sources} sources x {a.iterations} iterations, 50 ms samples, "
        f"{a.kernels} kernels/source"
    )
    print(f"{'task':<12} {'wall s':>8} {'peak RSS MiB':>13} {'rows':>8} {'wall / variability':>19}")
    for r in results:
        ratio = r["wall_s"] / base["wall_s"]
        print(
            f"{r['task']:<12} {r['wall_s']:>8.2f} {r['peak_rss_mib']:>13.0f} {r['rows']:>8}"
            f" {ratio:>19.2f}"
        )


if __name__ == "__main__":
    main()
