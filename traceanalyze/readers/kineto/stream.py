"""Kineto JSON with bounded memory: the spill-and-sort behind `kineto_json.stream_kineto_json`
(what `ingest` uses).

`read_kineto_json` holds every table whole: it cannot sort a table by start time, nor turn
relative times into epoch ns, before the last event is read (`baseTimeNanoseconds` is often the
last key of the file). Here the same steps run over spill files in `workdir`, so memory is bounded
by a batch, a chunk and a bucket, not by the file:

1. `Spiller.add`: as the file is decoded (`kineto_json._stream`), each batch's frames, times
   still as µs text, are appended to one Arrow IPC spill per table; only a thinned sample of
   start times (to plan buckets) stays in memory, besides the range events (`kernel_metrics`) and
   the header keys that `kineto_json` keeps;
2. `Spiller.tables`, per table, with the base time now known: read the spill back in file order,
   compute the ns times and check them exactly as `read_kineto_json` does (same first bad event,
   same count, same warning), apply the per-row finishing step, and deal the rows into K buckets
   of start-time ranges (bounds from the sample's quantiles; all rows of one start time land in
   one bucket, decided on the exact ns);
3. per bucket, in order: read it, sort it stably (nulls last) and yield it in chunks; a bucket
   keeps file order within a start time, so this is the whole-table stable sort. `kernel_id` is
   the global position in that order.

The `ProfilerStep#` rows of ops and markers are kept aside (few) for `iterations`. Row for row,
table by table, the chunks concatenate to `read_kineto_json`'s tables (tests/test_kineto_stream.py).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from ...background import BackgroundWrites
from ...errors import MalformedInput
from ..common.core import PathLike, warn
from .frames import _FINISH, GRAPH_TABLES, _ns_int, _us_to_ns, flag_graph, graph_correlations
from .structs import _STEP

if TYPE_CHECKING:  # numpy and pyarrow load on the first spill: `read_kineto_json` needs neither
    import numpy as np
    import pyarrow as pa

# Bytes (Arrow size) of one table sorted in memory at a time, and of a chunk read back from a
# spill or yielded to the sink. In rows per table from its spill's bytes per row: a kernels row
# (long C++ names) is ~400 bytes, an ops row ~100.
BUCKET_BYTES = 16 << 20
CHUNK_BYTES = 4 << 20
# files open while dealing; past 512 × BUCKET_BYTES (8 GB of one table) buckets grow instead
_MAX_BUCKETS = 512
_SAMPLE_CAP = 1 << 17  # start-time sample per table, thinned by halves past twice this
_INT64_MAX = 2**63 - 1


@functools.cache
def _arrow() -> tuple[Any, Any, Any, Any]:
    """pyarrow, its IPC module, the spill memory pool and write options (imported on first use).

    Uncompressed: lz4 or zstd frames cost ~45 MB of RSS in compression buffers for a 250 MB
    trace. Spill I/O buffers come from malloc, which gives large blocks back to the system when
    freed; the default pool (mimalloc) kept a whole spill's worth of read buffers in the RSS."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    return pa, ipc, pa.system_memory_pool(), ipc.IpcWriteOptions()


_TABLES = ("kernels", "ops", "markers", "memcpy", "api_calls")  # read_kineto_json's order
_IN_FLIGHT = 2  # spill writes queued on the writer thread, at most


