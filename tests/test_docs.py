"""Docs that cannot drift: docs/cli.md is regenerated and compared, every command has help, the
how-tos' dry-run blocks are what `collect --dry-run` prints, the store recipes in
docs/reading-the-store.md run on a real store, and every shell command in README.md runs (or is on
an explicit skip list with its reason); see tests/readme_commands.py for how synopsis lines such as
`traceanalyze busy TRACE... [--start MS --end MS]` become concrete runs."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import click
import polars as pl
import pyarrow.parquet as pq
import pytest

import traceanalyze as ta
from traceanalyze.cli import main
from traceanalyze.cli.doc import render_cli_markdown

from .conftest import ROOT, shared

DOCS = ROOT / "docs"
NSYS_2GPU = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
KINETO_CPU = ROOT / "fixtures" / "kineto_json-resnet50-cpu" / "torch_bs2_rank0.pt.trace.json.gz"
ITERLOG_CPU = ROOT / "fixtures" / "iterlog-resnet50-cpu" / "iterations_bs2_rank0.csv"


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(main)
    return [(n, c) for n in main.list_commands(ctx) if (c := main.get_command(ctx, n)) is not None]


# --- docs/cli.md -------------------------------------------------------------------------------


def test_cli_md_is_generated_from_help() -> None:
    doc = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert doc == render_cli_markdown(), (
        "docs/cli.md drifted from the commands' --help; regenerate with `make docs` "
        "(python -m traceanalyze.cli.doc docs/cli.md)"
    )


def test_cli_md_has_every_command_and_option() -> None:
    doc = (DOCS / "cli.md").read_text(encoding="utf-8")
    for name, cmd in _commands():
        assert f"## `traceanalyze {name}`" in doc
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("--"):
                    assert opt in doc, f"{name} {opt}"


@pytest.mark.parametrize("name", [n for n, _ in _commands()])
def test_every_command_and_option_has_help(name: str) -> None:
    cmd = dict(_commands())[name]
    assert cmd.help and cmd.help.strip(), f"`traceanalyze {name}` has no help text"
    assert cmd.get_short_help_str(), name
    undocumented = [
        p.name for p in cmd.params if isinstance(p, click.Option) and not p.hidden and not p.help
    ]
    assert not undocumented, f"`traceanalyze {name}` options without help: {undocumented}"


def test_cli_doc_generator_writes_atomically(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "cli.md"
    r = subprocess.run(
        [sys.executable, "-m", "traceanalyze.cli.doc", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "40"},
    )
    assert r.returncode == 0, r.stderr
    # Independent of the terminal width it runs in.
    assert out.read_text(encoding="utf-8") == render_cli_markdown()
    assert [p.name for p in out.parent.iterdir()] == ["cli.md"]


# --- how-tos: the dry-run blocks -----------------------------------------------------------------

HOWTOS = ["torch", "nsys", "ncu", "nvprof", "nvml"]
DRY_RUN = re.compile(
    r"```sh\n(traceanalyze collect [^\n]*--dry-run)\n```\n.*?```text\n(.*?)```", re.S
)


def _normalize(text: str) -> list[str]:
    """Drop '#' notes (they depend on the machine: GPU, ncu on PATH) and the ncu metric list
    (chosen at run time from `ncu --query-metrics` on a GPU machine)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return [re.sub(r"--metrics (\S+)", "--metrics METRICS", ln) for ln in lines]


@pytest.mark.parametrize("tool", HOWTOS)
def test_howto_page_exists_with_commands(tool: str) -> None:
    text = (DOCS / f"howto-{tool}.md").read_text(encoding="utf-8")
    for heading in ("## With `traceanalyze collect`", "## What it writes", "## By hand"):
        assert heading in text, f"howto-{tool}.md lacks {heading!r}"


