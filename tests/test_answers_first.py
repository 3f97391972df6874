"""Issue 32, points 1 and 3: default tables show the answer first, name the file once, keep
rows of several files and ranks apart, and print numbers readably. Each test runs the command
the user ran (at the default 120 columns) and reads the printed table back by its dash line.
"""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyze.cli import main

from .conftest import SHARED_TRACES, shared

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
SETS = SHARED_TRACES.parent / "sets"
DLRM = SETS / "multirank_param_dlrm_8xv100"
MLPERF = SETS / "mlperf_training_resnet50"


def run(*args: str) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.stdout


def tables(text: str) -> list[tuple[list[str], list[str], list[dict[str, str]]]]:
    """Each printed table as (lines above it, header, rows as dicts), read by the column spans
    of its dash line."""
    lines = text.splitlines()
    out = []
    for i, ln in enumerate(lines):
        if not ln or set(ln) - {"-", " "} or i == 0:
            continue
        spans = [m.span() for m in re.finditer(r"-+", ln)]
        header = [lines[i - 1][a:b].strip() for a, b in _open_last(spans)]
        rows = []
        for row in lines[i + 1 :]:
            if not row.strip() or row.startswith(("(", "==")) or re.match(r"-- \w", row):
                break
            cells = zip(header, _open_last(spans), strict=True)
            rows.append({h: row[a:b].strip() for h, (a, b) in cells})
        above = [x for x in lines[max(0, i - 2) : i - 1] if x.startswith("file: ")]
        out.append((above, header, rows))
    return out


def _open_last(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    # a cell may run past its dashes only in the last column (left-aligned text); numbers are
    # right-aligned within them
    return [*spans[:-1], (spans[-1][0], 10**6)] if spans else []


def only_table(text: str) -> tuple[list[str], list[str], list[dict[str, str]]]:
    found = tables(text)
    assert len(found) == 1, text
    return found[0]


def sets(*parts: str) -> Path:
    p = SETS.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"../shared/sets/{'/'.join(parts)} is absent (a fresh clone without ../shared)")
    return p


def mlperf_logs() -> list[Path]:
    return sorted(sets("mlperf_training_resnet50").rglob("result_1.txt"))


def dlrm_files() -> list[Path]:
    return sorted(sets("multirank_param_dlrm_8xv100").glob("*.json.gz"))


def matches(printed: str, full: str) -> bool:
    """Whether `printed` is `full` cut with '…'."""
    return re.fullmatch(".*".join(re.escape(x) for x in printed.split("…")), full) is not None


# --- point 1: the answer first; one file named once; several by distinct names -------------


def test_mfu_answer_is_printed_first_and_the_file_named_once() -> None:
    """Before: `mfu_pct` and the reason a row is "-" hid behind "(+N columns …)" while a file
    column the same on every row took 20 characters."""
    r = shared(RESNET)
    above, header, rows = only_table(run("mfu", r, "--image-size", 224, "--batch-size", 32))
    assert above == [f"file: {r}"] and "file" not in header and "source_id" not in header
    assert header[:3] == ["gpu", "mfu_pct", "note"]
    got = json.loads(run("mfu", r, "--image-size", 224, "--batch-size", 32, "--json"))[0]
    assert float(rows[0]["mfu_pct"]) == pytest.approx(got["mfu_pct"], abs=1e-3)
    # the reason a row is "-" is printed too
    _, header, rows = only_table(run("mfu", r, "--image-size", 224))
    assert rows[0]["mfu_pct"] == "-" and "batch" in rows[0]["note"]


@pytest.mark.parametrize(
    ("args", "answers"),
    [
        (("ops",), ["op", "kernel_self_ms", "kernel_inclusive_ms"]),
        (("idle",), ["device_id", "stream_id", "idle_ms", "idle_pct", "host_wait_ms"]),
        (("launches",), ["device_id", "launch_count", "median_delay_ms", "p95_delay_ms"]),
        (("critical-path", "--what-if", "kernel:conv=0.5"), ["iteration", "path_ms"]),
    ],
)
def test_answer_columns_come_first(args: tuple[str, ...], answers: list[str]) -> None:
    _, header, _ = tables(run(*args, shared(RESNET)))[0]
    assert header[: len(answers)] == answers
    if args[0] == "idle":  # the four causes
        assert {"launch_gap_ms", "sync_ms", "copy_ms", "unknown_ms"} <= set(header)
    if args[0] == "critical-path":  # both tables: the iterations', and the new path's
        assert {"predicted_ms", "change_pct"} <= set(header)
        assert tables(run(*args, shared(RESNET)))[1][1][:3] == [
            "iteration",
            "path_ms",
            "change_pct",
        ]


def test_critical_path_wide_shows_every_column() -> None:
    r = shared(RESNET)
    cols = set(json.loads(run("critical-path", r, "--json"))[0]) - {"file"}
    _, header, _ = tables(run("critical-path", r, "--wide"))[0]
    # the start time under its readable name (an ISO date), every other column by its own
    assert cols - {"start_ns"} <= set(header) and "start_utc" in header


