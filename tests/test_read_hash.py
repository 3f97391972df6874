"""`ta.read` hashes a large file in a thread while its reader reads it (readers/__init__.py
`Sha256Thread`): the `sources.sha256` is the file's, whichever way it was hashed, and a read that
fails leaves no hashing thread behind.

Expected digests come from `hashlib` over the file's bytes, read here independently.
"""

from __future__ import annotations

import gzip
import hashlib
import threading
from pathlib import Path

import pytest
from conftest import shared

import traceanalyze as ta
from traceanalyze import readers
from traceanalyze.errors import TraceanalyzeError

NSYS = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
KINETO = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"


def _hashing_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "traceanalyze-sha256"]


@pytest.mark.parametrize("rel", [NSYS, KINETO])
@pytest.mark.parametrize("threshold", [0, 1 << 62])  # every file in a thread / none
def test_sources_sha256_is_the_files(
    rel: str, threshold: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = shared(rel)
    monkeypatch.setattr(readers, "_HASH_IN_THREAD_BYTES", threshold)
    want = hashlib.sha256(p.read_bytes()).hexdigest()
    src = ta.read(p).sources.row(0, named=True)
    assert src["sha256"] == want
    assert src["source_id"] == want[:16]
    assert readers.file_sha256(p) == want
    assert not _hashing_threads()


def test_a_failed_read_stops_its_hashing_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Kineto trace cut inside its events: the reader fails while the thread may still hash.
    text = gzip.decompress(shared(KINETO).read_bytes())
    bad = tmp_path / "cut.json"
    bad.write_bytes(text[: len(text) // 2])
    monkeypatch.setattr(readers, "_HASH_IN_THREAD_BYTES", 0)
    with pytest.raises(TraceanalyzeError) as e:
        ta.read(bad)
    assert str(bad) in str(e.value)
    assert not _hashing_threads()


def test_a_given_sha256_is_not_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    p = shared(KINETO)
    given = "ab" * 32

    def boom(*a: object, **k: object) -> str:
        raise AssertionError("hashed although sha256 was given")

    monkeypatch.setattr(readers, "_sha256_of", boom)
    assert ta.read(p, sha256=given).sources["sha256"][0] == given


def test_empty_and_fifo_like_files_hash_like_hashlib(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert readers.file_sha256(empty) == hashlib.sha256(b"").hexdigest()
    # a file that reports size 0 but has bytes (/proc, whose content here does not change)
    proc = Path("/proc/version")
    if proc.exists():
        assert proc.stat().st_size == 0
        assert readers.file_sha256(proc) == hashlib.sha256(proc.read_bytes()).hexdigest()
