"""nvprof CSV, streaming (`nvprof_csv.stream_nvprof_csv`): the file block by block of whole
lines (`common.stream.line_blocks`), cut into sections as `_split` does, each trace section's
rows parsed and emitted block by block with the same handlers as the whole-file read.

What the whole-file read knows of a whole table is kept as small state: the section being read
(its header, units row, process id, NVTX range), the running `kernel_id`, the devices seen, the
counts behind notes (rows of unsupported kinds, implausible telemetry). Summary
and metrics tables are parsed block by block too; their `kernel_metrics` (one quantity's rows
after another) are spilled to `workdir` per quantity and emitted when the section ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import polars as pl

from ...errors import MalformedInput
from ..common.core import PathLike, check_telemetry
from ..common.stream import Notes, Spill, line_blocks
from .metrics import _instance_metrics, _metrics, _summary
from .rows import _devices_frame, _Out
from .split import (
    _HAS_UNITS_ROW,
    _NON_SPACE,
    _PID,
    _RANGE,
    _blank,
    _eol,
    _find_header,
    _kind_at,
    _line_at,
    _no_header,
    _note_envelope,
    _open_section,
    _raise_if_damaged_header,
    _Section,
    _skip_blank_lines,
    _starts,
)
from .trace import _trace, warn_skipped

_Event = tuple[Literal["open", "body"], _Section, int, int]
_TABLES = ("kernels", "memcpy", "api_calls", "gpu_samples", "kernel_metrics")
_HANDLERS = {
    "trace": _trace,
    "summary": _summary,
    "metrics": _metrics,
    "instance_metrics": _instance_metrics,
}


class _Splitter:
    """`_split`'s walk over regions (the text between `==` lines), fed one block at a time.

    State between blocks: the current section, the process id and NVTX range of the last
    envelope lines, and whether the next byte starts a region (only there is a header looked
    for, as in `_split`)."""

    def __init__(self, path: PathLike, notes: list[str]) -> None:
        self.path = path
        self.notes = notes
        self.current: _Section | None = None
        self.pid: int | None = None
        self.range_name: str | None = None
        self.region_start = True
        self.sections = 0
        self.skipped_before_header = 0

    def feed(self, raw: bytes, line0: int, final: bool) -> tuple[list[_Event], int]:
        """The events of `raw` (whole lines; its first is line `line0`), and the offset from
        which `raw` must be given again with the next block (a header whose units row is not
        in this block)."""
        events: list[_Event] = []
        n, pos = len(raw), 0
        while pos < n:
            if _starts(raw, b"==", pos):
                env = pos
            else:
                found = raw.find(b"\n==", pos)
                env = n if found < 0 else found + 1
            start = pos
            if self.region_start:
                start = _skip_blank_lines(raw, pos, env)
                if start < env:
                    self.region_start = False  # (set again while no header is found)
                    opened = self._region_start(raw, start, env, line0, final, events)
                    if opened is None:
                        self.region_start = True
                        return events, start  # the units row is in the next block
                    start = opened
            if start < env and self.current is not None and not _blank(raw, start, env):
                events.append(("body", self.current, start, env))
            if env >= n:
                break
            pos = _eol(raw, env, n)
            self._envelope(raw[env:pos])
            self.region_start = True
        return events, n

    def _region_start(
        self, raw: bytes, start: int, env: int, line0: int, final: bool, events: list[_Event]
    ) -> int | None:
        """At a region's first non-blank line: open a section when it is a header (None when
        its units row is beyond this block); the offset where the region's rows begin."""
        kind = _kind_at(raw, start)
        if kind is None and self.current is None:
            # Application output before the first header: look for a header in the region.
            found_at, found_kind = _find_header(raw, start, env)
            if found_kind is not None:
                self.skipped_before_header += raw[start:found_at].count(b"\n")
                start, kind = found_at, found_kind
            else:
                self.skipped_before_header += raw[start:env].count(b"\n") or 1
                if env >= len(raw) and not final:
                    self.region_start = True  # the region goes on: keep looking
                return env
        if kind is None:
            return start
        after = _eol(raw, start, env)
        if _HAS_UNITS_ROW[kind] and after >= env and env >= len(raw) and not final:
            return None
        sec = _Section(
            kind=kind,
            header=[],
            header_off=start,
            process_id=self.pid,
            range_name=self.range_name,
        )
        try:
            begin = _open_section(raw, sec, start, env, self.path)
        except MalformedInput as e:  # its line was counted from this block's start
            if e.line is not None:
                e.line += line0 - 1
            raise
        sec.header_line = _line_at(raw, start) + line0 - 1
        if sec.units_off is not None:
            sec.units_line = sec.header_line + 1
        self.current = sec
        self.sections += 1
        events.append(("open", sec, start, start))
        return begin

    def _envelope(self, envelope: bytes) -> None:
        m = _PID.match(envelope)
        if m:
            self.pid = int(m.group(1))
        r = _RANGE.match(envelope)
        if r:
            self.range_name = r.group(1).decode("utf-8", "replace")
        elif b"Profiling result" in envelope or b"Metric result" in envelope:
            self.range_name = None
        _note_envelope(envelope, self.path, self.notes)


