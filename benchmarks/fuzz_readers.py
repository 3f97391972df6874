"""Coverage-guided fuzzing of every reader with atheris (libFuzzer), seeded from real traces.

    python benchmarks/fuzz_readers.py [--seconds 25] [--readers nvprof_csv,kineto_json]

Each reader runs in its own process (`atheris.Fuzz` never returns) for `--seconds`, starting from
a corpus of the real captures in ../shared/traces and fixtures/ (copied into a temporary
directory; large ones cut, since libFuzzer caps input size). An input passes when the reader
returns Tables or raises a TraceanalyzeError; any other exception is a crash: libFuzzer stops,
prints the traceback and writes the input as `crash-*` in the working directory (a temporary one
unless `--keep DIR`). The summary line per reader gives libFuzzer's execution count and the
result. Needs the `fuzz` extra (`pip install -e .[fuzz]`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
SEEDS: dict[str, list[str]] = {
    "nvprof_csv": ["nvprof_csv/*.csv"],
    "nvprof_sqlite": ["nvprof_sqlite/*.sql"],
    "nsys_sqlite": ["nsys_sqlite/nsysai_mock_torch_tiny_nsys2026.1.sqlite"],
    "ncu_csv": ["ncu_csv/*.csv"],
    "kineto_json": ["kineto_json/hta_triton_a100_trace.json.gz", "fixtures:kineto_json-*/*"],
    "smi_csv": ["smi_logs/*.csv"],
    "iterlog": ["fixtures:iterlog-*/*"],
}
SUFFIX = {
    "nvprof_csv": ".csv",
    "nvprof_sqlite": ".sql",
    "nsys_sqlite": ".sqlite",
    "ncu_csv": ".csv",
    "kineto_json": ".json",
    "smi_csv": ".csv",
    "iterlog": ".log",
}
MAX_LEN = 1 << 20  # libFuzzer's -max_len: seeds are cut to it (SQLite files fit whole)


def _seed_files(slug: str) -> list[Path]:
    out: list[Path] = []
    for pattern in SEEDS[slug]:
        base, pat = (
            (ROOT / "fixtures", pattern[9:])
            if pattern.startswith("fixtures:")
            else (
                SHARED,
                pattern,
            )
        )
        out += sorted(base.glob(pat))
    return out


def _one(slug: str) -> None:
    """The fuzz target of one reader (runs in the child process)."""
    import atheris

    # Only our code: instrumenting polars' Python layer breaks it (str.split returned None).
    with atheris.instrument_imports(include=["traceanalyze"]):
        import importlib

        from traceanalyze.errors import TraceanalyzeError
        from traceanalyze.readers import READERS
        from traceanalyze.readers.common import core as _common

        # readers are imported lazily by READERS: import this one here, to instrument it
        importlib.import_module(f"traceanalyze.readers.{READERS[slug].module_name}")
        if slug == "smi_csv":
            importlib.import_module("traceanalyze.readers.smi.variants")
        assert _common

    warnings.simplefilter("ignore")
    reader = READERS[slug]
    fd, name = tempfile.mkstemp(suffix=SUFFIX[slug])
    os.close(fd)

    def target(data: bytes) -> None:
        with open(name, "wb") as f:
            f.write(data)
        with contextlib.suppress(TraceanalyzeError):
            reader.read(name)

    atheris.Setup(sys.argv[:1] + sys.argv[3:], target)
    atheris.Fuzz()


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _one(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=25, help="fuzzing time per reader")
    ap.add_argument("--readers", default=",".join(SEEDS), help="comma-separated slugs")
    ap.add_argument("--keep", help="directory for crash inputs (default: a temporary one)")
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="fuzz-readers-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for slug in args.readers.split(","):
            corpus = work / f"corpus-{slug}"
            corpus.mkdir(exist_ok=True)
            for i, f in enumerate(_seed_files(slug)):
                data = f.read_bytes()
                if f.suffix == ".gz" and SUFFIX[slug] == ".json":
                    import gzip

                    data = gzip.decompress(data)
                (corpus / f"seed{i}{SUFFIX[slug]}").write_bytes(data[:MAX_LEN])
            cmd = [
                sys.executable,
                __file__,
                "--child",
                slug,
                str(corpus),
                f"-max_total_time={args.seconds}",
                f"-max_len={MAX_LEN}",
                "-rss_limit_mb=4096",
                "-timeout=30",
                f"-artifact_prefix={work}/{slug}-",
            ]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
            log = p.stdout + p.stderr
            runs = re.findall(r"Done (\d+) runs", log) or re.findall(r"#(\d+)\s", log)
            count = runs[-1] if runs else "?"
            ok = p.returncode == 0
            failed += not ok
            result = "no crash" if ok else f"CRASH (exit {p.returncode})"
            print(f"{slug:14s} executions={count:>8s}  {result}", flush=True)
            if not ok:
                tail = [ln for ln in log.splitlines() if ln.strip()][-25:]
                print("    " + "\n    ".join(tail), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
