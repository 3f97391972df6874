"""Issue 32's smaller items, each through what the user ran first."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze.cli import main

from .conftest import shared

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("name", ["run.json", "run.csv", "run.sqlite", "run"])
def test_an_empty_file_is_empty_with_or_without_format(tmp_path, name: str) -> None:
    """Before: without --format "no reader recognizes this file", with it "empty file"."""
    p = tmp_path / name
    p.write_bytes(b"")
    for args in (("summary", p), ("ingest", p, "--store", tmp_path / "st")):
        r = invoke(*args)
        assert r.exit_code == 1 and r.stderr == f"traceanalyze: error: {p}: empty file\n"
    assert not (tmp_path / "st").exists() or not any((tmp_path / "st").rglob("*.parquet"))
    r = invoke("summary", "--format", "kineto_json", p)
    assert r.stderr == f"traceanalyze: error: {p}: empty file\n"


def test_critical_path_unknown_iteration_lists_those_there_are() -> None:
    """Before: "no iteration 999 to build a critical path from" (timeline listed them)."""
    import gzip
    import json

    r = shared(RESNET)
    with gzip.open(r, "rt") as f:
        steps = sorted(
            int(e["name"].split("#")[1])
            for e in json.load(f)["traceEvents"]
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
        )
    assert steps == list(range(steps[0], steps[-1] + 1))
    out = invoke("critical-path", r, "--iteration", 999)
    assert out.exit_code == 1
    assert out.stderr.strip().endswith(f"iterations here: {steps[0]}-{steps[-1]}")


def test_plot_offers_figures_only_and_says_what_it_draws() -> None:
    """Before: `ta.plot` exposed annotations, os and pl (`ta.plot.annotations(...)` raised
    TypeError) and `ta.plot.timeline(ds.idle())` raised AttributeError."""
    for name in ("annotations", "os", "pl", "TYPE_CHECKING"):
        assert not hasattr(ta.plot, name), name
    ds = ta.open(shared(RESNET))
    with pytest.raises(TypeError, match=r"plot\.timeline draws the result of Dataset\.timeline"):
        ta.plot.timeline(ds.idle())
    with pytest.raises(TypeError, match=r"plot\.idle draws the result of Dataset\.idle"):
        ta.plot.idle(ds.ops())
    fig = ta.plot.idle(ds.idle())  # the right result still draws
    assert fig.axes


def test_a_store_that_cannot_be_written_is_named_not_its_staging(tmp_path, monkeypatch) -> None:
    """Before: ingest into a read-only store named `<store>/.staging` (made by the store, not
    the user). Root writes whatever the modes, so the refusal is the system's own, raised where
    the store first writes."""
    import errno

    import traceanalyze.store.manifest as manifest

    store = tmp_path / "st"
    assert invoke("ingest", shared(RESNET), "--store", store).exit_code == 0

    def refuse(staging_root, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(staging_root))

    monkeypatch.setattr(manifest, "_new_owner", refuse)
    r = invoke("ingest", shared("kineto_json/hta_triton_a100_trace.json.gz"), "--store", store)
    assert r.exit_code == 1
    assert r.stderr == f"traceanalyze: error: {store}: Permission denied\n"
