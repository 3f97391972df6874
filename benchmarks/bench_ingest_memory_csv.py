"""Peak memory of `traceanalyze ingest` on nvprof and nvidia-smi CSVs of 0.25 to 1 GB.

Builds, under the git-ignored `bench-data/` (or `--data DIR`), from real rows of
`../shared/traces`:

* nvprof GPU traces: the magus GTX 1080 Ti trace (`nvprof_csv/magus_matrixMul_gtx1080ti_
  gputrace.csv`, 17-column layout, ` [NNNN]` name suffixes) with its data rows repeated under its
  preamble, header and units row;
* nvidia-smi `--query-gpu --format=csv` logs: the real RTX 5070 NVML sampler rows
  (`smi_logs/roofline_custom_nvml_sampler_rtx5070.csv`, ~108 ms apart) written as nvidia-smi
  prints them (`2026/07/22 21:41:45.304, 0, GPU-…, NVIDIA GeForce RTX 5070, 25.86 W, 40, …`),
  for 4 GPUs, one repetition a minute later than the previous (no real nvidia-smi log is in
  `../shared`: MANIFEST.md);
* dumpGpuPower stdout (`--kinds dump dump_backwards`): the same sampler rows as the program
  prints them (`[n] Power: 25.8640, Util: 2, CoreClockMhz: 1027, MemClockMHz: 14001,
  Timestamp_ns: …, Temp: 40`) between its `Selected device` and `Starting power measurement` /
  `Closing profiler` energy lines, one repetition after the previous (`dump`: samples in time
  order, the streaming merge), or the repetitions written last first (`dump_backwards`: stamps
  going back at each repetition, so the rows are sorted by spilled runs).

Each file is ingested by `python -m traceanalyze ingest FILE --store DIR` in its own process;
its peak RSS is `ru_maxrss` of `os.wait4` on it (the process and any children it waited for).
With `--gzip` each is also ingested gzipped (the bound stays on the uncompressed size). Printed
per file: input MB (uncompressed), rows written, seconds, peak RSS MB, the bound
0.25 x size + 150 MB and peak / bound. The written kernels' `name` column chunks are checked to
be dictionary-encoded.

    python benchmarks/bench_ingest_memory_csv.py                 # 0.25, 0.5, 1 GB of each
    python benchmarks/bench_ingest_memory_csv.py --sizes 0.1 --kinds nvprof
    python benchmarks/bench_ingest_memory_csv.py --sizes 0.5 1 --kinds dump dump_backwards
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
NVPROF = TRACES / "nvprof_csv" / "magus_matrixMul_gtx1080ti_gputrace.csv"
SAMPLER = TRACES / "smi_logs" / "roofline_custom_nvml_sampler_rtx5070.csv"
MB = 1e6


def build_nvprof(out: Path, size: int) -> None:
    lines = NVPROF.read_bytes().splitlines(keepends=True)
    head, data = lines[:5], b"".join(lines[5:])
    assert head[3].startswith(b'"Start","Duration"') and head[4].startswith(b"ms,ms,")
    with open(out, "wb") as f:
        f.writelines(head)
        for _ in range(max(1, (size - sum(map(len, head))) // len(data))):
            f.write(data)


SMI_HEADER = (
    "timestamp, index, uuid, name, power.draw [W], temperature.gpu, clocks.current.sm [MHz], "
    "clocks.current.memory [MHz], utilization.gpu [%]\n"
)


def build_smi(out: Path, size: int) -> None:
    rows = [ln.split(",") for ln in SAMPLER.read_text().splitlines()[1:]]
    stamps = [datetime.fromisoformat(r[0].replace("Z", "+00:00")) for r in rows]
    t0 = stamps[0].replace(second=0, microsecond=0)
    span = int((stamps[-1] - t0).total_seconds() // 60) + 1  # minutes one repetition covers
    # Per real row and GPU: the minute it falls in, the seconds part, the rest of the line.
    tails = []
    for r, t in zip(rows, stamps, strict=True):
        power, temp, sm, mem, util = r[1:6]
        minute = int((t - t0).total_seconds() // 60)
        for gpu in range(4):
            rest = (
                f", {gpu}, GPU-5070000{gpu}-aaaa-bbbb-cccc-dddddddddddd, NVIDIA GeForce RTX 5070,"
                f" {float(power):.2f} W, {temp}, {sm} MHz, {mem} MHz, {util} %\n"
            )
            tails.append((minute, f"{t.second:02d}.{t.microsecond // 1000:03d}{rest}"))
    with open(out, "w") as f:
        f.write(SMI_HEADER)
        written, rep = len(SMI_HEADER), 0
        while written < size:
            prefixes = [
                (t0 + timedelta(minutes=rep * span + m)).strftime("%Y/%m/%d %H:%M:")
                for m in range(span)
            ]
            block = "".join(prefixes[m] + t for m, t in tails)
            f.write(block)
            written += len(block)
            rep += 1


def build_dump(out: Path, size: int, backwards: bool = False) -> None:
    rows = [ln.split(",") for ln in SAMPLER.read_text().splitlines()[1:]]
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    ns = [
        (datetime.fromisoformat(r[0].replace("Z", "+00:00")) - epoch)
        // timedelta(microseconds=1)
        * 1000
        for r in rows
    ]
    span = ns[-1] - ns[0] + 100_000_000
    line = (
        "[{}] Power: {:.4f}, Util: {}, CoreClockMhz: {}, MemClockMHz: {}, "
        "Timestamp_ns: {}, Temp: {}\n"
    )
    one = sum(
        len(line.format(0, float(r[1]), r[5], r[3], r[4], t, r[2]))
        for r, t in zip(rows, ns, strict=True)
    )
    reps = max(1, size // one)
    with open(out, "w") as f:
        f.write("Initializing NVML... Success\n")
        f.write("Getting device... Selected device 0: NVIDIA GeForce RTX 5070\n\n\n")
        f.write(f"Starting power measurement with energy 123456789 at {ns[0] - 1000}\n")
        n = 0
        for rep in reversed(range(reps)) if backwards else range(reps):
            f.write(
                "".join(
                    line.format(n + i, float(r[1]), r[5], r[3], r[4], t + rep * span, r[2])
                    for i, (r, t) in enumerate(zip(rows, ns, strict=True))
                )
            )
            n += len(rows)
        end = ns[-1] + (reps - 1) * span + 1000
        f.write(f"Application terminated. Closing profiler with energy 987654321 at {end}\n")
        f.write("Shutting down NVML... Success\n")


def ingest(path: Path, store: Path) -> tuple[float, int]:
    """(seconds, peak RSS bytes) of one `traceanalyze ingest` process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "traceanalyze", "ingest", str(path), "--store", str(store)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"ingest of {path} failed with exit code {proc.returncode}")
    return elapsed, usage.ru_maxrss * 1024  # KiB on Linux


