"""Telemetry attribution: SM clock, power and temperature per kernel or iteration; energy.

Rule (stated once, used everywhere): a telemetry sample holds its value from its timestamp until the
next sample of the same series — *sample-and-hold*, a step function. The mean over an interval
`[s, e]` is the time-weighted mean of that step function, `∫ v dt / (e - s)`, computed from a
cumulative integral `I(t)` at the sample times and one `join_asof` (backward) for each end of every
interval; no Python loop per interval. Energy is `∫ power dt` in joules.

Coverage: an interval is `outside` when it is not inside the sampled span `[first, last sample]`
(values null), `coarse` when fewer than 2 samples fall inside it or it is shorter than the median
sampling period (values null: a 50 µs kernel under 50 ms sampling only sees one held sample, and
the mean would be that sample, not a measurement of the kernel), `none` when no sample series
could be paired with it (see below), else `ok`.

Which samples belong to which intervals (`pair_samples`), per interval source S and device d:

1. S's own samples when S has any (same file, same clock: no alignment needed).
2. Else samples of other sources T whose epoch time span overlaps S's, moved onto S's clock by
   `t + origin(T) - origin(S)`. Sources on different clocks are aligned only through their
   recorded epoch origins (`sources.time_origin_epoch_ns`); both must be non-null, or T is not
   considered (and a warning says so). The usual case: an iteration log plus an NVML or
   nvidia-smi log of the same run.
3. `samples_from=T` (the CLI's `--samples-from`) forces T, still aligned through epoch origins.

Among the candidate series (T, e), device ids are matched where both sides know them: d == e.
When S's device is null (PyTorch `ProfilerStep`, host-side iteration logs) and the candidates
cover exactly one device, that one is used; with several devices (or several sources with the same
device) the match is ambiguous: a warning names the candidates and the values stay null, never a
guess. Every answer names its `samples_source_id` and `samples_device_id`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import polars as pl

from ..errors import NotAnswerable
from .naming import source_name, source_paths

Frame = pl.DataFrame | pl.LazyFrame

METRICS: tuple[str, ...] = ("sm_clock_mhz", "power_w", "temperature_c")

PAIR_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "source_id": pl.String,
    "device_id": pl.Int64,
    "samples_source_id": pl.String,
    "samples_device_id": pl.Int64,
    "shift_ns": pl.Int64,
    "pairing": pl.String,
    "reason": pl.String,
}


def _collect(df: Frame) -> pl.DataFrame:
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def align_samples(samples: Frame, sources: Frame, to_source: str) -> pl.DataFrame:
    """Samples of other sources moved onto `to_source`'s clock via epoch origins.

    `t' = t + origin(sample source) - origin(to_source)`; `source_id` becomes `to_source`.
    """
    src = _collect(sources.lazy().select("source_id", "time_origin_epoch_ns"))
    names = source_paths(sources) if "path" in sources.lazy().collect_schema().names() else {}
    smp = _collect(samples)
    origins = dict(src.iter_rows())
    target = origins.get(to_source)
    if target is None:
        raise NotAnswerable(
            f"{source_name(names, to_source)} has no recorded epoch origin "
            "(time_origin_epoch_ns); samples from another source cannot be aligned to it"
        )
    others = [s for s in smp["source_id"].unique().to_list() if s != to_source]
    bad = [s for s in others if origins.get(s) is None]
    if bad:
        raise NotAnswerable(
            f"{', '.join(sorted(source_name(names, s) for s in bad))} "
            "have no recorded epoch origin; "
            "their samples cannot be aligned to another source's clock"
        )
    shift = pl.col("source_id").replace_strict(
        {s: origins[s] - target for s in smp["source_id"].unique().to_list()},
        return_dtype=pl.Int64,
    )
    return smp.with_columns(
        (pl.col("timestamp_ns") + shift).alias("timestamp_ns"),
        pl.lit(to_source).alias("source_id"),
    ).sort("source_id", "device_id", "timestamp_ns")


def _dev(d: int | None) -> str:
    return "unknown device" if d is None else f"device {d}"


def pair_samples(
    intervals: Frame,
    samples: Frame,
    sources: Frame | None = None,
    *,
    samples_from: str | None = None,
    what: str = "intervals",
    warn: bool = True,
) -> pl.DataFrame:
    """Which sample series serves each (source_id, device_id) of `intervals` (rules: module doc).

    `intervals` needs source_id, device_id, start_ns, end_ns (null times: only the same source's
    samples can serve, as overlap in time cannot be judged). Returns one row per interval group:
    source_id, device_id, samples_source_id, samples_device_id (null: no series, or ambiguous),
    shift_ns (add to a sample's timestamp to put it on the interval source's clock), pairing
    ("same source", "epoch overlap", "samples_from" or null) and `reason` (why a group has no
    series, else null). With `warn`, an ambiguous match, samples that could not be aligned and
    samples of the wrong device are warned about (one warning per source, naming files); plain
    absence of telemetry is not.
    """
    names = source_paths(sources)
    groups = _collect(
        intervals.lazy()
        .group_by("source_id", "device_id")
        .agg(pl.col("start_ns").min().alias("_a"), pl.col("end_ns").max().alias("_b"))
        .sort("source_id", "device_id", nulls_last=True)
    )
    by_source = _series_by_source(samples)
    origins = _origins(sources)
    if samples_from is not None and samples_from not in by_source:
        raise NotAnswerable(f"{source_name(names, samples_from)} has no telemetry samples")

    rows: list[tuple[object, ...]] = []
    for (sid,), g in groups.group_by(["source_id"], maintain_order=True):
        sid = str(sid)
        label = source_name(names, sid)
        how, cands, why, loud = _candidates(sid, g, by_source, origins, names, samples_from, what)
        got, problems = _pair_devices(sid, g["device_id"].to_list(), cands, how, origins, names)
        for row, reason in got:
            if reason is None:
                rows.append(row)
                continue
            if reason == "":  # no candidates at all: the group's own reason
                reason = why
                if loud:
                    problems.append(reason)
            rows.append((*row[:6], f"{label}: {reason}"))
        if warn and problems:
            warnings.warn(
                f"{label}: no telemetry for {what}: {'; '.join(dict.fromkeys(problems))}; "
                "left null (choose with samples_from=ID and/or device=N)",
                stacklevel=2,
            )
    return pl.DataFrame(rows, schema=PAIR_SCHEMA, orient="row")


_Series = dict[str, list[tuple[int | None, int | None, int | None]]]


def _series_by_source(samples: Frame) -> _Series:
    """{source_id: [(device_id, first timestamp, last timestamp)]} of the sample series."""
    series = _collect(
        samples.lazy()
        .group_by("source_id", "device_id")
        .agg(
            pl.col("timestamp_ns").min().alias("_a"),
            pl.col("timestamp_ns").max().alias("_b"),
        )
        .sort("source_id", "device_id", nulls_last=True)
    )
    by_source: _Series = {}
    for sid, dev, a, b in series.iter_rows():
        by_source.setdefault(str(sid), []).append((dev, a, b))
    return by_source


def _origins(sources: Frame | None) -> dict[str, int | None]:
    """{source_id: time_origin_epoch_ns}; empty without `sources`."""
    if sources is None:
        return {}
    src = _collect(sources.lazy().select("source_id", "time_origin_epoch_ns"))
    return {str(s): (None if o is None else int(o)) for s, o in src.iter_rows()}


def _candidates(
    sid: str,
    g: pl.DataFrame,
    by_source: _Series,
    origins: Mapping[str, int | None],
    names: Mapping[str, str],
    samples_from: str | None,
    what: str,
) -> tuple[str, list[tuple[str, int | None]], str, bool]:
    """(pairing, candidate series (source, device), why there are none, whether that is worth
    a warning) for interval source `sid`, by the module doc's rules 1-3."""
    if samples_from is not None:
        if samples_from != sid:
            bad = [s for s in (sid, samples_from) if origins.get(s) is None]
            if bad:
                raise NotAnswerable(
                    f"{', '.join(source_name(names, s) for s in bad)} "
                    "have no recorded epoch origin; "
                    "their samples cannot be aligned to another source's clock"
                )
        cands = [(samples_from, e) for e, _, _ in by_source[samples_from]]
        return "samples_from", cands, "no telemetry samples", False
    if sid in by_source:
        own = [(sid, e) for e, _, _ in by_source[sid]]
        return "same source", own, "no telemetry samples", False
    cands, why, loud = _overlapping(sid, g, by_source, origins, names, what)
    return "epoch overlap", cands, why, loud


