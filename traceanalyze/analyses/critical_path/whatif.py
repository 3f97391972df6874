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

_WHAT_IF = re.compile(r"^(?:(kernel|op):(.+)|(launch))=([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)$")


@dataclass(frozen=True)
class WhatIf:
    """Scaling factors: (regex, factor) per kernel-name and operator-name rule, and launch."""

    kernel: tuple[tuple[str, float], ...] = ()
    op: tuple[tuple[str, float], ...] = ()
    launch: float = 1.0

    @property
    def empty(self) -> bool:
        return not self.kernel and not self.op and self.launch == 1.0


def parse_what_if(specs: Sequence[str]) -> WhatIf | None:
    """`kernel:REGEX=F`, `op:REGEX=F`, `launch=F` (repeatable; F >= 0). None when no spec."""
    if not specs:
        return None
    kernel: list[tuple[str, float]] = []
    op: list[tuple[str, float]] = []
    launch = 1.0
    for spec in specs:
        m = _WHAT_IF.match(spec.strip())
        if m is None:
            raise UsageProblem(
                f"bad what-if {spec!r}: expected kernel:REGEX=FACTOR, op:REGEX=FACTOR or "
                "launch=FACTOR (FACTOR a number >= 0)"
            )
        kind, rx, is_launch, f = m.group(1), m.group(2), m.group(3), float(m.group(4))
        if is_launch:
            launch *= f
            continue
        try:
            re.compile(rx)
        except re.error as e:
            raise UsageProblem(f"bad what-if {spec!r}: {e}") from None
        (kernel if kind == "kernel" else op).append((rx, f))
    return WhatIf(tuple(kernel), tuple(op), launch)


def factor(names: pl.Series, rules: tuple[tuple[str, float], ...]) -> np.ndarray[Any, Any]:
    """Product of the factors of the rules whose regex matches each name (each rule once)."""
    out = np.ones(names.len(), dtype=np.float64)
    for rx, f in rules:
        hit = names.fill_null("").str.contains(rx).to_numpy()
        out[hit] *= f
    return out
