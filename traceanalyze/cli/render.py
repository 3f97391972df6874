"""Turn analysis frames into text, CSV or JSON for the CLI. No column logic here."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from typing import Any

import polars as pl


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


# What the text output is made to fit: a 120-column terminal.
WIDTH = 120
MIN_TEXT = 16  # a text column is never cut narrower than this
PATH_COLUMNS = frozenset({"file", "samples_file", "path"})


def _fit(widths: list[int], cols: list[str], numeric: list[bool], width: int) -> list[int]:
    """Narrow the widest text columns (never below MIN_TEXT or their header) until a row fits
    in `width` characters; numbers are never cut."""
    over = sum(widths) + 2 * (len(widths) - 1) - width
    text = sorted((i for i, n in enumerate(numeric) if not n), key=lambda i: -widths[i])
    out = list(widths)
    while over > 0:
        room = [i for i in text if out[i] > max(MIN_TEXT, len(cols[i]))]
        if not room:
            break
        i = max(room, key=lambda j: out[j])
        # Cut the widest down to the next widest (or as far as needed), one step at a time.
        others = [out[j] for j in room if j != i]
        floor = max(MIN_TEXT, len(cols[i]), max(others) if others else 0)
        cut = min(over, max(out[i] - floor, 1))
        out[i] -= cut
        over -= cut
    return out


def text_table(df: pl.DataFrame, *, max_width: int = 80, width: int | None = WIDTH) -> str:
    """A plain aligned table: numbers right-aligned, long strings cut with '…' (at `max_width`
    characters, and further so that a row fits in `width` columns when it can)."""
    if df.width == 0:
        return "(no columns)"
    cols = df.columns
    rows = [[_cell(v) for v in r] for r in df.iter_rows()]
    numeric = [df.schema[c].is_numeric() for c in cols]
    widths = [max([len(c)] + [min(len(r[i]), max_width) for r in rows]) for i, c in enumerate(cols)]
    if width is not None:
        widths = _fit(widths, cols, numeric, width)
    # A path is cut at its start: the file's own name is what tells rows apart.
    tail = [c in PATH_COLUMNS for c in cols]
    for r in rows:
        for i, v in enumerate(r):
            if len(v) > widths[i]:
                n = widths[i] - 1
                r[i] = "…" + v[len(v) - n :] if tail[i] else v[:n] + "…"

    def fmt(vals: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(vals, widths, numeric, strict=True)
        ).rstrip()

    out = [fmt(cols), fmt(["-" * w for w in widths])]
    out += [fmt(r) for r in rows]
    if not rows:
        out.append("(no rows)")
    return "\n".join(out)


def per_source(tables: Mapping[str, pl.DataFrame], *, width: int = WIDTH) -> str:
    """Several per-source tables as text, grouped by source: the file once as a header, then
    that source's tables without their `source_id` and `file` columns. A `sources` table, when
    given, adds the format and tool to each header."""
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
    out: list[str] = []
    for sid in sorted(files):
        name = files[sid] if len(files[sid]) <= width - 3 else "…" + files[sid][4 - width :]
        out.append(f"== {name}")
        out.append("   " + ", ".join(x for x in (meta.get(sid), f"source {sid}") if x))
        for name, df in tables.items():
            if name == "sources" or "source_id" not in df.columns:
                continue
            sub = df.filter(pl.col("source_id") == sid).drop("source_id", "file", strict=False)
            if sub.height:
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
