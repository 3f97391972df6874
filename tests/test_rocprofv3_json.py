"""rocprofv3 JSON reader: the MI350X sample against the json module, and inline edge cases."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze as ta
from traceanalyze.errors import InputTooLarge, MalformedInput
from traceanalyze.readers import detect_format, stream
from traceanalyze.readers.common.limits import input_limits

from .conftest import shared_set

SAMPLE = "rocm/rocprofv3_json/tracelens_908_mi350x_results.json.gz"


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    doc = json.loads(gzip.decompress(shared_set(SAMPLE).read_bytes()))
    tool: dict[str, Any] = doc["rocprofiler-sdk-tool"][0]
    return tool


@pytest.fixture(scope="module")
def tables() -> ta.Tables:
    return ta.read(shared_set(SAMPLE))


def _strip_kd(name: str) -> str:
    for suffix in (" [clone .kd]", ".kd"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def test_kernels_equal_the_dispatch_records(raw: dict[str, Any], tables: ta.Tables) -> None:
    recs = raw["buffer_records"]["kernel_dispatch"]
    k = tables.kernels
    assert detect_format(shared_set(SAMPLE)) == "rocprofv3_json"
    assert k.height == len(recs) == 43_915
    assert k["duration_ns"].sum() == sum(r["end_timestamp"] - r["start_timestamp"] for r in recs)
    assert k["start_ns"].to_list() == [r["start_timestamp"] for r in recs]
    assert k["correlation_id"].to_list() == [r["correlation_id"]["internal"] for r in recs]
    queues = Counter(r["dispatch_info"]["queue_id"]["handle"] for r in recs)
    assert dict(Counter(k["stream_id"].to_list())) == dict(queues)


def test_names_come_from_the_symbol_table(raw: dict[str, Any], tables: ta.Tables) -> None:
    sym = {s["kernel_id"]: s for s in raw["kernel_symbols"]}
    recs = raw["buffer_records"]["kernel_dispatch"]
    want = Counter(
        _strip_kd(sym[r["dispatch_info"]["kernel_id"]]["formatted_kernel_name"]) for r in recs
    )
    assert dict(Counter(tables.kernels["name"].to_list())) == dict(want)
    assert not tables.kernels["name"].str.ends_with(".kd").any()


def test_devices_are_the_gpu_agents(raw: dict[str, Any], tables: ta.Tables) -> None:
    gpus = [a for a in raw["agents"] if a["type"] == 2]
    d = tables.devices.sort("device_id")
    assert d.height == len(gpus) == 8
    assert d["device_id"].to_list() == [a["logical_node_type_id"] for a in gpus]
    assert d["node_id"].to_list() == [a["node_id"] for a in gpus]
    assert set(d["name"]) == {"AMD Instinct MI350X"}
    assert d["sm_count"].to_list() == [a["cu_count"] for a in gpus]
    used = {
        r["dispatch_info"]["agent_id"]["handle"] for r in raw["buffer_records"]["kernel_dispatch"]
    }
    by_handle = {a["id"]["handle"]: a["logical_node_type_id"] for a in gpus}
    assert set(tables.kernels["device_id"]) == {by_handle[h] for h in used}


def test_stream_equals_read_and_memory_stays_bounded(tables: ta.Tables) -> None:
    # 1 MiB values: every piece and batch of the 37 MB document is at most that
    with input_limits(max_value_bytes=1 << 20):
        parts: dict[str, list[pl.DataFrame]] = {}
        for name, df in stream(shared_set(SAMPLE)):
            parts.setdefault(name, []).append(df)
    assert len(parts["kernels"]) > 10  # many batches, not one
    assert pl.concat(parts["kernels"]).equals(tables.kernels)


def _doc(dispatch: list[dict[str, Any]], symbols: list[dict[str, Any]], **extra: Any) -> bytes:
    agents = [
        {"id": {"handle": 1}, "type": 1, "node_id": 0, "logical_node_type_id": 0, "name": "cpu"},
        {
            "id": {"handle": 7},
            "type": 2,
            "node_id": 4,
            "logical_node_type_id": 0,
            "name": "gfx942",
            "product_name": "AMD Instinct MI300X",
            "cu_count": 304,
            "mem_banks": [{"size_in_bytes": 100}],
        },
    ]
    strings = {
        "buffer_records": [{"kind": "NONE", "operations": []}] * 5
        + [{"kind": "HIP_RUNTIME_API", "operations": ["hipApiName", "hipLaunchKernel"]}]
        + [{"kind": "X", "operations": []}] * 4
        + [
            {
                "kind": "MEMORY_COPY",
                "operations": ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST",
                               "MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST"],
            }
        ]
    }  # fmt: skip
    tool = {
        "metadata": {"pid": 42},
        "agents": agents,
        "strings": strings,
        "kernel_symbols": symbols,
        "buffer_records": {"kernel_dispatch": dispatch, **extra},
    }
    return json.dumps({"rocprofiler-sdk-tool": [tool]}).encode()


def _dispatch(i: int, kid: int, start: int, end: int) -> dict[str, Any]:
    return {
        "correlation_id": {"internal": i, "external": 0},
        "start_timestamp": start,
        "end_timestamp": end,
        "thread_id": 9,
        "dispatch_info": {
            "agent_id": {"handle": 7},
            "queue_id": {"handle": 3},
            "kernel_id": kid,
            "group_segment_size": 1024,
            "workgroup_size": {"x": 256, "y": 1, "z": 1},
            "grid_size": {"x": 1000, "y": 2, "z": 1},
        },
    }


# names with the very bytes the batch cuts look for, inside strings
_SYMS = [
    {"kernel_id": 1, "kernel_name": "_Z1fv.kd", "formatted_kernel_name": "f() [clone .kd]",
     "truncated_kernel_name": "f", "arch_vgpr_count": 8, "accum_vgpr_count": 4},
    {"kernel_id": 2, "kernel_name": "g", "formatted_kernel_name": 'g<{"a"}, {b}]>',
     "truncated_kernel_name": "g"},
]  # fmt: skip


def test_inline_calls_copies_and_geometry(write: Any) -> None:
    hip = [
        {"kind": 5, "operation": 1, "correlation_id": {"internal": 1, "external": 0},
         "start_timestamp": 50, "end_timestamp": 60, "thread_id": 9},
    ]  # fmt: skip
    copies = [
        {"operation": 2, "correlation_id": {"internal": 3, "external": 0}, "start_timestamp": 70,
         "end_timestamp": 90, "dst_agent_id": {"handle": 7}, "src_agent_id": {"handle": 1},
         "bytes": 4096},
    ]  # fmt: skip
    body = _doc([_dispatch(1, 1, 100, 150), _dispatch(2, 2, 160, 200)], _SYMS, hip_api=hip,
                memory_copy=copies)  # fmt: skip
    for p in (write("a.json", body), write("a.json.gz", gzip.compress(body))):
        t = ta.read(p)
        k = t.kernels
        assert k["name"].to_list() == ["f()", 'g<{"a"}, {b}]>']
        assert k["mangled_name"].to_list() == ["_Z1fv", None]
        assert k["short_name"].to_list() == ["f", "g"]
        assert k["grid_x"].to_list() == [4, 4] and k["grid_y"].to_list() == [2, 2]
        assert k["registers_per_thread"].to_list() == [12, None]
        assert k["total_smem_bytes"].to_list() == [1024, 1024]
        assert k["process_id"].to_list() == [42, 42] and k["device_id"].to_list() == [0, 0]
        assert t.api_calls.select("name", "correlation_id", "api").rows() == [
            ("hipLaunchKernel", 1, "runtime")
        ]
        assert t.memcpy.select("kind", "size_bytes", "device_id").rows() == [("HtoD", 4096, 0)]
        assert t.devices.select("device_id", "node_id", "memory_bytes").rows() == [(0, 4, 100)]
    with pytest.warns(UserWarning, match="1 of 2 kernels have no launch call"):
        launches = ta.open(p).launches()
    assert launches.table.select("name", "call_name").rows() == [("f()", "hipLaunchKernel")]


def test_a_dispatch_before_its_symbol_is_an_error(write: Any) -> None:
    p = write("x.json", _doc([_dispatch(1, 5, 1, 2)], _SYMS))
    with pytest.raises(MalformedInput, match="kernel_id 5"):
        ta.read(p)


def test_a_record_of_the_wrong_shape_names_its_array(write: Any) -> None:
    bad = _dispatch(1, 1, 1, 2)
    bad["start_timestamp"] = "soon"
    with pytest.raises(MalformedInput, match=r"kernel_dispatch: Expected `int`"):
        ta.read(write("x.json", _doc([bad], _SYMS)))


def test_cut_short_and_bombs(write: Any, tmp_path: Path) -> None:
    body = _doc([_dispatch(i, 1, i, i + 1) for i in range(2000)], _SYMS)
    gz = gzip.compress(body)
    p = write("cut.json.gz", gz[: len(gz) // 2])
    with pytest.raises(MalformedInput, match=r"truncated gzip"):
        ta.read(p)
    p = write("cut.json", body[: len(body) // 2])
    with pytest.raises(MalformedInput, match="never ends"):
        ta.read(p)
    # a well-compressed run of blanks inside the dispatch array: the inflate bound refuses it
    bomb = body.replace(b'"kernel_dispatch": [', b'"kernel_dispatch": [' + b" " * (8 << 20))
    p = write("bomb.json.gz", gzip.compress(bomb))
    with (
        input_limits(inflate_grace_bytes=1 << 20, max_inflate_ratio=20),
        pytest.raises(InputTooLarge, match="inflates more than 20x"),
    ):
        ta.read(p)


def test_two_tool_entries_keep_their_own_symbols_and_pids(write: Any) -> None:
    one = json.loads(_doc([_dispatch(1, 1, 100, 150)], _SYMS))["rocprofiler-sdk-tool"][0]
    two = json.loads(_doc([_dispatch(1, 1, 300, 350)], _SYMS))["rocprofiler-sdk-tool"][0]
    two["metadata"]["pid"] = 43
    # an older symbol table: the mangled name only; a correlation id's external as an object
    two["kernel_symbols"] = [{"kernel_id": 1, "kernel_name": "_Z12other_kernelPf.kd"}]
    two["buffer_records"]["kernel_dispatch"][0]["correlation_id"]["external"] = {"value": 0}
    p = write("two.json", json.dumps({"rocprofiler-sdk-tool": [one, two]}))
    k = ta.read(p).kernels
    assert k.select("name", "short_name", "process_id", "kernel_id").rows() == [
        ("f()", "f", 42, 0),
        ("other_kernel(float*)", "other_kernel", 43, 1),
    ]


def test_unmapped_record_arrays_are_read_past_in_batches(write: Any) -> None:
    hsa = [
        {"kind": 1, "operation": 3, "correlation_id": {"internal": i}, "start_timestamp": i,
         "end_timestamp": i + 1, "thread_id": 9, "args": [{"a": "},{"}, {"b": "}]"}]}
        for i in range(5000)
    ]  # fmt: skip
    body = _doc([_dispatch(1, 1, 100, 150)], _SYMS, hsa_api=hsa)
    assert len(body) > 600_000
    # values of 64 KiB at most: the hsa_api array is never held whole
    with input_limits(max_value_bytes=64 << 10):
        t = ta.read(write("h.json", body))
    assert t.kernels.height == 1 and t.api_calls.height == 0


def test_pretty_printed_equals_compact(write: Any) -> None:
    doc = json.loads(_doc([_dispatch(i, 1 + i % 2, 10 * i, 10 * i + 5) for i in range(300)], _SYMS))
    compact = ta.read(write("c.json", json.dumps(doc, separators=(",", ":"))))
    pretty = ta.read(write("p.json", json.dumps(doc, indent=2)))
    assert pretty.kernels.drop("source_id").equals(compact.kernels.drop("source_id"))
    assert compact.kernels.height == 300
