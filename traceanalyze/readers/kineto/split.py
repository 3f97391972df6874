"""Pass 1 of a big Kineto trace on two cores: this process decodes the first part of the events
array while a helper process decodes the rest (`stream_kineto_json`, what `ingest` uses).

Why: pass 1 (msgspec's decode, the per-table columns, the spill writes) is ~70 % of a 1 GB
trace's ingest and runs on one core, msgspec holding the GIL. The byte-level JSON cannot be cut
anywhere, but a plain (not gzip) file can be entered at any offset: `plan` picks an offset past
the middle and the first `}`, `,`, `{` after it (between two events, unless it lies inside a
string or a nested array of objects). The helper decodes from that `{` to the end of the file
into spill files of its own; this process decodes from the start up to that `}` and then
decodes what is pending as one batch (`_EventText.close_at_boundary`). That decode succeeds only
if the cut lies between two top-level events: this process's text starts at the array's true
start, and a cut inside a string or a nested value leaves it unterminated or unbalanced. So the
helper's work is used only once it is known to have started on an event; otherwise, or when the
helper fails for any reason (a damaged event in its part, no second core, a crash), this
process goes on decoding from the cut itself, exactly as a one-process read does, with the same
errors at the same bytes. The result (spills, samples, ranges, header keys) is the same data a
one-process read makes, in the same file order; the tables built from it are identical
(tests/test_kineto_split.py).

The helper is `python -P -m traceanalyze.readers.kineto.split PATH START WORKDIR`, started like
the SQLite readers' workers (`common.sqlite_parallel`: not `multiprocessing`, which re-imports
the caller's `__main__`, and not fork, unsafe once polars' threads exist), dying with its parent.
It writes `part1.*.spill.arrow` files and `part1.meta.json` (row counts, start-time samples, the
CUPTI range events and the header keys after the array) into WORKDIR, the ingest's private work
directory, then exits 0; nothing it writes is executed or unpickled.

Worth it from a few hundred MB: the helper's start (~0.6 s on one core: the interpreter,
polars, pyarrow) is paid back when pass 1 takes over ~1 s (~160 MB of trace).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..common.core import GZIP_MAGIC, SAFE_PATH, PathLike, read_settled
from ..common.limits import current_limits
from ..common.sqlite_parallel import PARENT_ENV, default_workers, die_with_parent
from .structs import _Device, _Dist, _RangeEvent

# Files smaller than this are read in one process.
SPLIT_MIN_BYTES = 256 << 20
# Pass 1 costs ~6 s per GB on the project's machine, the helper ~0.6 s to start, and when the
# file is being hashed meanwhile (`store.hashing`) the helper starts once the hash is in (~1 s
# per GB, the hash sharing a core with this process's read): the helper's part is made smaller
# by that much, so that both parts end together.
_S_PER_BYTE = 6e-9
_HELPER_START_S = 0.6
_HASH_S_PER_BYTE = 1e-9
_WINDOW = 1 << 20  # bytes searched for a cut after the chosen offset
_CUT = re.compile(rb"\}\s*,\s*\{")
META = "part1.meta.json"
TAG = "part1."


@dataclass(frozen=True)
class Plan:
    """This process reads [0, main_end), the helper [helper_start, end of file)."""

    main_end: int
    helper_start: int


def plan(path: PathLike, *, min_bytes: int | None = None) -> Plan | None:
    """Where to split `path`, or None to read it in one process (small, gzip, one core, no cut
    candidate near the chosen offset). Unless the read is settled (`read_settled`: the caller
    is still hashing the file), the helper is planned to start that much later."""
    try:
        size = os.path.getsize(path)
        if size < (SPLIT_MIN_BYTES if min_bytes is None else min_bytes) or default_workers() < 2:
            return None
        with open(path, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                return None
            late = _HELPER_START_S + (0 if read_settled() else size * _HASH_S_PER_BYTE)
            share = 0.5 + late / (2 * max(size * _S_PER_BYTE, 1e-9))
            f.seek(int(size * min(max(share, 0.5), 0.75)))
            at = f.tell()
            window = f.read(_WINDOW)
    except OSError:
        return None
    m = _CUT.search(window)
    if m is None:
        return None
    return Plan(main_end=at + m.start() + 1, helper_start=at + m.end() - 1)


class _HeadKeys(msgspec.Struct):
    """The header keys of a decoded document (`kineto_json._head` reads these three)."""

    deviceProperties: list[_Device] | None = None  # noqa: N815 - the trace's keys
    distributedInfo: _Dist | None = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815


class Meta(msgspec.Struct):
    """What the helper hands back besides its spill files (floats in the header keys are
    already their text, as `float_hook` made them, so the round trip changes nothing)."""

    rows: dict[str, int]
    nbytes: dict[str, int]
    samples: dict[str, list[int]]
    ranges: list[_RangeEvent]
    docs: list[_HeadKeys]
    graphs: list[int] = []  # the graph launches' correlation ids (`Spiller.graph_calls`)


class Helper:
    """The helper process of one split read; `close` kills and reaps it, whenever called."""

    def __init__(self, path: PathLike, start: int, workdir: Path) -> None:
        self.workdir = workdir
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in `close`)
        lim = current_limits()
        # this very package first on the helper's path (a checkout run without installing it)
        here = str(Path(__file__).resolve().parents[3])
        path_env = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
        env = {
            **os.environ,
            "PYTHONPATH": path_env,
            PARENT_ENV: str(os.getpid()),
            "OPENBLAS_NUM_THREADS": "1",
            # the limits in force here (they may come from `input_limits(...)`, not the env)
            "TRACEANALYZE_MAX_VALUE_BYTES": str(lim.max_value_bytes),
        }
        where = [os.path.abspath(path), str(start), os.path.abspath(workdir)]
        argv = [sys.executable, *SAFE_PATH, "-m", __name__, *where]
        # run in the work directory (this read's own): on Python 3.10, without -P, `-m` puts
        # the current directory on sys.path
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._err,
            stderr=self._err,
            env=env,
            cwd=os.path.abspath(workdir),
        )

    def result(self) -> Meta | None:
        """Wait for the helper; its meta, or None when it failed (the caller reads its part)."""
        assert self.proc is not None
        if self.proc.wait() != 0:
            return None
        try:
            return msgspec.json.decode((self.workdir / META).read_bytes(), type=Meta)
        except (OSError, msgspec.DecodeError):
            return None

    def close(self, *, keep: bool = False) -> None:
        """Kill the helper if it still runs; remove its files, but for its spills when `keep`
        (adopted: they are removed once read back). Its meta is read by then: always removed."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
        self._err.close()
        for f in [self.workdir / META] if keep else self.workdir.glob(TAG + "*"):
            f.unlink(missing_ok=True)


