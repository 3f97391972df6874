"""Streaming ingest of nvprof and GPU-telemetry CSVs (`stream_nvprof_csv`, `stream_smi_csv`):
the chunks, concatenated per table, equal the whole-file read (rows, order, ids, warnings), on
every real trace of both formats and on inline logs of every layout, with blocks small enough
that each file is parsed in many; and bad input fails as the whole-file read does, through
`ta.ingest` too, leaving the store as it was."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

import traceanalyze as ta
from traceanalyze import readers
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.readers.common import stream as _stream_common

from .conftest import SHARED_TRACES
from .test_nvprof_csv import OLD_HEADER, SC22_HEAD, SC22_ROWS, VALID_ROW
from .test_smi_csv import _BIG_HEADER, DCGMI, DUMP, SMI_UNITS, _big_rows, _log

FORMATS = ("nvprof_csv", "smi_csv")


def _real_traces() -> list[Path]:
    if not SHARED_TRACES.exists():
        return []
    return sorted(
        p
        for p in SHARED_TRACES.rglob("*")
        if p.is_file() and p.suffix != ".md" and readers.detect_format(p) in FORMATS
    )


REAL = _real_traces()


def _read(path: Path, **opts: object) -> tuple[ta.Tables, list[str]]:
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        t = readers.read(path, **opts)
    return t, sorted(str(w.message) for w in rec)


def _stream(path: Path, **opts: object) -> tuple[dict[str, list[pl.DataFrame]], list[str]]:
    chunks: dict[str, list[pl.DataFrame]] = {}
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for name, df in readers.stream(path, **opts):
            chunks.setdefault(name, []).append(df)
    return chunks, sorted(str(w.message) for w in rec)


def assert_stream_equals_read(path: Path, **opts: object) -> dict[str, int]:
    """Chunks per table, after checking that they concatenate to `read`'s tables and that
    both warn alike."""
    whole, w_read = _read(path, **opts)
    chunks, w_stream = _stream(path, **opts)
    for name, df in whole.items():
        got = pl.concat(chunks[name]) if name in chunks else df.clear()
        assert_frame_equal(got, df, check_exact=True)
    assert w_stream == w_read
    return {name: len(c) for name, c in chunks.items()}


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream_common, "BLOCK_BYTES", 2048)


@pytest.mark.skipif(not REAL, reason="../shared/traces is absent")
@pytest.mark.parametrize("trace", REAL, ids=lambda p: p.name)
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_real_traces_stream_as_read(trace: Path, gz: bool, tmp_path: Path, small_blocks) -> None:
    path = trace
    if gz:
        path = tmp_path / (trace.name + ".gz")
        path.write_bytes(gzip.compress(trace.read_bytes()))
    n = assert_stream_equals_read(path)
    # Several blocks really happened: row tables come one chunk per block (aggregate metric
    # tables when their section ends, so only the content's size says it there).
    assert len(trace.read_bytes()) > 4 * 2048
    whole = readers.read(path)
    rows = [t for t in ("kernels", "gpu_samples") if whole[t].height]
    assert all(n[t] > 3 for t in rows)


@pytest.mark.skipif(not REAL, reason="../shared/traces is absent")
@pytest.mark.parametrize("trace", REAL, ids=lambda p: p.name)
def test_real_traces_ingest_as_read(trace: Path, tmp_path: Path, small_blocks) -> None:
    st = tmp_path / "st"
    ta.ingest(trace, st)
    store, whole = ta.Store(st), readers.read(trace)
    for name, df in whole.items():
        got = store.table(name)
        if name == "sources":  # the store records the path as it was given
            got, df = (
                got.drop("path", "ingested_at", strict=False),
                df.drop("path", "ingested_at", strict=False),
            )
        assert_frame_equal(got, df, check_exact=True)


# --- inline logs of every layout, in blocks of 1 line to 4 KiB ----------------------------------

UNITS_OLD = "ms,us,,,,,,,,B,B,B,GB/s,,,,"
NVPROF = {
    "sc22_samples": SC22_HEAD + SC22_ROWS * 40,
    "mid_envelopes": (
        f"==5== Profiling result:\n{OLD_HEADER}\n{UNITS_OLD}\n"
        + f"{VALID_ROW}\n" * 30
        + "======== Warning: 3 records have invalid timestamps\n"
        + f"{VALID_ROW}\n" * 30
        + "==5== a note\n\n"
        + f"{VALID_ROW}\n" * 5
        + "==5== Generated result\n"
    ),
    "two_processes": (
        f"==100== Profiling result:\n{OLD_HEADER}\n{UNITS_OLD}\n"
        + f"{VALID_ROW}\n" * 20
        + f"==200== Profiling result:\n{OLD_HEADER}\nus,us,,,,,,,,KB,B,KB,MB/s,,,,\n"
        + f"{VALID_ROW}\n" * 20
    ),
    "app_output_first": "epoch 1 loss 0.3\n" * 50 + f"{OLD_HEADER}\n{UNITS_OLD}\n{VALID_ROW}\n",
    "unsupported_kinds": SC22_HEAD
    + (
        '0.8,0.1,,,,,,,,,,,,,,"NVIDIA TITAN V (0)","1","7",,"[Unified Memory Memcpy HtoD]",140\n'
        + SC22_ROWS
    )
    * 30,
    "summary_ranges": (
        '==42== Profiling result:\n"Type","Time(%)","Time","Calls","Avg","Min","Max","Name"\n'
        ",%,ms,,us,us,us,\n"
        + '"GPU activities",29.8,6.65,510,13.05,10.94,22.04,"volta_sgemm"\n'
        * 20
        + '==42== Range "fwd"\n"Type","Time(%)","Time","Calls","Avg","Min","Max","Name"\n'
        ",%,s,,ns,ns,ns,\n" + '"GPU activities",100.0,0.000026,2,13000,12000,14000,"k"\n' * 20
    ),
    "instance_metrics": (
        '"Device","Context","Stream","Kernel","Correlation_ID","achieved_occupancy",'
        '"dram_read_throughput"\n,,,,,,GB/s\n'
        + '"Tesla V100 (3)","1","7","k",120,0.5,1.5\n"Tesla V100 (3)","1","7","j",1,0.2,5MB/s\n'
        * 40
    ),
    "api_trace": '"Start","Duration","Name","Correlation_ID"\nus,us,,\n'
    + '10.0,2.5,"cudaMalloc",5\n20.0,1.0,"cuLaunchKernel",6\n' * 50,
}

SMI = {
    "smi_units": SMI_UNITS + "\n".join(SMI_UNITS.splitlines()[1:] * 30) + "\n",
    "smi_big": _log(_big_rows(600)),
    "smi_states": _log(
        [
            r[:4] + ["[Unknown Error]" if i % 50 == 7 else r[4]] + r[5:]
            for i, r in enumerate(_big_rows(300))
        ]
    ),
    "sampler": "# traceanalyze-nvml-sampler v1 interval_ms=50\n"
    "timestamp_ns,device_id,device_uuid,sm_clock_mhz,mem_clock_mhz,power_w,power_kind,"
    "power_limit_w,temperature_c,fan_pct,gpu_util_pct,mem_util_pct,energy_j,clock_event_reasons\n"
    + "".join(
        f"{1732260000000000000 + i * 50_000_000},{i % 2},GPU-{i % 2},1980,2619,{300 + i % 90},"
        f"instant,700,{60 + i % 5},,97,41,,0\n"
        for i in range(300)
    ),
    "generic_local": "timestamp,power_w,temperature_c,sm_clock_mhz,extra_mhz\n"
    + "".join(
        f"2026-07-22T21:41:{i // 10 % 60:02d}.{i % 10}00,{50 + i % 7},{40 + i % 3},1500,7\n"
        for i in range(400)
    ),
    "dcgmi": DCGMI
    + "".join(f"GPU {i % 2}     1410   70.23  35     0      0.9\n" for i in range(200)),
    "dump": DUMP,
}


@pytest.mark.parametrize("block", [1, 300, 4096])
@pytest.mark.parametrize("name", sorted(NVPROF))
def test_nvprof_layouts_stream_as_read(name: str, block: int, write, monkeypatch) -> None:
    monkeypatch.setattr(_stream_common, "BLOCK_BYTES", block)
    # (application output before the header hides it from detection: say the format)
    assert_stream_equals_read(write(f"{name}.csv", NVPROF[name]), format="nvprof_csv")


@pytest.mark.parametrize("block", [1, 300, 4096])
@pytest.mark.parametrize("name", sorted(SMI))
def test_smi_layouts_stream_as_read(name: str, block: int, write, monkeypatch) -> None:
    monkeypatch.setattr(_stream_common, "BLOCK_BYTES", block)
    opts = {"tz": "Europe/Berlin"} | ({"interval_ms": 100} if name == "dcgmi" else {})
    assert_stream_equals_read(write(f"{name}.csv", SMI[name]), **opts)


def test_smi_noheader_with_fields_and_gzip_bom(write, small_blocks) -> None:
    text = _log(_big_rows(300), header=None)
    p = write("nohdr.csv.gz", gzip.compress(b"\xef\xbb\xbf" + text.encode()))
    fields = _BIG_HEADER.replace(" [W]", "").replace(" [MHz]", "").replace(" [%]", "")
    assert_stream_equals_read(p, tz="UTC", fields=fields.replace(" [MiB]", ""))


def test_dst_and_telemetry_notes_merge_to_the_whole_file_counts(write, small_blocks) -> None:
    """A repeated DST hour and implausible values over many blocks: one note each, with the
    file's count and first value, as the whole-file read gives."""
    rows = _big_rows(400)
    for i, r in enumerate(rows):
        r[0] = f"2024/10/27 02:{i // 60 % 60:02d}:{i % 60:02d}.000"
        if i % 40 == 5:
            r[6] = str(900 + i)  # °C
    p = write("dst.csv", _log(rows))
    _, notes = _read(p, tz="Europe/Berlin")
    assert any("400 local timestamp(s)" in n for n in notes)
    assert any("10 temperature_c value(s)" in n and "(first: 905.0)" in n for n in notes)
    assert_stream_equals_read(p, tz="Europe/Berlin")


