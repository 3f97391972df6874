"""Measurement health, per source: is the capture itself trustworthy?

What is checked, and from which table:

* Sampling (`gpu_samples`, `sources.requested_interval_ns`): achieved interval between telemetry
  samples of the same device (median and p95 gap in ms) against the requested one, where the
  sampler recorded it (the NVML sampler and `dcgmi dmon -d`; nvidia-smi `-lms` logs do not say),
  as `interval_ratio` = achieved median / requested; gaps longer than 3× the device's median gap.
  Sampling cadence is rarely what was asked for (formats.md §7.14).
* Overlapping kernels on the same stream (device, process, context, stream): a stream serializes
  its kernels, so an overlap is a clock or parsing error (seen: one 124 ns overlap in the
  nsys 2026.2 H100x2 capture of ../shared/traces).
* Invalid events (`event_health`), per table (kernels, memcpy, graph_replays, markers, ops,
  iterations): `untimed_count`, events that cannot be placed in time (kernels, copies, whole-graph
  replays, operators: no start, or
  neither an end nor a duration; markers: no start; an instant marker without an end is valid;
  iterations: no duration and no start/end pair); `negative_count`, `end_ns < start_ns` or a
  negative `duration_ns` (a clock sign error).
* Iterations: numbers missing from the `min..max` sequence, and duplicates, per device (a dropped
  or repeated line of an iteration log, or a lost `ProfilerStep` range).

What cannot be checked from the tables: events the profiler itself dropped without a record (a full
CUPTI buffer leaves no row), and samples lost before the first or after the last one.

`sampling_health`, `kernel_health` and `iteration_health` return one row per source,
`event_health` one per source and table; `health` joins the per-source ones (every source that
appears in any input).
"""

from __future__ import annotations

import polars as pl

Frame = pl.DataFrame | pl.LazyFrame

EVENT_TABLES: tuple[str, ...] = (
    "kernels",
    "memcpy",
    "graph_replays",
    "markers",
    "ops",
    "iterations",
)


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def sampling_health(
    gpu_samples: Frame,
    sources: Frame | None = None,
    *,
    requested_interval_ms: float | None = None,
) -> pl.DataFrame:
    """Per source: sample count, requested vs achieved interval (ms), gaps > 3× median.

    The requested interval comes from `sources.requested_interval_ns` (null where the sampler did
    not record it); `requested_interval_ms` fills it in for sources that have none.
    """
    out = _gap_stats(gpu_samples)
    requested = pl.lit(requested_interval_ms, dtype=pl.Float64)
    if sources is not None:
        req = _lazy(sources).select(
            "source_id", (pl.col("requested_interval_ns") / 1e6).alias("_req")
        )
        out = out.join(req, on="source_id", how="left")
        requested = pl.coalesce(pl.col("_req"), requested)
    return (
        out.with_columns(requested.alias("requested_interval_ms"))
        .with_columns(
            pl.when(pl.col("requested_interval_ms") > 0)
            .then(pl.col("median_gap_ms") / pl.col("requested_interval_ms"))
            .alias("interval_ratio")
        )
        .select(
            "source_id",
            "sample_count",
            "requested_interval_ms",
            "median_gap_ms",
            "interval_ratio",
            "p95_gap_ms",
            "max_gap_ms",
            "long_gap_count",
        )
        .sort("source_id")
        .collect()
    )


def _gap_stats(gpu_samples: Frame) -> pl.LazyFrame:
    """Per source: sample_count and the median, p95 and max gap (ms) and long-gap count."""
    keys = ["source_id", "device_id"]
    # Per device: sorted sample times -> gaps (a list), its median; then pooled per source.
    # (group_by + list ops instead of a global sort over the string key: ~2x faster on a store
    # of 1,000 sources.) Long gaps are judged against their own device's median.
    per_dev = (
        _lazy(gpu_samples)
        .select(*keys, "timestamp_ns")
        .group_by(keys)
        .agg(
            pl.len().alias("_n"),
            pl.col("timestamp_ns").sort().diff().drop_nulls().alias("_gap"),
        )
        .with_columns(pl.col("_gap").list.median().alias("_med"))
    )
    counts = per_dev.group_by("source_id").agg(pl.col("_n").sum().alias("sample_count"))
    return (
        per_dev.explode("_gap")
        .with_columns((pl.col("_gap") > 3 * pl.col("_med")).alias("_l"))
        .group_by("source_id")
        .agg(
            (pl.col("_gap").median() / 1e6).alias("median_gap_ms"),
            (pl.col("_gap").quantile(0.95, interpolation="linear") / 1e6).alias("p95_gap_ms"),
            (pl.col("_gap").max() / 1e6).alias("max_gap_ms"),
            pl.col("_l").sum().cast(pl.Int64).alias("long_gap_count"),
        )
        .join(counts, on="source_id")
    )


