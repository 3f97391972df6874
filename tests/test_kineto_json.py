"""kineto_json reader: the HTA sample traces (exact counts and sums recomputed here with gzip, json
and decimal) and inline edge cases (old categories, baseTimeNanoseconds, string pids, bad input)."""

from __future__ import annotations

import gzip
import json
import re
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze as ta
from traceanalyze.errors import MalformedInput
from traceanalyze.readers.kineto import decode
from traceanalyze.readers.kineto.kineto_json import read_kineto_json, sniff

from .conftest import shared

FILES = [
    "hta_alexnet_a100_param_benchmark_trace.json.gz",
    "hta_amd_mi250_rocm62_kineto.json.gz",
    "hta_cupti_range_profiler_a100_trace.json.gz",
    "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz",
    "hta_triton_a100_trace.json.gz",
]


# --- an independent model of the trace: stdlib json with exact decimals ------------------------


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc: dict[str, Any] = json.loads(raw, parse_float=Decimal)
    return doc


def _ns(v: Any) -> int:
    return int((Decimal(v) * 1000).to_integral_value(ROUND_HALF_EVEN))


class Expected:
    def __init__(self, path: Path) -> None:
        doc = _load(path)
        self.doc = doc
        self.base = int(doc.get("baseTimeNanoseconds", 0))
        self.x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]

    def cat(self, *cats: str) -> list[dict[str, Any]]:
        return [e for e in self.x if str(e.get("cat", "")).lower() in cats]

    def start(self, e: dict[str, Any]) -> int:
        return self.base + _ns(e["ts"])


@pytest.fixture(scope="module", params=FILES)
def pair(request: pytest.FixtureRequest) -> tuple[Expected, ta.Tables]:
    p = shared(f"kineto_json/{request.param}")
    return Expected(p), read_kineto_json(p)


def test_kernels_exact(pair: tuple[Expected, ta.Tables]) -> None:
    exp, t = pair
    ks = exp.cat("kernel")
    k = t.kernels
    assert k.height == len(ks)
    assert k["duration_ns"].sum() == sum(_ns(e["dur"]) for e in ks)
    # exact ns of every start (a sum would overflow int64)
    assert k["start_ns"].to_list() == sorted(exp.start(e) for e in ks)
    assert (k["end_ns"] - k["start_ns"] == k["duration_ns"]).all()
    assert k["correlation_id"].sum() == sum(e["args"]["correlation"] for e in ks)
    assert k["stream_id"].sum() == sum(e["args"]["stream"] for e in ks)
    assert k["device_id"].sum() == sum(e["args"]["device"] for e in ks)
    assert sorted(k["name"].to_list()) == sorted(e["name"] for e in ks)
    if ks and "grid" in ks[0]["args"]:
        assert k["grid_y"].sum() == sum(e["args"]["grid"][1] for e in ks)
        assert k["block_x"].sum() == sum(e["args"]["block"][0] for e in ks)
        regs = sum(e["args"]["registers per thread"] for e in ks)
        assert k["registers_per_thread"].sum() == regs
        smem = sum(e["args"]["shared memory"] for e in ks)
        assert k["total_smem_bytes"].sum() == smem
    assert k["kernel_id"].to_list() == list(range(k.height))
    assert k["start_ns"].is_sorted()
    # "shared memory" is static + dynamic summed (libkineto): it goes to total_smem_bytes only
    assert k["static_smem_bytes"].null_count() == k.height


def test_memcpy_exact(pair: tuple[Expected, ta.Tables]) -> None:
    exp, t = pair
    cps = exp.cat("gpu_memcpy")
    sets = exp.cat("gpu_memset")
    m = t.memcpy
    assert m.height == len(cps) + len(sets)
    assert m["duration_ns"].sum() == sum(_ns(e["dur"]) for e in cps + sets)
    assert m["size_bytes"].sum() == sum(e["args"].get("bytes", 0) for e in cps + sets)
    assert m.filter(pl.col("kind") == "memset").height == len(sets)
    kinds: dict[tuple[str, str, str], int] = {}
    for e in cps:
        mm = re.match(r"Memcpy (\w+) \((\w+) -> (\w+)\)", e["name"])
        assert mm
        key = (mm[1], mm[2], mm[3])
        kinds[key] = kinds.get(key, 0) + 1
    got = m.filter(pl.col("kind") != "memset").group_by("kind", "src_kind", "dst_kind").len()
    assert {(r[0], r[1], r[2]): r[3] for r in got.rows()} == kinds


