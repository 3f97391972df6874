"""Orchestration of one collection run: run directory, manifest, sampler, sweep, ingest.

`plan(config)` turns a `CollectConfig` into the exact commands (pure apart from resolving the
device, the profiler binary and, for ncu, its metric names); `collect(config)` runs them::

    <out>/<run-id>/                    run-id = UTC timestamp + 6 hex digits (sorts by time)
        manifest.json                  written at start ("running"), rewritten at the end
        iterations_bs<B>_rank<R>.csv   iterlog, one per batch size and rank
        workload_bs<B>.log             the workload's stdout/stderr
        nvml_<host>.csv                NVML sampler (CUDA runs)
        torch_bs<B>_rank<R>.<ts>.pt.trace.json.gz | nsys_bs<B>[_node<N>]_rank<R>.{nsys-rep,sqlite}
        | batch_<B>[_node<N>].csv (ncu) | nvprof_<pid>.csv     (_node<N>: multi-node runs)
        throughput.csv, throughput.png
        store/                         every output a reader recognizes, ingested

Checks that can fail (device, profiler binary on PATH, nvprof on a too-new GPU) run before the
run directory is created, so a refused run leaves nothing behind. A dry run needs no GPU and no
profiler binary (it may be prepared on a login node): what it cannot know (compute capability,
the metric names `ncu --query-metrics` would give) it says in `Plan.notes`.
"""

from __future__ import annotations

import importlib
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import CollectError, TraceanalyzeError, UnknownFormat
from . import profilers as P
from .manifest import build_manifest, utc_now, write_manifest
from .resnet50 import PRECISIONS, parse_schedule, parse_window

WORKLOAD_MODULE = "traceanalyze.collect.resnet50"
SAMPLER_MODULE = "traceanalyze.collect.sampler"
RDZV_PORT = 29500
# Outputs that are ours, not a profiler's: never offered to the readers.
_NOT_DATA = ("manifest", "throughput.csv", "throughput.png")
_NOT_DATA_SUFFIXES = (".log", ".png", ".nsys-rep", ".qdrep", ".tmp", ".qdstrm")


