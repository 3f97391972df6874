"""Per-source overview: kernels, top kernels, copies, telemetry, iterations.

Whole-graph replays (`graph_replays`: nsys `--cuda-graph-trace=graph`, one row per replay and
no kernel rows) are not kernels: the kernel counts leave them out, the overview counts them
apart (`graph_replay_count`, `total_graph_replay_ns`) and the top kernels show each graph as a
row of its own (`CUDA graph <graph_id>`, `whole_graph` true), so their GPU time is seen.

Every function takes a LazyFrame or DataFrame of one schema table (any number of sources) and
returns a DataFrame keyed by `source_id`. They stay lazy until the end so that a store of many
sources is scanned, not loaded.
"""

from __future__ import annotations

import polars as pl

from .warmup import steady

Frame = pl.DataFrame | pl.LazyFrame

TELEMETRY_COLUMNS: tuple[str, ...] = (
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "temperature_c",
    "fan_pct",
    "gpu_util_pct",
)


def _lazy(df: Frame) -> pl.LazyFrame:
    return df.lazy() if isinstance(df, pl.DataFrame) else df


def _dur() -> pl.Expr:
    # duration_ns where given, else end - start.
    return pl.coalesce(pl.col("duration_ns"), pl.col("end_ns") - pl.col("start_ns"))


def kernel_overview(kernels: Frame, graph_replays: Frame | None = None) -> pl.DataFrame:
    """Per source: kernel count, total kernel time, devices, distinct kernel names; with
    `graph_replays`, also graph_replay_count and total_graph_replay_ns (whole-graph rows, not
    kernels; devices counted over both)."""
    dev = pl.col("device_id")
    k = _lazy(kernels).select("source_id", "name", dev, _dur().alias("_d"))
    if graph_replays is None:
        return (
            k.group_by("source_id")
            .agg(
                pl.len().alias("kernel_count"),
                pl.col("_d").sum().alias("total_kernel_ns"),
                dev.n_unique().alias("device_count"),
                pl.col("name").n_unique().alias("distinct_name_count"),
            )
            .sort("source_id")
            .collect()
        )
    r = _lazy(graph_replays).select(
        "source_id", pl.lit(None, dtype=pl.String).alias("name"), dev, _dur().alias("_d")
    )
    both = pl.concat(
        [k.with_columns(pl.lit(False).alias("_g")), r.with_columns(pl.lit(True).alias("_g"))]
    )
    g = pl.col("_g")
    return (
        both.group_by("source_id")
        .agg(
            (~g).sum().cast(pl.UInt32).alias("kernel_count"),
            pl.col("_d").filter(~g).sum().alias("total_kernel_ns"),
            dev.n_unique().alias("device_count"),
            pl.col("name").filter(~g).n_unique().alias("distinct_name_count"),
            g.sum().cast(pl.UInt32).alias("graph_replay_count"),
            pl.col("_d").filter(g).sum().alias("total_graph_replay_ns"),
        )
        .sort("source_id")
        .collect()
    )


def replay_name() -> pl.Expr:
    """A whole-graph replay's name: `CUDA graph <graph_id>` (`CUDA graph` where the source
    gives no id); the summary, the timeline and its Perfetto export show it."""
    gid = pl.col("graph_id").cast(pl.String)
    name = pl.when(gid.is_null()).then(pl.lit("CUDA graph")).otherwise(pl.lit("CUDA graph ") + gid)
    return name.alias("name")


