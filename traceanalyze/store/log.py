"""The store's commit log (layout 3; internals of `traceanalyze.store`, docs/store.md).

    <store>/traceanalyze-store.json     the checkpoint: every committed file at version C
    <store>/_log/<v: 20 digits>.json    what commit v changed, for every v > C

A commit writes one small entry, so its cost does not grow with the store: the sources it adds
or replaces (their files), the sources it removes, and the garbage files it deleted. Every
CHECKPOINT_EVERY commits the committing writer also rewrites the manifest with the whole state
(a checkpoint, as Delta Lake and Apache Iceberg do) and removes the entries that an earlier
checkpoint already holds. A reader reads the manifest and replays the entries after its version.

An entry is written to a temporary name in `_log/`, fsynced, and hard-linked to its final name,
which fails when that name exists (`O_EXCL`'s guarantee, for a whole file): two writers can
never both commit version v. Writers also hold the store lock, so the link is a second guard.
Every entry is checked exactly as the manifest is (paths of the store's shape, listed under
their own source and table, the same bounds); a torn or tampered entry is a StoreError naming
its file. The `_log` directory and its files are opened without following a link.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .. import schema
from ..errors import StoreError
from ._safefs import FILE_MODE, open_dir, open_path, walk
from .manifest import (
    MARKER,
    MAX_GARBAGE,
    MAX_SOURCES,
    Malformed,
    Manifest,
    checked_sources,
    checked_time,
    checked_version,
    path_problem,
    read_bounded,
    read_manifest,
    short,
)

LOG_DIR = "_log"
CHECKPOINT_EVERY = 100
# Entries kept in `_log`: a checkpoint every 100 commits keeps about 200; a missed checkpoint
# (a writer killed between its entry and its checkpoint) is written by the next writer.
MAX_LOG_FILES = 100_000
_ENTRY = re.compile(r"(\d{20})\.json")
_TEMP = re.compile(r"\.tmp-[0-9a-f]{32}")
_READ_ATTEMPTS = 8


@dataclass
class Entry:
    """What one commit changed."""

    version: int
    time: float
    add: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)
    purge: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.add or self.remove or self.purge)

    def to_json(self) -> str:
        doc = {
            "version": self.version,
            "time": self.time,
            "add": {sid: {"files": t} for sid, t in sorted(self.add.items())},
            "remove": sorted(self.remove),
            "purge": self.purge,
        }
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def entry_name(version: int) -> str:
    return f"{version:020d}.json"


def apply(m: Manifest, e: Entry) -> Manifest:
    """The state after entry `e` (a new Manifest: `m` may be held by a reader). A removed or
    replaced source's files become garbage at `e`'s time and version."""
    sources, garbage = dict(m.sources), list(m.garbage)
    for sid in e.remove:
        old = sources.pop(sid, None)
        garbage.extend((f, e.time, e.version) for fs in (old or {}).values() for f in fs)
    for sid, files in e.add.items():
        old = sources.get(sid)
        garbage.extend((f, e.time, e.version) for fs in (old or {}).values() for f in fs)
        sources[sid] = files
    if e.purge:
        gone = set(e.purge)
        garbage = [g for g in garbage if g[0] not in gone]
    if len(sources) > MAX_SOURCES or len(garbage) > MAX_GARBAGE:
        raise Malformed(entry_name(e.version), "more sources or garbage than a store may hold")
    return Manifest(sources, garbage, m.layout, e.version)


def checked_entry(doc: object, version: int) -> Entry:
    """An entry's JSON, every field checked as the manifest's are."""
    if not isinstance(doc, dict):
        raise Malformed("entry", f"not an object but {type(doc).__name__}")
    if checked_version(doc.get("version"), "version") != version:
        raise Malformed(f"version = {short(doc.get('version'))}", "not the file's own version")
    e = Entry(version, checked_time(doc.get("time"), "time"))
    e.add = checked_sources(doc.get("add", {}), "add")
    remove, purge = doc.get("remove", []), doc.get("purge", [])
    if not isinstance(remove, list) or len(remove) > MAX_SOURCES:
        raise Malformed("remove", f"not a list of at most {MAX_SOURCES:,} source ids")
    for i, sid in enumerate(remove):
        if not isinstance(sid, str) or not re.fullmatch(r"[0-9a-f]{16}", sid):
            raise Malformed(f"remove[{i}] = {short(sid)}", "not a source id (16 hex digits)")
    if not isinstance(purge, list) or len(purge) > MAX_GARBAGE:
        raise Malformed("purge", f"not a list of at most {MAX_GARBAGE:,} paths")
    for i, rel in enumerate(purge):
        why = path_problem(rel)
        if why is not None:
            raise Malformed(f"purge[{i}] = {short(rel)}", why)
    e.remove, e.purge = list(remove), list(purge)
    return e


# --- reading ------------------------------------------------------------------------------------


def log_files(root: Path) -> tuple[list[int], list[str]]:
    """The versions of the entries in `_log` (sorted) and the temporary files there; the
    directory is opened without following a link and at most MAX_LOG_FILES names are read."""
    versions: list[int] = []
    temps: list[str] = []
    with walk(root, [LOG_DIR]) as fd:
        if fd is None:
            return versions, temps
        with os.scandir(fd) as it:
            for i, e in enumerate(it):
                if i >= MAX_LOG_FILES:
                    raise StoreError(
                        f"{LOG_DIR} holds more than {MAX_LOG_FILES:,} files; not a store this "
                        "traceanalyze wrote",
                        path=root,
                    )
                if m := _ENTRY.fullmatch(e.name):
                    versions.append(int(m.group(1)))
                elif _TEMP.fullmatch(e.name):
                    temps.append(e.name)
    return sorted(versions), temps


def read_entry(root: Path, dfd: int, version: int) -> Entry:
    """One entry, checked; a missing one raises FileNotFoundError (a reader retries)."""
    rel = f"{LOG_DIR}/{entry_name(version)}"
    try:
        fd = os.open(entry_name(version), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise StoreError(f"{rel} is a symbolic link; refusing to follow it", path=root) from None
    text = read_bounded(fd, root, f"log entry {rel}")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        why = f"unreadable log entry {rel} (torn or not JSON): {short(str(e))}"
        raise StoreError(why, path=root) from None
    try:
        return checked_entry(doc, version)
    except Malformed as e:
        raise StoreError(f"malformed log entry {rel}: {e.where}: {e.why}", path=root) from None


def _later(root: Path, m: Manifest, versions: list[int]) -> list[int] | None:
    """The entries after `m`'s version when they follow it without a gap; None when the first
    of them is missing (removed after a newer checkpoint: read the manifest again)."""
    later = [v for v in versions if v > m.version]
    if not later:
        return later
    if later[0] != m.version + 1:
        return None
    for want, v in enumerate(later, start=m.version + 1):
        if v != want:
            raise StoreError(f"{LOG_DIR}/{entry_name(want)} is missing from the log", path=root)
    return later


def replay(root: Path, m: Manifest, versions: list[int]) -> Manifest:
    if not versions:
        return m
    with walk(root, [LOG_DIR]) as dfd:
        if dfd is None:
            raise FileNotFoundError(LOG_DIR)
        for v in versions:
            try:
                m = apply(m, read_entry(root, dfd, v))
            except Malformed as e:
                rel = f"{LOG_DIR}/{entry_name(v)}"
                raise StoreError(f"malformed log entry {rel}: {e.why}", path=root) from None
    return m


def load(root: Path, cached: Manifest | None = None) -> Manifest | None:
    """The latest committed state: `cached` (a state read before) brought up to date from the
    log when it can be, else the manifest and the entries after it. None: no store."""
    gap_at: int | None = None
    for _ in range(_READ_ATTEMPTS):
        try:
            if cached is not None and cached.layout == 3:
                later = _later(root, cached, log_files(root)[0])
                if later is not None:
                    return replay(root, cached, later)
            m = read_manifest(root)
            if m is None or m.layout < 3:
                return m
            later = _later(root, m, log_files(root)[0])
            if later is not None:
                return replay(root, m, later)
            if gap_at == m.version:  # the same checkpoint twice: not a race, a hole
                missing = f"{LOG_DIR}/{entry_name(m.version + 1)}"
                raise StoreError(f"{missing} is missing from the log", path=root)
            gap_at = m.version
        except FileNotFoundError:
            pass  # a checkpoint removed an entry between our listing and our read
        cached = None
    raise StoreError(
        f"the log kept changing under {_READ_ATTEMPTS} reads of {MARKER} and {LOG_DIR}; "
        "is a writer checkpointing in a loop?",
        path=root,
    )


# --- writing (under the store lock) -------------------------------------------------------------


@contextlib.contextmanager
def _log_dir(root: Path, root_fd: int) -> Iterator[int]:
    dfd = open_path(root_fd, [LOG_DIR], root, create=True)
    assert dfd is not None
    try:
        yield dfd
    finally:
        os.close(dfd)


def append(root: Path, root_fd: int, e: Entry) -> None:
    """Write entry `e` as `_log/<version>.json`: the commit. A temporary file, fsynced, then a
    hard link to the final name (fails if it exists), then the directory fsynced."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    name = entry_name(e.version)
    with _log_dir(root, root_fd) as dfd:
        tmp = f".tmp-{uuid.uuid4().hex}"
        try:
            with os.fdopen(os.open(tmp, flags, FILE_MODE, dir_fd=dfd), "w") as f:
                f.write(e.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            raise StoreError(
                f"{LOG_DIR}/{name} exists: another writer committed version {e.version} "
                "without the store lock",
                path=root,
            ) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
        os.fsync(dfd)


def prune(root: Path, root_fd: int, keep_after: int, temps: list[str]) -> None:
    """Remove the entries up to `keep_after` (a checkpoint holds them) and dead writers'
    temporary files (only lock holders write in `_log`, so every temporary file there now is
    a killed writer's)."""
    versions, _ = log_files(root)
    with _log_dir(root, root_fd) as dfd:
        for name in [*(entry_name(v) for v in versions if v <= keep_after), *temps]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dfd)


