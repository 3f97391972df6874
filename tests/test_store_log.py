"""The store's commit log (layout 3): one entry per commit, a checkpoint every N commits, kills
between an entry and its checkpoint, concurrent writers across checkpoints, torn and tampered
entries, and the migration of a layout-2 store. Expected states are computed from the files
with the json module (tests/_store_state.py), never through the code under test."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import traceanalyze as ta
from traceanalyze.cli import main
from traceanalyze.errors import StoreError
from traceanalyze.store import KILL_ENV, MARKER, STAGING, Store
from traceanalyze.store import log as store_log

from . import _store_state
from .test_store_security import (
    HEX32,
    VICTIM_PART,
    _path_strategy,
    digest,
    json_values,
    one_error_line,
)

ROOT = Path(__file__).resolve().parents[1]
LOG = "_log"


def log_text(i: int) -> str:
    return f"Iteration Duration 0 {i} : 0.{i + 1}\nIteration Duration 1 {i} : 0.5\n"


def sid_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def logs(tmp_path: Path, n: int, tag: str = "") -> list[Path]:
    out = []
    for i in range(n):
        p = tmp_path / f"{tag}{i}.txt"
        p.write_text(log_text(i) + f"# {tag}\n" * bool(tag))
        out.append(p)
    return out


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def run_py(code: str, *args: str, env: dict[str, str] | None = None, **kw):
    full = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    full.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=full, capture_output=True, text=True, **kw
    )


# In a child: the checkpoint interval set small, then one ingest (argv: every, store, files…).
INGEST = (
    "import sys, traceanalyze as ta\n"
    "from traceanalyze.store import log as store_log\n"
    "store_log.CHECKPOINT_EVERY = int(sys.argv[1])\n"
    "for f in sys.argv[3:]: ta.ingest([f], sys.argv[2])\n"
)


def manifest(st: Path) -> dict:
    return json.loads((st / MARKER).read_text())


def assert_clean(st: Path) -> None:
    """No staging, no unlisted data file, no temporary file in the root or the log."""
    assert not (st / STAGING).exists() or not list((st / STAGING).iterdir())
    on_disk = {str(p.relative_to(st)) for p in st.glob("*/source_id=*/*.parquet")}
    assert on_disk <= _store_state.listed(st)
    assert [p.name for p in st.iterdir() if p.name.startswith(f".{MARKER}.")] == []
    assert [p.name for p in (st / LOG).iterdir() if p.name.startswith(".")] == []


def assert_reads(st: Path, files: list[Path]) -> None:
    """traceanalyze reads exactly the state the json replay gives, and each source whole."""
    want = _store_state.committed(st)
    assert sorted(want["sources"]) == sorted(sid_of(f) for f in files)
    store = Store(st)
    assert store.source_ids() == sorted(want["sources"])
    for t in ("sources", "iterations"):
        listed = sorted(str(st / f) for s in want["sources"].values() for f in s.get(t, []))
        assert sorted(map(str, store.files(t))) == listed
    assert store.table("iterations").height == 2 * len(files)


# --- one entry per commit, a checkpoint every N -------------------------------------------------


def test_each_commit_is_one_entry_and_every_third_a_checkpoint(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(store_log, "CHECKPOINT_EVERY", 3)
    st = tmp_path / "st"
    files = logs(tmp_path, 8)
    for k, f in enumerate(files, start=1):
        ta.ingest([f], st)
        entries = _store_state.entries(st)
        assert max(entries) == k  # one entry per commit, numbered from 1
        ckpt = k // 3 * 3
        assert manifest(st)["version"] == ckpt  # the manifest rewritten at 3 and 6 only
        assert sorted(entries) == list(range(max(1, ckpt - 3 + 1), k + 1))  # pruned behind
        assert len(manifest(st)["sources"]) == ckpt
        assert_reads(st, files[:k])
    assert_clean(st)
    # an entry holds only what its commit changed: the eighth source's two files
    last = json.loads(_store_state.entries(st)[8].read_text())
    assert list(last["add"]) == [sid_of(files[7])] and last["remove"] == last["purge"] == []
    assert sum(len(v) for v in last["add"][sid_of(files[7])]["files"].values()) == 2


def test_a_commit_that_changes_nothing_writes_no_entry(tmp_path: Path) -> None:
    st = tmp_path / "st"
    [f] = logs(tmp_path, 1)
    ta.ingest([f], st)
    assert [r.status for r in ta.ingest([f], st)] == ["unchanged"]
    assert sorted(_store_state.entries(st)) == [1]


# --- kills around the entry and the checkpoint --------------------------------------------------

KILLS = ["before-manifest", "after-manifest", "before-checkpoint", "after-checkpoint"]


@pytest.mark.parametrize("point", KILLS)
def test_sigkill_between_the_log_entry_and_the_checkpoint(tmp_path: Path, point: str) -> None:
    """The second commit is due a checkpoint (every 2): killed before its entry (nothing new),
    after it (committed, no checkpoint yet), before or after the manifest's rewrite. Readers
    see the committed sources whole; the next writers go on and lose nothing."""
    st = tmp_path / "st"
    files = logs(tmp_path, 6)
    assert run_py(INGEST, "2", str(st), str(files[0])).returncode == 0
    r = run_py(INGEST, "2", str(st), str(files[1]), env={KILL_ENV: point})
    assert r.returncode == -signal.SIGKILL, r.stderr
    committed = point != "before-manifest"
    assert_reads(st, files[: 1 + committed])
    assert manifest(st)["version"] == (2 if point == "after-checkpoint" else 0)
    r = run_py(INGEST, "2", str(st), *map(str, files[1:]))
    assert r.returncode == 0, r.stderr
    assert_reads(st, files)
    # six sources, six versions: a version whose entry did not land is taken by the next
    # commit; the one that did is not committed again ("unchanged")
    assert max(_store_state.entries(st)) == 6 and manifest(st)["version"] == 6
    Store(st).vacuum()
    assert_clean(st)


@pytest.mark.parametrize("fresh", [True, False])
def test_concurrent_writers_across_checkpoints_lose_nothing(tmp_path: Path, fresh: bool) -> None:
    st = tmp_path / "st"
    first = logs(tmp_path, 1, "first")
    if not fresh:
        ta.ingest(first, st)
    lists = [logs(tmp_path, 5, f"w{w}-") for w in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", INGEST, "3", str(st), *map(str, fl)],
            env={**{k: v for k, v in os.environ.items() if k != KILL_ENV}, "PYTHONPATH": str(ROOT)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for fl in lists
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read() if p.stderr else ""
    every = [f for fl in lists for f in fl] + ([] if fresh else first)
    assert_reads(st, every)
    assert max(_store_state.entries(st)) == len(every)  # one version per commit, no gap
    assert_clean(st)


# --- torn and tampered entries ------------------------------------------------------------------


@pytest.fixture
def two(tmp_path: Path):
    """A store of two commits (entries 1 and 2), a third log, and a victim beside the store."""
    st = tmp_path / "st"
    a, b, c = logs(tmp_path, 3)
    ta.ingest([a], st)
    ta.ingest([b], st)
    victim = tmp_path / "victim"
    part = victim / "iterations" / "source_id=00000000deadbeef"
    part.mkdir(parents=True)
    (part / f"part-{HEX32}-{HEX32}.parquet").write_bytes(b"PAR1 precious")
    return st, c, victim


def _entry2(st: Path) -> Path:
    return st / LOG / f"{2:020d}.json"


def _tamper(st: Path, victim: Path, how: str) -> str:
    """Change entry 2 as `how` says; returns what the error line must name."""
    e = _entry2(st)
    doc = json.loads(e.read_text())
    outside = str(victim.parent / VICTIM_PART)
    [sid] = doc["add"]
    if how == "torn":
        e.write_bytes(e.read_bytes()[: len(e.read_bytes()) // 2])
        return "torn"
    if how == "garbage":
        e.write_bytes(bytes(range(256)) * 4)
        return "torn"
    if how == "not-an-object":
        e.write_text("[1, 2]")
        return "not an object"
    if how == "version":
        doc["version"] = 3
        e.write_text(json.dumps(doc))
        return "version"
    if how == "add-outside":
        doc["add"][sid]["files"]["iterations"] = [outside]
        e.write_text(json.dumps(doc))
        return "absolute path"
    if how == "purge-outside":
        doc["purge"] = [f"../{VICTIM_PART}"]
        e.write_text(json.dumps(doc))
        return "'..'"
    if how == "remove-not-an-id":
        doc["remove"] = ["../../x"]
        e.write_text(json.dumps(doc))
        return "source id"
    if how == "link":
        real = st.parent / "elsewhere.json"
        e.rename(real)
        e.symlink_to(real)
        return "symbolic link"
    if how == "huge":
        e.write_text(json.dumps({**doc, "purge": ["a" * 5_000_000]}))
        return "5,000,002 characters"
    assert how == "gap"
    (st / LOG / f"{1:020d}.json").unlink()
    return f"{1:020d}.json is missing"


HOWS = [
    "torn",
    "garbage",
    "not-an-object",
    "version",
    "add-outside",
    "purge-outside",
    "remove-not-an-id",
    "link",
    "huge",
    "gap",
]


@pytest.mark.parametrize("how", HOWS)
def test_a_torn_or_tampered_entry_is_one_error_line_naming_it(two, how: str) -> None:
    st, c, victim = two
    before = digest(victim)
    needle = _tamper(st, victim, how)
    name = f"{1 if how == 'gap' else 2:020d}.json"
    for args in (("summary", "--store", str(st)), ("ingest", str(c), "--store", str(st))):
        line = one_error_line(cli(*args), needle)
        assert f"_log/{name}" in line, line
    with pytest.raises(StoreError, match=name):
        Store(st).source_ids()
    with pytest.raises(StoreError):
        Store(st).vacuum(grace_s=0)
    assert digest(victim) == before
    assert sorted(_store_state.entries(st)) == ([2] if how == "gap" else [1, 2])  # no commit


# --- an old store -------------------------------------------------------------------------------


def layout_2_store(tmp_path: Path) -> tuple[Path, list[Path], dict[str, object]]:
    """A store of two sources as layout 2 wrote it (a manifest listing every file, no log, no
    version), the third log not ingested yet, and that manifest."""
    st = tmp_path / "st"
    a, b, c = logs(tmp_path, 3)
    ta.ingest([a, b], st)
    Store(st).checkpoint()
    doc = manifest(st)
    old = {"layout": 2, "schema_version": doc["schema_version"], "sources": doc["sources"]}
    old["garbage"] = []
    for p in (st / LOG).iterdir():
        p.unlink()
    (st / LOG).rmdir()
    (st / MARKER).write_text(json.dumps(old, indent=1))
    return st, [a, b, c], old


def test_a_layout_2_store_is_read_and_migrated_by_the_first_writer(tmp_path: Path) -> None:
    """A store written before the log (its manifest lists every file, no `version`) is read as
    it is; the first writer rewrites its manifest as layout 3's checkpoint at version 0 and
    commits to the log from then on."""
    st, (a, b, c), old = layout_2_store(tmp_path)
    debris = st / "iterations" / f"source_id={sid_of(a)}" / f"part-{'a' * 32}-{'b' * 32}.parquet"
    debris.write_bytes(b"a killed layout-2 writer's renamed file")
    assert Store(st).source_ids() == sorted([sid_of(a), sid_of(b)])
    assert Store(st).table("iterations").height == 4
    ta.ingest([c], st)
    new = manifest(st)
    assert new["layout"] == 3 and new["version"] == 0 and new["sources"] == old["sources"]
    assert sorted(_store_state.entries(st)) == [1]
    assert_reads(st, [a, b, c])
    assert not debris.exists()  # the migration walks the old store once
    # an older traceanalyze refuses the migrated store rather than miss the log's commits
    assert new["layout"] > 2


def test_commit_cost_does_not_walk_other_sources(tmp_path: Path, monkeypatch) -> None:
    """A commit never lists the table directories (the walk whose cost grew with the store):
    counted through the one function that lists a table's partitions."""
    from traceanalyze.store import files as store_files
    from traceanalyze.store import manifest as manifest_mod

    st = tmp_path / "st"
    files = logs(tmp_path, 4)
    ta.ingest(files[:2], st)
    calls: list[str] = []
    real = manifest_mod.partition_files

    def counting(root: Path, table: str) -> list[str]:
        calls.append(table)
        return real(root, table)

    monkeypatch.setattr(store_files, "partition_files", counting)
    monkeypatch.setattr(manifest_mod, "partition_files", counting)
    ta.ingest(files[2:3], st)
    Store(st).remove(sid_of(files[0]))
    assert calls == []
    Store(st).vacuum(grace_s=0)  # the explicit full walk
    assert calls != []


