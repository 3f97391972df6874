"""The rank an nvprof export states (`rank_names`), for `sources`.

Kinds, in this order: `NVTX thread name` (SQLite: `CUPTI_ACTIVITY_KIND_NAME` rows of object kind
2, thread: the name `nvtxNameOsThread` gave it), `command line` (the `--local_rank` /
`--local-rank` that `torch.distributed.launch` passes each process, which on one node is its
rank; SQLite: `StringTable` id 1, the profiled command line; CSV: the
`==PID== NVPROF is profiling process PID, command: …` lines in the file's first 64 KiB, one per
process when `--profile-child-processes` wrote several into one file). Only the numbers are
kept: the command line never reaches an output.
"""

from __future__ import annotations

import re
import sqlite3

from ...rank_names import Hint, hints_from_names, local_rank_arg
from ..common.core import PathLike, head_bytes, table_columns

OBJECT_KIND_THREAD = 2  # CUpti_ActivityObjectKind
_PROFILING = re.compile(rb"^==\d+== NVPROF is profiling process \d+, command: (.*?)\r?$", re.M)


def _command_hints(commands: list[object]) -> list[Hint]:
    out: list[Hint] = []
    for c in commands:
        r = local_rank_arg(c)
        if r is not None:
            out.append(("command line", r, None))
    return out


def sqlite_rank_hints(con: sqlite3.Connection, tables: set[str]) -> list[Hint]:
    """Names and the command line of an nvprof database that name a rank."""
    if "StringTable" not in tables:
        return []
    hints: list[Hint] = []
    name = "CUPTI_ACTIVITY_KIND_NAME"
    if name in tables and {"objectKind", "name"} <= set(table_columns(con, name)):
        rows = con.execute(
            f"SELECT s.value FROM {name} n JOIN StringTable s ON s._id_ = n.name "
            f"WHERE n.objectKind = {OBJECT_KIND_THREAD}"
        ).fetchall()
        hints += hints_from_names("NVTX thread name", [r[0] for r in rows])
    row = con.execute("SELECT value FROM StringTable WHERE _id_ = 1").fetchone()
    return hints + _command_hints([row[0] if row else None])


def csv_rank_hints(path: PathLike) -> list[Hint]:
    """The `--local_rank` of the profiled command lines in the CSV's first 64 KiB."""
    head = head_bytes(path, 65536)
    return _command_hints([m.decode("utf-8", "replace") for m in _PROFILING.findall(head)])
