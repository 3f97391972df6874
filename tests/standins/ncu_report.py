"""A stand-in for NVIDIA's `ncu_report` module (PyPI `ncu-report`), for tests only.

It offers the part of the real module's API that the ncu reader (its `.ncu-rep` module) calls,
with the same names, signatures and value-kind constants as ncu-report 2026.3.1 (checked in
tests/test_ncu_report.py against a list taken from that release, and against the real module
where it is importable):

    load_report(file_name) -> IContext
    IContext.num_ranges(), IContext.range_by_idx(idx) -> IRange
    IRange.num_actions(), IRange.action_by_idx(idx) -> IAction
    IAction.name([name_base]), IAction.metric_names() -> tuple[str, ...],
    IAction.metric_by_name(name) -> IMetric | None, IAction.NameBase_{FUNCTION,DEMANGLED,MANGLED}
    IMetric.name(), .unit(), .kind(), .has_value(), .as_double(), .as_string(), .as_uint64(),
    IMetric.ValueKind_{UNKNOWN,ANY,STRING,FLOAT,DOUBLE,UINT32,UINT64}

A "report" here is JSON (the real one is NVIDIA's binary format)::

    {"ranges": [{"actions": [{"name": "k", "demangled": "k(float*)", "mangled": "_Z1kPf",
                              "metrics": {"gpu__time_duration.sum":
                                          {"unit": "nsecond", "kind": "UINT64", "value": 5}}}]}]}

A metric whose `value` is null has no value (`has_value()` False). Like the real module, a file
that is not a report loads as an empty report (no ranges) rather than failing, and a missing
file raises FileNotFoundError.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class IMetric:
    ValueKind_UNKNOWN = 0
    ValueKind_ANY = 1
    ValueKind_STRING = 2
    ValueKind_FLOAT = 3
    ValueKind_DOUBLE = 4
    ValueKind_UINT32 = 5
    ValueKind_UINT64 = 6

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self._name = name
        self._unit = str(spec.get("unit", ""))
        self._kind = getattr(IMetric, f"ValueKind_{spec.get('kind', 'DOUBLE')}")
        self._value = spec.get("value")

    def name(self) -> str:
        return self._name

    def unit(self) -> str:
        return self._unit

    def kind(self, *args: int) -> int:
        return self._kind

    def has_value(self, *args: int) -> bool:
        return self._value is not None

    def as_double(self, *args: int) -> float:
        try:  # the real module returns 0. for a value that cannot be cast
            return float(self._value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return 0.0

    def as_uint64(self, *args: int) -> int:
        return int(self.as_double())

    def as_string(self, *args: int) -> str:
        return "" if self._value is None else str(self._value)


class IAction:
    NameBase_FUNCTION = 0
    NameBase_DEMANGLED = 1
    NameBase_MANGLED = 2

    def __init__(self, spec: dict[str, Any]) -> None:
        self._names = {
            IAction.NameBase_FUNCTION: spec["name"],
            IAction.NameBase_DEMANGLED: spec.get("demangled", spec["name"]),
            IAction.NameBase_MANGLED: spec.get("mangled", spec["name"]),
        }
        self._metrics = {m: IMetric(m, s) for m, s in spec.get("metrics", {}).items()}

    def name(self, *args: int) -> str:
        return self._names[args[0] if args else IAction.NameBase_FUNCTION]

    def metric_names(self) -> tuple[str, ...]:
        return tuple(self._metrics)

    def metric_by_name(self, metric_name: str) -> IMetric | None:
        return self._metrics.get(metric_name)


class IRange:
    def __init__(self, spec: dict[str, Any]) -> None:
        self._actions = [IAction(a) for a in spec.get("actions", [])]

    def num_actions(self) -> int:
        return len(self._actions)

    def action_by_idx(self, idx: int) -> IAction:
        return self._actions[idx]


class IContext:
    def __init__(self, spec: dict[str, Any]) -> None:
        self._ranges = [IRange(r) for r in spec.get("ranges", [])]

    def num_ranges(self) -> int:
        return len(self._ranges)

    def range_by_idx(self, idx: int) -> IRange:
        return self._ranges[idx]


def load_report(file_name: str | Path) -> IContext:
    p = Path(file_name)
    if not p.is_file():
        raise FileNotFoundError(str(p))
    try:
        spec = json.loads(p.read_bytes())
    except (UnicodeDecodeError, ValueError):
        spec = {}
    return IContext(spec if isinstance(spec, dict) else {})
