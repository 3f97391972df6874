"""`.nsys-rep` input (slug nsys_rep): exported with the installed nsys, then read as nsys_sqlite.

The real-report tests make their report here with `nsys profile` on a CPU-only program
(tests/_nsys.py; no GPU needed) and are skipped without nsys (`make test-profilers` installs it).
The error paths that need no real nsys run against a stand-in `$NSYS` script."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import polars as pl
import pytest
from _nsys import export, make_report
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze.cli import main
from traceanalyze.errors import ToolNotFound, TraceanalyzeError
from traceanalyze.readers import READERS, detect_format
from traceanalyze.readers.common.core import head_bytes
from traceanalyze.readers.common.screen import SCREENS
from traceanalyze.readers.nsys import nsys_rep

MAGIC = b"NVIDIA Tegra Profiler Report 1.\n"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_report(tmp_path_factory.mktemp("nsysrep"))


def nvtx_ranges(db: Path) -> list[tuple[str, int, int]]:
    """Push/pop ranges (event type 59) straight from the export, independent of the reader."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT text, start, end FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start"
        ).fetchall()
    finally:
        con.close()
    return [(str(t), int(s), int(e)) for t, s, e in rows]


def fake_nsys(tmp_path: Path, version: str, export_body: str) -> Path:
    """A stand-in `nsys`: `--version` prints `version`; `export` runs `export_body` (sh)."""
    p = tmp_path / "fake-nsys"
    p.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = --version ]; then echo "NVIDIA Nsight Systems version {version}"; '
        "exit 0; fi\n"
        'while [ "$#" -gt 1 ]; do [ "$1" = --output ] && out="$2"; shift; done\n'
        f"{export_body}\n"
    )
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def staging_leftovers(store: Path) -> list[Path]:
    staging = store / ".staging"
    return [p for p in staging.rglob("*")] if staging.exists() else []


# --- without a real nsys --------------------------------------------------------------------


def test_a_report_is_detected_by_its_magic(tmp_path: Path) -> None:
    p = tmp_path / "x.nsys-rep"
    p.write_bytes(MAGIC + b"\x0b rest")
    assert detect_format(p) == "nsys_rep"
    q = tmp_path / "x.qdrep"
    q.write_bytes(MAGIC + b"\x0b rest")
    assert detect_format(q) == "nsys_rep"


def test_no_nsys_says_how_to_export_by_hand(tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "run1.nsys-rep"
    p.write_bytes(MAGIC)
    monkeypatch.setenv("NSYS", str(tmp_path / "no-such-nsys"))
    with pytest.raises(ToolNotFound) as e:
        ta.read(p)
    msg = str(e.value)
    assert msg.startswith(str(p))
    assert "nsys export --type sqlite -o run1.sqlite run1.nsys-rep" in msg
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(tmp_path / "st")])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "export by hand" in lines[0]
    assert not (tmp_path / "st").exists() or not any((tmp_path / "st").glob("*/*.parquet"))
    (tmp_path / "run1.sqlite").write_bytes(b"")
    with pytest.raises(ToolNotFound, match="run1.sqlite beside it may be that export"):
        ta.read(p)


def test_a_failed_export_leaves_nothing_half_exported(tmp_path: Path, monkeypatch) -> None:
    # nsys 2022.4 on a 2023.3 report: "ProtobufParseException", exit 1, a partial .sqlite left.
    body = (
        'printf "SQLite format 3\\000partial" > "$out"\necho "ProtobufParseException: bad"\nexit 1'
    )
    monkeypatch.setenv("NSYS", str(fake_nsys(tmp_path, "2022.4.2.1-df9881f", body)))
    p = tmp_path / "r.nsys-rep"
    p.write_bytes(MAGIC + b"no version here")
    store = tmp_path / "store"
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(store)])
    assert r.exit_code == 1
    [line] = r.output.strip().splitlines()
    assert "nsys export failed (exit status 1): ProtobufParseException: bad" in line
    assert "a report from a newer nsys than this one" in line
    assert str(p) in line
    assert staging_leftovers(store) == []
    assert not store.exists() or ta.Store(store).source_ids() == []
    with pytest.raises(TraceanalyzeError, match="ProtobufParseException"):
        ta.read(p)