def _pair_devices(
    sid: str,
    devs: list[int | None],
    cands: list[tuple[str, int | None]],
    how: str,
    origins: Mapping[str, int | None],
    names: Mapping[str, str],
) -> tuple[list[tuple[tuple[object, ...], str | None]], list[str]]:
    """Per interval device: (its PAIR_SCHEMA row, None) when one candidate series serves it,
    else (a row without a series, the reason; "" when there are no candidates at all), and the
    reasons worth a warning."""
    out: list[tuple[tuple[object, ...], str | None]] = []
    problems: list[str] = []
    for d in devs:
        exact = [c for c in cands if d is not None and c[1] == d]
        loose = [c for c in cands if d is None or c[1] is None or c[1] == d]
        pick = exact if exact else loose
        if len(pick) == 1:
            t, e = pick[0]
            shift = 0 if t == sid else _shift(origins, t, sid)
            out.append(((sid, d, t, e, shift, how, None), None))
            continue
        if len(pick) > 1:
            listed = ", ".join(f"{source_name(names, t)} {_dev(e)}" for t, e in pick)
            reason = f"ambiguous for {_dev(d)} ({listed})"
            problems.append(reason)
        elif cands:
            have = sorted({str(e) for _, e in cands})
            reason = f"the samples are of device {', '.join(have)}, not {d}"
            problems.append(reason)
        else:
            reason = ""
        out.append(((sid, d, None, None, None, None, None), reason))
    return out, problems


