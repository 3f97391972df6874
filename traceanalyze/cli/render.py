"""Turn analysis frames into text, CSV or JSON for the CLI. No column logic here."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from typing import Any

import polars as pl

from ..analyses.naming import abbreviate


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
PATH_COLUMNS = frozenset({"file", "samples_file", "path"})


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


def _drop_to_fit(widths: list[int], width: int) -> int:
    """How many leading columns fit in `width` (at least one)."""
    used = 0
    for i, w in enumerate(widths):
        used += w + (2 if i else 0)
        if used > width:
            return max(i, 1)
    return len(widths)


def text_table(df: pl.DataFrame, *, max_width: int = 80, width: int | None = WIDTH) -> str:
    """A plain aligned table: numbers right-aligned, `_ns` columns in ms or µs (header says
    which), long strings abbreviated from the middle with '…' (at `max_width` characters, and
    further so that a row fits in `width` columns when it can). Columns that still do not fit
    are left out, named in a last line, and `source_id` when `file` names each source
    (`width=None`: every column, nothing cut but at `max_width`)."""
    if df.width == 0:
        return "(no columns)"
    df = readable_units(df if width is None else without_redundant_ids(df))
    cols = df.columns
    rows = [[_cell(v) for v in r] for r in df.iter_rows()]
    schema = df.schema  # once: polars builds a new Schema at every `.schema`
    numeric = [schema[c].is_numeric() for c in cols]
    widths = [max([len(c)] + [min(len(r[i]), max_width) for r in rows]) for i, c in enumerate(cols)]
    dropped: list[str] = []
    if width is not None:
        widths = _fit(widths, cols, numeric, width)
        keep = _drop_to_fit(widths, width)
        dropped, cols, widths = cols[keep:], cols[:keep], widths[:keep]
        rows = [r[:keep] for r in rows]
    tail = [c in PATH_COLUMNS for c in cols]
    for r in rows:
        for i, v in enumerate(r[: len(cols)]):
            if len(v) > widths[i]:
                r[i] = abbreviate(v, widths[i], tail[i])

    def fmt(vals: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(vals, widths, numeric, strict=False)
        ).rstrip()

    out = [fmt(cols), fmt(["-" * w for w in widths])]
    out += [fmt(r) for r in rows]
    if not rows:
        out.append("(no rows)")
    if dropped:
        out.append(_more_columns(dropped, width or WIDTH))
    return "\n".join(out)


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
