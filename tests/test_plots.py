"""Plots through the Agg backend: a Figure is made, axes carry units, binning is stated."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import polars as pl  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from traceanalyze.analyses.timeline import lanes  # noqa: E402
from traceanalyze.plot._coreutil import coreutil_figure  # noqa: E402
from traceanalyze.plot._timeline import timeline_figure  # noqa: E402
from traceanalyze.plot._variability import variability_figure  # noqa: E402
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
    # The missing FP16 value of bs 16 is marked, not drawn as a zero; bs 8's 0 % FP16 is
    # written "0", so the two never look alike (issue 32). Bars in unit order: FP16 second.
    fp16 = ax.containers[1]
    marks = {round(t.get_position()[0], 6): t.get_text() for t in ax.texts}
    xs = [round(b.get_x() + b.get_width() / 2, 6) for b in fp16]
    assert [marks.get(x) for x in xs] == ["0", "n/a"] and len(marks) == 2
    assert png(fig).startswith(b"\x89PNG")


def _inside(inner, outer) -> bool:
    return (
        inner.x0 >= outer.x0 - 1
        and inner.y0 >= outer.y0 - 1
        and inner.x1 <= outer.x1 + 1
        and inner.y1 <= outer.y1 + 1
    )


def test_coreutil_figure_levels_on_their_own_axis_legend_outside_title_fits() -> None:
    df = pl.DataFrame(
        {
            "file": ["/long/path/to/profiled_data_ncu/batch_8.csv", "/x/nvprof_metrics.csv"],
            "batch_size": [8, None],
            "fma_pct": [10.0, 3.0],
            "fp16_pct": [0.0, 0.0],
            "tensor_pct": [40.0, None],
            "sfu_pct": [1.0, 0.0],
            "weight": ["none", "invocations"],
            "scale": ["pct", "level"],
        }
    )
    fig = coreutil_figure(df)
    pct, lvl = fig.axes
    assert pct.get_ylabel() == "pipe utilization (% of peak)"
    assert lvl.get_ylabel().startswith("nvprof utilization level")
    assert lvl.get_ylim() == (0.0, 10.5)
    assert [t.get_text() for t in pct.get_xticklabels()] == ["bs 8"]
    assert [t.get_text() for t in lvl.get_xticklabels()] == ["nvprof_metrics"]  # the stem
    assert "weighted by none" in pct.get_title() and "invocations" in lvl.get_title()
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    whole = fig.bbox
    legend = fig.legends[0].get_window_extent(r)
    for ax in (pct, lvl):
        assert not legend.overlaps(ax.get_window_extent(r))  # the legend covers no bars
        assert _inside(ax.title.get_window_extent(r), whole)
    title = fig._suptitle.get_window_extent(r)  # noqa: SLF001
    assert _inside(title, whole) and _inside(legend, whole)
    assert not legend.overlaps(title)
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


def test_timeline_iterations_and_held_telemetry() -> None:
    k = Tables.build(
        kernels=pl.DataFrame(
            {"device_id": [0], "stream_id": [7], "start_ns": [2_000_000], "end_ns": [8_000_000]}
        )
    ).kernels
    # Iteration 1 began before the window (0..10 ms shown from 1 ms); iteration 2 ends inside.
    its = pl.DataFrame(
        {"iteration": [1, 2], "start_ns": [-5_000_000, 4_000_000], "end_ns": [4_000_000, 9_000_000]}
    )
    # One sample 50 ms before the window and one after it: the held value must still show.
    s = pl.DataFrame(
        {"device_id": [0, 0], "timestamp_ns": [-50_000_000, 60_000_000], "power_w": [210.0, 250.0]}
    )
    fig = timeline_figure(
        lanes(k, None, start_ns=1_000_000, end_ns=10_000_000),
        t0_ns=1_000_000,
        t1_ns=10_000_000,
        iterations=its,
        samples=s,
    )
    top, power = fig.axes
    # Dashed lines at 4 ms (1 ends, 2 starts) and 9 ms (2 ends), in ms from the window start;
    # iteration 1's start is outside the window and not drawn.
    xs = sorted({float(ln.get_xdata()[0]) for ln in top.get_lines() if ln.get_linestyle() == "--"})
    assert xs == [3.0, 8.0]
    assert [t.get_text() for t in top.texts] == ["iter 1", "iter 2"]
    (step,) = [ln for ln in power.get_lines() if ln.get_linestyle() != "--"]
    assert list(step.get_ydata()) == [210.0, 250.0]  # 210 W held across the whole window
    lo, hi = power.get_xlim()
    assert lo < 0 < 9 < hi < 60


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


def test_variability_figure_without_telemetry_says_so_with_readable_labels() -> None:
    per = pl.DataFrame(
        {
            "source_id": ["e279d7280e73719e"],
            "file": ["/traces/kineto_json/hta_resnet50_rank0.pt.trace.json.gz"],
            "device_id": pl.Series([None], dtype=pl.Int64),
            "median_iteration_ms": [95.6],
            "median_sm_clock_mhz": pl.Series([None], dtype=pl.Float64),
            "median_power_w": pl.Series([None], dtype=pl.Float64),
            "median_temperature_c": pl.Series([None], dtype=pl.Float64),
            "perf_ratio": [1.0],
            "outlier": [False],
            "rank": [1],
        }
    )
    steady = pl.DataFrame(
        {
            "source_id": ["e279d7280e73719e"] * 2,
            "device_id": pl.Series([None, None], dtype=pl.Int64),
            "duration_ns": [95_000_000, 96_000_000],
        }
    )
    fig = variability_figure(per, steady)
    # the file's stem; no "GPU ?" when the iterations do not say which device (issue 32)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["hta_resnet50_rank0"]
    # No telemetry panels at all (issue 21: three empty ones), the box plots' label says why.
    assert len(fig.axes) == 1
    assert "no SM clock, power or temperature telemetry" in fig.axes[0].get_xlabel()


def test_coreutil_figure_one_panel_legend_clear_of_title() -> None:
    df = pl.DataFrame(
        {
            "file": ["/x/nvprof_metrics.csv"],
            "fma_pct": [3.0],
            "fp16_pct": [0.0],
            "tensor_pct": [None],
            "sfu_pct": [0.0],
            "weight": ["invocations"],
            "scale": ["level"],
        }
    )
    fig = coreutil_figure(df)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(r)
    title = fig._suptitle.get_window_extent(r)  # noqa: SLF001
    (ax,) = fig.axes
    assert not legend.overlaps(title) and not legend.overlaps(ax.get_window_extent(r))
    assert _inside(title, fig.bbox) and _inside(legend, fig.bbox)


def test_every_cli_figure_is_drawn_by_ta_plot_from_a_dataset_result(tmp_path: Path) -> None:
    """What `idle --plot`, `overlap --plot`, `ops --plot` and `roofline -o` draw, a notebook draws
    through the same call: `ta.plot.<name>(result, path)` on the Dataset method's result."""
    from conftest import shared

    import traceanalyze as ta

    ds = ta.open(shared("kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"))
    # NCCL kernels (one rank's SendRecv) for the overlap figure
    nccl = ta.open(shared("nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"))
    for name, result in (
        ("idle", ds.idle()),
        ("overlap", nccl.overlap()),
        ("ops", ds.ops(by="op")),
    ):
        out = tmp_path / f"{name}.png"
        fig = getattr(ta.plot, name)(result, out)
        assert out.read_bytes().startswith(b"\x89PNG"), name
        labels = [a.get_xlabel() + a.get_ylabel() for a in fig.axes]
        assert any("ms" in t or "%" in t for t in labels), (name, labels)
    # roofline: points from ncu counters (built inline: no shared capture has FLOP counters)
    res = ta.results.Roofline(
        pl.DataFrame({"name": ["k"], "flop_per_byte_ratio": [2.0], "achieved_flop_per_s": [1e12]}),
        67e12,
    )
    points, peak = res  # unpacks as the (points, peak) tuple `Dataset.roofline` returned before
    assert points.height == 1 and peak == 67e12
    ta.plot.roofline(res, tmp_path / "roofline.svg", bandwidth_gbps=3350)
    assert (tmp_path / "roofline.svg").read_text().startswith("<?xml")


