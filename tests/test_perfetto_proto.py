"""export.perfetto_proto: the protobuf trace decoded with Perfetto's own trace protos (the
`perfetto` package) and checked against the Chrome trace JSON of the same tables (slices with
their tracks and arguments, flows, counters, track names) and against the raw files (slice
counts per category, launch flows by correlation id, counter samples).

Perfetto's `trace_processor` is not used (its Python package downloads the binary at first use);
the decoder below replays the packet sequence as it does: interned names, track descriptors
before their events, begins and ends matched per track in file order.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze import read, schema
from traceanalyze.cli import main
from traceanalyze.errors import UsageProblem
from traceanalyze.export.perfetto import chrome_trace_json
from traceanalyze.export.perfetto_proto import is_proto_path, write_perfetto_proto

from .conftest import shared
from .test_critical_path import TINY

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
H100 = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
NVML = "smi_logs/roofline_custom_nvml_sampler_rtx5070.csv"
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
PATH_IDS = 1_000_000_000  # the critical path's flow ids (export.perfetto_path.ID_OFFSET)


@dataclass
class Decoded:
    """What a trace reader sees: `slices` (dicts: track, name, cat, ts, end, args, flows,
    terminating), `instants`, `counters` (track name -> [(ts, value)]), `tracks` (uuid ->
    (process name, track name); a process track's own name is its process name)."""

    slices: list[dict[str, Any]] = field(default_factory=list)
    instants: list[tuple[tuple[str, str], str, int]] = field(default_factory=list)
    counters: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict)
    tracks: dict[int, tuple[str, str]] = field(default_factory=dict)


def _value(a: Any) -> Any:
    if len(a.array_values):
        return tuple(x.int_value for x in a.array_values)
    return getattr(a, a.WhichOneof("value"))


def decode(path: Path) -> Decoded:
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    out = Decoded()
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    annots: dict[int, str] = {}
    counter_tracks: set[int] = set()
    stacks: dict[int, list[dict[str, Any]]] = defaultdict(list)
    last_ts = 0
    for p in trace.packet:
        assert p.trusted_packet_sequence_id == 1
        if p.sequence_flags & 1:  # SEQ_INCREMENTAL_STATE_CLEARED
            names.clear(), cats.clear(), annots.clear()
        names |= {e.iid: e.name for e in p.interned_data.event_names}
        cats |= {e.iid: e.name for e in p.interned_data.event_categories}
        annots |= {e.iid: e.name for e in p.interned_data.debug_annotation_names}
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("process"):
                out.tracks[d.uuid] = (d.process.process_name, d.process.process_name)
            else:
                out.tracks[d.uuid] = (out.tracks[d.parent_uuid][0], d.name)
            if d.HasField("counter"):
                counter_tracks.add(d.uuid)
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        track = out.tracks[e.track_uuid]  # its descriptor came first
        if e.type == COUNTER:
            assert e.track_uuid in counter_tracks
            out.counters.setdefault(track, []).append((p.timestamp, e.double_counter_value))
            continue
        if e.type in (BEGIN, INSTANT):  # they use interned names
            assert p.sequence_flags == 2  # SEQ_NEEDS_INCREMENTAL_STATE
        if e.type == INSTANT:
            out.instants.append((track, names[e.name_iid], p.timestamp))
            continue
        assert p.timestamp >= last_ts  # slices in time order: nesting needs no other sort
        last_ts = p.timestamp
        if e.type == END:
            s = stacks[e.track_uuid].pop()
            s["end"] = p.timestamp
            continue
        assert e.type == BEGIN
        s = {
            "track": track,
            "name": names[e.name_iid],
            "cat": cats[e.category_iids[0]],
            "ts": p.timestamp,
            "args": tuple(sorted((annots[a.name_iid], _value(a)) for a in e.debug_annotations)),
            "flows": list(e.flow_ids),
            "terminating": list(e.terminating_flow_ids),
        }
        stacks[e.track_uuid].append(s)
        out.slices.append(s)
    assert all(not st for st in stacks.values())  # every slice ended
    return out


