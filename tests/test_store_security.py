"""The store as untrusted input: a store on a shared file system can be tampered with by anyone
who may write to it. Each attack here has a victim outside the store whose bytes must stay the
same, and must end in one `traceanalyze: error:` line with exit 1 (or a correct result): never a
deletion, a read or a write outside the store, never a traceback."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceanalyze as ta
from traceanalyze.cli import main
from traceanalyze.errors import StoreError
from traceanalyze.store import MARKER, STAGING, Store

from . import _store_state

LOG_A = "Iteration Duration 0 0 : 0.5\nIteration Duration 1 0 : 0.25\n"
LOG_B = "Iteration Duration 0 1 : 0.75\n"
HEX32 = "0123456789abcdef" * 2


def digest(root: Path) -> dict[str, str]:
    """Every entry under root (links as their target text, files by content hash)."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


@pytest.fixture
def setup(tmp_path: Path):
    """A store holding one log, a second log to ingest, and a victim directory beside the
    store that holds files of the store's own shape (so a path escape could name them)."""
    a = tmp_path / "a.txt"
    a.write_text(LOG_A)
    b = tmp_path / "b.txt"
    b.write_text(LOG_B)
    store = tmp_path / "st"
    ta.ingest([a], store)
    victim = tmp_path / "victim"
    part = victim / "iterations" / "source_id=00000000deadbeef"
    part.mkdir(parents=True)
    pl.DataFrame({"x": [1, 2, 3]}).write_parquet(part / f"part-{HEX32}-{HEX32}.parquet")
    (victim / "notes.txt").write_text("precious\n")
    (victim / "project" / "src").mkdir(parents=True)
    (victim / "project" / "src" / "main.py").write_text("print('hi')\n")
    return store, b, victim


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def one_error_line(r, *needles: str) -> str:
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceanalyze: error: "), r.output
    for n in needles:
        assert n in lines[0], lines[0]
    assert len(lines[0]) < 400
    return lines[0]


def edit_manifest(store: Path, change) -> None:
    """Change the manifest after a checkpoint (so that it lists every committed file; the log
    entries after it are tampered with in tests/test_store_log.py)."""
    if _store_state.committed(store)["version"] != json.loads((store / MARKER).read_text()).get(
        "version", 0
    ):
        Store(store).checkpoint()
    doc = json.loads((store / MARKER).read_text())
    change(doc)
    (store / MARKER).write_text(json.dumps(doc))


def only_source(doc: dict) -> dict:
    [sid] = doc["sources"]
    return doc["sources"][sid]["files"]


VICTIM_PART = f"victim/iterations/source_id=00000000deadbeef/part-{HEX32}-{HEX32}.parquet"


@pytest.mark.parametrize(
    "path, why",
    [
        ("{victim_abs}", "absolute path"),
        (f"../{VICTIM_PART}", "'..'"),
        (f"iterations/../../{VICTIM_PART}", "'..'"),
        ("{victim_abs}/../notes.txt", "absolute path"),
        ("iterations/source_id=00000000deadbeef/part-x.parquet\x00", "NUL"),
        ("C:/victim/notes.txt", "absolute path"),
        ("iterations\\source_id=00000000deadbeef\\part-0.parquet", "shape"),
        ("kernelz/source_id=00000000deadbeef/part-0.parquet", "no table"),
    ],
)
def test_a_garbage_entry_outside_the_store_is_never_deleted(setup, path: str, why: str) -> None:
    store, b, victim = setup
    before = digest(victim)
    victim_abs = str(victim.parent / VICTIM_PART)
    entry = path.format(victim_abs=victim_abs)
    edit_manifest(store, lambda d: d.__setitem__("garbage", [{"path": entry, "since": 0}]))
    manifest = (store / MARKER).read_bytes()
    line = one_error_line(cli("ingest", str(b), "--store", str(store)), "garbage[0].path", why)
    assert MARKER in line
    assert digest(victim) == before
    assert (store / MARKER).read_bytes() == manifest  # nothing committed
    # readers refuse it too, naming the manifest and the entry
    with pytest.raises(StoreError, match=r"garbage\[0\]"):
        Store(store).source_ids()


