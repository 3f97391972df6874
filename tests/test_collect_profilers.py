"""`traceanalyze collect`: exact command lines per profiler, refusals, missing binaries, dry run.

No GPU is needed: the device and compute capabilities are injected into `plan()`, and profiler
binaries are stand-in shell scripts on a monkeypatched PATH.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import have

from traceanalyze.cli import main
from traceanalyze.collect import profilers as P
from traceanalyze.collect.run import (
    CollectConfig,
    default_profile_window,
    default_torch_schedule,
    plan,
)
from traceanalyze.errors import CollectError, ToolNotFound

PY = sys.executable
WL = [PY, "-m", "traceanalyze.collect.resnet50"]


def fake_bin(d: Path, name: str, body: str = "exit 0") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return p


@pytest.fixture
def only_fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holding only a directory of stand-in binaries, so no real profiler is found."""
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", str(d))
    return d


def cfg(tmp_path: Path, **kw: object) -> CollectConfig:
    base: dict[str, object] = {
        "out": tmp_path / "runs",
        "batch_sizes": (64,),
        "iterations": 20,
        "warmup": 5,
        "run_id": "RID",
    }
    base.update(kw)
    return CollectConfig(**base)  # type: ignore[arg-type]


def wl(run: Path, bs: int = 64, device: str = "cuda", extra: tuple[str, ...] = ()) -> list[str]:
    return [
        *WL,
        "--out",
        str(run),
        "--batch-size",
        str(bs),
        "--iterations",
        "20",
        "--warmup",
        "5",
        "--precision",
        "fp32",
        "--image-size",
        "224",
        "--device",
        device,
        *extra,
    ]


# --- pure builders ---------------------------------------------------------------------------


def test_nvprof_argv_is_the_sc22_command() -> None:
    assert P.nvprof_argv("/r", ["python", "t.py"]) == [
        "nvprof",
        "--print-gpu-trace",
        "--system-profiling",
        "on",
        "--kernel-latency-timestamps",
        "on",
        "--csv",
        "--log-file",
        "/r/nvprof_%p.csv",
        "--profile-child-processes",
        "python",
        "t.py",
    ]


NSYS_PROFILE = [
    "nsys",
    "profile",
    "--trace=cuda,nvtx,cudnn,cublas",
    "--capture-range=cudaProfilerApi",
    "--capture-range-end=stop",
    "--force-overwrite=true",
    "-o",
]


@pytest.mark.parametrize("gpu_metrics", [False, True])
def test_nsys_argv(gpu_metrics: bool) -> None:
    expected = [*NSYS_PROFILE, "/r/nsys_bs32_rank%q{RANK}"]
    if gpu_metrics:
        expected.append("--gpu-metrics-devices=all")
    assert P.nsys_argv("/r", 32, ["x"], gpu_metrics=gpu_metrics) == [*expected, "x"]


def test_nsys_report_names_carry_the_node_on_multinode_runs() -> None:
    argv = P.nsys_argv("/r", 32, ["x"], node=3)
    assert argv == [*NSYS_PROFILE, "/r/nsys_bs32_node3_rank%q{RANK}", "x"]


# The wrapper torchrun starts once per rank when several ranks share a node's GPUs: only local
# rank 0 passes `--gpu-metrics-devices=all`, the others `none` (one GPU-metrics sampler per GPU).
GM_SCRIPT = (
    'gm=none; if [ "${LOCAL_RANK:-0}" = 0 ]; then gm=all; fi; exec nsys profile '
    "--trace=cuda,nvtx,cudnn,cublas --capture-range=cudaProfilerApi --capture-range-end=stop "
    "--force-overwrite=true -o '/r/nsys_bs32_rank%q{RANK}' "
    '"--gpu-metrics-devices=$gm" "$@"'
)


def test_nsys_gpu_metrics_with_several_local_ranks_argv() -> None:
    argv = P.nsys_argv(
        "/r", 32, ["python", "-m", "w", "--x", "a b"], gpu_metrics=True, local_ranks=4
    )
    assert argv == ["sh", "-c", GM_SCRIPT, "nsys", "python", "-m", "w", "--x", "a b"]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
@pytest.mark.parametrize("local_rank,devices", [("0", "all"), ("1", "none"), ("3", "none")])
def test_nsys_gpu_metrics_wrapper_samples_on_local_rank_0_only(
    tmp_path: Path, only_fake_path: Path, local_rank: str, devices: str
) -> None:
    # A stand-in nsys that prints its arguments one per line; sh itself from /bin.
    fake_bin(only_fake_path, "nsys", 'for a in "$@"; do echo "$a"; done')
    argv = P.nsys_argv("/r", 32, ["python", "a b"], gpu_metrics=True, local_ranks=2)
    env = {"PATH": f"{only_fake_path}:/bin:/usr/bin", "LOCAL_RANK": local_rank}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        *NSYS_PROFILE[1:],
        "/r/nsys_bs32_rank%q{RANK}",
        f"--gpu-metrics-devices={devices}",
        "python",
        "a b",
    ]


def test_nsys_export_argv() -> None:
    assert P.nsys_export_argv("/r/nsys_bs32_rank0.nsys-rep") == [
        "nsys",
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        "--output",
        "/r/nsys_bs32_rank0.sqlite",
        "/r/nsys_bs32_rank0.nsys-rep",
    ]