@pytest.mark.parametrize("tool", HOWTOS)
def test_howto_dry_run_block_is_what_collect_prints(tool: str, tmp_path: Path) -> None:
    text = (DOCS / f"howto-{tool}.md").read_text(encoding="utf-8")
    blocks = DRY_RUN.findall(text)
    assert blocks, f"howto-{tool}.md has no `traceanalyze collect … --dry-run` block"
    for command, shown in blocks:
        argv = shlex.split(command)[1:]
        r = subprocess.run(
            [sys.executable, "-m", "traceanalyze", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        if r.returncode != 0 and "compute capability >= 8.0" in r.stderr:
            pytest.skip(f"{tool}: this machine's GPU refuses the run: {r.stderr.strip()}")
        assert r.returncode == 0, r.stderr
        printed = r.stdout.replace(sys.executable, "python")
        printed = printed.replace(f"nvml_{socket.gethostname()}.csv", "nvml_HOST.csv")
        assert _normalize(printed) == _normalize(shown), f"howto-{tool}.md: {command}"
        assert not (tmp_path / "runs").exists(), "a dry run wrote files"


# --- docs/reading-the-store.md -------------------------------------------------------------------

PY_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
# Stores with a manifest list their committed files (Store.files); older ones: the partitions.
HAS_FILES = hasattr(ta.Store, "files")


def _store_files(root: Path, table: str) -> list[Path]:
    if HAS_FILES:
        return list(ta.Store(root).files(table))
    return sorted((root / table).glob("source_id=*/*.parquet"))


@pytest.fixture(scope="module")
def gpu_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store in a temp dir holding the two-GPU nsys export and the project's CPU capture."""
    nsys = shared(NSYS_2GPU)
    work = tmp_path_factory.mktemp("recipes")
    ta.ingest([nsys, KINETO_CPU, ITERLOG_CPU], work / "store")
    return work


def _expected_top(work: Path) -> pl.DataFrame:
    """Sum of duration per (source, name) by reading each file with pyarrow and taking the id
    from its directory name: independent of every engine under test."""
    frames = []
    for f in sorted((work / "store" / "kernels").glob("source_id=*/*.parquet")):
        sid = f.parent.name.split("=", 1)[1]
        t = pl.from_arrow(pq.read_table(f, columns=["name", "duration_ns"]))
        assert isinstance(t, pl.DataFrame)
        frames.append(t.with_columns(source_id=pl.lit(sid)))
    df = pl.concat(frames).group_by("source_id", "name").agg(pl.col("duration_ns").sum())
    return df.sort("duration_ns", "name", descending=[True, False]).head(10)


def test_reading_the_store_recipes_run(gpu_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (DOCS / "reading-the-store.md").read_text(encoding="utf-8")
    blocks = PY_BLOCK.findall(text)
    assert len(blocks) >= 5
    monkeypatch.chdir(gpu_store)
    if not HAS_FILES:
        # The page documents the manifest's file list; before that API exists, the partitions.
        monkeypatch.setattr(ta.Store, "files", lambda s, t: _store_files(s.root, t), raising=False)
    ns: dict[str, object] = {}
    has_dask = importlib.util.find_spec("dask") is not None  # the [dask] extra
    has_spark = importlib.util.find_spec("pyspark") is not None and shutil.which("java")
    for block in blocks:
        # Dask and Spark are optional (Spark needs a JVM): their blocks are still compiled.
        skip = ("import dask" in block and not has_dask) or (
            block.startswith("# spark") and not has_spark
        )
        code = compile(block, "reading-the-store.md", "exec")
        if not skip:
            exec(code, ns)  # noqa: S102 - our own docs

    want = _expected_top(gpu_store)
    assert want.height == 10 and want["source_id"].n_unique() == 1
    ms = (want["duration_ns"] / 1e6).to_list()

    top_polars = ns["top_polars"]
    assert isinstance(top_polars, pl.DataFrame)
    assert top_polars.schema["source_id"] == pl.String
    assert top_polars["source_id"].to_list() == want["source_id"].to_list()
    assert top_polars["ms"].to_list() == pytest.approx(ms)

    top_duckdb = ns["top_duckdb"]
    assert isinstance(top_duckdb, pl.DataFrame)
    assert top_duckdb.schema["source_id"] == pl.String
    assert top_duckdb["ms"].to_list() == pytest.approx(ms)

    if has_dask:
        top_dask = ns["top_dask"]  # a pandas Series indexed by (source_id, name)
        assert [k[0] for k in top_dask.index] == want["source_id"].to_list()  # type: ignore[attr-defined]
        assert list(top_dask.to_numpy()) == pytest.approx(ms)  # type: ignore[attr-defined]

    if has_spark:
        rows = ns["top_spark"].collect()  # type: ignore[attr-defined]
        assert [r["source_id"] for r in rows] == want["source_id"].to_list()
        assert [r["ms"] for r in rows] == pytest.approx(ms)

    table = ns["table"]
    n_rows = sum(pq.read_metadata(f).num_rows for f in _store_files(Path("store"), "kernels"))
    assert table.num_rows == n_rows  # type: ignore[attr-defined]
    assert str(table.schema.field("source_id").type) == "string"  # type: ignore[attr-defined]


@pytest.mark.requires_dask
def test_store_recipes_keep_an_all_digit_source_id_a_string(
    gpu_store: Path, tmp_path: Path
) -> None:
    """The reason the page insists on string ids: a partition named by digits only, read with the
    page's options, keeps its leading zero in every engine."""
    import dask.dataframe as dd
    import duckdb
    import pyarrow as pa

    src = next((gpu_store / "store" / "iterations").glob("source_id=*/*.parquet"))
    dst = tmp_path / "iterations" / "source_id=0123456789012345" / src.name
    dst.parent.mkdir(parents=True)
    dst.write_bytes(src.read_bytes())
    files = [str(dst)]
    want = ["0123456789012345"]
    lf = pl.scan_parquet(files, hive_partitioning=True, hive_schema={"source_id": pl.String})
    assert lf.select("source_id").unique().collect()["source_id"].to_list() == want
    got = duckdb.sql(
        "SELECT DISTINCT source_id FROM read_parquet($files, hive_partitioning = true, "
        "hive_types = {'source_id': 'VARCHAR'})",
        params={"files": files},
    ).fetchall()
    assert [r[0] for r in got] == want
    part = {"flavor": "hive", "schema": pa.schema([("source_id", pa.string())])}
    ddf = dd.read_parquet(files, dataset={"partitioning": part})
    assert sorted(ddf["source_id"].unique().compute().tolist()) == want


# --- links -------------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize(
    "page",
    [*sorted(DOCS.glob("*.md")), ROOT / "CONTRIBUTING.md"],
    ids=lambda p: p.name,
)
def test_relative_links_resolve(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


# --- commands shown in the docs ------------------------------------------------------------------

# Options documented ahead of their merge would be listed here (option -> branch) and skipped
# while the command lacks them; none now.
PENDING: dict[str, str] = {}


def _doc_lines() -> list[tuple[str, str]]:
    out = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:sh|bash)\n(.*?)```", text, re.S):
            cmds: list[str] = []
            cont = False
            for raw in block.splitlines():
                line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
                joined, cont = cont, line.endswith("\\")
                line = line.rstrip("\\").strip()
                if line and joined and cmds:
                    cmds[-1] += " " + line
                elif line:
                    cmds.append(line)
            out += [(page.name, c.rstrip("&").strip()) for c in cmds]
    return [(p, c) for p, c in out if c.startswith("traceanalyze ")]


DOC_LINES = _doc_lines()


@pytest.mark.parametrize(("page", "line"), DOC_LINES, ids=[f"{p}: {c}" for p, c in DOC_LINES])
def test_docs_commands_match_the_cli(page: str, line: str) -> None:
    from .test_readme import check_cli_line

    check_cli_line(line, f"docs/{page}", PENDING)


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_docs_python_blocks_compile(page: Path) -> None:
    for i, block in enumerate(PY_BLOCK.findall(page.read_text(encoding="utf-8"))):
        compile(block, f"{page.name} block {i}", "exec")


def test_howto_dask_script_options_exist() -> None:
    script = ROOT / "collectors" / "slurm" / "ingest_dask.py"
    if not script.exists():
        pytest.skip("collectors/slurm/ingest_dask.py comes with branch wip-scale")
    text = (DOCS / "howto-dask.md").read_text(encoding="utf-8")
    (line,) = re.findall(r"python collectors/slurm/ingest_dask\.py (.*?)\n```", text, re.S)
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for opt in re.findall(r"(?<!\S)(--[a-z][\w-]*)", line):
        assert opt in r.stdout, f"docs/howto-dask.md: ingest_dask.py has no {opt}"
