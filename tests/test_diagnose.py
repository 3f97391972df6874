"""`diagnose`: each rule on small inline frames with hand-computed answers, and the issue's
checks on real traces with expected values computed from the raw files (sqlite3, json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from _trace_raw import NSYS2, RESNET, sql
from click.testing import CliRunner
from conftest import ROOT, shared

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.analyses import diagnose as dg
from traceanalyze.analyses.diagnose import comm, gpu, host, memory, steps
from traceanalyze.analyses.diagnose.model import Inputs, Skip, family, family_regex
from traceanalyze.cli import main, render
from traceanalyze.export.diagnose_report import reproduce
from traceanalyze.results import Diagnosis, Finding

DLRM = ROOT.parent / "shared" / "sets" / "multirank_param_dlrm_8xv100"
SPLIT = ("gpu_compute_ms", "gpu_comm_ms", "gpu_memory_ms", "host_ms", "launch_ms", "sync_ms")


def path(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Critical-path rows: source "s", the given columns, every other split column 0."""
    full = []
    for i, r in enumerate(rows):
        base = {c: 0.0 for c in (*SPLIT, "idle_ms", "carry_ms")}
        base |= {"source_id": "s", "iteration": 100 + i, "duration_ms": 10.0}
        base |= r
        base["path_ms"] = sum(base[c] for c in (*SPLIT, "idle_ms", "carry_ms"))
        full.append(base)
    return pl.DataFrame(full)


def inputs(**over: Any) -> Inputs:
    empty = {t: schema.empty(t) for t in ("kernels", "memcpy", "api_calls", "devices")}
    host_cols = {
        "source_id": pl.String,
        "name": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
    }
    base: dict[str, Any] = {
        "path": path([{"gpu_compute_ms": 10.0}]),
        "path_events": pl.DataFrame(),
        "host": pl.DataFrame(schema=host_cols),
        "iterations": schema.empty("iterations"),
        **empty,
    }
    return Inputs(**(base | over))


def kernels(rows: list[tuple[str, int, int]], source: str = "s") -> pl.DataFrame:
    df = pl.DataFrame(
        [{"source_id": source, "name": n, "start_ns": a, "end_ns": b} for n, a, b in rows]
    )
    return pl.concat([schema.empty("kernels"), df], how="diagonal_relaxed")


# --- rules on inline frames --------------------------------------------------------------------


def test_pageable_memcpy_counts_either_side_and_skips_without_kinds() -> None:
    m = pl.concat(
        [
            schema.empty("memcpy"),
            pl.DataFrame(
                {
                    "source_id": ["s"] * 4,
                    "kind": ["HtoD", "HtoD", "DtoH", "memset"],
                    "src_kind": ["Pageable", "Pinned", "Device", None],
                    "dst_kind": ["Device", "Device", "Pageable", "Device"],
                    "size_bytes": [100, 200, 300, 400],
                    "start_ns": [0, 10, 20, 30],
                    "end_ns": [5, 15, 27, 31],
                }
            ),
        ],
        how="diagonal_relaxed",
    )
    (f,) = memory.pageable_memcpy(inputs(memcpy=m))  # type: ignore[misc]
    assert f.evidence["count"] == 2 and f.evidence["bytes"] == 400
    assert f.evidence["total_ms"] == pytest.approx(12e-6)
    assert f.what_if is None
    blind = m.with_columns(src_kind=pl.lit(None, pl.String), dst_kind=pl.lit(None, pl.String))
    assert isinstance(memory.pageable_memcpy(inputs(memcpy=blind)), Skip)
    pinned = m.filter(pl.col("src_kind") == "Pinned")
    assert memory.pageable_memcpy(inputs(memcpy=pinned)) == []


def test_sync_memcpy_is_the_calls_without_async() -> None:
    calls = pl.concat(
        [
            schema.empty("api_calls"),
            pl.DataFrame(
                {
                    "source_id": ["s"] * 4,
                    "name": ["cudaMemcpy", "cudaMemcpyAsync", "cuMemcpyHtoD_v2", "cudaMemset"],
                    "start_ns": [0, 0, 0, 0],
                    "end_ns": [1_000_000, 9, 2_000_000, 500_000],
                }
            ),
        ],
        how="diagonal_relaxed",
    )
    (f,) = memory.sync_memcpy(inputs(api_calls=calls))  # type: ignore[misc]
    assert f.evidence["count"] == 3
    assert f.problem_ms == pytest.approx(3.5)  # one iteration
    assert isinstance(memory.sync_memcpy(inputs()), Skip)


