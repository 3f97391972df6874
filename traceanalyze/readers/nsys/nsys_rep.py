"""Nsight Systems reports: `nsys profile -o r …` writes `r.nsys-rep` (`r.qdrep` before nsys
2021.4; both begin with the bytes `NVIDIA Tegra Profiler Report`). The format is NVIDIA's own
and undocumented, so the report is never parsed here: the installed `nsys` exports it with
`nsys export --type sqlite` (the command `collect` runs, `collect.profilers.nsys_export_argv`)
into a work directory (the store's staging area under `ingest`, a temporary one under `read`),
and the export is read by `nsys_sqlite`: the tables are exactly those of ingesting the export.

Tested with nsys 2022.4.2 (Debian 12 `nsight-systems`) on reports it wrote itself, of CPU-only
processes (`--trace=osrt,nvtx`), and on damaged ones.

* Which nsys: `$NSYS` when set, else `nsys` on PATH; neither → ToolNotFound saying how to export
  by hand.
* A report newer than that nsys: nsys reads only reports of its own version or older (2022.4 on
  a 2023.3 report fails with "ProtobufParseException" and leaves a partial `.sqlite`). The
  writer's version is nsys's build string (`2022.4.2.1-df9881f`) in the report's session
  metadata (`report_version`); when it is newer than `nsys --version`, the read is refused
  before nsys runs, naming both versions and what to do.
* A failed export (non-zero exit, no file): its partial output is removed and the error carries
  nsys's own message (its last line naming an error). Nothing half-exported is ever read.

The export is a copy of the report as big as it (≈ 1/3 of the report for CPU-only runs), made
where the reader's work directory is.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import polars as pl

from ...errors import MalformedInput, ToolNotFound, TraceanalyzeError
from ...tables import Tables
from ..common.core import PathLike, head_bytes, reader_entry
from ..common.stream import stream_entry
from . import REPORT_MAGIC as _SCREEN_MAGIC
from .nsys_sqlite import read_nsys_sqlite, stream_nsys_sqlite

REPORT_MAGIC = _SCREEN_MAGIC
NSYS_ENV = "NSYS"
_VERSION = re.compile(rb"(?<![\d.])(20\d\d)\.(\d{1,2})\.(\d{1,3})(?:\.(\d{1,4}))?")
# nsys's build string, `2022.4.2.1-df9881f` (what `nsys --version` ends with)
_BUILD = re.compile(rb"(?<![\d.])(20\d\d)\.(\d{1,2})\.(\d{1,3})\.(\d{1,4})-[0-9a-f]{6,}")
_TAIL_BYTES = 64 << 10
_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


def sniff(path: PathLike) -> bool:
    return head_bytes(path, len(REPORT_MAGIC)) == REPORT_MAGIC


def find_nsys(report: PathLike) -> str:
    """`$NSYS`, else `nsys` on PATH; ToolNotFound saying how to export by hand."""
    given = os.environ.get(NSYS_ENV)
    found = shutil.which(given) if given else shutil.which("nsys")
    if found is None:
        where = f"${NSYS_ENV}={given!r} is not an executable" if given else "no nsys on PATH"
        name = Path(report).name
        stem = _stem(name)
        beside = Path(report).with_name(f"{stem}.sqlite")
        hint = f"; {beside.name} beside it may be that export" if beside.is_file() else ""
        raise ToolNotFound(
            f"reading a .nsys-rep needs Nsight Systems ({where}); install it, or set ${NSYS_ENV}, "
            f"or export by hand: `nsys export --type sqlite -o {stem}.sqlite {name}` "
            f"and read {stem}.sqlite{hint}",
            path=report,
        )
    return found


def _stem(name: str) -> str:
    for ext in _REPORT_SUFFIXES:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def parse_version(text: bytes | str) -> tuple[int, ...] | None:
    """The first `YYYY.N.N[.N]` in `text` as integers, or None."""
    raw = text.encode() if isinstance(text, str) else text
    m = _VERSION.search(raw)
    return None if m is None else tuple(int(g) for g in m.groups() if g is not None)


def report_version(report: PathLike) -> tuple[int, ...] | None:
    """The version of the nsys that wrote `report`: its build string `YYYY.N.N.N-<hash>` in the
    report's session metadata (nsys 2022.4 writes it near the end, but not always in the last
    64 KiB: at 64 % of one 319 KB report). Looked for in the tail first, then through the whole
    file in 8 MiB pieces (a regex over bytes, far cheaper than the export itself); None when
    absent."""
    with open(report, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - _TAIL_BYTES))
        found = _BUILD.search(f.read())
        f.seek(0)
        carry = b""
        while found is None and (piece := f.read(8 << 20)):
            found = _BUILD.search(carry + piece)
            carry = piece[-64:]
    return None if found is None else tuple(int(g) for g in found.groups() if g is not None)


def nsys_version(nsys: str) -> tuple[int, ...] | None:
    """The version `nsys --version` prints (`NVIDIA Nsight Systems version 2022.4.2.1-df9881f`)."""
    try:
        cp = subprocess.run(
            [nsys, "--version"],
            capture_output=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(cp.stdout + cp.stderr)


def _dotted(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def check_readable(report: PathLike, nsys: str) -> None:
    """TraceanalyzeError when the report was written by a newer nsys than `nsys`."""
    mine, theirs = nsys_version(nsys), report_version(report)
    if mine is None or theirs is None or theirs[:3] <= mine[:3]:
        return
    stem = _stem(Path(report).name)
    raise TraceanalyzeError(
        f"report written by nsys {_dotted(theirs)}, newer than the installed nsys "
        f"{_dotted(mine)} ({nsys}), which cannot read it; set ${NSYS_ENV} to an nsys >= "
        f"{_dotted(theirs[:3])}, or export it where one is installed "
        f"(`nsys export --type sqlite -o {stem}.sqlite {Path(report).name}`) and read the .sqlite",
        path=report,
    )


def export_argv(nsys: str, report: PathLike, out: Path) -> list[str]:
    # The flags of `collect.profilers.nsys_export_argv`, so both give the same export.
    argv = ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "--output"]
    return [nsys, *argv[1:], str(out), os.fspath(report)]


def _nsys_error(log: Path) -> str:
    """nsys's own reason: the last line of its output naming an error, else its last line (the
    progress bar redraws with carriage returns)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", text) if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("Exporting ", "Processing "))]
    errs = [ln for ln in lines if re.search(r"error|exception|cannot|failed", ln, re.I)]
    pick = errs[-1] if errs else (lines[-1] if lines else "no output")
    return pick[:300]


