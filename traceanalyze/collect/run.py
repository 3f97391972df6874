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

Checks that can fail (device, profiler binary on PATH, nvprof on a too-new GPU, a flag the
found profiler lacks) run before the run directory is created, so a refused run leaves nothing
behind. A run that fails later says in its manifest `"status": "failed"` and which step failed
(`"failed_step"`: `workload`, `profile`, nsys's `import` or `export`). A dry run needs no GPU and no
profiler binary (it may be prepared on a login node): what it cannot know (compute capability,
the metric names `ncu --query-metrics` would give) it says in `Plan.notes`.
"""

from __future__ import annotations

import importlib
import re
import secrets
import shlex
import socket
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

from ..errors import CollectError
from . import profilers as P
from ._commands import (
    CollectConfig,
    default_profile_window,
    default_torch_schedule,
    node_tag,
    step_argv,
    torchrun_argv,
    workload_argv,
)
from ._device import cpu_cost, require_torch
from ._plan_profiler import check_profiler_flags, plan_ncu_metrics, plan_nvprof
from ._run_steps import (
    Step,
    Terminated,
    catch_sigterm,
    ingest_outputs,
    last_line,
    outputs,
    restore_sigterm,
    run_commands,
    start_sampler,
    stop_sampler,
    torch_version,
)
from .manifest import build_manifest, utc_now, write_manifest
from .resnet50 import PRECISIONS, parse_schedule, parse_window

SAMPLER_MODULE = "traceanalyze.collect.sampler"


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
        node = node_tag(cfg)
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


def resolve_device(requested: str | None, cfg: CollectConfig | None = None) -> str:
    """The device to train on. Without `requested`, CUDA when torch sees a GPU; with none, a
    `CollectError` saying so and what a CPU run costs (`--device cpu` runs it anyway): a CPU
    run of the defaults takes hours, never something to start unasked."""
    if requested == "cpu":
        return "cpu"
    require_torch()
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise CollectError("--device cuda, but torch sees no CUDA device")
    if requested:
        return requested
    if torch.cuda.is_available():
        return "cuda"
    cost = f": {cpu_cost(cfg)}" if cfg is not None else ""
    raise CollectError(
        f"no GPU found (torch sees no CUDA device), and a CPU run is slow{cost}; give "
        "--device cpu to run on the CPU anyway, best with fewer --iterations and a smaller "
        "--batch-size and --image-size"
    )


def dry_run_device(cfg: CollectConfig) -> str:
    """The device a dry run plans for, without asking for a GPU (a login node has none): the
    one given, cuda for an external profiler (which only profiles CUDA), else as a real run."""
    if cfg.device:
        return cfg.device
    if cfg.profiler in P.EXTERNAL:
        return "cuda"
    try:
        require_torch()
    except CollectError as e:  # the device cannot be asked: say how to plan without torch
        raise CollectError(f"{e.message}; a dry run without them needs --device") from None
    import torch

    # No GPU here (a login node): planned for the CPU, which a real run must be given.
    return "cuda" if torch.cuda.is_available() else "cpu"


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
    dev = device or (dry_run_device(cfg) if dry_run else resolve_device(cfg.device, cfg))
    if not dry_run:
        require_torch()  # the workload imports both; say so now, not in a child's log
    caps = device_capabilities() if capabilities is None and dev == "cuda" else (capabilities or [])
    notes: list[str] = []
    if dry_run and dev == "cpu" and cfg.device is None:
        notes.append(
            f"no GPU found: planned for the CPU, a real run needs --device cpu; {cpu_cost(cfg)}"
        )
    tool_path = None
    if cfg.profiler in P.EXTERNAL and not dry_run:
        tool_path = P.require_tool(cfg.profiler)
    if cfg.profiler == "nvprof":
        plan_nvprof(caps, dry_run, notes, dev)
    ncu_metrics: list[str] | None = None
    if cfg.profiler == "ncu":
        ncu_metrics = plan_ncu_metrics(cfg, caps, tool_path, dry_run, notes, dev)
    run_id = cfg.run_id or new_run_id()
    run_dir = Path(cfg.out) / run_id
    steps = []
    for bs in cfg.batch_sizes:
        argv, env = step_argv(cfg, bs, run_dir, dev, run_id, ncu_metrics)
        steps.append(Step(bs, argv, env, run_dir / f"workload_bs{bs}.log"))
    sampler_argv = _sampler_argv(cfg, dev, run_dir)
    if tool_path is not None:  # a flag the found version lacks: refused before anything runs
        check_profiler_flags(cfg, dev, tool_path, ncu_metrics)
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


def _sampler_argv(cfg: CollectConfig, dev: str, run_dir: Path) -> list[str] | None:
    """The NVML sampler's command line (`--sampler on`, or `auto` on a GPU), else None."""
    if not (cfg.sampler == "on" or (cfg.sampler == "auto" and dev == "cuda")):
        return None
    return [
        cfg.python,
        "-m",
        SAMPLER_MODULE,
        "--out",
        str(run_dir / f"nvml_{socket.gethostname()}.csv"),
        "--interval-ms",
        f"{cfg.sample_interval_ms:g}",
    ]


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
    _claim_run_dir(cfg, run_dir)
    mpath = run_dir / manifest_name(cfg)
    manifest = _start_manifest(cfg, argv, pl)
    write_manifest(mpath, manifest)

    sampler: subprocess.Popen[Any] | None = None
    status, error, exit_code = "running", None, None
    old_term = catch_sigterm()
    try:
        if pl.sampler_argv is not None:
            sampler = start_sampler(pl.sampler_argv, run_dir)
        status, error, exit_code = run_commands(
            pl.steps, cfg.profiler == "nsys", node_tag(cfg), run_dir, manifest, say
        )
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
        restore_sigterm(old_term)
        if sampler is not None:
            stop_sampler(sampler, manifest, run_dir, say)
        if status == "running":  # pragma: no cover - only via an exception path above
            status = "failed"
        manifest.update(status=status, error=error, exit_code=exit_code, end_utc=utc_now())
        manifest["outputs"] = [str(p.relative_to(run_dir)) for p in outputs(run_dir)]
        write_manifest(mpath, manifest)

    if status != "completed":
        _raise_failed(error, pl, run_dir)
    table, store_dir = _finish(cfg, pl, manifest, mpath, say)
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


def _claim_run_dir(cfg: CollectConfig, run_dir: Path) -> None:
    """Create the run directory; refuse one in use. Several nodes share the directory of a
    multi-node run (one --run-id), each with its own manifest name; a single-node run never
    writes into a directory that holds anything."""
    taken = (run_dir / manifest_name(cfg)).exists() or (
        cfg.nnodes == 1 and run_dir.exists() and any(run_dir.iterdir())
    )
    if taken:
        raise CollectError(f"run directory {run_dir} already exists and is not empty")
    run_dir.mkdir(parents=True, exist_ok=True)


def _raise_failed(error: str | None, pl: Plan, run_dir: Path) -> NoReturn:
    # a command that exited non-zero: its last words; a profiler that profiled nothing (exit 0)
    # already gave its own reason, and the workload's last line would only mislead
    exited = error is not None and "exited with status" in error
    last = last_line(pl.steps, run_dir) if exited else None
    raise CollectError(
        f"{error}{'; last output: ' + last if last else ''}; "
        f"manifest and partial outputs in {run_dir}"
    )


def _start_manifest(cfg: CollectConfig, argv: Sequence[str], pl: Plan) -> dict[str, Any]:
    """The manifest written before anything runs: config, versions, the planned commands."""
    profiler_version = P.tool_version(pl.profiler_path) if pl.profiler_path else None
    if cfg.profiler == "torch":
        profiler_version = "torch.profiler (kineto), torch " + (torch_version() or "?")
    manifest = build_manifest(
        run_id=pl.run_id,
        argv=list(argv),
        config=_config_dict(cfg, pl.warmup, pl.device),
        profiler_version=profiler_version,
    )
    manifest["commands"] = [s.shell() for s in pl.steps]
    manifest["sampler_command"] = None if pl.sampler_argv is None else shlex.join(pl.sampler_argv)
    manifest["notes"] = list(pl.notes)
    manifest["profiler_path"] = pl.profiler_path
    manifest["failed_step"] = None
    return manifest


def _finish(
    cfg: CollectConfig,
    pl: Plan,
    manifest: dict[str, Any],
    mpath: Path,
    say: Callable[[str], None],
) -> tuple[Any, Path | None]:
    """On node 0 of a completed run: the throughput table and, with `cfg.ingest`, the store;
    the manifest rewritten. (throughput table or None, store directory or None)."""
    if cfg.node_rank != 0:
        return None, None
    from .throughput import write_throughput

    run_dir = pl.run_dir
    store_dir: Path | None = None
    logs = sorted(run_dir.glob("iterations_bs*_rank*.csv"))
    table = write_throughput(logs, pl.warmup, run_dir)
    if cfg.ingest:
        store_dir = run_dir / "store"
        say("ingesting outputs into the store")
        ingested, skipped = ingest_outputs(run_dir, store_dir)
        manifest["ingested"], manifest["not_ingested"] = ingested, skipped
    manifest["outputs"] = [str(p.relative_to(run_dir)) for p in outputs(run_dir)]
    write_manifest(mpath, manifest)
    return table, store_dir


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
