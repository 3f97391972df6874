"""Iteration logs: per-iteration durations of a training run.

Two layouts:

1. The SC22 variability study's training stdout (`hal-uw/gpu_variability_sc22_artifact`,
   `cnn_utils/engine.py`, formats.md §0.2)::

       Iteration Duration <iter> <cuda_device> : <seconds>
       ...
       Training time: 0:03:12.345678

   The seconds are host `time.perf_counter()` deltas without a CUDA synchronize. All ranks write to
   one redirected stdout, so several records can merge on one physical line; every record on a
   line is parsed (a regex over the whole text, not `split('I')`). Other lines are ignored.
   No start times: `start_ns` is null. `Training time:` becomes a note on the total, not a row.

2. The project's own log, written by `traceanalyze collect` (device-synchronized timing)::

       # traceanalyze-iterlog v1
       rank,device_id,iteration,start_ns,duration_ns,batch_size,images_per_s
       0,0,0,1732260000000000000,412345678,64,155.2

   CSV; `start_ns` is Unix epoch ns (host clock at the iteration's start event), empty cells are
   nulls. `time_origin_epoch_ns` is 0.
"""

from __future__ import annotations

import io
import re

import polars as pl

from ..errors import MalformedInput, MissingColumn
from ..tables import Tables
from ._common import PathLike, head_text

MAGIC = "# traceanalyze-iterlog v1"
COLUMNS: tuple[str, ...] = (
    "rank",
    "device_id",
    "iteration",
    "start_ns",
    "duration_ns",
    "batch_size",
    "images_per_s",
)
HEADER = ",".join(COLUMNS)

# `Iteration Duration 12 0 : 0.1234`; the number may use exponent notation.
_SC22 = re.compile(
    r"Iteration Duration\s+(\d+)\s+(\d+)\s*:\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
)


def sniff(path: PathLike) -> bool:
    head = head_text(path, 8192)
    return head.startswith(MAGIC) or "Iteration Duration " in head


def read_iterlog(path: PathLike) -> Tables:
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8", "replace").lstrip("\ufeff")
    if text.startswith(MAGIC):
        return _read_own(path, text)
    return _read_sc22(path, text)


def _read_sc22(path: PathLike, text: str) -> Tables:
    matches = _SC22.findall(text)
    if not matches:
        raise MalformedInput("no 'Iteration Duration <i> <dev> : <s>' records", path=path)
    it, dev, sec = zip(*matches, strict=True)
    df = pl.DataFrame(
        {"iteration": it, "device_id": dev, "sec": sec},
        schema={"iteration": pl.String, "device_id": pl.String, "sec": pl.String},
    ).select(
        pl.col("iteration").cast(pl.Int64),
        pl.col("device_id").cast(pl.Int64),
        # Seconds to integer ns, rounded (not truncated).
        (pl.col("sec").cast(pl.Float64) * 1e9).round().cast(pl.Int64).alias("duration_ns"),
    )
    return Tables.build(
        iterations=df,
        sources=pl.DataFrame({"tool": ["sc22-train-stdout"]}),
    )


def _read_own(path: PathLike, text: str) -> Tables:
    body = text.split("\n", 1)[1] if "\n" in text else ""
    first = body.split("\n", 1)[0].strip()
    if first != HEADER:
        raise MissingColumn(f"expected header {HEADER!r}, found {first!r}", path=path, line=2)
    try:
        df = pl.read_csv(
            io.StringIO(body),
            schema={
                "rank": pl.Int64,
                "device_id": pl.Int64,
                "iteration": pl.Int64,
                "start_ns": pl.Int64,
                "duration_ns": pl.Int64,
                "batch_size": pl.Int64,
                "images_per_s": pl.Float64,
            },
        )
    except pl.exceptions.PolarsError as e:
        raise MalformedInput(f"bad iteration log row ({e})".split("\n")[0], path=path) from None
    if df["iteration"].null_count():
        raise MalformedInput("iteration number missing in a row", path=path, column="iteration")
    df = df.with_columns((pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns"))
    return Tables.build(
        iterations=df,
        sources=pl.DataFrame(
            {"tool": ["traceanalyze-collect"], "time_origin_epoch_ns": [0]},
            schema={"tool": pl.String, "time_origin_epoch_ns": pl.Int64},
        ),
    )
