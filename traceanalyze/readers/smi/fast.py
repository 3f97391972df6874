"""nvidia-smi CSV, the fast path: one streaming polars scan, declining (None) whatever the careful
path (`smi.careful`) must judge."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ..common.core import PathLike
from .assemble import _REASON_PREFIXES, _REASONS, _SMI_NULL_CELLS, SMI_FIELDS


def _smi_chosen(base: list[str]) -> set[str]:
    """The fields that feed `gpu_samples` columns (the first present name of each)."""
    present = (next((c for c in names if c in base), None) for names in SMI_FIELDS.values())
    return {f for f in present if f is not None}


def _fast_columns(
    base: list[str], cols: list[str], header_units: dict[str, str | None]
) -> tuple[list[pl.Expr], list[tuple[str, str]]]:
    """The scan's expressions (see `smi.fast`), and the (parsed column, "cell not null" flag)
    pairs to check after it."""
    col = dict(zip(base, cols, strict=True))

    def raw(f: str) -> pl.Expr:
        return pl.col(col[f])

    def cell(f: str) -> pl.Expr:  # the cell with the null tokens null, as the careful path
        return pl.when(raw(f).is_in(_SMI_NULL_CELLS)).then(None).otherwise(raw(f))

    chosen = _smi_chosen(base)
    reasons = next((c for c in _REASONS if c in base), None)
    # nvidia-smi prints exactly 3 decimals (`.mmm`): the fixed-width format parses 3x faster
    # than `%.f`, and a stamp it rejects (other decimals, stray spaces) takes the careful path.
    # (Polars' strptime accepts the leading space a non-first column has.)
    exprs = [
        pl.col(col["timestamp"])
        .str.strptime(pl.Datetime("ns"), "%Y/%m/%d %H:%M:%S.%3f", strict=False)
        .alias("ts"),
        # A row with too few fields has a null last cell (and so has a blank line, which the
        # careful path skips); too many fields make the scan fail.
        pl.col(cols[-1]).is_null().alias("?short"),
    ]
    # (parsed column, flag column "the cell is not null"): a null parsed value of a non-null
    # cell sends the file to the careful path. Checked after the scan, on the collected
    # columns: a flag computed from the parsed expression inside the scan would parse twice.
    # Numbers are parsed from the raw cells: no null token (`[N/A]`, `N/A`, …, with or without
    # a unit stripped) parses, so they come out null as from `cell`, without its string copy.
    checks: list[tuple[str, str]] = []

    def checked(f: str, parsed: pl.Expr, name: str) -> None:
        flag = raw(f).is_not_null() & ~raw(f).is_in(_SMI_NULL_CELLS)
        exprs.extend([parsed.alias(name), flag.alias(f"?{name}")])
        checks.append((name, f"?{name}"))

    if "index" in base:
        checked(
            "index", raw("index").str.strip_chars_start().cast(pl.Int64, strict=False), "device_id"
        )
    exprs += [cell(f).str.strip_chars().alias(f) for f in ("uuid", "name") if f in base]
    if reasons is not None:
        # "0x…" lower case as nvidia-smi prints it; "0X…" or stray spaces take the careful path.
        hexs = raw(reasons).str.strip_chars_start().str.strip_prefix("0x")
        checked(reasons, hexs.str.to_integer(base=16, strict=False).cast(pl.Int64), "reasons")
    for f in base:
        if f in ("timestamp", "index", "uuid", "name") or f.startswith(_REASON_PREFIXES):
            continue
        hu = header_units.get(f)
        v = raw(f).str.strip_chars_start()
        num = (v.str.strip_suffix(f" {hu}") if hu else v).cast(pl.Float64, strict=False)
        if f in chosen:
            checked(f, num, f"n:{f}")
        else:
            exprs += [num.alias(f"n:{f}"), cell(f).alias(f"s:{f}")]
    return exprs, checks


def _smi_fast(
    source: PathLike | bytes,
    skip: int,
    base: list[str],
    header_units: dict[str, str | None],
) -> tuple[pl.DataFrame, pl.DataFrame | None] | None:
    """The fast path: every column parsed in one streaming polars scan (parallel, the strings
    never held as a whole frame), and the distinct (device_id, uuid, name) rows.

    None when the file needs the careful path (`_read_smi_careful`, pyarrow): a row with too
    few or too many fields, a blank line, invalid UTF-8, a timestamp that is not exactly
    `YYYY/MM/DD HH:MM:SS.mmm`, a bad index, or a cell of a `gpu_samples` field or of the
    clock-reasons bitmask that is neither a null token nor a plain number with the header's unit
    (a value with another unit, a `[…]` state, units only in the values as with `noheader`).
    Declining costs only this scan; the careful path then reads the file as it always did, so
    results, errors (with their line numbers) and warnings are the same on both paths.

    Columns: `ts` (naive local time), `device_id`, `uuid`, `name`, `reasons`, `n:<field>` (the
    number with the header unit stripped, as `_split_values`), and `s:<field>` (the cells, null
    tokens null) for the fields bound for `gpu_metrics`/`devices`, which `_numbers` checks as
    carefully as before (text fields such as `pstate`, units in the values, unknown units).
    """
    cols = [f"c{i}" for i in range(len(base))]
    exprs, checks = _fast_columns(base, cols, header_units)
    lf = pl.scan_csv(
        source if isinstance(source, bytes) else Path(source),
        has_header=False,
        skip_lines=skip,
        new_columns=cols,
        schema=dict.fromkeys(cols, pl.String),
        quote_char=None,
        glob=False,
    ).select(exprs)
    # The distinct devices in the same scan (collect_all shares it): cheaper than a
    # `unique` over the collected million rows. Not with memory.total, whose unit
    # `_numbers` decides after the scan.
    dev = ["device_id"] * ("index" in base) + [c for c in ("uuid", "name") if c in base]
    try:
        if dev and "memory.total" not in base:
            out, devices = pl.collect_all(
                [lf, lf.select(dev).group_by(dev, maintain_order=True).agg()],
                engine="streaming",
            )
        else:
            out, devices = lf.collect(engine="streaming"), None
    except pl.exceptions.PolarsError:
        return None  # ragged rows, invalid UTF-8, …: the careful path says what is wrong
    if out.height == 0 or out["?short"].any() or out["ts"].null_count():
        return None
    if any((out[name].is_null() & out[flag]).any() for name, flag in checks):
        return None
    return out.select(pl.exclude("^\\?.*$")), devices
