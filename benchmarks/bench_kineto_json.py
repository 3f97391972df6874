"""Kineto trace loading, side by side: traceanalyze vs Holistic Trace Analysis 0.5.0 (issue 10 §5).

    python benchmarks/bench_kineto_json.py [--trace PATH] [--repeat N] [--warm K]

Default trace: ../shared/traces/kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz
(ResNet-50 on V100, 15.4 MB of JSON, 68,692 events, 4,350 kernels).

Each repetition (default 5) runs, in alternation, one fresh interpreter per contender and figure:

* whole process: `python -c "<import>; <load>"` as a user waits for it, measured by this parent
  from spawn to exit (interpreter start-up, imports and one load, cold caches of the process);
  its peak RSS is the child's `ru_maxrss` (from `wait4`);
* warm load: a second interpreter imports, loads once, then times K more loads (default 3) of the
  same file in the same process; the repetition's figure is their median. Nothing is cached
  between loads on either side (both parse the file again each time).

Contenders:

* `traceanalyze`: `ta.read(path)`, the public call (format detection, SHA-256 of the file, every
  table built and conformed to the schema);
* `traceanalyze (format given)`: `ta.read(path, format="kineto_json")`, which skips detection
  (detection screens the file's head and asks the readers that could claim it: the
  whole-process figures of the two rows show what that costs);
* `HTA 0.5.0`: `TraceAnalysis(trace_dir=DIR)`, in its own venv (`bench-data/hta-venv`, created on
  the first run with `pip install HolisticTraceAnalysis==0.5.0 "pandas<3"`, `_installed.HTA_PINS`:
  HTA 0.5.0 is written for pandas 2, and a venv with pandas 3 is remade), so its pins never touch
  the project's environment. DIR holds a copy of the trace made once, before timing.

Whole process only (issue 35), in the same repetitions: `traceanalyze summary TRACE` as a user
runs it (the console script's `main`, output to /dev/null) against HTA's load plus its kernel
breakdown (`get_gpu_kernel_breakdown(visualize=False)`: time per kernel, its top kernels).
Goals (issue 35): warm load >= 12x HTA, `summary` >= 8x, peak RSS <= 0.55 of HTA's.

`traceanalyze` runs from a regular install of this checkout (`benchmarks/_installed.py`:
`bench-data/ta-venv`, this environment's dependency versions, a wheel of the tree rebuilt and
reinstalled on every run), as a user's `pip install` would leave it: the development venv's
editable-install hook costs every interpreter there ~13 ms at start-up that no installed copy
pays, and HTA is measured from a regular install too. `--checkout` runs the checkout in this
venv instead (byte-compiled first: this workplace sets PYTHONDONTWRITEBYTECODE=1, under which
every changed module would be recompiled in every interpreter). Every child runs in an empty
directory, so that nothing in the working directory shadows an installed module.

Ratios are HTA / traceanalyze for time and traceanalyze / HTA for RSS, per repetition; the summary
gives their median and range (min–max) over the repetitions, the same ratios of CPU time (user +
system, every thread: steadier than wall time on a busy machine) and the ratio of the two sides'
fastest runs (on a shared machine, the runs least slowed by other work).
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

from _installed import hta_python, installed_python

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = (
    ROOT.parent
    / "shared"
    / "traces"
    / "kineto_json"
    / "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
)

# What each contender's interpreter runs: (import, load one file). `{p}` is the path (ours) or
# the directory holding the copy (HTA); both are passed through repr().
LOADS = {
    "ours": ("import traceanalyze as ta", "ta.read({p})"),
    "ours-fmt": ("import traceanalyze as ta", "ta.read({p}, format='kineto_json')"),
    "hta": (
        "import logging; logging.disable(logging.CRITICAL); "
        "from hta.trace_analysis import TraceAnalysis",
        "TraceAnalysis(trace_dir={p})",
    ),
}
# Whole process only (issue 35): the `summary` command as a user runs it, against HTA's load and
# its kernel breakdown (the nearest of its calls: time per kernel, top kernels).
LOADS |= {
    "ours-summary": (
        "import sys; from traceanalyze.cli import main",
        "sys.argv = ['traceanalyze', 'summary', {p}]; main()",
    ),
    "hta-summary": (
        LOADS["hta"][0],
        "TraceAnalysis(trace_dir={p}).get_gpu_kernel_breakdown(visualize=False)",
    ),
}
LABELS = {
    "ours": "traceanalyze",
    "ours-fmt": "traceanalyze (format given)",
    "hta": "HTA 0.5.0",
    "ours-summary": "traceanalyze summary (CLI)",
    "hta-summary": "HTA load + kernel breakdown",
}

WARM = """
import statistics, sys, time
{imp}
{load}
ts, cs = [], []
for _ in range({k}):
    t0, c0 = time.perf_counter(), time.process_time()
    {load}
    ts.append(time.perf_counter() - t0)
    cs.append(time.process_time() - c0)
