"""mlperf_log reader on the shared MLPerf Training ResNet-50 logs (expected values computed here
from the raw lines with `json`), the system lookup, the variants and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput, TraceanalyzeError
from traceanalyze.readers import detect_format

from .conftest import ROOT

SETS = ROOT.parent / "shared" / "sets" / "mlperf_training_resnet50"
LOGS = sorted(SETS.rglob("result_*.txt")) if SETS.exists() else []
needs_sets = pytest.mark.skipif(
    not LOGS, reason="../shared/sets/mlperf_training_resnet50 is absent (a clone without ../shared)"
)


# --- expected values, computed from the raw lines ------------------------------------------


def raw_records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        if ":::MLLOG" in line:
            out.append(json.loads(line.split(":::MLLOG", 1)[1]))
    return out


def expected(path: Path) -> dict:
    recs = raw_records(path)
    start = next(r for r in recs if r["key"] == "run_start")
    stop_i = next(i for i, r in enumerate(recs) if r["key"] == "run_stop")
    stop = recs[stop_i]
    run = recs[:stop_i]
    first = {}
    for r in recs:
        first.setdefault(r["key"], r["value"])
    evals = [r["value"] for r in run if r["key"] == "eval_accuracy"]
    epochs_stopped = {r["metadata"]["epoch_num"] for r in run if r["key"] == "epoch_stop"}
    if epochs_stopped:
        epochs = len(epochs_stopped)
    else:
        counts = {}
        for r in run:
            if r["key"] == "block_start":
                counts[r["metadata"]["first_epoch_num"]] = r["metadata"]["epoch_count"]
        epochs = sum(counts.values())
    logged = [r["value"] for r in run if r["key"] == "throughput"]
    if logged:
        tp, basis = sum(logged) / len(logged), "logged"
    else:
        marks = [r["time_ms"] for r in run if r["key"] in ("epoch_start", "block_start")]
        ends = [r["time_ms"] for r in run if r["key"] in ("epoch_stop", "block_stop")]
        span_s = (max(ends) - min(marks)) / 1000
        tp, basis = first["train_samples"] * epochs / span_s, "derived"
    org_dir, system_dir = path.parents[3], path.parents[1].name
    sysj = json.loads((org_dir / "systems" / f"{system_dir}.json").read_text())
    nodes = int(float(sysj["number_of_nodes"]))
    return {
        "org": first["submission_org"],
        "platform": first["submission_platform"],
        "system": system_dir,
        "global_batch_size": first["global_batch_size"],
        "status": stop["metadata"]["status"],
        "run_start_ns": start["time_ms"] * 1_000_000,
        "run_stop_ns": stop["time_ms"] * 1_000_000,
        "time_to_train_s": (stop["time_ms"] - start["time_ms"]) / 1000,
        "final_accuracy": evals[-1],
        "eval_count": len(evals),
        "epochs": epochs,
        "throughput_img_per_s": tp,
        "throughput_basis": basis,
        "nodes": nodes,
        "accelerators": nodes * max(int(float(sysj["accelerators_per_node"])), 1),
        "accelerator_model": sysj["accelerator_model_name"],
        "framework": sysj["framework"],
    }


@needs_sets
def test_ten_shared_logs() -> None:
    assert len(LOGS) == 10


@needs_sets
@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.parents[1].name)
def test_runs_row_matches_the_raw_lines(path: Path) -> None:
    assert detect_format(path) == "mlperf_log"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete log with its system JSON: no warning
        t = ta.read(path)
    for name, df in t.items():
        assert schema.validate(name, df) == [], name
    [row] = t.runs.to_dicts()
    want = expected(path)
    for k, v in want.items():
        if isinstance(v, float):
            assert row[k] == pytest.approx(v, rel=1e-12), k
        else:
            assert row[k] == v, k
    assert row["benchmark"] == "resnet" and row["target_accuracy"] == 0.759
    assert t.sources["time_origin_epoch_ns"].to_list() == [0]


@needs_sets
@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.parents[1].name)
def test_epochs_become_iterations_with_their_rates(path: Path) -> None:
    recs = raw_records(path)
    its = ta.read(path).iterations.sort("iteration")
    starts = {r["metadata"]["epoch_num"]: r["time_ms"] for r in recs if r["key"] == "epoch_start"}
    stops = {r["metadata"]["epoch_num"]: r["time_ms"] for r in recs if r["key"] == "epoch_stop"}
    if stops:
        # the `throughput` logged after each epoch_stop belongs to that epoch
        rate, last = {}, None
        for r in recs:
            if r["key"] == "epoch_stop":
                last = r["metadata"]["epoch_num"]
            elif r["key"] == "throughput":
                rate.setdefault(last, r["value"])
        assert its["iteration"].to_list() == sorted(stops)
        for row in its.iter_rows(named=True):
            e = row["iteration"]
            assert row["duration_ns"] == (stops[e] - starts[e]) * 1_000_000
            samples = next(r["value"] for r in recs if r["key"] == "train_samples")
            want = rate.get(e, samples / ((stops[e] - starts[e]) / 1000))
            assert row["images_per_s"] == pytest.approx(want, rel=1e-12)
    else:  # Habana: blocks only; iteration = the block's first epoch
        blocks = [r for r in recs if r["key"] == "block_stop"]
        assert its.height == len(blocks)
        assert its["iteration"].to_list() == [b["metadata"]["first_epoch_num"] for b in blocks]


@needs_sets
def test_v20_tracked_stats_and_throughput_are_counted_once() -> None:
    [dell] = [p for p in LOGS if p.parents[1].name == "2xXE8545x4A100-SXM-80GB"]
    recs = raw_records(dell)
    tracked = [r["value"]["imgs_sec"] for r in recs if r["key"] == "tracked_stats"]
    assert len(tracked) == 35
    row = ta.read(dell).runs.row(0, named=True)
    assert row["throughput_img_per_s"] == pytest.approx(sum(tracked) / len(tracked), rel=1e-12)


# --- inline logs: variants, system lookup, bad input ------------------------------------------


def rec(key: str, t: int, value: object = None, **meta: object) -> str:
    body = {"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": key}
    return ":::MLLOG " + json.dumps({**body, "value": value, "metadata": meta})


BASE = [
    rec("submission_benchmark", 1000, "resnet"),
    rec("submission_org", 1000, "Acme"),
    rec("submission_platform", 1000, "box"),
    rec("global_batch_size", 1000, 256),
    rec("train_samples", 1000, 1000),
    rec("run_start", 2000),
    rec("epoch_start", 2000, epoch_num=1),
    rec("epoch_stop", 4000, epoch_num=1),
    rec("eval_accuracy", 4100, 0.5, epoch_num=1),
    rec("epoch_start", 4100, epoch_num=2),
    rec("epoch_stop", 6100, epoch_num=2),
    rec("eval_accuracy", 6200, 0.76, epoch_num=2),
]
STOP = rec("run_stop", 6300, status="success")
SYSTEM = {
    "system_name": "box",
    "number_of_nodes": "2",
    "accelerators_per_node": "1.0",
    "accelerator_model_name": "X1",
    "framework": "F 1",
}


def layout(tmp_path: Path, lines: list[str], system: object = SYSTEM, nl: str = "\n") -> Path:
    """A log at <org>/results/box/resnet/result_1.txt, the system JSON at <org>/systems/."""
    log = tmp_path / "Acme" / "results" / "box" / "resnet" / "result_1.txt"
    log.parent.mkdir(parents=True)
    log.write_bytes(nl.join(lines).encode() + nl.encode())
    if system is not None:
        (tmp_path / "Acme" / "systems").mkdir()
        text = system if isinstance(system, str) else json.dumps(system)
        (tmp_path / "Acme" / "systems" / "box.json").write_text(text)
    return log


def read_warned(path: Path, **options: object) -> tuple[dict, list[str]]:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = ta.read(path, format="mlperf_log", **options)
    return t.runs.row(0, named=True), [str(x.message) for x in w]


def test_complete_inline_log_and_string_numbers(tmp_path: Path) -> None:
    row, notes = read_warned(layout(tmp_path, [*BASE, STOP]))
    assert notes == []
    assert (row["nodes"], row["accelerators"], row["accelerator_model"]) == (2, 2, "X1")
    assert row["status"] == "success" and row["time_to_train_s"] == pytest.approx(4.3)
    assert row["epochs"] == 2 and row["eval_count"] == 2 and row["final_accuracy"] == 0.76
    # no logged rate: 1000 samples x 2 epochs over 2.000 .. 6.100 s
    assert row["throughput_basis"] == "derived"
    assert row["throughput_img_per_s"] == pytest.approx(2000 / 4.1)


def test_crlf_text_before_the_marker_and_two_records_on_a_line(tmp_path: Path) -> None:
    lines = ["[rank 3] noise " + ln for ln in BASE]
    lines[6] = lines[6] + "  " + lines[7].split("noise ", 1)[1]  # epoch_start + epoch_stop
    del lines[7]
    noise = ["+ echo NCCL INFO ring 0", "DALI: pipeline built"] * 500
    log = layout(tmp_path, [*noise, *lines, *noise, STOP], nl="\r\n")
    row, notes = read_warned(log)
    assert notes == []
    assert row["epochs"] == 2 and row["time_to_train_s"] == pytest.approx(4.3)


def test_no_run_start(tmp_path: Path) -> None:
    lines = [ln for ln in BASE if '"run_start"' not in ln]
    row, notes = read_warned(layout(tmp_path, [*lines, STOP]))
    assert row["run_start_ns"] is None and row["time_to_train_s"] is None
    assert row["status"] == "success"
    assert any("no run_start" in n for n in notes)


def test_no_run_stop_is_unknown_and_abort_is_aborted(tmp_path: Path) -> None:
    row, notes = read_warned(layout(tmp_path / "a", BASE))
    assert row["status"] == "unknown" and row["time_to_train_s"] is None
    assert any("no run_stop" in n for n in notes)
    row, _ = read_warned(layout(tmp_path / "b", [*BASE, rec("abort", 6000)]))
    assert row["status"] == "aborted"
    aborted = rec("run_stop", 6300, status="aborted")
    row, _ = read_warned(layout(tmp_path / "c", [*BASE, aborted]))
    assert row["status"] == "aborted" and row["time_to_train_s"] == pytest.approx(4.3)


def test_first_run_start_and_stop_count(tmp_path: Path) -> None:
    later = [rec("run_start", 9000), rec("eval_accuracy", 9500, 0.1), rec("run_stop", 9900)]
    row, _ = read_warned(layout(tmp_path, [*BASE, STOP, *later]))
    assert row["run_stop_ns"] == 6300 * 1_000_000 and row["final_accuracy"] == 0.76


def test_truncated_and_unparsable_records_are_warnings_naming_lines(tmp_path: Path) -> None:
    lines = [*BASE[:6], ":::MLLOG {not json", *BASE[6:], STOP[:40]]
    row, notes = read_warned(layout(tmp_path, lines))
    assert row["epochs"] == 2 and row["status"] == "unknown"
    [bad] = [n for n in notes if "do not parse" in n]
    assert "2 MLPerf record(s)" in bad and "line 7, 14" in bad


def test_unknown_keys_are_kept_out_of_the_way(tmp_path: Path) -> None:
    extra = [rec("vendor_secret_sauce", 3000, {"a": [1, 2]}), rec("x", 3000, None, weird=True)]
    row, notes = read_warned(layout(tmp_path, [*BASE, *extra, STOP]))
    assert notes == [] and row["status"] == "success"


def test_logged_rates_mean(tmp_path: Path) -> None:
    rates = [rec("throughput", 4001, 100.0), rec("throughput", 6101, 300.0)]
    lines = [*BASE[:8], rates[0], *BASE[8:], rates[1], STOP]
    t = ta.read(layout(tmp_path, lines), format="mlperf_log")
    assert t.runs["throughput_img_per_s"].to_list() == [200.0]
    assert t.runs["throughput_basis"].to_list() == ["logged"]
    assert t.iterations.sort("iteration")["images_per_s"].to_list() == [100.0, 300.0]


def test_v31_tracked_stats_throughput_with_step(tmp_path: Path) -> None:
    ts = [rec("tracked_stats", 4001, {"throughput": 50.0}, step=1)]
    ts.append(rec("tracked_stats", 6101, {"throughput": 70.0}, step=2))
    lines = [*BASE[:8], ts[0], *BASE[8:], ts[1], STOP]
    t = ta.read(layout(tmp_path, lines), format="mlperf_log")
    assert t.runs["throughput_img_per_s"].to_list() == [60.0]


def test_missing_system_json_is_null_with_a_warning(tmp_path: Path) -> None:
    row, notes = read_warned(layout(tmp_path, [*BASE, STOP], system=None))
    assert row["accelerators"] is None and row["nodes"] is None and row["framework"] is None
    [n] = notes
    assert "no system description found" in n and "box.json" in n


def test_malformed_system_json_is_skipped_naming_it(tmp_path: Path) -> None:
    row, notes = read_warned(layout(tmp_path, [*BASE, STOP], system='{"number_of_nodes": '))
    assert row["accelerators"] is None
    assert any("systems/box.json" in n and "not JSON" in n for n in notes)


def test_system_option_is_the_last_place_looked(tmp_path: Path) -> None:
    given = tmp_path / "given.json"
    given.write_text(json.dumps({**SYSTEM, "number_of_nodes": 4}))
    log = layout(tmp_path / "l", [*BASE, STOP], system=None)
    row, notes = read_warned(log, system=str(given))
    assert row["accelerators"] == 4 and notes == []
    log2 = layout(tmp_path / "m", [*BASE, STOP])  # the layout's JSON wins over the option
    assert read_warned(log2, system=str(given))[0]["accelerators"] == 2
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(MalformedInput, match="bad.json: system description is not a JSON object"):
        ta.read(log, format="mlperf_log", system=str(bad))
    with pytest.raises(TraceanalyzeError, match="nope.json"):
        ta.read(log, format="mlperf_log", system=str(tmp_path / "nope.json"))


def test_sysjson_line_comes_first(tmp_path: Path) -> None:
    sysline = ":::SYSJSON " + json.dumps(
        {**SYSTEM, "number_of_nodes": "8", "accelerators_per_node": "0"}
    )
    row, _ = read_warned(layout(tmp_path, [sysline, *BASE, STOP]))
    assert row["accelerators"] == 8  # 8 nodes x max(0, 1)


def test_legacy_variants(tmp_path: Path) -> None:
    mll = [
        ':::MLL 1558767599.500 submission_benchmark: {"value": "resnet", "metadata": {}}',
        ':::MLL 1558767600.000 run_start: {"value": null, "metadata": {}}',
        ':::MLL 1558767700.000 eval_accuracy: {"value": 0.75, "metadata": {"epoch_num": 1}}',
        ':::MLL 1558767710.250 run_stop: {"value": null, "metadata": {"status": "success"}}',
    ]
    p = tmp_path / "v06.txt"
    p.write_text("\n".join(mll) + "\n")
    assert detect_format(p) == "mlperf_log"
    row, _ = read_warned(p)
    assert row["time_to_train_s"] == pytest.approx(110.25) and row["final_accuracy"] == 0.75
    assert row["target_accuracy"] is None  # v0.6 targets differ from the v0.7+ rules
    mlp = [
        ":::MLPv0.5.0 resnet 1541710183.000 (imagenet_main.py:12) run_start",
        ':::MLPv0.5.0 resnet 1541710300.000 (imagenet_main.py:90) eval_accuracy: {"epoch": 3, '
        '"value": 0.749}',
        ":::MLPv0.5.0 resnet 1541710300.000 (imagenet_main.py:91) eval_target: 0.749",
        ':::MLPv0.5.0 resnet 1541710301.500 (imagenet_main.py:99) run_stop: {"success": true}',
    ]
    p = tmp_path / "v05.txt"
    p.write_text("\n".join(mlp) + "\n")
    row, _ = read_warned(p)
    assert row["benchmark"] == "resnet" and row["status"] == "success"
    assert row["time_to_train_s"] == pytest.approx(118.5)
    assert row["final_accuracy"] == 0.749 and row["target_accuracy"] == 0.749


def test_no_records_is_one_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "console.txt"
    p.write_text("NCCL INFO ring\n" * 1000)
    with pytest.raises(MalformedInput, match=r"console.txt: no MLPerf log records"):
        ta.read(p, format="mlperf_log")


def test_gzip_log(tmp_path: Path) -> None:
    import gzip

    p = tmp_path / "result_1.txt.gz"
    p.write_bytes(gzip.compress(("\n".join([*BASE, STOP]) + "\n").encode()))
    assert detect_format(p) == "mlperf_log"
    row, _ = read_warned(p)
    assert row["time_to_train_s"] == pytest.approx(4.3)


_RSS_SCRIPT = r"""
import resource, sys, warnings
warnings.simplefilter("ignore")
import traceanalyze as ta
from traceanalyze.readers.mlperf_log import read_mlperf_log
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = read_mlperf_log(sys.argv[1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(t.runs["time_to_train_s"][0], (peak - base) // 1024)
"""


def test_memory_stays_bounded_on_console_noise(tmp_path: Path) -> None:
    """256 MiB of console lines (one record at each end) read with < 64 MiB more peak RSS than
    the interpreter had before reading; the 2 GB case: benchmarks/bench_mlperf_noise.py."""
    p = tmp_path / "noise.txt"
    block = b"".join(
        b"+ srun -N 1 NCCL INFO Channel %05d/32 : 0[0] -> 1[1] via P2P/IPC\n" % i
        for i in range(16384)
    )
    with open(p, "wb") as f:
        f.write((rec("run_start", 1000) + "\n").encode())
        while f.tell() < 256 << 20:
            f.write(block)
        f.write((rec("run_stop", 61000, status="success") + "\n").encode())
    r = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(p)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    ttt, grew_mib = r.stdout.split()
    assert float(ttt) == 60.0
    assert int(grew_mib) < 64, f"peak RSS grew by {grew_mib} MiB reading 256 MiB"


def test_detection_looks_at_the_first_mib(tmp_path: Path) -> None:
    from traceanalyze.errors import UnknownFormat

    noise = b"+ echo 'Beginning trial 1 of 5'\n" * 40000  # 1.3 MB before the first record
    p = tmp_path / "late.txt"
    p.write_bytes(noise + ("\n".join([*BASE, STOP]) + "\n").encode())
    with pytest.raises(UnknownFormat):
        detect_format(p)
    assert ta.read(p, format="mlperf_log").runs["status"].to_list() == ["success"]
    p.write_bytes(noise[: 30000 * 32] + ("\n".join([*BASE, STOP]) + "\n").encode())
    assert detect_format(p) == "mlperf_log"
