"""The critical path in the Chrome trace: one flow arrow between consecutive events on the path.

`Dataset.critical_path(by_event=True).events` (the "trace" scenario) lists the path's events in
order; each consecutive pair of events that have a track (host events on their process and
thread, kernels on their device and stream, copies beside their stream, as `perfetto` places
them) becomes a flow start `ph: "s"` at the first event's start and a flow end `ph: "f"`,
`bp: "e"`, at the second event's start, `cat: "critical_path"`, ids from `ID_OFFSET` up (apart
from the launch flows' ids). Perfetto draws them as arrows along the path.
"""

from __future__ import annotations

import polars as pl

CAT = "critical_path"
ID_OFFSET = 1_000_000_000


def path_flows(
    events: pl.DataFrame, t0_ns: int, host_pid: int, copy_tid: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Flow starts and flow ends (`cat, name, id, ph, ts, pid, tid`, `bp` on the ends) for
    `events`; an event charged twice (a kernel's carry and its run) links once."""
    gpu = pl.col("kind").is_in(["kernel", "memcpy"])
    ev = (
        events.filter(pl.col("kind").is_not_null() & (pl.col("scenario") == "trace"))
        .sort("source_id", "iteration", "step", nulls_last=True)
        .select(
            "source_id",
            "iteration",
            "start_ns",
            pl.when(gpu)
            .then(pl.col("device_id").fill_null(0))
            .otherwise(pl.col("process_id").fill_null(0) + host_pid)
            .cast(pl.Int64)
            .alias("pid"),
            pl.when(pl.col("kind") == "memcpy")
            .then(pl.col("stream_id").fill_null(0) + copy_tid)
            .when(gpu)
            .then(pl.col("stream_id").fill_null(0))
            .otherwise(pl.col("thread_id").fill_null(0))
            .cast(pl.Int64)
            .alias("tid"),
        )
    )
    nxt = ev.select(pl.all().shift(-1).name.prefix("n_"))
    same = (
        (pl.col("n_start_ns") == pl.col("start_ns"))
        & (pl.col("n_pid") == pl.col("pid"))
        & (pl.col("n_tid") == pl.col("tid"))
    )
    pairs = pl.concat([ev, nxt], how="horizontal").filter(
        (pl.col("n_source_id") == pl.col("source_id"))
        & pl.col("n_iteration").eq_missing(pl.col("iteration"))
        & ~same
    )
    pairs = pairs.with_row_index("id", offset=ID_OFFSET)
    common = [pl.lit(CAT).alias("cat"), pl.lit("critical path").alias("name"), pl.col("id")]
    starts = pairs.select(
        *common,
        pl.lit("s").alias("ph"),
        ((pl.col("start_ns") - t0_ns) / 1e3).alias("ts"),
        "pid",
        "tid",
    )
    ends = pairs.select(
        *common,
        pl.lit("f").alias("ph"),
        pl.lit("e").alias("bp"),
        ((pl.col("n_start_ns") - t0_ns) / 1e3).alias("ts"),
        pl.col("n_pid").alias("pid"),
        pl.col("n_tid").alias("tid"),
    )
    return starts, ends
