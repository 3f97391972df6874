"""Collection runs: the manifest (contents, no secrets, failed and interrupted runs) and a real
end-to-end ResNet-50 run on the CPU under the PyTorch profiler (about 15 s on 2 cores)."""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import stat
import statistics
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from traceanalyze.cli import main
from traceanalyze.collect.manifest import build_manifest, read_manifest, write_manifest
from traceanalyze.collect.run import CollectConfig, collect, plan
from traceanalyze.errors import CollectError

SECRET = "s3cr3t-token-value-do-not-copy"


class FakeNVMLError(Exception):
    value = 3


class FakeNVML:
    NVMLError = FakeNVMLError

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.95.05"

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        if h == 1:
            raise FakeNVMLError()
        return 700_000

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000  # nvml.h: 1000 * major + 10 * minor


def test_manifest_contents_and_no_environment_leak() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "2,3", "HF_TOKEN": SECRET, "PATH": "/usr/bin"}
    m = build_manifest(
        run_id="R",
        argv=["traceanalyze", "collect"],
        config={"iterations": 4},
        profiler_version="NVIDIA Nsight Systems version 2025.1.1",
        nvml=FakeNVML(),
        environ=env,
    )
    assert m["status"] == "running" and m["exit_code"] is None and m["end_utc"] is None
    assert m["env"] == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert SECRET not in json.dumps(m) and '/usr/bin"' not in json.dumps(m["env"])
    assert m["versions"]["driver"] == "580.95.05"
    # The CUDA the driver supports, next to (not instead of) the CUDA torch was built with.
    assert m["versions"]["cuda_driver_version"] == "13.0"
    assert m["versions"]["profiler"] == "NVIDIA Nsight Systems version 2025.1.1"
    assert m["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-0",
            "power_limit_w": 700.0,
            "compute_capability": "9.0",
        },
        {
            "index": 1,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-1",
            "power_limit_w": None,
            "compute_capability": "9.0",
        },
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", m["start_utc"])
    for key in ("python", "torch", "cuda", "torchvision", "traceanalyze"):
        assert key in m["versions"]


class OldNVML(FakeNVML):
    """nvidia-ml-py without nvmlSystemGetCudaDriverVersion."""

    def __getattribute__(self, name: str) -> Any:
        if name == "nvmlSystemGetCudaDriverVersion":
            raise AttributeError(name)
        return super().__getattribute__(name)


SMI_BANNER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def test_cuda_driver_version_from_nvidia_smi_without_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceanalyze.collect.manifest import cuda_driver_version

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (tmp_path / "banner.txt").write_text(SMI_BANNER)
    smi = bin_ / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\n/bin/cat "{tmp_path}/banner.txt"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_))
    assert cuda_driver_version(OldNVML()) == "12.4"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cuda_driver_version(OldNVML()) is None


def test_write_manifest_is_atomic_and_leaves_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "manifest.json"
    write_manifest(p, {"status": "running"})
    write_manifest(p, {"status": "completed", "x": [1, 2]})
    assert read_manifest(p) == {"status": "completed", "x": [1, 2]}
    assert sorted(x.name for x in tmp_path.iterdir()) == ["manifest.json"]


def fake_python(tmp_path: Path, body: str) -> Path:
    """A stand-in for the workload's interpreter: a shell script that gets the workload argv."""
    p = tmp_path / "fakepython"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


PARTIAL = (
    "# traceanalyze-iterlog v1\\n"
    "rank,device_id,iteration,start_ns,duration_ns,batch_size,images_per_s\\n"
    "0,,0,1790000000000000000,500000000,2,4.0\\n"
)


def run_dir_of(out: Path) -> Path:
    [d] = list(out.iterdir())
    return d


