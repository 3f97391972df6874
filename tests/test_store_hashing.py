"""A file not hashed yet is hashed while it is read (store/hashing.py, from
`HASH_ALONGSIDE_BYTES`, patched to 0 here so that the real small traces take that path): the
source id is the file's SHA-256, the rows are those of a hash-first ingest, a file the store
(or the same call) has already stops its read and is "unchanged", the store left as it was.
Also the pieces: `stop_reading_when`/`check_stop`/`read_settled` and `Sha256Thread` hashing in
a process of its own, or in its thread when no process can be used.

Expected digests come from `hashlib` over the file's bytes, read here.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze as ta
import traceanalyze.store.hashing as store_hashing
from traceanalyze import readers, schema
from traceanalyze.errors import MalformedInput
from traceanalyze.readers.common.core import ReadStopped, read_settled, stop_reading_when
from traceanalyze.readers.kineto import decode, split
from traceanalyze.readers.kineto import stream as kstream
from traceanalyze.readers.kineto.kineto_json import read_kineto_json, stream_kineto_json
from traceanalyze.store import STAGING, Store

from .conftest import shared

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
CUPTI = "kineto_json/hta_cupti_range_profiler_a100_trace.json.gz"
TRITON = "kineto_json/hta_triton_a100_trace.json.gz"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _listing(root: Path) -> dict[str, str]:
    """Every file and directory under `root`: a file by its content's hash."""
    return {
        str(p.relative_to(root)): _sha(p) if p.is_file() else "dir" for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def alongside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file hashed while it is read, the hash in a process of its own."""
    monkeypatch.setattr(store_hashing, "HASH_ALONGSIDE_BYTES", 0)
    monkeypatch.setattr(readers, "_HASH_IN_THREAD_BYTES", 0)
    monkeypatch.setattr(readers, "_HASH_IN_PROCESS_BYTES", 0)


@pytest.fixture
def spill_adds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The table of every batch the Kineto reader spilled (its pass 1 at work)."""
    added: list[str] = []
    add = kstream.Spiller.add

    def spy(self: Any, table: str, df: pl.DataFrame) -> None:
        added.append(table)
        add(self, table, df)

    monkeypatch.setattr(kstream.Spiller, "add", spy)
    return added


def _stored(st: Store) -> dict[str, pl.DataFrame]:
    return {t: st.table(t) for t in schema.TABLE_NAMES if st.files(t) and t != "sources"}


@pytest.mark.parametrize("rel", [RESNET, CUPTI])
def test_ingest_hashing_alongside_equals_hash_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rel: str
) -> None:
    path = shared(rel)
    monkeypatch.setattr(store_hashing, "HASH_ALONGSIDE_BYTES", 1 << 62)
    first = Store(tmp_path / "first")
    [want] = ta.ingest(path, first)
    monkeypatch.setattr(store_hashing, "HASH_ALONGSIDE_BYTES", 0)
    monkeypatch.setattr(readers, "_HASH_IN_THREAD_BYTES", 0)
    monkeypatch.setattr(readers, "_HASH_IN_PROCESS_BYTES", 0)
    st = Store(tmp_path / "along")
    [res] = ta.ingest(path, st)
    sha = _sha(path)
    assert (res.status, res.source_id) == ("ingested", sha[:16])
    assert st.table("sources")["sha256"].to_list() == [sha]
    assert res.counts == want.counts
    got, expected = _stored(st), _stored(first)
    assert set(got) == set(expected) and "api_calls" in got
    for t, df in expected.items():
        assert got[t].equals(df), t
    assert not (st.root / STAGING).exists()


