"""traceanalyze: GPU profiler outputs of deep-learning training, normalized and analyzed.

import traceanalyze as ta
t = ta.read("trace.pt.trace.json.gz")          # Tables: one polars DataFrame per table
ta.ingest(["a.csv", "b.sqlite"], "store/")      # into a hive-partitioned Parquet store
ta.Store("store/").scan("kernels")               # polars LazyFrame over every source
ds = ta.open(store="store/")                     # Dataset: filters, lazy tables, analyses
ta.plot.timeline(ds.timeline(), "t.png")          # figures from analysis results
"""

from __future__ import annotations

from .dataset import Dataset, open
from .errors import (
    CollectError,
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
from .readers import READERS, detect_format, read
from .store import IngestResult, Store, ingest
from .tables import Tables

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
    "TraceanalyzeError",
    "UnknownFormat",
    "MalformedInput",
    "UnknownUnit",
    "MissingColumn",
    "UnsupportedOption",
    "StoreError",
    "ToolNotFound",
    "CollectError",
    "NotAnswerable",
    "UsageProblem",
    "__version__",
]


def __getattr__(name: str) -> object:
    # `ta.plot` on first use: matplotlib loads only for those who draw.
    if name == "plot":
        import importlib

        return importlib.import_module(".plot", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
