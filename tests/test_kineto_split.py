"""The split pass 1 of a big plain Kineto trace (readers/kineto/split.py, `_stream_split`): a
helper process decodes the events after a cut, this process the ones before it. The tables of
`stream_kineto_json` must be `read_kineto_json`'s (which never splits) whatever happens: the
helper used, the cut inside a string, the helper failing or not starting. The threshold is
patched to 0 so that the real (small) traces are split.

Independent checks: what the helper reported (its rows, its range events, its header keys) is
compared with `json.loads` of the file's text from the cut on, counted here.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from traceanalyze import schema
from traceanalyze.errors import InputTooLarge, MalformedInput
from traceanalyze.readers.common.limits import input_limits
from traceanalyze.readers.kineto import split
from traceanalyze.readers.kineto import stream as kstream
from traceanalyze.readers.kineto.kineto_json import read_kineto_json

from .conftest import shared
from .test_kineto_stream import streamed_tables

RESNET = "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
CUPTI = "hta_cupti_range_profiler_a100_trace.json.gz"
TRITON = "hta_triton_a100_trace.json.gz"


def _plain(tmp_path: Path, name: str) -> Path:
    """The shared trace `name`, gunzipped into tmp_path (only a plain file can be split)."""
    out = tmp_path / name.removesuffix(".gz")
    out.write_bytes(gzip.decompress(shared(f"kineto_json/{name}").read_bytes()))
    return out


class Spy:
    """What the split read did: helper starts (their offsets), the metas `Helper.result`
    returned (None: the helper failed), the helper files present when it was closed."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.results: list[split.Meta | None] = []
        self.files_at_close: list[list[str]] = []
        self.kept: list[bool] = []


