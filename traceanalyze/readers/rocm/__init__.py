"""AMD ROCm profilers' own outputs (docs/howto-rocm.md; ../shared/docs/formats.md section 11):

* `rocprofv3_json`: rocprofv3 (rocprofiler-sdk) `--output-format json`, plain or gzip, streamed;
* `rocprofv3_csv`: rocprofv3 `*_kernel_trace.csv` (with `*_agent_info.csv` beside it);
* `rpd`: rocmProfileData (rpd_tracer) SQLite;
* `rocprof_csv`, `rocprof_sqlite`: rocprof v1 `results.csv` / `results.db` (`--stats`,
  `--timestamp on`); `results.stats.csv` is recognized and refused (pass results.csv);
* `rocm_smi_csv`: rocm-smi / amd-smi telemetry logs in CSV.

rocm-smi logs live here rather than in the `smi` family: their columns (edge and junction
temperatures, `cardN` devices, sweep-closing `<timestamp>,` rows) are AMD's, and the `smi`
family's readers stay NVIDIA's (nvidia-smi, NVML, DCGM); this package's other modules
(`names`, `devices`, `jsonstream`) are its own.

`SCREENS` are the six readers' detection screens (`readers.common.screen`): this module is
imported before any reader is, so it stays cheap, and detecting a trace of another format imports
none of the six (7-12 ms of a `traceanalyze` process that reads a Kineto trace).
"""

from __future__ import annotations

from collections.abc import Callable

from ..common.core import SQLITE_MAGIC


def _sqlite(head: bytes) -> bool:
    # rpd and rocprof_sqlite sniff `is_sqlite` first, then their tables
    return head == SQLITE_MAGIC


def _rocprofv3_json(head: bytes) -> bool:
    # the sniff itself, on the same 256 bytes
    head = head.lstrip()
    return head.startswith(b"{") and head[1:].lstrip().startswith(b'"rocprofiler-sdk-tool"')


def _rocprofv3_csv(head: bytes) -> bool:
    # header cells Kernel_Name and Start_Timestamp (ASCII: their bytes are in the head)
    return b"\x00" not in head and b"Kernel_Name" in head and b"Start_Timestamp" in head


def _rocprof_csv(head: bytes) -> bool:
    # results.csv has KernelName; results.stats.csv's header TotalDurationNs
    return b"\x00" not in head and (b"KernelName" in head or b"TotalDurationNs" in head)


def _rocm_smi_csv(head: bytes) -> bool:
    # a time, a device and a metric column: three cells of the first line, two commas at least
    return b"\x00" not in head and head.split(b"\n", 1)[0].count(b",") >= 2


# slug -> (bytes of head its sniff reads, screen): each a necessary condition of the sniff.
SCREENS: dict[str, tuple[int, Callable[[bytes], bool]]] = {
    "rpd": (16, _sqlite),
    "rocprof_sqlite": (16, _sqlite),
    "rocprofv3_json": (256, _rocprofv3_json),
    "rocprofv3_csv": (4096, _rocprofv3_csv),
    "rocprof_csv": (4096, _rocprof_csv),
    "rocm_smi_csv": (4096, _rocm_smi_csv),
}
