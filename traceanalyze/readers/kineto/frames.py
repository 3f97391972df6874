"""Kineto JSON: decoded events into frames (kernels, memcpy, api_calls, ops, markers), devices
and iterations."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import polars as pl

from ...errors import MalformedInput
from ...schema import GRAPH_LAUNCH_API
from ..common.core import PathLike, demangle_column, warn
from .structs import (
    _INSTANT,
    _MEMSET,
    _NO_ARGS,
    _OPS,
    _ROLE,
    _ROLE_CODE,
    _ROLE_NAMES,
    _STEP,
    _AnyEvent,
    _Device,
)

# --- events -> frames ---------------------------------------------------------------------------


def _us_to_ns(col: str | pl.Expr) -> pl.Expr:
    """Decimal µs text ('1712195495505583.123', '4.928', '7') -> ns as Int128, exactly.

    Polars parses the text straight into a 3-digit fixed-point decimal (never through float64);
    finer digits round half to even. The decimal's physical value, an Int128 scaled by 10^3, is
    the number of ns (cheaper than multiplying the decimal by 1000: 1.5 ms less per read of the
    ResNet-50 trace). Non-numeric values become null (`_check_times` names them), as do values
    of more than 27 integer digits: int64 ns hold at most 16 digits of µs, and with at most 30
    digits adding the base time and the duration cannot overflow Int128. `_ns_int` casts to
    int64 last.
    """
    expr = pl.col(col) if isinstance(col, str) else col
    return expr.cast(pl.Decimal(30, 3), strict=False).to_physical()


def _ns_int(expr: pl.Expr) -> pl.Expr:
    """Int128 ns -> int64; null where it does not fit (`_check_times` reports those)."""
    return expr.cast(pl.Int64, strict=False)


def _check_times(df: pl.DataFrame, table: str, path: PathLike) -> None:
    """Every event has a `ts` that is a number of µs fitting int64 ns, and its `dur` (when it
    has one) too; a complete event without `dur` is kept with a null end and a warning.

    Chrome trace events always carry `ts`, and Kineto always writes `dur` on complete events:
    anything else is a damaged or hand-edited trace, named here rather than turned into nulls.
    """
    dur = df["dur"]
    # Null counts are free: with no null start (then no null ts either) and end null exactly
    # where dur is (a null dur gives a null end), every time converted; the filter (a query)
    # only runs when something is wrong.
    if df["start_ns"].null_count() or df["end_ns"].null_count() != dur.null_count():
        _bad_times(df, table, path)
    no_dur = dur.null_count()
    if no_dur and "ph" in df.columns:  # instant events have no duration by definition
        no_dur = df.filter(pl.col("ph") == "X")["dur"].null_count()
    if no_dur:
        warn(f"{path}: {table}: {no_dur} complete event(s) without dur: end and duration null")


def _bad_times(df: pl.DataFrame, table: str, path: PathLike) -> None:
    """Raise for the first event whose ts or dur did not convert (`_check_times`), if any."""
    bad = df.filter(
        pl.col("ts").is_null()
        | pl.col("start_ns").is_null()
        | (pl.col("dur").is_not_null() & pl.col("end_ns").is_null())
    )
    if bad.height:
        e = bad.row(0, named=True)
        if e["ts"] is None:
            why = "has no ts"
        elif e["start_ns"] is None:
            why = f"has ts {e['ts']!r}, not a time in µs that fits int64 ns"
        else:
            why = f"has dur {e['dur']!r}, not a duration in µs that fits int64 ns"
        more = f" ({bad.height} such events)" if bad.height > 1 else ""
        raise MalformedInput(f"event {e['name']!r} {why}{more}", path=path, table=table)


def _text(values: list[Any], name: str) -> pl.Series:
    """ts/dur as text: str from `float_hook`, int for integer literals (older traces)."""
    try:
        return pl.Series(name, values, dtype=pl.String)
    except TypeError:
        return pl.Series(name, values, dtype=pl.String, strict=False)


# One list comprehension per attribute, written out: the interpreter specializes `e.<name>` in
# each for the one struct type it sees (a direct slot read), which `map(attrgetter(name), ...)`
# and `getattr` cannot do; 40% faster (4-5 ms per read of the ResNet-50 trace).
_GET: dict[str, Callable[[Any], list[Any]]] = {
    # events
    "ph": lambda ev: [e.ph for e in ev],
    "cat": lambda ev: [e.cat for e in ev],
    "name": lambda ev: [e.name for e in ev],
    "pid": lambda ev: [e.pid for e in ev],
    "tid": lambda ev: [e.tid for e in ev],
    "ts": lambda ev: [e.ts for e in ev],
    "dur": lambda ev: [e.dur for e in ev],
    "args": lambda ev: [e.args for e in ev],
    # args
    "external_id": lambda ev: [a.external_id for a in ev],
    "external_id_old": lambda ev: [a.external_id_old for a in ev],
    "device": lambda ev: [a.device for a in ev],
    "context": lambda ev: [a.context for a in ev],
    "stream": lambda ev: [a.stream for a in ev],
    "correlation": lambda ev: [a.correlation for a in ev],
    "registers": lambda ev: [a.registers for a in ev],
    "smem": lambda ev: [a.smem for a in ev],
    "grid": lambda ev: [a.grid for a in ev],
    "block": lambda ev: [a.block for a in ev],
    "bytes": lambda ev: [a.bytes for a in ev],
    "cbid": lambda ev: [a.cbid for a in ev],
    "cid": lambda ev: [a.cid for a in ev],
    "graph_id": lambda ev: [a.graph_id for a in ev],
    "graph_node_id": lambda ev: [a.graph_node_id for a in ev],
    "kernel": lambda ev: [a.kernel for a in ev],
}


def _col(events: Any, attr: str) -> list[Any]:
    return _GET[attr](events)


def _ints(events: Any, attr: str, name: str | None = None) -> pl.Series:
    """Int64 column; strings ('Spans', '0x0', 'stream 7') and other non-integers become null."""
    return pl.Series(name or attr, _col(events, attr), dtype=pl.Int64, strict=False)


def _or(a: pl.Series, b: Callable[[], pl.Series]) -> pl.Series:
    """`a`, its nulls filled from `b()`; `b` is built only when `a` has nulls (a free check)."""
    return a.fill_null(b()) if a.null_count() else a


def _strs(events: Any, attr: str, name: str | None = None) -> pl.Series:
    return pl.Series(name or attr, _col(events, attr), dtype=pl.String, strict=False)


def _cats(sub: list[Any], name: str, of: Callable[[str], str] | None = None) -> pl.Series:
    """The events' categories (or `of` each) as a String column. A batch's events of one table
    mostly share one category (every API call `cuda_runtime`, every op `cpu_op`): the column is
    then its one value repeated (`new_from_index`; `pl.repeat` runs a query and was no faster
    than the list), not a Python string per row (6,000 ops: 0.01 instead of 0.11 ms)."""
    cats = _col(sub, "cat")
    first = cats[0]
    if cats.count(first) == len(cats) and (first is None or isinstance(first, str)):
        value = of(first) if of is not None and first is not None else first
        repeated: pl.Series = pl.Series(name, [value], dtype=pl.String).new_from_index(0, len(cats))
        return repeated
    values = cats if of is None else list(map(of, cats))
    return pl.Series(name, values, dtype=pl.String, strict=False)


_CODES = (None, *range(len(_ROLE_NAMES)))


class _Dispatch(dict[Any, Callable[[Any], None]]):
    """Category -> the `append` of its table's group (`_ROLE_CODE`; categories of no table share
    the group of code None), worked out once per category a batch holds."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[int | None, list[Any]] = {}

    def __missing__(self, cat: Any) -> Callable[[Any], None]:
        code = _ROLE_CODE.get(cat.lower()) if isinstance(cat, str) else None
        append = self[cat] = self.groups.setdefault(code, []).append
        return append


