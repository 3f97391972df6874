"""GPU time per annotation: inline frames by hand (both methods), and the real traces against
the raw files: Kineto gpu_user_annotation from the JSON, NVTX projected through the launches
from SQL on the nsys and nvprof exports."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl
import pytest
from _trace_raw import NSYS2, NVPROF, NVPROF_CSV, RESNET, kineto_events, sql
from conftest import shared

import traceanalyze as ta
from traceanalyze.analyses.annotations import annotation_time, attribute_events
from traceanalyze.tables import Tables


def _kernels(stream: list[int], start: list[int], corr: list[int] | None = None) -> pl.DataFrame:
    n = len(start)
    return pl.DataFrame(
        {
            "source_id": ["s"] * n,
            "device_id": [0] * n,
            "stream_id": stream,
            "correlation_id": corr or list(range(n)),
            "start_ns": start,
            "end_ns": [t + 2 for t in start],
        }
    )


def test_gpu_user_annotation_by_hand() -> None:
    k = _kernels([7, 7, 7, 8, 9, 7], [5, 10, 49, 20, 20, 100])
    cp = pl.DataFrame(
        {"source_id": ["s"], "device_id": [0], "stream_id": [7], "kind": ["HtoD"]}
    ).with_columns(pl.lit(50).alias("start_ns"), pl.lit(53).alias("end_ns"))
    mk = pl.DataFrame(
        {
            "source_id": ["s"] * 3,
            "device_id": [0] * 3,
            "stream_id": [7, 7, 8],
            "name": ["step", "fwd", "other"],
            "category": ["gpu_user_annotation"] * 3,
            "start_ns": [0, 10, 0],
            "end_ns": [100, 50, 100],
        }
    )
    t = Tables.build(kernels=k, memcpy=cp, markers=mk)
    ev = attribute_events(t.kernels, t.memcpy, t.api_calls, t.markers)
    got = {(r["stream_id"], r["start_ns"]): r["path"] for r in ev.iter_rows(named=True)}
    assert got == {
        (7, 5): ["step"],
        (7, 10): ["step", "fwd"],
        (7, 49): ["step", "fwd"],
        (7, 50): ["step"],  # the copy starts where fwd ends: not inside it
        (8, 20): ["other"],
        (9, 20): None,  # no annotation on that stream
        (7, 100): None,
    }
    df = annotation_time(t.kernels, t.memcpy, t.api_calls, t.markers)
    rows = {r["annotation"]: (r["event_count"], r["duration_ns"]) for r in df.iter_rows(named=True)}
    assert rows == {"step/fwd": (2, 4), "step": (2, 5), "other": (1, 2), None: (2, 4)}
    top = annotation_time(t.kernels, t.memcpy, t.api_calls, t.markers, depth=1)
    assert dict(top.select("annotation", "event_count").rows()) == {"step": 4, "other": 1, None: 2}


def test_nvtx_projection_by_hand() -> None:
    k = _kernels([7] * 4, [500, 510, 520, 530], corr=[1, 2, 3, 4])
    calls = pl.DataFrame(
        {
            "source_id": ["s"] * 3,
            "process_id": [1] * 3,
            "thread_id": [10, 10, 11],
            "correlation_id": [1, 2, 3],
            "name": ["cudaLaunchKernel"] * 3,
            "start_ns": [25, 40, 50],
            "end_ns": [26, 41, 51],
        }
    )
    mk = pl.DataFrame(
        {
            "source_id": ["s"] * 3,
            "process_id": [1] * 3,
            "thread_id": [10, 10, 11],
            "name": ["A", "B, seq = 3, op_id = 9", "C"],
            "category": ["nvtx"] * 3,
            "start_ns": [0, 20, 0],
            "end_ns": [100, 40, 100],
        }
    )
    t = Tables.build(kernels=k, api_calls=calls, markers=mk)
    ev = attribute_events(t.kernels, t.memcpy, t.api_calls, t.markers, strip_ids=True)
    assert ev["path"].to_list() == [["A", "B"], ["A"], ["C"], None]
    assert set(ev["method"]) == {"launch_projection"}


def _leaf_names(events: list[tuple], ranges: list[tuple]) -> Counter:
    """events (thread, t); ranges (thread, start, end, name): innermost = latest start holding
    t, by numpy masks per event."""
    by_thread: dict = {}
    for th, s, e, n in ranges:
        by_thread.setdefault(th, []).append((s, e, n))
    arrs = {
        th: (np.array([x[0] for x in v]), np.array([x[1] for x in v]), [x[2] for x in v])
        for th, v in by_thread.items()
    }
    out: Counter = Counter()
    for th, t in events:
        if th not in arrs:
            out[None] += 1
            continue
        s, e, n = arrs[th]
        hold = np.flatnonzero((s <= t) & (t < e))
        out[n[hold[np.argmax(s[hold])]] if hold.size else None] += 1
    return out


def _got_leaves(ev: pl.DataFrame) -> Counter:
    return Counter(p[-1] if p is not None else None for p in ev["path"].to_list())


def test_resnet_gpu_user_annotations_against_json() -> None:
    p = shared(RESNET)
    ev = kineto_events(p)
    ann = [e for e in ev if e.get("cat") == "gpu_user_annotation"]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    counts: Counter = Counter()
    durs: Counter = Counter()
    for g in gpu:
        holds = [a for a in ann if (a["pid"], a["tid"]) == (g["pid"], g["tid"])]
        holds = [a for a in holds if a["start"] <= g["start"] < a["end"]]
        name = max(holds, key=lambda a: a["start"])["name"] if holds else None
        counts[name] += 1
        durs[name] += g["dur_ns"]
    # the reader keeps the annotations' stream (their tid), which the lanes need
    mk = ta.read(p).markers.filter(pl.col("category") == "gpu_user_annotation")
    assert mk["stream_id"].to_list() == [a["tid"] for a in sorted(ann, key=lambda a: a["start"])]
    df = ta.open(p).annotations()
    got = {r["annotation"]: (r["event_count"], r["duration_ns"]) for r in df.iter_rows(named=True)}
    assert got == {n: (counts[n], durs[n]) for n in counts}
    assert set(df["method"]) == {"gpu_user_annotation"}
    assert got["DistributedDataParallel.forward"][0] == 2300


def test_nsys_nvtx_projection_against_sql() -> None:
    p = shared(NSYS2)
    events = sql(
        p,
        "SELECT r.globalTid, r.start FROM ("
        " SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL"
        " SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL"
        " SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET) g "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.correlationId "
        "AND (r.globalTid >> 24) = (g.globalPid >> 24)",
    )
    ranges = sql(
        p,
        "SELECT n.globalTid, n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN (59, 60) "
        "AND n.end IS NOT NULL",
    )
    want = _leaf_names(events, ranges)
    n_gpu = sql(
        p,
        "SELECT (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL) + "
        "(SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY) + "
        "(SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET)",
    )[0][0]
    want[None] += n_gpu - len(events)  # events without a launch call
    t = ta.read(p)
    got = _got_leaves(attribute_events(t.kernels, t.memcpy, t.api_calls, t.markers))
    assert got == want
    assert sum(got.values()) == 5299


def test_nvprof_nvtx_projection_against_sql() -> None:
    p = shared(NVPROF)
    k = "CUPTI_ACTIVITY_KIND_"
    events = sql(
        p,
        f"SELECT r.threadId & 4294967295, r.start FROM ("
        f" SELECT correlationId FROM {k}CONCURRENT_KERNEL UNION ALL"
        f" SELECT correlationId FROM {k}MEMCPY UNION ALL SELECT correlationId FROM {k}MEMSET) g"
        f" JOIN (SELECT correlationId, threadId, start FROM {k}RUNTIME UNION ALL"
        f" SELECT correlationId, threadId, start FROM {k}DRIVER) r"
        " ON r.correlationId = g.correlationId",
    )
    raw = sql(
        p,
        f"SELECT s.objectId, s.timestamp, e.timestamp, t.value FROM {k}MARKER s "
        f"JOIN {k}MARKER e ON e.id = s.id AND (e.flags & 4) != 0 "
        "JOIN StringTable t ON t._id_ = s.name WHERE (s.flags & 2) != 0",
    )
    ranges = [(int.from_bytes(o[4:8], "little"), s, e, n) for o, s, e, n in raw]
    want = _leaf_names(events, ranges)
    assert len(events) == 189
    t = ta.read(p)
    assert _got_leaves(attribute_events(t.kernels, t.memcpy, t.api_calls, t.markers)) == want


def test_nvprof_csv_says_it_cannot_attribute() -> None:
    with pytest.warns(UserWarning, match="no GPU event falls in an annotation"):
        df = ta.open(shared(NVPROF_CSV)).annotations()
    assert df.select("annotation", "event_count").rows() == [(None, 304)]