def test_a_staging_that_is_a_link_stops_ingest_and_nothing_there_is_removed(setup) -> None:
    store, b, victim = setup
    before = digest(victim)
    ta.Store(store).vacuum()  # no staging left: make the attacker's link
    assert not (store / STAGING).exists()
    (store / STAGING).symlink_to(victim / "project")
    one_error_line(cli("ingest", str(b), "--store", str(store)), ".staging", "symbolic link")
    assert digest(victim) == before
    # also when the link appears after a writer made its staging (the commit's clean-up)
    (store / STAGING).unlink()
    staged = Store(store).stage(ta.read(b))
    (store / STAGING).rename(store / "moved")
    (store / STAGING).symlink_to(victim / "project")
    with pytest.raises(StoreError, match="symbolic link"):
        Store(store).commit([staged])
    Store(store).discard(staged)
    assert digest(victim) == before


def test_a_table_directory_linked_to_another_stores_leaves_that_store_intact(
    setup, tmp_path: Path
) -> None:
    store, b, _ = setup
    other_log = tmp_path / "other.txt"
    other_log.write_text("Iteration Duration 0 3 : 0.125\n")
    other = tmp_path / "other"
    ta.ingest([other_log], other)
    other_before, other_rows = digest(other), Store(other).table("iterations").rows()
    # the attacker swaps our iterations directory for a link to the other store's
    for f in (store / "iterations").rglob("*.parquet"):
        f.unlink()
    for d in sorted((store / "iterations").rglob("*"), reverse=True):
        d.rmdir()
    (store / "iterations").rmdir()
    (store / "iterations").symlink_to(other / "iterations")
    one_error_line(cli("ingest", str(b), "--store", str(store)), "iterations", "symbolic link")
    one_error_line(cli("summary", "--store", str(store)), "iterations", "symbolic link")
    assert digest(other) == other_before
    assert Store(other).table("iterations").rows() == other_rows


def test_a_partition_directory_that_is_a_link_is_neither_read_nor_cleaned(setup) -> None:
    store, b, victim = setup
    before = digest(victim)
    [part] = (store / "iterations").iterdir()
    for f in part.iterdir():
        f.unlink()
    part.rmdir()
    part.symlink_to(victim / "iterations" / "source_id=00000000deadbeef")
    one_error_line(cli("summary", "--store", str(store)), part.name, "symbolic link")
    # a commit does not walk other sources' partitions (its cost must not grow with the
    # store); the walk of every partition (vacuum) stops on the link
    assert cli("ingest", str(b), "--store", str(store)).exit_code == 0
    with pytest.raises(StoreError, match="symbolic link"):
        Store(store).vacuum()
    assert digest(victim) == before


def test_a_part_file_that_is_a_link_is_not_read_and_deleting_it_removes_the_link_only(
    setup,
) -> None:
    store, b, victim = setup
    before = digest(victim)
    [listed] = (store / "iterations").rglob("*.parquet")
    listed.unlink()
    listed.symlink_to(victim.parent / VICTIM_PART)
    line = one_error_line(cli("summary", "--store", str(store)), "symbolic link")
    assert listed.name in line
    with pytest.raises(StoreError, match="symbolic link"):
        Store(store).files("iterations")
    # an unlisted link of the store's shape is debris: the clean-up removes the link itself
    extra = listed.parent / f"part-{'a' * 32}-{'b' * 32}.parquet"
    extra.symlink_to(victim.parent / VICTIM_PART)
    # and a listed one that becomes garbage (the source removed) goes after the grace period
    Store(store).remove(next(iter(Store(store).source_ids())))
    Store(store).vacuum(grace_s=0)
    assert not extra.is_symlink() and not listed.is_symlink()
    assert digest(victim) == before
    assert cli("ingest", str(b), "--store", str(store)).exit_code == 0


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
def test_a_source_file_outside_the_store_is_a_one_line_error_for_every_reader(
    setup, how: str
) -> None:
    store, _, victim = setup
    before = digest(victim)
    target = str(victim.parent / VICTIM_PART) if how == "absolute" else f"../{VICTIM_PART}"
    edit_manifest(store, lambda d: only_source(d).__setitem__("iterations", [target]))
    one_error_line(cli("summary", "--store", str(store)), "sources[", "iterations")
    for call in (
        lambda s: s.files("iterations"),
        lambda s: s.scan("iterations"),
        lambda s: s.tables(),
        lambda s: ta.open(store=store).table("iterations"),
    ):
        with pytest.raises(StoreError, match=MARKER):
            call(Store(store))
    assert digest(victim) == before