def kernel_health(kernels: Frame) -> pl.DataFrame:
    """Per source: kernels that overlap an earlier kernel of the same stream."""
    # Stream ids are per CUDA context, so a stream is (device, process, context, stream).
    keys = ["source_id", "device_id", "process_id", "context_id", "stream_id"]
    k = _lazy(kernels).select(*keys, "start_ns", "end_ns")
    timed = k.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    # An overlap: a kernel starting before the latest end of the earlier kernels on its stream.
    prev_end = pl.col("end_ns").cum_max().shift(1).over(keys)
    overlaps = (
        timed.filter(pl.col("stream_id").is_not_null())
        .sort([*keys, "start_ns", "end_ns"])
        .with_columns((pl.col("start_ns") < prev_end).fill_null(False).alias("_ov"))
        .group_by("source_id")
        .agg(pl.col("_ov").sum().cast(pl.Int64).alias("overlapping_kernel_count"))
    )
    return (
        k.select("source_id")
        .unique()
        .join(overlaps, on="source_id", how="left")
        .with_columns(pl.col("overlapping_kernel_count").fill_null(0))
        .sort("source_id")
        .collect()
    )


def _event_counts(df: Frame, table: str) -> pl.LazyFrame:
    s, e = pl.col("start_ns"), pl.col("end_ns")
    d = pl.col("duration_ns")
    if table == "markers":
        untimed = s.is_null()
    elif table == "iterations":
        untimed = d.is_null() & (s.is_null() | e.is_null())
    else:
        untimed = s.is_null() | (e.is_null() & d.is_null())
    negative = (e < s).fill_null(False) | (d < 0).fill_null(False)
    return (
        _lazy(df)
        .group_by("source_id")
        .agg(
            pl.len().cast(pl.Int64).alias("row_count"),
            untimed.sum().cast(pl.Int64).alias("untimed_count"),
            negative.sum().cast(pl.Int64).alias("negative_count"),
        )
        .with_columns(pl.lit(table).alias("table"))
    )


def event_health(**tables: Frame) -> pl.DataFrame:
    """Per source and event table: rows, untimed events, negative durations (see module doc).

    Keyword arguments are tables by name (`kernels=…, memcpy=…, markers=…, ops=…,
    iterations=…`); a table without rows gives no row.
    """
    unknown = set(tables) - set(EVENT_TABLES)
    if unknown:
        raise ValueError(f"unknown event table(s) {sorted(unknown)}; expected {EVENT_TABLES}")
    parts = [_event_counts(df, t) for t, df in tables.items()]
    schema = {
        "source_id": pl.String,
        "table": pl.String,
        "row_count": pl.Int64,
        "untimed_count": pl.Int64,
        "negative_count": pl.Int64,
    }
    if not parts:
        return pl.DataFrame(schema=schema)
    order = {t: i for i, t in enumerate(EVENT_TABLES)}
    return (
        pl.concat(parts)
        .select(*schema)
        .collect()
        .sort(pl.col("source_id"), pl.col("table").replace_strict(order, return_dtype=pl.Int64))
    )


def iteration_health(iterations: Frame) -> pl.DataFrame:
    """Per source: iterations, numbers missing from min..max (per device), duplicates."""
    keys = ["source_id", "device_id"]
    per = (
        _lazy(iterations)
        .group_by(keys)
        .agg(
            pl.len().alias("n"),
            pl.col("iteration").n_unique().alias("u"),
            pl.col("iteration").min().alias("lo"),
            pl.col("iteration").max().alias("hi"),
        )
        .with_columns(
            (pl.col("hi") - pl.col("lo") + 1 - pl.col("u")).alias("missing"),
            (pl.col("n") - pl.col("u")).alias("dup"),
        )
    )
    return (
        per.group_by("source_id")
        .agg(
            pl.col("n").sum().cast(pl.Int64).alias("iteration_count"),
            pl.col("missing").sum().cast(pl.Int64).alias("missing_iteration_count"),
            pl.col("dup").sum().cast(pl.Int64).alias("duplicate_iteration_count"),
        )
        .sort("source_id")
        .collect()
    )


def health(
    kernels: Frame,
    memcpy: Frame,
    gpu_samples: Frame,
    iterations: Frame,
    *,
    sources: Frame | None = None,
    requested_interval_ms: float | None = None,
) -> pl.DataFrame:
    """The per-source checks in one row per source that has kernels, samples or iterations.

    Invalid-event counts are summed over kernels, copies and iterations
    (`untimed_event_count`, `negative_event_count`); `event_health` has them per table.
    """
    events = (
        event_health(kernels=kernels, memcpy=memcpy, iterations=iterations)
        .group_by("source_id")
        .agg(
            pl.col("untimed_count").sum().alias("untimed_event_count"),
            pl.col("negative_count").sum().alias("negative_event_count"),
        )
    )
    parts = [
        sampling_health(gpu_samples, sources, requested_interval_ms=requested_interval_ms),
        kernel_health(kernels),
        events,
        iteration_health(iterations),
    ]
    out = parts[0]
    for p in parts[1:]:
        out = out.join(p, on="source_id", how="full", coalesce=True)
    return out.sort("source_id")