def written(store: Path) -> tuple[int, bool | None]:
    """(rows in every table, whether every kernels `name` chunk is dictionary-encoded, None
    when there are no kernels)."""
    import pyarrow.parquet as pq

    rows, dictionary = 0, None
    for part in store.rglob("*.parquet"):
        meta = pq.ParquetFile(part).metadata
        rows += meta.num_rows if "sources" not in part.parts else 0
        if "kernels" in part.parts:
            i = meta.schema.to_arrow_schema().get_field_index("name")
            encs = [set(meta.row_group(g).column(i).encodings) for g in range(meta.num_row_groups)]
            ok = all(e & {"RLE_DICTIONARY", "PLAIN_DICTIONARY"} for e in encs)
            dictionary = ok if dictionary is None else dictionary and ok
    return rows, dictionary


def measure(path: Path) -> float:
    """Ingest `path` once, print its line; peak / bound. The bound is on the input's size
    (a gzip's compressed size would make it a bound on a different thing)."""
    size = path.stat().st_size if path.suffix != ".gz" else path.with_suffix("").stat().st_size
    store = Path(tempfile.mkdtemp(prefix="ingest-mem-"))
    try:
        secs, peak = ingest(path, store / "st")
        rows, dictionary = written(store / "st")
    finally:
        shutil.rmtree(store, ignore_errors=True)
    bound = 0.25 * size + 150 * MB
    print(
        f"{path.name:<38} {size / MB:7.0f} {rows:11,} {secs:6.1f} {peak / MB:8.0f} "
        f"{bound / MB:8.0f} {peak / bound:6.2f}"
        + ("" if dictionary is None else f"  kernels.name dictionary: {dictionary}")
    )
    if dictionary is False:
        raise SystemExit("kernels.name is not dictionary-encoded in every row group")
    return peak / bound


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.25, 0.5, 1.0], help="GB")
    ap.add_argument(
        "--kinds",
        nargs="+",
        default=["nvprof", "smi"],
        choices=["nvprof", "smi", "dump", "dump_backwards"],
    )
    ap.add_argument("--data", type=Path, default=ROOT / "bench-data")
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs")
    ap.add_argument("--gzip", action="store_true", help="also ingest each input gzipped")
    args = ap.parse_args()
    if not (NVPROF.exists() and SAMPLER.exists()):
        print(f"skipped: {TRACES} is absent")
        return 0
    args.data.mkdir(parents=True, exist_ok=True)
    builders = {
        "nvprof": build_nvprof,
        "smi": build_smi,
        "dump": build_dump,
        "dump_backwards": lambda out, size: build_dump(out, size, backwards=True),
    }
    print(
        f"{'input':<38} {'MB':>7} {'rows':>11} {'s':>6} {'peak MB':>8} {'bound MB':>8} {'ratio':>6}"
    )
    worst = 0.0
    for kind in args.kinds:
        for gb in args.sizes:
            ext = "txt" if kind.startswith("dump") else "csv"
            path = args.data / f"ingest_mem_{kind}_{gb:g}GB.{ext}"
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                builders[kind](tmp, int(gb * 1e9))
                tmp.replace(path)
            inputs = [path]
            if args.gzip:
                gz = path.with_name(path.name + ".gz")
                if not gz.exists():
                    with open(path, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                inputs.append(gz)
            for p in inputs:
                worst = max(worst, measure(p))
            if not args.keep:
                for p in inputs:
                    p.unlink()
    # A figure, not a test: reported (docs/scale.md), not failed on.
    print(f"worst peak / bound: {worst:.2f}" + (" (above the goal)" if worst > 1.0 else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
