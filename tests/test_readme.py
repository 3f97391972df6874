"""Every command in README.md's ```sh blocks is checked and run.

Each line (continuations joined, `# comments` dropped) is either on `SKIP` with its reason or a
`traceanalyze` command. Every `traceanalyze` line is checked against the click commands (the
command exists, every option shown exists, every choice shown is accepted). Then it runs:

* a concrete line as written, in a temp directory;
* a synopsis line (`traceanalyze busy TRACE... [--start MS --end MS]`) once with every `[optional]`
  group left out, then once per group (and per `a|b` alternative in it), with each placeholder
  (`TRACE...`, `DIR`, `N`) replaced by real data from `PLACEHOLDERS`/`OPTION_VALUES`.

A new README line with a placeholder this file does not know fails with a message saying where to
add it, so the README can change and stay checked.
"""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze.cli import main

from .conftest import FIXTURES, ROOT, SHARED_TRACES

README = ROOT / "README.md"
RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
NSYS_2GPU = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
DLRM = [
    f"worker{r}_step_12.{ms}.pt.trace.json.gz"
    for r, ms in enumerate(
        [
            1694128201545,
            1694128201556,
            1694128201554,
            1694128201557,
            1694128201547,
            1694128201549,
            1694128201553,
            1694128201553,
        ]
    )
]
SH_BLOCK = re.compile(r"```(?:sh|bash|shell|console)\n(.*?)```", re.S)
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\.\.\.)?$")

# Lines not run, by pattern, each with the reason. Keep it small: anything else must run.
SKIP: list[tuple[str, str]] = [
    (r"^make (demo|test)\b", "builds .venv with pip (network); the demo's steps are run here"),
    (r"^make lint\b", "tests/test_lint.py runs the same ruff and mypy calls"),
    (r"^make docs\b", "tests/test_docs.py regenerates docs/cli.md and docs/schema.md and compares"),
    (r"^make bench\b", "benchmarks take minutes and install the bench extra (network)"),
    (r"^pip install\b", "installs packages (network)"),
    (r"^python3 -m venv \.venv$", "the CPU-torch set-up: makes .venv, then installs (network)"),
    (r"^\.venv/bin/pip install\b", "installs packages (network)"),
    (r"^sbatch\b", "needs a Slurm cluster; tests/test_collect_slurm.py runs the template"),
    (
        r"^traceanalyze collect\b(?!.*--dry-run)(?!.*--device cpu)",
        "trains on a GPU (CUDA, 500 steps at 224 px by default); the --device cpu and "
        "--dry-run lines run here",
    ),
]
# Runs left out for want of data the project ships (the syntax is still checked).
RUN_SKIP: list[tuple[str, str]] = [
    (r"--tz|--fields|--interval-ms", "smi_csv reader options need an nvidia-smi/dcgmi log"),
    (r"^traceanalyze attribute\b", "needs GPU telemetry overlapping iterations (none shipped)"),
    (r"^traceanalyze coreutil .*--weight duration", "nvprof level metrics have no duration"),
    (r"--dask\b", "needs a Dask cluster; tests/test_dask_ingest.py runs one on loopback"),
    (
        r"^traceanalyze (runs|scaling|history)\b",
        "needs MLPerf result logs (../shared/sets); tests/test_analyses_runs.py runs these "
        "commands on them",
    ),
    (
        r"^traceanalyze roofline\b",
        "no shipped ncu capture has FLOP counters; tests/test_analyses_mfu.py builds one inline",
    ),
]
OUTPUT_OPTIONS = ("-o", "--plot", "--perfetto")


def _shared(rel: str) -> str:
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"../shared/traces/{rel} is absent")
    return str(p)


def readme_lines() -> list[str]:
    out: list[str] = []
    for block in SH_BLOCK.findall(README.read_text(encoding="utf-8")):
        cont = False
        for raw in block.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
            joined = cont or (raw[:1].isspace() and bool(out))
            cont = line.endswith("\\")
            line = line.rstrip("\\").strip()
            if not line:
                continue
            if joined:
                out[-1] += " " + line
            else:
                out.append(line)
    return out


def skip_reason(line: str, table: list[tuple[str, str]] = SKIP) -> str | None:
    return next((why for pat, why in table if re.search(pat, line)), None)


# --- synopsis lines -> concrete argv ----------------------------------------------------------


@dataclass
class Group:
    items: list[object]


