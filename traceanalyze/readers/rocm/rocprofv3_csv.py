"""rocprofv3 CSV kernel trace (`rocprofv3 --kernel-trace --output-format csv -- ./app` writes
`<pid>_kernel_trace.csv` with `<pid>_agent_info.csv` beside it), from the header rocprofiler-sdk
documents (no public sample: tested on inline files): `Kind, Agent_Id, Queue_Id, [Stream_Id,]
[Thread_Id,] Kernel_Id, Kernel_Name, Correlation_Id, Start_Timestamp, End_Timestamp, [LDS_
Block_Size, Scratch_Size, VGPR_Count, Accum_VGPR_Count, SGPR_Count,] Private_Segment_Size,
Group_Segment_Size, Workgroup_Size_X/Y/Z, Grid_Size_X/Y/Z`.

* `Agent_Id` is the agent's logical node id, an integer up to ROCm 6.3 and `"Agent N"` later.
  With the agent_info file beside it (same prefix), a GPU agent maps to its 0-based GPU index
  (`Logical_Node_Type_Id`), its node id kept in `devices.node_id`, name and CUs from there;
  without it the node id is kept as device_id (nothing says how to map it).
* Grid sizes are work-items (HSA): grid_x = ceil(Grid_Size_X / Workgroup_Size_X) work-groups.
* Times are ns of the boot-relative clock (not epoch); Correlation_Id joins HIP calls; `Queue_Id`
  -> stream_id (`Stream_Id`, when there, is the HIP stream, kept only where no queue is given).
"""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import PathLike, check_times, head_text, reader_entry, require_columns
from ..common.limits import read_content
from .devices import devices_frame
from .names import clean_names, with_short_names

_NEED = ("Agent_Id", "Kernel_Name", "Start_Timestamp", "End_Timestamp")
_I = pl.Int64


def _header(path: PathLike) -> list[str]:
    text = head_text(path, 4096)
    if "\x00" in text:
        return []
    return [c.strip().strip('"') for c in text.split("\n", 1)[0].strip("\r").split(",")]


def sniff(path: PathLike) -> bool:
    """A header with Agent_Id, Kernel_Name, Start_Timestamp and End_Timestamp."""
    cols = _header(path)
    return all(c in cols for c in _NEED)


def _csv(path: PathLike) -> pl.DataFrame:
    raw = read_content(path)
    if not raw.strip():
        raise MalformedInput("empty file", path=path)
    return pl.read_csv(io.BytesIO(raw), infer_schema_length=0)


def _int(df: pl.DataFrame, col: str, path: PathLike) -> pl.Series:
    if col not in df.columns:
        return pl.Series(col, [None] * df.height, dtype=_I)
    s = df[col].str.strip_chars().str.replace(r"^Agent\s+", "")
    v: pl.Series = s.cast(_I, strict=False)
    bad = s.filter(v.is_null() & s.is_not_null() & (s != ""))
    if bad.len():
        raise MalformedInput(f"{bad[0]!r} is not an integer", path=path, column=col)
    return v


def _agents(path: PathLike) -> pl.DataFrame | None:
    """The agent_info file beside a `<prefix>_kernel_trace.csv`, if there."""
    p = Path(path)
    if not p.name.endswith("kernel_trace.csv"):
        return None
    info = p.with_name(p.name[: -len("kernel_trace.csv")] + "agent_info.csv")
    if not info.is_file():
        return None
    df = _csv(info)
    require_columns(df.columns, ("Logical_Node_Id", "Agent_Type"), path=info)
    gpus = df.filter(pl.col("Agent_Type").str.strip_chars().str.to_uppercase() == "GPU")
    out = pl.DataFrame(
        {
            "node": _int(gpus, "Logical_Node_Id", info),
            "device_id": _int(gpus, "Logical_Node_Type_Id", info),
            "node_id": _int(gpus, "Node_Id", info),
            "sm_count": _int(gpus, "Cu_Count", info),
        }
    )
    names = gpus["Product_Name"] if "Product_Name" in gpus.columns else None
    out = out.with_columns(name=names) if names is not None else out
    # the GPUs' order where the file has no Logical_Node_Type_Id
    return out.with_columns(pl.coalesce("device_id", pl.int_range(pl.len(), dtype=_I)))


@reader_entry("rocprofv3_csv")
def read_rocprofv3_csv(path: PathLike) -> Tables:
    """Read a rocprofv3 kernel-trace CSV (and the agent_info CSV beside it) into tables."""
    df = _csv(path)
    require_columns(df.columns, _NEED, path=path)
    node = _int(df, "Agent_Id", path)
    ints = {c: _int(df, c, path) for c in df.columns if c not in ("Kind", "Kernel_Name")}
    agents = _agents(path)
    if agents is not None:
        known = dict(zip(agents["node"].to_list(), agents["device_id"].to_list(), strict=True))
        device = node.replace_strict(known, default=None, return_dtype=_I)
        devices = devices_frame(agents.drop("node").to_dicts())
    else:
        device = node
        devices = devices_frame({"device_id": n, "node_id": n} for n in node.unique().sort())
    queue = ints.get("Queue_Id", ints.get("Stream_Id"))

    def dims(prefix: str) -> list[pl.Series]:
        return [ints.get(f"{prefix}_{a}", pl.Series([None] * df.height, dtype=_I)) for a in "XYZ"]

    wg, grid = dims("Workgroup_Size"), dims("Grid_Size")
    k = pl.DataFrame({"kernel_id": pl.int_range(df.height, dtype=_I, eager=True)}).with_columns(
        process_id=ints.get("Process_Id"),
        device_id=device,
        stream_id=queue,
        correlation_id=ints.get("Correlation_Id"),
        name=df["Kernel_Name"],
        start_ns=ints["Start_Timestamp"],
        end_ns=ints["End_Timestamp"],
        grid_x=(grid[0] + wg[0] - 1) // wg[0],
        grid_y=(grid[1] + wg[1] - 1) // wg[1],
        grid_z=(grid[2] + wg[2] - 1) // wg[2],
        block_x=wg[0],
        block_y=wg[1],
        block_z=wg[2],
        total_smem_bytes=ints.get("Group_Segment_Size"),
    )
    if "VGPR_Count" in ints:
        accum = ints.get("Accum_VGPR_Count", pl.Series([0] * df.height, dtype=_I))
        k = k.with_columns(registers_per_thread=ints["VGPR_Count"] + accum.fill_null(0))
    k = k.with_columns(clean_names(pl.col("name")).alias("name"))
    check_times(k, path=path, table="kernel_trace", columns=("Start_Timestamp", "End_Timestamp"))
    k = k.with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
    ).pipe(with_short_names)
    return Tables.build(sources=pl.DataFrame({"tool": ["rocprofv3"]}), devices=devices, kernels=k)
