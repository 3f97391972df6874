"""The Parquet store: layout, lazy scans, DuckDB interop, atomic ingest, skip-unchanged."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import polars as pl
import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput, StoreError, TraceanalyzeError

LOG_A = "Iteration Duration 0 0 : 0.5\nIteration Duration 1 0 : 0.25\n"
LOG_B = (
    "Iteration Duration 0 1 : 0.125\nIteration Duration 1 1 : 0.0625\nIteration Duration 2 1 : 1\n"
)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root with its content hash ('dir' for directories)."""
    if not root.exists():
        return {}
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_layout_is_hive_partitioned_by_source(tmp_path: Path, write) -> None:
    a = write("a.txt", LOG_A)
    [res] = ta.ingest([a], tmp_path / "st")
    sid = hashlib.sha256(LOG_A.encode()).hexdigest()[:16]
    assert res.source_id == sid and res.status == "ingested"
    [part] = (tmp_path / "st" / "iterations" / f"source_id={sid}").glob("part-*.parquet")
    # the manifest lists exactly that file for the table (docs/store.md)
    assert ta.Store(tmp_path / "st").files("iterations") == [part]
    # source_id lives in the directory name, not in the file (hive convention)
    assert "source_id" not in pl.read_parquet(part, hive_partitioning=False).columns
    # Empty tables of a source write no files; the sources row always exists.
    assert (tmp_path / "st" / "sources" / f"source_id={sid}").is_dir()
    assert not (tmp_path / "st" / "kernels").exists()


def test_scan_and_table_over_several_sources(tmp_path: Path, write) -> None:
    st = tmp_path / "st"
    ta.ingest([write("a.txt", LOG_A), write("b.txt", LOG_B)], st)
    store = ta.Store(st)
    it = store.table("iterations").sort("source_id", "device_id", "iteration")
    assert it.columns == schema.table("iterations").names
    assert it.height == 5
    assert it["duration_ns"].sum() == int((0.5 + 0.25 + 0.125 + 0.0625 + 1) * 1e9)
    assert len(store.source_ids()) == 2
    lazy = store.scan("iterations")
    assert isinstance(lazy, pl.LazyFrame)
    assert lazy.filter(pl.col("device_id") == 1).collect().height == 3
    # A table no source has is empty with the full schema.
    k = store.table("kernels")
    assert k.height == 0 and k.columns == schema.table("kernels").names


def test_duckdb_and_polars_read_the_store_as_is(tmp_path: Path, write) -> None:
    st = tmp_path / "st"
    ta.ingest([write("a.txt", LOG_A), write("b.txt", LOG_B)], st)
    rows = duckdb.sql(
        f"SELECT source_id, count(*) AS n, sum(duration_ns) AS d FROM read_parquet("
        f"'{st}/iterations/*/*.parquet', hive_partitioning=true) GROUP BY 1 ORDER BY 1"
    ).fetchall()
    sid_a = hashlib.sha256(LOG_A.encode()).hexdigest()[:16]
    sid_b = hashlib.sha256(LOG_B.encode()).hexdigest()[:16]
    expected = sorted([(sid_a, 2, 750_000_000), (sid_b, 3, 1_187_500_000)])
    assert [(r[0], r[1], int(r[2])) for r in rows] == expected
    pl_rows = (
        pl.scan_parquet(f"{st}/iterations/**/*.parquet", hive_partitioning=True)
        .group_by("source_id")
        .agg(pl.len())
        .sort("source_id")
        .collect()
    )
    assert pl_rows.rows() == [(s, n) for s, n, _ in expected]


def test_reingest_unchanged_does_nothing_and_says_so(tmp_path: Path, write) -> None:
    st = tmp_path / "st"
    a = write("a.txt", LOG_A)
    ta.ingest([a], st)
    before = snapshot(st)
    [res] = ta.ingest([a], st)
    assert res.status == "unchanged"
    assert "unchanged" in res.message() and res.source_id in res.message()
    assert snapshot(st) == before


def test_same_bytes_under_another_name_is_the_same_source(tmp_path: Path, write) -> None:
    st = tmp_path / "st"
    ta.ingest([write("a.txt", LOG_A)], st)
    [res] = ta.ingest([write("copy.txt", LOG_A)], st)
    assert res.status == "unchanged"


