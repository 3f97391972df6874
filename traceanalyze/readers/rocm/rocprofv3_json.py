"""rocprofv3 JSON (`rocprofv3 --kernel-trace [--hip-trace --memory-copy-trace] --output-format
json -- ./app`, rocprofiler-sdk; tested with the ROCm 7 output of AMD-AGI/TraceLens's MI350X
sample), plain or gzip, read in bounded memory (`jsonstream`): the file is one object
`{"rocprofiler-sdk-tool": [{metadata, agents, strings, kernel_symbols, buffer_records, …}]}`.

* `agents` -> `devices`: GPU agents only (`type` 2); device_id = `logical_node_type_id` (the
  0-based GPU index), `node_id` kept; name = `product_name`, sm_count = `cu_count`,
  memory_bytes = the agent's memory banks.
* `kernel_symbols` (id -> names) name the dispatches: name = `formatted_kernel_name`,
  short_name = `truncated_kernel_name`, mangled_name = `kernel_name` when mangled, all without
  the `.kd` descriptor suffix; registers_per_thread = arch + accum VGPRs.
* `buffer_records.kernel_dispatch` -> `kernels`: start/end ns (boot-relative clock, not epoch),
  device from `dispatch_info.agent_id`, stream_id = `queue_id` handle, correlation_id =
  `correlation_id.internal` (the HIP call's), grid = `grid_size` / `workgroup_size` (HSA gives
  work-items; kernels count work-groups), total_smem_bytes = the dispatch's group segment.
* `buffer_records.hip_api` -> `api_calls` (api 'runtime'; names from `strings.buffer_records`,
  by kind and operation); `memory_copy` -> `memcpy` (HtoD, DtoH, DtoD, HtoH; bytes; the GPU
  side's device); process_id = `metadata.pid`.

The sections must come in the order rocprofv3 writes them (agents and kernel_symbols before
buffer_records); a dispatch before its symbols is an error, not a guess.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import (
    GZIP_MAGIC,
    PathLike,
    check_stop,
    demangle,
    head_bytes,
    reader_entry,
)
from ..common.limits import current_limits, gunzip_stream
from ..common.stream import stream_entry
from .devices import devices_frame
from .jsonstream import ArrayReader, value_after
from .names import base_name, clean_name
from .rocprofv3_frames import Header, api_frame, copy_frame, kernel_frame

_CHUNK = 1 << 23


class _Id(msgspec.Struct, gc=False):
    handle: int


class _Corr(msgspec.Struct, gc=False):
    internal: int
    external: Any = None  # an integer, or {"value": …} in some versions: not kept


class _Dim(msgspec.Struct, gc=False):
    x: int = 1
    y: int = 1
    z: int = 1


class _DispatchInfo(msgspec.Struct, kw_only=True, gc=False):
    agent_id: _Id
    queue_id: _Id
    kernel_id: int
    group_segment_size: int | None = None
    workgroup_size: _Dim = msgspec.field(default_factory=_Dim)
    grid_size: _Dim = msgspec.field(default_factory=_Dim)


class Dispatch(msgspec.Struct, kw_only=True, gc=False):
    correlation_id: _Corr
    start_timestamp: int
    end_timestamp: int
    dispatch_info: _DispatchInfo
    thread_id: int | None = None


class Api(msgspec.Struct, kw_only=True, gc=False):
    kind: int
    operation: int
    correlation_id: _Corr
    start_timestamp: int
    end_timestamp: int
    thread_id: int | None = None


class Copy(msgspec.Struct, kw_only=True, gc=False):
    operation: int
    correlation_id: _Corr
    start_timestamp: int
    end_timestamp: int
    dst_agent_id: _Id | None = None
    src_agent_id: _Id | None = None
    bytes: int | None = None


class Symbol(msgspec.Struct, kw_only=True, gc=False):
    kernel_id: int
    kernel_name: str = ""
    formatted_kernel_name: str = ""
    demangled_kernel_name: str = ""
    truncated_kernel_name: str = ""
    arch_vgpr_count: int | None = None
    accum_vgpr_count: int | None = None


class _Skip(msgspec.Struct, gc=False):
    """A record of an array that is read past, not kept (its fields are ignored)."""


# Record arrays the reader does not map, read past batch by batch like the others so that the
# document kept whole (`ArrayReader.outer`) stays small; all are arrays of objects, and none of
# these keys names anything else in the file (`strings.marker_api` does, so it is not here).
_SKIPPED = (
    "hsa_api",
    "rccl_api",
    "memory_allocation",
    "scratch_memory",
    "counter_collection",
    "pc_sample_host_trap",
    "pc_sample_stochastic",
)
_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    **{key: msgspec.json.Decoder(list[_Skip]) for key in _SKIPPED},
    "kernel_symbols": msgspec.json.Decoder(list[Symbol]),
    "kernel_dispatch": msgspec.json.Decoder(list[Dispatch]),
    "hip_api": msgspec.json.Decoder(list[Api]),
    "memory_copy": msgspec.json.Decoder(list[Copy]),
}


def sniff(path: PathLike) -> bool:
    """A JSON object whose first key is "rocprofiler-sdk-tool"."""
    head = head_bytes(path, 256).lstrip()
    return head.startswith(b"{") and head[1:].lstrip().startswith(b'"rocprofiler-sdk-tool"')


def _pieces(path: PathLike) -> Iterator[bytes]:
    size = max(1, min(_CHUNK, current_limits().max_value_bytes))
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            f.seek(0)
            while b := f.read(size):
                check_stop()
                yield b
            return
        f.seek(0)
        for b in gunzip_stream(f, path, out_chunk=size, inflate=zlib):
            check_stop()
            yield b


def _header(reader: ArrayReader, path: PathLike, start: int) -> Header:
    """What the dispatches need from the document before them (its tool entry from `start`):
    GPU agents, pid, op names."""
    agents = value_after(reader.outer, b"agents", start)
    if not isinstance(agents, list):
        raise MalformedInput("buffer_records before the agents (not rocprofv3's order)", path=path)
    meta = value_after(reader.outer, b"metadata", start)
    strings = value_after(reader.outer, b"strings", start)
    pid = meta.get("pid") if isinstance(meta, dict) else None
    ops: list[list[str]] = []
    if isinstance(strings, dict):
        for kind in strings.get("buffer_records") or []:
            ops.append([str(o) for o in (kind.get("operations") or [])])
    return Header.build(agents, pid if isinstance(pid, int) else None, ops)


def _symbols(records: list[Symbol], into: dict[int, tuple[Any, ...]]) -> None:
    for s in records:
        name = clean_name(
            s.formatted_kernel_name
            or s.demangled_kernel_name
            or demangle(clean_name(s.kernel_name))
        )
        mangled = clean_name(s.kernel_name) if s.kernel_name.startswith("_Z") else None
        short = clean_name(s.truncated_kernel_name) or base_name(name) or None
        vgpr = None
        if s.arch_vgpr_count is not None:
            vgpr = s.arch_vgpr_count + (s.accum_vgpr_count or 0)
        into[s.kernel_id] = (name, short, mangled, vgpr)


@stream_entry("rocprofv3_json")
def stream_rocprofv3_json(path: PathLike, *, workdir: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    """The file as `(table, frame)` chunks, one batch of records at a time."""
    del workdir  # nothing spilled: every chunk is final when made
    reader = ArrayReader(_DECODERS, path)
    symbols: dict[int, tuple[Any, ...]] = {}
    header: Header | None = None
    devices: dict[int, dict[str, Any]] = {}
    next_id = entry = 0  # entry: where the current tool entry's header starts in reader.outer
    for piece in _pieces(path):
        for key, recs in reader.feed(piece):
            if key in _SKIPPED:
                continue
            if key == "kernel_symbols":
                if header is not None:  # the next tool entry (process): its own ids and agents
                    symbols, header = {}, None
                _symbols(recs, symbols)
                continue
            if header is None:
                header = _header(reader, path, entry)
                devices.update((r["device_id"], r) for r in header.device_rows)
            if key == "kernel_dispatch":
                yield "kernels", kernel_frame(recs, header, symbols, next_id, path)
                next_id += len(recs)
            elif key == "hip_api":
                yield "api_calls", api_frame(recs, header)
            elif key == "memory_copy":
                yield "memcpy", copy_frame(recs, header)
            entry = len(reader.outer)
    doc = reader.finish()
    if not isinstance(doc, dict) or not isinstance(doc.get("rocprofiler-sdk-tool"), list):
        raise MalformedInput("no rocprofiler-sdk-tool list (not rocprofv3 JSON)", path=path)
    if header is None:  # no records at all: the agents still say which GPUs there were
        agents = value_after(reader.outer, b"agents", entry)
        header = Header.build(agents if isinstance(agents, list) else [], None, [])
        devices.update((r["device_id"], r) for r in header.device_rows)
    yield "devices", devices_frame(devices[d] for d in sorted(devices))
    yield "sources", pl.DataFrame({"tool": ["rocprofv3"]})


@reader_entry("rocprofv3_json")
def read_rocprofv3_json(path: PathLike) -> Tables:
    """Read a rocprofv3 JSON output (plain or gzip) into normalized tables."""
    import tempfile

    parts: dict[str, list[pl.DataFrame]] = {}
    with tempfile.TemporaryDirectory(prefix="traceanalyze-") as tmp:
        for name, df in stream_rocprofv3_json(path, workdir=Path(tmp)):
            parts.setdefault(name, []).append(df)
    return Tables.build(
        **{name: pl.concat(dfs, how="diagonal_relaxed") for name, dfs in parts.items()}
    )