def test_a_report_newer_than_nsys_is_refused_before_nsys_runs(tmp_path: Path, monkeypatch) -> None:
    ran = tmp_path / "export-ran"
    monkeypatch.setenv("NSYS", str(fake_nsys(tmp_path, "2022.4.2.1-df9881f", f"touch {ran}")))
    p = tmp_path / "new.nsys-rep"
    p.write_bytes(MAGIC + b"\x00" * 100 + b"\x12\x122023.3.1.92-3348f3c\x00")
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(tmp_path / "st")])
    assert r.exit_code == 1
    [line] = r.output.strip().splitlines()
    assert "written by nsys 2023.3.1.92" in line and "installed nsys 2022.4.2.1" in line
    assert "$NSYS" in line and "new.sqlite" in line
    assert not ran.exists()


def test_version_parsing() -> None:
    assert nsys_rep.parse_version("NVIDIA Nsight Systems version 2022.4.2.1-df9881f") == (
        2022,
        4,
        2,
        1,
    )
    assert nsys_rep.parse_version(b"x 2023.3.1 y") == (2023, 3, 1)
    assert nsys_rep.parse_version("no version") is None


# --- with the real nsys ---------------------------------------------------------------------


@pytest.mark.requires_nsys
@pytest.mark.requires_torch
def test_a_real_report_passes_the_screen_and_is_detected(report: Path) -> None:
    n, screen = SCREENS["nsys_rep"]
    assert screen(head_bytes(report, n))
    assert [s for s, r in READERS.items() if r.sniff(report)] == ["nsys_rep"]
    assert detect_format(report) == "nsys_rep"


@pytest.mark.requires_nsys
@pytest.mark.requires_torch
def test_read_equals_the_hand_made_export(report: Path, tmp_path: Path) -> None:
    db = export(report, tmp_path / "by-hand.sqlite")
    expected = nvtx_ranges(db)
    assert [n for n, _, _ in expected][:5] == ["step 0", "data", "forward", "backward", "optimizer"]
    got = ta.read(report).markers.filter(pl.col("end_ns").is_not_null()).sort("start_ns")
    assert list(zip(got["name"], got["start_ns"], got["end_ns"], strict=True)) == expected
    # the temporary export is gone
    assert not any(Path(os.environ.get("TMPDIR", "/tmp")).glob("traceanalyze-nsys-*/export.sqlite"))


@pytest.mark.requires_nsys
@pytest.mark.requires_torch
def test_ingest_gives_the_rows_of_ingesting_the_export(report: Path, tmp_path: Path) -> None:
    db = export(report, tmp_path / "by-hand.sqlite")
    a, b = tmp_path / "from-rep", tmp_path / "from-sqlite"
    r = CliRunner().invoke(main, ["ingest", str(report), "--store", str(a)])
    assert r.exit_code == 0, r.output
    ta.ingest([db], b)
    assert staging_leftovers(a) == []
    for table in ("markers", "sources"):
        fa = ta.Store(a).scan(table).drop("source_id").collect()
        fb = ta.Store(b).scan(table).drop("source_id").collect()
        if table == "sources":
            assert fa["format"].to_list() == ["nsys_rep"] and fb["format"].to_list() == [
                "nsys_sqlite"
            ]
            assert fa["tool_version"].to_list() == fb["tool_version"].to_list()
            continue
        assert fa.height == len(nvtx_ranges(db)) + 1  # the ranges and the one mark
        assert fa.sort("start_ns", "name").equals(fb.sort("start_ns", "name"))
    # the library's open() reads a report as ingest does
    assert ta.open(report).scan("markers").collect().height == len(nvtx_ranges(db)) + 1


@pytest.mark.requires_nsys
@pytest.mark.requires_torch
def test_a_damaged_report_fails_with_nsys_own_reason(report: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.nsys-rep"
    cut.write_bytes(report.read_bytes()[: report.stat().st_size // 2])
    store = tmp_path / "store"
    r = CliRunner().invoke(main, ["ingest", str(cut), "--store", str(store)])
    assert r.exit_code == 1
    [line] = r.output.strip().splitlines()
    assert "nsys export failed" in line and str(cut) in line
    assert staging_leftovers(store) == []
    assert not store.exists() or ta.Store(store).source_ids() == []


@pytest.mark.requires_nsys
@pytest.mark.requires_torch
def test_the_report_version_is_the_writers(report: Path) -> None:
    import re
    import subprocess

    from conftest import tool_path

    out = subprocess.run([str(tool_path("nsys")), "--version"], capture_output=True, text=True)
    [want] = re.findall(r"version (\d+)\.(\d+)\.(\d+)\.(\d+)", out.stdout)
    assert nsys_rep.report_version(report) == tuple(int(x) for x in want)
