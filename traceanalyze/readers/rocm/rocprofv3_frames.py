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
        gpus = [a for a in agents if isinstance(a, dict) and a.get("type") == _GPU]
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


def _device(header: Header, handle: int, path: PathLike) -> int:
    dev = header.devices.get(handle)
    if dev is None:
        raise MalformedInput(f"a dispatch on agent {handle}, which is no GPU agent", path=path)
    return dev


def kernel_frame(
    recs: list[Any], header: Header, symbols: dict[int, tuple[Any, ...]], first: int, path: PathLike
) -> pl.DataFrame:
    rows = []
    for r in recs:
        d = r.dispatch_info
        sym = symbols.get(d.kernel_id)
        if sym is None:
            raise MalformedInput(
                f"a dispatch of kernel_id {d.kernel_id}, which kernel_symbols does not have "
                "(or has after buffer_records)",
                path=path,
            )
        wg, grid = d.workgroup_size, d.grid_size
        rows.append(
            (
                header.pid,
                _device(header, d.agent_id.handle, path),
                d.queue_id.handle,
                r.correlation_id.internal,
                *sym[:3],
                r.start_timestamp,
                r.end_timestamp,
                -(-grid.x // wg.x) if wg.x else None,
                -(-grid.y // wg.y) if wg.y else None,
                -(-grid.z // wg.z) if wg.z else None,
                wg.x,
                wg.y,
                wg.z,
                sym[3],
                d.group_segment_size,
            )
        )
    cols = [
        "process_id", "device_id", "stream_id", "correlation_id", "name", "short_name",
        "mangled_name", "start_ns", "end_ns", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
        "block_z", "registers_per_thread", "total_smem_bytes",
    ]  # fmt: skip
    str_cols = {"name", "short_name", "mangled_name"}
    df = pl.DataFrame(
        rows,
        schema={c: (pl.String if c in str_cols else _I) for c in cols},
        orient="row",
    )
    check_times(
        df, path=path, table="kernel_dispatch", columns=("start_timestamp", "end_timestamp")
    )
    return df.with_columns(
        pl.int_range(first, first + df.height, dtype=_I).alias("kernel_id"),
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
    )


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
