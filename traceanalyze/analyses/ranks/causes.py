"""Why a straggler is late: its GPU and its host against the other ranks', over the same steps.

Per rank, over the gaps before its collectives (from the end of its previous matched collective
to its arrival at the next; the first instance has no gap and is skipped), medians over gaps of:

* `compute_ms`: time at least one non-collective kernel runs (union over the rank's streams);
* `idle_ms`: the gap minus that: the GPU has nothing to run;
* `launch_gap_ms`: of that idle time, the part when the next kernel had been launched (its
  launch call had started; `launches.launch_calls`), as the `idle` analysis counts it; the rest
  has nothing queued: the host is late (data loader, Python, synchronization);
* `loader_ms`: time inside a data-loader operator (`enumerate(DataLoader)…`, `DataLoader` in an
  operator's or annotation's name) during the gap;
* `gap_ms`: the gap itself.

Telemetry, over the rank's matched collectives' span widened by `TELEMETRY_PAD_NS` on each side
(samplers log every 100 ms to 1 s, often less often than a step): the medians of SM clock,
power, power limit and temperature of the samples (`gpu_samples`: NVML sampler, nvidia-smi,
dcgmi, nvprof `--system-profiling`; and nsys GPU metrics, `metric_samples`: GPC Clock Frequency
as the SM clock, SMs Active as `sm_active_pct`) of the rank's own source, else of a source of
the same job with the same rank (a sampler log named `…rank<N>…`), else of the job's one sampler
log without a rank (host-wide), else of the job's one source that samples the rank's GPU (nsys
`--gpu-metrics-devices=all` from local rank 0 under `collect`), on the common time base (epoch
origins); where those samples cover several devices, the device of the rank's collective
kernels (none when unknown). Throttle reasons: the NVML clock-event bits set in most of those
samples, idle (0x1) excepted. SM activity is reported, not a cause: it mixes a rank's own work
with the collective kernels that wait for the others.

Cause rules, each a score (the straggler against the median of the other ranks' values):

* SM clock: `1 - own / others` when the clock is lower by at least 2 % (with power at its limit,
  temperature and throttle reasons added to the line where they differ or are set);
* data loader / launch gaps / host: `(own idle - others' idle) / others' gap`, named after
  the loader or the launch gaps when either explains at least half of the extra idle time;
* kernel time: `(own compute - others' compute) / others' gap`;
* late step start: the rank's host starts its steps (`ProfilerStep#N`, `step_starts`) a median
  `STEP_LATE_NS` (1 ms) or more after the other ranks' median start of the same step (issue 32:
  DLRM rank 7 starts step 10 ~7.5 ms after the others, which the GPU idle before its
  collectives, 0.548 vs 0.454 ms, did not show). Named when it is at least half of the time the
  others waited on the rank per collective it came last in: first, with the largest host or
  kernel difference as "also …", unless the SM clock comes first (below), then as its "also".

An SM clock at least `CLOCK_FIRST` (5 %) below the others' median is named first whatever the
other scores (a slower GPU is the physical cause; what it costs shows up as kernel time or as
the others' waiting, split differently by every trace), followed by the largest host or kernel
difference as "also …" when that scores at least `MIN_SCORE`. Otherwise the highest score of at
least `MIN_SCORE` (2 %) names the cause, with numbers; else "unknown", saying whether telemetry
covered the rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from .. import _intervals as iv
from . import NCCL_KERNEL, Matched, in_job

MIN_SCORE = 0.02
STEP_LATE_NS = 1_000_000
STEP = r"^ProfilerStep#(\d+)$"
CLOCK_FIRST = 0.05
TELEMETRY_PAD_NS = 1_000_000_000
LOADER = r"DataLoader"
THROTTLE_BITS: dict[int, str] = {
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}


def _set(df: pl.DataFrame, shift: int) -> iv.Set:
    return iv.as_set(df["start_ns"].to_numpy() + shift, df["end_ns"].to_numpy() + shift)


def _covered(a: iv.Set, t: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Length of the set before each time in `t` (vectorized: one searchsorted, no loop)."""
    s, e = a
    if s.size == 0:
        return np.zeros(t.size, dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(e - s)])
    i = np.searchsorted(s, t, side="right")  # pieces starting at or before t
    j = np.maximum(i - 1, 0)
    part = np.where(i > 0, np.clip(t - s[j], 0, e[j] - s[j]), 0)
    return np.where(i > 0, before[j], 0) + part


