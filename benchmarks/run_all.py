"""Every figure the docs quote, one command each (issue 10 §6).

    python benchmarks/run_all.py                 # list the figures and their scripts
    python benchmarks/run_all.py kineto-speed    # run one figure (or several names)
    python benchmarks/run_all.py all             # run every figure in turn (`make bench`)

Each figure runs its script in a fresh interpreter (this one's), from the repository root, and
prints the script's own side-by-side table. A figure whose script is not in this checkout prints
"not present" and counts as a failure; the exit status is 1 when any figure failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# figure -> (script in benchmarks/, its arguments, what it measures)
FIGURES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "kineto-speed": (
        "bench_kineto_json.py",
        (),
        "Kineto ResNet-50 trace vs HTA 0.5.0: whole process, warm load, peak RSS",
    ),
    "startup": (
        "bench_startup.py",
        (),
        "`import traceanalyze`, `traceanalyze --help`, `traceanalyze summary` of a small trace",
    ),
    "nsys-speed": ("bench_nsys_sqlite.py", (), "nsys SQLite kernel ingest vs hand-written peers"),
    "nsys-ai": (
        "bench_nsysai.py",
        (),
        "2 M-kernel nsys export: nsys-ai 0.3 warm + top_kernels vs ingest + summary",
    ),
    "bombs": ("bench_bombs.py", (), "decompression bombs refused: time and peak RSS"),
    "parallel-ingest": ("bench_parallel_ingest.py", (), "`ingest -j 1` vs `-j 2` speed-up"),
    "ingest-memory-kineto": (
        "bench_ingest_memory_kineto.py",
        (),
        "peak RSS of streaming ingest, Kineto JSON",
    ),
    "ingest-memory-nsys": (
        "bench_ingest_memory_nsys.py",
        (),
        "peak RSS of streaming ingest, nsys SQLite",
    ),
    "ingest-memory-csv": ("bench_ingest_memory_csv.py", (), "peak RSS of streaming ingest, CSV"),
    "csv-readers": ("bench_csv_readers.py", (), "ncu/smi CSV readers vs bare pyarrow and polars"),
    "nvprof-csv": ("bench_nvprof_csv.py", (), "nvprof CSV reader vs bare pyarrow"),
    "analyses": ("bench_analyses.py", (), "summary and variability over a fleet-sized store"),
    "analyses-1gb": (
        "bench_analyses_1gb.py",
        (),
        "every analysis command over the store of a 1 GB Kineto trace: wall time, peak RSS",
    ),
    "mlperf-noise": (
        "bench_mlperf_noise.py",
        (),
        "mlperf_log reader on a 2 GB log of console noise: time, peak RSS, one answer",
    ),
    "stragglers": (
        "bench_stragglers.py",
        ("--ranks", "64", "--steps", "100"),
        "stragglers over 64 ranks, 800 collectives, 2.6 M kernels",
    ),
    "critical-path": (
        "bench_critical_path.py",
        (),
        "critical-path over ~1 M events (the ResNet-50 trace x22): s per M events, peak RSS",
    ),
    "diagnose": (
        "bench_diagnose.py",
        (),
        "diagnose against nsys-ai 0.3 on the shared nsys exports: time and peak RSS ratios",
    ),
    "perfetto-export": (
        "bench_perfetto_export.py",
        (),
        "Perfetto export of ~1 M slices: streamed protobuf vs Chrome JSON, time and peak RSS",
    ),
    "sampler-overhead": (
        "bench_sampler_overhead.py",
        (),
        "NVML sampler overhead on ResNet-50 training",
    ),
    "store-10k": (
        "bench_store_10k.py",
        (),
        "a store of 10,000 sources: commit time as it grows (vs the whole-manifest store), "
        "summary/variability/runs over it",
    ),
}


def command(name: str) -> list[str]:
    script, args, _ = FIGURES[name]
    return [sys.executable, str(HERE / script), *args]


def run(name: str) -> int:
    script = HERE / FIGURES[name][0]
    print(f"\n===== {name}: benchmarks/{script.name} =====", flush=True)
    if not script.exists():
        print(f"{name}: benchmarks/{script.name} not present", flush=True)
        return 1
    t0 = time.perf_counter()
    rc = subprocess.call(command(name), cwd=HERE.parent)
    print(f"----- {name}: exit {rc}, {time.perf_counter() - t0:.1f} s", flush=True)
    return rc


def listing() -> str:
    width = max(map(len, FIGURES))
    lines = ["figures (python benchmarks/run_all.py NAME ... | all):"]
    for name, (script, _, what) in FIGURES.items():
        here = "" if (HERE / script).exists() else "  [not present]"
        lines.append(f"  {name:<{width}}  benchmarks/{script}: {what}{here}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv in (["-h"], ["--help"], ["--list"]):
        print(__doc__.split("\n\n")[0].strip() + "\n")
        print(listing())
        return 0
    names = list(FIGURES) if argv == ["all"] else argv
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(f"unknown figure(s): {', '.join(unknown)}\n{listing()}")
        return 2
    failed = [n for n in names if run(n) != 0]
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
