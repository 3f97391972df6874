"""Host operators: self and inclusive time, and the GPU time of the kernels each one launched.

Definitions (written once; `ops`, `summary` and `compare --ops` use them):

* **Nesting.** On one (source, process, thread), operator B is a child of A when B starts inside A
  (A.start <= B.start < A.end); the parent is the innermost such A. Events are swept in order of
  (start, longer first), so of two operators with the same interval the first listed is the
  parent. A child that outlives its parent (clock rounding) is cut at the parent's end.
* **Inclusive time** of an operator: its duration. Per name, an instance nested inside another
  instance of the same name (recursion, `aten::to` in `aten::to`) is not added again, so a name's
  inclusive time is wall time under that name, never more.
* **Self time**: duration minus the time covered by its children (exclusive time).
* **Kernel attribution.** A launch call is the runtime/driver API call whose correlation id a
  kernel carries (same source, and same process where both give one). The kernel belongs to the
  deepest operator on the call's thread that holds the call's start: `kernel_self_ns` of a name is
  the GPU time of kernels launched directly by it, `kernel_inclusive_ns` also counts its
  descendants' kernels (each kernel once per name). Kernels without an enclosing operator (or
  without a launch call) go to a row whose `op` is null, so the GPU column adds up to the kernel
  time of the source.

Formats: the PyTorch profiler (Kineto) has operators (`ops` table). nsys and nvprof traces have
none; where a source has no operators, its NVTX ranges stand in (`basis` = "nvtx"): PyTorch's
`emit_nvtx` ranges ("aten::mm, seq = 12, op_id = 40") lose their `, key = value` suffixes, and
pyprof dict markers ("{'mod': 'torch', 'op': 'linear', …}") become `mod.op`. A source with
neither has no rows (and a warning).
"""

from __future__ import annotations

import re
import warnings
from array import array
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Frame = pl.DataFrame | pl.LazyFrame

OPS_COLUMNS: tuple[str, ...] = (
    "source_id",
    "op",
    "basis",
    "call_count",
    "inclusive_ns",
    "self_ns",
    "kernel_count",
    "kernel_self_ns",
    "kernel_inclusive_ns",
)

_OUT_SCHEMA = {
    "source_id": pl.String,
    "op": pl.String,
    "basis": pl.String,
    "call_count": pl.Int64,
    "inclusive_ns": pl.Int64,
    "self_ns": pl.Int64,
    "kernel_count": pl.Int64,
    "kernel_self_ns": pl.Int64,
    "kernel_inclusive_ns": pl.Int64,
}

_EMIT_NVTX_SUFFIX = re.compile(r",\s+\w+\s+=\s+.*$")
_PYPROF_MOD_OP = re.compile(r"'mod':\s*'([^']*)',\s*'op':\s*'([^']*)'")
_PYPROF_MARKER = re.compile(r"^\{'traceMarker':\s*\['([^']*)'")


def _collect(df: Frame) -> pl.DataFrame:
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def _dur() -> pl.Expr:
    return pl.coalesce(pl.col("duration_ns"), pl.col("end_ns") - pl.col("start_ns"))


def nvtx_op_name(name: str) -> str:
    """The operator name an NVTX range stands for (see the module docstring)."""
    m = _PYPROF_MOD_OP.search(name)
    if name.startswith("{") and m:
        return f"{m.group(1)}.{m.group(2)}"
    m = _PYPROF_MARKER.match(name)
    if m:
        return f"traceMarker {m.group(1)}"
    return _EMIT_NVTX_SUFFIX.sub("", name)


def host_ops(ops: Frame, markers: Frame | None = None) -> pl.DataFrame:
    """Operators per source with a `basis` column: the `ops` table, or for sources without
    operators their NVTX ranges (renamed by `nvtx_op_name`). Timed rows only."""
    o = _collect(
        ops.lazy()
        .filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
        .select("source_id", "process_id", "thread_id", "name", "start_ns", "end_ns")
        .with_columns(pl.lit("ops").alias("basis"))
    )
    if markers is None:
        return o
    have = set(o["source_id"].unique().to_list())
    m = _collect(
        markers.lazy().filter(
            (pl.col("category") == "nvtx")
            & pl.col("end_ns").is_not_null()
            & pl.col("start_ns").is_not_null()
            & pl.col("device_id").is_null()
            & ~pl.col("source_id").is_in(list(have))
        )
    )
    if m.height == 0:
        return o
    m = m.select(
        "source_id",
        "process_id",
        "thread_id",
        pl.col("name").fill_null("").map_elements(nvtx_op_name, return_dtype=pl.String),
        "start_ns",
        "end_ns",
        pl.lit("nvtx").alias("basis"),
    )
    return pl.concat([o, m.cast(o.schema)])


