"""stream_kineto_json (bounded-memory ingest of Kineto JSON): its chunks, concatenated per table,
are `read_kineto_json`'s tables (rows, order, ids) on every real Kineto trace and on synthetic
traces built to hit the hard cases (baseTimeNanoseconds after the events, several decode batches,
many sort buckets, ties of start time across batches and buckets); spill files are gone after;
bad input raises the same error through `ingest` and leaves the store as it was."""

from __future__ import annotations

import gzip
import json
import random
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput
from traceanalyze.readers import stream
from traceanalyze.readers.kineto import stream as _kineto_stream
from traceanalyze.readers.kineto.kineto_json import read_kineto_json, stream_kineto_json
from traceanalyze.store import STAGING, Store

from .conftest import shared

FILES = [
    "hta_alexnet_a100_param_benchmark_trace.json.gz",
    "hta_amd_mi250_rocm62_kineto.json.gz",
    "hta_cupti_range_profiler_a100_trace.json.gz",
    "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz",
    "hta_triton_a100_trace.json.gz",
]
RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"


@pytest.fixture
def small_buckets(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Buckets of 64 KiB and chunks of 16 KiB, so that a small trace is sorted through many
    bucket files and chunk boundaries; returns the list of bucket files written."""
    monkeypatch.setattr(_kineto_stream, "BUCKET_BYTES", 64 << 10)
    monkeypatch.setattr(_kineto_stream, "CHUNK_BYTES", 16 << 10)
    written: list[Path] = []
    init = _kineto_stream._Spill.__init__

    def spy(self: Any, path: Path, **kw: Any) -> None:
        init(self, path, **kw)
        if ".bucket" in path.name:
            written.append(path)

    monkeypatch.setattr(_kineto_stream._Spill, "__init__", spy)
    return written


def streamed_tables(path: Path, workdir: Path) -> dict[str, pl.DataFrame]:
    """`stream_kineto_json`'s chunks concatenated per table."""
    parts: dict[str, list[pl.DataFrame]] = {}
    for name, df in stream_kineto_json(path, workdir=workdir):
        parts.setdefault(name, []).append(df)
    return {k: pl.concat(v, how="diagonal_relaxed") for k, v in parts.items()}


def _assert_same(path: Path, workdir: Path) -> dict[str, pl.DataFrame]:
    whole = read_kineto_json(path)
    got = streamed_tables(path, workdir)
    for name, df in whole.items():
        if df.height == 0 or name == "sources":
            assert name == "sources" or name not in got, name
            continue
        # the reader's chunks have the columns it knows; readers.stream conforms them
        mine = schema.conform(name, got[name])
        assert mine.equals(df), f"{path.name}: {name} differs"
    assert set(got) <= {n for n, df in whole.items() if df.height}
    assert (
        got["sources"]
        .select("rank", "world_size")
        .equals(whole.sources.select("rank", "world_size"))
    )
    assert list(workdir.iterdir()) == [], "spill files left behind"
    return got


@pytest.mark.parametrize("name", FILES)
def test_stream_equals_read_real(tmp_path: Path, name: str) -> None:
    _assert_same(shared(f"kineto_json/{name}"), tmp_path)


@pytest.mark.parametrize("name", FILES)
def test_stream_equals_read_real_many_buckets(
    tmp_path: Path, name: str, small_buckets: list[Path]
) -> None:
    got = _assert_same(shared(f"kineto_json/{name}"), tmp_path)
    if "resnet" in name:  # 1.5 MB of kernels: sorted through several buckets
        assert sum(".bucket" in p.name and "kernels" in p.name for p in small_buckets) >= 4
        assert got["kernels"]["kernel_id"].to_list() == list(range(4350))


@pytest.mark.parametrize("name", FILES)
def test_readers_stream_and_ingest_equal_read(tmp_path: Path, name: str) -> None:
    path = shared(f"kineto_json/{name}")
    whole = ta.read(path)
    work = tmp_path / "work"
    work.mkdir()
    parts: dict[str, list[pl.DataFrame]] = {}
    for table, df in stream(path, workdir=work):
        parts.setdefault(table, []).append(df)
    assert list(work.iterdir()) == []
    st = Store(tmp_path / "store")
    [res] = ta.ingest(path, st)
    assert res.status == "ingested"
    for table, df in whole.items():
        if df.height == 0:
            assert table not in parts, table
            continue
        assert pl.concat(parts[table]).equals(df), table
        assert st.table(table).select(df.columns).equals(df), f"stored {table} differs"
    staging = st.root / STAGING
    assert not staging.exists() or not any(staging.rglob("*")), "spill or staging left"


def test_kernel_names_dictionary_encoded(tmp_path: Path) -> None:
    st = Store(tmp_path / "store")
    ta.ingest(shared(RESNET), st)
    [f] = st.files("kernels")
    meta = pq.ParquetFile(f).metadata
    col = meta.schema.to_arrow_schema().get_field_index("name")
    for i in range(meta.num_row_groups):
        encodings = meta.row_group(i).column(col).encodings
        assert any("DICTIONARY" in e for e in encodings), encodings


# --- synthetic traces: base time at the end, several batches, ties ------------------------------


def _ns(ts: str) -> int:
    return int((Decimal(ts) * 1000).to_integral_value(ROUND_HALF_EVEN))


def _synthetic(n: int, seed: int) -> tuple[str, int, list[dict[str, Any]]]:
    """A Kineto trace of `n` kernels and `n` cpu_ops with relative float µs times, many shared
    start times (ties, across the whole file), instants, and baseTimeNanoseconds as the last key;
    the text, the base and the events (times as their decimal text)."""
    rnd = random.Random(seed)
    base = 1_700_000_000_123_456_789
    events: list[dict[str, Any]] = []
    for i in range(n):
        # 50 distinct start times for the kernels: every one is shared by ~n/50 kernels spread
        # over the file, so ties cross decode batches and sort buckets
        ts = f"{rnd.randrange(50) * 7}.{rnd.randrange(1000):03d}" if i % 3 else f"{i % 50 * 7}"
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"kernel_{rnd.randrange(20)}" + "x" * rnd.randrange(40),
                "pid": 0,
                "tid": 7,
                "ts": ts,
                "dur": f"{rnd.randrange(1, 5000)}.{rnd.randrange(1000):03d}",
                "args": {"device": 0, "stream": 7 + i % 3, "correlation": i},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"ProfilerStep#{i // 1000}" if i % 1000 == 0 else f"aten::op{i % 17}",
                "pid": 1,
                "tid": 2,
                "ts": f"{rnd.randrange(10**6)}.5",
                "dur": "3.25",
                "args": {"External id": i},
            }
        )
        if i % 500 == 0:
            events.append({"ph": "i", "name": f"mark{i}", "pid": 1, "tid": 2, "ts": f"{i}.0"})
    body = ",\n".join(_event_text(e) for e in events)
    text = (
        '{"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 8},\n'
        f'"traceEvents": [\n{body}\n],\n"baseTimeNanoseconds": {base}}}\n'
    )
    return text, base, events