def test_force_replaces_a_source(tmp_path: Path, write) -> None:
    st = tmp_path / "st"
    a = write("a.txt", LOG_A)
    ta.ingest([a], st)
    [res] = ta.ingest([a], st, force=True)
    assert res.status == "replaced"
    assert ta.Store(st).table("iterations").height == 2
    # only the store lock stays; the replaced file waits out the readers' grace period
    assert [p.name for p in st.iterdir() if p.name.startswith(".")] == [".lock"]


@pytest.mark.parametrize("fresh", [True, False])
def test_failed_ingest_leaves_store_byte_identical(tmp_path: Path, write, fresh: bool) -> None:
    st = tmp_path / "st"
    if not fresh:
        ta.ingest([write("a.txt", LOG_A)], st)
    before = snapshot(st)
    good = write("b.txt", LOG_B)
    bad = write("bad.txt", "Iteration Duration x\n")  # sniffs as iterlog, has no record
    with pytest.raises(MalformedInput) as e:
        ta.ingest([good, bad], st)
    assert str(bad) in str(e.value)
    assert snapshot(st) == before
    assert st.exists() is (not fresh)


def test_missing_file_is_an_error_and_changes_nothing(tmp_path: Path) -> None:
    with pytest.raises(TraceanalyzeError, match="no such file"):
        ta.ingest([tmp_path / "nope.csv"], tmp_path / "st")
    assert not (tmp_path / "st").exists()


def test_a_directory_that_is_not_a_store_is_refused(tmp_path: Path, write) -> None:
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "precious.txt").write_text("keep me")
    with pytest.raises(StoreError, match="not a traceanalyze store"):
        ta.ingest([write("a.txt", LOG_A)], tmp_path / "st")
    assert (tmp_path / "st" / "precious.txt").read_text() == "keep me"


def test_unknown_table_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unknown table"):
        ta.Store(tmp_path).scan("nope")


def test_store_tables_round_trip_equals_read(tmp_path: Path, write) -> None:
    a = write("a.txt", LOG_A)
    direct = ta.read(a)
    ta.ingest([a], tmp_path / "st")
    back = ta.Store(tmp_path / "st").tables()
    for name, df in direct.items():
        assert back[name].sort(back[name].columns).equals(df.sort(df.columns)), name


def test_files_from_an_older_schema_read_missing_columns_as_null(tmp_path: Path, write) -> None:
    st = tmp_path / "st"
    ta.ingest([write("a.txt", LOG_A)], st)
    [part] = (st / "iterations").glob("source_id=*/part-*.parquet")
    old = pl.read_parquet(part, hive_partitioning=False).drop("images_per_s", "batch_size")
    old.write_parquet(part)  # as an earlier schema version would have written it
    it = ta.Store(st).table("iterations")
    assert it.columns == schema.table("iterations").names
    assert it.height == 2 and it["images_per_s"].null_count() == 2


def test_progress_callbacks_fire_as_each_file_is_staged(tmp_path: Path, write) -> None:
    """on_result comes right after each file is parsed and staged, before the next file is
    read and before anything is committed (a progress bar advances per file)."""
    st = tmp_path / "st"
    a, b = write("a.txt", LOG_A), write("b.txt", LOG_B)
    ta.ingest([a], st)  # a is then "unchanged": its result comes without a read
    c = write("c.txt", "Iteration Duration 0 2 : 2\n")
    events: list[tuple[str, str, bool]] = []
    store = ta.Store(st)

    def on_start(p: str) -> None:
        events.append(("start", Path(p).name, False))

    def on_result(r: ta.IngestResult) -> None:
        events.append(("result", Path(r.path).name, store.has_source(r.source_id)))

    ta.ingest([a, b, c], st, on_start=on_start, on_result=on_result)
    assert events == [
        ("result", "a.txt", True),  # unchanged, was already in the store
        ("start", "b.txt", False),
        ("result", "b.txt", False),  # staged, not yet committed
        ("start", "c.txt", False),
        ("result", "c.txt", False),
    ]
    sid_c = hashlib.sha256(c.read_bytes()).hexdigest()[:16]
    assert store.has_source(sid_c)


