"""The Parquet store: hive-partitioned Parquet files, a log of commits that names the committed
ones, and a manifest holding the whole state at the log's last checkpoint (layout 3).

Layout (docs/store.md has the whole protocol and recipes for outside engines)::

    <store>/traceanalyze-store.json                       the manifest: a checkpoint (`version`)
    <store>/_log/<version: 20 digits>.json                one entry per later commit (store.log)
    <store>/<table>/source_id=<id>/part-<txn>.parquet     one file per table per source and commit
    <store>/.lock                                         the store lock (flock), held to commit
    <store>/.staging/<owner>.lock                          a writing process's liveness lock
    <store>/.staging/<owner>-<uuid>/ (= <txn>)             a writer's files before its commit
    <store>/_leases/<32 hex>.lease                        a reader's pinned version (store.lease)

A source is in the store when the manifest and the log entries after it list it; readers
(`scan`, `table`, `tables`, `files`, `source_ids`, `has_source`) replay the log once per call
and open only the files listed, so a source appears, or is replaced, for them in one step: the
creation of its commit's entry. A commit writes one entry whose size does not depend on the
store's, so its cost stays flat as the store grows. Files in the table directories that no
version lists (a writer killed between its renames and its entry, a replaced source's old
files) are never read; the next writer removes them, replaced files only after a grace period
(`grace_s`) and when no reader's lease pins a version that lists them.

`source_id` lives in the directory name only (the hive convention). It is hex text that can be
all digits (`0123…`), which hive readers infer as an integer: `scan` pins it to String, and a
scan of your own should too (polars `hive_schema={"source_id": pl.String}`, DuckDB
`hive_types={'source_id': 'VARCHAR'}`).

Test hook: `TRACEANALYZE_TEST_KILL_AT=<point>` makes the process SIGKILL itself at that point
(`stage-start`, `stage-mid`, `commit-locked`, `rename-<n>`, `before-manifest` (before the log
entry), `after-manifest`, `before-checkpoint`, `after-checkpoint`, `before-migration`); the
crash tests use it, nothing else should.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from .. import schema
from ..errors import StoreError, TraceanalyzeError, UnknownFormat, quote_path
from ..readers import READERS, detect_format, file_sha256, source_id_for
from ..tables import Tables
from . import files as store_files
from . import lease as store_lease
from . import log as store_log
from ._safefs import open_path, regular_file_at, rmtree_at, root_is_link, walk
from .log import LOG_DIR, Entry
from .manifest import (
    DEFAULT_GRACE_S,
    KILL_ENV,
    LAYOUT_VERSION,
    LOCK_NAME,
    MARKER,
    STAGING,
    Manifest,
    acquire_txn,
    hold_txn,
    kill_point,
    path_problem,
    read_manifest,
    release_txn,
    remove_dead_staging,
)


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
        self._cache: Manifest | None = None  # the last state read: later reads replay the log
        self._frames: dict[str, pl.DataFrame] = {}  # a snapshot's tables of many small files
        if self.root.is_symlink():
            raise root_is_link(self.root)
        if self.root.is_dir() and not (self.root / MARKER).exists():
            # A store being created by another writer has only its lock and staging so far.
            ours = {LOCK_NAME, STAGING, LOG_DIR, store_lease.LEASES}
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
        """This store pinned to its current version: every read of the returned Store sees the
        same committed sources, whatever is committed meanwhile, and garbage collection keeps
        the files of that version for as long as the returned Store lives (a lease in
        `_leases/`, store.lease; where the store cannot be written, the grace period only)."""
        pinned = Store.__new__(Store)
        pinned.root, pinned.grace_s, pinned._cache = self.root, self.grace_s, None
        pinned._frames = {}
        lease = store_lease.take(self.root)  # before the read: it pins whatever we read next
        if lease is not None:
            weakref.finalize(pinned, lease.release)
        pinned._pinned = self._manifest()
        if lease is not None:
            lease.pin(pinned._pinned.version)
        return pinned

    def _manifest(self) -> Manifest:
        if self._pinned is not None:
            return self._pinned
        self._cache = store_log.load(self.root, self._cache)
        return self._cache or Manifest()

    def version(self) -> int:
        """The version read (pinned, for a snapshot): the number of the last commit it holds."""
        return self._manifest().version

    def files(self, table: str) -> list[Path]:
        """The committed Parquet files of one table (for DuckDB, polars, Spark, pyarrow)."""
        schema_table(table, self.root)
        return [Path(f) for f in store_files.checked(self.root, self._manifest().files(table))]

    def scan(self, table: str) -> pl.LazyFrame:
        """A lazy scan of one table over every source; empty with the full schema when none."""
        return self._scan(table, self._manifest())

    def _scan(self, table: str, m: Manifest) -> pl.LazyFrame:
        t = schema_table(table, self.root)
        kept = self._frames.get(table) if self._pinned is not None else None
        if kept is not None:
            return kept.lazy()
        files, size = store_files.checked_sized(self.root, m.files(table))
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
        ).select(t.names)
        if self._pinned is not None and _many_small(len(files), size):
            # A pinned version never changes: a table of thousands of small files (a store of
            # many small runs) is read once, not opened again by every scan of a command.
            self._frames[table] = lf.collect()
            return self._frames[table].lazy()
        return lf

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
        staged, _ = self.stage_stream(
            sid, lambda _work: tables.items(), replace_existing=replace_existing
        )
        return staged

    def stage_stream(
        self,
        source_id: str | Callable[[], str],
        produce: Callable[[Path], Iterable[tuple[str, pl.DataFrame]]],
        *,
        replace_existing: bool = False,
    ) -> tuple[Staged, dict[str, int]]:
        """Stage one source from a stream of `(table, frame)` chunks, written as Parquet row
        groups as they come (`sink.TableSink`): memory is bounded by a row group per table, not
        by the source. `produce(workdir)` makes the chunks; `workdir` is an empty directory in
        this transaction's staging for the reader's spill files, removed with the staging.
        `source_id` may be a call that gives it, asked once the first row group is written
        (`store.hashing`). Returns the Staged and the rows per table."""
        from .sink import TableSink

        kill_point("stage-start")
        created_root = not self.root.exists()
        staging_root = self.root / STAGING
        txn = acquire_txn(staging_root)
        sink = TableSink(staging_root / txn, source_id, txn)
        try:
            # made and checked through descriptors: no link in `.staging/<txn>/.work`
            with walk(self.root, [STAGING, txn, ".work"], create=True):
                pass
            work = staging_root / txn / ".work"
            for name, df in produce(work):
                sink.write(name, df)
                kill_point("stage-mid")
            written = sink.close()
            with walk(self.root, [STAGING, txn]) as tfd:
                if tfd is not None:
                    rmtree_at(tfd, ".work")
        except BaseException:
            sink.abort()
            self._drop(txn, created_root)
            raise
        counts = {t: sink.rows.get(t, 0) for t in schema.TABLE_NAMES}
        root = str(self.root)
        sid = sink.source()
        return Staged(sid, txn, root, tuple(written), replace_existing, created_root), counts

    def discard(self, staged: Staged) -> None:
        """Drop a staged source (nothing if it was committed). The store directory is removed only
        if this writer created it and it is empty again (`rmdir`: never anyone else's files)."""
        self._drop(staged.txn, staged.created_root)

    def _drop(self, txn: str, created_root: bool) -> None:
        release_txn(self.root / STAGING, txn)
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
                self._tidy(self.grace_s)
            return []
        staging_root = self.root / STAGING
        for s in items:
            if Path(s.store_root).resolve() != self.root.resolve():
                raise ValueError(f"staged for {s.store_root}, not {self.root}")
            if not hold_txn(staging_root, s.txn):
                raise StoreError(f"the staging of source {s.source_id} is gone", path=self.root)
        with store_files.locked(self.root) as root_fd:
            kill_point("commit-locked")
            cached, self._cache = self._cache, None  # set again once the commit completes
            m = store_files.load_for_write(self.root, root_fd, cached)
            e = self._collect(root_fd, m, self.grace_s)
            renames, renamed = itertools.count(1), list[str]()
            try:
                statuses = [self._apply(m, e, s, renames, root_fd, renamed) for s in items]
                self._cache = store_files.finish(self.root, root_fd, m, e)
            except BaseException:
                if not self._committed(e):
                    for rel in renamed:  # never listed: nobody has read them
                        store_files.unlink(self.root, root_fd, rel, prune=True)
                raise
        for s in items:
            self._drop(s.txn, False)
        return statuses

    def _collect(self, root_fd: int, m: Manifest, grace_s: float) -> Entry:
        """Under the lock: the next entry, with the expired garbage deleted (recorded in it)
        and dead writers' staging and uncommitted renames removed."""
        e = Entry(m.version + 1, time.time())
        store_files.expire(self.root, root_fd, m, e, e.time, grace_s)
        store_files.clean_dead(self.root, root_fd, m)
        return e

    def _tidy(self, grace_s: float) -> Manifest:
        """Collect garbage and dead writers' leftovers under the lock; the new state."""
        with store_files.locked(self.root) as root_fd:
            self._cache = None
            m = store_files.load_for_write(self.root, root_fd)
            m = store_files.finish(self.root, root_fd, m, self._collect(root_fd, m, grace_s))
            return m

    def _committed(self, e: Entry) -> bool:
        with walk(self.root, [LOG_DIR]) as dfd:
            return dfd is not None and regular_file_at(dfd, store_log.entry_name(e.version))

    def _apply(
        self,
        m: Manifest,
        e: Entry,
        s: Staged,
        renames: Iterator[int],
        root_fd: int,
        renamed: list[str],
    ) -> str:
        """Rename one staged source's files into place and list them in entry `e` (not yet
        written). Each rename is between two directories opened without following a link."""
        pending = e.add.pop(s.source_id, None)  # the same source twice in one commit
        old = m.sources.get(s.source_id) if pending is None else pending
        if old is not None and not s.replace_existing:
            if pending is not None:
                e.add[s.source_id] = pending
            return "unchanged"
        for rel in [f for fs in (pending or {}).values() for f in fs]:
            store_files.unlink(self.root, root_fd, rel)  # superseded before anyone saw it
        files: dict[str, list[str]] = {}
        for name in s.tables:
            part, fname = f"source_id={s.source_id}", f"part-{s.txn}.parquet"
            rel = f"{name}/{part}/{fname}"
            if path_problem(rel) is not None:
                raise ValueError(f"not a staging of this store: {rel!r}")
            src_fd = open_path(root_fd, [STAGING, s.txn, name, part], self.root)
            if src_fd is None or not regular_file_at(src_fd, fname):
                raise StoreError(f"the staging of source {s.source_id} is gone", path=self.root)
            try:
                dst_fd = open_path(root_fd, [name, part], self.root, create=True)
                assert dst_fd is not None
                try:
                    os.replace(fname, fname, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
                    os.fsync(dst_fd)
                finally:
                    os.close(dst_fd)
            finally:
                os.close(src_fd)
            files[name] = [rel]
            renamed.append(rel)
            kill_point(f"rename-{next(renames)}")
        e.add[s.source_id] = files
        return "ingested" if old is None else "replaced"

    def _has_leftovers(self) -> bool:
        staging = self.root / STAGING
        return staging.is_dir() and any(staging.iterdir())

    def vacuum(self, grace_s: float | None = None) -> None:
        """Delete replaced files older than `grace_s` (default: the store's) that no reader's
        lease pins, and every leftover of dead writers, now; then write a checkpoint. Unlike a
        commit, this walks every partition (its cost grows with the store)."""
        if read_manifest(self.root) is None:
            return
        self._tidy(self.grace_s if grace_s is None else grace_s)
        with store_files.locked(self.root) as root_fd:
            m = store_files.load_for_write(self.root, root_fd)
            store_files.remove_debris(self.root, root_fd, m)
            store_files.checkpoint(self.root, root_fd, m, store_log.log_files(self.root)[1])

    def checkpoint(self) -> None:
        """Write the whole committed state to the manifest now (writers do every
        CHECKPOINT_EVERY commits): then `traceanalyze-store.json` alone lists every file."""
        if read_manifest(self.root) is None:
            return
        with store_files.locked(self.root) as root_fd:
            m = store_files.load_for_write(self.root, root_fd)
            store_files.checkpoint(self.root, root_fd, m, store_log.log_files(self.root)[1])

    def remove(self, source_id: str) -> None:
        """Remove one source (one log entry); its files go after the grace period."""
        if read_manifest(self.root) is None:
            return
        with store_files.locked(self.root) as root_fd:
            self._cache = None
            m = store_files.load_for_write(self.root, root_fd)
            if source_id not in m.sources:
                return
            e = Entry(m.version + 1, time.time(), remove=[source_id])
            self._cache = store_files.finish(self.root, root_fd, m, e)


# A pinned table is kept in memory when it has at least this many files and they are small
# (per-file opening dominates its reads): the tables of a store of thousands of small runs.
KEEP_MIN_FILES = 256
KEEP_MAX_BYTES = 256 << 20
KEEP_MAX_AVERAGE_BYTES = 64 << 10


def _many_small(n_files: int, size: int) -> bool:
    return n_files >= KEEP_MIN_FILES and size <= min(
        KEEP_MAX_BYTES, n_files * KEEP_MAX_AVERAGE_BYTES
    )


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


# --- ingest -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestResult:
    path: str
    source_id: str
    format: str
    status: str  # "ingested" | "unchanged" | "replaced"
    counts: dict[str, int]

    def message(self) -> str:
        """One line (a file name with a newline is quoted, as in errors)."""
        path = quote_path(self.path)
        if self.status == "unchanged":
            return f"{path}: unchanged (source {self.source_id} already in the store), skipped"
        rows = ", ".join(f"{v:,} {k}" for k, v in self.counts.items() if v and k != "sources")
        what = rows or "no rows"
        return f"{path}: {self.status} as {self.format}, source {self.source_id} ({what})"


def stage_file(
    path: str | os.PathLike[str],
    fmt: str,
    store: Store,
    *,
    force: bool = False,
    options: dict[str, Any] | None = None,
    sha256: str | None = None,
    on_start: Callable[[str], None] | None = None,
    skip: Callable[[str], bool] | None = None,
) -> tuple[Staged | None, IngestResult]:
    """Parse one file and stage it in `store` (nothing visible until `store.commit`).

    Returns (None, result "unchanged") when its source is already committed and not `force`,
    or `skip(source_id)` is true (a file seen earlier in the same call); else the Staged and a
    result whose status ("ingested"/"replaced") `commit` may still turn into "unchanged"
    (another writer committed it first). A big file not hashed yet is hashed while it is read
    (`store.hashing`). Safe to call in worker processes.
    """
    from ..readers import options_for
    from ..readers import stream as _stream_one
    from .hashing import HASH_ALONGSIDE_BYTES, stage_hashing

    p = os.fspath(path)
    opts = options_for(fmt, options or {})
    if sha256 is None and os.path.getsize(p) >= HASH_ALONGSIDE_BYTES:
        staged_, sid_, status, counts_ = stage_hashing(
            p, fmt, store, force=force, options=opts, on_start=on_start, skip=skip
        )
        return staged_, IngestResult(p, sid_, fmt, status, counts_)
    sha = sha256 or file_sha256(p)
    sid = source_id_for(sha)
    present = store.has_source(sid)
    if (present and not force) or (skip is not None and skip(sid)):
        return None, IngestResult(p, sid, fmt, "unchanged", {})
    if on_start is not None:
        on_start(p)
    staged, counts = store.stage_stream(
        sid,
        lambda work: _stream_one(p, format=fmt, sha256=sha, workdir=work, **opts),
        replace_existing=force,
    )
    return staged, IngestResult(p, sid, fmt, "replaced" if present else "ingested", counts)


def plan(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    format: str | None,
    options: dict[str, Any],
) -> list[tuple[str, str]]:
    """(path, format) of every file, checked before any is read: a missing file, an unknown
    format or an option no reader of these files takes fails fast, before minutes of parsing."""
    from ..readers import check_options

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if format is not None and format not in READERS:
        raise UnknownFormat(f"unknown format {format!r} (formats: {', '.join(READERS)})")
    todo: list[tuple[str, str]] = []
    for p in paths:
        path = os.fspath(p)
        if not Path(path).is_file():
            why = "is not a regular file" if Path(path).exists() else "no such file"
            raise TraceanalyzeError(why, path=path)
        todo.append((path, format or detect_format(path)))
    if todo:
        check_options([fmt for _, fmt in todo], options)
    return todo


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
    st = store if isinstance(store, Store) else Store(store)
    todo = plan(paths, format, options)
    if not todo:
        return []
    staged: list[tuple[Staged | None, IngestResult]] = []
    seen: set[str] = set()
    try:
        for path, fmt in todo:
            item = stage_file(
                path,
                fmt,
                st,
                force=force,
                options=options,
                on_start=on_start,
                skip=seen.__contains__,
            )
            seen.add(item[1].source_id)
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


__all__ = [
    "Store",
    "Staged",
    "Manifest",
    "ingest",
    "stage_file",
    "plan",
    "IngestResult",
    "READERS",
    "MARKER",
    "STAGING",
    "KILL_ENV",
    "LAYOUT_VERSION",
    "DEFAULT_GRACE_S",
    "remove_dead_staging",
]
