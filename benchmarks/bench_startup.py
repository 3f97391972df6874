"""Start-up cost: `import traceanalyze` and `traceanalyze --help`, whole process, wall and RSS.

python benchmarks/bench_startup.py [--runs 7] [--compare OTHER_CHECKOUT]

Each is a fresh `python` process (imports counted); `python -c pass` is the floor. With
`--compare DIR` the same commands run with DIR on PYTHONPATH too, interleaved run by run, so a
before/after pair sees the same machine load. Each tree is byte-compiled first, as `pip install`
does (with PYTHONDONTWRITEBYTECODE=1 a checkout would otherwise be recompiled in every process).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "python -c pass": ["-c", "pass"],
    "import traceanalyze": ["-c", "import traceanalyze"],
    "traceanalyze --help": ["-m", "traceanalyze", "--help"],
}


def one(args: list[str], path: Path) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one child process."""
    env = {**os.environ, "PYTHONPATH": str(path)}
    t0 = time.perf_counter()
    pid = subprocess.Popen(
        [sys.executable, *args], env=env, stdout=subprocess.DEVNULL, cwd=path
    ).pid
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    assert os.waitstatus_to_exitcode(status) == 0, args
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--compare", type=Path, default=None, help="another checkout (before)")
    a = ap.parse_args()
    trees = {"this": ROOT} | ({"compare": a.compare.resolve()} if a.compare else {})
    import compileall

    for path in trees.values():
        compileall.compile_dir(path / "traceanalyze", quiet=1)
    walls: dict[tuple[str, str], list[float]] = {}
    rss: dict[tuple[str, str], list[float]] = {}
    for _ in range(a.runs):
        for case, args in CASES.items():
            for tree, path in trees.items():
                w, r = one(args, path)
                walls.setdefault((case, tree), []).append(w)
                rss.setdefault((case, tree), []).append(r)
    print(f"{'command':24} {'tree':8} {'median s':>9} {'min s':>7} {'max s':>7} {'RSS MB':>7}")
    for (case, tree), ws in walls.items():
        r = statistics.median(rss[case, tree])
        print(
            f"{case:24} {tree:8} {statistics.median(ws):9.3f} {min(ws):7.3f} {max(ws):7.3f} "
            f"{r:7.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
