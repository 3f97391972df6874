"""A store of ten thousand runs: commit time as the store grows, and reading commands over it.

    python benchmarks/bench_store_10k.py [--sources 10000] [--before-rev REV] [--no-before]

Makes (once, cached under bench-data/store10k-<n>/) a store of `--sources` small sources, each
a real small input read once and written again under its own source id (as a fleet of runs
would be): the MLPerf ResNet-50 result logs of ../shared/sets (a `runs` row and ~35 epoch
iterations each), the project's iteration-log fixture, and the NVML sampler log of
../shared/traces (gpu_samples), in turn. Each source is one `Store.stage` + `Store.commit`, as
`traceanalyze ingest FILE` does. Then prints:

* **commit**: the `Store.commit` time of one source as the store grows: the median and the
  slowest of the 50 commits before 100, 1,000 and 10,000 sources, by a long-lived writer (one
  `Store`, as `ingest` of many files or a service does; the slowest is the one that writes a
  checkpoint), and by a fresh process (as one `traceanalyze ingest FILE`: its first read of the
  store, the commit after it, and the whole process). "before": the same commit by the code of
  `--before-rev` (the whole-manifest store) on a layout-2 copy of the store at that size, 5
  commits each, in its own interpreter.
* **read**: `traceanalyze summary`, `variability` and `runs --csv` over the whole store, each
  in a fresh process under `/usr/bin/time`: wall time and peak RSS; "before": the code of
  `--before-rev` on a layout-2 copy of the same store.

Timings are from a shared, loaded machine: quote them as ranges over runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared"
MILESTONES = (100, 1000, 10_000)
WINDOW = 50

# Run in a fresh interpreter with a chosen traceanalyze on sys.path (argv: store, source
# index, repeats): stage and commit `repeats` new sources, print the commit times as JSON.
COMMIT_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[4])
t0 = time.perf_counter()
import traceanalyze as ta
from traceanalyze.store import Store
sys.path.insert(0, sys.argv[5])
from bench_store_10k import source_tables
st = Store(sys.argv[1])
r0 = time.perf_counter()
st.source_ids()  # the first read of the store, as `ingest` does before staging
read = time.perf_counter() - r0
times = []
for k in range(int(sys.argv[3])):
    staged = st.stage(source_tables(int(sys.argv[2]) + k))
    c0 = time.perf_counter()
    st.commit(staged)
    times.append(time.perf_counter() - c0)
    st.discard(staged)
print(json.dumps({"commits_s": times, "read_s": read, "process_s": time.perf_counter() - t0}))
"""


def templates() -> list:
    """The real small inputs, each read once (Tables)."""
    import traceanalyze as ta

    mlperf = sorted((SHARED / "sets" / "mlperf_training_resnet50").rglob("result_*.txt"))
    paths = [*mlperf, ROOT / "fixtures" / "iterlog-resnet50-cpu" / "iterations_bs2_rank0.csv"]
    paths.append(SHARED / "traces" / "smi_logs" / "roofline_custom_nvml_sampler_rtx5070.csv")
    missing = [p for p in paths if not p.is_file()]
    if missing or len(mlperf) < 2:
        raise SystemExit(
            f"needs ../shared (sets/mlperf_training_resnet50, traces/smi_logs): {missing}"
        )
    return [ta.read(p) for p in paths]


_TEMPLATES: list = []


def source_tables(i: int):  # -> Tables
    """Source number i: template i % k under its own id and file name."""
    import polars as pl

    if not _TEMPLATES:
        _TEMPLATES.extend(templates())
    t = _TEMPLATES[i % len(_TEMPLATES)]
    sid = hashlib.sha256(f"bench-store-10k {i}".encode()).hexdigest()[:16]
    t = t.with_source_id(sid)
    src = t.sources.with_columns(
        pl.lit(f"run{i:05d}/{Path(t.sources['path'][0]).name}").alias("path")
    )
    from traceanalyze.tables import Tables

    return Tables.build(**{**dict(t.items()), "sources": src})


