"""Every notebook in notebooks/ runs top to bottom on data the project ships or makes, through the
public API only, and is committed without outputs.

Notebooks take their inputs from environment variables read in their `parameters` cell
(`TRACEANALYZE_REPO`, `TRACEANALYZE_TRACES`, `TRACEANALYZE_RUN`, …); the real captures a notebook
needs are listed in its metadata (`traceanalyze.requires`, paths under ../shared/traces), and the
test skips, saying which, when they are absent.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FIXTURES, ROOT, SHARED_TRACES

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = {"explore_run.ipynb", "coreutil.ipynb", "fleet_variability.ipynb", "scaling.ipynb"}
SETS = ROOT.parent / "shared" / "sets"


def _read(path: Path):  # -> nbformat.NotebookNode
    nbformat = pytest.importorskip("nbformat")
    return nbformat.read(path, as_version=4)


def _execute(nb_path: Path, env: dict[str, str], cwd: Path):  # -> the executed notebook
    nbclient = pytest.importorskip("nbclient")
    nb = _read(nb_path)
    for rel in nb.metadata.get("traceanalyze", {}).get("requires", []):
        if not (SHARED_TRACES / rel).exists():
            pytest.skip(f"{nb_path.name} needs ../shared/traces/{rel} (absent)")
    old = dict(os.environ)
    # The kernel is a child process: it inherits these (and PYTHONPATH, so it imports this tree).
    os.environ.update({"PYTHONPATH": str(ROOT), "TRACEANALYZE_REPO": str(ROOT), **env})
    try:
        client = nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
    # Each notebook shows something: every code cell but the parameters ran, most printed.
    shown = [c for c in nb.cells if c.cell_type == "code" and c.get("outputs")]
    assert len(shown) >= 3
    # Every figure a cell ends on is a picture, not `<Figure size 1400x200 with 1 Axes>`
    # (issue 21): each such cell holds an image/png output.
    figures = [c for c in nb.cells if c.cell_type == "code" and _ends_on_a_figure(c.source)]
    assert figures, f"{nb_path.name} draws no figure"
    for c in figures:
        kinds = {k for o in c.get("outputs", []) for k in o.get("data", {})}
        assert "image/png" in kinds, f"{nb_path.name}: no image/png for {c.source[-60:]!r}"
    return nb


def _ends_on_a_figure(source: str) -> bool:
    """The cell's value is a figure: its last line calls `ta.plot.<name>(…)` or is `fig`."""
    last = [ln for ln in source.strip().splitlines() if ln.strip()][-1:]
    return bool(last) and (last[0].startswith("ta.plot.") or last[0].strip() == "fig")


def test_the_notebooks_exist() -> None:
    assert {p.name for p in NOTEBOOKS} == EXPECTED


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(nb_path: Path) -> None:
    nb = _read(nb_path)
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        assert c.get("outputs") == [], f"{nb_path.name} cell {i} has outputs: strip them"
        assert c.get("execution_count") is None, f"{nb_path.name} cell {i} has a count"
    assert "widgets" not in nb.metadata


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_uses_only_the_public_api(nb_path: Path) -> None:
    """`import traceanalyze as ta` and `ta.<name>` in `traceanalyze.__all__` (or `ta.plot`);
    no `from traceanalyze.x import …`, no private attributes."""
    import traceanalyze

    public = set(traceanalyze.__all__) | {"plot"}
    nb = _read(nb_path)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, f"{nb_path.name}: one cell tagged 'parameters'"
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        tree = ast.parse(c.source)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("traceanalyze"), ast.unparse(node)
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("traceanalyze"):
                        assert a.name == "traceanalyze" and a.asname == "ta", ast.unparse(node)
            is_ta = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if is_ta and node.value.id == "ta":  # type: ignore[union-attr]
                assert node.attr in public, f"{nb_path.name}: ta.{node.attr} is not public"


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A real `traceanalyze collect` CPU run (None without torch: the notebook then ingests the
    committed fixture capture)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    out = tmp_path_factory.mktemp("collect")
    argv = ["--device", "cpu", "--profiler", "torch", "--iterations", "4", "--batch-size", "2"]
    argv += ["--image-size", "64", "--out", str(out), "--run-id", "nb", "--quiet"]
    r = subprocess.run(
        [sys.executable, "-m", "traceanalyze", "collect", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out / "nb"


def test_explore_run_on_a_cpu_collect_run(cpu_run: Path | None, tmp_path: Path) -> None:
    env = {"TRACEANALYZE_RUN": str(cpu_run)} if cpu_run is not None else {}
    _execute(ROOT / "notebooks" / "explore_run.ipynb", env, tmp_path)


def test_explore_run_on_the_committed_fixture(tmp_path: Path) -> None:
    assert any(FIXTURES.glob("kineto_json-*/*.json.gz"))
    _execute(ROOT / "notebooks" / "explore_run.ipynb", {"TRACEANALYZE_RUN": ""}, tmp_path)


@pytest.mark.parametrize("name", ["coreutil.ipynb", "fleet_variability.ipynb"])
def test_notebook_on_the_shared_traces(name: str, tmp_path: Path) -> None:
    _execute(ROOT / "notebooks" / name, {"TRACEANALYZE_TRACES": str(SHARED_TRACES)}, tmp_path)


def test_scaling_notebook_on_the_shared_mlperf_logs(tmp_path: Path) -> None:
    sets = SETS / "mlperf_training_resnet50"
    if not sets.exists():
        pytest.skip("scaling.ipynb needs ../shared/sets/mlperf_training_resnet50 (absent)")
    nb = _execute(ROOT / "notebooks" / "scaling.ipynb", {"TRACEANALYZE_SETS": str(sets)}, tmp_path)
    pngs = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    assert len(pngs) == 1, "the scaling figure is shown as image/png"