@pytest.mark.parametrize("as_path", [False, True])
def test_ingest_takes_a_single_path(tmp_path: Path, write, as_path: bool) -> None:
    a = write("a.txt", LOG_A)
    [res] = ta.ingest(a if as_path else str(a), tmp_path / "st")
    assert res.status == "ingested" and res.path == str(a)
    assert ta.Store(tmp_path / "st").table("iterations").height == 2


def test_an_option_no_reader_of_the_files_takes_is_refused_before_reading(
    tmp_path: Path, write
) -> None:
    from traceanalyze.errors import UnsupportedOption

    st = tmp_path / "st"
    with pytest.raises(
        UnsupportedOption,
        match=r"^option 'tz' is not taken by the iterlog reader of these files; "
        r"it applies to smi_csv$",
    ):
        ta.ingest([write("a.txt", LOG_A)], st, tz="UTC")
    assert not st.exists()
    with pytest.raises(
        UnsupportedOption,
        match=r"^option 'colour' is taken by no reader \(reader options: engine, fields, "
        r"interval_ms, system, tz, workers\)$",
    ):
        ta.ingest([write("a.txt", LOG_A)], st, colour="red")


def test_options_go_only_to_the_readers_that_take_them(tmp_path: Path, write) -> None:
    # an nvidia-smi log (local wall-clock stamps) and an iteration log in one ingest with tz=
    smi = write(
        "smi.csv", "timestamp, index, power.draw [W]\n2024/05/01 12:00:00.000, 0, 70.50 W\n"
    )
    [r_smi, r_it] = ta.ingest([smi, write("a.txt", LOG_A)], tmp_path / "st", tz="UTC")
    assert (r_smi.format, r_it.format) == ("smi_csv", "iterlog")
    t = ta.Store(tmp_path / "st").tables([r_smi.source_id])
    assert t.sources["timezone"].to_list() == ["UTC"]
    # 2024-05-01 12:00 UTC, from the calendar: 19844 days after 1970-01-01, plus 12 h
    assert t.gpu_samples["timestamp_ns"].to_list() == [(19844 * 86400 + 12 * 3600) * 10**9]


def test_all_digit_source_id_stays_a_string(tmp_path: Path, write) -> None:
    """Hive readers infer an all-digit partition value as an integer (0123… would lose its
    leading zero); the store pins source_id to String."""
    sid = "0123456789012345"
    t = ta.read(write("a.txt", LOG_A)).with_source_id(sid)
    store = ta.Store(tmp_path / "st")
    store.write(t)
    assert (tmp_path / "st" / "iterations" / f"source_id={sid}").is_dir()
    for name in ("iterations", "sources"):
        got = store.scan(name).collect()
        assert got.schema["source_id"] == pl.String
        assert got["source_id"].unique().to_list() == [sid]
    assert store.source_ids() == [sid] and store.has_source(sid)
    assert store.tables([sid]).iterations.height == 2
    # the recipe for users' own scans (README): pin the hive column's type the same way
    lf = pl.scan_parquet(
        f"{tmp_path / 'st'}/iterations/**/*.parquet",
        hive_partitioning=True,
        hive_schema={"source_id": pl.String},
    )
    assert lf.collect()["source_id"].unique().to_list() == [sid]
    # without it, polars infers Int64 and the leading zero is gone
    bare = pl.scan_parquet(f"{tmp_path / 'st'}/iterations/**/*.parquet", hive_partitioning=True)
    assert bare.collect()["source_id"].unique().to_list() == [int(sid)]
    rows = duckdb.sql(
        f"SELECT DISTINCT source_id, typeof(source_id) FROM read_parquet("
        f"'{tmp_path / 'st'}/iterations/*/*.parquet', hive_partitioning=true, "
        "hive_types={'source_id': 'VARCHAR'})"
    ).fetchall()
    assert rows == [(sid, "VARCHAR")]


def test_ingest_of_nothing_and_of_an_unknown_format(tmp_path: Path, write) -> None:
    from traceanalyze.errors import UnknownFormat

    assert ta.ingest([], tmp_path / "st", tz="UTC") == []
    with pytest.raises(UnknownFormat, match=r"^unknown format 'bogus' \(formats: iterlog, "):
        ta.ingest(write("a.txt", LOG_A), tmp_path / "st", format="bogus")
    assert not (tmp_path / "st").exists()