def clear(root: Path, root_fd: int) -> None:
    """Remove every entry and temporary file of `_log` (a store becoming layout 3: whatever is
    there is an interrupted migration's)."""
    versions, temps = log_files(root)
    prune(root, root_fd, max(versions, default=-1), temps)


def staged_files(root: Path, sfd: int, txn: str) -> list[tuple[str, str]]:
    """(table, source id) of every partition a transaction's staging holds: its renames leave
    these directories behind, so they name the files its commit may have renamed into place."""
    out: list[tuple[str, str]] = []
    tfd = open_dir(sfd, txn, root, f".staging/{txn}")
    if tfd is None:
        return out
    try:
        with os.scandir(tfd) as it:
            tables = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        for t in tables:
            if t not in schema.TABLE_NAMES:
                continue
            pfd = open_dir(tfd, t, root, f".staging/{txn}/{t}")
            if pfd is None:
                continue
            try:
                with os.scandir(pfd) as it:
                    parts = [e.name for e in it if e.is_dir(follow_symlinks=False)]
            finally:
                os.close(pfd)
            out.extend(
                (t, p.split("=", 1)[1]) for p in parts if re.fullmatch(r"source_id=[0-9a-f]{16}", p)
            )
    finally:
        os.close(tfd)
    return out


__all__ = [
    "CHECKPOINT_EVERY",
    "Entry",
    "LOG_DIR",
    "append",
    "apply",
    "clear",
    "entry_name",
    "load",
    "log_files",
    "prune",
    "read_entry",
    "staged_files",
]
