"""Kineto trace loading: traceanalyze's kineto_json reader vs Holistic Trace Analysis 0.5.0.

    python benchmarks/bench_kineto_json.py [--trace PATH] [--repeat N]

Default trace: ../shared/traces/kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz
(ResNet-50 on V100, 15.4 MB of JSON, 4,350 kernels). Each contender runs in its own subprocess,
N times (default 3); the table shows the best time and the largest peak RSS.

* time excludes imports (and, for HTA, copying the trace into its own temp dir);
* peak RSS (`ru_maxrss` of the child) includes the interpreter and imports, so the import
  baselines are measured and printed too.

Contenders:
* `traceanalyze`: `read_kineto_json(path)`, all tables;
* `HTA 0.5.0`: `TraceAnalysis(trace_dir=DIR)` in a separate venv (`bench-data/hta-venv`, created
  on first run with `pip install HolisticTraceAnalysis==0.5.0`; skipped with a message when that
  fails), so HTA's pins never touch the project's environment;
* `floor`: gunzip + `orjson.loads` of the whole document, no tables at all.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = (
    ROOT.parent
    / "shared"
    / "traces"
    / "kineto_json"
    / "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
)
HTA_VENV = ROOT / "bench-data" / "hta-venv"
HTA_PIN = "HolisticTraceAnalysis==0.5.0"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _cpu_s() -> float:
    # user + system CPU of all threads: steadier than wall time on a busy shared machine
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# --- children -------------------------------------------------------------------------------------


def _child(kind: str, path: str) -> None:
    out: dict[str, object] = {}
    if kind == "ours":
        sys.path.insert(0, str(ROOT))
        import traceanalyze  # noqa: F401
        from traceanalyze.readers.kineto_json import read_kineto_json

        out["import_rss_mb"] = _rss_mb()
        heavy = ("pandas", "matplotlib", "pyarrow", "torch", "duckdb", "numpy")
        out["heavy_imports"] = sorted(m for m in sys.modules if m in heavy)
        t0, c0 = time.perf_counter(), _cpu_s()
        tables = read_kineto_json(path)
        out["time_s"], out["cpu_s"] = time.perf_counter() - t0, _cpu_s() - c0
        out["rows"] = {k: v for k, v in tables.counts().items() if v}
    elif kind == "floor":
        import gzip

        import orjson

        out["import_rss_mb"] = _rss_mb()
        t0, c0 = time.perf_counter(), _cpu_s()
        with open(path, "rb") as f:
            raw = f.read()
        doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        out["time_s"], out["cpu_s"] = time.perf_counter() - t0, _cpu_s() - c0
        out["rows"] = {"traceEvents": len(doc["traceEvents"])}
    elif kind == "hta":
        import logging

        logging.disable(logging.CRITICAL)
        from hta.trace_analysis import TraceAnalysis

        out["import_rss_mb"] = _rss_mb()
        d = tempfile.mkdtemp(prefix="bench-hta-")
        try:
            shutil.copy(path, d)
            t0, c0 = time.perf_counter(), _cpu_s()
            ta = TraceAnalysis(trace_dir=d)
            out["time_s"], out["cpu_s"] = time.perf_counter() - t0, _cpu_s() - c0
            df = ta.t.get_trace(next(iter(ta.t.traces)))
            out["rows"] = {"events": len(df)}
        finally:
            shutil.rmtree(d, ignore_errors=True)
    elif kind == "import-polars":
        import polars  # noqa: F401

        out["import_rss_mb"] = _rss_mb()
    elif kind == "bare":
        out["import_rss_mb"] = _rss_mb()
    out["peak_rss_mb"] = _rss_mb()
    print("RESULT " + json.dumps(out))


# --- parent ---------------------------------------------------------------------------------------


def _hta_python() -> Path | None:
    py = HTA_VENV / "bin" / "python"
    if not py.exists():
        print(f"creating {HTA_VENV} and installing {HTA_PIN} (once) ...", flush=True)
        try:
            venv.create(HTA_VENV, with_pip=True)
            subprocess.run(
                [str(py), "-m", "pip", "install", "-q", HTA_PIN],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except (subprocess.CalledProcessError, OSError) as e:
            err = getattr(e, "stderr", b"") or b""
            print(f"SKIP HTA: could not install {HTA_PIN}: {e} {err.decode()[-500:]}")
            shutil.rmtree(HTA_VENV, ignore_errors=True)
            return None
    return py


def _run(python: Path | str, kind: str, trace: Path) -> dict[str, object]:
    proc = subprocess.run(
        [str(python), __file__, "--child", kind, str(trace)],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, object] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"{kind} child failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-hta", action="store_true", help="skip Holistic Trace Analysis")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child)
        return
    trace: Path = args.trace
    if not trace.exists():
        sys.exit(f"trace not found: {trace}")

    contenders: list[tuple[str, Path | str, str]] = [("traceanalyze", sys.executable, "ours")]
    hta = None if args.no_hta else _hta_python()
    if hta is not None:
        contenders.append(("HTA 0.5.0", hta, "hta"))
    contenders.append(("floor: gunzip+orjson", sys.executable, "floor"))

    results: dict[str, dict[str, object]] = {}
    for label, py, kind in contenders:
        runs = [_run(py, kind, trace) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: float(r["time_s"]))  # type: ignore[arg-type]
        best["peak_rss_mb"] = max(float(r["peak_rss_mb"]) for r in runs)  # type: ignore[arg-type]
        best["times"] = [round(float(r["time_s"]), 3) for r in runs]  # type: ignore[arg-type]
        best["cpu_s"] = min(float(r["cpu_s"]) for r in runs)  # type: ignore[arg-type]
        results[label] = best

    base = {k: _run(sys.executable, k, trace)["import_rss_mb"] for k in ("bare", "import-polars")}
    ours = results["traceanalyze"]
    print(f"\ntrace: {trace.name} ({trace.stat().st_size / 1e6:.2f} MB on disk)")
    print(f"best of {args.repeat} runs; time excludes imports, peak RSS includes them\n")
    print(
        f"{'contender':<22} {'time s':>7} {'CPU s':>7} {'peak RSS MB':>12} {'time/ours':>10} "
        f"{'RSS/ours':>9}"
    )
    for label, r in results.items():
        t, m = float(r["time_s"]), float(r["peak_rss_mb"])  # type: ignore[arg-type]
        c = float(r["cpu_s"])  # type: ignore[arg-type]
        rt = t / float(ours["time_s"])  # type: ignore[arg-type]
        rm = m / float(ours["peak_rss_mb"])  # type: ignore[arg-type]
        print(
            f"{label:<22} {t:>7.3f} {c:>7.3f} {m:>12.1f} {rt:>9.2f}x {rm:>8.2f}x   "
            f"wall runs {r['times']}"
        )
    print(
        f"\nimport baselines (RSS MB): python {base['bare']:.1f}, + polars "
        f"{base['import-polars']:.1f}, + traceanalyze reader {ours['import_rss_mb']:.1f}; "
        f"heavy modules imported by traceanalyze: {ours['heavy_imports'] or 'none'}"
    )
    print(f"traceanalyze rows: {ours['rows']}")
    if "HTA 0.5.0" in results:
        h = results["HTA 0.5.0"]
        speed = float(h["time_s"]) / float(ours["time_s"])  # type: ignore[arg-type]
        cpu = float(h["cpu_s"]) / float(ours["cpu_s"])  # type: ignore[arg-type]
        mem = float(ours["peak_rss_mb"]) / float(h["peak_rss_mb"])  # type: ignore[arg-type]
        print(
            f"HTA/ours wall time: {speed:.1f}x, CPU time: {cpu:.1f}x (goal >= 10x); "
            f"ours/HTA peak RSS: {mem:.2f} (goal <= 0.33); HTA events: {h['rows']}"
        )


if __name__ == "__main__":
    main()
