"""ncu_csv and smi_csv readers vs bare `pyarrow.csv.read_csv` (and polars) on the same bytes.

Inputs, generated under `bench-data/` (gitignored) on first use:

* `ncu_csv_long_<N>.csv`: the real ncu 2026.2 capture
  `../shared/traces/ncu_csv/roofline_ncu2026.2_rtx5070_saxpy_long.csv` (BOM, 8 lines of
  application stdout, CRLF, thousands separators), its 12 metric rows repeated with increasing
  `ID` until there are N data rows;
* `smi_csv_units_<N>.csv`: an `nvidia-smi --query-gpu=timestamp,index,uuid,name,power.draw,
  clocks.current.sm,clocks.current.memory,temperature.gpu,utilization.gpu,utilization.memory,
  memory.used,pstate,clocks_event_reasons.active --format=csv -lms 20` log of 8 GPUs (units in the
  header and values, ", " separator, 2% `[N/A]` power cells), N rows = N/8 samples.

Readers, each in its own subprocess (best of 3 rounds, alternating; peak RSS of the child; the
CPU seconds (user + system) of the best round too, steadier than wall time on a shared machine):

* traceanalyze `read_ncu_csv` / `read_smi_csv`: the full normalized read (envelope, thousands
  separators, unit conversion, kernels/devices tables, local time → epoch, schema conform);
* `pyarrow.csv.read_csv` on the same file with type inference, told where the header is
  (`skip_rows` over the stdout prelude for ncu): the floor for "parse this CSV", doing no
  normalization (ncu values stay strings with commas; nvidia-smi values stay `"77.08 W"`);
* `polars.read_csv` likewise (`skip_rows`), for reference;
* for nvidia-smi also traceanalyze with its fast scan switched off: the careful (pyarrow) path
  that any file the fast scan declines takes (ragged rows, a `[…]` state, mixed units, …).

    python benchmarks/bench_csv_readers.py                 # 1,000,000 rows each
    python benchmarks/bench_csv_readers.py --rows 200000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NCU_SOURCE = (
    ROOT.parent / "shared" / "traces" / "ncu_csv" / "roofline_ncu2026.2_rtx5070_saxpy_long.csv"
)
DATA = ROOT / "bench-data"

CHILD = r"""
import json, resource, sys, time, warnings
kind, fmt, path, skip = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
warnings.simplefilter("ignore")
# Imports are outside every contender's time: traceanalyze's readers import pyarrow lazily (so
# format sniffing stays light), so it is imported here for all, before the clock starts.
import pyarrow.compute, pyarrow.csv
if kind == "traceanalyze" and fmt == "ncu":
    from traceanalyze.readers.ncu.ncu_csv import read_ncu_csv
    def run():
        t = read_ncu_csv(path)
        return t.kernel_metrics.height
elif kind in ("traceanalyze", "traceanalyze careful path"):
    from traceanalyze.readers.smi import smi_csv
    if kind != "traceanalyze":  # what a file the fast scan declines costs
        smi_csv._smi_fast = lambda *a, **k: None
    def run():
        return smi_csv.read_smi_csv(path, tz="UTC").gpu_samples.height
elif kind == "pyarrow":
    import pyarrow.csv as pacsv
    opts = pacsv.ReadOptions(skip_rows=skip, block_size=1 << 24)
    def run():
        return pacsv.read_csv(path, read_options=opts).num_rows
