"""Issue 21, acceptance: every command of docs/cli.md against every shipped and shared input it
takes (a few per format), and the bad output paths a user types. Fails on a traceback, on an
exit code other than 0 or 1 (a well-formed command line is never misuse), on an exit 1 without
its `traceanalyze: error:` line, and on a default text table wider than 120 columns.

In process through click's CliRunner (no interpreter start per case), one trace per format."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyze.cli import main

from .conftest import FIXTURES, ROOT, SHARED_TRACES

WIDTH = 120
SETS = ROOT.parent / "shared" / "sets"

# One or two inputs per format: the formats' shapes differ (GPU trace, metrics, telemetry, CPU
# run), not their sizes.
SHARED = [
    "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz",
    "kineto_json/hta_triton_a100_trace.json.gz",
    "nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv",
    "nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv",
    "ncu_csv/roofline_ncu2026.2_rtx5070_gemm_tiled_long.csv",
    "nsys_sqlite/nsysai_mock_torch_tiny_nsys2026.1.sqlite",
    "nvprof_sqlite/profilinglm_pytorch_lm_v100_pyprof_net.sql",
    "smi_logs/roofline_custom_nvml_sampler_rtx5070.csv",
]
SHIPPED = [
    "iterlog-resnet50-cpu/iterations_bs2_rank0.csv",
    "kineto_json-resnet50-cpu/torch_bs2_rank0.pt.trace.json.gz",
]
# Commands whose input is FILE... or --store (cli.common.dataset_input).
ANALYSES = [
    "annotations",
    "attribute",
    "busy",
    "coreutil",
    "critical-path",
    "diagnose",
    "health",
    "idle",
    "launches",
    "mfu",
    "ops",
    "overlap",
    "roofline",
    "stragglers",
    "summary",
    "variability",
]
# Commands over training runs (MLPerf logs, collect runs): FILE... or --store.
RUNS = ["runs", "scaling", "history"]
# No shipped or shared input can answer these (each says why, exit 1): GPU telemetry that
# overlaps iterations, ncu FLOP counters (tests/test_analyses_mfu.py builds one inline).
NOTHING_SHIPPED_ANSWERS = {"attribute", "roofline"}
# These answer the sets (../shared/sets) rather than single traces: the 8 ranks of one job.
SETS_ANSWER = {"stragglers"}
# Options that write a file, with a command and input that reach the write.
RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
WRITERS = [
    ("timeline", "-o", RESNET, True),
    ("timeline", "--perfetto", RESNET, False),
    ("idle", "--plot", RESNET, True),
    ("overlap", "--plot", RESNET, True),
    ("ops", "--plot", RESNET, True),
    ("variability", "--plot", RESNET, True),
    ("coreutil", "--plot", "nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv", True),
    ("roofline", "-o", "ncu_csv/roofline_ncu2026.2_rtx5070_gemm_tiled_long.csv", True),
    ("diagnose", "-o", RESNET, False),
]


def documented_commands() -> set[str]:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    return set(re.findall(r"^## `traceanalyze ([a-z-]+)`", text, flags=re.M))


def inputs() -> list[Path]:
    if not SHARED_TRACES.exists():
        pytest.skip("../shared/traces is absent (a fresh clone without ../shared)")
    return [SHARED_TRACES / r for r in SHARED] + [FIXTURES / r for r in SHIPPED]


def check(args: list[str], problems: list[str], *, table: bool = True) -> int:
    """Run one command line; add what is wrong with its result to `problems`."""
    r = CliRunner().invoke(main, args)
    where = "traceanalyze " + " ".join(Path(a).name if "/" in a else a for a in args)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        problems.append(f"{where}: traceback ({type(r.exception).__name__}: {r.exception})")
        return -1
    if "Traceback" in r.output:
        problems.append(f"{where}: a traceback in its output")
    if r.exit_code not in (0, 1):
        problems.append(f"{where}: exit {r.exit_code}: {r.output.strip()[:200]}")
    ours = ("traceanalyze: ", "wrote ")
    stray = [ln for ln in r.stderr.splitlines() if ln and not ln.startswith(ours)]
    if stray and args[0] != "collect":  # collect's progress lines go to stderr
        problems.append(f"{where}: stderr line not from traceanalyze: {stray[0][:120]}")
    if r.exit_code == 1 and "traceanalyze: error: " not in r.stderr:
        problems.append(f"{where}: exit 1 without an error line")
    if table and args[0] not in ("ingest", "collect"):  # their lines are messages, not tables
        wide = [ln for ln in r.stdout.splitlines() if len(ln) > WIDTH]
        if wide:
            problems.append(f"{where}: {len(wide[0])} columns wide: {wide[0][:80]}…")
    return r.exit_code


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with three sources of different formats, ingested through the CLI."""
    files = inputs()
    st = str(tmp_path_factory.mktemp("every") / "store")
    problems: list[str] = []
    assert (
        check(["ingest", str(files[1]), str(files[2]), str(files[8]), "--store", st], problems) == 0
    )
    assert not problems, problems
    return st


