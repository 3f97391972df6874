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


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sbatch_two_nodes_share_run_id_and_rendezvous(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    # srun: drop its own options, run the command once per node with SLURM_NODEID set.
    script(
        bin_ / "srun",
        'while [ "${1#--}" != "$1" ]; do shift; done\nSLURM_NODEID=0 "$@" && SLURM_NODEID=1 "$@"',
    )
    script(bin_ / "scontrol", 'printf "node001\\nnode002\\n"')
    script(tmp_path / "ta", f'exec {sys.executable} -m traceanalyze "$@"')
    env = {
        "PATH": f"{bin_}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(tmp_path),
        "SLURM_JOB_NODELIST": "node[001-002]",
        "SLURM_JOB_ID": "77",
        "SLURM_NNODES": "2",
        "GPUS_PER_NODE": "4",
        "OUT": str(tmp_path / "runs"),
        "TRACEANALYZE": str(tmp_path / "ta"),
    }
    cp = subprocess.run(
        ["bash", str(SBATCH), "--device", "cpu", "--iterations", "10", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
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