def test_a_file_listed_under_another_source_or_table_is_refused(setup) -> None:
    store, _, _ = setup
    edit_manifest(
        store,
        lambda d: only_source(d).__setitem__(
            "iterations", [f"iterations/source_id=00000000deadbeef/part-{HEX32}-{HEX32}.parquet"]
        ),
    )
    with pytest.raises(StoreError, match="another source"):
        Store(store).source_ids()
    edit_manifest(
        store,
        lambda d: only_source(d).__setitem__(
            "kernels", [only_source(d)["iterations"][0].replace("iterations/", "kernels/", 1)]
        ),
    )
    with pytest.raises(StoreError):
        Store(store).source_ids()


def test_a_huge_string_in_the_manifest_is_one_short_line(setup) -> None:
    store, b, victim = setup
    before = digest(victim)
    huge = "a" * 50_000_000
    edit_manifest(store, lambda d: d.__setitem__("garbage", [{"path": huge, "since": 0}]))
    line = one_error_line(cli("ingest", str(b), "--store", str(store)), "50,000,002 characters")
    assert len(line) < 400
    edit_manifest(store, lambda d: d.__setitem__("garbage", [{"path": 1, "since": huge}]))
    one_error_line(cli("summary", "--store", str(store)), "not a string")
    assert digest(victim) == before


def test_manifest_bounds(setup, monkeypatch) -> None:
    from traceanalyze.store import manifest

    store, _, _ = setup
    monkeypatch.setattr(manifest, "MAX_MANIFEST_BYTES", 100)
    with pytest.raises(StoreError, match="larger than"):
        Store(store).source_ids()
    monkeypatch.undo()
    monkeypatch.setattr(manifest, "MAX_SOURCES", 0)
    with pytest.raises(StoreError, match="more than 0"):
        Store(store).source_ids()
    monkeypatch.undo()
    nested = "[" * 100_000 + "]" * 100_000
    (store / MARKER).write_text(nested)
    one_error_line(cli("summary", "--store", str(store)), "manifest")


def test_the_lock_and_the_manifest_as_links_are_refused_and_their_targets_kept(setup) -> None:
    store, b, victim = setup
    before = digest(victim)
    (store / ".lock").unlink(missing_ok=True)
    (store / ".lock").symlink_to(victim / "notes.txt")  # filelock opened it O_TRUNC
    one_error_line(cli("ingest", str(b), "--store", str(store)), ".lock", "symbolic link")
    assert digest(victim) == before
    (store / ".lock").unlink()
    real = store.parent / "elsewhere.json"
    (store / MARKER).rename(real)
    (store / MARKER).symlink_to(real)
    one_error_line(cli("summary", "--store", str(store)), MARKER, "symbolic link")


def test_a_store_root_that_is_a_link_is_refused_naming_the_real_directory(setup) -> None:
    store, _, _ = setup
    link = store.parent / "link"
    link.symlink_to(store)
    one_error_line(cli("summary", "--store", str(link)), "root is a symbolic link", str(store))


def test_legacy_layout_1_directories_are_listed_without_following_links(setup) -> None:
    """A layout-1 store (globbed, not listed) with a linked table directory stops; its upgrade
    never removes anything outside."""
    store, b, victim = setup
    before = digest(victim)
    edit_manifest(store, lambda d: d.clear() or d.update({"layout": 1}))
    (store / "kernels").symlink_to(victim / "iterations")
    one_error_line(cli("summary", "--store", str(store)), "kernels", "symbolic link")
    one_error_line(cli("ingest", str(b), "--store", str(store)), "kernels", "symbolic link")
    (store / "kernels").unlink()
    (store / ".tmp-x").symlink_to(victim / "project")  # layout 1's temp dirs are removed
    assert cli("ingest", str(b), "--store", str(store)).exit_code == 0
    assert digest(victim) == before


