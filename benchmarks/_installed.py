"""This checkout installed as a user installs it, in a venv of its own, for whole-process figures.

A development setup (`pip install -e .`, what `make` does) puts an import hook in `site`: the
editable finder that setuptools writes (`__editable___traceanalyze_*_finder.py`, loaded from a
`.pth` file) imports pathlib, re, urllib.parse, ipaddress and importlib.util in every interpreter
of that venv before the first line of user code runs, ~13 ms on this machine (`python -c pass`:
0.025 s in `.venv`, 0.011 s in a plain venv). No user who runs `pip install traceanalyze` pays
it, and the peers' venvs (HTA's, `bench-data/hta-venv`) do not have it. So the figures that count
interpreter start-up run this checkout from a regular install:

* `bench-data/ta-venv` is created once, with this environment's versions of every dependency
  (constraints from its installed distributions), so the installed copy runs on the same polars,
  msgspec, isal... as the test suite;
* each call rebuilds a wheel from the checkout and reinstalls it (`--no-deps --force-reinstall`):
  the figures are always of the code in the tree. pip byte-compiles what it installs.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "bench-data" / "ta-venv"
HTA_VENV = ROOT / "bench-data" / "hta-venv"
# HTA 0.5.0 declares no upper bound on pandas but is written for pandas 2: under pandas 3 its
# critical path fails and its loads are not the ones its users time. Every benchmark that runs it
# uses this one venv, made by `hta_python` with these pins (whichever benchmark runs first).
HTA_PINS = ("HolisticTraceAnalysis==0.5.0", "pandas<3")


def _pins() -> list[str]:
    """name==version of every distribution in this environment but traceanalyze itself."""
    pins = set()
    for d in importlib.metadata.distributions():
        name = d.metadata["Name"]
        if name and name.lower() != "traceanalyze":
            pins.add(f"{name}=={d.version}")
    return sorted(pins)


def _pip(py: Path, *args: str) -> None:
    out = subprocess.run(
        [str(py), "-m", "pip", "-q", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"pip {' '.join(args[:3])}... failed:\n{out.stderr[-2000:]}")


def installed_python() -> Path | None:
    """The python of `bench-data/ta-venv`, holding the current checkout as a regular install;
    None, saying why, when it cannot be made (the first install needs the package index)."""
    py = VENV / "bin" / "python"
    try:
        with tempfile.TemporaryDirectory(prefix="ta-wheel-") as tmp:
            if not py.exists():
                print(f"creating {VENV} with this environment's dependency versions (once) ...")
                constraints = Path(tmp) / "constraints.txt"
                constraints.write_text("\n".join(_pins()) + "\n")
                try:
                    venv.create(VENV, with_pip=True)
                    _pip(py, "install", "-c", str(constraints), str(ROOT))
                except BaseException:
                    shutil.rmtree(VENV, ignore_errors=True)  # never a half-made venv
                    raise
            # the tree as it is now: a fresh wheel, installed over the last one
            _pip(py, "wheel", "--no-deps", "-w", tmp, str(ROOT))
            wheel = next(Path(tmp).glob("traceanalyze-*.whl"))
            _pip(py, "install", "--no-deps", "--force-reinstall", str(wheel))
    except (RuntimeError, OSError, StopIteration) as e:
        print(f"no installed copy ({type(e).__name__}: {str(e)[-300:]})")
        return None
    return py


if __name__ == "__main__":
    print(installed_python())
    sys.exit(0)


def hta_python() -> Path | None:
    """The python of `bench-data/hta-venv` (HTA 0.5.0 and pandas 2, `HTA_PINS`), made on first
    use; a venv left by an older run with pandas 3 is remade. None, saying why, when it cannot be
    made (the first install needs the package index)."""
    py = HTA_VENV / "bin" / "python"
    if py.exists():
        probe = subprocess.run(
            [str(py), "-c", "import pandas; print(pandas.__version__)"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and int(probe.stdout.strip().split(".")[0]) < 3:
            return py
        print(f"{HTA_VENV}: pandas {probe.stdout.strip() or '?'} (not < 3): remaking it")
        shutil.rmtree(HTA_VENV, ignore_errors=True)
    print(f"creating {HTA_VENV} and installing {' '.join(HTA_PINS)} (once) ...", flush=True)
    try:
        venv.create(HTA_VENV, with_pip=True)
        _pip(py, "install", *HTA_PINS)
    except (RuntimeError, OSError) as e:
        print(f"SKIP HTA: could not install {' '.join(HTA_PINS)}: {e}")
        shutil.rmtree(HTA_VENV, ignore_errors=True)
        return None
    return py
