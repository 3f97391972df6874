"""Every analysis command over the store of a 1 GB PyTorch-profiler trace (issue 27, point 1).

    python benchmarks/bench_analyses_1gb.py [--repeat N] [--only CMD,...] [--timeout S]
                                            [--data DIR] [--reuse-store] [--input FILE] [--floor]

The input is the 1 GB Kineto trace `benchmarks/bench_ingest_memory_kineto.py` builds from the real
ResNet-50 one (../shared/traces/kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz,
its events written again and again with shifted times and ids: about 4.7 M events), made by the
same generator and cached as `bench-data/kineto-scale/resnet50_x_1GB.json` (git-ignored;
`--input` names another copy, e.g. the one of another checkout).

`traceanalyze ingest FILE --store S` runs once (measured like the others; `--reuse-store` keeps
`bench-data/analyses-1gb/store` from an earlier run and skips it), then each analysis command runs
on the store as its own process: summary, health, busy, idle, overlap, annotations, ops, launches,
timeline -o PNG, timeline --perfetto JSON, both at once, the same two with a .pftrace, compare S S
--ops, critical-path and stragglers (one rank: it says there is nothing to compare, which is still
the cost of finding that out). Each is measured by `/usr/bin/time -v` (wall clock and maximum
resident set size, which is the largest single process's); where that program is absent, by the
child's `ru_maxrss` from `getrusage(RUSAGE_CHILDREN)` in a small measuring process, and wall time
in this one. The peak reported is the larger of that and the largest sum over the process tree
seen by polling /proc every 50 ms (ingest runs a helper process beside itself). A command
past `--timeout` seconds (default 300) is killed and reported as such. With `--repeat N` every
command runs N times and the table gives the range (min-max). `diagnose` (issue 31) is measured
beside `critical-path`.

Goal (issue 27): every command within 1 GB peak RSS and 10 s on the project's 2-core machine.

`--floor` (issue 27, point 1: ingest within 2x the parse floor) also measures, `--repeat` times,
another `traceanalyze ingest` of the file (into a scratch store) followed by the parse floor: one
process that reads the file and decodes, typed, the five fields every event has (`ph`, `cat`,
`name`, `ts`, `dur`; msgspec, one `Struct` per event, everything else skipped), and prints
ingest / floor per pair (wall clock). `--floor --only ingest` measures the ingest and its floor
alone.

`--hta` (issue 27, point 3) also runs Holistic Trace Analysis 0.5.0 on the same file, in its venv
(`bench-data/hta-venv`, made as `bench_kineto_json.py` makes it): one process that loads the
trace (`TraceAnalysis(trace_dir=DIR)`, DIR holding a link to the file) and computes its kernel
breakdown (`get_gpu_kernel_breakdown(visualize=False)`), against `traceanalyze ingest` plus
`summary` (the sum of their wall times, the larger of their peaks): whole-process wall time and
peak RSS, as ratios. HTA is stopped past `--hta-max-s` seconds (default 600) or `--hta-max-mb` MB
of resident memory (default 12000, polled every 0.2 s) and the table says so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_ingest_memory_kineto as kineto_scale

ROOT = Path(__file__).resolve().parents[1]
INPUT = ROOT / "bench-data" / "kineto-scale" / "resnet50_x_1GB.json"
DATA = ROOT / "bench-data" / "analyses-1gb"
GOAL_S, GOAL_MB = 10.0, 1000.0
TIME = Path("/usr/bin/time")

# A small process of its own measures when /usr/bin/time is absent: a child's ru_maxrss counts
# the pages it shares with its parent between fork and exec (see bench_ingest_memory_kineto.py).
_MEASURE = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[2:], timeout=float(sys.argv[1]),"
    " stdout=subprocess.DEVNULL); u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print(u.ru_maxrss, r.returncode)"
)


def commands(store: Path, out: Path, source: str) -> dict[str, list[str]]:
    s = ["--store", str(store)]
    png, pf, pb = str(out / "t.png"), str(out / "p.json"), str(out / "p.pftrace")
    return {
        "summary": ["summary", *s],
        "health": ["health", *s],
        "busy": ["busy", *s],
        "idle": ["idle", *s],
        "overlap": ["overlap", *s],
        "annotations": ["annotations", *s],
        "ops": ["ops", *s],
        "launches": ["launches", *s],
        "timeline -o png": ["timeline", *s, "-o", png],
        "timeline --perfetto json": ["timeline", *s, "--perfetto", pf],
        "timeline -o png --perfetto json": ["timeline", *s, "-o", png, "--perfetto", pf],
        "timeline --perfetto pftrace": ["timeline", *s, "--perfetto", pb],
        "timeline -o png --perfetto pftrace": ["timeline", *s, "-o", png, "--perfetto", pb],
        "compare S S --ops": ["compare", *s, source, source, "--ops"],
        "critical-path": ["critical-path", *s],
        "diagnose": ["diagnose", *s, "--json"],
        "stragglers": ["stragglers", *s],
    }


def measure(argv: list[str], timeout: float) -> tuple[float, float, str]:
    """Wall seconds, peak RSS MB and the outcome ("ok", "exit N", "timeout").

    The peak is the larger of the kernel's (the largest single process of the tree) and the
    largest sum over the whole process tree seen by polling /proc every 50 ms: `ingest` of a big
    Kineto trace runs a helper process beside itself (readers/kineto/split.py), whose memory
    counts too."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.NamedTemporaryFile("r", suffix=".time") as log:
        if TIME.exists():
            cmd = [str(TIME), "-v", "-o", log.name, *argv]
        else:
            cmd = [sys.executable, "-c", _MEASURE, str(timeout), *argv]
        t0 = time.perf_counter()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True, cwd=ROOT)
            tree_mb = 0.0
            while p.poll() is None:
                if time.perf_counter() - t0 > timeout + 5:
                    p.kill()
                    p.wait()
                    return time.perf_counter() - t0, float("nan"), "timeout"
                tree_mb = max(tree_mb, _tree_rss_mb(p.pid))
                time.sleep(0.05)
            wall = time.perf_counter() - t0
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if TIME.exists():
            text = Path(log.name).read_text()
            kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
            rc = p.returncode
        else:
            if "TimeoutExpired" in stderr:
                return wall, float("nan"), "timeout"
            kib_s, rc_s = stdout.split()[-2:]
            kib, rc = int(kib_s), int(rc_s)
    outcome = "ok" if rc == 0 else f"exit {rc}: " + (stderr.strip().splitlines() or [""])[-1]
    return wall, max(kib / 1024, tree_mb), outcome


