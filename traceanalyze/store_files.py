"""The store's file operations (internals of `traceanalyze.store`): the store lock, the
manifest's write, the clean-up of garbage and debris, and the checks every file gets before it is
read. Every operation that changes the store goes through directory descriptors opened without
following a link (`_safefs`); docs/store.md, "Sharing a store", says what that defends against.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from . import schema
from ._safefs import FILE_MODE, open_path, rmtree_at, walk
from .errors import StoreError
from .manifest import (
    LAYOUT_VERSION,
    LEGACY_TEMP_PREFIXES,
    LOCK_NAME,
    MARKER,
    STAGING,
    Manifest,
    flock,
    partition_files,
    path_problem,
    read_manifest,
    remove_dead_staging,
)


def checked(root: Path, rels: list[str]) -> list[str]:
    """The paths of committed files to hand to polars, DuckDB or Dask, each checked to be a
    regular file inside the store's own directories: a link anywhere on the way (table or
    partition directory, the file) is a StoreError, never followed out of the store."""
    out: list[str] = []
    seen: dict[str, None] = {}
    for rel in rels:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub in seen:
                continue
            check_entry(root, sub, last=i == len(parts))
            seen[sub] = None
        out.append(str(root / rel))
    return out


def check_entry(root: Path, rel: str, *, last: bool) -> None:
    try:
        mode = os.lstat(root / rel).st_mode
    except FileNotFoundError:
        raise StoreError(
            f"{rel} is listed in the manifest but missing (removed after the grace period?)",
            path=root,
        ) from None
    if stat.S_ISLNK(mode):
        raise StoreError(
            f"{rel} is a symbolic link; a store's files must be its own, so it is not read",
            path=root,
        )
    if last and not stat.S_ISREG(mode):
        raise StoreError(f"{rel} is not a regular file", path=root)
    if not last and not stat.S_ISDIR(mode):
        raise StoreError(f"{rel} is not a directory", path=root)


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


def load_for_write(root: Path, root_fd: int) -> Manifest:
    """The manifest (under the lock); a layout-1 store is upgraded: its committed sources
    listed, its partial ones and temporary directories garbage."""
    m = read_manifest(root)
    if m is None:
        return Manifest()
    if m.layout == 1:
        m.layout = LAYOUT_VERSION
        now = time.time()
        listed = {f for t in m.sources.values() for fs in t.values() for f in fs}
        for name in schema.TABLE_NAMES:
            for rel in partition_files(root, name):
                if rel not in listed and path_problem(rel) is None:
                    m.garbage.append((rel, now))
        with os.scandir(root_fd) as it:
            legacy = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        for d in legacy:
            if d.startswith(LEGACY_TEMP_PREFIXES):
                rmtree_at(root_fd, d)
    return m


def collect_garbage(root: Path, m: Manifest, now: float, root_fd: int, grace_s: float) -> None:
    """Under the lock: delete expired garbage, files no manifest lists (a writer killed
    before its manifest write), dead writers' staging, and emptied partition directories.
    Every deletion is relative to a directory opened without following a link (a link where
    a directory of the store belongs stops with a StoreError); every garbage path was
    checked to be of the store's shape when the manifest was read."""
    keep: list[tuple[str, float]] = []
    for rel, since in m.garbage:
        if now - since >= grace_s:
            unlink(root, root_fd, rel)
        else:
            keep.append((rel, since))
    m.garbage = keep
    known = {f for t in m.sources.values() for fs in t.values() for f in fs}
    known.update(rel for rel, _ in keep)
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
    remove_dead_staging(root / STAGING)


def unlink(root: Path, root_fd: int, rel: str) -> None:
    """Delete one data file (a link is removed itself, never its target)."""
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
