"""The command index (traceanalyze/data/commands.json) that `traceanalyze --help` lists commands
from: up to date with the commands, the same listing as the commands themselves give, and a help
that imports no command module."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from traceanalyze import cli
from traceanalyze.cli import index as _cliindex
from traceanalyze.cli import main

from .conftest import ROOT


def test_index_is_up_to_date() -> None:
    with open(_cliindex.PATH, encoding="utf-8") as f:
        on_disk = f.read()
    assert on_disk == _cliindex.render(cli.all_commands()), (
        "traceanalyze/data/commands.json is out of date; regenerate with `make docs` "
        "(python -m traceanalyze.cli.doc --index)"
    )


def test_index_names_every_command_with_its_module() -> None:
    index = _cliindex.load()
    assert set(cli.analysis_commands()) | set(cli._LAZY) == set(index)
    for name, entry in index.items():
        module, attr = entry["target"].split(":")
        cmd = getattr(__import__(module, fromlist=[attr]), attr)
        assert isinstance(cmd, click.Command) and cmd.name == name


def _eager_help() -> str:
    """`--help` of a plain click group holding the real command objects (every module loaded)."""
    commands = {n: c for n, (_, c) in cli.all_commands().items()}
    group = click.Group("traceanalyze", help=main.help, params=main.params, commands=commands)
    return CliRunner().invoke(group, ["--help"], prog_name="traceanalyze").output


def test_help_lists_what_the_commands_themselves_say() -> None:
    lazy = CliRunner().invoke(main, ["--help"], prog_name="traceanalyze")
    assert lazy.exit_code == 0
    assert "Commands:" in lazy.output and "  ingest " in lazy.output
    assert lazy.output == _eager_help()


def test_help_imports_no_command_module_nor_polars() -> None:
    code = (
        "import sys\n"
        "from traceanalyze.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "import json\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    loaded = set(json.loads(r.stdout.splitlines()[-1]))
    heavy = {"polars", "pyarrow", "numpy", "matplotlib", "torch", "rich"}
    assert not loaded & heavy
    assert not loaded & {*cli.COMMAND_MODULES, "traceanalyze.cli.core", "traceanalyze.collect.cli"}


def test_a_command_missing_from_a_stale_index_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    index = dict(_cliindex.load())
    del index["busy"]
    index["summary"] = {**index["summary"], "target": "traceanalyze.cli.analyses:gone"}
    monkeypatch.setattr(_cliindex, "load", lambda: index)
    ctx = click.Context(main)
    assert main.get_command(ctx, "busy") is cli.analysis_commands()["busy"]
    assert main.get_command(ctx, "summary") is cli.analysis_commands()["summary"]
    assert main.get_command(ctx, "nosuch") is None


def test_reexported_decorators_still_import_from_cli() -> None:
    from traceanalyze.cli import common as cli_common
    from traceanalyze.cli import core as cli_core

    assert cli.store_option is cli_common.store_option
    assert cli.reader_options is cli_core.reader_options
    with pytest.raises(AttributeError):
        _ = cli.nosuch  # type: ignore[attr-defined]