def test_second_ingest_unchanged_store_untouched(
    tmp_path: Path, alongside: None, spill_adds: list[str]
) -> None:
    path = shared(RESNET)
    st = Store(tmp_path / "store")
    [first] = ta.ingest(path, st)
    assert first.status == "ingested" and spill_adds
    before = _listing(st.root)
    del spill_adds[:]
    [again] = ta.ingest(path, st)
    assert (again.status, again.source_id, again.counts) == ("unchanged", _sha(path)[:16], {})
    assert _listing(st.root) == before, "the store changed"
    assert not (st.root / STAGING).exists(), "staging left behind"
    # force reads it again and replaces it, with the same rows
    [forced] = ta.ingest(path, st, force=True)
    assert (forced.status, forced.counts) == ("replaced", first.counts)
    assert st.table("sources")["sha256"].to_list() == [_sha(path)]


@pytest.mark.parametrize(
    "rel",
    [
        "nsys_sqlite/nsysai_mock_torch_tiny_nsys2026.1.sqlite",
        "ncu_csv/roofline_ncu2026.2_rtx5070_saxpy_long.csv",
        "nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv",
    ],
)
def test_readers_that_do_not_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alongside: None, rel: str
) -> None:
    """Readers without `check_stop`: the same rows as a hash-first ingest; a known file is
    stopped at its first chunk, "unchanged", the store untouched."""
    path = shared(rel)
    st = Store(tmp_path / "along")
    [res] = ta.ingest(path, st)
    assert (res.status, res.source_id) == ("ingested", _sha(path)[:16])
    monkeypatch.setattr(store_hashing, "HASH_ALONGSIDE_BYTES", 1 << 62)
    first = Store(tmp_path / "first")
    [want] = ta.ingest(path, first)
    assert res.counts == want.counts
    got, expected = _stored(st), _stored(first)
    assert set(got) == set(expected) and got
    for t, df in expected.items():
        assert got[t].equals(df), t
    monkeypatch.setattr(store_hashing, "HASH_ALONGSIDE_BYTES", 0)
    before = _listing(st.root)
    [again] = ta.ingest(path, st)
    assert (again.status, again.counts) == ("unchanged", {})
    assert _listing(st.root) == before


def test_known_file_stops_its_read_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spill_adds: list[str]
) -> None:
    """The hash done before the first piece (a file under `_HASH_IN_THREAD_BYTES` is hashed at
    once): the reader's first `check_stop` ends the read, nothing is decoded."""
    monkeypatch.setattr(store_hashing, "HASH_ALONGSIDE_BYTES", 0)
    path = tmp_path / "resnet.json"
    path.write_bytes(gzip.decompress(shared(RESNET).read_bytes()))
    monkeypatch.setattr(readers, "_HASH_IN_THREAD_BYTES", path.stat().st_size + 1)
    st = Store(tmp_path / "store")
    ta.ingest(path, st)
    before = _listing(st.root)
    del spill_adds[:]
    [res] = ta.ingest(path, st)
    assert res.status == "unchanged"
    assert spill_adds == [], "the read went on although the file was known"
    assert _listing(st.root) == before


def test_same_content_twice_in_one_call(tmp_path: Path, alongside: None) -> None:
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copyfile(shared(TRITON), a)
    shutil.copyfile(shared(TRITON), b)
    st = Store(tmp_path / "store")
    res = ta.ingest([a, b], st)
    sid = _sha(a)[:16]
    assert [(r.path, r.status, r.source_id) for r in res] == [
        (str(a), "ingested", sid),
        (str(b), "unchanged", sid),
    ]
    assert res[1].counts == {}, "the second copy was read, not skipped"
    assert st.table("sources")["sha256"].to_list() == [_sha(a)]
    assert st.table("kernels").height == res[0].counts["kernels"] == 1
    assert not (st.root / STAGING).exists()


