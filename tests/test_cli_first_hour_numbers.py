"""Issue 21, the wrong or misleading numbers a new user met: one collect run is one GPU-run, one
warm-up rule, mfu's image size, one time origin and the default timeline window, device counts.
Through the CLI, as the user ran them; expected values from the raw inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import fixture, shared
from .test_cli_first_hour import invoke, one_error  # the one-error-line checks

# --- mfu: the image size from the run's manifest ---------------------------------------------


ITERLOG = "iterlog-resnet50-cpu/iterations_bs2_rank0.csv"


def _mfu_json(*args: str) -> dict:
    import json

    r = invoke("mfu", *args, "--gpu", "NVIDIA L4", "--json")
    assert r.exit_code == 0, r.output
    [row] = json.loads(r.stdout)
    return row


def test_mfu_takes_the_image_size_from_the_manifest_or_refuses(tmp_path: Path) -> None:
    """Before: `mfu` counted every run at 224 px (the demo trains at 64 px: ~12x too high)."""
    import json

    torch = pytest.importorskip("torch")  # FLOPs are counted from torchvision's model
    del torch
    run = tmp_path / "run"
    run.mkdir()
    log = run / "iterations_bs2_rank0.csv"
    log.write_bytes(fixture(ITERLOG).read_bytes())
    # No manifest, no --image-size: refused, with the reason.
    one_error(invoke("mfu", str(log)), "image size unknown", "--image-size")
    # A collect manifest beside the file (as `collect` writes it): its config.image_size.
    (run / "manifest.json").write_text(json.dumps({"config": {"image_size": 64}}))
    from_manifest = _mfu_json(str(log))
    given = _mfu_json(str(log), "--image-size", "64")
    at_224 = _mfu_json(str(log), "--image-size", "224")
    assert from_manifest["flop_per_image_count"] == given["flop_per_image_count"]
    ratio = at_224["flop_per_image_count"] / given["flop_per_image_count"]
    assert 10 < ratio < 13  # ~ (224 / 64) ** 2 = 12.25: convolutions scale with the area
    # Through a store under the run directory (the demo's layout) as well.
    store = run / "store"
    assert invoke("ingest", str(log), "--store", str(store)).exit_code == 0
    assert _mfu_json("--store", str(store))["flop_per_image_count"] == given["flop_per_image_count"]


# --- one warm-up rule --------------------------------------------------------------------------


def test_summary_variability_and_mfu_leave_out_the_same_warm_up(tmp_path: Path) -> None:
    """Before: summary counted the warm-up, mfu dropped none, variability max(1, 10 %)."""
    import csv
    import json
    import statistics

    pytest.importorskip("torch")  # mfu counts FLOPs from torchvision's model
    run = tmp_path / "run"
    run.mkdir()
    log = run / "iterations_bs2_rank0.csv"
    log.write_bytes(fixture(ITERLOG).read_bytes())
    lines = log.read_text().splitlines()
    rows = list(csv.DictReader(ln for ln in lines if not ln.startswith("#")))
    assert len(rows) == 4
    durs = {int(r["iteration"]): int(r["duration_ns"]) for r in rows}
    # Without a manifest: max(1, 4 // 10) = 1, the first iteration.
    want = statistics.median(d for i, d in durs.items() if i > min(durs)) / 1e6
    summ = json.loads(invoke("summary", str(log), "--json").stdout)["iterations"][0]
    var = json.loads(invoke("variability", str(log), "--json").stdout)[0]
    assert summ["warmup_count"] == 1 and summ["iteration_count"] == 4
    assert summ["median_ms"] == pytest.approx(want)
    assert var["median_iteration_ms"] == pytest.approx(want)
    ips = statistics.median(2e9 / d for i, d in durs.items() if i > min(durs))
    mfu = _mfu_json(str(log), "--image-size", "64")
    assert mfu["median_images_per_s"] == pytest.approx(ips)
    # The run's manifest says --warmup 2: iterations numbered 0 and 1 are warm-up, everywhere.
    (run / "manifest.json").write_text(json.dumps({"config": {"image_size": 64, "warmup": 2}}))
    want = statistics.median(d for i, d in durs.items() if i >= 2) / 1e6
    summ = json.loads(invoke("summary", str(log), "--json").stdout)["iterations"][0]
    var = json.loads(invoke("variability", str(log), "--json").stdout)[0]
    assert summ["warmup_count"] == 2
    assert summ["median_ms"] == pytest.approx(want)
    assert var["median_iteration_ms"] == pytest.approx(want)
    ips = statistics.median(2e9 / d for i, d in durs.items() if i >= 2)
    assert _mfu_json(str(log))["median_images_per_s"] == pytest.approx(ips)


# --- one collect run is one GPU-run ------------------------------------------------------------


def _run_dir(tmp_path: Path, manifest: bool) -> Path:
    """A collect run's directory as `collect` leaves it: the iteration log and the trace of rank
    0 at batch 2 (the fixtures come from one such run), and its manifest."""
    import json

    run = tmp_path / ("run" if manifest else "loose")
    run.mkdir()
    for rel in (ITERLOG, "kineto_json-resnet50-cpu/torch_bs2_rank0.pt.trace.json.gz"):
        (run / Path(rel).name).write_bytes(fixture(rel).read_bytes())
    if manifest:
        cfg = {"image_size": 64, "warmup": 1, "batch_sizes": [2]}
        (run / "manifest.json").write_text(json.dumps({"config": cfg}))
    return run


def test_variability_counts_one_collect_run_as_one_gpu(tmp_path: Path) -> None:
    """Before: `variability --store runs/demo/store` ranked the run's iteration log against its
    own trace, "2 of 2 GPUs"."""
    import json

    run = _run_dir(tmp_path, manifest=True)
    files = sorted(str(p) for p in run.iterdir() if p.name != "manifest.json")
    store = run / "store"
    assert invoke("ingest", *files, "--store", str(store)).exit_code == 0
    rows = json.loads(invoke("variability", "--store", str(store), "--json").stdout)
    assert [Path(r["file"]).name for r in rows] == ["iterations_bs2_rank0.csv"]
    # The iteration log stands for the run: 4 iterations, the manifest's warm-up 1 left out.
    assert rows[0]["steady_iteration_count"] == 3
    # Without the manifest, the log and the trace of the run are still one GPU-run: their epoch
    # windows overlap on the same device (issue 35; the rule's cases: test_gpu_runs_epoch.py).
    loose = _run_dir(tmp_path, manifest=False)
    lfiles = sorted(str(p) for p in loose.iterdir())
    rows = json.loads(invoke("variability", *lfiles, "--json").stdout)
    assert [Path(r["file"]).name for r in rows] == ["iterations_bs2_rank0.csv"]
    # Another rank of the same run is another GPU.
    rank1 = run / "iterations_bs2_rank1.csv"
    rank1.write_bytes(fixture(ITERLOG).read_bytes().replace(b"\n0,", b"\n1,"))
    rows = json.loads(invoke("variability", *files, str(rank1), "--json").stdout)
    assert sorted(Path(r["file"]).name for r in rows) == [
        "iterations_bs2_rank0.csv",
        "iterations_bs2_rank1.csv",
    ]


# --- one time origin; the default timeline window -----------------------------------------------

# An operator at 0 µs, one kernel [100, 200) µs, and a marker far away at 10 s.


TINY = (
    '{"traceEvents": ['
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 50},'
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 100,'
    ' "args": {"device": 0, "stream": 7}},'
    '{"ph": "i", "cat": "user_annotation", "name": "late", "pid": 1, "tid": 1, "ts": 10000000,'
    ' "s": "t"}]}'
)


def test_busy_and_timeline_count_start_end_from_the_same_origin(write, tmp_path: Path) -> None:
    """Before: busy counted --start/--end from the first kernel, timeline from the first event
    (98.8 ms apart on the ResNet-50 trace)."""
    import json

    import traceanalyze as ta

    p = write("tiny.json", TINY)
    # Window [0, 150) µs after the first event (the operator at 0): the kernel's [100, 150).
    r = invoke("busy", str(p), "--start", "0", "--end", "0.15", "--json")
    assert r.exit_code == 0, r.output
    k = [x for x in json.loads(r.stdout) if x["activity"] == "kernels"][0]
    assert (k["window_ms"], k["busy_ms"]) == (0.15, 0.05)
    r = invoke("busy", str(p), "--start", "0", "--end", "0.15")
    assert "first event" in r.stderr  # the table view says where the window counts from
    tl = ta.open(p).timeline(start_ms=0, end_ms=0.15)
    assert tl.start_ns == tl.first_ns  # the timeline's window starts at the same instant


def test_timeline_default_window_is_the_span_of_work(write) -> None:
    """Before: the window stretched to a marker 10 s after all the work (the Triton trace:
    13.7 s for one kernel)."""
    import traceanalyze as ta

    ds = ta.open(write("tiny.json", TINY))
    tl = ds.timeline()
    assert tl.end_ns - tl.start_ns == 200_000  # operator at 0 to the kernel's end at 200 µs
    whole = ds.timeline(whole=True)
    assert whole.end_ns - whole.start_ns == 10_000_000_000


def test_compare_counts_one_collect_run_once_per_side(tmp_path: Path) -> None:
    """Before: a side's iteration log and trace of the same run were pooled (iterations twice)."""
    import json

    run = _run_dir(tmp_path, manifest=True)
    files = sorted(str(p) for p in run.iterdir() if p.name != "manifest.json")
    store = run / "store"
    assert invoke("ingest", *files, "--store", str(store)).exit_code == 0
    r = invoke("compare", str(store), str(store), "--json")
    assert r.exit_code == 0, r.output
    ov = {x["metric"]: x for x in json.loads(r.stdout)["overview"]}
    log = fixture(ITERLOG).read_text().splitlines()
    n = sum(1 for ln in log if ln[:1].isdigit())  # the iteration log's rows: 4
    counts = [v for k, v in ov.items() if "iteration" in k and "count" in k]
    assert counts and all(v["a"] == v["b"] == n for v in counts), ov


