"""Readers pinned: a `Dataset` (or `Store.snapshot()`) keeps reading the version it opened while
another process replaces and removes sources and collects garbage, because its lease in
`_leases/` keeps that version's files; a dead reader's lease is ignored."""

from __future__ import annotations

import fcntl
import gc
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import traceanalyze as ta
from traceanalyze.store import KILL_ENV, Store

from .test_store_security import digest

ROOT = Path(__file__).resolve().parents[1]
LEASES = "_leases"

# A reader process: opens a Dataset on the store, reads, says so, waits for a line on stdin,
# reads again (argv: store).
READER = r"""
import json, sys, traceanalyze as ta
ds = ta.open(store=sys.argv[1])
def read():
    its = ds.scan("iterations").collect().sort(["source_id", "iteration", "rank"])
    return {"sources": ds.source_ids(), "durations": its["duration_ns"].to_list(),
            "files": [str(f) for f in ds._store.files("iterations")]}
print(json.dumps(read()), flush=True)
sys.stdin.readline()
print(json.dumps(read()), flush=True)
"""

# Another process: every source replaced by one with doubled durations, one source removed,
# then garbage collected with no grace period (argv: store).
REPLACER = r"""
import sys, polars as pl, traceanalyze as ta
from traceanalyze import schema
from traceanalyze.tables import Tables
st = ta.Store(sys.argv[1])
for sid in st.source_ids():
    t = st.tables([sid])
    frames = {n: t[n] for n in schema.TABLE_NAMES}
    frames["iterations"] = frames["iterations"].with_columns(pl.col("duration_ns") * 2)
    st.write(Tables.build(**frames), replace_existing=True)
st.remove(st.source_ids()[0])
st.vacuum(grace_s=0)
print(len(st.source_ids()))
"""


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    e["PYTHONPATH"] = str(ROOT)
    return e


def make_store(tmp_path: Path, n: int = 3) -> tuple[Path, dict[str, list[int]]]:
    """A store of n iteration logs; the durations (ns) each log holds, read from its text."""
    st = tmp_path / "st"
    want: dict[str, list[int]] = {}
    for i in range(n):
        p = tmp_path / f"{i}.txt"
        lines = [f"Iteration Duration {k} {i} : 0.{i + 1}{k}" for k in range(3)]
        p.write_text("\n".join(lines) + "\n")
        ta.ingest([p], st)
        want[f"{i}"] = [int(round(float(f"0.{i + 1}{k}") * 1e9)) for k in range(3)]
    return st, want


def leases(st: Path) -> list[Path]:
    d = st / LEASES
    return sorted(d.glob("*.lease")) if d.is_dir() else []


def test_a_reader_holding_a_dataset_reads_its_version_after_another_process_replaced_everything(
    tmp_path: Path,
) -> None:
    st, want = make_store(tmp_path)
    all_durations = sorted(d for ds in want.values() for d in ds)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(st)],
        env=env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdin is not None
    first = json.loads(reader.stdout.readline())
    assert sorted(first["durations"]) == all_durations and len(first["sources"]) == 3
    [lease] = leases(st)  # the reader's, naming the version it read
    assert lease.read_text() == f"{_version(st)}\n"

    r = subprocess.run(
        [sys.executable, "-c", REPLACER, str(st)], env=env(), capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.strip() == "2", r.stderr
    # the other process replaced every source and collected garbage with no grace period:
    # the files of the reader's version are all still there
    assert all(Path(f).is_file() for f in first["files"])
    assert sorted(Store(st).table("iterations")["duration_ns"].to_list()) != all_durations

    out, err = reader.communicate("go\n", timeout=120)
    assert reader.returncode == 0, err
    assert json.loads(out) == first  # the same version, every file readable
    # once the reader is gone, the next collection deletes those files
    assert leases(st) == []
    Store(st).vacuum(grace_s=0)
    assert not any(Path(f).exists() for f in first["files"])


def _version(st: Path) -> int:
    from . import _store_state

    return int(_store_state.committed(st)["version"])


def test_a_killed_readers_lease_is_ignored(tmp_path: Path) -> None:
    st, _ = make_store(tmp_path, 2)
    code = (
        "import os, signal, sys, traceanalyze as ta\n"
        "ds = ta.open(store=sys.argv[1])\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(st)], env=env())
    assert r.returncode == -signal.SIGKILL
    assert len(leases(st)) == 1  # left behind, its lock released by the kernel
    old = Store(st).files("iterations")
    for sid in Store(st).source_ids():
        Store(st).remove(sid)
    Store(st).vacuum(grace_s=0)
    assert not any(f.exists() for f in old) and leases(st) == []


def test_a_snapshot_pins_its_files_until_it_is_dropped(tmp_path: Path) -> None:
    st, want = make_store(tmp_path, 2)
    pinned = Store(st).snapshot()
    files = pinned.files("iterations")
    for sid in Store(st).source_ids():
        Store(st).remove(sid)
    Store(st).vacuum(grace_s=0)
    assert Store(st).source_ids() == [] and all(f.is_file() for f in files)
    got = sorted(pinned.table("iterations")["duration_ns"].to_list())
    assert got == sorted(d for ds in want.values() for d in ds)
    del pinned
    gc.collect()
    assert leases(st) == []
    Store(st).vacuum(grace_s=0)
    assert not any(f.exists() for f in files)


def test_a_live_lease_without_a_version_pins_everything(tmp_path: Path) -> None:
    """A reader between taking its lease and writing its version: nothing is collected."""
    st, _ = make_store(tmp_path, 1)
    (st / LEASES).mkdir(exist_ok=True)
    fd = os.open(st / LEASES / f"{'c' * 32}.lease", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        files = Store(st).files("iterations")
        Store(st).remove(Store(st).source_ids()[0])
        Store(st).vacuum(grace_s=0)
        assert all(f.is_file() for f in files)
    finally:
        os.close(fd)
    Store(st).vacuum(grace_s=0)
    assert not any(f.exists() for f in files) and leases(st) == []


def test_a_lease_that_is_a_link_is_removed_and_its_target_kept(tmp_path: Path) -> None:
    st, _ = make_store(tmp_path, 1)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("precious\n")
    before = digest(victim)
    (st / LEASES).mkdir(exist_ok=True)
    link = st / LEASES / f"{'d' * 32}.lease"
    link.symlink_to(victim / "notes.txt")
    Store(st).remove(Store(st).source_ids()[0])
    Store(st).vacuum(grace_s=0)
    assert not link.is_symlink() and digest(victim) == before


def test_a_leases_directory_that_is_a_link_is_one_error_and_nothing_there_is_touched(
    tmp_path: Path,
) -> None:
    from traceanalyze.errors import StoreError

    st, _ = make_store(tmp_path, 1)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / f"{'e' * 32}.lease").write_text("precious\n")
    before = digest(victim)
    (st / LEASES).symlink_to(victim)
    with pytest.raises(StoreError, match="_leases is a symbolic link"):
        Store(st).snapshot()
    Store(st).remove(Store(st).source_ids()[0])
    with pytest.raises(StoreError, match="_leases is a symbolic link"):
        Store(st).vacuum(grace_s=0)
    assert digest(victim) == before
