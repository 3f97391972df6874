"""Nsight Systems SQLite kernel ingest: traceanalyze's nsys_sqlite reader vs hand-written peers.

    python benchmarks/bench_nsys_sqlite.py [--rows N] [--peer-rows M] [--repeat R]

Data: `bench-data/nsys_kernels_<N>.sqlite`, made once from the real 2×H100 torchrun export
(../shared/traces/nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite, 4,010
kernels) by replicating its `CUPTI_ACTIVITY_KIND_KERNEL` rows with `INSERT … SELECT` (start/end
shifted past the previous copy, correlation ids shifted) until the table has N rows (default
5,000,000). `StringIds` and every other table stay as they were, so names resolve as in the real
file. Peers that are slow may run on a smaller copy (`--peer-rows`, default 1,000,000); the table
says which file each row used, and compares rows/s.

Task: SQLite export → kernels with the three names resolved → Parquet (zstd). Every writer uses
zstd level 1, pyarrow's default level, i.e. what `pandas.to_parquet(compression="zstd")` writes
(polars' own default level, 3, costs ours ~0.1–0.15 s more on 5 M rows). Each child times
the read too (up to the frame: `ta.read(...).kernels`, `pandas.read_sql(...)`), so the table
gives both rates from the same runs: *read*, what issue 10 §5 compares with `pandas.read_sql`,
and *to Parquet*, the whole task (the write, polars' or pyarrow's, is ~25 % of ours).

* `ta.read (auto)`: the public entry, `ta.read(path).kernels` → `write_parquet`: format
  detection, the file's sha256 and the `sources` row on top of the reader, default options;
* `traceanalyze (adbc)`: `read_nsys_sqlite(path, engine="adbc")` (every table, not only kernels)
  → `kernels` frame → `write_parquet`; the integer columns are read through `adbc-driver-sqlite`
  (read-only URI) in min(CPUs, 4) rowid ranges, the first in the reader's process and the others
  in worker processes, names resolved by a gather from the small StringIds frame;
* `traceanalyze (adbc, 1 proc)`: the same with `workers=1` (everything in one process);
* `traceanalyze (sqlite3)`: the same with `engine="sqlite3"` (Python's sqlite3 only, the
  fallback when ADBC is not installed);
* `pandas.read_sql`: the hand-written approach, `pandas.read_sql` of the kernel table LEFT JOINed
  three times to `StringIds` (same 19 columns + 3 names), then `to_parquet`;
* `sqlite3 fetchall`: the same join query, `fetchall()` only (no frame, no Parquet): the floor
  of any reader built on Python's sqlite3 row API;
* `polars+connectorx`: `connectorx.read_sql(..., return_type="polars")` of the join query, then
  `write_parquet` (skipped with a message when connectorx is not installed; it is a `bench` extra).
  connectorx opens the database writable (a DELETE through it succeeds), which is why the reader
  does not use it on untrusted files.

Each contender runs in its own subprocess, R times (default 1); the table shows the best time
(and its CPU seconds, workers included: on a shared machine they vary less than the wall time) and
the largest peak RSS (`ru_maxrss` of the child, which includes the interpreter and imports). For
`traceanalyze (adbc)` the reader's own worker processes are counted too: `workers MB` is the
number of workers × the largest worker's peak (`RUSAGE_CHILDREN`), and `total MB` = parent peak +
that, an upper bound on the peak of the process tree (the workers run at the same time; the
Arrow files they hand over live in /dev/shm and are counted in the parent's RSS once mapped).
Before the table, the start-up cost of a worker is measured alone (reading an empty rowid
range).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[1]
SOURCE = (
    ROOT.parent
    / "shared"
    / "traces"
    / "nsys_sqlite"
    / "nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
)
DATA = ROOT / "bench-data"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
ZSTD_LEVEL = 1  # pyarrow's default zstd level (what pandas writes); polars' default is 3

COLUMNS = [
    "start",
    "end",
    "deviceId",
    "contextId",
    "streamId",
    "correlationId",
    "globalPid",
    "registersPerThread",
    "gridX",
    "gridY",
    "gridZ",
    "blockX",
    "blockY",
    "blockZ",
    "staticSharedMemory",
    "dynamicSharedMemory",
]
JOIN_SQL = (
    "SELECT "
    + ", ".join(f'k."{c}"' for c in COLUMNS)
    + ", d.value AS name, s.value AS short_name, m.value AS mangled_name "
    f"FROM {KERNEL} k LEFT JOIN StringIds d ON d.id = k.demangledName "
    "LEFT JOIN StringIds s ON s.id = k.shortName LEFT JOIN StringIds m ON m.id = k.mangledName"
)


# --- data -----------------------------------------------------------------------------------------


def make_data(rows: int) -> Path:
    """bench-data/nsys_kernels_<rows>.sqlite, built once by replicating the real kernel rows."""
    out = DATA / f"nsys_kernels_{rows}.sqlite"
    if out.exists():
        con = sqlite3.connect(out.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            if con.execute(f"SELECT count(*) FROM {KERNEL}").fetchone()[0] == rows:
                return out
        finally:
            con.close()
    DATA.mkdir(exist_ok=True)
    tmp = out.with_suffix(".tmp")
    shutil.copyfile(SOURCE, tmp)
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    cols = [r[1] for r in con.execute(f"PRAGMA table_info({KERNEL})")]
    while True:
        n, lo, hi, cmax = con.execute(
            f'SELECT count(*), min(start), max("end"), max(correlationId) FROM {KERNEL}'
        ).fetchone()
        if n >= rows:
            break
        span = hi - lo + 1
        shifted = {
            "start": f"start + {span}",
            "end": f'"end" + {span}',
            "correlationId": f"correlationId + {cmax + 1}",
        }
        sel = ", ".join(shifted.get(c, f'"{c}"') for c in cols)
        con.execute(f"INSERT INTO {KERNEL} SELECT {sel} FROM {KERNEL} LIMIT {rows - n}")
        con.commit()
    con.close()
    tmp.replace(out)
    return out


# --- children -------------------------------------------------------------------------------------


def _cpu_s() -> float:
    """CPU seconds of this process and its reaped children (the reader's workers)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _child(kind: str, path: str, outdir: str) -> None:
    res: dict[str, object] = {}
    pq = str(Path(outdir) / f"{kind}.parquet")
    if kind == "ours_ta":
        sys.path.insert(0, str(ROOT))
        import traceanalyze as ta
        import traceanalyze.readers.nsys.nsys_sqlite  # noqa: F401  (imports before the clock, as
        # every other contender: `import traceanalyze` alone is lazy)

        res["import_rss_mb"] = _rss_mb()
        t0, c0 = time.perf_counter(), _cpu_s()
        k = ta.read(path).kernels  # the public entry: detection, sha256, sources row
        res["read_s"] = time.perf_counter() - t0
        k.write_parquet(pq, compression="zstd", compression_level=ZSTD_LEVEL)
        res["time_s"] = time.perf_counter() - t0
        res["cpu_s"] = _cpu_s() - c0
        res["rows"] = k.height
        res["workers"] = max(1, _default_workers()) - 1
        res["worker_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    elif kind in ("ours", "ours_serial", "ours_sqlite3"):
        sys.path.insert(0, str(ROOT))
        from traceanalyze.readers.common.sqlite_parallel import default_workers
        from traceanalyze.readers.nsys.nsys_sqlite import read_nsys_sqlite

        engine: Literal["sqlite3", "adbc"] = "sqlite3" if kind == "ours_sqlite3" else "adbc"
        workers = default_workers() if kind == "ours" else 1
        if engine == "adbc":
            try:
                import adbc_driver_sqlite  # noqa: F401  (not .dbapi: it imports pandas)
            except ImportError:
                res["skipped"] = "adbc-driver-sqlite not installed (pip install adbc-driver-sqlite)"
                print(json.dumps(res))
                return
        res["import_rss_mb"] = _rss_mb()
        t0, c0 = time.perf_counter(), _cpu_s()
        k = read_nsys_sqlite(path, engine=engine, workers=workers).kernels
        res["read_s"] = time.perf_counter() - t0
        k.write_parquet(pq, compression="zstd", compression_level=ZSTD_LEVEL)
        res["time_s"] = time.perf_counter() - t0
        res["cpu_s"] = _cpu_s() - c0
        res["rows"] = k.height
        if engine == "adbc" and workers > 1:
            res["workers"] = workers - 1  # processes: the first range is read in this one
            res["worker_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    elif kind == "pandas":
        import pandas as pd

        res["import_rss_mb"] = _rss_mb()
        t0, c0 = time.perf_counter(), _cpu_s()
        con = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
        df = pd.read_sql(JOIN_SQL, con)
        res["read_s"] = time.perf_counter() - t0
        df.to_parquet(pq, compression="zstd", compression_level=ZSTD_LEVEL)
        res["time_s"] = time.perf_counter() - t0
        res["cpu_s"] = _cpu_s() - c0
        res["rows"] = len(df)
    elif kind == "fetchall":
        res["import_rss_mb"] = _rss_mb()
        t0, c0 = time.perf_counter(), _cpu_s()
        con = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
        rows = con.execute(JOIN_SQL).fetchall()
        res["time_s"] = res["read_s"] = time.perf_counter() - t0
        res["cpu_s"] = _cpu_s() - c0
        res["rows"] = len(rows)
    elif kind == "connectorx":
        try:
            import connectorx as cx
        except ImportError:
            res["skipped"] = "connectorx not installed (pip install connectorx)"
            print(json.dumps(res))
            return
        import polars  # noqa: F401

        res["import_rss_mb"] = _rss_mb()
        t0, c0 = time.perf_counter(), _cpu_s()
        df = cx.read_sql(f"sqlite://{Path(path).resolve()}", JOIN_SQL, return_type="polars")
        res["read_s"] = time.perf_counter() - t0
        df.write_parquet(pq, compression="zstd", compression_level=ZSTD_LEVEL)
        res["time_s"] = time.perf_counter() - t0
        res["cpu_s"] = _cpu_s() - c0
        res["rows"] = df.height
    res["peak_rss_mb"] = _rss_mb()
    print(json.dumps(res))


def _default_workers() -> int:
    sys.path.insert(0, str(ROOT))
    from traceanalyze.readers.common.sqlite_parallel import default_workers

    return default_workers()


def _run(kind: str, path: Path, repeat: int) -> dict[str, object]:
    best: dict[str, object] = {}
    peaks: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=DATA) as outdir:
        for _ in range(repeat):
            cp = subprocess.run(
                [sys.executable, __file__, "--child", kind, str(path), outdir],
                capture_output=True,
                text=True,
                check=False,
            )
            if cp.returncode != 0:
                return {"skipped": f"failed: {cp.stderr.strip().splitlines()[-1:]}"}
            r = json.loads(cp.stdout.strip().splitlines()[-1])
            if "skipped" in r:
                return dict(r)
            for key in ("peak_rss_mb", "worker_rss_mb"):  # the worst run's memory, not the best's
                if key in r:
                    peaks[key] = max(peaks.get(key, 0.0), float(r[key]))
            if "read_s" in r:
                peaks["read_s"] = min(peaks.get("read_s", float("inf")), float(r["read_s"]))
            if not best or float(r["time_s"]) < float(best["time_s"]):  # type: ignore[arg-type]
                best = r
    best.update(peaks)  # the worst run's memory and the best run's read time
    best["file"] = path.name
    return best


def _startup(path: Path) -> str:
    """Seconds for the workers the reader starts by default (min(CPUs, 4) - 1) to start, open
    the file and read nothing."""
    sys.path.insert(0, str(ROOT))
    from traceanalyze.readers.common import sqlite_parallel as sp

    n = max(1, sp.default_workers() - 1)
    sql = f'SELECT "start", "end" FROM {KERNEL}'
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        sp.read_ranges(path, sql, "rowid", [(0, -1)] * n)
        best = min(best, time.perf_counter() - t0)
    return f"worker start-up: {n} workers, empty ranges, best of 3: {best:.3f} s"


LABELS = {
    "ours_ta": "ta.read (auto)",
    "ours": "traceanalyze (adbc)",
    "ours_serial": "traceanalyze (adbc, 1 proc)",
    "ours_sqlite3": "traceanalyze (sqlite3)",
    "pandas": "pandas.read_sql",
    "fetchall": "sqlite3 fetchall",
    "connectorx": "polars+connectorx",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000, help="kernel rows for traceanalyze")
    ap.add_argument("--peer-rows", type=int, default=1_000_000, help="kernel rows for the peers")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", nargs="*", choices=list(LABELS), default=list(LABELS))
    ap.add_argument("--child", nargs=3, metavar=("KIND", "PATH", "OUTDIR"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(*a.child)
        return
    if not SOURCE.exists():
        sys.exit(f"missing {SOURCE} (needs ../shared/traces)")
    t0 = time.perf_counter()
    big = make_data(a.rows)
    small = make_data(a.peer_rows) if a.peer_rows != a.rows else big
    print(f"data ready in {time.perf_counter() - t0:.1f}s: {big.name}, {small.name}")
    print(f"CPUs: {os.cpu_count()}, load average at the start (1, 5, 15 min): {os.getloadavg()}")
    results = {}
    for kind in a.only:
        big_ones = ("ours_ta", "ours", "ours_serial", "ours_sqlite3", "connectorx")
        path = big if kind in big_ones else small
        results[kind] = _run(kind, path, a.repeat)
        print(f"  {LABELS[kind]}: {results[kind]}", file=sys.stderr)
    print(_startup(big))
    print(f"load average at the end (1, 5, 15 min): {os.getloadavg()}")

    def rate(kind: str, key: str = "time_s") -> float | None:
        r = results.get(kind, {})
        return float(r["rows"]) / float(r[key]) if key in r else None  # type: ignore[arg-type]

    ours_rate, pandas_rate = rate("ours"), rate("pandas")
    pandas_read = rate("pandas", "read_s")
    print()
    print("to Parquet: the whole task; read: up to the frame (the Parquet write not counted)")
    print(
        f"{'contender':<28} {'file':<28} {'rows':>9} {'time s':>7} {'rows/s':>10} "
        f"{'× pandas':>8} {'ours ×':>7} {'read s':>7} {'read rows/s':>11} {'× pandas':>8} "
        f"{'cpu s':>6} {'peak MB':>8} {'workers MB':>11} {'total MB':>9}"
    )
    for kind, r in results.items():
        if "skipped" in r:
            print(f"{LABELS[kind]:<28} skipped: {r['skipped']}")
            continue
        x = rate(kind) or 0.0
        xr = rate(kind, "read_s") or 0.0
        vs_pandas = f"{x / pandas_rate:.2f}" if pandas_rate else "-"
        read_vs = f"{xr / pandas_read:.2f}" if pandas_read else "-"
        ours_x = f"{ours_rate / x:.2f}" if ours_rate else "-"
        peak = float(r["peak_rss_mb"])  # type: ignore[arg-type]
        if "workers" in r:
            n, w = int(r["workers"]), float(r["worker_rss_mb"])  # type: ignore[call-overload, arg-type]
            workers, total = f"{n} × {w:.0f}", f"{peak + n * w:.0f}"
        else:
            workers, total = "-", f"{peak:.0f}"
        print(
            f"{LABELS[kind]:<28} {r['file']!s:<28} {r['rows']:>9,} {float(r['time_s']):>7.2f} "  # type: ignore[arg-type]
            f"{x:>10,.0f} {vs_pandas:>8} {ours_x:>7} {float(r['read_s']):>7.2f} "  # type: ignore[arg-type]
            f"{xr:>11,.0f} {read_vs:>8} {float(r.get('cpu_s', 0.0)):>6.2f} "  # type: ignore[arg-type]
            f"{peak:>8.0f} {workers:>11} {total:>9}"
        )


if __name__ == "__main__":
    main()
