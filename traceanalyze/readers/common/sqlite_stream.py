"""What the two SQLite readers' streams (`stream_nsys_sqlite`, `stream_nvprof_sqlite`) share:
the time rule applied over a table read in batches (`TimeChecks`) and typed batches of one query
(`query_batches`). The decorator that gives a stream the errors of its whole-frame reader is
`common.stream.stream_entry`, shared by every streaming reader.

A stream must raise what `read_<slug>` raises on the same bytes (its chunks are being written to
a staging directory that the error throws away): the checks that `read` makes on a whole table
are made here on counts summed over the batches, and raised or warned when the table ends, with
`common.core.check_times`'s messages.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any, ParamSpec, TypeVar

import polars as pl

from ...errors import MalformedInput
from .core import PathLike, warn

_P = ParamSpec("_P")
_T = TypeVar("_T")


class TimeChecks:
    """`common.core.check_times` over a table that arrives in batches: `add` each batch, `finish`
    once at the end raises or warns exactly as `check_times` would on the concatenation."""

    def __init__(
        self,
        table: str,
        *,
        start: str = "start_ns",
        end: str | None = "end_ns",
        end_nullable: bool = False,
        columns: tuple[str, str] = ("start", "end"),
    ) -> None:
        self.table, self.start, self.end = table, start, end
        self.end_nullable, self.columns = end_nullable, columns
        self.null_starts = self.null_ends = self.wrapped = 0
        self.first_wrapped: tuple[Any, Any] | None = None

    def add(self, df: pl.DataFrame) -> None:
        if df.height == 0:
            return
        self.null_starts += df[self.start].null_count()
        if self.end is None:
            return
        self.null_ends += df[self.end].null_count()
        s, e = pl.col(self.start), pl.col(self.end)
        d = e - s  # int64 arithmetic wraps: the sign then disagrees with the comparison
        bad = df.filter(e.is_not_null() & (((e >= s) & (d < 0)) | ((e < s) & (d >= 0))))
        if bad.height:
            if self.first_wrapped is None:
                row = bad.row(0, named=True)
                self.first_wrapped = (row[self.start], row[self.end])
            self.wrapped += bad.height

    def finish(self, path: PathLike | None = None) -> None:
        start_col, end_col = self.columns
        if self.null_starts:
            raise MalformedInput(
                f"{self.null_starts} row(s) without a start time (NULL)",
                path=path,
                table=self.table,
                column=start_col,
            )
        if self.end is None:
            return
        if not self.end_nullable and self.null_ends:
            where = f"{path}: " if path is not None else ""
            warn(
                f"{where}{self.table}: {self.null_ends} row(s) without an end time ({end_col} is "
                "NULL); end and duration left null"
            )
        if self.first_wrapped is not None:
            first_start, first_end = self.first_wrapped
            raise MalformedInput(
                f"{self.wrapped} row(s) whose end - start does not fit int64 ns (first: "
                f"{start_col}={first_start}, {end_col}={first_end})",
                path=path,
                table=self.table,
                column=end_col,
            )


def query_batches(
    con: sqlite3.Connection,
    path: PathLike,
    table: str,
    sql: str,
    schema: Mapping[str, pl.DataType],
    batch: int,
) -> Iterator[pl.DataFrame]:
    """`common.sqlite.query_frame` one `batch` of rows at a time (its typing and its error)."""
    cur = con.execute(sql)
    while rows := cur.fetchmany(batch):
        try:
            yield pl.DataFrame(rows, schema=dict(schema), orient="row")
        except pl.exceptions.ComputeError as e:
            msg = str(e).split("\n", 1)[0]
            raise MalformedInput(
                f"a column holds values of the wrong type: {msg}", path=path, table=table
            ) from None