# --- property: tampered log entries -------------------------------------------------------------


@hs.composite
def tampered_entry(draw, victim_abs: str) -> object:
    """An entry 2 with every field drawn from the shapes an attacker could write."""
    paths = _path_strategy(victim_abs)
    sid = draw(hs.sampled_from(["00000000deadbeef", "not-hex", "0" * 16, ""]))
    table = draw(hs.sampled_from(["iterations", "kernels", "nope", "../x"]))
    files = draw(hs.one_of(hs.lists(paths, max_size=3), json_values))
    doc = {
        "version": draw(hs.one_of(hs.just(2), json_values)),
        "time": draw(hs.one_of(hs.just(1.0), hs.floats(), json_values)),
        "add": draw(hs.one_of(hs.just({sid: {"files": {table: files}}}), json_values)),
        "remove": draw(
            hs.one_of(hs.lists(hs.one_of(hs.just(sid), paths), max_size=2), json_values)
        ),
        "purge": draw(hs.one_of(hs.lists(paths, max_size=3), json_values)),
    }
    return draw(hs.one_of(hs.just(doc), json_values))


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=hs.data())
def test_no_tampered_entry_touches_a_victim_or_escapes_as_a_traceback(two, data) -> None:
    st, c, victim = two
    before = digest(victim)
    doc = data.draw(tampered_entry(str(victim.parent / VICTIM_PART)))
    _entry2(st).write_text(json.dumps(doc))
    for args in (
        ("summary", "--store", str(st)),
        ("ingest", str(c), "--store", str(st), "--force"),
    ):
        r = cli(*args)
        assert r.exit_code in (0, 1), (args, r.output, r.exception)
        if r.exit_code == 1:
            one_error_line(r)
    try:
        Store(st).vacuum(grace_s=0)
        Store(st).files("iterations")
    except StoreError:
        pass
    assert digest(victim) == before


