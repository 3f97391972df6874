"""Bounds on untrusted input (docs/scale.md, "Bad and hostile input"): how far a file may inflate,
how long one JSON value or CSV line may be, and the gzip readers that enforce them. Shared by
every reader."""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace
from typing import Any, BinaryIO

from ...errors import InputTooLarge, MalformedInput, TraceanalyzeError
from .core import GZIP_MAGIC, PathLike

# --- input limits ---------------------------------------------------------------------------
# Untrusted input must not exhaust memory: a 19 MB .json.gz can inflate to 4 GB, a 10 MB .csv.gz
# to 8 GB, and one JSON string or CSV line can be gigabytes. Real traces inflate 4-20x (the
# ResNet-50 Kineto trace 13x, nvprof/smi CSVs 8-13x), so 100x is a bound no real capture meets.


@dataclass(frozen=True)
class InputLimits:
    """Bounds on untrusted input; every reader and the gzip stream enforce them.

    * `max_inflate_ratio` (100; env TRACEANALYZE_MAX_INFLATE_RATIO): a gzip file may inflate to at
      most this many times the compressed bytes consumed so far, checked as it streams once
      `inflate_grace_bytes` (64 MiB; env TRACEANALYZE_INFLATE_GRACE_BYTES) are out, so a small
      file is never refused and a bomb is refused after 64 MiB, not 4 GB.
    * `max_inflated_bytes` (16 GiB; env TRACEANALYZE_MAX_INFLATED_BYTES): absolute bound on the
      decompressed size of one file.
    * `max_value_bytes` (64 MiB; env TRACEANALYZE_MAX_VALUE_BYTES): the largest single JSON value
      (a trace event, a string) and the longest CSV/text line, hence CSV field.

    Sizes in the environment are bytes, or with a K/M/G suffix (binary: 64M = 64 MiB). Change
    them for one call with `with input_limits(max_inflate_ratio=1000): ta.read(...)`.
    """

    max_inflate_ratio: float = 100.0
    inflate_grace_bytes: int = 64 << 20
    max_inflated_bytes: int = 16 << 30
    max_value_bytes: int = 64 << 20


_ENV = {
    "max_inflate_ratio": "TRACEANALYZE_MAX_INFLATE_RATIO",
    "inflate_grace_bytes": "TRACEANALYZE_INFLATE_GRACE_BYTES",
    "max_inflated_bytes": "TRACEANALYZE_MAX_INFLATED_BYTES",
    "max_value_bytes": "TRACEANALYZE_MAX_VALUE_BYTES",
}
_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_LIMITS: ContextVar[InputLimits | None] = ContextVar("traceanalyze_input_limits", default=None)


def _env_number(name: str, text: str, integer: bool) -> float:
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = _SUFFIX.get(t[-1:], 1) if integer else 1
    try:
        value = float(t[:-1] if scale != 1 else t) * scale
    except ValueError:
        raise TraceanalyzeError(f"environment variable {name}={text!r} is not a number") from None
    if not value > 0:
        raise TraceanalyzeError(f"environment variable {name}={text!r} must be positive")
    return value


def current_limits() -> InputLimits:
    """The limits in force: those set by `input_limits(...)`, else the environment's, else the
    defaults (read at each call, so a worker process started later sees the same)."""
    set_here = _LIMITS.get()
    if set_here is not None:
        return set_here
    changes: dict[str, Any] = {}
    for f in fields(InputLimits):
        text = os.environ.get(_ENV[f.name])
        if text:
            integer = f.name != "max_inflate_ratio"
            v = _env_number(_ENV[f.name], text, integer)
            changes[f.name] = int(v) if integer else v
    return replace(InputLimits(), **changes) if changes else InputLimits()


@contextlib.contextmanager
def input_limits(limits: InputLimits | None = None, **changes: Any) -> Iterator[InputLimits]:
    """Use `limits` (or the current ones with `changes`) for the reads inside the block."""
    new = replace(limits or current_limits(), **changes)
    token = _LIMITS.set(new)
    try:
        yield new
    finally:
        _LIMITS.reset(token)


def _size(n: float) -> str:
    for unit, step in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= step:
            return f"{n / step:.1f} {unit}"
    return f"{int(n)} bytes"


def too_large_value(what: str, at: str, limits: InputLimits, path: PathLike) -> InputTooLarge:
    """The error for one value/line past `max_value_bytes` (`what`: "JSON value", "line")."""
    return InputTooLarge(
        f"a {what} {at} is larger than {_size(limits.max_value_bytes)}, refused (raise "
        f"{_ENV['max_value_bytes']} to read it)",
        path=path,
    )


