"""The rank an Nsight Systems export states (`rank_names`), for `sources`.

Kinds, in this order: `NVTX thread name` (NVTX_EVENTS rows of eventType 39, NvtxThread: the name
`nvtxNameOsThread` gave a thread, e.g. `MPI Rank 0`, written by `nsys --trace=mpi`; seen in the
2022.2 MPI sample), `thread name` (`ThreadNames`, the OS thread names), `process name`
(`PROCESSES.name`). NVTX ranges and marks naming a rank are read by the analysis from `markers`,
per process. The launched command line and the environment (`META_DATA_CAPTURE`) are never read:
they name the launcher (torchrun, mpirun), not a rank, and the environment carries secrets.
"""

from __future__ import annotations

import sqlite3

from ...rank_names import Hint, hints_from_names
from ..common.core import table_columns

NVTX_THREAD = 39  # ENUM_NSYS_EVENT_TYPE NvtxThread


def _names(con: sqlite3.Connection, sql: str) -> list[object]:
    return [r[0] for r in con.execute(sql).fetchall()]


def rank_hints(con: sqlite3.Connection, names: set[str]) -> list[Hint]:
    """Every name in the export that names a rank, kinds in the module doc's order."""
    hints: list[Hint] = []
    cols = set(table_columns(con, "NVTX_EVENTS")) if "NVTX_EVENTS" in names else set()
    if {"eventType", "text"} <= cols:
        # The name is `text`, else StringIds[textId] (no SQL function: the authorizer of
        # `common.sqlite` allows none of COALESCE's kind).
        both = "textId" in cols and "StringIds" in names
        sql = (
            "SELECT DISTINCT n.text, s.value FROM NVTX_EVENTS n "
            "LEFT JOIN StringIds s ON s.id = n.textId"
            if both
            else "SELECT DISTINCT n.text, NULL FROM NVTX_EVENTS n"
        ) + f" WHERE n.eventType = {NVTX_THREAD}"
        rows = con.execute(sql).fetchall()
        texts = [t if t is not None else v for t, v in rows]
        hints += hints_from_names("NVTX thread name", texts)
    if "ThreadNames" in names and "StringIds" in names:
        sql = (
            "SELECT DISTINCT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId"
            if "nameId" in table_columns(con, "ThreadNames")
            else ""
        )
        hints += hints_from_names("thread name", _names(con, sql) if sql else [])
    if "PROCESSES" in names and "name" in table_columns(con, "PROCESSES"):
        hints += hints_from_names("process name", _names(con, "SELECT name FROM PROCESSES"))
    return hints