print("WARM", statistics.median(ts), statistics.median(cs))
"""


_CHECKOUT = False  # --checkout: run this checkout (PYTHONPATH) rather than an installed copy
_CWD = ""  # every child's working directory: an empty one (set by main)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": str(ROOT)} if _CHECKOUT else env


def _compile() -> None:
    """Byte-compile this checkout's package, as an install would (see the module docstring)."""
    import compileall

    compileall.compile_dir(ROOT / "traceanalyze", quiet=1)


def whole(python: Path | str, kind: str, target: str) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one fresh interpreter that imports and loads once."""
    imp, load = LOADS[kind]
    code = f"{imp}\n{load.format(p=repr(target))}"
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [str(python), "-c", code],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=_CWD,
    )
    err = proc.stderr.read().decode() if proc.stderr else ""  # before the wait: no pipe stall
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{kind} failed:\n{err[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime  # every thread of the child
    return wall, cpu, usage.ru_maxrss / 1024  # KiB on Linux


def warm(python: Path | str, kind: str, target: str, k: int) -> tuple[float, float]:
    """Median (wall s, CPU s) of `k` loads after a first one, in one interpreter."""
    imp, load = LOADS[kind]
    code = WARM.format(imp=imp, load=load.format(p=repr(target)), k=k)
    out = subprocess.run(
        [str(python), "-c", code],
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
        cwd=_CWD,
    )
    for line in out.stdout.splitlines():
        if line.startswith("WARM "):
            _, w, c = line.split()
            return float(w), float(c)
    raise RuntimeError(f"{kind} warm run failed:\n{out.stderr[-2000:]}")


def _rng(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}–{max(xs):{fmt}})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=5, help="repetitions (alternating contenders)")
    ap.add_argument("--warm", type=int, default=3, help="warm loads timed per repetition")
    ap.add_argument("--no-hta", action="store_true", help="skip Holistic Trace Analysis")
    ap.add_argument(
        "--checkout",
        action="store_true",
        help="run this checkout in this venv instead of an installed copy (bench-data/ta-venv)",
    )
    args = ap.parse_args()
    global _CHECKOUT, _CWD
    trace: Path = args.trace.resolve()
    if not trace.exists():
        print(f"trace not found: {trace}")
        return 1
    hta = None if args.no_hta else hta_python()
    installed = None if args.checkout else installed_python()
    _CHECKOUT = installed is None  # --checkout, or no installed copy could be made
    ours: Path | str
    if installed is None:
        _compile()
        ours = sys.executable
    else:
        ours = installed
    print(f"traceanalyze: {'this checkout' if _CHECKOUT else 'installed in ' + str(ours)}")
    contenders: list[tuple[str, Path | str, str]] = [
        ("ours", ours, str(trace)),
        ("ours-fmt", ours, str(trace)),
    ]
    tmp = tempfile.mkdtemp(prefix="bench-hta-")
    _CWD = tempfile.mkdtemp(prefix="bench-cwd-")
    try:
        if hta is not None:
            shutil.copy(trace, tmp)
            contenders.append(("hta", hta, tmp))
        summaries = [("ours-summary", ours, str(trace))]
        if hta is not None:
            summaries.append(("hta-summary", hta, tmp))
        res: dict[str, dict[str, list[float]]] = {k: {} for k, _, _ in contenders + summaries}
        for rep in range(args.repeat):
            for kind, py, target in contenders:
                w, wc, rss = whole(py, kind, target)
                hot, hc = warm(py, kind, target, args.warm)
                got = {"whole": w, "whole_cpu": wc, "rss": rss, "warm": hot, "warm_cpu": hc}
                for name, v in got.items():
                    res[kind].setdefault(name, []).append(v)
            for kind, py, target in summaries:
                w, wc, rss = whole(py, kind, target)
                for name, v in {"whole": w, "whole_cpu": wc, "rss": rss}.items():
                    res[kind].setdefault(name, []).append(v)
            print(f"repetition {rep + 1}/{args.repeat} done", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(_CWD, ignore_errors=True)
    _report(trace, res, args)
    return 0


def _report(trace: Path, res: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> None:
    print(f"\ntrace: {trace.name} ({trace.stat().st_size / 1e6:.2f} MB on disk)")
    print(f"{args.repeat} alternating repetitions; median (min–max); warm = median of {args.warm}")
    print(f"load {os.getloadavg()[0]:.2f} (1-min average, {os.cpu_count()} CPUs)\n")
    cols: tuple[tuple[str, str], ...] = (
        ("whole", "whole process s"),
        ("whole_cpu", "its CPU s"),
        ("warm", "warm load s"),
        ("warm_cpu", "its CPU s"),
        ("rss", "peak RSS MB"),
    )
    print(f"{'contender':<29}" + "".join(f" {title:>22}" for _, title in cols))
    for kind, r in res.items():
        cells = [_rng(r[f], ".0f" if f == "rss" else ".3f") if f in r else "-" for f, _ in cols]
        print(f"{LABELS[kind]:<29}" + "".join(f" {c:>22}" for c in cells))
    if "hta" not in res:
        return
    h = res["hta"]
    print("\nratios per repetition, median (min–max); CPU: the ratio of CPU times (all threads)")
    for kind in ("ours", "ours-fmt"):
        o = res[kind]
        ratio = {f: [a / b for a, b in zip(h[f], o[f], strict=True)] for f, _ in cols[:4]}
        mem = [a / b for a, b in zip(o["rss"], h["rss"], strict=True)]
        # On a shared machine the fastest run of each side is the one least slowed by others.
        best = {f: min(h[f]) / min(o[f]) for f in ("whole", "warm")}
        print(
            f"  {LABELS[kind]}:\n"
            f"    whole process HTA/ours {_rng(ratio['whole'], '.1f')}x, "
            f"CPU {_rng(ratio['whole_cpu'], '.1f')}x, fastest runs {best['whole']:.1f}x\n"
            f"    warm load     HTA/ours {_rng(ratio['warm'], '.1f')}x (goal >= 12), "
            f"CPU {_rng(ratio['warm_cpu'], '.1f')}x, fastest runs {best['warm']:.1f}x\n"
            f"    peak RSS      ours/HTA {_rng(mem, '.2f')} (goal <= 0.55)"
        )
    o, h = res["ours-summary"], res["hta-summary"]
    whole_ratio = [a / b for a, b in zip(h["whole"], o["whole"], strict=True)]
    cpu_ratio = [a / b for a, b in zip(h["whole_cpu"], o["whole_cpu"], strict=True)]
    print(
        f"  summary, whole process: HTA load + breakdown / `traceanalyze summary` "
        f"{_rng(whole_ratio, '.1f')}x (goal >= 8), CPU {_rng(cpu_ratio, '.1f')}x, "
        f"fastest runs {min(h['whole']) / min(o['whole']):.1f}x"
    )


if __name__ == "__main__":
    sys.exit(main())