def test_api_calls_ops_markers_exact(pair: tuple[Expected, ta.Tables]) -> None:
    exp, t = pair
    rt, drv = exp.cat("cuda_runtime"), exp.cat("cuda_driver")
    a = t.api_calls
    assert a.filter(pl.col("api") == "runtime").height == len(rt)
    assert a.filter(pl.col("api") == "driver").height == len(drv)
    assert a["correlation_id"].sum() == sum(e["args"]["correlation"] for e in rt + drv)
    assert a["callback_id"].sum() == sum(
        e["args"].get("cbid", e["args"].get("cid", 0)) for e in rt + drv
    )
    assert a["duration_ns"].sum() == sum(_ns(e["dur"]) for e in rt + drv)
    assert a["thread_id"].sum() == sum(e["tid"] for e in rt + drv)

    ops = exp.cat("cpu_op", "python_function")
    o = t.ops
    assert o.height == len(ops)
    assert o["external_id"].sum() == sum(e["args"]["External id"] for e in ops)
    assert o["start_ns"].to_list() == sorted(exp.start(e) for e in ops)

    ua, gua = exp.cat("user_annotation"), exp.cat("gpu_user_annotation")
    inst = [e for e in exp.doc["traceEvents"] if e.get("ph") == "i"]
    mk = t.markers
    assert mk.height == len(ua) + len(gua) + len(inst)
    assert mk["end_ns"].null_count() == len(inst)
    gpu = mk.filter(pl.col("category") == "gpu_user_annotation")
    assert gpu["device_id"].to_list() == [e["pid"] for e in sorted(gua, key=exp.start)]
    assert gpu["process_id"].null_count() == gpu.height
    # instants carry string pids ("Traces", ""): null, not a crash
    assert mk.filter(pl.col("end_ns").is_null())["process_id"].null_count() == len(inst)


def test_iterations_devices_sources(pair: tuple[Expected, ta.Tables]) -> None:
    exp, t = pair
    steps = sorted(
        (int(e["name"].split("#")[1]), exp.start(e), _ns(e["dur"]))
        for e in exp.cat("user_annotation")
        if re.fullmatch(r"ProfilerStep#\d+", e["name"])
    )
    assert t.iterations.select("iteration", "start_ns", "duration_ns").rows() == steps
    dist = exp.doc.get("distributedInfo", {})
    assert t.iterations["rank"].to_list() == [dist.get("rank")] * len(steps)
    src = t.sources.row(0, named=True)
    assert src["tool"] == "pytorch-profiler"
    assert src["time_origin_epoch_ns"] == 0
    assert src["rank"] == dist.get("rank") and src["world_size"] == dist.get("world_size")
    props = exp.doc.get("deviceProperties", [])
    assert t.devices.select("device_id", "name", "memory_bytes", "compute_capability").rows() == [
        (d["id"], d["name"], d["totalGlobalMem"], f"{d['computeMajor']}.{d['computeMinor']}")
        for d in props
    ]
    assert t.devices["sm_count"].to_list() == [d["numSms"] for d in props]
    vendors = ["AMD" if "AMD" in d["name"] else "NVIDIA" for d in props]
    assert t.devices["vendor"].to_list() == vendors


def test_kernel_metrics_from_range_profiler(pair: tuple[Expected, ta.Tables]) -> None:
    exp, t = pair
    ranges = exp.cat("cuda_profiler_range")
    km = t.kernel_metrics
    assert km.height == sum(len(e["args"]) for e in ranges)
    assert km["value"].sum() == sum(sum(e["args"].values()) for e in ranges)
    assert km["kernel_id"].n_unique() == len(ranges) or not ranges
    assert km["unit"].null_count() == km.height