def start_helper(path: PathLike, start: int, workdir: Path) -> Helper | None:
    """The helper reading from byte `start`; None when no process can be started."""
    try:
        return Helper(path, start, workdir)
    except OSError:  # EAGAIN (process limit), ENOMEM, no interpreter: read in one process
        return None


def meta_of(parts: Any) -> bytes:
    """The helper's meta as JSON: the spills' sizes, the samples, ranges and header docs."""
    sp = parts.spiller
    return msgspec.json.encode(
        Meta(
            rows={t: s.rows for t, s in sp.spills.items()},
            nbytes={t: s.nbytes for t, s in sp.spills.items()},
            samples={t: sp.sample(t).tolist() for t in sp.spills},
            ranges=parts.ranges,
            docs=parts.docs,
            graphs=sorted(sp.graph_calls),
        )
    )


# --- the helper's side --------------------------------------------------------------------------


def helper_pass(path: PathLike, start: int, workdir: Path) -> bytes:
    """Pass 1 from the event at `start` to the end, spilled into `workdir` under `TAG`; the
    meta (`Meta`) as JSON."""
    from .decode import _Parts, _stream
    from .stream import Spiller

    spiller = Spiller(workdir, tag=TAG)
    try:
        parts = _Parts(spiller)
        _stream(path, parts, start)
        spiller.close()
        return meta_of(parts)
    except BaseException:
        spiller.discard()
        raise
    finally:
        spiller.writes.shutdown()


def _main(argv: list[str]) -> int:
    """Exit 0 once `META` is written (a temporary name renamed); anything else is a failure,
    and the caller reads the part itself."""
    die_with_parent()
    if len(argv) != 3:
        print(f"usage: python -m {__name__} PATH START WORKDIR", file=sys.stderr)
        return 2
    path, start, workdir = argv[0], int(argv[1]), Path(argv[2])
    meta = helper_pass(path, start, workdir)
    tmp = workdir / (META + ".tmp")
    tmp.write_bytes(meta)
    tmp.rename(workdir / META)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
