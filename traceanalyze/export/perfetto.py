"""Chrome trace JSON (the Trace Event Format) for ui.perfetto.dev and chrome://tracing.

Written by `traceanalyze timeline --perfetto out.json`. Events:

* kernels and copies: complete events `ph: "X"`, `pid` = device, `tid` = stream (copies on their own
  thread id, `stream + 1_000_000`, so they are visible next to the kernels of the same stream);
* markers (NVTX ranges, user annotations): `ph: "X"` on a host process `pid` = process_id + 10⁶
  (marks without an end: `ph: "i"`);
* telemetry: counters `ph: "C"` (`sm_clock_mhz`, `power_w`, `temperature_c`), one track per device;
* `ph: "M"` metadata naming processes ("GPU 0", "host pid 123") and threads ("stream 7").

Times: `ts`/`dur` in microseconds as floats (the format's unit), relative to `origin_ns` (default:
the earliest exported time) so that float64 keeps sub-µs precision. An event that starts before
`origin_ns` (an interval overlapping a window's start) lowers the origin to its start: Perfetto
rejects negative timestamps (google/perfetto#107), and an overlapping interval is exported whole,
never cut. Rows are serialized columnar (polars
`write_ndjson` per event kind), not with a Python loop per event.
"""

from __future__ import annotations

import io
import os

import polars as pl

Frame = pl.DataFrame | pl.LazyFrame

HOST_PID_OFFSET = 1_000_000
COPY_TID_OFFSET = 1_000_000
COUNTERS: tuple[str, ...] = ("sm_clock_mhz", "power_w", "temperature_c")


def _c(df: Frame | None) -> pl.DataFrame | None:
    if df is None:
        return None
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def _ndjson(df: pl.DataFrame) -> str:
    if df.height == 0:
        return ""
    buf = io.BytesIO()
    df.write_ndjson(buf)
    return buf.getvalue().decode().rstrip("\n").replace("\n", ",\n")


def chrome_trace_json(
    kernels: Frame | None = None,
    memcpy: Frame | None = None,
    markers: Frame | None = None,
    gpu_samples: Frame | None = None,
    *,
    origin_ns: int | None = None,
) -> str:
    """The trace as a JSON text `{"traceEvents": [...], "displayTimeUnit": "ms"}`."""
    k, m, mk, s = _c(kernels), _c(memcpy), _c(markers), _c(gpu_samples)
    starts: list[int] = []
    for df, col in ((k, "start_ns"), (m, "start_ns"), (mk, "start_ns"), (s, "timestamp_ns")):
        if df is not None and df.height:
            v = df.select(pl.col(col).min()).item()
            if v is not None:
                starts.append(int(v))
    if origin_ns is None:
        origin_ns = min(starts) if starts else 0
    t0 = min([origin_ns, *starts])

    def us(c: str) -> pl.Expr:
        return (pl.col(c) - t0) / 1e3

    dev = pl.col("device_id").fill_null(0).cast(pl.Int64)
    parts: list[str] = []
    meta: list[pl.DataFrame] = []

    def complete(df: pl.DataFrame, cat: str, tid: pl.Expr, name: pl.Expr) -> None:
        df = df.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
        if df.height == 0:
            return
        ev = df.select(
            name.alias("name"),
            pl.lit(cat).alias("cat"),
            pl.lit("X").alias("ph"),
            us("start_ns").alias("ts"),
            ((pl.col("end_ns") - pl.col("start_ns")) / 1e3).alias("dur"),
            dev.alias("pid"),
            tid.alias("tid"),
        )
        parts.append(_ndjson(ev))
        meta.append(ev.select("pid", "tid").unique())

    if k is not None:
        complete(k, "kernel", pl.col("stream_id").fill_null(0), pl.col("name").fill_null("kernel"))
    if m is not None:
        complete(
            m,
            "memcpy",
            pl.col("stream_id").fill_null(0) + COPY_TID_OFFSET,
            pl.concat_str(pl.lit("Memcpy "), pl.col("kind").fill_null("?")),
        )
    if mk is not None and mk.height:
        host = mk.filter(pl.col("start_ns").is_not_null())
        pid = (
            pl.when(pl.col("device_id").is_not_null())
            .then(pl.col("device_id"))
            .otherwise(pl.col("process_id").fill_null(0) + HOST_PID_OFFSET)
        )
        ranges = host.filter(pl.col("end_ns").is_not_null()).select(
            pl.col("name").fill_null(""),
            pl.coalesce("category", pl.lit("marker")).alias("cat"),
            pl.lit("X").alias("ph"),
            us("start_ns").alias("ts"),
            ((pl.col("end_ns") - pl.col("start_ns")) / 1e3).alias("dur"),
            pid.alias("pid"),
            pl.col("thread_id").fill_null(0).alias("tid"),
        )
        marks = host.filter(pl.col("end_ns").is_null()).select(
            pl.col("name").fill_null(""),
            pl.coalesce("category", pl.lit("marker")).alias("cat"),
            pl.lit("i").alias("ph"),
            us("start_ns").alias("ts"),
            pl.lit("t").alias("s"),
            pid.alias("pid"),
            pl.col("thread_id").fill_null(0).alias("tid"),
        )
        parts += [_ndjson(ranges), _ndjson(marks)]
        meta += [ranges.select("pid", "tid").unique(), marks.select("pid", "tid").unique()]
    if s is not None and s.height:
        for col in COUNTERS:
            if col not in s.columns:
                continue
            ev = s.filter(pl.col(col).is_not_null()).select(
                pl.lit(col).alias("name"),
                pl.lit("C").alias("ph"),
                us("timestamp_ns").alias("ts"),
                dev.alias("pid"),
                pl.struct(pl.col(col).alias("value")).alias("args"),
            )
            parts.append(_ndjson(ev))
            meta.append(ev.select("pid").unique().with_columns(pl.lit(None, pl.Int64).alias("tid")))
    parts.append(_ndjson(_metadata(meta)))
    body = ",\n".join(p for p in parts if p)
    return '{"displayTimeUnit": "ms", "traceEvents": [\n' + body + "\n]}\n"


