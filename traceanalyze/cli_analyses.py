"""Analysis commands: summary, coreutil, busy, timeline, attribute, variability, compare.

Each command reads either `--store DIR` or FILE arguments (read on the fly with
`traceanalyze.read`, nothing written), applies `--source`/`--device` filters, calls one library
function and prints a table, `--json` or `--csv`. Registered lazily in `cli._LAZY`. Sources are
named to the user by their file path (`sources.path`), not by their hash: a `file` column next to
`source_id` in tables, paths in notes, errors and figures.
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
from .analyses.naming import short_name, source_name, source_paths, with_file
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
        lf = self.scan_all(table)
        if self.sources:
            lf = lf.filter(pl.col("source_id").is_in(self.sources))
        return lf

    def scan_all(self, table: str) -> pl.LazyFrame:
        """Every source, device filter only: where telemetry for the selected sources may come
        from another source of the same run (aligned through epoch origins)."""
        lf = self._scan(table)
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

    def names(self) -> dict[str, str]:
        """source_id -> file path, over every source (messages may name any of them)."""
        return source_paths(self._scan("sources"))


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
        have = set(Frames(fr._scan).source_ids())
        missing = sorted(set(sources) - have)
        if missing:
            raise TraceanalyzeError(f"no such source(s): {', '.join(missing)}")
    return fr


def filter_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--source` and `--device`, the same on every analysis command."""
    f = click.option(
        "--device", "devices", multiple=True, type=int, help="Only these device ids (repeatable)."
    )(f)
    return click.option(
        "--source", "sources", multiple=True, help="Only these source ids (repeatable)."
    )(f)


def input_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = filter_options(f)
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
        names = fr.names()
        listed = ", ".join(f"{i} ({source_name(names, i)})" if i in names else i for i in ids)
        raise click.UsageError(
            f"{what} works on one source; pick one with --source ({listed or 'none'})"
        )
    return ids[0]


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=120)
    click.echo(f"wrote {path}", err=True)


# --- summary ---------------------------------------------------------------------------------


