"""Idle time by cause: a small frame by hand, `busy`'s totals on real traces, and the nsys
2-GPU trace against a plain-loop classification of SQL rows."""

from __future__ import annotations

from contextlib import nullcontext

import polars as pl
import pytest
from _trace_raw import NSYS2, NVPROF, NVPROF_CSV, RESNET, sql, union
from conftest import shared

import traceanalyze as ta
from traceanalyze.analyses.busy import busy_time
from traceanalyze.analyses.idle import CAUSES, idle_time

KERNELS = pl.DataFrame(
    {
        "source_id": ["s"] * 4,
        "process_id": [None] * 4,
        "device_id": [0] * 4,
        "stream_id": [1, 1, 2, 1],
        "correlation_id": [1, 2, 3, 99],
        "start_ns": [0, 20, 40, 60],
        "end_ns": [10, 30, 50, 70],
    },
    schema_overrides={"process_id": pl.Int64},
)
COPIES = pl.DataFrame(
    {
        "source_id": ["s"] * 2,
        "device_id": [0, 0],
        "stream_id": [2, 1],
        "start_ns": [32, 70],
        "end_ns": [35, 80],
    }
)
CALLS = pl.DataFrame(
    {
        "source_id": ["s"] * 5,
        "process_id": [5] * 5,
        "thread_id": [1] * 5,
        "correlation_id": [1, 2, 3, None, None],
        "api": ["runtime"] * 5,
        "name": ["cudaLaunchKernel"] * 3 + ["cudaStreamSynchronize"] * 2,
        "start_ns": [-5, 15, 5, 36, 52],
        "end_ns": [-4, 16, 6, 38, 54],
    }
).with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"))


def _row(df: pl.DataFrame, stream: int | None) -> dict:
    r = df.filter(pl.col("stream_id").eq_missing(stream)).row(0, named=True)
    return {k: r[k] for k in ("window_ns", "busy_ns", "idle_ns", *CAUSES)}


def test_small_frame_by_hand() -> None:
    df = idle_time(KERNELS, COPIES, CALLS)
    # device: gaps [10,20) host 5 + launch 5; [30,40) copy 3 + launch 7 (K3 queued since 5);
    # [50,60) sync 2 + unknown 8 (K4 has no call); tail [70,80) copy 10
    assert _row(df, None) == {
        "window_ns": 80,
        "busy_ns": 40,
        "idle_ns": 40,
        "host_wait_ns": 5,
        "launch_gap_ns": 12,
        "sync_ns": 2,
        "copy_ns": 13,
        "unknown_ns": 8,
    }
    # stream 1: [10,20) host 5 + launch 5; [30,60) sync 4 + unknown 26; tail copy 10
    assert _row(df, 1) == {
        "window_ns": 80,
        "busy_ns": 30,
        "idle_ns": 50,
        "host_wait_ns": 5,
        "launch_gap_ns": 5,
        "sync_ns": 4,
        "copy_ns": 10,
        "unknown_ns": 26,
    }
    # stream 2: [0,40) host 5, copy 3, launch 32; tail [50,80) sync 2, host 28
    assert _row(df, 2) == {
        "window_ns": 80,
        "busy_ns": 10,
        "idle_ns": 70,
        "host_wait_ns": 33,
        "launch_gap_ns": 32,
        "sync_ns": 2,
        "copy_ns": 3,
        "unknown_ns": 0,
    }


def test_given_window_and_no_calls() -> None:
    with pytest.warns(UserWarning, match="no API calls"):
        df = idle_time(KERNELS, COPIES, CALLS.clear(), window=(5, 45))
    # busy [5,10) [20,30) [40,45) = 20; idle 20: copy [32,35) 3, the rest unknown
    assert _row(df, None) == {
        "window_ns": 40,
        "busy_ns": 20,
        "idle_ns": 20,
        "host_wait_ns": 0,
        "launch_gap_ns": 0,
        "sync_ns": 0,
        "copy_ns": 3,
        "unknown_ns": 17,
    }


