"""`traceanalyze ingest -j N`: the 1 -> 2 process speed-up, for many small files and a few large.

Inputs, made under `bench-data/parallel/` (gitignored) on first use:

* `small/`: 200 copies of small real traces (50 each of the HTA AlexNet and MI250 Kineto traces,
  decompressed; the magus nvprof GPU trace; the NVML sampler CSV), each with a harmless change so
  that every file has its own SHA-256 (and so is ingested, not skipped): JSON whitespace after
  the opening brace; the process id in nvprof's `==PID==` preamble; blank lines at the end of
  the sampler CSV. Each variant is checked to read to the same row counts as its original.
* `large/`: 4 files, 2 Kineto traces (the real ResNet-50 trace's events repeated to ~120 MB)
  and 2 nvprof GPU traces (the magus rows repeated to ~100 MB).

Each configuration is a fresh process, `traceanalyze ingest FILES --store TMP -q [-j N]`, run
alternately round by round (default 3 rounds) so machine load hits both alike; the table gives
the median and range of wall time and the speed-up serial (-j 1) / -j 2. The machine's load
average is printed: on a shared machine, a speed-up is bounded by the cores others leave.

    python benchmarks/bench_parallel_ingest.py [--rounds 3] [--only small|large]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
DATA = ROOT / "bench-data" / "parallel"


def _variants_small() -> list[tuple[str, bytes]]:
    """(name, bytes) of the four small traces."""
    k = SHARED / "kineto_json"
    alex = gzip.decompress((k / "hta_alexnet_a100_param_benchmark_trace.json.gz").read_bytes())
    amd = gzip.decompress((k / "hta_amd_mi250_rocm62_kineto.json.gz").read_bytes())
    nvp = (SHARED / "nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv").read_bytes()
    smi = (SHARED / "smi_logs/roofline_custom_nvml_sampler_rtx5070.csv").read_bytes()
    return [("alexnet.json", alex), ("mi250.json", amd), ("nvprof.csv", nvp), ("smi.csv", smi)]


def _vary(name: str, data: bytes, i: int) -> bytes:
    if name.endswith(".json"):  # JSON whitespace: insignificant
        return data.replace(b"{", b"{" + b" " * (i + 1), 1)
    if name == "nvprof.csv":  # nvprof's own pid in the preamble, which the reader skips
        return data.replace(b"==12400==", b"==%05d==" % (20000 + i))
    return data + b"\n" * (i + 1)  # blank lines at the end


def make_small() -> list[Path]:
    d = DATA / "small"
    files = sorted(d.glob("*")) if d.exists() else []
    if len(files) == 200:
        return files
    sys.path.insert(0, str(ROOT))
    import traceanalyze as ta

    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for name, data in _variants_small():
        orig = d / f"orig-{name}"
        orig.write_bytes(data)
        want = ta.read(orig).counts()
        orig.unlink()
        for i in range(50):
            p = d / f"{i:03d}-{name}"
            p.write_bytes(_vary(name, data, i))
            if i in (0, 49):  # the change is harmless: same rows as the original
                got = ta.read(p).counts()
                assert got == want, (p, got, want)
    return sorted(d.glob("*"))


def make_large() -> list[Path]:
    d = DATA / "large"
    if d.exists() and len(list(d.glob("*"))) == 4:
        return sorted(d.glob("*"))
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    gz = SHARED / "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(gz.read_bytes()))
    events = json.dumps(doc.pop("traceEvents"))[1:-1].encode()
    head = json.dumps(doc)[:-1].encode()  # the other keys, object left open
    for k in range(2):
        with open(d / f"resnet_x8_{k}.json", "wb") as f:
            f.write(head + b"," + b" " * k + b'"traceEvents":[')
            f.write(b",".join([events] * 8))
            f.write(b"]}")
    src = (SHARED / "nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv").read_bytes()
    lines = src.splitlines(keepends=True)
    head, rows = b"".join(lines[:5]), b"".join(lines[5:])
    for k in range(2):
        with open(d / f"nvprof_x{k}.csv", "wb") as f:
            f.write(head.replace(b"==12400==", b"==%05d==" % (30000 + k)))
            for _ in range((100 << 20) // len(rows)):
                f.write(rows)
    return sorted(d.glob("*"))


def run(files: list[Path], jobs: int) -> float:
    """Wall s of one ingest into a fresh store."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-par-"))
    cmd = [sys.executable, "-m", "traceanalyze", "ingest", *map(str, files)]
    cmd += ["--store", str(tmp / "st"), "-q", "-j", str(jobs)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env)
    rc = p.wait()
    wall = time.perf_counter() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    assert rc == 0, cmd[:6]
    return wall


def bench(label: str, files: list[Path], rounds: int) -> None:
    size = sum(f.stat().st_size for f in files) / 1e6
    walls: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(rounds):
        for jobs in (1, 2):
            walls[jobs].append(run(files, jobs))
    m1, m2 = statistics.median(walls[1]), statistics.median(walls[2])
    print(f"{label}: {len(files)} files, {size:.1f} MB; load average {os.getloadavg()[0]:.1f}")
    for jobs in (1, 2):
        ws = walls[jobs]
        print(
            f"  -j {jobs}: median {statistics.median(ws):6.2f} s  "
            f"(range {min(ws):.2f}-{max(ws):.2f} over {len(ws)})"
        )
    print(f"  speed-up 1 -> 2 processes: {m1 / m2:.2f}x (median), ", end="")
    print(f"{min(walls[1]) / max(walls[2]):.2f}-{max(walls[1]) / min(walls[2]):.2f}x (range)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["small", "large"], default=None)
    a = ap.parse_args()
    print(f"cores: {os.cpu_count()}")
    if a.only in (None, "small"):
        bench("small real traces", make_small(), a.rounds)
    if a.only in (None, "large"):
        bench("large traces", make_large(), a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