@click.command()
@input_options
@click.option("--top", default=10, show_default=True, help="Top kernels per source.")
@output_options
@notes
def summary(
    files: tuple[Path, ...],
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    top: int,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Per source: kernels, top kernels, copies, telemetry, iterations, measurement health.

    Health: requested vs achieved sampling interval, gaps, same-stream kernel overlaps, untimed
    events and negative durations per table, missing and duplicate iteration numbers.
    """
    from .report import summary_tables

    if out_csv:
        raise click.UsageError("summary has several tables; use --json, or query the store")
    fr = load(files, store_dir, fmt, sources, devices)
    names = fr.names()
    rep = {
        k: df if k == "sources" else with_file(df, names)
        for k, df in summary_tables(fr.scan, top=top).items()
    }
    if out_json:
        click.echo(render.to_json(rep))
        return
    for title, df in rep.items():
        if df.height == 0:
            continue
        click.echo(f"== {title.replace('_', ' ')}")
        click.echo(render.text_table(df))
        click.echo("")


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
    "scale",
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
    `batch_<n>` in the file name. `scale` says what the numbers are: "pct" (ncu, % of peak) or
    "level" (nvprof's *_fu_utilization, 0-10, weighted by invocations). A file without the
    needed metrics is reported on its own line after the others' rows (exit code 1).
    """
    from .analyses.coreutil import batch_size_from_name, core_utilization_each

    if out_json and out_csv:
        raise click.UsageError("--json and --csv are exclusive")
    fr = load(files, store_dir, fmt, sources, devices)
    srcs = fr.scan("sources").select("source_id", "path")
    if not files and not sources:
        # A whole store: only the sources that have kernel metrics are meant.
        with_km = fr.scan("kernel_metrics").select("source_id").unique()
        srcs = srcs.join(with_km, on="source_id", how="semi")
    expected = srcs.collect()
    if expected.height == 0:
        raise NotAnswerable("no source has kernel metrics (ncu --metrics or nvprof --metrics)")
    res = core_utilization_each(
        fr.scan("kernel_metrics"), weight=weight, by_kernel=by_kernel, sources=expected
    )
    df = res.table.join(expected, on="source_id", how="left").with_columns(
        pl.col("path")
        .map_elements(batch_size_from_name, return_dtype=pl.Int64)
        .alias("batch_size"),
        pl.coalesce(pl.col("path"), pl.col("source_id")).alias("file"),
    )
    df = df.sort(["batch_size", "file"], nulls_last=True)
    keys = COREUTIL_KEYS[:2] + (["name"] if by_kernel else []) + COREUTIL_KEYS[2:]
    if plot is not None and df.height:
        from .plots.coreutil import coreutil_figure

        _save(coreutil_figure(df), plot)
    if df.height or out_json or out_csv:
        emit(df.select(keys), out_json, out_csv)
    for file, reason in res.unanswered.select("file", "reason").iter_rows():
        click.echo(f"traceanalyze: error: {file}: {reason}", err=True)
    if res.unanswered.height:
        click.get_current_context().exit(1)


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
    out = df.select(
        "source_id",
        "device_id",
        "activity",
        "interval_count",
        "window_ms",
        "busy_ms",
        "busy_pct",
    )
    emit(with_file(out, fr.names()), out_json, out_csv)


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
@click.option(
    "--start",
    "start_ms",
    type=float,
    help="Window start, ms after the trace's first event (kernel, copy, op, marker, iteration).",
)
@click.option("--end", "end_ms", type=float, help="Window end, ms after the trace's first event.")
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

    One source. The default window spans everything drawn or exported (kernels, copies, host
    operators, markers, iterations); an interval belongs to a window when it overlaps it. Lanes
    with more intervals than --max-bars are drawn as busy-fraction density, and the figure says
    so. Telemetry: the source's own samples, or --samples-from, or else the samples of another
    source of the same run (epoch origins, overlapping in time, matching devices).
    """
    from .analyses import timeline as tl

    if output is None and perfetto is None:
        raise click.UsageError("give -o FIGURE and/or --perfetto TRACE.json")
    fr = load(files, store_dir, fmt, sources, devices)
    sid = _one_source(fr, "timeline")
    names = fr.names()
    t_first, t_last = tl.extent(
        fr.scan("kernels"),
        fr.scan("memcpy"),
        fr.scan("ops"),
        fr.scan("markers"),
        fr.scan("iterations"),
    )
    if iteration is not None:
        t0, t1 = tl.iteration_window(fr.scan("iterations"), fr.scan("markers"), iteration)
    else:
        t0 = t_first + round(start_ms * 1e6) if start_ms is not None else t_first
        t1 = t_first + round(end_ms * 1e6) if end_ms is not None else t_last
    if t1 <= t0:
        raise click.UsageError(f"empty window: --end must be after --start ({t0} >= {t1} ns)")
    samples_all = _samples(fr, sid, samples_from)
    if perfetto is not None:
        from .export.perfetto import write_chrome_trace

        write_chrome_trace(
            perfetto,
            kernels=tl.overlapping(fr.scan("kernels"), t0, t1),
            memcpy=tl.overlapping(fr.scan("memcpy"), t0, t1),
            markers=tl.overlapping(fr.scan("markers"), t0, t1),
            gpu_samples=tl.window_samples(samples_all, t0, t1, after=False, clip=True),
            api_calls=tl.overlapping(fr.scan("api_calls"), t0, t1),
            ops=tl.overlapping(fr.scan("ops"), t0, t1),
            devices=fr.scan("devices"),
            sources=fr.scan("sources"),
            origin_ns=t0,
        )
        click.echo(f"wrote {perfetto}", err=True)
    if output is not None:
        from .plots.timeline import timeline_figure

        ln = tl.lanes(
            fr.scan("kernels"),
            fr.scan("memcpy"),
            ops=fr.scan("ops"),
            markers=fr.scan("markers"),
            start_ns=t0,
            end_ns=t1,
            max_bars=max_bars,
        )
        spans = tl.iteration_spans(fr.scan("iterations"), fr.scan("markers"))
        samples = tl.window_samples(samples_all, t0, t1)
        if samples.height and set(samples["source_id"].unique().to_list()) != {sid}:
            # Telemetry from another file of the run: say which, next to the device.
            samples = samples.with_columns(
                pl.format(
                    "GPU {} · {}",
                    pl.col("device_id").cast(pl.String).fill_null("?"),
                    pl.col("source_id").replace_strict(
                        {k: short_name(v) for k, v in names.items()},
                        default=pl.col("source_id"),
                        return_dtype=pl.String,
                    ),
                ).alias("label")
            )
        where = source_name(names, sid).replace("\\", "/").rsplit("/", 1)[-1]
        title = f"{where}: {(t1 - t0) / 1e6:,.3f} ms from {(t0 - t_first) / 1e6:,.3f} ms"
        _save(
            timeline_figure(ln, t0_ns=t0, t1_ns=t1, iterations=spans, samples=samples, title=title),
            output,
        )


def _samples(fr: Frames, sid: str, samples_from: str | None) -> pl.LazyFrame:
    """Telemetry for source `sid`, on its clock: its own samples, `samples_from`'s, or those of
    sources paired with its kernels/copies by `telemetry.pair_samples` (epoch origins)."""
    from .analyses.telemetry import align_samples, pair_samples, paired_samples

    srcs = fr.scan_all("sources")
    if samples_from is not None:
        if samples_from not in set(Frames(fr._scan).source_ids()):
            raise TraceanalyzeError(f"no such source: {samples_from}")
        smp = fr.scan_all("gpu_samples").filter(pl.col("source_id") == samples_from)
        return align_samples(smp, srcs, sid).lazy()
    own = fr.scan("gpu_samples")
    if own.select(pl.len()).collect().item():
        return own
    work = pl.concat(
        [
            fr.scan(t).select("source_id", "device_id", "start_ns", "end_ns")
            for t in ("kernels", "memcpy")
        ]
    ).drop_nulls(["start_ns", "end_ns"])
    if work.select(pl.len()).collect().item() == 0:
        return own
    allsmp = fr.scan_all("gpu_samples")
    pairs = pair_samples(work, allsmp, srcs, what="kernels")
    return paired_samples(allsmp, pairs).drop("_g").unique()


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
    sampling period are flagged `coarse` and get no value. Telemetry comes from the interval's
    own source, or from another source of the same run whose epoch time span overlaps (an NVML or
    nvidia-smi log), matched by device; `samples_file` says which. --samples-from forces one.
    """
    from .analyses import telemetry as tel

    fr = load(files, store_dir, fmt, sources, devices)
    if samples_from is not None:
        _one_source(fr, "--samples-from")
        if samples_from not in set(Frames(fr._scan).source_ids()):
            raise TraceanalyzeError(f"no such source: {samples_from}")
    samples, srcs = fr.scan_all("gpu_samples"), fr.scan_all("sources")
    if per == "iteration":
        df = tel.attribute_iterations(
            fr.scan("iterations"), samples, sources=srcs, samples_from=samples_from
        )
    else:
        df = tel.attribute_kernels(
            fr.scan("kernels"), samples, sources=srcs, samples_from=samples_from
        )
    names = fr.names()
    df = with_file(with_file(df, names), names, "samples_source_id", "samples_file")
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
    """Per GPU: steady-state iteration time, top kernels, clock/power/temp, outlier rank.

    Telemetry is paired as in `attribute` (own samples, else an overlapping sample source of the
    same run by epoch origins and device). Robust z on the median iteration time: 1.4826·MAD,
    or 1.2533·mean absolute deviation when the MAD is 0 (`z_scale`); outlier when |z| > 3.5.
    """
    from .analyses import variability as v

    fr = load(files, store_dir, fmt, sources, devices)
    df = v.variability(
        fr.scan("iterations"),
        fr.scan_all("gpu_samples"),
        fr.scan("kernels"),
        warmup=warmup,
        top=top,
        sources=fr.scan_all("sources"),
    )
    names = fr.names()
    df = with_file(with_file(df, names), names, "samples_source_id", "samples_file")
    if plot is not None:
        from .plots.variability import variability_figure

        steady = (
            v.steady_iterations(fr.scan("iterations"), warmup=warmup)
            .select("source_id", "device_id", "duration_ns")
            .collect()
        )
        _save(variability_figure(df, steady), plot)
    if out_json or out_csv:
        emit(df, out_json, out_csv)
        return
    # Table: the fleet's top kernel names once above the table, not repeated in every row.
    name_cols = [c for c in df.columns if c.startswith("top") and c.endswith("_kernel")]
    for c in name_cols:
        kname = df[c].drop_nulls().to_list()
        click.echo(f"{c.removesuffix('_kernel')} = {kname[0] if kname else '?'}")
    emit(df.drop(name_cols), False, False)


# --- compare ---------------------------------------------------------------------------------


@click.command()
@click.argument("a")
@click.argument("b")
@store_option(required=False)
@format_option
@filter_options
@click.option("--top", default=20, show_default=True, help="Kernel rows to print in the table.")
@click.option(
    "--ops",
    "by_ops",
    is_flag=True,
    help="Match host operators by name with their kernels (added, removed, changed; coverage "
    "= share of self and kernel time on operators of both sides); see `traceanalyze ops`.",
)
@output_options
@notes
def compare(
    a: str,
    b: str,
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
    top: int,
    by_ops: bool,
    out_json: bool,
    out_csv: bool,
) -> None:
    """Compare A and B: two source ids in --store, or two files / store directories.

    Kernels are matched by name, grid and block; match coverage is the share of each side's
    kernel time that matched. Deltas are B - A, ratios B / A. A and B may be the same. With
    files or stores, --source keeps only those sources on each side; --device filters both.
    --csv prints two CSV tables: the overview, an empty line, then every kernel row.
    """
    from .analyses.compare import compare_kernels, compare_overview

    if out_json and out_csv:
        raise click.UsageError("--json and --csv are exclusive")
    fr, desc = _compare_inputs(a, b, store_dir, fmt, sources, devices)
    if by_ops:  # operators instead of kernels: `traceanalyze ops`' definitions
        from .cli_ops import print_ops_diff

        return print_ops_diff(fr.scan, desc, top, out_json, out_csv)
    k, it, s = fr.scan("kernels"), fr.scan("iterations"), fr.scan("gpu_samples")
    ov = compare_overview(k, it, s, "A", "B", names=desc)
    try:
        kc = compare_kernels(k, "A", "B", names=desc)
    except NotAnswerable:
        kc = pl.DataFrame()
    if out_json:
        click.echo(render.to_json({"a": desc["A"], "b": desc["B"], "overview": ov, "kernels": kc}))
    elif out_csv:
        click.echo(render.to_csv(ov), nl=False)
        if kc.height:
            click.echo("")
            click.echo(render.to_csv(kc), nl=False)
    else:
        click.echo(f"{desc['A']}\n{desc['B']}\n== overview")
        click.echo(render.text_table(ov))
        if kc.height:
            click.echo(f"\n== kernels (top {min(top, kc.height)} of {kc.height} by time)")
            click.echo(render.text_table(kc.head(top)))


def _compare_inputs(
    a: str,
    b: str,
    store_dir: Path | None,
    fmt: str | None,
    sources: tuple[str, ...],
    devices: tuple[int, ...],
) -> tuple[Frames, dict[str, str]]:
    """Both sides relabelled `A` and `B` (the same source may be both), and what each side is:
    `A = <id> (<path>)` for a store's source, `A = <path>` for a file or store directory."""
    sides: list[Callable[[str], pl.LazyFrame]] = []
    desc: dict[str, str] = {}
    if store_dir is not None:
        from .report import open_store

        if sources:
            raise click.UsageError(
                "A and B already name sources of --store; --source applies to files or stores"
            )
        st = open_store(store_dir)
        have = set(st.source_ids())
        missing = [x for x in dict.fromkeys((a, b)) if x not in have]
        if missing:
            raise TraceanalyzeError(f"no such source(s): {', '.join(missing)}", path=store_dir)
        names = source_paths(st.scan("sources"))
        for x, lab in ((a, "A"), (b, "B")):
            sides.append(functools.partial(_side_scan, st.scan, [x], lab))
            desc[lab] = f"{lab} = {x} ({source_name(names, x)})" if x in names else f"{lab} = {x}"
    else:
        for x, lab in ((a, "A"), (b, "B")):
            p = Path(x)
            if p.is_dir():
                from .report import open_store

                scan: Callable[[str], pl.LazyFrame] = open_store(p).scan
            elif p.is_file():
                from .readers import read

                t = read(p, format=fmt)
                scan = functools.partial(_tables_scan, t)
            else:
                raise TraceanalyzeError("no such file or store", path=x)
            ids = sorted(scan("sources").select("source_id").collect()["source_id"].to_list())
            keep = [i for i in ids if i in sources] if sources else ids
            if not keep:
                raise TraceanalyzeError(
                    f"none of the sources {', '.join(sources)} is in {lab}", path=x
                )
            sides.append(functools.partial(_side_scan, scan, keep, lab))
            desc[lab] = f"{lab} = {x}"

    def both(t: str) -> pl.LazyFrame:
        return pl.concat([side(t) for side in sides], how="vertical")

    return Frames(both, (), devices), desc


def _tables_scan(t: Any, table: str) -> pl.LazyFrame:
    return t[table].lazy()  # type: ignore[no-any-return]


def _side_scan(
    scan: Callable[[str], pl.LazyFrame], ids: list[str], label: str, table: str
) -> pl.LazyFrame:
    return (
        scan(table)
        .filter(pl.col("source_id").is_in(ids))
        .with_columns(pl.lit(label, dtype=pl.String).alias("source_id"))
    )
