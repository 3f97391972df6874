"""analyses.ops: self/inclusive time and kernel attribution, on inline frames and real traces.

Expected values on the real traces come from the raw files: the Kineto JSON parsed by hand
(`json` with exact decimals) and the nsys SQLite queried with sqlite3.
"""

from __future__ import annotations

import bisect
import gzip
import json
import sqlite3
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from traceanalyze import read, schema
from traceanalyze.analyses.ops import nvtx_op_name, op_kernels, op_stats
from traceanalyze.analyses.summary import top_ops
from traceanalyze.cli import main

from .conftest import shared

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
H100 = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
NVPROF = "nvprof_sqlite/profilinglm_pytorch_lm_v100_pyprof_net.sql"


def frame(table: str, **cols: list[Any]) -> pl.DataFrame:
    return schema.conform(table, pl.DataFrame(cols))


def small() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    # Thread 1: step [0,100) > conv [10,60) > cudnn [20,50); step > conv [70,90) (recursion:
    # conv [72,80) inside it). Thread 2: relu [0,30).
    ops = frame(
        "ops",
        source_id=["s"] * 6,
        process_id=[1] * 6,
        thread_id=[1, 1, 1, 1, 1, 2],
        name=["step", "conv", "cudnn", "conv", "conv", "relu"],
        start_ns=[0, 10, 20, 70, 72, 0],
        end_ns=[100, 60, 50, 90, 80, 30],
    )
    # launches: in cudnn (t=25), in the inner conv (t=75), in step only (t=65), on thread 2 in
    # relu (t=5), and one at t=200 outside every op.
    calls = frame(
        "api_calls",
        source_id=["s"] * 5,
        process_id=[1] * 5,
        thread_id=[1, 1, 1, 2, 1],
        correlation_id=[1, 2, 3, 4, 5],
        name=["cudaLaunchKernel"] * 5,
        start_ns=[25, 75, 65, 5, 200],
        end_ns=[26, 76, 66, 6, 201],
    )
    kernels = frame(
        "kernels",
        source_id=["s"] * 6,
        kernel_id=[0, 1, 2, 3, 4, 5],
        correlation_id=[1, 2, 3, 4, 5, 99],  # 99: no launch call
        name=["k_cudnn", "k_conv", "k_step", "k_relu", "k_out", "k_lost"],
        start_ns=[30, 80, 70, 10, 210, 0],
        end_ns=[37, 83, 71, 12, 215, 100],
    )
    return ops, calls, kernels


def test_self_inclusive_and_attribution_by_hand() -> None:
    ops, calls, kernels = small()
    got = {r["op"]: r for r in op_stats(ops, calls, kernels).to_dicts()}
    # step: 100 long, children conv [10,60) and conv [70,90) -> self 100 - 50 - 20 = 30.
    assert got["step"]["inclusive_ns"] == 100 and got["step"]["self_ns"] == 30
    # conv: 3 calls; the one at [72,80) sits in conv [70,90), so inclusive = 50 + 20;
    # self = (50 - 30) + (20 - 8) + 8 = 40.
    assert (got["conv"]["call_count"], got["conv"]["inclusive_ns"]) == (3, 70)
    assert got["conv"]["self_ns"] == 40
    assert (got["cudnn"]["self_ns"], got["relu"]["self_ns"]) == (30, 30)
    # kernels: cudnn launched k_cudnn (7); inner conv k_conv (3); step k_step (1); relu (2).
    assert (got["cudnn"]["kernel_count"], got["cudnn"]["kernel_self_ns"]) == (1, 7)
    assert (got["conv"]["kernel_self_ns"], got["conv"]["kernel_inclusive_ns"]) == (3, 10)
    assert (got["step"]["kernel_self_ns"], got["step"]["kernel_inclusive_ns"]) == (1, 11)
    assert got["relu"]["kernel_self_ns"] == 2
    # Outside every op (t=200) and without a call: the null row, 5 + 100.
    assert (got[None]["kernel_count"], got[None]["kernel_self_ns"]) == (2, 105)
    assert got[None]["call_count"] == 0
    total = int(kernels.select(pl.col("end_ns") - pl.col("start_ns")).sum().item())
    assert sum(r["kernel_self_ns"] for r in got.values()) == total
    assert {r["basis"] for r in got.values()} == {"ops"}
    per_kernel = dict(op_kernels(ops, calls, kernels).select("kernel", "op").rows())
    assert per_kernel == {
        "k_cudnn": "cudnn",
        "k_conv": "conv",
        "k_step": "step",
        "k_relu": "relu",
        "k_out": None,
        "k_lost": None,
    }


