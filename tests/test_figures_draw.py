"""Issue 32, point 4: each figure drawn by the command the user ran, checked against the data
(bars drawn = rows; labels unique and uncut; no empty frame when the data has rows). The
figure is caught on its way to `ta.plot.save`."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

import traceanalyze.plot as plot
from traceanalyze.cli import main

from .conftest import shared
from .test_answers_first import dlrm_files, matches, mlperf_logs

RESNET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"


@pytest.fixture
def drawn(monkeypatch):
    """run(*args) -> the matplotlib Figure the command saved (and the file it wrote)."""
    figs = []
    real = plot.save

    def keep(fig, path):
        figs.append(fig)
        real(fig, path)

    monkeypatch.setattr(plot, "save", keep)

    def run(*args: object):
        r = CliRunner().invoke(main, [str(a) for a in args])
        assert r.exit_code == 0, r.output
        assert len(figs) == 1
        return figs.pop()

    return run


def bars(ax) -> list:
    from matplotlib.patches import Rectangle

    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() > 0]


def test_overlap_without_communication_draws_compute_not_an_empty_frame(drawn, tmp_path) -> None:
    """Before: an empty frame saying "no communication kernels or copies" while the trace has
    1,600 device-to-device copies (which are no communication, as the warning says)."""
    r = shared(RESNET)
    with gzip.open(r, "rt") as f:
        events = json.load(f)["traceEvents"]
    steps = {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    dtod = [e for e in events if e.get("cat") == "gpu_memcpy" and "DtoD" in e.get("name", "")]
    assert len(dtod) == 1600
    fig = drawn("overlap", r, "--plot", tmp_path / "o.png")
    ax = fig.axes[0]
    assert len(bars(ax)) == len(steps) == 5  # one bar per iteration: its compute time
    assert "No communication" in ax.get_title() and "peer or host copies" in ax.get_title()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(set(labels)) == len(labels)


def test_variability_labels_name_each_system_and_epochs_read_in_seconds(drawn, tmp_path) -> None:
    """Before: ten identical labels "result_1 · GPU ?" and an axis up to 400,000 ms."""
    logs = mlperf_logs()
    fig = drawn("variability", *logs, "--by", "none", "--plot", tmp_path / "v.png")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) == len(set(labels)) == len(logs)
    assert not any("result_1" in x or "GPU ?" in x for x in labels)
    systems = [p.parts[-3] for p in logs]
    for lab in labels:  # each label one system's name, cut with '…' at most
        assert sum(matches(lab, s) for s in systems) == 1, lab
    assert ax.get_ylabel() == "iteration time (s)"


def test_idle_bars_are_in_rank_order_and_labelled_by_rank(drawn, tmp_path) -> None:
    """Before: ranks in source-id order (4, 3, 5, 1, 6, 7, 0, 2) in bar figures."""
    files = dlrm_files()
    fig = drawn("idle", *files, "--plot", tmp_path / "i.png")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    ranks = []
    for f in files:
        with gzip.open(f, "rt") as fh:
            ranks.append(json.load(fh)["distributedInfo"]["rank"])
    assert [x.split(" · ")[0] for x in labels] == [f"rank {r}" for r in sorted(ranks)]


def test_ops_figure_ranks_by_what_it_draws(drawn, tmp_path) -> None:
    """Before: the demo's ops.png ranked by inclusive time but drew self time (empty rows; a
    legend entry with no bars)."""
    r = shared(RESNET)
    rows = json.loads(CliRunner().invoke(main, ["ops", str(r), "--top", "0", "--json"]).stdout)
    fig = drawn("ops", r, "--plot", tmp_path / "ops.png")
    ax = fig.axes[0]
    shown = [
        x
        for x in sorted(
            rows, key=lambda x: (x["kernel_inclusive_ns"], x["inclusive_ns"]), reverse=True
        )
        if x["kernel_inclusive_ns"] or x["inclusive_ns"]
    ][:15]
    labels = [t.get_text() for t in ax.get_yticklabels()][::-1]  # top row first
    assert len(labels) == len(set(labels)) == len(shown) == 15
    assert all(
        lab == x["op"] or matches(lab, x["op"]) for lab, x in zip(labels, shown, strict=True)
    )
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(ax.containers) == len(legend)  # a legend entry per drawn series, no more
    gpu = next(c for c in ax.containers if c.get_label() == "GPU: kernels launched inside")
    widths = [b.get_width() for b in gpu][::-1]
    assert widths == pytest.approx([x["kernel_inclusive_ns"] / 1e6 for x in shown])
    assert sum(w > 0 for w in widths) >= 10  # no row of empty bars at the top


def test_scaling_labels_neither_overprint_nor_cut(drawn, tmp_path) -> None:
    """Before: "95 %" and "100 %" overprinted at 8 accelerators, legend entries cut mid-word,
    a one-point family labelled "100 %"."""
    logs = mlperf_logs()
    table = json.loads(CliRunner().invoke(main, ["scaling", *map(str, logs), "--json"]).stdout)
    fig = drawn("scaling", *logs, "--plot", tmp_path / "s.png")
    ax = fig.axes[0]
    families: dict[tuple, list] = {}
    for row in table:
        families.setdefault((row["org"], row["accelerator_model"], row["framework"]), []).append(
            row
        )
    legend = [t.get_text().replace("\n", " ") for t in ax.get_legend().get_texts()]
    assert sorted(legend) == sorted(" · ".join(k) for k in families)  # whole, not cut
    notes = [(a.get_text(), a.xy) for a in ax.texts]
    expected = []
    for rows in families.values():
        rows = sorted(rows, key=lambda r: r["accelerators"])
        expected += [
            (f"{100 * r['efficiency']:.0f} %", (r["accelerators"], r["throughput_img_per_s"]))
            for r in rows[1:]  # the smallest count of each family is its 100 % base
        ]
    assert sorted(notes) == sorted(expected)
    assert len({xy for _, xy in notes}) == len(notes)  # no two at one point


def _logs_throughput(log) -> bool:
    """Whether the MLPerf log itself logs a throughput (a `throughput` record, or one inside
    `tracked_stats`), read with json from its `:::MLLOG` lines."""
    for line in log.read_text(errors="replace").splitlines():
        if ":::MLLOG" not in line:
            continue
        try:
            rec = json.loads(line.split(":::MLLOG", 1)[1])
        except ValueError:
            continue
        value = rec.get("value")
        if rec.get("key") == "throughput" or (
            rec.get("key") == "tracked_stats" and isinstance(value, dict) and "throughput" in value
        ):
            return True
    return False


def test_scaling_draws_derived_throughput_hollow(drawn, tmp_path) -> None:
    """Before: logged and derived throughput drawn alike."""
    logs = mlperf_logs()
    runs = json.loads(CliRunner().invoke(main, ["runs", *map(str, logs), "--json"]).stdout)
    logged = {}
    for log in logs:
        row = next(r for r in runs if r["file"] == str(log))
        logged[(row["accelerators"], row["throughput_img_per_s"])] = _logs_throughput(log)
    assert set(logged.values()) == {True, False}  # both kinds in the set
    ax = drawn("scaling", *logs, "--plot", tmp_path / "s.png").axes[0]
    points = {}
    for line in ax.lines:
        if line.get_marker() == "o" and len(line.get_xdata()) == 1:
            xy = (int(line.get_xdata()[0]), float(line.get_ydata()[0]))
            points[xy] = line.get_markerfacecolor() != "none"
    assert len(points) == len(logged)
    for (n, tp), filled in points.items():
        match = [v for (a, t), v in logged.items() if a == n and t == pytest.approx(tp)]
        assert match == [filled], (n, tp)
    assert "hollow: derived" in ax.get_legend().get_title().get_text()


def test_whole_trace_timeline_colours_binned_kernel_lanes(drawn, tmp_path) -> None:
    """Before: a whole-trace timeline drew its (binned) kernel lane one solid blue and the
    kernel legend had no swatches."""
    from matplotlib.colors import to_hex

    r = shared(RESNET)
    with gzip.open(r, "rt") as f:
        kernels = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == 4350  # > the default 1,500 bars: the lane is binned
    fig = drawn("timeline", r, "-o", tmp_path / "t.png")
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    row = next(i for i, t in enumerate(ticks) if "kernels" in t and "binned" in t)
    lane = next(
        c for c in ax.collections if abs(c.get_paths()[0].get_extents().y0 - (row - 0.4)) < 1e-6
    )
    used = {to_hex(c[:3]) for c in lane.get_facecolors()}
    legend = next(
        lg for lg in fig.legends if "kernels with the most time" in lg.get_title().get_text()
    )
    swatches = {to_hex(h.get_facecolor()[:3]) for h in legend.legend_handles}
    assert all(h.get_fill() for h in legend.legend_handles)  # swatches, not bare names
    assert used <= swatches and len(used) >= 3  # several kernels' colours, not one blue


NSYS_H100 = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"


def nvtx_names(path) -> set[str]:
    """The export's NVTX range names, PyTorch emit_nvtx's `, seq = N, op_id = N` dropped."""
    import re
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId"
        ).fetchall()
    finally:
        con.close()
    return {re.sub(r", (seq|op_id) = \d+", "", n).rstrip("0123456789# ") for (n,) in rows if n}


def test_nvtx_lanes_coloured_by_name_with_a_legend(drawn, tmp_path) -> None:
    """Before: the NVTX lanes of an nsys trace were one colour with no legend."""
    from matplotlib.colors import to_hex

    r = shared(NSYS_H100)
    names = nvtx_names(r)
    assert len(names) > 10  # more names than colours: the ones with the most time get one
    fig = drawn("timeline", r, "-o", tmp_path / "t.png")
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    rows = [i for i, t in enumerate(ticks) if "annotations" in t]
    assert rows  # the NVTX lanes (one per thread)
    used: set[str] = set()
    for c in ax.collections:
        if any(abs(c.get_paths()[0].get_extents().y0 - (i - 0.4)) < 1e-6 for i in rows):
            used |= {to_hex(f[:3]) for f in c.get_facecolors()}
    [legend] = [lg for lg in fig.legends if "annotations" in lg.get_title().get_text()]
    labels = [t.get_text().rsplit(" (", 1)[0] for t in legend.get_texts()]
    swatches = {to_hex(h.get_facecolor()[:3]) for h in legend.legend_handles}
    assert set(labels) - {"other annotations"} <= names and len(labels) == len(set(labels))
    assert "aten::linear" in labels  # the emit_nvtx ids dropped: one name, not one per call
    assert used <= swatches and len(used) >= 3  # colours by name, each in the legend


def test_coreutil_draws_a_zero_as_0_and_a_missing_metric_as_na(drawn, write, tmp_path) -> None:
    """Before: `coreutil.png` drew nothing for 0 % and nothing for a missing metric alike."""
    from .test_analyses_coreutil import CYC, DUR, FMA, FP16, HEADER_2020, TENSOR

    # Two files, two launches each: FP16 0 % on every launch, no SFU (XU) metric at all.
    launches = {16: [(0, 10.0, 40.0), (1, 30.0, 50.0)], 32: [(0, 20.0, 60.0), (1, 40.0, 70.0)]}
    files = []
    for bs, rows in launches.items():
        lines = [HEADER_2020]
        for kid, fma, tensor in rows:
            for m, unit, v in (
                (CYC, "cycle", "1000"),
                (DUR, "nsecond", "1500"),
                (FMA, "%", fma),
                (FP16, "%", 0.0),
                (TENSOR, "%", tensor),
            ):
                lines.append(
                    f'"{kid}","100","python","h","k{kid}","2024-Jul-13 19:18:31","1","7",'
                    f'"Command line profiler metrics","{m}","{unit}","{v}"'
                )
        files.append(write(f"batch_{bs}.csv", "\n".join(lines) + "\n"))
    fig = drawn("coreutil", *files, "--plot", tmp_path / "cu.png")
    [ax] = fig.axes
    units = {c.get_label(): c for c in ax.containers}
    assert list(units) == ["FMA", "FP16", "Tensor Core", "SFU"]
    assert all(len(c.patches) == len(launches) for c in units.values())  # bars = rows
    assert [t.get_text() for t in ax.get_xticklabels()] == ["bs 16", "bs 32"]
    # equal cycles: the weighted mean is the plain mean of the launches' values
    fma = [sum(r[1] for r in rows) / len(rows) for rows in launches.values()]
    assert [p.get_height() for p in units["FMA"].patches] == pytest.approx(fma)
    marks: dict[str, list[float]] = {}
    for t in ax.texts:
        marks.setdefault(t.get_text(), []).append(round(t.get_position()[0], 6))
    centre = {k: [round(p.get_x() + p.get_width() / 2, 6) for p in c] for k, c in units.items()}
    assert sorted(marks) == ["0", "n/a"]
    assert marks["0"] == centre["FP16"] and marks["n/a"] == centre["SFU"]