def test_resnet_specifics_and_no_identifying_keys() -> None:
    p = shared("kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz")
    t = ta.read(p)
    assert ta.detect_format(p) == "kineto_json"
    assert t.kernels.height == 4350
    assert t.iterations["iteration"].to_list() == [101, 102, 103, 104, 105]
    # ns-resolution epoch µs: compare the exact text of one known kernel
    text = gzip.decompress(p.read_bytes()).decode()
    m = re.search(r'"cat": "kernel", "name": "[^"]*", "pid": 0, "tid": 7,\s*"ts": ([\d.]+)', text)
    assert m and "." in m[1]
    assert _ns(m[1]) in set(t.kernels["start_ns"].to_list())
    # float64 would not have it: the reader keeps digits float64 loses at this magnitude
    lossy = {round(float(v) * 1000) for v in re.findall(r'"ts": ([\d.]+)', text)[:2000]}
    exact = {_ns(v) for v in re.findall(r'"ts": ([\d.]+)', text)[:2000]}
    assert lossy != exact
    dumped = "".join(str(df.rows()) for _, df in t.items())
    for secret in ("sraikund", "twshared39868", "mast_hpc", "torchx-pytorch"):
        assert secret not in dumped


# --- inline edge cases --------------------------------------------------------------------------


def _trace(events: list[dict[str, Any]], **top: Any) -> str:
    return json.dumps({"schemaVersion": 1, "traceEvents": events, **top})


OLD = [
    {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 42, "tid": 43, "ts": 80,
     "dur": 30, "args": {"external id": 9}},
    {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 42, "tid": 43, "ts": 90,
     "dur": 4, "args": {"cbid": 211, "correlation": 3, "external id": 9}},
    {"ph": "X", "cat": "Kernel", "name": "k1", "pid": 0, "tid": "stream 7", "ts": 100, "dur": 5,
     "args": {"device": 0, "stream": 7, "correlation": 3, "external id": 9, "grid": [1, 2, 3],
              "block": [4, 5, 6], "registers per thread": 32, "shared memory": 0}},
    {"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0,
     "tid": "stream 7", "ts": 110, "dur": 2, "args": {"device": 0, "stream": 7, "bytes": 1024}},
    {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7",
     "ts": 120, "dur": 1, "args": {"device": 0, "stream": 7, "bytes": 64}},
    {"ph": "s", "cat": "async_gpu", "id": 3, "pid": 42, "tid": 43, "ts": 90},
]  # fmt: skip


def test_old_capitalised_categories(write) -> None:
    t = read_kineto_json(write("old.json", _trace(OLD)))
    assert t.ops.select("name", "external_id", "start_ns").rows() == [("aten::mm", 9, 80_000)]
    assert t.api_calls.select("api", "name", "callback_id", "correlation_id").rows() == [
        ("runtime", "cudaLaunchKernel", 211, 3)
    ]
    k = t.kernels.row(0, named=True)
    assert (k["stream_id"], k["device_id"], k["grid_z"], k["block_x"]) == (7, 0, 3, 4)
    assert k["registers_per_thread"] == 32 and k["duration_ns"] == 5000
    assert t.memcpy.select("kind", "src_kind", "dst_kind", "size_bytes").rows() == [
        ("DtoH", "Device", "Pinned", 1024),
        ("memset", None, "Device", 64),
    ]


def test_base_time_nanoseconds_style(write) -> None:
    # 2024+ traces: float µs relative to baseTimeNanoseconds, which is written last
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 1,
           "ts": 4458676522690.655, "dur": 1.5}]  # fmt: skip
    text = _trace(ev, baseTimeNanoseconds=1711964646000000000)
    t = read_kineto_json(write("b.pt.trace.json", text))
    base = 1711964646000000000
    assert t.iterations.select("iteration", "start_ns", "duration_ns").rows() == [
        (7, base + 4458676522690655, 1500)
    ]
    assert t.sources["time_origin_epoch_ns"].item() == 0