@dataclass(frozen=True)
class CollectConfig:
    out: Path
    batch_sizes: tuple[int, ...] = (64,)
    iterations: int = 500
    warmup: int | None = None  # None: min(10, max(1, iterations // 4))
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    image_size: int = 224
    device: str | None = None  # None: cuda if available
    data: Path | None = None
    workers: int = 4
    profiler: str = "none"
    profile_window: str | None = None
    torch_schedule: str | None = None
    record_shapes: bool = False
    gpu_metrics: bool = False
    ncu_metrics: tuple[str, ...] | None = None
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    run_id: str | None = None
    sampler: str = "auto"  # auto (on with CUDA) | on | off
    sample_interval_ms: float = 50.0
    ingest: bool = True
    python: str = sys.executable

    def effective_warmup(self) -> int:
        if self.warmup is not None:
            return self.warmup
        return min(10, max(1, self.iterations // 4))


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


@dataclass
class Plan:
    config: CollectConfig
    run_id: str
    run_dir: Path
    device: str
    warmup: int
    steps: list[Step]
    sampler_argv: list[str] | None
    profiler_path: str | None
    capabilities: list[tuple[int, int]]
    # What the plan could not check or had to assume (fallback metric names, an unknown compute
    # capability, a pipe left out); printed by a dry run, recorded in the manifest.
    notes: list[str] = field(default_factory=list)

    def post_commands(self, step: Step) -> list[str]:
        """Shell lines run after `step` (nsys: `nsys export --type sqlite` per report), as a dry
        run prints them. A single-node run knows its ranks (0..N-1); on several nodes the ranks
        come from the rendezvous, so a loop over this node's reports stands for them."""
        if self.config.profiler != "nsys":
            return []
        cfg, rd, bs = self.config, str(self.run_dir), step.batch_size
        node = _node_tag(cfg)
        if node is not None:
            return [P.nsys_export_loop(rd, bs, node)]
        base = f"{rd}/{P.nsys_report_stem(bs)}"
        return [
            shlex.join(P.nsys_export_argv(f"{base}{r}.nsys-rep")) for r in range(cfg.nproc_per_node)
        ]


@dataclass
class CollectResult:
    run_dir: Path
    manifest: Path
    store: Path | None
    status: str
    outputs: list[str]
    ingested: list[str]
    not_ingested: list[dict[str, str]]
    throughput: Any  # polars DataFrame or None


def new_run_id(now: datetime | None = None) -> str:
    t = now or datetime.now(timezone.utc)
    return t.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def check_run_id(run_id: str) -> str:
    """`run_id` if it is a plain name (the run goes to OUT/<run-id>/, never elsewhere): not
    empty, no '/' or '\\', not starting with '.' (so neither '..' nor a hidden name), no
    control characters. CollectError otherwise."""
    bad = (
        not run_id
        or "/" in run_id
        or "\\" in run_id
        or run_id.startswith(".")
        or any(ord(c) < 32 or ord(c) == 127 for c in run_id)
    )
    if bad:
        raise CollectError(
            f"--run-id must be a plain name (no '/', '\\', leading '.' or control "
            f"characters), got {run_id!r}"
        )
    return run_id


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise CollectError(
            f"--batch-size takes integers separated by commas, got {text!r}"
        ) from None
    if not sizes or any(b < 1 for b in sizes):
        raise CollectError(f"--batch-size needs positive integers, got {text!r}")
    if len(set(sizes)) != len(sizes):
        raise CollectError(f"--batch-size lists a size twice: {text!r}")
    return sizes


# --- planning --------------------------------------------------------------------------------


def resolve_device(requested: str | None) -> str:
    if requested == "cpu":
        return "cpu"
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise CollectError("--device cuda, but torch sees no CUDA device")
    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def dry_run_device(cfg: CollectConfig) -> str:
    """The device a dry run plans for, without asking for a GPU (a login node has none): the
    one given, cuda for an external profiler (which only profiles CUDA), else as a real run."""
    if cfg.device:
        return cfg.device
    if cfg.profiler in P.EXTERNAL:
        return "cuda"
    return resolve_device(None)


def _nvml_capabilities(nvml: Any = None) -> list[tuple[int, int]]:
    """Compute capability of every GPU NVML sees (no CUDA context is created); [] without NVML."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return []
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return []
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
            out.append((int(major), int(minor)))
        return out
    except nvml.NVMLError:
        return []
    finally:
        nvml.nvmlShutdown()


_CC_LINE = re.compile(r"^\s*(\d+)\.(\d+)\s*$")


def _smi_capabilities() -> list[tuple[int, int]]:
    """`nvidia-smi --query-gpu=compute_cap --format=csv,noheader` (one `8.0` line per GPU; the
    field exists in drivers from about R510 on). [] when it cannot run or prints anything else
    (an older driver answers `Field "compute_cap" is not a valid field to query.`)."""
    try:
        cp = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = [ln for ln in cp.stdout.splitlines() if ln.strip()]
    matches = [_CC_LINE.match(ln) for ln in lines]
    if cp.returncode != 0 or not lines or not all(matches):
        return []
    return [(int(m.group(1)), int(m.group(2))) for m in matches if m]


def _torch_capabilities() -> list[tuple[int, int]]:
    """`torch.cuda.get_device_capability` of every device torch sees (this initializes CUDA in
    the collector, hence the last resort); [] without torch or a CUDA device."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    caps = (torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count()))
    return [(int(major), int(minor)) for major, minor in caps]


def device_capabilities(nvml: Any = None) -> list[tuple[int, int]]:
    """Compute capability of every GPU: NVML (nvidia-ml-py), else `nvidia-smi`, else torch;
    [] when none of them can tell (the caller must then say the capability is unknown)."""
    return _nvml_capabilities(nvml) or _smi_capabilities() or _torch_capabilities()


def default_torch_schedule(iterations: int, warmup: int) -> str:
    """Skip the warm-up iterations, one profiler warm-up step, then up to 5 recorded steps."""
    active = max(1, min(5, iterations - 2))
    wait = max(0, min(warmup, iterations - active - 1))
    warm = 1 if iterations - wait - active >= 1 else 0
    return f"{wait},{warm},{active}"


def default_profile_window(profiler: str, iterations: int, warmup: int) -> str:
    """nsys: every steady-state iteration; ncu: one (it replays each kernel for every pass)."""
    start = warmup if warmup < iterations else 0
    end = start + 1 if profiler == "ncu" else iterations
    return f"{start}:{end}"


def workload_argv(cfg: CollectConfig, batch_size: int, run_dir: Path, device: str) -> list[str]:
    warmup = cfg.effective_warmup()
    argv = [
        cfg.python,
        "-m",
        WORKLOAD_MODULE,
        "--out",
        str(run_dir),
        "--batch-size",
        str(batch_size),
        "--iterations",
        str(cfg.iterations),
        "--warmup",
        str(warmup),
        "--precision",
        cfg.precision,
        "--image-size",
        str(cfg.image_size),
        "--device",
        device,
    ]
    if cfg.channels_last:
        argv.append("--channels-last")
    if cfg.compile:
        argv.append("--compile")
    if cfg.data is not None:
        argv += ["--data", str(cfg.data), "--workers", str(cfg.workers)]
    if cfg.profiler == "torch":
        sched = cfg.torch_schedule or default_torch_schedule(cfg.iterations, warmup)
        argv += ["--torch-profile", sched]
        if cfg.record_shapes:
            argv.append("--record-shapes")
    if cfg.profiler in P.EXTERNAL and device == "cuda":
        window = cfg.profile_window or default_profile_window(cfg.profiler, cfg.iterations, warmup)
        argv += ["--profile-window", window]
    return argv


def torchrun_argv(cfg: CollectConfig, run_id: str) -> list[str]:
    """`torch.distributed.run` around the command that follows (`--no-python`: the command is an
    executable, so a profiler such as nsys can sit between torchrun and python, once per rank)."""
    argv = [cfg.python, "-m", "torch.distributed.run", "--nproc-per-node", str(cfg.nproc_per_node)]
    if cfg.nnodes > 1:
        if not cfg.rdzv_endpoint:
            raise CollectError("--nnodes > 1 needs --rdzv-endpoint HOST[:PORT]")
        endpoint = (
            cfg.rdzv_endpoint if ":" in cfg.rdzv_endpoint else f"{cfg.rdzv_endpoint}:{RDZV_PORT}"
        )
        argv += [
            "--nnodes",
            str(cfg.nnodes),
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={run_id}",
        ]
    return [*argv, "--no-python"]


def _step_argv(
    cfg: CollectConfig,
    bs: int,
    run_dir: Path,
    device: str,
    run_id: str,
    ncu_metrics: Sequence[str] | None,
) -> tuple[list[str], dict[str, str]]:
    inner = workload_argv(cfg, bs, run_dir, device)
    distributed = cfg.nproc_per_node > 1 or cfg.nnodes > 1
    launcher = torchrun_argv(cfg, run_id) if distributed else []
    # Without torchrun the single process is rank 0; nsys' %q{RANK} needs the variable set.
    env = {} if distributed else {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    rd = str(run_dir)
    node = _node_tag(cfg)
    if cfg.profiler == "nsys":
        prof = P.nsys_argv(
            rd,
            bs,
            inner,
            gpu_metrics=cfg.gpu_metrics,
            local_ranks=cfg.nproc_per_node,
            node=node,
        )
        return [*launcher, *prof], env
    if cfg.profiler == "ncu":
        assert ncu_metrics is not None
        return P.ncu_argv(rd, bs, [*launcher, *inner], ncu_metrics, node=node), env
    if cfg.profiler == "nvprof":
        return P.nvprof_argv(rd, [*launcher, *inner]), env
    return [*launcher, *inner], env


def validate(cfg: CollectConfig) -> None:
    if cfg.profiler not in P.PROFILERS:
        raise CollectError(f"unknown profiler {cfg.profiler!r} ({', '.join(P.PROFILERS)})")
    if cfg.precision not in PRECISIONS:
        raise CollectError(f"unknown precision {cfg.precision!r} ({', '.join(PRECISIONS)})")
    if cfg.iterations < 1:
        raise CollectError("--iterations must be at least 1")
    if cfg.warmup is not None and not 0 <= cfg.warmup < cfg.iterations:
        raise CollectError("--warmup must be >= 0 and smaller than --iterations")
    if cfg.nproc_per_node < 1 or cfg.nnodes < 1:
        raise CollectError("--nproc-per-node and --nnodes must be at least 1")
    if cfg.run_id is not None:
        check_run_id(cfg.run_id)
    if cfg.nnodes > 1 and not cfg.run_id:
        # Every node runs its own collector; without one given id each would invent its own
        # run directory (and rendezvous id), and the nodes would never meet.
        raise CollectError("--nnodes > 1 needs --run-id, the same on every node")
    if cfg.sample_interval_ms <= 0:
        raise CollectError("--sample-interval-ms must be positive")
    try:
        if cfg.profile_window:
            parse_window(cfg.profile_window)
        if cfg.torch_schedule:
            w, wu, a = parse_schedule(cfg.torch_schedule)
            if w + wu + a > cfg.iterations:
                raise CollectError(
                    f"--torch-schedule {cfg.torch_schedule} needs {w + wu + a} iterations, "
                    f"only {cfg.iterations} run"
                )
    except ValueError as e:
        raise CollectError(str(e)) from None
    if cfg.data is not None and not Path(cfg.data).is_dir():
        raise CollectError(f"--data {cfg.data} is not a directory")


def _node_tag(cfg: CollectConfig) -> int | None:
    """The node rank that tags per-node output names, on a multi-node run only (every node's
    profiler writes into the one shared run directory)."""
    return cfg.node_rank if cfg.nnodes > 1 else None


UNKNOWN_CC = "compute capability unknown (no NVML, nvidia-smi or CUDA device via torch)"


def _plan_ncu_metrics(
    cfg: CollectConfig,
    caps: list[tuple[int, int]],
    tool_path: str | None,
    dry_run: bool,
    notes: list[str],
) -> list[str]:
    if cfg.ncu_metrics:
        notes.append("ncu metric names from --ncu-metrics")
        return list(cfg.ncu_metrics)
    # The live query is the primary source; a dry run does not run ncu (no GPU is needed).
    available = P.query_ncu_metrics() if tool_path else None
    if available is not None:
        sel = P.select_ncu_metrics(available)
    elif caps and P.ncu_fallback(caps[0]) is not None:
        sel = P.select_ncu_metrics(None, caps[0])
        if dry_run:
            notes.append(
                "dry run: ncu --query-metrics not run; the real run asks it first and uses "
                "these fallback names only if it fails"
            )
        else:
            warnings.warn(
                f"ncu --query-metrics failed; using the fallback metric names for compute "
                f"capability {caps[0][0]}.{caps[0][1]}",
                stacklevel=3,
            )
    elif dry_run:
        why = (
            UNKNOWN_CC
            if not caps
            else f"no fallback names for compute capability {caps[0][0]}.{caps[0][1]}"
        )
        notes.append(
            f"ncu metric names not known in advance: {why}; the real run takes them from "
            "ncu --query-metrics; pass --ncu-metrics to fix them"
        )
        return [P.NCU_METRICS_AT_RUN_TIME]
    elif not caps:
        raise CollectError(
            "cannot choose ncu metrics: `ncu --query-metrics` failed and the GPU's compute "
            "capability is unknown; pass --ncu-metrics"
        )
    else:
        sel = P.select_ncu_metrics(None, caps[0])  # raises: no fallback entry for this chip
    notes.extend(sel.notes())
    return list(sel.metrics)


def plan(
    cfg: CollectConfig,
    *,
    dry_run: bool = False,
    capabilities: list[tuple[int, int]] | None = None,
    device: str | None = None,
) -> Plan:
    """Resolve everything needed to run, without creating anything.

    Refuses (CollectError / ToolNotFound) an external profiler on CPU, a profiler binary not on
    PATH, and nvprof on GPUs of compute capability >= 8.0. A dry run needs neither a GPU nor
    the profiler binary (it may be prepared on a login node): it assumes CUDA for an external
    profiler, and what it cannot check goes into `Plan.notes`. `capabilities`/`device` override
    detection (tests).
    """
    validate(cfg)
    dev = device or (dry_run_device(cfg) if dry_run else resolve_device(cfg.device))
    if cfg.profiler in P.EXTERNAL and dev != "cuda":
        raise CollectError(
            f"--profiler {cfg.profiler} profiles CUDA; it cannot run with --device cpu"
        )
    caps = device_capabilities() if capabilities is None and dev == "cuda" else (capabilities or [])
    notes: list[str] = []
    tool_path = None
    if cfg.profiler in P.EXTERNAL and not dry_run:
        tool_path = P.require_tool(cfg.profiler)
    if cfg.profiler == "nvprof":
        if caps:
            P.check_nvprof_supported(caps)
        elif dry_run:
            notes.append(f"{UNKNOWN_CC}: the nvprof refusal on >= 8.0 was not checked")
        else:
            msg = (
                f"{UNKNOWN_CC}: cannot check that nvprof supports these GPUs; nvprof cannot "
                "profile compute capability >= 8.0 (A100, H100, …): use nsys or ncu there"
            )
            warnings.warn(msg, stacklevel=2)
            notes.append(msg)
    ncu_metrics: list[str] | None = None
    if cfg.profiler == "ncu":
        ncu_metrics = _plan_ncu_metrics(cfg, caps, tool_path, dry_run, notes)
    run_id = cfg.run_id or new_run_id()
    run_dir = Path(cfg.out) / run_id
    steps = []
    for bs in cfg.batch_sizes:
        argv, env = _step_argv(cfg, bs, run_dir, dev, run_id, ncu_metrics)
        steps.append(Step(bs, argv, env, run_dir / f"workload_bs{bs}.log"))
    want_sampler = cfg.sampler == "on" or (cfg.sampler == "auto" and dev == "cuda")
    sampler_argv = None
    if want_sampler:
        sampler_argv = [
            cfg.python,
            "-m",
            SAMPLER_MODULE,
            "--out",
            str(run_dir / f"nvml_{socket.gethostname()}.csv"),
            "--interval-ms",
            f"{cfg.sample_interval_ms:g}",
        ]
    return Plan(
        cfg,
        run_id,
        run_dir,
        dev,
        cfg.effective_warmup(),
        steps,
        sampler_argv,
        tool_path,
        caps,
        notes,
    )


# --- running ---------------------------------------------------------------------------------


def manifest_name(cfg: CollectConfig) -> str:
    # Several nodes share one run directory (same --run-id on a shared file system).
    return "manifest.json" if cfg.node_rank == 0 else f"manifest.node{cfg.node_rank}.json"


def _config_dict(cfg: CollectConfig, warmup: int, device: str) -> dict[str, Any]:
    d = asdict(cfg)
    d = {k: (str(v) if isinstance(v, Path) else v) for k, v in d.items()}
    d["batch_sizes"] = list(cfg.batch_sizes)
    d["warmup"] = warmup
    d["device"] = device
    return d


class Terminated(BaseException):
    """SIGTERM reached the collector (e.g. a Slurm time limit): handled like Ctrl-C, so the
    child is stopped and the manifest says "interrupted" before the process ends."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def _catch_sigterm() -> tuple[bool, Any]:
    """Turn SIGTERM into `Terminated` while a run is in progress; returns (installed, previous
    handler). Not installed outside the main thread, where Python cannot install handlers."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return False, None
    return True, signal.signal(signal.SIGTERM, _raise_terminated)


def _run_child(argv: list[str], env: dict[str, str], log: Path) -> int:
    """Run one command with its output in `log`; on KeyboardInterrupt stop it, then re-raise."""
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
                    continue
        except BaseException:
            _terminate(proc)
            raise


def _terminate(proc: subprocess.Popen[Any], timeout: float = 10.0) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def _outputs(run_dir: Path) -> list[Path]:
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
    for p in _outputs(run_dir):
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


def collect(
    cfg: CollectConfig,
    argv: Sequence[str],
    *,
    progress: Callable[[str], None] | None = None,
    pl: Plan | None = None,
) -> CollectResult:
    """Run a planned collection. On a child's non-zero exit the manifest says "failed" and
    CollectError is raised; on KeyboardInterrupt (or SIGTERM, raised as `Terminated`) it says
    "interrupted" and the exception goes on.
    """
    say = progress or (lambda _msg: None)
    pl = pl or plan(cfg)
    run_dir = pl.run_dir
    # Several nodes share the directory of a multi-node run (one --run-id), each with its own
    # manifest name; a single-node run never writes into a directory that holds anything.
    taken = (run_dir / manifest_name(cfg)).exists() or (
        cfg.nnodes == 1 and run_dir.exists() and any(run_dir.iterdir())
    )
    if taken:
        raise CollectError(f"run directory {run_dir} already exists and is not empty")
    run_dir.mkdir(parents=True, exist_ok=True)
    mpath = run_dir / manifest_name(cfg)
    profiler_version = P.tool_version(pl.profiler_path) if pl.profiler_path else None
    if cfg.profiler == "torch":
        profiler_version = "torch.profiler (kineto), torch " + (_torch_version() or "?")
    manifest = build_manifest(
        run_id=pl.run_id,
        argv=list(argv),
        config=_config_dict(cfg, pl.warmup, pl.device),
        profiler_version=profiler_version,
    )
    manifest["commands"] = [s.shell() for s in pl.steps]
    manifest["sampler_command"] = None if pl.sampler_argv is None else shlex.join(pl.sampler_argv)
    manifest["notes"] = list(pl.notes)
    write_manifest(mpath, manifest)

    sampler: subprocess.Popen[Any] | None = None
    status, error, exit_code = "running", None, None
    old_term = _catch_sigterm()
    try:
        if pl.sampler_argv is not None:
            slog = open(run_dir / "sampler.log", "ab")  # noqa: SIM115 (closed below)
            sampler = subprocess.Popen(pl.sampler_argv, stdout=slog, stderr=subprocess.STDOUT)
            slog.close()
        for step in pl.steps:
            say(f"batch size {step.batch_size}: {step.shell()}")
            rc = _run_child(step.argv, step.env, step.log)
            if rc != 0:
                status, exit_code = "failed", rc
                error = f"batch size {step.batch_size}: command exited with status {rc}"
                break
            if cfg.profiler == "nsys":
                # nsys < 2021.4 wrote `.qdrep`, newer `.nsys-rep`; `nsys export` takes both.
                # Only this node's reports: the other nodes export theirs.
                stem = P.nsys_report_stem(step.batch_size, _node_tag(cfg))
                reps = [*run_dir.glob(f"{stem}*.nsys-rep"), *run_dir.glob(f"{stem}*.qdrep")]
                for rep in sorted(reps):
                    exp = P.nsys_export_argv(str(rep))
                    manifest["commands"].append(shlex.join(exp))
                    rc = _run_child(exp, {}, step.log)
                    if rc != 0:
                        status, exit_code = "failed", rc
                        error = f"nsys export of {rep.name} exited with status {rc}"
                        break
                if status == "failed":
                    break
        else:
            status, exit_code = "completed", 0
    except KeyboardInterrupt:
        status, error = "interrupted", "KeyboardInterrupt"
        raise
    except Terminated:
        status, error = "interrupted", "SIGTERM"
        raise
    except BaseException as e:
        status, error = "failed", f"{type(e).__name__}: {e}"
        raise
    finally:
        if old_term[0]:
            # None: the previous handler was not set from Python; SIG_DFL is what it was.
            signal.signal(signal.SIGTERM, signal.SIG_DFL if old_term[1] is None else old_term[1])
        if sampler is not None:
            rc_s = _terminate(sampler)
            manifest["sampler_exit_code"] = rc_s
            if rc_s not in (0, None):
                say(f"NVML sampler exited with status {rc_s}; see {run_dir / 'sampler.log'}")
        if status == "running":  # pragma: no cover - only via an exception path above
            status = "failed"
        manifest.update(status=status, error=error, exit_code=exit_code, end_utc=utc_now())
        manifest["outputs"] = [str(p.relative_to(run_dir)) for p in _outputs(run_dir)]
        write_manifest(mpath, manifest)

    if status != "completed":
        last = _last_line(pl.steps, run_dir)
        raise CollectError(
            f"{error}{'; last output: ' + last if last else ''}; "
            f"manifest and partial outputs in {run_dir}"
        )

    table = None
    store_dir: Path | None = None
    if cfg.node_rank == 0:
        from .throughput import write_throughput

        logs = sorted(run_dir.glob("iterations_bs*_rank*.csv"))
        table = write_throughput(logs, pl.warmup, run_dir)
        if cfg.ingest:
            store_dir = run_dir / "store"
            say("ingesting outputs into the store")
            ingested, skipped = ingest_outputs(run_dir, store_dir)
            manifest["ingested"], manifest["not_ingested"] = ingested, skipped
        manifest["outputs"] = [str(p.relative_to(run_dir)) for p in _outputs(run_dir)]
        write_manifest(mpath, manifest)
    return CollectResult(
        run_dir=run_dir,
        manifest=mpath,
        store=store_dir,
        status=status,
        outputs=manifest["outputs"],
        ingested=manifest["ingested"],
        not_ingested=manifest["not_ingested"],
        throughput=table,
    )


def _last_line(steps: list[Step], run_dir: Path) -> str | None:
    for s in reversed(steps):
        if s.log.exists():
            lines = [ln for ln in s.log.read_text(errors="replace").splitlines() if ln.strip()]
            if lines:
                return lines[-1].strip()[:200]
    return None


def _torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return str(torch.__version__)


__all__ = [
    "CollectConfig",
    "CollectResult",
    "Plan",
    "Terminated",
    "Step",
    "plan",
    "collect",
    "ingest_outputs",
    "new_run_id",
    "parse_batch_sizes",
    "workload_argv",
    "torchrun_argv",
    "default_torch_schedule",
    "default_profile_window",
]
