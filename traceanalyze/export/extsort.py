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
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc

BUCKET_ROWS = 1 << 19
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
    key = bucket_by or by[0]
    batch_rows = batch_rows or BATCH_ROWS
    n = int(lf.select(pl.len()).collect().item())
    if n == 0:
        return
    if n <= (bucket_rows or BUCKET_ROWS):
        yield from lf.collect().sort(by, descending=descending or False).iter_slices(batch_rows)
        return
    step = max(1, n // _SAMPLE)
    sample = lf.select(pl.col(key).cast(pl.Int64)).gather_every(step).collect()[:, 0]
    buckets = Buckets(sample.to_numpy(), n, key, workdir, bucket_rows)
    for batch in lf.collect_batches(chunk_size=batch_rows):
        buckets.add(batch)
    yield from buckets.sorted(by, descending, batch_rows)


class Buckets:
    """Rows dealt into spill files (Arrow IPC streams) by ranges of the integer column `key`,
    the ranges cut at quantiles of `sample` (values of `key`) for ~`bucket_rows` of the `n`
    rows each; then read back one at a time, each sorted."""

    def __init__(
        self, sample: np.ndarray, n: int, key: str, workdir: str, bucket_rows: int | None = None
    ) -> None:
        k = -(-n // (bucket_rows or BUCKET_ROWS))
        cuts = np.linspace(0, 1, k + 1)[1:-1]
        qs = np.quantile(np.sort(sample), cuts, method="lower") if sample.size else cuts[:0]
        self.bounds = np.unique(qs.astype(np.int64))
        self.key = key
        self.paths = [
            os.path.join(workdir, f"sort-bucket{i}.arrow") for i in range(self.bounds.size + 1)
        ]
        self.writers: dict[int, ipc.RecordBatchStreamWriter] = {}
        self.schema: pa.Schema | None = None

    def add(self, batch: pl.DataFrame) -> None:
        """`batch`'s rows appended to the spill file of their bucket (every batch with the
        schema of the first)."""
        v = batch[self.key].cast(pl.Int64).to_numpy()
        b = np.searchsorted(self.bounds, v, side="right")
        parts = batch.with_columns(pl.Series("_bucket", b)).partition_by(
            "_bucket", as_dict=True, maintain_order=True, include_key=False
        )
        for (i,), sub in parts.items():
            t = sub.to_arrow()
            if self.schema is None:
                self.schema = t.schema
            elif t.schema != self.schema:
                t = t.cast(self.schema)
            w = self.writers.get(int(i))
            if w is None:
                w = self.writers[int(i)] = ipc.new_stream(self.paths[int(i)], self.schema)
            w.write_table(t)

    def sorted(
        self, by: Sequence[str], descending: Sequence[bool] | None, batch_rows: int
    ) -> Iterator[pl.DataFrame]:
        """Each bucket in turn, sorted by `by`, `batch_rows` at a time; the spill files go. The
        next bucket is read and sorted in a thread while the caller works on this one (polars
        and Arrow release the GIL): two buckets in memory at most."""
        for w in self.writers.values():
            w.close()
        todo = [p for i, p in enumerate(self.paths) if i in self.writers]
        with ThreadPoolExecutor(1) as pool:
            ahead = [pool.submit(_read_sorted, p, by, descending) for p in todo[:1]]
            for k in range(len(todo)):
                part = ahead.pop().result()
                if k + 1 < len(todo):
                    ahead.append(pool.submit(_read_sorted, todo[k + 1], by, descending))
                yield from part.iter_slices(batch_rows)
                del part


def _read_sorted(path: str, by: Sequence[str], descending: Sequence[bool] | None) -> pl.DataFrame:
    """The rows of the spill file `path`, sorted by `by` (the file goes)."""
    with pa.memory_map(path) as src:
        table = ipc.open_stream(src).read_all()
    os.remove(path)
    part = pl.from_arrow(table)
    del table
    assert isinstance(part, pl.DataFrame)
    return part.sort(by, descending=descending or False)
