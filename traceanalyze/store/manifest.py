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
import math
import os
import re
import signal
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .. import schema
from ..errors import StoreError
from ._safefs import FILE_MODE, is_dir_at, not_own, open_dir, regular_file_at, rmtree_at, walk

MARKER = "traceanalyze-store.json"
LAYOUT_VERSION = 3  # 3: the manifest is a checkpoint, later commits are in `_log/` (store.log)
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

# Bounds on what a manifest may hold (docs/store.md, "What the store defends against"): far above
# any real store (10,000 sources of 10 tables are ~14 MB of manifest), low enough that a
# tampered manifest cannot exhaust memory or time.
MAX_MANIFEST_BYTES = 256 << 20
MAX_SOURCES = 1_000_000
MAX_FILES_PER_TABLE = 1_024  # per source; a writer lists one
MAX_GARBAGE = 1_000_000
MAX_VERSION = 10**19  # a commit version fits the log's 20-digit file names

_SID = re.compile(r"[0-9a-f]{16}")
# part-<txn>.parquet with <txn> = <owner>-<uuid> (32 hex digits each); part-0.parquet is layout 1's
_PART = re.compile(r"part-(?:0|[0-9a-f]{32}-[0-9a-f]{32})\.parquet")
_SHAPE = "<table>/source_id=<16 hex>/part-<hex>-<hex>.parquet"


def short(value: object) -> str:
    """A manifest value for an error message, cut when long (a 50 MB string stays one line)."""
    r = repr(value)
    return r if len(r) <= 80 else f"{r[:50]}…{r[-12:]} ({len(r):,} characters)"


def path_problem(rel: object, *, table: str | None = None, sid: str | None = None) -> str | None:
    """Why `rel` is not a data file path of a store (None when it is one): relative, no `..`, no
    NUL, of the shape `<table>/source_id=<16 hex>/part-<hex>-<hex>.parquet` with a schema table
    (and the given table and source, where it is listed under one)."""
    if not isinstance(rel, str):
        return f"not a string but {type(rel).__name__}"
    if "\x00" in rel:
        return "contains a NUL character"
    if rel.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", rel):
        return "is an absolute path"
    parts = re.split(r"[/\\]", rel)
    if ".." in parts:
        return "contains '..'"
    if len(parts) != 3 or "\\" in rel:
        return f"is not of the store's shape {_SHAPE}"
    t, part, name = parts
    if t not in schema.TABLE_NAMES:
        return f"names no table of the schema ({short(t)})"
    if not part.startswith("source_id=") or not _SID.fullmatch(part[len("source_id=") :]):
        return f"is not of the store's shape {_SHAPE}"
    if not _PART.fullmatch(name):
        return f"is not of the store's shape {_SHAPE}"
    if table is not None and t != table:
        return f"is a file of table {t}, listed under {table}"
    if sid is not None and part != f"source_id={sid}":
        return f"is a file of another source, listed under {sid}"
    return None


@dataclass
class Manifest:
    """What is committed at one version: per source, per table, the data files (paths relative
    to the root). The manifest file holds it at the version of its last checkpoint; the log's
    later entries (store.log) bring it to the latest version."""

    sources: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # Files no longer listed by any source: (path, the time and the version from which on it
    # is no longer listed). A reader pinned to an earlier version may still read it.
    garbage: list[tuple[str, float, int]] = field(default_factory=list)
    layout: int = LAYOUT_VERSION
    version: int = 0

    def files(self, table: str) -> list[str]:
        return sorted(f for t in self.sources.values() for f in t.get(table, ()))

    def listed(self, sid: str, table: str, rel: str) -> bool:
        """Whether `rel` is a committed file of `sid`'s `table` (a dictionary look-up)."""
        return rel in self.sources.get(sid, {}).get(table, ())

    def to_json(self) -> str:
        doc = {
            "layout": LAYOUT_VERSION,
            "schema_version": schema.SCHEMA_VERSION,
            "version": self.version,
            "sources": {sid: {"files": t} for sid, t in sorted(self.sources.items())},
            "garbage": [{"path": p, "since": s, "version": v} for p, s, v in self.garbage],
        }
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _list_dir(fd: int) -> list[tuple[str, bool]]:
    """(name, is a directory itself) of every entry, links not followed."""
    with os.scandir(fd) as it:
        return sorted((e.name, e.is_dir(follow_symlinks=False)) for e in it)