def launches(api_calls: Frame, kernels: Frame) -> pl.DataFrame:
    """Kernels joined to their launch calls: the kernel's source, correlation id, duration, name
    and the call's process, thread and start (null where no call carries the id)."""
    k = _collect(
        kernels.lazy().select(
            "source_id",
            "kernel_id",
            pl.col("process_id").alias("k_pid"),
            "correlation_id",
            pl.col("name").alias("kernel"),
            _dur().alias("kernel_ns"),
        )
    )
    a = _collect(
        api_calls.lazy()
        .filter(pl.col("correlation_id").is_not_null() & pl.col("start_ns").is_not_null())
        .select("source_id", "process_id", "thread_id", "correlation_id", "start_ns")
    )
    # One source at a time, joined on the integer id alone: a hash join keyed by the source's
    # name too takes several times the memory (hundreds of MB for a million calls).
    parts = [
        ks.join(
            a.filter(pl.col("source_id") == sid).drop("source_id"), on="correlation_id", how="left"
        )
        for (sid,), ks in k.with_row_index("_kr").group_by("source_id", maintain_order=True)
    ]
    j = (
        pl.concat(parts).sort("_kr", maintain_order=True).drop("_kr")
        if parts
        else k.join(a, on=["source_id", "correlation_id"], how="left")
    )
    # nsys numbers correlation ids per process: where both sides name a process they must agree.
    ok = pl.col("k_pid").is_null() | pl.col("process_id").is_null()
    j = j.filter(ok | (pl.col("k_pid") == pl.col("process_id")))
    # A kernel whose id matched no call (or only calls of another process) stays, unattributed.
    lost = k.join(j.select("source_id", "kernel_id"), on=["source_id", "kernel_id"], how="anti")
    if lost.height:
        j = pl.concat([j, lost], how="diagonal")
    return j.unique(["source_id", "kernel_id"], keep="first", maintain_order=True).drop("k_pid")