# --- bad input: the same error, and the store untouched ----------------------------------------


def _error(fn) -> TraceanalyzeError:
    with pytest.raises(TraceanalyzeError) as ei:
        fn()
    return ei.value


def _assert_same_failure(path: Path, tmp_path: Path, **opts: object) -> TraceanalyzeError:
    e_read = _error(lambda: readers.read(path, **opts))
    e_stream = _error(lambda: list(readers.stream(path, **opts)))
    assert (type(e_stream), str(e_stream), e_stream.line) == (
        type(e_read),
        str(e_read),
        e_read.line,
    )
    st = tmp_path / "st"
    ta.ingest(NVPROF_OK, st) if NVPROF_OK.exists() else None
    before = sorted(p.relative_to(st) for p in st.rglob("*")) if st.exists() else None
    e_ingest = _error(lambda: ta.ingest(path, st, **opts))
    assert str(e_ingest) == str(e_read)
    after = sorted(p.relative_to(st) for p in st.rglob("*")) if st.exists() else None
    assert after == before
    return e_read


NVPROF_OK = SHARED_TRACES / "nvprof_csv" / "magus_matrixMul_gtx1080ti_gputrace.csv"


def _bad_middle(text: str, line: int, bad: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[line - 1] = bad + "\n"
    return "".join(lines)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ('1.0,1.0,1,1,1,1,1,1,8,0,0,,,"Tesla K80 (0)","1","7"', "fields"),
        ('nan,1.0,1,1,1,1,1,1,8,0,0,,,"Tesla K80 (0)","1","7","k()"', "not a finite"),
        ('1.0,,1,1,1,1,1,1,8,0,0,,,"Tesla K80 (0)","1","7","k()"', "without a Duration"),
        ('1.0,1.0,1,1,1,1,1,1,8,0,0,,,"Tesla K80","1","7","k()"', "ordinal"),
    ],
)
def test_nvprof_bad_line_in_the_middle(bad: str, match: str, write, tmp_path, small_blocks) -> None:
    text = f"{OLD_HEADER}\n{UNITS_OLD}\n" + f"{VALID_ROW}\n" * 400
    for p in (
        write("bad.csv", _bad_middle(text, 303, bad)),
        write("bad.csv.gz", gzip.compress(_bad_middle(text, 303, bad).encode())),
    ):
        e = _assert_same_failure(p, tmp_path)
        assert match in str(e) and e.line == 303


