"""PyTorch profiler (Kineto) Chrome-trace JSON: `*.pt.trace.json`, `*.json.gz`.

Produced by `torch.profiler.profile(...)` with `on_trace_ready=tensorboard_trace_handler(dir)` or
`prof.export_chrome_trace("x.json")`, and by Kineto's on-demand/dynolog tracing. Tested with the
Holistic Trace Analysis sample traces (formats.md §5): PyTorch 2.x on V100 (ns-resolution epoch
µs, 2024), A100 (integer epoch µs, 2023; CUPTI range profiler; Triton with `cuda_driver`, 2024
`baseTimeNanoseconds` style) and ROCm 6.2 on MI250.

Layout: `{"schemaVersion", "deviceProperties": [...], "distributedInfo": {...}, "traceEvents":
[...], "baseTimeNanoseconds"?, ...}`; every key but `traceEvents` is optional. Only the keys the
tables need are decoded (a typed msgspec decoder skips the rest), so identifying keys that
Meta-internal traces carry (`username`, `host_name`, `tw_*`, `mast_*`, `INFO` log lines) never
reach the output.

Time (formats.md §5): `ts`/`dur` are always µs. Three styles exist:

* integer epoch µs (`1695835542514261`, older traces);
* float epoch µs with ns fractions (`1712195495505583.123`). float64 cannot hold these exactly
  (its spacing is 0.25 µs at this magnitude), so numbers are never converted through float: the
  decoder hands floats over as their decimal text (`float_hook=str`) and polars parses the text
  as a fixed-point decimal (`Decimal(38, 3)`), then int64 ns;
* float µs relative to the top-level `baseTimeNanoseconds` (2024+): `abs = base + round(ts*1000)`.

All three are stored as absolute Unix-epoch ns with `sources.time_origin_epoch_ns = 0`, so ranks
of one job line up without an extra step. Digits finer than 1 ns round half to even.

Tables:

* `kernels` (`cat` kernel): `device_id` = `args.device`, else `pid` (GPU events use `pid` =
  device, `tid` = stream); `stream_id` = `args.stream`, else an integer `tid`. Kineto's
  `"shared memory"` arg is static + dynamic shared memory summed (libkineto `CuptiActivity.cpp`),
  which fits neither `static_smem_bytes` nor `dynamic_smem_bytes` (both stay null): it goes to
  `total_smem_bytes`.
  `kernel_id` is the launch index in start-time order.
* `memcpy` (`gpu_memcpy`, `gpu_memset`): `Memcpy HtoD (Pageable -> Device)` gives kind `HtoD`,
  src `Pageable`, dst `Device`; `Memset (Device)` gives kind `memset`, dst `Device`.
* `api_calls`: `cuda_runtime` → `runtime`, `cuda_driver` → `driver` (ROCm's `hip*` calls also
  use `cuda_runtime`); `cbid` (ROCm: `cid`) → `callback_id`; `args.kernel` (ROCm's launch calls
  name their kernel, during graph capture too) → `kernel_name`.
* `ops`: `cpu_op`, `python_function` (and the old `Operator`); `External id` → `external_id`.
* `markers`: `user_annotation` (host), `gpu_user_annotation` (`device_id` = pid, `stream_id` =
  tid, no process or thread: pid/tid are device/stream there) and instant events (`ph` `i`/`I`,
  null end).
* `iterations`: `ProfilerStep#N` host annotations (user_annotation, or cpu_op in older PyTorch);
  `rank` from `distributedInfo`, `device_id` null (the trace does not map ranks to devices).
* `sources`: tool `pytorch-profiler`, `tool_version` null (Kineto writes no PyTorch version;
  `cupti_version`/`cuda_runtime_version` are not the tool's), `rank`/`world_size` from
  `distributedInfo`.
* `kernel_metrics`: `cuda_profiler_range` events (CUPTI range profiler) carry counter name → value
  maps in `args`; one row per counter, `kernel_id` = the range's ordinal in the file, `unit` null
  (the trace does not state units; raw counters are mostly instruction counts, never guessed).
* `devices` from `deviceProperties` (AMD: computeMajor/Minor is the gfx arch, e.g. gfx90a → 9.0).

Old traces (PyTorch ≤ 1.9) use `Kernel`, `Runtime`, `Memcpy`, `Memset`, string `tid`s like
`"stream 7"` and lower-case `external id`; categories are matched case-insensitively. Events with
string `pid`/`tid` (`"Spans"`, `"Traces"`, `""`) get null ids. Flows (`s`/`f`/`t`) and metadata
(`M`) are skipped.

This module streams and decodes the file; the msgspec types are in `kineto.structs`, the
events-to-frames work in `kineto.frames`. `read_kineto_json` holds the tables whole (fastest, for
notebooks); `stream_kineto_json`, what `ingest` uses, spills the frames to disk and sorts them
there (`kineto.stream`), so its memory does not grow with the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import (
    PathLike,
    head_bytes,
    read_settled,
    reader_entry,
)
from ..common.stream import stream_entry
from . import split
from .decode import _chunks, _EventText, _Parts, _stream
from .frames import (
    _FINISH,
    _check_times,
    _devices,
    _iterations,
    _range_rows,
    flag_graph,
    graph_correlations,
)
from .stream import Spiller, timed

TOOL = "pytorch-profiler"


# --- file access ------------------------------------------------------------------------------


def sniff(path: PathLike) -> bool:
    """A JSON object whose head names `traceEvents` (Chrome trace) or Kineto's `schemaVersion`."""
    head = head_bytes(path, 65536).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"{") and (b'"traceEvents"' in head or b'"schemaVersion"' in head)


