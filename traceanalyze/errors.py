"""Errors raised by the library.

The library raises only these for problems with its *input*; the CLI turns them into one line and
exit code 1. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os


class TraceanalyzeError(Exception):
    """Base class. Carries where the problem is: file, and where known line, table, column."""

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        line: int | None = None,
        table: str | None = None,
        column: str | None = None,
        details: str | None = None,
    ) -> None:
        self.message = message
        # Everything a reader may need beyond the one-line message (every metric name looked
        # for, …): the CLI prints it under --verbose only.
        self.details = details
        self.path = os.fspath(path) if path is not None else None
        self.line = line
        self.table = table
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.path is not None:
            where.append(self.path)
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.table is not None:
            where.append(f"table {self.table}")
        if self.column is not None:
            where.append(f"column {self.column!r}")
        prefix = ", ".join(where)
        # One line always: a message must never smuggle a newline into the CLI's output.
        msg = " ".join(self.message.split("\n"))
        return f"{prefix}: {msg}" if prefix else msg


class UnknownFormat(TraceanalyzeError):
    """No reader, or several, claim the file; the message lists the candidates."""


class MalformedInput(TraceanalyzeError):
    """The file is of a known format but its content is broken (truncated, garbage, bad value)."""


class UnknownUnit(MalformedInput):
    """A unit string the reader has no conversion for; never guessed."""


class MissingColumn(MalformedInput):
    """A column (or table) the format requires is absent."""


class UnsupportedOption(TraceanalyzeError):
    """A reader option (`tz=`, `fields=`, …) that no reader of the given files takes."""


class StoreError(TraceanalyzeError):
    """The store directory is unusable (not a store, unknown table, bad layout)."""


class ToolNotFound(TraceanalyzeError):
    """An external program (a profiler binary) is not on PATH."""


class CollectError(TraceanalyzeError):
    """A collection run could not start or failed."""


class UsageProblem(TraceanalyzeError):
    """The request does not fit the data (one source needed and several selected, an empty time
    window): the CLI treats it as misuse, exit code 2."""


class NotAnswerable(TraceanalyzeError):
    """An analysis cannot answer from the data given; the message says why."""
