"""Analysis commands: coreutil, busy, timeline, attribute, variability, compare.

Each command reads either `--store DIR` or FILE arguments (read on the fly with
`traceanalyze.read`, nothing written), applies `--source`/`--device` filters, calls one library
function and prints a table, `--json` or `--csv`. Registered lazily in `cli._LAZY`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import polars as pl

from . import render
from .cli import emit, format_option, output_options, store_option
from .errors import NotAnswerable, TraceanalyzeError

# --- inputs ----------------------------------------------------------------------------------


class Frames:
    """The tables of a store or of files read in memory, filtered by source and device."""

    def __init__(
        self,
        scan: Callable[[str], pl.LazyFrame],
        sources: tuple[str, ...] = (),
        devices: tuple[int, ...] = (),
    ) -> None:
        self._scan = scan
        self.sources = list(sources)
        self.devices = list(devices)

    def scan(self, table: str) -> pl.LazyFrame:
        lf = self._scan(table)
        if self.sources:
            lf = lf.filter(pl.col("source_id").is_in(self.sources))
        if self.devices and "device_id" in lf.collect_schema().names():
            keep = pl.col("device_id").is_in(self.devices)
            if table in ("iterations", "markers"):
                # Host-side steps and annotations (no device) frame every device's work.
                keep = keep | pl.col("device_id").is_null()
            lf = lf.filter(keep)
        return lf

    def source_ids(self) -> list[str]:
        ids = self.scan("sources").select("source_id").collect()["source_id"].to_list()
        return sorted(str(i) for i in ids)


def load(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None = None,
    sources: tuple[str, ...] = (),
    devices: tuple[int, ...] = (),
) -> Frames:
    """FILE arguments or `--store`, exactly one of them."""
    if files and store_dir is not None:
        raise click.UsageError("give FILE arguments or --store, not both")
    if store_dir is not None:
        from .report import open_store

        st = open_store(store_dir)
        fr = Frames(st.scan, sources, devices)
    elif files:
        from .readers import read
        from .tables import Tables

        tables = Tables.concat([read(f, format=fmt) for f in files])
        fr = Frames(lambda t: tables[t].lazy(), sources, devices)
    else:
        raise click.UsageError("give FILE arguments or --store DIR")
    if sources:
        missing = sorted(set(sources) - set(fr.source_ids()))
        if missing:
            raise TraceanalyzeError(f"no such source(s): {', '.join(missing)}")
    return fr


def input_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--device", "devices", multiple=True, type=int, help="Only these device ids (repeatable)."
    )(f)
    f = click.option(
        "--source", "sources", multiple=True, help="Only these source ids (repeatable)."
    )(f)
    f = format_option(f)
    f = store_option(required=False)(f)
    return click.argument("files", nargs=-1, type=click.Path(exists=True, path_type=Path))(f)


def notes(f: Callable[..., Any]) -> Callable[..., Any]:
    """Library data-quality warnings become one `traceanalyze: note:` line each on stderr."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return f(*args, **kwargs)
            finally:
                for w in caught:
                    click.echo(f"traceanalyze: note: {w.message}", err=True)

    return wrapper


def _one_source(fr: Frames, what: str) -> str:
    ids = fr.source_ids()
    if len(ids) != 1:
        raise click.UsageError(
            f"{what} works on one source; pick one with --source ({', '.join(ids) or 'none'})"
        )
    return ids[0]


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=120)
    click.echo(f"wrote {path}", err=True)


# --- coreutil --------------------------------------------------------------------------------

COREUTIL_KEYS = [
    "file",
    "batch_size",
    "fma_pct",
    "fp16_pct",
    "tensor_pct",
    "sfu_pct",
    "launches",
    "weight",
]