def _split(events: list[Any]) -> dict[str, list[Any]]:
    """Events of one batch grouped by the table they feed (in file order)."""
    if events and isinstance(events[0], _AnyEvent):
        return _split_untagged(events)
    # skipped phases have cat None as a class attribute: the group of code None
    dispatch = _Dispatch()
    try:
        # One pass appending each event to its group, one dict lookup each: faster than a
        # columnar group-by and a gather per table, than computing the codes first, and than
        # a category -> code -> group lookup (5.1 vs 4.6 ms on the ResNet-50 trace).
        for e in events:
            dispatch[e.cat](e)
    except TypeError:  # an unhashable category (a list…): not Kineto, take the slow path
        return _split_untagged(events)
    groups = dispatch.groups
    return {
        _ROLE_NAMES[code]: groups[code] for code in _CODES if code is not None and groups.get(code)
    }


def _split_untagged(events: list[Any]) -> dict[str, list[Any]]:
    """`_split` for events decoded without the phase tag (a phase outside the Chrome spec)."""
    out: dict[str, list[Any]] = {}
    for e in events:
        c = e.cat if isinstance(e.cat, str) else None
        if e.ph == "X":
            role = _ROLE.get(c.lower()) if c is not None else None
        elif e.ph in ("i", "I"):
            role = "markers"
        else:
            role = None
        if role is not None:
            out.setdefault(role, []).append(e)
    return out


