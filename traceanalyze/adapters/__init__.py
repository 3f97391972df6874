"""The one layer between `Dataset` and the analyses: each function takes a dataset view, chooses
the frames an analysis needs (`ds.scan("kernels")`, `ds.scan_all("gpu_samples")` for telemetry
another source of the run recorded), calls the pure functions of `traceanalyze.analyses`, names
sources by file and returns a result of `traceanalyze.results` or a frame. `Dataset`'s methods
call these (or, for the simplest, the analysis directly); the CLI calls the `Dataset`.

They take `DatasetView`, the part of `Dataset` they use, not `Dataset` itself: this package
never imports `traceanalyze.dataset`, so there is no import cycle, type-only ones included
(tests/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import polars as pl

if TYPE_CHECKING:
    from ..results import Stragglers


class DatasetView(Protocol):
    """What the adapters use of a `Dataset` (which satisfies it)."""

    @property
    def source_filter(self) -> tuple[str, ...]: ...
    @property
    def device_filter(self) -> tuple[int, ...]: ...
    @property
    def start_ns(self) -> int | None: ...
    @property
    def end_ns(self) -> int | None: ...
    @property
    def origin(self) -> str: ...
    @property
    def is_store(self) -> bool: ...

    def scan(self, table: str) -> pl.LazyFrame: ...
    def scan_all(self, table: str) -> pl.LazyFrame: ...
    def source_ids(self) -> list[str]: ...
    def all_source_ids(self) -> list[str]: ...
    def names(self) -> dict[str, str]: ...
    def stragglers(self, *, job: str | None = None, align: bool | None = None) -> Stragglers: ...
    def one_source(self, what: str) -> str: ...
    def where(
        self,
        source: str | Sequence[str] | None = None,
        device: int | Sequence[int] | None = None,
        start: int | None = None,
        end: int | None = None,
    ) -> DatasetView: ...


__all__ = ["DatasetView"]
