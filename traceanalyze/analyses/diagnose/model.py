"""What every diagnose rule takes and returns: `Inputs` (the frames, collected once), `Skip`
(a rule that cannot run on this input, and why) and small shared helpers. Rules are pure
functions `Inputs -> list[Finding] | Skip` (`traceanalyze.results.Finding`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ...results import Finding


@dataclass(frozen=True)
class Skip:
    """The rule could not run on this input; `reason` says what is missing."""

    reason: str


Outcome = list[Finding] | Skip


@dataclass(frozen=True)
class Inputs:
    """The frames the rules read, already collected (each may be empty, never None but for the
    optional analyses). `path`: the critical path's rows (one per source and iteration);
    `path_events`: its events (scenario "trace"); `host`: host ranges (operators, or NVTX where
    a source has none: `ops.host_ops`); `overlap`: `comm_overlap`'s rows or None when the input
    has no communication; `stragglers`: (ranks frame, causes) when several ranks of a job are
    given; `attribute`: SM clock per kernel (`Dataset.attribute(per="kernel")`) and `samples`
    the telemetry it came from, or None without telemetry;
    `names`: source id -> file; `ranks`: source id -> rank where the input says it."""

    path: pl.DataFrame
    path_events: pl.DataFrame
    kernels: pl.DataFrame
    memcpy: pl.DataFrame
    api_calls: pl.DataFrame
    host: pl.DataFrame
    devices: pl.DataFrame
    iterations: pl.DataFrame
    overlap: pl.DataFrame | None = None
    stragglers: tuple[pl.DataFrame, tuple[str, ...]] | None = None
    attribute: pl.DataFrame | None = None
    samples: pl.DataFrame | None = None
    names: Mapping[str, str] = field(default_factory=dict)
    ranks: Mapping[str, int | None] = field(default_factory=dict)

    @property
    def iteration_count(self) -> int:
        return max(self.path.height, 1)

    @property
    def mean_path_ms(self) -> float:
        """The mean of the iterations' own paths (path_ms − carry_ms): what a saving is a share
        of (the carry, the wait on earlier iterations' GPU work, is not this iteration's)."""
        if not self.path.height:
            return 0.0
        return float((self.path["path_ms"] - self.path["carry_ms"]).mean() or 0.0)

    def per_iteration(self, total_ns: float) -> float:
        """A total over the whole input, in ms per critical-path iteration."""
        return total_ns / 1e6 / self.iteration_count

    def where(self, events: pl.DataFrame | None = None, **more: Any) -> dict[str, Any]:
        """The `where` of a finding: files, sources, ranks, devices and streams of its `events`
        (every source when None), the iterations, and what the rule adds."""
        src = events if events is not None and "source_id" in events.columns else self.path
        ids = sorted(set(src["source_id"].drop_nulls()))
        its = self.path["iteration"].drop_nulls().unique().sort().to_list()
        out: dict[str, Any] = {
            "file": [self.names.get(i, i) for i in ids],
            "source": ids,
            "rank": sorted({self.ranks[i] for i in ids if self.ranks.get(i) is not None}),
            "iterations": its,
        }
        for col, key in (("device_id", "device"), ("stream_id", "stream")):
            if events is not None and col in events.columns:
                out[key] = events[col].drop_nulls().unique().sort().head(16).to_list()
        return out | {k: v for k, v in more.items() if v is not None}


def top_events(df: pl.DataFrame, n: int = 5, name: str = "name") -> list[dict[str, Any]]:
    """The `n` longest events: name, start (ns, the source's clock), duration (ms), source."""
    if df.is_empty():
        return []
    cols = [c for c in ("source_id", "device_id", "stream_id") if c in df.columns]
    top = df.sort("duration_ns", descending=True, nulls_last=True).head(n)
    return [
        {
            "name": r[name],
            "start_ns": r["start_ns"],
            "duration_ms": round((r["duration_ns"] or 0) / 1e6, 6),
            **{c: r[c] for c in cols},
        }
        for r in top.iter_rows(named=True)
    ]


def with_duration(df: pl.DataFrame) -> pl.DataFrame:
    """`duration_ns` filled from start and end where a reader left it empty."""
    return df.with_columns(
        pl.coalesce("duration_ns", pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns")
    )


def family(name: str) -> str:
    """A kernel's family: the name without `void `, template arguments and parameters
    (`void cudnn::bn_fw_tr_1C11_singleread<float, 512>(…)` -> `cudnn::bn_fw_tr_1C11_singleread`)."""
    n = name.removeprefix("void ").strip()
    cut = min((i for i in (n.find("<"), n.find("(")) if i > 0), default=len(n))
    return n[:cut].strip() or name


def family_regex(fam: str) -> str:
    """A what-if regex matching the kernels of `family` (anchored after an optional `void `)."""
    return "^(void )?" + re.escape(fam) + r"($|[<(])"


def ms(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


__all__ = ["Inputs", "Outcome", "Skip", "family", "family_regex", "ms", "top_events"]