def json_view(doc: dict[str, Any]) -> tuple[Counter[Any], list[Any], set[Any]]:
    """The JSON export as the decoder above sees the protobuf: the slices (track names, cat,
    name, ns times, non-null args), the flows (start and end as (track, ns)), the tracks."""
    ev = doc["traceEvents"]
    pname = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    tname = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}

    def track(e: dict[str, Any]) -> tuple[str, str]:
        return (pname[e["pid"]], tname[(e["pid"], e["tid"])])

    def args(a: dict[str, Any]) -> tuple[Any, ...]:
        keep = {k: v for k, v in a.items() if v is not None}
        keep = {k: v for k, v in keep.items() if not (isinstance(v, list) and None in v)}
        return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in keep.items()))

    slices = Counter(
        (
            track(e),
            e["cat"],
            e["name"],
            round(e["ts"] * 1e3),
            round(e["dur"] * 1e3),
            args(e["args"]),
        )
        for e in ev
        if e["ph"] == "X"
    )
    by_id: dict[int, dict[str, Any]] = defaultdict(dict)
    for e in ev:
        if e["ph"] in "sf":
            by_id[e["id"]][e["ph"]] = (track(e), round(e["ts"] * 1e3))
            by_id[e["id"]]["cat"] = e["cat"]
    flows = sorted((f["cat"], f["s"], f["f"]) for f in by_id.values())
    return slices, flows, set(tname.values())


def proto_view(d: Decoded) -> tuple[Counter[Any], list[Any]]:
    slices = Counter(
        (s["track"], s["cat"], s["name"], s["ts"], s["end"] - s["ts"], s["args"]) for s in d.slices
    )
    starts: dict[int, dict[str, Any]] = {}
    ends: dict[int, dict[str, Any]] = {}
    for s in d.slices:
        for i in s["flows"]:
            assert i not in starts
            starts[i] = s
        for i in s["terminating"]:
            assert i not in ends
            ends[i] = s
    assert starts.keys() == ends.keys()  # every flow has its start and its end
    flows = sorted(
        (
            "critical_path" if i >= PATH_IDS else "launch",
            (starts[i]["track"], starts[i]["ts"]),
            (ends[i]["track"], ends[i]["ts"]),
        )
        for i in starts
    )
    return slices, flows


def both(tmp_path: Path, *args: Any, **kw: Any) -> tuple[Decoded, dict[str, Any]]:
    out = tmp_path / "t.pftrace"
    write_perfetto_proto(out, *args, **kw)
    return decode(out), json.loads(chrome_trace_json(*args, **kw))


# --- the ResNet-50 Kineto trace ----------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Decoded, dict[str, Any]]:
    t = read(shared(RESNET))
    kw = {"api_calls": t.api_calls, "ops": t.ops, "devices": t.devices, "sources": t.sources}
    return both(tmp_path_factory.mktemp("resnet"), t.kernels, t.memcpy, t.markers, None, **kw)


def test_resnet_slices_per_category_match_the_raw_trace(resnet) -> None:
    d, _ = resnet
    with gzip.open(shared(RESNET), "rt") as f:
        raw = json.load(f)["traceEvents"]
    want = Counter(e["cat"] for e in raw if e.get("ph") == "X")
    got = Counter(s["cat"] for s in d.slices)
    for cat in ("kernel", "cpu_op", "cuda_runtime", "gpu_user_annotation", "user_annotation"):
        assert got[cat] == want[cat], cat
    assert got["memcpy"] == want["gpu_memcpy"] + want["gpu_memset"]
    assert got["kernel"] == 4350


def test_resnet_slices_tracks_and_args_equal_the_json_export(resnet) -> None:
    d, doc = resnet
    want_slices, _, want_tracks = json_view(doc)
    got_slices, _ = proto_view(d)
    assert got_slices == want_slices
    assert {t for _, t in d.tracks.values()} - {p for p, _ in d.tracks.values()} == want_tracks
    assert "GPU 0 · Tesla V100-SXM2-32GB · rank 0" in {p for p, _ in d.tracks.values()}
    ev = doc["traceEvents"]
    pname = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    tname = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    marks = [
        ((pname[e["pid"]], tname[(e["pid"], e["tid"])]), e["name"], round(e["ts"] * 1e3))
        for e in ev
        if e["ph"] == "i"
    ]
    assert sorted(d.instants) == sorted(marks) and len(marks) == 2


