"""traceanalyze: GPU profiler outputs of deep-learning training, normalized and analyzed.

import traceanalyze as ta
t = ta.read("trace.pt.trace.json.gz")          # Tables: one polars DataFrame per table
ta.ingest(["a.csv", "b.sqlite"], "store/")      # into a hive-partitioned Parquet store
ta.Store("store/").scan("kernels")               # polars LazyFrame over every source
ds = ta.open(store="store/")                     # Dataset: filters, lazy tables, analyses
ta.plot.timeline(ds.timeline(), "t.png")          # figures from analysis results
"""

from __future__ import annotations

import importlib

from .errors import (
    CollectError,
    InputTooLarge,
    MalformedInput,
    MissingColumn,
    NotAnswerable,
    StoreError,
    ToolNotFound,
    TraceanalyzeError,
    UnknownFormat,
    UnknownUnit,
    UnsupportedOption,
    UsageProblem,
)

# Not `from typing import TYPE_CHECKING`: `typing` (with re, contextlib, collections) is ~9 ms of
# a bare `import traceanalyze` from an installed copy, and the name is all this module needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .dataset import Dataset, open
    from .parallel import ingest_dask, ingest_parallel
    from .readers import READERS, detect_format, read
    from .readers.common.limits import InputLimits, input_limits
    from .store import IngestResult, Store, ingest
    from .tables import Tables

# Public names loaded on first use (PEP 562), so `import traceanalyze` and `traceanalyze --help`
# do not pay for polars (~0.25 s, ~50 MB) before anything needs a frame.
_LAZY: dict[str, str] = {
    "open": ".dataset",
    "Dataset": ".dataset",
    "read": ".readers",
    "detect_format": ".readers",
    "READERS": ".readers",
    "ingest": ".store",
    "Store": ".store",
    "IngestResult": ".store",
    "Tables": ".tables",
    "InputLimits": ".readers.common.limits",
    "input_limits": ".readers.common.limits",
    "ingest_parallel": ".parallel",
    "ingest_dask": ".parallel",
}


def __getattr__(name: str) -> Any:
    if name == "plot":  # `ta.plot` on first use: matplotlib loads only for those who draw
        return importlib.import_module(".plot", __name__)
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "plot"})


__version__ = "0.1.0"

__all__ = [
    "open",
    "Dataset",
    "read",
    "ingest",
    "detect_format",
    "Store",
    "Tables",
    "IngestResult",
    "READERS",
    "InputLimits",
    "input_limits",
    "ingest_parallel",
    "ingest_dask",
    "TraceanalyzeError",
    "UnknownFormat",
    "MalformedInput",
    "UnknownUnit",
    "MissingColumn",
    "UnsupportedOption",
    "InputTooLarge",
    "StoreError",
    "ToolNotFound",
    "CollectError",
    "NotAnswerable",
    "UsageProblem",
    "__version__",
]
