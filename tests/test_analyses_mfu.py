"""analyses.mfu: FLOPs counted from the model, peaks per GPU, MFU; collect's throughput columns.

The expected FLOPs come from ResNet-50's architecture written out by hand here (convolution and
linear multiply-adds, He et al. 2016, table 1, torchvision's v1.5 stride placement), not from
torch; images/s from the raw iteration log and trace.
"""

from __future__ import annotations

import csv
import gzip
import json
import statistics
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze import read
from traceanalyze.analyses import mfu as M
from traceanalyze.cli import main, render
from traceanalyze.collect.throughput import with_mfu

from .conftest import fixture, shared

# FLOPs per image are counted on torchvision's model: those tests need torch; the peak table
# and the roofline (ncu counters) need no torch and run everywhere.
TORCH = pytest.mark.requires_torch("torchvision")

ITERLOG = "iterlog-resnet50-cpu/iterations_bs2_rank0.csv"
RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"


def _out(h: int, k: int, s: int, p: int) -> int:
    return (h + 2 * p - k) // s + 1


def resnet50_macs(size: int) -> tuple[int, int]:
    """(multiply-adds of every conv and the fc layer, those of the first conv) at size x size."""
    h = _out(size, 7, 2, 3)
    first = h * h * 64 * 3 * 7 * 7
    total = first
    h = _out(h, 3, 2, 1)  # max pool
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            ho = _out(h, 3, s, 1)
            total += h * h * cin * width  # 1x1 reduce, at the input resolution
            total += ho * ho * width * width * 9  # 3x3, carries the stride (v1.5)
            total += ho * ho * width * width * 4  # 1x1 expand
            if b == 0:
                total += ho * ho * cin * width * 4  # downsample 1x1, stride s
            cin, h = width * 4, ho
    total += 2048 * 1000
    return total, first


@TORCH
@pytest.mark.parametrize("size", [224, 64])
def test_flops_per_image_from_the_architecture(size: int) -> None:
    macs, first = resnet50_macs(size)
    # forward 2 FLOPs per MAC; backward twice that (input and weight gradients), except the
    # first convolution, whose input (the images) needs no gradient.
    want = 2 * macs * 3 - 2 * first
    assert M.resnet50_train_flops_per_image(size) == want
    if size == 224:
        assert want == 24_299_077_632


def test_peak_table_rows_and_matching() -> None:
    rows = list(csv.DictReader((Path(M.__file__).parents[1] / "data/gpu_peaks.csv").open()))
    assert len(rows) >= 15
    for r in rows:
        assert r["source"].strip() and r["fp32_tflops"].strip(), r["gpu"]
        for c in ("fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops"):
            assert r[c] == "" or float(r[c]) > 0
    want = {
        "Tesla V100-SXM2-32GB": "V100 SXM2",
        "Tesla V100-PCIE-16GB": "V100 PCIe",
        "NVIDIA A100-SXM4-80GB": "A100",
        "NVIDIA A100-PG509-200": "A100",
        "NVIDIA H100 80GB HBM3": "H100 SXM",
        "NVIDIA H100 PCIe": "H100 PCIe",
        "NVIDIA H200": "H200 SXM",
        "NVIDIA L4": "L4",
        "NVIDIA L40S": "L40S",
        "NVIDIA GeForce RTX 3080": "GeForce RTX 3080",
        "NVIDIA GeForce RTX 4090": "GeForce RTX 4090",
        "NVIDIA GeForce RTX 5070": "GeForce RTX 5070",
        "AMD Instinct MI250": "Instinct MI250",
    }
    for name, gpu in want.items():
        p = M.find_peak(name)
        assert p is not None and p.gpu == gpu, name
    for unknown in ("AMD Radeon Graphics", "NVIDIA GeForce RTX 3080 Ti", "Tesla K80"):
        assert M.find_peak(unknown) is None
    a100 = M.find_peak("NVIDIA A100-SXM4-40GB")
    assert a100 is not None
    assert M.peak_flop_per_s(a100, "fp32") == (156e12, "tf32")
    assert M.peak_flop_per_s(a100, "fp32-strict") == (19.5e12, "fp32")
    assert M.peak_flop_per_s(a100, "amp-bf16") == (312e12, "bf16")
    v100 = M.find_peak("Tesla V100-SXM2-16GB")
    assert v100 is not None
    assert M.peak_flop_per_s(v100, "fp32") == (15.7e12, "fp32")  # Volta: no TF32
    assert M.peak_flop_per_s(v100, "bf16") == (None, "bf16")


