"""Shared test helpers: paths to real captures (../shared/traces) and the project's fixtures.

Optional extras, one policy: a test that needs torch is marked `requires_torch` (with the other
modules it needs, e.g. `@pytest.mark.requires_torch("torchvision")`), one that needs dask
`requires_dask`; it is skipped, with the reason, when a module is missing. Nothing else may need
them: a test that needs no torch is not skipped for lack of it.

To check that policy on a machine that has torch, hide it: `TRACEANALYZE_TEST_HIDE=torch,
torchvision pytest …` makes those modules unimportable in the test process (`sys.modules[name]
= None`: `import` raises ImportError, `importlib.util.find_spec` returns None) and in every
Python subprocess the tests start (a `sitecustomize` on PYTHONPATH doing the same).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

HIDE_ENV = "TRACEANALYZE_TEST_HIDE"
HIDDEN = tuple(m.strip() for m in os.environ.get(HIDE_ENV, "").split(",") if m.strip())
_SITECUSTOMIZE = """import os, sys
for _n in os.environ.get("TRACEANALYZE_TEST_HIDE", "").split(","):
    if _n.strip():
        sys.modules[_n.strip()] = None
"""
if HIDDEN:
    for _name in HIDDEN:
        sys.modules[_name] = None  # type: ignore[assignment]
    _shadow = tempfile.mkdtemp(prefix="traceanalyze-hide-")
    Path(_shadow, "sitecustomize.py").write_text(_SITECUSTOMIZE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_shadow, os.environ.get("PYTHONPATH", "")) if p
    )
    atexit.register(shutil.rmtree, _shadow, True)

_EXTRAS = {"requires_torch": ("torch", "collect"), "requires_dask": ("dask", "dask")}


def have(module: str) -> bool:
    """Whether `module` can be imported (False for a hidden one)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or hidden
        return False


# NVIDIA's profilers, as programs (not Python modules): a test that runs one is marked
# `requires_nsys` / `requires_nvprof` / `requires_ncu` and skipped, with the reason, when it is
# not installed; `make test-profilers` installs them (Debian 12 non-free) and runs those tests.
_TOOLS = {
    "requires_nsys": ("nsys", "NSYS", "Nsight Systems"),
    "requires_nvprof": ("nvprof", None, "nvprof"),
    "requires_ncu": ("ncu", None, "Nsight Compute"),
}
TOOLS_HOWTO = "`make test-profilers` installs it (Debian 12 non-free, no GPU needed)"


def tool_path(name: str) -> str | None:
    """The profiler binary `name` (nsys: `$NSYS` first), or None when it is not installed."""
    env = next((e for n, e, _ in _TOOLS.values() if n == name and e), None)
    given = os.environ.get(env) if env else None
    return shutil.which(given) if given else shutil.which(name)


def _skip_missing_tools(item: pytest.Item) -> None:
    for marker, (name, _env, product) in _TOOLS.items():
        if item.get_closest_marker(marker) is not None and tool_path(name) is None:
            pytest.skip(f"needs {name} ({product}) on PATH; {TOOLS_HOWTO}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    _skip_missing_tools(item)
    for marker, (base, extra) in _EXTRAS.items():
        for m in item.iter_markers(marker):
            missing = [n for n in (base, *m.args) if not have(n)]
            if missing:
                pytest.skip(
                    f"needs {', '.join(missing)} (pip install 'traceanalyze[{extra}]')"
                    + (f"; hidden by {HIDE_ENV}" if set(missing) & set(HIDDEN) else "")
                )


ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"
FIXTURES = ROOT / "fixtures"


def shared(rel: str) -> Path:
    """Path of a real capture under ../shared/traces; skips the test when it is absent."""
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"../shared/traces/{rel} is absent (a fresh clone without ../shared)")
    return p


SHARED_SETS = ROOT.parent / "shared" / "sets"


def shared_set(rel: str) -> Path:
    """Path of a real file under ../shared/sets; skips the test when it is absent."""
    p = SHARED_SETS / rel
    if not p.exists():
        pytest.skip(f"../shared/sets/{rel} is absent (a fresh clone without ../shared)")
    return p


def fixture(rel: str) -> Path:
    p = FIXTURES / rel
    assert p.exists(), f"fixture {rel} missing from fixtures/"
    return p


def all_shared_files() -> list[Path]:
    if not SHARED_TRACES.exists():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.is_file() and p.suffix != ".md")


@pytest.fixture
def write(tmp_path: Path):
    """write(name, bytes_or_text) -> Path: a small inline input file."""

    def _write(name: str, content: bytes | str) -> Path:
        p = tmp_path / name
        p.write_bytes(content.encode() if isinstance(content, str) else content)
        return p

    return _write
