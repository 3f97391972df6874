"""Decompression bombs and giant values: streamed, bounded, refused with one line (InputLimits).

The bombs are built here at test time, smaller than the issue's (4 GB of events in 19 MB) with
the bounds lowered to match; `benchmarks/bench_bombs.py` runs the full-size ones.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, shared

import traceanalyze as ta
from traceanalyze.cli import main
from traceanalyze.errors import InputTooLarge, MalformedInput, TraceanalyzeError
from traceanalyze.readers.common.limits import (
    InputLimits,
    check_line_lengths,
    current_limits,
    input_limits,
    read_content,
)

MiB = 1 << 20


def gz_repeat(path: Path, head: bytes, unit: bytes, repeats: int, tail: bytes = b"") -> Path:
    """A gzip of head + unit * repeats + tail, compressed as it is generated (never whole)."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    block = unit * max(1, (1 << 20) // len(unit))
    per = len(block) // len(unit)
    with open(path, "wb") as f:
        f.write(c.compress(head))
        left = repeats
        while left >= per:
            f.write(c.compress(block))
            left -= per
        f.write(c.compress(unit * left + tail))
        f.write(c.flush())
    return path


KERNEL = (
    b'{"ph":"X","cat":"kernel","name":"volta_sgemm","pid":0,"tid":7,"ts":1712195495505583.125,'
    b'"dur":4.5,"args":{"device":0,"stream":7,"correlation":1}},'
)
KINETO_HEAD = b'{"schemaVersion":1,"traceEvents":['
KINETO_TAIL = b'{"ph":"i","name":"end","pid":0,"tid":1,"ts":1712195495505590}]}'


def kineto_bomb(tmp_path: Path, repeats: int) -> Path:
    return gz_repeat(tmp_path / "bomb.json.gz", KINETO_HEAD, KERNEL, repeats, KINETO_TAIL)


def test_defaults_and_their_reasons() -> None:
    lim = InputLimits()
    assert (lim.max_inflate_ratio, lim.inflate_grace_bytes) == (100.0, 64 * MiB)
    assert (lim.max_inflated_bytes, lim.max_value_bytes) == (16 << 30, 64 * MiB)


def test_real_gzip_traces_inflate_far_below_the_ratio() -> None:
    """The bound must leave every real capture readable: measured, not assumed."""
    traces = sorted((ROOT.parent / "shared" / "traces").rglob("*.gz"))
    traces += sorted((ROOT / "fixtures").rglob("*.gz"))
    for p in traces:
        ratio = len(gzip.decompress(p.read_bytes())) / p.stat().st_size
        assert ratio < InputLimits().max_inflate_ratio / 4, (p, ratio)


def test_kineto_bomb_refused_past_the_ratio(tmp_path: Path) -> None:
    p = kineto_bomb(tmp_path, 40_000)  # ~6 MB of events from a few KB
    assert p.stat().st_size < 100_000
    with (
        input_limits(inflate_grace_bytes=MiB),
        pytest.raises(InputTooLarge, match=r"likely decompression bomb") as ei,
    ):
        ta.read(p)
    assert ei.value.path == str(p)
    assert "\n" not in str(ei.value)
    # The same file with the ratio raised is read whole and right: every event is a kernel.
    with input_limits(inflate_grace_bytes=MiB, max_inflate_ratio=1e6):
        t = ta.read(p)
    assert t.kernels.height == 40_000
    assert set(t.kernels["name"]) == {"volta_sgemm"}


def test_absolute_bound(tmp_path: Path) -> None:
    p = kineto_bomb(tmp_path, 20_000)
    with (
        input_limits(max_inflate_ratio=1e6, max_inflated_bytes=2 * MiB),
        pytest.raises(InputTooLarge, match=r"inflates to more than 2\.0 MiB"),
    ):
        ta.read(p)


def test_environment_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEANALYZE_INFLATE_GRACE_BYTES", "1M")
    monkeypatch.setenv("TRACEANALYZE_MAX_INFLATE_RATIO", "50")
    lim = current_limits()
    assert (lim.inflate_grace_bytes, lim.max_inflate_ratio) == (MiB, 50.0)
    with pytest.raises(InputTooLarge, match=r"more than 50x"):
        ta.read(kineto_bomb(tmp_path, 40_000))
    monkeypatch.setenv("TRACEANALYZE_MAX_VALUE_BYTES", "lots")
    with pytest.raises(TraceanalyzeError, match="TRACEANALYZE_MAX_VALUE_BYTES='lots' is not"):
        current_limits()


def test_the_context_overrides_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEANALYZE_MAX_VALUE_BYTES", "1K")
    assert current_limits().max_value_bytes == 1024
    with input_limits(max_value_bytes=5):
        assert current_limits().max_value_bytes == 5
    assert current_limits().max_value_bytes == 1024


@pytest.mark.parametrize("compress", [False, True])
def test_one_giant_json_string(tmp_path: Path, compress: bool) -> None:
    """One 3 MiB string in an event: refused by the value bound (ratio disabled), plain or gz."""
    text = KINETO_HEAD + b'{"ph":"X","cat":"kernel","name":"' + b"ab" * (3 * MiB // 2)
    text += b'","pid":0,"tid":7,"ts":1,"dur":1}]}'
    p = tmp_path / ("s.json.gz" if compress else "s.json")
    p.write_bytes(gzip.compress(text, 1) if compress else text)
    with (
        input_limits(max_value_bytes=MiB, max_inflate_ratio=1e9),
        pytest.raises(InputTooLarge, match=r"a JSON value at byte \d+ of the JSON text is larger"),
    ):
        ta.read(p, format="kineto_json")
    # Within a bound that fits it, the string is read as it is.
    with input_limits(max_value_bytes=8 * MiB):
        t = ta.read(p, format="kineto_json")
    assert len(t.kernels["name"][0]) == 3 * MiB


def test_cli_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = kineto_bomb(tmp_path, 40_000)
    monkeypatch.setenv("TRACEANALYZE_INFLATE_GRACE_BYTES", str(MiB))
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(tmp_path / "st"), "-q"])
    assert r.exit_code == 1
    assert r.output.count("\n") == 1
    assert r.output.startswith(f"traceanalyze: error: {p}: gzip inflates more than 100x")
    assert not (tmp_path / "st").exists()


