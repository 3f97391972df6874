"""Property: whatever is done to a real input's bytes, a reader returns schema-valid Tables or
raises a TraceanalyzeError (one line, naming the file), never anything else (issue 9).

Inputs are the real captures the bad-input corpus uses (tests/test_bad_inputs.py), mutated by
hypothesis: truncation, byte flips, insertions, deletions, duplicated slices. Each reader gets a
bounded number of examples so that the file runs in well under a minute.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_inputs import SUFFIX, raw_of

from traceanalyze import schema
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.readers import READERS

EXAMPLES = {"nsys_sqlite": 100, "nvprof_sqlite": 100}


@st.composite
def mutations(draw: st.DrawFn, size: int) -> list[tuple[str, int, int, bytes]]:
    ops = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["cut", "flip", "insert", "delete", "dup"]))
        a = draw(st.integers(0, max(size - 1, 0)))
        b = draw(st.integers(0, 64))
        data = draw(st.binary(min_size=1, max_size=16))
        ops.append((kind, a, b, data))
    return ops


def apply(raw: bytes, ops: list[tuple[str, int, int, bytes]]) -> bytes:
    out = bytearray(raw)
    for kind, a, b, data in ops:
        a = min(a, len(out))
        if kind == "cut":
            del out[a:]
        elif kind == "flip" and a < len(out):
            out[a] ^= data[0] or 0xFF
        elif kind == "insert":
            out[a:a] = data
        elif kind == "delete":
            del out[a : a + b + 1]
        elif kind == "dup":
            out[a:a] = out[a : a + b + 1]
    return bytes(out)


@pytest.mark.parametrize("fmt", list(SUFFIX))
def test_only_tables_or_traceanalyze_error(fmt: str, tmp_path: Path) -> None:
    raw = raw_of(fmt)
    reader = READERS[fmt]

    @settings(
        max_examples=EXAMPLES.get(fmt, 300),
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(ops=mutations(len(raw)))
    def prop(ops: list[tuple[str, int, int, bytes]]) -> None:
        p = tmp_path / ("in" + SUFFIX[fmt])
        p.write_bytes(apply(raw, ops))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                t = reader.read(p)
            except TraceanalyzeError as e:
                assert "\n" not in str(e) and str(p) in str(e)
                return
        for name, df in t.items():
            assert schema.validate(name, df, finalized=False) == [], name

    prop()
