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


def text_table(df: pl.DataFrame, *, max_width: int = 80) -> str:
    """A plain aligned table: numbers right-aligned, long strings cut with '…'."""
    if df.width == 0:
        return "(no columns)"
    cols = df.columns
    rows = [[_cell(v) for v in r] for r in df.iter_rows()]
    numeric = [df.schema[c].is_numeric() for c in cols]
    for r in rows:
        for i, v in enumerate(r):
            if len(v) > max_width:
                r[i] = v[: max_width - 1] + "…"
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]

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
