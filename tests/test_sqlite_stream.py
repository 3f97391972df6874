"""Streaming ingest of the SQLite readers (`stream_nsys_sqlite`, `stream_nvprof_sqlite`).

The contract: per table, the chunks concatenated equal `read()`'s table (rows, order, ids), with
the same warnings, and bad input raises the same error through `ingest` and leaves the store as
it was. Checked on every nsys and nvprof SQLite export in ../shared/traces, with the batch sizes
shrunk so that tables arrive in several batches, via `readers.stream` and via a real
`ingest` into a store read back with `Store.table`. Independent checks use sqlite3 SQL on the
file (row counts, names in rowid order, the start-time order nvprof's kernels come out in).
"""

from __future__ import annotations

import shutil
import sqlite3
import warnings
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import SHARED_TRACES, shared
from test_bad_inputs import CASES

import traceanalyze.readers.common.sqlite as sqlite_mod
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.readers import read, stream
from traceanalyze.readers.nsys import nsys_sqlite
from traceanalyze.readers.nvprof import nvprof_sqlite
from traceanalyze.store import Store, ingest

NSYS = sorted((SHARED_TRACES / "nsys_sqlite").glob("*.sqlite"))
NVPROF = sorted((SHARED_TRACES / "nvprof_sqlite").glob("*"))
H100 = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
PIPIT = "nsys_sqlite/pipit_saxpy_mpi_cuda_a100_nsys2022.2.sqlite"
NV = "nvprof_sqlite/profilinglm_pytorch_lm_v100_pyprof_net.sql"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Batches of 700 rows (ADBC and sqlite3, both readers): the real traces' big tables
    (4,010 nsys kernels, 1,968 nvprof API calls) then come in several chunks."""
    monkeypatch.setattr(nsys_sqlite, "_BATCH", 700)
    monkeypatch.setattr(nsys_sqlite, "_STREAM_BATCH", 700)
    monkeypatch.setattr(sqlite_mod, "BATCH", 700)
    monkeypatch.setattr(nvprof_sqlite, "_BATCH", 700)
    yield


def _chunks(path: Path, **options: object) -> tuple[dict[str, list[pl.DataFrame]], list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        per: dict[str, list[pl.DataFrame]] = {}
        for name, df in stream(path, workdir=None, **options):
            per.setdefault(name, []).append(df)
    return per, sorted(str(w.message) for w in seen)


def _read(path: Path, **options: object) -> tuple[dict[str, pl.DataFrame], list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tables = dict(read(path, **options).items())
    return tables, sorted(str(w.message) for w in seen)


def _assert_stream_equals_read(path: Path, **options: object) -> dict[str, list[pl.DataFrame]]:
    whole, read_notes = _read(path, **options)
    per, stream_notes = _chunks(path, **options)
    assert stream_notes == read_notes
    for name, df in whole.items():
        got = pl.concat(per[name]) if name in per else df.clear()
        assert got.equals(df), name
    assert set(per) <= set(whole)
    return per


@pytest.mark.parametrize("engine", ["auto", "sqlite3"])
@pytest.mark.parametrize("path", NSYS, ids=[p.name for p in NSYS])
def test_nsys_stream_equals_read(path: Path, engine: str, small_batches: None) -> None:
    per = _assert_stream_equals_read(path, engine=engine)
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    n = con.execute(f"SELECT count(*) FROM {KERNEL}").fetchone()[0]
    assert sum(df.height for df in per["kernels"]) == n
    assert len(per["kernels"]) == -(-n // 700)  # one chunk per batch of the kernel table


def test_nsys_stream_names_from_sql(small_batches: None) -> None:
    """Names, ids and order against a join on StringIds in rowid order, by sqlite3."""
    path = shared(H100)
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    want = con.execute(
        f"SELECT s.value, k.start FROM {KERNEL} k LEFT JOIN StringIds s "
        "ON s.id = k.demangledName ORDER BY k.rowid"
    ).fetchall()
    per, _ = _chunks(path)
    got = pl.concat(per["kernels"])
    assert list(zip(got["name"], got["start_ns"], strict=True)) == want
    assert got["kernel_id"].to_list() == list(range(len(want)))


@pytest.mark.parametrize("path", NVPROF, ids=[p.name for p in NVPROF])
def test_nvprof_stream_equals_read(path: Path, small_batches: None) -> None:
    per = _assert_stream_equals_read(path)
    assert len(per["api_calls"]) > 1


def test_nvprof_stream_sorted_like_sql(small_batches: None) -> None:
    """Kernels come out by start time (the order sqlite3 gives for the same rows), and
    kernel_id numbers them in that order."""
    path = shared(NV)
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    starts = [
        r[0]
        for r in con.execute(
            "SELECT start FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL UNION ALL "
            "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1"
        )
    ]
    per, _ = _chunks(path)
    got = pl.concat(per["kernels"])
    assert got["start_ns"].to_list() == starts
    assert got["kernel_id"].to_list() == list(range(len(starts)))


def test_nvprof_ties_across_tables(tmp_path: Path, small_batches: None) -> None:
    """Rows of both kernel tables with equal starts: the stream breaks ties as read's stable
    sort does (CONCURRENT_KERNEL first, then rowid order)."""
    p = tmp_path / "ties.sql"
    shutil.copyfile(shared(NV), p)
    p.chmod(0o644)
    con = sqlite3.connect(p)
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    keep = ", ".join(f'"{c}"' for c in cols if c != "_id_")
    con.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({keep}) SELECT {keep} "
        "FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ORDER BY _id_ DESC LIMIT 50"
    )
    con.commit()
    con.close()
    per = _assert_stream_equals_read(p)
    assert sum(df.height for df in per["kernels"]) == 210


@pytest.mark.parametrize("path", [*NSYS, *NVPROF], ids=[p.name for p in [*NSYS, *NVPROF]])
def test_ingest_reads_back_equal(path: Path, tmp_path: Path, small_batches: None) -> None:
    whole = read(path)
    ingest(path, tmp_path / "store")
    st = Store(tmp_path / "store")
    for name, df in whole.items():
        assert st.table(name).equals(df), name


def test_ingested_names_are_dictionary_encoded(tmp_path: Path) -> None:
    ingest(shared(H100), tmp_path / "store")
    files = sorted((tmp_path / "store").glob("kernels/*/*.parquet"))
    assert files
    for f in files:
        md = pq.ParquetFile(f).metadata
        for col in ("name", "short_name", "mangled_name"):
            i = md.schema.to_arrow_schema().get_field_index(col)
            for g in range(md.num_row_groups):
                encodings = md.row_group(g).column(i).encodings
                assert any("DICTIONARY" in e for e in encodings), (col, encodings)


SQLITE_CASES = [c for c in CASES if c.fmt in ("nsys_sqlite", "nvprof_sqlite")]


def _listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("c", SQLITE_CASES, ids=[c.id for c in SQLITE_CASES])
def test_bad_input_through_ingest(
    c: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every SQLite case of the bad-input corpus: ingest raises read's error (class and
    message) and leaves the store byte-identical, or succeeds with read's warnings and rows.
    One-row ADBC batches: a bad cell is met after good batches were yielded."""
    from test_bad_inputs import Case

    assert isinstance(c, Case)
    store = tmp_path / "store"
    ingest(shared(PIPIT), store)  # a store with a source in it already
    before = _listing(store)
    monkeypatch.setattr(nsys_sqlite, "_STREAM_BATCH", 1)
    monkeypatch.setattr(nvprof_sqlite, "_BATCH", 7)
    d = tmp_path / "in"
    d.mkdir()
    path = c.make(d)
    fmt = None if c.detect else c.fmt
    with warnings.catch_warnings(record=True) as seen_read:
        warnings.simplefilter("always")
        try:
            expected: TraceanalyzeError | dict[str, pl.DataFrame] = dict(
                read(path, format=fmt).items()
            )
        except TraceanalyzeError as e:
            expected = e
    with warnings.catch_warnings(record=True) as seen_ingest:
        warnings.simplefilter("always")
        try:
            ingest(path, store, format=fmt)
            got: TraceanalyzeError | None = None
        except TraceanalyzeError as e:
            got = e
    if isinstance(expected, TraceanalyzeError):
        assert c.error is not None
        assert type(got) is type(expected)
        assert str(got) == str(expected)
        assert _listing(store) == before
        return
    assert got is None, got
    assert sorted(map(str, (w.message for w in seen_ingest))) == sorted(
        map(str, (w.message for w in seen_read))
    )
    st = Store(store)
    sid = expected["sources"]["source_id"][0]
    for name, df in expected.items():
        back = st.table(name).filter(pl.col("source_id") == sid)
        assert back.equals(df), name