def _tree_rss_mb(pid: int) -> float:
    """The summed resident memory of `pid` and its descendants, MB (0 once they are gone)."""
    total, todo = 0.0, [pid]
    while todo:
        q = todo.pop()
        total += _rss_mb(q)
        for task in Path(f"/proc/{q}/task").glob("*"):
            with contextlib.suppress(OSError):  # the process or thread has just ended
                todo += [int(c) for c in (task / "children").read_text().split()]
    return total


# The parse floor of the ingest (issue 27, point 1): read the file and decode, typed, the five
# fields every trace event has (msgspec, a Struct per event; the rest of each event skipped).
FLOOR_CODE = """
import sys, msgspec
class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float | str | None = None
    dur: float | str | None = None
class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event] = []
with open(sys.argv[1], "rb") as f:
    data = f.read()
t = msgspec.json.Decoder(Trace).decode(data)
print(len(t.traceEvents))
"""

HTA_CODE = (
    "import logging, sys; logging.disable(logging.CRITICAL); "
    "from hta.trace_analysis import TraceAnalysis; "
    "TraceAnalysis(trace_dir=sys.argv[1]).get_gpu_kernel_breakdown(visualize=False)"
)


def _rss_mb(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    m = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(m.group(1)) / 1024 if m else 0.0


def _watch(
    proc: subprocess.Popen[bytes], t0: float, max_s: float, max_mb: float
) -> tuple[int, Any, str]:
    """Wait for `proc`, killing it past the bounds: its wait status, rusage and "" or why."""
    outcome = ""
    while True:  # wait4 without blocking: poll() would reap the child and lose its rusage
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - t0 > max_s:
            outcome = f"stopped past {max_s:g} s"
        elif _rss_mb(proc.pid) > max_mb:
            outcome = f"stopped past {max_mb:g} MB"
        if outcome:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.2)
    proc.returncode = 0  # reaped here, not by Popen
    return status, usage, outcome


