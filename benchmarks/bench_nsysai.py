"""nsys-ai 0.3 as an anchor (issue 35): its DuckDB/Parquet cache and top-kernels summary against
`traceanalyze ingest` + `summary`, on the 2 M-kernel Nsight Systems export.

    python benchmarks/bench_nsysai.py [--rows N] [--repeat R]

Data: `bench-data/nsys_kernels_<N>.sqlite` (default N = 2,000,000), the real 2×H100 torchrun
export with its kernel rows replicated, made by `bench_nsys_sqlite.make_data` (same file).

Each repetition runs, alternating, as a user would from a shell (each command its own process):

* nsys-ai: `nsys-ai warm COPY` (builds its cache: Parquet files of the base tables opened with
  DuckDB, and its NVTX kernel map) then `nsys-ai skill run top_kernels COPY`; COPY is a fresh
  copy of the export in an empty directory (nsys-ai writes its cache beside the file), made
  before timing;
* traceanalyze: `traceanalyze ingest FILE --store S` (a fresh S) then `traceanalyze summary
  --store S`.

Time is the sum of the two commands' wall clock; memory the larger of their peak RSS (GNU time's
`%M`, which counts the largest process, not its worker processes: ours, the ingest's ADBC
workers, are measured in bench_nsys_sqlite.py). Ratios are nsys-ai / traceanalyze for time and
traceanalyze / nsys-ai for memory, per repetition; median (min–max).

nsys-ai runs in its own venv, `bench-data/nsysai-venv`, made once: `pip install nsys-ai==0.3.0
duckdb==1.5.5 duckdb-extension-sqlite-scanner==1.5.5`. nsys-ai reads the export through
DuckDB's `sqlite_scanner` extension, which DuckDB downloads on first use; where the machine
cannot reach DuckDB's extension site, the pip package's extension file is placed in a private
HOME (`bench-data/nsysai-home/.duckdb/extensions/v1.5.5/linux_amd64/`) that the nsys-ai
commands run with, so nothing in the user's own home is touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from bench_nsys_sqlite import make_data

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "bench-data" / "nsysai-venv"
HOME = ROOT / "bench-data" / "nsysai-home"
PINS = ["nsys-ai==0.3.0", "duckdb==1.5.5", "duckdb-extension-sqlite-scanner==1.5.5"]
TIME = "/usr/bin/time"


def nsysai() -> Path:
    """The nsys-ai command of its venv, made once, with the DuckDB extension in HOME."""
    exe = VENV / "bin" / "nsys-ai"
    if not exe.exists():
        print(f"creating {VENV} ({' '.join(PINS)}), once ...", flush=True)
        venv.create(VENV, with_pip=True)
        subprocess.run(
            [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", *PINS], check=True
        )
    ext = next(
        VENV.glob("lib/python*/site-packages/duckdb_extension_sqlite_scanner/extensions/*/*")
    )
    dest = HOME / ".duckdb" / "extensions" / ext.parent.name / "linux_amd64" / ext.name
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ext, dest)
    return exe


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one command, by GNU time."""
    out = subprocess.run(
        [TIME, "-f", "TIMED %e %M", *argv],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("TIMED ")]
    if out.returncode != 0 or not line:
        raise RuntimeError(f"{argv[:3]} failed:\n{out.stderr[-2000:]}")
    _, wall, kb = line[-1].split()
    return float(wall), float(kb) / 1024


def run_nsysai(exe: Path, data: Path, scratch: Path) -> tuple[float, float]:
    work = Path(tempfile.mkdtemp(dir=scratch))
    copy = work / data.name
    shutil.copyfile(data, copy)
    env = {**os.environ, "HOME": str(HOME)}
    w1, m1 = timed([str(exe), "warm", str(copy)], env, work)
    w2, m2 = timed([str(exe), "skill", "run", "top_kernels", str(copy)], env, work)
    shutil.rmtree(work)
    return w1 + w2, max(m1, m2)


def run_ours(data: Path, scratch: Path) -> tuple[float, float]:
    work = Path(tempfile.mkdtemp(dir=scratch))
    store = work / "store"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ta = [sys.executable, "-m", "traceanalyze"]
    w1, m1 = timed([*ta, "ingest", str(data), "--store", str(store), "--quiet"], env, work)
    w2, m2 = timed([*ta, "summary", "--store", str(store)], env, work)
    shutil.rmtree(work)
    return w1 + w2, max(m1, m2)


def _rng(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}–{max(xs):{fmt}})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    exe, data = nsysai(), make_data(a.rows)
    scratch = Path(tempfile.mkdtemp(prefix="bench-nsysai-"))
    res: dict[str, list[tuple[float, float]]] = {"nsys-ai": [], "traceanalyze": []}
    print(f"load at the start {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    try:
        for i in range(a.repeat):
            res["nsys-ai"].append(run_nsysai(exe, data, scratch))
            res["traceanalyze"].append(run_ours(data, scratch))
            print(f"repetition {i + 1}/{a.repeat} done", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load at the end {os.getloadavg()[0]:.2f}\n{data.name}, {a.rows:,} kernels")
    for name, runs in res.items():
        walls, mems = [w for w, _ in runs], [m for _, m in runs]
        print(f"  {name:<13} {_rng(walls, '.2f')} s   peak {_rng(mems, '.0f')} MB")
    t = [n[0] / o[0] for n, o in zip(res["nsys-ai"], res["traceanalyze"], strict=True)]
    m = [o[1] / n[1] for n, o in zip(res["nsys-ai"], res["traceanalyze"], strict=True)]
    print(f"  time nsys-ai / traceanalyze {_rng(t, '.2f')}x (ahead when > 1)")
    print(f"  memory traceanalyze / nsys-ai {_rng(m, '.2f')} (ahead when < 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
