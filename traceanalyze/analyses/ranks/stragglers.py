"""Which rank holds a synchronous job back: arrival order at matched collectives.

In data-parallel training every rank waits at each collective for the last one to arrive, so the
slow rank's collectives are the *shortest* and everyone else's run long. Per instance (collectives
matched across ranks by `ranks.match`): each rank's arrival is its collective's start on the
common time base; the last arriver is the rank with the latest arrival (when several ranks share
the latest arrival to the ns, the instance has no last arriver and counts for none); a rank's wait
is `last arrival - its arrival`.

Per rank: `collectives` (instances), `arrived_last` (instances it started last),
`arrived_last_pct`, `wait_ms` (its own waiting, summed), `wait_caused_ms` (the others' waiting
at the instances where it came last), `clock_offset_us` and `offset_spread_us` (`ranks`' clock
offset estimate and its size).

Verdict: ranks sorted by `arrived_last` (then `wait_caused_ms`). One straggler when the first is
last in at least half of the instances and at least twice as often as the next; two when that
fails but, with at least 4 ranks, the first two together are last in at least 75 % of the
instances and the second is last at least twice as often as the third; otherwise "no clear
straggler" (also with fewer than 2 instances). Why each straggler is late: `causes`.
"""

from __future__ import annotations

import polars as pl

from ...results import Stragglers
from .. import ranks
from ..launches import launch_calls
from . import Matched, causes
from . import split as rank_split

Frame = pl.DataFrame | pl.LazyFrame

CLEAR_PCT = 50.0
PAIR_PCT = 75.0


def arrivals(inst: pl.DataFrame) -> pl.DataFrame:
    """`inst` with arrival_ns (= start), last (bool), wait_ns and spread_ns per instance."""
    last_t = pl.col("start_ns").max().over("instance")
    at_last = (pl.col("start_ns") == last_t).sum().over("instance")
    return inst.with_columns(
        pl.col("start_ns").alias("arrival_ns"),
        ((pl.col("start_ns") == last_t) & (at_last == 1)).alias("last"),
        (last_t - pl.col("start_ns")).alias("wait_ns"),
        (last_t - pl.col("start_ns").min().over("instance")).alias("spread_ns"),
    )


def per_rank(arr: pl.DataFrame, m: Matched) -> pl.DataFrame:
    """One row per rank (module doc)."""
    n = arr["instance"].n_unique()
    caused = (
        arr.group_by("instance")
        .agg(pl.col("wait_ns").sum().alias("_c"), pl.col("rank").filter(pl.col("last")).first())
        .group_by("rank")
        .agg(pl.col("_c").sum().alias("_caused"))
    )
    agg = arr.group_by("rank").agg(
        pl.len().alias("collectives"),
        pl.col("last").sum().cast(pl.Int64).alias("arrived_last"),
        (pl.col("wait_ns").sum() / 1e6).alias("wait_ms"),
    )
    out = (
        m.ranks.select(
            "rank",
            "world_size",
            "rank_from",
            rank_split.real_source(),
            "process_id",
            "file",
            "job",
            "job_from",
        )
        .join(agg, on="rank")
        .join(caused, on="rank", how="left")
        .join(m.offsets, on="rank", how="left")
    )
    return out.select(
        "rank",
        "collectives",
        "arrived_last",
        (pl.col("arrived_last") * 100.0 / n).alias("arrived_last_pct"),
        "wait_ms",
        (pl.col("_caused").fill_null(0) / 1e6).alias("wait_caused_ms"),
        (pl.col("clock_offset_ns") / 1e3).round(3).alias("clock_offset_us"),
        (pl.col("offset_spread_ns") / 1e3).round(3).alias("offset_spread_us"),
        "world_size",
        "rank_from",
        "job",
        "job_from",
        "source_id",
        "process_id",
        "file",
    ).sort("rank")


