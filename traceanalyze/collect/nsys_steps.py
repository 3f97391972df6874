"""What running nsys takes beyond its argv: the importer fallback and no process left behind.

* The importer. `nsys profile` writes a `.qdstrm` stream and has `QdstrmImporter` (in the
  package's `host-linux-x64/`) turn it into the `.nsys-rep`. Where it cannot find the importer it
  says "Importer error status: The importer binary and its dependencies were not found" and
  leaves the `.qdstrm` (Debian 12's `nsight-systems` 2022.4: `/usr/bin/nsys` links to
  `/usr/lib/nsight-systems/bin/nsys`, which links to `target-linux-x64/nsys` under
  `/usr/lib/x86_64-linux-gnu/`, where no `host-linux-x64` is). `importer_path` looks beside
  every link on the way from `nsys` to the binary; `import_qdstrm` runs it.
* Leftovers. nsys starts helpers (`nsys-launcher`, a daemon, `nsys --start-agent`), and one run
  here left `nsys --start-agent` spinning at 95 % CPU after the profile ended. So nsys runs in a
  session of its own, with the collector as child subreaper (Linux `PR_SET_CHILD_SUBREAPER`):
  a helper that leaves the session with `setsid()` and loses its parent is re-parented to the
  collector instead of init. When nsys ends, or the run is interrupted, every process still in
  that session and every such orphan is killed (`run_in_session`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

IMPORTER = "QdstrmImporter"
_PR_SET_CHILD_SUBREAPER = 36


def importer_path(nsys: str) -> Path | None:
    """`host-linux-x64/QdstrmImporter` beside the parent of `nsys` or of any link it goes
    through (at most 20), or None."""
    p = Path(nsys)
    for _ in range(20):
        cand = Path(os.path.normpath(p.parent.parent / "host-linux-x64" / IMPORTER))
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
        if not p.is_symlink():
            return None
        p = p.parent / os.readlink(p)
    return None


def import_qdstrm(
    qdstrm: Path, nsys: str, log: Path, run: Callable[[list[str], Path], int]
) -> tuple[list[str], int, Path]:
    """Run the importer on `qdstrm`: (argv, exit status, the `.nsys-rep` it writes). `run(argv,
    log)` runs a command with its output in `log`. The `.qdstrm` is removed once imported
    (it is ~20x the report's size and nothing reads it)."""
    imp = importer_path(nsys)
    rep = qdstrm.with_suffix(".nsys-rep")
    if imp is None:
        return [IMPORTER, "-i", str(qdstrm)], 127, rep
    argv = [str(imp), "-i", str(qdstrm)]
    rc = run(argv, log)
    if rc == 0 and rep.is_file():
        qdstrm.unlink(missing_ok=True)
    return argv, rc, rep


def _set_subreaper(on: bool) -> bool:
    """Make this process the child subreaper (Linux only); whether that worked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _procs() -> dict[int, tuple[int, int, bytes]]:
    """pid -> (parent pid, session id, state) of every process (/proc/<pid>/stat)."""
    out: dict[int, tuple[int, int, bytes]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # fields after the command name (which may hold spaces): state ppid pgrp session
        rest = stat.rsplit(b")", 1)[-1].split()
        with contextlib.suppress(ValueError, IndexError):
            out[int(d)] = (int(rest[1]), int(rest[3]), rest[0])
    return out


def leftovers(session: int, before: set[int]) -> list[int]:
    """Processes of `session`, and our children not there `before` (orphans re-parented to us
    as subreaper), other than ourselves; zombies included."""
    me = os.getpid()
    return sorted(
        pid
        for pid, (ppid, sid, _) in _procs().items()
        if pid != me and pid not in before and (sid == session or ppid == me)
    )


def kill_leftovers(session: int, before: set[int]) -> list[int]:
    """SIGKILL what `leftovers` finds and reap our own children among them; the pids of those
    that were still running (not zombies: nsys's exited `nsys-launcher` and daemon, re-parented
    to us, only need reaping)."""
    found = leftovers(session, before)
    states = _procs()
    running = [pid for pid in found if states.get(pid, (0, 0, b"Z"))[2] != b"Z"]
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    me = os.getpid()
    for pid in found:
        if states.get(pid, (0, 0, b""))[0] == me:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
    _until_dead(found)
    return running


def _until_dead(pids: list[int], timeout: float = 5.0) -> None:
    """Wait (briefly) until each of `pids` is gone or a zombie: a SIGKILLed process of another
    parent still runs for a moment, and "none left when collect returns" means none."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = _procs()
        if all(live.get(pid, (0, 0, b"Z"))[2] == b"Z" for pid in pids):
            return
        time.sleep(0.05)


def _children() -> set[int]:
    me = os.getpid()
    return {pid for pid, (ppid, _, _) in _procs().items() if ppid == me}


def run_in_session(
    argv: list[str], env: dict[str, str], log: Path, on_tick: Callable[[], None] | None = None
) -> tuple[int, list[int]]:
    """Run `argv` (nsys) in a new session, its output appended to `log`; afterwards (or on any
    exception: Ctrl-C, SIGTERM) stop it and kill every process it left. (exit status, pids of
    the leftovers killed)."""
    reaper = _set_subreaper(True)
    before = _children()
    with open(log, "ab") as f:
        f.write(f"$ {shlex.join(argv)}\n".encode())
        f.flush()
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    before.add(proc.pid)  # nsys itself is reaped by proc.wait(), which wants its status
    try:
        _wait_unreaped(proc, on_tick)
        killed = kill_leftovers(proc.pid, before)
    except BaseException:
        _stop(proc)
        kill_leftovers(proc.pid, before)
        raise
    finally:
        if reaper:
            _set_subreaper(False)
    return proc.wait(), killed


def _wait_unreaped(proc: subprocess.Popen[Any], on_tick: Callable[[], None] | None) -> None:
    """Until nsys has exited, without reaping it (WNOWAIT): while it is a zombie its pid, the
    session's id, cannot be reused, so the session searched afterwards is still nsys's. Polled,
    as `_run_steps.run_child` does (SIGINT may land on another thread)."""
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        time.sleep(0.2)
        if on_tick is not None:
            on_tick()


def _stop(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM to the session's group (nsys finishes its report on it), SIGKILL after `grace`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


__all__ = ["importer_path", "import_qdstrm", "kill_leftovers", "leftovers", "run_in_session"]
