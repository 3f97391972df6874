"""Readers: one module per format, each with `read_<slug>(path, **options) -> Tables` and
`sniff(path) -> bool`. Adding a format = its module, one line in `_SLUGS`, its tests and data.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import lzma
import os
import sqlite3
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl

from .. import schema
from ..errors import MalformedInput, TraceanalyzeError, UnknownFormat
from ..tables import Tables
from ._common import PathLike

# Slug -> one-line description. Order is the order `--format` lists them in.
_SLUGS: dict[str, str] = {
    "iterlog": "Iteration logs: SC22 'Iteration Duration <i> <dev> : <s>' stdout, collector CSV",
    "kineto_json": "PyTorch profiler (Kineto) Chrome trace .json / .json.gz",
    "nsys_sqlite": "Nsight Systems SQLite export (nsys export --type sqlite), schema 2.x and 3.x",
    "nvprof_csv": "nvprof --csv output: GPU trace (with --system-profiling), summary, metrics",
    "ncu_csv": "Nsight Compute CSV (--csv long format, every header era; --page raw wide)",
    "smi_csv": "GPU telemetry logs: nvidia-smi --query-gpu CSV, NVML sampler CSV, dcgmi dmon",
    "nvprof_sqlite": "nvprof SQLite export (-o x.nvvp / .prof / .sql)",
}


@dataclass(frozen=True)
class Reader:
    slug: str
    description: str

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(f"{__name__}.{self.slug}")

    def read(self, path: PathLike, **options: Any) -> Tables:
        fn: Callable[..., Tables] = getattr(self.module, f"read_{self.slug}")
        return fn(path, **options)

    def sniff(self, path: PathLike) -> bool:
        fn: Callable[[PathLike], bool] = self.module.sniff
        return bool(fn(path))


READERS: dict[str, Reader] = {slug: Reader(slug, desc) for slug, desc in _SLUGS.items()}


def detect_format(path: PathLike) -> str:
    """The slug of the one reader that claims the file; UnknownFormat for none or several."""
    matches = [slug for slug, r in READERS.items() if r.sniff(path)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UnknownFormat(
            f"no reader recognizes this file (formats: {', '.join(READERS)}); "
            "pass --format SLUG if you know it",
            path=path,
        )
    raise UnknownFormat(
        f"several readers claim this file ({', '.join(matches)}); pass --format SLUG", path=path
    )


def file_sha256(path: PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def source_id_for(sha256: str) -> str:
    return sha256[:16]


# Exceptions that mean "the bytes are bad", raised from inside parsers we call. Anything else is
# a bug in traceanalyze and keeps its traceback.
_BAD_INPUT_ERRORS: tuple[type[BaseException], ...] = (
    UnicodeDecodeError,
    sqlite3.DatabaseError,
    gzip.BadGzipFile,
    zlib.error,
    EOFError,
    lzma.LZMAError,
    pl.exceptions.ComputeError,
    pl.exceptions.NoDataError,
)
try:  # orjson is a runtime dependency; its decode error subclasses ValueError
    import orjson

    _BAD_INPUT_ERRORS = (*_BAD_INPUT_ERRORS, orjson.JSONDecodeError)
except ImportError:  # pragma: no cover
    pass


def read(
    path: PathLike, format: str | None = None, *, sha256: str | None = None, **options: Any
) -> Tables:
    """Read one file into normalized `Tables`, with its `sources` row and `source_id` filled.

    `format` is a reader slug; by default it is detected. Options go to the reader (e.g. `tz=`
    for smi_csv). Bad input raises a `TraceanalyzeError` subclass naming the file.
    """
    p = Path(path)
    if not p.exists():
        raise TraceanalyzeError("no such file", path=path)
    if p.is_dir():
        raise TraceanalyzeError("is a directory, not a trace file", path=path)
    if format is None:
        format = detect_format(path)
    elif format not in READERS:
        raise UnknownFormat(f"unknown format {format!r} (formats: {', '.join(READERS)})", path=path)
    sha = sha256 or file_sha256(path)
    try:
        tables = READERS[format].read(path, **options)
    except TraceanalyzeError:
        raise
    except _BAD_INPUT_ERRORS as e:
        raise MalformedInput(f"cannot parse as {format}: {type(e).__name__}: {e}", path=path) from e
    return finalize(tables, path=p, format=format, sha256=sha)


def finalize(tables: Tables, *, path: Path, format: str, sha256: str) -> Tables:
    """Fill the `sources` row (path, format, sha256, size) and every table's `source_id`."""
    sid = source_id_for(sha256)
    src = tables.sources
    if src.height > 1:
        raise ValueError(f"reader {format} returned {src.height} sources rows; expected 0 or 1")
    base = src if src.height == 1 else schema.empty("sources").clear(n=1)
    row = base.with_columns(
        pl.lit(str(path)).alias("path"),
        pl.lit(format).alias("format"),
        pl.lit(sha256).alias("sha256"),
        pl.lit(os.path.getsize(path), dtype=pl.Int64).alias("size_bytes"),
        pl.lit(schema.SCHEMA_VERSION, dtype=pl.Int64).alias("schema_version"),
    )
    return replace(tables, sources=schema.conform("sources", row)).with_source_id(sid)


__all__ = ["READERS", "Reader", "detect_format", "read", "file_sha256", "source_id_for"]
