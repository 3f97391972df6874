"""Communication/computation overlap: a small frame by hand, the 2-GPU nsys trace against SQL
rows and plain loops, and the ResNet-50 trace's iterations against the JSON."""

from __future__ import annotations

import polars as pl
import pytest
from _trace_raw import NSYS2, RESNET, kineto_events, overlap_len, sql, total
from conftest import shared

import traceanalyze as ta
from traceanalyze.analyses.overlap import comm_overlap

KERNELS = pl.DataFrame(
    {
        "source_id": ["s"] * 4,
        "device_id": [0, 0, 0, 1],
        "name": ["gemm", "ncclDevKernel_AllReduce_Sum_f32", "relu", "gemm"],
        "start_ns": [0, 50, 120, 0],
        "end_ns": [100, 150, 130, 10],
    }
)
COPIES = pl.DataFrame(
    {
        "source_id": ["s"] * 3,
        "device_id": [0, 0, 0],
        "kind": ["DtoH", "DtoD", "memset"],
        "start_ns": [140, 0, 0],
        "end_ns": [160, 200, 200],
    }
)
ITERS = pl.DataFrame(
    {"source_id": ["s", "s"], "device_id": [None, None], "iteration": [1, 2]},
    schema_overrides={"device_id": pl.Int64},
).with_columns(pl.Series("start_ns", [0, 100]), pl.Series("end_ns", [100, 200]))


def test_small_frame_by_hand() -> None:
    df = comm_overlap(KERNELS, COPIES, ITERS)
    cols = ["compute_ns", "comm_ns", "comm_kernel_ns", "comm_copy_ns", "overlapped_ns"]
    d0 = df.filter(pl.col("device_id") == 0)
    # compute [0,100) [120,130); comm [50,160) (NCCL [50,150) + DtoH [140,160)); DtoD, memset out
    # Per iteration (no launch calls here: by each event's own start, the event whole):
    # 1 = gemm [0,100) + NCCL [50,150); 2 = relu [120,130) + DtoH [140,160).
    assert d0.select("iteration", "window_ns", *cols, "exposed_ns").rows() == [
        (None, 160, 110, 110, 100, 20, 60, 50),
        (1, 150, 100, 100, 100, 0, 50, 50),
        (2, 40, 10, 20, 0, 20, 0, 20),
    ]
    assert d0["overlap_pct"].to_list()[0] == pytest.approx(100 * 60 / 110)
    # device 1: no communication -> overlap_pct null, not 0
    d1 = df.filter(pl.col("device_id") == 1, pl.col("iteration").is_null())
    assert d1["comm_ns"].item() == 0 and d1["overlap_pct"].item() is None


def test_nsys_two_gpus_against_sql() -> None:
    p = shared(NSYS2)
    df = ta.open(p).overlap()
    names = "JOIN StringIds s ON s.id = k.demangledName"
    for dev in (0, 1):
        kern = sql(
            p,
            f"SELECT k.start, k.end, s.value LIKE '%nccl%' FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            f"{names} WHERE k.deviceId = {dev}",
        )
        copies = sql(
            p,
            "SELECT m.start, m.end FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER e "
            f"ON e.id = m.copyKind WHERE m.deviceId = {dev} AND e.name IN "
            "('CUDA_MEMCPY_KIND_HTOD', 'CUDA_MEMCPY_KIND_DTOH', 'CUDA_MEMCPY_KIND_PTOP')",
        )
        comm_k = [(s, e) for s, e, c in kern if c]
        comp = [(s, e) for s, e, c in kern if not c]
        comm = comm_k + [(s, e) for s, e in copies]
        row = df.filter(pl.col("device_id") == dev).row(0, named=True)
        assert row["comm_kernel_ns"] == total(comm_k)
        assert row["comm_copy_ns"] == total(copies)
        assert row["comm_ns"] == total(comm)
        assert row["compute_ns"] == total(comp)
        assert row["overlapped_ns"] == overlap_len(comm, comp)
        assert row["exposed_ns"] == total(comm) - overlap_len(comm, comp)
    # NCCL runs on the compute stream in this capture: nothing is hidden
    assert df["comm_kernel_ns"].to_list() == [17_172_652, 8_229_100]
    assert df["overlapped_ns"].to_list() == [0, 0]


def test_resnet_iterations_against_json() -> None:
    # GPU work belongs to the step that launched it: each kernel goes to the ProfilerStep whose
    # window holds its launch call (the cuda_runtime event with its correlation id), whole. The
    # host runs ~67 ms ahead of the GPU here, so clipping to the host's step window would give
    # step 101 only 29 ms of the ~93.7 ms it launched.
    p = shared(RESNET)
    ev = kineto_events(p)
    calls = {
        e["args"]["correlation"]: e["start"]
        for e in ev
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]
    }
    kern = [e for e in ev if e.get("cat") == "kernel"]
    steps = {
        int(e["name"].split("#")[1]): (e["start"], e["end"])
        for e in ev
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }
    with pytest.warns(UserWarning, match="no communication"):
        df = ta.open(p).overlap()
    assert df["iteration"].to_list() == [None, *sorted(steps)]
    assert df["compute_ns"][0] == total([(e["start"], e["end"]) for e in kern])
    for it, (lo, hi) in steps.items():
        mine = [e for e in kern if lo <= calls[e["args"]["correlation"]] < hi]
        row = df.filter(pl.col("iteration") == it).row(0, named=True)
        launched = sum(e["dur_ns"] for e in mine)  # one stream: kernels do not overlap
        assert row["compute_ns"] == total([(e["start"], e["end"]) for e in mine]) == launched
        assert row["window_ns"] == max(e["end"] for e in mine) - min(e["start"] for e in mine)
        assert row["comm_ns"] == 0
    first = df.filter(pl.col("iteration") == 101)["compute_ns"].item()
    assert first == pytest.approx(93.7e6, rel=1e-3)  # not the 29.0 ms inside the host window


def test_plot_per_iteration_with_units() -> None:
    from traceanalyze.plot._overlap import overlap_figure

    ax = overlap_figure(comm_overlap(KERNELS, COPIES, ITERS)).axes[0]
    assert ax.get_xlabel() == "communication time (ms)"
    # device 1 has no communication: left out; device 0 one bar per iteration
    assert [t.get_text() for t in ax.get_yticklabels()] == ["s · GPU 0 · it 1", "s · GPU 0 · it 2"]