def test_timeline_names_each_phase_of_each_step_above_the_operators() -> None:
    """Two 100 ms steps, each `data` 2 ms, `forward` 30, `backward` 50, `optimizer` 18 (ms), on
    host thread 4, over a binned operator lane: the steps and phases get their own rows above
    the operators, one coloured bar each, named inside where the name fits, and every phase is
    in the legend with its time (data: 2 × 2 ms, too narrow for its label)."""
    ms = 1_000_000
    phases = [("data", 2), ("forward", 30), ("backward", 50), ("optimizer", 18)]
    rows: list[tuple[str, int, int]] = []
    for step in (0, 1):
        t = step * 100 * ms
        rows.append((f"ProfilerStep#{step + 1}", t, t + 100 * ms))
        for name, dur in phases:
            rows.append((name, t, t + dur * ms))
            t += dur * ms
    mk = pl.DataFrame(rows, schema=["name", "start_ns", "end_ns"], orient="row")
    mk = mk.with_columns(thread_id=pl.lit(4, dtype=pl.Int64))
    ops = pl.DataFrame({"start_ns": range(0, 200 * ms, 40_000)}).with_columns(
        end_ns=pl.col("start_ns") + 30_000, thread_id=pl.lit(4, dtype=pl.Int64), name=pl.lit("op")
    )
    ln = lanes(Tables.build().kernels, None, ops=ops, markers=mk)
    fig = timeline_figure(ln, t0_ns=0, t1_ns=200 * ms, title="two steps")
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert ticks == [
        "CPU thread 4 annotations (2)",
        "CPU thread 4 annotations, depth 1 (8)",
        "CPU thread 4 ops (5,000, binned)",
    ]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert sorted(texts) == sorted(
        ["ProfilerStep#1", "ProfilerStep#2"] + ["forward", "backward", "optimizer"] * 2
    )
    [legend] = fig.legends
    assert legend.get_title().get_text() == "annotations by name (total time in the window)"
    assert [t.get_text() for t in legend.get_texts()] == [
        "ProfilerStep (200 ms)",
        "data (4.0 ms)",
        "forward (60.0 ms)",
        "backward (100 ms)",
        "optimizer (36.0 ms)",
    ]
    # One colour per name, the same in both steps.
    bars = fig.axes[0].collections[1]  # the depth-1 row
    colours = [tuple(c) for c in bars.get_facecolors()]
    assert len(set(colours)) == 4 and colours[:4] == colours[4:]
    assert png(fig).startswith(b"\x89PNG")
    # Nothing cut by the figure's edge: title, lane names, axis label, legend.
    r = FigureCanvasAgg(fig).get_renderer()
    ax = fig.axes[0]
    for a in [ax.title, ax.xaxis.label, *ax.get_yticklabels(), legend]:
        box = a.get_window_extent(r)
        assert box.x0 >= 0 and box.y0 >= 0, a
        assert box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, a