def test_nvtx_stands_in_and_names() -> None:
    assert nvtx_op_name("aten::mm, seq = 12, op_id = 40") == "aten::mm"
    assert nvtx_op_name("aten::empty, op_id = 990346") == "aten::empty"
    assert nvtx_op_name("{'mod': 'torch', 'op': 'linear', 'args': []}") == "torch.linear"
    assert nvtx_op_name("{'traceMarker': ['lm.py:3', 'x.py:1']}") == "traceMarker lm.py:3"
    assert nvtx_op_name("iteration 3") == "iteration 3"
    ops, calls, kernels = small()
    markers = frame(
        "markers",
        source_id=["s"],
        process_id=[1],
        thread_id=[1],
        name=["cudnn, seq = 1"],
        category=["nvtx"],
        start_ns=[20],
        end_ns=[50],
    )
    got = op_stats(ops.clear(), calls, kernels, markers)
    row = got.filter(pl.col("op") == "cudnn").to_dicts()[0]
    assert row["basis"] == "nvtx" and row["kernel_self_ns"] == 7


def test_no_ops_warns() -> None:
    ops, calls, kernels = small()
    with pytest.warns(UserWarning, match="no host operators"):
        got = op_stats(ops.clear(), calls, kernels)
    assert got["op"].to_list() == [None]


# --- the ResNet-50 Kineto trace, by hand ------------------------------------------------------


def _ns(x: Decimal) -> int:
    return int(x * 1000)  # the file has 3 decimals: exact