def test_data_loader_time_per_iteration_and_its_what_if() -> None:
    name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    h = pl.DataFrame(
        {
            "source_id": ["s"] * 3,
            "name": [name, name, "aten::conv2d"],
            "start_ns": [0, 100_000_000, 0],
            "end_ns": [30_000_000, 130_000_000, 50_000_000],
        }
    )
    p = path([{"host_ms": 40.0}, {"host_ms": 40.0}])
    (f,) = host.data_loader(inputs(host=h, path=p))  # type: ignore[misc]
    assert f.problem_ms == pytest.approx(30.0) and f.evidence["count"] == 2
    assert f.what_if == "op:DataLoader=0"
    assert host.data_loader(inputs(host=h.filter(pl.col("name") == "aten::conv2d"))) == []
    assert isinstance(host.data_loader(inputs()), Skip)


def test_host_bound_from_the_paths_share() -> None:
    p = path([{"host_ms": 30.0, "launch_ms": 5.0, "gpu_compute_ms": 65.0, "carry_ms": 500.0}])
    (f,) = host.host_bound(inputs(path=p))  # type: ignore[misc]
    assert f.evidence["host_share_pct"] == pytest.approx(35.0)  # the carry left out
    assert "CUDA graph" in f.advice  # GPU work on the path: the launch overhead is worth cutting
    low = path([{"host_ms": 10.0, "gpu_compute_ms": 90.0}])
    assert host.host_bound(inputs(path=low)) == []


def test_sync_names_calls_and_scalar_reads() -> None:
    calls = pl.concat(
        [
            schema.empty("api_calls"),
            pl.DataFrame(
                {
                    "source_id": ["s"] * 2,
                    "name": ["cudaStreamSynchronize", "cudaLaunchKernel"],
                    "start_ns": [0, 0],
                    "end_ns": [2_000_000, 5],
                }
            ),
        ],
        how="diagonal_relaxed",
    )
    h = pl.DataFrame(
        {"source_id": ["s"], "name": ["aten::item"], "start_ns": [0], "end_ns": [1_000_000]}
    )
    p = path([{"sync_ms": 1.5, "gpu_compute_ms": 8.5}])
    (f,) = host.sync(inputs(api_calls=calls, host=h, path=p))  # type: ignore[misc]
    assert f.evidence["count"] == 2 and f.evidence["scalar_reads_count"] == 1
    assert f.problem_ms == pytest.approx(1.0 + 1.5)
    assert f.what_if == f"op:{host.SYNC_OPS}=0"


def test_small_kernels_needs_a_majority_and_enough_per_iteration() -> None:
    many = kernels([("k", i * 100_000, i * 100_000 + 3_000) for i in range(150)])
    (f,) = host.small_kernels(inputs(kernels=many))  # type: ignore[misc]
    assert f.evidence["count"] == 150 and f.what_if == "launch=0"
    few = kernels([("k", i * 100_000, i * 100_000 + 3_000) for i in range(50)])
    assert host.small_kernels(inputs(kernels=few)) == []


def test_no_tensor_cores_only_on_a_gpu_that_has_them() -> None:
    k = kernels([("volta_sgemm_128x64_nn", 0, 4_000_000), ("volta_s884gemm_fp16", 0, 1_000_000)])
    dev = pl.concat(
        [
            schema.empty("devices"),
            pl.DataFrame({"source_id": ["s"], "compute_capability": ["7.0"]}),
        ],
        how="diagonal_relaxed",
    )
    (f,) = gpu.no_tensor_cores(inputs(kernels=k, devices=dev))  # type: ignore[misc]
    assert f.evidence["count"] == 1 and f.evidence["total_ms"] == pytest.approx(4.0)
    assert f.evidence["assumed"] is True and f.what_if == f"kernel:{gpu.FP32_MATH}=0.5"
    pascal = dev.with_columns(compute_capability=pl.lit("6.1"))
    assert gpu.no_tensor_cores(inputs(kernels=k, devices=pascal)) == []
    assert isinstance(gpu.no_tensor_cores(inputs(kernels=k)), Skip)