else:
    import polars as pl
    def run():
        return pl.read_csv(path, skip_rows=skip, infer_schema_length=10000).height
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
rows = run()
elapsed = time.perf_counter() - t0
r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
rss = r1.ru_maxrss * 1024
print(json.dumps({"s": elapsed, "cpu_s": cpu, "rows": rows, "peak_rss_bytes": rss}))
"""

KINDS = ("traceanalyze", "pyarrow", "polars")


def build_ncu(rows: int) -> tuple[Path, int]:
    """(path, lines before the header) of an ncu long CSV with `rows` metric rows."""
    raw = NCU_SOURCE.read_bytes()
    lines = raw.splitlines(keepends=True)
    h = next(i for i, ln in enumerate(lines) if ln.startswith(b'"ID",'))
    out = DATA / f"ncu_csv_long_{rows}.csv"
    if out.exists():
        return out, h
    head, data = lines[: h + 1], lines[h + 1 :]
    assert all(d.startswith(b'"0",') for d in data)
    tail = [d[len(b'"0",') :] for d in data]
    DATA.mkdir(exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.writelines(head)
        launches, rest = divmod(rows, len(data))
        for i in range(launches):
            pre = b'"%d",' % i
            f.write(b"".join(pre + t for t in tail))
        f.writelines(b'"%d",' % launches + t for t in tail[:rest])
    tmp.replace(out)
    return out, h


def build_smi(rows: int) -> Path:
    """A realistic nvidia-smi log with units: 8 GPUs per sample, 20 ms apart, some [N/A]."""
    import numpy as np
    import polars as pl

    out = DATA / f"smi_csv_units_{rows}.csv"
    if out.exists():
        return out
    gpus = 8
    rng = np.random.default_rng(0)
    idx = np.arange(rows) % gpus
    sample = np.arange(rows) // gpus
    t0 = np.datetime64("2024-06-01T12:00:00.000", "ms")
    stamps = t0 + (sample * 20 + idx // 2).astype("timedelta64[ms]")
    busy = rng.random(rows) < 0.8
    power = np.where(busy, rng.normal(450, 60, rows), rng.normal(80, 5, rows)).clip(50, 700)
    df = pl.DataFrame(
        {
            "timestamp": pl.Series(stamps).dt.strftime("%Y/%m/%d %H:%M:%S%.3f"),
            "index": idx,
            "power": power.round(2),
            "na": rng.random(rows) < 0.02,
            "sm": np.where(busy, 1980, 345) - (rng.random(rows) < 0.1) * 15,
            "temp": rng.integers(30, 80, rows),
            "util": np.where(busy, rng.integers(80, 101, rows), rng.integers(0, 5, rows)),
            "mutil": rng.integers(0, 60, rows),
            "mem": rng.integers(1, 81559, rows),
            "reasons": np.where(busy, 4, 1),
        }
    )
    line = pl.concat_str(
        [
            pl.col("timestamp"),
            pl.col("index").cast(pl.String),
            pl.format(
                "GPU-{}-1c2d-3e4f-5a6b-7c8d9e0f1a2b", pl.col("index").cast(pl.String).str.zfill(8)
            ),
            pl.lit("NVIDIA H100 80GB HBM3"),
            pl.when(pl.col("na"))
            .then(pl.lit("[N/A]"))
            .otherwise(pl.col("power").cast(pl.String) + " W"),
            pl.col("sm").cast(pl.String) + " MHz",
            pl.lit("2619 MHz"),
            pl.col("temp").cast(pl.String),
            pl.col("util").cast(pl.String) + " %",
            pl.col("mutil").cast(pl.String) + " %",
            pl.col("mem").cast(pl.String) + " MiB",
            pl.lit("P0"),
            pl.format("0x{}", pl.col("reasons").cast(pl.String).str.zfill(16)),
        ],
        separator=", ",
    )
    header = (
        "timestamp, index, uuid, name, power.draw [W], clocks.current.sm [MHz], "
        "clocks.current.memory [MHz], temperature.gpu, utilization.gpu [%], "
        "utilization.memory [%], memory.used [MiB], pstate, clocks_event_reasons.active\n"
    )
    DATA.mkdir(exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(header)
        f.write("\n".join(df.select(line.alias("l"))["l"].to_list()))
        f.write("\n")
    tmp.replace(out)
    return out


def child(kind: str, fmt: str, path: Path, skip: int) -> dict[str, float]:
    res = subprocess.run(
        [sys.executable, "-c", CHILD, kind, fmt, str(path), str(skip)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    out: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def best_of(fmt: str, path: Path, skip: int, rounds: int) -> dict[str, dict[str, float]]:
    best: dict[str, dict[str, float]] = {}
    kinds = (*KINDS, "traceanalyze careful path") if fmt == "smi" else KINDS
    for _ in range(rounds):
        for kind in kinds:
            r = child(kind, fmt, path, skip)
            if kind not in best or r["s"] < best[kind]["s"]:
                best[kind] = r
    return best


def table(title: str, results: dict[str, dict[str, float]]) -> float:
    base = results["pyarrow"]["s"]
    print(f"\n{title}")
    cpu_base = results["pyarrow"]["cpu_s"]
    print(
        f"{'reader':<28} {'best wall (s)':>13} {'ratio':>6} {'its CPU (s)':>12} "
        f"{'CPU ratio':>9} {'rows':>10} {'peak RSS (MB)':>14}"
    )
    for k, r in results.items():
        print(
            f"{k:<28} {r['s']:>13.3f} {r['s'] / base:>6.2f} {r['cpu_s']:>12.2f} "
            f"{r['cpu_s'] / cpu_base:>9.2f} {int(r['rows']):>10,} "
            f"{r['peak_rss_bytes'] / 1e6:>14.0f}"
        )
    ratio = results["traceanalyze"]["s"] / base
    print(f"traceanalyze / pyarrow = {ratio:.2f} (goal: <= 2.0)")
    return ratio


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not NCU_SOURCE.exists():
        print(f"ncu part skipped: {NCU_SOURCE} is absent")
    else:
        path, skip = build_ncu(args.rows)
        mb = path.stat().st_size / 1e6
        print(f"ncu input: {path.relative_to(ROOT)} ({args.rows:,} metric rows, {mb:.0f} MB)")
        table("Nsight Compute long CSV", best_of("ncu", path, skip, args.rounds))
    path = build_smi(args.rows)
    mb = path.stat().st_size / 1e6
    print(f"\nnvidia-smi input: {path.relative_to(ROOT)} ({args.rows:,} rows, {mb:.0f} MB)")
    table("nvidia-smi --query-gpu CSV with units", best_of("smi", path, 0, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