def _parse(tokens: list[str], i: int = 0) -> tuple[list[object], int]:
    items: list[object] = []
    while i < len(tokens):
        t = tokens[i]
        i += 1
        if t == "[":
            sub, i = _parse(tokens, i)
            items.append(Group(sub))
        elif t.startswith("]"):
            return items, i
        else:
            items.append(t)
    return items, i


def parse(line: str) -> list[object]:
    return _parse(re.findall(r"\[|\](?:\.\.\.)?|[^\s\[\]]+", line))[0]


def _split(items: list[object]) -> list[list[object]]:
    alts: list[list[object]] = [[]]
    for it in items:
        if it == "|":
            alts.append([])
        else:
            alts[-1].append(it)
    return alts


def _bases(items: list[object]) -> list[list[object]]:
    """`cmd X... | --store DIR [rest]`: the positional inputs or the option, with the rest."""
    if "|" not in items:
        return [items]
    i = items.index("|")
    left, right = items[:i], items[i + 1 :]
    n = 1 + next(
        (k for k, t in enumerate(right[1:]) if not isinstance(t, str) or t.startswith("-")),
        len(right) - 1,
    )
    return [left + right[n:], left[:2] + right[:n] + right[n:]]


def _words(items: list[object]) -> list[str]:
    return [t for t in items if isinstance(t, str)]


def _alternatives(word: str) -> list[str]:
    if "|" not in word or word == "|":
        return [word]
    alts = word.split("|")
    # `timeline.png|.svg`: a suffix alternative keeps the first one's stem.
    return [str(Path(alts[0]).with_suffix(a)) if a.startswith(".") else a for a in alts]


def _expand(words: list[str], only: set[int] | None = None) -> Iterator[list[str]]:
    """Each word's alternatives: all of them where `only` is None or names the word, else the
    first one."""
    choices = [
        _alternatives(w) if only is None or i in only else _alternatives(w)[:1]
        for i, w in enumerate(words)
    ]
    for combo in itertools.product(*choices):
        yield list(combo)


def variants(line: str) -> list[list[str]]:
    out: list[list[str]] = []
    for base in _bases(parse(line)):
        out += _expand(_words(base))
        for gi, g in enumerate(base):
            if not isinstance(g, Group):
                continue
            for alt in _split(g.items):
                before = _words(base[:gi])
                words = before + _words(alt) + _words(base[gi + 1 :])
                own = set(range(len(before), len(before) + len(_words(alt))))
                out += _expand(words, own)
    unique: list[list[str]] = []
    for v in out:
        if v not in unique:
            unique.append(v)
    return unique


# --- data behind the placeholders ---------------------------------------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("readme")
    kineto = FIXTURES / "kineto_json-resnet50-cpu" / "torch_bs2_rank0.pt.trace.json.gz"
    iterlog = FIXTURES / "iterlog-resnet50-cpu" / "iterations_bs2_rank0.csv"
    ta.ingest([kineto, iterlog], d / "store")
    # compare's sides: one GPU-run each (a store of several is refused without --pool), both
    # holding the trace that `--source ID` names
    ta.ingest([kineto], d / "store_a")
    ta.ingest([kineto], d / "store_b")
    sources = ta.Store(d / "store").table("sources")
    ids = dict(zip(sources["format"], sources["source_id"], strict=True))
    its = ta.Store(d / "store").table("iterations").filter(source_id=ids["kineto_json"])
    return {
        "dir": d,
        "kineto": str(kineto),
        "iterlog": str(iterlog),
        "store": str(d / "store"),
        "store_a": str(d / "store_a"),
        "store_b": str(d / "store_b"),
        "kid": ids["kineto_json"],
        "iid": ids["iterlog"],
        "iteration": str(its["iteration"].min()),
    }