def test_ns_fractions_of_epoch_microseconds_are_exact(write) -> None:
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
        '"ts": 1712195495505583.123, "dur": 4.928, "args": {"device": 0, "stream": 7}}, '
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
        '"ts": 1712195495505583.0005, "dur": 1e-3, "args": {}}, '
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
        '"ts": 1712195495505584, "dur": 2, "args": {}}]}'
    )
    t = read_kineto_json(write("ns.json", text))
    assert t.kernels.select("start_ns", "duration_ns").rows() == [
        (1712195495505583000, 1),  # .0005 ns rounds half to even
        (1712195495505583123, 4928),
        (1712195495505584000, 2000),  # integer and float literals in one batch
    ]


def test_string_pid_tid_and_unknown_phase(write) -> None:
    ev = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
         "tid": "PyTorch Profiler", "ts": 1, "dur": 9},
        {"ph": "X", "cat": "user_annotation", "name": "a", "pid": "Spans", "tid": "x", "ts": 2,
         "dur": 3},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 9},
        {"ph": "Z", "name": "not a chrome phase", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
    ]  # fmt: skip
    t = read_kineto_json(write("s.json", _trace(ev)))
    assert t.markers.select("process_id", "thread_id", "name", "end_ns").rows() == [
        (None, None, "a", 5000),
        (None, None, "Record Window End", None),
    ]


def test_instant_categories_null_args_multi_member_gzip(write) -> None:
    ev = [
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "mark", "pid": 7, "tid": 8,
         "ts": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": 8, "ts": 6,
         "dur": 1, "args": None},
    ]  # fmt: skip
    text = _trace(ev).encode()
    # two gzip members and zero padding, as `cat a.gz b.gz` and some writers produce
    p = write("m.json.gz", gzip.compress(text[:40]) + gzip.compress(text[40:]) + b"\0" * 8)
    t = read_kineto_json(p)
    assert t.markers.select("process_id", "category", "start_ns", "end_ns").rows() == [
        (7, "cpu_instant_event", 5000, None)
    ]
    assert t.ops.select("name", "external_id", "duration_ns").rows() == [("aten::add", None, 1000)]


def test_plain_json_equals_gzip(write) -> None:
    text = _trace(OLD, distributedInfo={"rank": 3, "world_size": 8})
    a = read_kineto_json(write("x.json", text))
    b = read_kineto_json(write("x.json.gz", gzip.compress(text.encode())))
    for name, df in a.items():
        assert df.equals(b[name]), name
    assert a.sources.select("rank", "world_size").row(0) == (3, 8)


def test_stdlib_zlib_fallback_gives_the_same_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    import zlib

    p = shared("kineto_json/hta_triton_a100_trace.json.gz")
    fast = read_kineto_json(p)
    monkeypatch.setattr(decode, "_inflate", zlib)
    slow = read_kineto_json(p)
    for name, df in fast.items():
        assert df.equals(slow[name]), name


def test_small_batches_give_the_same_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    # Force a batch cut every few hundred bytes, including cuts that land inside kernel names
    # (`{lambda()#1}`) and arg lists; results must not depend on where batches end.
    p = shared("kineto_json/hta_alexnet_a100_param_benchmark_trace.json.gz")
    whole = read_kineto_json(p)
    monkeypatch.setattr(decode, "_CHUNK", 333)
    monkeypatch.setattr(decode, "_CUT_WINDOW", 500)
    small = read_kineto_json(p)
    for name, df in whole.items():
        assert df.equals(small[name]), name


def test_brace_patterns_inside_strings(write, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = [{"ph": "X", "cat": "cpu_op", "name": f'op}}, {{"ph": "X"{i}', "pid": 1, "tid": 1,
           "ts": i, "dur": 1, "args": {"External id": i, "x": [{"a": 1}, {"b": 2}]}}
          for i in range(200)]  # fmt: skip
    monkeypatch.setattr(decode, "_CHUNK", 97)
    t = read_kineto_json(write("b.json", _trace(ev)))
    assert t.ops["name"].to_list() == [e["name"] for e in ev]
    assert t.ops["external_id"].to_list() == list(range(200))


@pytest.mark.parametrize(
    "content,where",
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b"\x00\x01garbage", "JSON"),
        (b'{"schemaVersion": 1, "deviceProperties": []}', "traceEvents"),
        (b"[1, 2, 3]", "traceEvents"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel",\n "ts": 1, "dur"', "truncated"),
        (b'{"traceEvents": [{"ph": "X"}\n,\n oops]}', "line 3"),
    ],
)
def test_bad_input_raises_malformed(write, content: bytes, where: str) -> None:
    p = write("bad.json", content)
    with pytest.raises(MalformedInput) as e:
        ta.read(p, format="kineto_json")
    msg = str(e.value)
    assert str(p) in msg and where in msg and "\n" not in msg