def replays_as_kernels(
    kernels: Frame, graph_replays: Frame | None, *, ids: bool = True
) -> pl.LazyFrame:
    """`kernels` and, after them, one kernel row per whole-graph replay, for the analyses that
    give GPU time per kernel row (operators, overlap; the timeline's `with_replays`): named
    `CUDA graph <graph_id>` (`replay_name`), on its device and stream, launched by its graph
    launch call (its correlation id), the columns of `kernels` it lacks null and `kernel_id` -1,
    -2, … (an id of its own, never a launch index; null with `ids=False`). What a replay ran is
    not in the export."""
    k = _lazy(kernels)
    if graph_replays is None:
        return k
    cols = k.collect_schema().names()
    r = _lazy(graph_replays)
    have = set(r.collect_schema().names())
    keep = [c for c in cols if c in have and c not in ("name", "kernel_id")]
    rows = r.select(
        *keep,
        replay_name(),
        *([(-1 - pl.int_range(pl.len(), dtype=pl.Int64)).alias("kernel_id")] if ids else []),
        *([pl.lit(True).alias("graph_launch")] if "graph_launch" in cols else []),
    )
    return pl.concat([k, rows], how="diagonal_relaxed").select(cols)


def graph_replay_rows(graph_replays: Frame) -> pl.LazyFrame:
    """Whole-graph replays as named rows for `top_kernels` (`replay_name`), `_d` their
    duration."""
    return _lazy(graph_replays).select("source_id", replay_name(), _dur().alias("_d"))


def top_kernels(kernels: Frame, n: int = 10, graph_replays: Frame | None = None) -> pl.DataFrame:
    """Per source, the `n` kernels (by name) with the most total time, with their share in %.

    With `graph_replays`, each graph's whole-graph replays are one more row (`graph_replay_rows`;
    `launch_count` its replays), `whole_graph` true, and the shares are of kernel and replay
    time together."""
    lf = _lazy(kernels).select("source_id", "name", _dur().alias("_d"))
    if graph_replays is not None:
        lf = pl.concat(
            [
                lf.with_columns(pl.lit(False).alias("whole_graph")),
                graph_replay_rows(graph_replays).with_columns(pl.lit(True).alias("whole_graph")),
            ]
        )
    keys = ["source_id", "name", *(["whole_graph"] if graph_replays is not None else [])]
    return (
        lf.group_by(*keys)
        .agg(
            pl.len().alias("launch_count"),
            pl.col("_d").sum().alias("total_ns"),
            pl.col("_d").mean().alias("mean_ns"),
        )
        .with_columns(
            (100.0 * pl.col("total_ns") / pl.col("total_ns").sum().over("source_id")).alias(
                "share_pct"
            )
        )
        .sort(["source_id", "total_ns", "name"], descending=[False, True, False])
        .group_by("source_id", maintain_order=True)
        .head(n)
        .collect()
    )


def top_ops(ops: Frame, n: int = 10) -> pl.DataFrame:
    """Per source, the `n` host operators (by name) with the most inclusive time, beside their
    self time (exclusive of child operators on the same thread).

    Definitions in `analyses.ops`: an instance nested in another of the same name is not added
    again to the inclusive time, so operators still overlap across names (aten::conv2d holds
    aten::convolution) and no share of a total is given. `mean_ns` is inclusive time per call.
    """
    from .ops import host_ops, op_tree

    host = host_ops(ops)
    calls = pl.DataFrame(
        schema={
            "source_id": pl.String,
            "process_id": pl.Int64,
            "thread_id": pl.Int64,
            "start_ns": pl.Int64,
        }
    )
    tree, _ = op_tree(host, calls)
    d = pl.col("end_ns") - pl.col("start_ns")
    return (
        tree.group_by("source_id", "name")
        .agg(
            pl.len().alias("call_count"),
            d.filter(~pl.col("nested_same")).sum().alias("inclusive_ns"),
            (d - pl.col("child_ns")).clip(lower_bound=0).sum().alias("self_ns"),
            d.mean().alias("mean_ns"),
        )
        .sort(["source_id", "inclusive_ns", "name"], descending=[False, True, False])
        .group_by("source_id", maintain_order=True)
        .head(n)
    )


