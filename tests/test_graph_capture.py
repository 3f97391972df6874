"""A graph replay's kernels given to the operators that were captured (issue 34, point 3), and the
graph-replay figures of every Kineto trace with a graph launch (issue 34, point 6).

The pair: fixtures/kineto_json-sglang-hipgraph-mi300x (a HIP graph's capture-time trace, from
AMD-AGI/TraceLens; its README.md) and its replay, the shared
../shared/traces/kineto_json/tracelens_hipgraph_mi300x_sglang_decode.json.gz. Every expected
value is computed here from the raw JSON (gzip + json): the capture window, its launch calls in
call order, the operators around each, the replay's kernels in start order, paired by position,
names checked."""

from __future__ import annotations

import functools
import gzip
import json
import re
import warnings
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze.cli import main
from traceanalyze.errors import TraceanalyzeError

from .conftest import FIXTURES, ROOT, SHARED_SETS, SHARED_TRACES, shared

PAIR = FIXTURES / "kineto_json-sglang-hipgraph-mi300x"
CAPTURE = PAIR / "capture_bs_32_rank0.json.gz"
# The replay of that graph is a shared trace (the same file as TraceLens' own): read from there.
REPLAY_REL = "kineto_json/tracelens_hipgraph_mi300x_sglang_decode.json.gz"
LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch")
API = ("cuda_runtime", "cuda_driver")
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
OPS = ("cpu_op", "python_function")


def _replay() -> Path:
    """The pair's replay trace under ../shared/traces (skips the test when it is absent)."""
    return shared(REPLAY_REL)


def _ns(us: Any) -> int:
    return int((Decimal(str(us)) * 1000).to_integral_value())


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return doc


