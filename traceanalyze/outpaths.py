"""Checks on a path the library is asked to write (a figure, a Perfetto trace), made before any
work: a missing directory, a directory where a file should go, or a figure name whose extension
matplotlib does not write is a `TraceanalyzeError` naming the path, not an `OSError` or a
matplotlib `ValueError` after minutes of work."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import TraceanalyzeError

# What `plot.save` writes: the formats the docs and every option's help name (PNG, SVG).
# A name without one of them is refused rather than written as PNG
# under a name that says nothing of its content.
FIGURE_SUFFIXES: tuple[str, ...] = (".png", ".svg")


def check_output(path: str | os.PathLike[str], *, suffixes: tuple[str, ...] | None = None) -> Path:
    """`path` as a `Path` when a file can be written there; else a `TraceanalyzeError`."""
    p = Path(path)
    if p.is_dir():
        raise TraceanalyzeError("is a directory; give a file name to write", path=p)
    parent = p.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise TraceanalyzeError(f"cannot write here: directory {parent} {why}", path=p)
    if not os.access(parent, os.W_OK):
        raise TraceanalyzeError(f"cannot write here: directory {parent} is not writable", path=p)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        given = f"extension {p.suffix!r}" if p.suffix else "no extension"
        raise TraceanalyzeError(
            f"{given}: give a figure name ending in {', '.join(suffixes)}", path=p
        )
    return p


def check_figure(path: str | os.PathLike[str]) -> Path:
    """`check_output` for a figure (PNG or SVG, by the name's extension)."""
    return check_output(path, suffixes=FIGURE_SUFFIXES)


__all__ = ["FIGURE_SUFFIXES", "check_figure", "check_output"]