def _shift(origins: Mapping[str, int | None], t: str, s: str) -> int:
    ot, os_ = origins.get(t), origins.get(s)
    assert ot is not None and os_ is not None  # checked by the caller
    return ot - os_


def _overlapping(
    sid: str,
    g: pl.DataFrame,
    by_source: Mapping[str, list[tuple[int | None, int | None, int | None]]],
    origins: Mapping[str, int | None],
    names: Mapping[str, str],
    what: str,
) -> tuple[list[tuple[str, int | None]], str, bool]:
    """Series of other sources whose epoch span overlaps `sid`'s (both origins recorded), and
    when there are none, why, and whether that is worth a warning."""
    others = [t for t in by_source if t != sid]
    if not others:
        return [], "no telemetry samples", False
    if not origins:  # no `sources` given: only a source's own samples serve
        why = (
            "no samples of its own (other sources' samples can only be aligned through the "
            "sources table's epoch origins)"
        )
        return [], why, False
    o = origins.get(sid)
    a, b = g["_a"].min(), g["_b"].max()
    if o is None:
        return (
            [],
            "no samples of its own and no recorded epoch origin, so other sources' samples "
            "cannot be aligned to it",
            True,
        )
    if a is None or b is None:
        return (
            [],
            f"no samples of its own, and its {what} have no start/end times to match other "
            "sources' samples in time",
            True,
        )
    lo, hi = o + int(a), o + int(b)  # type: ignore[arg-type]
    out: list[tuple[str, int | None]] = []
    unaligned = []
    for t in others:
        ot = origins.get(t)
        if ot is None:
            unaligned.append(source_name(names, t))
            continue
        for e, ta, tb in by_source[t]:
            if ta is not None and tb is not None and ot + ta <= hi and ot + tb >= lo:
                out.append((t, e))
    if out:
        return out, "", False
    if unaligned:
        return (
            [],
            "no sample source with an epoch origin overlaps it in time ("
            + ", ".join(sorted(unaligned))
            + " have no recorded epoch origin and were not considered)",
            True,
        )
    return [], "no sample source overlaps it in time", False