def test_failed_child_leaves_manifest_with_status(tmp_path: Path) -> None:
    # The "workload" writes one iteration, then exits 3 ($4 is --out's value:
    # the argv is `-m MOD --out DIR …`).
    py = fake_python(
        tmp_path, f'printf "{PARTIAL}" > "$4/iterations_bs2_rank0.csv"; echo boom-line; exit 3'
    )
    cfg = CollectConfig(
        out=tmp_path / "runs", batch_sizes=(2, 4), iterations=4, device="cpu", python=str(py)
    )
    with pytest.raises(CollectError) as ei:
        collect(cfg, ["traceanalyze", "collect"])
    msg = str(ei.value)
    assert "batch size 2: command exited with status 3" in msg and "boom-line" in msg
    run = run_dir_of(tmp_path / "runs")
    m = read_manifest(run / "manifest.json")
    assert m["status"] == "failed" and m["exit_code"] == 3 and m["end_utc"] is not None
    assert m["outputs"] == ["iterations_bs2_rank0.csv", "workload_bs2.log"]
    assert not (run / "store").exists()  # the second batch size never ran, nothing ingested
    assert not (run / "workload_bs4.log").exists()


def test_interrupted_run_leaves_manifest_with_status(tmp_path: Path) -> None:
    # The "workload" writes a partial log, then sends SIGINT to the collector (its parent), as a
    # Ctrl-C would; the collector stops it, records "interrupted" and lets the interrupt through.
    py = fake_python(
        tmp_path,
        # (The pause lets the parent get past Popen() into wait(), as with a real Ctrl-C.)
        f'printf "{PARTIAL}" > "$4/iterations_bs2_rank0.csv"; sleep 0.5; kill -INT $PPID; '
        "exec sleep 30",
    )
    cfg = CollectConfig(out=tmp_path / "runs", batch_sizes=(2,), device="cpu", python=str(py))
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        collect(cfg, ["traceanalyze", "collect"])
    # The interrupt arrives at once, not when the 30 s child ends (the collector polls, as a
    # blocking waitpid() misses SIGINT delivered to polars' threads) and the child is stopped.
    assert time.monotonic() - t0 < 25
    run = run_dir_of(tmp_path / "runs")
    m = read_manifest(run / "manifest.json")
    assert m["status"] == "interrupted" and m["error"] == "KeyboardInterrupt"
    assert m["end_utc"] is not None and m["exit_code"] is None
    assert "iterations_bs2_rank0.csv" in m["outputs"]


def test_sigterm_leaves_manifest_with_status(tmp_path: Path) -> None:
    # As a Slurm time limit would: SIGTERM to the collector while the workload runs.
    import signal

    from traceanalyze.collect.run import Terminated

    py = fake_python(tmp_path, "sleep 0.5; kill -TERM $PPID; exec sleep 30")
    cfg = CollectConfig(out=tmp_path / "runs", batch_sizes=(2,), device="cpu", python=str(py))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        collect(cfg, ["traceanalyze", "collect"])
    assert signal.getsignal(signal.SIGTERM) == before  # handler restored
    m = read_manifest(run_dir_of(tmp_path / "runs") / "manifest.json")
    assert m["status"] == "interrupted" and m["error"] == "SIGTERM"


OK_WORKLOAD = (
    "# traceanalyze-iterlog v1\\n"
    "rank,device_id,iteration,start_ns,duration_ns,batch_size,images_per_s\\n"
    "0,0,0,1790000000000000000,500000000,2,4.0\\n"
    "0,0,1,1790000000500000000,500000000,2,4.0\\n"
)


def test_no_ingest_leaves_no_store(tmp_path: Path) -> None:
    py = fake_python(tmp_path, f'printf "{OK_WORKLOAD}" > "$4/iterations_bs2_rank0.csv"')
    cfg = CollectConfig(
        out=tmp_path / "runs",
        batch_sizes=(2,),
        iterations=2,
        device="cpu",
        python=str(py),
        ingest=False,
    )
    res = collect(cfg, ["traceanalyze", "collect", "--no-ingest"])
    assert res.status == "completed" and res.store is None
    assert not (res.run_dir / "store").exists()
    m = read_manifest(res.manifest)
    assert m["ingested"] == [] and m["config"]["ingest"] is False
    assert "iterations_bs2_rank0.csv" in m["outputs"]


