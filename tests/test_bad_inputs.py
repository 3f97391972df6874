"""A bad-input corpus for every reader, made at test time from real captures (issue 9).

Each case mutates a real file (../shared/traces, fixtures/) in a known way and asserts the exact
outcome: the exception class and a distinctive part of its one-line message (which names the
file), or success with specific values and warnings. Nothing here is a committed blob. Expected
values are computed from the inputs directly (csv/json/sqlite3 by hand), not by the readers.

Rules the cases pin down (see `readers/common/core.py`):
* a row without a start time is an error naming the table and column (as Kineto's null `ts`);
  a row without an end keeps a null end and duration, with a warning with the count (as a
  Kineto complete event without `dur`);
* `end - start` that overflows int64 is an error naming the table and column;
* a required column missing or renamed is MissingColumn naming it;
* a name id that resolves to nothing is a warning with the count (names left null);
* telemetry outside `schema.PLAUSIBLE_RANGES` is set to null with a warning with the count.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import shutil
import sqlite3
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from conftest import FIXTURES, shared

from traceanalyze.errors import MalformedInput, MissingColumn, TraceanalyzeError, UnknownFormat
from traceanalyze.readers import read
from traceanalyze.tables import Tables

NVPROF_CSV = "nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv"
NVPROF_METRICS = "nvprof_csv/magus_matrixMul_gtx1080ti_metrics_all.csv"
NVPROF_SQL = "nvprof_sqlite/profilinglm_pytorch_lm_v100_pyprof_net.sql"
NSYS = "nsys_sqlite/nsysai_mock_torch_tiny_nsys2026.1.sqlite"
NCU = "ncu_csv/roofline_ncu2026.2_rtx5070_saxpy_long.csv"
KINETO = "kineto_json/hta_triton_a100_trace.json.gz"
SMI = "smi_logs/roofline_custom_nvml_sampler_rtx5070.csv"
ITERLOG = "iterlog-resnet50-cpu/iterations_bs2_rank0.csv"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
I64 = "start = -9223372036854775808, end = 9223372036854775807"  # duration would wrap to -1
SUFFIX = {
    "nvprof_csv": ".csv",
    "nvprof_sqlite": ".sql",
    "nsys_sqlite": ".sqlite",
    "ncu_csv": ".csv",
    "kineto_json": ".json",
    "smi_csv": ".csv",
    "iterlog": ".log",
}


# --- sources (small real inputs) -----------------------------------------------------------------


def nvprof_lines(rows: int = 40) -> list[str]:
    """The magus GPU trace: its 3 `==` lines, header, units row and the first `rows` rows."""
    return shared(NVPROF_CSV).read_text().splitlines()[: 5 + rows]


def smi_lines(rows: int = 40) -> list[str]:
    return shared(SMI).read_text().splitlines()[: 1 + rows]


def ncu_text() -> str:
    return shared(NCU).read_text(encoding="utf-8-sig")


def kineto_doc() -> dict:
    return json.loads(gzip.decompress(shared(KINETO).read_bytes()))


def iter_lines() -> list[str]:
    return (FIXTURES / ITERLOG).read_text().splitlines()


def raw_of(fmt: str) -> bytes:
    """The unmutated input of each format, as bytes."""
    if fmt == "nvprof_csv":
        return ("\n".join(nvprof_lines()) + "\n").encode()
    if fmt == "smi_csv":
        return ("\n".join(smi_lines()) + "\n").encode()
    if fmt == "ncu_csv":
        return ncu_text().encode()
    if fmt == "kineto_json":
        return gzip.decompress(shared(KINETO).read_bytes())
    if fmt == "iterlog":
        return (FIXTURES / ITERLOG).read_bytes()
    return shared({"nsys_sqlite": NSYS, "nvprof_sqlite": NVPROF_SQL}[fmt]).read_bytes()


# --- cases ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    fmt: str
    make: Callable[[Path], Path]  # writes the input under the given directory
    error: type[TraceanalyzeError] | None = None
    text: str = ""  # in the error message, or in a warning on success
    check: Callable[[Tables], None] | None = None
    detect: bool = False  # read without format=, so detection runs too


CASES: list[Case] = []


def case(fmt: str, id: str, make: Callable[[Path], Path], **kw: object) -> None:
    CASES.append(Case(f"{fmt}-{id}", fmt, make, **kw))  # type: ignore[arg-type]


def put(fmt: str, data: bytes | str, name: str = "in") -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        p = d / (name + SUFFIX[fmt])
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        return p

    return make


def derived(fmt: str, fn: Callable[[bytes], bytes | str]) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        return put(fmt, fn(raw_of(fmt)))(d)

    return make


def garbage(seed: int, n: int = 4096) -> bytes:
    return random.Random(seed).randbytes(n)


def rows_of(lines: list[str], skip: int) -> list[list[str]]:
    return list(csv.reader(lines[skip:]))


# Generic cases for every format: empty, blank, garbage, another format's bytes.
for fmt in SUFFIX:
    empty_err = {"nsys_sqlite": "StringIds", "nvprof_sqlite": "not an SQLite database"}
    case(fmt, "empty", put(fmt, b""), error=MalformedInput, text=empty_err.get(fmt, ""))
    # issue 32: an empty file is "empty file" with or without --format, not "no reader"
    case(fmt, "empty-detect", put(fmt, b""), error=MalformedInput, text="empty file", detect=True)
    for seed in (1, 2):
        case(fmt, f"garbage{seed}", put(fmt, garbage(seed)), error=MalformedInput)
        case(
            fmt,
            f"garbage{seed}-detect",
            put(fmt, garbage(seed)),
            error=UnknownFormat,
            text="no reader",
            detect=True,
        )
    case(fmt, "nul-bytes", put(fmt, b"\x00" * 1000), error=MalformedInput)
    case(fmt, "latin1-text", put(fmt, "caf\xe9 na\xefve\n".encode("latin-1")), error=MalformedInput)


def _other_format(fmt: str) -> Callable[[Path], Path]:
    other = "kineto_json" if fmt != "kineto_json" else "smi_csv"

    def make(d: Path) -> Path:
        return put(fmt, raw_of(other))(d)

    return make


for fmt in SUFFIX:
    case(fmt, "other-format", _other_format(fmt), error=MalformedInput)


# --- nvprof CSV ----------------------------------------------------------------------------------


def nvprof_with(fn: Callable[[list[str]], list[str]]) -> Callable[[Path], Path]:
    return lambda d: put("nvprof_csv", "\n".join(fn(nvprof_lines())) + "\n")(d)


def nvprof_kernels_expected(lines: list[str]) -> int:
    """Rows with a Device and a non-bracketed name: kernels (formats.md §1.2)."""
    rows = rows_of(lines, 3)
    h = rows[0]
    return sum(
        1 for r in rows[2:] if r[h.index("Device")] and not r[h.index("Name")].startswith("[")
    )


def _check_nvprof_rows(n_rows: int) -> Callable[[Tables], None]:
    def check(t: Tables) -> None:
        lines = nvprof_lines(n_rows)
        assert t.kernels.height == nvprof_kernels_expected(lines)

    return check


for keep in (0, 1, 7, 20, 33):  # truncated at a line boundary: fewer rows, no error
    case(
        "nvprof_csv",
        f"cut-at-row{keep}",
        lambda d, k=keep: put("nvprof_csv", "\n".join(nvprof_lines(k)) + "\n")(d),
        check=_check_nvprof_rows(keep),
    )
for frac in (0.35, 0.5, 0.66, 0.8, 0.93):  # truncated inside a row: an error naming the line

    def _cut_mid(raw: bytes, f: float = frac) -> bytes:
        i = int(len(raw) * f)
        while raw[i - 1 : i] in (b"\n", b",") or raw[i : i + 1] in (b"\n", b","):
            i += 1
        return raw[:i]

    case("nvprof_csv", f"cut-mid-{frac}", derived("nvprof_csv", _cut_mid), error=MalformedInput)
case(
    "nvprof_csv",
    "cut-in-header",
    nvprof_with(lambda ls: [*ls[:3], ls[3][:40]]),
    error=MalformedInput,
)
case(
    "nvprof_csv",
    "no-units-row",
    nvprof_with(lambda ls: ls[:4]),
    error=MalformedInput,
    text="units row",
)
for col in ("Start", "Duration", "Name", "Device"):
    case(
        "nvprof_csv",
        f"renamed-{col}",
        nvprof_with(lambda ls, c=col: [*ls[:3], ls[3].replace(f'"{c}"', f'"{c}X"'), *ls[4:]]),
        error=MissingColumn,
        text=f"column {col!r}",
        detect=col in ("Name",),
    )
for col in ("Duration", "Stream", "Name"):
    case(
        "nvprof_csv",
        f"duplicated-{col}",
        nvprof_with(lambda ls, c=col: [*ls[:3], ls[3].replace('"Context"', f'"{c}"'), *ls[4:]]),
        error=MalformedInput,
        text=f"column {col!r} appears twice",
    )


def _reorder(lines: list[str], perm: Callable[[int], list[int]], quote: int) -> list[str]:
    rows = rows_of(lines, 3)
    order = perm(len(rows[0]))
    out = io.StringIO()
    w = csv.writer(out, quoting=quote, lineterminator="\n")
    for r in rows:
        w.writerow([r[i] for i in order])
    return [*lines[:3], *out.getvalue().splitlines()]


def _same_as_original(t: Tables) -> None:
    ref = read(shared(NVPROF_CSV))
    n = t.kernels.height
    assert n == nvprof_kernels_expected(nvprof_lines())
    cols = ["name", "start_ns", "duration_ns", "grid_x", "block_x", "correlation_id"]
    assert t.kernels.select(cols).equals(ref.kernels.select(cols).head(n))


for name, perm in (
    ("reversed", lambda n: list(range(n))[::-1]),
    ("rotated", lambda n: [*range(3, n), 0, 1, 2]),
    ("name-first", lambda n: [n - 1, *range(n - 1)]),
):
    for qname, quote in (("quoted", csv.QUOTE_ALL), ("unquoted", csv.QUOTE_MINIMAL)):
        case(
            "nvprof_csv",
            f"columns-{name}-{qname}",
            nvprof_with(lambda ls, p=perm, q=quote: _reorder(ls, p, q)),
            check=_same_as_original,
            detect=True,
        )


def _set_cell(lines: list[str], row: int, col: str, value: str) -> list[str]:
    rows = rows_of(lines, 3)
    rows[row][rows[0].index(col)] = value
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n").writerows(rows)
    return [*lines[:3], *out.getvalue().splitlines()]


for label, col, value in (
    ("letters-in-start", "Start", "12x.5"),
    ("huge-duration", "Duration", "1e300"),
    ("nan-start", "Start", "nan"),
    ("letters-in-grid", "Grid X", "ten"),
):
    case(
        "nvprof_csv",
        label,
        nvprof_with(lambda ls, c=col, v=value: _set_cell(ls, 5, c, v)),
        error=MalformedInput,
        text="line",
    )
case(
    "nvprof_csv",
    "non-utf8-in-name",
    derived("nvprof_csv", lambda b: b.replace(b"matrixMulCUDA", b"matrix\xffMulCUDA", 1)),
    error=MalformedInput,
    text="not UTF-8",
)
case(
    "nvprof_csv",
    "unknown-time-unit",
    nvprof_with(lambda ls: [*ls[:4], ls[4].replace("ms,ms", "fortnight,ms", 1), *ls[5:]]),
    error=MalformedInput,
    text="fortnight",
)
case(
    "nvprof_csv",
    "gzipped",
    lambda d: put("nvprof_csv", gzip.compress(raw_of("nvprof_csv")))(d),
    check=_check_nvprof_rows(40),
    detect=True,
)
# A metric trace (`--metrics … --print-gpu-trace`, formats.md §0.3) whose header lost a metric
# name: found by the fuzzer (polars renamed the empty column and the lookup failed).
_INSTANCE = (
    '"Device","Context","Stream","Kernel","Correlation_ID","achieved_occupancy",""\n'
    ",,,,,,\n"
    '"Tesla V100 (0)","1","7","k()",12,0.5,3\n'
)
case(
    "nvprof_csv",
    "metric-trace-unnamed-column",
    put("nvprof_csv", _INSTANCE),
    error=MalformedInput,
    text="line 1: a metric column without a name in the header",
)
case(
    "nvprof_csv",
    "metric-trace",
    put("nvprof_csv", _INSTANCE.replace(',""', ',"sm_efficiency"')),
    check=lambda t: (
        None
        if sorted(t.kernel_metrics.select("metric_name", "value").rows())
        == [("achieved_occupancy", 0.5), ("sm_efficiency", 3.0)]
        else pytest.fail(str(t.kernel_metrics))
    ),
    detect=True,
)
case(
    "nvprof_csv",
    "metrics-duplicated-column",
    lambda d: put(
        "nvprof_csv",
        shared(NVPROF_METRICS).read_text().replace('"Min"', '"Max"', 1),
    )(d),
    error=MalformedInput,
    text="column 'Max' appears twice",
)


# --- ncu CSV -------------------------------------------------------------------------------------


def ncu_with(fn: Callable[[str], str]) -> Callable[[Path], Path]:
    return lambda d: put("ncu_csv", fn(ncu_text()))(d)


def _ncu_header_line(text: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines()) if ln.startswith('"ID"'))


for col in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit"):
    case(
        "ncu_csv",
        f"renamed-{col}",
        ncu_with(lambda t, c=col: t.replace(f'"{c}"', f'"{c}X"', 1)),
        error=MissingColumn,
        text=f"column {col!r}",
    )
case(
    "ncu_csv",
    "renamed-ID",
    ncu_with(lambda t: t.replace('"ID"', '"IDX"', 1)),
    error=MalformedInput,
    text='no Nsight Compute CSV header found (a row whose first cell is "ID"',
)
for frac in (0.9, 0.95, 0.98):

    def _cut(raw: bytes, f: float = frac) -> bytes:
        i = int(len(raw) * f)
        while raw[i - 1 : i] in (b"\n", b'"') or raw[i : i + 1] in (b"\n", b'"'):
            i += 1
        return raw[:i]

    case("ncu_csv", f"cut-mid-{frac}", derived("ncu_csv", _cut), error=MalformedInput)


def _ncu_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    return list(csv.reader(lines[_ncu_header_line(text) :]))


def _ncu_check_metrics(keep: int) -> Callable[[Tables], None]:
    def check(t: Tables) -> None:
        assert t.kernel_metrics.height == keep

    return check


for keep in (1, 5, 12):
    case(
        "ncu_csv",
        f"cut-at-row{keep}",
        ncu_with(lambda t, k=keep: "\n".join(t.splitlines()[: _ncu_header_line(t) + 1 + k]) + "\n"),
        check=_ncu_check_metrics(keep),
    )
case(
    "ncu_csv",
    "unknown-unit",
    ncu_with(lambda t: t.replace('"ns"', '"fortnight"', 1)),
    error=MalformedInput,
    text="fortnight",
)


# `--page raw --csv` (formats.md §4.2): a units row under the header, one column per metric.
_NCU_RAW = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum","dram__bytes.sum"\n'
    '"","","","","","","","","","","","ns","byte"\n'
    '"0","7","app","h","k()","1","7","(256, 1, 1)","(4, 1, 1)","0","9.0","1,024","2,048"\n'
)
case(
    "ncu_csv",
    "raw-page",
    put("ncu_csv", _NCU_RAW),
    check=lambda t: (
        None
        if sorted(t.kernel_metrics.select("metric_name", "value").rows())
        == [("dram__bytes.sum", 2048.0), ("gpu__time_duration.sum", 1024.0)]
        else pytest.fail(str(t.kernel_metrics))
    ),
    detect=True,
)
case(
    "ncu_csv",
    "raw-page-short-units-row",  # found by the fuzzer: zip(strict=True) raised ValueError
    put("ncu_csv", _NCU_RAW.replace(',"ns","byte"', ',"ns"')),
    error=MalformedInput,
    text="line 2: units row has 12 fields, header has 13",
)
case(
    "ncu_csv",
    "duplicated-column",
    ncu_with(lambda t: t.replace('"Context"', '"Stream"', 1)),
    error=MalformedInput,
    text="column 'Stream' appears twice",
)
case(
    "ncu_csv",
    "lone-cr-in-row",  # found by the fuzzer: csv.Error escaped the row diagnosis
    ncu_with(lambda t: t[: t.rfind('"ns"')] + "n\rs" + t[t.rfind('"ns"') + 4 :]),
    error=MalformedInput,
    text="bad CSV row",
)
case(
    "nvprof_csv",
    "lone-cr-in-header",  # found by the fuzzer: csv.Error escaped the header parse
    nvprof_with(lambda ls: [*ls[:3], ls[3].replace('"Size"', "Si\rze"), *ls[4:]]),
    error=MalformedInput,
    text="line 4",
)


# --- kineto JSON ---------------------------------------------------------------------------------


def kineto_with(fn: Callable[[dict], object]) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        doc = kineto_doc()
        out = fn(doc)
        return put("kineto_json", json.dumps(doc if out is None else out))(d)

    return make


def _kernel_event(doc: dict) -> dict:
    return next(e for e in doc["traceEvents"] if str(e.get("cat", "")).lower() == "kernel")


for frac in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99):
    case(
        "kineto_json",
        f"cut-{frac}",
        derived("kineto_json", lambda b, f=frac: b[: int(len(b) * f)]),
        error=MalformedInput,
    )
for depth in (5_000, 50_000):
    for where in ("args", "top"):

        def _deep(raw: bytes, n: int = depth, w: str = where) -> bytes:
            nest = b'{"a":' * n + b"1" + b"}" * n
            if w == "args":  # inside the first kernel's args
                i = raw.find(b'"args": {', raw.find(b'"cat": "kernel"'))
                return raw[: i + 9] + b'"x": ' + nest + b", " + raw[i + 9 :]
            return b'{"extra": ' + nest + b"," + raw[raw.find(b"{") + 1 :]

        case(
            "kineto_json",
            f"deep-{where}-{depth}",
            derived("kineto_json", _deep),
            error=MalformedInput,
            text="nested too deeply",
        )
for label, key, value, msg in (
    ("ts-string", "ts", "abc", "ts"),
    ("ts-null", "ts", None, "has no ts"),
    ("ts-huge", "ts", 1e300, "fits int64"),
    ("dur-huge", "dur", 1e300, "dur"),
    ("ts-list", "ts", [1, 2], ""),
):
    case(
        "kineto_json",
        label,
        kineto_with(lambda doc, k=key, v=value: _kernel_event(doc).__setitem__(k, v)),
        error=MalformedInput,
        text=msg,
    )
case(
    "kineto_json",
    "events-not-a-list",
    kineto_with(lambda doc: doc.__setitem__("traceEvents", {"a": 1})),
    error=MalformedInput,
)
case("kineto_json", "top-level-list", put("kineto_json", "[1, 2, 3]"), error=MalformedInput)
case(
    "kineto_json",
    "non-utf8-in-name",
    derived("kineto_json", lambda b: b.replace(b'"name": "', b'"name": "\xff\xfe', 1)),
    error=MalformedInput,
    text="UTF-8",
)
case(
    "kineto_json",
    "gzip-cut",
    lambda d: put("kineto_json", gzip.compress(raw_of("kineto_json"))[:700])(d),
    error=MalformedInput,
    text="truncated gzip",
)


def _kineto_kernels(t: Tables) -> None:
    doc = kineto_doc()
    n = sum(1 for e in doc["traceEvents"] if str(e.get("cat", "")).lower() == "kernel")
    assert t.kernels.height == n


case(
    "kineto_json",
    "unchanged-gzip",
    lambda d: put("kineto_json", shared(KINETO).read_bytes())(d),
    check=_kineto_kernels,
    detect=True,
)
case(
    "kineto_json",
    "bom",
    derived("kineto_json", lambda b: b"\xef\xbb\xbf" + b),
    check=_kineto_kernels,
    detect=True,
)


# --- nvidia-smi / NVML sampler -------------------------------------------------------------------


def smi_with(fn: Callable[[list[str]], list[str]]) -> Callable[[Path], Path]:
    return lambda d: put("smi_csv", "\n".join(fn(smi_lines())) + "\n")(d)


def _smi_set(lines: list[str], row: int, col: str, value: str) -> list[str]:
    head = lines[0].split(",")
    cells = lines[row].split(",")
    cells[head.index(col)] = value
    return [*lines[:row], ",".join(cells), *lines[row + 1 :]]


def _smi_nulled(col: str, row: int) -> Callable[[Tables], None]:
    def check(t: Tables) -> None:
        expect = [
            float(ln.split(",")[smi_lines()[0].split(",").index(col)]) for ln in smi_lines()[1:]
        ]
        expect[row - 1] = None  # type: ignore[call-overload]
        assert t.gpu_samples[col].to_list() == expect

    return check


_SMI_COLS = {"power_w": "power_w", "temperature_c": "temperature_c", "sm_clock_mhz": "sm_clock_mhz"}
for label, col, value in (
    ("temp-1e308", "temperature_c", "1e308"),
    ("temp-minus-300", "temperature_c", "-300"),
    ("power-negative", "power_w", "-64"),
    ("power-10kw", "power_w", "10000"),
    ("clock-20ghz", "sm_clock_mhz", "20000"),
    ("clock-negative", "sm_clock_mhz", "-1"),
):
    case(
        "smi_csv",
        label,
        smi_with(lambda ls, c=col, v=value: _smi_set(ls, 3, c, v)),
        text=f"1 {col} value(s) outside the plausible range",
        check=_smi_nulled(col, 3),
        detect=True,
    )
case(
    "smi_csv",
    "util-150",
    smi_with(lambda ls: _smi_set(ls, 2, "gpu_util_pct", "150")),
    text="1 gpu_util_pct value(s) outside the plausible range [0, 100]",
)
for label, col, value in (
    ("letters-in-power", "power_w", "12x"),
    ("bad-timestamp", "timestamp", "yesterday"),
):
    case(
        "smi_csv",
        label,
        smi_with(lambda ls, c=col, v=value: _smi_set(ls, 4, c, v)),
        error=MalformedInput,
    )
for col in ("timestamp",):
    case(
        "smi_csv",
        f"renamed-{col}",
        smi_with(lambda ls, c=col: [ls[0].replace(c, c + "X"), *ls[1:]]),
        error=MalformedInput,
    )
case(
    "smi_csv",
    "row-missing-field",
    smi_with(lambda ls: [*ls[:5], ",".join(ls[5].split(",")[:-1]), *ls[6:]]),
    error=MalformedInput,
)
for keep in (1, 10, 25):
    case(
        "smi_csv",
        f"cut-at-row{keep}",
        smi_with(lambda ls, k=keep: ls[: 1 + k]),
        check=lambda t, k=keep: None if t.gpu_samples.height == k else pytest.fail("rows"),
    )
case(
    "smi_csv",
    "gzipped",
    lambda d: put("smi_csv", gzip.compress(raw_of("smi_csv")))(d),
    check=lambda t: None if t.gpu_samples.height == 40 else pytest.fail("rows"),
    detect=True,
)


# Inline nvidia-smi --query-gpu logs (no real one is shipped; formats.md §6.1 layout).
_SMI_Q = "timestamp, index, power.draw [W], temperature.gpu\n"
case(
    "smi_csv",
    "nvidia-smi-implausible",
    put(
        "smi_csv",
        _SMI_Q + "2024/01/01 00:00:00.000, 0, 64.00 W, 1000\n"
        "2024/01/01 00:00:01.000, 0, -5.00 W, 40\n",
    ),
    text="1 temperature_c value(s) outside the plausible range [-50, 200] (first: 1000.0)",
    check=lambda t: (
        None
        if t.gpu_samples.select("power_w", "temperature_c").rows() == [(64.0, None), (None, 40.0)]
        else pytest.fail(str(t.gpu_samples))
    ),
)
case(
    "smi_csv",
    "nvidia-smi-duplicated-field",
    put(
        "smi_csv",
        _SMI_Q.replace("\n", ", power.draw [W]\n") + "2024/01/01 00:00:00.000, 0, 64 W, 40, 3 W\n",
    ),
    error=MalformedInput,
    text="repeated nvidia-smi field",
)
# nvprof --system-profiling rows, as formats.md §1.2.1 quotes the SC22 capture, with a power
# reading of -64 W and a temperature of 1e308 °C.
_SC22 = (
    '"Start","Duration","Grid X","Grid Y","Grid Z","Block X","Block Y","Block Z",'
    '"Registers Per Thread","Static SMem","Dynamic SMem","Size","Throughput","SrcMemType",'
    '"DstMemType","Device","Context","Stream","System","Name","Correlation_ID"\n'
    "s,ms,,,,,,,,B,B,MB,GB/s,,,,,,,,\n"
    '0.174039,,,,,,,,,,,,,,,"NVIDIA TITAN V (0)",,,"135/850","[SM/Memory Clock (MHz)]",\n'
    '0.174060,,,,,,,,,,,,,,,"NVIDIA TITAN V (0)",,,"1e308","[Temperature (C)]",\n'
    '0.174422,,,,,,,,,,,,,,,"NVIDIA TITAN V (0)",,,"-64000/250000","[Power/Limit (mW)]",\n'
)
case(
    "nvprof_csv",
    "system-profiling-implausible",
    put("nvprof_csv", _SC22),
    text="1 power_w value(s) outside the plausible range [0, 5000] (first: -64.0)",
    check=lambda t: (
        None
        if t.gpu_samples.select("temperature_c", "power_w", "power_limit_w").rows()
        == [(None, None, None), (None, None, None), (None, None, 250.0)]
        else pytest.fail(str(t.gpu_samples))
    ),
    detect=True,
)


# --- iteration logs ------------------------------------------------------------------------------


def iter_with(fn: Callable[[list[str]], list[str]]) -> Callable[[Path], Path]:
    return lambda d: put("iterlog", "\n".join(fn(iter_lines())) + "\n")(d)


def _iter_check(n: int) -> Callable[[Tables], None]:
    def check(t: Tables) -> None:
        rows = list(csv.DictReader(iter_lines()[1:]))[:n]
        assert t.iterations["duration_ns"].to_list() == [int(r["duration_ns"]) for r in rows]

    return check


case(
    "iterlog",
    "gzipped",
    lambda d: put("iterlog", gzip.compress(raw_of("iterlog")))(d),
    check=_iter_check(4),
    detect=True,
)
case(
    "iterlog",
    "control-char-in-header",  # found by the fuzzer: str.strip() hid it, then polars failed
    iter_with(lambda ls: [ls[0], "\x1c" + ls[1], *ls[2:]]),
    error=MissingColumn,
    text="expected header",
)
case(
    "iterlog",
    "short-row",  # found by the fuzzer: polars filled the missing cells with nulls
    iter_with(lambda ls: [*ls[:3], ls[3].rsplit(",", 2)[0], *ls[4:]]),
    error=MalformedInput,
    text="line 4: row has 5 fields, header has 7",
)
case(
    "iterlog",
    "duplicated-column",
    iter_with(lambda ls: [ls[0], ls[1].replace("batch_size", "duration_ns"), *ls[2:]]),
    error=MissingColumn,
    text="expected header",
)
case(
    "smi_csv",
    "duplicated-column",
    smi_with(lambda ls: [ls[0].replace("sm_clock_mhz", "power_w"), *ls[1:]]),
    error=MalformedInput,
    text="column 'power_w' appears twice",
)
case(
    "iterlog",
    "gzip-cut",
    lambda d: put("iterlog", gzip.compress(raw_of("iterlog"))[:60])(d),
    error=MalformedInput,
    text="gzip",
)
for keep in (1, 2, 3):
    case(
        "iterlog",
        f"cut-at-row{keep}",
        iter_with(lambda ls, k=keep: ls[: 2 + k]),
        check=_iter_check(keep),
    )
for label, col, value in (
    ("letters-in-duration", "duration_ns", "12x"),
    ("huge-start", "start_ns", "99999999999999999999"),
    ("float-iteration", "iteration", "1.5"),
):

    def _iter_set(ls: list[str], c: str = col, v: str = value) -> list[str]:
        head = ls[1].split(",")
        cells = ls[3].split(",")
        cells[head.index(c)] = v
        return [*ls[:3], ",".join(cells), *ls[4:]]

    case("iterlog", label, iter_with(_iter_set), error=MalformedInput, text="line 4")
case(
    "iterlog",
    "renamed-duration",
    iter_with(lambda ls: [ls[0], ls[1].replace("duration_ns", "dur"), *ls[2:]]),
    error=MissingColumn,
    text="duration_ns",
)
case(
    "iterlog",
    "sc22-merged",
    put("iterlog", "Iteration Duration 1 0 : 0.5Iteration Duration 1 1 : 0.25\n"),
    check=lambda t: (
        None
        if sorted(t.iterations["duration_ns"].to_list()) == [250_000_000, 500_000_000]
        else pytest.fail("durations")
    ),
    detect=True,
)
case(
    "iterlog",
    "sc22-huge",
    put("iterlog", "Iteration Duration 1 0 : 1e400\n"),
    error=MalformedInput,
    text="line 1",
)


# --- SQLite: nsys and nvprof ---------------------------------------------------------------------


def sqlite_with(fmt: str, *sql: str) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        p = d / ("in" + SUFFIX[fmt])
        shutil.copyfile(shared({"nsys_sqlite": NSYS, "nvprof_sqlite": NVPROF_SQL}[fmt]), p)
        p.chmod(0o644)
        con = sqlite3.connect(p)
        for q in sql:
            con.execute(q)
        con.commit()
        con.close()
        return p

    return make


def _strip_constraints(table: str) -> tuple[str, str, str]:
    """SQL that rebuilds `table` without NOT NULL constraints (CREATE TABLE AS keeps none)."""
    return (
        f"CREATE TABLE _t AS SELECT * FROM {table}",
        f"DROP TABLE {table}",
        f"ALTER TABLE _t RENAME TO {table}",
    )


def _drop_column(table: str, col: str, have: list[str]) -> tuple[str, ...]:
    keep = ", ".join(f'"{c}"' for c in have if c != col)
    return (
        f"CREATE TABLE _t AS SELECT {keep} FROM {table}",
        f"DROP TABLE {table}",
        f"ALTER TABLE _t RENAME TO {table}",
    )


NSYS_TABLE_COLS = {
    KERNEL: ("start", "end", "deviceId", "demangledName"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "bytes", "copyKind"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "nameId"),
    "StringIds": ("id", "value"),
}
for table, cols in NSYS_TABLE_COLS.items():
    for col in cols:
        case(
            "nsys_sqlite",
            f"renamed-{table}-{col}",
            sqlite_with("nsys_sqlite", f'ALTER TABLE {table} RENAME COLUMN "{col}" TO "{col}_x"'),
            error=MissingColumn,
            text=f"table {table}, column {col!r}",
        )
case(
    "nsys_sqlite",
    "dangling-name-ids",
    sqlite_with("nsys_sqlite", f"UPDATE {KERNEL} SET demangledName = 987654321"),
    text="2 kernels whose demangledName id is not in StringIds",
    check=lambda t: None if t.kernels["name"].null_count() == 2 else pytest.fail("names"),
)
case(
    "nsys_sqlite",
    "null-start",
    sqlite_with(
        "nsys_sqlite",
        *_strip_constraints(KERNEL),
        f"UPDATE {KERNEL} SET start = NULL WHERE rowid = 1",
    ),
    error=MalformedInput,
    text="column 'start': 1 row(s) without a start time",
)
case(
    "nsys_sqlite",
    "null-end",
    sqlite_with("nsys_sqlite", *_strip_constraints(KERNEL), f"UPDATE {KERNEL} SET end = NULL"),
    text="CUPTI_ACTIVITY_KIND_KERNEL: 2 row(s) without an end time (end is NULL)",
    check=lambda t: (
        None
        if t.kernels.select("end_ns", "duration_ns").null_count().row(0) == (2, 2)
        and t.kernels["start_ns"].null_count() == 0
        else pytest.fail(str(t.kernels))
    ),
)
case(
    "nsys_sqlite",
    "int64-overflow",
    sqlite_with(
        "nsys_sqlite",
        f"UPDATE {KERNEL} SET {I64} WHERE rowid = 1",
    ),
    error=MalformedInput,
    text="end - start does not fit int64",
)
case(
    "nsys_sqlite",
    "text-in-start",
    sqlite_with("nsys_sqlite", f"UPDATE {KERNEL} SET start = 'soon' WHERE rowid = 2"),
    error=MalformedInput,
    text=KERNEL,
)
case(
    "nsys_sqlite",
    "real-in-end",
    sqlite_with("nsys_sqlite", f"UPDATE {KERNEL} SET end = end + 0.5 WHERE rowid = 1"),
    error=MalformedInput,
    text=KERNEL,
)
case(
    "nsys_sqlite",
    "enum-label-blob",  # found by the fuzzer: a BLOB label reached str methods
    sqlite_with("nsys_sqlite", "UPDATE ENUM_CUDA_MEMCPY_OPER SET name = CAST(name AS BLOB)"),
    check=lambda t: (
        None
        if t.memcpy["kind"].to_list() == ["DtoH"]
        else pytest.fail(str(t.memcpy["kind"].to_list()))
    ),
)
case(
    "nsys_sqlite",
    "enum-id-text",
    sqlite_with(
        "nsys_sqlite",
        *_strip_constraints("ENUM_CUDA_MEMCPY_OPER"),
        "UPDATE ENUM_CUDA_MEMCPY_OPER SET id = 'one' WHERE id = 1",
    ),
    error=MalformedInput,
    text="table ENUM_CUDA_MEMCPY_OPER, column 'id'",
)
case(
    "nsys_sqlite",
    "only-stringids-and-metadata",
    lambda d: _other_program(d),
    error=MalformedInput,
    text="not an Nsight Systems export",
)
case(
    "nsys_sqlite",
    "only-stringids-and-metadata-detect",
    lambda d: _other_program(d),
    error=UnknownFormat,
    text="no reader",
    detect=True,
)
case(
    "nsys_sqlite",
    "generated-deviceId",
    lambda d: _generated(d),
    error=MalformedInput,
    text="generated (computed) column",
)


def _other_program(d: Path) -> Path:
    p = d / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.execute("INSERT INTO StringIds VALUES (1, 'hello')")
    con.commit()
    con.close()
    return p


def _generated(d: Path) -> Path:
    p = sqlite_with("nsys_sqlite")(d)
    con = sqlite3.connect(p)
    have = [r[1] for r in con.execute(f"PRAGMA table_info({KERNEL})")]
    other = [c for c in have if c != "deviceId"]
    cols = ", ".join(f'"{c}"' for c in other)
    # an expression SQLite would evaluate on every read: ~20 MB of text per row
    con.execute(
        f"CREATE TABLE _t ({cols}, deviceId AS "
        "(length(replace(hex(zeroblob(20000000)), '0', 'ab'))) VIRTUAL)"
    )
    con.execute(f"INSERT INTO _t ({cols}) SELECT {cols} FROM {KERNEL}")
    con.execute(f"DROP TABLE {KERNEL}")
    con.execute(f"ALTER TABLE _t RENAME TO {KERNEL}")
    con.commit()
    con.close()
    return p


for fmt in ("nsys_sqlite", "nvprof_sqlite"):
    for frac in (0.05, 0.3, 0.6, 0.9):
        case(
            fmt,
            f"cut-{frac}",
            derived(fmt, lambda b, f=frac: b[: int(len(b) * f)]),
            error=MalformedInput,
            text="truncated",
        )
    case(
        fmt,
        "bad-magic",
        derived(fmt, lambda b: b"SQLite format 4\x00" + b[16:]),
        error=MalformedInput,
    )
    case(
        fmt,
        "zeroed-schema-page",
        derived(fmt, lambda b: b[:100] + b"\x00" * 3996 + b[4096:]),
        error=MalformedInput,
    )
    case(
        fmt,
        "page-size-garbled",
        derived(fmt, lambda b: b[:16] + b"\x00\x03" + b[18:]),
        error=MalformedInput,
    )


def _flip_in_schema(b: bytes) -> bytes:
    """One flipped byte inside the text of a CREATE TABLE statement (sqlite_master.sql)."""
    i = b.find(b"CREATE TABLE") + 1
    return b[:i] + b"\xff" + b[i + 1 :]


case(
    "nsys_sqlite",
    "flip-in-schema-text",
    derived("nsys_sqlite", _flip_in_schema),
    error=MalformedInput,
    text="malformed database schema",
)


def _flip_in_index(b: bytes) -> bytes:
    """One byte of an index's column name in the schema (the last copy of the statement: the
    first is a stale one on a free page) made non-UTF-8: SQLite's error quotes the name, which
    Python's sqlite3 failed to decode (UnicodeDecodeError, issue 9)."""
    i = b.rfind(b"ON CUPTI_ACTIVITY_KIND_MEMSET(correlationId)") + 30
    return b[:i] + b"\x80" + b[i + 1 :]


