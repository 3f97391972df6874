"""dumpGpuPower text, streaming (`smi_csv.stream_smi_csv` of a `smi.variants.read_dump` log):
the same tables as the whole-file read, holding a block of the log (and bounded state) at a
time.

The whole-file read sorts the sample lines and the energy (framing) lines together by
`timestamp_ns`, stably (samples first on equal stamps, each kind in line order), when the log
has any energy line, and takes `device_id` from the first `Selected device` line anywhere.
Both need the whole log, so the log is read twice (gzip decompressed twice):

1. a scan (`_scan`) finds the first `Selected device` line, the energy rows (held when at most
   `ENERGY_CAP`, else only counted) and whether the samples' stamps never go backwards (on a
   superset of the sample lines: any `Timestamp_ns: <n>, Temp: ` text; sorted there means
   sorted among the samples);
2. the rows, block by block, in one of three ways:
   * no energy line: the samples in line order (the whole read does not sort them either);
   * samples in order and the energy rows held: a merge, each energy row emitted at its place;
   * otherwise (stamps going backwards, or more than `ENERGY_CAP` energy rows): every row is
     spilled to `workdir` in sorted runs of `RUN_ROWS` (Arrow IPC) and the runs merged holding
     about `MERGE_ROWS` rows in all, by the key (timestamp_ns, energy row, line order), which is
     the whole read's stable order.

A block that fails to parse (a stamp past int64, a power like `1e`) lets the whole-file read
say what it says of the log, so errors are its own (memory then is the whole read's, within
`InputLimits`); so does a log with no stamp text at all ("no dumpGpuPower sample lines").
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from ...errors import MalformedInput
from ..common.stream import line_blocks
from .variants import (
    DUMP_DEVICE,
    DUMP_NO_SAMPLES,
    dump_devices,
    dump_energy_frame,
    dump_energy_rows,
    dump_sample_rows,
    dump_sources,
)

if TYPE_CHECKING:
    from .state import SmiLog, _State

_Chunks = Iterator[tuple[str, pl.DataFrame]]

# Energy rows held for the merge (a real log has two); a log with more goes the sort way.
ENERGY_CAP = 50_000
# Rows sorted in memory per spilled run, and held over all runs while they are merged: about
# 70 bytes a row (nine 8-byte columns), so some 9 MB each, twice that while polars sorts. With
# these, the sort way's peak RSS is within ~25 MB of the merge's (0.5-1 GB logs,
# benchmarks/bench_ingest_memory_csv.py --kinds dump dump_backwards); larger runs were faster
# (fewer runs to merge) but cost ~100 MB at 512k rows.
RUN_ROWS = 1 << 17
MERGE_ROWS = 1 << 17
_BATCH_ROWS = 2048  # rows per Arrow batch in a run file (the merge reads runs by batches)

# Any stamp text: a superset of the sample lines' stamps (the sample regex can hold it once).
_STAMP_HINT = re.compile(r"Timestamp_ns: (-?\d+), Temp: ")
_KEY = ["timestamp_ns", "_g", "_i"]
_INT64_MAX = (1 << 63) - 1


@dataclass
class _Scan:
    device: re.Match[str] | None = None
    energy: list[tuple[int, float]] | None = field(default_factory=list)  # None past the cap
    n_energy: int = 0
    stamps: int = 0  # stamp texts seen
    in_order: bool = True
    last: int | None = None
    odd: bool = False  # an energy value the whole read must answer for


def _scan(path: Any) -> _Scan:
    sc = _Scan()
    for block, _ in line_blocks(path):
        text = _text(block)
        if sc.device is None and "Selected device" in text:
            sc.device = DUMP_DEVICE.search(text)
        try:
            rows = _energy_of(text)
        except (ValueError, OverflowError):
            rows, sc.odd = [], True
        if any(t > _INT64_MAX for t, _ in rows):
            sc.odd = True
        sc.n_energy += len(rows)
        if sc.energy is not None:
            sc.energy += rows
            if len(sc.energy) > ENERGY_CAP:
                sc.energy = None
        found = _STAMP_HINT.findall(text)
        sc.stamps += len(found)
        if found and sc.in_order:
            ts = pl.Series(found, dtype=pl.String).cast(pl.Int64, strict=False)
            first = ts[0]
            sc.in_order = (
                not ts.null_count() and (sc.last is None or first >= sc.last) and ts.is_sorted()
            )
            sc.last = ts[-1]
    return sc


def stream_dump(path: Any, st: _State, log: SmiLog) -> _Chunks:
    """The chunks of a dumpGpuPower log (see the module docstring)."""
    sc = _scan(path)
    if sc.odd or not sc.stamps:
        yield from log.whole().items()  # its error (or its tables, for an odd energy value)
        return
    device_id = int(sc.device.group(1)) if sc.device else None
    devices = dump_devices(sc.device)
    if devices is not None:
        st.add_devices(devices)
    dev = pl.lit(device_id, dtype=pl.Int64).alias("device_id")
    if not sc.n_energy:
        rows = _plain(path, log)
    elif sc.in_order and sc.energy is not None:
        rows = _merged(path, log, sorted(sc.energy, key=lambda r: r[0]))
    else:
        rows = _sorted(path, log, st.spill.workdir)
    for df in rows:
        if df.height:
            yield from st.samples(df.with_columns(dev))
    yield from st.finish(dump_sources())


def _energy_of(text: str) -> list[tuple[int, float]]:
    # (the energy regex is slow to find nothing in a block of samples: a plain search first)
    return dump_energy_rows(text) if "with energy" in text else []


def _text(block: bytes) -> str:
    return block.decode("utf-8", "replace")


def _samples_of(text: str, log: SmiLog) -> pl.DataFrame:
    """The block's sample rows; a failure is answered by the whole-file read's error."""
    try:
        return dump_sample_rows(text)
    except Exception:
        log.whole()  # raises what the whole read says of the log
        raise


def _no_samples(path: Any) -> MalformedInput:
    return MalformedInput(DUMP_NO_SAMPLES, path=path)


def _plain(path: Any, log: SmiLog) -> Iterator[pl.DataFrame]:
    n = 0
    for block, _ in line_blocks(path):
        s = _samples_of(_text(block), log)
        n += s.height
        yield s
    if not n:
        raise _no_samples(path)


def _merged(path: Any, log: SmiLog, energy: list[tuple[int, float]]) -> Iterator[pl.DataFrame]:
    """Samples in order, each energy row placed before the first sample with a later stamp
    (after those with its own stamp, as the stable sort of samples then energy rows)."""
    stamps = [t for t, _ in energy]
    pos, n = 0, 0
    for block, _ in line_blocks(path):
        s = _samples_of(_text(block), log)
        if not s.height:
            continue
        n += s.height
        # Energy rows stamped before the block's last sample belong in it; those at its stamp
        # wait: a later block may hold more samples with that stamp, which come first.
        k = bisect.bisect_left(stamps, s["timestamp_ns"][-1], lo=pos)
        if k > pos:
            e = dump_energy_frame(energy[pos:k])
            s = pl.concat([s, e], how="diagonal").sort("timestamp_ns", maintain_order=True)
            pos = k
        yield s
    if not n:
        raise _no_samples(path)
    if pos < len(energy):
        yield dump_energy_frame(energy[pos:])


# --- the sort way: sorted runs spilled to workdir, merged -------------------------------------

_SCHEMA = {
    "timestamp_ns": pl.Int64,
    "power_w": pl.Float64,
    "gpu_util_pct": pl.Float64,
    "sm_clock_mhz": pl.Float64,
    "mem_clock_mhz": pl.Float64,
    "temperature_c": pl.Float64,
    "energy_j": pl.Float64,
    "_g": pl.Int8,  # 0 sample, 1 energy row: samples first on equal stamps
    "_i": pl.Int64,  # the row's place among its kind, in line order
}


def _keyed(block: bytes, log: SmiLog, n_s: int, n_e: int) -> pl.DataFrame:
    """The block's samples and energy rows with their sort key."""
    text = _text(block)
    s = _samples_of(text, log)
    e = dump_energy_frame(_energy_of(text))
    parts = [
        s.with_columns(
            pl.lit(0, pl.Int8).alias("_g"), pl.int_range(n_s, n_s + s.height).alias("_i")
        ),
        e.with_columns(
            pl.lit(1, pl.Int8).alias("_g"), pl.int_range(n_e, n_e + e.height).alias("_i")
        ),
    ]
    df = pl.concat([p for p in parts if p.height] or [pl.DataFrame(schema=_SCHEMA)], how="diagonal")
    return df.select(
        [
            pl.col(c).cast(t) if c in df.columns else pl.lit(None, t).alias(c)
            for c, t in _SCHEMA.items()
        ]
    )