def make_store(store: Path, n: int, before_tree: Path | None) -> dict:
    """Build the store one commit per source; at each milestone, measure (see module doc)."""
    from traceanalyze.store import Store

    st = Store(store)
    warm: list[float] = []
    out: dict = {}
    for i in range(n):
        staged = st.stage(source_tables(i))
        t0 = time.perf_counter()
        st.commit(staged)
        warm.append(time.perf_counter() - t0)
        st.discard(staged)
        if i + 1 in MILESTONES:
            window = warm[-WINDOW:]
            row = {"warm_median_s": statistics.median(window), "warm_max_s": max(window)}
            row.update(fresh_commit(store, 10_000_000 + i, ROOT))
            if before_tree is not None:
                row.update(before_commits(store, before_tree, 20_000_000 + i))
            out[str(i + 1)] = row
            print(f"{i + 1} sources: {json.dumps(row)}", file=sys.stderr, flush=True)
    return out


def _child(store: Path, first: int, repeats: int, tree: Path) -> dict:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            COMMIT_CHILD,
            str(store),
            str(first),
            str(repeats),
            str(tree),
            str(ROOT / "benchmarks"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def fresh_commit(store: Path, index: int, tree: Path) -> dict:
    """One new source committed by a fresh process, then removed again (so the store keeps
    its n sources): the commit alone and the whole process."""
    from traceanalyze.store import Store

    got = _child(store, index, 1, tree)
    sid = source_tables(index).sources["source_id"][0]
    Store(store).remove(sid)
    return {
        "fresh_read_s": got["read_s"],
        "fresh_commit_s": got["commits_s"][0],
        "fresh_process_s": got["process_s"],
    }


def before_commits(store: Path, tree: Path, index: int) -> dict:
    """5 commits by the old code on a layout-2 copy of the store (its manifest lists every
    file; no log)."""
    with tempfile.TemporaryDirectory(dir=store.parent) as tmp:
        copy = layout2_copy(store, Path(tmp) / "st")
        got = _child(copy, index, 5, tree)
    return {
        "before_median_s": statistics.median(got["commits_s"]),
        "before_max_s": max(got["commits_s"]),
    }


def layout2_copy(store: Path, copy: Path) -> Path:
    """The store as the whole-manifest code wrote it: every file listed in the manifest, no
    `version`, no log, no leases."""
    from traceanalyze.store import Store

    Store(store).checkpoint()
    shutil.copytree(store, copy, symlinks=True, ignore=shutil.ignore_patterns("_log", "_leases"))
    doc = json.loads((copy / "traceanalyze-store.json").read_text())
    old = {
        "layout": 2,
        "schema_version": doc["schema_version"],
        "sources": doc["sources"],
        "garbage": [{"path": g["path"], "since": g["since"]} for g in doc["garbage"]],
    }
    (copy / "traceanalyze-store.json").write_text(json.dumps(old, indent=1, sort_keys=True))
    return copy


def old_tree(rev: str, dest: Path) -> Path:
    """`traceanalyze/` of an older revision, extracted under dest (git archive)."""
    dest.mkdir(parents=True, exist_ok=True)
    arc = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "traceanalyze"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arc, check=True)
    return dest


READS = (["summary"], ["variability"], ["runs", "--csv"])


