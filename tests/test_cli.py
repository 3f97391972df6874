"""CLI: thin commands, one-line errors with exit 1, help for every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyze import schema
from traceanalyze.cli import main

LOG = "Iteration Duration 0 0 : 0.5\nIteration Duration 1 0 : 0.25\nIteration Duration 2 0 : 0.75\n"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_every_command_has_help() -> None:
    cmds = main.list_commands(None)  # type: ignore[arg-type]
    assert {"ingest", "summary", "schema", "formats"} <= set(cmds)
    for name in cmds:
        cmd = main.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None and cmd.help, f"{name} has no help text"
        r = run(name, "--help")
        assert r.exit_code == 0, name


def test_ingest_then_summary(tmp_path: Path, write) -> None:
    p = write("log.txt", LOG)
    st = str(tmp_path / "st")
    r = run("ingest", str(p), "--store", st)
    assert r.exit_code == 0
    assert "ingested as iterlog" in r.output and "3 iterations" in r.output
    r = run("ingest", str(p), "--store", st)
    assert r.exit_code == 0 and "unchanged" in r.output and "skipped" in r.output
    r = run("summary", "--store", st, "--json")
    rep = json.loads(r.output)
    [it] = rep["iterations"]
    assert it["iteration_count"] == 3
    assert it["median_ms"] == pytest.approx(500.0)
    assert it["min_ms"] == pytest.approx(250.0) and it["max_ms"] == pytest.approx(750.0)
    r = run("summary", "--store", st)
    assert r.exit_code == 0 and "-- iterations" in r.output and "iteration_count" in r.output
    assert r.output.startswith(f"== {p}\n   iterlog, sc22-train-stdout, source ")


def test_quiet_ingest_prints_nothing(tmp_path: Path, write) -> None:
    r = run("ingest", str(write("log.txt", LOG)), "--store", str(tmp_path / "st"), "--quiet")
    assert r.exit_code == 0 and r.output == ""


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "empty file"),  # issue 32: as every reader says of it under --format
        (b"\x00\x01\x02garbage\xff" * 50, "no reader recognizes this file"),
    ],
)
def test_bad_input_is_one_line_exit_1_store_untouched(
    tmp_path: Path, write, content: bytes, needle: str
) -> None:
    p = write("bad.bin", content)
    st = tmp_path / "st"
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(st)])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert lines[0].startswith(f"traceanalyze: error: {p}: ") and needle in lines[0]
    assert not st.exists()


def test_bad_record_names_file(tmp_path: Path, write) -> None:
    p = write("x.txt", "Iteration Duration\n")
    r = CliRunner().invoke(
        main, ["ingest", str(p), "--store", str(tmp_path / "st"), "--format", "iterlog"]
    )
    assert r.exit_code == 1
    assert r.output == (
        f"traceanalyze: error: {p}, line 1: no 'Iteration Duration <i> <dev> : <s>' records "
        "(malformed: 'Iteration Duration')\n"
    )


def test_summary_of_missing_store(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["summary", "--store", str(tmp_path / "none")])
    assert r.exit_code == 1
    assert r.output == (
        f"traceanalyze: error: {tmp_path / 'none'}: no traceanalyze store here (ingest something "
        "first)\n"
    )


def test_summary_unknown_source(tmp_path: Path, write) -> None:
    st = str(tmp_path / "st")
    run("ingest", str(write("log.txt", LOG)), "--store", st)
    r = CliRunner().invoke(main, ["summary", "--store", st, "--source", "deadbeef"])
    assert r.exit_code == 1 and "no such source(s): deadbeef" in r.output


def test_schema_command() -> None:
    r = run("schema", "gpu_samples", "--json")
    cols = [row["column"] for row in json.loads(r.output)]
    assert cols == schema.table("gpu_samples").names
    r = CliRunner().invoke(main, ["schema", "nope"])
    assert r.exit_code == 1 and "unknown table 'nope'" in r.output
    r = run("schema", "--markdown")
    assert r.output.rstrip("\n") == schema.render_markdown().rstrip("\n")


def test_formats_lists_every_reader() -> None:
    from traceanalyze.readers import READERS

    r = run("formats", "--csv")
    lines = r.output.strip().splitlines()
    assert lines[0] == "format,description,streams"
    assert [ln.split(",")[0] for ln in lines[1:]] == list(READERS)


def test_formats_say_which_stream_and_the_readme_agrees() -> None:
    import re

    from traceanalyze.readers import READERS

    doc = json.loads(run("formats", "--json").output)
    shown = {r["format"]: r["streams"] for r in doc}
    # the column is whether the reader module defines `stream_<slug>`, checked here directly
    for slug, reader in READERS.items():
        assert shown[slug] == hasattr(reader.module, f"stream_{slug}"), slug
    assert not shown["ncu_csv"] and not shown["iterlog"] and shown["kineto_json"]
    # the README names exactly the streaming formats, and says which are read whole
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text("utf-8")
    para = text[text.index("* **Streaming ingest.**") :].split("\n* ")[0]
    listed = re.search(r"for the formats that stream \(([^)]*)\)", para.replace("\n  ", " "))
    assert listed is not None
    assert {s.strip() for s in listed.group(1).split(",")} == {s for s, v in shown.items() if v}
    for slug in (s for s, v in shown.items() if not v):
        assert slug in para


def test_python_dash_m(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "traceanalyze", "schema", "iterations", "--csv"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert r.stdout.splitlines()[0] == "table,column,type,nullable,description"


@pytest.mark.parametrize("entry, freezes", [("run", True), ("main", False)])
def test_only_the_console_script_freezes_the_collector_at_exit(
    tmp_path: Path, entry: str, freezes: bool
) -> None:
    """`run` (the console script, `python -m traceanalyze`) leaves shutdown's collections
    nothing to walk; `main` (what CliRunner and a user's own process call) changes nothing."""
    import subprocess
    import sys

    log = tmp_path / "iters.log"
    log.write_text(LOG)
    code = (
        "import atexit, gc, sys\n"
        "from traceanalyze import cli\n"
        f"sys.argv = ['traceanalyze', 'ingest', {str(log)!r}, '--store', {str(tmp_path / 's')!r}]\n"
        "try:\n"
        f"    cli.{entry}()\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "before = gc.get_freeze_count()\n"
        "atexit._run_exitfuncs()\n"
        "print(before, gc.get_freeze_count())\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = map(int, r.stdout.split()[-2:])
    assert before == 0
    assert (after > 0) is freezes


def test_console_script_output_is_whole_after_exit(tmp_path: Path) -> None:
    """The store written by a `python -m traceanalyze ingest` process that exits through the
    frozen shutdown holds every row of the file."""
    import subprocess
    import sys

    import traceanalyze as ta

    log = tmp_path / "iters.log"
    log.write_text(LOG)
    st = tmp_path / "s"
    subprocess.run(
        [sys.executable, "-m", "traceanalyze", "ingest", str(log), "--store", str(st)],
        capture_output=True,
        check=True,
    )
    got = ta.Store(st).tables()["iterations"]
    seconds = [float(line.rsplit(":", 1)[1]) for line in LOG.splitlines()]
    assert sorted(got["duration_ns"].to_list()) == sorted(round(x * 1e9) for x in seconds)


def _store_tables(st: Path):
    import traceanalyze as ta

    return ta.Store(st).tables()


def test_ingest_fields_for_a_noheader_nvidia_smi_log(tmp_path: Path, write) -> None:
    # nvidia-smi --query-gpu=timestamp,index,power.draw,clocks.sm --format=csv,noheader
    p = write(
        "smi.csv",
        "2024/05/01 12:00:00.000, 0, 70.50 W, 1410 MHz\n"
        "2024/05/01 12:00:00.500, 0, 71.25 W, 1395 MHz\n",
    )
    st = tmp_path / "st"
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(st), "--tz", "UTC"])
    assert r.exit_code == 1 and "field list" in r.output
    r = run(
        "ingest",
        str(p),
        "--store",
        str(st),
        "--tz",
        "UTC",
        "--fields",
        "timestamp,index,power.draw,clocks.sm",
    )
    assert r.exit_code == 0 and "ingested as smi_csv" in r.output
    s = _store_tables(st).gpu_samples.sort("timestamp_ns")
    noon = (19844 * 86400 + 12 * 3600) * 10**9  # 2024-05-01 12:00 UTC: 19844 days after 1970
    assert s["timestamp_ns"].to_list() == [noon, noon + 500_000_000]
    assert s["power_w"].to_list() == [70.5, 71.25]
    assert s["sm_clock_mhz"].to_list() == [1410, 1395]
    assert s["device_id"].to_list() == [0, 0]