def test_error_in_a_later_batch_names_its_line(write, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [
        json.dumps({"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i,
                    "dur": 1, "args": {"External id": i}})
        for i in range(300)
    ]  # fmt: skip
    rows[200] = rows[200][:-2] + " oops}"  # a syntax error on line 203 of the file
    text = '{"schemaVersion": 1,\n"traceEvents": [\n' + ",\n".join(rows) + "\n]}"
    p = write("late.json", text)
    bad = text.index("oops")
    for chunk in (1 << 21, 500):
        monkeypatch.setattr(decode, "_CHUNK", chunk)
        with pytest.raises(MalformedInput) as e:
            read_kineto_json(p)
        assert e.value.line == text.count("\n", 0, bad) + 1 == 203
        assert f"(byte {bad} of the JSON text)" in str(e.value)


def test_truncated_gzip(write) -> None:
    full = gzip.compress(_trace(OLD * 200).encode())
    p = write("t.json.gz", full[: len(full) // 2])
    with pytest.raises(MalformedInput) as e:
        read_kineto_json(p)
    assert str(p) in str(e.value) and "gzip" in str(e.value)


def test_sniff(write) -> None:
    for f in FILES:
        assert sniff(shared(f"kineto_json/{f}"))
    assert sniff(write("a.json", _trace(OLD)))
    bom = write("bom.json", b"\xef\xbb\xbf" + _trace(OLD).encode())
    assert sniff(bom) and read_kineto_json(bom).kernels.height == 1
    assert not sniff(write("b.json", '{"a": 1}'))
    assert not sniff(write("c.csv", "a,b\n1,2\n"))
    assert not sniff(write("d.json", ""))


def _kernel(**fields: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, **fields}


@pytest.mark.parametrize(
    "event,top,says",
    [
        (_kernel(dur=1), {}, "has no ts"),
        (_kernel(ts="abc", dur=1), {}, "has ts 'abc'"),
        (_kernel(ts=1e25, dur=1), {}, "has ts '1e+25'"),  # ns would not fit int64
        (_kernel(ts=5, dur=1e300), {}, "has dur '1e+300'"),
        # 38 digits: ts + dur would overflow a 128-bit sum; named, not wrapped around
        (_kernel(ts=int("9" * 38), dur=int("9" * 38)), {}, "has ts '99999999"),
        (_kernel(ts=5, dur=int("9" * 38)), {}, "has dur '99999999"),
        # fits alone, but not once the base time is added
        (_kernel(ts=9223372036854775.0, dur=1), {"baseTimeNanoseconds": 10**12}, "has ts"),
        (_kernel(ts=5, dur=1), {"baseTimeNanoseconds": 1.7e18}, "baseTimeNanoseconds is"),
        (_kernel(ts=5, dur=1), {"baseTimeNanoseconds": "1711964646000000000"}, "not an integer"),
        (_kernel(ts=5, dur=1), {"baseTimeNanoseconds": -1}, "baseTimeNanoseconds is -1"),
    ],
)
def test_bad_times_are_named_not_nulled(write, event, top, says: str) -> None:
    p = write("bad_times.json", _trace([event], **top))
    with pytest.raises(MalformedInput) as e:
        read_kineto_json(p)
    msg = str(e.value)
    assert str(p) in msg and says in msg and "\n" not in msg


def test_complete_event_without_dur_warns_and_keeps_start(write) -> None:
    p = write("nodur.json", _trace([_kernel(ts=5), _kernel(ts=9, dur=2)]))
    with pytest.warns(UserWarning, match="1 complete event"):
        t = read_kineto_json(p)
    assert t.kernels.select("start_ns", "end_ns", "duration_ns").rows() == [
        (5000, None, None),
        (9000, 11000, 2000),
    ]