def gunzip_stream(
    f: BinaryIO,
    path: PathLike,
    *,
    out_chunk: int,
    inflate: Any = zlib,
    limits: InputLimits | None = None,
) -> Iterator[bytes]:
    """The decompressed bytes of the gzip file `f` (at its start), in pieces of at most
    `out_chunk`: every member in turn, trailing zero padding ignored, as `gzip` does.

    `inflate` is a zlib-compatible module (zlib, or ISA-L's `isal.isal_zlib`): with wbits=31 it
    checks each member's header and CRC in C, skipping `gzip.GzipFile`'s Python-level buffering.
    Raises MalformedInput "truncated gzip (no end of stream)" or "corrupt gzip (…)", and
    InputTooLarge past `limits` (default `current_limits()`): never more than `out_chunk` bytes
    are inflated past a bound before it is noticed.
    """
    lim = limits or current_limits()
    errors = (zlib.error, getattr(inflate, "error", zlib.error))
    d = inflate.decompressobj(31)
    started = False  # inside a member
    data = b""
    read_in = inflated = 0
    try:
        while True:
            if not data:
                data = f.read(1 << 20)
                read_in += len(data)
                if not data:
                    if started:
                        raise MalformedInput("truncated gzip (no end of stream)", path=path)
                    return
            if not started and not data.strip(b"\x00"):
                data = b""
                continue
            started = True
            out = d.decompress(data, out_chunk)
            data = d.unconsumed_tail
            if out:
                inflated += len(out)
                _check_inflated(inflated, read_in - len(data), lim, path)
                yield out
            if d.eof:
                data, d, started = d.unused_data, inflate.decompressobj(31), False
    except errors as e:
        raise MalformedInput(f"corrupt gzip ({e})", path=path) from None


def _check_inflated(inflated: int, consumed: int, lim: InputLimits, path: PathLike) -> None:
    if inflated > lim.max_inflated_bytes:
        raise InputTooLarge(
            f"gzip inflates to more than {_size(lim.max_inflated_bytes)}, refused (raise "
            f"{_ENV['max_inflated_bytes']} to read it)",
            path=path,
        )
    if inflated > lim.inflate_grace_bytes and inflated > lim.max_inflate_ratio * max(consumed, 1):
        raise InputTooLarge(
            f"gzip inflates more than {lim.max_inflate_ratio:g}x ({_size(consumed)} to "
            f"{_size(inflated)} so far): a likely decompression bomb, refused (raise "
            f"{_ENV['max_inflate_ratio']} to read it)",
            path=path,
        )


def read_content(path: PathLike, *, check_lines: bool = True) -> bytes:
    """The whole content of a text file, gunzipped when it is gzip, within `current_limits()`.

    Decompression is streamed and bounded (`gunzip_stream`); with `check_lines`, a line longer
    than `max_value_bytes` (a CSV field cannot be longer than its line) is InputTooLarge.
    """
    lim = current_limits()
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            f.seek(0)
            raw = f.read()
        else:
            f.seek(0)
            raw = b"".join(_gunzip_lines_checked(f, path, lim, check_lines))
    if check_lines:
        check_line_lengths(raw, path, lim)
    return raw


def _gunzip_lines_checked(
    f: BinaryIO, path: PathLike, lim: InputLimits, check_lines: bool
) -> Iterator[bytes]:
    """`gunzip_stream`, and stop early at a run without newline past `max_value_bytes` (a giant
    field inside a well-compressed file is refused before it is all in memory)."""
    since_nl = 0
    for chunk in gunzip_stream(f, path, out_chunk=1 << 20, limits=lim):
        if check_lines:
            nl = chunk.rfind(b"\n")
            since_nl = since_nl + len(chunk) if nl < 0 else len(chunk) - nl - 1
            if since_nl > lim.max_value_bytes:
                raise too_large_value("line", "(a CSV field or text line)", lim, path)
        yield chunk


def check_line_lengths(raw: Any, path: PathLike, limits: InputLimits | None = None) -> None:
    """InputTooLarge when a line of `raw` (bytes, mmap) is longer than `max_value_bytes`.

    Only windows of half the bound without a newline are looked at closely: a line longer than
    the bound contains one, and the scan is a C `find` per window.
    """
    lim = limits or current_limits()
    n, bound = len(raw), lim.max_value_bytes
    if n <= bound:
        return
    w = max(bound // 2, 1)
    pos = 0
    while pos < n:
        if raw.find(b"\n", pos, pos + w) >= 0 or pos + w > n:
            pos += w
            continue
        left = raw.rfind(b"\n", 0, pos) + 1
        right = raw.find(b"\n", pos)
        right = n if right < 0 else right
        if right - left > bound:
            line = _count_newlines(raw, left) + 1
            raise InputTooLarge(
                f"line {line} is longer than {_size(bound)} (a CSV "
                f"field or text line), refused (raise {_ENV['max_value_bytes']} to read it)",
                path=path,
            )
        pos = right + 1


def _count_newlines(raw: Any, end: int) -> int:
    """Newlines in raw[:end], in slices (an mmap has no `count`); for error messages only."""
    step = 1 << 24
    return sum(raw[i : min(i + step, end)].count(b"\n") for i in range(0, end, step))


def gzip_damage(path: PathLike) -> str | None:
    """Why a gzip file cannot be decompressed to its end ("truncated gzip …", "corrupt gzip …"),
    or None when it can (or is not gzip). Reads the whole file: only for diagnosing errors."""
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            return None
        f.seek(0)
        try:
            for _ in gunzip_stream(f, path, out_chunk=1 << 22):
                pass
        except MalformedInput as e:
            return e.message
    return None
