"""The issue's decompression bombs, full size: time and peak RSS of `traceanalyze ingest` on each.

Builds under `bench-data/bombs/` (gitignored) on first use, each a valid gzip of several members
(a 64 MiB block compressed once and written again and again, so a 4 GB bomb takes seconds to
make; `gzip -t` accepts it):

* `events_4g.json.gz`: a Kineto trace of 4 GiB of valid kernel events, ~21 MB compressed
  (the issue's: 18.7 MB);
* `smi_3g.csv.gz`, `nvprof_3g.csv.gz`: 3 GiB of real rows (the sampler CSV's, the magus GPU
  trace's), ~9 and ~12 MB compressed (the issue's: 9-12 MB);
* `string_2g.json.gz`: a Kineto trace whose one event has a 2 GiB name string, ~2 MB.

Each runs in a fresh process, `traceanalyze ingest BOMB --store TMP -q`, with the default limits
(`InputLimits`), and the string bomb again with the ratio bound lifted
(TRACEANALYZE_MAX_INFLATE_RATIO=1e9), so the JSON value bound has to catch it, and two with
the ratio lifted and the absolute bound lowered to 512 MiB. A child is killed past 3 GB RSS.
The table shows wall time, the child's peak RSS (wait4) and its one line of stderr; the target
is < 120 s and < 2 GB with exit 1 and one line, or a correct result.

    python benchmarks/bench_bombs.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
DATA = ROOT / "bench-data" / "bombs"
BLOCK = 64 << 20


def _member(data: bytes, level: int = 9) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def write_bomb(path: Path, head: bytes, block: bytes, total: int, tail: bytes) -> Path:
    """head + block repeated to `total` bytes + tail, as gzip members (block compressed once)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    body = _member(block)
    tmp = path.with_suffix(".part")
    with open(tmp, "wb") as f:
        f.write(_member(head))
        for _ in range(total // len(block)):
            f.write(body)
        f.write(_member(tail))
    tmp.replace(path)
    return path


def events_block() -> bytes:
    """64 MiB of valid kernel events: a unit of four that differ in name, times, correlation
    and grid, repeated (inflates ~205x, the issue's 4 GB in 19 MB is 214x)."""
    unit = bytearray()
    for i in range(4):
        unit += (
            b'{"ph":"X","cat":"kernel","name":"volta_sgemm_%dx%d_nn","pid":0,"tid":7,'
            b'"ts":1712195495%06d.%03d,"dur":%d.%03d,"args":{"device":0,"stream":7,'
            b'"correlation":%d,"grid":[%d,1,1],"block":[256,1,1]}},'
            % (64 << (i % 3), 32 << (i % 2), i * 37, i, i + 3, i * 7, i, i * 512)
        )
    return bytes(unit) * (BLOCK // len(unit))


def events_4g() -> Path:
    return write_bomb(
        DATA / "events_4g.json.gz",
        b'{"schemaVersion":1,"traceEvents":[',
        events_block(),
        4 << 30,
        b'{"ph":"i","name":"end","pid":0,"tid":1,"ts":1712195495999999}]}',
    )


def _repeat_to_block(row: bytes) -> bytes:
    return row * (BLOCK // len(row))


def smi_3g() -> Path:
    """3 GiB of one real sampler row: ~9 MB compressed (342x), the issue's 9-12 MB."""
    rows = (SHARED / "smi_logs" / "roofline_custom_nvml_sampler_rtx5070.csv").read_bytes()
    lines = rows.splitlines(keepends=True)
    return write_bomb(DATA / "smi_3g.csv.gz", lines[0], _repeat_to_block(lines[1]), 3 << 30, b"")


def nvprof_3g() -> Path:
    """3 GiB of one real kernel row under the real preamble/header/units: ~12 MB (256x)."""
    src = SHARED / "nvprof_csv" / "magus_matrixMul_gtx1080ti_gputrace.csv"
    rows = src.read_bytes().splitlines(keepends=True)
    head = b"".join(rows[:5])
    row = next(r for r in rows[5:] if b"matrixMulCUDA" in r)
    return write_bomb(DATA / "nvprof_3g.csv.gz", head, _repeat_to_block(row), 3 << 30, b"")


def string_2g() -> Path:
    return write_bomb(
        DATA / "string_2g.json.gz",
        b'{"schemaVersion":1,"traceEvents":[{"ph":"X","cat":"kernel","name":"',
        b"a" * BLOCK,
        2 << 30,
        b'","pid":0,"tid":7,"ts":1,"dur":1}]}',
    )


BOMBS: dict[str, tuple[Callable[[], Path], dict[str, str]]] = {
    "events_4g.json.gz": (events_4g, {}),
    "smi_3g.csv.gz": (smi_3g, {}),
    "nvprof_3g.csv.gz": (nvprof_3g, {}),
    "string_2g.json.gz": (string_2g, {}),
    "string_2g.json.gz, ratio bound off": (
        string_2g,
        {"TRACEANALYZE_MAX_INFLATE_RATIO": "1e9"},
    ),
    # The absolute bound alone (ratio lifted, the absolute one lowered from 16 GiB).
    "nvprof_3g.csv.gz, ratio off, max 512M": (
        nvprof_3g,
        {"TRACEANALYZE_MAX_INFLATE_RATIO": "1e9", "TRACEANALYZE_MAX_INFLATED_BYTES": "512M"},
    ),
    "events_4g.json.gz, ratio off, max 512M": (
        events_4g,
        {"TRACEANALYZE_MAX_INFLATE_RATIO": "1e9", "TRACEANALYZE_MAX_INFLATED_BYTES": "512M"},
    ),
}


KILL_RSS_MB = 3072  # a child past this is killed (on a shared machine, never risk the OOM killer)


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run(path: Path, env_extra: dict[str, str]) -> tuple[float, float, int, str]:
    """(wall s, peak RSS MB, exit code, stderr) of one `traceanalyze ingest`; killed past
    KILL_RSS_MB or 300 s."""
    store = Path(tempfile.mkdtemp(prefix="bomb-store-")) / "st"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_extra}
    cmd = [sys.executable, "-m", "traceanalyze", "ingest", str(path), "--store", str(store), "-q"]
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            while True:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if _rss_mb(p.pid) > KILL_RSS_MB or time.perf_counter() - t0 > 300:
                    p.kill()
                time.sleep(0.05)
        except BaseException:
            p.kill()
            raise
        wall = time.perf_counter() - t0
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    shutil.rmtree(store.parent, ignore_errors=True)
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), text


def main() -> int:
    print(f"{'bomb':38} {'gz MB':>7} {'wall s':>7} {'RSS MB':>7} {'exit':>4}  stderr")
    ok = True
    for name, (make, env) in BOMBS.items():
        path = make()
        wall, rss, code, err = run(path, env)
        one_line = err.count("\n") == 1
        ok &= wall < 120 and rss < 2048 and (code == 0 or (code == 1 and one_line))
        size = path.stat().st_size / 1e6
        print(f"{name:38} {size:7.1f} {wall:7.2f} {rss:7.0f} {code:4}  {err.strip()}")
    print("all within 120 s and 2 GB, one line or a result:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
