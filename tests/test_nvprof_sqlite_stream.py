"""`stream_nvprof_sqlite`'s NVTX markers and environment samples, a batch at a time.

Contract (as tests/test_sqlite_stream.py for the other tables): per table, the chunks
concatenated equal `read_nvprof_sqlite`'s table (rows, order, dtypes, nulls), with the same
warnings (text and counts), on every nvprof SQLite export in ../shared/traces and on copies of
it with extra MARKER and ENVIRONMENT rows, with 1-, 2- and 3-row batches so that start/end pairs,
records of one sample and duplicate end ids fall in different batches. Expected rows of the
synthetic cases are also computed independently: plain sqlite3 (a correlated subquery for the
first end row of each id) and Python over the inserted rows.
"""

from __future__ import annotations

import shutil
import sqlite3
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import all_shared_files, shared

from traceanalyze.errors import MalformedInput
from traceanalyze.readers import read, stream
from traceanalyze.readers.nvprof import nvprof_sqlite
from traceanalyze.readers.nvprof import nvtx as _nvprof_nvtx
from traceanalyze.readers.nvprof.nvprof_sqlite import read_nvprof_sqlite
from traceanalyze.store import Store, ingest

NV = "nvprof_sqlite/profilinglm_pytorch_lm_v100_pyprof_net.sql"
M = "CUPTI_ACTIVITY_KIND_MARKER"
ENV = "CUPTI_ACTIVITY_KIND_ENVIRONMENT"
NVPROF = [p for p in all_shared_files() if p.parent.name == "nvprof_sqlite"]
BATCHES = [1, 2, 3]
THREAD = struct.pack("<III", 4242, 3940300608, 0)
PROCESS = struct.pack("<III", 4242, 0, 0)