DCGMI = (
    "#Entity   SMCLK  POWER  GTEMP\n"
    "ID        MHZ    W      C\n"
    "GPU 0     1410   70.2   45\n"
    "GPU 1     1395   68.0   44\n"
    "GPU 0     1410   N/A    46\n"
    "GPU 1     1380   69.5   44\n"
)


def test_ingest_interval_ms_for_dcgmi_dmon_text(tmp_path: Path, write) -> None:
    p = write("dmon.txt", DCGMI)
    st = tmp_path / "st"
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(st)])
    assert r.exit_code == 1 and "interval_ms" in r.output
    r = run("ingest", str(p), "--store", str(st), "--interval-ms", "250")
    assert r.exit_code == 0 and "ingested as smi_csv" in r.output
    s = _store_tables(st).gpu_samples.sort("device_id", "timestamp_ns")
    # each GPU's n-th row at n x 250 ms
    assert s.select("device_id", "timestamp_ns", "sm_clock_mhz", "power_w").rows() == [
        (0, 0, 1410, 70.2),
        (0, 250_000_000, 1410, None),
        (1, 0, 1395, 68.0),
        (1, 250_000_000, 1380, 69.5),
    ]
    assert s["temperature_c"].to_list() == [45, 46, 44, 44]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            "GPU 1     1380   abc    44",
            "line 6, column 'POWER': dcgmi dmon POWER: not a number: 'abc'",
        ),
        (
            "GPU 1     1380   69.5",
            "line 6: dcgmi dmon row with 4 fields, expected 5: 'GPU 1     1380   69.5'",
        ),
        ("GPU x     1380   69.5   44", "line 6: dcgmi dmon GPU id is not an integer: 'x'"),
    ],
)
def test_dcgmi_bad_row_names_its_line(tmp_path: Path, write, row: str, message: str) -> None:
    text = DCGMI.replace("GPU 1     1380   69.5   44", row)
    p = write("dmon.txt", text)
    r = CliRunner().invoke(
        main, ["ingest", str(p), "--store", str(tmp_path / "st"), "--interval-ms", "100"]
    )
    assert r.exit_code == 1
    assert r.output == f"traceanalyze: error: {p}, {message}\n"