@pytest.fixture(scope="module")
def resnet_raw() -> dict[str, Any]:
    with gzip.open(shared(RESNET), "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    ops: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    runtime: dict[int, tuple[int, int]] = {}
    kernels: list[tuple[int, int, str]] = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat == "cpu_op":
            s = _ns(Decimal(e["ts"]))
            ops[int(e["tid"])].append((s, s + _ns(Decimal(e["dur"])), e["name"]))
        elif cat in ("cuda_runtime", "cuda_driver"):
            runtime[int(e["args"]["correlation"])] = (int(e["tid"]), _ns(Decimal(e["ts"])))
        elif cat == "kernel":
            kernels.append((int(e["args"]["correlation"]), _ns(Decimal(e["dur"])), e["name"]))
    for v in ops.values():
        v.sort(key=lambda t: (t[0], -t[1]))
    return {"ops": ops, "runtime": runtime, "kernels": kernels}


@pytest.fixture(scope="module")
def resnet_stats() -> pl.DataFrame:
    t = read(shared(RESNET))
    return op_stats(t.ops, t.api_calls, t.kernels, t.markers)


def _union(iv: list[tuple[int, int, str]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e, _ in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def test_resnet_self_time_sums_to_covered_time(resnet_raw, resnet_stats) -> None:
    # Properly nested operators: the self times of a thread tile the time its ops cover.
    covered = sum(_union(v) for v in resnet_raw["ops"].values())
    assert int(resnet_stats["self_ns"].sum()) == covered
    calls = sum(len(v) for v in resnet_raw["ops"].values())
    assert int(resnet_stats["call_count"].sum()) == calls == 23910


def _deepest(ops: list[tuple[int, int, str]], starts: list[int], t: int) -> str | None:
    """Brute force: of the ops holding t, the one starting last (ties: shorter, listed later)."""
    best = None
    for s, e, name in ops[: bisect.bisect_right(starts, t)]:
        if s <= t < e and (best is None or (s, -e) >= (best[0], -best[1])):
            best = (s, e, name)
    return best[2] if best else None


def test_resnet_kernels_attributed_like_by_hand(resnet_raw, resnet_stats) -> None:
    ops = resnet_raw["ops"]
    starts = {tid: [s for s, _, _ in v] for tid, v in ops.items()}
    want: dict[str | None, int] = defaultdict(int)
    for corr, dur, _ in resnet_raw["kernels"]:
        call = resnet_raw["runtime"].get(corr)
        op = _deepest(ops[call[0]], starts[call[0]], call[1]) if call else None
        want[op] += dur
    got = {r["op"]: r["kernel_self_ns"] for r in resnet_stats.to_dicts() if r["kernel_self_ns"]}
    assert got == dict(want)
    assert sum(want.values()) == 468_153_602
    assert got["aten::convolution_backward"] == 211_082_158


def _self_by_hand(ops: list[tuple[int, int, str]], name: str) -> int:
    """Self time of every `name` instance: its length minus its direct children's."""
    starts = [s for s, _, _ in ops]
    total = 0
    for i, (s, e, n) in enumerate(ops):
        if n != name:
            continue
        inside = [o for o in ops[i + 1 : bisect.bisect_left(starts, e)] if o[0] < e]
        direct = [
            c
            for c in inside
            if not any(p is not c and p[0] <= c[0] and c[1] <= p[1] for p in inside)
        ]
        total += (e - s) - sum(min(c[1], e) - c[0] for c in direct)
    return total


@pytest.mark.parametrize("name", ["aten::conv2d", "aten::cudnn_convolution", "aten::batch_norm"])
def test_resnet_self_time_of_names(resnet_raw, resnet_stats, name: str) -> None:
    want = sum(_self_by_hand(v, name) for v in resnet_raw["ops"].values())
    got = resnet_stats.filter(pl.col("op") == name)["self_ns"].item()
    assert got == want


def test_summary_top_ops_self_matches_ops(resnet_stats) -> None:
    t = read(shared(RESNET))
    top = top_ops(t.ops, n=5)
    want = resnet_stats.select("op", "inclusive_ns", "self_ns").head(5).rows()
    assert top.select("name", "inclusive_ns", "self_ns").rows() == want


# --- nsys: NVTX ranges stand in, kernels joined per process -----------------------------------


def test_h100_nsys_nvtx_attribution_by_sqlite() -> None:
    p = shared(H100)
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    total = con.execute("SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    # flash-attention forward kernels, launched inside the emit_nvtx range of that op:
    # kernel joined to its runtime call (same process, correlation id), call inside the range.
    (fa,) = con.execute(
        """
        SELECT sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = k.correlationId AND r.globalTid / 16777216 = k.globalPid / 16777216
        WHERE EXISTS (
          SELECT 1 FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
          WHERE n.globalTid = r.globalTid AND n.start <= r.start AND r.start < n.end
            AND coalesce(n.text, s.value) LIKE 'flash_attn::_flash_attn_forward%')
        """
    ).fetchone()
    con.close()
    t = read(p)
    got = op_stats(t.ops, t.api_calls, t.kernels, t.markers)
    assert set(got["basis"].to_list()) == {"nvtx"}
    assert int(got["kernel_self_ns"].sum()) == total
    row = got.filter(pl.col("op") == "flash_attn::_flash_attn_forward").to_dicts()[0]
    assert row["kernel_inclusive_ns"] == fa == 256_586_234


# --- CLI ---------------------------------------------------------------------------------------


def test_ops_cli_json_and_top(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["ops", str(shared(NVPROF)), "--json", "--top", "3"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert len(rows) == 3 and rows[0]["basis"] == "nvtx"
    assert {"op", "self_ns", "inclusive_ns", "kernel_self_ns", "file"} <= set(rows[0])
    r = CliRunner().invoke(main, ["ops", str(shared(NVPROF)), "--csv", "--by", "kernel"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == "source_id,file,op,kernel,kernel_count,kernel_ns"


def test_ops_cli_format_without_kernels_says_so() -> None:
    p = shared("smi_logs/roofline_custom_nvml_sampler_rtx5070.csv")
    r = CliRunner().invoke(main, ["ops", str(p)])
    assert r.exit_code == 1
    assert "no host operators" in r.output


def test_h100_one_device_keeps_its_process() -> None:
    p = shared(H100)
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    # The process that launched device 0's kernels, and its NVTX ranges.
    [(pid,)] = con.execute(
        "SELECT DISTINCT globalPid / 16777216 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0"
    ).fetchall()
    (ranges,) = con.execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE globalTid / 16777216 = ? AND end IS NOT NULL",
        (pid,),
    ).fetchone()
    (k0,) = con.execute(
        "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0"
    ).fetchone()
    con.close()
    t = read(p)
    k = t.kernels.filter(pl.col("device_id") == 0)
    got = op_stats(t.ops, t.api_calls, k, t.markers, launching_processes_only=True)
    assert int(got["call_count"].sum()) == ranges
    assert int(got["kernel_self_ns"].sum()) == k0
    r = CliRunner().invoke(main, ["ops", str(p), "--device", "0", "--top", "0", "--json"])
    assert r.exit_code == 0, r.output
    assert sum(x["call_count"] for x in json.loads(r.stdout)) == ranges


def test_ops_plot(tmp_path: Path) -> None:
    out = tmp_path / "ops.png"
    r = CliRunner().invoke(main, ["ops", str(shared(NVPROF)), "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes().startswith(b"\x89PNG")
    from traceanalyze.plot._ops import ops_figure

    ops, calls, kernels = small()
    ax = ops_figure(op_stats(ops, calls, kernels)).axes[0]
    assert ax.get_xlabel() == "time (ms)"
    assert "(no operator)" in [t.get_text() for t in ax.get_yticklabels()]


def test_sweep_with_process_wide_name_codes_gives_the_same_tree() -> None:
    # Name numbers come from polars categories, which are process-wide: in a long session they
    # can be far larger than the number of names. Only their equality may matter.
    from traceanalyze.analyses import ops as ops_mod

    t = read(shared(RESNET))
    host = ops_mod.host_ops(t.ops)
    no_calls = t.api_calls.head(0).select("source_id", "process_id", "thread_id", "start_ns")
    ev = ops_mod._sorted_events(host, no_calls)
    grp = ev.select(pl.struct("source_id", "process_id", "thread_id").rle_id()).to_series()
    sweep = ev.select("_i", "start_ns", "end_ns", "_c")
    dense = ops_mod._sweep(sweep, grp, host.height)
    sparse_codes = sweep.with_columns(pl.col("_c") * 1_000_003 + 10**12)
    sparse = ops_mod._sweep(sparse_codes, grp, host.height)
    assert all(a.equals(b) for a, b in zip(dense, sparse, strict=True))
    # and the same-name nesting it finds is real: a brute-force check on every thread
    nested = dense[2].to_list()
    rows = host.with_row_index("_row").sort(
        "process_id", "thread_id", "start_ns", pl.col("end_ns").neg(), maintain_order=True
    )
    open_: list[tuple[int, str]] = []
    cur = None
    for row in rows.iter_rows(named=True):
        if (row["process_id"], row["thread_id"]) != cur:
            cur, open_ = (row["process_id"], row["thread_id"]), []
        open_ = [(e, n) for e, n in open_ if e > row["start_ns"]]
        assert nested[row["_row"]] == any(n == row["name"] for _, n in open_)
        open_.append((row["end_ns"], row["name"]))
