"""Several ranks in one file: one rank per process.

nsys (and nvprof) can record every process of a node in one file (`nsys profile torchrun …`):
its kernels then come from several processes, each driving its own GPU. Such a source (no rank
of its own, collectives from more than one process) is split into one rank per process, when
each process ran its collectives on exactly one GPU and no two on the same: the rank is the
process's place in GPU order (torchrun's `LOCAL_RANK` picks `cuda:LOCAL_RANK`, so on one node
the rank is the GPU ordinal's place), `rank_from = "process on GPU <d>"`, world size unknown,
the job the file itself (`job_from = "file"`) unless the file states one. Where NVTX names a
different rank for every one of those processes (`ranks.named_ranks`), those are the ranks
(`rank_from = "NVTX"`). The pieces get the key `<source_id>/pid<process_id>` in place of the
source id for the analysis; their kernels and host ranges go by process id, their samples by
GPU. A source that cannot be split this way is left whole, with a note.

The same rule numbers several files of one job that state no rank, one process each (nvprof's
`%p` file names, `collect`'s `nvprof_<pid>.csv`): `rank_from = "file on GPU <d>"`.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

SEP = "/pid"


@dataclass(frozen=True)
class Split:
    """`table`: the rank table with the split sources' rows replaced by one per process
    (with `process_id`); `pieces`: source_id -> {process_id: device}; `notes`."""

    table: pl.DataFrame
    pieces: dict[str, dict[int, int]]
    notes: tuple[str, ...]


def split_processes(
    table: pl.DataFrame, collective_kernels: pl.DataFrame, named: pl.DataFrame | None = None
) -> Split:
    """Find the sources to split (module doc) and their per-process rank rows; `named`
    (`ranks.named_ranks`): the ranks NVTX names per process, which replace the GPU order when
    every process of a source names a different one."""
    table = table.with_columns(pl.lit(None, dtype=pl.Int64).alias("process_id"))
    per_all = collective_kernels.group_by("source_id", "process_id").agg(
        pl.col("device_id").unique().alias("devs")
    )
    per = per_all.filter(pl.col("process_id").is_not_null())
    multi = per.group_by("source_id").agg(pl.len().alias("n")).filter(pl.col("n") > 1)
    pieces: dict[str, dict[int, int]] = {}
    notes: list[str] = []
    rows = []
    for sid in sorted(multi["source_id"].to_list()):
        row = table.filter(pl.col("source_id") == sid)
        if row.height != 1 or row["rank"][0] is not None:
            continue
        procs = per.filter(pl.col("source_id") == sid).sort("process_id")
        devs = [d.to_list() for d in procs["devs"]]
        if any(len(d) != 1 or d[0] is None for d in devs) or len({d[0] for d in devs}) < len(devs):
            notes.append(
                f"{row['file'][0]}: collectives of {procs.height} processes, not one GPU each; "
                "left whole"
            )
            continue
        by_dev = sorted(zip([d[0] for d in devs], procs["process_id"].to_list(), strict=True))
        pieces[sid] = {int(p): int(d) for d, p in by_dev}
        nv = _nvtx_ranks(named, sid, [p for _, p in by_dev])
        stated = pl.col("job_from") != "directory"
        for r, (d, p) in enumerate(by_dev):
            rank, world, how = nv[p] if nv else (r, None, f"process on GPU {d}")
            rows.append(
                row.with_columns(
                    pl.lit(f"{sid}{SEP}{p}").alias("source_id"),
                    pl.lit(rank, dtype=pl.Int64).alias("rank"),
                    pl.lit(world, dtype=pl.Int64).alias("world_size"),
                    pl.lit(how).alias("rank_from"),
                    pl.lit(p, dtype=pl.Int64).alias("process_id"),
                    # all of this job's ranks are in this file, unless the file names its job
                    pl.when(stated).then(pl.col("job")).otherwise(pl.col("file")).alias("job"),
                    pl.when(stated)
                    .then(pl.col("job_from"))
                    .otherwise(pl.lit("file"))
                    .alias("job_from"),
                )
            )
    if pieces:
        whole = table.filter(~pl.col("source_id").is_in(list(pieces)))
        table = pl.concat([whole, *rows])
    table = _rank_by_gpu(table, per_all.filter(~pl.col("source_id").is_in(list(pieces))), notes)
    return Split(table, pieces, tuple(notes))


def _nvtx_ranks(
    named: pl.DataFrame | None, sid: str, procs: list[int]
) -> dict[int, tuple[int, int | None, str]]:
    """process -> (rank, world size, "NVTX") when NVTX names a different rank for every one of
    `procs`, else {}."""
    if named is None:
        return {}
    got = named.filter(pl.col("source_id") == sid)
    by = {int(p): (int(r), w) for p, r, w in got.select("process_id", "rank", "world_size").rows()}
    if any(p not in by for p in procs) or len({by[p][0] for p in procs}) < len(procs):
        return {}
    return {p: (by[p][0], by[p][1], "NVTX") for p in procs}


def _rank_by_gpu(table: pl.DataFrame, per: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """Files of one job without ranks (`nvprof -o prof_%p.nvvp`, one process each): when each
    ran its collectives on one GPU and no two on the same, rank = the GPU's place in device
    order, `rank_from = "file on GPU <d>"` (one node; on several, GPU numbers repeat and the
    files stay without rank, with a note)."""
    one_proc = per.group_by("source_id").agg(pl.col("devs").first(), pl.len().alias("n"))
    one_proc = one_proc.filter(pl.col("n") == 1)
    with_coll = table.join(per.select("source_id").unique(), on="source_id", how="semi")
    ranked = with_coll.filter(pl.col("rank").is_not_null())["job"].unique().implode()
    cand = table.filter(pl.col("rank").is_null() & ~pl.col("job").is_in(ranked))
    cand = cand.join(one_proc, on="source_id")
    for (job,), g in cand.sort("file").group_by("job", maintain_order=True):
        devs = [d.to_list() for d in g["devs"]]
        if g.height < 2:
            continue
        if any(len(d) != 1 or d[0] is None for d in devs) or len({d[0] for d in devs}) < g.height:
            notes.append(
                f"{job}: {g.height} files without a rank whose collectives are not on one GPU "
                "each; left without rank"
            )
            continue
        order = sorted((d[0], sid) for d, sid in zip(devs, g["source_id"].to_list(), strict=True))
        rank = {sid: r for r, (_, sid) in enumerate(order)}
        dev = {sid: d for d, sid in order}
        hit = pl.col("source_id").is_in(list(rank))
        table = table.with_columns(
            pl.when(hit)
            .then(pl.col("source_id").replace_strict(rank, default=None, return_dtype=pl.Int64))
            .otherwise(pl.col("rank"))
            .alias("rank"),
            pl.when(hit)
            .then(
                pl.format(
                    "file on GPU {}",
                    pl.col("source_id").replace_strict(dev, default=None, return_dtype=pl.Int64),
                )
            )
            .otherwise(pl.col("rank_from"))
            .alias("rank_from"),
        )
    return table


def by_process(df: pl.DataFrame, split: Split) -> pl.DataFrame:
    """Rows of split sources keyed `<source_id>/pid<process_id>` (other processes' rows of
    those sources dropped); other sources' rows unchanged."""
    if not split.pieces:
        return df
    keys = [f"{s}{SEP}{p}" for s, ps in split.pieces.items() for p in ps]
    key = pl.format("{}{}{}", "source_id", pl.lit(SEP), "process_id")
    hit = pl.col("source_id").is_in(list(split.pieces))
    out = df.with_columns(pl.when(hit).then(key).otherwise(pl.col("source_id")).alias("source_id"))
    return out.filter(~hit | pl.col("source_id").is_in(keys))


def by_device(samples: pl.DataFrame, split: Split) -> pl.DataFrame:
    """Telemetry of split sources keyed by the process on each sample's GPU."""
    if not split.pieces:
        return samples
    to_key = {f"{s}#{d}": f"{s}{SEP}{p}" for s, ps in split.pieces.items() for p, d in ps.items()}
    key = pl.format("{}#{}", "source_id", "device_id").replace_strict(
        to_key, default=None, return_dtype=pl.String
    )
    hit = pl.col("source_id").is_in(list(split.pieces))
    out = samples.with_columns(
        pl.when(hit).then(key).otherwise(pl.col("source_id")).alias("source_id")
    )
    return out.filter(pl.col("source_id").is_not_null())


def origins_split(origins: dict[str, int | None], split: Split) -> dict[str, int | None]:
    out = dict(origins)
    for s, ps in split.pieces.items():
        for p in ps:
            out[f"{s}{SEP}{p}"] = origins.get(s)
    return out


def real_source(col: str = "source_id") -> pl.Expr:
    """The source id of a (possibly split) key."""
    return pl.col(col).str.replace(f"{SEP}\\d+$", "")