def test_smi_bad_value_in_the_middle(write, tmp_path, small_blocks) -> None:
    rows = _big_rows(500)
    rows[350][5] = "fast MHz"
    e = _assert_same_failure(write("bad_smi.csv", _log(rows)), tmp_path, tz="UTC")
    assert e.line == 352 and "not a number" in str(e)


@pytest.mark.parametrize("name", ["sc22_samples", "smi_big"])
def test_truncated_gzip(name: str, write, tmp_path, small_blocks) -> None:
    text = NVPROF.get(name) or SMI[name]
    p = write(f"cut_{name}.csv.gz", gzip.compress(text.encode())[:-200])
    e = _assert_same_failure(p, tmp_path, **({"tz": "UTC"} if name.startswith("smi") else {}))
    assert "truncated gzip" in str(e)


def test_long_line_refused_the_same(write, tmp_path, monkeypatch, small_blocks) -> None:
    monkeypatch.setenv("TRACEANALYZE_MAX_VALUE_BYTES", "10K")
    text = f"{OLD_HEADER}\n{UNITS_OLD}\n" + f"{VALID_ROW}\n" * 200
    p = write("long.csv", _bad_middle(text, 150, '1,1,"' + "x" * 20000 + '"'))
    e = _assert_same_failure(p, tmp_path)
    assert "line 150 is longer than" in str(e)


