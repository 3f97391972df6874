"""A bad argument value reaching the library is a named `TraceanalyzeError` (`UsageProblem`),
never a bare ValueError: from the CLI it is one usage line and exit 2, never a traceback.

`attribute --per`, `ops --by` and `coreutil --weight` are click choices, so the CLI refuses a
bad value before the library sees it (tested below, too); the library call itself raises the
named error. `timeline --max-bars 0` reached the library and escaped as a ValueError.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze.analyses.coreutil import core_utilization
from traceanalyze.cli import main
from traceanalyze.errors import TraceanalyzeError, UsageProblem

from .conftest import shared

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
NVML = "smi_logs/roofline_custom_nvml_sampler_rtx5070.csv"
NCU = "ncu_csv/roofline_ncu2026.2_rtx5070_saxpy_long.csv"


def one_usage_line(args: list[str], *words: str) -> None:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    err = r.stderr
    assert "Traceback" not in err and "ValueError" not in err
    # click refuses a bad choice in its own words ("Error: Invalid value"); the library's
    # UsageProblem is the project's one line; both exit 2
    (line,) = [x for x in err.splitlines() if x.startswith(("Error:", "traceanalyze: error:"))]
    for w in words:
        assert w in line


def test_timeline_max_bars_zero(tmp_path: Path) -> None:
    p = shared(RESNET)
    with pytest.raises(UsageProblem, match="max_bars"):
        ta.open(p).timeline(max_bars=0)
    one_usage_line(["timeline", str(p), "-o", str(tmp_path / "t.png"), "--max-bars", "0"], "0")
    assert not (tmp_path / "t.png").exists()


def test_attribute_per() -> None:
    p = shared(NVML)
    with pytest.raises(UsageProblem, match="per must be 'iteration' or 'kernel', got 'step'"):
        ta.open(p).attribute(per="step")
    one_usage_line(["attribute", str(p), "--per", "step"], "--per", "step")


def test_ops_by() -> None:
    p = shared(RESNET)
    with pytest.raises(UsageProblem, match="by must be 'op' or 'kernel', not 'thread'"):
        ta.open(p).ops(by="thread")
    one_usage_line(["ops", str(p), "--by", "thread"], "--by", "thread")


def test_coreutil_weight() -> None:
    p = shared(NCU)
    km = ta.read(p).kernel_metrics.with_columns(pl.lit("s").alias("source_id"))
    with pytest.raises(UsageProblem, match="weight must be one of"):
        core_utilization(km, weight="flops")
    with pytest.raises(UsageProblem, match="weight must be one of"):
        ta.open(p).coreutil(weight="flops")
    one_usage_line(["coreutil", str(p), "--weight", "flops"], "--weight", "flops")


def test_usage_problem_is_a_traceanalyze_error() -> None:
    assert issubclass(UsageProblem, TraceanalyzeError)
    assert not issubclass(UsageProblem, ValueError)
