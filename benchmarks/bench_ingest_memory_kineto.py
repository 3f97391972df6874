"""Peak memory of `traceanalyze ingest` on large Kineto JSON traces (issue 10, "Scale").

    python benchmarks/bench_ingest_memory_kineto.py [--sizes 0.25,0.5,1] [--gzip] [--before]
                                                     [--data DIR] [--keep]

Builds Kineto traces of about 0.25, 0.5 and 1 GB from the real events of
../shared/traces/kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz (ResNet-50 on
V100, 68,692 events, 15.4 MB): the events are written again and again, each copy shifted past the
previous one in time (whole µs added to `ts`, the ns fraction kept as written) and with its
correlation, External id and flow ids shifted, so every copy is new work for the reader. The
inputs go to `bench-data/kineto-scale/` (git-ignored; `--data` for another directory) and are
reused when present. `--gzip` adds a gzipped copy of the largest input.

Each input is ingested by `python -m traceanalyze ingest FILE --store DIR` in a fresh process;
its peak RSS is the child's `ru_maxrss` from `wait4` (the ingest process and any children it
waited for). The table compares it with the goal, 0.25 × input size + 150 MB (of the JSON text,
for the .gz too). `--before` also ingests the largest input as before streaming (the whole-file
`read_kineto_json`, then the same Parquet sink), for comparison. Last, the kernels' `name`
column chunks of the written Parquet are checked for dictionary encoding.
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
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
SOURCE = (
    ROOT.parent
    / "shared"
    / "traces"
    / "kineto_json"
    / "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
)
DATA = ROOT / "bench-data" / "kineto-scale"
MB = 1_000_000
_MARK = b"\x00@@\x00"  # placeholder for a shifted value inside one event's encoded text


# --- inputs ---------------------------------------------------------------------------------------


def _templates(doc: dict[str, Any]) -> tuple[list[list[bytes]], list[list[tuple[str, Any]]], int]:
    """Each event encoded once with placeholders for the values a copy shifts: its pieces, and
    per placeholder which value (`ts` text, or an id and its kind) goes there."""
    pieces, slots = [], []
    ts = [float(bytes(e["ts"])) for e in doc["traceEvents"] if isinstance(e.get("ts"), msgspec.Raw)]
    span_us = int(max(ts) - min(ts)) + 1000
    for e in doc["traceEvents"]:
        slot: list[tuple[str, Any]] = []
        if "ts" in e:
            slot.append(("ts", e["ts"]))
            e["ts"] = msgspec.Raw(_MARK)
        if "id" in e and isinstance(e["id"], int):
            slot.append(("id", e["id"]))
            e["id"] = msgspec.Raw(_MARK)
        args = e.get("args")
        if isinstance(args, dict):
            for key in ("External id", "correlation"):
                if isinstance(args.get(key), int):
                    slot.append(("id", args[key]))
                    args[key] = msgspec.Raw(_MARK)
        pieces.append(msgspec.json.encode(e).split(_MARK))
        slots.append(slot)
    return pieces, slots, span_us


def _shifted_ts(text: Any, shift_us: int) -> bytes:
    s = bytes(text).decode() if isinstance(text, msgspec.Raw) else str(text)
    whole, dot, frac = s.partition(".")
    return f"{int(whole) + shift_us}{dot}{frac}".encode()


def build_input(dest: Path, target_bytes: int) -> int:
    """Write a trace of about `target_bytes` to `dest`; returns the number of events."""
    raw = gzip.decompress(SOURCE.read_bytes())
    # floats stay as their text (msgspec.Raw): ns fractions are kept exactly
    dec = msgspec.json.Decoder(float_hook=lambda s: msgspec.Raw(s.encode()))
    doc = dec.decode(raw)
    head = {k: v for k, v in doc.items() if k not in ("traceEvents",)}
    pieces, slots, span_us = _templates(doc)
    ev_bytes = sum(len(b"".join(p)) + 20 for p in pieces)
    copies = max(1, round(target_bytes / ev_bytes))
    id_stride = 10_000_000
    events = 0
    tmp = dest.with_suffix(".part")
    with open(tmp, "wb") as f:
        f.write(msgspec.json.encode(head)[:-1] + b',"traceEvents":[\n')
        first = True
        for k in range(copies):
            out = []
            for p, slot in zip(pieces, slots, strict=True):
                vals = [
                    _shifted_ts(v, k * span_us) if kind == "ts" else b"%d" % (v + k * id_stride)
                    for kind, v in slot
                ]
                buf = [p[0]]
                for v, rest in zip(vals, p[1:], strict=True):
                    buf += (v, rest)
                out.append(b"".join(buf))
            f.write((b"" if first else b",\n") + b",\n".join(out))
            first = False
            events += len(out)
        f.write(b"\n]}\n")
    tmp.rename(dest)
    return events


def _gzip(src: Path, dest: Path) -> None:
    try:
        from isal import igzip as gz  # ~5x faster than zlib at level 1

        opener: Any = gz.open
    except ImportError:
        opener = gzip.open
    with open(src, "rb") as f, opener(str(dest) + ".part", "wb", compresslevel=1) as g:
        shutil.copyfileobj(f, g, 1 << 22)
    os.rename(str(dest) + ".part", dest)


# --- measurement ----------------------------------------------------------------------------------


# Runs the command and prints its peak RSS. A small process of its own: a child's ru_maxrss
# counts the pages it shares with its parent between fork and exec, so measuring straight from
# this (large, after building inputs) process would report this process's size.
_MEASURE = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print(u.ru_maxrss, u.ru_utime + u.ru_stime, r.returncode)"
)


def _run(argv: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak RSS MB (the largest ru_maxrss, KiB on Linux, of the command's process
    tree) and CPU seconds (user + system, steadier than wall time on a shared machine)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", _MEASURE, *argv]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    maxrss, cpu, rc = p.stdout.split()[-3:]
    if p.returncode or rc != "0":
        raise SystemExit(f"{' '.join(argv)} failed ({rc}):\n{p.stderr}")
    return wall, int(maxrss) / 1024, float(cpu)


def _dictionary_encoded(store: Path) -> tuple[bool, int]:
    """Whether every row group's kernels `name` chunk uses a dictionary encoding."""
    import pyarrow.parquet as pq

    files = sorted(store.glob("kernels/source_id=*/*.parquet"))
    ok, groups = bool(files), 0
    for f in files:
        meta = pq.ParquetFile(f).metadata
        col = meta.schema.to_arrow_schema().get_field_index("name")
        for i in range(meta.num_row_groups):
            enc = meta.row_group(i).column(col).encodings
            ok &= any("DICTIONARY" in e for e in enc)
            groups += 1
    return ok, groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="0.25,0.5,1", help="input sizes in GB (1 GB = 1e9 bytes)")
    ap.add_argument("--gzip", action="store_true", help="also a gzipped copy of the largest")
    ap.add_argument("--before", action="store_true", help="also whole-file ingest, largest")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--keep", action="store_true", help="keep the stores (in the data dir)")
    a = ap.parse_args()
    if not SOURCE.exists():
        raise SystemExit(f"{SOURCE} is absent (../shared/traces not here)")
    a.data.mkdir(parents=True, exist_ok=True)
    inputs: list[tuple[str, Path]] = []
    for gb in (float(x) for x in a.sizes.split(",")):
        dest = a.data / f"resnet50_x_{gb:g}GB.json"
        if not dest.exists():
            print(f"building {dest.name} ...", file=sys.stderr, flush=True)
            build_input(dest, int(gb * 1e9))
        inputs.append(("stream", dest))
    largest = inputs[-1][1]
    if a.gzip:
        big = largest
        gz = big.with_name(big.name + ".gz")
        if not gz.exists():
            print(f"gzipping {big.name} ...", file=sys.stderr, flush=True)
            _gzip(big, gz)
        inputs.append(("stream", gz))
    if a.before:
        inputs.insert(0, ("whole (before)", largest))

    tiny = SOURCE.with_name("hta_triton_a100_trace.json.gz")
    if tiny.exists():  # what an ingest process costs before any data: imports, store, sink
        with tempfile.TemporaryDirectory(dir=a.data) as tmp:
            cmd = [sys.executable, "-m", "traceanalyze", "ingest", str(tiny), "--store", tmp + "/s"]
            floor_s, floor_mb, _ = _run(cmd)
        print(f"floor: ingest of {tiny.name} (2 KB): {floor_mb:.0f} MB peak RSS, {floor_s:.2f} s\n")
    print(
        "| input | reader | input MB | events | wall s | CPU s | peak RSS MB | bound MB "
        "| RSS / bound |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    dict_checks = []
    for how, path in inputs:
        size = path.stat().st_size
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as g:
                text = sum(len(b) for b in iter(lambda g=g: g.read(1 << 24), b""))
        else:
            text = size
        events = _count_events(path)
        work = Path(tempfile.mkdtemp(prefix="kineto-ingest-", dir=a.data))
        store = work / "store"
        if how == "stream":
            argv = [
                sys.executable,
                "-m",
                "traceanalyze",
                "ingest",
                str(path),
                "--store",
                str(store),
            ]
        else:  # ingest as before streaming: the whole-file reader, then the same sink
            code = (
                "import sys, traceanalyze as ta, traceanalyze.readers.kineto.kineto_json as k; "
                "del k.stream_kineto_json; ta.ingest(sys.argv[1], sys.argv[2])"
            )
            argv = [sys.executable, "-c", code, str(path), str(store)]
        secs, rss, cpu = _run(argv)
        bound = 0.25 * text / MB + 150  # of the JSON text, for a .gz too
        label = path.name + (f" ({text / MB:.0f} MB of JSON)" if text != size else "")
        print(
            f"| {label} | {how} | {size / MB:.0f} | {events:,} | {secs:.1f} | {cpu:.1f} "
            f"| {rss:.0f} "
            f"| {bound:.0f} | {rss / bound:.2f} |",
            flush=True,
        )
        if how == "stream":
            dict_checks.append((path.name, *_dictionary_encoded(store)))
        if not a.keep:
            shutil.rmtree(work)
    print()
    for name, ok, groups in dict_checks:
        what = "dictionary-encoded" if ok else "NOT all dictionary-encoded"
        print(f"kernels.name of {name}: {groups} row groups, {what}")


def _count_events(path: Path) -> int:
    """Events in a built input: one per line between the array's brackets (as written here)."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    n = 0
    with opener(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            n += chunk.count(b"\n")
    return n - 2  # the header line and the closing line


if __name__ == "__main__":
    main()
