"""rocprofv3 JSON records (decoded by `rocprofv3_json`) into frames: the agents' device map and
one frame per batch of dispatches, HIP calls or copies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ...errors import MalformedInput
from ..common.core import PathLike, check_times

_I = pl.Int64
_GPU = 2  # rocprofiler_agent_type_t: 1 CPU, 2 GPU
_COPY_KIND = {
    "MEMORY_COPY_HOST_TO_HOST": "HtoH",
    "MEMORY_COPY_HOST_TO_DEVICE": "HtoD",
    "MEMORY_COPY_DEVICE_TO_HOST": "DtoH",
    "MEMORY_COPY_DEVICE_TO_DEVICE": "DtoD",
}
_MEMORY_COPY_KIND = 10  # rocprofiler_buffer_tracing_kind_t ROCPROFILER_BUFFER_TRACING_MEMORY_COPY


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Header:
    """Agent handle -> device_id (GPU agents only), the devices' rows, the process id and the
    operation names per buffer-tracing kind (`strings.buffer_records`)."""

    devices: dict[int, int]
    device_rows: list[dict[str, Any]]
    pid: int | None
    ops: list[list[str]] = field(default_factory=list)

    @classmethod
    def build(cls, agents: list[Any], pid: int | None, ops: list[list[str]]) -> Header:
        gpus = [a for a in agents if isinstance(a, dict) and a.get("type") in (_GPU, "GPU")]
        devices: dict[int, int] = {}
        rows = []
        for i, a in enumerate(gpus):
            handle = _int((a.get("id") or {}).get("handle"))
            index = _int(a.get("logical_node_type_id"))
            dev = i if index is None else index  # the GPUs' order when the index is absent
            if handle is not None:
                devices[handle] = dev
            banks = [b for b in a.get("mem_banks") or [] if isinstance(b, dict)]
            memory = sum(_int(b.get("size_in_bytes")) or 0 for b in banks) or None
            rows.append(
                {
                    "device_id": dev,
                    "node_id": _int(a.get("node_id")),
                    "name": a.get("product_name") or a.get("name"),
                    "sm_count": _int(a.get("cu_count")),
                    "memory_bytes": memory,
                }
            )
        return cls(devices, rows, pid, ops)

    def op_name(self, kind: int, op: int) -> str | None:
        names = self.ops[kind] if 0 <= kind < len(self.ops) else []
        return names[op] if 0 <= op < len(names) else None


def kernel_frame(
    recs: list[Any], header: Header, symbols: dict[int, tuple[Any, ...]], first: int, path: PathLike
) -> pl.DataFrame:
    """One batch of dispatches, built column by column (a frame from row tuples costs ~4x)."""
    info = [r.dispatch_info for r in recs]
    missing = {d.kernel_id for d in info} - symbols.keys()
    if missing:
        raise MalformedInput(
            f"a dispatch of kernel_id {min(missing)}, which kernel_symbols does not have "
            "(or has after buffer_records)",
            path=path,
        )
    unknown = {d.agent_id.handle for d in info} - header.devices.keys()
    if unknown:
        raise MalformedInput(
            f"a dispatch on agent {min(unknown)}, which is no GPU agent", path=path
        )
    sym = [symbols[d.kernel_id] for d in info]
    wg = [d.workgroup_size for d in info]
    grid = [d.grid_size for d in info]

    def blocks(axis: str) -> list[int | None]:
        return [
            -(-getattr(g, axis) // getattr(w, axis)) if getattr(w, axis) else None
            for g, w in zip(grid, wg, strict=True)
        ]

    cols: dict[str, list[Any]] = {
        "kernel_id": list(range(first, first + len(recs))),
        "process_id": [header.pid] * len(recs),
        "device_id": [header.devices[d.agent_id.handle] for d in info],
        "stream_id": [d.queue_id.handle for d in info],
        "correlation_id": [r.correlation_id.internal for r in recs],
        "name": [s[0] for s in sym],
        "short_name": [s[1] for s in sym],
        "mangled_name": [s[2] for s in sym],
        "start_ns": [r.start_timestamp for r in recs],
        "end_ns": [r.end_timestamp for r in recs],
        "grid_x": blocks("x"),
        "grid_y": blocks("y"),
        "grid_z": blocks("z"),
        "block_x": [w.x for w in wg],
        "block_y": [w.y for w in wg],
        "block_z": [w.z for w in wg],
        "registers_per_thread": [s[3] for s in sym],
        "total_smem_bytes": [d.group_segment_size for d in info],
    }
    strings = {"name", "short_name", "mangled_name"}
    df = pl.DataFrame(cols, schema={c: (pl.String if c in strings else _I) for c in cols})
    check_times(
        df, path=path, table="kernel_dispatch", columns=("start_timestamp", "end_timestamp")
    )
    return df.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"))


def api_frame(recs: list[Any], header: Header) -> pl.DataFrame:
    rows = [
        (
            header.pid,
            r.thread_id,
            r.correlation_id.internal,
            header.op_name(r.kind, r.operation),
            r.start_timestamp,
            r.end_timestamp,
        )
        for r in recs
    ]
    cols = ["process_id", "thread_id", "correlation_id", "name", "start_ns", "end_ns"]
    df = pl.DataFrame(
        rows, schema={c: (pl.String if c == "name" else _I) for c in cols}, orient="row"
    )
    return df.with_columns(
        pl.lit("runtime").alias("api"), (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns")
    )


def copy_frame(recs: list[Any], header: Header) -> pl.DataFrame:
    rows = []
    for r in recs:
        dst = header.devices.get(r.dst_agent_id.handle) if r.dst_agent_id else None
        src = header.devices.get(r.src_agent_id.handle) if r.src_agent_id else None
        name = header.op_name(_MEMORY_COPY_KIND, r.operation) or ""
        rows.append(
            (
                header.pid,
                dst if dst is not None else src,
                r.correlation_id.internal,
                _COPY_KIND.get(name),
                r.bytes,
                r.start_timestamp,
                r.end_timestamp,
            )
        )
    cols = ["process_id", "device_id", "correlation_id", "kind", "size_bytes", "start_ns", "end_ns"]
    df = pl.DataFrame(
        rows, schema={c: (pl.String if c == "kind" else _I) for c in cols}, orient="row"
    )
    return df.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"))