def partition_files(root: Path, table: str) -> list[str]:
    """Every `part-*.parquet` entry in the partitions of one table (relative paths), links not
    followed: a table or partition directory that is a link stops with a StoreError; a part
    file that is a link is listed (as the entry it is: a deletion removes the link itself)."""
    out: list[str] = []
    with walk(root, [table]) as tfd:
        if tfd is None:
            return out
        for part, is_dir in _list_dir(tfd):
            if not part.startswith("source_id="):
                continue
            rel = f"{table}/{part}"
            if not is_dir:
                raise not_own(tfd, part, root, rel)
            pfd = open_dir(tfd, part, root, rel)
            if pfd is None:
                continue
            try:
                names = [n for n, d in _list_dir(pfd) if not d]
            finally:
                os.close(pfd)
            out.extend(
                f"{rel}/{n}" for n in names if n.startswith("part-") and n.endswith(".parquet")
            )
    return out


def _layout1_manifest(root: Path) -> Manifest:
    """A layout-1 store (no file lists) as a manifest: a source is committed when its `sources`
    partition exists (layout 1 renamed it into place last); its files are whatever its
    partitions hold (regular files of the store's shape only)."""
    m = Manifest(layout=1)
    by_table = {t: partition_files(root, t) for t in schema.TABLE_NAMES}
    sids = sorted({f.split("/")[1].split("=", 1)[1] for f in by_table["sources"]})
    for sid in sids:
        if not _SID.fullmatch(sid):
            continue
        tabs: dict[str, list[str]] = {}
        for t, files in by_table.items():
            mine = [f for f in files if f.split("/")[1] == f"source_id={sid}"]
            mine = [f for f in mine if path_problem(f) is None and _regular(root, f)]
            if mine:
                tabs[t] = mine
        m.sources[sid] = tabs
    return m


def _regular(root: Path, rel: str) -> bool:
    with walk(root, rel.split("/")[:-1]) as fd:
        return fd is not None and regular_file_at(fd, rel.rsplit("/", 1)[1])