def _decode(path: PathLike, parts: _Parts, workdir: Path | None = None) -> None:
    """`_stream` (split over two processes for a big plain file when `parts` spills to
    `workdir`, see `kineto.split`), with the decoder's own failures on hostile bytes turned into
    MalformedInput."""
    try:
        cut = split.plan(path) if workdir is not None and parts.spiller is not None else None
        if cut is None:
            _stream(path, parts)
        else:
            assert workdir is not None
            _stream_split(path, parts, cut, workdir)
    except RecursionError:
        # msgspec decodes nested values recursively: a hostile or broken file nesting arrays or
        # objects ~10,000 deep exhausts the stack. No Kineto trace nests more than a few levels.
        raise MalformedInput(
            "JSON nested too deeply (more levels than the decoder's recursion limit)", path=path
        ) from None
    except UnicodeDecodeError as e:  # msgspec checks the UTF-8 of the strings it decodes
        raise MalformedInput(
            f"not valid JSON text: bytes that are not UTF-8 ({e.reason}) in a string", path=path
        ) from None


def _stream_split(path: PathLike, parts: _Parts, cut: split.Plan, workdir: Path) -> None:
    """`_stream` with the part from `cut.helper_start` on decoded by a helper process meanwhile,
    started once the read is settled (`read_settled`); where the helper cannot be used, this
    process reads on from the cut (`kineto.split`)."""
    text = _EventText(path, parts)
    helper: split.Helper | None = None
    tried = adopted = at_boundary = False
    try:
        for chunk in _chunks(path, 0, cut.main_end):
            if not tried and read_settled():
                helper, tried = split.start_helper(path, cut.helper_start, workdir), True
            text.feed(chunk)
        at_boundary = text.close_at_boundary()
        meta = helper.result() if at_boundary and helper is not None else None
        if meta is not None:
            assert parts.spiller is not None
            parts.spiller.adopt(meta.rows, meta.nbytes, meta.samples, split.TAG, meta.graphs)
            parts.ranges += meta.ranges
            parts.docs += meta.docs
            adopted = True
            return
    finally:
        if helper is not None:
            helper.close(keep=adopted)
    if at_boundary:
        text.restart_at(cut.helper_start)
    for chunk in _chunks(path, cut.helper_start if at_boundary else cut.main_end):
        text.feed(chunk)
    text.finish()


@dataclass(frozen=True)
class _Head:
    """What the header keys (before or after the events) say."""

    base_ns: int
    rank: int | None
    world: int | None
    device_props: Any


