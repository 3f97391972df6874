"""nvidia-smi CSV, the careful path: pyarrow's parser, every bad value reported with its line."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import PathLike, lazy_import
from .assemble import _REASONS, _SMI_NULL_CELLS, _assemble, _ints, _numbers, _split_values
from .clock import check_timezone, local_timezone, local_to_epoch_ns

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.csv as pacsv
else:  # imported on first use, so format detection stays light
    pa = lazy_import("pyarrow")
    pacsv = lazy_import("pyarrow.csv")

_SMI_STAMP_FORMAT = "%Y/%m/%d %H:%M:%S%.f"


def _careful_frame(
    raw: bytes, path: PathLike, first_line: int, base: list[str], skip_header: bool
) -> pl.DataFrame:
    """The rows as strings, one column per field (named by `base`), null tokens null.

    `first_line`: the line number of the first row (after the header when `skip_header`)."""
    # nvidia-smi separates fields with ", " and never quotes: the CSV parser splits on "," and
    # every cell but the first keeps one leading space (stripped per used column below; the
    # null states are matched with and without it).
    if not skip_header:
        body: bytes | memoryview = raw
    else:
        nl = raw.find(b"\n")
        body = memoryview(raw)[nl + 1 :] if nl >= 0 else b""
    cols = [f"c{i}" for i in range(len(base))]
    try:
        tbl = pacsv.read_csv(
            pa.py_buffer(body),
            read_options=pacsv.ReadOptions(column_names=cols, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(quote_char=False, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                column_types={c: pa.string() for c in cols},
                strings_can_be_null=True,
                null_values=_SMI_NULL_CELLS,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        m = re.search(r"[Rr]ow #(\d+)", str(e))
        raise MalformedInput(
            f"bad nvidia-smi row ({str(e).splitlines()[0]}); expected {len(base)} fields "
            f"({', '.join(base)})",
            path=path,
            line=int(m.group(1)) + first_line - 1 if m else None,
        ) from None
    df = pl.from_arrow(tbl)
    del tbl
    assert isinstance(df, pl.DataFrame)
    df = df.rename(dict(zip(cols, base, strict=True)))
    text_cols = [b for b in ("timestamp", "index", "uuid", "name", *_REASONS) if b in base]
    df = df.with_columns(pl.col(text_cols).str.strip_chars())
    return df


def _careful_times(
    df: pl.DataFrame, tz: str | None, path: PathLike, line_of: Callable[[int], int]
) -> tuple[pl.Series, str]:
    """The timestamps (local wall clock) in epoch ns, and the zone they were read in."""
    zone = check_timezone(tz, path) if tz is not None else local_timezone()
    naive = df["timestamp"].str.strptime(pl.Datetime("ns"), _SMI_STAMP_FORMAT, strict=False)
    bad = (naive.is_null() & df["timestamp"].is_not_null()).arg_true()
    if bad.len() or df["timestamp"].null_count():
        i = int(bad[0]) if bad.len() else int(df["timestamp"].is_null().arg_true()[0])
        raise MalformedInput(
            f"bad nvidia-smi timestamp {df['timestamp'][i]!r} (expected YYYY/MM/DD HH:MM:SS.mmm)",
            path=path,
            line=line_of(i),
            column="timestamp",
        )
    ts = local_to_epoch_ns(naive, zone, path, line_of)
    return ts, zone


def _read_smi_careful(
    raw: bytes,
    path: PathLike,
    tz: str | None,
    first_line: int,
    base: list[str],
    header_units: dict[str, str | None],
    line_of: Callable[[int], int],
    *,
    skip_header: bool | None = None,
) -> Tables:
    """`skip_header`: the first line of `raw` is the header (by default when `first_line` is 2:
    a block of a streamed log has none)."""
    skip = first_line != 1 if skip_header is None else skip_header
    df = _careful_frame(raw, path, first_line, base, skip)
    ts, zone = _careful_times(df, tz, path, line_of)
    split = _split_values(
        df,
        [b for b in base if b not in ("timestamp", "uuid", "name", "index", *_REASONS)],
        header_units,
    )
    device_id = _ints(df, "index", path, line_of).alias("device_id") if "index" in base else None

    def numbers(f: str, optional: bool) -> tuple[str | None, pl.Series | None]:
        return _numbers(
            f, split[f"n:{f}"], df[f], header_units.get(f), path, line_of, optional=optional
        )

    def reasons(col: str) -> pl.Series:
        s = df[col].str.strip_chars().str.to_lowercase()
        hexs = s.str.strip_prefix("0x")
        val = hexs.str.to_integer(base=16, strict=False)
        bad = (val.is_null() & s.is_not_null()).arg_true()
        if bad.len():
            i = int(bad[0])
            raise MalformedInput(
                f"{col}: not a hex bitmask: {df[col][i]!r}",
                path=path,
                line=line_of(i),
                column=col,
            )
        out: pl.Series = val.cast(pl.Int64).alias("clock_event_reasons")
        return out

    return _assemble(
        path,
        base,
        df.height,
        ts,
        zone,
        device_id,
        {b: df[b] for b in ("uuid", "name") if b in base},
        numbers,
        reasons,
    )
