"""Issue 21, what a new user met: errors that were tracebacks or click's usage errors (now one
`traceanalyze: error:` line, exit 1), filters that matched nothing, collect without torch or a
GPU, and the smaller items (figures, staging locks, file order, docs). Through the
CLI where the user met them; test_cli_first_hour_numbers.py holds the wrong numbers."""

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
ITERLOG = "iterlog-resnet50-cpu/iterations_bs2_rank0.csv"

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
    from traceanalyze.plot._ops import ops_figure

    long = "autograd::engine::evaluate_function: ConvolutionBackward0"
    stats = pl_frame(long)
    labels = [t.get_text() for t in ops_figure(stats).axes[0].get_yticklabels()]
    assert labels[0].startswith("autograd::") and "…" in labels[0]
    assert labels[0].endswith("ConvolutionBackward0")


def pl_frame(op: str):
    import polars as pl

    return pl.DataFrame(
        {
            "op": [op],
            "kernel_inclusive_ns": [2_000_000],
            "inclusive_ns": [1_000_000],
            "source_id": ["a"],
        }
    )


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


def test_tables_use_units_in_headers_and_no_scientific_notation() -> None:
    """Before: `launches R` printed `mean_delay_ns 6.712e+07` beside `4,350`, 223 columns."""
    import re

    r = invoke("launches", str(shared(RESNET)))
    assert r.exit_code == 0, r.output
    table = r.stdout.splitlines()
    assert max(len(ln) for ln in table) <= 120
    assert not re.search(r"\d\.\d+e[+-]\d", r.stdout)
    # one file: named above the table (issue 32), then the header
    assert table[0] == f"file: {shared(RESNET)}"
    assert "_ns" not in table[1] and "_ms" in table[1]  # one readable unit, in the header
    wide = invoke("launches", str(shared(RESNET)), "--wide").stdout.splitlines()
    assert "source_id" in wide[1] and "p95_delay_ms" in wide[1]  # every column under --wide