def test_a_long_lived_reader_catches_up_across_pruned_entries(tmp_path: Path, monkeypatch) -> None:
    """A Store that read version 1 and is asked again after checkpoints removed the entries
    it would replay reads the manifest again rather than miss a commit."""
    monkeypatch.setattr(store_log, "CHECKPOINT_EVERY", 2)
    st = tmp_path / "st"
    files = logs(tmp_path, 9)
    ta.ingest(files[:1], st)
    reader = Store(st)
    assert reader.source_ids() == [sid_of(files[0])]
    for f in files[1:]:
        ta.ingest([f], st)
    assert min(_store_state.entries(st)) > 2  # entry 2 is gone
    assert reader.source_ids() == sorted(sid_of(f) for f in files)
    assert reader.version() == 9


def test_a_pinned_table_of_many_small_files_kept_in_memory_reads_the_same(
    tmp_path: Path, monkeypatch
) -> None:
    """The in-memory copy a snapshot keeps of a table of many small files (lowered here to 2
    files) gives what the files hold, filters included."""
    from traceanalyze import store as store_mod

    monkeypatch.setattr(store_mod, "KEEP_MIN_FILES", 2)
    st = tmp_path / "st"
    files = logs(tmp_path, 3)
    ta.ingest(files, st)
    pinned = Store(st).snapshot()
    want = sorted(  # "Iteration Duration <iteration> <n> : <seconds>"
        (sid_of(f), int(ln.split()[2]), round(float(ln.split()[-1]) * 1e9))
        for f in files
        for ln in f.read_text().splitlines()
    )
    for _ in range(2):  # the first scan reads the files, the second the copy
        got = pinned.scan("iterations").select("source_id", "iteration", "duration_ns").collect()
        assert sorted(got.rows()) == want
    assert set(pinned._frames) == {"iterations"}
    one = sid_of(files[1])
    ds = ta.open(store=st).where(source=one)
    assert ds.table("iterations")["source_id"].unique().to_list() == [one]