def test_mlperf_runs_and_scaling_show_their_answers_and_tell_files_apart() -> None:
    """Before: `runs` hid accelerators, time to train and throughput, `runs --score` its
    score_s, `scaling` its efficiency; every row read `…resnet/result_1.txt`."""
    logs = mlperf_logs()
    _, header, rows = only_table(run("runs", *logs))
    assert header[:6] == [
        "file",
        "system",
        "accelerators",
        "status",
        "time_to_train_s",
        "throughput_img_per_s",
    ]
    names = [r["file"] for r in rows]
    assert len(set(names)) == len(logs) == 10
    assert not any("result_1" in n or n.startswith("…resnet") for n in names)
    # each row's file is the directory of its system (the path's distinct component), cut
    # where it must be ("…") but matching that one directory only
    systems = [p.parts[-3] for p in logs]
    for n in names:
        assert sum(matches(n, s) for s in systems) == 1, n
    _, header, _ = only_table(run("runs", "--score", *logs))
    assert "score_s" in header[:3]
    _, header, _ = only_table(run("scaling", *logs))
    assert header[:3] == ["org", "accelerators", "efficiency"]


def test_history_value_is_named_by_metric_and_dates_are_iso() -> None:
    """Before: `history` printed `run_start_ms 1,652,468,827,007` and a column `value`."""
    logs = mlperf_logs()
    got = json.loads(run("history", *logs, "--json"))
    assert "value" not in got[0] and "throughput_img_per_s" in got[0]
    _, header, rows = only_table(run("history", *logs, "--wide"))
    assert "value" not in header and "run_start_utc" in header
    # the run start, from the log itself: the first `run_start` record's time_ms
    by_file = {r["file"]: r for r in rows}
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if '"key": "run_start"' in line:
                ms = json.loads(line.split(":::MLLOG", 1)[1])["time_ms"]
                break
        iso = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        row = next(r for n, r in by_file.items() if matches(n, log.parts[-3]))
        assert row["run_start_utc"] == iso


def test_dlrm_ranks_have_a_rank_column_in_rank_order() -> None:
    """Before: the 8 DLRM ranks' critical-path rows had no rank column, came in source-id
    order (4,3,5,1,6,7,0,2) and two read `…53.pt.trace.json.gz`."""
    files = dlrm_files()
    ranks = {}
    for f in files:
        with gzip.open(f, "rt") as fh:
            ranks[f.name] = json.load(fh)["distributedInfo"]["rank"]
    _, header, rows = only_table(run("critical-path", *files))
    assert header[0] == "rank"
    assert [int(r["rank"]) for r in rows] == sorted(ranks.values()) == list(range(8))
    got = json.loads(run("critical-path", *files, "--json"))
    assert [r["rank"] for r in got] == list(range(8))
    assert all(ranks[Path(r["file"]).name] == r["rank"] for r in got)
    wide = only_table(run("critical-path", *files, "--wide"))[2]
    assert len({r["file"] for r in wide}) == 8  # the files' distinct names, none cut the same


def test_compare_ops_shows_the_delta_it_sorts_by() -> None:
    a = shared(RESNET)
    b = shared("kineto_json/hta_alexnet_a100_param_benchmark_trace.json.gz")
    found = tables(run("compare", a, b, "--ops"))
    header = found[-1][1]
    assert header[:2] == ["op", "delta_kernel_ms"]


# --- point 3: readable numbers --------------------------------------------------------------


def test_rates_with_si_prefixes_and_counts_as_integers() -> None:
    """Before: FLOP/s as `8,131,527,637,555`."""
    r = shared(RESNET)
    got = json.loads(run("mfu", r, "--image-size", 224, "--batch-size", 32, "--json"))[0]
    _, header, rows = only_table(run("mfu", r, "--image-size", 224, "--batch-size", 32))
    assert "achieved_tflop_per_s" in header and "achieved_flop_per_s" not in header
    assert float(rows[0]["achieved_tflop_per_s"]) == pytest.approx(
        got["achieved_flop_per_s"] / 1e12, abs=1e-3
    )
    assert rows[0]["peak_tflop_per_s"] == "15.7"  # V100 SXM2 fp32: 15.7 TFLOP/s


def test_render_counts_epochs_rates() -> None:
    import polars as pl

    from traceanalyze.cli.render import text_table

    df = pl.DataFrame(
        {
            "kernel_count": [4350.0, 2.0],
            "run_start_ns": [1_652_468_827_007_000_000, 1_652_417_495_192_000_000],
            "dram_bytes_per_s": [9.0e11, 1.5e9],
        }
    )
    _, header, rows = only_table(text_table(df))
    assert header == ["kernel_count", "run_start_utc", "dram_gb_per_s"]
    assert [r["kernel_count"] for r in rows] == ["4,350", "2"]
    assert rows[0]["run_start_utc"] == "2022-05-13T19:07:07.007Z"
    assert [r["dram_gb_per_s"] for r in rows] == ["900", "1.5"]


def test_schema_descriptions_are_cut_at_a_word() -> None:
    """Before: schema descriptions cut mid-word (`per …yTorch profiler's`)."""
    full = {r["column"]: r["description"] for r in json.loads(run("schema", "kernels", "--json"))}
    _, header, rows = only_table(run("schema", "kernels"))
    cut = [r for r in rows if r["description"] != full[r["column"]]]
    assert cut, "nothing cut at 120 columns: the test no longer tests anything"
    for r in cut:
        shown, whole = r["description"], full[r["column"]]
        assert shown.endswith("…") and whole.startswith(shown[:-1])
        assert whole[len(shown) - 1] in " ,;:(", (shown, whole)  # the next character ends a word