def _x(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _around(ops: list[dict[str, Any]], call: dict[str, Any]) -> list[str]:
    """Names of the operators on the call's thread that hold its start, innermost first (latest
    start, then the shortest)."""
    t = _ns(call["ts"])
    inside = [
        o
        for o in ops
        if (o["pid"], o["tid"]) == (call["pid"], call["tid"])
        and _ns(o["ts"]) <= t < _ns(o["ts"]) + _ns(o["dur"])
    ]
    inside.sort(key=lambda o: (_ns(o["ts"]), -_ns(o["dur"])), reverse=True)
    return [o["name"] for o in inside]


def _captured(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The launch calls of the capture's one window, in call order, with their operators."""
    ev = _x(doc)
    [begin] = [e for e in ev if e.get("cat") in API and "StreamBeginCapture" in e["name"]]
    [end] = [e for e in ev if e.get("cat") in API and "StreamEndCapture" in e["name"]]
    lo, hi = _ns(begin["ts"]) + _ns(begin["dur"]), _ns(end["ts"])
    calls = sorted(
        (
            e
            for e in ev
            if e.get("cat") in API
            and re.search("Launch|Memcpy|Memset", e["name"])
            and not LAUNCH.match(e["name"])
            and (e["pid"], e["tid"]) == (begin["pid"], begin["tid"])
            and lo <= _ns(e["ts"]) <= hi
        ),
        key=lambda e: _ns(e["ts"]),
    )
    ops = [e for e in ev if e.get("cat") in OPS]
    return [{"kernel": c["args"].get("kernel"), "stack": _around(ops, c)} for c in calls]


def _expected(capture: dict[str, Any] | None, replay: dict[str, Any]) -> dict[str, Any]:
    """Per operator name: kernel_count, kernel_self_ns, kernel_inclusive_ns, captured_kernel_count
    of the replay trace once its graph kernels take their captured operators (paired by
    position, where the captured launch names the same kernel or names none, and the window has
    as many launches as the replay has GPU ops); and the counts of graph kernels given / not."""
    ev = _x(replay)
    ops = [e for e in ev if e.get("cat") in OPS]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in API and "args" in e}
    graph = {c for c, e in calls.items() if LAUNCH.match(e["name"])}
    replayed: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in ev:
        if e.get("cat") in GPU and e["args"].get("correlation") in graph:
            replayed[e["args"]["correlation"]].append(e)
    nodes = _captured(capture) if capture is not None else []
    took: dict[int, list[str]] = {}  # id(kernel event) -> captured stack
    for gpu_ops in replayed.values():
        gpu_ops.sort(key=lambda e: _ns(e["ts"]))
        if len(gpu_ops) != len(nodes):
            continue
        for k, n in zip(gpu_ops, nodes, strict=True):
            if k["cat"] == "kernel" and n["kernel"] in (None, k["name"]) and n["stack"]:
                took[id(k)] = n["stack"]
    rows: dict[str | None, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    given = left = 0
    for k in (e for e in ev if e.get("cat") == "kernel"):
        corr, ns = k["args"].get("correlation"), _ns(k["dur"])
        outer = _around(ops, calls[corr]) if corr in calls else []
        stack = took.get(id(k), []) + outer
        own = rows[stack[0] if stack else None]
        own["kernel_count"] += 1
        own["kernel_self_ns"] += ns
        if corr in graph:
            given, left = given + (id(k) in took), left + (id(k) not in took)
            own["captured_kernel_count"] += id(k) in took
            own["uncaptured_kernel_count"] += id(k) not in took
        for name in set(stack) or {None}:
            rows[name]["kernel_inclusive_ns"] += ns
    return {"rows": rows, "given": given, "left": left}


COLS = (
    "kernel_count",
    "kernel_self_ns",
    "kernel_inclusive_ns",
    "captured_kernel_count",
    "uncaptured_kernel_count",
)


@functools.cache
def _pair() -> dict[str, Any]:
    """`_expected` of the fixture pair (several tests compare with it)."""
    return _expected(_load(CAPTURE), _load(_replay()))


def _by_op(rows: list[dict[str, Any]]) -> dict[str | None, dict[str, int]]:
    """Rows with any GPU time, as `_expected` keeps them."""
    return {
        r["op"]: {c: r[c] for c in COLS if r[c]}
        for r in rows
        if r["kernel_count"] or r["kernel_inclusive_ns"]
    }


def _want(exp: dict[str, Any]) -> dict[str | None, dict[str, int]]:
    return {op: {c: v for c, v in d.items() if v} for op, d in exp["rows"].items()}


def test_the_pair_is_what_the_readme_says() -> None:
    cap, rep = _load(CAPTURE), _load(_replay())
    nodes = _captured(cap)
    assert len(nodes) == 544 and all(n["kernel"] for n in nodes)
    ev = _x(rep)
    [launch] = [e for e in ev if e.get("cat") in API and LAUNCH.match(e["name"])]
    corr = launch["args"]["correlation"]
    kernels = sorted(
        (e for e in ev if e.get("cat") == "kernel" and e["args"]["correlation"] == corr),
        key=lambda e: _ns(e["ts"]),
    )
    assert len(kernels) == 544
    assert [k["name"] for k in kernels] == [n["kernel"] for n in nodes]
    assert not any("graph node id" in e.get("args", {}) for e in _x(cap) + ev)


def test_replayed_kernels_go_to_the_captured_operators() -> None:
    exp = _pair()
    assert (exp["given"], exp["left"]) == (544, 0)
    ds = ta.open(_replay())
    before = ds.ops(top=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # everything matched: nothing to warn about
        got = ds.ops(top=0, capture=CAPTURE)
    assert _by_op(got.to_dicts()) == _want(exp)
    # GPU time only moves: the source's total, and the replay's (one replay here)
    assert got["kernel_self_ns"].sum() == before["kernel_self_ns"].sum()
    assert got["captured_kernel_count"].sum() == 544
    assert got["uncaptured_kernel_count"].sum() == 0
    mm = got.filter(pl.col("op") == "aten::mm").row(0, named=True)
    assert (mm["kernel_count"], mm["call_count"], mm["inclusive_ns"]) == (145, 0, 0)
    # the operator around the replay keeps the replay in its inclusive time, not in its self
    around = "torch/cuda/graphs.py(139): replay"
    b, a = (d.filter(pl.col("op") == around).row(0, named=True) for d in (before, got))
    assert a["kernel_inclusive_ns"] == b["kernel_inclusive_ns"] == b["kernel_self_ns"]
    assert a["kernel_self_ns"] == 0


def test_by_kernel_and_a_capture_dataset() -> None:
    exp = _pair()
    got = ta.open(_replay()).ops(by="kernel", top=0, capture=ta.open(CAPTURE))
    per_op = got.group_by("op").agg(pl.col("kernel_count").sum(), pl.col("kernel_ns").sum())
    want = {
        op: (d["kernel_count"], d["kernel_self_ns"])
        for op, d in exp["rows"].items()
        if d["kernel_count"]
    }
    assert {op: (n, ns) for op, n, ns in per_op.rows()} == want


def test_cli_json() -> None:
    exp = _pair()
    args = ["ops", str(_replay()), "--capture", str(CAPTURE), "--json", "--top", "0"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert _by_op(rows) == _want(exp)
    assert sum(x["captured_kernel_count"] for x in rows) == 544
    assert sum(x["uncaptured_kernel_count"] for x in rows) == 0


def _write(doc: dict[str, Any], path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _capture_variant(tmp_path: Path, *, drop_last: int = 0, names: bool = True) -> Path:
    """The capture with its last `drop_last` launch calls left out (a capture that misses nodes)
    and, `names=False`, without `args.kernel` (as CUDA's cudaLaunchKernel events are)."""
    doc = _load(CAPTURE)
    calls = [
        e
        for e in _x(doc)
        if e.get("cat") in API and "kernel" in e.get("args", {}) and "Launch" in e["name"]
    ]
    calls.sort(key=lambda e: _ns(e["ts"]))
    gone = {id(e) for e in calls[len(calls) - drop_last :]} if drop_last else set()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if id(e) not in gone]
    if not names:
        for e in doc["traceEvents"]:
            e.get("args", {}).pop("kernel", None)
    return _write(doc, tmp_path / "capture.json.gz")


def test_capture_without_kernel_names_pairs_by_position(tmp_path: Path) -> None:
    cap = _capture_variant(tmp_path, names=False)
    exp = _expected(_load(cap), _load(_replay()))
    assert exp["given"] == 544
    assert _by_op(ta.open(_replay()).ops(top=0, capture=cap).to_dicts()) == _want(exp)


def test_a_capture_short_of_nodes(tmp_path: Path) -> None:
    """10 launches fewer than the replay's kernels: with names, each replayed kernel takes the
    next captured launch of its name (the first 534 match); the last 10 stay where they were."""
    cap = _capture_variant(tmp_path, drop_last=10)
    ds = ta.open(_replay())
    with pytest.warns(UserWarning, match=r"10 of 544 graph-replay kernels .*capture\.json\.gz"):
        got = ds.ops(top=0, capture=cap)
    assert got["captured_kernel_count"].sum() == 534
    assert got["uncaptured_kernel_count"].sum() == 10
    assert got["kernel_self_ns"].sum() == ds.ops(top=0)["kernel_self_ns"].sum()
    # the 534 are those of the full capture, the 10 the replay's last, left with its operator
    full = _pair()["rows"]
    around = got.filter(pl.col("uncaptured_kernel_count") > 0)["op"].to_list()
    assert around == ["torch/cuda/graphs.py(139): replay"]
    rep = _x(_load(_replay()))
    graph = sorted((e for e in rep if e.get("cat") == "kernel"), key=lambda e: _ns(e["ts"]))
    [corr] = [e["args"]["correlation"] for e in rep if LAUNCH.match(e.get("name", ""))]
    last = [e for e in graph if e["args"]["correlation"] == corr][-10:]
    row = got.filter(pl.col("op") == around[0]).row(0, named=True)
    assert row["kernel_self_ns"] == sum(_ns(e["dur"]) for e in last)
    assert got["captured_kernel_count"].sum() + 10 == sum(
        d["captured_kernel_count"] for d in full.values()
    )
    # without names and with no window of the replay's size, nothing is paired
    bare = _capture_variant(tmp_path, drop_last=10, names=False)
    with pytest.warns(UserWarning, match="544 of 544"):
        none = ds.ops(top=0, capture=bare)
    assert none["captured_kernel_count"].sum() == 0


def test_not_a_capture_trace(tmp_path: Path) -> None:
    with pytest.raises(TraceanalyzeError, match="is not a capture-time trace"):
        ta.open(_replay()).ops(capture=_replay())
    r = CliRunner().invoke(main, ["ops", str(_replay()), "--capture", str(_replay())])
    assert r.exit_code == 1
    [line] = r.output.strip().splitlines()
    assert line.startswith("traceanalyze: error: ") and str(_replay()) in line
    r = CliRunner().invoke(main, ["ops", str(_replay()), "--capture", str(tmp_path / "nope.json")])
    assert r.exit_code == 1 and "nope.json" in r.output


def test_graph_node_ids_order_the_replay(write: Any) -> None:
    """Two streams: the replay's second node starts first. Kineto's `graph node id` gives the
    graph order (CUDA-style launches without kernel names: pairing is by position only)."""
    rt = {"ph": "X", "cat": "cuda_runtime", "pid": 1, "tid": 1}
    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1}
    capture = [
        {**rt, "name": "cudaStreamBeginCapture", "ts": 1, "dur": 1, "args": {"correlation": 1}},
        {**op, "name": "first_op", "ts": 3, "dur": 4},
        {**rt, "name": "cudaLaunchKernel", "ts": 4, "dur": 1, "args": {"correlation": 2}},
        {**op, "name": "second_op", "ts": 8, "dur": 4},
        {**rt, "name": "cudaLaunchKernel", "ts": 9, "dur": 1, "args": {"correlation": 3}},
        {**rt, "name": "cudaStreamEndCapture", "ts": 13, "dur": 1, "args": {"correlation": 4}},
    ]
    k = {"ph": "X", "cat": "kernel", "pid": 0, "dur": 5}
    replay = [
        {**op, "name": "CUDAGraph.replay", "ts": 1, "dur": 10},
        {**rt, "name": "cudaGraphLaunch", "ts": 2, "dur": 1, "args": {"correlation": 9}},
        {**k, "name": "b", "tid": 8, "ts": 20, "args": {"correlation": 9, "graph node id": 2}},
        {**k, "name": "a", "tid": 7, "ts": 21, "args": {"correlation": 9, "graph node id": 1}},
    ]
    c = write("c.json", json.dumps({"traceEvents": capture}))
    r = write("r.json", json.dumps({"traceEvents": replay}))
    got = ta.open(r).ops(by="kernel", top=0, capture=c)
    assert sorted(got.select("op", "kernel").rows()) == [("first_op", "a"), ("second_op", "b")]


# --- every Kineto trace with a graph launch (issue 34, point 6) --------------------------------


def _kineto_files() -> list[Path]:
    roots = [SHARED_TRACES / "kineto_json", SHARED_SETS, FIXTURES]
    out = []
    for root in roots:
        if root.exists():
            out += sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz")))
    return out


_NAMED_LAUNCH = re.compile(rb'"name":\s*"(?:cuda|cu|hip)GraphLaunch')


def _with_graph_launch() -> list[Path]:
    """Kineto traces (a `traceEvents` key) whose raw JSON holds a graph launch call."""
    out = []
    for p in _kineto_files():
        raw = p.read_bytes()
        raw = gzip.decompress(raw) if p.name.endswith(".gz") else raw
        if b'"traceEvents"' in raw and _NAMED_LAUNCH.search(raw):
            out.append(p)
    return out


GRAPH_TRACES = _with_graph_launch()


def _id(p: Path) -> str:
    return str(p.relative_to(ROOT if ROOT in p.parents else ROOT.parent))


@pytest.mark.skipif(not SHARED_TRACES.exists(), reason="../shared is absent: no public traces")
def test_the_known_graph_traces_are_found() -> None:
    names = {p.name for p in GRAPH_TRACES}
    assert {"hta_cudagraph_a100_rank0.json.gz", _replay().name} <= names


@pytest.mark.parametrize("path", GRAPH_TRACES, ids=_id)
def test_graph_replay_figures(path: Path) -> None:
    """From the raw JSON: the graph launch calls, the GPU ops of each replay, the launch calls
    that ran kernels; `launches` and `ops` agree, and `ops` keeps every kernel's GPU time."""
    ev = _x(_load(path) if path.name.endswith(".gz") else json.loads(path.read_bytes()))
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in API and "args" in e}
    graph = {c for c, e in calls.items() if LAUNCH.match(e["name"])}
    n_graph_calls = sum(1 for e in ev if e.get("cat") in API and LAUNCH.match(e["name"]))
    per_replay: dict[int, int] = defaultdict(int)
    kernels_of: dict[int, int] = defaultdict(int)
    total_ns = 0
    for e in ev:
        corr = e.get("args", {}).get("correlation")
        if e.get("cat") in GPU and corr in graph:
            per_replay[corr] += 1
        if e.get("cat") == "kernel":
            total_ns += _ns(e["dur"])
            if corr in calls:
                kernels_of[corr] += 1
    assert n_graph_calls >= 1
    t = ta.read(path)
    assert t.api_calls.filter(pl.col("name").str.contains(LAUNCH.pattern)).height == n_graph_calls
    flagged = pl.concat(
        [t.kernels.filter("graph_launch"), t.memcpy.filter("graph_launch")], how="diagonal"
    )
    got = dict(flagged.group_by("correlation_id").len().rows())
    assert got == dict(per_replay)
    ds = ta.open(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kernels without a launch call are stated, not wrong
        st = ds.launches().stats
        ops = ds.ops(top=0)
    assert st["launch_count"].sum() == len(kernels_of)
    assert st["graph_launch_count"].sum() == sum(1 for c in kernels_of if c in graph)
    assert st["graph_kernel_count"].sum() == sum(n for c, n in kernels_of.items() if c in graph)
    assert ops["kernel_self_ns"].sum() == total_ns


# --- the graphed workload (collectors/gpu_capture.sh's torch-graph step): argv only, no GPU here


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--device", "cpu"], "needs a CUDA device"),
        (["--precision", "amp-fp16"], "GradScaler"),
        (["--compile"], "torch.compile"),
    ],
)
def test_the_graphed_workload_refuses_what_it_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], why: str
) -> None:
    from traceanalyze.collect import resnet50

    argv = ["--out", str(tmp_path), "--cuda-graph", *extra]
    assert resnet50.main(argv) == 2
    assert why in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before any work


