"""Issue 21, errors a new user met: each is one `traceanalyze: error:` line and exit 1, never a
traceback or click's usage error (exit 2). Through the CLI, as the user ran them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyze.cli import main
from traceanalyze.dataset import Dataset

from .conftest import fixture, shared

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
ERR = "traceanalyze: error: "

# The commands that took FILE... through click's `exists=True` (exit 2, click's message).
FILE_COMMANDS = ["summary", "health", "busy", "timeline", "launches", "coreutil", "mfu", "roofline"]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def one_error(r, *needles: str) -> str:
    """The result is exit 1 with exactly one error line holding every needle, no traceback."""
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 1, (r.exit_code, r.output)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(ERR), r.stderr
    assert "Traceback" not in r.output and "Usage:" not in r.output
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.mark.parametrize("cmd", FILE_COMMANDS + ["idle", "overlap", "ops", "variability"])
def test_missing_input_file_is_one_line_exit_1(cmd: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    extra = ["-o", str(tmp_path / "t.png")] if cmd == "timeline" else []
    one_error(invoke(cmd, str(missing), *extra), str(missing), "no such file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_unreadable_input_file_is_one_line_exit_1(tmp_path: Path) -> None:
    p = tmp_path / "locked.csv"
    p.write_bytes(fixture("iterlog-resnet50-cpu/iterations_bs2_rank0.csv").read_bytes())
    p.chmod(0)
    for cmd in FILE_COMMANDS:
        extra = ["-o", str(tmp_path / "t.png")] if cmd == "timeline" else []
        one_error(invoke(cmd, str(p), *extra), str(p))


# --- output paths ---------------------------------------------------------------------------


def test_timeline_output_into_missing_directory(tmp_path: Path) -> None:
    out = tmp_path / "no" / "t.png"
    one_error(invoke("timeline", str(shared(RESNET)), "-o", str(out)), str(out), "does not exist")
    assert not out.parent.exists()


def test_timeline_output_onto_a_directory(tmp_path: Path) -> None:
    one_error(invoke("timeline", str(shared(RESNET)), "-o", str(tmp_path)), "is a directory")


@pytest.mark.parametrize("name", ["t.docx", "t"])
def test_timeline_output_needs_a_figure_extension(tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    line = one_error(invoke("timeline", str(shared(RESNET)), "-o", str(out)), ".png")
    assert ("'.docx'" in line) if name.endswith("docx") else ("no extension" in line)
    assert not out.exists()  # before: `-o t` silently wrote a PNG named `t`


def test_perfetto_into_missing_directory(tmp_path: Path) -> None:
    out = tmp_path / "no" / "t.json"
    one_error(invoke("timeline", str(shared(RESNET)), "--perfetto", str(out)), "does not exist")


@pytest.mark.parametrize(
    ("cmd", "opt", "rel"),
    [
        ("idle", "--plot", RESNET),
        ("overlap", "--plot", RESNET),
        ("ops", "--plot", RESNET),
        ("coreutil", "--plot", "nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv"),
        ("variability", "--plot", RESNET),
        ("roofline", "-o", "ncu_csv/roofline_ncu2026.2_rtx5070_gemm_tiled_long.csv"),
    ],
)
def test_plot_into_missing_directory(cmd: str, opt: str, rel: str, tmp_path: Path) -> None:
    out = tmp_path / "no" / "p.png"
    one_error(invoke(cmd, str(shared(rel)), opt, str(out)), str(out), "does not exist")


# --- stores ----------------------------------------------------------------------------------


def test_ingest_into_dev_null(tmp_path: Path) -> None:
    p = fixture("iterlog-resnet50-cpu/iterations_bs2_rank0.csv")
    one_error(invoke("ingest", str(p), "--store", "/dev/null"), "/dev/null")
    one_error(invoke("summary", "--store", "/dev/null"), "/dev/null")


def _refuse_writes_under(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """As root, whom file modes do not stop: the kernel's refusal of a write under `root`
    (EACCES on creating a file or directory there), as a non-root user meets it."""
    real_mkdir, real_open = os.mkdir, os.open

    def under(path: object) -> bool:
        return os.path.abspath(os.fsdecode(path)).startswith(str(root))  # type: ignore[arg-type]

    def mkdir(path: object, *a: object, **k: object) -> None:
        if under(path):
            raise PermissionError(13, "Permission denied", os.fsdecode(path))  # type: ignore[arg-type]
        real_mkdir(path, *a, **k)  # type: ignore[arg-type]

    def open_(path: object, flags: int, *a: object, **k: object) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and under(path):
            raise PermissionError(13, "Permission denied", os.fsdecode(path))  # type: ignore[arg-type]
        return real_open(path, flags, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", open_)
    import builtins

    real_bopen = builtins.open

    def bopen(file: object, mode: str = "r", *a: object, **k: object) -> object:
        if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+") and under(file):
            raise PermissionError(13, "Permission denied", os.fsdecode(file))
        return real_bopen(file, mode, *a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", bopen)


def test_read_only_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A store the user may not write: one line naming a path in it, exit 1, store intact."""
    store = tmp_path / "store"
    p = fixture("iterlog-resnet50-cpu/iterations_bs2_rank0.csv")
    assert invoke("ingest", str(p), "--store", str(store)).exit_code == 0
    before = sorted((q.relative_to(store), q.stat().st_size) for q in store.rglob("*"))
    for d in (store, *store.rglob("*")):
        d.chmod(0o555 if d.is_dir() else 0o444)
    try:
        if os.geteuid() == 0:
            _refuse_writes_under(monkeypatch, store)
        trace = fixture("kineto_json-resnet50-cpu/torch_bs2_rank0.pt.trace.json.gz")
        r = invoke("ingest", str(trace), "--store", str(store))
        monkeypatch.undo()
        one_error(r, str(store))
        after = sorted((q.relative_to(store), q.stat().st_size) for q in store.rglob("*"))
        assert after == before
    finally:
        for d in (store, *store.rglob("*")):
            d.chmod(0o755 if d.is_dir() else 0o644)