# --- the written Parquet -----------------------------------------------------------------------


@pytest.mark.skipif(not NVPROF_OK.exists(), reason="../shared/traces is absent")
def test_kernel_names_dictionary_encoded(tmp_path: Path) -> None:
    st = tmp_path / "st"
    ta.ingest(NVPROF_OK, st)
    (part,) = ta.Store(st).files("kernels")
    meta = pq.ParquetFile(st / part).metadata
    name = meta.schema.to_arrow_schema().get_field_index("name")
    for rg in range(meta.num_row_groups):
        enc = meta.row_group(rg).column(name).encodings
        assert "RLE_DICTIONARY" in enc or "PLAIN_DICTIONARY" in enc


# --- dumpGpuPower text: samples sorted with the energy lines, read twice --------------------------

from traceanalyze.readers.smi import dump_stream as _dump_stream  # noqa: E402


def _dl(n: int, ts: int, power: float = 100.0) -> str:
    """A dumpGpuPower sample line."""
    return (
        f"[{n}] Power: {power:.4f}, Util: 50, CoreClockMhz: 1380, MemClockMHz: 877, "
        f"Timestamp_ns: {ts}, Temp: 50"
    )


def _start(mj: int, ts: int) -> str:
    return f"Starting power measurement with energy {mj} at {ts}"


def _close(mj: int, ts: int) -> str:
    return f"Application terminated. Closing profiler with energy {mj} at {ts}"


