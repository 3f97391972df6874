"""Cost of the Perfetto exports: the streamed protobuf (`.pftrace`) against the Chrome trace JSON.

    python benchmarks/bench_perfetto_export.py [--copies 22] [--tasks load,json,proto] [--lazy]

Makes (once, cached under bench-data/perfetto-export-<copies>/, one Parquet file per table) the
tables the timeline export reads: the shared ResNet-50 V100 trace's kernels, copies, runtime
calls, host operators and markers repeated `--copies` times back to back (times shifted by the
trace's span, correlation, kernel and external ids offset, so every copy is new work: new flows,
new slices), with its devices and sources. 22 copies are ~1.0 M slices, what a ~0.4 GB Kineto JSON
holds; 68 copies are the 1 GB trace of `bench_ingest_memory_kineto.py`.

Then, each in its own subprocess with peak RSS from `resource.getrusage` in the child:

* `load`  — the tables read from Parquet (the floor both exports start from);
* `json`  — the same, then `export.perfetto.write_chrome_trace` (what `--perfetto t.json` does);
* `proto` — the same, then `export.perfetto_proto.write_perfetto_proto` (`--perfetto t.pftrace`).

Prints wall and CPU seconds of the export alone, peak RSS, peak RSS above the floor, and the
output's size.

`--lazy`: the tables are scanned (`pl.scan_parquet`), not read, as a store's `Timeline` hands
them to the export: the floor is then the interpreter with polars, and what is above it is the
export's own memory (streamed: it should not grow with `--copies`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRACE = ROOT.parent / "shared" / "traces" / "kineto_json"
TRACE = TRACE / "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
REPEATED = ("kernels", "memcpy", "api_calls", "ops", "markers")
KEPT = ("devices", "sources")
IDS = ("correlation_id", "kernel_id", "external_id")


def make_tables(path: Path, copies: int) -> int:
    """Write the repeated tables to `path`/<table>.parquet; returns the number of rows."""
    import polars as pl

    import traceanalyze as ta

    t = ta.read(TRACE)
    frames = {name: getattr(t, name) for name in REPEATED}
    starts = [int(f["start_ns"].min()) for f in frames.values() if f.height]  # type: ignore[arg-type]
    ends = [int(f["end_ns"].max()) for f in frames.values() if f.height]  # type: ignore[arg-type]
    span = max(ends) - min(starts) + 1_000_000
    stride = {
        c: 1 + max(int(f[c].max() or 0) for f in frames.values() if c in f.columns)  # type: ignore[arg-type]
        for c in IDS
    }
    path.mkdir(parents=True)
    rows = 0
    for name, f in frames.items():
        parts = []
        for i in range(copies):
            shift = [pl.col(c) + i * span for c in ("start_ns", "end_ns")]
            ids = [pl.col(c) + i * stride[c] for c in IDS if c in f.columns]
            parts.append(f.with_columns(*shift, *ids))
        big = pl.concat(parts)
        big.write_parquet(path / f"{name}.parquet")
        rows += big.height
    for name in KEPT:
        getattr(t, name).write_parquet(path / f"{name}.parquet")
    return rows


def child(task: str, data: str, lazy: bool = False) -> None:
    import polars as pl

    from traceanalyze.export.perfetto import write_chrome_trace
    from traceanalyze.export.perfetto_proto import write_perfetto_proto

    read = pl.scan_parquet if lazy else pl.read_parquet
    t = {p.stem: read(p) for p in Path(data).glob("*.parquet")}
    out = Path(data) / ("out.pftrace" if task == "proto" else "out.json")
    t0 = time.perf_counter()
    c0 = time.process_time()
    if task != "load":
        write = write_perfetto_proto if task == "proto" else write_chrome_trace
        write(
            out,
            t["kernels"],
            t["memcpy"],
            t["markers"],
            None,
            api_calls=t["api_calls"],
            ops=t["ops"],
            devices=t["devices"],
            sources=t["sources"],
        )
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    size = out.stat().st_size if out.exists() else 0
    if out.exists():
        os.remove(out)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = sum(pl.scan_parquet(Path(data) / f"{n}.parquet").select(pl.len()).collect().item()
               for n in REPEATED)  # fmt: skip
    res = {"task": task, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": rss_mib}
    print(json.dumps(res | {"rows": rows, "bytes": size}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=22)
    ap.add_argument("--tasks", default="load,json,proto")
    ap.add_argument("--lazy", action="store_true", help="scan the tables, do not read them")
    ap.add_argument("--child", nargs=2, metavar=("TASK", "DIR"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child, lazy=a.lazy)
        return
    if not TRACE.exists():
        sys.exit(f"{TRACE} is absent (needs ../shared)")
    data = ROOT / "bench-data" / f"perfetto-export-{a.copies}"
    if not data.exists():
        t0 = time.perf_counter()
        n = make_tables(data, a.copies)
        print(f"made {data} ({n:,} rows) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(
        f"{'export':<7} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13} {'above floor':>12} "
        f"{'output MB':>10} {'rows':>10}"
    )
    floor = 0.0
    for task in a.tasks.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--child", task, str(data), *(["--lazy"] if a.lazy else [])],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if task == "load":
            floor = r["peak_rss_mib"]
        above = r["peak_rss_mib"] - floor if floor else float("nan")
        print(
            f"{task:<7} {r['wall_s']:>8.2f} {r['cpu_s']:>7.2f} {r['peak_rss_mib']:>13.0f} "
            f"{above:>12.0f} {r['bytes'] / 1e6:>10.1f} {r['rows']:>10,}",
            flush=True,
        )


if __name__ == "__main__":
    main()
