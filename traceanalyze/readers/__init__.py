"""Readers: one package per format family, each format behind one `Reader` protocol.

Layout (docs/architecture.md): `readers/<family>/` holds a family's formats and their own
helpers (`nvprof/` has `nvprof_csv` and `nvprof_sqlite`; `kineto/` has `kineto_json`; a
single-format package such as `iterlog/` is the reader itself); `readers/common/` holds what
several formats share. No module imports another family's modules.

The protocol, per format module (named by its slug):

* `read_<slug>(path, *, <options>) -> Tables`: pure (no printing, no globals, no writes). Its
  keyword parameters after the path are the reader's options (smi_csv's `tz=`, `fields=`, …);
  no reader takes `**kwargs`, so its signature is its option declaration, and `ingest` passes
  each option only to the readers that declare it.
* `sniff(path) -> bool`: cheap; whether this reader claims the file.
* optional `stream_<slug>(path, *, workdir, <options>)`: `(table, frame)` chunks with bounded
  memory, for `ingest`; without it a file is read whole.
* optional screen: `SCREENS[slug]` in the family package's `__init__` (readers.common.screen).

Adding a format = its package (or a module in its family's package), one line in `_SLUGS`, its
tests and data.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import polars as pl

from .. import schema
from ..errors import MalformedInput, TraceanalyzeError, UnknownFormat, UnsupportedOption
from ..tables import Tables
from .common.core import SAFE_PATH, PathLike, naming_errors
from .common.job import collect_job
from .common.limits import gzip_damage

# Slug -> (its module under traceanalyze.readers, one-line description). Order is the order
# `--format` lists them in.
_SLUGS: dict[str, tuple[str, str]] = {
    "iterlog": (
        "iterlog",
        "Iteration logs: SC22 'Iteration Duration <i> <dev> : <s>' stdout, collector CSV",
    ),
    "kineto_json": (
        "kineto.kineto_json",
        "PyTorch profiler (Kineto) Chrome trace .json / .json.gz",
    ),
    "nsys_sqlite": (
        "nsys.nsys_sqlite",
        "Nsight Systems SQLite export (nsys export --type sqlite), schema 2.x and 3.x",
    ),
    "nsys_rep": (
        "nsys.nsys_rep",
        "Nsight Systems report .nsys-rep / .qdrep, exported with the installed nsys to SQLite",
    ),
    "nvprof_csv": (
        "nvprof.nvprof_csv",
        "nvprof --csv output: GPU trace (with --system-profiling), summary, metrics",
    ),
    "ncu_csv": (
        "ncu.ncu_csv",
        "Nsight Compute CSV (--csv long format, every header era; --page raw wide)",
    ),
    "smi_csv": (
        "smi.smi_csv",
        "GPU telemetry logs: nvidia-smi --query-gpu CSV, NVML sampler CSV, dcgmi dmon",
    ),
    "nvprof_sqlite": ("nvprof.nvprof_sqlite", "nvprof SQLite export (-o x.nvvp / .prof / .sql)"),
    "mlperf_log": (
        "mlperf_log",
        "MLPerf Training result logs (:::MLLOG, :::MLL, :::MLPv0.5.0) with system JSON",
    ),
    "rocprofv3_json": ("rocm.rocprofv3_json", "rocprofv3 --output-format json (.json/.json.gz)"),
    "rocprofv3_csv": ("rocm.rocprofv3_csv", "rocprofv3 *_kernel_trace.csv (+ *_agent_info.csv)"),
    "rpd": ("rocm.rpd", "rocmProfileData (rpd_tracer) SQLite .rpd"),
    "rocprof_csv": ("rocm.rocprof_csv", "rocprof v1 results.csv (--timestamp on)"),
    "rocprof_sqlite": ("rocm.rocprof_sqlite", "rocprof v1 results.db (table KERN)"),
    "rocm_smi_csv": ("rocm.rocm_smi_csv", "rocm-smi / amd-smi telemetry logs (CSV)"),
}


class ReaderModule(Protocol):
    """What every format module has besides `read_<slug>` (and maybe `stream_<slug>`), whose
    names carry the slug."""

    def sniff(self, path: PathLike) -> bool: ...


@dataclass(frozen=True)
class Reader:
    slug: str
    module_name: str  # dotted, under traceanalyze.readers
    description: str

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(f"{__name__}.{self.module_name}")

    @property
    def function(self) -> Callable[..., Tables]:
        fn: Callable[..., Tables] = getattr(self.module, f"read_{self.slug}")
        return fn

    @property
    def options(self) -> frozenset[str]:
        """The option names `read_<slug>` takes: its keyword parameters after the path."""
        import inspect  # ~7 ms to import; only reads with options need it

        params = list(inspect.signature(self.function).parameters.values())[1:]
        kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return frozenset(p.name for p in params if p.kind in kinds)

    def read(self, path: PathLike, **options: Any) -> Tables:
        return self.function(path, **options)

    def sniff(self, path: PathLike) -> bool:
        mod: ReaderModule = self.module
        return bool(mod.sniff(path))

    @property
    def streams(self) -> bool:
        """Whether the module has `stream_<slug>(path, *, workdir, <options>)`: chunks
        `(table, frame)` with bounded memory, for `ingest`. Without it, ingest reads whole."""
        return hasattr(self.module, f"stream_{self.slug}")

    def stream(
        self, path: PathLike, workdir: Path | None, **options: Any
    ) -> Iterator[tuple[str, pl.DataFrame]]:
        if not self.streams:
            yield from self.read(path, **options).items()
            return
        fn: Callable[..., Iterator[tuple[str, pl.DataFrame]]]
        fn = getattr(self.module, f"stream_{self.slug}")
        if workdir is None:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="traceanalyze-") as tmp:
                yield from fn(path, workdir=Path(tmp), **options)
        else:
            yield from fn(path, workdir=workdir, **options)


READERS: dict[str, Reader] = {slug: Reader(slug, mod, desc) for slug, (mod, desc) in _SLUGS.items()}


def _empty(path: PathLike) -> bool:
    try:
        return os.stat(path).st_size == 0
    except OSError:
        return False


def detect_format(path: PathLike) -> str:
    """The slug of the one reader that claims the file; UnknownFormat for none or several.

    Readers whose screen (`common.screen`, a necessary condition of their sniff read from the file's
    head) rules the file out are not imported or asked; the others' sniffs decide.

    When none claims it because the container itself is damaged (a gzip cut short before any
    reader could recognize its content, an SQLite file whose schema pages are gone), the error
    is MalformedInput saying so ("truncated gzip …", "unreadable SQLite database …").
    """
    from .common.screen import candidates  # screens out readers without importing them

    matches = [slug for slug in candidates(path, list(READERS)) if READERS[slug].sniff(path)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        from .common.sqlite import sqlite_damage

        damage = gzip_damage(path) or sqlite_damage(path)
        if damage is not None:
            raise MalformedInput(damage, path=path)
        if _empty(path):  # what every reader says of it under --format (issue 32)
            raise MalformedInput("empty file", path=path)
        raise UnknownFormat(
            f"no reader recognizes this file (formats: {', '.join(READERS)}); "
            "pass format=SLUG if you know it",
            path=path,
        )
    raise UnknownFormat(
        f"several readers claim this file ({', '.join(matches)}); pass format=SLUG", path=path
    )


def file_sha256(path: PathLike) -> str:
    return _sha256_of(path, lambda: False)


def _sha256_of(path: PathLike, stopped: Callable[[], bool]) -> str:
    """The file's SHA-256, read into one reused 64 KiB buffer (memory stays flat whatever the
    file's size). Not a memory map: mapped pages count in the process's RSS, and a file cut
    short by another process while mapped kills the reader with SIGBUS. `stopped()` is asked
    between reads.

    64 KiB, under glibc's default mmap threshold (128 KiB): freeing a larger buffer raises that
    threshold to its size for the rest of the process, and the reader's later allocations then
    come from the heap, where they fragment: with a 1 MiB buffer, reading the 15 MB ResNet-50
    Kineto trace peaked at 105-106 MB instead of 96-98 (hashing is no slower in 64 KiB reads)."""
    h = hashlib.sha256()
    buf = bytearray(1 << 16)
    with open(path, "rb", buffering=0) as f, memoryview(buf) as view:
        while not stopped() and (n := f.readinto(buf)):
            h.update(view[:n])
    return h.hexdigest()


# Files from this size on are hashed in a thread while their reader reads them; from the second
# size on, by a process of its own that the thread waits for.
_HASH_IN_THREAD_BYTES = 8 << 20
_HASH_IN_PROCESS_BYTES = 64 << 20
# What that process runs (`python -S -P -c`: the standard library only); as `_sha256_of`.
_HASH_CODE = (
    "import hashlib, sys\nh = hashlib.sha256()\nb = bytearray(1 << 20)\nv = memoryview(b)\n"
    "with open(sys.argv[1], 'rb', buffering=0) as f:\n"
    "    while n := f.readinto(b):\n        h.update(v[:n])\nprint(h.hexdigest())\n"
)
_HEX64 = re.compile(r"[0-9a-f]{64}")


class Sha256Thread:
    """A file's SHA-256, from a thread that runs while the reader reads the file: file reads and
    `hashlib` updates release the GIL, so on a 490 MB nsys export the 0.4 s of hashing leaves
    the critical path. Small files are hashed at once (a thread would cost more than it saves).

    A big file is hashed by a process of its own (`_HASH_CODE`), the thread only waiting for it:
    a reader that holds the GIL through long C calls (msgspec decodes 8 MiB of JSON per call)
    starves a hashing thread, which needs the GIL back after every 1 MiB; on a 1 GB Kineto trace
    the hash then ended after most of the read instead of after ~1 s. Where no process can be
    started (or it fails: the file became unreadable), the thread hashes, and says why it fails.
    """

    def __init__(self, path: PathLike) -> None:
        self._digest: str | None = None
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0  # hashed at once, so its error is raised here, before any read
        self._big = size >= _HASH_IN_PROCESS_BYTES
        if size < _HASH_IN_THREAD_BYTES:
            self._run(path)
            if self._error is not None:
                raise self._error
        else:
            self._thread = threading.Thread(
                target=self._run, args=(path,), name="traceanalyze-sha256", daemon=True
            )
            self._thread.start()

    def _run(self, path: PathLike) -> None:
        try:
            digest = self._in_process(path) if self._big else None
            self._digest = digest or _sha256_of(path, lambda: self._stop)
        except BaseException as e:  # handed to the caller by result()
            self._error = e

    def _in_process(self, path: PathLike) -> str | None:
        argv = [sys.executable, "-S", *SAFE_PATH, "-c", _HASH_CODE, os.path.abspath(path)]
        try:
            # in the standard library's own directory: on Python 3.10 (no -P), `-c` puts the
            # current directory on sys.path, and there `hashlib` is the real one
            self._proc = proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=os.path.dirname(os.__file__),
            )
        except OSError:
            return None
        if self._stop:
            proc.kill()
        out, _ = proc.communicate()
        text = out.decode("ascii", "replace").strip()
        return text if proc.returncode == 0 and _HEX64.fullmatch(text) else None

    def done(self) -> bool:
        """The hash is in (or failed): `result()` does not wait."""
        return self._thread is None or not self._thread.is_alive()

    def result(self) -> str:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._digest is not None
        return self._digest

    def cancel(self) -> None:
        """Stop hashing (the read failed) and wait for the thread."""
        self._stop = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        if self._thread is not None:
            self._thread.join()


def source_id_for(sha256: str) -> str:
    return sha256[:16]


def options_for(format: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of `options` that the reader `format` takes."""
    accepted = READERS[format].options
    return {k: v for k, v in options.items() if k in accepted}