T0 = 1650000000000000000
_IN_ORDER = [_dl(i, T0 + 1000 * i, 40 + i % 30) for i in range(60)]
_BACKWARDS = [_dl(i, T0 + 1000 * ((i * 37) % 60), 40 + i % 30) for i in range(60)]
DUMPS = {
    "in_order_energy_around": [
        "Initializing NVML... Success",
        "Getting device... Selected device 2: Tesla V100-SXM2-16GB",
        _start(1000000, T0 - 5),
        *_IN_ORDER[:30],
        _close(1010000, T0 + 1000 * 12 + 1),  # among the samples, written late
        *_IN_ORDER[30:],
        _close(1025000, T0 + 10**6),
        "Shutting down NVML... Success",
    ],
    # energy stamps equal to sample stamps: samples first, each kind in line order; runs of
    # equal stamps across block ends
    "ties": [
        _start(1, T0 + 3000),
        *[_dl(i, T0 + 1000 * (i // 7), i) for i in range(50)],
        _start(2, T0 + 3000),
        _close(3, T0),
        _close(4, T0 + 6000),
        _close(5, T0 + 1000 * (49 // 7)),
        "Selected device 0: A",
    ],
    "backwards": [_start(1, T0 + 17000), *_BACKWARDS, _close(2, T0 + 17000), _close(3, T0)],
    "backwards_no_energy": ["Selected device 3: H100", *_BACKWARDS],
    "in_order_no_energy": [*_IN_ORDER[:20], "Selected device 1: late", *_IN_ORDER[20:]],
    "no_device_line": [_start(7, T0 + 30500), *_IN_ORDER, _close(9, T0 + 59000)],
    "device_repeated": [
        *_IN_ORDER[:10],
        "Selected device 5: first",
        _start(7, T0 + 30500),
        *_IN_ORDER[10:],
        "Selected device 6: second",
    ],
    "negative_stamps": [_start(1, 0), *[_dl(i, -500 + 10 * i) for i in range(60)], _close(2, 5)],
}


@pytest.fixture
def small_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Runs of a few rows, merged a few rows at a time; records the size of each run."""
    monkeypatch.setattr(_dump_stream, "RUN_ROWS", 7)
    monkeypatch.setattr(_dump_stream, "MERGE_ROWS", 5)
    monkeypatch.setattr(_dump_stream, "_BATCH_ROWS", 2)
    sizes: list[int] = []
    write = _dump_stream._Runs.write

    def spy(self, parts):
        sizes.append(sum(p.height for p in parts))
        write(self, parts)

    monkeypatch.setattr(_dump_stream._Runs, "write", spy)
    return sizes


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
@pytest.mark.parametrize("block", [1, 300, 4096])
@pytest.mark.parametrize("name", sorted(DUMPS))
def test_dump_layouts_stream_as_read(name, block, crlf, write, monkeypatch, small_runs) -> None:
    monkeypatch.setattr(_stream_common, "BLOCK_BYTES", block)
    text = ("\r\n" if crlf else "\n").join(DUMPS[name]) + "\n"
    n = assert_stream_equals_read(write(f"{name}.txt", text))
    whole = readers.read(write(f"{name}.txt", text))
    assert whole.gpu_samples.height == sum(
        1 for ln in DUMPS[name] if "Power:" in ln or "with energy" in ln
    )
    if block == 1:
        assert n["gpu_samples"] > 5  # many chunks
    # The sort way is taken exactly when stamps go backwards and energy lines exist.
    assert bool(small_runs) == (name == "backwards")
    if small_runs:
        assert len(small_runs) >= 2  # several runs merged


def test_dump_hand_computed(write, small_blocks, small_runs) -> None:
    """Expected rows worked out by hand from the lines: stable by stamp, samples before energy
    rows at equal stamps, the device from the late `Selected device` line."""
    lines = [
        _start(5000, 100),
        _dl(0, 100, 1),
        _dl(1, 100, 2),
        "Getting device... Selected device 1: NVIDIA A100-SXM4-40GB",
        _close(6000, 100),
        _dl(2, 50, 3),  # backwards
        _dl(3, 200, 4),
        _close(7000, 150),
    ]
    p = write("hand.txt", "\n".join(lines) + "\n")
    want = [
        (50, 3.0, None),
        (100, 1.0, None),
        (100, 2.0, None),
        (100, None, 5.0),
        (100, None, 6.0),
        (150, None, 7.0),
        (200, 4.0, None),
    ]
    for blocks in (1, 2048):
        _stream_common.BLOCK_BYTES = blocks  # (restored by small_blocks' monkeypatch)
        chunks, _ = _stream(p)
        gs = pl.concat(chunks["gpu_samples"])
        assert gs.select("timestamp_ns", "power_w", "energy_j").rows() == want
        assert gs["device_id"].to_list() == [1] * 7
        assert pl.concat(chunks["devices"]).select("device_id", "name").rows() == [
            (1, "NVIDIA A100-SXM4-40GB")
        ]
    assert small_runs  # went the sort way
    assert_stream_equals_read(p)


def test_dump_gzip_and_many_energy_lines(write, monkeypatch, small_runs) -> None:
    """Past ENERGY_CAP energy rows go the sort way (as samples); gzip streamed, twice."""
    monkeypatch.setattr(_stream_common, "BLOCK_BYTES", 500)
    monkeypatch.setattr(_dump_stream, "ENERGY_CAP", 3)
    lines = [_dl(0, T0)] + [_close(i, T0 + 1000 * (i % 9)) for i in range(40)] + _IN_ORDER
    p = write("many.txt.gz", gzip.compress(("\n".join(lines) + "\n").encode()))
    assert_stream_equals_read(p)
    assert small_runs


@pytest.mark.parametrize(
    "lines",
    [
        ["Selected device 0: A", _start(1, 5), _close(2, 9)],  # no stamp text at all
        # stamp text, but no line is a sample: found only after the whole second pass
        ["[x] Power: 1, Util: 2, CoreClockMhz: 3, MemClockMHz: 4, Timestamp_ns: 5, Temp: 6"] * 30
        + [_start(1, 5)],
        [_dl(i, T0 + i) for i in range(30)]  # a bad power value in the middle
        + [_dl(30, T0 + 30).replace("Power: 100.0000", "Power: 1e")]
        + [_dl(i, T0 + i) for i in range(31, 60)]
        + [_start(1, 5)],
    ],
    ids=["energy_only", "no_valid_sample", "bad_power"],
)
def test_dump_bad_input_fails_as_read(lines, write, tmp_path, small_blocks, small_runs) -> None:
    p = write("bad_dump.txt", "\n".join(lines) + "\n")
    e = _assert_same_failure(p, tmp_path)
    if "Power: 1e" not in "".join(lines):
        assert "no dumpGpuPower sample lines" in str(e)


@pytest.mark.parametrize("name", ["in_order_energy_around", "backwards", "ties"])
def test_dump_gzip_streams_as_read(name, write, monkeypatch, small_runs) -> None:
    monkeypatch.setattr(_stream_common, "BLOCK_BYTES", 1)
    text = "\n".join(DUMPS[name]) + "\n"
    p = write(f"{name}.txt.gz", gzip.compress(b"\xef\xbb\xbf" + text.encode()))
    n = assert_stream_equals_read(p)
    assert n["gpu_samples"] > 5
    assert bool(small_runs) == (name == "backwards")