def copies_by_kind(memcpy: Frame) -> pl.DataFrame:
    """Per source and copy kind: count, bytes, time."""
    return (
        _lazy(memcpy)
        .group_by("source_id", "kind")
        .agg(
            pl.len().alias("copy_count"),
            # null, not 0, when no copy of the kind states its size (ROCm traces omit bytes)
            pl.when(pl.col("size_bytes").count() > 0)
            .then(pl.col("size_bytes").sum())
            .alias("total_bytes"),
            _dur().sum().alias("total_ns"),
        )
        .sort(["source_id", "total_ns", "kind"], descending=[False, True, False])
        .collect()
    )


def telemetry_stats(gpu_samples: Frame) -> pl.DataFrame:
    """Per source, device and telemetry column: sample count, min, median, max (nulls ignored).

    One group-by over the wide samples, then the small result is reshaped to one row per
    metric: unpivoting millions of samples first costs twice the memory for the same answer.
    """
    stats = ("sample_count", "min", "median", "max")
    aggs = []
    for m in TELEMETRY_COLUMNS:
        c = pl.col(m)
        aggs += [
            c.count().alias(f"{m}|sample_count"),
            c.min().cast(pl.Float64).alias(f"{m}|min"),
            c.median().cast(pl.Float64).alias(f"{m}|median"),
            c.max().cast(pl.Float64).alias(f"{m}|max"),
        ]
    wide = _lazy(gpu_samples).group_by("source_id", "device_id").agg(aggs).collect()
    parts = [
        wide.select(
            "source_id",
            "device_id",
            pl.lit(m).alias("metric"),
            pl.lit(i, dtype=pl.Int64).alias("_o"),
            *[pl.col(f"{m}|{s}").alias(s) for s in stats],
        )
        for i, m in enumerate(TELEMETRY_COLUMNS)
    ]
    schema = {
        "source_id": pl.String,
        "device_id": pl.Int64,
        "metric": pl.String,
        "_o": pl.Int64,
        "sample_count": pl.UInt32,
        "min": pl.Float64,
        "median": pl.Float64,
        "max": pl.Float64,
    }
    long = pl.concat(parts) if parts and wide.height else pl.DataFrame(schema=schema)
    return (
        long.filter(pl.col("sample_count") > 0)
        .with_columns(pl.col("sample_count").cast(pl.UInt32))
        .sort(["source_id", "device_id", "_o"], nulls_last=True)
        .drop("_o")
    )


def iteration_stats(
    iterations: Frame, *, warmup: int | None = None, first_steady: int | None = None
) -> pl.DataFrame:
    """Per source and device: iteration count, how many of them were warm-up (`analyses.warmup`,
    the rule `variability` and `mfu` use too), and duration statistics in ms and the images/s
    median over the steady ones."""
    ms = pl.col("duration_ns") / 1e6
    lf = _lazy(iterations)
    counts = lf.group_by("source_id", "device_id").agg(pl.len().alias("iteration_count"))
    kept = steady(lf, ["source_id", "device_id"], warmup=warmup, first_steady=first_steady)
    return (
        counts.join(
            kept.group_by("source_id", "device_id").agg(
                pl.len().alias("_steady"),
                ms.mean().alias("mean_ms"),
                ms.median().alias("median_ms"),
                ms.min().alias("min_ms"),
                ms.max().alias("max_ms"),
                ms.std().alias("std_ms"),
                pl.col("images_per_s").median().alias("median_images_per_s"),
            ),
            on=["source_id", "device_id"],
            how="left",
            nulls_equal=True,
        )
        .with_columns(
            (pl.col("iteration_count") - pl.col("_steady").fill_null(0)).alias("warmup_count")
        )
        .select(
            "source_id",
            "device_id",
            "iteration_count",
            "warmup_count",
            "mean_ms",
            "median_ms",
            "min_ms",
            "max_ms",
            "std_ms",
            "median_images_per_s",
        )
        .sort(["source_id", "device_id"], nulls_last=True)
        .collect()
    )