def test_the_matrix_covers_every_documented_command() -> None:
    covered = {*ANALYSES, *RUNS, "timeline", "compare", "ingest", "schema", "formats", "collect"}
    assert documented_commands() == covered


@pytest.mark.parametrize("cmd", ANALYSES)
def test_analysis_on_every_input(cmd: str, store: str) -> None:
    problems: list[str] = []
    answered = 0
    # mfu refuses without an image size (none of these inputs has a collect manifest)
    extra = ["--image-size", "224"] if cmd == "mfu" else []
    for p in inputs():
        answered += check([cmd, str(p), *extra], problems) == 0
    if cmd == "variability":  # the store's GPUs are of several models: each on its own
        extra = ["--by", "system"]  # (without it: refused, listing them; issue 32)
    check([cmd, "--store", store, *extra], problems)
    assert not problems, "\n".join(problems)
    if cmd not in NOTHING_SHIPPED_ANSWERS | SETS_ANSWER:
        assert answered >= 1, f"{cmd} answered none of the inputs"


def test_runs_commands_on_mlperf_logs_and_the_other_inputs(store: str) -> None:
    """runs, scaling and history on the MLPerf logs (../shared/sets), on every trace input (a
    clean refusal or an empty answer) and on a store."""
    logs = sorted((SETS / "mlperf_training_resnet50").rglob("result_*.txt"))
    if not logs:
        pytest.skip("../shared/sets/mlperf_training_resnet50 is absent")
    problems: list[str] = []
    for cmd in RUNS:
        assert check([cmd, *map(str, logs)], problems) == 0, problems
        for p in inputs():
            check([cmd, str(p)], problems)
        check([cmd, "--store", store], problems)
    assert not problems, "\n".join(problems)


def test_timeline_compare_and_the_rest(store: str, tmp_path: Path) -> None:
    problems: list[str] = []
    files = inputs()
    for i, p in enumerate(files):
        fig, trace = tmp_path / f"t{i}.png", tmp_path / f"t{i}.json"
        check(["timeline", str(p), "-o", str(fig), "--perfetto", str(trace)], problems)
    for a, b in [(files[0], files[1]), (files[2], files[2]), (files[6], files[0])]:
        check(["compare", str(a), str(b)], problems)
        check(["compare", str(a), str(b), "--ops"], problems)
    ids = CliRunner().invoke(main, ["summary", "--store", store, "--json"]).stdout
    sid = re.findall(r'"source_id": "([0-9a-f]{16})"', ids)[0]
    check(["timeline", "--store", store, "--source", sid, "-o", str(tmp_path / "s.png")], problems)
    check(["schema"], problems)
    check(["schema", "kernels"], problems)
    check(["formats"], problems)
    check(["ingest", str(files[0]), "--store", store], problems)  # already in: skipped
    runs = str(tmp_path / "runs")
    check(["collect", "--out", runs, "--dry-run", "--device", "cpu", "--iterations", "4"], problems)
    dlrm = sorted((SETS / "multirank_param_dlrm_8xv100").glob("*.json.gz"))[:3]
    if dlrm:
        check(["variability", *map(str, dlrm)], problems)
        check(["summary", *map(str, dlrm)], problems)
        all_ranks = sorted((SETS / "multirank_param_dlrm_8xv100").glob("*.json.gz"))
        assert check(["stragglers", *map(str, all_ranks)], problems) == 0
        check(["timeline", *map(str, all_ranks), "-o", str(tmp_path / "ranks.png")], problems)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("cmd", "opt", "rel", "figure"), WRITERS)
def test_bad_output_paths(cmd: str, opt: str, rel: str, figure: bool, tmp_path: Path) -> None:
    src = SHARED_TRACES / rel
    if not src.exists():
        pytest.skip(f"../shared/traces/{rel} is absent")
    (tmp_path / "taken").mkdir()
    bad = [tmp_path / "no" / "x.png", tmp_path / "taken"]
    if figure:
        bad += [tmp_path / "x.docx", tmp_path / "x"]
    problems: list[str] = []
    for out in bad:
        if check([cmd, str(src), opt, str(out)], problems) != 1:
            problems.append(f"{cmd} {opt} {out.name}: not refused")
    assert not problems, "\n".join(problems)
    assert not (tmp_path / "x").exists() and not (tmp_path / "no").exists()