# --- CSV readers ---------------------------------------------------------------------------------


def _nvprof_parts() -> tuple[bytes, bytes]:
    lines = shared("nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv").read_bytes()
    lines_ = lines.splitlines(keepends=True)
    head = b"".join(lines_[:5])
    row = next(x for x in lines_ if b"matrixMulCUDA" in x)
    return head, row


def _smi_parts() -> tuple[bytes, bytes]:
    lines = shared("smi_logs/roofline_custom_nvml_sampler_rtx5070.csv").read_bytes()
    lines_ = lines.splitlines(keepends=True)
    return lines_[0], lines_[1]


CSV_CASES = {"nvprof_csv": (_nvprof_parts, "kernels"), "smi_csv": (_smi_parts, "gpu_samples")}


@pytest.mark.parametrize("fmt", sorted(CSV_CASES))
def test_csv_bomb(tmp_path: Path, fmt: str) -> None:
    parts, table = CSV_CASES[fmt]
    head, row = parts()
    n = (6 * MiB) // len(row)
    p = gz_repeat(tmp_path / f"bomb.{fmt}.csv.gz", head, row, n)
    with (
        input_limits(inflate_grace_bytes=MiB),
        pytest.raises(InputTooLarge, match=r"likely decompression bomb"),
    ):
        ta.read(p, format=fmt)
    with input_limits(inflate_grace_bytes=MiB, max_inflate_ratio=1e6):
        t = ta.read(p, format=fmt)
    assert getattr(t, table).height == n


@pytest.mark.parametrize("compress", [False, True])
def test_csv_giant_field(tmp_path: Path, compress: bool) -> None:
    head, row = _nvprof_parts()
    name = b'"' + b"k" * (2 * MiB) + b'"'
    giant = row[: row.rindex(b',"') + 1] + name + b"\n"
    text = head + row * 3 + giant + row
    p = tmp_path / ("g.csv.gz" if compress else "g.csv")
    p.write_bytes(gzip.compress(text, 1) if compress else text)
    with (
        input_limits(max_value_bytes=MiB, max_inflate_ratio=1e9),
        pytest.raises(InputTooLarge, match=r"larger than 1\.0 MiB|longer than 1\.0 MiB"),
    ):
        ta.read(p, format="nvprof_csv")
    with input_limits(max_value_bytes=4 * MiB, max_inflate_ratio=1e9):
        t = ta.read(p, format="nvprof_csv")
    assert t.kernels.height == 5
    assert t.kernels["name"].str.len_bytes().max() == 2 * MiB


def test_check_line_lengths_exact_bound() -> None:
    lim = InputLimits(max_value_bytes=1000)
    for before in (0, 1, 499, 500, 999, 1000):
        ok = b"x" * before + b"\n" + b"y" * 1000 + b"\n" + b"z" * 10
        check_line_lengths(ok, "t", lim)
        bad = b"x" * before + b"\n" + b"y" * 1001 + b"\nz"
        with pytest.raises(InputTooLarge, match=r"^t: line 2 is longer than 1000 bytes"):
            check_line_lengths(bad, "t", lim)
    with pytest.raises(InputTooLarge, match=r"line 1 is longer"):
        check_line_lengths(b"y" * 1001, "t", lim)


def test_read_content_streams_gzip_with_the_line_bound(tmp_path: Path) -> None:
    p = tmp_path / "x.gz"
    p.write_bytes(gzip.compress(b"a,b\n" + b"c" * (3 * MiB) + b"\n"))
    with input_limits(max_value_bytes=MiB, max_inflate_ratio=1e9), pytest.raises(InputTooLarge):
        read_content(p)
    with input_limits(max_value_bytes=4 * MiB, max_inflate_ratio=1e9):
        assert len(read_content(p)) == 4 + 3 * MiB + 1


def test_no_reader_inflates_a_whole_file() -> None:
    """Every gzip goes through the bounded stream: no `gzip.decompress`/`gzip.open` in readers."""
    srcs = sorted((ROOT / "traceanalyze" / "readers").rglob("*.py"))
    assert len(srcs) > 30
    for src in srcs:
        text = src.read_text()
        assert not re.search(r"gzip\.(decompress|open|GzipFile)\(", text), src


def test_broken_json_past_the_bound_is_a_syntax_error_not_a_size_error(tmp_path: Path) -> None:
    """A syntax error early in a big trace (no event boundary can be confirmed after it) is
    still reported as the syntax error on its line, not as an oversized value."""
    good = KERNEL.replace(b"},", b"},\n")
    text = KINETO_HEAD + b"\n" + good * 10 + b'{"ph":"X" "cat":"kernel"},\n' + good * 20_000
    text += KINETO_TAIL
    p = tmp_path / "broken.json"
    p.write_bytes(text)
    with (
        input_limits(max_value_bytes=MiB),
        pytest.raises(MalformedInput, match=r"^\S+, line 12: not valid JSON") as ei,
    ):
        ta.read(p)
    assert not isinstance(ei.value, InputTooLarge)
