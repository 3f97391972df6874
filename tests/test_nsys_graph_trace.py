"""Whole-graph replays of nsys `--cuda-graph-trace=graph` (issue 34): the rows of
`CUPTI_ACTIVITY_KIND_GRAPH_TRACE` read as `graph_replays` and seen as GPU work by launches,
busy, idle, summary and the timeline's Perfetto export; the critical path says what it leaves
out.

Input: `fixtures/nsys_graph_trace/make.py` run on a real shared export (its README says what
it changes). Every expected number comes from plain SQL on the made file (and, for unions of
intervals, a plain Python loop over the rows SQL returns), never from traceanalyze.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import warnings
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SHARED_SETS, SHARED_TRACES, shared

import traceanalyze as ta
from traceanalyze.analyses.busy import busy_time
from traceanalyze.cli import main

SRC = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
PID = "((x >> 24) & 16777215)"  # formats.md §3.2: the pid inside globalPid / globalTid


def _make_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "nsys_graph_make", FIXTURES / "nsys_graph_trace" / "make.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _made(tmp: Path, mode: str) -> Path:
    return Path(_make_module().make(shared(SRC), tmp / f"{mode}.sqlite", mode))


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _made(tmp_path_factory.mktemp("graph"), "graph")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _made(tmp_path_factory.mktemp("node"), "node")


def sql(path: Path, query: str, *args: object) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


def pid(col: str) -> str:
    return PID.replace("x", col)


def union_ns(rows: Iterable[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals: a plain loop."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(rows):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# --- the made input itself ------------------------------------------------------------------


def test_the_made_export_is_what_graph_mode_writes(graph: Path) -> None:
    src = shared(SRC)
    (n_src,) = sql(src, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    (n,) = sql(graph, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert n_src - n == 36  # 2 processes x 3 replays x 6 kernels, gone into 6 whole-graph rows
    assert sql(graph, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")[0] == (6,)
    mode = "SELECT value FROM META_DATA_CAPTURE WHERE name = 'CUDA_GRAPH_TRACE_OPTIONS:MODE'"
    assert sql(graph, mode) == [("Graph",)]
    launches = sql(
        graph,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "JOIN CUPTI_ACTIVITY_KIND_GRAPH_TRACE g ON g.correlationId = r.correlationId AND "
        f"{pid('g.globalPid')} = {pid('r.globalTid')} WHERE s.value = 'cudaGraphLaunch_v10000'",
    )
    assert launches == [(6,)]


# --- the reader -----------------------------------------------------------------------------


def test_reader_keeps_one_row_per_replay(graph: Path, tmp_path: Path) -> None:
    from traceanalyze.readers.nsys.nsys_sqlite import read_nsys_sqlite, stream_nsys_sqlite

    want = sql(
        graph,
        f"SELECT rowid - 1, {pid('globalPid')}, deviceId, contextId, streamId, correlationId, "
        "graphId, graphExecId, start, end, end - start FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE "
        "ORDER BY rowid",
    )
    t = read_nsys_sqlite(graph)
    cols = ["replay_id", "process_id", "device_id", "context_id", "stream_id", "correlation_id"]
    cols += ["graph_id", "graph_exec_id", "start_ns", "end_ns", "duration_ns"]
    assert t.graph_replays.select(cols).rows() == want
    # not kernels: the kernel table holds exactly the export's kernel rows
    assert t.kernels.height == sql(graph, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    per_graph = sql(
        graph,
        "SELECT graphId, count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE "
        "GROUP BY graphId ORDER BY graphId",
    )
    got = (
        t.graph_replays.group_by("graph_id")
        .agg(pl.len().cast(pl.Int64), pl.col("duration_ns").sum())
        .sort("graph_id")
    )
    assert got.rows() == per_graph
    assert sorted(t.devices["device_id"].to_list()) == [0, 1]
    # the stream (ingest) gives the same rows
    work = tmp_path / "w"
    work.mkdir()
    parts = [df for name, df in stream_nsys_sqlite(graph, workdir=work) if name == "graph_replays"]
    assert pl.concat(parts).select(cols).rows() == want


def test_store_round_trip(graph: Path, tmp_path: Path) -> None:
    ta.ingest([graph], tmp_path / "store")
    ds = ta.open(store=tmp_path / "store")
    got = ds.scan("graph_replays").sort("replay_id").select("start_ns", "end_ns").collect()
    want = sql(graph, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE ORDER BY rowid")
    assert got.rows() == want


def test_node_mode_kernels_keep_their_ids(node: Path) -> None:
    from traceanalyze.readers.nsys.nsys_sqlite import read_nsys_sqlite

    t = read_nsys_sqlite(node)
    assert t.graph_replays.height == 0
    want = sql(
        node,
        "SELECT k.graphId, coalesce(e.originalGraphNodeId, k.graphNodeId), count(*) FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN CUDA_GRAPH_NODE_EVENTS e ON e.graphNodeId = "
        "k.graphNodeId WHERE k.graphNodeId IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2",
    )
    got = (
        t.kernels.filter(pl.col("graph_launch"))
        .group_by("graph_id", "graph_node_id")
        .agg(pl.len().cast(pl.Int64))
        .sort("graph_id", "graph_node_id")
    )
    assert got.rows() == want
    assert len(want) == 12 and {r[2] for r in want} == {3}


def test_graph_trace_without_start_is_one_line_error(graph: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(graph.read_bytes())
    con = sqlite3.connect(bad)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE DROP COLUMN start")
    con.commit()
    con.close()
    r = CliRunner().invoke(main, ["summary", str(bad)])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in lines[0] and "start" in lines[0]
    assert str(bad) in lines[0]


def test_untimed_replay_has_null_times_and_a_warning(graph: Path, tmp_path: Path) -> None:
    """CUPTI writes start = end = 0 for a replay it could not time (CUpti_ActivityGraphTrace2)."""
    p = tmp_path / "untimed.sqlite"
    p.write_bytes(graph.read_bytes())
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_GRAPH_TRACE SET start = 0, end = 0 WHERE rowid = 2")
    con.commit()
    con.close()
    from traceanalyze.readers.nsys.nsys_sqlite import read_nsys_sqlite

    with pytest.warns(UserWarning, match="1 CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows with start"):
        t = read_nsys_sqlite(p)
    r = t.graph_replays.sort("replay_id")
    assert r["start_ns"].null_count() == r["end_ns"].null_count() == 1
    assert r["start_ns"][1] is None and r["correlation_id"][1] is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ev = ta.open(p).health().events
    row = ev.filter(pl.col("table") == "graph_replays").to_dicts()
    assert [(x["row_count"], x["untimed_count"]) for x in row] == [(6, 1)]


# --- analyses -------------------------------------------------------------------------------


def _launch_counts(path: Path) -> dict[int, tuple[int, int]]:
    """Per device: (launches, graph launches) by SQL: eager kernels with a call of their
    correlation id and process, each graph launch call once (its kernels in node mode, its
    whole-graph row in graph mode)."""
    call = (
        "EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = "
        f"x.correlationId AND {pid('r.globalTid')} = {pid('x.globalPid')})"
    )
    graph_call = call.replace(
        "WHERE", "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaGraphLaunch%' AND"
    )
    tables = {n for (n,) in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    eager = sql(
        path,
        f"SELECT deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL x WHERE {call} AND NOT "
        f"{graph_call} GROUP BY deviceId",
    )
    out = {d: [n, 0] for d, n in eager}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
        if table not in tables:
            continue
        rows = sql(
            path,
            f"SELECT deviceId, count(DISTINCT correlationId) FROM {table} x WHERE {graph_call} "
            "GROUP BY deviceId",
        )
        for d, n in rows:
            out[d][0] += n
            out[d][1] += n
    return {d: (a, b) for d, (a, b) in out.items()}


def test_launches_count_whole_graph_replays(graph: Path, node: Path) -> None:
    want = _launch_counts(graph)
    assert {d: g for d, (_, g) in want.items()} == {0: 3, 1: 3}
    r = run("launches", str(graph), "--json")
    assert r.exit_code == 0
    got = {row["device_id"]: row for row in json.loads(r.output[r.output.index("[") :])}
    for d, (n, g) in want.items():
        assert (got[d]["launch_count"], got[d]["graph_launch_count"]) == (n, g)
        assert got[d]["whole_graph_count"] == g
        assert got[d]["graph_kernel_count"] == 0  # kernels only: a whole-graph row shows none
    # node mode: the same launches, the replays' kernels now counted as kernels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = ta.open(node).launches().stats
    assert _launch_counts(node) == want
    rows = {r["device_id"]: r for r in stats.to_dicts()}
    for d, (n, g) in want.items():
        assert (rows[d]["launch_count"], rows[d]["graph_launch_count"]) == (n, g)
        assert (rows[d]["graph_kernel_count"], rows[d]["whole_graph_count"]) == (18, 0)


def _intervals(path: Path, table: str, device: int, stream: int | None = None) -> list[tuple]:
    where = "deviceId = ?" + (" AND streamId = ?" if stream is not None else "")
    args = (device,) if stream is None else (device, stream)
    return sql(path, f"SELECT start, end FROM {table} WHERE {where}", *args)


def _window(path: Path) -> tuple[int, int]:
    parts = " UNION ALL ".join(
        f"SELECT min(start) AS a, max(end) AS b FROM {t}"
        for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
        )
    )
    ((a, b),) = sql(path, f"SELECT min(a), max(b) FROM ({parts})")
    return a, b


def test_busy_counts_replays_as_kernel_work(graph: Path) -> None:
    ds = ta.open(graph)
    got = ds.busy().filter(pl.col("activity") == "kernels")
    k, g = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    without = busy_time(ds.scan("kernels"), ds.scan("memcpy")).filter(
        pl.col("activity") == "kernels"
    )
    for d in (0, 1):
        with_replays = union_ns(_intervals(graph, k, d) + _intervals(graph, g, d))
        kernels_only = union_ns(_intervals(graph, k, d))
        row = got.filter(pl.col("device_id") == d)
        assert round(row["busy_ms"][0] * 1e6) == with_replays
        assert without.filter(pl.col("device_id") == d)["busy_ns"][0] == kernels_only
        assert with_replays > kernels_only  # the replays' time was missing before


def test_idle_sees_replays_as_busy(graph: Path) -> None:
    r = run("idle", str(graph), "--json")
    assert r.exit_code == 0
    rows = json.loads(r.output[r.output.index("[") :])
    lo, hi = _window(graph)
    k, g = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    streams = dict(sql(graph, f"SELECT DISTINCT deviceId, streamId FROM {g}"))
    for row in rows:
        d, st = row["device_id"], row["stream_id"]
        if st is not None and st != streams[d]:
            continue
        busy = union_ns(_intervals(graph, k, d, st) + _intervals(graph, g, d, st))
        assert row["window_ns"] == hi - lo
        assert row["busy_ns"] == busy, (d, st)
        assert row["idle_ns"] == hi - lo - busy


def test_summary_shows_replays_apart(graph: Path) -> None:
    r = run("summary", str(graph), "--json", "--top", "100")
    assert r.exit_code == 0
    out = json.loads(r.output[r.output.index("{") :])
    (ov,) = out["kernels"]
    (n_k, t_k) = sql(graph, "SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    (n_g, t_g) = sql(
        graph, "SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    )[0]
    assert ov["kernel_count"] == n_k  # not inflated by the replays
    assert ov["total_kernel_ms"] == pytest.approx(t_k / 1e6)
    assert ov["graph_replay_count"] == n_g
    assert ov["total_graph_replay_ms"] == pytest.approx(t_g / 1e6)
    graphs = {row["name"]: row for row in out["top_kernels"] if row["whole_graph"]}
    per_graph = sql(
        graph,
        "SELECT graphId, count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE "
        "GROUP BY graphId",
    )
    assert set(graphs) == {f"CUDA graph {gid}" for gid, _, _ in per_graph}
    for gid, n, t in per_graph:
        row = graphs[f"CUDA graph {gid}"]
        assert row["launch_count"] == n and row["total_ms"] == pytest.approx(t / 1e6)
    assert sum(row["share_pct"] for row in out["top_kernels"]) <= 100.0 + 1e-9


@pytest.mark.parametrize(("mode", "shown"), [("graph", True), ("node", False)])
def test_summary_text_shows_replay_columns_only_with_replays(
    graph: Path, node: Path, mode: str, shown: bool
) -> None:
    """Answers first: the node-mode export has no whole-graph rows (checked with SQL), and its
    text tables leave out a replay count of 0, 0 ms and `whole_graph` False on every kernel;
    the graph-mode export shows them. `--json` keeps them either way."""
    path = graph if mode == "graph" else node
    tables = {r[0] for r in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    replays = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables and bool(
        sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")[0][0]
    )
    assert replays is shown
    r = run("summary", str(path))
    assert r.exit_code == 0
    for col in ("graph_replay_count", "total_graph_replay_ms", "whole_graph"):
        assert (col in r.output) is shown, col
    j = json.loads(run("summary", str(path), "--json").output)
    assert "graph_replay_count" in j["kernels"][0] and "whole_graph" in j["top_kernels"][0]


def test_perfetto_one_slice_per_replay_with_a_flow_from_its_launch(
    graph: Path, tmp_path: Path
) -> None:
    out = tmp_path / "t.json"
    r = run("timeline", str(graph), "--perfetto", str(out))
    assert r.exit_code == 0, r.output
    ev = json.loads(out.read_text())["traceEvents"]
    slices = sorted(
        (e for e in ev if e.get("cat") == "cuda_graph"), key=lambda e: (e["pid"], e["ts"])
    )
    want = sql(
        graph,
        "SELECT g.deviceId, g.streamId, g.graphId, g.start, g.end - g.start, r.start, "
        f"{pid('r.globalTid')}, r.globalTid & 16777215 FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE g "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.correlationId AND "
        f"{pid('r.globalTid')} = {pid('g.globalPid')} ORDER BY g.deviceId, g.start",
    )
    assert len(slices) == len(want) == 6
    flows = {(e["id"], e["ph"]): e for e in ev if e.get("cat") == "launch"}
    for s, (dev, stream, gid, start, dur, call_start, proc, tid) in zip(slices, want, strict=True):
        assert (s["pid"], s["tid"], s["name"]) == (dev, stream, f"CUDA graph {gid}")
        assert s["dur"] == pytest.approx(dur / 1e3)
        (end,) = [
            e
            for (i, ph), e in flows.items()
            if ph == "f" and e["pid"] == dev and e["tid"] == stream and e["ts"] == s["ts"]
        ]
        begin = flows[(end["id"], "s")]
        # the call's thread (or a sub-track of it, `tid` + n x 10^7, where calls overlap)
        assert (begin["pid"], begin["tid"] % 10_000_000) == (proc + 1_000_000, tid)
        assert begin["ts"] - end["ts"] == pytest.approx((call_start - start) / 1e3, abs=1e-3)


def test_perfetto_protobuf_equals_the_json_for_replays(graph: Path, tmp_path: Path) -> None:
    pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from tests.test_perfetto_proto import both, json_view, proto_view
    from traceanalyze.analyses.timeline import with_replays

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = ta.read(graph)
    k = with_replays(t.kernels, t.graph_replays).collect()
    d, doc = both(tmp_path, k, t.memcpy, t.markers, api_calls=t.api_calls, ops=t.ops)
    want_slices, want_flows, _ = json_view(doc)
    assert proto_view(d) == (want_slices, want_flows)
    graphs = [s for s in d.slices if s["cat"] == "cuda_graph"]
    assert len(graphs) == sql(graph, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")[0][0]


@pytest.mark.parametrize("factor", [20, 100])
def test_critical_path_has_a_node_per_whole_graph_replay(
    graph: Path, node: Path, factor: int
) -> None:
    """A whole-graph replay is one GPU event of the path (`CUDA graph <id>`, launched by its
    call): scaling them by `factor` lengthens the graph-mode path, by at most (factor - 1) x the
    replays' total time (SQL; adding W to some events lengthens a longest path by W at most),
    while the node-mode export, which has no such event, keeps its path; factor 1 gives the path
    back exactly. Both exports' paths are the same length (the same window)."""
    (t,) = sql(graph, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")[0]
    spec = f"kernel:^CUDA graph={factor}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 30 GPU events launched before the capture (real file)
        g1 = (
            ta.open(graph)
            .critical_path(what_if=["kernel:^CUDA graph=1"])
            .iterations.row(0, named=True)
        )
        g = ta.open(graph).critical_path(what_if=[spec]).iterations.row(0, named=True)
        n = ta.open(node).critical_path(what_if=[spec]).iterations.row(0, named=True)
    assert g1["predicted_ms"] == g1["path_ms"]
    assert g["path_ms"] == n["path_ms"]
    assert g["path_ms"] < g["predicted_ms"] <= g["path_ms"] + (factor - 1) * t / 1e6 + 1e-9
    assert n["predicted_ms"] == n["path_ms"]
    split = [
        c for c in g if c.endswith("_ms") and c not in ("path_ms", "duration_ms", "predicted_ms")
    ]
    assert sum(g[c] for c in split) == pytest.approx(g["path_ms"])


K_SQL, G_SQL = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [str(w.message) for w in caught]


def test_ops_give_each_replay_to_the_range_around_its_launch(graph: Path) -> None:
    # The GPU columns add up to the source's GPU time (module docstring of analyses.ops): with
    # the replays, kernels' plus replays' durations; before, the replays' 2.1 ms were missing.
    ds = ta.open(graph)
    ((t_k,),) = sql(graph, f"SELECT sum(end - start) FROM {K_SQL}")
    ((t_g,),) = sql(graph, f"SELECT sum(end - start) FROM {G_SQL}")
    st, _ = _quiet(ds.ops, top=0)
    assert st["kernel_self_ns"].sum() == t_k + t_g
    by_kernel, _ = _quiet(ds.ops, by="kernel", top=0)
    rows = by_kernel.filter(pl.col("kernel").str.starts_with("CUDA graph "))
    want = sql(graph, f"SELECT graphId, count(*), sum(end - start) FROM {G_SQL} GROUP BY graphId")
    got = rows.group_by("kernel").agg(pl.col("kernel_count").sum(), pl.col("kernel_ns").sum())
    assert sorted(got.iter_rows()) == sorted((f"CUDA graph {gid}", n, t) for gid, n, t in want)
    # each replay goes to an operator (the NVTX range open on its launch's thread), not to the
    # row of unattributed GPU time
    assert rows["op"].null_count() == 0


def test_annotations_count_each_replay_as_one_event(graph: Path) -> None:
    ds = ta.open(graph)
    got, _ = _quiet(ds.annotations)
    per = got.group_by("device_id").agg(
        pl.col("duration_ns").sum(), pl.col("event_count").sum(), pl.col("kernel_count").sum()
    )
    parts = " UNION ALL ".join(
        f"SELECT deviceId AS d, end - start AS t, {int(t == K_SQL)} AS k FROM {t}"
        for t in (K_SQL, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", G_SQL)
    )
    want = sql(graph, f"SELECT d, sum(t), count(*), sum(k) FROM ({parts}) GROUP BY d")
    assert sorted(per.iter_rows()) == sorted(want)


def test_overlap_counts_replays_as_computation_and_says_so(graph: Path) -> None:
    import re

    from traceanalyze.analyses.overlap import COMM_KERNEL

    comm = re.compile(COMM_KERNEL)
    rows = sql(
        graph,
        f"SELECT k.deviceId, k.start, k.end, s.value FROM {K_SQL} k "
        "JOIN StringIds s ON s.id = k.demangledName",
    )
    got, said = _quiet(ta.open(graph).overlap)
    whole = got.filter(pl.col("iteration").is_null())
    for d in (0, 1):
        compute = [(a, b) for dev, a, b, name in rows if dev == d and not comm.search(name)]
        replays = _intervals(graph, G_SQL, d)
        assert replays
        row = whole.filter(pl.col("device_id") == d)
        assert row["compute_ns"][0] == union_ns(compute + replays)
        assert row["compute_ns"][0] > union_ns(compute)  # the replays were left out before
    ((n,),) = sql(graph, f"SELECT count(*) FROM {G_SQL}")
    assert any(f"{n} whole-graph replay(s)" in m and "computation" in m for m in said), said


# --- held out: every shared export with graph rows ------------------------------------------


def graph_exports(roots: Iterable[Path]) -> list[Path]:
    """The *.sqlite files under `roots` with whole-graph rows or kernels with a graph node id."""
    out = []
    for root in roots:
        if not root.exists():
            continue
        for p in sorted(root.rglob("*.sqlite")):
            if _graph_counts(p) != (0, 0):
                out.append(p)
    return out


def _graph_counts(p: Path) -> tuple[int, int]:
    """(GRAPH_TRACE rows, kernels with a non-zero graphNodeId), by SQL; (0, 0) for a file
    that has neither (or is no nsys export)."""
    try:
        tables = {n for (n,) in sql(p, "SELECT name FROM sqlite_master WHERE type = 'table'")}
        g = k = 0
        if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
            g = sql(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")[0][0]
        if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
            cols = {r[1] for r in sql(p, "PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
            if "graphNodeId" in cols:
                k = sql(
                    p,
                    "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT "
                    "NULL AND graphNodeId != 0",
                )[0][0]
    except sqlite3.DatabaseError:
        return 0, 0
    return int(g), int(k)


def check_counts(p: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = ta.read(p, format="nsys_sqlite")
    assert (t.graph_replays.height, t.kernels["graph_node_id"].count()) == _graph_counts(p)


SHARED_ROOTS = (SHARED_TRACES / "nsys_sqlite", SHARED_SETS)


@pytest.mark.parametrize("path", graph_exports(SHARED_ROOTS), ids=lambda p: p.name)
def test_held_out_graph_counts_match_sql(path: Path) -> None:
    check_counts(path)


def test_held_out_discovery_finds_the_made_exports(graph: Path, node: Path) -> None:
    """Not vacuous: the discovery above finds both made exports, and the check passes on them."""
    found = graph_exports([graph.parent, node.parent])
    assert set(found) == {graph, node}
    for p in found:
        check_counts(p)
    assert _graph_counts(graph) == (6, 0) and _graph_counts(node) == (0, 36)


def test_diagnose_knows_the_step_already_replays_graphs(graph: Path) -> None:
    # host_bound advises CUDA graphs to a step without them; this one replays some already
    r = run("diagnose", str(graph), "--json")
    assert r.exit_code == 0
    out = json.loads(r.output[r.output.index("{") :])
    (f,) = [f for f in out["findings"] if f["rule"] == "host_bound"]
    ((n,),) = sql(
        graph,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaGraphLaunch%' OR s.value LIKE 'cuGraphLaunch%'",
    )
    assert n == 6
    assert f["evidence"]["graph_launch_count"] == n
    assert f"already replays CUDA graphs ({n} graph launches)" in f["advice"]
