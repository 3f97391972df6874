"""The store's file operations (internals of `traceanalyze.store`): the store lock, the state
for a writer (and the migration of older layouts), a commit's log entry and checkpoint, the
clean-up of garbage and debris, and the checks every file gets before it is read. Every
operation that changes the store goes through directory descriptors opened without following a
link (`_safefs`); docs/store.md, "Sharing a store", says what that defends against.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from .. import schema
from ..errors import StoreError
from . import log as store_log
from ._safefs import FILE_MODE, open_path, rmtree_at, walk
from .lease import oldest_pinned
from .log import Entry
from .manifest import (
    LAYOUT_VERSION,
    LEGACY_TEMP_PREFIXES,
    LOCK_NAME,
    MARKER,
    STAGING,
    Manifest,
    flock,
    kill_point,
    partition_files,
    path_problem,
    remove_dead_staging,
)

_MANIFEST_TEMP = re.compile(re.escape(f".{MARKER}.") + "[0-9a-f]{32}")


def checked(root: Path, rels: list[str]) -> list[str]:
    """The paths of committed files to hand to polars, DuckDB or Dask, each checked to be a
    regular file inside the store's own directories: a link anywhere on the way (table or
    partition directory, the file) is a StoreError, never followed out of the store."""
    return checked_sized(root, rels)[0]


def checked_sized(root: Path, rels: list[str]) -> tuple[list[str], int]:
    """`checked`, and the files' total size in bytes (from the same `lstat`s)."""
    out: list[str] = []
    total = 0
    base = os.fspath(root)
    seen: set[str] = set()
    for rel in rels:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            sub = "/".join(parts[:i])
            if sub not in seen:
                check_entry(root, sub, last=False)
                seen.add(sub)
        path = f"{base}/{rel}"
        total += check_entry(root, rel, last=True, path=path)
        out.append(path)
    return out, total


def check_entry(root: Path, rel: str, *, last: bool, path: str | None = None) -> int:
    """lstat one entry of the store: a directory (not `last`) or a regular file, never a link;
    its size."""
    try:
        st = os.lstat(path or f"{os.fspath(root)}/{rel}")
    except FileNotFoundError:
        raise StoreError(
            f"{rel} is listed in the manifest but missing (removed after the grace period?)",
            path=root,
        ) from None
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        raise StoreError(
            f"{rel} is a symbolic link; a store's files must be its own, so it is not read",
            path=root,
        )
    if last and not stat.S_ISREG(mode):
        raise StoreError(f"{rel} is not a regular file", path=root)
    if not last and not stat.S_ISDIR(mode):
        raise StoreError(f"{rel} is not a directory", path=root)
    return st.st_size


@contextlib.contextmanager
def locked(root: Path) -> Iterator[int]:
    """Hold the store lock (an exclusive flock on `.lock`, opened without following a link
    and never truncated); yields the root's descriptor, which every write goes through."""
    with walk(root, [], create=True) as root_fd:
        assert root_fd is not None
        try:
            fd = os.open(
                LOCK_NAME,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                FILE_MODE,
                dir_fd=root_fd,
            )
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise StoreError(
                f"{LOCK_NAME} is a symbolic link; refusing to follow it", path=root
            ) from None
        try:
            flock(fd, root, exclusive=True)
            yield root_fd
        finally:
            os.close(fd)  # releases the lock


def load_for_write(root: Path, root_fd: int, cached: Manifest | None = None) -> Manifest:
    """Under the lock: the latest state (`cached`, a state this process read before, brought
    up to date from the log). A new store gets its manifest (layout 3, version 0) before any
    table directory, so that a kill after its first renames never leaves a directory no
    Store() accepts. A layout 1 or 2 store is migrated, once: its files are listed (layout 1),
    unlisted files removed, and the manifest rewritten as layout 3's checkpoint at version 0;
    from then on it has a log and older traceanalyze versions refuse it ("newer layout")."""
    m = store_log.load(root, cached)
    if m is not None and m.layout == LAYOUT_VERSION:
        return m
    if m is None:
        m = Manifest()
    else:
        if m.layout == 1:
            _upgrade_layout1(root, root_fd, m)
        remove_debris(root, root_fd, m)
        remove_dead_staging(root / STAGING)
    store_log.clear(root, root_fd)  # an interrupted migration's entries, if any
    m.layout, m.version = LAYOUT_VERSION, 0
    kill_point("before-migration")
    write_manifest(root, m, root_fd)
    return m


def _upgrade_layout1(root: Path, root_fd: int, m: Manifest) -> None:
    """A layout-1 store's files listed: its partial sources and temporary directories become
    garbage."""
    now = time.time()
    listed = {f for t in m.sources.values() for fs in t.values() for f in fs}
    for name in schema.TABLE_NAMES:
        for rel in partition_files(root, name):
            if rel not in listed and path_problem(rel) is None:
                m.garbage.append((rel, now, 0))
    with os.scandir(root_fd) as it:
        legacy = [e.name for e in it if e.is_dir(follow_symlinks=False)]
    for d in legacy:
        if d.startswith(LEGACY_TEMP_PREFIXES):
            rmtree_at(root_fd, d)


