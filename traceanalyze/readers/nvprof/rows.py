"""nvprof CSV: reading a section's rows with pyarrow, units, device ids, and locating bad rows."""

from __future__ import annotations

import array
import csv
import io
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from ...errors import MalformedInput, MissingColumn, UnknownUnit
from ..common.core import (
    NVPROF_RATE_TO_BYTES_PER_S,
    NVPROF_SIZE_TO_BYTES,
    TIME_TO_NS,
    PathLike,
    lazy_import,
)
from .split import (
    _DEVICE_ORDINAL,
    _header_line,
    _piece_line,
    _Raw,
    _Retry,
    _Section,
    _units_line,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
else:  # imported on first use, so format detection stays light
    pa = lazy_import("pyarrow")
    pc = lazy_import("pyarrow.compute")
    pacsv = lazy_import("pyarrow.csv")

# Trace columns by role. Anything else in a trace header is ignored with a warning.
_TIME_COLS = ("Start", "Duration")
_INT_COLS = (
    "Grid X",
    "Grid Y",
    "Grid Z",
    "Block X",
    "Block Y",
    "Block Z",
    "Registers Per Thread",
    "Context",
    "Stream",
    "Correlation_ID",
)
_SIZE_COLS = ("Static SMem", "Dynamic SMem", "Size")
_RATE_COLS = ("Throughput",)
_STR_COLS = ("SrcMemType", "DstMemType", "Device", "System", "Name")
_IGNORED_COLS = ("Src Dev", "Src Ctx", "Dst Dev", "Dst Ctx")

_SAMPLE_NAMES = {
    "[SM/Memory Clock (MHz)]": "clock",
    "[Power/Limit (mW)]": "power",
    "[Temperature (C)]": "temperature",
    "[Fan Speed (%)]": "fan",
}

# Units glued to metric values (or in a metric trace's units row): unit -> (base unit, factor).
_METRIC_UNITS: dict[str, tuple[str | None, float]] = {
    "": (None, 1.0),
    "%": ("%", 1.0),
    **{u: ("bytes/s", f) for u, f in NVPROF_RATE_TO_BYTES_PER_S.items()},
    **{u: ("bytes", f) for u, f in NVPROF_SIZE_TO_BYTES.items()},
    **{u: ("ns", f) for u, f in TIME_TO_NS.items()},
}
_NUMBER_WITH_UNIT = r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$"
_LEVEL = r"^\s*(?:Idle|Low|Mid|High|Max)\s*\((\d+)\)\s*$"


# --- parsing one section's rows -------------------------------------------------------------------


def _locate_bad_row(raw: _Raw, sec: _Section, path: PathLike, why: str) -> MalformedInput:
    """Slow path, only after the fast parser failed: find the first row that is wrong."""
    width = len(sec.header)
    for k, (start, end) in enumerate(sec.pieces):
        first_line = _piece_line(raw, sec, k)
        chunk = raw[start:end]
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as e:
            bad_line = first_line + chunk.count(b"\n", 0, e.start)
            return MalformedInput("not UTF-8 text", path=path, line=bad_line)
        reader = csv.reader(io.StringIO(text, newline=""))
        prev = 0
        try:
            for row in reader:
                row_line = first_line + prev
                prev = reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != width:
                    return MalformedInput(
                        f"row has {len(row)} fields, header has {width} (truncated or "
                        "malformed row)",
                        path=path,
                        line=row_line,
                    )
        except csv.Error as e:
            return MalformedInput(f"bad CSV ({e})", path=path, line=first_line + prev)
    return MalformedInput(f"bad CSV ({why})", path=path, line=None)


def _read_rows(
    raw: _Raw,
    sec: _Section,
    path: PathLike,
    types: dict[str, pa.DataType],
    *,
    only_empty_is_null: bool = False,
) -> pa.Table:
    """The section's data rows via pyarrow's multithreaded CSV reader, columns named as the header.

    `types` gives the Arrow type of columns by header name (others are read as strings), so
    numbers are converted while parsing. Empty cells are nulls, and with `only_empty_is_null`
    nothing else is (pyarrow's default null spellings include `nan`, which would hide a broken
    nvprof timestamp as a missing value). The bytes are not copied when the table is one piece
    (the usual case: no '==' line inside it).
    """
    names = [f"c{i}" for i in range(len(sec.header))]
    col_types = {n: types.get(h, pa.string()) for n, h in zip(names, sec.header, strict=True)}
    for s, e in sec.pieces[-1:]:
        # pyarrow takes a quote left open at the end of the input as a complete value: a file
        # cut inside a quoted kernel name would pass. nvprof ends every line with a newline.
        last = raw.rfind(b"\n", 0, e) + 1
        if last < e and raw[last:e].count(b'"') % 2:
            line = _piece_line(raw, sec, len(sec.pieces) - 1) + raw[s:last].count(b"\n")
            why = "file ends inside a quoted field (truncated)"
            raise MalformedInput(why, path=path, line=line)
    if not sec.pieces:
        tbl = pa.table({n: pa.nulls(0, type=t) for n, t in col_types.items()})
        return tbl.rename_columns(sec.header)
    buf = _section_bytes(raw, sec)
    try:
        tbl = pacsv.read_csv(
            buf,
            read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 22),
            parse_options=pacsv.ParseOptions(ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                column_types=col_types,
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
                **({"null_values": [""]} if only_empty_is_null else {}),
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        if sec.optimistic:
            raise _Retry from None
        why = str(e).split("\n")[0]
        err = _locate_bad_row(raw, sec, path, why)
        if err.line is None:
            m = re.search(r"column #(\d+): CSV conversion error", why)
            if m:
                err = _locate_bad_value(raw, sec, path, buf, int(m.group(1)), col_types, why)
        raise err from None
    return tbl.rename_columns(sec.header)


def _section_bytes(raw: _Raw, sec: _Section) -> pa.Buffer:
    """The section's data bytes as one buffer: the file's own bytes when it is one piece."""
    view = memoryview(raw)
    if len(sec.pieces) == 1:
        s, e = sec.pieces[0]
        buf = pa.py_buffer(view[s:e])
    else:
        # A piece may end without a newline before a mid-file '==' line.
        parts = []
        for s, e in sec.pieces:
            parts.append(view[s:e])
            if raw[e - 1 : e] != b"\n":
                parts.append(memoryview(b"\n"))
        buf = pa.py_buffer(b"".join(parts))
    return buf


def _locate_bad_value(
    raw: _Raw,
    sec: _Section,
    path: PathLike,
    buf: pa.Buffer,
    index: int,
    col_types: dict[str, pa.DataType],
    why: str,
) -> MalformedInput:
    """Slow path for a value pyarrow could not convert: re-read that column as text."""
    name = f"c{index}"
    column = sec.header[index]
    text = pacsv.read_csv(
        buf,
        read_options=pacsv.ReadOptions(column_names=list(col_types)),
        convert_options=pacsv.ConvertOptions(
            include_columns=[name],
            column_types={name: pa.string()},
            strings_can_be_null=True,
        ),
    ).column(0)
    s = pl.Series(name, text.combine_chunks())
    integer = col_types[name] == pa.int64()
    bad = s.is_not_null() & s.cast(pl.Int64 if integer else pl.Float64, strict=False).is_null()
    if not bad.any():
        return MalformedInput(f"bad value ({why})", path=path, column=column)
    i = int(bad.arg_true()[0])
    return MalformedInput(
        f"value {s[i]!r} is not {'an integer' if integer else 'a number'}",
        path=path,
        line=_line_of_row(sec, raw, i),
        column=column,
    )


def _line_of_row(sec: _Section, raw: _Raw, row: int) -> int:
    """Line number of data row `row` (error reporting only).

    Counts newlines, so it assumes no newline inside quoted fields (nvprof writes none).
    """
    before = 0
    for k, (s, e) in enumerate(sec.pieces):
        rows = raw[s:e].count(b"\n") + (0 if raw[e - 1 : e] == b"\n" else 1)
        if row < before + rows:
            return _piece_line(raw, sec, k) + row - before
        before += rows
    return _header_line(raw, sec)


def _first_bad(df: pl.DataFrame, ok: pl.Expr) -> int | None:
    """Index of the first row where `ok` is false (null counts as false)."""
    bad = df.select(ok.fill_null(False).not_().arg_true().first()).item()
    return None if bad is None else int(bad)


# --- units ----------------------------------------------------------------------------------------


def _factor(
    raw: _Raw, sec: _Section, col: str, table: dict[str, float], path: PathLike, has_values: bool
) -> float | None:
    """Factor for a column from the units row; None when the column is empty."""
    assert sec.units is not None
    unit = sec.units[sec.header.index(col)].strip()
    if not unit and not has_values:
        return None
    try:
        return table[unit]
    except KeyError:
        raise UnknownUnit(
            f"unknown unit {unit!r} in the units row (known: {', '.join(table)})",
            path=path,
            line=_units_line(raw, sec),
            column=col,
        ) from None


# --- devices --------------------------------------------------------------------------------------


def _device_type() -> pa.DataType:
    return pa.dictionary(pa.int32(), pa.string())


def _device_ids(
    tbl: pa.Table, raw: _Raw, sec: _Section, path: PathLike, devices: set[str]
) -> pa.Table:
    r"""Replace the dictionary-encoded `Device` column by `device_id`.

    `"GeForce GTX 1080 Ti (0)"` → 0 via the regex `\((\d+)\)$`, once per distinct string (the
    dictionary), then gathered by the indices: no per-row Python work.
    """
    col = tbl.column("Device")
    out, offset = [], 0
    for chunk in col.chunks:
        if not isinstance(chunk, pa.DictionaryArray):  # an all-null chunk of an empty table
            chunk = pc.dictionary_encode(chunk.cast(pa.string()))
        names = chunk.dictionary.to_pylist()
        ids = []
        for code, name in enumerate(names):
            m = _DEVICE_ORDINAL.search(name.strip())
            if m is None:
                row = offset + pc.index(chunk.indices, code).as_py()
                raise MalformedInput(
                    f"device {name!r} does not end in '(<ordinal>)'",
                    path=path,
                    line=_line_of_row(sec, raw, row),
                    column="Device",
                )
            ids.append(int(m.group(1)))
        devices.update(names)
        out.append(pc.take(_int64_array(ids), chunk.indices))
        offset += len(chunk)
    device_id = pa.chunked_array(out, pa.int64())
    return tbl.drop_columns(["Device"]).append_column("device_id", device_id)


def _int64_array(values: list[int]) -> pa.Array:
    """`pa.array(list)` imports pandas on first use (~0.5 s cold); a buffer does not."""
    return pa.Array.from_buffers(
        pa.int64(), len(values), [None, pa.py_buffer(array.array("q", values))]
    )


def _devices_frame(devices: set[str]) -> pl.DataFrame:
    rows = []
    for d in sorted(devices):
        m = _DEVICE_ORDINAL.search(d.strip())
        assert m is not None  # checked by _device_ids
        rows.append((int(m.group(1)), d.strip()[: m.start()].strip()))
    return pl.DataFrame(
        sorted(set(rows)), schema={"device_id": pl.Int64, "name": pl.String}, orient="row"
    )


def _to_polars(tbl: pa.Table) -> pl.DataFrame:
    df = pl.from_arrow(tbl)
    assert isinstance(df, pl.DataFrame)
    return df


# --- GPU / API trace ------------------------------------------------------------------------------


@dataclass
class _Out:
    kernels: list[pl.DataFrame] = field(default_factory=list)
    memcpy: list[pl.DataFrame] = field(default_factory=list)
    api_calls: list[pl.DataFrame] = field(default_factory=list)
    gpu_samples: list[pl.DataFrame] = field(default_factory=list)
    kernel_metrics: list[pl.DataFrame] = field(default_factory=list)
    devices: set[str] = field(default_factory=set)
    kernels_seen: int = 0
    # Rows of unsupported bracketed kinds in the current section, by Name (one note per section).
    skipped: dict[str, int] = field(default_factory=dict)


def _missing(sec: _Section, raw: _Raw, path: PathLike, need: list[str], what: str) -> None:
    missing = [c for c in need if c not in sec.header]
    if missing:
        raise MissingColumn(
            f"{what} without column(s) {', '.join(missing)}",
            path=path,
            line=_header_line(raw, sec),
            column=missing[0],
        )


def _stem_of(names: pa.ChunkedArray) -> pa.ChunkedArray:
    stem: pa.ChunkedArray = pc.utf8_rtrim(names, characters="0123456789]")
    return stem


def _strip_id_suffix(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Old layout (≈CUDA 8): `void k<int=32>(float*, int) [1073]` → `void k<…>(…)`, id 1073.

    Adds `_name` and `_id`. Without a regex (1 M rows): `_stem`, made by `_stem_of` on the Arrow
    side (several times faster than polars' strip_chars_end), is the name with trailing digits
    and ']' stripped; stripping stops at the suffix's '[', which is neither. The name has the
    suffix when the stem ends in ' [' and the stripped tail is digits + ']'. Names without it
    are kept whole, with a null id.
    """
    name = pl.col("Name")
    return (
        lf.with_columns(
            # The stripped characters are ASCII, so the byte difference is a char count.
            name.str.tail(name.str.len_bytes() - pl.col("_stem").str.len_bytes()).alias("_tail")
        )
        .with_columns(
            pl.col("_tail").str.strip_suffix("]").cast(pl.Int64, strict=False).alias("_tail_num")
        )
        .with_columns(
            (
                pl.col("_tail_num").is_not_null()
                & name.str.ends_with("]")
                & pl.col("_stem").str.ends_with(" [")
            ).alias("_has")
        )
        .with_columns(
            pl.when("_has")
            .then(pl.col("_stem").str.strip_suffix(" ["))
            .otherwise(name)
            .alias("_name"),
            pl.when("_has").then(pl.col("_tail_num")).alias("_id"),
        )
    )
