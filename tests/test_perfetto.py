"""export.perfetto: the Chrome trace JSON checked against a strict schema of the Trace Event
Format, its flows against the raw trace's correlation ids, counters against the raw samples.

Perfetto's `trace_processor` is not used: its Python package downloads the binary at first use,
and the tests run offline. The schema below is the subset of the format the exporter writes,
with every field it writes required and typed, and no other field allowed.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import json
import sqlite3
from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from traceanalyze import read, schema
from traceanalyze.export.perfetto import chrome_trace_json, write_chrome_trace

from .conftest import shared

jsonschema = pytest.importorskip("jsonschema")

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
H100 = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
NVML = "smi_logs/roofline_custom_nvml_sampler_rtx5070.csv"

_NUM = {"type": "number", "minimum": 0}
_INT = {"type": "integer"}
_STR = {"type": "string"}


def _ev(ph: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    props = {"ph": {"const": ph}, **props}
    return {
        "type": "object",
        "properties": props,
        "required": ["ph", *required],
        "additionalProperties": False,
    }


_INTS_OR_NULL = {"type": "array", "items": {"type": ["integer", "null"]}, "maxItems": 3}
KERNEL_ARGS = {
    "type": "object",
    "properties": {
        "grid": _INTS_OR_NULL,
        "block": _INTS_OR_NULL,
        "registers per thread": {"type": ["integer", "null"]},
        "static shared memory bytes": {"type": ["integer", "null"]},
        "dynamic shared memory bytes": {"type": ["integer", "null"]},
        "shared memory bytes": {"type": ["integer", "null"]},
        "correlation_id": {"type": ["integer", "null"]},
        "stream": {"type": ["integer", "null"]},
        "device": {"type": ["integer", "null"]},
        "kernel_id": _INT,
    },
    "required": ["grid", "block", "registers per thread", "correlation_id", "stream"],
    "additionalProperties": False,
}
SLICE = {
    "name": _STR,
    "cat": _STR,
    "ts": _NUM,
    "dur": _NUM,
    "pid": _INT,
    "tid": _INT,
    "args": {"type": "object"},
}
FLOW = {"name": {"const": "launch"}, "cat": {"const": "launch"}, "id": _INT, "ts": _NUM}
FLOW |= {"pid": _INT, "tid": _INT}
EVENT_SCHEMAS: dict[str, dict[str, Any]] = {
    "X": _ev("X", SLICE, ["name", "cat", "ts", "dur", "pid", "tid", "args"]),
    "i": _ev(
        "i",
        {"name": _STR, "cat": _STR, "ts": _NUM, "s": {"enum": ["t", "p", "g"]}}
        | {"pid": _INT, "tid": _INT},
        ["name", "ts", "s", "pid", "tid"],
    ),
    "s": _ev("s", FLOW, ["name", "cat", "id", "ts", "pid", "tid"]),
    "f": _ev("f", FLOW | {"bp": {"const": "e"}}, ["name", "cat", "id", "ts", "bp"]),
    "C": _ev(
        "C",
        {
            "name": _STR,
            "ts": _NUM,
            "pid": _INT,
            "args": {
                "type": "object",
                "additionalProperties": {"type": "number"},
                "minProperties": 1,
            },
        },
        ["name", "ts", "pid", "args"],
    ),
    "M": _ev(
        "M",
        {
            "name": {"enum": ["process_name", "thread_name"]},
            "pid": _INT,
            "tid": _INT,
            "args": {
                "type": "object",
                "properties": {"name": _STR},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
        ["name", "pid", "tid", "args"],
    ),
}
# The whole document: the envelope, and each event one of the kinds above (as `oneOf`; checked
# per kind below, dispatching on `ph`, which is the same check and 20x faster on 50k events).
TRACE_SCHEMA = {
    "type": "object",
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "traceEvents": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"ph": {"enum": list(EVENT_SCHEMAS)}},
                "required": ["ph"],
            },
        },
    },
    "required": ["traceEvents"],
    "additionalProperties": False,
}
_VALIDATORS = {ph: jsonschema.Draft202012Validator(sch) for ph, sch in EVENT_SCHEMAS.items()}
_KERNEL_ARGS = jsonschema.Draft202012Validator(KERNEL_ARGS)


def validate(doc: dict[str, Any]) -> None:
    jsonschema.validate(doc, TRACE_SCHEMA)
    for e in doc["traceEvents"]:
        _VALIDATORS[e["ph"]].validate(e)
        if e["ph"] == "X" and e["cat"] == "kernel":
            _KERNEL_ARGS.validate(e["args"])


def flows(ev: list[dict[str, Any]]) -> dict[int, tuple[dict[str, Any], dict[str, Any]]]:
    """id -> (start, finish); every start has exactly one finish and the reverse."""
    starts = defaultdict(list)
    ends = defaultdict(list)
    for e in ev:
        if e["ph"] == "s":
            starts[e["id"]].append(e)
        elif e["ph"] == "f":
            ends[e["id"]].append(e)
    assert set(starts) == set(ends)
    assert all(len(v) == 1 for v in starts.values()) and all(len(v) == 1 for v in ends.values())
    return {i: (starts[i][0], ends[i][0]) for i in starts}


class Track:
    """The slices of one (pid, tid), sorted by start, for lookups by time."""

    def __init__(self) -> None:
        self.slices: list[dict[str, Any]] = []
        self.starts: list[float] = []

    def done(self) -> None:
        self.slices.sort(key=lambda e: e["ts"])
        self.starts = [e["ts"] for e in self.slices]


def enclosing(ev: list[dict[str, Any]], cat_prefix: str) -> dict[tuple[int, int], Track]:
    out: dict[tuple[int, int], Track] = defaultdict(Track)
    for e in ev:
        if e["ph"] == "X" and e["cat"].startswith(cat_prefix):
            out[(e["pid"], e["tid"])].slices.append(e)
    for t in out.values():
        t.done()
    return out


def holder(track: Track, ts: float) -> dict[str, Any]:
    """The shortest slice of the track holding ts (slices of these tracks do not nest deeply:
    look back over the last few that start before ts)."""
    i = bisect.bisect_right(track.starts, ts + 1e-6)
    hit = [e for e in track.slices[max(0, i - 8) : i] if ts <= e["ts"] + e["dur"] + 1e-6]
    assert hit, ts
    return min(hit, key=lambda e: e["dur"])


# --- the ResNet-50 Kineto trace ----------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet_doc() -> dict[str, Any]:
    t = read(shared(RESNET))
    text = chrome_trace_json(
        t.kernels,
        t.memcpy,
        t.markers,
        None,
        api_calls=t.api_calls,
        ops=t.ops,
        devices=t.devices,
        sources=t.sources,
    )
    return json.loads(text)


@pytest.fixture(scope="module")
def resnet_raw() -> dict[int, dict[str, Any]]:
    """correlation id -> {'call': (name, tid, ts_ns), 'gpu': (cat, name, ts_ns, dur_ns)}."""
    with gzip.open(shared(RESNET), "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    by: dict[int, dict[str, Any]] = defaultdict(dict)
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or "correlation" not in e.get("args", {}):
            continue
        c, ts = int(e["args"]["correlation"]), int(Decimal(e["ts"]) * 1000)
        if e["cat"] in ("cuda_runtime", "cuda_driver"):
            by[c]["call"] = (e["name"], int(e["tid"]), ts)
        elif e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            by[c]["gpu"] = (e["cat"], e["name"], ts, int(Decimal(e["dur"]) * 1000))
    return by


def test_resnet_trace_is_valid_chrome_trace(resnet_doc) -> None:
    validate(resnet_doc)
    ev = resnet_doc["traceEvents"]
    cats = defaultdict(int)
    for e in ev:
        cats[(e["ph"], e.get("cat"))] += 1
    assert cats[("X", "kernel")] == 4350 and cats[("X", "cpu_op")] == 23910
    assert cats[("X", "cuda_runtime")] == 15329


def test_resnet_flows_connect_each_call_to_its_kernel(resnet_doc, resnet_raw) -> None:
    ev = resnet_doc["traceEvents"]
    fl = flows(ev)
    want = {c for c, v in resnet_raw.items() if "call" in v and "gpu" in v}
    assert len(fl) == len(want) == 6095
    calls = enclosing(ev, "cuda_")
    gpu = {**enclosing(ev, "kernel"), **enclosing(ev, "memcpy")}
    seen = set()
    for s, f in fl.values():
        call = holder(calls[(s["pid"], s["tid"])], s["ts"])
        target = holder(gpu[(f["pid"], f["tid"])], f["ts"])
        c = call["args"]["correlation_id"]
        assert target["args"]["correlation_id"] == c
        raw = resnet_raw[c]
        assert call["name"] == raw["call"][0] and s["tid"] == raw["call"][1]
        if raw["gpu"][0] == "kernel":
            assert target["name"] == raw["gpu"][1]
        # the arrow spans kernel start - call start, to the ns
        assert round((f["ts"] - s["ts"]) * 1000) == raw["gpu"][2] - raw["call"][2]
        seen.add(c)
    assert seen == want


def test_resnet_kernel_args_from_the_raw_file(resnet_doc) -> None:
    with gzip.open(shared(RESNET), "rt") as f:
        doc = json.load(f)
    raw = {
        e["args"]["correlation"]: e["args"]
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "kernel"
    }
    got = [e for e in resnet_doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in got:
        r = raw[e["args"]["correlation_id"]]
        a = e["args"]
        assert (a["grid"], a["block"]) == (r["grid"], r["block"])
        assert a["registers per thread"] == r["registers per thread"]
        assert a["shared memory bytes"] == r["shared memory"]
        assert (a["stream"], a["device"]) == (r["stream"], r["device"])


def test_resnet_processes_named_by_device_and_rank(resnet_doc) -> None:
    names = {
        e["pid"]: e["args"]["name"]
        for e in resnet_doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert names[0] == "GPU 0 · Tesla V100-SXM2-32GB · rank 0"
    assert names[1_001_102] == "host pid 1102 · rank 0"
    assert names[1_000_000] == "host · rank 0"  # the two instant markers without a pid
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in resnet_doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert threads[(0, 7)] == "stream 7" and threads[(1_001_102, 1102)] == "thread 1102"
    # every track used by an event is named
    used = {(e["pid"], e["tid"]) for e in resnet_doc["traceEvents"] if e["ph"] in ("X", "i")}
    assert used <= set(threads)


# --- nsys: two processes, correlation ids per process -------------------------------------------


def test_h100_nsys_flows_stay_within_a_process() -> None:
    t = read(shared(H100))
    doc = json.loads(
        chrome_trace_json(t.kernels, t.memcpy, t.markers, api_calls=t.api_calls, ops=t.ops)
    )
    validate(doc)
    ev = doc["traceEvents"]
    calls = enclosing(ev, "cuda_")
    kern = enclosing(ev, "kernel")
    pid_of_device = {}
    for s, f in flows(ev).values():
        if (f["pid"], f["tid"]) not in kern:
            continue  # a copy
        call = holder(calls[(s["pid"], s["tid"])], s["ts"])
        k = holder(kern[(f["pid"], f["tid"])], f["ts"])
        assert call["args"]["correlation_id"] == k["args"]["correlation_id"]
        # one host process drives each GPU
        assert pid_of_device.setdefault(f["pid"], s["pid"]) == s["pid"]
    assert len(pid_of_device) == 2 and len(set(pid_of_device.values())) == 2


def improper_nesting(ev: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Pairs of complete slices of one (pid, tid) that overlap without one holding the other,
    found by a stack sweep over the exported times in integer ns (start, longer first)."""
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            s = round(e["ts"] * 1000)
            tracks[(e["pid"], e["tid"])].append((s, s + round(e["dur"] * 1000)))
    bad = []
    for key, sl in tracks.items():
        sl.sort(key=lambda x: (x[0], -x[1]))
        stack: list[tuple[int, int]] = []
        for s, end in sl:
            while stack and stack[-1][1] <= s:
                stack.pop()
            if stack and end > stack[-1][1]:
                bad.append((key, stack[-1], (s, end)))
            stack.append((s, end))
    return bad


