"""Nsight Compute CSV: `ncu --csv …` (long, the "details" page) and `ncu --page raw --csv` (wide).

Producing commands (formats.md §4):

* `ncu --csv [--log-file f.csv] --metrics m1,m2 … <app>` or `ncu --csv --set full …`: one row per
  kernel launch × metric. Tested on the ncu 2026.2.1 captures in `../shared/traces/ncu_csv`
  (RTX 5070, UTF-8 BOM, application stdout before the header, CRLF, thousands separators) and
  on inline samples of the other header eras:
  * 2020.1/2020.2 (TBD suite): `ID, Process ID, Process Name, Host Name, Kernel Name,
    Kernel Time, Context, Stream, Section Name, Metric Name, Metric Unit, Metric Value`;
  * `--nvtx`: extra NVTX columns after `Host Name`, their cells holding doubled quotes;
  * newer (seen in 2026.2; the release that switched is unknown): `… Kernel Name, Context,
    Stream, Block Size, Grid Size, Device, CC, …`.
* `ncu --import x.ncu-rep --page raw --csv [--print-units base]`: one row per launch, the same
  identity columns, then one column per metric, and a units row after the header (§4.2).
* `.ncu-rep` files are read through NVIDIA's `ncu_report` module (PyPI `ncu-report`, an optional
  dependency) when it is importable; otherwise the error says to export the CSV with
  `ncu --import x.ncu-rep --csv --page raw`. That path was checked to import and load with
  ncu-report 2026.3.1 but not against a real report (none is available here).

Envelope (§4.1, §7.2): a UTF-8 BOM, application output and `==PROF==` / `==WARNING==` /
`==ERROR==` lines before the header and between rows are skipped. The header is the first line
whose first cell is `ID`; after it, only lines that start like a data row (a `"`, as ncu quotes
every cell) are kept, so stray stdout, blank lines and repeated headers are dropped (with a
warning; `==WARNING==`/`==ERROR==` texts are repeated as warnings). Kernel names never contain a
newline, so rows are located by line.

Values: thousands separators inside quoted numbers (`"134,221,568"`) are stripped before parsing;
`n/a` (a metric the chip does not support) is a null value. Non-numeric values (`--set full`
prints strings such as `CachePreferNone`) are not metrics with a number: those rows are dropped
with a warning naming the metrics (the device's display name is kept for the `devices` table).

Units (§4.1: the spelling changed across versions and `--print-units auto` scales per row): every
`Metric Unit` / units-row string is mapped to a base unit, per row, and the value converted:

* time → `ns` (`nsecond`, `usecond`, `msecond`, `second`, `ns`, `us`, `ms`, `s`);
* sizes → `bytes` with DECIMAL multiples (`byte`, `Kbyte` = 1e3, `Mbyte`, `Gbyte`, `Tbyte`):
  ncu prints `Driver Shared Memory Per Block` as `1.02 Kbyte/block` for 1,024 bytes and a
  32 KiB `Shared Memory Configuration Size` as `32.77 Kbyte`, which is 1000-based;
* frequencies → `Hz` (`hz`, `Khz`, `Mhz`, `Ghz`, any case);
* `a/b` compounds convert each part: a time in the denominator becomes per second
  (`Gbyte/second` → `bytes/s`, `cycle/nsecond` → `cycle/s`), other parts keep their name
  (`Kbyte/block` → `bytes/block`, `register/thread`, `inst/cycle`, `sector/request`);
* counts keep their name (`cycle`, `inst`, `warp`, `block`, `thread`, `sector`, `request`,
  `register`, `wavefront`, `flop`, `SM`, …), `%` stays `%`, an empty unit is a null unit;
* anything else is never guessed: on a metric that the reader or an analysis needs
  (`UNIT_NEEDED`: `gpu__time_duration`, `gpc__cycles_elapsed`, `launch__registers_per_thread`,
  `launch__shared_mem_per_block*`, the pipe metrics `sm__inst_executed_pipe_*` /
  `sm__pipe_*`, the FLOP counters `smsp__sass_thread_inst_executed_op_*`, `dram__bytes*`) it
  raises UnknownUnit naming the file, the line of the first row with it and the column; on
  any other metric the value is kept as printed, with its unit text as given (a Blackwell raw
  page's `launch__cluster_max_active` in `cluster`).

Output:

* `kernel_metrics`, long: `kernel_id` = ncu `ID` (0-based, per ncu session; a launch is
  `(process_id, kernel_id)`), `process_id`, `device_id` (`Device`, null before 2022), `name` =
  `Kernel Name` (demangled by ncu by default), `metric_name` verbatim, `unit` (base), `value`.
* `kernels`, one row per `(Process ID, ID)`: context/stream, grid/block from the `Grid Size` /
  `Block Size` tuples `"(256, 1, 1)"`, `duration_ns` from `gpu__time_duration.sum` when
  collected, `registers_per_thread` / smem from `launch__registers_per_thread` /
  `launch__shared_mem_per_block_{static,dynamic}` when collected. `start_ns`/`end_ns` are null:
  ncu replays kernels and gives no timeline (`Kernel Time` in 2020.x is a wall-clock string
  without a zone, not a duration, so it is not used).
* `devices` from `Device` + `CC` (`compute_capability`), plus `device__attribute_display_name` /
  `device__attribute_multiprocessor_count` when the raw page has them.
* `sources`: tool `ncu`; the CSV states no ncu version and no time origin.

In the raw page, the metric columns are those whose header contains `__` (every ncu metric name is
`<unit>__<counter>…`); the others are identity columns.

Finding the header, units row and data rows is in `ncu.locate`; loading `.ncu-rep` in
`ncu.report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ...errors import MalformedInput, MissingColumn, UnknownUnit
from ...tables import Tables
from ..common.core import TIME_TO_NS, PathLike, head_bytes, lazy_import, reader_entry, warn
from .locate import _HEADER_START, BOM, _Body, _locate, _read_bytes
from .report import _load_report, _report_long

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.csv as pacsv
else:  # imported on first use, so format detection stays light
    pa = lazy_import("pyarrow")
    pacsv = lazy_import("pyarrow.csv")

REP_MAGIC_SUFFIX = ".ncu-rep"

# Metrics whose unit must be known (converted, never kept as text): those the reader turns into
# `kernels` columns and those analyses read (coreutil: pipe percentages and its cycle/time
# weights; roofline: SASS FLOP counters, DRAM bytes, time). tests/test_ncu_csv.py checks that
# every metric name those analyses list matches.
UNIT_NEEDED = (
    r"^(gpu__time_duration|gpc__cycles_elapsed|launch__registers_per_thread"
    r"|launch__shared_mem_per_block|sm__inst_executed_pipe_|sm__pipe_"
    r"|smsp__sass_thread_inst_executed_op_|dram__bytes)"
)

# --- units ------------------------------------------------------------------------------------

# Size prefixes: decimal for ncu (see the module docstring for the evidence).
_SIZE_TO_BYTES: dict[str, float] = {
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "Tbyte": 1e12,
    "Pbyte": 1e15,
}
_FREQ_TO_HZ: dict[str, float] = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
# Counted things: the unit keeps its name.
_COUNT_UNITS: frozenset[str] = frozenset(
    {
        "cycle",
        "inst",
        "warp",
        "block",
        "thread",
        "sector",
        "request",
        "register",
        "wavefront",
        "flop",
        "SM",
        "sm",
        "instruction",
        "transaction",
        "pass",
        "event",
        "bit",
        "reg",
    }
)


def _atom(unit: str, *, denominator: bool) -> tuple[str, float] | None:
    """(base name, factor) of one unit word; None when unknown."""
    if unit in TIME_TO_NS:
        # In a denominator a time makes a rate: per second.
        return ("s", TIME_TO_NS[unit] / 1e9) if denominator else ("ns", TIME_TO_NS[unit])
    if unit in _SIZE_TO_BYTES:
        return ("byte" if denominator else "bytes"), _SIZE_TO_BYTES[unit]
    if unit.lower() in _FREQ_TO_HZ:
        return "Hz", _FREQ_TO_HZ[unit.lower()]
    if unit in _COUNT_UNITS:
        return unit, 1.0
    return None


def ncu_unit(unit: str | None) -> tuple[str | None, float] | None:
    """(base unit, factor) for an ncu unit string; None when unknown. Empty → (None, 1)."""
    if unit is None or not unit.strip():
        return None, 1.0
    u = unit.strip()
    if u == "%":
        return "%", 1.0
    parts = u.split("/")
    first = _atom(parts[0], denominator=False)
    if first is None:
        return None
    name, factor = first
    names = [name]
    for p in parts[1:]:
        a = _atom(p, denominator=True)
        if a is None:
            return None
        names.append(a[0])
        factor /= a[1]
    return "/".join(names), factor


def sniff(path: PathLike) -> bool:
    """An ncu header line (`"ID","Process ID",…`) in the first 64 KiB, or an `.ncu-rep` name."""
    if str(path).endswith(REP_MAGIC_SUFFIX):
        return True
    head = head_bytes(path, 65536)
    if b"\x00" in head:
        return False
    if head.startswith(BOM):
        head = head[3:]
    return _HEADER_START.search(head) is not None


# --- columnar parsing -------------------------------------------------------------------------


# Columns read from a file; the others (Process Name, Host Name, Section Name, Kernel Time, NVTX
# columns) are skipped by the parser.
_USED = (
    "ID",
    "Process ID",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
    "Metric Name",
    "Metric Unit",
    "Metric Value",
)
_INT_COLS = ("ID", "Process ID", "Context", "Stream", "Device")


def _parse(body: _Body, path: PathLike) -> pl.DataFrame:
    """The used columns via pyarrow's multithreaded CSV reader; integers typed while parsing
    when they can be (else as text, converted later with thousands separators stripped)."""
    names = [f"c{i}" for i in range(len(body.header))]
    wanted = {n: h for n, h in zip(names, body.header, strict=True) if h in _USED or "__" in h}
    # Duplicate header names are refused in read_ncu_csv (ncu never writes them).
    firsts: dict[str, str] = {}
    for n, h in wanted.items():
        firsts.setdefault(h, n)
    wanted = {n: h for h, n in firsts.items()}
    if len(body.data) == 0:
        return pl.DataFrame({h: pl.Series([], dtype=pl.String) for h in wanted.values()})
    typed = {n: (pa.int64() if h in _INT_COLS else pa.string()) for n, h in wanted.items()}
    text = {n: pa.string() for n in wanted}
    tbl = None
    for types in (typed, text):
        try:
            tbl = pacsv.read_csv(
                pa.py_buffer(body.data),
                read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 24),
                parse_options=pacsv.ParseOptions(newlines_in_values=False),
                convert_options=pacsv.ConvertOptions(
                    column_types=types,
                    include_columns=list(wanted),
                    strings_can_be_null=False,
                ),
            )
            break
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            why = str(e).split("\n")[0]
            if types is typed and "columns" not in why:
                continue  # an integer column with thousands separators or `n/a`: as text
            raise _bad_row(body, path, why, len(names)) from None
    assert tbl is not None
    df = pl.from_arrow(tbl)
    assert isinstance(df, pl.DataFrame)
    return df.rename(wanted)


def _bad_row(body: _Body, path: PathLike, why: str, width: int) -> MalformedInput:
    """Slow path after the fast parser failed: the line of the first row with a wrong width."""
    import csv

    line = None
    data = bytes(body.data).decode("utf-8", "replace")
    for i, text in enumerate(data.split("\n")):
        try:
            row = next(csv.reader([text]), [])
        except csv.Error as e:  # a lone CR inside an unquoted cell
            why = str(e)
            line = body.line_of(i)
            break
        if row and len(row) != width:
            line = body.line_of(i)
            break
    return MalformedInput(f"bad CSV row ({why}); header has {width} columns", path=path, line=line)


def _number(col: str) -> pl.Expr:
    """A numeric cell: thousands separators stripped, `n/a` and empty → null."""
    s = pl.col(col).str.strip_chars().str.replace_all(",", "", literal=True)
    return pl.when(s.is_in(["", "n/a", "N/A"])).then(None).otherwise(s)


def _int_column(df: pl.DataFrame, col: str, body: _Body, path: PathLike) -> pl.Series:
    if df.schema[col].is_integer():
        return df[col]
    s = df.select(_number(col)).to_series()
    out: pl.Series = s.cast(pl.Int64, strict=False)
    bad = (out.is_null() & s.is_not_null()).arg_true()
    if bad.len():
        i = int(bad[0])
        raise MalformedInput(
            f"not an integer: {df[col][i]!r}", path=path, line=body.line_of(i), column=col
        )
    return out


_UNIT_HELP = (
    "known: time nsecond/usecond/msecond/second, sizes byte/Kbyte/Mbyte/Gbyte, Hz, %, counts "
    "such as cycle/inst/warp, and a/b compounds of those"
)


_IDENTITY = {
    "ID": "kernel_id",
    "Process ID": "process_id",
    "Context": "context_id",
    "Stream": "stream_id",
    "Device": "device_id",
}


def _long_from_wide(df: pl.DataFrame, body: _Body, path: PathLike) -> pl.DataFrame:
    """Raw page → the long layout (`Metric Name`, `Metric Unit`, `Metric Value`, `_row`)."""
    assert body.units is not None
    metric_cols = [h for h in df.columns if "__" in h]
    id_cols = [h for h in df.columns if h not in metric_cols]
    unit_of = dict(zip(body.header, body.units, strict=True))
    units = pl.DataFrame(
        {"Metric Name": metric_cols, "Metric Unit": [unit_of[c] for c in metric_cols]}
    )
    long = df.with_row_index("_row").unpivot(
        index=["_row", *id_cols],
        on=metric_cols,
        variable_name="Metric Name",
        value_name="Metric Value",
    )
    return long.join(units, on="Metric Name", how="left")


def _convert(long: pl.DataFrame, body: _Body, path: PathLike, wide: bool) -> pl.DataFrame:
    """Add `unit` (base), `value` (float, converted); drop non-numeric values with a warning.

    Units are converted per row (`--print-units auto` may scale row by row) through a mapping
    built once per distinct unit string.
    """
    unit_col = pl.col("Metric Unit").fill_null("")
    base: dict[str, str | None] = {}
    factor: dict[str, float] = {}
    for u in long.select(unit_col.unique())["Metric Unit"].to_list():
        conv = ncu_unit(u)
        needed = (unit_col == u) & pl.col("Metric Name").str.contains(UNIT_NEEDED)
        if conv is None and not long.select(needed.any()).item():
            conv = u.strip(), 1.0  # a value the reader only keeps: its unit text as given
        if conv is None:
            first = long.filter(needed).row(0, named=True)
            if wide:  # the units row names it, under the metric's column
                line, column = body.units_line, str(first["Metric Name"])
            else:
                line, column = body.line_of(int(first["_row"])), "Metric Unit"
            raise UnknownUnit(
                f"unknown Nsight Compute unit {u!r} ({_UNIT_HELP})",
                path=path,
                line=line,
                column=column,
            )
        base[u], factor[u] = conv
    num = (
        pl.col("Metric Value")
        .str.replace_all(",", "", literal=True)  # thousands separators: "134,221,568"
        .cast(pl.Float64, strict=False)
    )
    long = long.with_columns(
        unit_col.replace_strict(base, return_dtype=pl.String).alias("unit"),
        (num * unit_col.replace_strict(factor, return_dtype=pl.Float64)).alias("value"),
    )
    if long["value"].null_count():
        # Slow path, only when some value is not a number: `n/a` (and empty) stay as null
        # values; text values (`CachePreferNone`) are not metrics with a number: dropped.
        na = pl.col("Metric Value").str.strip_chars().is_in(["", "n/a", "N/A"])
        text = pl.col("value").is_null() & ~na.fill_null(True)
        dropped = long.filter(text)
        if dropped.height:
            names = dropped["Metric Name"].unique(maintain_order=True).to_list()
            shown = ", ".join(names[:8]) + (" …" if len(names) > 8 else "")
            warn(
                f"{path}: dropped {dropped.height} ncu metric value(s) that are not numbers "
                f"({shown})"
            )
            long = long.filter(~text)
    return long


def _tuple3(col: str, prefix: str) -> list[pl.Expr]:
    """`"(256, 1, 1)"` → prefix_x/y/z."""
    g = pl.col(col).str.extract_groups(r"^\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)\s*$")
    return [
        g.struct.field(str(i + 1)).cast(pl.Int64).alias(f"{prefix}_{a}")
        for i, a in enumerate("xyz")
    ]


_KERNEL_METRICS = {
    "gpu__time_duration.sum": ("duration_ns", "ns"),
    "launch__registers_per_thread": ("registers_per_thread", "register/thread"),
    "launch__shared_mem_per_block_static": ("static_smem_bytes", "bytes/block"),
    "launch__shared_mem_per_block_dynamic": ("dynamic_smem_bytes", "bytes/block"),
}


@reader_entry("ncu_csv")
def read_ncu_csv(path: PathLike) -> Tables:
    """Read an Nsight Compute CSV (long or raw page) or, with `ncu_report`, an `.ncu-rep`."""
    if str(path).endswith(REP_MAGIC_SUFFIX):
        return _read_report(path)
    raw, offset = _read_bytes(path)
    if not raw[offset : offset + 65536].strip():
        raise MalformedInput("empty file", path=path)
    if b"\x00" in raw[:65536]:
        raise MalformedInput("binary data, not an Nsight Compute CSV", path=path)
    body = _locate(raw, path, offset)
    twice = sorted({h for h in body.header if body.header.count(h) > 1 and h})
    if twice:  # a match by name would be ambiguous (ncu never writes a column twice)
        raise MalformedInput(
            f"column {twice[0]!r} appears twice in the header",
            path=path,
            line=body.header_line,
            column=twice[0],
        )
    need = ["ID", "Process ID", "Kernel Name"]
    missing = [c for c in need if c not in body.header]
    if missing:
        raise MissingColumn(
            f"missing column(s) {', '.join(missing)} in the ncu CSV header",
            path=path,
            line=body.header_line,
            column=missing[0],
        )
    df = _parse(body, path)
    wide = body.units is not None
    if not wide:
        for c in ("Metric Name", "Metric Unit", "Metric Value"):
            if c not in df.columns:
                raise MissingColumn(f"missing column {c}", path=path, column=c)
    # Identity columns to integers (thousands separators allowed).
    ints = {
        out: _int_column(df, col, body, path) for col, out in _IDENTITY.items() if col in df.columns
    }
    df = df.with_columns(pl.Series(k, v) for k, v in ints.items()).with_columns(
        pl.col("Kernel Name").alias("name")
    )
    long = _long_from_wide(df, body, path) if wide else df.with_row_index("_row")
    devices = _devices(df, long)
    long = _convert(long, body, path, wide)
    id_out = [c for c in ("kernel_id", "process_id", "device_id") if c in long.columns]
    kernel_metrics = long.select(
        *id_out, "name", pl.col("Metric Name").alias("metric_name"), "unit", "value"
    )

    kernels = _kernel_rows(df, long)
    frames = {"sources": pl.DataFrame({"tool": ["ncu"]}), "kernels": kernels}
    frames["kernel_metrics"] = kernel_metrics
    if devices is not None:
        frames["devices"] = devices
    return Tables.build(**frames)


def _kernel_rows(df: pl.DataFrame, long: pl.DataFrame) -> pl.DataFrame:
    """The `kernels` table: launch identity, grid/block sizes, and the few metrics it carries."""
    # One kernels row per (process_id, kernel_id), in file order.
    key = ["process_id", "kernel_id"]
    kcols = [c for c in ("device_id", "context_id", "stream_id") if c in df.columns]
    geo: list[pl.Expr] = []
    if "Grid Size" in df.columns:
        geo += _tuple3("Grid Size", "grid")
    if "Block Size" in df.columns:
        geo += _tuple3("Block Size", "block")
    first_cols = [c for c in ("Grid Size", "Block Size") if c in df.columns]
    kernels = (
        df.select(*key, *kcols, "name", *first_cols)
        .unique(subset=key, keep="first", maintain_order=True)
        .select(*key, *kcols, "name", *geo)
    )
    picked = long.filter(pl.col("Metric Name").is_in(list(_KERNEL_METRICS)))
    for metric, (col, unit) in _KERNEL_METRICS.items():
        one = picked.filter((pl.col("Metric Name") == metric) & (pl.col("unit") == unit))
        if one.height:
            one = one.unique(subset=key, keep="first").select(
                *key, pl.col("value").round(0).cast(pl.Int64).alias(col)
            )
            kernels = kernels.join(one, on=key, how="left", maintain_order="left")
    return kernels


def _devices(df: pl.DataFrame, long: pl.DataFrame) -> pl.DataFrame | None:
    if "device_id" not in df.columns:
        return None
    cols = [pl.col("device_id")]
    if "CC" in df.columns:
        cols.append(pl.col("CC").str.strip_chars().alias("compute_capability"))
    dev = (
        df.select(cols)
        .drop_nulls("device_id")
        .unique("device_id", keep="first")
        .sort("device_id")
        .with_columns(pl.lit("NVIDIA").alias("vendor"))
    )
    extra = {
        "device__attribute_display_name": "name",
        "device__attribute_multiprocessor_count": "sm_count",
    }
    for metric, col in extra.items():
        hit = long.filter(pl.col("Metric Name") == metric).drop_nulls("device_id")
        if not hit.height:
            continue
        if col == "name":
            val = pl.col("Metric Value").str.strip_chars()
        else:
            val = _number("Metric Value").cast(pl.Float64, strict=False).cast(pl.Int64)
        vals = hit.unique("device_id", keep="first", maintain_order=True).select(
            "device_id", val.alias(col)
        )
        dev = dev.join(vals, on="device_id", how="left")
    return dev


# --- .ncu-rep through NVIDIA's ncu_report module (optional) ----------------------------------


def _read_report(path: PathLike) -> Tables:
    """An `.ncu-rep` via `ncu_report`: one kernel_metrics row per numeric metric per launch.

    `kernel_id` is the launch's index over all ranges, in report order (what the CSV's `ID`
    counts); `process_id` and `device_id` come from no metric and stay null.
    """
    ncu_report, ctx = _load_report(path)
    long = _report_long(ncu_report, ctx, path)
    body = _Body([], 0, None, None, b"", None, 0)
    long = _convert(long, body, path, True)
    kernels = long.unique("kernel_id", keep="first", maintain_order=True).select(
        "kernel_id", "name"
    )
    dur = long.filter(
        (pl.col("Metric Name") == "gpu__time_duration.sum") & (pl.col("unit") == "ns")
    ).select("kernel_id", pl.col("value").round(0).cast(pl.Int64).alias("duration_ns"))
    kernels = kernels.join(dur, on="kernel_id", how="left", maintain_order="left")
    return Tables.build(
        sources=pl.DataFrame({"tool": ["ncu"]}),
        kernels=kernels,
        kernel_metrics=long.select(
            "kernel_id", "name", pl.col("Metric Name").alias("metric_name"), "unit", "value"
        ),
    )