def _queued(k: pl.DataFrame, busy: iv.Set, shift: int, lo: int, hi: int) -> iv.Set:
    """The launch-gap part of the idle time in `[lo, hi)` (the `idle` analysis' rule): in
    each idle piece, from the launch call's start of the kernel that ends the piece to its end;
    the rest is time with nothing queued. Empty without `call_start_ns`."""
    if "call_start_ns" not in k.columns:
        return iv.EMPTY
    nxt = (
        k.filter(pl.col("call_start_ns").is_not_null())
        .group_by((pl.col("start_ns") + shift).alias("g1"))
        .agg((pl.col("call_start_ns").min() + shift).alias("cs"))
    )
    idle = iv.complement(busy, lo, hi)
    g = pl.DataFrame({"g0": idle[0], "g1": idle[1]}, schema={"g0": pl.Int64, "g1": pl.Int64})
    g = g.join(nxt, on="g1")
    return iv.as_set(g.select(pl.max_horizontal("g0", "cs")).to_series().to_numpy(), g["g1"])


def host_gaps(
    arr: pl.DataFrame, m: Matched, kernels: pl.DataFrame, ops: pl.DataFrame
) -> pl.DataFrame:
    """Per rank: gap_ms, compute_ms, idle_ms, launch_gap_ms, loader_ms (medians over gaps;
    module doc). `kernels` may carry `call_start_ns` (`launches.launch_calls`)."""
    is_coll = pl.col("name").str.extract(NCCL_KERNEL).is_not_null()
    timed = kernels.filter(pl.col("end_ns").is_not_null() & pl.col("start_ns").is_not_null())
    load = ops.filter(pl.col("name").str.contains(LOADER) & pl.col("end_ns").is_not_null())
    rows = []
    for rank, sid in m.ranks.select("rank", "source_id").rows():
        shift = m.shifts[int(rank)]
        mine_k = timed.filter(pl.col("source_id") == sid)
        busy = _set(mine_k.filter(~is_coll), shift)
        loader = _set(load.filter(pl.col("source_id") == sid), shift)
        mine = arr.filter(pl.col("rank") == rank).sort("arrival_ns")
        lo = np.maximum.accumulate(mine["end_ns"].to_numpy())[:-1]
        hi = mine["arrival_ns"].to_numpy()[1:]
        keep = hi > lo
        lo, hi = lo[keep], hi[keep]
        if lo.size == 0:
            rows.append((rank, None, None, None, None, None))
            continue
        queued = _queued(mine_k, busy, shift, int(lo.min()), int(hi.max()))
        c = _covered(busy, hi) - _covered(busy, lo)
        q = _covered(queued, hi) - _covered(queued, lo)
        d = _covered(loader, hi) - _covered(loader, lo)
        gaps = np.stack([hi - lo, c, hi - lo - c, q, d]).astype(np.float64)
        med = [float(v) / 1e6 for v in np.median(gaps, axis=1)]
        if "call_start_ns" not in mine_k.columns or mine_k["call_start_ns"].is_null().all():
            med[3] = None  # type: ignore[call-overload]
        rows.append((rank, *med))
    names = ["rank", "gap_ms", "compute_ms", "idle_ms", "launch_gap_ms", "loader_ms"]
    return pl.DataFrame(
        rows, schema=[(n, pl.Int64 if n == "rank" else pl.Float64) for n in names], orient="row"
    )


def _sample_sources(
    rank: int, sid: str, same_job: pl.DataFrame, samples: pl.DataFrame, dev: int | None
) -> list[str]:
    """Where a rank's telemetry comes from: its own source; else the job's sources with the
    same rank (`nvml_rank3.csv`); else the job's one sampler log without a rank (a host-wide
    log such as `collect`'s `nvml_<host>.csv`, taken by the rank's GPU); else the job's one
    source that samples the rank's GPU `dev` (nsys GPU metrics: under `collect`, local rank 0
    samples every GPU of its node)."""
    with_samples = set(samples["source_id"].unique().to_list())
    if sid in with_samples:
        return [sid]
    same = same_job.filter((pl.col("rank") == rank) & (pl.col("source_id") != sid))
    found = [s for s in same["source_id"].to_list() if s in with_samples]
    if found:
        return found
    rankless = [
        s for s in same_job.filter(pl.col("rank").is_null())["source_id"] if s in with_samples
    ]
    if rankless or dev is None:
        return rankless if len(rankless) == 1 else []
    on_dev = samples.filter(pl.col("device_id") == dev)["source_id"].unique().to_list()
    others = [s for s in same_job["source_id"].to_list() if s in on_dev and s != sid]
    return others if len(others) == 1 else []