def raw_same_stream_overlaps(rel: str) -> list[tuple[int, int, int, int]]:
    """(device, stream, overlap ns, later kernel's correlation id) per pair of kernels of one
    stream that overlap, from the nsys SQLite by hand."""
    con = sqlite3.connect(f"file:{shared(rel)}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT deviceId, streamId, start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
            "ORDER BY deviceId, streamId, start"
        ).fetchall()
    finally:
        con.close()
    out = []
    for (d0, s0, _, e0, _), (d1, s1, b1, e1, c1) in zip(rows, rows[1:], strict=False):
        if (d0, s0) == (d1, s1) and b1 < e0:
            out.append((d1, s1, min(e0, e1) - b1, c1))
    return out


def test_h100_overlapping_kernels_nest_properly_per_track() -> None:
    overlaps = raw_same_stream_overlaps(H100)
    assert [o[:3] for o in overlaps] == [(0, 7, 12442)]  # the 12.4 µs overlap
    t = read(shared(H100))
    doc = json.loads(
        chrome_trace_json(t.kernels, t.memcpy, t.markers, api_calls=t.api_calls, ops=t.ops)
    )
    validate(doc)
    ev = doc["traceEvents"]
    assert improper_nesting(ev) == []
    # the later kernel of the pair is on stream 7's first sub-track, named after it
    (dev, stream, _, later) = overlaps[0]
    moved = [e for e in ev if e["ph"] == "X" and e["tid"] == stream + 10_000_000]
    assert len(moved) == 1 and moved[0]["pid"] == dev
    assert moved[0]["args"]["correlation_id"] == later
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert names[(dev, stream + 10_000_000)] == "stream 7 · overlap 1"
    # its launch arrow ends on the sub-track
    kern = enclosing(ev, "kernel")
    ends = [f for _, f in flows(ev).values() if (f["pid"], f["tid"]) == (dev, stream + 10**7)]
    assert len(ends) == 1 and holder(kern[(dev, stream + 10**7)], ends[0]["ts"]) == moved[0]