def test_mfu_counts_one_collect_run_once(tmp_path: Path) -> None:
    import json

    pytest.importorskip("torch")
    run = _run_dir(tmp_path, manifest=True)
    files = sorted(str(p) for p in run.iterdir() if p.name != "manifest.json")
    r = invoke("mfu", *files, "--gpu", "NVIDIA L4", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [Path(x["file"]).name for x in rows] == ["iterations_bs2_rank0.csv"]
    assert rows[0]["iteration_count"] == 3  # 4 logged, the manifest's warm-up 1 left out


def test_compare_leaves_out_telemetry_of_an_unrelated_gpu(tmp_path: Path) -> None:
    """Before: every sampler log of a store went into its side, whatever GPU or time it was."""
    import csv
    import json

    nvml = shared("smi_logs/roofline_custom_nvml_sampler_rtx5070.csv")
    store = tmp_path / "store"
    files = [fixture(ITERLOG), nvml]
    assert invoke("ingest", *map(str, files), "--store", str(store)).exit_code == 0
    # The sampler log is of another machine and day: no second of it overlaps the run's.
    log = [r for r in csv.reader(fixture(ITERLOG).read_text().splitlines()) if r[0][:1].isdigit()]
    run_start_s = min(int(r[3]) for r in log) / 1e9
    from datetime import datetime

    stamps = [ln.split(",")[0] for ln in nvml.read_text().splitlines() if ln[:1].isdigit()]
    last_s = datetime.fromisoformat(stamps[-1].replace("Z", "+00:00")).timestamp()
    assert last_s < run_start_s  # months before the run
    r = invoke("compare", str(store), str(store), "--json")
    assert r.exit_code == 0, r.output
    ov = {x["metric"]: x for x in json.loads(r.stdout)["overview"]}
    for m in ("median_sm_clock_mhz", "median_power_w"):
        if m in ov:
            assert ov[m]["a"] is None and ov[m]["b"] is None, (m, ov[m], run_start_s)


def test_ingest_says_how_many_listed_devices_have_work(tmp_path: Path) -> None:
    """Before: "8 devices" for a one-GPU trace (its metadata lists every GPU of the node)."""
    import gzip
    import json

    p = shared("kineto_json/hta_triton_a100_trace.json.gz")
    doc = json.loads(gzip.decompress(p.read_bytes()))
    listed = len(doc["deviceProperties"])
    busy = {int(e["args"]["device"]) for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    assert (listed, len(busy)) == (8, 1)
    r = invoke("ingest", str(p), "--store", str(tmp_path / "s"))
    assert r.exit_code == 0
    assert f"({listed} devices listed, {len(busy)} with work, " in r.stdout


def test_timeline_names_host_operators_where_they_fit(write) -> None:
    """Before: the operators' lane was bars without a name (the demo's picture said nothing)."""
    import traceanalyze as ta

    fig = ta.plot.timeline(ta.open(write("tiny.json", TINY)).timeline())
    # aten::mm takes a quarter of the 200 µs window: its name fits inside its bar.
    assert "aten::mm" in [t.get_text() for t in fig.axes[0].texts]