def paired_samples(samples: Frame, pairs: pl.DataFrame) -> pl.LazyFrame:
    """Samples of every paired series, on their interval group's clock, keyed by `_g`.

    `_g` is the row index of `pairs` (one interval group); a series serving several groups is
    repeated, once per group.
    """
    p = (
        pairs.with_row_index("_g")
        .filter(pl.col("samples_source_id").is_not_null())
        .select(
            pl.col("_g").cast(pl.Int64),
            pl.col("samples_source_id").alias("source_id"),
            pl.col("samples_device_id").alias("device_id"),
            "shift_ns",
        )
    )
    return (
        samples.lazy()
        .join(p.lazy(), on=["source_id", "device_id"], how="inner", nulls_equal=True)
        .with_columns((pl.col("timestamp_ns") + pl.col("shift_ns")).alias("timestamp_ns"))
        .drop("shift_ns")
    )


def _cumulative(samples: pl.DataFrame, metric: str) -> pl.DataFrame:
    """Per series `_g`: sample times, held value and cumulative integral up to each sample."""
    keys = ["_g"]
    s = (
        samples.select(*keys, "timestamp_ns", metric)
        .drop_nulls(metric)
        .sort([*keys, "timestamp_ns"])
        .unique([*keys, "timestamp_ns"], keep="last", maintain_order=True)
    )
    dt = (pl.col("timestamp_ns").shift(-1).over(keys) - pl.col("timestamp_ns")).fill_null(0)
    return s.with_columns(
        pl.col(metric).alias("_v"),
        (pl.col(metric) * dt.cast(pl.Float64))
        .cum_sum()
        .shift(1)
        .over(keys)
        .fill_null(0.0)
        .alias("_I"),
        pl.int_range(pl.len()).over(keys).alias("_n"),
        pl.col("timestamp_ns").min().over(keys).alias("_first"),
        pl.col("timestamp_ns").max().over(keys).alias("_last"),
        pl.col("timestamp_ns").diff().median().over(keys).alias("_period"),
    ).select(*keys, "timestamp_ns", "_v", "_I", "_n", "_first", "_last", "_period")


def attribute(
    intervals: Frame,
    samples: Frame,
    *,
    id_columns: list[str] | None = None,
    sources: Frame | None = None,
    samples_from: str | None = None,
    what: str = "intervals",
) -> pl.DataFrame:
    """Time-weighted mean SM clock, power and temperature over each interval; energy in J.

    `intervals` needs source_id, device_id, start_ns, end_ns (kernels, iterations, or any frame
    with those); `id_columns` are carried through (default: every other column). Samples are
    paired with intervals by `pair_samples` (the module doc's rules; `sources` gives the epoch
    origins and file names, without it only a source's own samples are used). Adds per metric
    `<metric>` (mean), `<metric>_samples_count`, and `energy_j`, `coverage`, `samples_source_id`,
    `samples_device_id`. NotAnswerable when no interval could be paired with any samples.
    """
    iv = _collect(intervals)
    need = {"source_id", "device_id", "start_ns", "end_ns"}
    if not need <= set(iv.columns):
        raise NotAnswerable(f"intervals lack {sorted(need - set(iv.columns))}")
    iv = iv.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    if iv.height == 0:
        raise NotAnswerable("no intervals with start and end times (iterations need timestamps)")
    sm_all = samples.lazy()
    if _collect(sm_all.select(pl.len())).item() == 0:
        raise NotAnswerable("no telemetry samples for these sources")
    pairs = pair_samples(iv, sm_all, sources, samples_from=samples_from, what=what, warn=False)
    unpaired = pairs.filter(pl.col("samples_source_id").is_null())
    reasons = "; ".join(dict.fromkeys(unpaired["reason"].drop_nulls().to_list()))
    if unpaired.height == pairs.height:
        raise NotAnswerable(f"no telemetry for these {what}: {reasons}")
    if unpaired.height:
        warnings.warn(f"no telemetry for some {what} (left null): {reasons}", stacklevel=2)
    sm = _collect(paired_samples(sm_all, pairs))
    keys = ["source_id", "device_id"]
    carry = id_columns if id_columns is not None else [c for c in iv.columns if c not in need]
    return _per_interval(iv, pairs, sm, keys, carry).select(
        *keys,
        *carry,
        "start_ns",
        "end_ns",
        *METRICS,
        *[f"{m}_samples_count" for m in METRICS],
        "energy_j",
        "coverage",
        "samples_source_id",
        "samples_device_id",
    )