def test_nsys_export_argv_old_qdrep() -> None:
    assert P.nsys_export_argv("/r/a.qdrep")[-2:] == ["/r/a.sqlite", "/r/a.qdrep"]


def test_ncu_argv() -> None:
    assert P.ncu_argv("/r", 128, ["x", "y"], ["m1", "m2"]) == [
        "ncu",
        "--target-processes",
        "all",
        "--profile-from-start",
        "off",
        "--metrics",
        "m1,m2",
        "--csv",
        "--log-file",
        "/r/batch_128.csv",
        "x",
        "y",
    ]


def test_ncu_argv_multinode_log_per_node() -> None:
    argv = P.ncu_argv("/r", 128, ["x"], ["m1"], node=2)
    assert argv[argv.index("--log-file") + 1] == "/r/batch_128_node2.csv"


@pytest.mark.parametrize("name", ["batch_128.csv", "batch_128_node0.csv", "batch_128_node2.csv"])
def test_coreutil_reads_the_batch_size_from_every_ncu_log_name(name: str) -> None:
    from traceanalyze.analyses.coreutil import batch_size_from_name

    assert batch_size_from_name(f"/runs/R/{name}") == 128


# `ncu --query-metrics` prints a table: name, description. Excerpts in the layout of ncu 2023+.
QUERY_VOLTA = """\
Device TITAN V (GV100)
------------------------------------------------------ --------------------------------------
Metric Name                                            Metric Description
------------------------------------------------------ --------------------------------------
gpc__cycles_elapsed                                    # of cycles where GPC was active
gpu__time_duration                                     total duration in nanoseconds
sm__inst_executed_pipe_fma                             # of warp instructions executed by fma pipe
sm__inst_executed_pipe_fp16                            # of warp instructions executed by fp16 pipe
sm__inst_executed_pipe_tensor                          # of warp instructions by tensor pipe
sm__inst_executed_pipe_xu                              # of warp instructions executed by xu pipe
"""
# GH100 lists no `…_pipe_fp16`: FP16x2 is dual-issued to the fmaheavy/fmalite pipes (NVIDIA forum,
# "Separate CUDA core pipeline for fp16 and fp32"); public H100 pipe dumps show `…_fma_type_fp16`,
# `…_tensor_op_hmma` and `…_tensor_op_gmma` instead.
QUERY_HOPPER = """\
Device NVIDIA H100 80GB HBM3 (GH100)
Metric Name                                            Metric Description
gpc__cycles_elapsed                                    # of cycles where GPC was active
sm__inst_executed_pipe_fma                             # of warp instructions executed by fma pipe
sm__inst_executed_pipe_fma_type_fp16                   # of warp instructions executed by fma pipe
sm__inst_executed_pipe_fmaheavy                        # of warp instructions executed by fmaheavy
sm__inst_executed_pipe_tensor_op_gmma                  # of warpgroup MMA instructions
sm__inst_executed_pipe_tensor_op_hmma                  # of HMMA instructions
sm__inst_executed_pipe_xu                              # of warp instructions executed by xu pipe
"""
# GA10x (RTX 3090, cc 8.6): no FP16 pipe, no warpgroup MMA.
QUERY_GA102 = """\
Device NVIDIA GeForce RTX 3090 (GA102)
Metric Name                                            Metric Description
gpc__cycles_elapsed                                    # of cycles where GPC was active
sm__inst_executed_pipe_fma                             # of warp instructions executed by fma pipe
sm__inst_executed_pipe_fmaheavy                        # of warp instructions executed by fmaheavy
sm__inst_executed_pipe_tensor_op_hmma                  # of HMMA instructions
sm__inst_executed_pipe_xu                              # of warp instructions executed by xu pipe
"""
S = ".avg.pct_of_peak_sustained_elapsed"
EXTRA = ["gpc__cycles_elapsed.max", "gpu__time_duration.sum"]


def test_parse_query_metrics() -> None:
    names = P.parse_query_metrics(QUERY_VOLTA)
    assert names == {
        "gpc__cycles_elapsed",
        "gpu__time_duration",
        "sm__inst_executed_pipe_fma",
        "sm__inst_executed_pipe_fp16",
        "sm__inst_executed_pipe_tensor",
        "sm__inst_executed_pipe_xu",
    }


def test_choose_ncu_metrics_volta_matches_tbd_suite() -> None:
    got = P.choose_ncu_metrics(P.parse_query_metrics(QUERY_VOLTA))
    assert got == [
        "sm__inst_executed_pipe_fma" + S,
        "sm__inst_executed_pipe_fp16" + S,
        "sm__inst_executed_pipe_tensor" + S,
        "sm__inst_executed_pipe_xu" + S,
        *EXTRA,
    ]


def test_choose_ncu_metrics_hopper_takes_hmma_and_gmma_without_fp16() -> None:
    sel = P.select_ncu_metrics(P.parse_query_metrics(QUERY_HOPPER))
    assert list(sel.metrics) == [
        "sm__inst_executed_pipe_fma" + S,
        "sm__inst_executed_pipe_tensor_op_hmma" + S,
        "sm__inst_executed_pipe_tensor_op_gmma" + S,
        "sm__inst_executed_pipe_xu" + S,
        *EXTRA,
    ]
    assert sel.omitted == ("fp16",)
    assert P.choose_ncu_metrics(P.parse_query_metrics(QUERY_HOPPER)) == list(sel.metrics)