def test_resnet_gpu_annotations_on_their_stream(resnet_doc) -> None:
    with gzip.open(shared(RESNET), "rt") as f:
        raw = json.load(f, parse_float=Decimal)["traceEvents"]
    want = sorted(
        (e["name"], int(e["pid"]), int(e["tid"]))
        for e in raw
        if e.get("ph") == "X" and e.get("cat") == "gpu_user_annotation"
    )
    ev = resnet_doc["traceEvents"]
    got = sorted(
        (e["name"], e["pid"], e["tid"]) for e in ev if e.get("cat") == "gpu_user_annotation"
    )
    assert len(got) == 15 and got == want
    tracks = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "X" and e["pid"] < 1_000_000}
    assert (0, 0) not in tracks  # no "stream 0": the trace has no such stream
    assert improper_nesting(ev) == []


# --- counters and escaping ----------------------------------------------------------------------


def test_counters_carry_the_raw_samples() -> None:
    p = shared(NVML)
    rows = list(csv.DictReader(p.open()))
    t = read(p)
    doc = json.loads(chrome_trace_json(gpu_samples=t.gpu_samples))
    validate(doc)
    ev = doc["traceEvents"]
    t0 = datetime.fromisoformat(rows[0]["timestamp"].replace("Z", "+00:00"))
    for col in ("power_w", "temperature_c", "sm_clock_mhz"):
        got = sorted(
            (e["ts"], e["args"]["value"]) for e in ev if e["ph"] == "C" and e["name"] == col
        )
        want = [
            (
                (datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")) - t0).total_seconds()
                * 1e6,
                float(r[col]),
            )
            for r in rows
        ]
        assert [v for _, v in got] == [v for _, v in want]
        assert [ts for ts, _ in got] == pytest.approx([ts for ts, _ in want], abs=1e-3)


def test_names_are_escaped(tmp_path: Path) -> None:
    nasty = 'k<"q">\\ \n\t\u00e9\u2603 \x01 {"x": 1}'
    k = schema.conform(
        "kernels",
        pl.DataFrame(
            {
                "source_id": ["s"],
                "kernel_id": [0],
                "device_id": [0],
                "stream_id": [7],
                "name": [nasty],
                "start_ns": [1000],
                "end_ns": [3000],
            }
        ),
    )
    mk = schema.conform(
        "markers",
        pl.DataFrame(
            {"source_id": ["s"], "thread_id": [5], "name": [nasty], "start_ns": [0], "end_ns": [9]}
        ),
    )
    out = tmp_path / "t.json"
    write_chrome_trace(out, k, None, mk)
    doc = json.loads(out.read_text("utf-8"))
    validate(doc)
    names = [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"]
    assert names == [nasty, nasty]
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary left


def test_schema_rejects_what_perfetto_would() -> None:
    ok = {"name": "k", "cat": "kernel", "ph": "X", "ts": 0.0, "dur": 1.0, "pid": 0, "tid": 7}
    ok["args"] = {"grid": [1, 1, 1], "block": [32, 1, 1], "registers per thread": 8}
    ok["args"] |= {"correlation_id": 3, "stream": 7, "kernel_id": 0}
    validate({"traceEvents": [ok]})
    for bad in (
        {**ok, "ts": -1.0},  # negative time (google/perfetto#107)
        {k: v for k, v in ok.items() if k != "dur"},
        {**ok, "pid": "GPU 0"},
        {"ph": "f", "name": "launch", "cat": "launch", "id": 1, "ts": 0.0},  # no bind point
        {"ph": "C", "name": "power_w", "ts": 0.0, "pid": 0, "args": {"value": "12 W"}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validate({"traceEvents": [bad]})