def test_the_graphed_workload_argv_parses() -> None:
    from traceanalyze.collect import cuda_graph, resnet50

    argv = "--out x --device cuda --torch-profile 2,2,3 --cuda-graph --precision amp-bf16"
    args = resnet50.build_parser().parse_args(argv.split())
    assert args.cuda_graph and cuda_graph.refusal(args) is None
    assert not resnet50.build_parser().parse_args(["--out", "x"]).cuda_graph
    assert cuda_graph.capture_trace_name(64, 0) == "torch_bs64_rank0_capture.pt.trace.json.gz"


# --- analyses.graph_capture on inline frames -------------------------------------------------


def _calls(rows: list[tuple[int, str, int, int, str | None]]) -> pl.DataFrame:
    """(thread, name, start, end, kernel name) -> an api_calls frame of source "s", process 1."""
    return pl.DataFrame(
        [("s", 1, t, n, a, b, k) for t, n, a, b, k in rows],
        schema=[
            "source_id",
            "process_id",
            "thread_id",
            "name",
            "start_ns",
            "end_ns",
            "kernel_name",
        ],
        orient="row",
    )


def test_capture_windows_and_their_nodes() -> None:
    from traceanalyze.analyses.graph_capture import capture_windows, captured_launches

    calls = _calls(
        [
            (1, "cudaStreamEndCapture", 0, 1, None),  # an end without a begin: no window
            (1, "cudaStreamBeginCapture", 10, 12, None),
            (1, "cudaLaunchKernel", 20, 30, None),
            (1, "cuLaunchKernel", 22, 28, None),  # the runtime call's own driver call
            (1, "cudaStreamGetCaptureInfo", 31, 32, None),
            (1, "cudaLaunchHostFunc", 33, 34, None),
            (1, "cudaMemsetAsync", 35, 36, None),
            (2, "cudaLaunchKernel", 37, 38, None),  # another thread: not this capture's
            (1, "cudaStreamEndCapture", 40, 41, None),
            (1, "cudaLaunchKernel", 50, 51, None),  # after the end
            (2, "hipStreamBeginCapture", 60, 61, None),
            (2, "hipLaunchKernel", 62, 63, "k"),
            (2, "hipStreamEndCapture", 70, 71, None),
        ]
    )
    w = capture_windows(calls)
    assert w.select("window", "thread_id", "start_ns", "end_ns").rows() == [
        (0, 1, 12, 40),
        (1, 2, 61, 70),
    ]
    ops = pl.DataFrame(
        [("s", 1, 1, "outer", 15, 39), ("s", 1, 1, "inner", 19, 31)],
        schema=["source_id", "process_id", "thread_id", "name", "start_ns", "end_ns"],
        orient="row",
    )
    got = captured_launches(calls, ops)
    assert got.select("window", "ordinal", "kind", "kernel_name", "stack").rows() == [
        (0, 0, "kernel", None, ["inner", "outer"]),
        (0, 1, "memset", None, ["outer"]),
        (1, 0, "kernel", "k", []),
    ]


