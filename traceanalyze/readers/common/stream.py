"""Shared by the streaming CSV readers (`stream_nvprof_csv`, `stream_smi_csv`): a file's content
as blocks of whole lines, and warnings merged across blocks so that a stream warns as the
whole-file read does (one note per column with the file's count, not one per block).
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, ParamSpec, TypeVar

import polars as pl

from .core import GZIP_MAGIC, PathLike, naming_errors
from .limits import InputLimits, _gunzip_lines_checked, check_line_lengths, current_limits

# The content is parsed this many (decompressed) bytes at a time, cut at a line end. Memory is
# about 15 times this (the block, its Arrow and polars columns, what the allocators keep), on
# top of ~60 MB that parsing costs whatever the block (code, thread arenas); past 2 MiB the
# throughput hardly grows (benchmarks/bench_ingest_memory_csv.py). Tests lower it to force
# many blocks on small files.
BLOCK_BYTES = 2 << 20


def line_blocks(path: PathLike, block_bytes: int | None = None) -> Iterator[tuple[bytes, int]]:
    """`(block, line number of its first line)`: the content of a text file, gunzipped as it
    streams when it is gzip (`common.limits.gunzip_stream`, within `current_limits()`), the
    UTF-8 BOM stripped, in blocks of about `block_bytes` that end at a line end (the last may not).

    A line longer than `max_value_bytes` raises InputTooLarge as the whole-file reads do; a
    truncated or corrupt gzip raises MalformedInput when the stream reaches the damage.
    """
    size = block_bytes or BLOCK_BYTES
    lim = current_limits()
    with open(path, "rb") as f:
        gz = f.read(2) == GZIP_MAGIC
        f.seek(0)
        pieces = (
            _gunzip_lines_checked(f, path, lim, True) if gz else _plain_pieces(f, path, lim, size)
        )
        buf = bytearray()
        line, first = 1, True
        for piece in pieces:
            buf += piece
            if first and len(buf) >= 3:
                if buf.startswith(b"\xef\xbb\xbf"):
                    del buf[:3]
                first = False
            while len(buf) >= size:  # (a gzip piece may hold several blocks)
                cut = buf.rfind(b"\n", 0, size) + 1 or buf.find(b"\n", size) + 1
                if not cut:
                    break  # a line longer than a block: wait for its end
                with memoryview(buf) as whole, whole[:cut] as part:
                    block = bytes(part)  # one copy (buf[:cut] would be two)
                del buf[:cut]
                yield block, line
                line += block.count(b"\n")
        if first and buf.startswith(b"\xef\xbb\xbf"):
            del buf[:3]
        if buf:
            yield bytes(buf), line


def _plain_pieces(f: BinaryIO, path: PathLike, lim: InputLimits, size: int) -> Iterator[bytes]:
    """The bytes of a plain file; a run without newline past `max_value_bytes` raises the
    whole-file read's InputTooLarge (with its line number: found again on an mmap, errors only)."""
    since_nl = 0
    while piece := f.read(size):
        nl = piece.rfind(b"\n")
        since_nl = since_nl + len(piece) if nl < 0 else len(piece) - nl - 1
        if since_nl > lim.max_value_bytes:
            with open(path, "rb") as g, mmap.mmap(g.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                check_line_lengths(mm, path, lim)
        yield piece


# --- warnings merged across blocks ------------------------------------------------------------

# Notes that carry a count (and a first example) of the rows they concern: merged over blocks,
# counts summed, the first block's example kept. Groups: n (the count), x (the example).
_MERGED = (
    # _common.check_telemetry
    re.compile(
        r"(?P<a>.*: )(?P<n>\d+)(?P<b> \S+ value\(s\) outside the plausible range \[[^\]]*\] "
        r"\(first: )(?P<x>.*)(?P<c>\); set to null)",
        re.S,
    ),
    # _smi_assemble._numbers: `[…]` states read as null
    re.compile(r"(?P<a>.*: )(?P<n>\d+)(?P<b> value\(s\) like )(?P<x>.*)(?P<c> read as null)", re.S),
    # _smi_time.local_to_epoch_ns
    re.compile(
        r"(?P<a>.*: )(?P<n>\d+)(?P<b> local timestamp\(s\) fall in a repeated DST hour .*)", re.S
    ),
    # _smi_variants: dcgmi rows of other entities
    re.compile(r"(?P<a>.*: skipped )(?P<n>\d+)(?P<b> dcgmi row\(s\) of non-GPU entities)", re.S),
)


@dataclass
class _Note:
    text: str  # the whole message, or the part before the count
    category: type[Warning]
    count: int | None = None  # merged notes: the count, what follows it, the example, the rest
    middle: str = ""
    example: str = ""
    rest: str = ""

    def message(self) -> str:
        if self.count is None:
            return self.text
        return f"{self.text}{self.count}{self.middle}{self.example}{self.rest}"


class Notes:
    """Warnings raised while blocks are parsed, held and merged, then given by `emit`."""

    def __init__(self) -> None:
        self._items: list[_Note] = []
        self._index: dict[tuple[object, ...], _Note] = {}

    @contextlib.contextmanager
    def collect(self) -> Iterator[None]:
        """Hold the warnings raised inside the block (which must not yield)."""
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            yield
        for w in rec:
            self.add(str(w.message), w.category)

    def add(self, msg: str, category: type[Warning] = UserWarning) -> None:
        for k, pat in enumerate(_MERGED):
            m = pat.fullmatch(msg)
            if m is None:
                continue
            g = m.groupdict()
            key = (k, g["a"], g["b"], g.get("c"), category)
            if key in self._index:
                self._index[key].count = (self._index[key].count or 0) + int(g["n"])
            else:
                x, c = g.get("x") or "", g.get("c") or ""
                note = _Note(g["a"], category, int(g["n"]), g["b"], x, c)
                self._index[key] = note
                self._items.append(note)
            return
        self._items.append(_Note(msg, category))

    def emit(self) -> None:
        for note in self._items:
            warnings.warn(note.message(), note.category, stacklevel=3)
        self._items.clear()
        self._index.clear()


class Spill:
    """Frames that the whole-file read orders by key first (one metric's rows, then the next
    metric's: a long table built column by column), written to `workdir` as they come, one
    Arrow IPC stream per key, and read back key after key: memory holds one frame, not a table.
    Keys come back in the order of `order`, then others in first-seen order."""

    def __init__(self, workdir: Path, order: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.order = {k: i for i, k in enumerate(order)}
        self._writers: dict[str, tuple[Any, Any, Path, Any]] = {}  # writer, file, path, schema
        self._n = 0

    def add(self, key: str, df: pl.DataFrame) -> None:
        if not df.height:
            return
        import pyarrow as pa

        tbl = df.to_arrow()
        if key not in self._writers:
            self._n += 1
            path = self.workdir / f"spill-{os.getpid()}-{id(self)}-{self._n}.arrows"
            sink = pa.OSFile(str(path), "wb")
            self._writers[key] = (pa.ipc.new_stream(sink, tbl.schema), sink, path, tbl.schema)
        writer, _, _, schema = self._writers[key]
        if tbl.schema != schema:  # e.g. a column all null in this block
            tbl = tbl.cast(schema)
        writer.write_table(tbl)

    def drain(self) -> Iterator[tuple[str, pl.DataFrame]]:
        """`(key, frame)` back, key by key, each key's frames in the order added; files removed."""
        import pyarrow as pa

        seen = list(self._writers)
        keys = sorted(seen, key=lambda k: (self.order.get(k, len(self.order)), seen.index(k)))
        for key in keys:
            writer, sink, path, _ = self._writers.pop(key)
            writer.close()
            sink.close()
            with pa.OSFile(str(path), "rb") as src:  # read, not mapped: frames own their memory
                for batch in pa.ipc.open_stream(src):
                    df = pl.from_arrow(batch)
                    assert isinstance(df, pl.DataFrame)
                    yield key, df
            path.unlink()

    def close(self) -> None:
        for writer, sink, path, _ in self._writers.values():
            with contextlib.suppress(Exception):  # being thrown away after an error
                writer.close()
                sink.close()
            path.unlink(missing_ok=True)
        self._writers.clear()


_P = ParamSpec("_P")
_T = TypeVar("_T")


def stream_entry(
    slug: str,
) -> Callable[[Callable[_P, Iterator[_T]]], Callable[_P, Iterator[_T]]]:
    """`common.core.reader_entry` for a `stream_<slug>` generator: errors raised while it runs name
    the file, and parser errors on bad bytes become one-line MalformedInput."""

    def wrap(fn: Callable[_P, Iterator[_T]]) -> Callable[_P, Iterator[_T]]:
        @functools.wraps(fn)
        def gen(*args: _P.args, **kwargs: _P.kwargs) -> Iterator[_T]:
            path = args[0] if args else kwargs.get("path")
            with naming_errors(slug, path):  # type: ignore[arg-type]
                yield from fn(*args, **kwargs)

        return gen

    return wrap