def run_hta(trace: Path, work: Path, max_s: float, max_mb: float) -> tuple[float, float, str]:
    """Wall s, peak RSS MB and the outcome of HTA's load plus kernel breakdown of `trace`."""
    import bench_kineto_json

    py = bench_kineto_json.hta_python()
    if py is None:
        return float("nan"), float("nan"), "HTA could not be installed"
    tdir = work / "hta-trace"
    shutil.rmtree(tdir, ignore_errors=True)
    tdir.mkdir(parents=True)
    (tdir / trace.name).symlink_to(trace.resolve())
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([str(py), "-c", HTA_CODE, str(tdir)], stdout=err, stderr=err)
        status, usage, outcome = _watch(proc, t0, max_s, max_mb)
        wall = time.perf_counter() - t0
        err.seek(0)
        last = (err.read().decode(errors="replace").strip().splitlines() or [""])[-1]
    if not outcome:
        rc = os.waitstatus_to_exitcode(status)
        outcome = "ok" if rc == 0 else f"exit {rc}: {last}"
    return wall, usage.ru_maxrss / 1024, outcome


def _hta_table(
    rows: dict[str, list[tuple[float, float, str]]], hta: tuple[float, float, str]
) -> None:
    ours_s = min(r[0] for r in rows["ingest"]) + min(r[0] for r in rows["summary"])
    ours_mb = max(min(r[1] for r in rows["ingest"]), min(r[1] for r in rows["summary"]))
    h_s, h_mb, outcome = hta
    print("\n| whole process | wall s | peak RSS MB | outcome |")
    print("|---|---|---|---|")
    print(f"| traceanalyze ingest + summary | {ours_s:.1f} | {ours_mb:.0f} | ok |")
    print(f"| HTA 0.5.0 load + kernel breakdown | {h_s:.1f} | {h_mb:.0f} | {outcome} |")
    if outcome == "ok":
        print(
            f"\nHTA / traceanalyze: {h_s / ours_s:.1f}x the time, {h_mb / ours_mb:.1f}x the memory"
        )
    else:
        print(f"\nHTA not finished ({outcome}): at least {h_s / ours_s:.1f}x the time")


