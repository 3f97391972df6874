"""Core utilization (TBD definition) on inline frames and inline ncu CSV, hand-computed answers."""

from __future__ import annotations

import warnings

import polars as pl
import pytest
from conftest import shared

import traceanalyze as ta
from traceanalyze.analyses.coreutil import (
    PIPE_METRICS,
    batch_size_from_name,
    core_utilization,
    core_utilization_each,
)
from traceanalyze.errors import NotAnswerable

FMA = "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_elapsed"
FP16 = "sm__inst_executed_pipe_fp16.avg.pct_of_peak_sustained_elapsed"
TENSOR = "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_elapsed"
XU = "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed"
CYC = "gpc__cycles_elapsed.max"
DUR = "gpu__time_duration.sum"

# (process, ID, name, cycles text, duration text, fma, fp16, tensor, xu). IDs restart per session,
# so (200, 0) is a different launch from (100, 0). Values >= 1000 carry thousands separators.
LAUNCHES = [
    (100, 0, "volta_sgemm_128x64_nn", "1,000", "1,500", 10.0, 0.0, 40.0, 1.0),
    (100, 1, "volta_sgemm_128x64_nn", "12,345", "20,000", 30.0, 5.0, 50.0, 2.0),
    (200, 0, "relu_kernel", "2,000,000", "3,000,000", 20.0, 0.0, 60.0, 0.5),
]

HEADER_2020 = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context","Stream",'
    '"Section Name","Metric Name","Metric Unit","Metric Value"'
)


def tbd_csv() -> str:
    lines = ["==PROF== Disconnected from process 100", HEADER_2020]
    for pid, kid, name, cyc, dur, *pcts in LAUNCHES:
        metrics = [(CYC, "cycle", cyc), (DUR, "nsecond", dur)]
        metrics += [
            (m, "%", f"{v:.2f}") for m, v in zip((FMA, FP16, TENSOR, XU), pcts, strict=True)
        ]
        for m, unit, v in metrics:
            lines.append(
                f'"{kid}","{pid}","python","h","{name}","2024-Jul-13 19:18:31","1","7",'
                f'"Command line profiler metrics","{m}","{unit}","{v}"'
            )
    return "\n".join(lines) + "\n"


def num(s: str) -> float:
    return float(s.replace(",", ""))


def expected(weight_index: int | None, unit_index: int, rows=LAUNCHES) -> float:
    ws = [1.0 if weight_index is None else num(r[weight_index]) for r in rows]
    ps = [r[5 + unit_index] for r in rows]
    return sum(w * p for w, p in zip(ws, ps, strict=True)) / sum(ws)


def frame(rows=LAUNCHES, sid: str = "s1") -> pl.DataFrame:
    recs = []
    for pid, kid, name, cyc, dur, *pcts in rows:
        for m, v in zip(
            (CYC, DUR, FMA, FP16, TENSOR, XU), (num(cyc), num(dur), *pcts), strict=True
        ):
            recs.append(
                {
                    "source_id": sid,
                    "process_id": pid,
                    "kernel_id": kid,
                    "name": name,
                    "metric_name": m,
                    "stat": None,
                    "value": v,
                    "invocations_count": None,
                }
            )
    return pl.DataFrame(recs)


def test_cycle_weighted_over_all_launches() -> None:
    df = core_utilization(frame())
    r = df.row(0, named=True)
    assert r["launches"] == 3  # the last launch counts (TBD's range(max(ID)) skipped it)
    for i, u in enumerate(("fma", "fp16", "tensor", "sfu")):
        assert r[f"{u}_pct"] == pytest.approx(expected(3, i), rel=1e-12)
    assert r["weight"] == "cycles" and r["scale"] == "pct" and r["fma_metric"] == FMA


def test_duration_and_unweighted() -> None:
    d = core_utilization(frame(), weight="duration").row(0, named=True)
    assert d["tensor_pct"] == pytest.approx(expected(4, 2))
    n = core_utilization(frame(), weight="none").row(0, named=True)
    assert n["fma_pct"] == pytest.approx((10.0 + 30.0 + 20.0) / 3)