@click.command()
@input_options
@click.option(
    "--weight",
    type=click.Choice(["cycles", "duration", "none"]),
    default="cycles",
    show_default=True,
    help="Per-launch weight: gpc__cycles_elapsed.max, gpu__time_duration.sum, or 1.",
)
@click.option("--by-kernel", is_flag=True, help="One row per kernel name instead of per file.")
@click.option("--plot", "plot", type=click.Path(path_type=Path), help="Grouped bars to PNG/SVG.")
@output_options
@notes
def coreutil(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    weight: str,
    by_kernel: bool,
    plot: Path | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """FMA, FP16, Tensor Core and SFU pipe utilization (ncu or nvprof metrics), per file.

    Cycle-weighted over all launches by default (the TBD suite's definition); batch size from
    `batch_<n>` in the file name. nvprof's *_fu_utilization levels (0-10) are shown with
    scale level_0_10.
    """
    from .analyses.coreutil import batch_size_from_name, core_utilization

    fr = load(files, store_dir, fmt, sources, devices)
    df = core_utilization(fr.scan("kernel_metrics"), weight=weight, by_kernel=by_kernel)
    paths = fr.scan("sources").select("source_id", "path").collect()
    df = df.join(paths, on="source_id", how="left").with_columns(
        pl.col("path")
        .map_elements(batch_size_from_name, return_dtype=pl.Int64)
        .alias("batch_size"),
        pl.coalesce(pl.col("path"), pl.col("source_id")).alias("file"),
    )
    df = df.sort(["batch_size", "file"], nulls_last=True)
    keys = COREUTIL_KEYS[:2] + (["name"] if by_kernel else []) + COREUTIL_KEYS[2:]
    if plot is not None:
        from .plots.coreutil import coreutil_figure

        _save(coreutil_figure(df), plot)
    emit(df.select(keys if out_json or out_csv else [*keys, "scale"]), out_json, out_csv)


# --- busy ------------------------------------------------------------------------------------


@click.command()
@input_options
@click.option("--start", "start_ms", type=float, help="Window start, ms after the source's start.")
@click.option("--end", "end_ms", type=float, help="Window end, ms after the source's start.")
@output_options
@notes
def busy(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    start_ms: float | None,
    end_ms: float | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Share of time at least one kernel (and one copy) ran, per source and device."""
    from .analyses.busy import busy_time

    fr = load(files, store_dir, fmt, sources, devices)
    window = None
    if start_ms is not None or end_ms is not None:
        _one_source(fr, "--start/--end")
        t0, t1 = _extent(fr)
        window = (
            t0 + round((start_ms or 0.0) * 1e6),
            t0 + round(end_ms * 1e6) if end_ms is not None else t1,
        )
    df = busy_time(fr.scan("kernels"), fr.scan("memcpy"), window=window)
    df = df.with_columns(
        (pl.col("window_ns") / 1e6).alias("window_ms"), (pl.col("busy_ns") / 1e6).alias("busy_ms")
    )
    emit(
        df.select(
            "source_id",
            "device_id",
            "activity",
            "interval_count",
            "window_ms",
            "busy_ms",
            "busy_pct",
        ),
        out_json,
        out_csv,
    )


def _extent(fr: Frames, tables: tuple[str, ...] = ("kernels", "memcpy")) -> tuple[int, int]:
    parts = [
        fr.scan(t).select(pl.col("start_ns").min().alias("a"), pl.col("end_ns").max().alias("b"))
        for t in tables
    ]
    ext = pl.concat(parts).collect()
    a, b = ext["a"].min(), ext["b"].max()
    if a is None or b is None:
        raise NotAnswerable(f"no {' or '.join(tables)} with start and end times")
    return int(a), int(b)  # type: ignore[arg-type]


# --- timeline --------------------------------------------------------------------------------


@click.command()
@input_options
@click.option(
    "-o", "--output", "output", type=click.Path(path_type=Path), help="Figure file (.png or .svg)."
)
@click.option(
    "--perfetto", type=click.Path(path_type=Path), help="Chrome trace JSON for ui.perfetto.dev."
)
@click.option("--start", "start_ms", type=float, help="Window start, ms after the source's start.")
@click.option("--end", "end_ms", type=float, help="Window end, ms after the source's start.")
@click.option("--iteration", type=int, help="Zoom on this iteration.")
@click.option(
    "--samples-from",
    "samples_from",
    help="Telemetry tracks from this other source (aligned via epoch origins).",
)
@click.option(
    "--max-bars",
    default=1500,
    show_default=True,
    help="Per lane, bin into busy fractions above this many intervals.",
)
@notes
def timeline(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    output: Path | None,
    perfetto: Path | None,
    start_ms: float | None,
    end_ms: float | None,
    iteration: int | None,
    samples_from: str | None,
    max_bars: int,
) -> None:
    """Kernels and copies per device/stream with iterations and SM clock/power/temperature.

    One source. Lanes with more intervals than --max-bars are drawn as busy-fraction density,
    and the figure says so.
    """
    from .analyses.timeline import iteration_window, lanes

    if output is None and perfetto is None:
        raise click.UsageError("give -o FIGURE and/or --perfetto TRACE.json")
    fr = load(files, store_dir, fmt, sources, devices)
    sid = _one_source(fr, "timeline")
    t_first, t_last = _extent(fr, ("kernels", "memcpy", "ops"))
    samples_all = _samples(fr, sid, samples_from)
    if iteration is not None:
        t0, t1 = iteration_window(fr.scan("iterations"), fr.scan("markers"), iteration)
    else:
        t0 = t_first + round(start_ms * 1e6) if start_ms is not None else t_first
        t1 = t_first + round(end_ms * 1e6) if end_ms is not None else t_last
    if perfetto is not None:
        from .export.perfetto import write_chrome_trace

        def win(t: str, col: str = "start_ns") -> pl.LazyFrame:
            return fr.scan(t).filter(pl.col(col).is_between(t0, t1) | (pl.col(col).is_null()))

        write_chrome_trace(
            perfetto,
            kernels=win("kernels"),
            memcpy=win("memcpy"),
            markers=win("markers"),
            gpu_samples=samples_all.filter(pl.col("timestamp_ns").is_between(t0, t1)),
            origin_ns=t0,
        )
        click.echo(f"wrote {perfetto}", err=True)
    if output is not None:
        from .plots.timeline import timeline_figure

        ln = lanes(
            fr.scan("kernels"),
            fr.scan("memcpy"),
            ops=fr.scan("ops"),
            start_ns=t0,
            end_ns=t1,
            max_bars=max_bars,
        )
        it = fr.scan("iterations").select("start_ns").drop_nulls().collect()["start_ns"]
        if it.len() == 0:  # no iteration times: PyTorch ProfilerStep#N ranges, if any
            steps = fr.scan("markers").filter(pl.col("name").str.starts_with("ProfilerStep#"))
            it = steps.select("start_ns").drop_nulls().collect()["start_ns"]
        bounds = [int(b) for b in it.to_list() if t0 <= b <= t1]
        samples = samples_all.filter(pl.col("timestamp_ns").is_between(t0, t1)).collect()
        title = f"source {sid}, {(t1 - t0) / 1e6:,.3f} ms from {(t0 - t_first) / 1e6:,.3f} ms"
        _save(
            timeline_figure(
                ln, t0_ns=t0, t1_ns=t1, boundaries_ns=bounds, samples=samples, title=title
            ),
            output,
        )


def _samples(fr: Frames, sid: str, samples_from: str | None) -> pl.LazyFrame:
    """The source's own samples, or another source's moved onto its clock (epoch origins)."""
    if samples_from is None:
        return fr.scan("gpu_samples")
    from .analyses.telemetry import align_samples

    other = Frames(fr._scan, (), tuple(fr.devices))
    srcs = other.scan("sources").filter(pl.col("source_id").is_in([sid, samples_from])).collect()
    if samples_from not in srcs["source_id"].to_list():
        raise TraceanalyzeError(f"no such source: {samples_from}")
    smp = other.scan("gpu_samples").filter(pl.col("source_id") == samples_from)
    return align_samples(smp, srcs, sid).lazy()


# --- attribute -------------------------------------------------------------------------------


@click.command()
@input_options
@click.option(
    "--per",
    type=click.Choice(["iteration", "kernel"]),
    default="iteration",
    show_default=True,
    help="Attribute telemetry to iterations or to kernels.",
)
@click.option(
    "--samples-from",
    "samples_from",
    help="Take telemetry from this other source (aligned via epoch origins).",
)
@output_options
@notes
def attribute(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    per: str,
    samples_from: str | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Time-weighted SM clock, power, temperature (and energy) per iteration or kernel.

    Samples are sample-and-hold; intervals with fewer than 2 samples or shorter than the median
    sampling period are flagged `coarse` and get no value.
    """
    from .analyses import telemetry as tel

    fr = load(files, store_dir, fmt, sources, devices)
    samples = fr.scan("gpu_samples")
    if samples_from is not None:
        samples = _samples(fr, _one_source(fr, "--samples-from"), samples_from)
    if per == "iteration":
        df = tel.attribute_iterations(fr.scan("iterations"), samples)
    else:
        df = tel.attribute_kernels(fr.scan("kernels"), samples)
    emit(df, out_json, out_csv)


# --- variability -----------------------------------------------------------------------------


@click.command()
@input_options
@click.option(
    "--warmup", type=int, default=None, help="Iterations to drop per GPU (default max(1, 10%))."
)
@click.option("--top", default=3, show_default=True, help="Top kernels (fleet-wide) to time.")
@click.option(
    "--plot", type=click.Path(path_type=Path), help="Box plots and perf-vs-telemetry to PNG/SVG."
)
@output_options
@notes
def variability(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    warmup: int | None,
    top: int,
    plot: Path | None,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Per GPU: steady-state iteration time, top kernels, clock/power/temp, outlier rank."""
    from .analyses import variability as v

    fr = load(files, store_dir, fmt, sources, devices)
    df = v.variability(
        fr.scan("iterations"), fr.scan("gpu_samples"), fr.scan("kernels"), warmup=warmup, top=top
    )
    if plot is not None:
        from .plots.variability import variability_figure

        steady = (
            v.steady_iterations(fr.scan("iterations"), warmup=warmup)
            .select("source_id", "device_id", "duration_ns")
            .collect()
        )
        _save(variability_figure(df, steady), plot)
    emit(df, out_json, out_csv)


# --- compare ---------------------------------------------------------------------------------


@click.command()
@click.argument("a")
@click.argument("b")
@store_option(required=False)
@format_option
@click.option("--device", "devices", multiple=True, type=int, help="Only these device ids.")
@click.option("--top", default=20, show_default=True, help="Kernel rows to print.")
@output_options
@notes
def compare(
    a: str,
    b: str,
    store_dir: Path | None,
    fmt: str | None,
    devices: tuple[int, ...],
    top: int,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Compare A and B: two source ids in --store, or two files / store directories.

    Kernels are matched by name, grid and block; match coverage is the share of each side's
    kernel time that matched. Deltas are B - A, ratios B / A.
    """
    from .analyses.compare import compare_kernels, compare_overview

    if out_json and out_csv:
        raise click.UsageError("--json and --csv are exclusive")
    fr = _compare_inputs(a, b, store_dir, fmt, devices)
    k, it, s = fr.scan("kernels"), fr.scan("iterations"), fr.scan("gpu_samples")
    ov = compare_overview(k, it, s, "A", "B")
    try:
        kc = compare_kernels(k, "A", "B")
    except NotAnswerable:
        kc = pl.DataFrame()
    if out_json:
        click.echo(render.to_json({"a": a, "b": b, "overview": ov, "kernels": kc}))
    elif out_csv:
        click.echo(render.to_csv(ov), nl=False)
    else:
        click.echo(f"A = {a}\nB = {b}\n== overview")
        click.echo(render.text_table(ov))
        if kc.height:
            click.echo(f"\n== kernels (top {min(top, kc.height)} of {kc.height} by time)")
            click.echo(render.text_table(kc.head(top)))


def _compare_inputs(
    a: str, b: str, store_dir: Path | None, fmt: str | None, devices: tuple[int, ...]
) -> Frames:
    from .tables import Tables

    if store_dir is not None:
        from .report import open_store

        st = open_store(store_dir)
        have = set(st.source_ids())
        missing = [x for x in (a, b) if x not in have]
        if missing:
            raise TraceanalyzeError(f"no such source(s): {', '.join(missing)}", path=store_dir)
        label = {a: "A", b: "B"}

        def scan(t: str) -> pl.LazyFrame:
            return (
                st.scan(t)
                .filter(pl.col("source_id").is_in([a, b]))
                .with_columns(pl.col("source_id").replace_strict(label, return_dtype=pl.String))
            )

        return Frames(scan, (), devices)
    sides = []
    for x, lab in ((a, "A"), (b, "B")):
        p = Path(x)
        if p.is_dir():
            from .report import open_store

            t = open_store(p).tables()
        elif p.is_file():
            from .readers import read

            t = read(p, format=fmt)
        else:
            raise TraceanalyzeError("no such file or store", path=x)
        sides.append(t.with_source_id(lab))
    both = Tables.concat(sides)
    return Frames(lambda t: both[t].lazy(), (), devices)
