"""The Parquet store: hive-partitioned Parquet files and a manifest that names the committed ones.

Layout (docs/store.md has the whole protocol and recipes for outside engines)::

    <store>/traceanalyze-store.json                       the manifest: the commit point
    <store>/<table>/source_id=<id>/part-<txn>.parquet     one file per table per source and commit
    <store>/.lock                                         the store lock (flock), held to commit
    <store>/.staging/<txn>.lock, <store>/.staging/<txn>/  a writer's files before its commit

A source is in the store when the manifest lists it; readers (`scan`, `table`, `tables`,
`files`, `source_ids`, `has_source`) read the manifest once and open only the files it lists,
so a source appears, or is replaced, for them in one step: the `os.replace` of the manifest.
Files in the table directories that the manifest does not list (a writer killed between its
renames and its manifest write, a replaced source's old files) are never read; the next writer
removes them, replaced files only after a grace period (`grace_s`) so that a reader still
holding the previous manifest finds them.

`source_id` lives in the directory name only (the hive convention). It is hex text that can be
all digits (`0123…`), which hive readers infer as an integer: `scan` pins it to String, and a
scan of your own should too (polars `hive_schema={"source_id": pl.String}`, DuckDB
`hive_types={'source_id': 'VARCHAR'}`).

Test hook: `TRACEANALYZE_TEST_KILL_AT=<point>` makes the process SIGKILL itself at that point
(`stage-start`, `stage-mid`, `commit-locked`, `rename-<n>`, `before-manifest`,
`after-manifest`); the crash tests use it, nothing else should.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from . import schema
from .errors import StoreError, TraceanalyzeError, UnknownFormat
from .readers import READERS, detect_format, file_sha256, source_id_for
from .tables import Tables

MARKER = "traceanalyze-store.json"
LAYOUT_VERSION = 2
LOCK_NAME = ".lock"
STAGING = ".staging"
DEFAULT_GRACE_S = 60.0
KILL_ENV = "TRACEANALYZE_TEST_KILL_AT"
_LEGACY_TEMP_PREFIXES = (".tmp-", ".trash-")  # layout 1's staging and trash directories
_LOCK_ATTEMPTS = 8

# Transaction locks this process holds: txn -> fd (a shared flock on .staging/<txn>.lock).
_HELD: dict[str, int] = {}


def _kill_point(point: str) -> None:
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


def _flock_shared(fd: int, root: Path) -> None:
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


def _acquire_txn(staging_root: Path) -> str:
    """A new transaction id whose lock file `.staging/<txn>.lock` this process holds (shared).

    The lock tells a later writer that the txn is alive; a killed writer's lock is released by
    the kernel, so its leftovers can be removed. A cleaner may unlink a lock file between its
    creation and our flock: the inode check catches that and we start over with a new id.
    """
    for _ in range(_LOCK_ATTEMPTS):
        txn = uuid.uuid4().hex
        path = staging_root / f"{txn}.lock"
        try:
            staging_root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:  # a failing writer removed the empty root meanwhile
            continue
        _flock_shared(fd, staging_root.parent)
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            _HELD[txn] = fd
            return txn
        os.close(fd)
    raise StoreError("could not create a staging transaction", path=staging_root.parent)


def _hold_txn(staging_root: Path, txn: str) -> bool:
    """Hold `txn`'s lock in this process too (a Staged made by another process); False when its
    staging is gone."""
    if txn in _HELD:
        return True
    try:
        fd = os.open(staging_root / f"{txn}.lock", os.O_RDWR)
    except FileNotFoundError:
        return False
    _flock_shared(fd, staging_root.parent)
    _HELD[txn] = fd
    return (staging_root / txn).is_dir()


def _release_txn(staging_root: Path, txn: str) -> None:
    """Remove a txn's staging and lock file, then drop this process's lock on it."""
    shutil.rmtree(staging_root / txn, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staging_root / f"{txn}.lock")
    fd = _HELD.pop(txn, None)
    if fd is not None:
        os.close(fd)


def _remove_dead_staging(staging_root: Path) -> None:
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
            shutil.rmtree(staging_root / lock.stem, ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    # A directory without its lock file: the lock is created first and removed last.
    for d in staging_root.iterdir():
        if d.is_dir() and not (staging_root / f"{d.name}.lock").exists():
            shutil.rmtree(d, ignore_errors=True)


# --- the store ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Staged:
    """One source's files written under `<store>/.staging/<txn>/`, not yet visible. Picklable:
    a process (or machine, on a shared file system) may stage and another commit; the staging
    process keeps the txn alive (its lock) until it commits, discards or exits."""

    source_id: str
    txn: str
    store_root: str
    tables: tuple[str, ...]
    replace_existing: bool
    created_root: bool


class Store:
    """A directory of hive-partitioned Parquet tables with a manifest of committed files."""

    def __init__(self, root: str | os.PathLike[str], *, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.root = Path(root)
        self.grace_s = grace_s
        self._pinned: Manifest | None = None
        if self.root.is_dir() and not (self.root / MARKER).exists():
            # A store being created by another writer has only its lock and staging so far.
            ours = {LOCK_NAME, STAGING}
            foreign = [
                p.name
                for p in self.root.iterdir()
                if p.name not in ours and not p.name.startswith(f".{MARKER}.")
            ]
            if foreign:
                raise StoreError("exists and is not a traceanalyze store", path=self.root)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # --- reading --------------------------------------------------------------------------------

    def snapshot(self) -> Store:
        """This store pinned to its current manifest: every read of the returned Store sees the
        same committed sources, whatever is committed meanwhile."""
        pinned = Store.__new__(Store)
        pinned.root, pinned.grace_s = self.root, self.grace_s
        pinned._pinned = self._manifest()
        return pinned

    def _manifest(self) -> Manifest:
        if self._pinned is not None:
            return self._pinned
        return read_manifest(self.root) or Manifest()

    def files(self, table: str) -> list[Path]:
        """The committed Parquet files of one table (for DuckDB, polars, Spark, pyarrow)."""
        schema_table(table, self.root)
        return [self.root / f for f in self._manifest().files(table)]

    def scan(self, table: str) -> pl.LazyFrame:
        """A lazy scan of one table over every source; empty with the full schema when none."""
        return self._scan(table, self._manifest())

    def _scan(self, table: str, m: Manifest) -> pl.LazyFrame:
        t = schema_table(table, self.root)
        files = [str(self.root / f) for f in m.files(table)]
        if not files:
            return schema.empty(table).lazy()
        file_schema = pl.Schema({c.name: c.dtype for c in t.columns if c.name != "source_id"})
        lf = pl.scan_parquet(
            files,
            schema=file_schema,
            hive_partitioning=True,
            hive_schema=pl.Schema({"source_id": pl.String()}),
            # Files written before a column was added to the schema read it as nulls.
            missing_columns="insert",
        )
        return lf.select(t.names)

    def table(self, table: str) -> pl.DataFrame:
        """One table over every source, collected."""
        return self.scan(table).collect()

    def source_ids(self) -> list[str]:
        return sorted(self._manifest().sources)

    def has_source(self, source_id: str) -> bool:
        return source_id in self._manifest().sources

    def tables(self, source_ids: Sequence[str] | None = None) -> Tables:
        """All tables (optionally of some sources only) from one manifest, collected."""
        m = self._manifest()
        frames = {}
        for name in schema.TABLE_NAMES:
            lf = self._scan(name, m)
            if source_ids is not None:
                lf = lf.filter(pl.col("source_id").is_in(list(source_ids)))
            frames[name] = lf.collect()
        return Tables.build(**frames)

    # --- writing --------------------------------------------------------------------------------

    def write(self, tables: Tables, *, replace_existing: bool = False) -> str:
        """Write the tables of one source atomically; returns its source_id."""
        sid = _one_source(tables)
        if not replace_existing and self.has_source(sid):
            raise StoreError(f"source {sid} is already in the store", path=self.root)
        staged = self.stage(tables, replace_existing=replace_existing)
        try:
            [status] = self.commit(staged)
        finally:
            self.discard(staged)
        if status == "unchanged":
            raise StoreError(f"source {sid} is already in the store", path=self.root)
        return sid

    def stage(self, tables: Tables, *, replace_existing: bool = False) -> Staged:
        """Write one source's files under `.staging/<txn>/` in the store; none visible yet.
        Whether it replaces, or yields to, a source of the same id is decided by `commit`."""
        sid = _one_source(tables)
        _kill_point("stage-start")
        created_root = not self.root.exists()
        staging_root = self.root / STAGING
        txn = _acquire_txn(staging_root)
        written: list[str] = []
        try:
            for name, df in tables.items():
                if df.height == 0 and name != "sources":
                    continue
                part = staging_root / txn / name / f"source_id={sid}"
                part.mkdir(parents=True)
                dest = part / f"part-{txn}.parquet"
                df.drop("source_id").write_parquet(dest, compression="zstd", statistics=True)
                _fsync_path(dest)  # durable before a manifest can name it
                written.append(name)
                _kill_point("stage-mid")
        except BaseException:
            self._drop(txn, created_root)
            raise
        return Staged(sid, txn, str(self.root), tuple(written), replace_existing, created_root)

    def discard(self, staged: Staged) -> None:
        """Drop a staged source (nothing if it was committed). The store directory is removed only
        if this writer created it and it is empty again (`rmdir`: never anyone else's files)."""
        self._drop(staged.txn, staged.created_root)

    def _drop(self, txn: str, created_root: bool) -> None:
        _release_txn(self.root / STAGING, txn)
        # rmdir removes only empty directories: never another writer's files. (A writer that
        # loses its `.staging` this way between its mkdir and its lock file retries.)
        with contextlib.suppress(OSError):
            (self.root / STAGING).rmdir()
        if created_root:
            with contextlib.suppress(OSError):
                self.root.rmdir()

    def commit(self, staged: Staged | Sequence[Staged]) -> list[str]:
        """Make staged sources visible, all in one manifest write under the store lock.

        Returns per staged source "ingested", "replaced", or "unchanged" (already committed,
        by another writer too, and not `replace_existing`: its staged files are dropped).
        """
        items = [staged] if isinstance(staged, Staged) else list(staged)
        if not items:
            if self._has_leftovers():  # a killed writer's: the next writer cleans up
                self.vacuum()
            return []
        staging_root = self.root / STAGING
        for s in items:
            if Path(s.store_root).resolve() != self.root.resolve():
                raise ValueError(f"staged for {s.store_root}, not {self.root}")
            if not _hold_txn(staging_root, s.txn):
                raise StoreError(f"the staging of source {s.source_id} is gone", path=self.root)
        with self._locked():
            _kill_point("commit-locked")
            m = self._load_for_write()
            if not (self.root / MARKER).exists():
                # A new store: its marker before any table directory, so that a kill between
                # the renames and the manifest never leaves a directory no Store() accepts.
                self._write_manifest(m)
            now = time.time()
            self._collect_garbage(m, now)
            renames = itertools.count(1)
            statuses = [self._apply(m, s, now, renames) for s in items]
            _kill_point("before-manifest")
            self._write_manifest(m)
            _kill_point("after-manifest")
        for s in items:
            self._drop(s.txn, False)
        return statuses

    def _apply(self, m: Manifest, s: Staged, now: float, renames: Iterator[int]) -> str:
        """Rename one staged source's files into place and list them in `m` (not yet written)."""
        old = m.sources.get(s.source_id)
        if old is not None and not s.replace_existing:
            return "unchanged"
        src = self.root / STAGING / s.txn
        files: dict[str, list[str]] = {}
        for name in s.tables:
            rel = f"{name}/source_id={s.source_id}/part-{s.txn}.parquet"
            dest = self.root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src / rel, dest)
            _fsync_path(dest.parent)
            files[name] = [rel]
            _kill_point(f"rename-{next(renames)}")
        if old is not None:
            m.garbage.extend((f, now) for fs in old.values() for f in fs)
        m.sources[s.source_id] = files
        return "ingested" if old is None else "replaced"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        from filelock import FileLock

        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.root / LOCK_NAME)):
            yield

    def _load_for_write(self) -> Manifest:
        """The manifest (under the lock); a layout-1 store is upgraded: its committed sources
        listed, its partial ones and temporary directories garbage."""
        m = read_manifest(self.root)
        if m is None:
            return Manifest()
        if m.layout == 1:
            m.layout = LAYOUT_VERSION
            now = time.time()
            listed = {f for t in m.sources.values() for fs in t.values() for f in fs}
            for name in schema.TABLE_NAMES:
                for f in (self.root / name).glob("source_id=*/*.parquet"):
                    rel = str(f.relative_to(self.root))
                    if rel not in listed:
                        m.garbage.append((rel, now))
            for p in self.root.iterdir():
                if p.is_dir() and p.name.startswith(_LEGACY_TEMP_PREFIXES):
                    shutil.rmtree(p, ignore_errors=True)
        return m

    def _collect_garbage(self, m: Manifest, now: float, grace_s: float | None = None) -> None:
        """Under the lock: delete expired garbage, files no manifest lists (a writer killed
        before its manifest write), dead writers' staging, and emptied partition directories."""
        grace = self.grace_s if grace_s is None else grace_s
        keep: list[tuple[str, float]] = []
        for rel, since in m.garbage:
            if now - since >= grace:
                (self.root / rel).unlink(missing_ok=True)
            else:
                keep.append((rel, since))
        m.garbage = keep
        known = {f for t in m.sources.values() for fs in t.values() for f in fs}
        known.update(rel for rel, _ in keep)
        for name in schema.TABLE_NAMES:
            tdir = self.root / name
            if not tdir.is_dir():
                continue
            for part in tdir.glob("source_id=*"):
                for f in part.glob("part-*.parquet"):
                    if str(f.relative_to(self.root)) not in known:
                        f.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    part.rmdir()  # only when empty
            with contextlib.suppress(OSError):
                tdir.rmdir()
        _remove_dead_staging(self.root / STAGING)

    def _write_manifest(self, m: Manifest) -> None:
        tmp = self.root / f".{MARKER}.{uuid.uuid4().hex}"
        try:
            with open(tmp, "w") as f:
                f.write(m.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.root / MARKER)  # the commit
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_path(self.root)

    def _has_leftovers(self) -> bool:
        staging = self.root / STAGING
        return staging.is_dir() and any(staging.iterdir())

    def vacuum(self, grace_s: float | None = None) -> None:
        """Delete replaced files older than `grace_s` (default: the store's) and every leftover
        of dead writers now, instead of at the next commit."""
        if read_manifest(self.root) is None:
            return
        with self._locked():
            m = self._load_for_write()
            self._collect_garbage(m, time.time(), grace_s)
            self._write_manifest(m)

    def remove(self, source_id: str) -> None:
        """Remove one source (one manifest write); its files go after the grace period."""
        if read_manifest(self.root) is None:
            return
        with self._locked():
            m = self._load_for_write()
            old = m.sources.pop(source_id, None)
            if old is None:
                return
            now = time.time()
            m.garbage.extend((f, now) for fs in old.values() for f in fs)
            self._write_manifest(m)


