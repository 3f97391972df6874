"""`Dataset`: the one object every analysis takes, over files read in memory or over a store.

    import traceanalyze as ta
    ds = ta.open("run.pt.trace.json.gz", "nvml.csv")      # files, read (not written anywhere)
    ds = ta.open(store="store/")                          # a store, scanned lazily
    ds.where(source="ab12…", device=0).kernels            # polars LazyFrame, filtered

Filters narrow every table the same way: `source` (ids), `device` (device ids; host-side rows with
no device, such as iterations and markers, stay), `start`/`end` (ns in the source's clock; rows
whose interval overlaps the window stay). `scan_all` ignores the source filter: telemetry for the
selected sources may come from another source of the same run (aligned through epoch origins).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from .analyses.naming import source_paths
from .errors import TraceanalyzeError

Scan = Callable[[str], pl.LazyFrame]
PathLike = str | os.PathLike[str]


def _ids(x: Any) -> tuple[Any, ...]:
    if x is None:
        return ()
    if isinstance(x, (str, int)):
        return (x,)
    return tuple(x)


@dataclass(frozen=True)
class Dataset:
    """Tables of files or of a store, with source/device/time filters; lazy throughout."""

    _scan: Scan
    sources: tuple[str, ...] = ()
    devices: tuple[int, ...] = ()
    start_ns: int | None = None
    end_ns: int | None = None
    origin: str = ""  # what the data came from, for messages
    _store: Any = field(default=None, compare=False)

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def from_files(
        cls, paths: Iterable[PathLike], *, format: str | None = None, **options: Any
    ) -> Dataset:
        from .readers import read
        from .tables import Tables

        files = [os.fspath(p) for p in paths]
        if not files:
            raise TraceanalyzeError("no files given")
        tables = Tables.concat([read(f, format=format, **options) for f in files])
        return cls(_TablesScan(tables), origin=", ".join(files))

    @classmethod
    def from_store(cls, root: PathLike) -> Dataset:
        from .report import open_store

        st = open_store(root)
        return cls(st.scan, origin=os.fspath(root), _store=st)

    @classmethod
    def from_tables(cls, tables: Any) -> Dataset:
        """Over `Tables` already in memory (e.g. from `ta.read`)."""
        return cls(_TablesScan(tables), origin="tables")

    def where(
        self,
        source: str | Sequence[str] | None = None,
        device: int | Sequence[int] | None = None,
        start: int | None = None,
        end: int | None = None,
    ) -> Dataset:
        """A narrower view; an unknown source id is an error naming it."""
        ds = self
        if source is not None:
            want = tuple(str(s) for s in _ids(source))
            have = set(self.all_source_ids())
            missing = sorted(set(want) - have)
            if missing:
                raise TraceanalyzeError(f"no such source(s): {', '.join(missing)}")
            ds = replace(ds, sources=want)
        if device is not None:
            ds = replace(ds, devices=tuple(int(d) for d in _ids(device)))
        if start is not None:
            ds = replace(ds, start_ns=int(start))
        if end is not None:
            ds = replace(ds, end_ns=int(end))
        return ds

    # --- tables ---------------------------------------------------------------------------

    def scan(self, table: str) -> pl.LazyFrame:
        """One table, every filter applied."""
        lf = self.scan_all(table)
        if self.sources:
            lf = lf.filter(pl.col("source_id").is_in(list(self.sources)))
        return lf

    def scan_all(self, table: str) -> pl.LazyFrame:
        """One table, device and time filters only (every source)."""
        lf = self._scan(table)
        names = lf.collect_schema().names()
        if self.devices and "device_id" in names:
            keep = pl.col("device_id").is_in(list(self.devices))
            if table in ("iterations", "markers"):
                # Host-side steps and annotations (no device) frame every device's work.
                keep = keep | pl.col("device_id").is_null()
            lf = lf.filter(keep)
        if (self.start_ns is not None or self.end_ns is not None) and "start_ns" in names:
            end_col = pl.col("end_ns") if "end_ns" in names else pl.col("start_ns")
            if self.start_ns is not None:
                lf = lf.filter(end_col.fill_null(pl.col("start_ns")) >= self.start_ns)
            if self.end_ns is not None:
                lf = lf.filter(pl.col("start_ns") <= self.end_ns)
        return lf

    def table(self, table: str) -> pl.DataFrame:
        return self.scan(table).collect()

    def __getattr__(self, name: str) -> pl.LazyFrame:
        from . import schema

        if name in schema.TABLE_NAMES:
            return self.scan(name)
        raise AttributeError(name)

    def source_ids(self) -> list[str]:
        ids = self.scan("sources").select("source_id").collect()["source_id"].to_list()
        return sorted(str(i) for i in ids)

    def all_source_ids(self) -> list[str]:
        ids = self._scan("sources").select("source_id").collect()["source_id"].to_list()
        return sorted(str(i) for i in ids)

    def names(self) -> dict[str, str]:
        """source_id -> file path, over every source (messages may name any of them)."""
        return source_paths(self._scan("sources"))

    def one_source(self, what: str) -> str:
        """The one selected source id; NotAnswerable-style error listing them when several."""
        from .analyses.naming import source_name

        ids = self.source_ids()
        if len(ids) != 1:
            names = self.names()
            listed = ", ".join(f"{i} ({source_name(names, i)})" if i in names else i for i in ids)
            raise TraceanalyzeError(
                f"{what} works on one source; pick one with --source ({listed or 'none'})"
            )
        return ids[0]

    def __repr__(self) -> str:
        f = []
        if self.sources:
            f.append(f"source={list(self.sources)}")
        if self.devices:
            f.append(f"device={list(self.devices)}")
        if self.start_ns is not None:
            f.append(f"start={self.start_ns}")
        if self.end_ns is not None:
            f.append(f"end={self.end_ns}")
        return f"Dataset({self.origin!r}{', ' if f else ''}{', '.join(f)})"


@dataclass(frozen=True)
class _TablesScan:
    """`scan(table)` over `Tables` in memory (a picklable callable, unlike a lambda)."""

    tables: Any

    def __call__(self, table: str) -> pl.LazyFrame:
        return self.tables[table].lazy()  # type: ignore[no-any-return]


def open(
    *paths: PathLike, store: PathLike | None = None, format: str | None = None, **options: Any
) -> Dataset:  # noqa: A001 - `ta.open` mirrors the builtin on purpose
    """A `Dataset` over files (read in memory, nothing written) or over a store; not both."""
    if paths and store is not None:
        raise TraceanalyzeError("give files or store=, not both")
    if store is not None:
        return Dataset.from_store(store)
    if not paths:
        raise TraceanalyzeError("give files or store=")
    return Dataset.from_files([Path(p) for p in paths], format=format, **options)


__all__ = ["Dataset", "open"]