def test_resnet_launch_flows_join_each_call_to_its_gpu_event(resnet) -> None:
    d, doc = resnet
    _, want_flows, _ = json_view(doc)
    _, got_flows = proto_view(d)
    assert got_flows == want_flows and len(got_flows) > 4000
    assert {f[0] for f in got_flows} == {"launch"}
    by_id = {i: s for s in d.slices for i in s["flows"]}
    for s in d.slices:
        for i in s["terminating"]:
            call, gpu = dict(by_id[i]["args"]), dict(s["args"])
            assert by_id[i]["cat"] == "cuda_runtime" and s["cat"] in ("kernel", "memcpy")
            assert call["correlation_id"] == gpu["correlation_id"]


# --- nsys: two processes, overlapping kernels on a sub-track ------------------------------------


@pytest.fixture(scope="module")
def h100() -> Any:
    return read(shared(H100))


def test_h100_equals_the_json_export_with_the_overlap_sub_track(h100, tmp_path: Path) -> None:
    t = h100
    d, doc = both(tmp_path, t.kernels, t.memcpy, t.markers, api_calls=t.api_calls, ops=t.ops)
    want_slices, want_flows, _ = json_view(doc)
    got_slices, got_flows = proto_view(d)
    assert got_slices == want_slices and got_flows == want_flows
    moved = [s for s in d.slices if s["track"] == ("GPU 0", "stream 7 · overlap 1")]
    assert len(moved) == 1 and moved[0]["cat"] == "kernel" and len(moved[0]["terminating"]) == 1
    hosts = {s["track"][0] for s in d.slices if s["cat"].startswith("cuda_")}
    assert hosts == {"host pid 144", "host pid 145"}


def test_slices_that_touch_or_tie_nest_as_in_the_json(tmp_path: Path) -> None:
    """One stream: a kernel holding the others, two that touch at 10 with an empty one there,
    two identical ones (one holds the other), an empty one where the holder ends."""
    spans = [(0, 30), (0, 10), (10, 20), (10, 10), (20, 30), (20, 30), (30, 30), (5, 10)]
    n = len(spans)
    k = schema.conform(
        "kernels",
        pl.DataFrame(
            {
                "source_id": ["s"] * n,
                "kernel_id": list(range(n)),
                "device_id": [0] * n,
                "stream_id": [7] * n,
                "name": [f"k{i}" for i in range(n)],
                "start_ns": [a for a, _ in spans],
                "end_ns": [b for _, b in spans],
            }
        ),
    )
    d, doc = both(tmp_path, k)
    got, _ = proto_view(d)
    want, _, _ = json_view(doc)
    assert got == want
    assert sorted((s["name"], s["ts"], s["end"]) for s in d.slices) == sorted(
        (f"k{i}", a, b) for i, (a, b) in enumerate(spans)
    )


# --- counters, marks, the critical path ------------------------------------------------------


