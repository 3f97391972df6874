"""Graph replays' kernels given to the operators that were captured (docs/graph-capture.md).

In a PyTorch-profiler trace every GPU op of a CUDA/HIP graph replay carries the correlation id of
the one `cudaGraphLaunch`/`hipGraphLaunch`, so `ops` gives all of their time to the operator
around that call (`CUDAGraph.replay`). A *capture-time* trace of the same graph, recorded with
the profiler on during `torch.cuda.graph(g)`, holds what the replay lost: between the capture's
`*StreamBeginCapture` and `*StreamEndCapture` calls, each launch call (`cudaLaunchKernel`,
`hipExtModuleLaunchKernel`, `cudaMemcpyAsync`, …) adds one node to the graph, inside the
operators that issued it; no kernel runs.

The join (the capture's launches and a replay's GPU ops, both in graph order):

* **Capture side.** Per capture window (a begin and the next end on one thread), the outermost
  launch, copy and set calls on that thread inside it, in call order: the graph's nodes in the
  order they were added, each with its kind (kernel, memcpy, memset), the kernel it names where
  the source says (ROCm: `args.kernel` → `api_calls.kernel_name`) and its operator stack.
* **Replay side.** Per graph launch call, the kernels and copies with its correlation id, in
  `graph_node_id` order where every one has a node id (Kineto's `graph node id`: on ROCm the
  ordinal of the dispatch within its launch), else in start order.
* **Pairing.** By position with a window of as many nodes (a position whose kind, or known
  kernel name, disagrees is not attributed), or, in a window that names its kernels, by a
  forward scan: each replayed op takes the next captured launch of its kind and name, skipping
  others (captured calls that made no node). The window and way that pair the most ops win.
  Without names and with no window of the replay's size, nothing is attributed.
* **Result.** `grafted`: per replayed kernel its captured stack (depth 0 innermost), or one row
  with a null op where it matched nothing; `analyses.ops` hangs the stack below the operator
  around the replay, so GPU time moves between operators and its total is unchanged.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .ops import host_ops, op_tree

Frame = pl.DataFrame | pl.LazyFrame

GRAPH_LAUNCH = r"^(?:cuda|cu|hip)GraphLaunch"
_BEGIN, _END = r"StreamBeginCapture", r"StreamEndCapture"
# calls that add a node during stream capture: kernel launches, async copies and sets (not host
# functions, not graph launches, not the capture's own queries such as hipStreamGetCaptureInfo)
_NODE_CALL = r"(?:Launch|Memcpy|Memset)"
_NOT_NODE = r"(?:GraphLaunch|LaunchHostFunc)"
_OP_COLS = ("kind", "kernel_id", "name", "mangled_name")  # a replayed op, as `_Op` holds it


def _collect(df: Frame) -> pl.DataFrame:
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def _kind(name: str) -> str:
    return "memset" if "Memset" in name else "memcpy" if "Memcpy" in name else "kernel"


def capture_windows(api_calls: Frame) -> pl.DataFrame:
    """Stream-capture windows: per (source, process, thread) each begin call paired with the
    next end call; columns source_id, process_id, thread_id, window, start_ns, end_ns (from the
    begin call's end to the end call's start), `window` numbered from 0 in start order."""
    a = _collect(
        api_calls.lazy()
        .filter(pl.col("name").str.contains(f"{_BEGIN}|{_END}") & pl.col("start_ns").is_not_null())
        .select("source_id", "process_id", "thread_id", "name", "start_ns", "end_ns")
        .sort("source_id", "process_id", "thread_id", "start_ns", nulls_last=True)
    )
    rows: list[tuple[Any, ...]] = []
    open_at: dict[tuple[Any, ...], int] = {}
    for sid, pid, tid, name, start, end in a.iter_rows():
        key = (sid, pid, tid)
        if _BEGIN in name:
            open_at[key] = end if end is not None else start
        elif key in open_at:
            rows.append((sid, pid, tid, open_at.pop(key), start))
    schema = {
        "source_id": pl.String,
        "process_id": pl.Int64,
        "thread_id": pl.Int64,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
    }
    w = pl.DataFrame(rows, schema=schema, orient="row").sort("source_id", "start_ns")
    return w.with_row_index("window").with_columns(pl.col("window").cast(pl.Int64))


def captured_launches(api_calls: Frame, ops: Frame, markers: Frame | None = None) -> pl.DataFrame:
    """The graph nodes each capture window added: window, ordinal (call order from 0), kind,
    kernel_name and `stack` (the enclosing operators' names, innermost first; empty outside
    every operator). Empty when the calls hold no capture window."""
    calls = _collect(api_calls)
    win = capture_windows(calls)
    on = ["source_id", "process_id", "thread_id"]
    c = (
        calls.filter(
            pl.col("name").str.contains(_NODE_CALL)
            & ~pl.col("name").str.contains(_NOT_NODE)
            & pl.col("start_ns").is_not_null()
        )
        .join(win.rename({"start_ns": "w0", "end_ns": "w1"}), on=on, how="inner")
        .filter((pl.col("start_ns") >= pl.col("w0")) & (pl.col("start_ns") <= pl.col("w1")))
        .sort("window", "start_ns", pl.col("end_ns"), descending=[False, False, True])
    )
    # a runtime call that calls the driver (cudaLaunchKernel -> cuLaunchKernel) adds one node:
    # a call starting inside the previous kept call of its window is that call's own work
    prev_end = pl.col("end_ns").cum_max().shift(1).over("window")
    c = c.filter(prev_end.is_null() | (pl.col("start_ns") >= prev_end))
    c = c.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("window").alias("ordinal"))
    stacks = _stacks(host_ops(ops, markers), c.select(*on, "start_ns"))
    return c.select(
        "source_id",
        "window",
        "ordinal",
        pl.col("name").map_elements(_kind, return_dtype=pl.String).alias("kind"),
        "kernel_name",
    ).with_columns(pl.Series("stack", stacks, dtype=pl.List(pl.String)))


def _stacks(host: pl.DataFrame, calls: pl.DataFrame) -> list[list[str]]:
    """Per call, the names of the operators that hold its start, innermost first."""
    if calls.height == 0:
        return []
    tree, owned = op_tree(host, calls)
    names, parent = tree["name"].to_list(), tree["parent"].to_list()
    out = []
    for row in owned["owner"].to_list():
        stack = []
        while row >= 0:
            stack.append(names[row] if names[row] is not None else "")
            row = parent[row]
        out.append(stack)
    return out


def replayed_ops(api_calls: Frame, kernels: Frame, memcpy: Frame) -> pl.DataFrame:
    """Each graph launch's GPU ops in graph order (see the module docstring): source_id,
    correlation_id, ordinal, kind, kernel_id (null for copies), name, mangled_name."""
    calls = _collect(
        api_calls.lazy()
        .filter(pl.col("name").str.contains(GRAPH_LAUNCH))
        .select("source_id", "correlation_id")
        .drop_nulls()
        .unique()
    )
    k = _collect(kernels.lazy()).select(
        "source_id",
        "correlation_id",
        pl.lit("kernel").alias("kind"),
        "kernel_id",
        "name",
        "mangled_name",
        "graph_node_id",
        "start_ns",
    )
    m = _collect(memcpy.lazy()).select(
        "source_id",
        "correlation_id",
        pl.when(pl.col("kind") == "memset").then(pl.lit("memset")).otherwise(pl.lit("memcpy")),
        pl.lit(None, dtype=pl.Int64).alias("kernel_id"),
        pl.lit(None, dtype=pl.String).alias("name"),
        pl.lit(None, dtype=pl.String).alias("mangled_name"),
        "graph_node_id",
        "start_ns",
    )
    ops = pl.concat([k, m.rename({"literal": "kind"})], how="vertical_relaxed").join(
        calls, on=["source_id", "correlation_id"], how="semi"
    )
    by_node = pl.col("graph_node_id").is_not_null().all().over("source_id", "correlation_id")
    key = pl.when(by_node).then(pl.col("graph_node_id")).otherwise(pl.col("start_ns"))
    return (
        ops.with_columns(key.alias("_key"))
        .sort("source_id", "correlation_id", "_key", "kernel_id", nulls_last=True)
        .with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64)
            .over("source_id", "correlation_id")
            .alias("ordinal")
        )
        .select("source_id", "correlation_id", "ordinal", *_OP_COLS)
    )


_Node = tuple[str, "str | None", list[str]]  # kind, kernel name, stack
_Op = tuple[str, "int | None", "str | None", "str | None"]  # kind, kernel_id, name, mangled


def _agree(c: _Node, r: _Op) -> bool:
    if c[0] != r[0]:
        return False
    return c[1] is None or r[0] != "kernel" or c[1] in (r[2], r[3])


def _positional(nodes: list[_Node], ops: list[_Op]) -> list[int | None]:
    return [i if _agree(c, r) else None for i, (c, r) in enumerate(zip(nodes, ops, strict=True))]


def _forward(nodes: list[_Node], ops: list[_Op]) -> list[int | None]:
    """Each op takes the next node of its kind (and, for a kernel, of its known name); one with
    none stays unmatched."""
    out: list[int | None] = []
    at = 0
    for r in ops:
        named = r[0] == "kernel"  # copies and sets have no name to check
        j = next(
            (
                j
                for j in range(at, len(nodes))
                if (nodes[j][1] is not None or not named) and _agree(nodes[j], r)
            ),
            None,
        )
        out.append(j)
        at = at if j is None else j + 1
    return out


def _align(windows: dict[int, list[_Node]], ops: list[_Op]) -> tuple[int | None, list[int | None]]:
    """The window a replay is paired with and, per replayed op, its node there (None: none):
    by position in the windows of the replay's size, by the forward scan in windows that name
    their kernels; the most pairs win (then position, then the first window)."""
    tries: dict[tuple[int, int], list[int | None]] = {}
    for w, nodes in windows.items():
        if len(nodes) == len(ops):
            tries[(w, 0)] = _positional(nodes, ops)
        if any(n[1] is not None for n in nodes):
            tries[(w, 1)] = _forward(nodes, ops)
    if not tries:
        return None, [None] * len(ops)
    best = max(tries, key=lambda k: (sum(j is not None for j in tries[k]), -k[1], -k[0]))
    return best[0], tries[best]


def graft(captured: pl.DataFrame, replayed: pl.DataFrame) -> pl.DataFrame:
    """Per replayed kernel its captured operator stack: source_id, kernel_id, op, depth (0 the
    innermost), one row per operator; a kernel that matched no captured launch (or one outside
    every operator) has one row with a null op. `captured`: `captured_launches`; `replayed`:
    `replayed_ops`."""
    windows: dict[int, list[_Node]] = {}
    for w, kind, name, stack in captured.select("window", "kind", "kernel_name", "stack").rows():
        windows.setdefault(w, []).append((kind, name, stack))
    rows: list[tuple[Any, ...]] = []
    done: dict[tuple[_Op, ...], tuple[int | None, list[int | None]]] = {}
    for (sid, _corr), g in replayed.group_by("source_id", "correlation_id", maintain_order=True):
        ops: list[_Op] = list(g.select(_OP_COLS).rows())
        sig = tuple((o[0], None, o[2], o[3]) for o in ops)  # replays of one graph: one alignment
        if sig not in done:
            done[sig] = _align(windows, ops)
        w, at = done[sig]
        for op, j in zip(ops, at, strict=True):
            if op[1] is None:
                continue
            stack = windows[w][j][2] if w is not None and j is not None else []
            took = [(sid, op[1], name, d) for d, name in enumerate(stack)]
            rows += took or [(sid, op[1], None, 0)]
    schema = {"source_id": pl.String, "kernel_id": pl.Int64, "op": pl.String, "depth": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row")


def graft_counts(grafted: pl.DataFrame) -> tuple[int, int]:
    """(replayed kernels given a captured operator, replayed kernels that stay where they were)."""
    per = grafted.group_by("source_id", "kernel_id").agg(pl.col("op").is_not_null().any())
    took = int(per["op"].sum())
    return took, per.height - took