def test_by_kernel() -> None:
    df = core_utilization(frame(), by_kernel=True)
    assert df["name"].to_list() == ["relu_kernel", "volta_sgemm_128x64_nn"]
    sgemm = df.filter(pl.col("name") == "volta_sgemm_128x64_nn").row(0, named=True)
    assert sgemm["launches"] == 2
    assert sgemm["fma_pct"] == pytest.approx((1000 * 10 + 12345 * 30) / (1000 + 12345))


def test_inline_ncu_csv_with_thousands_separators(write) -> None:
    p = write("batch_32.csv", tbd_csv())
    t = ta.read(p, format="ncu_csv")
    r = core_utilization(t.kernel_metrics).row(0, named=True)
    assert r["launches"] == 3
    assert r["fma_pct"] == pytest.approx(expected(3, 0), rel=1e-12)
    assert r["sfu_pct"] == pytest.approx(expected(3, 3), rel=1e-12)


def test_ampere_names_and_missing_unit_warns() -> None:
    hmma = "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active"
    df = pl.DataFrame(
        {
            "source_id": ["a"] * 4,
            "process_id": [1] * 4,
            "kernel_id": [0, 0, 1, 1],
            "name": ["k", "k", "k", "k"],
            "metric_name": [CYC, hmma, CYC, hmma],
            "stat": [None] * 4,
            "value": [100.0, 80.0, 300.0, 40.0],
            "invocations_count": [None] * 4,
        }
    )
    with pytest.warns(UserWarning, match="no metric for fma, fp16, sfu") as rec:
        r = core_utilization(df).row(0, named=True)
    assert r["tensor_pct"] == pytest.approx((100 * 80 + 300 * 40) / 400)
    assert r["tensor_metric"] == hmma and r["fma_pct"] is None
    # Every missing unit's candidates are listed, not only the first unit's.
    msg = str(rec[0].message)
    for unit in ("fma", "fp16", "sfu"):
        base = PIPE_METRICS[unit][0].split(".avg.")[0]
        alt = PIPE_METRICS[unit][-1].split(".avg.")[0]
        assert base in msg and alt in msg, unit
    assert "FMA: sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_{elapsed,active}" in msg
    assert "SFU: sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_{elapsed,active}" in msg


def test_missing_metrics_not_answerable() -> None:
    df = frame().filter(pl.col("metric_name") == DUR)
    with pytest.raises(NotAnswerable, match="no pipe-utilization metric"):
        core_utilization(df)
    no_cycles = frame().filter(pl.col("metric_name") != CYC)
    with pytest.raises(NotAnswerable, match="gpc__cycles_elapsed.max"):
        core_utilization(no_cycles)


def test_real_ncu_capture_without_pipe_metrics_is_not_answerable() -> None:
    t = ta.read(shared("ncu_csv/roofline_ncu2026.2_rtx5070_gemm_tiled_long.csv"))
    with pytest.raises(NotAnswerable, match="sm__inst_executed_pipe_fma"):
        core_utilization(t.kernel_metrics)


def test_nvprof_levels_real_capture() -> None:
    import csv

    p = shared("nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv")
    # Expected from the file itself: the `Avg` level of each *_fu_utilization row.
    with open(p, newline="") as f:
        rows = [r for r in csv.reader(f) if len(r) == 8 and r[3].endswith("_fu_utilization")]
    avg = {r[3]: float(r[7].split("(")[1].rstrip(")")) for r in rows}
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        r = core_utilization(ta.read(p).kernel_metrics).row(0, named=True)
    # --weight cycles (the default) cannot apply to per-kernel aggregates: said, not silent.
    assert any("weighted by invocations instead of cycles" in str(w.message) for w in rec)
    assert r["scale"] == "level" and r["weight"] == "invocations"
    assert r["fma_pct"] == avg["single_precision_fu_utilization"]
    assert r["fp16_pct"] == avg["half_precision_fu_utilization"]
    assert r["sfu_pct"] == avg["special_fu_utilization"]
    assert r["launches"] == int(rows[0][2])


def test_batch_size_from_name() -> None:
    assert batch_size_from_name("profiled_data_ncu/batch_64.csv") == 64
    assert batch_size_from_name("C:\\x\\batch_8.csv") == 8
    assert batch_size_from_name("run.csv") is None


HEADER_2026 = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
)


