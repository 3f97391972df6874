"""Readers' leases (internals of `traceanalyze.store`): a reader that pins a version of the store
(`Store.snapshot()`, and so every `Dataset` over a store) holds a lease naming that version, and
garbage collection keeps every file that version lists, however long the reader takes.

    <store>/_leases/<32 hex>.lease      the pinned version as decimal text and a newline

The reader holds a shared `flock` on its lease file for as long as the lease lives; the kernel
releases it when the process ends, however it ends. A writer collecting garbage tries each lease
with an exclusive, non-blocking `flock`: when it gets it, the holder is gone and the lease is
removed (a dead reader's lease is ignored at once on a local file system; over NFS after the dead
client's lock lease, 90 s by default). A live lease whose text is not yet a version (the reader
is between taking it and reading the log) pins every version. Lease files are opened without
following a link, read at most 32 bytes, and at most MAX_LEASES are looked at (more pin every
version: a denial of service at worst, never a deletion). A reader that cannot write the store
(read access only) takes no lease and is protected by the grace period only (docs/store.md).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import uuid
from pathlib import Path

from ._safefs import FILE_MODE, open_dir, open_path, walk
from .manifest import flock_shared

LEASES = "_leases"
MAX_LEASES = 10_000
UNPINNED = -1  # a live lease without a version yet: keep everything
_NAME = re.compile(r"[0-9a-f]{32}\.lease")
_TEXT = re.compile(rb"(\d{1,20})\n")
_ATTEMPTS = 8


class Lease:
    """A held lease on one store; `pin(version)` once the version is known, `release()` when
    done (also when the object is collected: `weakref.finalize` in `Store.snapshot`)."""

    def __init__(self, root: Path, name: str, fd: int) -> None:
        self.root, self.name, self.fd, self.pid = root, name, fd, os.getpid()

    def pin(self, version: int) -> None:
        os.pwrite(self.fd, f"{version}\n".encode(), 0)

    def release(self) -> None:
        """Remove the lease file, then drop the lock (a collector never sees it free and
        present). A forked child does not remove its parent's lease."""
        fd, self.fd = self.fd, -1
        if fd < 0 or self.pid != os.getpid():
            return
        with contextlib.suppress(OSError), walk(self.root, [LEASES]) as dfd:
            if dfd is not None:
                os.unlink(self.name, dir_fd=dfd)
        os.close(fd)


def take(root: Path) -> Lease | None:
    """A new lease, held until released or until this process ends; None when the store cannot
    be written here (read-only access, a read-only file system) or does not exist."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with walk(root, []) as root_fd:
            if root_fd is None:
                return None
            dfd = open_dir(root_fd, LEASES, root, LEASES, create=True)
            assert dfd is not None
            try:
                for _ in range(_ATTEMPTS):
                    name = f"{uuid.uuid4().hex}.lease"
                    fd = os.open(name, flags, FILE_MODE, dir_fd=dfd)
                    flock_shared(fd, root)
                    # a collector may have taken the new, unlocked file for a dead one
                    if _same(dfd, name, fd):
                        return Lease(root, name, fd)
                    os.close(fd)
            finally:
                os.close(dfd)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return None
        raise
    return None


def _same(dfd: int, name: str, fd: int) -> bool:
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def oldest_pinned(root: Path, root_fd: int) -> int | None:
    """The lowest version a live lease pins (UNPINNED when one pins everything), None when no
    reader holds a lease. Dead readers' leases are removed on the way."""
    dfd = open_path(root_fd, [LEASES], root)
    if dfd is None:
        return None
    try:
        with os.scandir(dfd) as it:
            names = [e.name for e in it if _NAME.fullmatch(e.name)]
            if len(names) > MAX_LEASES:
                return UNPINNED
        low: int | None = None
        for name in names:
            v = _live_version(dfd, name)
            if v is not None:
                low = v if low is None else min(low, v)
        return low
    finally:
        os.close(dfd)


def _live_version(dfd: int, name: str) -> int | None:
    """The version a live lease pins; None (and the lease removed) when its holder is gone."""
    fd = -1
    for mode in (os.O_RDWR, os.O_RDONLY):  # another user's lease may be read-only to us
        try:
            fd = os.open(name, mode | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            break
        except FileNotFoundError:
            return None
        except PermissionError:
            continue
        except OSError as e:
            if e.errno == errno.ELOOP:  # a link where a lease belongs: the link only goes
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dfd)
                return None
            if e.errno == errno.EISDIR:
                return None
            raise
    if fd < 0:
        return UNPINNED  # unreadable: whether it is alive cannot be told, so keep everything
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # alive (or, over NFS, a read-only descriptor that cannot tell)
            m = _TEXT.fullmatch(os.pread(fd, 32, 0))
            return int(m.group(1)) if m else UNPINNED
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dfd)
        return None
    finally:
        os.close(fd)


__all__ = ["LEASES", "Lease", "UNPINNED", "oldest_pinned", "take"]
