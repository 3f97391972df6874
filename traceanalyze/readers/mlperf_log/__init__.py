"""MLPerf Training result logs: one training run per file, as `:::MLLOG {json}` records (v0.7
onward, `mlperf_logging.mllog`), the legacy `:::MLL` (v0.6) and `:::MLPv0.5.0` lines, and
`:::SYSJSON` system lines, among any amount of console output. Tested on
mlcommons/training_results_v1.1 and v2.0 ResNet-50 logs (NVIDIA, Habana, Dell, Graphcore).

Produces one `runs` row (docs/runs.md: columns, status, time to train, throughput basis) and one
`iterations` row per epoch with its images/s (per block when the log has no epoch events:
`iteration` is then the block's first epoch). Times are Unix epoch ns (`time_ms` x 10^6), so
`time_origin_epoch_ns` is 0.

The file is streamed (`lines`): memory stays bounded whatever its size. A marker may stand
anywhere in a line; lines end in LF or CRLF. Unknown keys are kept out of the way, never an
error; a record whose JSON does not parse is a warning naming its line, and the rest is read.
No record at all is a MalformedInput. The system (accelerators, model, framework) is looked up
as `system` says; `system=FILE` (CLI `--system`) is the last place looked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from ...errors import MalformedInput
from ...tables import Tables
from ..common.core import PathLike, head_bytes, reader_entry, warn
from .lines import marker_lines
from .records import Bad, Record, SysJson, parse_line
from .run import RunState
from .system import System, find_system, layout_place, number

SNIFF_BYTES = 1 << 20
_SNIFF_MARKERS = (b":::MLLOG {", b":::MLLOG{", b":::MLL ", b":::MLPv0.5.0 ", b":::SYSJSON")
_SHOWN_LINES = 10
# Quality targets of the MLPerf Training rules (v0.7 onward, closed division), used when a
# `:::MLLOG` log does not state its own (`eval_target`/`target_accuracy`); v0.5/v0.6 targets
# differed (ResNet-50: 0.749), so older variants get none.
RULES_TARGETS: dict[str, float] = {"resnet": 0.759}


def sniff(path: PathLike) -> bool:
    """A record marker in the first 1 MiB (console output may come first)."""
    head = head_bytes(path, SNIFF_BYTES)
    # every marker starts with ':::': one scan rules out most files (a trace's 1 MiB head)
    return b":::" in head and any(m in head for m in _SNIFF_MARKERS)


def _fold(path: PathLike) -> tuple[RunState, dict[str, Any] | None]:
    run = RunState()
    sysjson: dict[str, Any] | None = None
    bad: list[int] = []
    bad_count = 0
    for line_no, raw in marker_lines(path):
        for item in parse_line(line_no, raw):
            if isinstance(item, Bad):
                bad_count += 1
                if len(bad) < _SHOWN_LINES:
                    bad.append(item.line)
            elif isinstance(item, SysJson):
                sysjson = item.data if sysjson is None else sysjson
            elif isinstance(item, Record) and not run.stopped:
                run.add(item)
    if bad_count:
        more = ", …" if bad_count > len(bad) else ""
        lines = ", ".join(str(n) for n in bad)
        warn(f"{path}: {bad_count} MLPerf record(s) that do not parse skipped (line {lines}{more})")
    return run, sysjson


@reader_entry("mlperf_log")
def read_mlperf_log(path: PathLike, *, system: str | None = None) -> Tables:
    run, sysjson = _fold(path)
    if run.records == 0:
        raise MalformedInput(
            "no MLPerf log records (':::MLLOG {json}', ':::MLL', ':::MLPv0.5.0') in the file",
            path=path,
        )
    if not run.started:
        warn(f"{path}: no run_start record: run start and time to train are null")
    if not run.stopped:
        warn(f"{path}: no run_stop record: status 'unknown'")
    platform = run.first.get("submission_platform")
    platform = str(platform) if platform is not None else None
    found = find_system(path, sysjson, platform, system)
    return Tables.build(
        runs=_runs_row(path, run, found, platform),
        iterations=_iterations(run),
        sources=pl.DataFrame(
            {"tool": ["mlperf-logging"], "time_origin_epoch_ns": [0]},
            schema={"tool": pl.String, "time_origin_epoch_ns": pl.Int64},
        ),
    )


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _system_name(path: PathLike, found: System | None) -> str | None:
    place = layout_place(Path(path))
    if place is not None:
        return place[1]
    return found.name if found is not None else None


def _runs_row(
    path: PathLike, run: RunState, found: System | None, platform: str | None
) -> pl.DataFrame:
    f = run.first
    start, stop = run.run_start_ns, run.run_stop_ns
    ttt = (stop - start) / 1e9 if start is not None and stop is not None else None
    tp, basis = _throughput(run)
    target = f.get("target_accuracy", f.get("eval_target"))
    if target is None and run.variants == {"MLLOG"}:
        target = RULES_TARGETS.get(str(f.get("submission_benchmark")))
    row: dict[str, Any] = {
        "run_id": Path(path).name.split(".")[0],
        "benchmark": _text(f.get("submission_benchmark")),
        "org": _text(f.get("submission_org")),
        "platform": platform,
        "system": _system_name(path, found),
        "division": _text(f.get("submission_division")),
        "framework": found.framework if found else None,
        "accelerator_model": found.accelerator_model if found else None,
        "accelerators": found.accelerators if found else None,
        "nodes": found.nodes if found else None,
        "global_batch_size": number(f.get("global_batch_size")),
        "status": run.status,
        "run_start_ns": start,
        "run_stop_ns": stop,
        "time_to_train_s": ttt,
        "target_accuracy": float(target) if isinstance(target, (int, float)) else None,
        "final_accuracy": run.final_accuracy,
        "epochs": _epochs(run),
        "eval_count": run.eval_count,
        "throughput_img_per_s": tp,
        "throughput_basis": basis,
    }
    return pl.DataFrame([row], schema_overrides=_RUN_TYPES)


_RUN_TYPES: dict[str, Any] = {
    "run_start_ns": pl.Int64,
    "run_stop_ns": pl.Int64,
    "time_to_train_s": pl.Float64,
    "target_accuracy": pl.Float64,
    "final_accuracy": pl.Float64,
    "throughput_img_per_s": pl.Float64,
    "accelerators": pl.Int64,
    "nodes": pl.Int64,
    "global_batch_size": pl.Int64,
    "epochs": pl.Int64,
}


def _stopped_epochs(run: RunState) -> list[int]:
    return sorted(e for e, (s, t) in run.epochs.items() if t is not None)


def _epochs(run: RunState) -> int | None:
    """Epochs completed: stopped epochs, else the epoch counts of stopped blocks, else the
    epoch of the last evaluation."""
    if _stopped_epochs(run):
        return len(_stopped_epochs(run))
    counts = [b[2] for b in run.blocks.values() if b[1] is not None and b[2] is not None]
    if counts:
        return sum(counts)
    return run.last_eval_epoch


def _throughput(run: RunState) -> tuple[float | None, str | None]:
    if run.rates:
        return sum(run.rates.values()) / len(run.rates), "logged"
    samples = number(run.first.get("train_samples"))
    epochs = _epochs(run) if (_stopped_epochs(run) or run.blocks) else None
    starts = [s[0] for s in (*run.epochs.values(), *run.blocks.values()) if s[0] is not None]
    stops = [s[1] for s in (*run.epochs.values(), *run.blocks.values()) if s[1] is not None]
    if not samples or not epochs or not starts or not stops or max(stops) <= min(starts):
        return None, None
    return samples * epochs / ((max(stops) - min(starts)) / 1e9), "derived"


def _iterations(run: RunState) -> pl.DataFrame:
    """One row per stopped epoch (its logged rate, else train_samples over its duration), or
    per stopped block when there are no epochs (train_samples x epoch_count over its duration)."""
    samples = number(run.first.get("train_samples"))
    # (iteration, start, stop, logged rate, images trained)
    rows: list[tuple[int, int | None, int | None, float | None, int | None]] = []
    for e in _stopped_epochs(run):
        start, stop = run.epochs[e]
        rows.append((e, start, stop, run.rates.get(e), samples))
    if not rows:
        for e in sorted(run.blocks):
            start, stop, count = run.blocks[e]
            if stop is not None:
                rows.append((e, start, stop, None, samples * count if samples and count else None))
    out = []
    for e, start, stop, rate, images in rows:
        dur = stop - start if start is not None and stop is not None else None
        if rate is None and images and dur and dur > 0:
            rate = images / (dur / 1e9)
        out.append((e, start, stop, dur, rate))
    return pl.DataFrame(
        out,
        schema={
            "iteration": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "duration_ns": pl.Int64,
            "images_per_s": pl.Float64,
        },
        orient="row",
    )