def _event_text(e: dict[str, Any]) -> str:
    # ts/dur written as JSON numbers, exactly as their decimal text
    d = {k: v for k, v in e.items() if k not in ("ts", "dur")}
    times = "".join(f', "{k}": {e[k]}' for k in ("ts", "dur") if k in e)
    return json.dumps(d)[:-1] + times + "}"


@pytest.mark.parametrize("gz", [False, True])
def test_base_time_at_end_many_batches_and_ties(
    tmp_path: Path, small_buckets: list[Path], gz: bool
) -> None:
    text, base, events = _synthetic(15_000, seed=5)
    assert len(text) > 2 * (2 << 20), "spans several 2 MiB decode batches"
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    work = tmp_path / "work"
    work.mkdir()
    got = _assert_same(path, work)
    assert len(small_buckets) > 10
    # the expected kernels, computed here: epoch ns = base + ts in ns; stable sort by start
    kernels = [e for e in events if e.get("cat") == "kernel"]
    order = sorted(range(len(kernels)), key=lambda i: _ns(kernels[i]["ts"]))
    k = got["kernels"]
    assert k["correlation_id"].to_list() == [kernels[i]["args"]["correlation"] for i in order]
    assert k["start_ns"].to_list() == [base + _ns(kernels[i]["ts"]) for i in order]
    assert k["duration_ns"].to_list() == [_ns(kernels[i]["dur"]) for i in order]
    assert k["kernel_id"].to_list() == list(range(len(kernels)))
    ties = k.group_by("start_ns").len()["len"].max()
    assert isinstance(ties, int) and ties > 100  # ties really are there
    steps = got["iterations"]
    assert steps["iteration"].to_list() == list(range(15))
    assert steps["rank"].unique().to_list() == [3]
    assert got["markers"].height == 30