def check_options(formats: Iterable[str], options: Mapping[str, Any]) -> None:
    """UnsupportedOption when an option is taken by none of the readers of `formats`."""
    fmts = sorted(set(formats))
    for name in options:
        if any(name in READERS[f].options for f in fmts):
            continue
        takers = [slug for slug, r in READERS.items() if name in r.options]
        if not takers:
            known = sorted({o for r in READERS.values() for o in r.options})
            raise UnsupportedOption(
                f"option {name!r} is taken by no reader (reader options: {', '.join(known)})"
            )
        where = f"the {', '.join(fmts)} reader" + ("s" if len(fmts) > 1 else "")
        raise UnsupportedOption(
            f"option {name!r} is not taken by {where} of these files; "
            f"it applies to {', '.join(takers)}"
        )


def _resolve(path: PathLike, format: str | None, options: Mapping[str, Any]) -> str:
    """The reader slug for `path` after the checks every read does first."""
    p = Path(path)
    if not p.exists():
        raise TraceanalyzeError("no such file", path=path)
    if p.is_dir():
        raise TraceanalyzeError("is a directory, not a trace file", path=path)
    if format is None:
        format = detect_format(path)
    elif format not in READERS:
        raise UnknownFormat(f"unknown format {format!r} (formats: {', '.join(READERS)})", path=path)
    try:
        check_options([format], options)
    except UnsupportedOption as e:
        raise UnsupportedOption(e.message, path=path) from None
    return format


