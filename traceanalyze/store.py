"""The Parquet store.

Layout (hive partitioning, readable as-is by polars, DuckDB, Spark, pyarrow)::

    <store>/traceanalyze-store.json                 {"layout": 1, "schema_version": N}
    <store>/<table>/source_id=<id>/part-0.parquet   one file per table per source

`source_id` lives in the directory name only (the hive convention), so a scan with hive
partitioning gives it back as a column. It is hex text that can be all digits (`0123…`), which
hive readers infer as an integer, dropping leading zeros: `scan` pins it to String, and a scan of
your own should too (polars `hive_schema={"source_id": pl.String}`, DuckDB
`hive_types={'source_id': 'VARCHAR'}`). A source is *present* when its `sources` partition exists;
that partition is renamed into place last.

Writes are atomic per source: every file is written under a temporary directory inside the store,
then partition directories are renamed into place. A failure before that point removes the
temporary directory, leaving the store byte-identical.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from . import schema
from .errors import StoreError, TraceanalyzeError, UnknownFormat
from .readers import READERS, detect_format, file_sha256, source_id_for
from .tables import Tables

MARKER = "traceanalyze-store.json"
LAYOUT_VERSION = 1


class Store:
    """A directory of hive-partitioned Parquet tables."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        marker = self.root / MARKER
        if self.root.exists() and any(self.root.iterdir()) and not marker.exists():
            raise StoreError("exists and is not a traceanalyze store", path=self.root)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # --- reading --------------------------------------------------------------------------------

    def _files(self, table: str) -> list[Path]:
        return sorted((self.root / table).glob("source_id=*/*.parquet"))

    def scan(self, table: str) -> pl.LazyFrame:
        """A lazy scan of one table over every source; empty with the full schema when none."""
        try:
            t = schema.table(table)
        except KeyError as e:
            raise StoreError(str(e.args[0]), path=self.root) from None
        files = self._files(table)
        if not files:
            return schema.empty(table).lazy()
        file_schema = pl.Schema({c.name: c.dtype for c in t.columns if c.name != "source_id"})
        lf = pl.scan_parquet(
            [str(f) for f in files],
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
        d = self.root / "sources"
        if not d.exists():
            return []
        return sorted(p.name.split("=", 1)[1] for p in d.glob("source_id=*") if p.is_dir())

    def has_source(self, source_id: str) -> bool:
        return (self.root / "sources" / f"source_id={source_id}").is_dir()

    def tables(self, source_ids: Sequence[str] | None = None) -> Tables:
        """All tables (optionally of some sources only), collected into `Tables`."""
        frames = {}
        for name in schema.TABLE_NAMES:
            lf = self.scan(name)
            if source_ids is not None:
                lf = lf.filter(pl.col("source_id").is_in(list(source_ids)))
            frames[name] = lf.collect()
        return Tables.build(**frames)

    # --- writing --------------------------------------------------------------------------------

    def write(self, tables: Tables, *, replace_existing: bool = False) -> str:
        """Write the tables of one source atomically; returns its source_id."""
        staged = self.stage(tables, replace_existing=replace_existing)
        self.commit(staged)
        return staged.source_id

    def stage(self, tables: Tables, *, replace_existing: bool = False) -> Staged:
        """Write one source's files under a temporary directory in the store; none visible yet."""
        sids = tables.sources["source_id"].unique().to_list()
        if len(sids) != 1 or sids[0] is None:
            raise ValueError(f"Store.stage takes exactly one source, got {sids}")
        sid: str = sids[0]
        if self.has_source(sid) and not replace_existing:
            raise StoreError(f"source {sid} is already in the store", path=self.root)
        created_root = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".tmp-{sid}-{uuid.uuid4().hex[:8]}"
        written: list[str] = []
        try:
            for name, df in tables.items():
                if df.height == 0 and name != "sources":
                    continue
                part = staging / name / f"source_id={sid}"
                part.mkdir(parents=True)
                df.drop("source_id").write_parquet(
                    part / "part-0.parquet", compression="zstd", statistics=True
                )
                written.append(name)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            if created_root:
                shutil.rmtree(self.root, ignore_errors=True)
            raise
        return Staged(sid, staging, tuple(written), created_root, replace_existing)

    def discard(self, staged: Staged) -> None:
        """Drop a staged source; removes the store directory too if staging created it."""
        shutil.rmtree(staged.staging, ignore_errors=True)
        if staged.created_root and not (self.root / MARKER).exists():
            shutil.rmtree(self.root, ignore_errors=True)

    def commit(self, staged: Staged) -> None:
        """Move a staged source into place: old partitions out, new ones in, `sources` last."""
        sid = staged.source_id
        marker = self.root / MARKER
        if not marker.exists():
            tmp = self.root / f".{MARKER}.{uuid.uuid4().hex[:8]}"
            tmp.write_text(
                json.dumps({"layout": LAYOUT_VERSION, "schema_version": schema.SCHEMA_VERSION})
                + "\n"
            )
            os.replace(tmp, marker)
        if staged.replace_existing:
            self.remove(sid)
        for name in sorted(staged.tables, key=lambda n: n == "sources"):
            dest = self.root / name / f"source_id={sid}"
            dest.parent.mkdir(exist_ok=True)
            os.replace(staged.staging / name / f"source_id={sid}", dest)
        shutil.rmtree(staged.staging, ignore_errors=True)

    def remove(self, source_id: str) -> None:
        """Remove one source from every table (its `sources` row first, so it never looks whole)."""
        for name in ("sources", *[n for n in schema.TABLE_NAMES if n != "sources"]):
            part = self.root / name / f"source_id={source_id}"
            if part.exists():
                trash = self.root / f".trash-{uuid.uuid4().hex[:8]}"
                os.replace(part, trash)
                shutil.rmtree(trash)


@dataclass(frozen=True)
class Staged:
    source_id: str
    staging: Path
    tables: tuple[str, ...]
    created_root: bool
    replace_existing: bool


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
    skipped (status "unchanged") unless `force`. Every file is parsed and staged (written under a
    temporary directory in the store) before any is committed, so bad input anywhere leaves the
    store byte-identical. `on_start(path)` is called before a file is read and `on_result(result)`
    as soon as it is staged or skipped (the commit of them all follows the last one).

    Reader options (`tz=`, `fields=`, `interval_ms=`, …) go to the readers that take them; one
    that no reader of these files takes raises UnsupportedOption before anything is read.
    """
    from .readers import check_options, options_for
    from .readers import read as _read_one

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
            if sid in seen or (st.has_source(sid) and not force):
                res = IngestResult(path, sid, fmt, "unchanged", {})
                staged.append((None, res))
            else:
                seen.add(sid)
                if on_start is not None:
                    on_start(path)
                tables = _read_one(path, format=fmt, sha256=sha, **options_for(fmt, options))
                status = "replaced" if st.has_source(sid) else "ingested"
                st_ = st.stage(tables, replace_existing=force)
                res = IngestResult(path, sid, fmt, status, tables.counts())
                staged.append((st_, res))
                del tables
            if on_result is not None:
                on_result(res)
    except BaseException:
        for s_, _ in reversed(staged):
            if s_ is not None:
                st.discard(s_)
        raise
    for s_, _ in staged:
        if s_ is not None:
            st.commit(s_)
    return [res for _, res in staged]


__all__ = ["Store", "ingest", "IngestResult", "READERS"]