class _Spill:
    """One Arrow IPC stream file written chunk by chunk, read back in the same order."""

    def __init__(self, path: Path, *, writes: BackgroundWrites, views: bool = False) -> None:
        self.path = path
        self._writes = writes
        # Arrow string views (polars' layout: no copy of the strings to write them) for frames
        # whose strings are their own, compact; not for gathered parts of a frame (buckets),
        # whose views would drag the whole frame's string buffers into every file
        self._compat = pl.CompatLevel.newest() if views else None
        self.rows = self.nbytes = 0
        self.one_time = False  # a bucket whose rows all share one start time (see `_bounds`)
        self._writer: Any = None
        self._file: Any = None
        self._schema: Any = None
        # the files read back, in order: this one once written, then any adopted (`adopt`)
        self.files: list[Path] = []

    def write(self, df: pl.DataFrame) -> None:
        if df.height == 0:
            return
        data = df.to_arrow(compat_level=self._compat)
        if self._writer is None:
            pa, ipc, pool, options = _arrow()
            self._schema = data.schema
            self._file = pa.OSFile(str(self.path), "wb", memory_pool=pool)
            self._writer = ipc.new_stream(self._file, data.schema, options=options)
            self.files.insert(0, self.path)
        elif data.schema != self._schema:
            data = data.cast(self._schema)
        self._writes.submit(self._writer.write_table, data)
        self.rows += df.height
        self.nbytes += data.nbytes

    def adopt(self, path: Path, rows: int, nbytes: int) -> None:
        """Read `path` (a spill of the same table written by the helper of a split read,
        `kineto.split`) after this one's rows, as if they had been written here."""
        self.files.append(path)
        self.rows += rows
        self.nbytes += nbytes

    def rows_for(self, nbytes: int) -> int:
        """How many rows of this spill take about `nbytes` (at least 1024)."""
        return max(1024, nbytes * self.rows // max(self.nbytes, 1))

    def close(self) -> None:
        if self._writer is not None:
            self._writes.drain()  # this file's writes (and any other's) done
            self._writer.close()
            self._file.close()
            self._writer = None

    def chunks(self, rows: int | None = None) -> Iterator[pl.DataFrame]:
        """The spilled rows in file order, in frames of about `rows` rows (CHUNK_BYTES by
        default); the file is removed once read."""
        self.close()
        rows = self.rows_for(CHUNK_BYTES) if rows is None else rows
        if self.rows == 0:
            return
        pa, ipc, pool, _ = _arrow()
        for path in self.files:
            group: list[Any] = []
            n = 0
            # read, not memory-mapped: mapped pages count in the RSS until the file is closed
            src = pa.OSFile(str(path), memory_pool=pool)
            with src, ipc.open_stream(src, memory_pool=pool) as reader:
                if self._schema is None:
                    self._schema = reader.schema
                for batch in reader:
                    group.append(batch)
                    n += batch.num_rows
                    if n >= rows:
                        yield _frame(group, self._schema)
                        group, n = [], 0
                if group:
                    yield _frame(group, self._schema)
            path.unlink()

    def read(self) -> pl.DataFrame:
        frames = list(self.chunks(_INT64_MAX))
        return pl.concat(frames) if frames else pl.DataFrame()

    def discard(self) -> None:
        if self._writer is not None:
            self._writes.drain(check=False)
            with contextlib.suppress(Exception):  # the file is being thrown away
                self._writer.close()
            self._file.close()
            self._writer = None
        for path in {self.path, *self.files}:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _frame(batches: list[pa.RecordBatch], schema: pa.Schema) -> pl.DataFrame:
    table = _arrow()[0].Table.from_batches(batches)
    if table.schema != schema:  # an adopted spill whose first batch typed a column otherwise
        table = table.cast(schema)
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df


class Spiller:
    """Pass 1 and 2 over one file's frames: `add` (a batch's frames of one table, times as µs
    text) appends to the table's spill and samples `ts`; `tables` sorts every table once the
    base time is known; `discard` removes what is left."""

    def __init__(self, workdir: Path, tag: str = "") -> None:
        self.workdir = workdir
        # spill writes on one thread while the reader decodes the next batch
        self.writes = BackgroundWrites("traceanalyze-spill", _IN_FLIGHT)
        self.spills = {
            t: _Spill(workdir / f"{tag}{t}.spill.arrow", writes=self.writes, views=True)
            for t in _TABLES
        }
        self._sample: dict[str, list[np.ndarray[Any, Any]]] = {t: [] for t in _TABLES}
        self._sampled: dict[str, int] = dict.fromkeys(_TABLES, 0)
        self._stride: dict[str, int] = dict.fromkeys(_TABLES, 1)
        # ProfilerStep# rows of ops and markers, for `_iterations`; None: the table is empty
        self.steps: dict[str, pl.DataFrame | None] = {"ops": None, "markers": None}
        # correlation ids of the graph launch calls, gathered as api_calls are spilled: the
        # kernels and copies they ran are sorted and yielded before api_calls is read back
        self.graph_calls: set[int] = set()

    def add(self, table: str, df: pl.DataFrame) -> None:
        import numpy as np

        if table == "api_calls":
            self.graph_calls.update(graph_correlations(df).to_list())
        spill, stride = self.spills[table], self._stride[table]
        # 1 row in `stride`, drawn at random in random order (seeded: the same file gives the
        # same buckets), so that neither this pick nor the thinning by halves below (every other
        # sample) aliases with a trace that repeats a few events periodically. A numpy draw and
        # a gather: one polars query per batch (the ns), not two.
        n = min(-(-df.height // stride), df.height)
        pick = np.random.default_rng(spill.rows).choice(df.height, size=n, replace=False)
        # exact ns (relative to the base), so that a start time shared by many rows is a bound
        # itself: `_bounds` gives it a bucket of its own; the pick and the ns in one query
        ts = df.select(_ns_int(_us_to_ns(pl.col("ts").gather(pick))))["ts"]
        spill.write(df)
        keys = (ts.drop_nulls() if ts.null_count() else ts).to_numpy()
        self._sample[table].append(keys)
        self._sampled[table] += len(keys)
        if self._sampled[table] > 2 * _SAMPLE_CAP:
            thin = np.concatenate(self._sample[table])[::2]
            self._sample[table], self._sampled[table] = [thin], len(thin)
            self._stride[table] = stride * 2

    def close(self) -> None:
        """Every spill written out (the helper of a split read hands them over then)."""
        for spill in self.spills.values():
            spill.close()

    def adopt(
        self,
        rows: dict[str, int],
        nbytes: dict[str, int],
        samples: dict[str, list[int]],
        tag: str,
        graphs: list[int] | None = None,
    ) -> None:
        """Append the spills and samples of a split read's helper (`kineto.split`), written
        under `tag` in this workdir, to this pass 1: its rows come after every row added here."""
        import numpy as np

        self.graph_calls.update(graphs or ())
        for t, spill in self.spills.items():
            if rows.get(t):
                spill.adopt(self.workdir / f"{tag}{t}.spill.arrow", rows[t], nbytes[t])
                self._sample[t].append(np.asarray(samples.get(t, []), dtype=np.int64))

    def sample(self, table: str) -> np.ndarray[Any, Any]:
        """The sampled start times of `table`, in ns relative to the base, sorted."""
        import numpy as np

        parts = self._sample.pop(table, [])
        return np.sort(np.concatenate(parts)) if parts else np.empty(0)

    def tables(self, base_ns: int, path: PathLike) -> Iterator[tuple[str, pl.DataFrame]]:
        """Every table as `read_kineto_json` has it, sorted, in chunks; in its order of tables,
        so that the first bad time raises the same error. Fills `steps`."""
        self.close()
        launches = pl.Series("correlation_id", sorted(self.graph_calls), dtype=pl.Int64)
        for name in _TABLES:
            spill = self.spills[name]
            if spill.rows == 0:
                continue
            bounds = _bounds(self.sample(name), base_ns, spill)
            buckets, steps = _deal(name, spill, base_ns, bounds, path, self.workdir, self.writes)
            if name in self.steps:
                self.steps[name] = steps
            for table, part in _sorted(name, buckets, spill.rows_for(CHUNK_BYTES)):
                yield table, flag_graph(part, launches) if table in GRAPH_TABLES else part

    def discard(self) -> None:
        for spill in self.spills.values():
            spill.discard()
        self.writes.shutdown()


def timed(df: pl.DataFrame, base_ns: int) -> pl.DataFrame:
    """Add start/duration/end ns from the `ts`/`dur` text; relative-to-base traces become epoch
    ns here (time_origin_epoch_ns = 0). Shared with `read_kineto_json`."""
    # Each text parsed once, then plain Series arithmetic: one `with_columns` giving all three
    # parsed ts and dur twice (no common-subexpression elimination in eager queries: 6.4 vs
    # 2.8 ms on 45,000 rows), and a lazy query, which has it, peaked ~4 MB higher.
    start, dur = df.select(_us_to_ns("ts") + base_ns, _us_to_ns("dur")).get_columns()
    # Int128 ns -> int64, null where it does not fit (as `frames._ns_int`)
    return df.with_columns(
        start.cast(pl.Int64, strict=False).alias("start_ns"),
        dur.cast(pl.Int64, strict=False).alias("duration_ns"),
        (start + dur).cast(pl.Int64, strict=False).alias("end_ns"),
    )


def _bounds(sample: np.ndarray[Any, Any], base_ns: int, spill: _Spill) -> np.ndarray[Any, Any]:
    """Bucket bounds, epoch ns, ascending: the sample's quantiles for buckets of ~BUCKET_BYTES.
    They only balance the buckets; which bucket a row goes to is decided on its exact start."""
    import numpy as np

    k = min(math.ceil(spill.rows / spill.rows_for(BUCKET_BYTES)), _MAX_BUCKETS)
    if k <= 1 or len(sample) == 0:
        return np.empty(0, dtype=np.int64)
    qs = sample[[len(sample) * i // k for i in range(1, k)]]
    ns = [min(max(int(q) + base_ns, -(2**63)), _INT64_MAX) for q in qs]
    # A start time that fills more than a bucket (it is several quantiles) gets a bucket of its
    # own, [v, v + 1): its rows are already in order (file order among equal starts), so that
    # bucket is streamed, never held, however many rows share the one time.
    heavy = {v for v in ns if ns.count(v) > 1 and v < _INT64_MAX - 1}
    return np.unique(np.array(ns + [v + 1 for v in heavy], dtype=np.int64))


class _TimeCheck:
    """`kineto.frames._check_times` over a table seen chunk by chunk in file order: the same
    first bad event, count and warning, raised once the whole table is seen."""

    def __init__(self, table: str, path: PathLike) -> None:
        self.table, self.path = table, path
        self.first: dict[str, Any] | None = None
        self.bad = self.no_dur = 0

    def add(self, df: pl.DataFrame) -> None:
        dur = df["dur"]
        # As in `_check_times`, null counts (free) first: with no null start (then no null ts
        # either) and end null exactly where dur is, every time converted and no query runs.
        if df["start_ns"].null_count() or df["end_ns"].null_count() != dur.null_count():
            bad = df.filter(
                pl.col("ts").is_null()
                | pl.col("start_ns").is_null()
                | (pl.col("dur").is_not_null() & pl.col("end_ns").is_null())
            )
            if bad.height and self.first is None:
                self.first = bad.row(0, named=True)
            self.bad += bad.height
        if dur.null_count() and "ph" in df.columns:  # instants have no duration by definition
            self.no_dur += df.filter(pl.col("ph") == "X")["dur"].null_count()
        else:
            self.no_dur += dur.null_count()

    def done(self) -> None:
        if self.first is not None:
            e = self.first
            if e["ts"] is None:
                why = "has no ts"
            elif e["start_ns"] is None:
                why = f"has ts {e['ts']!r}, not a time in µs that fits int64 ns"
            else:
                why = f"has dur {e['dur']!r}, not a duration in µs that fits int64 ns"
            more = f" ({self.bad} such events)" if self.bad > 1 else ""
            raise MalformedInput(
                f"event {e['name']!r} {why}{more}", path=self.path, table=self.table
            )
        if self.no_dur:
            warn(
                f"{self.path}: {self.table}: {self.no_dur} complete event(s) without dur: "
                "end and duration null"
            )


def _deal(
    name: str,
    spill: _Spill,
    base_ns: int,
    bounds: np.ndarray[Any, Any],
    path: PathLike,
    workdir: Path,
    writes: BackgroundWrites,
) -> tuple[list[_Spill | pl.DataFrame], pl.DataFrame | None]:
    """Pass 2 of one table: times, checks and per-row finishing, in file order; rows dealt into
    buckets by start time (one bucket: kept in memory, it is at most ~BUCKET_BYTES). Also the
    table's `ProfilerStep#` rows, in file order (`_iterations` sorts them stably by start, which
    gives the same order as from the sorted table)."""
    import numpy as np

    check = _TimeCheck(name, path)
    finish = None if name == "kernels" else _FINISH.get(name)  # kernel_id: after the sort
    buckets: list[_Spill] = [
        _Spill(workdir / f"{name}.bucket{i}.arrow", writes=writes) for i in range(len(bounds) + 1)
    ]
    whole: list[pl.DataFrame] = []
    steps: list[pl.DataFrame] = []
    try:
        for raw in spill.chunks():
            df = timed(raw, base_ns)
            del raw
            check.add(df)
            df = df.drop("ts", "dur")
            if finish is not None:
                df = finish(df)
            if name in ("ops", "markers"):
                steps.append(df.filter(pl.col("name").str.starts_with(_STEP)))
            if not len(bounds):
                whole.append(df)
                continue
            start = df["start_ns"].fill_null(_INT64_MAX).to_numpy()  # nulls sort last
            b = pl.Series("_bucket", np.searchsorted(bounds, start, side="right"))
            for (i,), sub in (
                df.with_columns(b)
                .partition_by("_bucket", as_dict=True, maintain_order=True, include_key=False)
                .items()
            ):
                buckets[int(i)].write(sub)
        check.done()
    except BaseException:
        for s in buckets:
            s.discard()
        raise
    step_rows = pl.concat(steps) if steps else None
    if not len(bounds):
        return [pl.concat(whole)], step_rows
    for i, s in enumerate(buckets):
        s.close()
        # [bounds[i-1], bounds[i]) holds one start time: no sort needed
        s.one_time = 0 < i < len(bounds) and int(bounds[i]) == int(bounds[i - 1]) + 1
    return list(buckets), step_rows


def _sorted(
    name: str, buckets: list[_Spill | pl.DataFrame], chunk: int
) -> Iterator[tuple[str, pl.DataFrame]]:
    """Each bucket sorted by start (stable, nulls last), in bucket order, in `chunk` rows."""
    offset = 0
    try:
        for i, bucket in enumerate(buckets):
            buckets[i] = pl.DataFrame()  # drop the reference: one bucket in memory at a time
            if isinstance(bucket, _Spill) and bucket.one_time:
                for part in bucket.chunks(chunk):  # in order already: streamed, not held
                    if name == "kernels":
                        part = _FINISH["kernels"](part).with_columns(pl.col("kernel_id") + offset)
                    offset += part.height
                    yield name, part
                continue
            df = bucket.read() if isinstance(bucket, _Spill) else bucket
            del bucket
            if df.height == 0:
                continue
            # the permutation of the whole-frame stable sort (file order within a start)
            order = df.select(
                pl.int_range(pl.len(), dtype=pl.UInt32).sort_by(
                    "start_ns", maintain_order=True, nulls_last=True
                )
            ).to_series()
            for lo in range(0, df.height, chunk):
                # a gather per chunk, not slices of one sorted copy: half the memory, and a
                # slice the sink keeps would hold the whole bucket alive
                part = df[order.slice(lo, chunk)]
                if name == "kernels":
                    part = _FINISH["kernels"](part).with_columns(pl.col("kernel_id") + offset)
                offset += part.height
                yield name, part
    finally:
        for b in buckets:
            if isinstance(b, _Spill):
                b.discard()
