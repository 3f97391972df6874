"""`ingest -j N`: files parsed in worker processes, committed by the caller, as serial ingest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SHARED_TRACES

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.cli import main
from traceanalyze.errors import MalformedInput
from traceanalyze.parallel import ingest_parallel

# Real captures of every text and SQLite format, small enough for the suite.
REAL = [
    "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz",
    "kineto_json/hta_amd_mi250_rocm62_kineto.json.gz",
    "kineto_json/hta_cupti_range_profiler_a100_trace.json.gz",
    "nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv",
    "nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv",
    "smi_logs/roofline_custom_nvml_sampler_rtx5070.csv",
    "ncu_csv/roofline_ncu2026.2_rtx5070_saxpy_long.csv",
    "nsys_sqlite/nsysai_mock_torch_tiny_nsys2026.1.sqlite",
    "nvprof_sqlite/profilinglm_pytorch_lm_v100_pyprof_net.sql",
]


def real_files() -> list[Path]:
    files = [SHARED_TRACES / r for r in REAL if (SHARED_TRACES / r).exists()]
    if len(files) < len(REAL):
        pytest.skip("../shared/traces is absent (a fresh clone without ../shared)")
    # every capture in fixtures/: not its notes (.md) nor a script that makes an input at test
    # time (fixtures/nsys_graph_trace/make.py)
    made = (".md", ".py")
    return [*files, *sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix not in made)]


def store_frames(root: Path) -> dict[str, pl.DataFrame]:
    """Every table of a store, rows in a fixed order (by source, then as the reader wrote)."""
    st = ta.Store(root)
    return {t: st.table(t).sort("source_id", maintain_order=True) for t in schema.TABLE_NAMES}


def assert_same_store(a: Path, b: Path) -> None:
    fa, fb = store_frames(a), store_frames(b)
    for t in schema.TABLE_NAMES:
        assert fa[t].equals(fb[t], null_equal=True), t
    assert sum(f.height for f in fa.values()) > 0


def snapshot(root: Path) -> dict[str, str]:
    if not root.exists():
        return {}
    out = {}
    for p in sorted(root.rglob("*")):
        if p.relative_to(root).parts[0] == ".staging":
            continue  # writers' liveness locks come and go (a later writer removes dead ones)
        out[str(p.relative_to(root))] = (
            "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        )
    return out


def test_same_store_table_by_table_as_serial(tmp_path: Path) -> None:
    files = real_files()
    serial = ta.ingest(files, tmp_path / "serial")
    seen: list[str] = []
    par = ingest_parallel(files, tmp_path / "par", jobs=2, on_result=lambda r: seen.append(r.path))
    assert par == serial
    assert sorted(seen) == sorted(str(f) for f in files)
    assert_same_store(tmp_path / "serial", tmp_path / "par")
    # Again: every file unchanged, nothing written.
    before = snapshot(tmp_path / "par")
    again = ingest_parallel(files, tmp_path / "par", jobs=2)
    assert [r.status for r in again] == ["unchanged"] * len(files)
    assert snapshot(tmp_path / "par") == before


def test_bad_file_commits_nothing_and_names_the_file(tmp_path: Path, write) -> None:
    files = real_files()[:4]
    bad = write("bad.pt.trace.json", '{"traceEvents": [{"ph": "X", "ts": ')
    root = tmp_path / "st"
    # A new store: nothing at all is left. An existing one: byte-identical.
    with pytest.raises(MalformedInput) as ei:
        ingest_parallel([*files, bad], root, jobs=2)
    assert ei.value.path == str(bad)
    assert str(ei.value).startswith(f"{bad}: ")
    assert not root.exists()
    ta.ingest(files[:1], root)
    before = snapshot(root)
    with pytest.raises(MalformedInput):
        ingest_parallel([bad, *files], root, jobs=2)
    assert snapshot(root) == before


def test_repeated_file_and_force_as_serial(tmp_path: Path) -> None:
    f = real_files()[3:5]
    args = [f[0], f[1], f[0]]
    serial = ta.ingest(args, tmp_path / "a")
    par = ingest_parallel(args, tmp_path / "b", jobs=2)
    assert [r.status for r in par] == ["ingested", "ingested", "unchanged"]
    assert par == serial
    forced = ingest_parallel(f, tmp_path / "b", jobs=2, force=True)
    assert [r.status for r in forced] == ["replaced", "replaced"]
    assert_same_store(tmp_path / "a", tmp_path / "b")


def test_cli_jobs(tmp_path: Path, write) -> None:
    files = [str(p) for p in real_files()[3:6]]
    r1 = CliRunner().invoke(main, ["ingest", *files, "--store", str(tmp_path / "a")])
    r2 = CliRunner().invoke(main, ["ingest", *files, "--store", str(tmp_path / "b"), "-j", "2"])
    assert r1.exit_code == r2.exit_code == 0
    assert r2.output == r1.output
    assert_same_store(tmp_path / "a", tmp_path / "b")
    # Two bad files: the error is the first one's in input order, as in serial ingest.
    bad = [write("empty.csv", ""), write("garbage.csv", b"\x00\x01" * 100)]
    args = ["ingest", files[0], str(bad[0]), files[1], str(bad[1]), "--format", "nvprof_csv"]
    r1 = CliRunner().invoke(main, [*args, "--store", str(tmp_path / "c")])
    r2 = CliRunner().invoke(main, [*args, "--store", str(tmp_path / "c"), "-j", "2"])
    assert r1.exit_code == r2.exit_code == 1
    assert r2.output == r1.output == f"traceanalyze: error: {bad[0]}: empty file\n"
    assert not (tmp_path / "c").exists()
    r = CliRunner().invoke(main, ["ingest", *files, "--store", str(tmp_path / "c"), "-j", "0"])
    assert r.exit_code == 2