# --- permissions --------------------------------------------------------------------------------


def _modes(root: Path) -> dict[str, tuple[int, bool]]:
    """Mode and is-a-directory of root and everything under it."""
    return {
        str(p.relative_to(root.parent)): (stat.S_IMODE(p.lstat().st_mode), p.is_dir())
        for p in [root, *root.rglob("*")]
        if not p.is_symlink()
    }


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022, 0o077])
def test_new_files_and_directories_follow_the_umask_and_are_never_world_writable(
    tmp_path: Path, umask: int
) -> None:
    a = tmp_path / "a.txt"
    a.write_text(LOG_A)
    old = os.umask(umask)
    try:
        store = tmp_path / "deep" / "st"  # `deep` is created too
        staged = Store(store).stage(ta.read(a))
        staging_modes = _modes(tmp_path / "deep")
        Store(store).commit([staged])
        Store(store).discard(staged)
    finally:
        os.umask(old)
    modes = {**staging_modes, **_modes(tmp_path / "deep")}
    assert any(f"{STAGING}/" in k for k in staging_modes)
    assert any(k.endswith(".parquet") for k in modes) and "deep/st/.lock" in modes
    for rel, (mode, is_dir) in modes.items():
        want = (0o775 if is_dir else 0o664) & ~umask
        assert mode & stat.S_IWOTH == 0, (rel, oct(mode))
        assert mode == want, (rel, oct(mode), oct(want))


# --- property: tampered manifests ---------------------------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _path_strategy(victim_abs: str) -> st.SearchStrategy[object]:
    sid = "00000000deadbeef"
    pieces = st.sampled_from(
        [
            "..",
            ".",
            "",
            "iterations",
            "kernels",
            f"source_id={sid}",
            f"part-{HEX32}-{HEX32}.parquet",
            "part-0.parquet",
            "victim",
            "/",
            "\x00",
            "C:",
            "\\",
        ]
    )
    joined = st.lists(pieces, min_size=1, max_size=7).map("/".join)
    return st.one_of(
        joined,
        st.just(victim_abs),
        st.just("../" + VICTIM_PART),
        joined.map(lambda p: victim_abs + "/" + p),
        st.text(max_size=60),
        st.text(min_size=5000, max_size=6000),
        json_values,
    )


@st.composite
def tampered(draw, victim_abs: str) -> dict:
    paths = _path_strategy(victim_abs)
    doc: dict = {"layout": draw(st.sampled_from([2, 2, 2, 1, 3, "2", True, None]))}
    sid = draw(st.sampled_from(["00000000deadbeef", "not-hex", "0" * 16, ""]))
    table = draw(st.sampled_from(["iterations", "kernels", "nope", "../x"]))
    files = draw(st.one_of(st.lists(paths, max_size=3), json_values))
    doc["sources"] = draw(
        st.one_of(
            st.just({sid: {"files": {table: files}}}),
            st.just({sid: files}),
            json_values,
        )
    )
    since = draw(st.one_of(st.just(0), st.floats(), json_values))
    doc["garbage"] = draw(
        st.one_of(
            st.lists(
                st.builds(lambda p, s: {"path": p, "since": s}, paths, st.just(since)), max_size=3
            ),
            json_values,
        )
    )
    return doc


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_tampered_manifest_touches_a_victim_or_escapes_as_a_traceback(
    setup, data: st.DataObject
) -> None:
    store, b, victim = setup
    before = digest(victim)
    doc = data.draw(tampered(str(victim.parent / VICTIM_PART)))
    (store / MARKER).write_text(json.dumps(doc))
    for args in (
        ("summary", "--store", str(store)),
        ("ingest", str(b), "--store", str(store), "--force"),
    ):
        r = cli(*args)
        assert r.exit_code in (0, 1), (args, r.output, r.exception)
        if r.exit_code == 1:
            one_error_line(r)
        assert "Traceback" not in r.output
    try:
        Store(store).vacuum(grace_s=0)
        for t in ("iterations", "kernels"):
            Store(store).files(t)
    except StoreError:
        pass
    assert digest(victim) == before