def test_layout_transposes_and_gpu_bound_groups() -> None:
    k = kernels(
        [
            ("void cudnn::ops::nchwToNhwcKernel<float>(int)", 0, 1_000_000),
            ("void at::native::elementwise_kernel<4>(int)", 0, 6_000_000),
            ("void at::native::elementwise_kernel<8>(int)", 0, 2_000_000),
        ]
    )
    (t,) = gpu.layout_transposes(inputs(kernels=k))  # type: ignore[misc]
    assert t.evidence["count"] == 1 and t.what_if == f"kernel:{gpu.TRANSPOSE}=0"
    ev = pl.DataFrame(
        {
            "kind": ["kernel"],
            "name": ["void at::native::elementwise_kernel<4>(int)"],
            "path_ms": [6.0],
            "launched_by": ["aten::add"],
        }
    )
    (g,) = gpu.gpu_bound(inputs(kernels=k, path_events=ev))  # type: ignore[misc]
    top = g.evidence["groups"][0]
    assert top["name"] == "at::native::elementwise_kernel" and top["total_ms"] == pytest.approx(8.0)
    assert top["launched_by"] == "aten::add" and g.what_if == top["what_if"]
    assert family("void cudnn::bn_fw<float, 512>(x)") == "cudnn::bn_fw"
    rx = family_regex("cudnn::bn_fw")
    assert pl.Series(["void cudnn::bn_fw<f>", "cudnn::bn_fw2"]).str.contains(rx).to_list() == [
        True,
        False,
    ]


def test_exposed_comm_and_straggler_skip_without_their_inputs() -> None:
    assert isinstance(comm.exposed_comm(inputs()), Skip)
    assert isinstance(comm.straggler(inputs()), Skip)
    ov = pl.DataFrame(
        {
            "source_id": ["s"],
            "device_id": [0],
            "iteration": pl.Series([None], dtype=pl.Int64),
            "comm_ns": [4_000_000],
            "exposed_ns": [3_000_000],
            "overlap_pct": [25.0],
        }
    )
    (f,) = comm.exposed_comm(inputs(overlap=ov))  # type: ignore[misc]
    assert f.evidence["exposed_ms_per_iteration"] == pytest.approx(3.0)
    assert f.problem_ms == pytest.approx(4.0)


def test_throttling_against_the_highest_clock_reached() -> None:
    a = pl.DataFrame(
        {
            "source_id": ["s", "s"],
            "device_id": [0, 0],
            "start_ns": [0, 0],
            "end_ns": [1_000_000, 3_000_000],
            "sm_clock_mhz": [1500.0, 1100.0],
            "samples_source_id": ["t", "t"],
            "samples_device_id": [0, 0],
        }
    )
    samples = pl.DataFrame(
        {"source_id": ["t"] * 2, "device_id": [0, 0], "sm_clock_mhz": [1500.0, 1000.0]}
    )
    (f,) = steps.throttling(inputs(attribute=a, samples=samples))  # type: ignore[misc]
    clock = (1500 * 1 + 1100 * 3) / 4  # duration-weighted
    assert f.evidence["devices"][0]["clock_mhz"] == pytest.approx(clock)
    assert f.what_if == f"kernel:.={round(clock / 1500, 3)}"
    assert isinstance(steps.throttling(inputs()), Skip)


def test_warmup_and_outlier_iterations() -> None:
    durs = [300.0, 100.0, 101.0, 99.0, 100.0, 180.0, 100.0]
    p = path([{"gpu_compute_ms": 1.0, "duration_ms": d} for d in durs])
    out = steps.iteration_variability(inputs(path=p))
    assert isinstance(out, list)
    by = {f.rule: f for f in out}
    assert [r["iteration"] for r in by["warmup"].evidence["iterations"]] == [100]
    assert [r["iteration"] for r in by["iteration_variability"].evidence["iterations"]] == [105]


def test_finalize_orders_by_saving_then_severity() -> None:
    def f(rule: str, what_if: str | None, sev: str = "low") -> Finding:
        return Finding(rule, sev, rule, "", {}, {}, what_if=what_if, problem_ms=5.0)

    out = dg.finalize(
        [f("a", None, "medium"), f("b", "x"), f("c", "y"), f("d", None, "high")],
        {"x": 1.0, "y": 20.0},
        100.0,
    )
    assert [x.rule for x in out] == ["c", "b", "d", "a"]
    assert out[0].severity == "high" and out[0].saving_pct == pytest.approx(20.0)
    assert out[1].severity == "low"


def test_verdict_from_the_split_without_the_carry() -> None:
    p = path([{"gpu_compute_ms": 70.0, "host_ms": 30.0, "carry_ms": 900.0}])
    v = dg.verdict(inputs(path=p))
    assert v["bound"] == "gpu" and v["shares_pct"]["gpu"] == pytest.approx(70.0)
    p = path([{"gpu_compute_ms": 50.0, "host_ms": 50.0}])
    assert dg.verdict(inputs(path=p))["bound"] == "mixed"


