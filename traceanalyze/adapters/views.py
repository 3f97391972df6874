"""The two analyses of `DatasetView` that take more than one frame in: the timeline of one source
(lanes, iterations, telemetry from wherever the run recorded it) and the comparison of two
datasets (each side relabelled `A` / `B`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ..analyses.naming import short_name, source_name
from ..errors import NotAnswerable, TraceanalyzeError, UsageProblem
from ..results import Comparison, Timeline

if TYPE_CHECKING:
    from . import DatasetView

LEGEND_KERNELS = 8


def samples_for(ds: DatasetView, sid: str, samples_from: str | None = None) -> pl.LazyFrame:
    """Telemetry for source `sid`, on its clock: its own samples, `samples_from`'s, or those of
    sources paired with its kernels/copies by `telemetry.pair_samples` (epoch origins)."""
    from ..analyses.telemetry import align_samples, pair_samples, paired_samples

    srcs = ds.scan_all("sources")
    if samples_from is not None:
        if samples_from not in set(ds.all_source_ids()):
            raise TraceanalyzeError(f"no such source: {samples_from}")
        smp = ds.scan_all("gpu_samples").filter(pl.col("source_id") == samples_from)
        return align_samples(smp, srcs, sid).lazy()
    own = ds.scan("gpu_samples")
    if own.select(pl.len()).collect().item():
        return own
    work = pl.concat(
        [
            ds.scan(t).select("source_id", "device_id", "start_ns", "end_ns")
            for t in ("kernels", "memcpy")
        ]
    ).drop_nulls(["start_ns", "end_ns"])
    if work.select(pl.len()).collect().item() == 0:
        return own
    allsmp = ds.scan_all("gpu_samples")
    pairs = pair_samples(work, allsmp, srcs, what="kernels")
    return paired_samples(allsmp, pairs).drop("_g").unique()


def _window(
    ds: DatasetView,
    first: tuple[int, int],
    start_ms: float | None,
    end_ms: float | None,
    iteration: int | None,
    span: tuple[int, int] | None = None,
) -> tuple[int, int]:
    """The window: `iteration`'s, or `start_ms`/`end_ms` after the origin `first[0]`, each
    edge not given taken from `span` (default: `first`, everything)."""
    from ..analyses import timeline as tl

    t_first, t_last = first
    d0, d1 = span or first
    if iteration is not None:
        return tl.iteration_window(ds.scan("iterations"), ds.scan("markers"), iteration)
    t0 = t_first + round(start_ms * 1e6) if start_ms is not None else d0
    t1 = t_first + round(end_ms * 1e6) if end_ms is not None else d1
    if t1 <= t0:
        a, b = (t0 - t_first) / 1e6, (t1 - t_first) / 1e6
        raise UsageProblem(f"empty window: its end ({b:g} ms) must be after its start ({a:g} ms)")
    return t0, t1


def work_span(
    kernels: pl.LazyFrame, memcpy: pl.LazyFrame, ops: pl.LazyFrame
) -> tuple[int, int] | None:
    """First start and last end of device activity and host operators: the default timeline
    window (markers and instants far from any work would stretch it: issue 21). None when the
    source has none of them."""
    from ..analyses import timeline as tl

    try:
        return tl.extent(kernels, memcpy, ops)
    except NotAnswerable:
        return None


def _label_samples(samples: pl.DataFrame, sid: str, names: dict[str, str]) -> pl.DataFrame:
    if not samples.height or set(samples["source_id"].unique().to_list()) == {sid}:
        return samples
    # Telemetry from another file of the run: say which, next to the device.
    return samples.with_columns(
        pl.format(
            "GPU {} · {}",
            pl.col("device_id").cast(pl.String).fill_null("?"),
            pl.col("source_id").replace_strict(
                {k: short_name(v) for k, v in names.items()},
                default=pl.col("source_id"),
                return_dtype=pl.String,
            ),
        ).alias("label")
    )


def top_kernels_in(kernels: pl.DataFrame, n: int = LEGEND_KERNELS) -> pl.DataFrame:
    """`name, total_ms, launch_count` of the `n` kernels with the most time in `kernels`."""
    return (
        kernels.drop_nulls(["start_ns", "end_ns"])
        .group_by("name")
        .agg(
            ((pl.col("end_ns") - pl.col("start_ns")).sum() / 1e6).alias("total_ms"),
            pl.len().alias("launch_count"),
        )
        .sort(["total_ms", "name"], descending=[True, False])
        .head(n)
    )


def timeline(
    ds: DatasetView,
    start_ms: float | None = None,
    end_ms: float | None = None,
    iteration: int | None = None,
    samples_from: str | None = None,
    max_bars: int = 1500,
    *,
    whole: bool = False,
) -> Timeline:
    from ..analyses import timeline as tl

    sid = ds.one_source("the timeline")
    tl.check_max_bars(max_bars)  # before any work
    names = ds.names()
    k, m, o, mk, it = (ds.scan(t) for t in ("kernels", "memcpy", "ops", "markers", "iterations"))
    # whole-graph replays (nsys --cuda-graph-trace=graph) are drawn and exported with the kernels
    k = tl.with_replays(k, ds.scan("graph_replays"))
    first = tl.extent(k, m, o, mk, it)
    t0, t1 = _window(ds, first, start_ms, end_ms, iteration, None if whole else work_span(k, m, o))
    samples_all = samples_for(ds, sid, samples_from)
    tl.check_window(k, m, o, mk, start_ns=t0, end_ns=t1)
    kernels = tl.overlapping(k, t0, t1).collect()
    file = source_name(names, sid)
    where = file.replace("\\", "/").rsplit("/", 1)[-1]
    return Timeline(
        source_id=sid,
        file=file,
        start_ns=t0,
        end_ns=t1,
        first_ns=first[0],
        title=f"{where}: {(t1 - t0) / 1e6:,.3f} ms from {(t0 - first[0]) / 1e6:,.3f} ms "
        "after its first event",
        # made when the figure reads them (~0.5 s on a 1 GB trace's store): not for an export
        make_lanes=lambda: tl.lanes(
            k, m, ops=o, markers=mk, start_ns=t0, end_ns=t1, max_bars=max_bars
        ),
        iterations=tl.iteration_spans(it, mk),
        samples=_label_samples(tl.window_samples(samples_all, t0, t1), sid, names),
        top_kernels=top_kernels_in(
            kernels.with_columns(pl.col("start_ns").clip(t0, t1), pl.col("end_ns").clip(t0, t1))
        ),
        kernels=kernels,
        memcpy=tl.overlapping(m, t0, t1).collect(),
        markers=tl.overlapping(mk, t0, t1).collect(),
        telemetry=tl.window_samples(samples_all, t0, t1, after=False, clip=True),
        # lazy: only the Perfetto export reads them, a batch at a time
        api_calls=tl.overlapping(ds.scan("api_calls"), t0, t1),
        ops=tl.overlapping(o, t0, t1),
        devices=ds.scan("devices").collect(),
        sources=ds.scan("sources").collect(),
    )


# --- compare ---------------------------------------------------------------------------------


def one_gpu_run(ds: DatasetView, label: str, desc: str, pool: bool) -> str:
    """`desc` when the side `ds` is at most one GPU-run (`ops.gpu_runs`: a collect run's files
    are one); with several, a `UsageProblem` naming them and how to choose, or with `pool`,
    `desc` saying how many it pools (issue 21: a store's every source was pooled silently)."""
    from .ops import gpu_runs

    runs = gpu_runs(ds)
    if len(runs) <= 1:
        return desc
    if pool:
        return f"{desc} (pooled: {len(runs)} GPU-runs)"
    names = ds.names()

    def file(sid: str) -> str:
        return names.get(sid, sid).replace("\\", "/").rsplit("/", 1)[-1]

    listed = "; ".join(
        " + ".join(f"{sid} ({file(sid)})" for sid in members) for members in runs.values()
    )
    raise UsageProblem(
        f"side {label} holds {len(runs)} GPU-runs: {listed}; choose one with source=ID (each "
        "side keeps the ids it holds; every file of a run), or pool them with pool=True",
        path=ds.origin,
    )


def compare(
    a: DatasetView,
    b: DatasetView,
    desc_a: str,
    desc_b: str,
    ops: bool = False,
    *,
    pool: bool = False,
    by_role: bool = False,
) -> Comparison:
    """`a` against `b`, every table of each side relabelled `A` / `B` (the same source may be
    both sides). `desc_*` say what each side is, in messages and in the result. `ops`: match
    host operators (with their kernels) instead of kernels, like HTA's ops_diff. A side of
    several GPU-runs is refused unless `pool` (`one_gpu_run`). `by_role`: kernels matched by
    role, not name (`analyses.kernel_roles`, a heuristic), for runs on different vendors."""
    from ..analyses.compare import compare_kernels, compare_ops, compare_overview, ops_diff_overview

    desc_a, desc_b = one_gpu_run(a, "A", desc_a, pool), one_gpu_run(b, "B", desc_b, pool)

    def both(table: str) -> pl.LazyFrame:
        lab = pl.lit("A", dtype=pl.String).alias("source_id")
        lbb = pl.lit("B", dtype=pl.String).alias("source_id")
        return pl.concat(
            [a.scan(table).with_columns(lab), b.scan(table).with_columns(lbb)], how="vertical"
        )

    desc = {"A": desc_a, "B": desc_b}
    if ops:
        from ..analyses.summary import replays_as_kernels

        k = replays_as_kernels(both("kernels"), both("graph_replays"))
        diff = compare_ops(both("ops"), both("api_calls"), k, both("markers"), "A", "B", names=desc)
        return Comparison(desc_a, desc_b, ops_diff_overview(diff), pl.DataFrame(), ops=diff)
    # A collect run's iteration log and trace are one GPU-run, on each side (issue 21: their
    # iterations were pooled, counted twice).
    from .ops import one_per_gpu_run

    (ia, ka), (ib, kb) = one_per_gpu_run(a), one_per_gpu_run(b)
    lab, lbb = (pl.lit(x, dtype=pl.String).alias("source_id") for x in ("A", "B"))
    k = pl.concat([ka.with_columns(lab), kb.with_columns(lbb)], how="vertical")
    if by_role:
        from ..analyses.kernel_roles import by_role as roles

        k = roles(k.lazy())
    it = pl.concat([ia.with_columns(lab), ib.with_columns(lbb)], how="vertical")
    s = pl.concat([side_samples(a).with_columns(lab), side_samples(b).with_columns(lbb)])
    ov = compare_overview(k, it, s, "A", "B", names=desc)
    try:
        kc = compare_kernels(k, "A", "B", names=desc)
    except NotAnswerable:
        kc = pl.DataFrame()  # compare_overview has said why, as a warning
    return Comparison(desc_a, desc_b, ov, kc)


def side_samples(ds: DatasetView) -> pl.LazyFrame:
    """The telemetry of one side of a comparison: the sample series paired with its work
    (kernels, copies, iterations; `telemetry.pair_samples`: the same source, or another whose
    epoch span overlaps on the same device), not every sampler log of a store (issue 21: an
    unrelated GPU's telemetry was pooled in). Every series when the side has no timed work."""
    from ..analyses.telemetry import pair_samples

    end = pl.coalesce("end_ns", pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns")
    cols = ["source_id", "device_id", "start_ns", "end_ns"]
    work = pl.concat(
        [ds.scan(t).select(cols) for t in ("kernels", "memcpy")]
        + [ds.scan("iterations").select("source_id", "device_id", "start_ns", end)]
    ).drop_nulls(["start_ns", "end_ns"])
    smp = ds.scan("gpu_samples")
    if work.select(pl.len()).collect().item() == 0:
        return smp
    pairs = pair_samples(work, smp, ds.scan("sources"), what="kernels", warn=False)
    keep = (
        pairs.filter(pl.col("samples_source_id").is_not_null())
        .select(
            pl.col("samples_source_id").alias("source_id"),
            pl.col("samples_device_id").alias("device_id"),
        )
        .unique()
    )
    return smp.join(keep.lazy(), on=["source_id", "device_id"], how="semi", nulls_equal=True)


def compare_sources(
    ds: DatasetView, a: str, b: str, ops: bool = False, by_role: bool = False
) -> Comparison:
    """Two source ids of one dataset (the same id may be both)."""
    missing = [x for x in dict.fromkeys((a, b)) if x not in set(ds.all_source_ids())]
    if missing:
        raise TraceanalyzeError(f"no such source(s): {', '.join(missing)}", path=ds.origin)
    names = ds.names()
    desc = [
        f"{lab} = {x} ({names[x]})" if x in names else f"{lab} = {x}"
        for lab, x in (("A", a), ("B", b))
    ]
    return compare(
        ds.where(source=a), ds.where(source=b), desc[0], desc[1], ops=ops, by_role=by_role
    )
