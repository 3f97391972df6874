"""What the streaming read of a telemetry log (`stream`, `dump_stream`) shares: the functions
`smi_csv` hands over (`SmiLog`) and the state the blocks of one log share (`_State`). Apart from
`stream` so that `dump_stream` can use them without importing `stream`, which imports it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ...tables import Tables
from ..common.core import PathLike, check_telemetry
from ..common.stream import Notes, Spill

_Chunks = Iterator[tuple[str, pl.DataFrame]]


@dataclass(frozen=True)
class SmiLog:
    """What this module uses of `smi_csv` (which imports this module, so it hands them over):
    the variant of a log's head, the nvidia-smi header and rows, the sampler's, and the
    whole-file read of this log (for errors and logs without rows)."""

    variant: Callable[[str], str | None]
    header: Callable[..., tuple[list[str], dict[str, str | None], int]]
    rows: Callable[..., Tables]
    check_sampler_header: Callable[[bytes, PathLike], None]
    sampler_rows: Callable[[bytes, PathLike, int], pl.DataFrame]
    sampler_devices: Callable[[pl.DataFrame], pl.DataFrame]
    sampler_sources: Callable[[bytes], pl.DataFrame]
    whole: Callable[[], Tables]


class _State:
    """What the blocks of one log share: notes, devices, rows so far."""

    def __init__(self, path: PathLike, workdir: Path) -> None:
        self.path = path
        self.notes = Notes()
        self.devices: pl.DataFrame | None = None
        self.rows = 0
        self.spill = Spill(workdir)

    def metrics(self, df: pl.DataFrame | None, order: Sequence[str]) -> None:
        """`gpu_metrics` of a block: the whole-file read has one field's rows after another
        (`order`, the log's columns), so each field's rows are spilled until the end."""
        if df is None or not df.height:
            return
        self.spill.order = self.spill.order or {k: i for i, k in enumerate(order)}
        parts = df.partition_by("metric_name", maintain_order=True, as_dict=True)
        for (name, *_), part in parts.items():
            self.spill.add(str(name), part)

    def add_devices(self, df: pl.DataFrame | None) -> None:
        if df is None or not df.height:
            return
        both = df if self.devices is None else pl.concat([self.devices, df], how="diagonal")
        # The distinct rows in first-seen order, as the whole-file read's `group_by`/`unique`.
        self.devices = both.group_by(both.columns, maintain_order=True).agg()

    def samples(self, df: pl.DataFrame) -> _Chunks:
        self.rows += df.height
        if df.height:
            with self.notes.collect():
                df = check_telemetry(df, path=self.path, reader="smi_csv")
            yield "gpu_samples", df

    def finish(self, sources: pl.DataFrame) -> _Chunks:
        for _, df in self.spill.drain():
            yield "gpu_metrics", df
        self.notes.emit()
        if self.devices is not None:
            yield "devices", self.devices
        yield "sources", sources