def export_sqlite(report: PathLike, workdir: Path) -> Path:
    """`nsys export --type sqlite` of `report` into `workdir`; the export's path. On any failure
    the partial export is removed and TraceanalyzeError names the report and nsys's reason."""
    nsys = find_nsys(report)
    check_readable(report, nsys)
    work = Path(tempfile.mkdtemp(prefix="nsys-export-", dir=workdir))
    out, log = work / "export.sqlite", work / "nsys-export.log"
    ok = False
    try:
        rc = _run(export_argv(nsys, report, out), log)
        if rc != 0 or not out.is_file():
            why = f"exit status {rc}" if rc != 0 else "it wrote no file"
            reason = _nsys_error(log)
            if "protobuf" in reason.lower():  # what an older nsys says of a newer report
                reason += (
                    f"; a report from a newer nsys than this one ({nsys})? set ${NSYS_ENV} to a "
                    "newer nsys, or export it where it was recorded and read the .sqlite"
                )
            raise MalformedInput(f"nsys export failed ({why}): {reason}", path=report)
        ok = True
        return out
    finally:
        log.unlink(missing_ok=True)
        if not ok:  # nsys leaves a partial .sqlite behind when it fails
            shutil.rmtree(work, ignore_errors=True)


def _run(argv: list[str], log: Path) -> int:
    """Run nsys in a session of its own, its output in `log`; when it ends, or on any exception
    (Ctrl-C), its process group is killed, so no nsys process outlives the read."""
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            # Polled (SIGINT may land on a thread of polars' pool instead), and not reaped
            # (WNOWAIT): while nsys is a zombie its pid, the group's id, cannot be reused, so
            # the group killed below is still nsys's and whatever helper it left there.
            while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                time.sleep(0.1)
        finally:
            _kill_session(proc)
        return proc.returncode


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _renamed(e: TraceanalyzeError, report: PathLike) -> TraceanalyzeError:
    """An error of the export's reader, told of the report (the export is a work file)."""
    e.message = f"its SQLite export: {e.message}"
    e.path = os.fspath(report)
    return e


@reader_entry("nsys_rep")
def read_nsys_rep(
    path: PathLike,
    *,
    engine: Literal["auto", "sqlite3", "adbc"] = "auto",
    workers: int | None = None,
) -> Tables:
    """Export the report with nsys into a temporary directory and read it as `nsys_sqlite`
    (options as there); the export is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="traceanalyze-nsys-") as tmp:
        out = export_sqlite(path, Path(tmp))
        try:
            return read_nsys_sqlite(out, engine=engine, workers=workers)
        except TraceanalyzeError as e:
            raise _renamed(e, path) from None


@stream_entry("nsys_rep")
def stream_nsys_rep(
    path: PathLike,
    *,
    workdir: Path,
    engine: Literal["auto", "sqlite3", "adbc"] = "auto",
    workers: int | None = None,
) -> Iterator[tuple[str, pl.DataFrame]]:
    """`read_nsys_rep` as chunks: the export goes into `workdir` (under `ingest`, the store's
    staging area, removed with it), then `stream_nsys_sqlite` reads it."""
    out = export_sqlite(path, workdir)
    try:
        yield from stream_nsys_sqlite(out, workdir=workdir, engine=engine, workers=workers)
    except TraceanalyzeError as e:
        raise _renamed(e, path) from None
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
