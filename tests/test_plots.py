"""Plots through the Agg backend: a Figure is made, axes carry units, binning is stated."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import polars as pl  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from traceanalyze.analyses.timeline import lanes  # noqa: E402
from traceanalyze.plots.coreutil import coreutil_figure  # noqa: E402
from traceanalyze.plots.timeline import timeline_figure  # noqa: E402
from traceanalyze.plots.variability import variability_figure  # noqa: E402
from traceanalyze.tables import Tables  # noqa: E402


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_coreutil_figure() -> None:
    df = pl.DataFrame(
        {
            "file": ["batch_8.csv", "batch_16.csv"],
            "batch_size": [8, 16],
            "fma_pct": [10.0, 20.0],
            "fp16_pct": [0.0, None],
            "tensor_pct": [40.0, 50.0],
            "sfu_pct": [1.0, 2.0],
            "weight": ["cycles", "cycles"],
            "scale": ["pct", "pct"],
        }
    )
    fig = coreutil_figure(df)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "pipe utilization (% of peak)"
    assert "images per iteration" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["bs 8", "bs 16"]
    assert len(ax.patches) == 8  # 2 groups x 4 units
    assert png(fig).startswith(b"\x89PNG")


def test_timeline_figure_binned_is_said() -> None:
    n = 200
    k = Tables.build(
        kernels=pl.DataFrame(
            {
                "source_id": ["a"] * n,
                "kernel_id": range(n),
                "device_id": [0] * n,
                "stream_id": [7] * n,
                "start_ns": [i * 10 for i in range(n)],
                "end_ns": [i * 10 + 5 for i in range(n)],
            }
        )
    ).kernels
    s = pl.DataFrame(
        {
            "device_id": [0, 0],
            "timestamp_ns": [0, 1000],
            "sm_clock_mhz": [1400.0, 1500.0],
            "power_w": [200.0, 250.0],
            "temperature_c": [None, None],
        }
    )
    ln = lanes(k, None, max_bars=50)
    fig = timeline_figure(ln, t0_ns=0, t1_ns=2000, boundaries_ns=[1000], samples=s, title="t")
    axes = fig.axes
    assert len(axes) == 3  # lanes, SM clock, power (temperature all null: no track)
    assert "binned" in axes[0].get_title()
    assert "(200, binned)" in axes[0].get_yticklabels()[0].get_text()
    assert axes[1].get_ylabel() == "SM clock (MHz)" and axes[2].get_ylabel() == "power (W)"
    assert axes[-1].get_xlabel() == "time since window start (ms)"
    raw = timeline_figure(lanes(k, None, max_bars=500), t0_ns=0, t1_ns=2000, samples=None)
    assert "binned" not in raw.axes[0].get_title()
    assert png(fig).startswith(b"\x89PNG")


def test_variability_figure() -> None:
    per = pl.DataFrame(
        {
            "source_id": ["a", "b"],
            "device_id": [0, 0],
            "median_iteration_ms": [100.0, 120.0],
            "median_sm_clock_mhz": [1400.0, 1300.0],
            "median_power_w": [250.0, 240.0],
            "median_temperature_c": [60.0, 70.0],
            "perf_ratio": [1.1, 0.9],
            "outlier": [False, True],
            "rank": [2, 1],
        }
    )
    steady = pl.DataFrame(
        {
            "source_id": ["a", "a", "b"],
            "device_id": [0, 0, 0],
            "duration_ns": [100_000_000, 101_000_000, 120_000_000],
        }
    )
    fig = variability_figure(per, steady)
    labels = [a.get_ylabel() for a in fig.axes]
    assert labels[0] == "iteration time (ms)"
    assert labels[1:] == ["performance / fleet median (ratio)"] * 3
    assert [a.get_xlabel() for a in fig.axes[1:]] == [
        "median SM clock (MHz)",
        "median power (W)",
        "median temperature (°C)",
    ]
    assert "2 of 2 GPUs" in fig.axes[0].get_title()
    assert png(fig).startswith(b"\x89PNG")
