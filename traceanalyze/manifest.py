"""The store's manifest (which files are committed) and its transaction locks.

Internals of `traceanalyze.store`; docs/store.md describes the protocol. A writing process holds
a shared flock on `.staging/<owner>.lock` while any of its transactions `<owner>-<uuid>` lives; a
later writer removes the staging of an owner whose lock it can take exclusively (the process is
gone: the kernel released the lock).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import schema
from .errors import StoreError

MARKER = "traceanalyze-store.json"
LAYOUT_VERSION = 2
LOCK_NAME = ".lock"
STAGING = ".staging"
DEFAULT_GRACE_S = 60.0
KILL_ENV = "TRACEANALYZE_TEST_KILL_AT"
LEGACY_TEMP_PREFIXES = (".tmp-", ".trash-")  # layout 1's staging and trash directories
_LOCK_ATTEMPTS = 8


def kill_point(point: str) -> None:
    """Test-only: SIGKILL this process at `point` when TRACEANALYZE_TEST_KILL_AT names it."""
    if os.environ.get(KILL_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


# --- the manifest -------------------------------------------------------------------------------


@dataclass
class Manifest:
    """What is committed: per source, per table, the data files (paths relative to the root)."""

    sources: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # Files no longer listed by any source, with the time they stopped being listed.
    garbage: list[tuple[str, float]] = field(default_factory=list)
    layout: int = LAYOUT_VERSION

    def files(self, table: str) -> list[str]:
        return sorted(f for t in self.sources.values() for f in t.get(table, ()))

    def to_json(self) -> str:
        doc = {
            "layout": LAYOUT_VERSION,
            "schema_version": schema.SCHEMA_VERSION,
            "sources": {sid: {"files": t} for sid, t in sorted(self.sources.items())},
            "garbage": [{"path": p, "since": s} for p, s in self.garbage],
        }
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _partition_files(root: Path, table: str, sid: str) -> list[str]:
    part = root / table / f"source_id={sid}"
    return sorted(str(p.relative_to(root)) for p in part.glob("*.parquet"))


def _layout1_manifest(root: Path) -> Manifest:
    """A layout-1 store (no file lists) as a manifest: a source is committed when its `sources`
    partition exists (layout 1 renamed it into place last); its files are whatever its
    partitions hold."""
    m = Manifest(layout=1)
    for d in sorted((root / "sources").glob("source_id=*")):
        sid = d.name.split("=", 1)[1]
        tabs = {t: _partition_files(root, t, sid) for t in schema.TABLE_NAMES}
        m.sources[sid] = {t: f for t, f in tabs.items() if f}
    return m


def read_manifest(root: Path) -> Manifest | None:
    """The store's manifest; None when there is no store yet."""
    try:
        text = (root / MARKER).read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
        layout = int(doc["layout"])
    except (ValueError, KeyError, TypeError) as e:
        raise StoreError(f"unreadable manifest {MARKER}: {e}", path=root) from None
    if layout == 1:
        return _layout1_manifest(root)
    if layout != LAYOUT_VERSION:
        raise StoreError(f"store layout {layout} is newer than this traceanalyze", path=root)
    try:
        srcs = {
            sid: {t: list(f) for t, f in s["files"].items()} for sid, s in doc["sources"].items()
        }
        garbage = [(g["path"], float(g["since"])) for g in doc.get("garbage", [])]
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise StoreError(f"malformed manifest {MARKER}: {e!r}", path=root) from None
    return Manifest(srcs, garbage)


# --- transaction locks --------------------------------------------------------------------------