def _per_interval(
    iv: pl.DataFrame, pairs: pl.DataFrame, sm: pl.DataFrame, keys: list[str], carry: list[str]
) -> pl.DataFrame:
    """The intervals in input order with every metric's mean, sample count, energy, coverage."""
    g = pairs.with_row_index("_g").select(
        pl.col("_g").cast(pl.Int64), *keys, "samples_source_id", "samples_device_id"
    )
    base = (
        iv.select(*keys, *carry, "start_ns", "end_ns")
        .with_row_index("_row")
        .join(g, on=keys, how="left", nulls_equal=True)
    )
    out = base.sort("start_ns")
    for metric in METRICS:
        if metric in sm.columns:
            out = _with_metric(out, sm, metric)
    covs = [c for c in out.columns if c.startswith("_cov_")]
    if not covs:
        raise NotAnswerable("samples have none of " + ", ".join(METRICS))
    return _with_coverage(out, covs).sort("_row").drop("_row")


def _with_metric(out: pl.DataFrame, sm: pl.DataFrame, metric: str) -> pl.DataFrame:
    """`out` (intervals with their series `_g`) plus `metric`'s mean, sample count and coverage
    (`_cov_<metric>`), and `energy_j` for power: the module doc's sample-and-hold integral."""
    cum = _cumulative(sm, metric)
    if cum.height == 0:
        out = out.with_columns(
            pl.lit(None, dtype=pl.Float64).alias(metric),
            pl.lit(0, dtype=pl.Int64).alias(f"{metric}_samples_count"),
            pl.lit("none").alias(f"_cov_{metric}"),
        )
        if metric == "power_w":
            out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias("energy_j"))
        return out
    j = _at_both_ends(out, cum)
    integ = (pl.col("_I_e") + pl.col("_v_e") * (pl.col("end_ns") - pl.col("timestamp_ns_e"))) - (
        pl.col("_I_s") + pl.col("_v_s") * (pl.col("start_ns") - pl.col("timestamp_ns_s"))
    )
    dur = (pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64)
    # Samples with s <= t <= e: index of last sample <= e minus index of last sample < s.
    n_in = pl.col("_n_e") - pl.col("_n_s") + (pl.col("timestamp_ns_s") == pl.col("start_ns"))
    n_in = pl.when(pl.col("_n_s").is_null()).then(pl.col("_n_e") + 1).otherwise(n_in)
    inside = (pl.col("start_ns") >= pl.col("_first")) & (pl.col("end_ns") <= pl.col("_last"))
    coarse = (n_in < 2) | (dur < pl.col("_period"))
    j = j.with_columns(
        pl.coalesce(n_in, pl.lit(0)).cast(pl.Int64).alias(f"{metric}_samples_count"),
        pl.when(pl.col("_g").is_null() | pl.col("_first").is_null())
        .then(pl.lit("none"))
        .when(inside.fill_null(False).not_())
        .then(pl.lit("outside"))
        .when(coarse.fill_null(True))
        .then(pl.lit("coarse"))
        .otherwise(pl.lit("ok"))
        .alias(f"_cov_{metric}"),
        (integ / dur).alias(f"_mean_{metric}"),
        integ.alias(f"_int_{metric}"),
    ).with_columns(
        pl.when(pl.col(f"_cov_{metric}") == "ok").then(pl.col(f"_mean_{metric}")).alias(metric),
    )
    if metric == "power_w":
        j = j.with_columns(
            pl.when(pl.col(f"_cov_{metric}") == "ok")
            .then(pl.col("_int_power_w") / 1e9)
            .alias("energy_j")
        )
    keep = [*out.columns, metric, f"{metric}_samples_count", f"_cov_{metric}"]
    if metric == "power_w":
        keep.append("energy_j")
    return j.select(keep)