def read_commands(store: Path, tree: Path) -> list[dict]:
    """Each reading command in a fresh process under /usr/bin/time (traceanalyze from `tree`):
    wall and peak RSS."""
    rows = []
    env = {**os.environ, "PYTHONPATH": str(tree)}
    for args in READS:
        cmd = [
            "/usr/bin/time",
            "-f",
            "TIME %e %M",
            sys.executable,
            "-m",
            "traceanalyze",
            *args,
            "--store",
            str(store),
        ]
        # cwd = the tree: `python -m` puts the working directory first on sys.path
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, cwd=tree)
        line = [ln for ln in r.stderr.splitlines() if ln.startswith("TIME ")][-1].split()
        rows.append(
            {
                "command": " ".join(args),
                "exit": r.returncode,
                "wall_s": float(line[1]),
                "peak_rss_mib": int(line[2]) / 1024,
                "out_lines": r.stdout.count("\n"),
                "err": r.stderr.splitlines()[0] if r.returncode else "",
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sources", type=int, default=10_000)
    ap.add_argument("--before-rev", default="8ae913d", help="the last whole-manifest revision")
    ap.add_argument("--no-before", action="store_true", help="skip the old code's runs")
    ap.add_argument("--reads-only", action="store_true", help="only the reading commands")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each reading command")
    a = ap.parse_args()
    data = ROOT / "bench-data"
    store = data / f"store10k-{a.sources}"
    results = data / f"store10k-{a.sources}.json"
    before = None if a.no_before else old_tree(a.before_rev, data / f"tree-{a.before_rev}")
    if not a.reads_only:
        if store.exists():
            shutil.rmtree(store)
        t0 = time.perf_counter()
        commits = make_store(store, a.sources, before)
        print(f"made {store} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        results.write_text(json.dumps(commits, indent=1))
    print_commits(json.loads(results.read_text()), a.before_rev)
    reads = [read_commands(store, ROOT) for _ in range(a.repeat)]
    old: list[list[dict]] = []
    if before is not None:
        copy = data / f"store10k-{a.sources}-layout2"
        if copy.exists():
            shutil.rmtree(copy)
        layout2_copy(store, copy)
        old = [read_commands(copy, before) for _ in range(a.repeat)]
    print_reads(a.sources, reads, old, a.before_rev)


def print_commits(commits: dict, rev: str) -> None:
    print(f"commit of one source (s), store of n sources; before = {rev}")
    print(
        f"{'n':>6} {'warm med':>9} {'warm max':>9} {'1st read':>9} {'fresh':>7} {'fresh proc':>11} "
        f"{'before med':>11} {'before max':>11}"
    )
    for n, r in commits.items():
        print(
            f"{n:>6} {r['warm_median_s']:>9.4f} {r['warm_max_s']:>9.4f} "
            f"{r.get('fresh_read_s', float('nan')):>9.4f} "
            f"{r['fresh_commit_s']:>7.4f} {r['fresh_process_s']:>11.2f} "
            f"{r.get('before_median_s', float('nan')):>11.4f} "
            f"{r.get('before_max_s', float('nan')):>11.4f}"
        )


def _span(vals: list[float], fmt: str) -> str:
    lo, hi = min(vals), max(vals)
    return format(lo, fmt) if lo == hi else f"{lo:{fmt}}-{hi:{fmt}}"


def print_reads(n: int, reads: list[list[dict]], old: list[list[dict]], rev: str) -> None:
    print(f"\nreading commands over {n} sources (fresh process each; ranges over runs)")
    print(
        f"{'command':<12} {'exit':>4} {'wall s':>10} {'peak MiB':>10} {'lines':>7}"
        f" {'before wall s':>14} {'before MiB':>11}"
    )
    for i, args in enumerate(READS):
        now = [r[i] for r in reads]
        was = [r[i] for r in old]
        line = (
            f"{' '.join(args):<12} {max(r['exit'] for r in now):>4} "
            f"{_span([r['wall_s'] for r in now], '.2f'):>10} "
            f"{_span([r['peak_rss_mib'] for r in now], '.0f'):>10} {now[0]['out_lines']:>7}"
        )
        if was:
            line += (
                f" {_span([r['wall_s'] for r in was], '.2f'):>14}"
                f" {_span([r['peak_rss_mib'] for r in was], '.0f'):>11}"
            )
        print(line + "".join(f" {r['err']}" for r in now if r["err"]))


if __name__ == "__main__":
    main()