def test_split_read_while_hashing(
    tmp_path: Path, alongside: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both mechanisms at once (what a big plain trace gets): the stored tables are the
    one-process read's."""
    monkeypatch.setattr(split, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(split, "default_workers", lambda: 2)
    path = tmp_path / "cupti.json"
    path.write_bytes(gzip.decompress(shared(CUPTI).read_bytes()))
    st = Store(tmp_path / "store")
    [res] = ta.ingest(path, st)
    assert res.status == "ingested"
    whole = ta.read(path)
    for t, df in whole.items():
        if t != "sources" and df.height:
            assert st.table(t).select(df.columns).equals(df), t
    assert st.table("sources")["sha256"].to_list() == [_sha(path)]
    assert not (st.root / STAGING).exists()


def test_bad_file_while_hashing_same_error_store_untouched(
    tmp_path: Path, alongside: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken event: the reader's error, as `ta.read` gives it; nothing staged or committed,
    no hashing thread or process left."""
    procs: list[subprocess.Popen[bytes]] = []
    real = subprocess.Popen

    def spy(argv: list[str], **kw: Any) -> Any:
        procs.append(real(argv, **kw))
        return procs[-1]

    monkeypatch.setattr(subprocess, "Popen", spy)
    text = gzip.decompress(shared(RESNET).read_bytes())
    mid = text.index(b'"ph": "X", "cat": "cuda_runtime"', 9_000_000)
    path = tmp_path / "bad.json"
    path.write_bytes(text[:mid] + b'"ph": "X", "cat": ]]' + text[mid + 32 :])
    with pytest.raises(MalformedInput) as whole:
        ta.read(path)
    st = Store(tmp_path / "store")
    ta.ingest(shared(TRITON), st)
    before = _listing(st.root)
    del procs[:]
    with pytest.raises(MalformedInput) as ingested:
        ta.ingest(path, st)
    assert str(ingested.value) == str(whole.value)
    assert _listing(st.root) == before
    assert procs and all(p.poll() is not None for p in procs)
    assert not [t for t in threading.enumerate() if t.name == "traceanalyze-sha256"]


# --- stop_reading_when / check_stop / read_settled ---------------------------------------------


def test_stop_reading_when_true_stops_the_kineto_reader(tmp_path: Path) -> None:
    path = shared(TRITON)
    work = tmp_path / "work"
    work.mkdir()
    with stop_reading_when(lambda: True), pytest.raises(ReadStopped):
        list(stream_kineto_json(path, workdir=work))
    with stop_reading_when(lambda: True), pytest.raises(ReadStopped):
        list(readers.stream(path, workdir=work))  # not turned into a reader error
    assert list(work.iterdir()) == []
    # outside the block, and with a condition that stays false, it reads to the end
    assert len(list(stream_kineto_json(path, workdir=work))) > 0
    with stop_reading_when(lambda: False):
        assert len(list(stream_kineto_json(path, workdir=work))) > 0


def test_stop_in_the_middle_of_a_split_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 MiB pieces, the condition true at the 4th: the read stops there; this process's spills,
    and the helper's if it had started, are removed."""
    monkeypatch.setattr(decode, "_CHUNK", 1 << 20)
    monkeypatch.setattr(split, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(split, "default_workers", lambda: 2)
    path = tmp_path / "resnet.json"
    path.write_bytes(gzip.decompress(shared(RESNET).read_bytes()))
    work = tmp_path / "work"
    work.mkdir()
    asked = itertools.count(1)
    calls: list[int] = []

    def stop() -> bool:
        calls.append(next(asked))
        return calls[-1] >= 4

    with stop_reading_when(stop), pytest.raises(ReadStopped):
        list(stream_kineto_json(path, workdir=work))
    assert calls == [1, 2, 3, 4]
    assert list(work.iterdir()) == []


def test_read_settled() -> None:
    assert read_settled()
    with stop_reading_when(lambda: False, settled=lambda: False):
        assert not read_settled()
        with stop_reading_when(lambda: False):  # the innermost block decides
            assert read_settled()
        assert not read_settled()
    with stop_reading_when(lambda: False):
        assert read_settled()
    assert read_settled()


def test_unsettled_read_starts_no_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the read may still be stopped (the hash not in), no helper is started; the split
    read then goes on in this process and gives the same tables."""
    monkeypatch.setattr(split, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(split, "default_workers", lambda: 2)
    started: list[int] = []
    monkeypatch.setattr(split, "start_helper", lambda p, at, w: started.append(at))
    path = tmp_path / "cupti.json"
    path.write_bytes(gzip.decompress(shared(CUPTI).read_bytes()))
    work = tmp_path / "work"
    work.mkdir()
    with stop_reading_when(lambda: False, settled=lambda: False):
        got: dict[str, list[pl.DataFrame]] = {}
        for name, df in stream_kineto_json(path, workdir=work):
            got.setdefault(name, []).append(df)
    assert started == []
    whole = read_kineto_json(path)
    for t, df in whole.items():
        if t != "sources" and df.height:
            assert schema.conform(t, pl.concat(got[t])).equals(df), t
    with stop_reading_when(lambda: False, settled=lambda: True):
        list(stream_kineto_json(path, workdir=work))
    assert len(started) == 1


# --- Sha256Thread: a process of its own, or the thread --------------------------------------


@pytest.fixture
def popen_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = subprocess.Popen

    def spy(argv: list[str], **kw: Any) -> Any:
        calls.append(argv)
        return real(argv, **kw)

    monkeypatch.setattr(subprocess, "Popen", spy)
    return calls


@pytest.mark.parametrize("rel", [RESNET, TRITON])
def test_sha256_in_a_process(
    rel: str, alongside: None, popen_calls: list[list[str]], tmp_path: Path
) -> None:
    path = shared(rel)
    h = readers.Sha256Thread(path)
    assert h.result() == _sha(path)
    assert h.done()
    assert [c[-1] for c in popen_calls] == [str(path)]
    # an empty file too
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert readers.Sha256Thread(empty).result() == hashlib.sha256(b"").hexdigest()


def test_sha256_when_no_process_starts(alongside: None, monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[list[str]] = []

    def boom(argv: list[str], **kw: Any) -> Any:
        tried.append(argv)
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", boom)
    path = shared(RESNET)
    assert readers.Sha256Thread(path).result() == _sha(path)
    assert len(tried) == 1


@pytest.mark.parametrize("code", ["import sys; sys.exit(3)", "print('0' * 63)"])
def test_sha256_when_the_process_fails(
    alongside: None, monkeypatch: pytest.MonkeyPatch, popen_calls: list[list[str]], code: str
) -> None:
    """The process exits non-zero, or prints no digest: the thread hashes."""
    monkeypatch.setattr(readers, "_HASH_CODE", code)
    path = shared(CUPTI)
    assert readers.Sha256Thread(path).result() == _sha(path)
    assert len(popen_calls) == 1


def test_hash_process_without_the_safe_path_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.10 has no `-P`: the hashing process then runs in the standard library's
    directory, so a `hashlib.py` in the caller's directory is not the one it imports, and a
    relative path still names the file."""
    monkeypatch.setattr(readers, "SAFE_PATH", [])
    monkeypatch.setattr(readers, "_HASH_IN_THREAD_BYTES", 0)
    monkeypatch.setattr(readers, "_HASH_IN_PROCESS_BYTES", 0)
    data = tmp_path / "trace.bin"
    data.write_bytes(b"0123456789" * 100_000)
    (tmp_path / "hashlib.py").write_text("raise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    used: list[list[str]] = []
    real = subprocess.Popen

    def spy(argv: list[str], *a: Any, **k: Any) -> Any:
        used.append(list(argv))
        return real(argv, *a, **k)

    def no_fallback(*a: Any) -> str:
        raise AssertionError("hashed by the thread: the hashing process failed")

    monkeypatch.setattr(subprocess, "Popen", spy)
    monkeypatch.setattr(readers, "_sha256_of", no_fallback)
    h = readers.Sha256Thread("trace.bin")
    assert h.result() == hashlib.sha256(data.read_bytes()).hexdigest()
    assert used and "-P" not in used[0]
