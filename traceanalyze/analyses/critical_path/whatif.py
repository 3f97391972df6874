"""The what-if rules of the critical path (`critical_path --what-if`): parsed once, applied as a
factor per event name. Apart from `critical_path` so that `frames` can apply them without
importing the module that imports it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from ...errors import UsageProblem

_WHAT_IF = re.compile(r"^(?:(kernel|op|gpu-op):(.+)|(launch))=([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)$")


@dataclass(frozen=True)
class WhatIf:
    """Scaling factors: (regex, factor) per kernel-name rule, operator-name rule (the host time
    inside), GPU-operator rule (the kernels launched inside matching operators), and launch."""

    kernel: tuple[tuple[str, float], ...] = ()
    op: tuple[tuple[str, float], ...] = ()
    launch: float = 1.0
    gpu_op: tuple[tuple[str, float], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.kernel and not self.op and not self.gpu_op and self.launch == 1.0


def parse_what_if(specs: Sequence[str]) -> WhatIf | None:
    """`kernel:REGEX=F`, `op:REGEX=F`, `gpu-op:REGEX=F`, `launch=F` (repeatable; F >= 0).
    None when no spec."""
    if not specs:
        return None
    kernel: list[tuple[str, float]] = []
    op: list[tuple[str, float]] = []
    gpu_op: list[tuple[str, float]] = []
    launch = 1.0
    for spec in specs:
        m = _WHAT_IF.match(spec.strip())
        if m is None:
            raise UsageProblem(
                f"bad what-if {spec!r}: expected kernel:REGEX=FACTOR, op:REGEX=FACTOR, "
                "gpu-op:REGEX=FACTOR or launch=FACTOR (FACTOR a number >= 0)"
            )
        kind, rx, is_launch, f = m.group(1), m.group(2), m.group(3), float(m.group(4))
        if is_launch:
            launch *= f
            continue
        try:
            re.compile(rx)
        except re.error as e:
            raise UsageProblem(f"bad what-if {spec!r}: {e}") from None
        {"kernel": kernel, "op": op, "gpu-op": gpu_op}[kind].append((rx, f))
    return WhatIf(tuple(kernel), tuple(op), launch, tuple(gpu_op))


def factor(names: pl.Series, rules: tuple[tuple[str, float], ...]) -> np.ndarray[Any, Any]:
    """Product of the factors of the rules whose regex matches each name (each rule once)."""
    out = np.ones(names.len(), dtype=np.float64)
    for rx, f in rules:
        hit = names.fill_null("").str.contains(rx).to_numpy()
        out[hit] *= f
    return out


def gpu_op_factor(
    h: pl.DataFrame, thread: np.ndarray[Any, Any], call: np.ndarray[Any, Any], rules: Sequence[Any]
) -> np.ndarray[Any, Any]:
    """Per GPU event (`call`: its launch call's host index, -1 without one): the product of the
    factors of the `gpu-op` rules whose regex matches an operator (a host event that is not a
    call) on the launch call's thread whose interval holds the call's start: the GPU time of
    the kernels that operator launched, at any depth below it. `thread`: each host event's
    thread number."""
    out = np.ones(call.size, dtype=np.float64)
    start, end = h["start_ns"].to_numpy(), h["end_ns"].to_numpy()
    is_call = (h["kind"] == "call").to_numpy()
    names = h["name"].fill_null("")
    has = call >= 0
    for rx, f in rules:
        match = ~is_call & names.str.contains(rx).to_numpy()
        inside = np.zeros(start.size, dtype=bool)
        for t in np.unique(thread[match]):
            m = np.flatnonzero(match & (thread == t))
            order = np.argsort(start[m], kind="stable")
            s, e = start[m][order], np.maximum.accumulate(end[m][order])
            calls = np.flatnonzero(is_call & (thread == t))
            i = np.searchsorted(s, start[calls], side="right") - 1
            inside[calls] = (i >= 0) & (start[calls] < e[np.maximum(i, 0)])
        hit = np.zeros(call.size, dtype=bool)
        hit[has] = inside[call[has]]
        out[hit] *= f
    return out
