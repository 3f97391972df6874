"""The NVML sampler loop against a fake NVML module: values, nulls, units, deadline scheduling."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from traceanalyze.collect.sampler import COLUMNS, MAGIC, NvmlSampler, visible_devices

NOT_SUPPORTED = 3
EPOCH = 1_790_000_000_000_000_000


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeClock:
    """Monotonic and wall clocks that advance only when the code sleeps or NVML is slow."""

    now: int = 0

    def mono(self) -> int:
        return self.now

    def wall(self) -> int:
        return EPOCH + self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += round(seconds * 1e9)


class FakeNVML:
    """The subset of pynvml the sampler calls. GPU 0 is an H100-like board (instant power, no
    fan); GPU 1 an older board (averaged power only, fan, old throttle-reasons call)."""

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_SUCCESS = 0
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, clock: FakeClock, latency_ns: list[int] | None = None) -> None:
        self.clock = clock
        self.latency_ns = latency_ns or []  # consumed one per sample of GPU 0 (clock query)
        self.calls = 0

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlDeviceGetName(self, h: int) -> str:
        return ["NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB"][h]

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return [(9, 0), (7, 0)][h]

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-0000000{h}-aaaa".encode()

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        for h in range(self.nvmlDeviceGetCount()):
            if self.nvmlDeviceGetUUID(h).decode() == uuid:
                return h
        raise FakeNVMLError(13)  # NVML_ERROR_NOT_FOUND

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[int]) -> list[Any]:
        assert ids == [self.NVML_FI_DEV_POWER_INSTANT]
        if h == 1:
            raise FakeNVMLError(NOT_SUPPORTED)
        fv = SimpleNamespace(
            nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=312_456 + self.calls)
        )
        return [fv]

    def nvmlDeviceGetClockInfo(self, h: int, which: int) -> int:
        if h == 0 and which == self.NVML_CLOCK_SM:
            self.calls += 1
            if self.latency_ns:
                self.clock.now += self.latency_ns.pop(0)
        return {(0, 1): 1980, (0, 2): 2619, (1, 1): 1380, (1, 2): 877}[(h, which)]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        assert h == 1, "GPU 0 must use the instant field"
        return 250_500

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return [700_000, 300_000][h]

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return [61, 45][h]

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        if h == 0:
            raise FakeNVMLError(NOT_SUPPORTED)
        return 33

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=[97, 12][h], memory=[41, 3][h])

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return [123_456_789, 5_000][h]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return [0x4, 0x0][h]


def rows(text: str) -> tuple[str, list[dict[str, str]]]:
    first, rest = text.split("\n", 1)
    return first, list(csv.DictReader(io.StringIO(rest)))


def make(clock: FakeClock, nvml: Any, **kw: Any) -> tuple[NvmlSampler, io.StringIO]:
    buf = io.StringIO()
    s = NvmlSampler(nvml, buf, clock=clock.mono, wall=clock.wall, sleep=clock.sleep, **kw)
    return s, buf


def test_values_units_nulls_and_power_kind() -> None:
    clock = FakeClock()
    s, buf = make(clock, FakeNVML(clock))
    s.run(max_samples=2)
    first, rs = rows(buf.getvalue())
    assert first == f"{MAGIC} interval_ms=50"
    assert list(rs[0]) == list(COLUMNS)
    assert len(rs) == 4  # 2 samples × 2 GPUs
    g0 = rs[0]
    assert g0 == {
        "timestamp_ns": str(EPOCH),
        "device_id": "0",
        "device_uuid": "GPU-00000000-aaaa",
        "sm_clock_mhz": "1980",
        "mem_clock_mhz": "2619",
        "power_w": "312.457",  # instant field, mW → W (the 1st clock call bumped it by 1)
        "power_kind": "instant",
        "power_limit_w": "700.0",
        "temperature_c": "61",
        "fan_pct": "",  # NOT_SUPPORTED → null
        "gpu_util_pct": "97",
        "mem_util_pct": "41",
        "energy_j": "123456.789",  # mJ → J
        "clock_event_reasons": "4",
    }
    assert rs[1]["power_kind"] == "average" and rs[1]["power_w"] == "250.5"
    assert rs[1]["fan_pct"] == "33" and rs[1]["energy_j"] == "5.0"
    assert rs[1]["power_limit_w"] == "300.0"
    # Second sample 50 ms later, on both GPUs.
    assert [r["timestamp_ns"] for r in rs[2:]] == [str(EPOCH + 50_000_000)] * 2


@pytest.mark.parametrize(
    "value,uuids",
    [
        ("1", ["GPU-00000001-aaaa"]),
        ("1,0", ["GPU-00000001-aaaa", "GPU-00000000-aaaa"]),
        ("GPU-00000001-aaaa,0", ["GPU-00000001-aaaa", "GPU-00000000-aaaa"]),
        ("GPU-00000001", ["GPU-00000001-aaaa"]),  # a unique UUID prefix, as CUDA accepts
        ("GPU-0000000", []),  # ambiguous prefix: selects nothing
        ("0,7,1", ["GPU-00000000-aaaa"]),  # CUDA stops at the first invalid entry
        ("0,0", ["GPU-00000000-aaaa"]),  # a repeat ends the list too
        ("", []),
        ("-1", []),
    ],
)
def test_visible_devices(value: str, uuids: list[str]) -> None:
    assert visible_devices(FakeNVML(FakeClock()), value) == uuids


def test_devices_by_uuid_are_numbered_as_cuda_ordinals() -> None:
    clock = FakeClock()
    s, buf = make(clock, FakeNVML(clock), devices=["GPU-00000001-aaaa"])
    s.run(max_samples=2)
    _, rs = rows(buf.getvalue())
    assert [(r["device_id"], r["device_uuid"], r["temperature_c"]) for r in rs] == [
        ("0", "GPU-00000001-aaaa", "45")
    ] * 2


def test_not_supported_is_not_asked_again() -> None:
    clock = FakeClock()
    nvml = FakeNVML(clock)
    asked: list[int] = []
    orig = nvml.nvmlDeviceGetFanSpeed

    def fan(h: int) -> int:
        asked.append(h)
        return orig(h)

    nvml.nvmlDeviceGetFanSpeed = fan  # type: ignore[method-assign]
    s, buf = make(clock, nvml)
    s.run(max_samples=3)
    assert asked == [0, 1, 1, 1]  # GPU 0 answered NOT_SUPPORTED once, then never again
    _, rs = rows(buf.getvalue())
    assert [r["fan_pct"] for r in rs] == ["", "33"] * 3


def test_old_throttle_reasons_call() -> None:
    class OldNVML(FakeNVML):
        nvmlDeviceGetCurrentClocksEventReasons = None  # type: ignore[assignment]

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
            return 0x20 + h

    clock = FakeClock()
    s, buf = make(clock, OldNVML(clock))
    s.run(max_samples=1)
    _, rs = rows(buf.getvalue())
    assert [r["clock_event_reasons"] for r in rs] == ["32", "33"]


def test_other_nvml_errors_become_null_with_one_warning() -> None:
    clock = FakeClock()
    nvml = FakeNVML(clock)

    def temp(h: int, sensor: int) -> int:
        raise FakeNVMLError(15)  # NVML_ERROR_GPU_IS_LOST

    nvml.nvmlDeviceGetTemperature = temp  # type: ignore[method-assign]
    s, buf = make(clock, nvml)
    with pytest.warns(UserWarning, match="NVML temperature failed on GPU") as rec:
        s.run(max_samples=3)
    assert sorted(str(w.message) for w in rec) == [  # once per GPU, not once per sample
        "NVML temperature failed on GPU 0: NVML error 15",
        "NVML temperature failed on GPU 1: NVML error 15",
    ]
    _, rs = rows(buf.getvalue())
    assert [r["temperature_c"] for r in rs] == [""] * 6


def test_absolute_deadlines_do_not_drift() -> None:
    # Each sample costs 7 ms of NVML latency. Deadlines are start + k·50 ms, so sample k still
    # starts at exactly k·50 ms; sleeping a fixed 50 ms would drift by 7 ms per sample.
    clock = FakeClock()
    s, buf = make(clock, FakeNVML(clock, latency_ns=[7_000_000] * 10), devices=[0])
    s.run(max_samples=10)
    _, rs = rows(buf.getvalue())
    assert [int(r["timestamp_ns"]) - EPOCH for r in rs] == [k * 50_000_000 for k in range(10)]
    assert s.missed_ticks == 0


def test_a_stall_skips_missed_ticks_instead_of_bursting() -> None:
    # Sample 1 (due at 50 ms) stalls 120 ms inside NVML and ends at 170 ms: the ticks due at
    # 100 and 150 ms are gone, the next sample waits for 200 ms.
    clock = FakeClock()
    nvml = FakeNVML(clock, latency_ns=[0, 120_000_000, 0, 0])
    s, buf = make(clock, nvml, devices=[0])
    s.run(max_samples=4)
    _, rs = rows(buf.getvalue())
    assert [(int(r["timestamp_ns"]) - EPOCH) // 1_000_000 for r in rs] == [0, 50, 200, 250]
    assert s.missed_ticks == 2


def test_custom_interval_in_header_and_schedule() -> None:
    clock = FakeClock()
    s, buf = make(clock, FakeNVML(clock), devices=[1], interval_ms=12.5)
    s.run(max_samples=3)
    first, rs = rows(buf.getvalue())
    assert first == f"{MAGIC} interval_ms=12.5"
    assert [int(r["timestamp_ns"]) - EPOCH for r in rs] == [0, 12_500_000, 25_000_000]
    assert {r["device_id"] for r in rs} == {"1"}


def test_stop_ends_the_loop() -> None:
    clock = FakeClock()
    nvml = FakeNVML(clock)
    s, buf = make(clock, nvml)

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 200_000_000:
            s.stop()

    s.sleep = sleep
    s.run()
    _, rs = rows(buf.getvalue())
    # Samples at 0, 50, 100 and 150 ms; stop() during the wait for 200 ms ends the loop.
    assert len(rs) == 2 * 4


def write_fake_pynvml(tmp_path: Path) -> Path:
    """A directory holding a `pynvml.py` that serves `FakeNVML` (put it first on PYTHONPATH);
    its nvmlShutdown() leaves a file `shut` in tmp_path."""
    mod = tmp_path / "fakemod"
    mod.mkdir()
    (mod / "pynvml.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
        "from test_collect_sampler import FakeNVML, FakeNVMLError, FakeClock\n"
        "_f = FakeNVML(FakeClock())\n"
        "NVMLError = FakeNVMLError\n"
        "def nvmlInit(): pass\n"
        f"def nvmlShutdown(): open({str(tmp_path / 'shut')!r}, 'w').write('shutdown')\n"
        "def __getattr__(name): return getattr(_f, name)\n"
    )
    return mod


def test_sampler_process_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    # The real entry point, with the fake `pynvml` module first on the path.
    mod = write_fake_pynvml(tmp_path)
    out = tmp_path / "nvml.csv"
    env = {**os.environ, "PYTHONPATH": f"{mod}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceanalyze.collect.sampler", "--out", str(out)],
        env=env,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 4):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    text = out.read_text()
    assert text.startswith(f"{MAGIC} interval_ms=50\n")
    first, rs = rows(text)
    assert len(rs) >= 2 and len(rs) % 2 == 0  # whole samples only (both GPUs each time)
    assert (tmp_path / "shut").read_text() == "shutdown"


@pytest.mark.requires_torch
def test_overhead_benchmark_skips_without_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the benchmark would really run")
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sampler_overhead.py"
    cp = subprocess.run(
        [sys.executable, str(bench)], capture_output=True, text=True, timeout=120, check=False
    )
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == (
        "bench_sampler_overhead: skipped: no CUDA GPU (torch.cuda.is_available() is False)"
    )
