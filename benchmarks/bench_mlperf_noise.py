"""The mlperf_log reader on a 2 GB MLPerf log that is console noise between two records: peak
memory stays bounded and the answer is one run.

Writes `bench-data/mlperf_noise_<GB>g.txt` (or under `--data DIR`): a `run_start` record, then
NCCL/DALI/bash-trace console lines (LF and CRLF mixed, the marker-free kind a vendor's log keeps
between records) up to the size, then a `run_stop`. The file is read by
`python -m traceanalyze runs FILE --format mlperf_log --json` in its own process; its peak RSS is
`ru_maxrss` of `os.wait4`. Printed: size, seconds, MB/s, peak RSS MB, and the run's time to train.
A second file with no record at all must end in one error line (exit 1).

    python benchmarks/bench_mlperf_noise.py               # 2 GB
    python benchmarks/bench_mlperf_noise.py --gb 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _record(key: str, t_ms: int, **meta: object) -> bytes:
    body = {"namespace": "", "time_ms": t_ms, "event_type": "POINT_IN_TIME", "key": key}
    return b":::MLLOG " + json.dumps({**body, "value": None, "metadata": meta}).encode() + b"\n"


def _noise_block() -> bytes:
    lines = []
    for i in range(4096):
        lines.append(
            b"node047:1234:5678 [%d] NCCL INFO Channel %02d/32 : 0[0] -> 1[1] via P2P\n"
            % (i % 8, i % 32)
        )
        lines.append(b"+ srun -N 1 -n 1 -w node047 bash -c 'echo -n Clearing cache'\r\n")
        lines.append(b"DALI: pipeline built for rank %d, prefetch queue depth 2\n" % (i % 8))
    return b"".join(lines)


def write(path: Path, size: int, records: bool) -> None:
    if path.exists() and path.stat().st_size >= size:
        return
    block = _noise_block()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        if records:
            f.write(_record("run_start", 1_000))
        while f.tell() < size:
            f.write(block)
        if records:
            f.write(_record("run_stop", 3_601_000, status="success"))
    tmp.replace(path)


def measure(path: Path, out: Path) -> tuple[int, float, int, str]:
    """(exit code, seconds, peak RSS MB, stdout or else the last stderr line) of one
    `traceanalyze runs` process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "traceanalyze", "runs", str(path), "--format", "mlperf_log"]
    t0 = time.perf_counter()
    err = out.with_suffix(".err")
    with open(out, "wb") as f, open(err, "wb") as e:
        proc = subprocess.Popen([*argv, "--json"], env=env, stdout=f, stderr=e)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t0
    text = out.read_text().strip() or (err.read_text().strip().splitlines() or [""])[-1]
    return proc.returncode, dt, usage.ru_maxrss // 1024, text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--data", type=Path, default=ROOT / "bench-data")
    a = ap.parse_args()
    a.data.mkdir(parents=True, exist_ok=True)
    size = int(a.gb * (1 << 30))
    ok = True
    for records in (True, False):
        path = a.data / f"mlperf_noise_{a.gb:g}g{'' if records else '_norecords'}.txt"
        write(path, size, records)
        rc, dt, rss, last = measure(path, path.with_suffix(".out"))
        mb = path.stat().st_size / 1e6
        print(
            f"{path.name}: {mb:,.0f} MB in {dt:.1f} s ({mb / dt:,.0f} MB/s), exit {rc}, "
            f"peak RSS {rss} MB"
        )
        if records:
            runs = json.loads(last) if rc == 0 else []
            print(f"  runs: {len(runs)}, time to train {[r['time_to_train_s'] for r in runs]} s")
            ok &= rc == 0 and [r["time_to_train_s"] for r in runs] == [3600.0]
        else:
            print(f"  {last[:160]}")
            ok &= rc == 1 and "no MLPerf log records" in last
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
