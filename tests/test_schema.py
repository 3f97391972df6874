"""The schema is data; its docs are generated from it; every quantity carries a unit."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyze import schema
from traceanalyze.tables import Tables

from .conftest import ROOT


def test_docs_match_schema() -> None:
    doc = (ROOT / "docs" / "schema.md").read_text()
    assert doc.rstrip("\n") == schema.render_markdown().rstrip("\n"), (
        "docs/schema.md drifted from traceanalyze/schema.py; regenerate with "
        "`traceanalyze schema --markdown > docs/schema.md`"
    )


def test_every_numeric_column_has_a_unit_or_is_allow_listed() -> None:
    assert schema.unit_rule_violations() == []


def test_unit_rule_catches_a_bare_numeric_column(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = schema.Table("t", "x", (schema.Column("power", pl.Float64(), "no unit"),))
    monkeypatch.setitem(schema.TABLES, "t", bad)
    assert schema.unit_rule_violations() == ["t.power"]


def test_every_table_has_source_id_first() -> None:
    for t in schema.TABLES.values():
        assert t.columns[0].name == "source_id", t.name


def test_required_columns_from_the_issue_exist() -> None:
    need = {
        "sources": "source_id path format tool tool_version sha256 time_origin_epoch_ns",
        "devices": "device_id name uuid compute_capability sm_count",
        "kernels": "device_id stream_id correlation_id name start_ns end_ns duration_ns grid_x "
        "grid_y grid_z block_x block_y block_z registers_per_thread static_smem_bytes "
        "dynamic_smem_bytes",
        "memcpy": "device_id stream_id kind size_bytes start_ns end_ns duration_ns",
        "api_calls": "name start_ns end_ns thread_id",
        "ops": "name start_ns end_ns thread_id",
        "markers": "name start_ns end_ns thread_id",
        "kernel_metrics": "kernel_id process_id device_id name metric_name unit value",
        "gpu_samples": "device_id timestamp_ns sm_clock_mhz mem_clock_mhz power_w power_limit_w "
        "temperature_c fan_pct gpu_util_pct",
        "iterations": "device_id iteration start_ns duration_ns images_per_s",
    }
    for table, cols in need.items():
        missing = set(cols.split()) - set(schema.table(table).names)
        assert not missing, (table, missing)


def test_times_are_int64_ns() -> None:
    for t in schema.TABLES.values():
        for c in t.columns:
            if c.name.endswith("_ns"):
                assert c.dtype == pl.Int64, f"{t.name}.{c.name}"


def test_conform_orders_fills_and_casts() -> None:
    df = pl.DataFrame({"end_ns": [20], "kernel_id": [0], "start_ns": ["10"]})
    out = schema.conform("kernels", df)
    assert out.columns == schema.table("kernels").names
    assert out["start_ns"].to_list() == [10]
    assert out["duration_ns"].to_list() == [None]
    assert schema.validate("kernels", out, finalized=False) == []


def test_conform_rejects_unknown_columns_as_a_bug() -> None:
    with pytest.raises(ValueError, match="not in the schema"):
        schema.conform("kernels", pl.DataFrame({"bogus": [1]}))


def test_validate_reports_nulls_in_required_columns() -> None:
    df = schema.conform(
        "kernels", pl.DataFrame({"kernel_id": [None, 1]}, schema={"kernel_id": pl.Int64})
    )
    assert any("required" in p for p in schema.validate("kernels", df))


def test_tables_missing_tables_are_empty_with_full_schema() -> None:
    t = Tables.build(iterations=pl.DataFrame({"iteration": [1]}))
    for name, df in t.items():
        assert schema.validate(name, df, finalized=False) == []
    assert t.kernels.height == 0 and t.iterations.height == 1


def test_tables_are_frozen() -> None:
    t = Tables.empty()
    with pytest.raises(AttributeError):
        t.kernels = pl.DataFrame()  # type: ignore[misc]