# nsys GPU metrics (`gpu_metrics`, GPU_METRICS joined to TARGET_INFO_GPU_METRICS) that are
# telemetry: the GPC clock is the graphics/SM clock domain; SM activity is kept for the reader.
GPC_CLOCK = r"(?i)^GPC Clock Frequency\b"
SM_ACTIVE = r"(?i)^SMs? Active\b"
# A clock of at least 1 MHz x 1e6 is not MHz: some nsys versions write the GPC clock in Hz
# under the name "GPC Clock Frequency [MHz]" (public reports show 1.42e9 for a 1,420 MHz GPU).
HZ_AS_MHZ = 1e6


def metric_samples(gpu_metrics: pl.DataFrame) -> pl.DataFrame:
    """nsys GPU metrics as telemetry samples: source_id, device_id, timestamp_ns,
    sm_clock_mhz (GPC Clock Frequency; a value >= 1e6 is Hz and is divided by 1e6),
    sm_active_pct (SMs Active); one row per sample time with either."""
    name = pl.col("metric_name")
    clock = pl.col("value").filter(name.str.contains(GPC_CLOCK)).median()
    df = gpu_metrics.filter(
        name.str.contains(GPC_CLOCK) | name.str.contains(SM_ACTIVE),
        pl.col("value").is_not_null(),
    )
    return (
        df.group_by("source_id", "device_id", "timestamp_ns")
        .agg(
            pl.when(clock >= HZ_AS_MHZ).then(clock / 1e6).otherwise(clock).alias("sm_clock_mhz"),
            pl.col("value").filter(name.str.contains(SM_ACTIVE)).median().alias("sm_active_pct"),
        )
        .sort("source_id", "device_id", "timestamp_ns")
    )


def telemetry(
    arr: pl.DataFrame,
    m: Matched,
    rank_table: pl.DataFrame,
    samples: pl.DataFrame,
    origins: dict[str, int | None],
) -> pl.DataFrame:
    """Per rank: sm_clock_mhz, power_w, power_limit_w, temperature_c medians, throttle bits,
    the number of samples and `samples_from` (the file; module doc)."""
    rows = []
    same_job = rank_table.filter(in_job(m.job))
    files = dict(rank_table.select("source_id", "file").iter_rows())
    for rank, sid in m.ranks.select("rank", "source_id").rows():
        mine = arr.filter(pl.col("rank") == rank)
        lo = int(mine["arrival_ns"].min()) - TELEMETRY_PAD_NS  # type: ignore[arg-type]
        hi = int(mine["end_ns"].max()) + TELEMETRY_PAD_NS  # type: ignore[arg-type]
        devs = mine["device_id"].drop_nulls().unique()
        dev = int(devs[0]) if devs.len() == 1 else None
        srcs = _sample_sources(int(rank), sid, same_job, samples, dev)
        own = samples.filter(pl.col("source_id").is_in(srcs))
        if srcs and srcs != [sid]:
            # another file: through both files' epoch origins, or not at all
            if origins.get(sid) is None or any(origins.get(s) is None for s in srcs):
                srcs, own = [], own.clear()
            else:
                own = own.with_columns(
                    pl.col("timestamp_ns")
                    + pl.col("source_id").replace_strict(origins, return_dtype=pl.Int64)
                    - origins[sid]
                )
        if own["device_id"].n_unique() > 1:  # several GPUs: the rank's, or none
            own = own.filter(pl.col("device_id") == dev) if dev is not None else own.clear()
        t = pl.col("timestamp_ns") + m.shifts[int(rank)]
        row = _telemetry_row(rank, own.filter(t.is_between(lo, hi)))
        row["samples_from"] = ", ".join(files.get(s, s) for s in srcs) or None
        rows.append(row)
    return pl.DataFrame(rows, orient="row") if rows else pl.DataFrame()