@pytest.mark.parametrize("rel", [RESNET, NSYS2, NVPROF, NVPROF_CSV])
def test_device_idle_is_busy_complement(rel: str) -> None:
    ds = ta.open(shared(rel))
    quiet = nullcontext()
    with pytest.warns(UserWarning, match="no API calls") if rel == NVPROF_CSV else quiet:
        df = ds.idle()
    assert (df.select(pl.sum_horizontal(*CAUSES)).to_series() == df["idle_ns"]).all()
    b = busy_time(ds.kernels, ds.memcpy).filter(pl.col("activity") == "kernels")
    want = b.select("device_id", (pl.col("window_ns") - pl.col("busy_ns")).alias("idle_ns"))
    got = df.filter(pl.col("stream_id").is_null()).select("device_id", "idle_ns")
    assert got.sort("device_id").rows() == want.sort("device_id").rows()


def _scalar_causes(kernels, copies, syncs, lo: int, hi: int) -> dict[str, int]:
    """Per-gap classification with plain loops over the raw rows."""
    busy = union([(max(s, lo), min(e, hi)) for s, e, _ in kernels])
    gaps, t = [], lo
    for s, e in busy:
        if s > t:
            gaps.append((t, s))
        t = e
    if t < hi:
        gaps.append((t, hi))
    out = dict.fromkeys(CAUSES, 0)

    def inside(ivs, x):
        return any(s <= x < e for s, e in ivs)

    for g0, g1 in gaps:
        nxt = [c for s, _, c in kernels if max(s, lo) == g1] if g1 < hi else []
        calls = [c for c in nxt if c is not None]
        q = max(g0, min(calls)) if calls else None
        cps = [(s, e) for s, e in copies if s < g1 and e > g0]
        sys_ = [(s, e) for s, e in syncs if s < g1 and e > g0]
        pts = {g0, g1} | ({q} if q is not None else set())
        for s, e in cps + sys_:
            pts |= {min(max(s, g0), g1), min(max(e, g0), g1)}
        pts_l = sorted(pts)
        for a, b in zip(pts_l, pts_l[1:], strict=False):
            if inside(cps, a):
                out["copy_ns"] += b - a
            elif q is not None and a >= q:
                out["launch_gap_ns"] += b - a
            elif inside(sys_, a):
                out["sync_ns"] += b - a
            elif g1 < hi and not calls:
                out["unknown_ns"] += b - a
            else:
                out["host_wait_ns"] += b - a
    return out


def test_nsys_two_gpus_against_plain_loops() -> None:
    p = shared(NSYS2)
    kern = sql(
        p,
        "SELECT k.deviceId, k.globalPid >> 24, k.start, k.end, r.start "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)",
    )
    copies = sql(
        p,
        "SELECT deviceId, start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY "
        "UNION ALL SELECT deviceId, start, end FROM CUPTI_ACTIVITY_KIND_MEMSET",
    )
    syncs = sql(
        p,
        "SELECT r.globalTid >> 24, r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE '%Synchronize%' OR "
        "((s.value LIKE 'cudaMem%' OR s.value LIKE 'cuMem%') AND s.value NOT LIKE '%Async%' "
        "AND (s.value LIKE 'cu%Memcpy%' OR s.value LIKE 'cu%Memset%'))",
    )
    lo = min(min(x[2] for x in kern), min(x[1] for x in copies))
    hi = max(max(x[3] for x in kern), max(x[2] for x in copies))
    df = ta.open(p).idle()
    assert syncs, "the trace has blocking calls"
    for dev in (0, 1):
        kd = [(s, e, c) for d, _, s, e, c in kern if d == dev]
        pids = {pid for d, pid, *_ in kern if d == dev}
        cd = [(s, e) for d, s, e in copies if d == dev]
        sd = [(s, e) for pid, s, e in syncs if pid in pids]
        want = _scalar_causes(kd, cd, sd, lo, hi)
        got = df.filter((pl.col("device_id") == dev) & pl.col("stream_id").is_null())
        assert {c: got[c].item() for c in CAUSES} == want


def test_plot_has_units() -> None:
    from traceanalyze.plot._idle import idle_figure

    fig = idle_figure(idle_time(KERNELS, COPIES, CALLS))
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time in window (ms)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["s · GPU 0"]
