"""Cost of `critical-path`: time per million events and peak memory, on a store.

    python benchmarks/bench_critical_path.py [--copies 22]

Makes (once, cached under bench-data/critical-path-<copies>/) a store of one source: the shared
ResNet-50 V100 trace's host operators, annotations, runtime calls, kernels, copies and iterations
repeated `--copies` times back to back (times shifted by the trace's span, correlation ids and
iteration numbers offset), so the graph has real shapes; 22 copies are ~1.0 M events, what a
~0.4 GB Kineto JSON holds. Then, each in its own subprocess with peak RSS from
`resource.getrusage` in the child:

* `load`           — the six tables the analysis reads, collected from the store (the floor);
* `critical-path`  — `Dataset.critical_path()` over the store;
* `what-if`        — the same with `what_if=("kernel:.=0.5",)` (a second longest path per step).

    python benchmarks/bench_critical_path.py --copies 6 --ranks 4

stores the same source `--ranks` times (one source id per rank, the same iteration numbers), as
the ranks of one job, and adds

* `across-ranks`   — `Dataset.critical_path(across_ranks=True)`: every rank's path and each
  iteration's job-wide path over the ranks (`ranks.across`). Its peak RSS beside
  `critical-path`'s says what the job-wide paths hold: one iteration's window graphs at a time,
  not the whole job's.

Prints wall and CPU seconds (user + system of the child; wall time is noisy on a shared machine),
CPU seconds per million events and peak RSS per task.

    python benchmarks/bench_critical_path.py --hta

compares the path per step with HTA 0.5.0's `critical_path_analysis(rank=0,
annotation="ProfilerStep", instance_id=i)` on the ResNet-50 trace, run in `bench-data/hta-venv`
(made on first use: `pip install HolisticTraceAnalysis==0.5.0 "pandas<3"`; HTA 0.5.0 fails
under pandas 3 with "Cannot specify both 'axis' and 'index'/'columns'").
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRACE = ROOT.parent / "shared" / "traces" / "kineto_json"
TRACE = TRACE / "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
TABLES = ("kernels", "memcpy", "api_calls", "ops", "markers", "iterations")


def make_store(path: Path, copies: int, ranks: int = 1) -> int:
    import polars as pl

    import traceanalyze as ta
    from traceanalyze.store import Store
    from traceanalyze.tables import Tables

    t = ta.read(TRACE)
    frames = {name: getattr(t, name) for name in TABLES}
    lo = min(int(f["start_ns"].min()) for f in frames.values() if f.height)  # type: ignore[arg-type]
    hi = max(int(f["end_ns"].max()) for f in frames.values() if f.height)  # type: ignore[arg-type]
    span = hi - lo + 1_000_000
    corr = 1 + max(int(frames[n]["correlation_id"].max()) for n in ("kernels", "api_calls"))  # type: ignore[arg-type]
    out: dict[str, pl.DataFrame] = {}
    for name, f in frames.items():
        parts = []
        for i in range(copies):
            shift = [pl.col(c) + i * span for c in ("start_ns", "end_ns") if c in f.columns]
            extra = []
            if "correlation_id" in f.columns:
                extra.append(pl.col("correlation_id") + i * corr)
            if name == "iterations":
                extra.append(pl.col("iteration") + i * 1000)
            if "kernel_id" in f.columns:
                extra.append(pl.col("kernel_id") + i * f.height)
            parts.append(f.with_columns(*shift, *extra))
        out[name] = pl.concat(parts)
    keep = {n: f for n, f in t.items() if n not in out}
    tables = Tables.build(**keep, **out)
    for r in range(ranks):  # rank r: the same events under a source id of its own
        sid = "c0ffee" + f"{copies:06x}" + (f"{r:04x}" if ranks > 1 else "0000")
        sources = tables.sources.with_columns(pl.lit(r, dtype=pl.Int64).alias("rank"))
        Store(path).write(replace(tables, sources=sources).with_source_id(sid))
    return ranks * sum(out[n].height for n in TABLES if n != "iterations")


def child(task: str, store: str) -> None:
    import polars as pl

    import traceanalyze as ta

    ds = ta.open(store=store)
    t0 = time.perf_counter()
    c0 = time.process_time()
    if task == "load":
        rows = sum(ds.scan(n).collect().height for n in TABLES)
    else:
        wi = ("kernel:.=0.5",) if task == "what-if" else ()
        res = ds.critical_path(what_if=wi, across_ranks=task == "across-ranks")
        rows = int(res.iterations["event_count"].sum())
        assert res.iterations.height > 0 and isinstance(res.iterations, pl.DataFrame)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {"task": task, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": rss_mib, "events": rows}
    print(json.dumps(out))


HTA_SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
out = []
for i in range(10):
    try:
        g, ok = a.critical_path_analysis(rank=0, annotation="ProfilerStep", instance_id=i)
    except Exception as e:  # past the last step HTA keeps
        break
    if not ok:
        break
    df = g.get_critical_path_breakdown()
    by = df.groupby("bound_by").duration.sum().to_dict()
    out.append({"instance": i, "total_us": float(df.duration.sum()),
                "by": {k: float(v) for k, v in by.items()}})
print(json.dumps(out))
"""


