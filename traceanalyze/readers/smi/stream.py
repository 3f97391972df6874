"""GPU telemetry logs, streaming (`smi_csv.stream_smi_csv`): the log block by block of whole
lines (`common.stream.line_blocks`), each block read by the whole-file read's own functions.

What the whole-file read knows of the whole log is kept as small state: the header (fields,
units), the time zone (resolved once), the rows before the block (for line numbers), the
devices seen, per-entity sample counts (dcgmi), and the counts behind notes (merged by
`common.stream.Notes`). dumpGpuPower text, whose samples are sorted by time with the energy
lines, is read twice (`smi.dump_stream`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..common.core import PathLike, head_bytes
from ..common.stream import line_blocks
from .clock import check_timezone, local_timezone
from .state import SmiLog, _State
from .variants import (
    _dcgmi_header,
    _dcgmi_step_ns,
    dcgmi_rows,
    dcgmi_sources,
    generic_rows,
    generic_sources,
)

_Chunks = Iterator[tuple[str, pl.DataFrame]]


def _blocks_after(path: PathLike, skip: int) -> Iterator[tuple[bytes, int]]:
    """`line_blocks`, without the first `skip` lines (a magic line, a header) and blocks of
    blank lines only (the whole-file parsers skip blank lines)."""
    for block, line in line_blocks(path):
        if skip:
            cut = 0
            while skip and cut < len(block):
                nl = block.find(b"\n", cut)
                cut = len(block) if nl < 0 else nl + 1
                skip -= 1
                line += 1
            block = block[cut:]
        if block.strip():
            yield block, line


def stream_smi(
    path: PathLike,
    log: SmiLog,
    *,
    workdir: Path,
    tz: str | None,
    fields: str | Sequence[str] | None,
    interval_ms: float | None,
) -> _Chunks:
    """The chunks of `smi_csv.stream_smi_csv`."""
    first = head_bytes(path, 65536 + 3)
    first = first[3:] if first.startswith(b"\xef\xbb\xbf") else first[:65536]
    if not first.strip() or b"\x00" in first:
        yield from log.whole().items()  # raises what the whole-file read says of it
        return
    kind = log.variant(first[:16384].decode("utf-8", "replace"))
    st = _State(path, workdir)
    try:
        yield from _dispatch(
            path, first, kind, st, log, tz=tz, fields=fields, interval_ms=interval_ms
        )
    finally:
        st.spill.close()


def _dispatch(
    path: PathLike,
    first: bytes,
    kind: str | None,
    st: _State,
    log: SmiLog,
    *,
    tz: str | None,
    fields: str | Sequence[str] | None,
    interval_ms: float | None,
) -> _Chunks:
    if kind == "smi" or (kind in ("smi_noheader", None) and fields is not None):
        chunks = _smi(path, first, st, tz, None if kind == "smi" else fields, log)
    elif kind == "sampler":
        chunks = _sampler(path, first, st, log)
    elif kind == "generic":
        chunks = _generic(path, st, tz, log)
    elif kind == "dcgmi" and interval_ms is not None:
        chunks = _dcgmi(path, first, st, interval_ms, log)
    elif kind == "dump":
        from .dump_stream import stream_dump

        chunks = stream_dump(path, st, log)
    else:  # errors (empty, binary, unknown, a missing option): read whole
        chunks = iter(log.whole().items())
    yield from chunks


def _fallback(st: _State, log: SmiLog) -> _Chunks:
    """A log without any row: the whole-file read says what it says of it (it is small)."""
    del st
    yield from log.whole().items()


def _smi(
    path: PathLike,
    first: bytes,
    st: _State,
    tz: str | None,
    fields: str | Sequence[str] | None,
    log: SmiLog,
) -> _Chunks:
    base, units, first_line = log.header(first, None, path, fields)
    zone = check_timezone(tz, path) if tz is not None else local_timezone()
    sources: pl.DataFrame | None = None
    for block, _line in _blocks_after(path, first_line - 1):
        with st.notes.collect():
            t = log.rows(block, path, zone, base, units, first_line + st.rows, has_header=False)
        sources = t.sources if sources is None else sources
        st.add_devices(t.devices)
        st.metrics(t.gpu_metrics, base)
        yield from st.samples(t.gpu_samples)
    if sources is None:
        yield from _fallback(st, log)
        return
    yield from st.finish(sources)


def _sampler(path: PathLike, first: bytes, st: _State, log: SmiLog) -> _Chunks:
    nl = first.find(b"\n")
    magic = first[: nl if nl >= 0 else len(first)]
    body = first[nl + 1 :] if nl >= 0 else b""
    log.check_sampler_header(body, path)
    end = body.find(b"\n")
    header = body[: end + 1] if end >= 0 else body + b"\n"
    any_rows = False
    for block, _line in _blocks_after(path, 2):
        df = log.sampler_rows(header + block, path, st.rows)
        any_rows = True
        st.add_devices(log.sampler_devices(df))
        yield from st.samples(df)
    if not any_rows:
        yield from _fallback(st, log)
        return
    yield from st.finish(log.sampler_sources(magic))


def _generic(path: PathLike, st: _State, tz: str | None, log: SmiLog) -> _Chunks:
    header: bytes | None = None
    zone: str | None = None
    for block, _line in _blocks_after(path, 0):
        if header is None:
            # The header is the first line (as pyarrow reads it): kept for the later blocks.
            end = block.find(b"\n")
            header = block[: end + 1]
            text = block
        else:
            text = header + block
        with st.notes.collect():
            gs, metrics, used = generic_rows(text, path, zone or tz, st.rows)
        zone = zone or used  # resolved once: later blocks use it (one warning, if any)
        st.metrics(metrics, header.decode("utf-8", "replace").strip().split(","))
        yield from st.samples(gs)
    if not st.rows:
        yield from _fallback(st, log)
        return
    yield from st.finish(generic_sources(zone))


def _dcgmi(path: PathLike, first: bytes, st: _State, interval_ms: Any, log: SmiLog) -> _Chunks:
    _dcgmi_step_ns(interval_ms, path)
    lines = first.decode("utf-8", "replace").split("\n")
    if len(first) >= 65536:
        lines = lines[:-1]  # the head may end inside a line: look at whole lines only
    head = _dcgmi_header(lines)
    seen: dict[str, int] = {}
    for block, line in _blocks_after(path, 0):
        text = block.decode("utf-8", "replace").split("\n")
        with st.notes.collect():
            samples, metrics, devices = dcgmi_rows(text, line, head, path, interval_ms, seen)
        st.add_devices(devices)
        st.metrics(metrics, head[1])
        yield from st.samples(samples)
    if not st.rows:
        yield from _fallback(st, log)
        return
    yield from st.finish(dcgmi_sources(interval_ms))
