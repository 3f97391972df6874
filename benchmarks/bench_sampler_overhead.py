"""Overhead of the NVML sampler on ResNet-50 training throughput.

    python benchmarks/bench_sampler_overhead.py [--batch-size 64] [--iterations 150] [--repeats 2]

Runs the collector's workload (`python -m traceanalyze.collect.resnet50`, synthetic data, CUDA)
side by side: without a sampler, and with the sampler process at 50 ms and 10 ms. Each run is
its own subprocess; configurations alternate per repeat so clock/thermal drift spreads evenly.
Reports median steady-state images/s, the ratio to the no-sampler run, the samples written,
the achieved interval (median and p99 of gaps) and the sampler's CPU time (rusage of the child).

Needs an NVIDIA GPU with NVML; without one it prints that it was skipped and why, and exits 0.
Generated files go to a temporary directory.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS: list[tuple[str, float | None]] = [("no sampler", None), ("sampler 50 ms", 50.0)]
CONFIGS.append(("sampler 10 ms", 10.0))


def gpu_available() -> str | None:
    """None when a CUDA GPU and NVML are usable, else the reason."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as e:  # ImportError or NVMLError: both mean "cannot sample"
        return f"NVML unavailable ({type(e).__name__}: {e})"
    return None


def steady_ips(log: Path, warmup: int) -> float:
    lines = log.read_text().splitlines()[1:]
    rows = [r for r in csv.DictReader(lines) if int(r["iteration"]) >= warmup]
    return statistics.median(float(r["images_per_s"]) for r in rows)


def sampler_stats(path: Path) -> tuple[int, float, float]:
    lines = path.read_text().splitlines()[1:]
    ts = sorted({int(r["timestamp_ns"]) for r in csv.DictReader(lines) if r["device_id"] == "0"})
    gaps = [(b - a) / 1e6 for a, b in zip(ts, ts[1:], strict=False)]
    if not gaps:
        return len(ts), float("nan"), float("nan")
    gaps.sort()
    return len(ts), statistics.median(gaps), gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))]


def one_run(
    tmp: Path, name: str, interval: float | None, args: argparse.Namespace
) -> dict[str, float]:
    out = tmp / f"{name.replace(' ', '_')}-{time.monotonic_ns()}"
    out.mkdir()
    sampler = None
    nvml_csv = out / "nvml.csv"
    if interval is not None:
        sampler = subprocess.Popen(
            [sys.executable, "-m", "traceanalyze.collect.sampler", "--out", str(nvml_csv)]
            + ["--interval-ms", str(interval)]
        )
    wl = [sys.executable, "-m", "traceanalyze.collect.resnet50", "--out", str(out), "--device"]
    wl += ["cuda", "--batch-size", str(args.batch_size), "--iterations", str(args.iterations)]
    wl += ["--warmup", str(args.warmup), "--precision", args.precision]
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    subprocess.run(wl, check=True, env=env, stdout=subprocess.DEVNULL)
    res = {"ips": steady_ips(out / f"iterations_bs{args.batch_size}_rank0.csv", args.warmup)}
    if sampler is not None:
        sampler.send_signal(signal.SIGTERM)
        _, status, ru = os.wait4(sampler.pid, 0)
        sampler.returncode = os.waitstatus_to_exitcode(status)
        n, med, p99 = sampler_stats(nvml_csv)
        res.update(samples=n, gap_ms=med, p99_ms=p99, cpu_s=ru.ru_utime + ru.ru_stime)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    why = gpu_available()
    if why is not None:
        print(f"bench_sampler_overhead: skipped: {why}")
        return 0
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="bench-sampler-") as d:
        for rep in range(args.repeats):
            order = CONFIGS if rep % 2 == 0 else CONFIGS[::-1]
            for name, interval in order:
                results[name].append(one_run(Path(d), name, interval, args))
    base = statistics.median(r["ips"] for r in results["no sampler"])
    print(
        f"ResNet-50 bs={args.batch_size} {args.precision}, {args.iterations} iterations "
        f"({args.warmup} warm-up), {args.repeats} repeats, median of repeats"
    )
    hdr = f"{'config':<15}{'images/s':>10}{'ratio':>8}{'samples':>9}{'gap ms':>8}"
    print(hdr + f"{'p99 ms':>8}{'CPU s':>7}")
    for name, _ in CONFIGS:
        rs = results[name]
        ips = statistics.median(r["ips"] for r in rs)
        line = f"{name:<15}{ips:>10.1f}{ips / base:>8.3f}"
        if "samples" in rs[0]:
            med = {k: statistics.median(r[k] for r in rs) for k in ("samples", "gap_ms", "p99_ms")}
            cpu = statistics.median(r["cpu_s"] for r in rs)
            line += f"{med['samples']:>9.0f}{med['gap_ms']:>8.1f}{med['p99_ms']:>8.1f}{cpu:>7.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