def test_ncu_run_records_a_pipe_left_out_in_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in ncu: answers --query-metrics like a GA10x board (no FP16 pipe), otherwise drops
    # its own options and runs the command after `--log-file FILE`, as ncu would.
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (tmp_path / "q.txt").write_text(
        "sm__inst_executed_pipe_fma  x\nsm__inst_executed_pipe_tensor_op_hmma  x\n"
        "sm__inst_executed_pipe_xu  x\n"
    )
    ncu = bin_ / "ncu"
    ncu.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--query-metrics" ]; then /bin/cat "{tmp_path}/q.txt"; exit 0; fi\n'
        'while [ "$1" != "--log-file" ]; do shift; done; shift 2; exec "$@"\n'
    )
    ncu.chmod(ncu.stat().st_mode | stat.S_IXUSR)
    py = fake_python(tmp_path, f'printf "{OK_WORKLOAD}" > "$4/iterations_bs2_rank0.csv"')
    cfg = CollectConfig(
        out=tmp_path / "runs",
        batch_sizes=(2,),
        iterations=2,
        profiler="ncu",
        python=str(py),
        sampler="off",
        ingest=False,
    )
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    pl = plan(cfg, device="cuda", capabilities=[(8, 6)])
    res = collect(cfg, ["traceanalyze", "collect"], pl=pl)
    m = read_manifest(res.manifest)
    assert m["status"] == "completed"
    assert m["notes"][0] == "ncu metric names from ncu --query-metrics"
    assert len(m["notes"]) == 2 and "FP16 pipe not collected" in m["notes"][1]
    assert "sm__inst_executed_pipe_fp16" not in m["commands"][0]


def test_existing_run_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runs" / "R").mkdir(parents=True)
    (tmp_path / "runs" / "R" / "x").write_text("keep")
    cfg = CollectConfig(out=tmp_path / "runs", device="cpu", run_id="R", iterations=4)
    with pytest.raises(CollectError, match="already exists"):
        collect(cfg, [], pl=plan(cfg))
    assert (tmp_path / "runs" / "R" / "x").read_text() == "keep"


def read_iterlog_csv(p: Path) -> list[dict[str, str]]:
    lines = p.read_text().splitlines()
    assert lines[0] == "# traceanalyze-iterlog v1"
    return list(csv.DictReader(lines[1:]))


