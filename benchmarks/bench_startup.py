"""Start-up cost: `import traceanalyze`, `traceanalyze --help` and one command on a small trace
(`summary` of the ResNet-50 Kineto trace, when ../shared is there), whole process, wall and RSS.

python benchmarks/bench_startup.py [--runs 7] [--compare OTHER_CHECKOUT] [--no-installed]

Each is a fresh `python` process (imports counted); `python -c pass` is the floor. Two trees by
default, interleaved run by run: `this`, the checkout on PYTHONPATH in this (development) venv,
and `installed`, the checkout installed as a user installs it (`benchmarks/_installed.py`:
`bench-data/ta-venv`, a wheel of the tree, no editable-install hook in `site`, which costs every
interpreter of the development venv ~13 ms). With `--compare DIR` the same commands run with DIR
on PYTHONPATH too, so a before/after pair sees the same machine load. Each checkout is
byte-compiled first, as `pip install` does (with PYTHONDONTWRITEBYTECODE=1 a checkout would
otherwise be recompiled in every process).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _installed import installed_python

ROOT = Path(__file__).resolve().parents[1]
_EMPTY = tempfile.mkdtemp(prefix="bench-startup-")  # the installed copy's working directory

CASES = {
    "python -c pass": ["-c", "pass"],
    "import traceanalyze": ["-c", "import traceanalyze"],
    "traceanalyze --help": ["-m", "traceanalyze", "--help"],
}
# A whole command as a CLI user waits for it: imports, the read, the report and the exit (the
# interpreter's shutdown is part of it: see `traceanalyze.cli.run`).
TRACE = (
    ROOT.parent
    / "shared"
    / "traces"
    / "kineto_json"
    / "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
)
if TRACE.exists():
    CASES["traceanalyze summary TRACE"] = ["-m", "traceanalyze", "summary", str(TRACE)]


def one(args: list[str], path: Path) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one child process: `path` is a checkout (on PYTHONPATH, run by
    this python) or an installed copy's python (run from an empty directory).

    The peak RSS comes from GNU time (`/usr/bin/time -f %M`, NaN without it), not from this
    process's `wait4`: a child's `ru_maxrss` starts at the RSS of the process it was forked
    from (Linux carries the old address space's high-water mark across `exec`), and this one
    (~20 MB) is bigger than `python -c pass`. GNU time, ~2 MB, forks the measured process."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    python: str | Path
    if path.is_dir():
        python, cwd = sys.executable, path
        env["PYTHONPATH"] = str(path)
    else:
        python, cwd = path, Path(_EMPTY)
    argv = [str(python), *args]
    if _TIME:
        argv = [_TIME, "-f", "RSS_KB %M", *argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, text=True
    )
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, (args, err[-500:])
    kb = [line.split()[1] for line in err.splitlines() if line.startswith("RSS_KB ")]
    return wall, float(kb[-1]) / 1024 if kb else float("nan")


_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--compare", type=Path, default=None, help="another checkout (before)")
    ap.add_argument("--no-installed", action="store_true", help="skip the installed copy")
    a = ap.parse_args()
    trees = {"this": ROOT} | ({"compare": a.compare.resolve()} if a.compare else {})
    installed = None if a.no_installed else installed_python()
    if installed is not None:
        trees["installed"] = installed
    import compileall

    for path in trees.values():
        if path.is_dir():
            compileall.compile_dir(path / "traceanalyze", quiet=1)
    walls: dict[tuple[str, str], list[float]] = {}
    rss: dict[tuple[str, str], list[float]] = {}
    for _ in range(a.runs):
        for case, args in CASES.items():
            for tree, path in trees.items():
                w, r = one(args, path)
                walls.setdefault((case, tree), []).append(w)
                rss.setdefault((case, tree), []).append(r)
    shutil.rmtree(_EMPTY, ignore_errors=True)
    print(f"{'command':26} {'tree':9} {'median s':>9} {'min s':>7} {'max s':>7} {'RSS MB':>7}")
    for (case, tree), ws in walls.items():
        r = statistics.median(rss[case, tree])
        print(
            f"{case:26} {tree:9} {statistics.median(ws):9.3f} {min(ws):7.3f} {max(ws):7.3f} "
            f"{r:7.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
