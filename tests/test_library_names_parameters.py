"""Issue 32, point 6: library errors and warnings never name CLI flags. A notebook user calls
`ta.read(path, format=…)`, `ds.where(source=…)`: the library says the parameter (`format=SLUG`),
the command line turns it into its flag (`--format SLUG`, `cli.common.as_flags`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze.cli import main
from traceanalyze.errors import NotAnswerable, UnknownFormat

PACKAGE = Path(ta.__file__).parent
# Not the library: the command line itself, and `collect` (the `collect` command's own steps and
# the argv it builds for the profilers and the workload; not exported by `traceanalyze`).
NOT_LIBRARY = ("cli/", "collect/")
# A flag after an external tool's name, or after `traceanalyze <command>`, in the same clause
# is that command line's own (`ncu --metrics`, `traceanalyze timeline --iteration N`).
COMMAND_BEFORE = re.compile(
    r"(?:\b(?:nsys|ncu|nvprof|rocprofv3|rocprof|nvidia-smi|amd-smi|rocm-smi|dcgmi)"
    r"|\btraceanalyze [a-z-]+)[^,;()]*$"
)
# Strings that are command lines or a tool's own flags, not messages to a library user.
ALLOWED = {
    ("adapters/diagnose.py", "--store"): "command_args: the argv of the reproducing command",
    ("adapters/diagnose.py", "--source"): "the same argv",
    ("adapters/diagnose.py", "--device"): "the same argv",
    ("export/diagnose_report.py", "--json"): "the command line the report prints",
    ("export/diagnose_report.py", "--each-iteration"): "the same command line",
    ("export/diagnose_report.py", "--what-if"): "the same command line",
    ("schema.py", "--markdown"): "docs/schema.md's header names the command that writes it",
    ("readers/__init__.py", "--csv"): "ncu's own flag in the format's description",
    ("readers/nsys/nsys_rep.py", "--output"): "nsys export's argv",
    ("readers/nsys/nsys_rep.py", "--version"): "nsys's argv",
    ("readers/smi/smi_csv.py", "--format"): "nvidia-smi's own --format=csv,noheader",
}


def cli_flags() -> set[str]:
    ctx = click.Context(main)
    flags: set[str] = set()
    for name in main.list_commands(ctx):
        cmd = main.get_command(ctx, name)
        assert cmd is not None
        for p in cmd.params:
            flags |= {o for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
    return flags


def docstrings(tree: ast.Module) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr):
            found.add(id(node.body[0].value))
    return found


def flags_named(flags: set[str], root: Path = PACKAGE) -> list[str]:
    """Every `--flag` of the command line in a string of the library's code (docstrings and
    comments, which tell developers how the command maps to the library, left out)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(NOT_LIBRARY):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            if id(node) in skip:
                continue
            for m in re.finditer(r"--[a-z][a-z0-9-]*", node.value):
                if m.group() not in flags or (rel, m.group()) in ALLOWED:
                    continue
                if not COMMAND_BEFORE.search(node.value[: m.start()]):
                    found.append(f"{rel}:{node.lineno}: {m.group()} in {node.value!r}")
    return found


def test_no_library_message_names_a_cli_flag() -> None:
    flags = cli_flags()
    assert {"--source", "--format", "--store", "--image-size", "--iteration"} <= flags
    assert flags_named(flags) == []


def test_the_scan_finds_a_flag_in_a_message(tmp_path: Path) -> None:
    """The scan above is not blind: a message naming `--format` in a library module is found."""
    pkg = tmp_path / "traceanalyze"
    (pkg / "readers").mkdir(parents=True)
    (pkg / "readers" / "x.py").write_text(
        '"""Read with `--format x` (a docstring: fine)."""\n'
        'def f():\n    raise ValueError("pass --format SLUG")\n'
        'def g():\n    return "ncu --metrics a, or --weight none"\n'
    )
    got = flags_named({"--format", "--weight", "--metrics"}, pkg)
    assert sorted(g.split(": ")[1].split()[0] for g in got) == ["--format", "--weight"]


@pytest.fixture
def unknown(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("nothing any profiler writes\n")
    return path


def test_library_says_the_parameter(unknown: Path) -> None:
    with pytest.raises(UnknownFormat) as e:
        ta.read(unknown)
    assert "pass format=SLUG" in str(e.value) and "--" not in str(e.value)


def test_the_command_says_its_flag(unknown: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["ingest", str(unknown), "--store", str(tmp_path / "s")])
    assert r.exit_code == 1
    assert "pass --format SLUG if you know it" in r.stderr and "format=" not in r.stderr
    r = CliRunner().invoke(main, ["summary", str(unknown)])
    assert r.exit_code == 1 and "pass --format SLUG" in r.stderr


CPU_TRACE = (
    Path(__file__).parents[1] / "fixtures/kineto_json-resnet50-cpu/torch_bs2_rank0.pt.trace.json.gz"
)


def test_a_warning_names_the_parameter_and_the_command_its_flag() -> None:
    """A CPU run (the fixture has no GPU work) filtered to device 7: a warning."""
    said = r"^device=7: these sources have no per-device data$"
    # the warning, then no kernels to answer with
    with pytest.warns(UserWarning, match=said), pytest.raises(NotAnswerable):
        ta.open(CPU_TRACE).where(device=7).busy()
    r = CliRunner().invoke(main, ["busy", str(CPU_TRACE), "--device", "7"])
    line = "traceanalyze: warning: --device 7: these sources have no per-device data\n"
    assert r.stderr.startswith(line)