def _args(sub: list[Any]) -> list[Any]:
    args = _col(sub, "args")
    if isinstance(sub[0], _AnyEvent) and None in args:  # tagged events never hold None
        args = [a if a is not None else _NO_ARGS for a in args]
    return args


def _times(sub: list[Any]) -> list[pl.Series]:
    # converted to ns once per table, after the batches are concatenated (read_kineto_json)
    return [_text(_col(sub, "ts"), "ts"), _text(_col(sub, "dur"), "dur")]


def _gpu_ids(sub: list[Any], args: list[Any]) -> list[pl.Series]:
    # formats.md §5: GPU events use pid = device and tid = stream; args say it too when present
    # (old traces write tid "stream 7", a string, so args come first).
    return [
        _or(_ints(args, "device"), lambda: _ints(sub, "pid")).alias("device_id"),
        _ints(args, "context", "context_id"),
        _or(_ints(args, "stream"), lambda: _ints(sub, "tid")).alias("stream_id"),
        _ints(args, "correlation", "correlation_id"),
        _ints(args, "graph_id"),
        _ints(args, "graph_node_id"),
    ]


def _kernels(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    dims = []
    for g in ("grid", "block"):
        xyz = [v if type(v) is list and len(v) == 3 else _NO_DIM for v in _col(args, g)]
        for i, x in enumerate("xyz"):
            col = list(map(operator.itemgetter(i), xyz))
            dims.append(pl.Series(f"{g}_{x}", col, dtype=pl.Int64, strict=False))
    return pl.DataFrame(
        [
            *_gpu_ids(sub, args),
            _strs(sub, "name"),
            *_times(sub),
            *dims,
            _ints(args, "registers", "registers_per_thread"),
            _ints(args, "smem", "total_smem_bytes"),
        ]
    )


_NO_DIM = (None, None, None)


def _memcpy(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    names = _strs(sub, "name")
    # per distinct (category, name): a batch holds a handful, so no per-table string queries
    pairs = zip(_col(sub, "cat"), names.to_list(), strict=True)
    kinds = list(map(_CopyKinds().__getitem__, pairs))
    return pl.DataFrame(
        [
            names,
            *_gpu_ids(sub, args),
            *(
                pl.Series(col, [k[i] for k in kinds], dtype=pl.String)
                for i, col in enumerate(("kind", "src_kind", "dst_kind"))
            ),
            _ints(args, "bytes", "size_bytes"),
            *_times(sub),
        ]
    )


class _CopyKinds(dict[tuple[str, "str | None"], tuple["str | None", ...]]):
    """(category, name) -> (kind, src_kind, dst_kind): `Memcpy HtoD (Pageable -> Device)` gives
    HtoD, Pageable, Device; a memset category gives memset, null and the `Memset (Device)` name's
    Device. `name` is the column's text (polars' rendering of a non-string name)."""

    def __missing__(self, key: tuple[str, str | None]) -> tuple[str | None, ...]:
        cat, name = key
        if cat.lower() in _MEMSET:  # cat is a string: it chose the table
            dst = None
            if name is not None and name.startswith("Memset ("):
                dst = name.removeprefix("Memset (").removesuffix(")")
            out: tuple[str | None, ...] = ("memset", None, dst)
        elif name is None:
            out = (None, None, None)
        else:
            # polars' split_exact(sep, 1): the first two pieces of a full split
            parts = name.removeprefix("Memcpy ").split(" (")
            ends = parts[1].removesuffix(")").split(" -> ") if len(parts) > 1 else [None]
            out = (parts[0], ends[0], ends[1] if len(ends) > 1 else None)
        self[key] = out
        return out


def _finish_memcpy(df: pl.DataFrame) -> pl.DataFrame:
    # the kinds are made per batch (`_CopyKinds`); `name` was kept for `_check_times`
    return df.select(
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
        "graph_id",
        "graph_node_id",
        "kind",
        "src_kind",
        "dst_kind",
        "size_bytes",
        *_TIMES,
    )


def _api_calls(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    return pl.DataFrame(
        [
            _ints(sub, "pid", "process_id"),
            _ints(sub, "tid", "thread_id"),
            _ints(args, "correlation", "correlation_id"),
            # names are plain (cudaLaunchKernel, cuLaunchKernel, hipMemcpyWithStream): no
            # nsys-style `_v7000` suffix to strip
            _cats(sub, "api", _Api().__getitem__),
            _strs(sub, "name"),
            # ROCm writes the HIP API id as `cid`
            _or(_ints(args, "cbid"), lambda: _ints(args, "cid")).alias("callback_id"),
            # ROCm's launch calls name their kernel (`args.kernel`), during graph capture too
            _strs(args, "kernel", "kernel_name"),
            *_times(sub),
        ]
    )


class _Api(dict[str, str]):
    """Category (`cuda_runtime`, `cuda_driver`, `Runtime`: a string, or the event would not be
    an API call) -> `api`, worked out once per category a batch holds (a few dict lookups cost
    less than lower-casing every row in a query: ~0.9 ms per read of the ResNet-50 trace)."""

    def __missing__(self, cat: str) -> str:
        api = self[cat] = "driver" if cat.lower() == "cuda_driver" else "runtime"
        return api


def _ops(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    return pl.DataFrame(
        [
            _ints(sub, "pid", "process_id"),
            _ints(sub, "tid", "thread_id"),
            _strs(sub, "name"),
            _cats(sub, "category"),
            _or(_ints(args, "external_id"), lambda: _ints(args, "external_id_old")),
            *_times(sub),
        ]
    )


def _markers(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    return pl.DataFrame(
        [
            _strs(sub, "ph"),
            _cats(sub, "category"),
            _ints(sub, "pid"),
            _ints(sub, "tid"),
            _ints(args, "device"),
            _ints(args, "stream"),
            _strs(sub, "name"),
            *_times(sub),
        ]
    )


def _finish_markers(df: pl.DataFrame) -> pl.DataFrame:
    on_gpu = pl.col("category").str.to_lowercase() == "gpu_user_annotation"
    instant = pl.col("ph") != "X"
    return df.select(
        pl.when(on_gpu).then(None).otherwise(pl.col("pid")).alias("process_id"),
        pl.when(on_gpu).then(None).otherwise(pl.col("tid")).alias("thread_id"),
        pl.when(on_gpu).then(pl.coalesce("device", "pid")).alias("device_id"),
        pl.when(on_gpu).then(pl.coalesce("stream", "tid")).alias("stream_id"),
        "name",
        pl.col("category").replace(_INSTANT, None),
        "start_ns",
        pl.when(~instant).then(pl.col("end_ns")).alias("end_ns"),
        pl.when(~instant).then(pl.col("duration_ns")).alias("duration_ns"),
    )


def _finish_kernels(df: pl.DataFrame) -> pl.DataFrame:
    # launch index in start order (the frame is sorted by then). ROCm traces keep some kernel
    # names mangled (`_ZN5aiter24add_rmsnorm_quant_kernel…`, formats.md section 10): demangled
    # as nsys' are, the mangled text kept in `mangled_name`.
    name = df["name"]
    mangled = name.str.starts_with("_Z")
    if mangled.any():
        df = df.with_columns(
            demangle_column(name),
            pl.when(mangled).then(name).otherwise(None).alias("mangled_name"),
        )
    return df.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("kernel_id"))


GRAPH_TABLES = ("kernels", "memcpy")


def graph_correlations(api_calls: pl.DataFrame) -> pl.Series:
    """Correlation ids of the graph launch calls (`cudaGraphLaunch`, `hipGraphLaunch`, …) of an
    `api_calls` frame (raw or finished: both have `name` and `correlation_id`). Every GPU op of
    one replay carries its launch's correlation id (formats.md section 10)."""
    if api_calls.height == 0:
        return pl.Series("correlation_id", [], dtype=pl.Int64)
    graph = api_calls.filter(pl.col("name").str.contains(GRAPH_LAUNCH_API))
    ids: pl.Series = graph["correlation_id"].drop_nulls().unique().sort()
    return ids


def flag_graph(df: pl.DataFrame, launches: pl.Series) -> pl.DataFrame:
    """`graph_launch` on a kernels or memcpy frame: its correlation id is a graph launch's, or
    the trace gives it graph ids (Kineto's `graph id` / `graph node id`)."""
    by_call = pl.col("correlation_id").is_in(launches.implode()).fill_null(False)
    ids = pl.col("graph_id").is_not_null() | pl.col("graph_node_id").is_not_null()
    return df.with_columns((by_call | ids).alias("graph_launch"))


_TIMES = ("start_ns", "end_ns", "duration_ns")
# Per batch: raw columns only (no lazy queries: each costs ~0.3 ms of fixed overhead). Derived
# columns (regexes, mappings) are computed once per table after the batches are concatenated,
# but for `api` (a dict lookup per row in the builder costs less).
_BUILDERS: dict[str, Callable[[list[Any]], pl.DataFrame]] = {
    "kernels": _kernels,
    "memcpy": _memcpy,
    "api_calls": _api_calls,
    "ops": _ops,
    "markers": _markers,
}
_FINISH: dict[str, Callable[[pl.DataFrame], pl.DataFrame]] = {
    "kernels": _finish_kernels,
    "memcpy": _finish_memcpy,
    "markers": _finish_markers,
}


def _iterations(
    ops: pl.DataFrame | None, markers: pl.DataFrame | None, rank: int | None
) -> pl.DataFrame | None:
    """`ProfilerStep#N` host ranges (user_annotation; a cpu_op in older PyTorch)."""
    # The name test first (a prefix check, per frame), so that only the few step rows are
    # lower-cased for the category test; then one query per step on the few rows.
    host = [
        f.filter(pl.col("name").str.starts_with(_STEP)).select("name", "category", *_TIMES)
        for f in (markers, ops)
        if f is not None
    ]
    if not host:
        return None
    number = pl.col("name").str.strip_prefix(_STEP).cast(pl.Int64, strict=False)
    steps = (
        pl.concat(host)
        .with_columns(iteration=number)
        .filter(
            pl.col("category").str.to_lowercase().is_in(("user_annotation", *_OPS))
            & pl.col("end_ns").is_not_null()
            & pl.col("iteration").is_not_null()
        )
    )
    # The earliest start of each step number (file order on ties: markers first) is the first
    # row of its number once sorted stably by number then start. A step recorded both as an
    # annotation and as a cpu_op is kept once.
    steps = steps.sort("iteration", "start_ns", maintain_order=True)
    steps = steps.unique("iteration", keep="first", maintain_order=True)
    return steps.select(pl.lit(rank, dtype=pl.Int64).alias("rank"), "iteration", *_TIMES)


def _devices(props: list[_Device] | None) -> pl.DataFrame | None:
    if not props:
        return None
    rows = [
        (p.id, p.name, p.totalGlobalMem, p.computeMajor, p.computeMinor, p.numSms) for p in props
    ]
    ids, names, mem, major, minor, sms = zip(*rows, strict=True)
    df = pl.DataFrame(
        [
            pl.Series("device_id", ids, dtype=pl.Int64, strict=False),
            pl.Series("name", names, dtype=pl.String, strict=False),
            pl.Series("memory_bytes", mem, dtype=pl.Int64, strict=False),
            pl.Series("major", major, dtype=pl.Int64, strict=False),
            pl.Series("minor", minor, dtype=pl.Int64, strict=False),
            pl.Series("sm_count", sms, dtype=pl.Int64, strict=False),
        ]
    )
    name = pl.col("name").str.to_lowercase()
    vendor = (
        pl.when(name.str.contains_any(["amd ", "radeon", "instinct"]))
        .then(pl.lit("AMD"))
        .when(name.str.contains_any(["nvidia", "tesla", "quadro", "geforce"]))
        .then(pl.lit("NVIDIA"))
        .otherwise(None)
    )
    return df.select(
        "device_id",
        "name",
        pl.format("{}.{}", "major", "minor").alias("compute_capability"),
        "sm_count",
        "memory_bytes",
        vendor.alias("vendor"),
    )


def _range_rows(ranges: list[Any]) -> pl.DataFrame:
    rows = [
        (i, e.pid, e.name, k, v)
        for i, e in enumerate(ranges)
        if isinstance(e.args, dict)
        for k, v in e.args.items()
    ]
    kid, pid, name, metric, value = zip(*rows, strict=True) if rows else ((),) * 5
    return pl.DataFrame(
        [
            pl.Series("kernel_id", kid, dtype=pl.Int64),
            pl.Series("device_id", pid, dtype=pl.Int64, strict=False),
            pl.Series("name", name, dtype=pl.String, strict=False),
            pl.Series("metric_name", metric, dtype=pl.String),
            pl.Series("value", value, dtype=pl.Float64, strict=False),
        ]
    )