def remove_debris(root: Path, root_fd: int, m: Manifest) -> None:
    """Under the lock, a walk of every partition (its cost grows with the store: run by
    `vacuum` and a migration only): delete files neither listed nor garbage, and emptied
    partition directories. Every deletion is relative to a directory opened without following
    a link (a link where a directory of the store belongs stops with a StoreError)."""
    known = {f for t in m.sources.values() for fs in t.values() for f in fs}
    known.update(rel for rel, _, _ in m.garbage)
    for name in schema.TABLE_NAMES:
        for rel in partition_files(root, name):
            if rel not in known:
                unlink(root, root_fd, rel)
        tfd = open_path(root_fd, [name], root)
        if tfd is None:
            continue
        try:
            with os.scandir(tfd) as it:
                parts = [e.name for e in it if e.is_dir(follow_symlinks=False)]
            for part in parts:
                with contextlib.suppress(OSError):
                    os.rmdir(part, dir_fd=tfd)  # only when empty
        finally:
            os.close(tfd)
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=root_fd)


def expire(root: Path, root_fd: int, m: Manifest, e: Entry, now: float, grace_s: float) -> None:
    """Under the lock: delete the garbage that is older than the grace period and that no
    reader's lease still pins (store.lease), and record it in entry `e`. Every garbage path
    was checked to be of the store's shape when the manifest or log entry was read."""
    due = [(rel, v) for rel, since, v in m.garbage if now - since >= grace_s]
    if not due:
        return
    pinned = oldest_pinned(root, root_fd)
    for rel, v in due:
        if pinned is None or v <= pinned:
            unlink(root, root_fd, rel, prune=True)
            e.purge.append(rel)


def clean_dead(root: Path, root_fd: int, m: Manifest) -> None:
    """Under the lock: remove dead writers' staging, and first the files each one's commit
    renamed into place without committing them (a writer killed between its renames and its
    log entry). Its staging's directories name them, so this costs nothing per source."""
    garbage: set[str] | None = None

    def on_dead(sfd: int, txn: str) -> None:
        nonlocal garbage
        if not re.fullmatch(r"[0-9a-f]{32}-[0-9a-f]{32}", txn):
            return
        for table, sid in store_log.staged_files(root, sfd, txn):
            rel = f"{table}/source_id={sid}/part-{txn}.parquet"
            if m.listed(sid, table, rel):
                continue
            garbage = garbage if garbage is not None else {g for g, _, _ in m.garbage}
            if rel not in garbage:
                unlink(root, root_fd, rel, prune=True)

    remove_dead_staging(root / STAGING, on_dead=on_dead)


def finish(root: Path, root_fd: int, m: Manifest, e: Entry) -> Manifest:
    """Commit entry `e` (nothing when it changes nothing) and return the new state; every
    CHECKPOINT_EVERY versions, or when a killed writer missed a checkpoint, write the whole
    state to the manifest and drop the entries an earlier checkpoint holds."""
    if e.empty():
        return m
    kill_point("before-manifest")
    store_log.append(root, root_fd, e)
    new = store_log.apply(m, e)
    kill_point("after-manifest")
    versions, temps = store_log.log_files(root)
    every = store_log.CHECKPOINT_EVERY
    if new.version % every == 0 or len(versions) >= 3 * every:
        checkpoint(root, root_fd, new, temps)
    return new


def checkpoint(root: Path, root_fd: int, m: Manifest, temps: list[str]) -> None:
    """Write the whole state `m` to the manifest; keep one interval of older entries for
    readers that listed the log just before."""
    kill_point("before-checkpoint")
    write_manifest(root, m, root_fd)
    kill_point("after-checkpoint")
    store_log.prune(root, root_fd, m.version - store_log.CHECKPOINT_EVERY, temps)
    with os.scandir(root_fd) as it:
        dead = [e.name for e in it if _MANIFEST_TEMP.fullmatch(e.name)]
    for name in dead:  # a writer killed mid-checkpoint (only lock holders write them)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=root_fd)


def unlink(root: Path, root_fd: int, rel: str, *, prune: bool = False) -> None:
    """Delete one data file (a link is removed itself, never its target); with `prune`, its
    partition and table directories too when that leaves them empty."""
    *dirs, fname = rel.split("/")
    pfd = open_path(root_fd, dirs, root)
    if pfd is None:
        return
    try:
        # a directory planted under a part file's name is left alone (never read either)
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            os.unlink(fname, dir_fd=pfd)
    finally:
        os.close(pfd)
    if prune:
        with contextlib.suppress(OSError):  # only when empty
            tfd = open_path(root_fd, dirs[:1], root)
            if tfd is not None:
                try:
                    os.rmdir(dirs[1], dir_fd=tfd)
                finally:
                    os.close(tfd)
                os.rmdir(dirs[0], dir_fd=root_fd)


def write_manifest(root: Path, m: Manifest, root_fd: int) -> None:
    tmp = f".{MARKER}.{uuid.uuid4().hex}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with os.fdopen(os.open(tmp, flags, FILE_MODE, dir_fd=root_fd), "w") as f:
            f.write(m.to_json())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, MARKER, src_dir_fd=root_fd, dst_dir_fd=root_fd)  # the commit
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=root_fd)
        raise
    os.fsync(root_fd)
