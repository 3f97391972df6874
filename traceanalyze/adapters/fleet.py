"""Which GPUs may be compared as one fleet (`variability`): the runs of one system and model.

Issue 32: `variability` took ten different MLPerf systems (and, in the fleet notebook, an MI250,
a V100 and a CPU run) as one fleet and flagged a system as the outlier. A fleet here is the
GPU-runs (`adapters.ops.gpu_runs`: a collect run's iteration log and trace are one) that share
a label: the MLPerf `system` of its `runs` row, else its devices' names; runs with neither (a
CPU run, an nsys export without GPU tables) join the one fleet there is, or form their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ..errors import UsageProblem

if TYPE_CHECKING:
    from . import DatasetView

BY = ("system", "none")


def fleets(ds: DatasetView) -> dict[str, list[str]]:
    """label -> the source ids of the GPU-runs with that label, over the selected sources."""
    from .ops import gpu_runs

    runs = ds.scan("runs").select("source_id", "system").collect()
    system = {str(s): str(n) for s, n in runs.iter_rows() if n is not None}
    dev = ds.scan("devices").select("source_id", "name").unique().collect()
    names: dict[str, set[str]] = {}
    for sid, name in dev.iter_rows():
        if name is not None:
            names.setdefault(str(sid), set()).add(str(name))
    out: dict[str, list[str]] = {}
    unknown: list[str] = []
    for members in gpu_runs(ds).values():
        label = next((system[m] for m in members if m in system), None)
        gpus = sorted({n for m in members for n in names.get(m, ())})
        label = label or " + ".join(gpus) or None
        if label is None:  # no system or device named: no evidence it is another fleet
            unknown.extend(members)
        else:
            out.setdefault(label, []).extend(members)
    if unknown:
        label = next(iter(out)) if len(out) == 1 else "system and GPU unknown"
        out.setdefault(label, []).extend(unknown)
    return out


def check_one_fleet(groups: dict[str, list[str]], by: str | None) -> None:
    """Refuse several fleets unless `by` says how to take them, listing them."""
    if by is not None and by not in BY:
        raise UsageProblem(f"by must be one of {', '.join(BY)}, not {by!r}")
    if len(groups) < 2 or by is not None:
        return
    listed = "; ".join(
        f"{label} ({len(ids)} source{'s' if len(ids) > 1 else ''}: {', '.join(sorted(ids)[:3])}"
        f"{', …' if len(ids) > 3 else ''})"
        for label, ids in sorted(groups.items())
    )
    raise UsageProblem(
        f"variability compares GPUs of one system and model; these sources hold "
        f"{len(groups)}: {listed}. Choose one (source=ID), compare within each (by=system), "
        "or take them as one fleet anyway (by=none)"
    )


def label_rows(df: pl.DataFrame, groups: dict[str, list[str]]) -> pl.DataFrame:
    """`df` with a `system` column first: each row's fleet label."""
    of = {sid: label for label, ids in groups.items() for sid in ids}
    col = pl.col("source_id").replace_strict(of, default=None, return_dtype=pl.String)
    return df.with_columns(col.alias("system")).select("system", pl.exclude("system"))
