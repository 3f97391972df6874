"""File operations inside a store that never follow a symbolic link (internals of the store).

A store may live on a file system that other people can write to (a shared project directory, a
cluster scratch space), so its directories are untrusted: a `.staging`, table or partition
directory replaced by a link to somewhere else must never make a writer delete, or a reader read,
anything outside the store. Every directory here is opened relative to its parent's descriptor
with `O_NOFOLLOW | O_DIRECTORY`, and every deletion, rename and creation is made relative to a
directory descriptor (`unlinkat`, `renameat`, `mkdirat`), so there is no window between a check
and its use in which a directory could be swapped for a link. A link where a directory of the
store belongs stops the command with a `StoreError` naming it; a link where a file belongs is
never opened (a deletion removes the link itself, never its target).

New files and directories get the user's umask, and never the write bit for others (docs/store.md,
"Sharing a store").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..errors import StoreError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Modes before the umask: group-writable where the user's umask allows it (a shared store's
# group), never writable by others whatever the umask.
DIR_MODE = 0o775
FILE_MODE = 0o664
OTHERS_WRITE = stat.S_IWOTH


def not_own(parent: int, name: str, root: Path, rel: str) -> StoreError:
    """The error for `name` (in `parent`) that could not be opened as a directory of ours."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return StoreError(f"{rel} vanished while it was being opened", path=root)
    if stat.S_ISLNK(st.st_mode):
        return StoreError(
            f"{rel} is a symbolic link; a store's directories must be its own, so it is not "
            "followed (remove the link)",
            path=root,
        )
    return StoreError(f"{rel} is not a directory", path=root)


def open_root(root: Path, *, create: bool = False) -> int | None:
    """A descriptor of the store's root directory; None when it does not exist (and not
    `create`). The root itself must not be a link (the path leading to it is the user's)."""
    if create:
        makedirs(root)
    try:
        return os.open(root, DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
    if root.is_symlink():
        raise root_is_link(root) from None
    raise StoreError("is not a directory", path=root) from None


def root_is_link(root: Path) -> StoreError:
    """The error for a store root that is a link (the path leading to it is the user's own)."""
    return StoreError(
        "the store's root is a symbolic link; name the directory itself "
        f"({os.path.realpath(root)})",
        path=root,
    )


def open_dir(parent: int, name: str, root: Path, rel: str, *, create: bool = False) -> int | None:
    """A descriptor of directory `name` in `parent`, never through a link; None when it does not
    exist and not `create`. `rel` (its path in the store) names it in errors."""
    for _ in range(4):  # a concurrent cleaner may rmdir an empty directory between our two calls
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, DIR_MODE, dir_fd=parent)
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise not_own(parent, name, root, rel) from None
            raise
    raise StoreError(f"{rel} keeps disappearing while it is being created", path=root)


def open_path(base: int, parts: Sequence[str], root: Path, *, create: bool = False) -> int | None:
    """A new descriptor of `base/parts[0]/parts[1]/…` (`base` is the root's, `parts` a path
    in the store), each step opened without following a link and created when `create`; None
    when a step does not exist. `base` stays open."""
    fd: int | None = os.dup(base)
    for i, name in enumerate(parts):
        assert fd is not None
        try:
            nxt = open_dir(fd, name, root, "/".join(parts[: i + 1]), create=create)
        finally:
            os.close(fd)
        fd = nxt
        if fd is None:
            return None
    return fd


@contextlib.contextmanager
def walk(root: Path, parts: Sequence[str], *, create: bool = False) -> Iterator[int | None]:
    """The descriptor of `root/parts[0]/parts[1]/…`, each step opened without following a link
    (created when `create`); None when a step does not exist. Closed on exit."""
    base = open_root(root, create=create)
    fd = None
    try:
        if base is not None:
            fd = open_path(base, parts, root, create=create)
        yield fd
    finally:
        for f in (fd, base):
            if f is not None:
                os.close(f)


def is_dir_at(parent: int, name: str) -> bool:
    """Whether `name` in `parent` is a directory itself (a link to one is not)."""
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def rmtree_at(parent: int, name: str) -> None:
    """Remove the directory `name` in `parent` and everything in it, never following a link (a
    link inside is removed as a link). A missing entry is not an error; other errors are raised.
    (shutil.rmtree takes `dir_fd` only from Python 3.11.)"""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):  # a link or a file: remove the entry only
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=parent)
            return
        raise
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for child, is_dir in entries:
            if is_dir:
                rmtree_at(fd, child)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(name, dir_fd=parent)


def makedirs(path: Path) -> None:
    """`mkdir -p` with DIR_MODE for every directory it creates (Path.mkdir gives the parents
    the default mode, which a umask of 0 makes writable by everyone)."""
    missing = []
    p = path
    while not p.exists() and not p.is_symlink() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, DIR_MODE)


def drop_others_write(path: str | os.PathLike[str]) -> None:
    """Clear the others-write bit of a file this process just created (by a library that does not
    take a mode: pyarrow, polars)."""
    mode = os.stat(path, follow_symlinks=False).st_mode
    if mode & OTHERS_WRITE:
        os.chmod(path, stat.S_IMODE(mode) & ~OTHERS_WRITE)


def regular_file_at(parent: int, name: str) -> bool:
    """Whether `name` in `parent` is a regular file itself (not a link, not a directory)."""
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "drop_others_write",
    "is_dir_at",
    "makedirs",
    "open_dir",
    "open_path",
    "not_own",
    "open_root",
    "root_is_link",
    "regular_file_at",
    "rmtree_at",
    "walk",
]
