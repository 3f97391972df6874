"""The house style's tooling holds on the whole tree: ruff (bugbear, isort, pyupgrade, simplify),
ruff format, and mypy (strict on readers, schema, tables, store, analyses)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

PATHS = ["traceanalyze", "tests", "benchmarks"]


def _tool(name: str) -> str:
    exe = shutil.which(name, path=str(ROOT / ".venv" / "bin")) or shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} is not installed (dev extra)")
    return exe


def test_ruff_check() -> None:
    r = subprocess.run([_tool("ruff"), "check", *PATHS], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format() -> None:
    r = subprocess.run(
        [_tool("ruff"), "format", "--check", *PATHS], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy(tmp_path) -> None:
    _tool("mypy")
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "traceanalyze"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