def flock_shared(fd: int, root: Path) -> None:
    """A shared flock on fd; a file system without flock is a StoreError, not a fallback to
    lock files that a killed writer would leave behind (Lustre needs `-o flock`)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            raise StoreError(
                f"the file system does not support flock locks ({e.strerror}); concurrent "
                "writers could not be kept apart (on Lustre mount with -o flock)",
                path=root,
            ) from None
        raise


@dataclass
class _Owner:
    """A lock `.staging/<owner>.lock` this process holds shared, for `refs` of its txns."""

    fd: int
    refs: int
    pid: int
    mine: bool  # created by this process (it unlinks it when its last txn goes)


# (staging root, owner) -> held lock; staging root -> this process's current owner; the txns
# this process holds. One descriptor per owner, not per txn: a pool worker that stages
# thousands of files keeps one open.
_OWNERS: dict[tuple[str, str], _Owner] = {}
_MINE: dict[str, str] = {}
_TXNS: set[tuple[str, str]] = set()


def _key(staging_root: Path) -> str:
    return os.path.abspath(staging_root)


def owner_of(txn: str) -> str:
    return txn.split("-", 1)[0]


def _new_owner(staging_root: Path) -> str:
    """Create `.staging/<owner>.lock` and hold it shared. A cleaner may unlink it between the
    create and the flock: the inode check catches that and we start over with a new name."""
    for _ in range(_LOCK_ATTEMPTS):
        owner = uuid.uuid4().hex
        path = staging_root / f"{owner}.lock"
        try:
            staging_root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:  # a failing writer removed the empty root meanwhile
            continue
        flock_shared(fd, staging_root.parent)
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            _OWNERS[(_key(staging_root), owner)] = _Owner(fd, 0, os.getpid(), True)
            return owner
        os.close(fd)
    raise StoreError("could not create a staging transaction", path=staging_root.parent)


def acquire_txn(staging_root: Path) -> str:
    """A new transaction id `<owner>-<uuid>`, alive while this process holds its owner's lock.

    The lock tells a later writer that the txn is alive; a killed writer's lock is released by
    the kernel, so its leftovers can be removed.
    """
    key = _key(staging_root)
    owner = _MINE.get(key)
    held = _OWNERS.get((key, owner)) if owner is not None else None
    if (
        owner is None
        or held is None
        or held.pid != os.getpid()
        or not (staging_root / f"{owner}.lock").exists()
    ):
        # first txn here, a forked child (the parent's lock is not its own), or the lock went
        owner = _new_owner(staging_root)
        _MINE[key] = owner
    txn = f"{owner}-{uuid.uuid4().hex}"
    _OWNERS[(key, owner)].refs += 1
    _TXNS.add((key, txn))
    return txn


def hold_txn(staging_root: Path, txn: str) -> bool:
    """Hold `txn` alive in this process too (a Staged made by another process, about to be
    committed here); False when its staging is gone."""
    key = _key(staging_root)
    if (key, txn) in _TXNS:
        return True
    owner = owner_of(txn)
    held = _OWNERS.get((key, owner))
    if held is None:
        try:
            fd = os.open(staging_root / f"{owner}.lock", os.O_RDWR)
        except FileNotFoundError:
            return False
        flock_shared(fd, staging_root.parent)
        held = _OWNERS[(key, owner)] = _Owner(fd, 0, os.getpid(), False)
    held.refs += 1
    _TXNS.add((key, txn))
    return (staging_root / txn).is_dir()


def release_txn(staging_root: Path, txn: str) -> None:
    """Remove a txn's staging; drop its owner's lock when this process holds no other txn of
    it (and remove the lock file if this process made it)."""
    shutil.rmtree(staging_root / txn, ignore_errors=True)
    key, owner = _key(staging_root), owner_of(txn)
    if (key, txn) not in _TXNS:
        return
    _TXNS.discard((key, txn))
    held = _OWNERS[(key, owner)]
    held.refs -= 1
    if held.refs > 0:
        return
    del _OWNERS[(key, owner)]
    if held.mine and held.pid == os.getpid():
        # unlinked before the close: a cleaner never sees our lock file free
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging_root / f"{owner}.lock")
        if _MINE.get(key) == owner:
            del _MINE[key]
    os.close(held.fd)


def remove_dead_staging(staging_root: Path) -> None:
    """Remove the staging of transactions whose writer is gone (no process holds its lock)."""
    if not staging_root.is_dir():
        return
    for lock in staging_root.glob("*.lock"):
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # alive
            os.close(fd)
            continue
        try:
            for d in staging_root.glob(f"{lock.stem}-*"):
                shutil.rmtree(d, ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    # A directory without its owner's lock file: the lock is created first and removed last.
    for d in staging_root.iterdir():
        if d.is_dir() and not (staging_root / f"{owner_of(d.name)}.lock").exists():
            shutil.rmtree(d, ignore_errors=True)
