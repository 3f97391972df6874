"""nsys enum tables (`ENUM_*`) read into {id: label} maps, with the schema 2.x fallbacks.

Labels are normalized to the schema's spelling (`HtoD`, `Device Static`, `runtime`, …) whatever
the enum's label text; the enums' "Unknown" entries become null (formats.md §3.2).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable

import polars as pl

from ...errors import MalformedInput
from ..common.core import table_columns
from ..common.cupti import NSYS_COPY_KINDS_2X, NSYS_MEM_KINDS_2X

# Documented numbering for schema 2.x exports, which have no ENUM_* tables (formats.md §3.2).
COPY_KIND_2X = NSYS_COPY_KINDS_2X
MEM_KIND_2X = NSYS_MEM_KINDS_2X
_MEM_KINDS = {v.upper().replace(" ", ""): v for v in MEM_KIND_2X.values() if v}
# `eventClass` of the API tables: the ids of ENUM_NSYS_EVENT_CLASS in the 3.x exports here
# (2026.1, 2026.2), used for 2.x exports, which have no ENUM tables. Values are `api` labels;
# "backtrace" rows are dropped (see nsys_sqlite's docstring).
EVENT_CLASS_2X: dict[int, str | None] = {0: "runtime", 1: "driver", 67: "backtrace"}
_API_LABELS = ("runtime", "driver")


_ENDPOINT = {"HOST": "H", "DEVICE": "D", "ARRAY": "A", "PEER": "P"}
_COPY_RE = re.compile(r"(H|D|A|P)TO(H|D|A|P)$")


def _copy_label(name: str | None, label: str | None) -> str | None:
    """'CUDA_MEMCPY_KIND_HTOD' or 'Host-to-Device' → 'HtoD'; 'Unified …' keeps its prefix."""
    for text in (name, label):
        if not text:
            continue
        t = text.upper()
        for word, letter in _ENDPOINT.items():
            t = t.replace(word, letter)
        t = re.sub(r"[^A-Z]", "", t)
        if t.endswith("UNKNOWN"):
            return None
        m = _COPY_RE.search(t)
        if m:
            base = f"{m.group(1)}to{m.group(2)}"
            return f"Unified {base}" if ("UVM" in t or "UNIFIED" in t) else base
    return label or name


def _mem_label(name: str | None, label: str | None) -> str | None:
    """'CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC' or 'Device Static' → 'Device Static'."""
    for text in (label, name):
        if not text:
            continue
        t = re.sub(r"[^A-Z]", "", text.upper())
        if t.endswith("UNKNOWN"):
            return None
        for key in sorted(_MEM_KINDS, key=len, reverse=True):
            if t.endswith(key):
                return _MEM_KINDS[key]
    return label or name


def _class_label(name: str | None, label: str | None) -> str | None:
    """'TRACE_PROCESS_EVENT_CUDA_DRIVER' or 'CUDA driver' → 'driver'; CUDA runtime → 'runtime';
    CUDA backtrace → 'backtrace'; any other class keeps its label text."""
    for text in (name, label):
        t = re.sub(r"[^A-Z]", "", (text or "").upper())
        # "CUDA EGL driver" (CUDAEGLDRIVER) and "OSRT runtime" do not match.
        for key, api in (("CUDARUNTIME", "runtime"), ("CUDADRIVER", "driver")):
            if t.endswith(key):
                return api
        if t.endswith("CUDABACKTRACE"):
            return "backtrace"
    return label or name


def _enum(
    con: sqlite3.Connection,
    names: set[str],
    table: str,
    fallback: dict[int, str | None],
    label_fn: Callable[[str | None, str | None], str | None],
) -> dict[int, str | None]:
    if table not in names:
        return dict(fallback)
    cols = set(table_columns(con, table))
    if "id" not in cols:
        return dict(fallback)
    sel = ", ".join(c if c in cols else "NULL" for c in ("id", "name", "label"))
    out: dict[int, str | None] = {}
    for i, n, lab in con.execute(f"SELECT {sel} FROM {table}").fetchall():
        if type(i) is not int:
            raise MalformedInput(f"enum id {i!r} is not an integer", table=table, column="id")
        out[i] = label_fn(_enum_text(n), _enum_text(lab))
    return out


def _enum_text(v: object) -> str | None:
    """An ENUM_* name or label cell as text: a BLOB (a damaged export) is decoded leniently."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _label(col: pl.Expr, mapping: dict[int, str | None], alias: str) -> pl.Expr:
    keys = list(mapping)
    return col.replace_strict(
        keys, [mapping[k] for k in keys], default=None, return_dtype=pl.String
    ).alias(alias)
