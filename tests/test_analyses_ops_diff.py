"""compare --ops (analyses.compare.compare_ops) on two real Kineto traces and a mutated copy.

Expected names, counts and times come from the raw JSON, parsed by hand.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from traceanalyze import read
from traceanalyze.analyses.compare import compare_ops, ops_diff_overview
from traceanalyze.cli import main
from traceanalyze.tables import Tables

from .conftest import shared

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
ALEXNET = "kineto_json/hta_alexnet_a100_param_benchmark_trace.json.gz"
H100 = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
TABLES = ("ops", "api_calls", "kernels", "markers")


def raw_ops(rel: str) -> list[dict]:
    with gzip.open(shared(rel), "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]


def both(a: Tables | dict, b: Tables | dict) -> dict[str, pl.DataFrame]:
    return {
        t: pl.concat(
            [a[t].with_columns(source_id=pl.lit("A")), b[t].with_columns(source_id=pl.lit("B"))]
        )
        for t in TABLES
    }


@pytest.fixture(scope="module")
def resnet() -> Tables:
    return read(shared(RESNET))


def test_self_comparison_matches_everything(resnet: Tables) -> None:
    c = both(resnet, resnet)
    d = compare_ops(*(c[t] for t in TABLES), "A", "B")
    assert set(d["status"].to_list()) == {"unchanged"}
    names = {e["name"] for e in raw_ops(RESNET)}
    assert set(d["op"].drop_nulls().to_list()) == names
    ov = dict(zip(*ops_diff_overview(d).select("metric", "a").to_dict().values(), strict=True))
    assert ov["matched_self_time_pct"] == pytest.approx(100.0)
    assert ov["matched_kernel_time_pct"] == pytest.approx(100.0)


def test_removed_operator_and_coverage(resnet: Tables) -> None:
    # B: the same run without its aten::add_ operators (a leaf op in this trace: checked below),
    # their kernels now launched by the parent operator or by none.
    events = raw_ops(RESNET)
    adds = [e for e in events if e["name"] == "aten::add_"]
    b = {t: resnet[t] for t in TABLES}
    b["ops"] = resnet.ops.filter(pl.col("name") != "aten::add_")
    c = both(resnet, b)
    d = compare_ops(*(c[t] for t in TABLES), "A", "B")
    row = d.filter(pl.col("op") == "aten::add_").to_dicts()[0]
    assert row["status"] == "removed" and row["count_a"] == len(adds) == 425
    add_ns = sum(int(Decimal(e["dur"]) * 1000) for e in adds)
    # leaf: no other cpu_op starts inside an aten::add_ on its thread, so self = duration
    for e in adds:
        s, end = Decimal(e["ts"]), Decimal(e["ts"]) + Decimal(e["dur"])
        assert not any(
            p is not e and p["tid"] == e["tid"] and s <= Decimal(p["ts"]) < end for p in events
        )
    assert row["self_ms_a"] == pytest.approx(add_ns / 1e6, abs=1e-9)
    total_self = float(d["self_ms_a"].sum())
    ov = dict(zip(*ops_diff_overview(d).select("metric", "a").to_dict().values(), strict=True))
    assert ov["matched_self_time_pct"] == pytest.approx(100 * (1 - add_ns / 1e6 / total_self))
    ovb = dict(zip(*ops_diff_overview(d).select("metric", "b").to_dict().values(), strict=True))
    assert ovb["matched_self_time_pct"] == pytest.approx(100.0)
    # Parents of aten::add_ (by hand: the innermost op holding each add_) gain its time.
    parents: Counter[str] = Counter()
    orphans = 0
    by_tid = defaultdict(list)
    for e in events:
        by_tid[e["tid"]].append(e)
    for e in adds:
        s = Decimal(e["ts"])
        holders = [
            p
            for p in by_tid[e["tid"]]
            if p is not e and Decimal(p["ts"]) <= s < Decimal(p["ts"]) + Decimal(p["dur"])
        ]
        if holders:
            parents[max(holders, key=lambda p: (Decimal(p["ts"]), -Decimal(p["dur"])))["name"]] += 1
        else:
            orphans += 1
    changed = set(d.filter(pl.col("status") == "changed")["op"].to_list())
    assert changed == set(parents)
    # add_ calls outside every op leave their kernels to the null row: not an operator, so
    # "outside", never "added".
    assert d.filter(pl.col("status") == "added").height == 0
    nulls = d.filter(pl.col("op").is_null())["status"].to_list()
    assert nulls == (["outside"] if orphans else [])


def test_resnet_against_alexnet_names() -> None:
    a, b = read(shared(RESNET)), read(shared(ALEXNET))
    c = both(a, b)
    d = compare_ops(*(c[t] for t in TABLES), "A", "B")
    na = Counter(e["name"] for e in raw_ops(RESNET))
    nb = Counter(e["name"] for e in raw_ops(ALEXNET))
    got = {s: set(d.filter(pl.col("status") == s)["op"].drop_nulls()) for s in ("added", "removed")}
    assert got["added"] == set(nb) - set(na)
    assert got["removed"] == set(na) - set(nb)
    matched = d.filter(pl.col("status").is_in(["changed", "unchanged"]))
    assert set(matched["op"].drop_nulls()) == set(na) & set(nb)
    for r in matched.filter(pl.col("op").is_not_null()).to_dicts():
        assert (r["count_a"], r["count_b"]) == (na[r["op"]], nb[r["op"]])


def test_compare_ops_cli(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        main, ["compare", str(shared(RESNET)), str(shared(ALEXNET)), "--ops", "--json"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {"a", "b", "overview", "ops"} <= set(doc)
    metrics = {m["metric"] for m in doc["overview"]}
    assert {"matched_self_time_pct", "matched_kernel_time_pct"} <= metrics
    r = CliRunner().invoke(main, ["compare", str(shared(RESNET)), str(shared(RESNET)), "--ops"])
    assert r.exit_code == 0 and "== operators overview" in r.stdout


def raw_nvtx_range_names(rel: str) -> set[str]:
    """Names of the timed NVTX ranges of an nsys export, by hand: `text` or the `StringIds` row
    of `textId`, PyTorch emit_nvtx's `, seq = …, op_id = …` suffix (from `, key = `) cut."""
    con = sqlite3.connect(f"file:{shared(rel)}?mode=ro", uri=True)
    try:
        strings = dict(con.execute("SELECT id, value FROM StringIds"))
        rows = con.execute(
            "SELECT text, textId FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL"
        ).fetchall()
    finally:
        con.close()
    names = set()
    for text, tid in rows:
        name = text if text is not None else strings[tid]
        m = re.search(r", \w+ = ", name)
        names.add(name[: m.start()] if m else name)
    return names


