"""CLI: thin commands, one-line errors with exit 1, help for every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyze import schema
from traceanalyze.cli import main

LOG = "Iteration Duration 0 0 : 0.5\nIteration Duration 1 0 : 0.25\nIteration Duration 2 0 : 0.75\n"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_every_command_has_help() -> None:
    cmds = main.list_commands(None)  # type: ignore[arg-type]
    assert {"ingest", "summary", "schema", "formats"} <= set(cmds)
    for name in cmds:
        cmd = main.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None and cmd.help, f"{name} has no help text"
        r = run(name, "--help")
        assert r.exit_code == 0, name


def test_ingest_then_summary(tmp_path: Path, write) -> None:
    p = write("log.txt", LOG)
    st = str(tmp_path / "st")
    r = run("ingest", str(p), "--store", st)
    assert r.exit_code == 0
    assert "ingested as iterlog" in r.output and "3 iterations" in r.output
    r = run("ingest", str(p), "--store", st)
    assert r.exit_code == 0 and "unchanged" in r.output and "skipped" in r.output
    r = run("summary", "--store", st, "--json")
    rep = json.loads(r.output)
    [it] = rep["iterations"]
    assert it["iteration_count"] == 3
    assert it["median_ms"] == pytest.approx(500.0)
    assert it["min_ms"] == pytest.approx(250.0) and it["max_ms"] == pytest.approx(750.0)
    r = run("summary", "--store", st)
    assert r.exit_code == 0 and "== iterations" in r.output and "iteration_count" in r.output


def test_quiet_ingest_prints_nothing(tmp_path: Path, write) -> None:
    r = run("ingest", str(write("log.txt", LOG)), "--store", str(tmp_path / "st"), "--quiet")
    assert r.exit_code == 0 and r.output == ""


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "no reader recognizes this file"),
        (b"\x00\x01\x02garbage\xff" * 50, "no reader recognizes this file"),
    ],
)
def test_bad_input_is_one_line_exit_1_store_untouched(
    tmp_path: Path, write, content: bytes, needle: str
) -> None:
    p = write("bad.bin", content)
    st = tmp_path / "st"
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(st)])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert lines[0].startswith(f"traceanalyze: error: {p}: ") and needle in lines[0]
    assert not st.exists()


def test_bad_record_names_file(tmp_path: Path, write) -> None:
    p = write("x.txt", "Iteration Duration\n")
    r = CliRunner().invoke(
        main, ["ingest", str(p), "--store", str(tmp_path / "st"), "--format", "iterlog"]
    )
    assert r.exit_code == 1
    assert (
        r.output == f"traceanalyze: error: {p}: no 'Iteration Duration <i> <dev> : <s>' records\n"
    )


def test_summary_of_missing_store(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["summary", "--store", str(tmp_path / "none")])
    assert r.exit_code == 1
    assert r.output == (
        f"traceanalyze: error: {tmp_path / 'none'}: no traceanalyze store here (ingest something "
        "first)\n"
    )


def test_summary_unknown_source(tmp_path: Path, write) -> None:
    st = str(tmp_path / "st")
    run("ingest", str(write("log.txt", LOG)), "--store", st)
    r = CliRunner().invoke(main, ["summary", "--store", st, "--source", "deadbeef"])
    assert r.exit_code == 1 and "no such source(s): deadbeef" in r.output


def test_schema_command() -> None:
    r = run("schema", "gpu_samples", "--json")
    cols = [row["column"] for row in json.loads(r.output)]
    assert cols == schema.table("gpu_samples").names
    r = CliRunner().invoke(main, ["schema", "nope"])
    assert r.exit_code == 1 and "unknown table 'nope'" in r.output
    r = run("schema", "--markdown")
    assert r.output.rstrip("\n") == schema.render_markdown().rstrip("\n")


def test_formats_lists_every_reader() -> None:
    from traceanalyze.readers import READERS

    r = run("formats", "--csv")
    lines = r.output.strip().splitlines()
    assert lines[0] == "format,description"
    assert [ln.split(",")[0] for ln in lines[1:]] == list(READERS)


def test_python_dash_m(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "traceanalyze", "schema", "iterations", "--csv"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert r.stdout.splitlines()[0] == "table,column,type,nullable,description"