def verdict(table: pl.DataFrame, instances: int) -> tuple[list[int], str]:
    """(straggler ranks, one line) by the module doc's rule."""
    t = table.sort(["arrived_last", "wait_caused_ms", "rank"], descending=[True, True, False])
    shares = t["arrived_last_pct"].to_list()
    ranks = t["rank"].to_list()
    if instances < 2 or len(ranks) < 2:
        return [], f"no clear straggler: {instances} collective(s) matched over {len(ranks)} ranks"
    s = [*shares, 0.0, 0.0]
    if s[0] >= CLEAR_PCT and s[0] >= 2 * s[1]:
        chosen = ranks[:1]
    elif len(ranks) >= 4 and s[0] + s[1] >= PAIR_PCT and s[1] >= 2 * s[2]:
        chosen = ranks[:2]
    else:
        return [], (
            f"no clear straggler: the most often last, rank {ranks[0]}, was last in "
            f"{_pct(s[0])} of {instances} collectives, next rank {ranks[1]} {_pct(s[1])}"
        )
    parts = []
    for r in chosen:
        row = t.filter(pl.col("rank") == r).row(0, named=True)
        parts.append(
            f"rank {r}: last in {row['arrived_last']} of {instances} collectives "
            f"({_pct(row['arrived_last_pct'])}); the others waited {row['wait_caused_ms']:,.3f} "
            "ms on it"
        )
    nxt = len(chosen)
    tail = f"; next rank {ranks[nxt]} {_pct(s[nxt])}" if nxt < len(ranks) else ""
    word = "straggler" if nxt == 1 else "stragglers"
    return chosen, f"{word}: " + "; ".join(parts) + tail


def _pct(x: float) -> str:
    return f"{x:.1f} %"


def stragglers(
    sources: Frame,
    kernels: Frame,
    ops: Frame,
    markers: Frame,
    gpu_samples: Frame,
    *,
    api_calls: Frame | None = None,
    gpu_metrics: Frame | None = None,
    job: str | None = None,
    align: bool | None = None,
) -> Stragglers:
    """The whole analysis over one job's sources (see this module's and `ranks`' docs)."""
    src = _df(sources)
    host_lf = ranks.host_ranges(ops, markers)
    kern_lf = ranks.lazy(kernels)
    events = ranks.collectives(kern_lf, host_lf)  # collected: collectives only
    split = _split(src, events, markers)
    events = rank_split.by_process(events, split)
    table = split.table
    one, notes = ranks.choose_job(table, events, job)
    notes += _without_collectives(kern_lf, events, table)
    # Only now the job's own rows, whole (a store may hold many jobs).
    ids = one["source_id"].implode()
    kern, op = (_job_rows(lf, one, split) for lf in (kern_lf, host_lf))
    origins = rank_split.origins_split(ranks.origins_of(src), split)
    m = ranks.match(one, events.filter(pl.col("source_id").is_in(ids)), origins, align=align)
    arr = arrivals(m.instances)
    rows = per_rank(arr, m)
    chosen, line = verdict(rows, arr["instance"].n_unique())
    if api_calls is not None:  # launch calls tell launch gaps from time with nothing queued
        kern = launch_calls(kern, _job_rows(ranks.lazy(api_calls), one, split))
    gaps = causes.host_gaps(arr, m, kern, op)
    samples = _job_samples(gpu_samples, gpu_metrics, table, m.job, split)
    tel = causes.telemetry(arr, m, table, samples, origins)
    starts = causes.step_starts(m, _df(op))
    waited = {
        int(r): w / n
        for r, w, n in rows.select("rank", "wait_caused_ms", "arrived_last").rows()
        if n and w is not None
    }
    why = causes.cause_lines(chosen, gaps, tel, starts, waited)
    rows = rows.with_columns(
        pl.col("rank").is_in(chosen).alias("straggler"),
        pl.col("rank").replace_strict(why, default=None, return_dtype=pl.String).alias("cause"),
    )
    return Stragglers(
        ranks=rows,
        instances=arr.with_columns(rank_split.real_source()),
        verdict=line,
        stragglers=tuple(chosen),
        causes=tuple(why[r] for r in chosen),
        time_base=m.time_base,
        job=m.job,
        notes=split.notes + tuple(notes) + m.notes,
        host=gaps,
        telemetry=tel,
        kernels=_on_base(kern, m),
    )