# placeholder -> value(s); a value naming a `work` key is looked up there; "shared:" a real trace
PLACEHOLDERS: dict[str, list[str]] = {
    "FILE...": ["kineto"],
    "TRACE...": ["kineto"],
    "TRACE": ["kineto"],
    "A": ["store_a"],
    "B": ["store_b"],
    "STORE": ["store"],
    "DIR": ["store"],
    "SLUG": ["=kineto_json"],
    "ID": ["kid"],
    "OTHER_ID": ["iid"],
    "TABLE": ["=kernels"],
    "ITERLOG": ["iterlog"],
    "MS": ["=50"],
    "N": ["=0"],
    "NAME": ["=NVIDIA H100 80GB HBM3"],
}
# (command, placeholder or glob) -> value(s), where the command needs other data
COMMAND_VALUES: dict[tuple[str, str], list[str]] = {
    ("busy", "TRACE..."): ["shared:" + NSYS_2GPU],
    # The CPU fixture has no GPU kernels: the GPU-side analyses run on the 2-GPU nsys trace.
    ("launches", "TRACE..."): ["shared:" + NSYS_2GPU],
    ("idle", "TRACE..."): ["shared:" + NSYS_2GPU],
    ("overlap", "TRACE..."): ["shared:" + NSYS_2GPU],
    ("annotations", "TRACE..."): ["shared:" + NSYS_2GPU],
    ("ops", "TRACE..."): ["shared:" + RESNET],
    # a capture-time trace (docs/graph-capture.md); the ResNet-50 trace replays no graph: a warning
    ("ops", "CAPTURE"): [
        "=" + str(FIXTURES / "kineto_json-sglang-hipgraph-mi300x" / "capture_bs_32_rank0.json.gz")
    ],
    ("diagnose", "TRACE..."): ["shared:" + NSYS_2GPU],
    ("coreutil", "batch_*.csv"): ["shared:nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv"],
    # All 8 ranks of one DLRM step (../shared/sets, beside ../shared/traces).
    ("stragglers", "TRACE..."): [f"shared:../sets/multirank_param_dlrm_8xv100/{n}" for n in DLRM],
}
# option -> the value its placeholder takes
OPTION_VALUES: dict[str, str] = {
    "--start": "=0",
    "--end": "=100",
    "--top": "=3",
    "--warmup": "=1",
    "--iteration": "iteration",
    "-j": "=2",
    "--depth": "=1",
    "--image-size": "=64",  # the fixtures' run trained at 64 px (fixtures/README.md)
}


def concrete(words: list[str], work: dict[str, object]) -> list[str]:
    cmd = words[1]
    argv: list[str] = []
    for i, w in enumerate(words):
        prev = words[i - 1] if i else ""
        key = (cmd, w)
        if key in COMMAND_VALUES:
            refs = COMMAND_VALUES[key]
        elif PLACEHOLDER.match(w) and prev in OPTION_VALUES:
            refs = [OPTION_VALUES[prev]]
        elif PLACEHOLDER.match(w) and w in PLACEHOLDERS:
            refs = PLACEHOLDERS[w]
        elif PLACEHOLDER.match(w) or "*" in w:
            pytest.fail(
                f"README placeholder {w!r} in `{' '.join(words)}` has no value: add it to "
                "PLACEHOLDERS, COMMAND_VALUES or OPTION_VALUES in tests/test_readme.py"
            )
        else:
            argv.append(w)
            continue
        for ref in refs:
            if ref.startswith("="):
                argv.append(ref[1:])
            elif ref.startswith("shared:"):
                argv.append(_shared(ref[len("shared:") :]))
            else:
                argv.append(str(work[ref]))
    if cmd == "ingest" and "--store" in argv:
        # A fresh store per run: an ingest into the shared one would only skip.
        k = argv.index("--store") + 1
        argv[k] = str(Path(argv[k]).with_name(f"ingest_{abs(hash(tuple(words)))}"))
    return argv[1:]


# --- the tests ---------------------------------------------------------------------------------

LINES = readme_lines()
TA_LINES = [ln for ln in LINES if ln.startswith("traceanalyze ")]


def test_readme_has_shell_commands() -> None:
    assert len(LINES) >= 10 and len(TA_LINES) >= 8


@pytest.mark.parametrize("line", LINES)
def test_readme_line_is_runnable_or_skipped_with_a_reason(line: str) -> None:
    assert line.startswith("traceanalyze ") or skip_reason(line), (
        f"README command `{line}` is neither a traceanalyze command nor on SKIP "
        "(tests/test_readme.py) with a reason"
    )


@pytest.mark.parametrize("line", TA_LINES)
def test_readme_line_matches_the_cli(line: str) -> None:
    check_cli_line(line, "README")