def _head(parts: _Parts, path: PathLike) -> _Head:
    head: dict[str, Any] = {}
    for d in parts.docs:
        for key in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds"):
            if getattr(d, key) is not None:
                head[key] = getattr(d, key)
    base = head.get("baseTimeNanoseconds")
    if base is not None and (type(base) is not int or not 0 <= base < 2**63):
        # float_hook=str hands a float over as its text: say what the file holds
        raise MalformedInput(
            f"baseTimeNanoseconds is {base!r}, not an integer number of ns since the epoch",
            path=path,
        )
    dist = head.get("distributedInfo")
    rank = dist.rank if dist is not None and isinstance(dist.rank, int) else None
    world = dist.world_size if dist is not None and isinstance(dist.world_size, int) else None
    return _Head(base or 0, rank, world, head.get("deviceProperties"))


def _sources(head: _Head) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "tool": [TOOL],
            "tool_version": [None],
            "time_origin_epoch_ns": [0],
            "rank": [head.rank],
            "world_size": [head.world],
        },
        schema_overrides={"tool_version": pl.String, "rank": pl.Int64, "world_size": pl.Int64},
    )


@reader_entry("kineto_json")
def read_kineto_json(path: PathLike) -> Tables:
    """Read a Kineto Chrome trace (`.json` or `.json.gz`) into normalized tables."""
    parts = _Parts()
    _decode(path, parts)
    head = _head(parts, path)

    def table(name: str) -> pl.DataFrame | None:
        frames = parts.frames[name]
        if not frames:
            return None
        df = timed(pl.concat(frames, how="vertical_relaxed"), head.base_ns)
        frames.clear()
        _check_times(df, name, path)
        for raw in ("ts", "dur"):  # in place: no query
            df.drop_in_place(raw)
        # Kernels and copies are often in start order already (a stable sort is then the
        # identity; the check is a scan, ~1 µs per 1000 rows).
        if not df["start_ns"].is_sorted(nulls_last=True):
            df = df.sort("start_ns", maintain_order=True, nulls_last=True)
        finish = _FINISH.get(name)
        return df if finish is None else finish(df)

    kernels = table("kernels")
    ops, markers = table("ops"), table("markers")
    memcpy, api_calls = table("memcpy"), table("api_calls")
    if api_calls is not None:
        launches = graph_correlations(api_calls)
    else:
        launches = pl.Series("correlation_id", [], dtype=pl.Int64)
    kernels, memcpy = (None if f is None else flag_graph(f, launches) for f in (kernels, memcpy))
    frames = {
        "sources": _sources(head),
        "devices": _devices(head.device_props),
        "kernels": kernels,
        "memcpy": memcpy,
        "api_calls": api_calls,
        "ops": ops,
        "markers": markers,
        "iterations": _iterations(ops, markers, head.rank),
        "kernel_metrics": _range_rows(parts.ranges) if parts.ranges else None,
    }
    return Tables.build(**{k: v for k, v in frames.items() if v is not None})


@stream_entry("kineto_json")
def stream_kineto_json(path: PathLike, *, workdir: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    """`read_kineto_json` as `(table, chunk)` pairs with bounded memory, for `ingest`: the frames
    of each batch are spilled to `workdir` as the file is decoded, then every table is sorted
    there bucket by bucket (`kineto.stream`). Concatenated per table, the chunks are
    `read_kineto_json`'s tables: same rows, order and ids."""
    spiller = Spiller(workdir)
    try:
        parts = _Parts(spiller)
        _decode(path, parts, workdir)
        head = _head(parts, path)
        yield from spiller.tables(head.base_ns, path)
    finally:
        spiller.discard()
    rest = {
        "iterations": _iterations(spiller.steps["ops"], spiller.steps["markers"], head.rank),
        "kernel_metrics": _range_rows(parts.ranges) if parts.ranges else None,
        "devices": _devices(head.device_props),
    }
    for name, df in rest.items():
        if df is not None and df.height:
            yield name, df
    yield "sources", _sources(head)
