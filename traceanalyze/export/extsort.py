"""An external sort for the exports: rows dealt into buckets by ranges of one integer key, each
bucket then sorted in memory, in order.

Polars' sort (streaming engine included) holds every row it sorts: 6 M rows of two integers
peak at ~550 MB. Here the rows come a batch at a time (`lf.collect_batches`), a sample of the
first key (every n-th row) sets the bucket bounds, each batch's rows go to the spill file (Arrow
IPC) of their bucket, and each bucket is read back, sorted by every key and given in chunks. All
rows with one value of the first key go to one bucket, so the order is the total one. Memory:
a batch, one bucket (~`bucket_rows` rows; more only where one value of the first key holds more
rows than that) and the sample.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc

BUCKET_ROWS = 1 << 20
BATCH_ROWS = 1 << 16
_SAMPLE = 4096


def sorted_batches(
    lf: pl.LazyFrame,
    by: Sequence[str],
    workdir: str,
    *,
    descending: Sequence[bool] | None = None,
    bucket_by: str | None = None,
    bucket_rows: int | None = None,
    batch_rows: int | None = None,
) -> Iterator[pl.DataFrame]:
    """`lf`'s rows sorted by `by` (the first an integer column, ascending), `batch_rows` or so
    at a time (default `BATCH_ROWS`), in buckets of ~`bucket_rows` rows (default
    `BUCKET_ROWS`). `bucket_by` (an integer column; default `by[0]`): the buckets are ranges of
    it, ascending, each sorted by `by` (so the rows of one value of `bucket_by`, in the order of
    `by`, come in the order of that value)."""
    desc = list(descending) if descending is not None else [False] * len(by)
    key = bucket_by or by[0]
    bucket_rows = bucket_rows or BUCKET_ROWS
    batch_rows = batch_rows or BATCH_ROWS
    n = int(lf.select(pl.len()).collect().item())
    if n == 0:
        return
    if n <= bucket_rows:
        yield from lf.collect().sort(by, descending=desc).iter_slices(batch_rows)
        return
    step = max(1, n // _SAMPLE)
    sample = lf.select(pl.col(key).cast(pl.Int64)).gather_every(step).collect()[:, 0]
    k = -(-n // bucket_rows)
    qs = np.quantile(sample.sort().to_numpy(), np.linspace(0, 1, k + 1)[1:-1], method="lower")
    bounds = np.unique(qs)
    paths = [os.path.join(workdir, f"sort-bucket{i}.arrow") for i in range(bounds.size + 1)]
    _deal(lf, key, bounds, paths, batch_rows)
    for p in paths:
        if not os.path.exists(p):
            continue
        with pa.memory_map(p) as src:
            table = ipc.open_stream(src).read_all()
        os.remove(p)
        part = pl.from_arrow(table)
        del table
        assert isinstance(part, pl.DataFrame)
        yield from part.sort(by, descending=desc).iter_slices(batch_rows)


def _deal(
    lf: pl.LazyFrame,
    key: str,
    bounds: np.ndarray,
    paths: list[str],
    batch_rows: int,
) -> None:
    """Each batch's rows appended to the spill file of their bucket."""
    writers: dict[int, ipc.RecordBatchStreamWriter] = {}
    try:
        for batch in lf.collect_batches(chunk_size=batch_rows):
            v = batch[key].cast(pl.Int64).to_numpy()
            b = np.searchsorted(bounds, v, side="right")
            parts = batch.with_columns(pl.Series("_bucket", b)).partition_by(
                "_bucket", as_dict=True, maintain_order=True, include_key=False
            )
            for (i,), sub in parts.items():
                t = sub.to_arrow()
                w = writers.get(int(i))
                if w is None:
                    w = writers[int(i)] = ipc.new_stream(paths[int(i)], t.schema)
                w.write_table(t)
    finally:
        for w in writers.values():
            w.close()