def test_graft_forward_scan_and_positional_pairing() -> None:
    from traceanalyze.analyses.graph_capture import graft, graft_counts

    captured = pl.DataFrame(
        [
            ("c", 0, 0, "kernel", "a", ["A"]),
            ("c", 0, 1, "kernel", "b", ["B"]),  # made no node in this replay
            ("c", 0, 2, "memcpy", None, ["M"]),
            ("c", 0, 3, "kernel", "c", ["C", "Outer"]),
        ],
        schema=["source_id", "window", "ordinal", "kind", "kernel_name", "stack"],
        orient="row",
    )
    replayed = pl.DataFrame(
        [
            ("r", 9, 0, "kernel", 100, "a", None),
            ("r", 9, 1, "memcpy", None, None, None),
            ("r", 9, 2, "kernel", 101, "c", None),
            ("r", 9, 3, "kernel", 102, "z", None),  # no node of its name
        ],
        schema=[
            "source_id",
            "correlation_id",
            "ordinal",
            *("kind", "kernel_id"),
            "name",
            "mangled_name",
        ],
        orient="row",
    )
    g = graft(captured, replayed)
    assert sorted(g.rows(), key=lambda r: (r[1], r[3])) == [
        ("r", 100, "A", 0),
        ("r", 101, "C", 0),
        ("r", 101, "Outer", 1),
        ("r", 102, None, 0),
    ]
    assert graft_counts(g) == (2, 1)
    # as many nodes as ops, no names: by position, kinds checked
    bare = captured.filter(pl.col("ordinal") != 1).with_columns(pl.lit(None).alias("kernel_name"))
    g = graft(bare, replayed.head(3))
    assert sorted(g.drop_nulls("op").rows()) == [
        ("r", 100, "A", 0),
        ("r", 101, "C", 0),
        ("r", 101, "Outer", 1),
    ]
