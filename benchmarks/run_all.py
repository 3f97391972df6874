"""Run every benchmarks/bench_*.py in turn (each prints its own side-by-side table).

python benchmarks/run_all.py            # all
python benchmarks/run_all.py kineto     # those whose file name contains 'kineto'
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    pattern = argv[0] if argv else ""
    benches = sorted(p for p in HERE.glob("bench_*.py") if pattern in p.name)
    failed = []
    for b in benches:
        print(f"\n===== {b.name} =====", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(b)], cwd=HERE.parent)
        print(f"----- {b.name}: exit {rc}, {time.perf_counter() - t0:.1f} s", flush=True)
        if rc:
            failed.append(b.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
