"""Turn analysis frames into text, CSV or JSON for the CLI. No column logic here."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from typing import Any

import polars as pl

from ..analyses.naming import abbreviate, abbreviate_distinct, distinct_files


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        # Never scientific notation beside thousands separators: 67,120,000 not 6.712e+07.
        if abs(v) >= 1e6:
            return f"{v:,.0f}"
        if v != 0 and abs(v) < 1e-3:
            small = f"{v:.3g}"
            return f"{v:.10f}".rstrip("0").rstrip(".") if "e" in small else small
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


# The `_ns` columns of a table are printed in one unit, the largest that keeps the table's
# biggest value readable, with the unit in each header (`window_ns` -> `window_ms`); JSON and
# CSV keep integer nanoseconds.
_NS_UNITS: tuple[tuple[str, float, float], ...] = (
    ("_ms", 1e6, 1e7),  # suffix, ns per unit, from this largest value (10 ms) up
    ("_us", 1e3, 1e4),  # from 10 µs up; below, the columns stay in ns
)


# An `_ns` value past 2000-01-01 is an epoch time, not a duration (no profile lasts 30 years):
# printed as an ISO date in UTC, header `_utc` (issue 32: `1,652,468,827,007` ms).
_EPOCH_FLOOR_NS = 946_684_800 * 10**9
# Rates printed with an SI prefix chosen by the column's largest value: `achieved_flop_per_s`
# 8,131,527,637,555 -> `achieved_tflop_per_s` 8.132.
_RATES = ("flop_per_s", "bytes_per_s")
_SI = ((1e15, "p"), (1e12, "t"), (1e9, "g"), (1e6, "m"), (1e3, "k"))


def _epoch_columns(df: pl.DataFrame) -> list[str]:
    out = []
    for c, dt in df.schema.items():
        if c.endswith("_ns") and dt.is_integer():
            low = df[c].min()
            if isinstance(low, int) and low >= _EPOCH_FLOOR_NS:
                out.append(c)
    return out


def readable_numbers(df: pl.DataFrame) -> pl.DataFrame:
    """`df` for reading: epoch `_ns` columns as ISO dates (`_utc`), FLOP and byte rates with an
    SI prefix, whole-number float counts as integers; then `readable_units`."""
    epochs = _epoch_columns(df)
    if epochs:
        whole_ms = all((df[c].drop_nulls() % 1_000_000 == 0).all() for c in epochs)
        fmt = "%Y-%m-%dT%H:%M:%S%.3fZ" if whole_ms else "%Y-%m-%dT%H:%M:%S%.6fZ"
        df = df.with_columns(
            pl.from_epoch(pl.col(c), time_unit="ns").dt.strftime(fmt) for c in epochs
        ).rename({c: c.removesuffix("_ns") + "_utc" for c in epochs})
    counts = [
        c
        for c, dt in df.schema.items()
        if dt.is_float()
        and (c == "count" or c.endswith("_count"))
        and bool((df[c].drop_nulls() % 1 == 0).all())
    ]
    if counts:
        df = df.with_columns(pl.col(c).round(0).cast(pl.Int64) for c in counts)
    return readable_units(_si_rates(df))


def _si_rates(df: pl.DataFrame) -> pl.DataFrame:
    for c, dt in df.schema.items():
        unit = next((u for u in _RATES if c.endswith(u) and dt.is_numeric()), None)
        top = df[c].abs().max() if unit else None
        if unit is None or not isinstance(top, (int, float)) or top < 1e3:
            continue
        div, prefix = next((d, p) for d, p in _SI if top >= d)
        base = c.removesuffix(unit)
        new = f"{base}{prefix}{'b' if unit == 'bytes_per_s' else 'flop'}_per_s"
        if new not in df.columns:
            df = df.with_columns((pl.col(c) / div).alias(c)).rename({c: new})
    return df


def readable_units(df: pl.DataFrame) -> pl.DataFrame:
    """`df` for reading: its numeric `_ns` columns in ms or µs (headers `_ms`/`_us`), one unit
    for all, chosen by their largest absolute value; other columns as they are."""
    ns = [c for c, dt in df.schema.items() if c.endswith("_ns") and dt.is_numeric()]
    tops = [t for c in ns if isinstance(t := df[c].abs().max(), (int, float))]
    if not tops:
        return df
    for suffix, div, floor in _NS_UNITS:
        names = {c: c.removesuffix("_ns") + suffix for c in ns}
        if max(tops) >= floor and not set(names.values()) & set(df.columns):
            return df.with_columns(pl.col(c) / div for c in ns).rename(names)
    return df


def without_redundant_ids(df: pl.DataFrame) -> pl.DataFrame:
    """`df` without `source_id` when its `file` column names each source once (the text view:
    the file is what a reader knows a source by)."""
    if not {"source_id", "file"} <= set(df.columns) or df.height == 0:
        return df
    pairs = df.select("source_id", "file").unique()
    if pairs["source_id"].n_unique() == pairs["file"].n_unique() == pairs.height:
        return df.drop("source_id")
    return df


# What the text output is made to fit: a 120-column terminal.
WIDTH = 120
MIN_TEXT = 28  # a name is never cut narrower than this: columns are left out first
MIN_PATH = 20  # nor a path (cut at its start, so its file name stays)
PATH_COLUMNS = frozenset({"file", "samples_file", "path", "end_file"})


PROSE_COLUMNS = frozenset({"description", "note", "cause", "details", "reason"})


def _words(v: str, n: int) -> str:
    """`v` in `n` characters, cut after its last whole word that fits, then '…'."""
    if len(v) <= n:
        return v
    cut = v[: n - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > n // 2 else cut).rstrip(" ,;:(") + "…"


def _floor(col: str) -> int:
    return max(MIN_PATH if col in PATH_COLUMNS else MIN_TEXT, len(col))


def _fit(widths: list[int], cols: list[str], numeric: list[bool], width: int) -> list[int]:
    """Narrow the widest text columns (never below `_floor`) until a row fits in `width`
    characters; numbers are never cut."""
    over = sum(widths) + 2 * (len(widths) - 1) - width
    text = sorted((i for i, n in enumerate(numeric) if not n), key=lambda i: -widths[i])
    out = list(widths)
    while over > 0:
        room = [i for i in text if out[i] > _floor(cols[i])]
        if not room:
            break
        i = max(room, key=lambda j: out[j])
        # Cut the widest down to the next widest (or as far as needed), one step at a time.
        others = [out[j] for j in room if j != i]
        floor = max(_floor(cols[i]), max(others) if others else 0)
        cut = min(over, max(out[i] - floor, 1))
        out[i] -= cut
        over -= cut
    return out


def _choose(widths: list[int], must: int, width: int) -> list[int]:
    """The columns shown: the first `must` (the command's answer columns) always, then each
    other one, in order, that still fits in `width` (a wide one left out does not hide the
    narrow ones after it)."""
    keep = list(range(min(max(must, 1), len(widths))))
    used = sum(widths[i] for i in keep) + 2 * (len(keep) - 1)
    for i in range(len(keep), len(widths)):
        if used + 2 + widths[i] <= width:
            keep.append(i)
            used += 2 + widths[i]
    return keep


def answers_first(df: pl.DataFrame, first: tuple[str, ...]) -> tuple[pl.DataFrame, int]:
    """`df` with the columns named in `first` (those it has) in front, and how many those are;
    before them what tells the rows' sources apart: `rank` when there is one, else `file`."""
    ident = ["rank"] if "rank" in df.columns else ["file"] if "file" in df.columns else []
    lead = [*ident, *(c for c in first if c in df.columns and c not in ident)]
    return df.select([*lead, *(c for c in df.columns if c not in lead)]), len(lead)


def file_header(df: pl.DataFrame, wide: bool = False) -> tuple[str | None, pl.DataFrame]:
    """One file: the `file` column (and `source_id`, unless `wide`) dropped, the file named in
    a line above the table. Several: each path column's files by their shortest distinct
    names."""
    if "file" in df.columns and df.height and df["file"].n_unique() == 1:
        name = df["file"][0]
        if name is not None:
            drop = ["file"] if wide else ["file", "source_id"]
            return f"file: {name}", df.drop(drop, strict=False)
    for c in PATH_COLUMNS & set(df.columns):
        if df.schema[c] == pl.String:
            short = distinct_files([v for v in df[c].unique().to_list() if v is not None])
            df = df.with_columns(pl.col(c).replace_strict(short, default=pl.col(c)))
    return None, df


def text_table(
    df: pl.DataFrame,
    *,
    max_width: int = 80,
    width: int | None = WIDTH,
    first: tuple[str, ...] = (),
) -> str:
    """A plain aligned table: the columns named in `first` (the command's answers) in front
    and always shown, numbers right-aligned and readable (`readable_numbers`), long strings
    abbreviated so that different values stay different (at `max_width` characters, and
    further so that a row fits in `width` columns when it can). Other columns are shown in
    order as far as they fit, those left out named in a last line; `source_id` when `file`
    names each source, and `file` when it is the same on every row (named above instead).
    `width=None`: every column, nothing cut but at `max_width`."""
    if df.width == 0:
        return "(no columns)"
    head, df = file_header(df, wide=width is None)
    df, must = answers_first(df if width is None else without_redundant_ids(df), first)
    df = readable_numbers(df)
    cols = df.columns
    raw = [[_cell(v) for v in r] for r in df.iter_rows()]
    schema = df.schema  # once: polars builds a new Schema at every `.schema`
    numeric = [schema[c].is_numeric() for c in cols]
    full = [max([len(c)] + [min(len(r[i]), max_width) for r in raw]) for i, c in enumerate(cols)]
    keep = list(range(len(cols)))
    if width is not None:
        keep = _choose(_fit(full, cols, numeric, width), must, width)
    while True:
        kc = [cols[i] for i in keep]
        widths = [full[i] for i in keep]
        if width is not None:
            widths = _fit(widths, kc, [numeric[i] for i in keep], width)
        rows, widths = _cut(raw, keep, kc, [numeric[i] for i in keep], widths)
        over = width is not None and sum(widths) + 2 * (len(widths) - 1) > width
        # an answer cut to make room for a column that is not one: that column goes first
        cut = any(widths[j] < full[i] for j, i in enumerate(keep[:must]) if not numeric[i])
        if not (over or cut) or len(keep) <= max(must, 1):
            break
        keep = keep[:-1]  # one optional column fewer
    dropped = [c for i, c in enumerate(cols) if i not in keep]
    shown_numeric = [numeric[i] for i in keep]

    def fmt(vals: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(vals, widths, shown_numeric, strict=False)
        ).rstrip()

    out = [head] if head else []
    out += [fmt(kc), fmt(["-" * w for w in widths])]
    out += [fmt(r) for r in rows]
    if not rows:
        out.append("(no rows)")
    if dropped:
        out.append(_more_columns(dropped, width or WIDTH))
    return "\n".join(out)


def _cut(
    raw: list[list[str]], keep: list[int], cols: list[str], numeric: list[bool], widths: list[int]
) -> tuple[list[list[str]], list[int]]:
    """The kept cells, text cut to its column's width; names cut so that different ones stay
    different (a column widens when that needs more room)."""
    rows = [[r[i] for i in keep] for r in raw]
    widths = list(widths)
    for j, c in enumerate(cols):
        if numeric[j] or not any(len(r[j]) > widths[j] for r in rows):
            continue
        full = [r[j] for r in rows]
        if c in PROSE_COLUMNS:  # sentences: cut at a word, at the end (issue 32: mid-word)
            vals = [_words(v, widths[j]) for v in full]
        else:
            vals = [abbreviate(v, widths[j], True) for v in full]  # a path keeps its end
            if c not in PATH_COLUMNS or len(set(vals)) < len(set(full)):
                vals = abbreviate_distinct(full, widths[j])
        for r, v in zip(rows, vals, strict=True):
            r[j] = v
        widths[j] = max([widths[j], *(len(v) for v in vals)])
    return rows, widths


def _more_columns(names: list[str], width: int) -> str:
    """The last line of a table that left columns out, in `width` characters."""
    line = f"(+{len(names)} columns: {', '.join(names)}; --wide or --json shows all)"
    if len(line) <= width:
        return line
    shown = list(names)
    while (
        shown and len(f"(+{len(names)} columns: {', '.join(shown)}, …; --wide or --json)") > width
    ):
        shown.pop()
    return f"(+{len(names)} columns: {', '.join(shown)}, …; --wide or --json)"


def per_source(tables: Mapping[str, pl.DataFrame], *, width: int | None = WIDTH) -> str:
    """Several per-source tables as text, grouped by source: the file once as a header, then
    that source's tables without their `source_id` and `file` columns. A `sources` table, when
    given, adds the format and tool to each header and gives the order of the sources."""
    info = tables.get("sources")
    files: dict[str, str] = {}
    for name, df in tables.items():
        if name != "sources" and "source_id" in df.columns and "file" in df.columns:
            files.update(dict(zip(df["source_id"].to_list(), df["file"].to_list(), strict=True)))
    meta: dict[str, str] = {}
    if info is not None:
        for r in info.iter_rows(named=True):
            sid = r["source_id"]
            files.setdefault(sid, r.get("path") or sid)
            tool = " ".join(str(x) for x in (r.get("tool"), r.get("tool_version")) if x)
            meta[sid] = ", ".join(x for x in (r.get("format"), tool) if x)
    # In the order of the `sources` table (the files' order as given), else by id.
    order = [str(x) for x in info["source_id"].to_list()] if info is not None else []
    order = [sid for sid in order if sid in files] + sorted(set(files) - set(order))
    # each table split by source once (a filter per source and table is quadratic)
    parts = {
        name: df.drop("file", strict=False).partition_by(
            "source_id", as_dict=True, include_key=False, maintain_order=True
        )
        for name, df in tables.items()
        if name != "sources" and "source_id" in df.columns
    }
    out: list[str] = []
    for sid in order:
        name = files[sid]
        if width is not None and len(name) > width - 3:
            name = "…" + name[4 - width :]
        out.append(f"== {name}")
        out.append("   " + ", ".join(x for x in (meta.get(sid), f"source {sid}") if x))
        for name, groups in parts.items():
            sub = groups.get((sid,))
            if sub is not None and sub.height:
                out += [f"-- {name.replace('_', ' ')}", text_table(sub, width=width)]
        out.append("")
    return "\n".join(out) + ("\n" if out else "")


def to_records(df: pl.DataFrame) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = df.to_dicts()
    for r in recs:  # JSON has no NaN
        for k, v in r.items():
            if isinstance(v, float) and math.isnan(v):
                r[k] = None
    return recs


def to_json(obj: pl.DataFrame | Mapping[str, Any]) -> str:
    if isinstance(obj, pl.DataFrame):
        return json.dumps(to_records(obj), indent=2, default=str)
    return json.dumps(
        {k: to_records(v) if isinstance(v, pl.DataFrame) else v for k, v in obj.items()},
        indent=2,
        default=str,
    )


def to_csv(df: pl.DataFrame) -> str:
    buf = io.StringIO()
    df.write_csv(buf)
    return buf.getvalue()