# --- real traces --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet() -> Diagnosis:
    return ta.open(shared(RESNET)).diagnose()


@pytest.fixture(scope="module")
def nsys2() -> Diagnosis:
    return ta.open(shared(NSYS2)).diagnose()


@pytest.fixture(scope="module")
def dlrm() -> Diagnosis:
    files = sorted(DLRM.glob("*.pt.trace.json.gz"))
    if len(files) != 8:
        pytest.skip("../shared/sets/multirank_param_dlrm_8xv100 is absent")
    return ta.open(*files).diagnose()


HOST_RULES = {
    "data_loader",
    "host_bound",
    "sync",
    "sync_memcpy",
    "pageable_memcpy",
    "small_kernels",
}


def test_resnet_is_gpu_bound_with_no_host_finding_above_5pct(resnet: Diagnosis) -> None:
    assert resnet.verdict["bound"] == "gpu"
    assert resnet.verdict["shares_pct"]["gpu"] > 90  # HTA: 97.9 % of the path is GPU compute
    mean_own = resnet.verdict["mean_own_path_ms"]
    for f in resnet.findings:
        if f.rule in HOST_RULES:
            share = (
                f.saving_pct if f.saving_pct is not None else 100 * (f.problem_ms or 0) / mean_own
            )
            assert share <= 5, f.title
    assert {f.rule for f in resnet.findings} >= {"gpu_bound", "no_tensor_cores"}


def test_nsys_pageable_copies_exactly_as_the_export_counts_them(nsys2: Diagnosis) -> None:
    p = shared(NSYS2)
    ((n,),) = sql(
        p,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m WHERE m.srcKind IN "
        "(SELECT id FROM ENUM_CUDA_MEM_KIND WHERE name LIKE '%PAGEABLE') OR m.dstKind IN "
        "(SELECT id FROM ENUM_CUDA_MEM_KIND WHERE name LIKE '%PAGEABLE')",
    )
    assert n == 34
    (f,) = [f for f in nsys2.findings if f.rule == "pageable_memcpy"]
    assert f.evidence["count"] == n


def test_dlrm_straggler_is_rank_7(dlrm: Diagnosis) -> None:
    (f,) = [f for f in dlrm.findings if f.rule == "straggler"]
    assert f.where["rank"] == 7
    assert "rank 7" in f.title and f.evidence["cause"]


def test_savings_never_above_the_problems_own_time(
    resnet: Diagnosis, nsys2: Diagnosis, dlrm: Diagnosis
) -> None:
    for d in (resnet, nsys2, dlrm):
        for f in d.findings:
            if f.saving_ms is not None and f.problem_ms is not None:
                assert f.saving_ms <= 1.1 * f.problem_ms + 1e-3, f.title
            if f.saving_ms is not None:
                assert f.saving_ms >= -1e-6
        savings = [f.saving_ms for f in d.findings if f.saving_ms is not None]
        assert savings == sorted(savings, reverse=True)


def _replayed(args: list[str], spec: str, iterations: list[int | None]) -> float:
    """mean(path_ms − predicted_ms) over the rows of `critical-path ARGS --what-if SPEC
    --json`, once per entry of `iterations` (`None`: one run with `--each-iteration`)."""
    rows: list[dict[str, Any]] = []
    for n in iterations:
        more = ["--iteration", str(n)] if n is not None else ["--each-iteration"]
        r = CliRunner().invoke(main, ["critical-path", *args, "--what-if", spec, "--json", *more])
        assert r.exit_code == 0, r.output
        rows += json.loads(r.stdout)
    return sum(r["path_ms"] - r["predicted_ms"] for r in rows) / len(rows)


def test_saving_is_the_critical_path_replay_of_its_what_if(
    resnet: Diagnosis, nsys2: Diagnosis
) -> None:
    for d in (nsys2, resnet):
        its = d.iterations["iteration"].drop_nulls().unique().sort().to_list()
        done = 0
        for f in d.findings:
            if f.what_if is None or done == 2:
                continue
            # the one command the report prints, and the same as one --iteration N run each
            got = _replayed(list(d.inputs), f.what_if, [None])
            assert got == pytest.approx(f.saving_ms, abs=1e-3), f.rule
            if its and done == 0:
                each = _replayed(list(d.inputs), f.what_if, its)
                assert each == pytest.approx(got, abs=1e-3), f.rule
            assert "--each-iteration" in reproduce(d, f.what_if)
            done += 1
        assert done