def op_tree(ops: pl.DataFrame, calls: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Sweep each thread once: per operator its parent row, child time and whether a same-name
    ancestor exists; per launch call the operator row that encloses it (-1 for none).

    `ops` needs source_id, process_id, thread_id, name, start_ns, end_ns; `calls` source_id,
    process_id, thread_id, start_ns. Returns (ops + `_row`, `parent`, `child_ns`, `nested_same`),
    (calls + `owner`), both in their input order.

    The sweep's stack (operators open, innermost last; those ended by a start popped from the
    top) goes through the operators only. A call's owner is the top of that stack at its start:
    the last operator to start before it on its thread (at the same start, operators first) or,
    where that one has ended by then, the first of its ancestors (its `parent`, and theirs) that
    has not: the stack below an operator is its parent's chain until it is popped. The owners
    are found for all calls at once, a level of ancestors at a time.

    Below `_NUMPY_FROM` events and without calls (`summary`'s top operators) nothing here needs
    numpy, and it is not imported: ~70 ms of a `traceanalyze summary` process.
    """
    n_ops = ops.height
    ev = _sorted_events(ops, calls)
    grp = ev.select(pl.struct("source_id", "process_id", "thread_id").rle_id()).to_series()
    keep = ev["_i"] < n_ops
    sweep = ev.select("_i", "start_ns", "end_ns", "_c").filter(keep)  # operators, narrow
    parent, child, nested_same = _sweep(sweep, grp.filter(keep), n_ops)
    del sweep
    o = ops.with_columns(parent, child, nested_same).with_row_index("_row")
    if calls.height == 0:
        return o, calls.with_columns(pl.lit(None, dtype=pl.Int64).alias("owner"))
    ev = ev.select("_i", "start_ns")
    owner = _owners(
        ev, grp.to_numpy(), keep.to_numpy(), n_ops, parent.to_numpy(), ops["end_ns"].to_numpy()
    )
    c = calls.with_columns(pl.Series("owner", owner))
    return o, c


def _sweep(ev: pl.DataFrame, grp: pl.Series, n_ops: int) -> tuple[pl.Series, pl.Series, pl.Series]:
    """The operators' sweep (`ev`: operator events in sweep order, `grp`: their thread run):
    per operator row its parent row, child time and whether a same-name ancestor is open
    (Series `parent`, `child_ns`, `nested_same`, in operator row order)."""
    idx = ev["_i"]  # names as numbers in `_c` (equal names, equal numbers): no Python strings
    codes = ev["_c"]
    top_code = int(codes.max() or 0) if len(codes) else 0  # type: ignore[arg-type]
    if top_code >= 2 * len(codes) + 1024:
        # category codes are process-wide: made dense, so that a list indexed by them is small
        codes = codes.rank("dense").cast(pl.Int64) - 1
        ev = ev.with_columns(codes.alias("_c"))
        top_code = len(codes)
    parent = array("q", [-1]) * n_ops  # machine integers, not Python objects
    child = array("q", [0]) * n_ops
    nested_same = bytearray(n_ops)
    # open operators per name number: a list, not a Counter (half the sweep's time)
    on_stack = [0] * (top_code + 1)
    stack: list[tuple[int, int, int]] = []  # open operators: (end, row, name number)
    push, pop = stack.append, stack.pop
    cur = None
    # The sweep goes through the events in slices, so that only one slice's values are Python
    # objects at a time (millions of operators would take gigabytes as Python ints).
    for lo in range(0, ev.height, _SLICE):
        hi = min(lo + _SLICE, ev.height)
        sl = ev.slice(lo, hi - lo)
        gs, ii = grp.slice(lo, hi - lo).to_list(), idx.slice(lo, hi - lo).to_list()
        ss, es = sl["start_ns"].to_list(), sl["end_ns"].to_list()
        cs = sl["_c"].to_list()
        for g, i, s, e, c in zip(gs, ii, ss, es, cs, strict=True):
            if g != cur:  # another thread: nothing open
                cur = g
                for _, _, open_c in stack:
                    on_stack[open_c] -= 1
                stack.clear()
            while stack and stack[-1][0] <= s:
                on_stack[pop()[2]] -= 1
            if stack:
                top_end, top, _ = stack[-1]
                parent[i] = top
                child[top] += (e if e < top_end else top_end) - s
            if on_stack[c]:
                nested_same[i] = 1
            push((e, i, c))
            on_stack[c] += 1
    return (
        _int_series("parent", parent),
        _int_series("child_ns", child),
        pl.Series("nested_same", nested_same, dtype=pl.UInt8).cast(pl.Boolean),
    )


def _int_series(name: str, values: array[int]) -> pl.Series:
    """An Int64 Series of an `array('q')`: through numpy's zero-copy view when the array is large
    (polars reads a plain array element by element: 0.1 s for 5 M), else directly."""
    if len(values) < _NUMPY_FROM:
        return pl.Series(name, values, dtype=pl.Int64)
    import numpy as np

    return pl.Series(name, np.frombuffer(values, dtype=np.int64))


def _owners(
    ev: pl.DataFrame,
    grp: npt.NDArray[Any],
    is_op: npt.NDArray[np.bool_],
    n_ops: int,
    parent: npt.NDArray[np.int64],
    op_end: npt.NDArray[Any],
) -> npt.NDArray[np.int64]:
    """Per call row the operator row on top of the sweep's stack at its start (-1: none)."""
    import numpy as np

    pos = np.arange(ev.height)
    last = np.maximum.accumulate(np.where(is_op, pos, -1))  # the last operator event so far
    at = np.flatnonzero(~is_op)
    before = last[at]
    ok = before >= 0
    ok[ok] = grp[before[ok]] == grp[at[ok]]  # on the call's thread
    i = ev["_i"].to_numpy().astype(np.int64)
    cand = np.where(ok, i[np.maximum(before, 0)], -1)
    start = ev["start_ns"].to_numpy()[at]
    while True:
        live = np.flatnonzero(cand >= 0)
        done = op_end[cand[live]] > start[live]
        up = live[~done]
        if up.size == 0:
            break
        cand[up] = parent[cand[up]]
    owner = np.full(at.size, -1, dtype=np.int64)
    owner[i[at] - n_ops] = cand
    return owner


_SLICE = 1 << 16
# From this many events on, sorting and column building go through numpy (less memory than a
# polars sort of several keys; zero-copy arrays); below it, polars alone (no numpy import).
_NUMPY_FROM = 1 << 18


def _name_code(col: str) -> pl.Expr:
    """One integer per name, equal for equal names (a null is the empty name)."""
    return pl.col(col).fill_null("").cast(pl.Categorical).to_physical().cast(pl.Int64)


def _sorted_events(ops: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Operators and launch calls as one event list (`_i`: op row, then n_ops + call row; `_c`:
    the operator's name as a number, -1 for a call), in sweep order per thread."""
    ev = pl.concat(
        [
            ops.select(
                "source_id",
                "process_id",
                "thread_id",
                "start_ns",
                "end_ns",
                pl.lit(0).alias("_kind"),
                _name_code("name").alias("_c"),
            ),
            calls.select(
                "source_id",
                "process_id",
                "thread_id",
                "start_ns",
                pl.col("start_ns").alias("end_ns"),
                pl.lit(1).alias("_kind"),
                pl.lit(-1, dtype=pl.Int64).alias("_c"),
            ),
        ],
        how="vertical_relaxed",
    ).with_row_index("_i")

    # Per thread (sources in any order, nulls last), operators before calls at the same start (a
    # call at an op's first ns is inside it), and the longer operator first (it is the parent).
    # `_i` last: a total order, the same whichever sort makes it.
    if ev.height < _NUMPY_FROM:
        return (
            ev.with_columns(_name_code("source_id").alias("_src"))
            .sort(
                ["_src", "process_id", "thread_id", "start_ns", "_kind", "end_ns", "_i"],
                descending=[False, False, False, False, False, True, False],
                nulls_last=True,
            )
            .drop("_src")
        )
    # numpy's lexsort of integer keys: a third of the memory of a polars sort keyed by the
    # source id string (~300 MB less for 2.4 M events).
    import numpy as np

    def key(col: str) -> list[npt.NDArray[Any]]:
        c = ev[col]
        return [c.fill_null(0).to_numpy(), c.is_null().to_numpy()]

    src = ev.select(_name_code("source_id")).to_series().to_numpy()
    last_first = [ev["_i"].to_numpy(), -ev["end_ns"].to_numpy(), ev["_kind"].to_numpy()]
    order = np.lexsort(
        [*last_first, ev["start_ns"].to_numpy(), *key("thread_id"), *key("process_id"), src]
    )
    return ev[order]


def op_stats(
    ops: Frame,
    api_calls: Frame,
    kernels: Frame,
    markers: Frame | None = None,
    *,
    launching_processes_only: bool = False,
    grafted: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per source and operator name: calls, inclusive and self time, kernels launched and
    their GPU time (self and inclusive), sorted by inclusive time; see the module docstring.

    Pass `markers` to let NVTX ranges stand in for sources without operators.
    `launching_processes_only` keeps the operators of the processes that launched `kernels`
    (when the kernels were filtered to some devices: one rank's operators, not every rank's).
    `grafted`: graph-replay kernels' captured operator stacks (`analyses.graph_capture`), which
    add the GRAFT_COLUMNS."""
    host, kern = host_ops(ops, markers), launches(api_calls, kernels)
    if launching_processes_only:
        procs = kern.select("source_id", "process_id").drop_nulls().unique()
        host = host.join(procs, on=["source_id", "process_id"], how="semi")
    return _op_stats(host, kern, warn_none=True, grafted=grafted)[0]


def op_stats_kernels(
    ops: Frame, api_calls: Frame, kernels: Frame, markers: Frame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`op_stats` and `op_kernels` of the same inputs from one sweep (without op_stats' warning
    that no source has operators: the caller says what that means for it)."""
    host, kern = host_ops(ops, markers), launches(api_calls, kernels)
    st, tree, owned = _op_stats(host, kern, warn_none=False)
    return st, _kernel_ops(tree, owned, kern)


def _op_stats(
    host: pl.DataFrame,
    kern: pl.DataFrame,
    *,
    warn_none: bool,
    grafted: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """op_stats of `host_ops` and `launches` frames, and the sweep's (tree, owned); `grafted`:
    see `_kernel_rows`."""
    if host.height == 0 and warn_none:
        warnings.warn(
            "no host operators (PyTorch profiler ops) or NVTX ranges: kernels cannot be "
            "attributed to operators",
            stacklevel=3,
        )
    no_ops = set(kern["source_id"].unique().to_list()) - set(host["source_id"].unique().to_list())
    for sid in sorted(no_ops):
        warnings.warn(f"source {sid} has no host operators or NVTX ranges", stacklevel=3)
    calls = kern.filter(pl.col("start_ns").is_not_null())
    tree, owned = op_tree(host, calls)
    rows = _name_rows(tree)
    gpu = _kernel_rows(tree, owned, kern, grafted)
    out = rows.join(gpu, on=["source_id", "op"], how="full", coalesce=True, nulls_equal=True)
    basis = tree.group_by("source_id").agg(pl.col("basis").first().alias("_b"))
    out = out.join(basis, on="source_id", how="left").with_columns(
        pl.coalesce("basis", "_b").alias("basis")
    )
    cols = OPS_COLUMNS + (GRAFT_COLUMNS if grafted is not None else ())
    stats = (
        out.with_columns(pl.col(c).fill_null(0) for c in cols[3:])
        .select(cols)
        .cast({c: _OUT_SCHEMA.get(c, pl.Int64) for c in cols})
        .sort(
            ["source_id", "inclusive_ns", "kernel_inclusive_ns", "op"],
            descending=[False, True, True, False],
            nulls_last=True,
        )
    )
    return stats, tree, owned


def _name_rows(tree: pl.DataFrame) -> pl.DataFrame:
    d = pl.col("end_ns") - pl.col("start_ns")
    return tree.group_by("source_id", pl.col("name").alias("op")).agg(
        pl.col("basis").first(),
        pl.len().cast(pl.Int64).alias("call_count"),
        d.filter(~pl.col("nested_same")).sum().alias("inclusive_ns"),
        (d - pl.col("child_ns")).clip(lower_bound=0).sum().alias("self_ns"),
    )


def _ancestor_chains(tree: pl.DataFrame, owner: np.ndarray[Any, Any]) -> tuple[pl.DataFrame, int]:
    """Every (kernel `_k`, ancestor operator) pair as `_k, source_id, op`, one level of the
    ancestor chains at a time, in arrays; and how many pairs the first level (each kernel's own
    operator) gave: they come first."""
    import numpy as np

    parent = tree["parent"].to_numpy()
    ki = np.flatnonzero(owner >= 0)
    row = owner[ki]
    kis, rows = [], []
    while ki.size:
        kis.append(ki)
        rows.append(row)
        row = parent[row]
        ki, row = ki[row >= 0], row[row >= 0]
    at = pl.Series("_r", np.concatenate(rows) if rows else [], dtype=pl.Int64)
    names = tree["name"].fill_null("").cast(pl.Categorical)
    chain = pl.DataFrame(
        {
            "_k": pl.Series(np.concatenate(kis) if kis else [], dtype=pl.Int64),
            "source_id": tree["source_id"].gather(at),
            "op": names.gather(at),
        }
    )
    return chain, len(kis[0]) if kis else 0


# With a graph capture joined (`analyses.graph_capture`): of a row's `kernel_count`, the replayed
# kernels given to it from the capture, and those of a replay that matched no captured launch
GRAFT_COLUMNS: tuple[str, ...] = ("captured_kernel_count", "uncaptured_kernel_count")


def _kernel_rows(
    tree: pl.DataFrame,
    owned: pl.DataFrame,
    kern: pl.DataFrame,
    grafted: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per (source, op name): kernels launched directly, their time, and time including
    descendants' kernels (walk each kernel's ancestor chain; each name counted once per kernel).

    `grafted` (source_id, kernel_id, op, depth; op null for a replayed kernel that matched no
    captured launch): graph-replay kernels' captured operator stacks, depth 0 innermost. Such a
    stack hangs below the operator around the replay: its innermost operator launched the
    kernel, and every name in it counts the kernel in its inclusive time."""
    by_kernel = owned.select("source_id", "kernel_id", "owner")
    k = kern.join(by_kernel, on=["source_id", "kernel_id"], how="left").select(
        "source_id", "kernel_id", pl.col("owner").fill_null(-1), pl.col("kernel_ns").fill_null(0)
    )
    chain, n_direct = _ancestor_chains(tree, k["owner"].to_numpy())
    chain = chain.with_columns(pl.col("op").cast(pl.String))
    direct, outside_k = chain.head(n_direct), k.with_row_index("_k").filter(pl.col("owner") < 0)
    if grafted is not None:
        direct, chain, outside_k = _graft(direct, chain, outside_k, k, grafted)
    ns = k["kernel_ns"]

    def with_ns(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(ns.gather(df["_k"]).alias("kernel_ns"))

    # the chain's first level is each kernel's own operator: its direct kernels
    incl = (
        with_ns(chain.unique(["_k", "op"]))
        .group_by("source_id", "op")
        .agg(pl.col("kernel_ns").sum().alias("kernel_inclusive_ns"))
    )
    agg = [pl.len().alias("kernel_count"), pl.col("kernel_ns").sum().alias("kernel_self_ns")]
    if grafted is not None:
        agg += [pl.col(c).sum() for c in GRAFT_COLUMNS]
    rows_own = with_ns(direct).group_by("source_id", "op").agg(agg)
    outside = (
        outside_k.group_by("source_id")
        .agg(*agg, pl.col("kernel_ns").sum().alias("kernel_inclusive_ns"))
        .with_columns(pl.lit(None, dtype=pl.String).alias("op"))
    )
    inside = incl.join(rows_own, on=["source_id", "op"], how="left").with_columns(
        pl.col("kernel_count", "kernel_self_ns").fill_null(0)
    )
    cols = ["source_id", "op", "kernel_count", "kernel_self_ns", "kernel_inclusive_ns"]
    cols += list(GRAFT_COLUMNS) if grafted is not None else []
    return (
        pl.concat([inside.select(cols), outside.select(cols)], how="vertical_relaxed")
        .cast({c: pl.String if c in ("source_id", "op") else pl.Int64 for c in cols})
        .sort(pl.col("source_id"), pl.col("op").fill_null(""))
    )


def _graft(
    direct: pl.DataFrame,
    chain: pl.DataFrame,
    outside: pl.DataFrame,
    k: pl.DataFrame,
    grafted: pl.DataFrame,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """`_kernel_rows`' direct, chain and outside frames with the captured stacks grafted: an
    attributed kernel's direct operator becomes its stack's innermost, its chain gains the
    stack's names; direct and outside rows get the GRAFT_COLUMNS flags."""
    g = grafted.join(
        k.with_row_index("_k").select(pl.col("_k").cast(pl.Int64), "source_id", "kernel_id"),
        on=["source_id", "kernel_id"],
        how="inner",
    )
    took = g.filter(pl.col("op").is_not_null())
    stack = took.select("_k", "source_id", "op")
    inner = took.filter(pl.col("depth") == 0).select("_k", "source_id", "op")
    flags = g.group_by("_k").agg(
        pl.col("op").is_not_null().any().cast(pl.Int64).alias(GRAFT_COLUMNS[0]),
        pl.col("op").is_null().all().cast(pl.Int64).alias(GRAFT_COLUMNS[1]),
    )
    moved = inner["_k"].implode()
    kept = direct.with_columns(pl.col("_k").cast(pl.Int64)).filter(~pl.col("_k").is_in(moved))
    direct = pl.concat([kept, inner], how="vertical_relaxed")
    chain = pl.concat(
        [chain.with_columns(pl.col("_k").cast(pl.Int64)), stack], how="vertical_relaxed"
    )
    outside = outside.with_columns(pl.col("_k").cast(pl.Int64)).filter(~pl.col("_k").is_in(moved))

    def flagged(df: pl.DataFrame) -> pl.DataFrame:
        return df.join(flags, on="_k", how="left").with_columns(
            pl.col(c).fill_null(0) for c in GRAFT_COLUMNS
        )

    return flagged(direct), chain, flagged(outside)


def op_kernels(
    ops: Frame, api_calls: Frame, kernels: Frame, markers: Frame | None = None
) -> pl.DataFrame:
    """Every kernel with the operator that launched it (`op`, null for none): source_id,
    kernel_id, kernel (name), kernel_ns, op."""
    host = host_ops(ops, markers)
    kern = launches(api_calls, kernels)
    tree, owned = op_tree(host, kern.filter(pl.col("start_ns").is_not_null()))
    return _kernel_ops(tree, owned, kern)


def _kernel_ops(tree: pl.DataFrame, owned: pl.DataFrame, kern: pl.DataFrame) -> pl.DataFrame:
    """op_kernels from the sweep's (tree, owned) and the `launches` frame."""
    op_of = tree.select(pl.col("_row").cast(pl.Int64).alias("owner"), pl.col("name").alias("op"))
    own = owned.select("source_id", "kernel_id", "owner").join(
        op_of, on="owner", how="left", maintain_order="left"
    )
    return kern.select("source_id", "kernel_id", "kernel", "kernel_ns").join(
        own.drop("owner"), on=["source_id", "kernel_id"], how="left"
    )
