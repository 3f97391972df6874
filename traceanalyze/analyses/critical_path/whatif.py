"""Stage 6 of `critical_path`: the what-if's predicted times (`predict`, the entry): the
iteration's `predicted_ms` and `change_pct`, and its row of the what-if table (the split of the
what-if path). The rules themselves are parsed with the windows (`windows.parse_what_if`) and
applied as factors per event (`events.factor`, `events.gpu_op_factor`); the paths under them are
`path`'s."""

from __future__ import annotations

from typing import Any

from .path import Paths
from .split import Rows


def change_pct(base: float, new: float) -> float | None:
    """The what-if path's change against the trace's, in % (None for a path of no length)."""
    return 100.0 * (new - base) / base if base else None


def predict(rows: Rows, paths: Paths) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The stage's entry: the window's row with `predicted_ms` and `change_pct` added, and its
    row of the what-if table (None, and the row as it was, without a what-if)."""
    new = paths.new
    if new is None or rows.new_split is None:
        return rows.row, None
    change = change_pct(paths.base.length, new.length)
    row = rows.row | {"predicted_ms": new.length / 1e6, "change_pct": change}
    pred = {"source_id": row["source_id"], "iteration": row["iteration"]}
    pred |= {"path_ms": new.length / 1e6, "change_pct": change}  # said here too (issue 32)
    return row, pred | rows.new_split