def _range(xs: list[float], fmt: str) -> str:
    lo, hi = min(xs), max(xs)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}–{hi:{fmt}}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated command labels (see the table)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per command")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--reuse-store", action="store_true", help="keep DATA/store if present")
    ap.add_argument("--input", type=Path, default=INPUT, help="the built 1 GB trace")
    ap.add_argument("--hta", action="store_true", help="also HTA 0.5.0, side by side")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also the parse floor, alternating with --repeat more ingests; prints ingest / floor",
    )
    ap.add_argument("--hta-max-s", type=float, default=600.0)
    ap.add_argument("--hta-max-mb", type=float, default=12000.0)
    a = ap.parse_args()
    if not a.input.exists():
        if not kineto_scale.SOURCE.exists():
            raise SystemExit(f"{kineto_scale.SOURCE} is absent (../shared/traces not here)")
        a.input.parent.mkdir(parents=True, exist_ok=True)
        print(f"building {a.input} ...", file=sys.stderr, flush=True)
        kineto_scale.build_input(a.input, int(1e9))
    a.data.mkdir(parents=True, exist_ok=True)
    store, out = a.data / "store", a.data / "out"
    out.mkdir(exist_ok=True)
    ta = [sys.executable, "-m", "traceanalyze"]
    rows: dict[str, list[tuple[float, float, str]]] = {}
    if not (a.reuse_store and store.exists()):
        shutil.rmtree(store, ignore_errors=True)
        rows["ingest"] = [measure([*ta, "ingest", str(a.input), "--store", str(store)], a.timeout)]
        if rows["ingest"][0][2] != "ok":
            raise SystemExit(f"ingest failed: {rows['ingest'][0][2]}")

    for _ in range(a.repeat if a.floor else 0):
        scratch = a.data / "store2"
        run = measure([*ta, "ingest", str(a.input), "--store", str(scratch)], a.timeout)
        rows.setdefault("ingest", []).append(run)
        shutil.rmtree(scratch, ignore_errors=True)
        floor = measure([sys.executable, "-c", FLOOR_CODE, str(a.input)], a.timeout)
        rows.setdefault("parse floor (read + msgspec typed decode)", []).append(floor)
    source = next(store.glob("sources/source_id=*")).name.split("=", 1)[1]
    cmds = commands(store, out, source)
    only = [c for c in a.only.split(",") if c]
    for label in only:
        if label not in cmds and label != "ingest":  # `--only ingest`: no analysis command
            raise SystemExit(f"unknown command {label!r}; known: ingest, {', '.join(cmds)}")
    todo = {k: v for k, v in cmds.items() if not only or k in only}
    if a.hta and ("ingest" not in rows or "summary" not in todo):
        raise SystemExit("--hta needs the ingest and summary rows (no --reuse-store, --only)")
    for _ in range(a.repeat):
        for label, argv in todo.items():
            rows.setdefault(label, []).append(measure([*ta, *argv], a.timeout))
            print(f"  {label}: {rows[label][-1]}", file=sys.stderr, flush=True)
    hta = run_hta(a.input, a.data, a.hta_max_s, a.hta_max_mb) if a.hta else None
    how = "/usr/bin/time -v" if TIME.exists() else "ru_maxrss of the child (getrusage)"
    size = a.input.stat().st_size / 1e6
    print(f"\ninput {a.input.name}: {size:.0f} MB; {os.cpu_count()} CPUs; measured by {how}")
    print(f"goal: <= {GOAL_S:g} s and <= {GOAL_MB:g} MB per command; runs: {a.repeat}\n")
    print("| command (`--store S`) | wall s | peak RSS MB | within goal | outcome |")
    print("|---|---|---|---|---|")
    for label, runs in rows.items():
        walls = [r[0] for r in runs]
        rss = [r[1] for r in runs if r[1] == r[1]]
        ok = max(walls) <= GOAL_S and bool(rss) and max(rss) <= GOAL_MB
        outcome = "; ".join(sorted({r[2] for r in runs}))[:80]
        rss_s = _range(rss, ".0f") if rss else "-"
        within = "yes" if ok else "no"
        print(f"| {label} | {_range(walls, '.1f')} | {rss_s} | {within} | {outcome} |")
    if hta is not None:
        _hta_table(rows, hta)
    floor_rows = rows.get("parse floor (read + msgspec typed decode)")
    if floor_rows:
        ingest, floor = [r[0] for r in rows["ingest"]], [r[0] for r in floor_rows]
        ratios = [i / f for i, f in zip(ingest[-len(floor) :], floor, strict=True)]
        print(
            f"\ningest / parse floor (wall, each ingest with the floor run after it): "
            f"{_range(ratios, '.2f')}; goal <= 2"
        )


if __name__ == "__main__":
    main()