def _read_marker(root: Path) -> str | None:
    """The manifest's text (not through a link, at most MAX_MANIFEST_BYTES); None when absent."""
    try:
        fd = os.open(root / MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise StoreError(f"{MARKER} is a symbolic link; refusing to follow it", path=root) from None
    return read_bounded(fd, root, f"manifest {MARKER}")


def read_bounded(fd: int, root: Path, what: str) -> str:
    """The text of an open store file (closed here), at most MAX_MANIFEST_BYTES: a larger one
    is a StoreError naming `what`, never read whole."""
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if max(size, len(data)) > MAX_MANIFEST_BYTES:
        raise StoreError(
            f"{what} is larger than {MAX_MANIFEST_BYTES >> 20} MiB; not a store this "
            "traceanalyze wrote",
            path=root,
        )
    return data.decode("utf-8", errors="replace")


def read_manifest(root: Path) -> Manifest | None:
    """The store's manifest, every entry checked (path_problem, the bounds above); None when
    there is no store yet. Anything off is a StoreError naming the manifest and the entry."""
    text = _read_marker(root)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise StoreError(f"unreadable manifest {MARKER}: {short(str(e))}", path=root) from None
    layout = doc.get("layout") if isinstance(doc, dict) else None
    if not isinstance(layout, int) or isinstance(layout, bool):
        raise StoreError(f"unreadable manifest {MARKER}: no integer 'layout'", path=root)
    if layout == 1:
        return _layout1_manifest(root)
    if layout > LAYOUT_VERSION or layout < 1:
        raise StoreError(f"store layout {layout} is newer than this traceanalyze", path=root)
    try:
        version = 0 if layout == 2 else checked_version(doc.get("version"), "version")
        garbage = checked_garbage(doc.get("garbage"), version)
        return Manifest(checked_sources(doc.get("sources")), garbage, layout, version)
    except Malformed as e:
        raise StoreError(f"malformed manifest {MARKER}: {e.where}: {e.why}", path=root) from None


class Malformed(Exception):
    """An entry of a manifest or log entry that is off: where it is and why."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(where, why)
        self.where, self.why = where, why


def checked_version(value: object, where: str, *, most: int = MAX_VERSION) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
        raise Malformed(f"{where} = {short(value)}", f"not a version (an integer 0 to {most})")
    return value


def checked_sources(value: object, name: str = "sources") -> dict[str, dict[str, list[str]]]:
    if not isinstance(value, dict):
        raise Malformed(name, f"not an object but {type(value).__name__}")
    if len(value) > MAX_SOURCES:
        raise Malformed(name, f"{len(value):,} sources, more than {MAX_SOURCES:,}")
    out: dict[str, dict[str, list[str]]] = {}
    for sid, entry in value.items():
        where = f"{name}[{short(sid)}]"
        if not _SID.fullmatch(sid):
            raise Malformed(where, "not a source id (16 hex digits)")
        files = entry.get("files") if isinstance(entry, dict) else None
        if not isinstance(files, dict):
            raise Malformed(f"{where}.files", "not an object")
        tabs: dict[str, list[str]] = {}
        for table, paths in files.items():
            at = f"{where}.files[{short(table)}]"
            if table not in schema.TABLE_NAMES:
                raise Malformed(at, "names no table of the schema")
            if not isinstance(paths, list) or len(paths) > MAX_FILES_PER_TABLE:
                raise Malformed(at, f"not a list of at most {MAX_FILES_PER_TABLE:,} paths")
            for i, rel in enumerate(paths):
                why = path_problem(rel, table=table, sid=sid)
                if why is not None:
                    raise Malformed(f"{at}[{i}] = {short(rel)}", why)
            tabs[table] = list(paths)
        out[sid] = tabs
    return out


def checked_garbage(value: object, version: int) -> list[tuple[str, float, int]]:
    """Garbage entries: a store file path, a finite `since` time, and (from layout 3) the
    version from which on it is unlisted, at most the manifest's own."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_GARBAGE:
        raise Malformed("garbage", f"not a list of at most {MAX_GARBAGE:,} entries")
    out: list[tuple[str, float, int]] = []
    for i, g in enumerate(value):
        rel = g.get("path") if isinstance(g, dict) else None
        since = g.get("since") if isinstance(g, dict) else None
        why = path_problem(rel)
        if why is not None:
            raise Malformed(f"garbage[{i}].path = {short(rel)}", why)
        checked_time(since, f"garbage[{i}].since")
        v = checked_version(g.get("version", 0), f"garbage[{i}].version", most=version)
        assert isinstance(rel, str) and isinstance(since, (int, float))
        out.append((rel, float(since), v))
    return out


def checked_time(value: object, where: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise Malformed(f"{where} = {short(value)}", "not a finite number")
    return float(value)


# --- transaction locks --------------------------------------------------------------------------


def flock_shared(fd: int, root: Path) -> None:
    flock(fd, root, exclusive=False)


def flock(fd: int, root: Path, *, exclusive: bool) -> None:
    """A flock on fd (closed on failure); a file system without flock is a StoreError, not a
    fallback to lock files that a killed writer would leave behind (Lustre needs `-o flock`)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
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


@contextlib.contextmanager
def _staging(staging_root: Path, *, create: bool = False) -> Iterator[int | None]:
    """A descriptor of the store's `.staging` (never through a link; created when `create`)."""
    with walk(staging_root.parent, [staging_root.name], create=create) as fd:
        yield fd


def _new_owner(staging_root: Path) -> str:
    """Create `.staging/<owner>.lock` and hold it shared. A cleaner may unlink it between the
    create and the flock: the inode check catches that and we start over with a new name."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(_LOCK_ATTEMPTS):
        owner = uuid.uuid4().hex
        name = f"{owner}.lock"
        with _staging(staging_root, create=True) as sfd:
            assert sfd is not None
            try:
                fd = os.open(name, flags, FILE_MODE, dir_fd=sfd)
            except FileNotFoundError:  # a failing writer removed the empty staging meanwhile
                continue
            flock_shared(fd, staging_root.parent)
            try:
                same = (
                    os.stat(name, dir_fd=sfd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
                )
            except FileNotFoundError:
                same = False
        if same:
            _OWNERS[(_key(staging_root), owner)] = _Owner(fd, 0, os.getpid(), True)
            return owner
        os.close(fd)
    raise StoreError("could not create a staging transaction", path=staging_root.parent)


def _lock_exists(staging_root: Path, owner: str) -> bool:
    with _staging(staging_root) as sfd:
        return sfd is not None and regular_file_at(sfd, f"{owner}.lock")


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
        or not _lock_exists(staging_root, owner)
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
    with _staging(staging_root) as sfd:
        if sfd is None:
            return False
        held = _OWNERS.get((key, owner))
        if held is None:
            try:
                fd = os.open(f"{owner}.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=sfd)
            except (FileNotFoundError, NotADirectoryError):
                return False
            except OSError as e:
                if e.errno == errno.ELOOP:  # a link where the lock belongs: not a live txn
                    return False
                raise
            flock_shared(fd, staging_root.parent)
            held = _OWNERS[(key, owner)] = _Owner(fd, 0, os.getpid(), False)
        held.refs += 1
        _TXNS.add((key, txn))
        return is_dir_at(sfd, txn)


def release_txn(staging_root: Path, txn: str) -> None:
    """Remove a txn's staging; drop its owner's lock when this process holds no other txn of
    it (and remove the lock file if this process made it). Nothing is removed through a link:
    a `.staging` that is not the store's own directory is left alone here (the next commit
    stops on it)."""
    key, owner = _key(staging_root), owner_of(txn)
    with contextlib.ExitStack() as stack:
        try:
            sfd = stack.enter_context(_staging(staging_root))
        except StoreError:
            sfd = None
        if sfd is not None:
            rmtree_at(sfd, txn)
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
            if sfd is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{owner}.lock", dir_fd=sfd)
            if _MINE.get(key) == owner:
                del _MINE[key]
        os.close(held.fd)


OnDead = Callable[[int, str], None]


def remove_dead_staging(
    staging_root: Path, *, strict: bool = True, on_dead: OnDead | None = None
) -> None:
    """Remove the staging of transactions whose writer is gone (no process holds its lock).

    Only inside the store's own `.staging` directory, opened without following a link, and
    never through a link in it. A `.staging` that is a link is a StoreError (`strict`) or left
    alone (clean-up after a failure, which must not hide the failure). `on_dead(staging fd,
    txn)` is called before a dead txn's staging is removed (its skeleton names the files its
    commit may have renamed into place: store_log removes them unless they were committed)."""
    try:
        with _staging(staging_root) as sfd:
            if sfd is not None:
                _remove_dead(sfd, on_dead or (lambda _fd, _txn: None))
    except StoreError:
        if strict:
            raise


def _remove_dead(sfd: int, on_dead: OnDead) -> None:
    with os.scandir(sfd) as it:
        entries = sorted((e.name, e.is_dir(follow_symlinks=False)) for e in it)
    for name, is_dir in entries:
        if is_dir or not name.endswith(".lock"):
            continue
        try:
            fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=sfd)
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            os.unlink(name, dir_fd=sfd)  # a link planted where a lock belongs: the link only
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # alive
            os.close(fd)
            continue
        try:
            stem = name[: -len(".lock")]
            for d, d_is_dir in entries:
                if d_is_dir and d.startswith(f"{stem}-"):
                    on_dead(sfd, d)
                    rmtree_at(sfd, d)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=sfd)
        finally:
            os.close(fd)
    # A directory without its owner's lock file: the lock is created first and removed last.
    with os.scandir(sfd) as it:
        dirs = [e.name for e in it if e.is_dir(follow_symlinks=False)]
    for d in dirs:
        if not regular_file_at(sfd, f"{owner_of(d)}.lock"):
            on_dead(sfd, d)
            rmtree_at(sfd, d)