def _stream(path: Path) -> tuple[dict[str, list[pl.DataFrame]], list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        per: dict[str, list[pl.DataFrame]] = {}
        for name, df in stream(path, format="nvprof_sqlite", workdir=None):
            per.setdefault(name, []).append(df)
    return per, sorted(str(w.message) for w in seen)


def _read(path: Path) -> tuple[dict[str, pl.DataFrame], list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tables = dict(read_nvprof_sqlite(path).items())
    return tables, sorted(str(w.message) for w in seen)


def _assert_equal(path: Path) -> tuple[dict[str, list[pl.DataFrame]], list[str]]:
    """Stream == whole read for markers and gpu_samples (and the rest), warnings included."""
    whole, read_notes = _read(path)
    per, stream_notes = _stream(path)
    assert stream_notes == read_notes
    for name in ("markers", "gpu_samples"):
        want = whole[name].drop("source_id") if "source_id" in whole[name].columns else whole[name]
        got = pl.concat(per[name]) if name in per else want.clear()
        got = got.drop("source_id") if "source_id" in got.columns else got
        assert got.schema == want.schema, name
        assert got.equals(want), name
    return per, read_notes


def _assert_same_error(path: Path) -> None:
    """The whole read refuses the file, and the stream refuses it with the same message."""
    with pytest.raises(MalformedInput) as whole:
        _read(path)
    with pytest.raises(MalformedInput) as streamed:
        _stream(path)
    assert str(streamed.value) == str(whole.value)


@pytest.fixture(params=BATCHES, ids=[f"batch{b}" for b in BATCHES])
def batch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(nvprof_sqlite, "_BATCH", request.param)
    yield request.param


def _copy(tmp_path: Path) -> Path:
    """The real export with its API and kernel tables cut to 50 rows each (1-row batches of
    them are slow and are tests/test_sqlite_stream.py's subject) and its first 400 markers."""
    p = tmp_path / "x.sql"
    shutil.copyfile(shared(NV), p)
    p.chmod(0o644)
    con = sqlite3.connect(p)
    for t in ("RUNTIME", "DRIVER", "CONCURRENT_KERNEL", "KERNEL", "MEMCPY", "MEMSET"):
        con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_{t} WHERE _id_ > 50")
    con.execute(f"DELETE FROM {M} WHERE _id_ > 400")
    con.commit()
    con.close()
    return p


@pytest.mark.parametrize("path", NVPROF, ids=[p.name for p in NVPROF])
def test_real_exports(path: Path, batch: int) -> None:
    per, _ = _assert_equal(path)
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    starts = con.execute(f"SELECT count(*) FROM {M} WHERE (flags & 4) = 0").fetchone()[0]
    assert len(per["markers"]) == -(-starts // batch)  # one chunk per batch of start rows


# --- markers ----------------------------------------------------------------------------------

# (flags, timestamp, id, objectKind, objectId, name, domain) rows added to the real 1,366; the
# real timestamps are ~1.58e18, ids 180450.., names are StringTable ids 3..
T0 = 1583978808645121207


def _marker_rows(real_name: int, absent_name: int, domain: int) -> list[tuple[Any, ...]]:
    return [
        (2, T0 + 5, 9001, 2, THREAD, real_name, domain),  # range ending far later (below)
        (4, T0 + 10**12, 9001, 2, THREAD, 0, 0),
        (4, T0 + 7, 9002, 2, THREAD, 0, 0),  # end without a start
        (2, T0 + 8, 9003, 2, THREAD, real_name, 0),  # start without an end
        (1, T0 + 9, 9004, 1, PROCESS, real_name, domain),  # a mark (instantaneous)...
        (4, T0 + 11, 9004, 1, PROCESS, 0, 0),  # ...whose id an end row shares: an orphan
        (2, T0 + 12, 9005, 2, THREAD, real_name, domain),  # duplicate end ids: first row wins
        (4, T0 + 20, 9005, 2, THREAD, 0, 0),
        (4, T0 + 13, 9005, 2, THREAD, 0, 0),
        (2, T0, 9006, 2, THREAD, real_name, 0),  # the first real row's timestamp: a tie
        (4, T0 + 30, 9006, 2, THREAD, 0, 0),
        (2, T0 + 31, 9007, 2, THREAD, absent_name, domain),  # a name StringTable lacks
        (4, T0 + 32, 9007, 2, THREAD, 0, 0),
        (4, T0 + 33, 9008, 2, THREAD, absent_name, 0),  # an end naming an absent string
        (8, T0 + 34, 9009, 2, THREAD, real_name, 0),  # a sync flag: no end
        (2, T0 + 35, 9010, 3, b"\x01", real_name, 0),  # another object kind: null ids
    ]


def _with_markers(tmp_path: Path) -> tuple[Path, list[tuple[Any, ...]]]:
    p = _copy(tmp_path)
    con = sqlite3.connect(p)
    real_name = con.execute(f"SELECT name FROM {M} WHERE flags = 2 LIMIT 1").fetchone()[0]
    domain = con.execute("INSERT INTO StringTable (value) VALUES ('my-domain')").lastrowid
    absent = con.execute("SELECT max(_id_) + 100 FROM StringTable").fetchone()[0]
    rows = _marker_rows(real_name, absent, domain)
    con.executemany(
        f"INSERT INTO {M} (flags, timestamp, id, objectKind, objectId, name, domain) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    con.commit()
    con.close()
    return p, rows


def _expected_markers(path: Path, domain: bool = True) -> list[tuple[Any, ...]]:
    """(name, domain, start, end, pid, tid) by sqlite3 and Python: start and mark rows by
    (timestamp, rowid), each range's end the first end row (by rowid) of its id."""
    con = sqlite3.connect(path)
    dom = "(SELECT value FROM StringTable WHERE _id_ = s.domain AND s.domain <> 0)"
    rows = con.execute(
        f"SELECT (SELECT value FROM StringTable WHERE _id_ = s.name AND s.name <> 0), "
        f"{dom if domain else 'NULL'}, "
        "s.timestamp, "
        f"CASE WHEN s.flags & 2 THEN (SELECT e.timestamp FROM {M} e WHERE e.id = s.id "
        "AND e.flags & 4 ORDER BY e._id_ LIMIT 1) END, s.objectKind, s.objectId "
        f"FROM {M} s WHERE (s.flags & 4) = 0 ORDER BY s.timestamp, s._id_"
    ).fetchall()
    out = []
    for name, domain, start, end, kind, blob in rows:
        pid, tid = struct.unpack_from("<II", blob) if len(blob) >= 8 else (None, None)
        out.append(
            (
                name,
                domain,
                start,
                end,
                pid if kind in (1, 2) else None,
                tid if kind == 2 else None,
            )
        )
    return out


def test_markers_synthetic(tmp_path: Path, batch: int) -> None:
    p, rows = _with_markers(tmp_path)
    per, notes = _assert_equal(p)
    got = pl.concat(per["markers"])
    cols = ["name", "domain", "start_ns", "end_ns", "process_id", "thread_id"]
    assert got.select(cols).rows() == _expected_markers(p)
    # the tie with the real first row: rowid order, the real row first
    assert got.filter(pl.col("start_ns") == T0)["end_ns"].to_list()[1] == T0 + 30
    assert got.filter(pl.col("start_ns") == T0 + 5)["end_ns"].to_list() == [T0 + 10**12]
    assert got.filter(pl.col("start_ns") == T0 + 12)["end_ns"].to_list() == [T0 + 20]
    assert got.filter(pl.col("domain") == "my-domain").height == 4
    # the real export pairs all its ranges: the counts are the inserted rows' (9003, 9010; 9002
    # and 9004, 9008; the start of 9007 and the end row of 9008 name an absent string)
    assert [n.split(": ", 1)[1] for n in notes] == [
        "2 NVTX range(s) without an end row; end left null",
        "2 markers row(s) name a StringTable id that is absent; name left null",
        "3 NVTX end row(s) without a start row; dropped",
    ]


def test_markers_unclean_cells_read_whole(tmp_path: Path, batch: int) -> None:
    """A real-valued timestamp (which polars types as an integer) and a text object id: the
    table is read whole, rows and warnings as read's."""
    p, _ = _with_markers(tmp_path)
    con = sqlite3.connect(p)
    con.execute(f"UPDATE {M} SET timestamp = timestamp + 0.5 WHERE id = 9006 AND flags = 4")
    con.execute(f"UPDATE {M} SET objectId = 'text' WHERE id = 9010")
    con.commit()
    con.close()
    per, _ = _assert_equal(p)
    assert len(per["markers"]) == 1


@pytest.mark.parametrize("where", ["flags = 4", "flags = 2"])
def test_markers_bad_cell_same_error(tmp_path: Path, batch: int, where: str) -> None:
    """Text in a timestamp of an end row (never fetched by the stream's join) or of a start
    row: the stream raises read's error."""
    p, _ = _with_markers(tmp_path)
    con = sqlite3.connect(p)
    con.execute(f"UPDATE {M} SET timestamp = 'soon' WHERE id = 9005 AND {where}")
    con.commit()
    con.close()
    _assert_same_error(p)


def test_markers_without_domain_column(tmp_path: Path, batch: int) -> None:
    p, _ = _with_markers(tmp_path)
    con = sqlite3.connect(p)
    con.execute(f"ALTER TABLE {M} DROP COLUMN domain")
    con.commit()
    con.close()
    per, _ = _assert_equal(p)
    got = pl.concat(per["markers"])
    assert got["domain"].null_count() == got.height
    assert got.select("name", "start_ns", "end_ns").rows() == [
        (n, s, e) for n, _, s, e, _, _ in _expected_markers(p, domain=False)
    ]


def test_markers_null_id_read_whole(tmp_path: Path, batch: int) -> None:
    p, _ = _with_markers(tmp_path)
    con = sqlite3.connect(p)
    con.execute(f"CREATE TABLE m2 AS SELECT * FROM {M}")
    con.execute(f"DROP TABLE {M}")
    # the same table without NOT NULL, so that ids can be null
    con.execute(
        f"CREATE TABLE {M} (_id_ INTEGER PRIMARY KEY AUTOINCREMENT, flags INT, timestamp INT, "
        "id INT, objectKind INT, objectId BLOB, name INT, domain INT)"
    )
    con.execute(f"INSERT INTO {M} SELECT * FROM m2")
    con.execute("DROP TABLE m2")
    con.execute(f"UPDATE {M} SET id = NULL WHERE id IN (9002, 9003)")
    con.commit()
    con.close()
    _assert_equal(p)


# --- environment samples ----------------------------------------------------------------------


def _blob(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


# (deviceId, timestamp, environmentKind, data): the records of one sample out of table order
# and spread over batches, two devices at one time, unknown kinds, zero times, short BLOBs and
# implausible readings (4000 °C twice, in different samples)
ENV_ROWS: list[tuple[int, int, int, bytes]] = [
    (0, 2000, 2, _blob(41)),
    (1, 1000, 1, _blob(1530, 877, 3, 16, 0x4)),
    (0, 1000, 2, _blob(40)),
    (0, 2000, 1, _blob(1380, 877, 3, 16, 0x40000000)),
    (0, 1000, 3, _blob(251_500, 300_000)),
    (0, 1000, 9, _blob(1)),  # unknown kind
    (0, 0, 2, _blob(50)),  # no timestamp
    (1, 1000, 4, _blob(35)),
    (0, 1000, 1, _blob(1500, 877, 3, 16, 0)),
    (0, 3000, 2, b"\x29\x00"),  # short BLOB
    (0, 3000, 3, _blob(100_000)),  # short BLOB (power needs 8 bytes)
    (1, 2000, 2, _blob(4000)),
    (0, 4000, 2, _blob(4000)),
    (0, 1000, 4, _blob(30)),
    (0, 1000, 2, _blob(99)),  # a second temperature of one sample: the first is kept
    (1, 0, 7, b""),  # unknown kind without a timestamp
    *[(0, 5000, 2, _blob(60 + i)) for i in range(7)],  # one sample over several batches
    (0, 5000, 4, _blob(20)),
]
FIELDS = ["sm", "mem", "reasons", "temp", "power", "limit", "fan"]


def _expected_samples(rows: list[tuple[int, int, int, bytes]]) -> list[tuple[Any, ...]]:
    """gpu_samples rows computed in Python: per (device, time) the first reading of each field
    in table order, implausible temperatures (outside [-50, 200]) nulled."""
    merged: dict[tuple[int, int], dict[str, Any]] = {}
    for dev, ts, kind, data in rows:
        if kind not in (1, 2, 3, 4) or ts <= 0:
            continue
        vals = [
            struct.unpack_from("<I", data, o)[0] if len(data) >= o + 4 else None
            for o in range(0, 20, 4)
        ]
        r = merged.setdefault((dev, ts), dict.fromkeys(FIELDS))
        got: dict[str, Any] = {}
        if kind == 1:
            reasons = vals[4] if vals[4] not in (0x80000000, 0x40000000) else None
            got = {"sm": vals[0], "mem": vals[1], "reasons": reasons}
        elif kind == 2:
            got = {"temp": vals[0]}
        elif kind == 3:
            got = {
                "power": None if vals[0] is None else vals[0] / 1000,
                "limit": None if vals[1] is None else vals[1] / 1000,
            }
        else:
            got = {"fan": vals[0]}
        for k, v in got.items():
            if r[k] is None and v is not None:
                r[k] = v
    out = []
    for (dev, ts), r in sorted(merged.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        temp = r["temp"] if r["temp"] is None or -50 <= r["temp"] <= 200 else None
        as_float = [None if r[k] is None else float(r[k]) for k in ("sm", "mem")]
        out.append(
            (dev, ts, *as_float, r["reasons"], None if temp is None else float(temp))
            + tuple(None if r[k] is None else float(r[k]) for k in ("power", "limit", "fan"))
        )
    return out


def _with_env(tmp_path: Path, rows: list[tuple[int, int, int, bytes]]) -> Path:
    p = _copy(tmp_path)
    con = sqlite3.connect(p)
    con.executemany(
        f"INSERT INTO {ENV} (deviceId, timestamp, environmentKind, data) VALUES (?, ?, ?, ?)",
        rows,
    )
    con.commit()
    con.close()
    return p


def test_samples_synthetic(tmp_path: Path, batch: int) -> None:
    p = _with_env(tmp_path, ENV_ROWS)
    per, notes = _assert_equal(p)
    got = pl.concat(per["gpu_samples"])
    cols = [
        *("device_id", "timestamp_ns", "sm_clock_mhz", "mem_clock_mhz", "clock_event_reasons"),
        *("temperature_c", "power_w", "power_limit_w", "fan_pct"),
    ]
    assert got.select(cols).rows() == _expected_samples(ENV_ROWS)
    # the export's device table: device 0 has a uuid, device 1 is not in it
    assert got.filter(pl.col("device_id") == 0)["device_uuid"].null_count() == 0
    assert got.filter(pl.col("device_id") == 1)["device_uuid"].null_count() == 2
    assert [n.split(": ", 1)[1] for n in notes] == [
        "2 environment sample(s) of an unknown kind; dropped",
        "2 environment sample(s) with a short data BLOB; values left null",
        "2 environment sample(s) without a timestamp; dropped",
        "nvprof_sqlite: 2 temperature_c value(s) outside the plausible range [-50, 200] "
        "(first: 4000.0); set to null",
    ]


@pytest.mark.parametrize("kind", [1, 2, 3, 4])
def test_samples_one_kind_only(tmp_path: Path, batch: int, kind: int) -> None:
    rows = [r for r in ENV_ROWS if r[2] == kind]
    p = _with_env(tmp_path, rows)
    per, _ = _assert_equal(p)
    assert pl.concat(per["gpu_samples"]).height == len(_expected_samples(rows))


def test_samples_all_dropped(tmp_path: Path, batch: int) -> None:
    """Only unknown kinds and zero times: read's empty table, no chunk, the same warnings."""
    p = _with_env(tmp_path, [(0, 10, 9, b""), (0, 0, 1, _blob(1, 2, 3, 4, 5))])
    per, notes = _assert_equal(p)
    assert "gpu_samples" not in per
    assert len(notes) == 2


def test_samples_text_cell_same_error(tmp_path: Path, batch: int) -> None:
    p = _with_env(tmp_path, [*ENV_ROWS, (0, "soon", 2, _blob(40))])  # type: ignore[list-item]
    _assert_same_error(p)


def test_samples_real_cell_read_whole(tmp_path: Path, batch: int) -> None:
    p = _with_env(tmp_path, [*ENV_ROWS, (0, 1000.5, 2, _blob(40))])  # type: ignore[list-item]
    per, _ = _assert_equal(p)
    assert len(per["gpu_samples"]) == 1


def test_marker_stream_does_not_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clean tables never call the whole-frame functions."""

    def boom(*args: object) -> None:
        raise AssertionError("read whole")

    p = _with_env(tmp_path, ENV_ROWS)
    monkeypatch.setattr(nvprof_sqlite, "markers", boom)
    monkeypatch.setattr(nvprof_sqlite, "gpu_samples", boom)
    monkeypatch.setattr(nvprof_sqlite, "_BATCH", 2)
    per, _ = _stream(p)
    assert len(per["markers"]) > 1 and len(per["gpu_samples"]) > 1
    assert _nvprof_nvtx.MARKER_TABLE == M


def test_ingest_reads_back_equal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The synthetic markers and samples through a real `ingest` (the sink's row groups), read
    back with `Store.table`, equal `ta.read`'s tables."""
    p, _ = _with_markers(tmp_path)
    con = sqlite3.connect(p)
    con.executemany(
        f"INSERT INTO {ENV} (deviceId, timestamp, environmentKind, data) VALUES (?, ?, ?, ?)",
        ENV_ROWS,
    )
    con.commit()
    con.close()
    monkeypatch.setattr(nvprof_sqlite, "_BATCH", 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = read(p)
        ingest(p, tmp_path / "store")
    st = Store(tmp_path / "store")
    for name in ("markers", "gpu_samples"):
        assert st.table(name).equals(whole[name]), name