def test_ncu_metrics_without_an_fp16_pipe_are_collected_and_say_so() -> None:
    # GA10x: collection starts (FP16 is optional); the notes name the pipe that is left out.
    sel = P.select_ncu_metrics(P.parse_query_metrics(QUERY_GA102))
    assert list(sel.metrics) == [
        "sm__inst_executed_pipe_fma" + S,
        "sm__inst_executed_pipe_tensor_op_hmma" + S,
        "sm__inst_executed_pipe_xu" + S,
        *EXTRA,
    ]
    notes = sel.notes()
    assert notes[0] == "ncu metric names from ncu --query-metrics"
    assert len(notes) == 2 and "FP16 pipe not collected" in notes[1]
    assert "sm__inst_executed_pipe_fp16" in notes[1]


def test_volta_query_has_nothing_omitted() -> None:
    sel = P.select_ncu_metrics(P.parse_query_metrics(QUERY_VOLTA))
    assert sel.omitted == () and sel.notes() == ["ncu metric names from ncu --query-metrics"]


FMA, FP16, XU = (f"sm__inst_executed_pipe_{x}" for x in ("fma", "fp16", "xu"))
HMMA, GMMA = "sm__inst_executed_pipe_tensor_op_hmma", "sm__inst_executed_pipe_tensor_op_gmma"


@pytest.mark.parametrize(
    "cc,bases",
    [
        # Volta/Turing: the TBD suite's four metrics.
        ((7, 0), [FMA, FP16, "sm__inst_executed_pipe_tensor", XU]),
        ((7, 5), [FMA, FP16, "sm__inst_executed_pipe_tensor", XU]),
        # GA100 has an FP16 pipe (shared with Tensor/FP64); GA10x, Orin and Ada do not.
        ((8, 0), [FMA, FP16, HMMA, XU]),
        ((8, 6), [FMA, HMMA, XU]),
        ((8, 7), [FMA, HMMA, XU]),
        ((8, 9), [FMA, HMMA, XU]),
        # Hopper: HMMA and warpgroup MMA, no FP16 pipe.
        ((9, 0), [FMA, HMMA, GMMA, XU]),
    ],
)
def test_ncu_fallback_by_compute_capability(cc: tuple[int, int], bases: list[str]) -> None:
    assert P.choose_ncu_metrics(None, cc) == [b + S for b in bases] + EXTRA


@pytest.mark.parametrize("cc", [(10, 0), (10, 3), (12, 0), (6, 1)])
def test_ncu_fallback_guesses_nothing_for_unlisted_architectures(cc: tuple[int, int]) -> None:
    # Blackwell's tensor counters are named differently (no Hopper `…_tensor_op_gmma`); Pascal
    # predates these metrics. No fallback: the live query or --ncu-metrics.
    with pytest.raises(CollectError, match=r"no fallback ncu metric names .*--ncu-metrics"):
        P.choose_ncu_metrics(None, cc)


def test_ncu_query_missing_a_required_pipe_is_an_error() -> None:
    text = "sm__inst_executed_pipe_fma   x\nsm__inst_executed_pipe_xu   y\n"
    with pytest.raises(CollectError, match="Tensor Core pipe"):
        P.choose_ncu_metrics(P.parse_query_metrics(text))


def test_every_metric_the_collector_asks_for_is_known_to_coreutil() -> None:
    # The collector's names and the analysis' candidate table must not drift apart: a Hopper
    # run's `…_tensor_op_gmma` must count as Tensor Core utilization.
    from traceanalyze.analyses.coreutil import PIPE_METRICS, WEIGHT_METRICS

    known = {m for cands in PIPE_METRICS.values() for m in cands}
    known |= {w for w in WEIGHT_METRICS.values() if w}
    asked = {b + P.METRIC_SUFFIX for cands in P.NCU_CANDIDATES.values() for b in cands}
    asked |= {b + P.METRIC_SUFFIX for row in P.NCU_FALLBACK.values() for b in row}
    asked |= set(P.NCU_EXTRA_METRICS)
    assert sorted(asked - known) == []
    assert "sm__inst_executed_pipe_tensor_op_gmma" + S in PIPE_METRICS["tensor"]


def test_defaults_for_schedules_and_windows() -> None:
    assert default_torch_schedule(500, 10) == "10,1,5"
    assert default_torch_schedule(4, 1) == "1,1,2"
    assert default_torch_schedule(3, 0) == "0,1,1"
    assert default_profile_window("nsys", 500, 10) == "10:500"
    assert default_profile_window("ncu", 500, 10) == "10:11"


# --- plan(): full commands -------------------------------------------------------------------


