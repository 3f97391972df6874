"""collectors/gpu_capture.sh, the one prepared GPU session (issue 37), rehearsed without a GPU:
`--dry-run` prints every step and checks every `collect` command it would run with
`traceanalyze collect --dry-run`, which refuses a wrong flag or value in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "collectors" / "gpu_capture.sh"

pytestmark = pytest.mark.requires_torch("torchvision")


def dry_run(script: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        ["bash", str(script), "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_dry_run_lists_every_step_and_collect_accepts_each() -> None:
    res = dry_run(SCRIPT)
    assert res.returncode == 0, res.stdout + res.stderr
    steps = re.findall(r"^\[([\w-]+)", res.stdout, re.M)
    assert steps == [
        "tput-fp32",
        "tput-bf16",
        "long-bf16",
        "torch-fp32",
        "torch-bf16",
        "torch-graph",
        "ncu",
        "nsys",
        "sampler-overhead",
        "analyses",
    ]
    assert "refused" not in res.stdout
    # The matrix: batch 64/128/256, fp32 and amp-bf16 + channels-last, >= 500 iterations.
    assert "--batch-size 64,128,256" in res.stdout
    assert "--precision amp-bf16 --channels-last" in res.stdout
    long_run = re.search(r"--iterations (\d+)", res.stdout.split("[long-bf16")[1])
    assert long_run is not None and int(long_run.group(1)) >= 500


def test_dry_run_fails_on_a_flag_collect_refuses(tmp_path: Path) -> None:
    """The rehearsal can fail: a copy of the script with one wrong value exits 1 naming it."""
    (tmp_path / "collectors").mkdir()
    bad = tmp_path / "collectors" / "gpu_capture.sh"
    bad.write_text(SCRIPT.read_text().replace("--precision amp-bf16", "--precision amp-fp8", 1))
    for sub in ("traceanalyze", "benchmarks"):
        (tmp_path / sub).symlink_to(ROOT / sub)
    res = dry_run(bad)
    assert res.returncode == 1
    assert "tput-bf16" in res.stdout and "refused it" in res.stdout


def test_dry_run_checks_the_graphed_workload_argv(tmp_path: Path) -> None:
    """The torch-graph step runs the workload itself: the rehearsal parses its argv and asks
    `cuda_graph.refusal`, so a combination the graphed step cannot run fails here."""
    res = dry_run(SCRIPT)
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("[torch-graph"))
    assert "--cuda-graph" in line and "--torch-profile" in line and "--device cuda" in line
    (tmp_path / "collectors").mkdir()
    bad = tmp_path / "collectors" / "gpu_capture.sh"
    step = "--torch-profile 2,2,3 --cuda-graph"
    assert step in SCRIPT.read_text()
    text = SCRIPT.read_text().replace(step, f"{step} --precision amp-fp16", 1)
    bad.write_text(text)
    for sub in ("traceanalyze", "benchmarks"):
        (tmp_path / sub).symlink_to(ROOT / sub)
    res = dry_run(bad)
    assert res.returncode == 1
    assert "the workload refused it" in res.stdout and "GradScaler" in res.stdout


def test_help_is_the_header() -> None:
    res = subprocess.run(
        ["bash", str(SCRIPT), "--help"], capture_output=True, text=True, check=True
    )
    assert "--dry-run" in res.stdout and "--prepare" in res.stdout
