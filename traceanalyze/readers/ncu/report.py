"""Nsight Compute `.ncu-rep` files through NVIDIA's optional `ncu_report` module: loading one,
and its numeric metrics as the long layout the CSV reader converts (`ncu_csv._read_report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from ...errors import MalformedInput, TraceanalyzeError
from ..common.core import PathLike


def _load_report(path: PathLike) -> tuple[Any, Any]:
    """(the `ncu_report` module, the loaded report); MalformedInput when either is missing."""
    try:
        import ncu_report
    except ImportError:
        raise MalformedInput(
            "reading .ncu-rep needs NVIDIA's ncu_report module (pip install ncu-report); "
            "or export the report as CSV with `ncu --import x.ncu-rep --csv --page raw "
            "> x.csv` and read that",
            path=path,
        ) from None
    if not Path(path).is_file() or Path(path).stat().st_size == 0:
        raise MalformedInput("empty or missing .ncu-rep file", path=path)
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as e:  # the extension raises plain Exceptions for unreadable reports
        raise MalformedInput(f"ncu_report cannot load the report ({e})", path=path) from None
    if ctx is None:
        raise MalformedInput("ncu_report cannot load the report", path=path)
    return ncu_report, ctx


# ncu_report of Nsight Compute 2022.3 (Debian 12's nsight-compute) has no `IMetric.unit()`;
# times and sizes need their units, which are never guessed.
_NO_UNITS = (
    "this ncu_report gives no metric units (no IMetric.unit(): Nsight Compute 2022.3 or older); "
    "use a newer one (pip install ncu-report), or export the report as CSV with "
    "`ncu --import x.ncu-rep --csv --page raw > x.csv` and read that"
)


def _report_long(ncu_report: Any, ctx: Any, path: PathLike) -> pl.DataFrame:
    """One row per numeric metric per launch: kernel_id, name, Metric Name/Unit/Value, _row."""
    kid: list[int] = []
    kname: list[str] = []
    names: list[str] = []
    units: list[str] = []
    values: list[float] = []
    n = 0
    # A report holds one action per profiled launch (thousands at most), and each action a few
    # hundred metrics; the per-metric calls into the extension are the only way to read them.
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            # Demangled, as the CSV's `Kernel Name` (ncu's default); name() alone is the
            # function name without its parameters.
            aname = action.name(action.NameBase_DEMANGLED)
            for m in action.metric_names():
                metric = action.metric_by_name(m)
                if metric is None or not metric.has_value():
                    continue
                if metric.kind() == ncu_report.IMetric.ValueKind_STRING:
                    continue
                if not hasattr(metric, "unit"):
                    raise TraceanalyzeError(_NO_UNITS, path=path)
                kid.append(n)
                kname.append(aname)
                names.append(m)
                units.append(metric.unit())
                values.append(float(metric.as_double()))
            n += 1
    if n == 0:
        # ncu_report "loads" any bytes as an empty report rather than failing.
        raise MalformedInput(
            "ncu_report cannot load any profiled kernel from this file (not an .ncu-rep, or "
            "an empty report)",
            path=path,
        )
    return pl.DataFrame(
        {
            "kernel_id": kid,
            "name": kname,
            "Metric Name": names,
            "Metric Unit": units,
            "_row": list(range(len(kid))),
            "Metric Value": [repr(v) for v in values],
        },
        schema={
            "kernel_id": pl.Int64,
            "name": pl.String,
            "Metric Name": pl.String,
            "Metric Unit": pl.String,
            "_row": pl.Int64,
            "Metric Value": pl.String,
        },
    )