def identify(sources: Frame, kernels: Frame, ops: Frame, markers: Frame) -> pl.DataFrame:
    """Who is which rank of which job, for every source: source_id, file, job, rank,
    world_size, rank_from, process_id (split sources: one row per process) and
    collective_count (what `stragglers` would match on)."""
    events = ranks.collectives(ranks.lazy(kernels), ranks.host_ranges(ops, markers))
    split = _split(_df(sources), events, markers)
    counts = rank_split.by_process(events, split).group_by("source_id").len("collective_count")
    out = split.table.join(counts, on="source_id", how="left").with_columns(
        pl.col("collective_count").fill_null(0).cast(pl.Int64), rank_split.real_source()
    )
    return out.sort("job", "rank", "file", nulls_last=True)


def _split(src: pl.DataFrame, events: pl.DataFrame, markers: Frame) -> rank_split.Split:
    """Who is which rank: the sources' own statement, else NVTX, else the file name, else one
    rank per process or per file by GPU (`ranks`, `ranks.split`)."""
    named = ranks.named_ranks(markers)
    table = ranks.with_named_ranks(ranks.rank_table(src), named)
    gpu = events.filter(pl.col("stream_id") != ranks.CPU_STREAM)
    return rank_split.split_processes(table, gpu, named)


def _without_collectives(
    kernels: pl.LazyFrame, events: pl.DataFrame, table: pl.DataFrame
) -> list[str]:
    with_kernels = set(kernels.select("source_id").unique().collect()["source_id"].to_list())
    idle = with_kernels - set(events.select(rank_split.real_source())["source_id"].to_list())
    return [f"{f}: kernels but no collectives; not a rank here" for f in _files(table, idle)]


def _job_rows(lf: pl.LazyFrame, one: pl.DataFrame, split: rank_split.Split) -> pl.DataFrame:
    """`lf`'s rows of the ranks in `one` (split sources by process), collected."""
    real = one.select(rank_split.real_source())["source_id"].unique().implode()
    df = rank_split.by_process(lf.filter(pl.col("source_id").is_in(real)).collect(), split)
    return df.filter(pl.col("source_id").is_in(one["source_id"].implode()))


def _job_samples(
    gpu_samples: Frame,
    gpu_metrics: Frame | None,
    table: pl.DataFrame,
    job: str,
    split: rank_split.Split,
) -> pl.DataFrame:
    """The telemetry of the job's sources (ranks and sampler logs; nsys GPU metrics as
    `causes.metric_samples`), split sources by GPU."""
    ids = table.filter(ranks.in_job(job)).select(rank_split.real_source())["source_id"]
    df = ranks.lazy(gpu_samples).filter(pl.col("source_id").is_in(ids.implode())).collect()
    if gpu_metrics is not None:
        nsys = ranks.lazy(gpu_metrics).filter(pl.col("source_id").is_in(ids.implode()))
        df = pl.concat([df, causes.metric_samples(nsys.collect())], how="diagonal_relaxed")
    return rank_split.by_device(df, split)


def _on_base(kern: pl.DataFrame, m: Matched) -> pl.DataFrame:
    """The ranks' kernels with rank, times moved to the common base."""
    rank_of = dict(m.ranks.select("source_id", "rank").iter_rows())
    shift = pl.col("rank").replace_strict(m.shifts, return_dtype=pl.Int64)
    k = kern.with_columns(
        pl.col("source_id").replace_strict(rank_of, return_dtype=pl.Int64).alias("rank")
    )
    return k.select(
        "rank", "stream_id", "name", pl.col("start_ns") + shift, pl.col("end_ns") + shift
    ).sort("rank", "start_ns")


def _files(table: pl.DataFrame, ids: set[str]) -> list[str]:
    return sorted(table.filter(pl.col("source_id").is_in(list(ids)))["file"].to_list())


def _df(x: Frame) -> pl.DataFrame:
    return x.collect() if isinstance(x, pl.LazyFrame) else x
