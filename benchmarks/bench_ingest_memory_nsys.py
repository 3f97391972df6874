"""Peak memory of `traceanalyze ingest` on Nsight Systems SQLite exports of 2.5 M, 5 M and 10 M
kernels (issue 10, item 1: ≤ 0.25 × input size + 150 MB, flat in the input size).

    python benchmarks/bench_ingest_memory_nsys.py [--rows 2500000 5000000 10000000] [--repeat R]
    python benchmarks/bench_ingest_memory_nsys.py --nvprof-rows 2000000   # nvprof SQLite too
    python benchmarks/bench_ingest_memory_nsys.py --rows --nvtx-rows 1000000  # NVTX + samples

Data: `bench-data/nsys_kernels_<N>.sqlite`, made by `bench_nsys_sqlite.make_data` from the real
2×H100 torchrun export in ../shared/traces (its 4,010 kernel rows replicated, times and
correlation ids shifted; StringIds and the other tables as they were). With `--nvprof-rows`,
`bench-data/nvprof_kernels_<N>.sql` is made the same way from the real nvprof SQLite export
(CONCURRENT_KERNEL rows replicated, start times shifted so that the sort by start has work).
With `--nvtx-rows`, `bench-data/nvprof_nvtx_<N>.sql` holds N NVTX marker rows and N environment
samples made from the same export's markers (`make_nvprof_nvtx`): the `markers` and
`gpu_samples` tables rather than kernels.

Each file is ingested into a fresh store by `traceanalyze ingest FILE --store DIR` in a
subprocess. Its memory is the peak over time of the summed RSS of the whole process tree (the
command and any process it starts), sampled from /proc every 5 ms; RSS counts shared library
pages once per process, so the sum is an upper bound. `max proc MB` is the largest single
process's peak (`ru_maxrss` from `wait4`, exact, no sampling). MB are MiB. The bound is
0.25 × input MiB + 150. `dict` says whether every Parquet column chunk of `kernels.name` is
dictionary-encoded (pyarrow's column-chunk metadata).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_nsys_sqlite import DATA, make_data  # noqa: E402

NVPROF_SOURCE = (
    ROOT.parent
    / "shared"
    / "traces"
    / "nvprof_sqlite"
    / "profilinglm_pytorch_lm_v100_pyprof_net.sql"
)
NV_KERNEL = "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"
MIB = 1 << 20


def make_nvprof(rows: int) -> Path:
    """bench-data/nvprof_kernels_<rows>.sql: the real nvprof export's kernel rows replicated
    (each copy's start/end shifted by a span that interleaves it with the previous copies, so
    the output order is not the table order)."""
    out = DATA / f"nvprof_kernels_{rows}.sql"
    if out.exists():
        return out
    with _nvprof_copy(out) as con:
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({NV_KERNEL})") if r[1] != "_id_"]
        copy = 0
        while True:
            n = con.execute(f"SELECT count(*) FROM {NV_KERNEL}").fetchone()[0]
            if n >= rows:
                break
            copy += 1
            shift = {"start": f"start + {copy * 997}", "end": f'"end" + {copy * 997}'}
            sel = ", ".join(shift.get(c, f'"{c}"') for c in cols)
            names = ", ".join(f'"{c}"' for c in cols)
            con.execute(
                f"INSERT INTO {NV_KERNEL} ({names}) SELECT {sel} FROM {NV_KERNEL} LIMIT {rows - n}"
            )
            con.commit()
    return out


@contextlib.contextmanager
def _nvprof_copy(out: Path) -> Iterator[sqlite3.Connection]:
    """A writable copy of the real nvprof export under `out`'s temporary name, committed and
    renamed to `out` when the body is done (an interrupted build leaves no `out`)."""
    DATA.mkdir(exist_ok=True)
    tmp = out.with_suffix(".tmp")
    shutil.copyfile(NVPROF_SOURCE, tmp)
    tmp.chmod(0o644)
    con = sqlite3.connect(tmp)
    try:
        con.execute("PRAGMA journal_mode = OFF")
        con.execute("PRAGMA synchronous = OFF")
        yield con
        con.commit()
    finally:
        con.close()
    tmp.replace(out)


NV_MARKER = "CUPTI_ACTIVITY_KIND_MARKER"
NV_ENV = "CUPTI_ACTIVITY_KIND_ENVIRONMENT"
# one CUpti_ActivityEnvironment.data union per kind, little-endian uint32s: speed (1530 MHz,
# 877 MHz, gen 3, x16, SW power cap), temperature 41 °C, power 251.5 W of 300 W, fan 35 %
_ENV_BLOBS = {
    1: struct.pack("<5I", 1530, 877, 3, 16, 0x4),
    2: struct.pack("<I", 41),
    3: struct.pack("<2I", 251_500, 300_000),
    4: struct.pack("<I", 35),
}


def make_nvprof_nvtx(rows: int) -> Path:
    """bench-data/nvprof_nvtx_<rows>.sql: the real nvprof export with its 1,366 NVTX marker rows
    replicated to `rows` (each copy's ids shifted past the previous ones so that start/end pairs
    stay pairs, timestamps shifted so that copies interleave) and `rows` environment samples
    (`--system-profiling on`, which no public capture has) at the real markers' timestamps: the
    four kinds in turn, each 100 ns apart per copy, for device 0."""
    out = DATA / f"nvprof_nvtx_{rows}.sql"
    if out.exists():
        return out
    with _nvprof_copy(out) as con:
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({NV_MARKER})") if r[1] != "_id_"]
        names = ", ".join(f'"{c}"' for c in cols)
        copy = 0
        while (n := con.execute(f"SELECT count(*) FROM {NV_MARKER}").fetchone()[0]) < rows:
            copy += 1
            lo, hi = con.execute(f"SELECT min(id), max(id) FROM {NV_MARKER}").fetchone()
            shift = {"timestamp": f"timestamp + {copy * 997}", "id": f"id + {hi - lo + 1}"}
            sel = ", ".join(shift.get(c, f'"{c}"') for c in cols)
            con.execute(
                f"INSERT INTO {NV_MARKER} ({names}) SELECT {sel} FROM {NV_MARKER} "
                f"ORDER BY _id_ LIMIT {rows - n}"
            )
            con.commit()
        base = [r[0] for r in con.execute(f"SELECT timestamp FROM {NV_MARKER} LIMIT {rows}")]
        env = (
            (0, t + (i % 997) * 100, i % 4 + 1, _ENV_BLOBS[i % 4 + 1]) for i, t in enumerate(base)
        )
        cols_env = "deviceId, timestamp, environmentKind, data"
        con.executemany(f"INSERT INTO {NV_ENV} ({cols_env}) VALUES (?, ?, ?, ?)", env)
    return out


def _tree_rss(root: int) -> int:
    """Summed RSS in bytes of `root` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/statm") as f:
                rss[int(d)] = int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def ingest(path: Path) -> dict[str, float | bool | int]:
    store = Path(tempfile.mkdtemp(dir=DATA, prefix="store-"))
    shutil.rmtree(store)
    exe = str(Path(sys.executable).with_name("traceanalyze"))
    t0 = time.perf_counter()
    proc = subprocess.Popen([exe, "ingest", str(path), "--store", str(store), "--quiet"])
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.005)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    # wait4: this child's own rusage, whose ru_maxrss also covers the processes it reaped
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    secs = time.perf_counter() - t0
    done.set()
    th.join()
    if rc != 0:
        sys.exit(f"ingest of {path} failed ({rc})")
    import pyarrow.parquet as pq

    files = sorted(store.glob("kernels/*/*.parquet"))
    encodings_ok, kernels, groups = True, 0, 0
    for f in files:
        md = pq.ParquetFile(f).metadata
        kernels += md.num_rows
        i = md.schema.to_arrow_schema().get_field_index("name")
        for g in range(md.num_row_groups):
            groups += 1
            enc = md.row_group(g).column(i).encodings
            encodings_ok &= any("DICTIONARY" in e for e in enc)
    nvtx = sum(pq.ParquetFile(f).metadata.num_rows for f in store.glob("markers/*/*.parquet"))
    samples = sum(
        pq.ParquetFile(f).metadata.num_rows for f in store.glob("gpu_samples/*/*.parquet")
    )
    shutil.rmtree(store)
    return {
        "seconds": secs,
        "tree_mib": peak / MIB,
        "proc_mib": usage.ru_maxrss / 1024,  # KiB on Linux
        "dict": encodings_ok and groups > 0,
        "kernels": kernels,
        "groups": groups,
        "markers": nvtx,
        "samples": samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="*", default=[2_500_000, 5_000_000, 10_000_000])
    ap.add_argument("--nvprof-rows", type=int, nargs="*", default=[])
    ap.add_argument("--nvtx-rows", type=int, nargs="*", default=[])
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    inputs = [make_data(n) for n in a.rows] + [make_nvprof(n) for n in a.nvprof_rows]
    inputs += [make_nvprof_nvtx(n) for n in a.nvtx_rows]
    print(f"CPUs: {os.cpu_count()}, load average (1, 5, 15 min): {os.getloadavg()}")
    head = (
        f"{'file':<30} {'input MB':>8} {'kernels':>10} {'markers':>9} {'samples':>9} "
        f"{'seconds':>8} {'tree MB':>8} "
        f"{'max proc MB':>11} {'bound MB':>8} {'/ bound':>7} {'dict':>4}"
    )
    print(head)
    for path in inputs:
        size = path.stat().st_size / MIB
        bound = 0.25 * size + 150
        for _ in range(a.repeat):
            r = ingest(path)
            print(
                f"{path.name:<30} {size:>8.0f} {r['kernels']:>10,} "
                f"{r['markers']:>9,} {r['samples']:>9,} {r['seconds']:>8.1f} "
                f"{r['tree_mib']:>8.0f} {r['proc_mib']:>11.0f} {bound:>8.0f} "
                f"{float(r['tree_mib']) / bound:>7.2f} {'yes' if r['dict'] else 'no':>4}",
                flush=True,
            )
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