# --- collect ---------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--device", "cpu"]])
def test_collect_without_torch_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, extra: list[str]
) -> None:
    # None in sys.modules: `import torch` raises ImportError and find_spec says it is absent.
    monkeypatch.setitem(sys.modules, "torch", None)
    r = invoke("collect", "--out", str(tmp_path / "runs"), "--iterations", "2", *extra)
    one_error(r, "pip install 'traceanalyze[collect]'")
    assert not (tmp_path / "runs").exists()


def test_collect_without_gpu_needs_device_cpu_and_says_the_cost(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = invoke("collect", "--out", str(tmp_path / "runs"))
    # the defaults: 500 steps of 64 images, 224 px; 35 s a step -> 500 * 35 / 3600 = 4.9 h
    one_error(r, "no GPU found", "--device cpu", "500 steps", "4.9 hours")
    assert not (tmp_path / "runs").exists()
    r = invoke(
        "collect",
        "--out",
        str(tmp_path / "runs"),
        "--batch-size",
        "2,4",
        "--iterations",
        "4",
        "--image-size",
        "64",
    )
    # 4 steps of 2 + 4 images at 64 px: 4 * 6 * 35 / 64 * (64 / 224) ** 2 = 1.07 s
    one_error(r, "no GPU found", "4 steps at batch 2,4, 64x64 px take about 1 s")
    # A dry run (a login node has no GPU) plans for the CPU and says what a real run needs.
    r = invoke("collect", "--out", str(tmp_path / "runs"), "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("# no GPU found: planned for the CPU, a real run needs --device cpu")
    assert "--device cpu" in r.stdout.splitlines()[1]


# --- Ctrl-C ----------------------------------------------------------------------------------


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Dataset, "summary", interrupted)
    r = invoke("summary", str(fixture("iterlog-resnet50-cpu/iterations_bs2_rank0.csv")))
    assert r.exit_code == 130
    assert r.stderr.strip() == "traceanalyze: interrupted"
    assert "Aborted!" not in r.output


# --- filters that match nothing --------------------------------------------------------------


def _kernel_devices(path: Path) -> set[int]:
    """Device ids of the trace's GPU kernels, read with the json module."""
    import gzip
    import json

    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return {int(e["args"]["device"]) for e in events if e.get("cat") == "kernel"}


def test_device_filter_matching_nothing_says_so() -> None:
    trace = shared(RESNET)
    assert _kernel_devices(trace) == {0}  # one GPU, though its metadata lists more
    one_error(invoke("summary", str(trace), "--device", "7"), "device 7", "devices with work: 0")
    r = invoke("busy", str(trace), "--device", "7", "--device", "0")
    assert r.exit_code == 0
    assert "traceanalyze: warning: no work or samples on device 7" in r.stderr


def test_timeline_unknown_iteration_lists_the_ones_there(tmp_path: Path) -> None:
    import gzip
    import json

    trace = shared(RESNET)
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    steps = sorted(
        {
            int(e["name"].split("#")[1])
            for e in events
            if e.get("name", "").startswith("ProfilerStep#")
        }
    )
    assert steps == list(range(steps[0], steps[-1] + 1))  # one run: 101-105 here
    r = invoke("timeline", str(trace), "--iteration", "3", "-o", str(tmp_path / "t.png"))
    one_error(r, "iteration 3", f"iterations here: {steps[0]}-{steps[-1]}")


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


def test_docs_send_no_reader_outside_the_project() -> None:
    """A clone has no ../shared/docs: the README and CONTRIBUTING keep the conventions inside."""
    from .conftest import ROOT

    for name in (
        "README.md",
        "CONTRIBUTING.md",
        *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")),
    ):
        text = (ROOT / name).read_text(encoding="utf-8")
        assert "shared/docs" not in text, f"{name} sends readers to ../shared/docs"
    assert "## Conventions" in (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")


def test_parallel_ingest_leaves_no_staging_locks(tmp_path: Path) -> None:
    """Before: `ingest -j 2` left one `.staging/<owner>.lock` per worker."""
    store = tmp_path / "store"
    files = [
        fixture("iterlog-resnet50-cpu/iterations_bs2_rank0.csv"),
        fixture("kineto_json-resnet50-cpu/torch_bs2_rank0.pt.trace.json.gz"),
    ]
    r = invoke("ingest", "-j", "2", "-q", *map(str, files), "--store", str(store))
    assert r.exit_code == 0, r.output
    assert not (store / ".staging").exists(), sorted(p.name for p in (store / ".staging").iterdir())
    serial = tmp_path / "serial"
    assert invoke("ingest", "-q", *map(str, files), "--store", str(serial)).exit_code == 0
    assert sorted(p.name for p in store.iterdir()) == sorted(p.name for p in serial.iterdir())


def test_summary_prints_files_in_the_order_given() -> None:
    """Before: by source id (a hash), whatever order the files were given in."""
    a = shared("kineto_json/hta_triton_a100_trace.json.gz")
    b = shared("nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv")
    for first, second in ((a, b), (b, a)):
        heads = [ln for ln in invoke("summary", str(first), str(second)).stdout.splitlines()]
        heads = [ln for ln in heads if ln.startswith("== ")]
        assert heads == [f"== {first}", f"== {second}"]


def test_saved_figures_keep_long_titles_and_labels(tmp_path: Path) -> None:
    """Before: ops.png cut its title and long labels at the figure's edge."""
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    from traceanalyze.plot import DPI, save

    fig = Figure(figsize=(2, 1))
    ax = fig.add_subplot()
    ax.set_title("a title much longer than a two-inch figure is wide " * 2)
    out = tmp_path / "f.png"
    save(fig, out)
    assert imread(out).shape[1] > 2 * DPI  # the picture grew to hold the title
    # An operator name longer than the label room is cut visibly, in the middle.
    from traceanalyze.plots.ops import ops_figure

    long = "autograd::engine::evaluate_function: ConvolutionBackward0"
    stats = pl_frame(long)
    labels = [t.get_text() for t in ops_figure(stats).axes[0].get_yticklabels()]
    assert labels[0].startswith("autograd::") and "…" in labels[0]
    assert labels[0].endswith("ConvolutionBackward0")


def pl_frame(op: str):
    import polars as pl

    return pl.DataFrame(
        {"op": [op], "kernel_self_ns": [2_000_000], "self_ns": [1_000_000], "source_id": ["a"]}
    )


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
    # Files of no collect run (no manifest beside them) stay separate sources.
    loose = _run_dir(tmp_path, manifest=False)
    lfiles = sorted(str(p) for p in loose.iterdir())
    rows = json.loads(invoke("variability", *lfiles, "--json").stdout)
    assert len(rows) == 2
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


def test_timeline_of_a_store_with_several_sources_is_one_error_line(tmp_path: Path) -> None:
    """Before: click's usage block and `Error: ...`; now the project's one line (misuse: 2)."""
    store = tmp_path / "store"
    files = [fixture(ITERLOG), fixture("kineto_json-resnet50-cpu/torch_bs2_rank0.pt.trace.json.gz")]
    assert invoke("ingest", *map(str, files), "--store", str(store)).exit_code == 0
    r = invoke("timeline", "--store", str(store), "-o", str(tmp_path / "t.png"))
    assert r.exit_code == 2
    assert r.stderr.startswith("traceanalyze: error: the timeline works on one source")
    assert len(r.stderr.strip().splitlines()) == 1 and "Usage:" not in r.output


def test_collect_says_each_iteration_as_it_is_logged(tmp_path: Path) -> None:
    """Before: a CPU run printed nothing for minutes; now one line per logged iteration."""
    from traceanalyze.collect._run_steps import Step, run_commands

    log = tmp_path / "iterations_bs2_rank0.csv"
    script = (
        "import time, sys\n"
        f"f = open({str(log)!r}, 'w')\n"
        "f.write('# traceanalyze-iterlog v1\\nrank,device_id,iteration\\n'); f.flush()\n"
        "for i in range(3):\n"
        "    time.sleep(0.3); f.write(f'0,,{i}\\n'); f.flush()\n"
    )
    step = Step(2, [sys.executable, "-c", script], {}, tmp_path / "workload.log")
    said: list[str] = []
    manifest: dict = {"config": {"iterations": 3}, "commands": []}
    status, _, rc = run_commands([step], False, None, tmp_path, manifest, said.append)
    assert (status, rc) == ("completed", 0)
    assert [s for s in said if ": iteration " in s] == [
        "batch size 2: iteration 1/3",
        "batch size 2: iteration 2/3",
        "batch size 2: iteration 3/3",
    ]


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