@pytest.fixture
def split_on(monkeypatch: pytest.MonkeyPatch) -> Spy:
    """Every plain file split (threshold 0, two workers), with the helper's doings recorded.
    `close` waits for the helper to end first, so that whatever it writes is on disk then."""
    spy = Spy()
    monkeypatch.setattr(split, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(split, "default_workers", lambda: 2)
    start, result, close = split.start_helper, split.Helper.result, split.Helper.close

    def start_spy(path: Any, at: int, workdir: Path) -> split.Helper | None:
        spy.starts.append(at)
        return start(path, at, workdir)

    def result_spy(self: split.Helper) -> split.Meta | None:
        meta = result(self)
        spy.results.append(meta)
        return meta

    def close_spy(self: split.Helper, *, keep: bool = False) -> None:
        if self.proc is not None:
            self.proc.wait()
        spy.files_at_close.append(sorted(p.name for p in self.workdir.glob(split.TAG + "*")))
        spy.kept.append(keep)
        close(self, keep=keep)

    monkeypatch.setattr(split, "start_helper", start_spy)
    monkeypatch.setattr(split.Helper, "result", result_spy)
    monkeypatch.setattr(split.Helper, "close", close_spy)
    return spy


def _assert_same(path: Path, tmp_path: Path) -> dict[str, pl.DataFrame]:
    """Every table of the stream equals the one-process read's, row order included; the
    workdir is empty afterwards (spills, adopted helper spills and helper files gone)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    whole = read_kineto_json(path)
    got = streamed_tables(path, work)
    for name, df in whole.items():
        if name == "sources":
            cols = ["tool", "rank", "world_size"]
            assert got[name].select(cols).equals(df.select(cols))
        elif df.height == 0:
            assert name not in got, name
        else:
            assert schema.conform(name, got[name]).equals(df), f"{path.name}: {name} differs"
    assert set(got) <= {n for n, df in whole.items() if df.height}
    assert list(work.iterdir()) == [], "files left in the workdir"
    return got


def _same_error(
    path: Path, tmp_path: Path, exc: type[Exception] = MalformedInput
) -> tuple[Any, Any]:
    """The one-process read and the split stream of `path` raise the same `exc`, message for
    message; the stream leaves its workdir empty. Returns both errors (read, stream)."""
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(exc) as whole:
        read_kineto_json(path)
    with pytest.raises(exc) as streamed:
        streamed_tables(path, work)
    assert str(streamed.value) == str(whole.value)
    assert list(work.iterdir()) == []
    return whole.value, streamed.value


def _helper_part(text: bytes, start: int) -> dict[str, Any]:
    """The document the helper sees, decoded here by the json module: the events from `start`
    to the end of the array and the keys after it."""
    assert text[start : start + 1] == b"{"
    doc: dict[str, Any] = json.loads(b'{"traceEvents": [' + text[start:])
    return doc


def _cats(events: list[dict[str, Any]], *cats: str) -> int:
    return sum(1 for e in events if str(e.get("cat", "")).lower() in cats)


@pytest.mark.parametrize("name", [RESNET, CUPTI, TRITON])
def test_split_read_equals_one_process_read(tmp_path: Path, split_on: Spy, name: str) -> None:
    path = _plain(tmp_path, name)
    _assert_same(path, tmp_path)
    # the helper really read its part: its meta, compared with the text from the cut on
    [start] = split_on.starts
    [meta] = split_on.results
    assert meta is not None, "the helper failed"
    text = path.read_bytes()
    assert len(text) // 2 <= start < len(text)
    part = _helper_part(text, start)
    events = part["traceEvents"]
    assert meta.rows.get("kernels", 0) == _cats(events, "kernel")
    assert meta.rows.get("api_calls", 0) == _cats(events, "cuda_runtime", "cuda_driver")
    assert len(meta.ranges) == _cats(events, "cuda_profiler_range")
    assert sum(meta.rows.values()) > 0
    # what the helper wrote was adopted (kept at close), then read and removed
    assert split_on.kept == [True]
    [files] = split_on.files_at_close
    assert split.META in files
    assert any(f.endswith(".spill.arrow") for f in files)


def test_cupti_ranges_after_the_array_are_the_helpers(tmp_path: Path, split_on: Spy) -> None:
    """All 77 range events lie past the cut at 3/4; distributedInfo comes after the array: both
    reach the tables only through the helper's meta."""
    path = _plain(tmp_path, CUPTI)
    got = _assert_same(path, tmp_path)
    [meta] = split_on.results
    assert meta is not None
    doc = json.loads(path.read_bytes())
    ranges = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    assert len(meta.ranges) == len(ranges) == 77
    assert got["kernel_metrics"]["kernel_id"].n_unique() == 77
    assert got["kernel_metrics"].height == sum(len(e["args"]) for e in ranges)
    assert [d.distributedInfo for d in meta.docs if d.distributedInfo is not None]
    rank = doc["distributedInfo"]["rank"]
    assert got["sources"]["rank"].to_list() == [rank]


def test_cupti_ranges_on_both_sides_of_the_cut(
    tmp_path: Path, split_on: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cut between the 40th and 41st range event: `kernel_id` (the range's ordinal in the
    file) continues across the two processes' ranges."""
    path = _plain(tmp_path, CUPTI)
    text = path.read_bytes()
    at = -1
    for _ in range(41):
        at = text.index(b'"cat": "cuda_profiler_range"', at + 1)
    helper_start = text.rindex(b"{", 0, at)
    main_end = text.rindex(b"}", 0, helper_start) + 1
    assert text[main_end:helper_start].strip() == b","
    monkeypatch.setattr(split, "plan", lambda p: split.Plan(main_end, helper_start))
    got = _assert_same(path, tmp_path)
    [meta] = split_on.results
    assert meta is not None
    assert len(meta.ranges) == 77 - 40
    assert got["kernel_metrics"]["kernel_id"].unique().sort().to_list() == list(range(77))


def test_triton_base_time_after_the_array(tmp_path: Path, split_on: Spy) -> None:
    """baseTimeNanoseconds is the file's last key (relative times): only the helper sees it."""
    path = _plain(tmp_path, TRITON)
    text = path.read_bytes()
    assert text.rindex(b'"baseTimeNanoseconds"') > text.rindex(b'"traceEvents"')
    got = _assert_same(path, tmp_path)
    [meta] = split_on.results
    assert meta is not None
    base = json.loads(text)["baseTimeNanoseconds"]
    assert [d.baseTimeNanoseconds for d in meta.docs] == [base]
    # the one kernel of the trace: its ts is relative to that base
    [kernel] = [e for e in json.loads(text)["traceEvents"] if e.get("cat") == "kernel"]
    assert got["kernels"]["start_ns"].to_list() == [base + round(kernel["ts"] * 1000)]


def test_split_with_many_buckets(
    tmp_path: Path, split_on: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small buckets: the bounds come from the merged sample (this process's and the helper's)
    and the adopted spill is dealt into them after this process's rows."""
    monkeypatch.setattr(kstream, "BUCKET_BYTES", 64 << 10)
    monkeypatch.setattr(kstream, "CHUNK_BYTES", 16 << 10)
    buckets: list[str] = []
    init = kstream._Spill.__init__

    def spy(self: Any, path: Path, **kw: Any) -> None:
        init(self, path, **kw)
        if ".bucket" in path.name:
            buckets.append(path.name)

    monkeypatch.setattr(kstream._Spill, "__init__", spy)
    path = _plain(tmp_path, RESNET)
    got = _assert_same(path, tmp_path)
    [meta] = split_on.results
    assert meta is not None and meta.rows["kernels"] > 0
    assert sum(b.startswith("kernels.bucket") for b in buckets) >= 4
    assert got["kernels"]["kernel_id"].to_list() == list(range(4350))


def test_ties_across_the_cut_keep_file_order(tmp_path: Path, split_on: Spy) -> None:
    """Seven start times shared by 3,000 kernels spread over the file: among equal starts, the
    rows before the cut (this process's) come first, in file order, as in a stable sort."""
    events = [_kernel(i, f"k{i % 9}") for i in range(3000)]
    text = '{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + "\n]}\n"
    path = tmp_path / "ties.json"
    path.write_text(text)
    got = _assert_same(path, tmp_path)
    [meta] = split_on.results
    assert meta is not None and 0 < meta.rows["kernels"] < 3000
    # expected, from the events: a stable sort of the correlation ids by ts
    order = sorted(range(3000), key=lambda i: 1000 + 10 * (i % 7))
    assert got["kernels"]["correlation_id"].to_list() == order


def test_tables_on_one_side_of_the_cut_only(
    tmp_path: Path, split_on: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ops, markers and kernels before the cut, the copies after it: a table whose rows all
    come from the helper (no spill of this process's own), and tables the helper has none of."""
    ops = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{i % 5}",
            "pid": 1,
            "tid": 2,
            "ts": 5000 - i,
            "dur": 2.5,
            "args": {"External id": i},
        }
        for i in range(2000)
    ]
    marks = [
        {"ph": "i", "cat": "user_annotation", "name": f"mark{i}", "pid": 1, "tid": 2, "ts": i}
        for i in range(50)
    ]
    kernels = [json.loads(_kernel(i, f"k{i % 3}")) for i in range(1000)]
    copies = [
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "pid": 0,
            "tid": 7,
            "ts": 900 + i % 11,
            "dur": 1,
            "args": {"device": 0, "stream": 7, "correlation": 10_000 + i, "bytes": 64},
        }
        for i in range(1000)
    ]
    events = ops + marks + kernels + copies
    text = json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=0).encode()
    path = tmp_path / "sides.json"
    path.write_bytes(text)
    helper_start = text.rindex(b"{", 0, text.index(b'"gpu_memcpy"'))
    main_end = text.rindex(b"}", 0, helper_start) + 1
    monkeypatch.setattr(split, "plan", lambda p: split.Plan(main_end, helper_start))
    got = _assert_same(path, tmp_path)
    [meta] = split_on.results
    assert meta is not None
    assert _cats(_helper_part(text, helper_start)["traceEvents"], "gpu_memcpy") == 1000
    assert {t: n for t, n in meta.rows.items() if n} == {"memcpy": 1000}
    assert got["kernels"].height == got["memcpy"].height == 1000
    assert got["ops"]["external_id"].to_list() == list(range(1999, -1, -1))
    # copies sorted stably by start: the expected order computed from the events
    order = sorted(range(1000), key=lambda i: 900 + i % 11)
    assert got["memcpy"]["correlation_id"].to_list() == [10_000 + i for i in order]


# --- the cut not usable: inside a string, helper failing or not starting -----------------------


def _kernel(i: int, name: str) -> str:
    return json.dumps(
        {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": 1000 + 10 * (i % 7),
            "dur": 3 + i % 5,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
    )


def _trace_with_cut_in_a_name(tmp_path: Path) -> tuple[Path, bytes, int]:
    """A trace whose 150th kernel is named `a},{b`; the file and the offset of that `}`."""
    events = [_kernel(i, "a},{b" if i == 150 else f"k{i % 9}") for i in range(300)]
    text = ('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + "\n]}\n").encode()
    path = tmp_path / "cut_in_string.json"
    path.write_bytes(text)
    return path, text, text.index(b"a},{b") + 1


def test_cut_inside_a_string(
    tmp_path: Path, split_on: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, text, brace = _trace_with_cut_in_a_name(tmp_path)
    monkeypatch.setattr(split, "plan", lambda p: split.Plan(brace + 1, brace + 2))
    assert text[brace : brace + 3] == b"},{"
    got = _assert_same(path, tmp_path)
    assert got["kernels"].height == 300
    assert "a},{b" in got["kernels"]["name"].to_list()
    assert split_on.starts == [brace + 2]
    assert split_on.results == [], "the helper's result was used after a bad cut"
    assert split_on.kept == [False]


def test_rejected_cut_removes_a_finished_helpers_files(
    tmp_path: Path, split_on: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process's end inside a string, the helper's start on a real event: the helper
    finishes and writes its spills and meta, and they are removed all the same."""
    path, text, brace = _trace_with_cut_in_a_name(tmp_path)
    event = text.index(b'{"ph"', brace)
    monkeypatch.setattr(split, "plan", lambda p: split.Plan(brace + 1, event))
    _assert_same(path, tmp_path)
    assert split_on.results == [] and split_on.kept == [False]
    [files] = split_on.files_at_close
    assert split.META in files and "part1.kernels.spill.arrow" in files


def test_cut_in_an_array_after_the_events(tmp_path: Path, split_on: Spy) -> None:
    """The events end before the middle; deviceProperties, a long array of objects, comes after
    them: the planned `},{` lies there. The helper may well decode those objects as events,
    but this process does not confirm the cut, and reads on itself."""
    doc = json.loads(gzip.decompress(shared(f"kineto_json/{TRITON}").read_bytes()))
    devices = doc["deviceProperties"] * 40
    text = (
        '{"schemaVersion": 1, "traceEvents": '
        + json.dumps(doc["traceEvents"], indent=1)
        + ', "deviceProperties": '
        + json.dumps(devices, indent=1)
        + f', "baseTimeNanoseconds": {doc["baseTimeNanoseconds"]}}}'
    ).encode()
    path = tmp_path / "devices_last.json"
    path.write_bytes(text)
    got = _assert_same(path, tmp_path)
    [start] = split_on.starts
    assert start > text.index(b'"deviceProperties"')
    assert split_on.results == [] and split_on.kept == [False]
    assert got["devices"].height == len(devices)
    assert got["kernels"].height == 1


def test_cut_in_a_nested_array_of_objects(
    tmp_path: Path, split_on: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `},{` between two objects of an event's args (`"inputs": [{...}, {...}]`): this
    process's part is unbalanced there, the cut is not confirmed."""
    events = [
        _kernel(i, f"k{i % 5}")[:-2] + ', "inputs": [{"a": 1}, {"b": 2}]}}' for i in range(300)
    ]
    text = ('{"traceEvents": [\n' + ",\n".join(events) + "\n]}").encode()
    path = tmp_path / "nested.json"
    path.write_bytes(text)
    assert json.loads(text)["traceEvents"][150]["args"]["inputs"] == [{"a": 1}, {"b": 2}]
    brace = text.index(b'{"a": 1}, {"b": 2}', len(text) // 2) + len(b'{"a": 1}')
    monkeypatch.setattr(split, "plan", lambda p: split.Plan(brace, brace + 2))
    got = _assert_same(path, tmp_path)
    assert got["kernels"].height == 300
    assert split_on.starts == [brace + 2]
    assert split_on.results == [] and split_on.kept == [False]


def _damaged(tmp_path: Path, where: str) -> tuple[Path, int]:
    """The ResNet-50 trace with a garbled event in the helper's part or in this process's, or
    cut short in the helper's part; the file and the offset of the damage."""
    plain = _plain(tmp_path, RESNET)
    text = plain.read_bytes()
    cut = split.plan(plain, min_bytes=0)
    assert cut is not None
    if where == "truncated":
        at = (cut.helper_start + len(text)) // 2
        bad = text[:at]
    else:
        after = cut.helper_start + 1_000_000 if where == "helper" else 3_000_000
        at = text.index(b'"ph": "X", "cat": "cuda_runtime"', after)
        assert (at > cut.helper_start) == (where == "helper")
        bad = text[:at] + b'"ph": "X", "cat": ]]' + text[at + 32 :]
    path = tmp_path / "damaged.json"
    path.write_bytes(bad)
    return path, at


@pytest.mark.parametrize("where", ["helper", "main", "truncated"])
def test_damaged_event_same_error(tmp_path: Path, split_on: Spy, where: str) -> None:
    """A damaged event in the helper's part makes the helper fail (this process reads on from
    the cut); in this process's part, the cut is not confirmed. The error is the one-process
    read's, at the same byte."""
    path, at = _damaged(tmp_path, where)
    whole, streamed = _same_error(path, tmp_path)
    assert streamed.line == whole.line
    if where != "truncated":
        assert f"byte {at + 18} of the JSON text" in str(whole)
    assert len(split_on.starts) == 1
    # the helper failed (its result None), or was not asked (the cut not confirmed)
    assert split_on.results == ([] if where == "main" else [None])
    assert split_on.kept == [False]


def test_value_over_the_callers_limit_in_the_helpers_part(tmp_path: Path, split_on: Spy) -> None:
    """A 2 MiB kernel name past the cut, read under `input_limits(max_value_bytes=1 MiB)` (not
    the environment's): the helper reads under that limit too, fails, and the error is the
    one-process read's."""
    text = _plain(tmp_path, RESNET).read_bytes()
    at = text.index(b'"cat": "kernel", "name": "', len(text) * 9 // 10) + 26
    bad = text[:at] + b"x" * (2 << 20) + text[at:]
    path = tmp_path / "long_name.json"
    path.write_bytes(bad)
    cut = split.plan(path, min_bytes=0)
    assert cut is not None and cut.helper_start < at
    with input_limits(max_value_bytes=1 << 20):
        _same_error(path, tmp_path, InputTooLarge)
    assert split_on.results == [None], "the helper read past the caller's limit"


def test_bad_times_on_both_sides_same_error(tmp_path: Path, split_on: Spy) -> None:
    """A ts that is no number in each part: found in pass 2, over this process's rows and the
    adopted ones; the same first event and count as the one-process read."""
    text = _plain(tmp_path, RESNET).read_bytes()
    half = len(text) // 2
    first = text.index(b'"cat": "kernel"', 1_000_000)
    second = text.index(b'"cat": "kernel"', half + len(text) // 4 + 100_000)
    for at in sorted((first, second), reverse=True):
        ts = text.index(b'"ts": ', at)
        text = text[:ts] + b'"ts": "soon", "x": ' + text[ts + 6 :]
    path = tmp_path / "bad_ts.json"
    path.write_bytes(text)
    whole, _ = _same_error(path, tmp_path)
    assert "'soon'" in str(whole) and "(2 such events)" in str(whole)
    [meta] = split_on.results
    assert meta is not None and split_on.starts[0] < second


def test_helper_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(split, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(split, "default_workers", lambda: 2)
    asked: list[int] = []

    def none(path: Any, start: int, workdir: Path) -> None:
        asked.append(start)

    monkeypatch.setattr(split, "start_helper", none)
    _assert_same(_plain(tmp_path, RESNET), tmp_path)
    assert len(asked) == 1


def test_no_process_can_be_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Popen` itself failing (EAGAIN, ENOMEM): `start_helper` gives None, one-process read."""
    monkeypatch.setattr(split, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(split, "default_workers", lambda: 2)
    tried: list[list[str]] = []

    def boom(argv: list[str], **kw: Any) -> Any:
        tried.append(argv)
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", boom)
    _assert_same(_plain(tmp_path, CUPTI), tmp_path)
    [argv] = tried
    assert argv[1:-3] == [*split.SAFE_PATH, "-m", split.__name__]


# --- never split -------------------------------------------------------------------------------


def test_plan_cuts_between_two_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(split, "default_workers", lambda: 2)
    path = _plain(tmp_path, RESNET)
    text = path.read_bytes()
    cut = split.plan(path, min_bytes=0)
    assert cut is not None
    assert text[cut.main_end - 1 : cut.main_end] == b"}"
    assert text[cut.main_end : cut.helper_start].strip() == b","
    assert len(text) // 2 <= cut.main_end < len(text)
    _helper_part(text, cut.helper_start)  # the rest decodes as events: a top-level boundary


def test_never_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(split, "default_workers", lambda: 2)
    plain = _plain(tmp_path, RESNET)
    gz = shared(f"kineto_json/{RESNET}")
    # under the threshold (the default: 256 MiB), and gzip at any size
    assert plain.stat().st_size < split.SPLIT_MIN_BYTES
    assert split.plan(plain) is None
    assert split.plan(plain, min_bytes=plain.stat().st_size + 1) is None
    assert split.plan(plain, min_bytes=plain.stat().st_size) is not None
    assert split.plan(gz, min_bytes=0) is None
    # one CPU
    monkeypatch.setattr(split, "default_workers", lambda: 1)
    assert split.plan(plain, min_bytes=0) is None


@pytest.mark.parametrize("case", ["gzip", "one_cpu", "read_whole"])
def test_no_helper_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Threshold 0, yet no helper: a gzip file, one CPU, or `read_kineto_json` (no spills)."""
    monkeypatch.setattr(split, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(split, "default_workers", lambda: 1 if case == "one_cpu" else 2)
    started: list[int] = []

    def record(path: Any, start: int, workdir: Path) -> None:
        started.append(start)

    monkeypatch.setattr(split, "start_helper", record)
    gz = shared(f"kineto_json/{CUPTI}")
    path = gz if case == "gzip" else _plain(tmp_path, CUPTI)
    if case == "read_whole":
        read_kineto_json(path)
    else:
        _assert_same(path, tmp_path)
    assert started == []


def test_helper_without_the_safe_path_flag_and_a_relative_path(
    tmp_path: Path, split_on: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.10 has no `-P`: the helper then runs in its work directory (where `-m` puts the
    current directory on sys.path), so a path relative to the caller's directory must reach it
    whole. A `json.py` in the caller's directory must not be imported by the helper."""
    monkeypatch.setattr(split, "SAFE_PATH", [])
    path = _plain(tmp_path, RESNET)
    (tmp_path / "json.py").write_text("raise SystemExit('the shadow json module was imported')\n")
    monkeypatch.chdir(tmp_path)
    _assert_same(Path(path.name), tmp_path)
    [meta] = split_on.results
    assert meta is not None, "the helper failed"