@TORCH
def test_mfu_from_iteration_log() -> None:
    p = fixture(ITERLOG)
    lines = [ln for ln in p.read_text().splitlines() if not ln.startswith("#")]
    rows = list(csv.DictReader(lines))
    ips = statistics.median(float(r["images_per_s"]) for r in rows[1:])  # warm-up 1
    t = read(p)
    got = M.mfu(t.iterations, t.devices, gpu="NVIDIA A100-SXM4-80GB", image_size=64, warmup=1)
    r = got.row(0, named=True)
    flops = 2 * resnet50_macs(64)[0] * 3 - 2 * resnet50_macs(64)[1]
    assert r["median_images_per_s"] == pytest.approx(ips)
    assert r["achieved_flop_per_s"] == pytest.approx(ips * flops)
    assert (r["gpu"], r["peak_precision"], r["peak_flop_per_s"]) == ("A100", "tf32", 156e12)
    assert r["mfu_pct"] == pytest.approx(100 * ips * flops / 156e12)
    assert r["note"] is None


@TORCH
def test_mfu_unknown_gpu_and_missing_batch_size() -> None:
    t = read(fixture(ITERLOG))
    r = M.mfu(t.iterations, t.devices, image_size=64).row(0, named=True)
    assert r["mfu_pct"] is None and "GPU unknown" in r["note"]
    r = M.mfu(t.iterations, gpu="Some GPU 9000", image_size=64).row(0, named=True)
    assert r["mfu_pct"] is None and "no peak for GPU 'Some GPU 9000'" in r["note"]
    # The ResNet-50 V100 trace: profiler steps without a batch size.
    k = read(shared(RESNET))
    r = M.mfu(k.iterations, k.devices).row(0, named=True)
    assert r["mfu_pct"] is None and "batch_size=N" in r["note"]
    assert r["device_name"] == "Tesla V100-SXM2-32GB"


@TORCH
def test_mfu_resnet_trace_with_batch_size() -> None:
    with gzip.open(shared(RESNET), "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    steps = sorted(
        (int(str(e["name"]).split("#")[1]), int(Decimal(e["dur"]) * 1000))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    assert len(steps) == 5
    # The one warm-up rule (issue 21): max(1, 5 // 10) = 1 step, the first by number, left out.
    ips = statistics.median(32e9 / d for _, d in steps[1:])
    k = read(shared(RESNET))
    r = M.mfu(k.iterations, k.devices, batch_size=32).row(0, named=True)
    assert r["median_images_per_s"] == pytest.approx(ips)
    assert r["mfu_pct"] == pytest.approx(100 * ips * 24_299_077_632 / 15.7e12)


@TORCH
def test_mfu_cli_and_no_iterations() -> None:
    r = CliRunner().invoke(
        main, ["mfu", str(fixture(ITERLOG)), "--gpu", "NVIDIA L4", "--image-size", "64", "--json"]
    )
    assert r.exit_code == 0, r.output
    [row] = json.loads(r.stdout)
    assert row["gpu"] == "L4" and row["peak_flop_per_s"] == 60e12
    nsys = shared("nsys_sqlite/nsysai_mock_torch_tiny_nsys2026.1.sqlite")
    r = CliRunner().invoke(main, ["mfu", str(nsys)])
    assert r.exit_code == 1 and "no iterations" in r.output


@TORCH
def test_throughput_table_mfu_columns() -> None:
    table = pl.DataFrame({"batch_size": [64], "ranks": [2], "median_images_per_s": [1000.0]})
    got = with_mfu(table, "Tesla V100-SXM2-16GB", "amp-fp16", 224).row(0, named=True)
    assert got["achieved_flop_per_s"] == pytest.approx(1000 * 24_299_077_632)
    assert got["mfu_pct"] == pytest.approx(100 * 1000 * 24_299_077_632 / (125e12 * 2))
    with pytest.warns(UserWarning, match="no amp-fp16 peak for 'Tesla K80'"):
        got = with_mfu(table, "Tesla K80", "amp-fp16", 224).row(0, named=True)
    assert got["mfu_pct"] is None


# --- roofline -----------------------------------------------------------------------------------

NCU_HEAD = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'
)


def _ncu_row(kid: int, name: str, metric: str, unit: str, value: str) -> str:
    return (
        f'"{kid}","1","app","h","{name}","1","7","(256, 1, 1)","(64, 1, 1)","0","9.0",'
        f'"Command line profiler metrics","{metric}","{unit}","{value}"\n'
    )


