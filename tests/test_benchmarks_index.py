"""benchmarks/run_all.py: one named command per figure, every benchmark script reachable by a
name, and a figure whose script is absent fails saying so."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from .conftest import ROOT

BENCH = ROOT / "benchmarks"


def _run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_all", BENCH / "run_all.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_benchmark_script_is_a_named_figure() -> None:
    figures = _run_all().FIGURES
    named = {script for script, _, _ in figures.values()}
    assert {p.name for p in BENCH.glob("bench_*.py")} <= named
    for name in ("kineto-speed", "startup", "nsys-speed", "bombs", "parallel-ingest"):
        assert (BENCH / figures[name][0]).exists(), name


def test_listing_names_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    mod = _run_all()
    assert mod.main([]) == 0
    out = capsys.readouterr().out
    for name, (script, _, _) in mod.FIGURES.items():
        assert f"{name}" in out and f"benchmarks/{script}" in out


def test_a_missing_script_prints_not_present_and_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = _run_all()
    monkeypatch.setitem(mod.FIGURES, "ghost", ("bench_ghost.py", (), "nothing"))
    assert mod.main(["ghost"]) == 1
    assert "ghost: benchmarks/bench_ghost.py not present" in capsys.readouterr().out
    assert mod.main(["no-such-figure"]) == 2


def test_a_figure_runs_its_script_with_this_interpreter() -> None:
    mod = _run_all()
    cmd = mod.command("kineto-speed")
    assert cmd[:2] == [sys.executable, str(BENCH / "bench_kineto_json.py")]
