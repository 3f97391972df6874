"""Chrome trace JSON of several ranks on one time base (`traceanalyze stragglers --perfetto`).

One process per rank (`pid` = rank, named "rank N · file"): thread 0, "collectives", holds one
slice per matched collective instance (`name` "<op> #<order>", `args` instance, wait in µs,
whether the rank came last); the other threads are the rank's CUDA streams with every kernel.
Each instance is linked across ranks by flow events (`cat: "collective"`): from the last
arriver's slice to every other rank's slice of the same instance, so Perfetto draws who waited
for whom. Times: µs from the earliest exported event, on the analysis' common base (epoch, or
with the estimated clock offsets applied when the result says so).
"""

from __future__ import annotations

import json
import os

import polars as pl

from .perfetto import _ndjson

COLLECTIVE_TID = 0


def chrome_trace_ranks(
    instances: pl.DataFrame, kernels: pl.DataFrame, files: dict[int, str]
) -> str:
    """The JSON text (module doc). `kernels`: rank, stream_id, name, start_ns, end_ns on the
    common base."""
    first = pl.concat([instances["arrival_ns"], kernels["start_ns"].drop_nulls()]).min()
    origin = int(first)  # type: ignore[arg-type]
    slices = instances.select(
        pl.lit("X").alias("ph"),
        pl.lit("collective").alias("cat"),
        pl.format("{} #{}", "op", "order").alias("name"),
        pl.col("rank").alias("pid"),
        pl.lit(COLLECTIVE_TID).alias("tid"),
        ((pl.col("arrival_ns") - origin) / 1000.0).alias("ts"),
        ((pl.col("end_ns") - pl.col("arrival_ns")) / 1000.0).alias("dur"),
        pl.struct("instance", (pl.col("wait_ns") / 1000.0).alias("wait_us"), "last").alias("args"),
    )
    starts, ends = _flows(instances, origin)
    kern = kernels.filter(pl.col("end_ns").is_not_null()).select(
        pl.lit("X").alias("ph"),
        pl.lit("kernel").alias("cat"),
        "name",
        pl.col("rank").alias("pid"),
        (pl.col("stream_id").fill_null(-2) + 1).alias("tid"),
        ((pl.col("start_ns") - origin) / 1000.0).alias("ts"),
        ((pl.col("end_ns") - pl.col("start_ns")) / 1000.0).alias("dur"),
    )
    meta = _metadata(files, kernels)
    parts = [",\n".join(json.dumps(m) for m in meta)]
    parts += [_ndjson(df) for df in (slices, starts, ends, kern)]
    body = ",\n".join(p for p in parts if p)
    return '{"displayTimeUnit": "ns", "traceEvents": [\n' + body + "\n]}\n"


def _flows(instances: pl.DataFrame, origin: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Flow starts at the last arriver's slice, ends at each other rank's (module doc)."""
    last = instances.filter(pl.col("last")).select(
        "instance", pl.col("rank").alias("_from"), pl.col("arrival_ns").alias("_t0")
    )
    pairs = instances.join(last, on="instance").filter(pl.col("rank") != pl.col("_from"))
    pairs = pairs.with_row_index("id")
    common = [pl.lit("collective").alias("cat"), pl.lit("waits for").alias("name")]
    starts = pairs.select(
        pl.lit("s").alias("ph"),
        *common,
        pl.col("id"),
        pl.col("_from").alias("pid"),
        pl.lit(COLLECTIVE_TID).alias("tid"),
        ((pl.col("_t0") - origin) / 1000.0).alias("ts"),
    )
    ends = pairs.select(
        pl.lit("f").alias("ph"),
        pl.lit("e").alias("bp"),
        *common,
        pl.col("id"),
        pl.col("rank").alias("pid"),
        pl.lit(COLLECTIVE_TID).alias("tid"),
        ((pl.col("arrival_ns") - origin) / 1000.0).alias("ts"),
    )
    return starts, ends


def _metadata(files: dict[int, str], kernels: pl.DataFrame) -> list[dict[str, object]]:
    """Process names (rank and file), sort order, and thread names."""
    meta: list[dict[str, object]] = []
    for r, f in sorted(files.items()):
        meta.append(
            {"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"rank {r} · {f}"}}
        )
        meta.append({"ph": "M", "name": "process_sort_index", "pid": r, "args": {"sort_index": r}})
        meta.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": r,
                "tid": COLLECTIVE_TID,
                "args": {"name": "collectives"},
            }
        )
    for r, s in kernels.select("rank", "stream_id").unique().sort("rank", "stream_id").rows():
        name = f"stream {s}" if s is not None else "stream ?"
        meta.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": r,
                "tid": (s if s is not None else -2) + 1,
                "args": {"name": name},
            }
        )
    return meta


def write_chrome_trace_ranks(
    path: str | os.PathLike[str],
    instances: pl.DataFrame,
    kernels: pl.DataFrame,
    files: dict[int, str],
) -> None:
    """Write `chrome_trace_ranks` to `path` through a temporary name (no half file)."""
    text = chrome_trace_ranks(instances, kernels, files)
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