class _Reader:
    """Turns the splitter's events into table chunks."""

    def __init__(self, path: PathLike, workdir: Path) -> None:
        self.path = path
        self.out = _Out()
        self.notes = Notes()
        self.section: _Section | None = None
        # A summary or metrics section's kernel_metrics: one quantity's rows after another in
        # the whole-file read, so each quantity's are spilled until the section ends.
        self.spill = Spill(workdir)

    def event(self, raw: bytes, line0: int, ev: _Event) -> Iterator[tuple[str, pl.DataFrame]]:
        what, sec, s, e = ev
        if what == "open":
            yield from self.end_section()
            self.section = sec
            return
        sec.pieces, sec.piece_lines = [(s, e)], [line0 + raw.count(b"\n", 0, s)]
        with self.notes.collect():
            _HANDLERS[sec.kind](raw, sec, self.path, self.out)
        if sec.kind != "trace":
            for i, df in enumerate(self.out.kernel_metrics):
                self.spill.add(str(i), df)
            self.out.kernel_metrics.clear()
        yield from self.drain()

    def end_section(self) -> Iterator[tuple[str, pl.DataFrame]]:
        sec, self.section = self.section, None
        if sec is None:
            return
        with self.notes.collect():
            warn_skipped(self.out, self.path)
        for _, df in self.spill.drain():
            yield "kernel_metrics", df

    def drain(self) -> Iterator[tuple[str, pl.DataFrame]]:
        for name in _TABLES:
            frames: list[pl.DataFrame] = getattr(self.out, name)
            for df in frames:
                if not df.height:
                    continue
                if name == "gpu_samples":
                    with self.notes.collect():
                        df = check_telemetry(df, path=self.path, reader="nvprof_csv")
                yield name, df
            frames.clear()


def stream_nvprof(path: PathLike, head: bytes, workdir: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    """The chunks of `nvprof_csv.stream_nvprof_csv`; `head`: the content's first 64 KiB."""
    reader = _Reader(path, workdir)
    try:
        yield from _stream(path, head, reader)
    finally:
        reader.spill.close()


def _stream(path: PathLike, head: bytes, reader: _Reader) -> Iterator[tuple[str, pl.DataFrame]]:
    envelope_notes: list[str] = []
    split = _Splitter(path, envelope_notes)
    nonblank = False
    carry, carry_line = b"", 1
    for block, line0 in line_blocks(path):
        raw, line = (carry + block, carry_line) if carry else (block, line0)
        nonblank = nonblank or _NON_SPACE.search(raw) is not None
        events, keep = split.feed(raw, line, final=False)
        for ev in events:
            yield from reader.event(raw, line, ev)
        carry, carry_line = raw[keep:], line + raw.count(b"\n", 0, keep)
    if carry:
        events, _ = split.feed(carry, carry_line, final=True)
        for ev in events:
            yield from reader.event(carry, carry_line, ev)
    yield from reader.end_section()
    if not nonblank:
        raise MalformedInput("empty file", path=path)
    if not split.sections:
        _raise_if_damaged_header(head, path)
        raise _no_header(path)
    if split.skipped_before_header:
        envelope_notes.append(
            f"{path}: skipped {split.skipped_before_header} line(s) before the nvprof CSV header"
        )
    for note in envelope_notes:
        reader.notes.add(note)
    reader.notes.emit()
    if reader.out.devices:
        yield "devices", _devices_frame(reader.out.devices)
