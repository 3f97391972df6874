"""Iteration logs: per-iteration durations of a training run.

Two layouts:

1. The SC22 variability study's training stdout (`hal-uw/gpu_variability_sc22_artifact`,
   `cnn_utils/engine.py`, formats.md §0.2)::

       Iteration Duration <iter> <cuda_device> : <seconds>
       ...
       Training time: 0:03:12.345678

   The seconds are host `time.perf_counter()` deltas without a CUDA synchronize. All ranks write to
   one redirected stdout, so several records can merge on one physical line; every record on a
   line is parsed (the text is cut at every `Iteration Duration`, not `split('I')`). Other
   lines, `Training time:` included, are ignored: the reader keeps no total. A record that
   starts with `Iteration Duration` but does not parse (`... : garbage`, a record cut by another
   rank's output) is skipped with a warning naming the file and line; a value that does not fit
   int64 (e.g. `1e400` seconds) is an error naming the line. No start times: `start_ns` is null.

2. The project's own log, written by `traceanalyze collect` (device-synchronized timing)::

       # traceanalyze-iterlog v1
       rank,device_id,iteration,start_ns,duration_ns,batch_size,images_per_s
       0,0,0,1732260000000000000,412345678,64,155.2

   CSV; `start_ns` is Unix epoch ns (host clock at the iteration's start event), empty cells are
   nulls. `time_origin_epoch_ns` is 0. A bad value, or `start_ns + duration_ns` past int64, is an
   error naming the line and column.

Either layout may be gzip-compressed (`.gz`); a truncated or corrupt gzip is a MalformedInput
saying so.
"""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path

import polars as pl

from ... import schema
from ...errors import MalformedInput, MissingColumn
from ...tables import Tables
from ..common.core import PathLike, head_text, reader_entry, warn
from ..common.limits import read_content
from .collect_run import collect_run

MAGIC = "# traceanalyze-iterlog v1"
COLUMNS: tuple[str, ...] = (
    "rank",
    "device_id",
    "iteration",
    "start_ns",
    "duration_ns",
    "batch_size",
    "images_per_s",
)
HEADER = ",".join(COLUMNS)
_OWN_TYPES: dict[str, type[pl.DataType]] = {
    "rank": pl.Int64,
    "device_id": pl.Int64,
    "iteration": pl.Int64,
    "start_ns": pl.Int64,
    "duration_ns": pl.Int64,
    "batch_size": pl.Int64,
    "images_per_s": pl.Float64,
}

_RECORD = "Iteration Duration"
# What follows `Iteration Duration` in one record: ` 12 0 : 0.1234`; the number may use
# exponent notation. Text after the number is not checked (a merged rank's record may follow).
_SC22_BODY = re.compile(r"^\s+(\d+)\s+(\d+)\s*:\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)")
# 2**63 (exact as a float): a rounded duration in ns at or above it does not fit int64.
_NS_LIMIT = float(2**63)
_I64_MAX = 2**63 - 1
_I64_MIN = -(2**63)


def sniff(path: PathLike) -> bool:
    head = head_text(path, 8192)
    return head.startswith(MAGIC) or f"{_RECORD} " in head


@reader_entry("iterlog")
def read_iterlog(path: PathLike) -> Tables:
    raw = read_content(path)  # within InputLimits: a giant line is refused, gzip streamed
    text = raw.decode("utf-8", "replace").lstrip("\ufeff")
    if text.startswith(MAGIC):
        tables = _read_own(path, text)
        # A collect run's rank-0 log with its manifest beside it also gives a `runs` row.
        run = collect_run(path, tables.iterations, _sibling_iterations)
        return tables if run is None else replace(tables, runs=schema.conform("runs", run))
    return _read_sc22(path, text)


def _sibling_iterations(path: Path) -> pl.DataFrame:
    """Another rank's iteration log of the same run (own layout only)."""
    text = read_content(path).decode("utf-8", "replace").lstrip("\ufeff")
    if not text.startswith(MAGIC):
        raise MalformedInput(f"not a traceanalyze iteration log: {path}", path=path)
    return _read_own(path, text).iterations


def _first_line(lines: pl.Series, bad: pl.Series) -> int:
    """The line of the first row where `bad` is true (callers know one is)."""
    return int(lines.filter(bad)[0])