class _Runs:
    """Sorted runs written to `workdir` as Arrow IPC streams, removed on close."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.paths: list[Path] = []

    def write(self, parts: list[pl.DataFrame]) -> None:
        import pyarrow as pa

        tbl = pl.concat(parts).sort(_KEY).to_arrow()
        path = self.workdir / f"dump-run-{os.getpid()}-{id(self)}-{len(self.paths)}.arrows"
        self.paths.append(path)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, tbl.schema) as w:
            for batch in tbl.to_batches(max_chunksize=_BATCH_ROWS):
                w.write_batch(batch)

    def close(self) -> None:
        for p in self.paths:
            p.unlink(missing_ok=True)


class _Reader:
    """One run read batch by batch into a buffer of sorted rows."""

    def __init__(self, path: Path, stack: contextlib.ExitStack) -> None:
        import pyarrow as pa

        src = stack.enter_context(pa.OSFile(str(path), "rb"))
        self.batches = iter(pa.ipc.open_stream(src))
        self.buf = pl.DataFrame(schema=_SCHEMA)
        self.done = False

    def fill(self, rows: int) -> None:
        parts = [self.buf]
        have = self.buf.height
        while not self.done and have < rows:
            batch = next(self.batches, None)
            if batch is None:
                self.done = True
                break
            df = pl.from_arrow(batch)
            assert isinstance(df, pl.DataFrame)
            parts.append(df)
            have += df.height
        self.buf = pl.concat(parts) if len(parts) > 1 else self.buf


def _at_most(bound: tuple[int, int, int]) -> pl.Expr:
    t, g, i = bound
    ts, gc, ic = pl.col("timestamp_ns"), pl.col("_g"), pl.col("_i")
    return (ts < t) | ((ts == t) & ((gc < g) | ((gc == g) & (ic <= i))))


def _key(df: pl.DataFrame, i: int) -> tuple[int, int, int]:
    row = df.row(i)
    return row[0], row[-2], row[-1]  # timestamp_ns, _g, _i (the first and last columns)


def _cut(buf: pl.DataFrame, bound: tuple[int, int, int] | None) -> int:
    """How many rows of the sorted `buf` have a key up to `bound` (all for None)."""
    if bound is None or _key(buf, -1) <= bound:
        return buf.height
    if _key(buf, 0) > bound:
        return 0
    return int(buf.select(_at_most(bound).sum()).item())


def _merge(paths: list[Path]) -> Iterator[pl.DataFrame]:
    """The rows of the sorted runs in key order, holding about `MERGE_ROWS` rows."""
    per_run = max(_BATCH_ROWS, MERGE_ROWS // max(len(paths), 1))
    with contextlib.ExitStack() as stack:
        runs = [_Reader(p, stack) for p in paths]
        for r in runs:
            r.fill(per_run)
        while live := [r for r in runs if r.buf.height]:
            # Rows not yet read from a run come after its buffer's last key: every row up to
            # the smallest such key is in the buffers.
            open_ends = [_key(r.buf, -1) for r in live if not r.done]
            bound = min(open_ends) if open_ends else None
            taken = []
            for r in live:
                cut = _cut(r.buf, bound)
                if cut:
                    taken.append(r.buf.slice(0, cut))
                    r.buf = r.buf.slice(cut)
                    r.fill(per_run)
            out = taken[0] if len(taken) == 1 else pl.concat(taken).sort(_KEY)
            yield out.drop("_g", "_i")


def _sorted(path: Any, log: SmiLog, workdir: Path) -> Iterator[pl.DataFrame]:
    runs = _Runs(workdir)
    try:
        parts: list[pl.DataFrame] = []
        held, n_s, n_e = 0, 0, 0
        for block, _ in line_blocks(path):
            df = _keyed(block, log, n_s, n_e)
            k = int((df["_g"] == 0).sum())
            n_s, n_e = n_s + k, n_e + df.height - k
            parts.append(df)
            held += df.height
            if held >= RUN_ROWS:
                runs.write(parts)
                parts, held = [], 0
        if not n_s:
            raise _no_samples(path)
        if held:
            runs.write(parts)
        del parts
        yield from _merge(runs.paths)
    finally:
        runs.close()
