"""The command index: every `traceanalyze` command's name, "module:attribute" and help, as JSON
(`traceanalyze/data/commands.json`), so that `traceanalyze --help` lists the commands without
importing their modules (and polars, matplotlib, torch behind them).

    python -m traceanalyze.cli.doc --index      # regenerate (also run by `make docs`)

tests/test_cli_index.py fails when the file differs from what the commands say.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import click

PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "commands.json")

# What click's listing reads from a command (`Command.get_short_help_str`, `hidden`).
_FIELDS = ("help", "short_help", "hidden", "deprecated")


@functools.lru_cache(maxsize=1)
def load() -> dict[str, dict[str, Any]]:
    """The index on disk: name -> {"target": "module:attr", "help", "short_help", "hidden",
    "deprecated"}."""
    with open(PATH, encoding="utf-8") as f:
        index: dict[str, dict[str, Any]] = json.load(f)
    return index


def stand_in(name: str, entry: dict[str, Any]) -> click.Command:
    """A command that only carries the help of the real one, for listing."""
    return click.Command(name, **{k: entry[k] for k in _FIELDS})


def build(commands: dict[str, tuple[str, click.Command]]) -> dict[str, dict[str, Any]]:
    """The index of `commands` (name -> ("module:attr", command); `cli.all_commands()`)."""
    out = {}
    for name, (target, cmd) in sorted(commands.items()):
        out[name] = {"target": target, **{k: getattr(cmd, k) for k in _FIELDS}}
    return out


def render(commands: dict[str, tuple[str, click.Command]]) -> str:
    return json.dumps(build(commands), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write(commands: dict[str, tuple[str, click.Command]], path: str = PATH) -> None:
    """Write atomically: a temp file in the same directory, then rename."""
    text = render(commands)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