def _read_sc22(path: PathLike, text: str) -> Tables:
    # Every occurrence of `Iteration Duration` starts a record, wherever it is on a line (merged
    # ranks); the piece up to the next occurrence is its body. Piece 0 is the text before the
    # first record. A piece's line is 1 + the newlines in every piece before it.
    pieces = pl.Series("body", [text]).str.split(_RECORD).explode()
    frame = pl.DataFrame(pieces).with_columns(
        (pl.col("body").str.count_matches("\n").cum_sum().shift(1, fill_value=0) + 1)
        .cast(pl.Int64)
        .alias("line")
    )[1:]
    fields = frame.select(
        "line", "body", pl.col("body").str.extract_groups(_SC22_BODY.pattern).alias("m")
    ).unnest("m")
    fields.columns = ["line", "body", "iteration", "device_id", "sec"]
    bad = fields.filter(pl.col("sec").is_null())
    good = fields.filter(pl.col("sec").is_not_null())
    first_bad = f"{_RECORD}{bad['body'][0]}".split("\n")[0].strip()[:80] if bad.height else ""
    if good.height == 0:
        line = int(bad["line"][0]) if bad.height else None
        why = f" (malformed: {first_bad!r})" if bad.height else ""
        raise MalformedInput(f"no '{_RECORD} <i> <dev> : <s>' records{why}", path=path, line=line)
    if bad.height:
        # Skipped like the other lines that are not records, but never silently: a garbled
        # record (a rank's output cut by another's, a non-number) is a data-quality note.
        lines = bad["line"].to_list()
        more = f"; {len(lines) - 1} more at line(s) {_listed(lines[1:])}" if len(lines) > 1 else ""
        warn(f"{path}, line {lines[0]}: malformed record {first_bad!r} skipped{more}")
    ints = good.select(
        "line",
        pl.col("iteration").cast(pl.Int64, strict=False),
        pl.col("device_id").cast(pl.Int64, strict=False),
        (pl.col("sec").cast(pl.Float64) * 1e9).round().alias("ns"),
    )
    for col in ("iteration", "device_id"):
        if ints[col].null_count():
            line = _first_line(ints["line"], ints[col].is_null())
            raise MalformedInput(
                f"{col.replace('_', ' ')} does not fit a 64-bit integer", path=path, line=line
            )
    too_big = ~(ints["ns"] < _NS_LIMIT)  # inf (1e400) and finite values past int64 ns
    if too_big.any():
        line = _first_line(ints["line"], too_big)
        raise MalformedInput(
            "iteration duration does not fit int64 nanoseconds (> ~292 years)", path=path, line=line
        )
    df = ints.select(
        "iteration",
        "device_id",
        # Seconds to integer ns, rounded (not truncated).
        pl.col("ns").cast(pl.Int64).alias("duration_ns"),
    )
    return Tables.build(
        iterations=df,
        sources=pl.DataFrame({"tool": ["sc22-train-stdout"]}),
    )


def _listed(lines: list[int], limit: int = 10) -> str:
    shown = ", ".join(str(n) for n in lines[:limit])
    return shown + (", …" if len(lines) > limit else "")


def _check_layout(path: PathLike, body: str) -> None:
    """MissingColumn unless the header is ours; MalformedInput naming a row with a wrong field
    count (checked on the text, before parsing)."""
    # Only blanks and CR: str.strip() would also drop control characters such as \x1c (which
    # Python counts as whitespace) that the CSV parser then keeps in the first column's name.
    first = body.split("\n", 1)[0].strip(" \t\r")
    if first != HEADER:
        raise MissingColumn(f"expected header {HEADER!r}, found {first!r}", path=path, line=2)
    # polars fills a short row's missing cells with nulls: a row cut short (a killed writer)
    # must be an error naming its line, not a row of nulls.
    widths = pl.Series(body.split("\n")).str.count_matches(",", literal=True)
    blank = pl.Series(body.split("\n")).str.strip_chars() == ""
    ragged = (widths != len(COLUMNS) - 1) & ~blank
    if ragged.any():
        i = int(ragged.arg_true()[0])
        raise MalformedInput(
            f"row has {int(widths[i]) + 1} fields, header has {len(COLUMNS)} (truncated row)",
            path=path,
            line=i + 2,
        )


def _read_own(path: PathLike, text: str) -> Tables:
    body = text.split("\n", 1)[1] if "\n" in text else ""
    _check_layout(path, body)
    try:
        # Read as text, then convert per column, so a bad value is reported with its line and
        # column. Row i of the body is line i + 3 (magic line, header; polars keeps blank lines
        # as all-null rows, so rows and lines stay aligned).
        raw = pl.read_csv(io.StringIO(body), infer_schema=False)
    except pl.exceptions.PolarsError as e:
        raise MalformedInput(f"bad iteration log row ({e})".split("\n")[0], path=path) from None
    raw = raw.with_columns((pl.int_range(pl.len(), dtype=pl.Int64) + 3).alias("line"))
    df = raw.select(
        "line",
        *[pl.col(c).str.strip_chars().cast(t, strict=False) for c, t in _OWN_TYPES.items()],
    )
    for c in _OWN_TYPES:
        given = raw[c].str.strip_chars().fill_null("") != ""
        lost = given & df[c].is_null()
        if lost.any():
            value = raw[c].filter(lost)[0]
            raise MalformedInput(
                f"not a {'number' if c == 'images_per_s' else '64-bit integer'}: {value!r}",
                path=path,
                line=_first_line(df["line"], lost),
                column=c,
            )
    if df["iteration"].null_count():
        raise MalformedInput(
            "iteration number missing in a row",
            path=path,
            line=_first_line(df["line"], df["iteration"].is_null()),
            column="iteration",
        )
    # end_ns = start_ns + duration_ns must not wrap around int64 (polars integer addition wraps).
    start, dur = df["start_ns"], df["duration_ns"]
    wraps = ((dur >= 0) & (start > _I64_MAX - dur)) | ((dur < 0) & (start < _I64_MIN - dur))
    if wraps.fill_null(False).any():
        raise MalformedInput(
            "start_ns + duration_ns does not fit int64 nanoseconds",
            path=path,
            line=_first_line(df["line"], wraps.fill_null(False)),
            column="duration_ns",
        )
    df = df.drop("line").with_columns((pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns"))
    return Tables.build(
        iterations=df,
        sources=pl.DataFrame(
            {"tool": ["traceanalyze-collect"], "time_origin_epoch_ns": [0]},
            schema={"tool": pl.String, "time_origin_epoch_ns": pl.Int64},
        ),
    )
