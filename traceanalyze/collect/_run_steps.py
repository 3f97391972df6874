"""The running half of `collect.run.collect`: child processes, SIGTERM, the NVML sampler, the
commands of a plan (and nsys's exports), and the run directory's outputs."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TraceanalyzeError, UnknownFormat
from . import profilers as P
from .nsys_steps import import_qdstrm, run_in_session

# Outputs that are ours, not a profiler's: never offered to the readers.
_NOT_DATA = ("manifest", "throughput.csv", "throughput.png")
_NOT_DATA_SUFFIXES = (".log", ".png", ".nsys-rep", ".qdrep", ".tmp", ".qdstrm")


@dataclass
class Step:
    batch_size: int
    argv: list[str]
    env: dict[str, str]
    log: Path
    post: list[list[str]] = field(default_factory=list)  # filled after the step ran (nsys)

    def shell(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


class Terminated(BaseException):
    """SIGTERM reached the collector (e.g. a Slurm time limit): handled like Ctrl-C, so the
    child is stopped and the manifest says "interrupted" before the process ends."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def catch_sigterm() -> tuple[bool, Any]:
    """Turn SIGTERM into `Terminated` while a run is in progress; returns (installed, previous
    handler). Not installed outside the main thread, where Python cannot install handlers."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return False, None
    return True, signal.signal(signal.SIGTERM, _raise_terminated)


def run_child(
    argv: list[str], env: dict[str, str], log: Path, on_tick: Callable[[], None] | None = None
) -> int:
    """Run one command with its output in `log`; on KeyboardInterrupt stop it, then re-raise.
    `on_tick()` is called while it runs (every poll, 0.2 s), for progress."""
    with open(log, "ab") as f:
        f.write(f"$ {shlex.join(argv)}\n".encode())
        f.flush()
        proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=f, stderr=subprocess.STDOUT)
        try:
            # Poll rather than block in waitpid(): once polars/pyarrow have started their thread
            # pools, SIGINT may land on one of those threads, which does not interrupt the main
            # thread's waitpid(); Python then raises KeyboardInterrupt only when the child exits.
            while True:
                try:
                    return proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    if on_tick is not None:
                        on_tick()
        except BaseException:
            terminate(proc)
            raise


def terminate(proc: subprocess.Popen[Any], timeout: float = 10.0) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def outputs(run_dir: Path) -> list[Path]:
    store = run_dir / "store"
    return sorted(
        p
        for p in run_dir.rglob("*")
        if p.is_file() and store not in p.parents and not p.name.startswith((".", "manifest"))
    )


def _is_data(p: Path) -> bool:
    return not (p.name.startswith(_NOT_DATA) or p.name.endswith(_NOT_DATA_SUFFIXES))


def ingest_outputs(run_dir: Path, store_dir: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Ingest every output a reader recognizes, one file at a time (a bad file does not keep
    the others out). Returns (ingested paths, [{path, reason}] of the others)."""
    from ..readers import detect_format
    from ..store import ingest

    ingested: list[str] = []
    skipped: list[dict[str, str]] = []
    for p in outputs(run_dir):
        rel = str(p.relative_to(run_dir))
        if not _is_data(p):
            continue
        try:
            fmt = detect_format(p)
        except UnknownFormat as e:
            skipped.append({"path": rel, "reason": e.message})
            continue
        try:
            ingest([p], store_dir, format=fmt)
        except TraceanalyzeError as e:
            warnings.warn(f"{rel}: not ingested: {e.message}", stacklevel=2)
            skipped.append({"path": rel, "reason": f"{fmt}: {e.message}"})
            continue
        ingested.append(rel)
    return ingested, skipped


def restore_sigterm(old: tuple[bool, Any]) -> None:
    """Undo `catch_sigterm`."""
    if old[0]:
        # None: the previous handler was not set from Python; SIG_DFL is what it was.
        signal.signal(signal.SIGTERM, signal.SIG_DFL if old[1] is None else old[1])