def test_plan_none_and_torch_single_process(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "RID"
    p = plan(cfg(tmp_path), device="cuda", capabilities=[(9, 0)])
    [s] = p.steps
    assert s.argv == wl(run)
    assert s.env == {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    assert p.sampler_argv is not None and p.sampler_argv[:3] == [
        PY,
        "-m",
        "traceanalyze.collect.sampler",
    ]
    assert p.sampler_argv[-2:] == ["--interval-ms", "50"]
    p = plan(
        cfg(tmp_path, profiler="torch", precision="amp-bf16", channels_last=True),
        device="cpu",
    )
    [s] = p.steps
    expected = wl(run, device="cpu")
    expected[expected.index("fp32")] = "amp-bf16"
    assert s.argv == [*expected, "--channels-last", "--torch-profile", "5,1,5"]
    assert p.sampler_argv is None  # no NVML sampler on a CPU run
    assert not run.exists()


def test_plan_nsys_under_torchrun_per_rank(tmp_path: Path, only_fake_path: Path) -> None:
    fake_bin(only_fake_path, "nsys")
    run = tmp_path / "runs" / "RID"
    c = cfg(tmp_path, profiler="nsys", nproc_per_node=4, batch_sizes=(32, 64), gpu_metrics=True)
    p = plan(c, device="cuda", capabilities=[(8, 0)] * 4)
    assert [s.batch_size for s in p.steps] == [32, 64]
    for s, bs in zip(p.steps, (32, 64), strict=True):
        assert s.env == {}
        # Four ranks share the node's GPUs: the per-rank wrapper lets only local rank 0 sample.
        script = GM_SCRIPT.replace("/r/nsys_bs32_rank", f"{run}/nsys_bs{bs}_rank")
        assert s.argv == [
            PY,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "4",
            "--no-python",
            "sh",
            "-c",
            script,
            "nsys",
            *wl(run, bs, extra=("--nvtx", "--profile-window", "5:20")),
        ]
    assert p.profiler_path == str(only_fake_path / "nsys")
    assert p.notes == []


def test_plan_nsys_gpu_metrics_single_process_samples_all(
    tmp_path: Path, only_fake_path: Path
) -> None:
    fake_bin(only_fake_path, "nsys")
    run = tmp_path / "runs" / "RID"
    [s] = plan(cfg(tmp_path, profiler="nsys", gpu_metrics=True), device="cuda").steps
    assert s.argv == [
        *NSYS_PROFILE,
        f"{run}/nsys_bs64_rank%q{{RANK}}",
        "--gpu-metrics-devices=all",
        *wl(run, extra=("--nvtx", "--profile-window", "5:20")),
    ]


def test_plan_multinode_rendezvous(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "RID"
    c = cfg(tmp_path, nproc_per_node=8, nnodes=2, rdzv_endpoint="node001")
    [s] = plan(c, device="cuda", capabilities=[(9, 0)]).steps
    assert s.argv == [
        PY,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "8",
        "--nnodes",
        "2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=node001:29500",
        "--rdzv-id=RID",
        "--no-python",
        *wl(run),
    ]
    with pytest.raises(CollectError, match="rdzv-endpoint"):
        plan(cfg(tmp_path, nnodes=2), device="cuda", capabilities=[(9, 0)])


def test_multinode_needs_a_run_id(tmp_path: Path) -> None:
    # Without one id given to every node, each would invent its own run directory.
    c = cfg(tmp_path, nnodes=2, rdzv_endpoint="node001", run_id=None)
    with pytest.raises(CollectError) as ei:
        plan(c, device="cuda", capabilities=[(9, 0)])
    assert str(ei.value) == "--nnodes > 1 needs --run-id, the same on every node"
    r = CliRunner().invoke(
        main,
        ["collect", "--out", str(tmp_path / "o"), "--device", "cpu", "--nnodes", "2"]
        + ["--rdzv-endpoint", "node001", "--dry-run"],
    )
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [
        "traceanalyze: error: --nnodes > 1 needs --run-id, the same on every node"
    ]


def test_plan_multinode_ncu_writes_one_log_per_node(tmp_path: Path) -> None:
    # Every node's ncu writes into the shared run directory: the node rank tags its log.
    run = tmp_path / "runs" / "RID"
    for node in (0, 1):
        c = cfg(
            tmp_path,
            profiler="ncu",
            nnodes=2,
            node_rank=node,
            rdzv_endpoint="node001",
            ncu_metrics=("m1", "m2"),
        )
        [s] = plan(c, device="cuda", capabilities=[(9, 0)], dry_run=True).steps
        assert s.argv[s.argv.index("--log-file") + 1] == f"{run}/batch_64_node{node}.csv"


def test_plan_multinode_nsys_reports_carry_the_node(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "RID"
    c = cfg(tmp_path, profiler="nsys", nnodes=2, node_rank=1, rdzv_endpoint="node001")
    p = plan(c, device="cuda", dry_run=True)
    [s] = p.steps
    assert s.argv[s.argv.index("-o") + 1] == f"{run}/nsys_bs64_node1_rank%q{{RANK}}"
    # The ranks a node gets come from the rendezvous: the export step loops over this node's.
    assert p.post_commands(s) == [
        f"for rep in {run}/nsys_bs64_node1_rank*.nsys-rep; do nsys export --type sqlite "
        '--force-overwrite true --output "${rep%.nsys-rep}.sqlite" "$rep"; done'
    ]


def test_plan_ncu_queries_metrics_from_the_binary(tmp_path: Path, only_fake_path: Path) -> None:
    # The stand-in ncu answers --query-metrics with the Volta table.
    (tmp_path / "q.txt").write_text(QUERY_VOLTA)
    fake_bin(only_fake_path, "ncu", f'[ "$1" = "--query-metrics" ] && /bin/cat "{tmp_path}/q.txt"')
    run = tmp_path / "runs" / "RID"
    c = cfg(tmp_path, profiler="ncu", batch_sizes=(16, 32))
    p = plan(c, device="cuda", capabilities=[(7, 0)])
    metrics = ",".join(
        [f"sm__inst_executed_pipe_{x}{S}" for x in ("fma", "fp16", "tensor", "xu")] + EXTRA
    )
    for s, bs in zip(p.steps, (16, 32), strict=True):
        assert s.argv == [
            "ncu",
            "--target-processes",
            "all",
            "--profile-from-start",
            "off",
            "--metrics",
            metrics,
            "--csv",
            "--log-file",
            f"{run}/batch_{bs}.csv",
            *wl(run, bs, extra=("--profile-window", "5:6")),
        ]


def test_plan_ncu_falls_back_when_query_fails(tmp_path: Path, only_fake_path: Path) -> None:
    fake_bin(only_fake_path, "ncu", "echo '==ERROR== no permission' >&2; exit 1")
    with pytest.warns(UserWarning, match="fallback metric names for compute capability 9.0"):
        p = plan(cfg(tmp_path, profiler="ncu"), device="cuda", capabilities=[(9, 0)])
    m = p.steps[0].argv[p.steps[0].argv.index("--metrics") + 1].split(",")
    assert m == [
        "sm__inst_executed_pipe_fma" + S,
        "sm__inst_executed_pipe_tensor_op_hmma" + S,
        "sm__inst_executed_pipe_tensor_op_gmma" + S,
        "sm__inst_executed_pipe_xu" + S,
        *EXTRA,
    ]
    assert p.notes[0] == "ncu metric names from the fallback table for compute capability 9.0"
    assert "FP16 pipe not collected" in p.notes[1]


def test_plan_ncu_without_fp16_pipe_starts_and_records_it(
    tmp_path: Path, only_fake_path: Path
) -> None:
    # The live query on a GA10x board lists no FP16 pipe: the run is planned, not refused.
    (tmp_path / "q.txt").write_text(QUERY_GA102)
    fake_bin(only_fake_path, "ncu", f'[ "$1" = "--query-metrics" ] && /bin/cat "{tmp_path}/q.txt"')
    p = plan(cfg(tmp_path, profiler="ncu"), device="cuda", capabilities=[(8, 6)])
    m = p.steps[0].argv[p.steps[0].argv.index("--metrics") + 1].split(",")
    assert [x for x in m if "pipe" in x] == [
        "sm__inst_executed_pipe_fma" + S,
        "sm__inst_executed_pipe_tensor_op_hmma" + S,
        "sm__inst_executed_pipe_xu" + S,
    ]
    assert p.notes[0] == "ncu metric names from ncu --query-metrics"
    assert "FP16 pipe not collected" in p.notes[1]


def test_plan_nvprof_wraps_the_launcher(tmp_path: Path, only_fake_path: Path) -> None:
    fake_bin(only_fake_path, "nvprof")
    run = tmp_path / "runs" / "RID"
    c = cfg(tmp_path, profiler="nvprof", nproc_per_node=4)
    [s] = plan(c, device="cuda", capabilities=[(7, 0)] * 4).steps
    assert s.argv == [
        "nvprof",
        "--print-gpu-trace",
        "--system-profiling",
        "on",
        "--kernel-latency-timestamps",
        "on",
        "--csv",
        "--log-file",
        f"{run}/nvprof_%p.csv",
        "--profile-child-processes",
        PY,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "4",
        "--no-python",
        *wl(run, extra=("--profile-window", "5:20")),
    ]


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_nvprof_refused_on_compute_capability_8_and_newer(
    tmp_path: Path, only_fake_path: Path, cc: tuple[int, int]
) -> None:
    fake_bin(only_fake_path, "nvprof")
    with pytest.raises(CollectError) as ei:
        plan(cfg(tmp_path, profiler="nvprof"), device="cuda", capabilities=[(7, 0), cc])
    msg = str(ei.value)
    assert "\n" not in msg
    assert f"found {cc[0]}.{cc[1]}" in msg and "nsys" in msg and "ncu" in msg
    assert not (tmp_path / "runs").exists()


class _NoNVMLError(Exception):
    pass


class _NoNVML:
    """pynvml as on a node where the library loads but NVML does not (no driver access)."""

    NVMLError = _NoNVMLError

    def nvmlInit(self) -> None:
        raise _NoNVMLError("NVML Shared Library Not Found")


@pytest.fixture
def nvml_unusable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _NoNVML())


@pytest.fixture
def torch_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch sees no CUDA device (nothing to patch where torch is not installed)."""
    if have("torch"):
        import torch

        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_nvprof_refused_on_a100_without_nvml_via_nvidia_smi(
    tmp_path: Path, only_fake_path: Path, nvml_unusable: None, torch_without_cuda: None
) -> None:
    fake_bin(only_fake_path, "nvprof")
    # nvidia-smi --query-gpu=compute_cap --format=csv,noheader: one line per GPU.
    fake_bin(only_fake_path, "nvidia-smi", 'printf "8.0\\n8.0\\n"')
    with pytest.raises(CollectError, match=r"found 8\.0"):
        plan(cfg(tmp_path, profiler="nvprof"), device="cuda")
    assert not (tmp_path / "runs").exists()


@pytest.mark.requires_torch
def test_capability_falls_back_to_torch(
    only_fake_path: Path, nvml_unusable: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from traceanalyze.collect.run import device_capabilities

    # An old driver's nvidia-smi has no compute_cap field; torch still sees the GPU.
    fake_bin(
        only_fake_path,
        "nvidia-smi",
        """echo 'Field "compute_cap" is not a valid field to query.'; exit 2""",
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (8, 0) if i else (7, 5))
    assert device_capabilities() == [(7, 5), (8, 0)]


def test_capability_unknown_nvprof_warns_and_notes(
    tmp_path: Path, only_fake_path: Path, nvml_unusable: None, torch_without_cuda: None
) -> None:
    fake_bin(only_fake_path, "nvprof")  # and no nvidia-smi on PATH
    with pytest.warns(UserWarning, match="compute capability unknown") as rec:
        p = plan(cfg(tmp_path, profiler="nvprof"), device="cuda")
    [w] = [str(x.message) for x in rec]
    assert "nvprof cannot profile compute capability >= 8.0" in w
    assert p.notes == [w]
    assert p.capabilities == []


@pytest.mark.parametrize("tool", ["nsys", "ncu", "nvprof"])
def test_missing_binary_is_a_one_line_error_and_writes_nothing(
    tmp_path: Path, only_fake_path: Path, tool: str
) -> None:
    r = CliRunner().invoke(
        main,
        ["collect", "--out", str(tmp_path / "runs"), "--profiler", tool, "--device", "cpu"],
    )
    # --device cpu is allowed (nsys traces the CPU side; nvprof and ncu say they found no GPU)
    assert r.exit_code == 1 and f"profiler binary {tool!r} not found on PATH" in r.output
    assert len(r.output.strip().splitlines()) == 1
    with pytest.raises(ToolNotFound) as ei:
        plan(cfg(tmp_path, profiler=tool), device="cuda", capabilities=[(7, 0)])
    assert f"profiler binary {tool!r} not found on PATH" in str(ei.value)
    assert not (tmp_path / "runs").exists()


def test_cli_missing_binary_message(
    tmp_path: Path, only_fake_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceanalyze.collect import run as run_mod

    monkeypatch.setattr(run_mod, "resolve_device", lambda requested, cfg=None: "cuda")
    monkeypatch.setattr(run_mod, "device_capabilities", lambda nvml=None: [(9, 0)])
    r = CliRunner().invoke(main, ["collect", "--out", str(tmp_path / "runs"), "--profiler", "nsys"])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert lines == [
        "traceanalyze: error: profiler binary 'nsys' not found on PATH "
        "(install Nsight Systems (CUDA toolkit or standalone))"
    ]
    assert not (tmp_path / "runs").exists()


def test_cli_dry_run_prints_commands_and_creates_nothing(
    tmp_path: Path, only_fake_path: Path
) -> None:
    out = tmp_path / "runs"
    r = CliRunner().invoke(
        main,
        [
            "collect",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--profiler",
            "torch",
            "--batch-size",
            "2,4",
            "--iterations",
            "4",
            "--image-size",
            "64",
            "--run-id",
            "R1",
            "--dry-run",
        ],
    )
    assert r.exit_code == 0, r.output
    run = out / "R1"
    expected = [
        f"RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 {PY} -m traceanalyze.collect.resnet50 --out {run} "
        f"--batch-size {bs} --iterations 4 --warmup 1 --precision fp32 --image-size 64 "
        "--device cpu --torch-profile 1,1,2"
        for bs in (2, 4)
    ]
    assert r.output.splitlines() == expected
    assert not out.exists()


# --- dry run on a machine without a GPU (a login node) ----------------------------------------


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A login node: torch (where installed) sees no CUDA device and nothing tells a compute
    capability."""
    from traceanalyze.collect import run as run_mod

    if have("torch"):
        import torch

        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(run_mod, "device_capabilities", lambda nvml=None: [])


def dry(tmp_path: Path, *args: str) -> list[str]:
    out = tmp_path / "runs"
    r = CliRunner().invoke(
        main,
        ["collect", "--out", str(out), "--run-id", "R1", "--iterations", "20", "--warmup", "5"]
        + [*args, "--dry-run"],
    )
    assert r.exit_code == 0, r.output
    assert not out.exists()
    return r.output.splitlines()


def test_dry_run_without_torch_is_one_line_or_needs_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No torch installed (hidden here): the device cannot be asked, so a plain dry run says
    # what is missing in one line (it was a ModuleNotFoundError traceback); --device cpu plans.
    monkeypatch.setitem(sys.modules, "torch", None)
    out = tmp_path / "runs"
    r = CliRunner().invoke(main, ["collect", "--out", str(out), "--dry-run"])
    assert r.exit_code == 1 and not isinstance(r.exception, ImportError), r.output
    (line,) = r.stderr.splitlines()
    assert line.startswith("traceanalyze: error: ") and "traceanalyze[collect]" in line
    assert "--device" in line and not out.exists()
    lines = dry(tmp_path, "--device", "cpu", "--sampler", "off")
    assert lines and "resnet50" in "\n".join(lines)


def sampler_line(run: Path) -> str:
    import socket

    return (
        f"{PY} -m traceanalyze.collect.sampler --out {run}/nvml_{socket.gethostname()}.csv "
        "--interval-ms 50 &"
    )


def wl_shell(run: Path, bs: int = 64, extra: str = "") -> str:
    return (
        f"{PY} -m traceanalyze.collect.resnet50 --out {run} --batch-size {bs} --iterations 20 "
        f"--warmup 5 --precision fp32 --image-size 224 --device cuda{extra}"
    )


ENV1 = "RANK=0 LOCAL_RANK=0 WORLD_SIZE=1"


@pytest.mark.parametrize("device", [[], ["--device", "cuda"]])
def test_dry_run_nsys_without_gpu_prints_profile_and_export(
    tmp_path: Path, only_fake_path: Path, no_gpu: None, device: list[str]
) -> None:
    run = tmp_path / "runs" / "R1"
    lines = dry(tmp_path, "--profiler", "nsys", "--batch-size", "32,64", *device)
    prof = (
        "nsys profile --trace=cuda,nvtx,cudnn,cublas --capture-range=cudaProfilerApi "
        "--capture-range-end=stop --force-overwrite=true -o"
    )
    assert lines == [
        sampler_line(run),
        f"{ENV1} {prof} '{run}/nsys_bs32_rank%q{{RANK}}' "
        + wl_shell(run, 32, " --nvtx --profile-window 5:20"),
        f"nsys export --type sqlite --force-overwrite true --output {run}/nsys_bs32_rank0.sqlite "
        f"{run}/nsys_bs32_rank0.nsys-rep",
        f"{ENV1} {prof} '{run}/nsys_bs64_rank%q{{RANK}}' "
        + wl_shell(run, 64, " --nvtx --profile-window 5:20"),
        f"nsys export --type sqlite --force-overwrite true --output {run}/nsys_bs64_rank0.sqlite "
        f"{run}/nsys_bs64_rank0.nsys-rep",
    ]


def test_dry_run_nsys_exports_every_local_rank(
    tmp_path: Path, only_fake_path: Path, no_gpu: None
) -> None:
    run = tmp_path / "runs" / "R1"
    lines = dry(tmp_path, "--profiler", "nsys", "--nproc-per-node", "2", "--sampler", "off")
    assert lines[1:] == [
        f"nsys export --type sqlite --force-overwrite true --output {run}/nsys_bs64_rank{r}.sqlite "
        f"{run}/nsys_bs64_rank{r}.nsys-rep"
        for r in (0, 1)
    ]


def test_dry_run_ncu_without_gpu_says_metrics_are_chosen_at_run_time(
    tmp_path: Path, only_fake_path: Path, no_gpu: None
) -> None:
    run = tmp_path / "runs" / "R1"
    lines = dry(tmp_path, "--profiler", "ncu", "--sampler", "off")
    assert lines == [
        "# ncu metric names not known in advance: compute capability unknown (no NVML, "
        "nvidia-smi or CUDA device via torch); the real run takes them from ncu "
        "--query-metrics; pass --ncu-metrics to fix them",
        f"{ENV1} ncu --target-processes all --profile-from-start off --metrics "
        f"'<chosen at run time from ncu --query-metrics>' --csv --log-file {run}/batch_64.csv "
        + wl_shell(run, 64, " --profile-window 5:6"),
    ]


def test_dry_run_ncu_with_known_capability_marks_fallback_names(
    tmp_path: Path, only_fake_path: Path, no_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceanalyze.collect import run as run_mod

    # NVML answers (a GPU node) but the dry run does not run ncu: fallback names, marked.
    monkeypatch.setattr(run_mod, "device_capabilities", lambda nvml=None: [(8, 0)])
    lines = dry(tmp_path, "--profiler", "ncu", "--sampler", "off")
    metrics = ",".join([f"{b}{S}" for b in (FMA, FP16, HMMA, XU)] + EXTRA)
    assert lines[:2] == [
        "# dry run: ncu --query-metrics not run; the real run asks it first and uses these "
        "fallback names only if it fails",
        "# ncu metric names from the fallback table for compute capability 8.0",
    ]
    assert f"--metrics {metrics} --csv" in lines[2]


def test_dry_run_nvprof_without_gpu_says_the_refusal_was_not_checked(
    tmp_path: Path, only_fake_path: Path, no_gpu: None
) -> None:
    lines = dry(tmp_path, "--profiler", "nvprof", "--sampler", "off")
    assert lines[0] == (
        "# compute capability unknown (no NVML, nvidia-smi or CUDA device via torch): "
        "the nvprof refusal on >= 8.0 was not checked"
    )
    assert lines[1].startswith(f"{ENV1} nvprof --print-gpu-trace")
    assert len(lines) == 2


def test_dry_run_still_refuses_nvprof_on_a_known_new_gpu(
    tmp_path: Path, only_fake_path: Path, no_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceanalyze.collect import run as run_mod

    monkeypatch.setattr(run_mod, "device_capabilities", lambda nvml=None: [(8, 0)])
    r = CliRunner().invoke(
        main, ["collect", "--out", str(tmp_path / "o"), "--profiler", "nvprof", "--dry-run"]
    )
    assert r.exit_code == 1 and "nvprof does not support compute capability >= 8.0" in r.output


def test_dry_run_cpu_nsys_traces_the_cpu_side(tmp_path: Path, no_gpu: None) -> None:
    r = CliRunner().invoke(
        main,
        ["collect", "--out", str(tmp_path / "o"), "--profiler", "nsys", "--device", "cpu"]
        + ["--dry-run", "--run-id", "R"],
    )
    assert r.exit_code == 0, r.output
    run = tmp_path / "o" / "R"
    assert (
        "nsys profile --trace=osrt,nvtx --sample=none --cpuctxsw=none --force-overwrite=true "
        f"-o '{run}/nsys_bs64_rank%q{{RANK}}' {PY} -m traceanalyze.collect.resnet50" in r.output
    )
    assert "--device cpu --nvtx\n" in r.output  # no profile window: no cudaProfilerStart on CPU
    assert "--capture-range" not in r.output


@pytest.mark.parametrize("tool", ["ncu", "nvprof"])
def test_dry_run_cpu_ncu_nvprof_say_they_will_find_nothing(
    tmp_path: Path, no_gpu: None, tool: str
) -> None:
    r = CliRunner().invoke(
        main,
        ["collect", "--out", str(tmp_path / "o"), "--profiler", tool, "--device", "cpu"]
        + ["--dry-run", "--ncu-metrics", "m"],
    )
    assert r.exit_code == 0, r.output
    assert f"{tool} profiles CUDA work; with no GPU it has nothing to record" in r.output


# --- options that change the workload's argv ----------------------------------------------------


def test_cli_workload_options_reach_the_argv(tmp_path: Path, only_fake_path: Path) -> None:
    data = tmp_path / "imagenet"
    data.mkdir()
    run = tmp_path / "runs" / "R1"
    lines = dry(
        tmp_path,
        "--device",
        "cpu",
        "--profiler",
        "torch",
        "--compile",
        "--channels-last",
        "--precision",
        "amp-fp16",
        "--image-size",
        "96",
        "--data",
        str(data),
        "--workers",
        "2",
        "--record-shapes",
        "--torch-schedule",
        "2,1,3",
    )
    assert lines == [
        f"{ENV1} {PY} -m traceanalyze.collect.resnet50 --out {run} --batch-size 64 "
        "--iterations 20 --warmup 5 --precision amp-fp16 --image-size 96 --device cpu "
        f"--channels-last --compile --data {data} --workers 2 --torch-profile 2,1,3 "
        "--record-shapes"
    ]


def test_cli_default_workers_go_with_data_only(tmp_path: Path, only_fake_path: Path) -> None:
    data = tmp_path / "imagenet"
    data.mkdir()
    [line] = dry(tmp_path, "--device", "cpu", "--data", str(data))
    assert line.endswith(f"--device cpu --data {data} --workers 4")
    [line] = dry(tmp_path, "--device", "cpu")
    assert "--data" not in line and "--workers" not in line


def test_record_shapes_needs_the_torch_profiler(tmp_path: Path, only_fake_path: Path) -> None:
    [line] = dry(tmp_path, "--device", "cpu", "--record-shapes")
    assert "--record-shapes" not in line and "--torch-profile" not in line


def test_cli_ncu_metrics_and_profile_window(
    tmp_path: Path, only_fake_path: Path, no_gpu: None
) -> None:
    run = tmp_path / "runs" / "R1"
    lines = dry(
        tmp_path,
        "--profiler",
        "ncu",
        "--sampler",
        "off",
        "--ncu-metrics",
        "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,gpu__time_duration.sum",
        "--profile-window",
        "7:9",
    )
    assert lines == [
        "# ncu metric names from --ncu-metrics",
        f"{ENV1} ncu --target-processes all --profile-from-start off --metrics "
        "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,gpu__time_duration.sum "
        f"--csv --log-file {run}/batch_64.csv " + wl_shell(run, 64, " --profile-window 7:9"),
    ]


def test_cli_no_ingest_reaches_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from traceanalyze.collect import cli as cli_mod

    seen: list[CollectConfig] = []

    def fake_collect(cfg: CollectConfig, argv: object, **kw: object) -> object:
        seen.append(cfg)
        raise CollectError("stop here")

    monkeypatch.setattr(cli_mod, "do_collect", fake_collect)
    base = ["collect", "--out", str(tmp_path / "o"), "--device", "cpu", "--iterations", "4"]
    CliRunner().invoke(main, [*base, "--no-ingest"])
    CliRunner().invoke(main, base)
    assert [c.ingest for c in seen] == [False, True]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--batch-size", "32,x"], "--batch-size takes integers"),
        (["--batch-size", "32,32"], "lists a size twice"),
        (["--iterations", "4", "--warmup", "4"], "--warmup must be"),
        (["--profile-window", "5"], "START:END"),
        (["--iterations", "4", "--torch-schedule", "2,2,2"], "needs 6 iterations"),
    ],
)
def test_cli_bad_options_are_one_line_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    r = CliRunner().invoke(
        main, ["collect", "--out", str(tmp_path / "o"), "--device", "cpu", "--dry-run", *args]
    )
    assert r.exit_code == 1
    assert needle in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_import_does_not_load_torch() -> None:
    import subprocess

    code = (
        "import sys, traceanalyze.collect, traceanalyze.collect.cli, traceanalyze.collect.sampler;"
        "print(sorted(m for m in ('torch','torchvision','pynvml') if sys.modules.get(m)))"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