def test_counters_carry_the_raw_samples(tmp_path: Path) -> None:
    p = shared(NVML)
    rows = list(csv.DictReader(p.open()))
    d, _ = both(tmp_path, gpu_samples=read(p).gpu_samples)
    t0 = datetime.fromisoformat(rows[0]["timestamp"].replace("Z", "+00:00"))
    for col in ("power_w", "temperature_c", "sm_clock_mhz"):
        got = d.counters[("GPU 0", col)]
        want = [
            (datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")) - t0, float(r[col]))
            for r in rows
        ]
        assert [v for _, v in got] == [v for _, v in want]
        assert [ts for ts, _ in got] == [td // timedelta(microseconds=1) * 1000 for td, _ in want]
    assert len(d.counters) == 3 and d.slices == []


@pytest.fixture
def tiny(write) -> Path:
    return write("tiny.pt.trace.json", json.dumps({"schemaVersion": 1, "traceEvents": TINY}))


def test_timeline_critical_path_flows_by_extension(tiny: Path, tmp_path: Path) -> None:
    flows = []
    for name in ("t.json", "t.pftrace"):
        trace = tmp_path / name
        args = ["timeline", str(tiny), "--critical-path", "--perfetto", str(trace)]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        flows.append(trace)
    doc = json.loads(flows[0].read_text())
    _, want, _ = json_view(doc)
    _, got = proto_view(decode(flows[1]))
    assert got == want
    # By hand (test_critical_path.TINY): the step, mm, the first launch, K1, K2, the
    # synchronize call, sum; each arrow from one event's start to the next's (ns).
    host, gpu = ("host pid 1", "thread 1"), ("GPU 0", "stream 7")
    hops = [(host, 0, host, 2), (host, 2, host, 5), (host, 5, gpu, 12), (gpu, 12, gpu, 62)]
    hops += [(gpu, 62, host, 40), (host, 40, host, 75)]
    path = sorted((a[0], a[1], b[0], b[1]) for kind, a, b in got if kind == "critical_path")
    assert path == sorted((a, s * 1000, b, e * 1000) for a, s, b, e in hops)
    assert {kind for kind, _, _ in got} == {"critical_path", "launch"}


def test_extension_chooses_the_format(tiny: Path, tmp_path: Path) -> None:
    res = ta.open(tiny).timeline()
    for name in ("a.pftrace", "b.perfetto-trace", "c.PB"):
        res.to_perfetto(tmp_path / name)
        assert decode(tmp_path / name).slices
    res.to_perfetto(tmp_path / "d.json")
    assert json.loads((tmp_path / "d.json").read_text())["traceEvents"]
    assert not is_proto_path("trace.json") and is_proto_path("x/trace.pftrace")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a.pftrace", "b.perfetto-trace", "c.PB", "d.json", tiny.name]
    )  # no temporary left


def test_chunks_do_not_change_the_bytes(h100, tmp_path: Path) -> None:
    t = h100
    kw = {"api_calls": t.api_calls, "ops": t.ops}
    write_perfetto_proto(tmp_path / "a.pftrace", t.kernels, t.memcpy, t.markers, **kw)
    write_perfetto_proto(
        tmp_path / "b.pftrace", t.kernels, t.memcpy, t.markers, chunk_rows=997, **kw
    )
    assert (tmp_path / "a.pftrace").read_bytes() == (tmp_path / "b.pftrace").read_bytes()


def test_a_bad_output_path_is_one_error_line(tiny: Path, tmp_path: Path) -> None:
    (tmp_path / "d.pftrace").mkdir()
    for bad in (tmp_path / "no" / "such" / "t.pftrace", tmp_path / "d.pftrace"):
        r = CliRunner().invoke(main, ["timeline", str(tiny), "--perfetto", str(bad)])
        assert r.exit_code == 1, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("traceanalyze: error: ")
        assert str(bad) in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.pftrace", tiny.name]


def test_the_ranks_trace_refuses_a_protobuf_name(tmp_path: Path) -> None:
    from traceanalyze.results import Stragglers

    empty = pl.DataFrame()
    res = Stragglers(empty, empty, "", (), (), "", "", (), empty, empty, empty)
    with pytest.raises(UsageProblem, match="one source's timeline"):
        res.to_perfetto(tmp_path / "ranks.pftrace")
    assert list(tmp_path.iterdir()) == []


def test_the_export_is_the_same_in_one_batch_or_many(
    h100, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both exports stream: the sub-track placement walks its sorted keys in batches (the stacks
    of open slices carried from one to the next, tracks taking turns), the sorts deal their rows
    into buckets, the JSON is written a batch of rows at a time. Tiny batches and buckets give
    the same bytes as one batch (the overlap sub-track included) and, in Python, as lazy
    inputs."""
    import traceanalyze.export.extsort as extsort
    import traceanalyze.export.perfetto as chrome
    import traceanalyze.export.placement as placement

    t = h100
    args = (t.kernels, t.memcpy, t.markers)
    kw = {"api_calls": t.api_calls, "ops": t.ops}
    n = sum(f.height for f in (t.kernels, t.memcpy, t.api_calls, t.ops))
    for mod, name in ((placement, "BATCH_ROWS"), (chrome, "BATCH_ROWS"), (extsort, "BATCH_ROWS")):
        monkeypatch.setattr(mod, name, 1 << 30)
    monkeypatch.setattr(extsort, "BUCKET_ROWS", 1 << 30)
    whole = chrome_trace_json(*args, **kw)
    write_perfetto_proto(tmp_path / "one.pftrace", *args, chunk_rows=1 << 30, **kw)
    assert "stream 7 · overlap 1" in whole
    monkeypatch.setattr(placement, "BATCH_ROWS", 101)
    monkeypatch.setattr(chrome, "BATCH_ROWS", 113)
    monkeypatch.setattr(extsort, "BATCH_ROWS", 257)
    monkeypatch.setattr(extsort, "BUCKET_ROWS", n // 20)  # ~20 buckets per sort (~40: protobuf)
    assert chrome_trace_json(*args, **kw) == whole
    lazy = {k: v.lazy() for k, v in kw.items()}
    assert chrome_trace_json(*(f.lazy() for f in args), **lazy) == whole
    write_perfetto_proto(tmp_path / "many.pftrace", *args, chunk_rows=997, **kw)
    one = (tmp_path / "one.pftrace").read_bytes()
    assert (tmp_path / "many.pftrace").read_bytes() == one


def test_placement_carries_open_slices_across_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random operators on three threads, nested and crossing: with batches of 7 keys and
    buckets of ~60 rows the runs of overlapping slices span many batches; the JSON is the one
    of a single batch, and every thread track (sub-tracks included) nests."""
    import random

    import traceanalyze.export.extsort as extsort
    import traceanalyze.export.placement as placement

    rng = random.Random(7)
    rows = []
    for i in range(1500):
        a = rng.randrange(0, 200_000)
        rows.append((f"op{i % 13}", "cpu_op", i, a, a + rng.choice([0, 50, 900, 4000, 30_000]),
                     1, rng.choice([10, 11, 12])))  # fmt: skip
    cols = ["name", "category", "external_id", "start_ns", "end_ns", "process_id", "thread_id"]
    ops = pl.DataFrame(rows, schema=cols, orient="row")
    whole = chrome_trace_json(ops=ops)
    monkeypatch.setattr(placement, "BATCH_ROWS", 7)
    monkeypatch.setattr(extsort, "BUCKET_ROWS", 60)
    monkeypatch.setattr(extsort, "BATCH_ROWS", 5)
    assert chrome_trace_json(ops=ops) == whole
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in json.loads(whole)["traceEvents"]:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    assert len(tracks) > 3  # sub-tracks were needed
    # the rule, by hand: per thread, in order of start (longer first, then row), the first
    # sub-track whose innermost open slice holds it (ends at or after it; closed: ends <= start)
    want: dict[int, int] = {}
    for thread in (10, 11, 12):
        mine = sorted((r for r in rows if r[6] == thread), key=lambda r: (r[3], -r[4], r[2]))
        subs: list[list[int]] = []
        for r in mine:
            placed = None
            for n, stack in enumerate(subs):
                while stack and stack[-1] <= r[3]:
                    stack.pop()
                if not stack or r[4] <= stack[-1]:
                    stack.append(r[4])
                    placed = n
                    break
            if placed is None:
                subs.append([r[4]])
                placed = len(subs) - 1
            want[r[2]] = thread + placed * 10_000_000
    got = {
        e["args"]["external_id"]: e["tid"]
        for e in json.loads(whole)["traceEvents"]
        if e["ph"] == "X"
    }
    assert got == want
    for spans in tracks.values():
        spans.sort(key=lambda x: (x[0], -x[1]))
        open_: list[float] = []
        for a, b in spans:
            while open_ and open_[-1] <= a + 1e-6:
                open_.pop()
            assert not open_ or b <= open_[-1] + 1e-6
            open_.append(b)