def test_inline_ncu_2026_header_hopper_names(write) -> None:
    hmma = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
    fma = "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
    rows = [(0, "1,234,567", "75.5", "3.25"), (1, "2,000", "0.00", "50.00")]
    lines = ["\ufeffapp output before the table", HEADER_2026]
    for kid, cyc, t, f in rows:
        for m, u, v in ((CYC, "cycle", cyc), (hmma, "%", t), (fma, "%", f)):
            lines.append(
                f'"{kid}","7","python","127.0.0.1","sm90_xmma_gemm","1","7","(256, 1, 1)",'
                f'"(132, 1, 1)","0","9.0","Command line profiler metrics","{m}","{u}","{v}"'
            )
    p = write("batch_128.csv", "\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="no metric for fp16, sfu"):
        r = core_utilization(ta.read(p, format="ncu_csv").kernel_metrics).row(0, named=True)
    assert r["tensor_pct"] == pytest.approx((1234567 * 75.5 + 2000 * 0.0) / (1234567 + 2000))
    assert r["fma_pct"] == pytest.approx((1234567 * 3.25 + 2000 * 50.0) / (1234567 + 2000))
    assert (r["tensor_metric"], r["fma_metric"], r["launches"]) == (hmma, fma, 2)


def test_nvprof_levels_weight_none_is_stated_and_duration_refused() -> None:
    p = shared("nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv")
    km = ta.read(p).kernel_metrics
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        r = core_utilization(km, weight="none").row(0, named=True)
    assert r["weight"] == "invocations" and r["scale"] == "level"
    assert any("every launch counts once (weight = invocations)" in str(w.message) for w in rec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = core_utilization_each(km, weight="duration")
    assert res.table.height == 0
    assert res.unanswered.row(0, named=True)["missing"] == ["gpu__time_duration.sum"]
    assert "weight 'duration' is not available" in res.unanswered["reason"][0]


def test_each_source_answers_on_its_own_and_failures_name_files_and_all_units() -> None:
    # s1 has every metric; s2 lacks all pipe metrics (only the weight); s3 has no kernel metrics.
    good = frame(sid="s1")
    bad = frame(sid="s2").filter(pl.col("metric_name") == CYC)
    sources = pl.DataFrame(
        {"source_id": ["s1", "s2", "s3"], "path": ["/r/batch_8.csv", "/r/bad.csv", "/r/it.txt"]}
    )
    res = core_utilization_each(pl.concat([good, bad]), sources=sources)
    assert res.table["source_id"].to_list() == ["s1"]
    assert res.table["fma_pct"][0] == pytest.approx(expected(3, 0))
    un = res.unanswered
    assert un["file"].to_list() == ["/r/bad.csv", "/r/it.txt"]
    assert un["missing"].to_list() == [
        ["fma", "fp16", "tensor", "sfu"],
        ["fma", "fp16", "tensor", "sfu", CYC],
    ]
    reason = un["reason"][0]
    assert reason.startswith("no pipe-utilization metric for any of FMA, FP16, Tensor Core, SFU")
    for unit in ("fma", "fp16", "tensor", "sfu"):
        for m in PIPE_METRICS[unit]:
            assert m.split(".avg.")[0] in reason, m
    assert un["reason"][1].endswith(f"; weight 'cycles' also needs {CYC}")
    # The strict form names every failing file in one message.
    with pytest.raises(NotAnswerable) as e:
        core_utilization(pl.concat([good, bad]), sources=sources)
    assert str(e.value).startswith("/r/bad.csv: no pipe-utilization metric")
    assert "; /r/it.txt: no pipe-utilization metric" in str(e.value)


def test_missing_weight_lists_missing_units_too() -> None:
    only_fma = frame().filter(pl.col("metric_name").is_in([FMA, DUR]))
    res = core_utilization_each(only_fma)
    assert res.unanswered["missing"].to_list() == [["fp16", "tensor", "sfu", CYC]]
    assert res.unanswered["reason"][0].startswith(
        f"weight 'cycles' needs metric {CYC} on each launch"
    )


def test_hopper_hmma_and_gmma_are_summed_per_launch() -> None:
    hmma = "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_elapsed"
    gmma = "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_elapsed"
    # (kernel, cycles, hmma %, gmma %): a wgmma kernel, an mma.sync kernel, one using both (sum
    # 70 + 50 capped at 100), and one where ncu gave gmma only (hmma n/a: counted as 0).
    launches = [
        (0, 1000.0, 0.0, 80.0),
        (1, 3000.0, 40.0, 0.0),
        (2, 500.0, 70.0, 50.0),
        (3, 2000.0, None, 10.0),
    ]
    recs = [
        {
            "source_id": "h",
            "process_id": 1,
            "kernel_id": k,
            "name": f"k{k}",
            "metric_name": m,
            "stat": None,
            "value": v,
            "invocations_count": None,
        }
        for k, cyc, h, g in launches
        for m, v in ((CYC, cyc), (hmma, h), (gmma, g))
        if v is not None
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fma, fp16, sfu absent
        r = core_utilization(pl.DataFrame(recs)).row(0, named=True)
    per_launch = [80.0, 40.0, 100.0, 10.0]
    cycles = [c for _, c, _, _ in launches]
    want = sum(c * p for c, p in zip(cycles, per_launch, strict=True)) / sum(cycles)
    assert r["tensor_pct"] == pytest.approx(want)
    assert r["tensor_metric"] == f"{hmma} + {gmma}"


def test_blackwell_raw_page_names_and_an_unknown_unit_kept(write) -> None:
    # `ncu --import x.ncu-rep --page raw --csv` on Blackwell (CC 12.0): no FP16 pipe and no
    # `sm__pipe_fp16_cycles_active`; tcgen05 Tensor Core work on `sm__pipe_tc_cycles_active`
    # next to `sm__pipe_tensor_cycles_active`; `launch__cluster_max_active` in unit `cluster`,
    # which the reader does not know and keeps as given.
    sfx = ".avg.pct_of_peak_sustained_active"
    fma, fp16 = f"sm__inst_executed_pipe_fma{sfx}", f"sm__inst_executed_pipe_fma_type_fp16{sfx}"
    tc, tensor = f"sm__pipe_tc_cycles_active{sfx}", f"sm__pipe_tensor_cycles_active{sfx}"
    xu = f"sm__inst_executed_pipe_xu{sfx}"
    metrics = [CYC, "launch__cluster_max_active", fma, fp16, tc, tensor, xu]
    units = ["cycle", "cluster", "%", "%", "%", "%", "%"]
    # (ID, cycles, clusters, fma, fp16, tc, tensor, xu)
    launches = [
        (0, "1,204,224", "8", "12.5", "0", "71.25", "0", "0.5"),
        (1, "40,960", "0", "35", "22.5", "0", "0", "4"),
    ]
    ident = '"ID","Process ID","Process Name","Host Name","Kernel Name","Device","CC"'
    lines = [
        ident + "," + ",".join(f'"{m}"' for m in metrics),
        ",".join(['""'] * 7 + [f'"{u}"' for u in units]),
    ]
    for kid, *vals in launches:
        cells = [str(kid), "77", "python", "h", f"k{kid}", "0", "12.0", *vals]
        lines.append(",".join(f'"{c}"' for c in cells))
    p = write("batch_64.csv", "\n".join(lines) + "\n")
    t = ta.read(p, format="ncu_csv")
    kept = t.kernel_metrics.filter(pl.col("metric_name") == "launch__cluster_max_active")
    assert kept["unit"].to_list() == ["cluster", "cluster"]
    r = core_utilization(t.kernel_metrics).row(0, named=True)
    w = [num(x[1]) for x in launches]

    def by_hand(i: int) -> float:
        return sum(wk * float(x[i]) for wk, x in zip(w, launches, strict=True)) / sum(w)

    assert (r["fp16_metric"], r["tensor_metric"]) == (fp16, tc)
    assert r["fma_pct"] == pytest.approx(by_hand(3))
    assert r["fp16_pct"] == pytest.approx(by_hand(4))
    assert r["tensor_pct"] == pytest.approx(by_hand(5))
    assert r["sfu_pct"] == pytest.approx(by_hand(7))
    for name in (fp16, tc, "sm__inst_executed_pipe_tc" + sfx):
        assert name in PIPE_METRICS["fp16"] + PIPE_METRICS["tensor"]
