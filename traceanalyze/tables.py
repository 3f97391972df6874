"""`Tables`: one polars DataFrame per schema table; missing tables are empty, never None."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, replace

import polars as pl

from . import schema


@dataclass(frozen=True)
class Tables:
    """The normalized content of one source (or several, concatenated).

    Build with `Tables.build(kernels=df, …)`: every frame is conformed to the schema (columns
    ordered, missing ones null, dtypes cast) and absent tables are empty with the full schema.
    """

    sources: pl.DataFrame
    devices: pl.DataFrame
    kernels: pl.DataFrame
    memcpy: pl.DataFrame
    graph_replays: pl.DataFrame
    api_calls: pl.DataFrame
    ops: pl.DataFrame
    markers: pl.DataFrame
    kernel_metrics: pl.DataFrame
    gpu_samples: pl.DataFrame
    gpu_metrics: pl.DataFrame
    iterations: pl.DataFrame
    runs: pl.DataFrame

    @classmethod
    def build(cls, **frames: pl.DataFrame) -> Tables:
        unknown = set(frames) - set(schema.TABLE_NAMES)
        if unknown:
            raise ValueError(f"unknown tables: {sorted(unknown)}")
        out = {}
        for name in schema.TABLE_NAMES:
            df = frames.get(name)
            out[name] = schema.empty(name) if df is None else schema.conform(name, df)
        return cls(**out)

    @classmethod
    def empty(cls) -> Tables:
        return cls.build()

    def __getitem__(self, name: str) -> pl.DataFrame:
        if name not in schema.TABLES:
            raise KeyError(name)
        frame: pl.DataFrame = getattr(self, name)
        return frame

    def items(self) -> Iterator[tuple[str, pl.DataFrame]]:
        for f in fields(self):
            yield f.name, getattr(self, f.name)

    def with_source_id(self, source_id: str) -> Tables:
        """Every table's `source_id` set to one value (an empty table, conformed, has the column
        already: no query)."""
        lit = pl.lit(source_id, dtype=pl.String).alias("source_id")
        return replace(
            self,
            **{
                name: df if df.height == 0 and "source_id" in df.columns else df.with_columns(lit)
                for name, df in self.items()
            },
        )

    def counts(self) -> dict[str, int]:
        return {name: df.height for name, df in self.items()}

    @classmethod
    def concat(cls, parts: list[Tables]) -> Tables:
        if not parts:
            return cls.empty()
        return cls(
            **{
                name: pl.concat([p[name] for p in parts], how="vertical")
                for name in schema.TABLE_NAMES
            }
        )

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self.counts().items() if v)
        return f"Tables({inner or 'empty'})"