def start_sampler(argv: list[str], run_dir: Path) -> subprocess.Popen[Any]:
    """The NVML sampler, its output in `sampler.log`."""
    slog = open(run_dir / "sampler.log", "ab")  # noqa: SIM115 (closed below)
    sampler = subprocess.Popen(argv, stdout=slog, stderr=subprocess.STDOUT)
    slog.close()
    return sampler


def stop_sampler(
    sampler: subprocess.Popen[Any],
    manifest: dict[str, Any],
    run_dir: Path,
    say: Callable[[str], None],
) -> None:
    rc_s = terminate(sampler)
    manifest["sampler_exit_code"] = rc_s
    if rc_s not in (0, None):
        say(f"NVML sampler exited with status {rc_s}; see {run_dir / 'sampler.log'}")


def run_commands(
    steps: list[Step],
    nsys: bool,
    node: int | None,
    run_dir: Path,
    manifest: dict[str, Any],
    say: Callable[[str], None],
) -> tuple[str, str | None, int | None]:
    """Run each step (and, for nsys, import and export its reports) until one fails: (status
    "completed" or "failed", error, exit code). The step that failed is `manifest["failed_step"]`
    (`profile`, or `workload` without a profiler; nsys's `import`, `export`). Import and export
    commands are appended to manifest["commands"]."""
    total = manifest.get("config", {}).get("iterations")
    what = manifest.get("config", {}).get("profiler") or "none"
    for step in steps:
        say(f"batch size {step.batch_size}: {step.shell()}")
        tick = iteration_progress(run_dir / f"iterations_bs{step.batch_size}_rank0.csv", total, say)
        if nsys:
            rc, killed = run_in_session(step.argv, step.env, step.log, on_tick=tick)
            _note_killed(manifest, killed, "nsys profile")
        else:
            rc = run_child(step.argv, step.env, step.log, on_tick=tick)
        tick()  # the iterations logged in the last poll
        if rc != 0:
            manifest["failed_step"] = "workload" if what == "none" else "profile"
            return "failed", f"batch size {step.batch_size}: command exited with status {rc}", rc
        failed = _profiler_output_check(what, step, run_dir)
        if failed is None and nsys:
            failed = _import_nsys(step, node, run_dir, manifest)
            failed = failed or _export_nsys(step, node, run_dir, manifest)
        if failed is not None:
            manifest["failed_step"] = failed[2]
            return "failed", failed[1], failed[0]
    return "completed", None, 0


def _note_killed(manifest: dict[str, Any], killed: list[int], what: str) -> None:
    if killed:
        manifest.setdefault("notes", []).append(
            f"{what} left {len(killed)} process(es) running (pids {killed}); killed"
        )


def iteration_progress(
    log: Path, total: int | None, say: Callable[[str], None]
) -> Callable[[], None]:
    """A tick that says each new iteration rank 0 logged (`batch size B: iteration i/N`): a CPU
    step takes tens of seconds, and the run printed nothing for minutes (issue 21)."""
    seen = [0]

    def tick() -> None:
        try:
            with open(log, "rb") as f:
                n = sum(1 for line in f if line[:1].isdigit() and line.endswith(b"\n"))
        except FileNotFoundError:
            return
        bs = log.name.split("_bs", 1)[1].split("_", 1)[0]
        for i in range(seen[0] + 1, n + 1):
            say(f"batch size {bs}: iteration {i}/{total if total else '?'}")
        seen[0] = max(seen[0], n)

    return tick


def _nsys_path(manifest: dict[str, Any]) -> str:
    return str(manifest.get("profiler_path") or "nsys")


def _run_logged(log: Path, manifest: dict[str, Any], what: str) -> Callable[[list[str], Path], int]:
    def run(argv: list[str], _log: Path) -> int:
        manifest["commands"].append(shlex.join(argv))
        rc, killed = run_in_session(argv, {}, log)
        _note_killed(manifest, killed, what)
        return rc

    return run