def raw_kernels_outside_ranges(rel: str) -> int:
    """Kernels of an nsys export without a launch call (same process, same correlation id) or
    whose call lies in no NVTX range of its thread."""
    con = sqlite3.connect(f"file:{shared(rel)}?mode=ro", uri=True)
    try:
        ranges = defaultdict(list)
        for s, e, tid in con.execute(
            "SELECT start, end, globalTid FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL"
        ):
            ranges[tid].append((s, e))
        calls = con.execute(
            "SELECT r.start, r.globalTid FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            "AND r.globalTid / 16777216 % 16777216 = k.globalPid / 16777216 % 16777216"
        ).fetchall()
    finally:
        con.close()
    return sum(t is None or not any(s <= t < e for s, e in ranges[tid]) for t, tid in calls)


def test_kernels_outside_every_operator_are_not_an_added_operator() -> None:
    # ResNet-50 (Kineto: every kernel under a cpu_op) against the 2xH100 nsys export (NVTX
    # ranges stand in; some kernels are launched outside every range): the null-op row is on
    # B only, and used to be counted as one more added operator.
    assert raw_kernels_outside_ranges(H100) > 0
    a, b = read(shared(RESNET)), read(shared(H100))
    c = both(a, b)
    d = compare_ops(*(c[t] for t in TABLES), "A", "B")
    na = {e["name"] for e in raw_ops(RESNET)}
    nb = raw_nvtx_range_names(H100)
    added = d.filter(pl.col("status") == "added")
    assert added["op"].null_count() == 0
    assert set(added["op"]) == nb - na
    ov = dict(zip(*ops_diff_overview(d).select("metric", "b").to_dict().values(), strict=True))
    assert ov["ops_added"] == len(nb - na)
    null_row = d.filter(pl.col("op").is_null()).to_dicts()
    assert [r["status"] for r in null_row] == ["outside"]
