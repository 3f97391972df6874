"""Contract of streaming ingest over every reader and every real file: `readers.stream` chunks,
concatenated per table, equal `read()` (rows, order, ids); `ingest` writes them as Parquet row
groups that read back equal; dictionary-encoded strings; nothing left in the staging."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.readers import stream
from traceanalyze.store import STAGING, Store, sink

from .test_contract import REAL

IDS = [p.name for p, _ in REAL]


def _concat(path: Path, slug: str, workdir: Path) -> dict[str, pl.DataFrame]:
    parts: dict[str, list[pl.DataFrame]] = {}
    for name, df in stream(path, format=slug, workdir=workdir):
        assert set(df.columns) == set(schema.table(name).polars_schema), name
        parts.setdefault(name, []).append(df)
    return {k: pl.concat(v) for k, v in parts.items()}


@pytest.mark.parametrize("path,slug", REAL, ids=IDS)
def test_stream_equals_read(tmp_path: Path, path: Path, slug: str) -> None:
    whole = ta.read(path, format=slug)
    work = tmp_path / "work"
    work.mkdir()
    got = _concat(path, slug, work)
    assert list(got)[-1] == "sources", "the sources row comes last"
    for name, df in whole.items():
        if df.height == 0:
            assert got.get(name) is None or got[name].height == 0, name
            continue
        assert got[name].equals(df), f"{path.name}: table {name} differs from read()"


@pytest.mark.parametrize("path,slug", REAL, ids=IDS)
def test_ingest_reads_back_equal(tmp_path: Path, path: Path, slug: str) -> None:
    whole = ta.read(path, format=slug)
    st = Store(tmp_path / "store")
    [res] = ta.ingest(path, st, format=slug)
    assert res.status == "ingested"
    for name, df in whole.items():
        assert res.counts[name] == df.height, name
        if df.height == 0:
            continue
        back = st.table(name).select(df.columns)
        assert back.equals(df), f"{path.name}: stored {name} differs from read()"
    assert not (st.root / STAGING).exists() or not any((st.root / STAGING).iterdir())


def test_row_groups_are_bounded_and_strings_dictionary_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table of more rows than a row group is written as several row groups as it comes, and
    its string columns (kernel names) as Parquet dictionary pages."""
    [(path, slug)] = [(p, s) for p, s in REAL if p.name.startswith("hta_resnet50_v100")][:1] or [
        (None, None)
    ]
    if path is None:
        pytest.skip("../shared/traces is absent")
    monkeypatch.setattr(sink, "ROW_GROUP_ROWS", 1000)
    kernels = ta.read(path, format=slug).kernels
    assert kernels.height > 3000  # several row groups' worth
    st = Store(tmp_path / "store")
    ta.ingest(path, st, format=slug)
    [f] = st.files("kernels")
    meta = pq.ParquetFile(f).metadata
    assert meta.num_rows == kernels.height
    assert meta.num_row_groups >= kernels.height // 1000
    assert all(meta.row_group(i).num_rows <= 1000 for i in range(meta.num_row_groups))
    col = meta.schema.names.index("name")
    for i in range(meta.num_row_groups):
        enc = meta.row_group(i).column(col).encodings
        assert any("DICTIONARY" in e for e in enc), enc


def test_a_failing_stream_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that fails after a row group was written: nothing committed, staging gone."""
    monkeypatch.setattr(sink, "ROW_GROUP_ROWS", 1)
    st = Store(tmp_path / "store")
    df = schema.empty("kernels").clear(n=2)
    seen: list[Path] = []

    def produce(_work: Path):  # type: ignore[no-untyped-def]
        assert _work.is_dir()
        yield "kernels", df
        seen.extend(st.root.rglob("*.parquet"))
        raise ta.errors.MalformedInput("bad row", path="x.json", line=7)

    with pytest.raises(ta.errors.MalformedInput):
        st.stage_stream("0" * 16, produce)
    assert seen, "the first row group was on disk before the failure"
    assert not st.root.exists() or not any(
        p for p in st.root.rglob("*") if p.is_file() and p.suffix == ".parquet"
    )


def test_the_big_formats_stream() -> None:
    """The formats whose files grow to GBs bound their memory in ingest (issue: scale); the
    small ones (ncu CSV, iteration logs) are read whole."""
    from traceanalyze.readers import READERS

    big = {"kineto_json", "nsys_sqlite", "nsys_rep", "nvprof_sqlite", "nvprof_csv", "smi_csv"}
    big |= {"rocprofv3_json", "rpd"}  # ROCm traces (issue 36)
    assert {s for s, r in READERS.items() if r.streams} == big