def test_cli_json_equals_the_library(nsys2: Diagnosis) -> None:
    r = CliRunner().invoke(main, ["diagnose", str(shared(NSYS2)), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got == json.loads(render.to_json(nsys2.to_dict()))
    assert [f["rule"] for f in got["findings"]][:1] == ["gpu_bound"]
    assert {"verdict", "findings", "not_checked"} <= set(got)


def test_report_html_is_self_contained_and_markdown_says_the_same(
    nsys2: Diagnosis, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    nsys2.to_html(out)
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert page.count("<svg") >= 1 + sum(1 for f in nsys2.findings if f.evidence)
    md = nsys2.to_markdown()
    for f in nsys2.findings:
        assert f.title in md
    assert "critical-path" in md and "--what-if" in md


def test_a_store_of_the_run_gives_the_same_findings(nsys2: Diagnosis, tmp_path: Path) -> None:
    ta.ingest([shared(NSYS2)], tmp_path / "store")
    d = ta.open(store=tmp_path / "store").diagnose()
    assert [(f.rule, f.title) for f in d.findings] == [(f.rule, f.title) for f in nsys2.findings]
    assert d.inputs == ("--store", str(tmp_path / "store"))


def test_host_bound_what_if_names_only_the_outermost_ranges() -> None:
    # an `op:` factor compounds over nested matches, so the what-if names the outer ranges
    h = pl.DataFrame(
        {
            "source_id": ["s"] * 4,
            "process_id": [1] * 4,
            "thread_id": [1, 1, 1, 2],
            "name": ["ProfilerStep#7", "aten::conv2d", "ProfilerStep#8", "a.b"],
            "start_ns": [0, 10, 100, 5],
            "end_ns": [90, 20, 190, 6],
        }
    )
    rx = host.outer_regex(h)
    assert rx == r"^(ProfilerStep\#\d+|a\.b)$"
    names = pl.Series(["ProfilerStep#123", "aten::conv2d", "a.b", "axb"])
    assert names.str.contains(rx).to_list() == [True, False, True, False]
    p = path([{"host_ms": 30.0, "gpu_compute_ms": 70.0}])
    (f,) = host.host_bound(inputs(path=p, host=h))  # type: ignore[misc]
    assert f.what_if == f"op:{rx}=0.5"


def test_group_what_ifs_are_replayed_only_when_asked() -> None:
    groups = [{"what_if": "kernel:a=0.5"}, {"what_if": "kernel:b=0.5"}]
    f = Finding("gpu_bound", "info", "t", "", {"groups": groups}, {}, what_if="kernel:a=0.5")
    assert dg.specs([f]) == ["kernel:a=0.5"]
    assert dg.specs([f], groups=True) == ["kernel:a=0.5", "kernel:b=0.5"]
    (out,) = dg.finalize([f], {"kernel:a=0.5": 2.0}, 10.0)
    assert [g["saving_ms_per_iteration"] for g in out.evidence["groups"]] == [2.0, None]


def _x(name: str, cat: str, ts: int, dur: int) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def test_a_data_loader_annotation_is_found_and_its_saving_replayed(write) -> None:
    """Two 100 ms steps, each 60 ms in the loader's `__next__` (a `record_function`
    annotation, as the PyTorch profiler writes it) then 30 ms of operator: removing the loader
    saves its 60 ms; halving the host time inside the step saves 50 ms."""
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = []
    for i, t0 in enumerate((1_000, 101_000)):
        events += [
            _x(f"ProfilerStep#{i + 1}", "user_annotation", t0, 100_000),
            _x(loader, "user_annotation", t0 + 10, 60_000),
            _x("aten::conv2d", "cpu_op", t0 + 69_000, 30_000),
        ]
    p = write("dl.json", json.dumps({"schemaVersion": 1, "traceEvents": events}))
    d = ta.open(p).diagnose()
    by = {f.rule: f for f in d.findings}
    assert d.verdict["bound"] == "host"
    assert by["data_loader"].problem_ms == pytest.approx(60.0)
    assert by["data_loader"].saving_ms == pytest.approx(60.0, abs=1e-3)
    assert by["host_bound"].what_if == r"op:^(ProfilerStep\#\d+)$=0.5"
    assert by["host_bound"].saving_ms == pytest.approx(50.0, abs=1e-3)
    assert [f.rule for f in d.findings][:2] == ["data_loader", "host_bound"]
    # no kernel or copy in it: a CPU run, for which CUDA graphs are no advice
    assert "no GPU work" in by["host_bound"].title
    assert "CUDA graph" not in by["host_bound"].advice