def schema_table(table: str, root: Path) -> schema.Table:
    try:
        return schema.table(table)
    except KeyError as e:
        raise StoreError(str(e.args[0]), path=root) from None


def _one_source(tables: Tables) -> str:
    sids = tables.sources["source_id"].unique().to_list()
    if len(sids) != 1 or sids[0] is None:
        raise ValueError(f"Store.stage takes exactly one source, got {sids}")
    sid: str = sids[0]
    return sid


def _fsync_path(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- ingest -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestResult:
    path: str
    source_id: str
    format: str
    status: str  # "ingested" | "unchanged" | "replaced"
    counts: dict[str, int]

    def message(self) -> str:
        if self.status == "unchanged":
            return f"{self.path}: unchanged (source {self.source_id} already in the store), skipped"
        rows = ", ".join(f"{v:,} {k}" for k, v in self.counts.items() if v and k != "sources")
        what = rows or "no rows"
        return f"{self.path}: {self.status} as {self.format}, source {self.source_id} ({what})"


def stage_file(
    path: str | os.PathLike[str],
    fmt: str,
    store: Store,
    *,
    force: bool = False,
    options: dict[str, Any] | None = None,
    sha256: str | None = None,
    on_start: Callable[[str], None] | None = None,
) -> tuple[Staged | None, IngestResult]:
    """Parse one file and stage it in `store` (nothing visible until `store.commit`).

    Returns (None, result "unchanged") when its source is already committed and not `force`;
    else the Staged and a result whose status ("ingested"/"replaced") `commit` may still turn
    into "unchanged" (another writer committed it first). Safe to call in worker processes.
    """
    from .readers import options_for
    from .readers import read as _read_one

    p = os.fspath(path)
    sha = sha256 or file_sha256(p)
    sid = source_id_for(sha)
    present = store.has_source(sid)
    if present and not force:
        return None, IngestResult(p, sid, fmt, "unchanged", {})
    if on_start is not None:
        on_start(p)
    tables = _read_one(p, format=fmt, sha256=sha, **options_for(fmt, options or {}))
    staged = store.stage(tables, replace_existing=force)
    return staged, IngestResult(p, sid, fmt, "replaced" if present else "ingested", tables.counts())


def ingest(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    store: Store | str | os.PathLike[str],
    *,
    format: str | None = None,
    force: bool = False,
    on_result: Callable[[IngestResult], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    **options: Any,
) -> list[IngestResult]:
    """Read each file and write it to the store.

    `paths` is one path or an iterable of paths. A file whose SHA-256 is already in the store is
    skipped (status "unchanged") unless `force`. Every file is parsed and staged before any is
    committed, and all are committed in one manifest write, so bad input anywhere leaves the
    store byte-identical. `on_start(path)` is called before a file is read and `on_result(result)`
    as soon as it is staged or skipped (the commit of them all follows the last one).

    Reader options (`tz=`, `fields=`, `interval_ms=`, …) go to the readers that take them; one
    that no reader of these files takes raises UnsupportedOption before anything is read.
    """
    from .readers import check_options

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if format is not None and format not in READERS:
        raise UnknownFormat(f"unknown format {format!r} (formats: {', '.join(READERS)})")
    st = store if isinstance(store, Store) else Store(store)
    # Check every path and learn its format before reading any, so a missing file or an option
    # no reader takes fails fast, before minutes of parsing.
    todo: list[tuple[str, str]] = []
    for p in paths:
        path = os.fspath(p)
        if not Path(path).is_file():
            why = "is not a regular file" if Path(path).exists() else "no such file"
            raise TraceanalyzeError(why, path=path)
        todo.append((path, format or detect_format(path)))
    if not todo:
        return []
    check_options([fmt for _, fmt in todo], options)
    staged: list[tuple[Staged | None, IngestResult]] = []
    seen: set[str] = set()
    try:
        for path, fmt in todo:
            sha = file_sha256(path)
            sid = source_id_for(sha)
            if sid in seen:
                item: tuple[Staged | None, IngestResult] = (
                    None,
                    IngestResult(path, sid, fmt, "unchanged", {}),
                )
            else:
                seen.add(sid)
                item = stage_file(
                    path, fmt, st, force=force, options=options, sha256=sha, on_start=on_start
                )
            staged.append(item)
            if on_result is not None:
                on_result(item[1])
        todo_commit = [s for s, _ in staged if s is not None]
        statuses = iter(st.commit(todo_commit))
    finally:
        for s_, _ in reversed(staged):
            if s_ is not None:
                st.discard(s_)  # after a commit: only its (already removed) staging
    return [res if s_ is None else replace(res, status=next(statuses)) for s_, res in staged]


__all__ = ["Store", "Staged", "Manifest", "ingest", "stage_file", "IngestResult", "READERS"]
