"""`compare` takes each side as one GPU-run (issue 21): a store of several GPU-runs is refused with
their list, or pooled only with `--pool`, saying how many; telemetry is attributed only to the
run it overlaps. Stores built here from real shared traces (two ranks of the DLRM job, another
rank, a sampler log of an unrelated machine); expected values from the raw JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyze.cli import main
from traceanalyze.store import Store

from .conftest import SHARED_TRACES, shared

DLRM = SHARED_TRACES.parent / "sets" / "multirank_param_dlrm_8xv100"
NVML = "smi_logs/roofline_custom_nvml_sampler_rtx5070.csv"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def rank(n: int) -> Path:
    found = sorted(DLRM.glob(f"worker{n}_*.pt.trace.json.gz"))
    if not found:
        pytest.skip(f"../shared/sets/{DLRM.name} is absent (a fresh clone without ../shared)")
    return found[0]


def kernel_ms(trace: Path) -> float:
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    return sum(e["dur"] for e in doc["traceEvents"] if e.get("cat") == "kernel") / 1000


def ids(store: Path) -> dict[str, str]:
    """File name -> source id, as the store recorded them."""
    src = Store(store).table("sources")
    return {Path(p).name: s for s, p in src.select("source_id", "path").iter_rows()}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A: ranks 0 and 1 (two GPUs: two GPU-runs) and a telemetry log of another machine, months
    earlier (no GPU-run of its own, attributed to neither); B: rank 2."""
    root = tmp_path_factory.mktemp("gpu_runs")
    a, b = root / "A", root / "B"
    r = invoke("ingest", str(rank(0)), str(rank(1)), str(shared(NVML)), "--store", str(a))
    assert r.exit_code == 0, r.output
    assert invoke("ingest", str(rank(2)), "--store", str(b)).exit_code == 0
    return a, b


def test_a_store_of_several_gpu_runs_is_refused_with_their_list(stores: tuple[Path, Path]) -> None:
    a, b = stores
    r = invoke("compare", str(a), str(b))
    assert r.exit_code == 2, r.output  # misuse, as for one source needed and several given
    by_file = ids(a)
    runs = sorted((by_file[rank(n).name], rank(n).name) for n in (0, 1))
    listed = "; ".join(f"{sid} ({name})" for sid, name in runs)
    assert r.stderr == (
        f"traceanalyze: error: {a}: side A holds 2 GPU-runs: {listed}; choose one with --source "
        "ID (each side keeps the ids it holds; every file of a run), or pool them with --pool\n"
    )
    assert Path(NVML).name not in r.stderr  # telemetry alone is no GPU-run


def test_pool_says_how_many_and_keeps_unrelated_telemetry_out(stores: tuple[Path, Path]) -> None:
    a, b = stores
    r = invoke("compare", str(a), str(b), "--pool", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["a"], doc["b"]) == (f"A = {a} (pooled: 2 GPU-runs)", f"B = {b}")
    ov = {x["metric"]: x for x in doc["overview"]}
    assert ov["kernel_time_ms"]["a"] == pytest.approx(kernel_ms(rank(0)) + kernel_ms(rank(1)))
    assert ov["kernel_time_ms"]["b"] == pytest.approx(kernel_ms(rank(2)))
    for m in ("median_sm_clock_mhz", "median_power_w", "median_temperature_c"):
        assert ov[m]["a"] is None, (m, ov[m])  # the sampler log overlaps neither run
    r = invoke("compare", str(a), str(b), "--pool")
    assert r.stdout.splitlines()[0] == f"A = {a} (pooled: 2 GPU-runs)"


def test_source_picks_one_gpu_run_per_side(stores: tuple[Path, Path]) -> None:
    a, b = stores
    one, other = ids(a)[rank(1).name], ids(b)[rank(2).name]
    r = invoke("compare", str(a), str(b), "--source", one, "--source", other, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert "pooled" not in doc["a"]
    ov = {x["metric"]: x for x in doc["overview"]}
    assert ov["kernel_time_ms"]["a"] == pytest.approx(kernel_ms(rank(1)))
    assert ov["kernel_time_ms"]["b"] == pytest.approx(kernel_ms(rank(2)))


def test_library_refuses_or_pools(stores: tuple[Path, Path]) -> None:
    from traceanalyze.dataset import open_side
    from traceanalyze.errors import UsageProblem

    a, b = (open_side(p, lab) for p, lab in zip(stores, "AB", strict=True))
    with pytest.raises(UsageProblem, match="side A holds 2 GPU-runs"):
        a.compare(b)
    with pytest.raises(UsageProblem, match="side B holds 2 GPU-runs"):
        b.compare(a, ops=True)  # operators too: a side is one GPU-run whatever is matched
    assert b.compare(a, pool=True).b == f"B = {stores[0]} (pooled: 2 GPU-runs)"


def test_group_runs_joins_the_files_of_one_collect_run() -> None:
    from traceanalyze.analyses.gpu_runs import group_runs, representatives

    # A collect run's iteration log (4 iterations) and trace (2) share a key; another trace has
    # none; a sampler log has no work (not passed in): three sources with work, two GPU-runs.
    keys = {"log": "run1|bs2|rank0", "trace": "run1|bs2|rank0", "other": None, "nvml": None}
    stand_for = representatives({"log": 4, "trace": 2, "other": 5}, keys)
    assert stand_for == {"log": "log", "trace": "log", "other": "other", "nvml": "nvml"}
    assert group_runs(["trace", "other", "log"], stand_for) == {
        "log": ["log", "trace"],
        "other": ["other"],
    }
    assert group_runs([], stand_for) == {}
