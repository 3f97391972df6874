"""Detection's screens (`readers/common/screen.py`, declared by the format packages): each is a
necessary condition of its reader's sniff, so screening never changes what `detect_format`
answers, and detecting a Kineto trace imports none of the screened readers.

Expected answers come from the sniffs themselves, every reader asked (what detection did before
the screens), on every real capture, on the project's fixtures, on written heads of every
variant each screened sniff knows, and on heads hypothesis builds from their lines, gzipped
whole, cut short or not at all.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, all_shared_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.readers import READERS, detect_format
from traceanalyze.readers.common import screen as _screen
from traceanalyze.readers.common.core import head_bytes

SCREENED = list(_screen.SCREENS)

# First lines of every variant the screened sniffs claim, and near misses.
LINES = [
    # smi_csv: the sampler, nvidia-smi with and without a header, dcgmi, dumpGpuPower, generic
    "# traceanalyze-nvml-sampler v1 interval_ms=100",
    "timestamp_ns,device_id,device_uuid,sm_clock_mhz,power_w",
    "timestamp, index, clocks.sm [MHz], power.draw [W], temperature.gpu",
    "2024/03/01 12:00:00.123, 0, 1380 MHz, 250.1 W, 60",
    "#Entity   SMCLK   POWER",
    "GPU 0     1380    250.1",
    "[0] Power: 250.5, Util: 98, CoreClockMhz: 1380, MemClockMHz: 877, Timestamp_ns: 17, Temp: 60",
    "Starting power measurement with energy 1000 at 17",
    "Closing profiler with energy 2000 at 18",
    '"timestamp","power_w","sm_clock_mhz"',
    "timestamp,sm_clock_mhz",
    # nvprof_csv: envelope lines, each table's header, quoted or not, in another order
    "==1234== NVPROF is profiling process 1234, command: python train.py",
    "==1234== Profiling result:",
    '"Start","Duration","Grid X","Name"',
    '"Type","Time(%)","Time","Calls","Name"',
    '"Device","Kernel","Invocations","Metric Name"',
    '"Device","Context","Stream","Kernel","achieved_occupancy"',
    "Name,Duration,Start",
    "ms,us,,",
    # ROCm: rocprofv3 CSV (integer and "Agent N" agents), rocprof v1 results.csv and its
    # stats, rocm-smi and amd-smi logs, a rocprofv3 JSON head, and near misses
    '"Kind","Agent_Id","Queue_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp",'
    '"End_Timestamp"',
    "Agent_Id,Kernel_Name,Start_Timestamp,End_Timestamp",
    "Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,DispatchNs,BeginNs,EndNs",
    '"Name","Calls","TotalDurationNs","AverageNs","Percentage"',
    "timestamp,device,Temperature (Sensor junction) (C),Current Socket Graphics Package Power (W)",
    "timestamp,gpu,power_w,gfx_clk",
    "time,device,sclk",
    '{"rocprofiler-sdk-tool": [',
    "Kernel_Name,Start_Timestamp",
    "KernelName",
    # near misses and other formats' heads
    '{"schemaVersion": 1, "traceEvents": [',
    # ncu_csv, quoted and not
    '"ID","Process ID","Process Name","Kernel Name"',
    "ID,Process ID,Process Name,Kernel Name",
    "Iteration Duration 3 cuda:0 : 0.31",
    "Kernel",
    "",
    "   ",
    "\ufeff",
    "==",
]


# No stored file is an nsys report (tests/test_nsys_rep.py makes one) or a rocprofv3 CSV (none
# is shipped; tests/test_rocprofv3_csv.py writes its own): their yes comes from LINES here.
MADE_BY_TESTS = {"nsys_rep", "rocprofv3_csv"}


def _head_files() -> list[Path]:
    files = list(all_shared_files())
    rocm = ROOT.parent / "shared" / "sets" / "rocm"  # the ROCm captures live among the sets
    files += sorted(p for p in rocm.rglob("*") if p.is_file() and p.suffix != ".md")
    files += [p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix != ".md"]
    return files


def _claims(path: Path) -> list[str]:
    """Every reader asked, no screen: the readers whose sniff claims the file."""
    return [slug for slug, r in READERS.items() if r.sniff(path)]


def _check(path: Path) -> None:
    claims = _claims(path)
    kept = _screen.candidates(path, list(READERS))
    for slug in SCREENED:
        n, screen = _screen.SCREENS[slug]
        if slug in claims:
            assert slug in kept, f"{path}: {slug}'s sniff claims it but it was screened out"
            if not path.name.endswith(".ncu-rep"):  # a report is claimed by its name alone
                assert screen(head_bytes(path, n)), f"{path}: {slug}'s screen says no"
    assert set(claims) <= set(kept)
    if len(claims) == 1:
        assert detect_format(path) == claims[0]
    else:
        with pytest.raises(TraceanalyzeError):
            detect_format(path)


def test_real_files_and_fixtures() -> None:
    files = _head_files()
    if not any(p.is_relative_to(ROOT.parent / "shared") for p in files):
        pytest.skip("../shared/traces is absent: only the fixtures are checked elsewhere")
    claimed = {slug: 0 for slug in SCREENED}
    for p in files:
        _check(p)
        for slug in _claims(p):
            claimed.setdefault(slug, 0)
            claimed[slug] += 1
    # the real corpus exercises every screened reader's yes; an nsys report is made by the
    # tests that need one (tests/test_nsys_rep.py checks its screen on it), none is stored
    assert all(claimed[s] for s in SCREENED if s not in MADE_BY_TESTS), claimed


@pytest.mark.parametrize("line", [ln for ln in LINES if ln.strip("\ufeff= ")])
def test_each_written_head(tmp_path: Path, line: str) -> None:
    p = tmp_path / "head.csv"
    p.write_text(line + "\n" + line + "\n")
    _check(p)


def test_every_smi_and_nvprof_variant_is_claimed_and_kept(tmp_path: Path) -> None:
    # The written heads reach each screened text reader's yes: the test above is not vacuous.
    seen = set()
    for i, line in enumerate(LINES):
        p = tmp_path / f"h{i}.csv"
        p.write_text(line + "\n" + LINES[(i + 1) % len(LINES)] + "\n")
        claims = _claims(p)
        seen.update(claims)
        assert set(claims) <= set(_screen.candidates(p, list(READERS)))
    assert {"smi_csv", "nvprof_csv", "ncu_csv"} <= seen


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    junk = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
    lines = draw(st.lists(st.one_of(st.sampled_from(LINES), junk), min_size=0, max_size=8))
    sep = draw(st.sampled_from(["\n", "\r\n"]))
    text = draw(st.sampled_from(["", "\ufeff"])) + sep.join(lines)
    raw = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):  # a NUL somewhere
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + b"\x00" + raw[at:]
    if draw(st.booleans()):
        raw = gzip.compress(raw)
        if draw(st.booleans()):  # cut short
            raw = raw[: draw(st.integers(10, max(len(raw) - 1, 10)))]
    return raw


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=heads())
def test_generated_heads(tmp_path: Path, raw: bytes) -> None:
    p = tmp_path / "head"
    p.write_bytes(raw)
    _check(p)


def test_an_ncu_report_is_kept_by_its_name(tmp_path: Path) -> None:
    p = tmp_path / "capture.ncu-rep"
    p.write_bytes(b"\x00\x01binary report")
    assert "ncu_csv" in _screen.candidates(p, list(READERS))
    _check(p)


def test_a_sqlite_head_keeps_only_sqlite_readers(tmp_path: Path) -> None:
    p = tmp_path / "x.sqlite"
    p.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    kept = _screen.candidates(p, list(READERS))
    assert "nsys_sqlite" in kept and "nvprof_sqlite" in kept
    assert not {"nvprof_csv", "smi_csv", "ncu_csv"} & set(kept)


def test_detecting_a_kineto_trace_imports_no_screened_reader() -> None:
    trace = next(
        (p for p in all_shared_files() if p.name.endswith(".json.gz")),
        FIXTURES / "kineto_json-resnet50-cpu",
    )
    if trace.is_dir():
        trace = next(p for p in trace.rglob("*.json*"))
    code = (
        "import sys; from traceanalyze.readers import detect_format; "
        f"print(detect_format({str(trace)!r})); "
        "print(' '.join(m for m in sys.modules if m.startswith('traceanalyze.readers.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split("\n")
    assert out[0] == "kineto_json"
    loaded = {m.rsplit(".", 1)[1] for m in out[1].split()}
    assert "kineto_json" in loaded
    assert not loaded & set(SCREENED), loaded & set(SCREENED)