def _at_both_ends(out: pl.DataFrame, cum: pl.DataFrame) -> pl.DataFrame:
    """Each interval with the last sample at or before its start (`*_s` columns) and its end
    (`*_e`), by series `_g`, and the series' first/last sample and median period."""
    per = cum.select("_g", "_first", "_last", "_period").unique("_g")
    at_s = cum.rename({c: f"{c}_s" for c in ("timestamp_ns", "_v", "_I", "_n")}).drop(
        "_first", "_last", "_period"
    )
    at_e = cum.rename({c: f"{c}_e" for c in ("timestamp_ns", "_v", "_I", "_n")}).drop(
        "_first", "_last", "_period"
    )
    return (
        out.sort("start_ns")
        .join_asof(
            at_s.sort("timestamp_ns_s"),
            left_on="start_ns",
            right_on="timestamp_ns_s",
            by="_g",
            strategy="backward",
            check_sortedness=False,
        )
        .sort("end_ns")
        .join_asof(
            at_e.sort("timestamp_ns_e"),
            left_on="end_ns",
            right_on="timestamp_ns_e",
            by="_g",
            strategy="backward",
            check_sortedness=False,
        )
        .join(per, on="_g", how="left")
    )


def _with_coverage(out: pl.DataFrame, covs: list[str]) -> pl.DataFrame:
    """The overall `coverage` from the `_cov_*` columns (dropped), and null columns for the
    metrics no series carries."""
    # Overall coverage: the worst over the metrics present (none > outside > coarse > ok). A
    # metric no paired series carries at all does not count ("none" only if every metric is).
    rank = {"ok": 0, "coarse": 1, "outside": 2, "none": 3}
    worst = pl.max_horizontal(
        [
            pl.when(pl.col(c) == "none")
            .then(None)
            .otherwise(pl.col(c).replace_strict(rank, return_dtype=pl.Int8))
            for c in covs
        ]
    ).fill_null(3)
    out = out.with_columns(
        worst.replace_strict({v: k for k, v in rank.items()}, return_dtype=pl.String).alias(
            "coverage"
        )
    ).drop(covs)
    for metric in METRICS:
        if metric not in out.columns:
            out = out.with_columns(
                pl.lit(None, dtype=pl.Float64).alias(metric),
                pl.lit(0, dtype=pl.Int64).alias(f"{metric}_samples_count"),
            )
    if "energy_j" not in out.columns:
        out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias("energy_j"))
    return out


def attribute_kernels(
    kernels: Frame,
    samples: Frame,
    *,
    sources: Frame | None = None,
    samples_from: str | None = None,
) -> pl.DataFrame:
    """`attribute` over kernels, keeping kernel_id, stream_id and name."""
    k = _lazy_select(
        kernels, ["source_id", "device_id", "kernel_id", "stream_id", "name", "start_ns", "end_ns"]
    )
    return attribute(
        k,
        samples,
        id_columns=["kernel_id", "stream_id", "name"],
        sources=sources,
        samples_from=samples_from,
        what="kernels",
    )


def attribute_iterations(
    iterations: Frame,
    samples: Frame,
    *,
    sources: Frame | None = None,
    samples_from: str | None = None,
) -> pl.DataFrame:
    """`attribute` over iterations (energy per iteration in J), keeping iteration and duration."""
    it = _collect(
        iterations.lazy().select(
            "source_id",
            "device_id",
            "iteration",
            "start_ns",
            pl.coalesce("end_ns", pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns"),
        )
    )
    return attribute(
        it,
        samples,
        id_columns=["iteration"],
        sources=sources,
        samples_from=samples_from,
        what="iterations",
    )


def _lazy_select(df: Frame, cols: list[str]) -> pl.DataFrame:
    return _collect(df.lazy().select(cols))