@pytest.mark.requires_torch("torchvision")
def test_end_to_end_cpu_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from test_collect_sampler import write_fake_pynvml

    from traceanalyze.readers import READERS
    from traceanalyze.store import Store

    monkeypatch.setenv("TRACEANALYZE_TEST_SECRET", SECRET)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    # The sampler process (forced on, no GPU here) reads a fake NVML with two GPUs.
    monkeypatch.setenv("PYTHONPATH", str(write_fake_pynvml(tmp_path)))
    out = tmp_path / "runs"
    args = ["collect", "--device", "cpu", "--profiler", "torch", "--iterations", "4"]
    args += ["--batch-size", "2", "--image-size", "64", "--sampler", "on", "--out", str(out)]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    run = run_dir_of(out)
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", run.name)

    # The iteration log: 4 rows, rank 0, no device id on CPU, images/s = batch / duration.
    rows = read_iterlog_csv(run / "iterations_bs2_rank0.csv")
    assert [int(x["iteration"]) for x in rows] == [0, 1, 2, 3]
    assert {(x["rank"], x["device_id"], x["batch_size"]) for x in rows} == {("0", "", "2")}
    for x in rows:
        assert float(x["images_per_s"]) == pytest.approx(2 / (int(x["duration_ns"]) / 1e9))
    starts = [int(x["start_ns"]) for x in rows]
    assert starts == sorted(starts)

    # The PyTorch profiler trace: 2 active steps (schedule 1,1,2), a real Chrome trace.
    [trace] = list(run.glob("torch_bs2_rank0.*.pt.trace.json.gz"))
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    steps = {e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#2", "ProfilerStep#3"}
    check_phase_annotations(doc["traceEvents"], trace)

    # The store holds the iteration rows exactly.
    m = read_manifest(run / "manifest.json")
    store = Store(run / "store")
    it = store.table("iterations")
    src = store.table("sources")
    [iter_sid] = src.filter(src["format"] == "iterlog")["source_id"].to_list()
    got = it.filter(it["source_id"] == iter_sid).sort("iteration")
    assert got["duration_ns"].to_list() == [int(x["duration_ns"]) for x in rows]
    assert got["start_ns"].to_list() == starts
    assert "iterations_bs2_rank0.csv" in m["ingested"]
    # The profiler trace is ingested too (unconditionally: a missing reader is a failure).
    assert "kineto_json" in READERS
    assert trace.name in m["ingested"]
    assert src.filter(src["format"] == "kineto_json").height == 1

    # The sampler ran for the whole run and stopped cleanly on SIGTERM.
    [nvml_csv] = list(run.glob("nvml_*.csv"))
    nvml_lines = nvml_csv.read_text().splitlines()
    assert nvml_lines[0] == "# traceanalyze-nvml-sampler v1 interval_ms=50"
    samples = list(csv.DictReader(nvml_lines[1:]))
    assert len(samples) >= 2
    # The sampler takes the GPUs CUDA_VISIBLE_DEVICES names, numbered as CUDA ordinals.
    assert {(x["device_id"], x["device_uuid"]) for x in samples} == {
        ("0", "GPU-00000001-aaaa"),
        ("1", "GPU-00000000-aaaa"),
    }
    assert m["sampler_exit_code"] == 0
    assert "smi_csv" in READERS
    assert nvml_csv.name in m["ingested"]
    gs = store.table("gpu_samples")
    assert gs.height == len(samples)
    assert gs["power_w"].sum() == pytest.approx(sum(float(x["power_w"]) for x in samples))

    # Throughput: warm-up defaults to 1 for 4 iterations; median over iterations 1..3.
    [tp] = list(csv.DictReader((run / "throughput.csv").read_text().splitlines()))
    ips = [float(x["images_per_s"]) for x in rows[1:]]
    assert int(tp["batch_size"]) == 2 and int(tp["iterations"]) == 3
    assert float(tp["median_images_per_s"]) == pytest.approx(statistics.median(ips))
    assert (run / "throughput.png").stat().st_size > 0

    # Manifest: completed, versions, no environment besides CUDA_VISIBLE_DEVICES.
    assert m["status"] == "completed" and m["exit_code"] == 0
    assert m["notes"] == []
    given = {(args[i], args[i + 1]) for i in range(1, len(args), 2)}
    assert m["argv"][:2] == ["traceanalyze", "collect"]
    assert {(m["argv"][i], m["argv"][i + 1]) for i in range(2, len(m["argv"]), 2)} == given
    assert m["env"] == {"CUDA_VISIBLE_DEVICES": "1,0"}
    assert m["versions"]["torch"] == torch.__version__
    assert m["config"]["warmup"] == 1 and m["config"]["device"] == "cpu"
    for p in run.iterdir():
        if p.is_file() and not p.name.endswith((".gz", ".png")):
            assert SECRET not in p.read_text(errors="replace"), p.name

    # The CLI says where things are.
    assert f"store:         {run / 'store'}" in r.output
    assert f"manifest:      {run / 'manifest.json'}" in r.output


PHASES = ["data", "forward", "backward", "optimizer"]  # the workload's record_function names


def check_phase_annotations(events: list[dict[str, Any]], trace: Path) -> None:
    """Each profiled step holds its phases once, in order, as user annotations (read from the
    JSON here), and the timeline draws them: an annotation lane per depth above the operators,
    the steps and the widest phase named in their bars, every phase named in the legend."""
    import traceanalyze as ta

    ann = [e for e in events if e.get("cat") == "user_annotation"]
    for step in (e for e in ann if e["name"].startswith("ProfilerStep#")):
        a, b = step["ts"], step["ts"] + step["dur"]
        inside = sorted((e["ts"], e["name"]) for e in ann if a < e["ts"] < b)
        assert [n for _, n in inside if n in PHASES] == PHASES, step["name"]

    res = ta.open(trace).timeline(whole=True)
    depth1 = res.lanes.filter(pl.col("lane").str.ends_with("annotations, depth 1"))
    counts = depth1.group_by("name").len()
    assert {n: c for n, c in counts.iter_rows() if n in PHASES} == dict.fromkeys(PHASES, 2)
    fig = ta.plot.timeline(res)
    lanes_ax = fig.axes[0]
    ticks = [t.get_text() for t in lanes_ax.get_yticklabels()]
    assert ticks[0].startswith("CPU thread ") and " annotations (2)" in ticks[0]  # the 2 steps
    assert ticks[1].endswith("annotations, depth 1 (10)")  # 4 phases and zero_grad, per step
    assert [i for i, t in enumerate(ticks) if " ops (" in t] == [len(ticks) - 1]
    texts = {t.get_text() for t in lanes_ax.texts}
    assert {"ProfilerStep#2", "ProfilerStep#3", "backward"} <= texts
    [legend] = [leg for leg in fig.legends if leg.get_title().get_text().startswith("annotations")]
    named = [t.get_text().split(" (")[0] for t in legend.get_texts()]
    assert [n for n in named if n in PHASES] == PHASES and named[0] == "ProfilerStep"


def test_throughput_table_sums_ranks(tmp_path: Path) -> None:
    from traceanalyze.collect.throughput import throughput_table

    head = (
        "# traceanalyze-iterlog v1\n"
        "rank,device_id,iteration,start_ns,duration_ns,batch_size,images_per_s\n"
    )
    r0 = "".join(f"0,0,{i},{i},1,8,{v}\n" for i, v in enumerate([1.0, 10.0, 20.0, 30.0, 40.0]))
    r1 = "".join(f"1,1,{i},{i},1,8,{v}\n" for i, v in enumerate([1.0, 11.0, 21.0, 31.0]))
    (tmp_path / "a.csv").write_text(head + r0)
    (tmp_path / "b.csv").write_text(head + r1)
    t = throughput_table([tmp_path / "a.csv", tmp_path / "b.csv"], warmup=1)
    # Iteration 4 has only rank 0 → dropped; job throughput per iteration = 21, 41, 61.
    row: dict[str, Any] = t.row(0, named=True)
    assert row["ranks"] == 2 and row["iterations"] == 3
    assert row["median_images_per_s"] == 41.0
    assert row["p10_images_per_s"] == pytest.approx(21 + 0.2 * 20)
    assert row["p90_images_per_s"] == pytest.approx(41 + 0.8 * 20)


def test_fixture_made_by_the_collector_is_consistent() -> None:
    from conftest import fixture

    trace = fixture("kineto_json-resnet50-cpu/torch_bs2_rank0.pt.trace.json.gz")
    assert trace.stat().st_size <= 1_000_000
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    base = doc["baseTimeNanoseconds"]
    steps = {
        e["name"]: e for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
    }
    assert sorted(steps) == ["ProfilerStep#2", "ProfilerStep#3"]
    rows = read_iterlog_csv(fixture("iterlog-resnet50-cpu/iterations_bs2_rank0.csv"))
    assert [int(x["iteration"]) for x in rows] == [0, 1, 2, 3]
    # Both clocks are host epoch time: each recorded step starts within 5 ms of the logged
    # iteration and lasts within 5 ms as long.
    for x in rows[2:]:
        ev = steps[f"ProfilerStep#{x['iteration']}"]
        assert abs(base + round(ev["ts"] * 1000) - int(x["start_ns"])) < 5_000_000
        assert abs(round(ev["dur"] * 1000) - int(x["duration_ns"])) < 5_000_000
