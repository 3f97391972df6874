"""`traceanalyze collect`: exact command lines per profiler, refusals, missing binaries, dry run.

No GPU is needed: the device and compute capabilities are injected into `plan()`, and profiler
binaries are stand-in shell scripts on a monkeypatched PATH.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

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


@pytest.mark.parametrize("gpu_metrics", [False, True])
def test_nsys_argv(gpu_metrics: bool) -> None:
    expected = [
        "nsys",
        "profile",
        "--trace=cuda,nvtx,cudnn,cublas",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--force-overwrite=true",
        "-o",
        "/r/nsys_bs32_rank%q{RANK}",
    ]
    if gpu_metrics:
        expected.append("--gpu-metrics-devices=all")
    assert P.nsys_argv("/r", 32, ["x"], gpu_metrics=gpu_metrics) == [*expected, "x"]


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
QUERY_HOPPER = """\
Device NVIDIA H100 80GB HBM3 (GH100)
Metric Name                                            Metric Description
gpc__cycles_elapsed                                    # of cycles where GPC was active
sm__inst_executed_pipe_fma                             # of warp instructions executed by fma pipe
sm__inst_executed_pipe_fp16                            # of warp instructions executed by fp16 pipe
sm__inst_executed_pipe_tensor_op_gmma                  # of warpgroup MMA instructions
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


def test_choose_ncu_metrics_hopper_takes_hmma_and_gmma() -> None:
    got = P.choose_ncu_metrics(P.parse_query_metrics(QUERY_HOPPER))
    assert got == [
        "sm__inst_executed_pipe_fma" + S,
        "sm__inst_executed_pipe_fp16" + S,
        "sm__inst_executed_pipe_tensor_op_hmma" + S,
        "sm__inst_executed_pipe_tensor_op_gmma" + S,
        "sm__inst_executed_pipe_xu" + S,
        *EXTRA,
    ]


@pytest.mark.parametrize(
    "cc,tensor",
    [
        ((7, 5), ["sm__inst_executed_pipe_tensor"]),
        ((8, 0), ["sm__inst_executed_pipe_tensor_op_hmma"]),
        ((8, 6), ["sm__inst_executed_pipe_tensor_op_hmma"]),
        (
            (9, 0),
            ["sm__inst_executed_pipe_tensor_op_hmma", "sm__inst_executed_pipe_tensor_op_gmma"],
        ),
        (
            (12, 0),
            ["sm__inst_executed_pipe_tensor_op_hmma", "sm__inst_executed_pipe_tensor_op_gmma"],
        ),
    ],
)
def test_ncu_fallback_by_compute_capability(cc: tuple[int, int], tensor: list[str]) -> None:
    got = P.choose_ncu_metrics(None, cc)
    bases = [
        "sm__inst_executed_pipe_fma",
        "sm__inst_executed_pipe_fp16",
        *tensor,
        "sm__inst_executed_pipe_xu",
    ]
    assert got == [b + S for b in bases] + EXTRA


def test_ncu_query_missing_a_pipe_is_an_error() -> None:
    text = "sm__inst_executed_pipe_fma   x\nsm__inst_executed_pipe_xu   y\n"
    with pytest.raises(CollectError, match="fp16"):
        P.choose_ncu_metrics(P.parse_query_metrics(text))


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
        assert s.argv == [
            PY,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "4",
            "--no-python",
            "nsys",
            "profile",
            "--trace=cuda,nvtx,cudnn,cublas",
            "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop",
            "--force-overwrite=true",
            "-o",
            f"{run}/nsys_bs{bs}_rank%q{{RANK}}",
            "--gpu-metrics-devices=all",
            *wl(run, bs, extra=("--profile-window", "5:20")),
        ]
    assert p.profiler_path == str(only_fake_path / "nsys")


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
    assert m[2:4] == [
        "sm__inst_executed_pipe_tensor_op_hmma" + S,
        "sm__inst_executed_pipe_tensor_op_gmma" + S,
    ]


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


@pytest.mark.parametrize("tool", ["nsys", "ncu", "nvprof"])
def test_missing_binary_is_a_one_line_error_and_writes_nothing(
    tmp_path: Path, only_fake_path: Path, tool: str
) -> None:
    r = CliRunner().invoke(
        main,
        ["collect", "--out", str(tmp_path / "runs"), "--profiler", tool, "--device", "cpu"],
    )
    # --device cpu is refused first for external profilers; use the library with a CUDA device.
    assert r.exit_code == 1 and "cannot run with --device cpu" in r.output
    with pytest.raises(ToolNotFound) as ei:
        plan(cfg(tmp_path, profiler=tool), device="cuda", capabilities=[(7, 0)])
    assert f"profiler binary {tool!r} not found on PATH" in str(ei.value)
    assert not (tmp_path / "runs").exists()


def test_cli_missing_binary_message(
    tmp_path: Path, only_fake_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceanalyze.collect import run as run_mod

    monkeypatch.setattr(run_mod, "resolve_device", lambda requested: "cuda")
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
        "print(sorted(m for m in ('torch','torchvision','pynvml') if m in sys.modules))"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
