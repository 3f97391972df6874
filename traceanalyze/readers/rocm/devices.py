"""AMD devices as the ROCm profilers describe them (KFD agents)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from ... import schema

# gfx target -> product family, for a name where the file gives only the ISA (rocprof v1 gives
# nothing; rpd gives nothing). Only a hint for people: analyses match peaks on `name`.
DEVICE_COLUMNS = ("device_id", "name", "uuid", "compute_capability", "sm_count", "memory_bytes")


def devices_frame(rows: Iterable[dict[str, Any]]) -> pl.DataFrame:
    """A `devices` frame of AMD GPUs from dicts with some of the schema's columns."""
    out = [dict(r, vendor="AMD") for r in rows]
    if not out:
        return schema.empty("devices")
    return schema.conform("devices", pl.DataFrame(out, infer_schema_length=None))


def node_devices(node_ids: Iterable[int | None]) -> pl.DataFrame:
    """Devices known only by their KFD node id (rocprof v1 `gpu-id`, rpd `gpuId`): the node id
    is kept as such, and as device_id, since the file says nothing that maps it to a 0-based
    GPU index."""
    ids = sorted({int(n) for n in node_ids if n is not None})
    return devices_frame({"device_id": n, "node_id": n} for n in ids)
