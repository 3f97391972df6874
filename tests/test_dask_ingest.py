"""`ingest --dask`: one task per file on a real local Dask cluster (a scheduler and two worker
processes on loopback), committed by the client; the store equals a serial ingest's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_parallel_ingest import assert_same_store, real_files, snapshot

import traceanalyze as ta
from traceanalyze.cli import main
from traceanalyze.errors import MalformedInput, TraceanalyzeError
from traceanalyze.parallel import ingest_dask

pytestmark = pytest.mark.requires_dask("distributed")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of a scheduler with two single-threaded worker processes (no nanny)."""
    d = tmp_path_factory.mktemp("dask")
    sched_file = d / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    base = [sys.executable, "-m", "dask"]
    common = {"cwd": d, "env": env, "stdout": subprocess.DEVNULL}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        logs = [open(d / f"log{i}.txt", "wb") for i in range(3)]  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [*base, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                 "--scheduler-file", str(sched_file)],
                stderr=logs[0], **common,
            )
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        for i in (1, 2):
            procs.append(
                subprocess.Popen(
                    [*base, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                     "--host", "127.0.0.1", "--local-directory", str(d / f"w{i}")],
                    stderr=logs[i], **common,
                )
            )  # fmt: skip
        import distributed

        with distributed.Client(address, timeout=30) as c:
            c.wait_for_workers(2, timeout=30)
        yield address
    finally:
        _stop(procs)
        for f in logs:
            f.close()


def test_same_store_table_by_table_as_serial(cluster: str, tmp_path: Path) -> None:
    files = [p.absolute() for p in real_files()]
    serial = ta.ingest(files, tmp_path / "serial")
    res = ingest_dask(files, tmp_path / "dask", scheduler=cluster)
    assert res == serial
    assert_same_store(tmp_path / "serial", tmp_path / "dask")
    import distributed

    with distributed.Client(cluster) as c:  # both workers took part
        assert len(c.scheduler_info()["workers"]) == 2


def test_bad_file_commits_nothing(cluster: str, tmp_path: Path, write) -> None:
    files = [p.absolute() for p in real_files()[3:6]]
    bad = write("bad.pt.trace.json", '{"traceEvents": [{"ph": "X", "ts": ')
    root = tmp_path / "st"
    ta.ingest(files[:1], root)
    before = snapshot(root)
    with pytest.raises(MalformedInput) as ei:
        ingest_dask([*files, bad], root, scheduler=cluster)
    assert ei.value.path == str(bad)
    assert snapshot(root) == before  # no staging directory left either


def test_cli_dask(cluster: str, tmp_path: Path) -> None:
    files = [str(p.absolute()) for p in real_files()[3:6]]
    r1 = CliRunner().invoke(main, ["ingest", *files, "--store", str(tmp_path / "a")])
    args = ["ingest", *files, "--store", str(tmp_path / "b"), "--dask", cluster]
    r2 = CliRunner().invoke(main, args)
    assert r1.exit_code == r2.exit_code == 0, r2.output
    assert r2.output == r1.output
    assert_same_store(tmp_path / "a", tmp_path / "b")


def test_unreachable_scheduler_is_one_line(tmp_path: Path) -> None:
    f = real_files()[3]
    with pytest.raises(TraceanalyzeError, match=r"^cannot reach the Dask scheduler tcp://127"):
        ingest_dask([f], tmp_path / "st", scheduler="tcp://127.0.0.1:9", connect_timeout=2)


@pytest.mark.requires_dask("dask_jobqueue")
def test_slurm_script_dry_run(tmp_path: Path) -> None:
    """collectors/slurm/ingest_dask.py builds its SLURMCluster from the arguments (no Slurm:
    --dry-run prints the job script it would submit)."""
    script = Path(__file__).resolve().parents[1] / "collectors" / "slurm" / "ingest_dask.py"
    args = ["x.json", "--store", str(tmp_path / "st"), "--cores", "8", "--memory", "32GB"]
    args += ["--walltime", "02:30:00", "--queue", "gpu", "--account", "proj", "--dry-run"]
    env = {**os.environ, "PYTHONPATH": str(script.parents[2])}
    cp = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    for want in ("-p gpu", "-A proj", "--cpus-per-task=8", "-t 02:30:00"):
        assert f"#SBATCH {want}" in lines
    assert any(x.startswith(f"{sys.executable} -m distributed.cli.dask_worker") for x in lines)
    assert "--nthreads 8" in cp.stdout