def _telemetry_row(rank: int, s: pl.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {"rank": rank, "sample_count": s.height}
    for c in ("sm_clock_mhz", "power_w", "power_limit_w", "temperature_c", "sm_active_pct"):
        out[c] = s[c].median() if s.height and c in s.columns else None
    reasons = s["clock_event_reasons"].drop_nulls() if s.height else pl.Series([], dtype=pl.Int64)
    bits = [b for b in THROTTLE_BITS if reasons.len() and ((reasons & b) > 0).mean() > 0.5]  # type: ignore[operator]
    out["throttle"] = ", ".join(THROTTLE_BITS[b] for b in bits) or None
    return out


def _others(df: pl.DataFrame, rank: int, col: str) -> float | None:
    v = df.filter((pl.col("rank") != rank) & pl.col(col).is_not_null())[col]
    return float(v.median()) if v.len() else None  # type: ignore[arg-type]


def _own(df: pl.DataFrame, rank: int, col: str) -> float | None:
    v = df.filter(pl.col("rank") == rank)[col].drop_nulls() if col in df.columns else None
    return float(v[0]) if v is not None and v.len() else None


def _clock(rank: int, tel: pl.DataFrame) -> tuple[float, str] | None:
    if tel.height == 0:
        return None
    own, oth = _own(tel, rank, "sm_clock_mhz"), _others(tel, rank, "sm_clock_mhz")
    if own is None or oth is None or oth <= 0 or own > oth * (1 - MIN_SCORE):
        return None
    text = f"SM clock {own:,.0f} vs {oth:,.0f} MHz median of the others"
    power, limit = _own(tel, rank, "power_w"), _own(tel, rank, "power_limit_w")
    if power is not None and limit and power >= 0.95 * limit:
        text += f"; power at its {limit:,.0f} W limit ({power:,.0f} W)"
    temp, temp_o = _own(tel, rank, "temperature_c"), _others(tel, rank, "temperature_c")
    if temp is not None and temp_o is not None and temp - temp_o >= 5:
        text += f"; temperature {temp:.0f} vs {temp_o:.0f} °C"
    why = tel.filter(pl.col("rank") == rank)["throttle"].drop_nulls()
    if why.len():
        text += f"; throttle reasons: {why[0]}"
    return 1 - own / oth, text


def _host(rank: int, gaps: pl.DataFrame) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = []
    gap_o = _others(gaps, rank, "gap_ms")
    if not gap_o:
        return out
    idle, idle_o = _own(gaps, rank, "idle_ms"), _others(gaps, rank, "idle_ms")
    if idle is not None and idle_o is not None and idle > idle_o:
        load, load_o = _own(gaps, rank, "loader_ms") or 0.0, _others(gaps, rank, "loader_ms") or 0
        lg, lg_o = _own(gaps, rank, "launch_gap_ms"), _others(gaps, rank, "launch_gap_ms")
        if load - load_o >= 0.5 * (idle - idle_o):
            text = (
                f"{load:,.3f} ms data-loader gap before each collective vs {load_o:,.3f} ms "
                f"median of the others (GPU idle {idle:,.3f} vs {idle_o:,.3f} ms)"
            )
        elif lg is not None and lg_o is not None and lg - lg_o >= 0.5 * (idle - idle_o):
            text = (
                f"launch gaps {lg:,.3f} ms before each collective vs {lg_o:,.3f} ms median of "
                f"the others (kernels launched, not yet started; GPU idle {idle:,.3f} vs "
                f"{idle_o:,.3f} ms)"
            )
        else:
            why = "nothing queued: the host is late" if lg is not None else "no launch calls"
            text = (
                f"GPU idle {idle:,.3f} ms before each collective vs {idle_o:,.3f} ms median of "
                f"the others ({why})"
            )
        out.append(((idle - idle_o) / gap_o, text))
    comp, comp_o = _own(gaps, rank, "compute_ms"), _others(gaps, rank, "compute_ms")
    if comp is not None and comp_o is not None and comp > comp_o:
        text = (
            f"kernel time {comp:,.3f} ms before each collective vs {comp_o:,.3f} ms median of "
            "the others"
        )
        out.append(((comp - comp_o) / gap_o, text))
    return out


def step_starts(m: Matched, ops: pl.DataFrame) -> pl.DataFrame:
    """Per rank: `late_ms`, the median over the steps all ranks share of its step start
    (`ProfilerStep#N` on the host, on the common time base) minus the other ranks' median
    start of that step, and `step_count`; null when the ranks share no step."""
    steps = ops.with_columns(pl.col("name").str.extract(STEP).cast(pl.Int64).alias("step"))
    starts = []
    for rank, sid in m.ranks.select("rank", "source_id").rows():
        mine = steps.filter((pl.col("source_id") == sid) & pl.col("step").is_not_null())
        first = mine.group_by("step").agg(pl.col("start_ns").min())
        shift = m.shifts.get(int(rank), 0)
        starts.append(first.with_columns(pl.lit(rank).alias("rank"), pl.col("start_ns") + shift))
    schema = {
        "rank": pl.Int64,
        "late_ms": pl.Float64,
        "after_first_ms": pl.Float64,
        "step_count": pl.Int64,
    }
    if not starts:
        return pl.DataFrame(schema=schema)
    df = pl.concat(starts, how="vertical_relaxed")
    nranks = m.ranks.height
    shared = df.group_by("step").agg(pl.len().alias("n")).filter(pl.col("n") == nranks)["step"]
    df = df.filter(pl.col("step").is_in(shared.implode()))
    rows = []
    for rank in m.ranks["rank"].to_list():
        late: list[float] = []
        after: list[float] = []
        for _, part in df.group_by("step"):
            own = part.filter(pl.col("rank") == rank)["start_ns"].to_numpy()
            others = part.filter(pl.col("rank") != rank)["start_ns"].to_numpy()
            if own.size and others.size:
                late.append(float(own[0] - np.median(others)) / 1e6)
                after.append(float(own[0] - others.min()) / 1e6)
        med = (float(np.median(late)), float(np.median(after))) if late else (None, None)
        rows.append((rank, *med, len(late)))
    return pl.DataFrame(rows, schema=schema, orient="row")


def _late_start(rank: int, starts: pl.DataFrame, waited_ms: float | None) -> str | None:
    """The late-step-start line when it explains the others' waiting (module doc)."""
    row = starts.filter(pl.col("rank") == rank)
    late = row["late_ms"][0] if row.height else None
    if late is None or late * 1e6 < STEP_LATE_NS:
        return None
    if waited_ms is not None and late < 0.5 * waited_ms:
        return None
    n, first = row["step_count"][0], row["after_first_ms"][0]
    return (
        f"its host starts each step late: {late:,.3f} ms after the others' median start, "
        f"{first:,.3f} ms after the first (ProfilerStep, median over {n} step"
        f"{'s' if n != 1 else ''}), so it reaches its collectives late"
    )


def cause_lines(
    stragglers: list[int],
    gaps: pl.DataFrame,
    tel: pl.DataFrame,
    starts: pl.DataFrame | None = None,
    waited_ms: dict[int, float] | None = None,
) -> dict[int, str]:
    """One line per straggler: the largest difference (module doc's rules), or "unknown";
    `starts` (`step_starts`) and `waited_ms` (rank -> the others' waiting per collective it
    came last in) add the late step start."""
    out = {}
    for r in stragglers:
        late = None if starts is None else _late_start(r, starts, (waited_ms or {}).get(r))
        clock = _clock(r, tel)
        host = max(_host(r, gaps), default=None, key=lambda c: c[0])
        also = f"; also {host[1]}" if host is not None and host[0] >= MIN_SCORE else ""
        if clock is not None and clock[0] >= CLOCK_FIRST:
            out[r] = f"rank {r}: {clock[1]}{f'; also {late}' if late else also}"
            continue
        if late is not None:
            out[r] = f"rank {r}: {late}{also}"
            continue
        best = max([c for c in (clock, host) if c is not None], default=None, key=lambda c: c[0])
        if best is not None and best[0] >= MIN_SCORE:
            out[r] = f"rank {r}: {best[1]}"
            continue
        covered = "telemetry" if _own(tel, r, "sm_clock_mhz") is not None else "no telemetry"
        out[r] = (
            f"rank {r}: unknown ({covered}; kernel time and GPU idle before its collectives "
            f"within {MIN_SCORE:.0%} of the others')"
        )
    return out
