"""A `runs` row for a `traceanalyze collect` run, from its rank-0 iteration log and the run's
`manifest.json` beside it (docs/runs.md).

Only the rank-0 log of a batch size gives the row (the other ranks' logs describe the same run).
accelerators = nnodes x nproc_per_node (config); nodes = nnodes; global batch = the log's batch
size x accelerators; status from the manifest (completed -> success; failed, interrupted ->
aborted; running -> unknown); start and stop from its start_utc/end_utc, time to train their
difference. Throughput (basis `logged`): the mean over the steady iterations (numbered >= the
manifest's warm-up) of the job's images/s, the sum over the ranks' logs
(`iterations_bs<B>_rank<R>.csv` beside this one) of iterations every rank logged. No manifest, or
one that does not parse: no row (a warning for the latter).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from ..common.core import PathLike, warn

_NAME = re.compile(r"^iterations_bs(\d+)_rank(\d+)\.csv$")
_STATUS = {"completed": "success", "failed": "aborted", "interrupted": "aborted"}


def _epoch_ns(text: Any) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        return None
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def _manifest(path: Path) -> dict[str, Any] | None:
    m = path.parent / "manifest.json"
    if not m.is_file():
        return None
    try:
        data = json.loads(m.read_text("utf-8"))
    except (OSError, ValueError) as e:
        warn(f"{path}: run manifest {m} unreadable ({e}); no runs row")
        return None
    return data if isinstance(data, dict) else None


def _positive(v: Any, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default


def collect_run(
    path: PathLike, iterations: pl.DataFrame, read: Callable[[Path], pl.DataFrame]
) -> pl.DataFrame | None:
    """The runs row, or None (not rank 0's log, no manifest). `read` reads a sibling log's
    iterations."""
    p = Path(path)
    name = _NAME.match(p.name)
    if name is None or name.group(2) != "0":
        return None
    m = _manifest(p)
    if m is None:
        return None
    cfg = m.get("config") if isinstance(m.get("config"), dict) else {}
    assert isinstance(cfg, dict)
    nodes = _positive(cfg.get("nnodes"), 1)
    accelerators = nodes * _positive(cfg.get("nproc_per_node"), 1)
    batch = int(name.group(1))
    start, stop = _epoch_ns(m.get("start_utc")), _epoch_ns(m.get("end_utc"))
    versions = m.get("versions") if isinstance(m.get("versions"), dict) else {}
    assert isinstance(versions, dict)
    gpus = [g.get("name") for g in m.get("gpus") or [] if isinstance(g, dict) and g.get("name")]
    device = str(cfg.get("device") or "")
    model = gpus[0] if gpus and device != "cpu" else ("cpu" if device == "cpu" else None)
    torch = versions.get("torch")
    tp = _throughput(p, batch, iterations, read, _positive(cfg.get("warmup"), 0))
    row = {
        "run_id": str(m.get("run_id")) if m.get("run_id") is not None else None,
        "benchmark": "resnet50",
        "platform": m.get("hostname") if isinstance(m.get("hostname"), str) else None,
        "framework": f"PyTorch {torch}" if isinstance(torch, str) else None,
        "accelerator_model": model,
        "accelerators": accelerators,
        "nodes": nodes,
        "global_batch_size": batch * accelerators,
        "status": _STATUS.get(str(m.get("status")), "unknown"),
        "run_start_ns": start,
        "run_stop_ns": stop,
        "time_to_train_s": (stop - start) / 1e9 if start is not None and stop is not None else None,
        "throughput_img_per_s": tp,
        "throughput_basis": "logged" if tp is not None else None,
    }
    return pl.DataFrame([row], schema_overrides=_TYPES)


_TYPES: dict[str, Any] = {
    "run_start_ns": pl.Int64,
    "run_stop_ns": pl.Int64,
    "time_to_train_s": pl.Float64,
    "throughput_img_per_s": pl.Float64,
    "platform": pl.String,
    "framework": pl.String,
    "accelerator_model": pl.String,
    "run_id": pl.String,
}


def _throughput(
    path: Path,
    batch: int,
    own: pl.DataFrame,
    read: Callable[[Path], pl.DataFrame],
    warmup: int,
) -> float | None:
    frames = [own.select("iteration", "images_per_s").with_columns(pl.lit(0).alias("r"))]
    for sib in sorted(path.parent.glob(f"iterations_bs{batch}_rank*.csv")):
        m = _NAME.match(sib.name)
        if m is None or m.group(2) == "0":
            continue
        its = read(sib).select("iteration", "images_per_s")
        frames.append(its.with_columns(pl.lit(int(m.group(2))).alias("r")))
    ranks = len(frames)
    df = pl.concat(frames).filter(
        (pl.col("iteration") >= warmup) & pl.col("images_per_s").is_not_null()
    )
    per = df.group_by("iteration").agg(pl.col("images_per_s").sum(), pl.col("r").n_unique())
    per = per.filter(pl.col("r") == ranks)
    if per.height == 0:
        return None
    mean = per["images_per_s"].mean()
    return float(mean) if isinstance(mean, (int, float)) else None