def read(
    path: PathLike, format: str | None = None, *, sha256: str | None = None, **options: Any
) -> Tables:
    """Read one file into normalized `Tables`, with its `sources` row and `source_id` filled.

    `format` is a reader slug; by default it is detected. Options go to the reader (e.g. `tz=`
    for smi_csv); one the reader does not take raises UnsupportedOption. Bad input raises a
    `TraceanalyzeError` subclass naming the file.
    """
    format = _resolve(path, format, options)
    hashing = None if sha256 else Sha256Thread(path)
    try:
        # a reader's entry point names the file too; this covers what is raised outside it
        with naming_errors(format, path):
            tables = READERS[format].read(path, **options)
    except BaseException:
        if hashing is not None:
            hashing.cancel()
        raise
    sha = hashing.result() if hashing is not None else sha256
    assert sha is not None
    return finalize(tables, path=Path(path), format=format, sha256=sha)


def stream(
    path: PathLike,
    format: str | None = None,
    *,
    sha256: str | Callable[[], str] | None = None,
    workdir: Path | None = None,
    **options: Any,
) -> Iterator[tuple[str, pl.DataFrame]]:
    """One file as `(table, frame)` chunks, each conformed to the schema with `source_id` set;
    the `sources` row comes last. Concatenated per table they equal `read()`'s tables (row
    order included). Readers with a `stream_<slug>` hold a bounded amount of the file at a
    time (spilling to `workdir`, a temporary directory by default); others are read whole.
    This is what `ingest` writes from, one Parquet row group after another. `sha256` may be a
    call that gives it (a hash computed meanwhile, `store.hashing`): asked at the first chunk."""
    format = _resolve(path, format, options)
    known = file_sha256(path) if sha256 is None else sha256
    get_sha: Callable[[], str] = known if callable(known) else lambda: str(known)
    lit: pl.Expr | None = None
    sources: list[pl.DataFrame] = []
    with naming_errors(format, path):
        for name, df in READERS[format].stream(path, workdir, **options):
            if name == "sources":
                sources.append(df)
            elif df.height:
                if lit is None:
                    lit = pl.lit(source_id_for(get_sha()), dtype=pl.String).alias("source_id")
                yield name, schema.conform(name, df.with_columns(lit))
        src = pl.concat(sources, how="diagonal_relaxed") if sources else None
        tables = Tables.build(**({} if src is None else {"sources": src}))
        done = finalize(tables, path=Path(path), format=format, sha256=get_sha())
    yield "sources", done.sources