def _flip_in_primary_key(b: bytes) -> bytes:
    i = b.find(b"PRIMARY KEY") + 2
    return b[:i] + b"\x80" + b[i + 1 :]


for fmt, flip in (("nvprof_sqlite", _flip_in_index), ("nsys_sqlite", _flip_in_primary_key)):
    for detect in (False, True):
        case(
            fmt,
            "flip-non-utf8-in-schema" + ("-detect" if detect else ""),
            derived(fmt, flip),
            error=MalformedInput,
            text="unreadable SQLite database (its schema holds bytes that are not UTF-8)",
            detect=detect,
        )
NV_KERNEL = "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"
for col in ("start", "end", "name"):
    case(
        "nvprof_sqlite",
        f"renamed-kernel-{col}",
        sqlite_with("nvprof_sqlite", f'ALTER TABLE {NV_KERNEL} RENAME COLUMN "{col}" TO "{col}_x"'),
        error=MissingColumn,
        text=f"column {col!r}",
    )
case(
    "nvprof_sqlite",
    "null-start",
    sqlite_with(
        "nvprof_sqlite",
        *_strip_constraints(NV_KERNEL),
        f"UPDATE {NV_KERNEL} SET start = NULL WHERE _id_ IN (SELECT _id_ FROM {NV_KERNEL} LIMIT 3)",
    ),
    error=MalformedInput,
    text="3 row(s) without a start time",
)
case(
    "nvprof_sqlite",
    "null-end",
    sqlite_with(
        "nvprof_sqlite",
        *_strip_constraints(NV_KERNEL),
        f"UPDATE {NV_KERNEL} SET end = NULL WHERE _id_ IN (SELECT _id_ FROM {NV_KERNEL} LIMIT 5)",
    ),
    text="5 row(s) without an end time (end is NULL)",
    check=lambda t: (
        None
        if t.kernels.select("end_ns", "duration_ns").null_count().row(0) == (5, 5)
        else pytest.fail(str(t.kernels))
    ),
)
case(
    "nvprof_sqlite",
    "int64-overflow",
    sqlite_with(
        "nvprof_sqlite",
        f"UPDATE {NV_KERNEL} SET {I64} WHERE _id_ = (SELECT min(_id_) FROM {NV_KERNEL})",
    ),
    error=MalformedInput,
    text="end - start does not fit int64",
)
case(
    "nvprof_sqlite",
    "dangling-name-ids",
    sqlite_with(
        "nvprof_sqlite",
        f"UPDATE {NV_KERNEL} SET name = 987654321 "
        f"WHERE _id_ IN (SELECT _id_ FROM {NV_KERNEL} LIMIT 4)",
    ),
    text="4 kernels row(s) name a StringTable id that is absent",
)
case(
    "nvprof_sqlite",
    "text-in-start",
    sqlite_with(
        "nvprof_sqlite",
        f"UPDATE {NV_KERNEL} SET start = 'soon' WHERE _id_ = (SELECT min(_id_) FROM {NV_KERNEL})",
    ),
    error=MalformedInput,
    text="wrong type",
)
case(
    "nvprof_sqlite",
    "environment-implausible",
    sqlite_with(
        "nvprof_sqlite",
        # kind 2 temperature: 4000 °C; kind 3 power: 9 kW of 250 W (mW, little-endian uint32s)
        "INSERT INTO CUPTI_ACTIVITY_KIND_ENVIRONMENT (deviceId, timestamp, environmentKind, data) "
        "VALUES (0, 10, 2, x'a00f0000'), (0, 20, 3, x'4054890090d00300')",
    ),
    text="1 temperature_c value(s) outside the plausible range [-50, 200]",
    check=lambda t: (
        None
        if t.gpu_samples.select("temperature_c", "power_w").rows() == [(None, None), (None, None)]
        else pytest.fail(str(t.gpu_samples))
    ),
)


# --- the test ------------------------------------------------------------------------------------


def test_corpus_size_per_format() -> None:
    per = {f: sum(c.fmt == f for c in CASES) for f in SUFFIX}
    assert sum(per.values()) >= 150, per
    assert min(per.values()) >= 12, per


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input(c: Case, tmp_path: Path) -> None:
    path = c.make(tmp_path)
    fmt = None if c.detect else c.fmt
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if c.error is not None:
            with pytest.raises(c.error) as e:
                read(path, format=fmt)
            msg = str(e.value)
            assert "\n" not in msg
            assert str(path) in msg
            assert c.text in msg, msg
            return
        t = read(path, format=fmt)
    notes = [str(w.message) for w in seen]
    if c.text:
        assert any(c.text in n for n in notes), notes
    if c.check is not None:
        c.check(t)
    assert isinstance(t.sources, pl.DataFrame)