def test_a_log_directory_that_is_a_link_is_one_error_and_nothing_there_is_touched(two) -> None:
    """`_log` swapped for a link to a directory of entry-shaped files: every command stops on
    the link; nothing in its target is read as a commit, pruned or removed."""
    st, c, victim = two
    for p in (st / LOG).iterdir():  # the attacker's target holds real entries
        p.rename(victim / p.name)
    (victim / f"{9:020d}.json").write_text("{}")
    (victim / f".tmp-{'a' * 32}").write_text("precious\n")
    before = digest(victim)
    (st / LOG).rmdir()
    (st / LOG).symlink_to(victim)
    for args in (("summary", "--store", str(st)), ("ingest", str(c), "--store", str(st))):
        one_error_line(cli(*args), "_log is a symbolic link")
    for call in (lambda s: s.checkpoint(), lambda s: s.vacuum(grace_s=0)):
        with pytest.raises(StoreError, match="_log is a symbolic link"):
            call(Store(st))
    after = digest(victim)
    assert {k: after[k] for k in before} == before


def test_sigkill_mid_migration_leaves_the_old_store_readable_and_the_next_writer_migrates(
    tmp_path: Path,
) -> None:
    st, (a, b, c), old = layout_2_store(tmp_path)
    r = run_py(INGEST, "100", str(st), str(c), env={KILL_ENV: "before-migration"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert manifest(st) == old  # still the layout-2 store, as it was
    assert Store(st).source_ids() == sorted([sid_of(a), sid_of(b)])
    assert run_py(INGEST, "100", str(st), str(c)).returncode == 0
    assert manifest(st)["layout"] == 3
    assert_reads(st, [a, b, c])
    assert_clean(st)
