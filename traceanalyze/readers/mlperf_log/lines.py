"""The record lines of an MLPerf log, streamed: bounded memory whatever the file's size.

The file is read in 1 MiB chunks (inflated first when it is gzip). A chunk without any `:::` marker
is only counted for line numbers (`bytes.count`, in C), so gigabytes of console output between
records cost one pass and no Python per line. A line that holds a marker is handed on whole, with
its number. A line longer than `max_value_bytes` (64 MiB by default) is dropped as console noise
when it holds no marker, and refused (InputTooLarge) when it does: memory never holds more than
one chunk plus one bounded line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from ..common.core import GZIP_MAGIC, PathLike
from ..common.limits import current_limits, gunzip_stream, too_large_value

# Every record variant's marker starts so: `:::MLLOG`, `:::MLL `, `:::MLPv0.5.0`, `:::SYSJSON`.
MARKER = b":::"
_CHUNK = 1 << 20


def _chunks(f: BinaryIO, path: PathLike) -> Iterator[bytes]:
    head = f.read(len(GZIP_MAGIC))
    f.seek(0)
    if head == GZIP_MAGIC:
        yield from gunzip_stream(f, path, out_chunk=_CHUNK)
        return
    while data := f.read(_CHUNK):
        yield data


def marker_lines(path: PathLike) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its LF/CRLF) for each line holding `:::`."""
    limit = current_limits().max_value_bytes
    line = 1  # number of the first line in `carry`
    carry = b""
    skipping = False  # inside an over-long line (noise) until its newline
    with open(path, "rb") as f:
        for data in _chunks(f, path):
            if skipping:
                nl = data.find(b"\n")
                if MARKER in data[: nl if nl >= 0 else len(data)]:
                    raise too_large_value("line", f"at line {line}", current_limits(), path)
                if nl < 0:
                    continue
                data, skipping = data[nl + 1 :], False
                line += 1
            buf = carry + data
            end = buf.rfind(b"\n")
            if end < 0:
                carry = buf
            else:
                yield from _scan(buf, end + 1, line)
                line += buf.count(b"\n", 0, end + 1)
                carry = buf[end + 1 :]
            if len(carry) > limit:
                if MARKER in carry:
                    raise too_large_value("line", f"at line {line}", current_limits(), path)
                carry, skipping = b"", True
        if carry and not skipping:
            yield from _scan(carry + b"\n", len(carry) + 1, line)


def _scan(buf: bytes, stop: int, first_line: int) -> Iterator[tuple[int, bytes]]:
    """The marker lines among the complete lines `buf[:stop]` (which ends with a newline)."""
    pos = buf.find(MARKER, 0, stop)
    counted, line = 0, first_line
    while pos >= 0:
        start = buf.rfind(b"\n", 0, pos) + 1
        end = buf.find(b"\n", pos, stop)
        line += buf.count(b"\n", counted, start)
        counted = start
        yield line, buf[start:end].rstrip(b"\r")
        pos = buf.find(MARKER, end + 1, stop)