def test_reader_option_no_reader_of_the_files_takes_is_one_line(tmp_path: Path, write) -> None:
    p = write("log.txt", LOG)
    st = tmp_path / "st"
    for args, option in (
        (["--tz", "UTC"], "tz"),
        (["--fields", "timestamp,index"], "fields"),
        (["--interval-ms", "100"], "interval_ms"),
    ):
        r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(st), *args])
        assert r.exit_code == 1
        assert r.output == (
            f"traceanalyze: error: option {option!r} is not taken by the iterlog reader of "
            "these files; it applies to smi_csv\n"
        )
    assert not st.exists()


def test_tz_with_an_nsys_export_is_a_clean_error(tmp_path: Path, write) -> None:
    """The audit's crash: --tz reached read_nsys_sqlite as an unexpected keyword."""
    from .conftest import shared

    p = shared("nsys_sqlite/nsysai_mock_torch_tiny_nsys2026.1.sqlite")
    st = str(tmp_path / "st")
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", st, "--tz", "UTC"])
    assert r.exit_code == 1, r.output
    assert r.output == (
        "traceanalyze: error: option 'tz' is not taken by the nsys_sqlite reader of these "
        "files; it applies to smi_csv\n"
    )
    smi = write(
        "smi.csv", "timestamp, index, power.draw [W]\n2024/05/01 12:00:00.000, 0, 70.50 W\n"
    )
    r = run("ingest", str(p), str(smi), "--store", st, "--tz", "UTC")
    assert r.exit_code == 0
    assert "ingested as nsys_sqlite" in r.output and "ingested as smi_csv" in r.output


def test_ingest_help_documents_the_reader_options() -> None:
    out = run("ingest", "--help").output
    for flag in ("--tz", "--fields TEXT", "--interval-ms FLOAT", "noheader", "dcgmi"):
        assert flag in out


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        # truncated inside its first gzip block: still recognized, the reader says what is wrong
        (1500, "truncated gzip (no end of stream)"),
        # cut before any content decompresses: detection says so itself
        (100, "truncated gzip (no end of stream)"),
    ],
)
def test_truncated_json_gz_says_truncated_gzip(
    tmp_path: Path, write, cut: int, message: str
) -> None:
    from .conftest import shared

    src = shared("kineto_json/hta_triton_a100_trace.json.gz")
    p = write("t.json.gz", src.read_bytes()[:cut])
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(tmp_path / "st")])
    assert r.exit_code == 1
    assert r.output == f"traceanalyze: error: {p}: {message}\n"


def test_truncated_sqlite_says_unreadable_sqlite(tmp_path: Path, write) -> None:
    import sqlite3

    from .conftest import shared

    src = shared("nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite")
    con = sqlite3.connect(src.resolve().as_uri() + "?mode=ro", uri=True)
    [(pages,)] = con.execute("PRAGMA page_count").fetchall()
    [(size,)] = con.execute("PRAGMA page_size").fetchall()
    con.close()
    p = write("t.sqlite", src.read_bytes()[:1_000_000])
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(tmp_path / "st")])
    assert r.exit_code == 1
    assert r.output == (
        f"traceanalyze: error: {p}: unreadable SQLite database: truncated (1,000,000 bytes; "
        f"its header says {pages:,} pages of {size:,} bytes = {pages * size:,})\n"
    )


def test_data_quality_warnings_are_one_line(tmp_path: Path, write) -> None:
    # a complete event without `dur`: kept, and the reader warns (kineto_json)
    trace = (
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5}]}'
    )
    p = write("nodur.json", trace)
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(tmp_path / "st")])
    assert r.exit_code == 0
    warned = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert warned == [
        f"traceanalyze: warning: {p}: kernels: 1 complete event(s) without dur: "
        "end and duration null"
    ]


@pytest.mark.parametrize(
    "module",
    ["traceanalyze.cli.common", "traceanalyze.cli.analyses", "traceanalyze.collect.cli"],
)
def test_command_modules_import_first_in_a_fresh_interpreter(module: str) -> None:
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