def test_bad_time_same_error_and_warning(tmp_path: Path, small_buckets: list[Path]) -> None:
    text, _, _ = _synthetic(6_000, seed=9)
    # the 4000th kernel gets a ts that is no number, a later one too; one cpu_op loses its dur
    lines = text.split("\n")
    kernel_lines = [i for i, line in enumerate(lines) if '"kernel"' in line]
    for i in (kernel_lines[4000], kernel_lines[5000]):
        lines[i] = lines[i].replace('"ts": ', '"ts": "soon", "x": ')
    path = tmp_path / "bad.json"
    path.write_text("\n".join(lines))
    with pytest.raises(MalformedInput) as whole:
        read_kineto_json(path)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(MalformedInput) as streamed:
        streamed_tables(path, work)
    assert str(streamed.value) == str(whole.value)
    assert "'soon'" in str(whole.value) and "(2 such events)" in str(whole.value)
    assert streamed.value.table == "kernels"
    assert list(work.iterdir()) == []

    text, _, _ = _synthetic(3_000, seed=2)
    path.write_text(text.replace(', "dur": 3.25', "", 7))
    with pytest.warns(UserWarning) as w_read:
        read_kineto_json(path)
    with pytest.warns(UserWarning) as w_stream:
        streamed_tables(path, work)
    assert [str(w.message) for w in w_stream] == [str(w.message) for w in w_read]
    assert "7 complete event(s) without dur" in str(w_read[0].message)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("damage", ["truncated", "garbled", "truncated_gz"])
def test_bad_input_through_ingest(tmp_path: Path, damage: str) -> None:
    text = gzip.decompress(shared(RESNET).read_bytes())
    if damage == "garbled":  # a broken event in the middle of the events, past the first batch
        mid = text.index(b'"ph": "X", "cat": "cuda_runtime"', 9_000_000)
        bad = text[:mid] + b'"ph": "X", "cat": ]]' + text[mid + 32 :]
    else:
        bad = text[:9_000_017]
    path = tmp_path / ("bad.json.gz" if damage.endswith("gz") else "bad.json")
    path.write_bytes(gzip.compress(bad) if damage.endswith("gz") else bad)
    with pytest.raises(MalformedInput) as whole:
        ta.read(path)
    st = Store(tmp_path / "store")
    ta.ingest(shared("kineto_json/hta_triton_a100_trace.json.gz"), st)
    before = _snapshot(st.root)
    with pytest.raises(MalformedInput) as streamed:
        ta.ingest(path, st)
    assert str(streamed.value) == str(whole.value)
    assert streamed.value.path == str(path)
    assert _snapshot(st.root) == before, "the store changed"


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row count of every spill (bucket) read whole into memory, in order."""
    sizes: list[int] = []
    read = _kineto_stream._Spill.read

    def spy(self: Any) -> pl.DataFrame:
        df = read(self)
        sizes.append(df.height)
        return df

    monkeypatch.setattr(_kineto_stream._Spill, "read", spy)
    return sizes


def test_one_start_time_for_most_rows_is_streamed_not_held(
    tmp_path: Path, small_buckets: list[Path], held: list[int]
) -> None:
    """A trace where most kernels share one start time (a replayed or forged trace; the 4 GB
    gzip bomb of the issue is one): those rows get a bucket of their own that is streamed in
    file order, never read whole, and the result still equals the whole-file read."""
    ev = []
    for i in range(6000):  # 5,000 at one time, 1,000 before and after it
        ts = 1_700_000_000_000_000 + (500 if i < 5000 else (i % 2) * 1000)
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i % 7}",
                "pid": 0,
                "tid": 7,
                "ts": ts,
                "dur": 1 + i % 3,
                "args": {"device": 0, "stream": 7, "correlation": i},
            }
        )
    random.Random(3).shuffle(ev)
    path = tmp_path / "ties.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    work = tmp_path / "work"
    work.mkdir()
    got = _assert_same(path, work)
    at_once = got["kernels"].filter(pl.col("start_ns") == 1_700_000_000_000_500_000).height
    assert at_once == 5000
    assert held and max(held) < 2000, f"a bucket of {max(held)} rows was read whole"


def test_a_few_start_times_repeated_periodically_are_streamed(
    tmp_path: Path, small_buckets: list[Path], held: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four events repeated in a cycle (the issue's 4 GB gzip bomb is built so): each start
    time gets a bucket of its own, streamed. A sample of every stride-th row would see only one
    of the four times and hold the other three in one bucket."""
    base = 1_712_195_495_000_000
    ev = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{i % 4}",
            "pid": 0,
            "tid": 7,
            "ts": base + 37 * (i % 4),
            "dur": 3 + i % 4,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
        for i in range(20000)  # 5,000 each: several buckets' worth (a bucket is >= 1,024 rows)
    ]
    path = tmp_path / "cycle.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    # a small sample, thinned to 1 row in 4 or more: where a periodic pick would alias
    monkeypatch.setattr(_kineto_stream, "_SAMPLE_CAP", 256)
    work = tmp_path / "work"
    work.mkdir()
    got = _assert_same(path, work)
    assert got["kernels"]["start_ns"].n_unique() == 4
    assert not held or max(held) < 2000, f"a bucket of {max(held)} rows was read whole"