def finalize(tables: Tables, *, path: Path, format: str, sha256: str) -> Tables:
    """Fill the `sources` row (path, format, sha256, size) and every table's `source_id`."""
    sid = source_id_for(sha256)
    src = tables.sources
    if src.height > 1:
        raise ValueError(f"reader {format} returned {src.height} sources rows; expected 0 or 1")
    base = src if src.height == 1 else schema.empty("sources").clear(n=1)
    if "job" not in base.columns or base["job"][0] is None:
        job = collect_job(path)  # the run id of `traceanalyze collect`'s manifest beside it
        if job is not None:
            base = base.with_columns(
                pl.lit(job, dtype=pl.String).alias("job"),
                pl.lit("collect manifest", dtype=pl.String).alias("job_from"),
            )
    row = base.with_columns(
        pl.lit(str(path)).alias("path"),
        pl.lit(format).alias("format"),
        pl.lit(sha256).alias("sha256"),
        pl.lit(os.path.getsize(path), dtype=pl.Int64).alias("size_bytes"),
        pl.lit(schema.SCHEMA_VERSION, dtype=pl.Int64).alias("schema_version"),
    )
    return replace(tables, sources=schema.conform("sources", row)).with_source_id(sid)


__all__ = [
    "READERS",
    "Reader",
    "check_options",
    "detect_format",
    "file_sha256",
    "options_for",
    "read",
    "source_id_for",
    "stream",
]
