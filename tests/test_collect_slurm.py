"""The Slurm template, run by bash with stand-ins for `srun` and `scontrol` on a 2-node "job";
each node's `traceanalyze collect --dry-run` prints the torchrun command it would run."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "collectors" / "slurm" / "collect.sbatch"


def script(p: Path, body: str) -> None:
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)


def fake_slurm(tmp_path: Path, profiler: str = "none") -> dict[str, str]:
    """Stand-ins for `srun` (runs the command once per node with SLURM_NODEID set) and
    `scontrol`; returns the environment of a 2-node job."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    script(
        bin_ / "srun",
        'while [ "${1#--}" != "$1" ]; do shift; done\nSLURM_NODEID=0 "$@" && SLURM_NODEID=1 "$@"',
    )
    script(bin_ / "scontrol", 'printf "node001\\nnode002\\n"')
    script(tmp_path / "ta", f'exec {sys.executable} -m traceanalyze "$@"')
    return {
        "PATH": f"{bin_}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(tmp_path),
        "SLURM_JOB_NODELIST": "node[001-002]",
        "SLURM_JOB_ID": "77",
        "SLURM_NNODES": "2",
        "GPUS_PER_NODE": "4",
        "OUT": str(tmp_path / "runs"),
        "TRACEANALYZE": str(tmp_path / "ta"),
        "PROFILER": profiler,
    }


def sbatch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The sbatch template run as a plain bash script under the fake Slurm environment."""
    return subprocess.run(
        ["bash", str(SBATCH), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sbatch_ncu_dry_run_on_a_login_node_one_log_per_node(tmp_path: Path) -> None:
    # No GPU here: the dry run still prints each node's command, and the nodes' ncu logs differ.
    env = fake_slurm(tmp_path, profiler="ncu")
    cp = sbatch(
        env,
        *("--iterations", "10", "--sampler", "off"),
        *("--ncu-metrics", "gpu__time_duration.sum", "--dry-run"),
    )
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    run_id = re.search(r"\d{8}T\d{6}Z-slurm77", lines[0])
    assert run_id is not None
    run = f"{tmp_path / 'runs'}/{run_id.group(0)}"
    assert lines[1::2] == ["# ncu metric names from --ncu-metrics"] * 2
    logs = [ln.split("--log-file ")[1].split(" ")[0] for ln in lines[2::2]]
    assert logs == [f"{run}/batch_64_node0.csv", f"{run}/batch_64_node1.csv"]
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sbatch_two_nodes_share_run_id_and_rendezvous(tmp_path: Path) -> None:
    env = fake_slurm(tmp_path)
    cp = sbatch(env, "--device", "cpu", "--iterations", "10", "--dry-run")
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    m = re.fullmatch(
        r"run directory: (.+)/(\d{8}T\d{6}Z-slurm77) "
        r"\(rendezvous node001:29500, 2 nodes x 4 GPUs\)",
        lines[0],
    )
    assert m is not None, lines[0]
    out, run_id = m.group(1), m.group(2)
    assert out == str(tmp_path / "runs")
    expected = (
        f"{sys.executable} -m torch.distributed.run --nproc-per-node 4 --nnodes 2 "
        f"--rdzv-backend=c10d --rdzv-endpoint=node001:29500 --rdzv-id={run_id} --no-python "
        f"{sys.executable} -m traceanalyze.collect.resnet50 --out {out}/{run_id} --batch-size 64 "
        "--iterations 10 --warmup 2 --precision fp32 --image-size 224 --device cpu"
    )
    assert lines[1:] == [expected, expected]  # node 0 and node 1
    assert not (tmp_path / "runs").exists()