def check_cli_line(line: str, where: str, pending: dict[str, str] | None = None) -> None:
    """The command exists, every option shown exists, every choice shown is accepted.
    `pending`: option -> branch, skipped (not failed) while the command lacks the option."""
    words = [a for w in _words(_flatten(parse(line))) for a in w.split("|") if a]
    ctx = click.Context(main)
    cmd = main.get_command(ctx, words[1])
    assert cmd is not None, f"{where} shows unknown command `traceanalyze {words[1]}`"
    opts = {o: p for p in cmd.params for o in [*p.opts, *p.secondary_opts]}
    for w in words[2:]:
        if not w.startswith("-") or w in ("-", "--help"):
            continue
        if pending and w in pending and w not in opts:
            pytest.skip(f"`traceanalyze {words[1]} {w}` comes with branch {pending[w]}")
        assert w in opts, f"{where}: `traceanalyze {words[1]}` has no option {w}"
    # Every value shown for a choice option is a valid choice.
    for seg in re.findall(r"(--[\w-]+) ([\w.-]+(?:\|[\w.-]+)+)", line):
        p = opts.get(seg[0])
        if p is not None and isinstance(p.type, click.Choice):
            for v in seg[1].split("|"):
                assert v in p.type.choices, f"{where}: {seg[0]} {v} is not a choice"


def _flatten(items: list[object]) -> list[object]:
    out: list[object] = []
    for it in items:
        out += _flatten(it.items) if isinstance(it, Group) else [it]
    return out


def torch_mark(words: list[str]) -> list[pytest.MarkDecorator]:
    """`requires_torch` for the commands that need it: mfu (FLOPs counted on torchvision's
    model), a collect run, and a collect dry run that asks torch for the device (no --device
    and the torch profiler)."""
    from traceanalyze.collect.profilers import EXTERNAL

    if words[1] == "mfu" or (words[1] == "collect" and "--dry-run" not in words):
        return [pytest.mark.requires_torch("torchvision")]
    if words[1] == "collect":
        prof = words[words.index("--profiler") + 1] if "--profiler" in words else "none"
        if "--device" not in words and prof not in EXTERNAL:
            return [pytest.mark.requires_torch]
    return []


RUNS = [
    pytest.param(ln, v, marks=torch_mark(v), id=" ".join(v))
    for ln in TA_LINES
    if not skip_reason(ln)
    for v in variants(ln)
]


@pytest.mark.parametrize(("line", "words"), RUNS)
def test_readme_command_runs(
    line: str, words: list[str], work: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    why = skip_reason(" ".join(words), RUN_SKIP)
    if why:
        pytest.skip(why)
    argv = concrete(words, work)
    run_dir = Path(str(work["dir"])) / f"run_{abs(hash(tuple(words)))}"
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)  # relative outputs (timeline.png, runs/) land here
    r = CliRunner().invoke(main, argv, catch_exceptions=False)
    shown = f"`traceanalyze {shlex.join(argv)}` (README: `{line}`)"
    assert r.exit_code == 0, f"{shown} exited {r.exit_code}: {r.output}"
    for i, w in enumerate(argv[:-1]):
        if w in OUTPUT_OPTIONS:
            out = Path(argv[i + 1])
            assert out.exists() and out.stat().st_size > 0, f"{shown} did not write {out}"
    if words[1] == "collect" and "--dry-run" not in words:
        (run,) = (run_dir / "runs").iterdir()
        assert (run / "manifest.json").exists() and (run / "store").is_dir()
        assert ta.Store(run / "store").table("iterations").height > 0
    elif "--quiet" not in argv:
        assert r.output.strip(), f"{shown} printed nothing"
    shutil.rmtree(run_dir, ignore_errors=True)


PY_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
STORE_RECIPES = [
    b for b in PY_BLOCK.findall(README.read_text(encoding="utf-8")) if "duckdb.sql" in b
]


def test_readme_has_a_store_recipe() -> None:
    assert STORE_RECIPES, "README's store section lost its DuckDB/polars recipe"


@pytest.mark.parametrize("code", STORE_RECIPES)
def test_readme_store_recipe_runs(
    code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("duckdb")
    nsys = _shared(NSYS_2GPU)
    ta.ingest([nsys], tmp_path / "store")
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), ns)  # the README's own code, on a store made here
    top = ns["top"]
    assert isinstance(top, list) and top
    assert all(isinstance(r[0], str) for r in top)  # source_id stays a string
    # Independent answer: pyarrow over the files the manifest lists, summed by hand.
    import pyarrow.parquet as pq

    sums: dict[str, int] = {}
    for f in ta.Store("store").files("kernels"):
        t = pq.read_table(f, columns=["name", "duration_ns"]).to_pydict()
        for n, d in zip(t["name"], t["duration_ns"], strict=True):
            sums[n] = sums.get(n, 0) + (d or 0)
    best = sorted(sums.items(), key=lambda kv: -kv[1])[:10]
    assert [(r[1], r[2]) for r in top] == best
    lf = ns["lf"]
    assert lf.select("source_id").collect()["source_id"].dtype == pl.String  # type: ignore[attr-defined]