def _metadata(meta: list[pl.DataFrame]) -> pl.DataFrame:
    if not meta:
        return pl.DataFrame()
    ids = pl.concat([d.cast({"pid": pl.Int64, "tid": pl.Int64}) for d in meta]).unique()
    pname = (
        pl.when(pl.col("pid") >= HOST_PID_OFFSET)
        .then(pl.format("host pid {}", pl.col("pid") - HOST_PID_OFFSET))
        .otherwise(pl.format("GPU {}", pl.col("pid")))
    )
    procs = (
        ids.select("pid")
        .unique()
        .select(
            pl.lit("process_name").alias("name"),
            pl.lit("M").alias("ph"),
            pl.col("pid"),
            pl.lit(0, pl.Int64).alias("tid"),
            pl.struct(pname.alias("name")).alias("args"),
        )
    )
    tname = (
        pl.when(pl.col("pid") >= HOST_PID_OFFSET)
        .then(pl.format("thread {}", pl.col("tid")))
        .when(pl.col("tid") >= COPY_TID_OFFSET)
        .then(pl.format("copies stream {}", pl.col("tid") - COPY_TID_OFFSET))
        .otherwise(pl.format("stream {}", pl.col("tid")))
    )
    threads = ids.drop_nulls("tid").select(
        pl.lit("thread_name").alias("name"),
        pl.lit("M").alias("ph"),
        pl.col("pid"),
        pl.col("tid"),
        pl.struct(tname.alias("name")).alias("args"),
    )
    return pl.concat([procs, threads]).sort("pid", "tid")


def write_chrome_trace(
    path: str | os.PathLike[str],
    kernels: Frame | None = None,
    memcpy: Frame | None = None,
    markers: Frame | None = None,
    gpu_samples: Frame | None = None,
    *,
    origin_ns: int | None = None,
) -> None:
    """Write `chrome_trace_json(...)` to `path`."""
    text = chrome_trace_json(kernels, memcpy, markers, gpu_samples, origin_ns=origin_ns)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
