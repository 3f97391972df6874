"""Issue 32, point 2: a kernel or operator name cut to fit a default table stays distinct from
every other name in that table. Before: four `elementwise_kernel` rows of the nsys H100 export,
two cudnn rows of `ops --by kernel` and rows of `launches --outliers` printed the same.

Over every shared trace with kernels: the command's default (120-column) table, read back by
its dash line, against the same command's --json rows (the same frame, the same order): two
rows print the same name only when their names are the same, and each printed name is its
own name cut with '…'.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from traceanalyze.cli import main

from .conftest import all_shared_files
from .test_answers_first import matches, tables

COMMANDS = [
    ("ops",),
    ("ops", "--by", "kernel"),
    ("launches", "--by-kernel"),
    ("launches", "--outliers"),
    ("annotations",),
]
NAMES = ("op", "kernel", "name", "annotation")
TRACES = [
    p
    for p in all_shared_files()
    if p.parent.name in {"kineto_json", "nsys_sqlite", "nvprof_sqlite"}
    or p.name.endswith("gputrace.csv")
]


@pytest.mark.skipif(not TRACES, reason="../shared/traces is absent (a fresh clone without it)")
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_no_two_names_print_the_same(trace) -> None:
    checked = 0
    for cmd in COMMANDS:
        runner = CliRunner()
        text = runner.invoke(main, [*cmd, str(trace)])
        if text.exit_code != 0:  # a command the trace cannot answer (no API calls, …)
            assert text.exit_code == 1 and "Traceback" not in text.output
            continue
        rows = json.loads(runner.invoke(main, [*cmd, str(trace), "--json"]).stdout)
        _, header, printed = tables(text.stdout)[0]  # the table --json gives, row for row
        assert len(printed) <= len(rows)
        for col in (c for c in NAMES if c in header):
            seen: dict[str, str] = {}
            for shown, row in zip((r[col] for r in printed), rows, strict=False):
                full = row[col]
                if full is None:
                    assert shown == "-"
                    continue
                assert shown == full or matches(shown, full), (cmd, col, shown, full)
                assert seen.setdefault(shown, full) == full, (cmd, col, shown, full, seen[shown])
                checked += 1
    checked += _summary_top_kernels(trace)
    assert checked > 0


def _summary_top_kernels(trace) -> int:
    """`summary`'s top kernels (before: four `elementwise_kernel` rows of the nsys H100 export
    printed the same)."""
    runner = CliRunner()
    text = runner.invoke(main, ["summary", str(trace)])
    assert text.exit_code == 0, text.output
    if "-- top kernels\n" not in text.stdout:
        return 0
    rows = json.loads(runner.invoke(main, ["summary", str(trace), "--json"]).stdout)
    full = [r["name"] for r in rows["top_kernels"]]
    _, _, printed = tables(text.stdout.split("-- top kernels\n", 1)[1])[0]
    shown = [r["name"] for r in printed]
    assert len(shown) == len(full)
    assert all(s == f or matches(s, f) for s, f in zip(shown, full, strict=True))
    assert len(set(shown)) == len(set(full))
    return len(shown)


def test_abbreviate_distinct_keeps_what_differs() -> None:
    from traceanalyze.analyses.naming import abbreviate, abbreviate_distinct

    a = "void at::native::elementwise_kernel<128, 4, AddFunctor<float>, Array<char*, 3>>(int)"
    b = a.replace("AddFunctor", "MulFunctor")
    assert abbreviate(a, 30) == abbreviate(b, 30)  # the plain cut loses the difference
    got = abbreviate_distinct([a, b, a], 30)
    assert got[0] == got[2] != got[1]
    assert "Add" in got[0] and "Mul" in got[1] and all(len(g) <= 30 for g in got)
    assert got[0].startswith("void at::")  # the start of the kernel's own name stays
    # a name that is a prefix of another: printed whole rather than the same
    c = "k" * 40
    assert len(set(abbreviate_distinct([c, c + "x"], 20))) == 2


def test_distinct_files_drop_what_every_path_shares() -> None:
    from traceanalyze.analyses.naming import distinct_files

    paths = [
        "a/NVIDIA/results/dgxa100_n8/resnet/result_1.txt",
        "a/NVIDIA/results/dgxa100_n128/resnet/result_1.txt",
    ]
    assert distinct_files(paths) == {paths[0]: "dgxa100_n8", paths[1]: "dgxa100_n128"}
    ranks = ["d/worker0_step_12.1545.pt.trace.json.gz", "d/worker7_step_12.1553.pt.trace.json.gz"]
    assert sorted(distinct_files(ranks).values()) == [
        "worker0_step_12.1545",
        "worker7_step_12.1553",
    ]
    assert distinct_files(["x/a.csv", "y/a.csv"]) == {"x/a.csv": "x", "y/a.csv": "y"}