def test_roofline_from_counters_by_hand(write, tmp_path: Path) -> None:
    from traceanalyze.analyses.mfu import kernel_roofline

    ops = "smsp__sass_thread_inst_executed_op_"
    rows = [
        (0, "saxpy(float)", f"{ops}ffma_pred_on.sum", "inst", "1,000"),
        (0, "saxpy(float)", f"{ops}fadd_pred_on.sum", "inst", "100"),
        (0, "saxpy(float)", f"{ops}fmul_pred_on.sum", "inst", "50"),
        (0, "saxpy(float)", "dram__bytes_read.sum", "byte", "1,000"),
        (0, "saxpy(float)", "dram__bytes_write.sum", "byte", "75"),
        (0, "saxpy(float)", "gpu__time_duration.sum", "ns", "2,000"),
        (1, "dgemm(double)", f"{ops}dfma_pred_on.sum", "inst", "4,000"),
        (1, "dgemm(double)", "dram__bytes_read.sum", "Kbyte", "1"),
        (1, "dgemm(double)", "dram__bytes_write.sum", "byte", "0"),
        (1, "dgemm(double)", "gpu__time_duration.sum", "us", "1"),
    ]
    p = write("k.csv", NCU_HEAD + "".join(_ncu_row(*r) for r in rows))
    t = read(p)
    got = {r["kernel_id"]: r for r in kernel_roofline(t.kernel_metrics).to_dicts()}
    # saxpy: 100 + 50 + 2 x 1000 = 2150 FLOP over 1075 bytes, in 2 us
    assert got[0]["flop_count"] == 2150 and got[0]["dram_bytes"] == 1075
    assert got[0]["flop_per_byte_ratio"] == pytest.approx(2.0)
    assert got[0]["achieved_flop_per_s"] == pytest.approx(2150 / 2e-6)
    # dgemm: 8000 FLOP, 1 Kbyte = 1000 bytes (ncu's k is decimal), 1 us
    assert got[1]["fp64_flop_count"] == 8000 and got[1]["dram_bytes"] == 1000
    assert got[1]["achieved_flop_per_s"] == pytest.approx(8e9)
    out = tmp_path / "r.png"
    r = CliRunner().invoke(
        main, ["roofline", str(p), "-o", str(out), "--gpu", "NVIDIA H100 80GB HBM3", "--json"]
    )
    assert r.exit_code == 0, r.output
    assert out.read_bytes().startswith(b"\x89PNG")
    assert len(json.loads(r.stdout)) == 2


def test_roofline_cli_json_equals_the_library(write) -> None:
    ops = "smsp__sass_thread_inst_executed_op_"
    rows = [
        (0, "saxpy(float)", f"{ops}ffma_pred_on.sum", "inst", "1,000"),
        (0, "saxpy(float)", "dram__bytes_read.sum", "byte", "1,000"),
        (0, "saxpy(float)", "dram__bytes_write.sum", "byte", "75"),
        (0, "saxpy(float)", "gpu__time_duration.sum", "ns", "2,000"),
    ]
    p = write("k.csv", NCU_HEAD + "".join(_ncu_row(*r) for r in rows))
    r = CliRunner().invoke(main, ["roofline", str(p), "--json"])
    assert r.exit_code == 0, r.output
    df, peak = ta.open(p).roofline()
    assert json.loads(r.stdout) == json.loads(render.to_json(df)) and peak is None
    assert df["flop_count"].to_list() == [2000]


def test_roofline_figure_axes_carry_units() -> None:
    from traceanalyze.plot._roofline import roofline_figure

    df = pl.DataFrame({"name": ["k"], "flop_per_byte_ratio": [2.0], "achieved_flop_per_s": [1e12]})
    fig = roofline_figure(df, peak_flop_per_s=67e12, peak_bytes_per_s=3.35e12)
    ax = fig.axes[0]
    assert "FLOP/byte" in ax.get_xlabel() and "FLOP/s" in ax.get_ylabel()
    assert ax.get_xscale() == "log" and len(ax.get_legend().get_texts()) == 2


def test_roofline_real_ncu_captures_have_no_flop_counters() -> None:
    files = [
        str(shared("ncu_csv/roofline_ncu2026.2_rtx5070_saxpy_long.csv")),
        str(shared("ncu_csv/roofline_ncu2026.2_rtx5070_gemm_tiled_long.csv")),
    ]
    for f in files:  # the raw files: DRAM bytes and time, no SASS FLOP counters
        text = Path(f).read_text("utf-8-sig")
        assert "dram__bytes_op_read.sum" in text and "_pred_on.sum" not in text
    r = CliRunner().invoke(main, ["roofline", *files])
    assert r.exit_code == 1
    assert "no FLOP counters" in r.output and "SpeedOfLight_RooflineChart" in r.output
