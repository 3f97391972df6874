"""`traceanalyze diagnose` against `nsys-ai diagnose` (nsys-ai 0.3) on the shared Nsight Systems
exports, in one run: wall time and peak RSS of each, as ratios.

    python benchmarks/bench_diagnose.py [--repeat 3] [--screenshot docs/diagnose-report.png]

nsys-ai runs in `bench-data/nsysai-venv` (made on first use: `pip install nsys-ai==0.3`; its
dependencies are not ours). Each command runs in a fresh process, peak RSS from `os.wait4` of
that child; nsys-ai is given a copy of the export in a temporary directory because it writes its
Parquet cache beside the file and a session under the working directory (the shared traces are
read-only). Ours runs from this checkout's `.venv` (`python -m traceanalyze diagnose FILE
--json`). Best wall time of `--repeat` runs, alternating, on a machine shared with other work.
Without network nsys-ai 0.3 falls back from DuckDB (it cannot fetch the sqlite_scanner
extension) to direct SQLite queries; that is how it runs here.

`--screenshot PATH`: the HTML report of the 2×H100 export rendered by headless chromium
(playwright, the system's /usr/bin/chromium) to PATH, for docs/.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NSYS = ROOT.parent / "shared" / "traces" / "nsys_sqlite"
VENV = ROOT / "bench-data" / "nsysai-venv"


def nsysai() -> Path:
    exe = VENV / "bin" / "nsys-ai"
    if not exe.exists():
        venv.create(VENV, with_pip=True)
        subprocess.run(
            [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "nsys-ai==0.3"], check=True
        )
    return exe


def run(argv: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, exit code) of one child process."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    return time.perf_counter() - t, ru.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def bench(f: Path, repeat: int, peer: Path) -> dict[str, float]:
    ours = [sys.executable, "-m", "traceanalyze", "diagnose", str(f), "--json"]
    best = {"ours_s": 1e9, "ours_mib": 0.0, "peer_s": 1e9, "peer_mib": 0.0}
    env_ok = True
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            wall, rss, code = run(ours, ROOT)
            env_ok &= code == 0
            best["ours_s"], best["ours_mib"] = min(best["ours_s"], wall), max(best["ours_mib"], rss)
            copy = Path(d) / f.name
            shutil.copy(f, copy)
            wall, rss, code = run([str(peer), "diagnose", copy.name], Path(d))
            env_ok &= code == 0
            best["peer_s"], best["peer_mib"] = min(best["peer_s"], wall), max(best["peer_mib"], rss)
    best["ok"] = float(env_ok)
    return best


def screenshot(path: Path) -> None:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT))
    import traceanalyze as ta

    d = ta.open(NSYS / "nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite").diagnose()
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "report.html"
        d.to_html(page_path)
        with sync_playwright() as pw:
            b = pw.chromium.launch(
                executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                args=["--no-sandbox"],
            )
            page = b.new_page(viewport={"width": 1000, "height": 1400})
            page.goto(page_path.as_uri())
            page.screenshot(path=str(path), full_page=False)
            b.close()
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--screenshot", type=Path)
    a = ap.parse_args()
    if a.screenshot:
        screenshot(a.screenshot)
        return
    peer = nsysai()
    heads = ("ours s", "nsys-ai s", "time ratio", "ours MiB", "nsys-ai MiB", "RSS ratio")
    print(f"{'export':<58} " + " ".join(f"{h:>11}" for h in heads))
    for f in sorted(NSYS.glob("*.sqlite")):
        r = bench(f, a.repeat, peer)
        cells = (
            f"{r['ours_s']:.2f}",
            f"{r['peer_s']:.2f}",
            f"{r['ours_s'] / r['peer_s']:.2f}",
            f"{r['ours_mib']:.0f}",
            f"{r['peer_mib']:.0f}",
            f"{r['ours_mib'] / r['peer_mib']:.2f}",
        )
        failed = "" if r["ok"] else "  (a run failed)"
        print(f"{f.name:<58} " + " ".join(f"{c:>11}" for c in cells) + failed)


if __name__ == "__main__":
    main()
