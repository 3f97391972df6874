"""Several ranks of one job: who is which rank, and their collectives matched across ranks.

Rank identity (`rank_table`, `with_named_ranks`), always stated in `rank_from`:

* `sources.rank` / `world_size` when the reader found them, `rank_from` saying where
  (`sources.rank_from`: "NVTX thread name", "thread name", "process name", "command line";
  PyTorch profiler: "distributedInfo"; other formats that state it: "trace");
* else NVTX ranges or marks whose whole text names one rank (`rank 3`, `Rank 3 of 8`;
  `named_ranks`): `rank_from = "NVTX"` (a file whose processes name different ranks is split by
  process, `split`);
* else `rank<N>` / `worker<N>` in the file name (nsys, nvprof and sampler logs written per rank;
  `rank_from = "file name"`), world size unknown;
* else, for one file holding the collectives of several processes, one rank per process
  (`split`);
* else the source has no rank and takes no part (a note says so when it has collectives).

Job key, stated in `job_from`: `sources.job` where the source states one (`traceanalyze
collect`'s run id, from the manifest beside the file: "collect manifest"), else the file's
directory ("directory": all ranks of a job are usually written to one directory). Ranks of one
job must agree on the world size, and a rank number may appear only once per job.

Collectives (`collectives`): NCCL and RCCL kernels, `ncclKernel_<Op>_…` and `ncclDevKernel_<Op>_…`
(`void ` prefix allowed; RCCL uses the same names, or `ncclDevKernel_Generic`), and, on sources
without such kernels, the CPU collectives PyTorch records as user annotations or operators
(`gloo:all_reduce`, …; `host_ranges`).
Matching (`match`): per rank, communication "streams" are numbered by their first collective
(CUDA stream; all CPU collectives are one stream), and the k-th collective of operation `op` on
stream number s is one instance on every rank (NCCL runs a communicator's collectives in the
order they were issued, which is the same on every rank). An instance counts only when every rank
has it; the rest is left out and said so in the notes.

Time base: epoch ns (`sources.time_origin_epoch_ns` + the source's ns) when every rank's source
states its origin. A collective ends at the same moment on every rank, so each rank's clock offset
is estimated as the median over instances of its end minus the instances' median end; the offsets
are always reported, and applied only when asked (`align=True`) or when some rank has no epoch
origin (then there is no other common base, and the result says so).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from ...errors import NotAnswerable, UsageProblem
from ...rank_names import NAMED_RANK

Frame = pl.DataFrame | pl.LazyFrame

# `rank3`, `rank_3`, `worker-3` as a whole word of the file name (not `myrank3x`).
RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])(?:rank|worker)[_-]?(\d+)(?![0-9])", re.IGNORECASE)
# ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_SendRecv(…), void ncclKernel_… (nvprof)
NCCL_KERNEL = r"^(?:void\s+)?(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)"
# PyTorch's record of a gloo collective: `gloo:all_reduce`, `gloo:broadcast`, …
CPU_COLLECTIVE = r"^gloo:([a-z_]+)"
CPU_STREAM = -1
# Offsets above this are worth a note when not applied: matched NCCL kernels' ends agree to a
# few µs on one clock (the 8-rank DLRM set: within 7 µs).
BIG_OFFSET_NS = 100_000


def _df(x: Frame) -> pl.DataFrame:
    return x.collect() if isinstance(x, pl.LazyFrame) else x


def lazy(x: Frame) -> pl.LazyFrame:
    return x.lazy() if isinstance(x, pl.DataFrame) else x


def rank_from_name(path: str | None) -> int | None:
    """The rank in a file name (`rank3`, `worker_3`), or None."""
    if not path:
        return None
    m = RANK_IN_NAME.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def rank_table(sources: Frame) -> pl.DataFrame:
    """One row per source: source_id, file, job, job_from, rank, world_size, rank_from,
    process_id (null: the whole source is the rank; `split` fills it) (module doc)."""
    rows = []
    for row in _df(sources).iter_rows(named=True):
        path = row.get("path") or row["source_id"]
        rank, world, how = row.get("rank"), row.get("world_size"), row.get("rank_from")
        if rank is not None:
            how = how or ("distributedInfo" if row.get("format") == "kineto_json" else "trace")
        else:
            rank = rank_from_name(path)
            how = "file name" if rank is not None else None
        job = row.get("job")
        rows.append(
            {
                "source_id": row["source_id"],
                "file": path,
                "job": job if job is not None else (os.path.dirname(path) or "."),
                "job_from": (row.get("job_from") or "trace") if job is not None else "directory",
                "rank": rank,
                "world_size": world,
                "rank_from": how,
                "process_id": None,
            }
        )
    return pl.DataFrame(rows, schema=RANK_TABLE, orient="row")


RANK_TABLE = {
    "source_id": pl.String,
    "file": pl.String,
    "job": pl.String,
    "job_from": pl.String,
    "rank": pl.Int64,
    "world_size": pl.Int64,
    "rank_from": pl.String,
    "process_id": pl.Int64,
}


def in_job(job: str) -> pl.Expr:
    """Rows of `job` or of a job that holds it (`<run-id>` holds `<run-id>/bs<B>`: a collect
    run's host-wide sampler log serves each batch size's job)."""
    return (pl.col("job") == job) | pl.lit(job).str.starts_with(pl.col("job") + "/")


def named_ranks(markers: Frame) -> pl.DataFrame:
    """Per (source_id, process_id): the rank NVTX names (a range or mark whose whole text is
    `rank 3`, `Rank 3 of 8`, `MPI Rank 3`, `worker-3`; `rank_names`): rank,
    world_size. A process whose NVTX names several ranks names none."""
    m = (
        lazy(markers)
        .filter(pl.col("category") == "nvtx")
        .select(
            "source_id",
            "process_id",
            pl.col("name").str.extract(NAMED_RANK, 1).cast(pl.Int64).alias("rank"),
            pl.col("name").str.extract(NAMED_RANK, 2).cast(pl.Int64).alias("world_size"),
        )
        .filter(pl.col("rank").is_not_null())
        .unique()
        .collect()
    )
    per = m.group_by("source_id", "process_id").agg(
        pl.col("rank").unique().alias("_r"), pl.col("world_size").drop_nulls().unique().alias("_w")
    )
    return per.filter(pl.col("_r").list.len() == 1).select(
        "source_id",
        "process_id",
        pl.col("_r").list.first().alias("rank"),
        pl.when(pl.col("_w").list.len() == 1).then(pl.col("_w").list.first()).alias("world_size"),
    )


def with_named_ranks(table: pl.DataFrame, named: pl.DataFrame) -> pl.DataFrame:
    """`table` with the rank NVTX names for sources whose content states none (file-name ranks
    give way): where all its naming processes name one rank, `rank_from = "NVTX"`. Sources
    whose processes name several ranks are left to `split`."""
    one = (
        named.group_by("source_id")
        .agg(pl.col("rank").unique().alias("_r"), pl.col("world_size").drop_nulls().unique())
        .filter(pl.col("_r").list.len() == 1)
        .select(
            "source_id",
            pl.col("_r").list.first().alias("_rank"),
            pl.when(pl.col("world_size").list.len() == 1)
            .then(pl.col("world_size").list.first())
            .alias("_world"),
        )
    )
    open_ = pl.col("rank").is_null() | (pl.col("rank_from") == "file name")
    hit = open_ & pl.col("_rank").is_not_null()
    out = table.join(one, on="source_id", how="left").with_columns(
        pl.when(hit).then(pl.col("_rank")).otherwise(pl.col("rank")).alias("rank"),
        pl.when(hit).then(pl.col("_world")).otherwise(pl.col("world_size")).alias("world_size"),
        pl.when(hit).then(pl.lit("NVTX")).otherwise(pl.col("rank_from")).alias("rank_from"),
    )
    return out.select(table.columns)


def host_ranges(ops: Frame, markers: Frame) -> pl.LazyFrame:
    """Operators and host-side annotations as one frame: source_id, name, start_ns, end_ns
    (PyTorch records `gloo:all_reduce` and `enumerate(DataLoader)#…` as user annotations,
    which the reader keeps in `markers`; older traces have them as operators)."""
    cols = ["source_id", "process_id", "name", "start_ns", "end_ns"]
    mk = lazy(markers).filter(pl.col("device_id").is_null()).select(cols)
    return pl.concat([lazy(ops).select(cols), mk])


def collectives(kernels: Frame, ops: Frame | None = None) -> pl.DataFrame:
    """Collective events per source: source_id, device_id, stream_id (CPU: -1), op, start_ns,
    end_ns; kernels where a source has NCCL/RCCL kernels, else its gloo host ranges (`ops`:
    `host_ranges(...)` or the ops table)."""
    k = (
        lazy(kernels)
        .with_columns(pl.col("name").str.extract(NCCL_KERNEL).alias("op"))
        .filter(pl.col("op").is_not_null() & pl.col("start_ns").is_not_null())
        .select("source_id", "process_id", "device_id", "stream_id", "op", "start_ns", "end_ns")
        .collect()
    )
    if ops is None:
        return k
    c = (
        lazy(ops)
        .filter(~pl.col("source_id").is_in(k["source_id"].unique().implode()))
        .with_columns(pl.col("name").str.extract(CPU_COLLECTIVE).alias("op"))
        .filter(pl.col("op").is_not_null() & pl.col("start_ns").is_not_null())
        .select(
            "source_id",
            "process_id",
            pl.lit(None, dtype=pl.Int64).alias("device_id"),
            pl.lit(CPU_STREAM, dtype=pl.Int64).alias("stream_id"),
            "op",
            "start_ns",
            "end_ns",
        )
        .collect()
    )
    return pl.concat([k, c.cast(k.schema)])


@dataclass(frozen=True)
class Matched:
    """`instances`: one row per instance and rank (instance, stream, op, order, rank,
    source_id, start_ns, end_ns on the common base, offset applied); `ranks`: the rank table of
    the ranks that took part; `offsets`: rank, clock_offset_ns, offset_spread_ns; `time_base`:
    how the ranks' times were put on one base; `shifts`: rank -> ns added to its source's
    times to reach that base; `notes`: what was left out and why."""

    instances: pl.DataFrame
    ranks: pl.DataFrame
    offsets: pl.DataFrame
    time_base: str
    job: str
    notes: tuple[str, ...]
    shifts: dict[int, int]


def choose_job(
    ranks: pl.DataFrame, events: pl.DataFrame, job: str | None
) -> tuple[pl.DataFrame, list[str]]:
    """The rank rows of one job (the only one, or `job`) whose sources have collectives;
    errors for several jobs without `job`, duplicate ranks and mixed world sizes."""
    with_coll = ranks.join(events.select("source_id").unique(), on="source_id", how="semi")
    known = with_coll.filter(pl.col("rank").is_not_null())
    jobs = sorted(known["job"].unique().to_list())
    notes = [
        f"{f}: has collectives but no rank (neither in the trace nor as rank<N>/worker<N> in "
        "its name); left out"
        for f in with_coll.filter(pl.col("rank").is_null())["file"].to_list()
    ]
    if job is None and len(jobs) > 1:
        raise UsageProblem(f"ranks of several jobs; choose one (job=NAME): {', '.join(jobs)}")
    if job is not None and job not in jobs:
        raise UsageProblem(f"no job {job!r} with collectives; jobs: {', '.join(jobs) or 'none'}")
    if not jobs:
        raise NotAnswerable(
            "no source with collectives names its rank; stragglers needs the ranks of one job"
            if with_coll.height
            else "no collectives (NCCL/RCCL kernels or gloo operators) in any source"
        )
    one = known.filter(pl.col("job") == (job or jobs[0]))
    sizes = sorted(one["world_size"].drop_nulls().unique().to_list())
    if len(sizes) > 1:
        by = "; ".join(
            f"world size {s}: {', '.join(one.filter(pl.col('world_size') == s)['file'])}"
            for s in sizes
        )
        raise UsageProblem(f"ranks from different jobs in {job or jobs[0]!r} ({by})")
    dup = one.filter(pl.col("rank").is_duplicated()).sort("rank", "file")
    if dup.height:
        r = dup["rank"][0]
        files = ", ".join(dup.filter(pl.col("rank") == r)["file"])
        raise UsageProblem(
            f"rank {r} appears more than once: {files} (two runs in one directory? give each "
            "run its own directory, or pass one run's files)"
        )
    return one.sort("rank"), notes


def _numbered(events: pl.DataFrame) -> pl.DataFrame:
    """Streams numbered per rank by their first collective; order k per (stream, op)."""
    first = events.group_by("rank", "stream_id").agg(pl.col("start_ns").min().alias("_f"))
    first = first.with_columns(
        pl.col("_f").rank("ordinal").over("rank").cast(pl.Int64).alias("stream")
    )
    ev = events.join(first.drop("_f"), on=["rank", "stream_id"]).sort("rank", "start_ns")
    return ev.with_columns(
        (pl.col("start_ns").rank("ordinal").over("rank", "stream", "op") - 1)
        .cast(pl.Int64)
        .alias("order")
    )


def _drop_unmatched(ev: pl.DataFrame, ranks: list[int]) -> tuple[pl.DataFrame, list[str]]:
    notes: list[str] = []
    counts = ev.group_by("stream", "op", "rank").agg(pl.len().alias("n"))
    keep = []
    for (stream, op), g in counts.sort("stream", "op").group_by(
        "stream", "op", maintain_order=True
    ):
        have = dict(zip(g["rank"].to_list(), g["n"].to_list(), strict=True))
        missing = [r for r in ranks if r not in have]
        if missing:
            notes.append(
                f"{op} on stream #{stream}: not on rank(s) {', '.join(map(str, missing))}; "
                f"its {sum(have.values())} kernels left out"
            )
            continue
        n = min(have.values())
        keep.append((stream, op, n))
        for r, c in sorted(have.items()):
            if c > n:
                notes.append(
                    f"rank {r} has {c} {op} on stream #{stream}, the fewest of any rank {n}: "
                    f"its last {c - n} left out"
                )
    if not keep:
        return ev.clear(), notes
    k = pl.DataFrame(
        keep, schema={"stream": pl.Int64, "op": pl.String, "_n": pl.Int64}, orient="row"
    )
    ev = ev.join(k, on=["stream", "op"]).filter(pl.col("order") < pl.col("_n")).drop("_n")
    return ev, notes


def _offsets(inst: pl.DataFrame) -> pl.DataFrame:
    """Per rank: median over instances of (end - the instance's median end), and the spread
    (max - min) of that difference over instances, as the estimate's size."""
    d = inst.with_columns(
        (pl.col("end_ns") - pl.col("end_ns").median().over("instance")).alias("_d")
    )
    return (
        d.group_by("rank")
        .agg(
            pl.col("_d").median().round(0).cast(pl.Int64).alias("clock_offset_ns"),
            (pl.col("_d").max() - pl.col("_d").min()).alias("offset_spread_ns"),
        )
        .sort("rank")
    )


def match(
    ranks: pl.DataFrame,
    events: pl.DataFrame,
    origins: dict[str, int | None],
    *,
    align: bool | None = None,
) -> Matched:
    """Instances of the ranks' collectives (module doc); `ranks` is one job's rank table,
    `events` `collectives(...)`, `origins` source_id -> time_origin_epoch_ns."""
    notes: list[str] = []
    if ranks.height < 2:
        raise NotAnswerable(
            f"stragglers needs collectives of at least 2 ranks; found {ranks.height}"
        )
    world = ranks["world_size"].drop_nulls()
    job = str(ranks["job"][0])
    have = ranks["rank"].to_list()
    if world.len() and int(world[0]) > len(have):
        miss = sorted(set(range(int(world[0]))) - set(have))
        notes.append(
            f"world size {int(world[0])} but {len(have)} ranks have collectives; missing "
            f"rank(s) {', '.join(map(str, miss))}: matched over the others"
        )
    epoch = all(origins.get(s) is not None for s in ranks["source_id"])
    ev = events.join(ranks.select("source_id", "rank"), on="source_id")
    if epoch:
        shift = pl.col("source_id").replace_strict(origins, return_dtype=pl.Int64)
        ev = ev.with_columns(pl.col("start_ns") + shift, pl.col("end_ns") + shift)
    if epoch:
        _check_overlap(ev, ranks)
    ev, dropped = _drop_unmatched(_numbered(ev), have)
    notes += dropped
    if ev.height == 0:
        raise NotAnswerable(
            "no collective is on every rank; nothing to match", details="; ".join(notes)
        )
    key = ev.group_by("stream", "op", "order").agg(pl.col("start_ns").median().alias("_m"))
    key = key.sort("_m", "stream", "op", "order").with_row_index("instance").drop("_m")
    inst = ev.join(key, on=["stream", "op", "order"]).with_columns(
        pl.col("instance").cast(pl.Int64)
    )
    offsets = _offsets(inst)
    shifts = {
        int(r): ((origins[str(s)] or 0) if epoch else 0)
        for r, s in ranks.select("rank", "source_id").rows()
    }
    apply = align if align is not None else not epoch
    inst, base = _on_one_base(inst, offsets, shifts, apply=apply, epoch=epoch, notes=notes)
    inst = inst.select(
        "instance", "stream", "op", "order", "rank", "source_id", "device_id", "start_ns", "end_ns"
    ).sort("instance", "rank")
    return Matched(inst, ranks.sort("rank"), offsets, base, job, tuple(notes), shifts)


def _check_overlap(ev: pl.DataFrame, ranks: pl.DataFrame) -> None:
    """On epoch time the ranks of one job run their collectives at the same time: a rank whose
    collectives all end before another's begin is from another job (or another step)."""
    span = ev.group_by("rank").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    late = span.sort("start_ns").row(-1, named=True)
    early = span.sort("end_ns").row(0, named=True)
    if late["start_ns"] > early["end_ns"]:
        files = dict(ranks.select("rank", "file").iter_rows())
        gap = (late["start_ns"] - early["end_ns"]) / 1e9
        raise UsageProblem(
            f"ranks from different jobs (or steps): rank {late['rank']} ({files[late['rank']]}) "
            f"starts its collectives {gap:,.3f} s after rank {early['rank']} "
            f"({files[early['rank']]}) ended its own"
        )


def _on_one_base(
    inst: pl.DataFrame,
    offsets: pl.DataFrame,
    shifts: dict[int, int],
    *,
    apply: bool,
    epoch: bool,
    notes: list[str],
) -> tuple[pl.DataFrame, str]:
    """Apply the estimated offsets (to `inst` and `shifts`, in place) or note a large one;
    the time base's description."""
    if apply:
        for r, o in offsets.select("rank", "clock_offset_ns").rows():
            shifts[int(r)] -= int(o)
        inst = (
            inst.join(offsets.select("rank", "clock_offset_ns"), on="rank")
            .with_columns(
                pl.col("start_ns") - pl.col("clock_offset_ns"),
                pl.col("end_ns") - pl.col("clock_offset_ns"),
            )
            .drop("clock_offset_ns")
        )
        base = "collective ends (estimated clock offsets applied)"
        return inst, base + ("" if epoch else "; some rank's trace gives no epoch time")
    base = "epoch" if epoch else "each trace's own clock (some rank's gives no epoch time)"
    worst = int(offsets["clock_offset_ns"].abs().max() or 0)  # type: ignore[arg-type]
    if worst > BIG_OFFSET_NS:
        notes.append(
            f"collective ends put the ranks' clocks up to {worst / 1e3:,.1f} µs apart "
            "(clock_offset_us); align=True applies the estimate"
        )
    return inst, base + " (offsets estimated from collective ends reported, not applied)"


def origins_of(sources: Frame, ids: Sequence[str] | None = None) -> dict[str, int | None]:
    src = _df(sources).select("source_id", "time_origin_epoch_ns")
    out = {str(s): o for s, o in src.iter_rows()}
    return out if ids is None else {i: out.get(i) for i in ids}
