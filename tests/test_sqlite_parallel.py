"""_sqlite_parallel: rowid ranges read by worker processes, Arrow IPC back, failures reported.

Expected rows come from Python's sqlite3 on the same file (`ORDER BY rowid`), never from the
workers' output.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from traceanalyze.readers.common import sqlite_parallel as sp

pytest.importorskip("adbc_driver_sqlite")
pa = pytest.importorskip("pyarrow")


def _db(path: Path, rows: list[tuple[object, ...]], ddl: str = "t (a INTEGER, b INTEGER)") -> Path:
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE {ddl}")
    marks = ", ".join("?" * len(rows[0]))
    con.executemany(f"INSERT INTO t VALUES ({marks})", rows)
    con.commit()
    con.close()
    return path


def _expected(path: Path, sql: str) -> list[tuple[object, ...]]:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _rows(tables: list) -> list[tuple[object, ...]]:
    t = pa.concat_tables(tables)
    return list(zip(*(t.column(i).to_pylist() for i in range(t.num_columns)), strict=True))


def test_split_ranges_cover_the_span_in_order() -> None:
    assert sp.split_ranges(1, 10, 3) == [(1, 3), (4, 6), (7, 10)]
    assert sp.split_ranges(5, 5, 4) == [(5, 5)]  # never more parts than rowids
    r = sp.split_ranges(-7, 1_000_003, 4)
    assert r[0][0] == -7 and r[-1][1] == 1_000_003
    assert all(b[0] == a[1] + 1 for a, b in zip(r, r[1:], strict=False))
    for parts in (2, 3, 4):
        r = sp.split_ranges(1, 5_000_000, parts, head_start=160_000)
        sizes = [b - a + 1 for a, b in r]
        assert sum(sizes) == 5_000_000 and r[0][0] == 1 and r[-1][1] == 5_000_000
        assert abs(sizes[0] - sizes[1] - 160_000) <= parts and max(sizes[1:]) - min(sizes[1:]) <= 1


def test_rowid_alias_avoids_real_columns() -> None:
    assert sp.rowid_alias(["start", "end"]) == "rowid"
    assert sp.rowid_alias(["ROWID", "x"]) == "_rowid_"
    assert sp.rowid_alias(["rowid", "_rowid_", "OID"]) is None


def test_ranges_with_gaps_equal_a_serial_scan(tmp_path: Path) -> None:
    rows = [(i, i * 7 if i % 5 else None) for i in range(3000)]
    p = _db(tmp_path / "gaps.sqlite", rows)
    con = sqlite3.connect(p)
    # Holes: a whole block (one worker's range is nearly empty) and scattered rows.
    con.execute("DELETE FROM t WHERE rowid BETWEEN 1001 AND 1990 OR rowid % 13 = 0")
    con.commit()
    con.close()
    lo, hi = _expected(p, "SELECT min(rowid), max(rowid) FROM t")[0]
    parts = sp.read_ranges(p, 'SELECT "a", "b" FROM "t"', "rowid", sp.split_ranges(lo, hi, 3))
    assert len(parts) == 3
    want = _expected(p, "SELECT a, b FROM t ORDER BY rowid")
    kept = [i for i in range(1, 3001) if i % 13 and not 1001 <= i <= 1990]
    assert [a + 1 for a, _ in want] == kept  # a = rowid - 1: the holes are where they should be
    assert _rows(parts) == want


@pytest.mark.parametrize(
    "sql",
    [
        'DELETE FROM "t"',
        'SELECT "a" FROM "t"; DELETE FROM "t"',
        "SELECT load_extension('x') FROM \"t\"",
        "SELECT a FROM t, pragma_table_info('t')",
        "ATTACH 'x.db' AS x",
    ],
)
def test_worker_runs_only_a_select(tmp_path: Path, sql: str) -> None:
    p = _db(tmp_path / "ro.sqlite", [(1, 2), (3, 4)])
    before = p.read_bytes()
    with pytest.raises(sp.WorkerFailed, match="refused"):
        sp.read_ranges(p, sql, "rowid", [(1, 1), (2, 2)])
    assert p.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ro.sqlite"]


def test_bad_rowid_alias_is_refused(tmp_path: Path) -> None:
    p = _db(tmp_path / "a.sqlite", [(1, 2)])
    with pytest.raises(sp.WorkerFailed, match="refused"):
        sp.read_ranges(p, 'SELECT "a" FROM "t"', "1=1 OR rowid", [(1, 1)])


def test_type_change_after_inference_is_driver_refused(tmp_path: Path) -> None:
    # The driver infers INT64 from the first batch (16 rows here); a TEXT cell later fails.
    rows: list[tuple[object, ...]] = [(i, i) for i in range(100)]
    rows[70] = (70, "not an int")
    p = _db(tmp_path / "mixed.sqlite", rows)
    with pytest.raises(sp.DriverRefused, match="(?i)type mismatch"):
        sp.read_ranges(p, 'SELECT "a", "b" FROM "t"', "rowid", [(1, 50), (51, 100)], batch_rows=16)


def test_a_failing_worker_stops_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _db(tmp_path / "a.sqlite", [(1, 2)])
    # A stand-in worker: the range starting at 1 hangs, the other dies with a message.
    script = (
        "import os, sys, time, pathlib\n"
        "pathlib.Path(sys.argv[1]).with_name('pid' + sys.argv[4]).write_text(str(os.getpid()))\n"
        "if sys.argv[4] == '1':\n"
        "    time.sleep(120)\n"
        "while not pathlib.Path(sys.argv[1]).with_name('pid1').exists():\n"
        "    time.sleep(0.01)\n"
        "sys.exit('boom: simulated crash')\n"
    )
    monkeypatch.setattr(sp, "worker_command", lambda: [sys.executable, "-c", script])
    t0 = time.perf_counter()
    with pytest.raises(sp.WorkerFailed, match=r"rowids 2\.\.2: boom: simulated crash"):
        sp.read_ranges(p, 'SELECT "a" FROM "t"', "rowid", [(1, 1), (2, 2)])
    assert time.perf_counter() - t0 < 60  # the hanging worker was killed, not waited for
    for name in ("pid1", "pid2"):
        pid = int((tmp_path / name).read_text())
        assert not Path(f"/proc/{pid}").exists()  # killed and reaped


def test_local_read_takes_the_first_range_and_scratch_is_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [(i, -i) for i in range(500)]
    p = _db(tmp_path / "l.sqlite", rows)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(sp, "_scratch_dir", lambda need=0: str(scratch))
    seen: list[str] = []

    def local(sql: str) -> Any:
        seen.append(sql)
        con = sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True)
        got = con.execute(sql).fetchall()
        con.close()
        return pa.table({"a": [r[0] for r in got], "b": [r[1] for r in got]})

    ranges = sp.split_ranges(1, 500, 3, head_start=50)
    parts = sp.read_ranges(p, 'SELECT "a", "b" FROM "t"', "rowid", ranges, local_read=local)
    assert seen == [f'SELECT "a", "b" FROM "t" WHERE rowid BETWEEN 1 AND {ranges[0][1]}']
    assert _rows(parts) == _expected(p, "SELECT a, b FROM t ORDER BY rowid")
    assert list(scratch.iterdir()) == []  # the worker files and their directory are gone


def test_local_refusal_stops_the_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _db(tmp_path / "a.sqlite", [(1, 2), (3, 4)])
    script = (
        "import os, sys, time, pathlib\n"
        "pathlib.Path(sys.argv[1]).with_name('pid').write_text(str(os.getpid()))\n"
        "time.sleep(120)\n"
    )
    monkeypatch.setattr(sp, "worker_command", lambda: [sys.executable, "-c", script])

    def local(sql: str) -> Any:
        while not (tmp_path / "pid").exists():
            time.sleep(0.01)
        raise sp.DriverRefused("type mismatch in the first range")

    t0 = time.perf_counter()
    with pytest.raises(sp.DriverRefused, match="first range"):
        sp.read_ranges(p, 'SELECT "a" FROM "t"', "rowid", [(1, 1), (2, 2)], local_read=local)
    assert time.perf_counter() - t0 < 60
    assert not Path(f"/proc/{int((tmp_path / 'pid').read_text())}").exists()


def _full_disk_worker() -> list[str]:
    """The real worker, but its output file is /dev/full: every write fails with ENOSPC."""
    code = (
        "import runpy, sys\n"
        "sys.argv = [sys.argv[0], *sys.argv[1:-1], '/dev/full']\n"
        f"runpy.run_path({str(Path(sp.__file__).resolve())!r}, run_name='__main__')\n"
    )
    return [sys.executable, "-c", code]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_no_room_for_the_output_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _db(tmp_path / "a.sqlite", [(i, i) for i in range(1000)])
    monkeypatch.setattr(sp, "worker_command", _full_disk_worker)
    with pytest.raises(sp.Unavailable, match="output"):
        sp.read_ranges(p, 'SELECT "a", "b" FROM "t"', "rowid", [(1, 500), (501, 1000)])


def test_scratch_dir_needs_room() -> None:
    assert sp._scratch_dir(1 << 62) is None  # no /dev/shm holds 4 EiB: the default tmp dir


_IMPORT_PYARROW = """
import sys
sys.path.insert(0, {readers!r})
import sqlite_parallel as sp
pa = sp._pyarrow_without_numpy()
print(pa.__name__, getattr(pa, "FAKE", False), "numpy" in sys.modules)
import numpy  # the block is lifted once pyarrow is in
print("numpy", numpy.__name__)
"""


def _import_in_fresh_python(extra_path: Path | None = None) -> list[str]:
    import subprocess

    readers = Path(sp.__file__).parent
    code = _IMPORT_PYARROW.format(readers=str(readers))
    if extra_path is not None:  # a fake pyarrow first on the path
        code = f"import sys; sys.path.insert(0, {str(extra_path)!r})\n" + code
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.split("\n")


def test_worker_imports_pyarrow_without_numpy() -> None:
    # the real pyarrow: imported without numpy (a worker never needs it), numpy still importable
    first, second = _import_in_fresh_python()[:2]
    assert first == "pyarrow False False"
    assert second == "numpy numpy"


def test_worker_pyarrow_that_needs_numpy_is_imported_normally(tmp_path: Path) -> None:
    # a pyarrow whose import needs numpy: imported again, with numpy, not an ImportError
    fake = tmp_path / "pyarrow"
    fake.mkdir()
    (fake / "__init__.py").write_text("import numpy\nFAKE = True\n")
    first, second = _import_in_fresh_python(tmp_path)[:2]
    assert first == "pyarrow True True"
    assert second == "numpy numpy"