def _import_nsys(
    step: Step, node: int | None, run_dir: Path, manifest: dict[str, Any]
) -> tuple[int, str, str] | None:
    """Where `nsys profile` left a `.qdstrm` and no `.nsys-rep` (it did not find its importer),
    the package's `QdstrmImporter` makes the report; (exit code, error, "import") on failure."""
    stem = P.nsys_report_stem(step.batch_size, node)
    for qd in sorted(run_dir.glob(f"{stem}*.qdstrm")):
        if qd.with_suffix(".nsys-rep").exists():
            continue
        run = _run_logged(step.log, manifest, "QdstrmImporter")
        argv, rc, rep = import_qdstrm(qd, _nsys_path(manifest), step.log, run)
        if rc == 127 and not Path(argv[0]).is_absolute():
            why = f"nsys left {qd.name}, and no host-linux-x64/QdstrmImporter is beside nsys"
            return 127, why, "import"
        if rc != 0 or not rep.is_file():
            return rc or 1, f"QdstrmImporter on {qd.name} exited with status {rc}", "import"
    return None


def _export_nsys(
    step: Step, node: int | None, run_dir: Path, manifest: dict[str, Any]
) -> tuple[int, str, str] | None:
    """`nsys export` of this step's reports; (exit code, error, "export") of the first that
    fails (its partial `.sqlite` removed: nothing half-exported is ingested)."""
    # nsys < 2021.4 wrote `.qdrep`, newer `.nsys-rep`; `nsys export` takes both.
    # Only this node's reports: the other nodes export theirs.
    stem = P.nsys_report_stem(step.batch_size, node)
    reps = [*run_dir.glob(f"{stem}*.nsys-rep"), *run_dir.glob(f"{stem}*.qdrep")]
    if not reps:
        return 1, f"nsys profile wrote no report ({stem}*.nsys-rep)", "profile"
    for rep in sorted(reps):
        exp = P.nsys_export_argv(str(rep))
        exp[0] = _nsys_path(manifest)
        rc = _run_logged(step.log, manifest, "nsys export")(exp, step.log)
        if rc != 0:
            Path(exp[-2]).unlink(missing_ok=True)
            return rc, f"nsys export of {rep.name} exited with status {rc}", "export"
    return None


# What a profiler prints when it ran but profiled nothing (no GPU): its own words, per tool.
_NOTHING_PROFILED = {
    "nvprof": ("======== Warning: ", "======== Error: "),
    "ncu": ("==WARNING== No kernels were profiled", "==ERROR== "),
}


def _profiler_output_check(what: str, step: Step, run_dir: Path) -> tuple[int, str, str] | None:
    """nvprof and ncu exit 0 when they could profile nothing (no GPU, no CUDA driver): the run
    then fails with their own reason, taken from their log (nvprof `--log-file`, ncu
    `--log-file`) or the step's output."""
    marks = _NOTHING_PROFILED.get(what)
    if marks is None:
        return None
    logs = sorted(run_dir.glob("nvprof_*.csv" if what == "nvprof" else "batch_*.csv"))
    lines: list[str] = []
    for f in [*logs, step.log]:
        text = f.read_text(errors="replace") if f.exists() else ""
        lines += [ln.strip() for ln in text.splitlines() if ln.strip().startswith(marks)]
    data = [f for f in logs if _has_rows(f, marks)]
    if data or not lines:
        return None
    reason = "; ".join(dict.fromkeys(lines))[:400]
    return 1, f"{what} profiled nothing: {reason}", "profile"


def _has_rows(f: Path, marks: tuple[str, ...]) -> bool:
    """Whether a profiler log has a line other than its banners and warnings."""
    for ln in f.read_text(errors="replace").splitlines():
        ln = ln.strip()
        if ln and not ln.startswith(("==", *marks)):
            return True
    return False


def last_line(steps: list[Step], run_dir: Path) -> str | None:
    for s in reversed(steps):
        if s.log.exists():
            lines = [ln for ln in s.log.read_text(errors="replace").splitlines() if ln.strip()]
            if lines:
                return lines[-1].strip()[:200]
    return None


def torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return str(torch.__version__)
