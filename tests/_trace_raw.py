"""Raw-file helpers for the trace-analysis tests: expected values come from here, not from the
readers. Kineto JSON is parsed with `json` (floats as Decimal, so epoch-µs times stay exact);
SQLite exports are queried with `sqlite3` (read-only)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from decimal import ROUND_HALF_EVEN, Decimal
from functools import cache
from pathlib import Path
from typing import Any

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
NSYS2 = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
NVPROF = "nvprof_sqlite/profilinglm_pytorch_lm_v100_pyprof_net.sql"
NVPROF_CSV = "nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv"


def ns(us: Decimal) -> int:
    return int((us * 1000).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


@cache
def kineto_events(path: Path) -> list[dict[str, Any]]:
    """Complete (`X`) events with `start`, `end`, `dur` in ns added."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        ts, dur = Decimal(e["ts"]), Decimal(e["dur"])
        out.append({**e, "start": ns(ts), "end": ns(ts + dur), "dur_ns": ns(dur)})
    return out


def sql(path: Path, query: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merged intervals, a plain loop (touching ones merge)."""
    out: list[list[int]] = []
    for s, e in sorted(x for x in iv if x[1] > x[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def total(iv: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in union(iv))


def overlap_len(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """|union(a) ∩ union(b)| by a double loop."""
    n = 0
    ub = union(b)
    for s, e in union(a):
        for t, u in ub:
            n += max(0, min(e, u) - max(s, t))
    return n