def hta_compare() -> None:
    import tempfile

    from _installed import hta_python

    import traceanalyze as ta

    py = hta_python()
    if py is None:
        return
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / TRACE.name).symlink_to(TRACE)
        out = subprocess.run(
            [str(py), "-c", HTA_SCRIPT, d], capture_output=True, text=True, check=True
        )
    hta = json.loads(out.stdout.strip().splitlines()[-1])
    ours = ta.open(TRACE).critical_path().iterations.sort("iteration")
    print(
        f"{'step':>5} {'ours path-carry ms':>19} {'ours compute %':>15} "
        f"{'HTA path ms':>12} {'HTA compute %':>14}"
    )
    for row in ours.iter_rows(named=True):
        i = row["iteration"] - int(ours["iteration"].min())
        own = row["path_ms"] - row["carry_ms"]
        mine = f"{row['iteration']:>5} {own:>19.3f} {100 * row['gpu_compute_ms'] / own:>15.1f}"
        if i < len(hta):
            h = hta[i]
            pct = 100 * h["by"].get("gpu_compute_bound", 0.0) / h["total_us"]
            print(f"{mine} {h['total_us'] / 1e3:>12.3f} {pct:>14.1f}")
        else:
            print(f"{mine} {'(dropped)':>12} {'':>14}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=22)
    ap.add_argument("--ranks", type=int, default=1, help="Sources of one job (adds across-ranks).")
    ap.add_argument("--hta", action="store_true", help="Compare with HTA 0.5.0 per step.")
    ap.add_argument("--child", nargs=2, metavar=("TASK", "STORE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    if not TRACE.exists():
        sys.exit(f"{TRACE} is absent (needs ../shared)")
    if a.hta:
        hta_compare()
        return
    store = ROOT / "bench-data" / f"critical-path-{a.copies}"
    if a.ranks > 1:
        store = store.with_name(f"{store.name}-ranks-{a.ranks}")
    if not store.exists():
        t0 = time.perf_counter()
        n = make_store(store, a.copies, a.ranks)
        print(f"made {store} ({n:,} events) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(
        f"{'task':<14} {'wall s':>8} {'CPU s':>7} {'CPU s / M events':>17} "
        f"{'peak RSS MiB':>13} {'events':>10}"
    )
    tasks = ("load", "critical-path", "what-if", *(("across-ranks",) if a.ranks > 1 else ()))
    for task in tasks:
        out = subprocess.run(
            [sys.executable, __file__, "--child", task, str(store)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        per_m = r["cpu_s"] / (r["events"] / 1e6)
        print(
            f"{task:<14} {r['wall_s']:>8.2f} {r['cpu_s']:>7.2f} {per_m:>17.2f} "
            f"{r['peak_rss_mib']:>13.0f} {r['events']:>10,}"
        )


if __name__ == "__main__":
    main()
