"""NVML sampler: per-GPU clocks, power, temperature, utilization and energy at a fixed interval.

Run as its own process for the whole collection (`traceanalyze collect` starts and stops it)::

    python -m traceanalyze.collect.sampler --out nvml.csv --interval-ms 50 [--devices 0,1]

It samples the GPUs `CUDA_VISIBLE_DEVICES` selects (device_id = the CUDA ordinal, as in the
iteration log), or every GPU when the variable is unset.

It writes the project's sampler log, whose format `traceanalyze.readers.smi.smi_csv` defines
(`NVML_SAMPLER_MAGIC`, `NVML_SAMPLER_HEADER`, imported here)::

    # traceanalyze-nvml-sampler v1 interval_ms=50
    timestamp_ns,device_id,device_uuid,sm_clock_mhz,…,energy_j,clock_event_reasons
    1732260000000000000,0,GPU-…,1980,2619,312.4,instant,700,61,,97,41,123456.789,0

Times are Unix epoch ns (host `time.time_ns()` just before the device is read); an empty cell is
null (the GPU does not support the query, e.g. fan speed on passively cooled datacenter GPUs).

NVML calls (nvidia-ml-py 12/13, the `pynvml` module; driver ≥ 525 for the field API):

* power: `nvmlDeviceGetFieldValues([NVML_FI_DEV_POWER_INSTANT])` where the GPU answers it
  (`power_kind=instant`); otherwise `nvmlDeviceGetPowerUsage`, which on Ampere and newer is a 1 s
  average (`power_kind=average`). Both are mW.
* energy: `nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded → J.
* clock event reasons: `nvmlDeviceGetCurrentClocksEventReasons`, or the older
  `nvmlDeviceGetCurrentClocksThrottleReasons` (the same bitmask under its pre-535 name).

The loop takes the NVML module as a parameter (tests pass a fake) and schedules samples on an
absolute deadline grid, so per-sample latency does not accumulate into drift; missed ticks are
skipped, not bunched. SIGTERM/SIGINT end the loop after the current sample; the file is flushed
about once a second and on exit.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any

from ..readers.smi.smi_csv import NVML_SAMPLER_HEADER, NVML_SAMPLER_MAGIC, nvml_sampler_magic_line

# The format is defined by its reader (one source of truth for writer and reader).
COLUMNS: tuple[str, ...] = NVML_SAMPLER_HEADER
MAGIC = NVML_SAMPLER_MAGIC
DEFAULT_INTERVAL_MS = 50
FLUSH_EVERY_NS = 1_000_000_000


def magic_line(interval_ms: float) -> str:
    """The first line of a sampler log; `interval_ms` is written as an integer when whole."""
    return nvml_sampler_magic_line(interval_ms)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(round(v, 6))
    return str(v)


class _Unsupported(Exception):
    """NVML said NOT_SUPPORTED: the cell is null and the query is not repeated."""


@dataclass
class _Device:
    index: int
    handle: Any
    uuid: str | None
    power_kind: str | None
    unsupported: set[str] = field(default_factory=set)


class NvmlSampler:
    """Samples every selected GPU through `nvml` (the `pynvml` module or a stand-in).

    `clock` is a monotonic ns clock used for scheduling, `wall` the epoch ns clock written to the
    log, `sleep` takes seconds. All three are injectable so tests run without real time passing.
    """

    def __init__(
        self,
        nvml: Any,
        out: IO[str],
        *,
        interval_ms: float = DEFAULT_INTERVAL_MS,
        devices: Sequence[int | str] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        wall: Callable[[], int] = time.time_ns,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms}")
        self.nvml = nvml
        self.out = out
        self.interval_ns = int(interval_ms * 1_000_000)
        self.interval_ms = interval_ms
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.stop_event = threading.Event()
        self.samples = 0
        self.missed_ticks = 0
        self._warned: set[tuple[str, int]] = set()
        self._writer = csv.writer(out, lineterminator="\n")
        sel = list(range(nvml.nvmlDeviceGetCount())) if devices is None else list(devices)
        self.devices = [self._open(pos, d) for pos, d in enumerate(sel)]

    # --- set-up ---------------------------------------------------------------------------------

    def _open(self, pos: int, which: int | str) -> _Device:
        """`which`: an NVML index (device_id = that index) when `devices` lists integers or is
        None; a UUID string selects by UUID (see `visible_devices`, device_id = position)."""
        if isinstance(which, str):
            h = self.nvml.nvmlDeviceGetHandleByUUID(which)
            dev = _Device(pos, h, None, None)
        else:
            h = self.nvml.nvmlDeviceGetHandleByIndex(which)
            dev = _Device(which, h, None, None)
        dev.uuid = self._call(dev, "uuid", lambda: _text(self.nvml.nvmlDeviceGetUUID(h)))
        # Probe the instant power field once; GPUs/drivers without it answer NOT_SUPPORTED (or a
        # non-success nvmlReturn inside the field value), and then the averaged reading is used.
        dev.power_kind = "instant" if self._instant_power_mw(h) is not None else "average"
        return dev

    def _instant_power_mw(self, h: Any) -> float | None:
        fi = getattr(self.nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if fi is None or not hasattr(self.nvml, "nvmlDeviceGetFieldValues"):
            return None
        try:
            [fv] = self.nvml.nvmlDeviceGetFieldValues(h, [fi])
        except self.nvml.NVMLError:
            return None
        if fv.nvmlReturn != getattr(self.nvml, "NVML_SUCCESS", 0):
            return None
        return _field_value(self.nvml, fv)

    def _call(self, dev: _Device, what: str, fn: Callable[[], Any]) -> Any:
        """One NVML query: NOT_SUPPORTED → None (and never asked again); other NVML errors →
        None with one warning per query kind (a transient error must not end the sampling)."""
        if what in dev.unsupported:
            return None
        try:
            return fn()
        except self.nvml.NVMLError as e:
            if getattr(e, "value", None) == self.nvml.NVML_ERROR_NOT_SUPPORTED:
                dev.unsupported.add(what)
                return None
            if (what, dev.index) not in self._warned:
                self._warned.add((what, dev.index))
                warnings.warn(f"NVML {what} failed on GPU {dev.index}: {e}", stacklevel=2)
            return None

    # --- one sample -----------------------------------------------------------------------------

    def read(self, dev: _Device) -> list[Any]:
        n, h = self.nvml, dev.handle
        ts = self.wall()
        sm = self._call(dev, "sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        mem = self._call(dev, "mem_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM))
        if dev.power_kind == "instant":
            mw = self._instant_power_mw(h)
        else:
            mw = self._call(dev, "power", lambda: n.nvmlDeviceGetPowerUsage(h))
        limit = self._call(dev, "power_limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h))
        temp = self._call(
            dev, "temperature", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        )
        fan = self._call(dev, "fan", lambda: n.nvmlDeviceGetFanSpeed(h))
        util = self._call(dev, "utilization", lambda: n.nvmlDeviceGetUtilizationRates(h))
        energy = self._call(dev, "energy", lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
        reasons = self._call(dev, "clock_event_reasons", lambda: self._reasons(h))
        return [
            ts,
            dev.index,
            dev.uuid,
            sm,
            mem,
            None if mw is None else mw / 1000.0,
            dev.power_kind if mw is not None else None,
            None if limit is None else limit / 1000.0,
            temp,
            fan,
            None if util is None else util.gpu,
            None if util is None else util.memory,
            None if energy is None else energy / 1000.0,
            reasons,
        ]

    def _reasons(self, h: Any) -> int:
        fn = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is None:  # nvidia-ml-py < 12.535 only has the old name
            fn = self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(fn(h))

    def sample_once(self) -> None:
        for dev in self.devices:
            self._writer.writerow([_fmt(v) for v in self.read(dev)])
        self.samples += 1

    # --- the loop -------------------------------------------------------------------------------

    def write_header(self) -> None:
        self.out.write(magic_line(self.interval_ms) + "\n")
        self._writer.writerow(COLUMNS)
        self.out.flush()

    def run(self, max_samples: int | None = None) -> None:
        """Sample until `stop()` (or `max_samples`); sample k is due at start + k·interval."""
        self.write_header()
        start = self.clock()
        last_flush = start
        k = 0
        while not self.stop_event.is_set():
            self.sample_once()
            k += 1
            if max_samples is not None and self.samples >= max_samples:
                break
            now = self.clock()
            if now - last_flush >= FLUSH_EVERY_NS:
                self.out.flush()
                last_flush = now
            due = start + k * self.interval_ns
            if now >= due:
                # Behind schedule (a slow NVML call, a descheduled process): skip to the next
                # tick in the future instead of firing a burst of catch-up samples.
                skipped = (now - due) // self.interval_ns + 1
                self.missed_ticks += skipped
                k += skipped
                due = start + k * self.interval_ns
            self._wait((due - now) / 1e9)
        self.out.flush()

    def _wait(self, seconds: float) -> None:
        if self.sleep is time.sleep:
            # Wakes early on stop(), so SIGTERM does not wait out a long interval.
            self.stop_event.wait(seconds)
        else:
            self.sleep(seconds)

    def stop(self) -> None:
        self.stop_event.set()


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _field_value(nvml: Any, fv: Any) -> float | None:
    """The number inside an `nvmlFieldValue_t`, by its `valueType`."""
    by_type = {
        getattr(nvml, "NVML_VALUE_TYPE_DOUBLE", 0): "dVal",
        getattr(nvml, "NVML_VALUE_TYPE_UNSIGNED_INT", 1): "uiVal",
        getattr(nvml, "NVML_VALUE_TYPE_UNSIGNED_LONG", 2): "ulVal",
        getattr(nvml, "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", 3): "ullVal",
        getattr(nvml, "NVML_VALUE_TYPE_SIGNED_LONG_LONG", 4): "sllVal",
        getattr(nvml, "NVML_VALUE_TYPE_SIGNED_INT", 5): "siVal",
    }
    attr = by_type.get(fv.valueType)
    if attr is None:
        return None
    return float(getattr(fv.value, attr))


def visible_devices(nvml: Any, cuda_visible: str) -> list[str]:
    """UUIDs of the GPUs a `CUDA_VISIBLE_DEVICES` value selects, in CUDA ordinal order, so that
    the log's device_id is the CUDA ordinal the training ranks see (position in the list).

    Entries are indices or `GPU-…` UUIDs (prefixes allowed, as CUDA does); like CUDA, the list
    ends at the first entry that selects nothing. Indices are NVML's (PCI bus order); CUDA's
    default order (`CUDA_DEVICE_ORDER=FASTEST_FIRST`) agrees on nodes of identical GPUs.
    """
    count = nvml.nvmlDeviceGetCount()
    uuids = [
        _text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)
    ]
    out: list[str] = []
    for tok in (t.strip() for t in cuda_visible.split(",")):
        if tok.isdigit() and int(tok) < count:
            hit: str | None = uuids[int(tok)]
        else:
            cands = [u for u in uuids if tok and u.startswith(tok)] if tok.startswith("GPU") else []
            hit = cands[0] if len(cands) == 1 else None
        if hit is None or hit in out:
            break
        out.append(hit)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m traceanalyze.collect.sampler", description="NVML sampler (CSV log)."
    )
    ap.add_argument("--out", required=True, help="Output CSV path.")
    ap.add_argument("--interval-ms", type=float, default=DEFAULT_INTERVAL_MS)
    ap.add_argument(
        "--devices",
        default=None,
        help="Comma-separated NVML indices [default: those CUDA_VISIBLE_DEVICES selects, "
        "numbered as CUDA ordinals, or all GPUs when it is unset].",
    )
    args = ap.parse_args(argv)
    try:
        import pynvml
    except ImportError:
        sys.stderr.write("sampler: nvidia-ml-py (pynvml) is not installed\n")
        return 2
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        sys.stderr.write(f"sampler: NVML unavailable: {e}\n")
        return 2
    try:
        devices: list[int | str] | None = None
        if args.devices is not None:
            devices = [int(x) for x in args.devices.split(",") if x]
        elif "CUDA_VISIBLE_DEVICES" in os.environ:
            devices = list(visible_devices(pynvml, os.environ["CUDA_VISIBLE_DEVICES"]))
        with open(args.out, "w", newline="") as f:
            s = NvmlSampler(pynvml, f, interval_ms=args.interval_ms, devices=devices)

            def _stop(signum: int, frame: FrameType | None) -> None:
                s.stop()

            signal.signal(signal.SIGTERM, _stop)
            signal.signal(signal.SIGINT, _stop)
            s.run()
    finally:
        pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
