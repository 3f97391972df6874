"""One run's records folded into a `runs` row and its epochs' (or blocks') `iterations` rows.

Only aggregates are kept (first values, counts, one entry per epoch or block), so memory does not
grow with the console output around the records. The first `run_start` and the first `run_stop`
count, as in the MLCommons summarizer; records after that `run_stop` are not read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .records import Record
from .system import number

# First value wins for these keys (multi-node logs print them once per node).
FIRST_KEYS = (
    "submission_benchmark",
    "submission_org",
    "submission_division",
    "submission_platform",
    "global_batch_size",
    "train_samples",
    "eval_target",
    "target_accuracy",
)
_ABORTED = ("aborted", "abort")


def _rate(v: Any) -> float | None:
    if isinstance(v, dict):
        v = v.get("imgs_sec", v.get("throughput"))
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) and v > 0 else None


def _fraction(v: Any) -> float | None:
    if isinstance(v, dict):  # v0.5: {"epoch": n, "value": x}
        v = v.get("value")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


@dataclass
class RunState:
    first: dict[str, Any] = field(default_factory=dict)
    records: int = 0
    variants: set[str] = field(default_factory=set)
    run_start_ns: int | None = None
    started: bool = False
    run_stop_ns: int | None = None
    stopped: bool = False
    stop_status: str | None = None
    aborted: bool = False
    eval_count: int = 0
    final_accuracy: float | None = None
    last_eval_epoch: int | None = None
    # epoch -> [start_ns, stop_ns]; first epoch of a block -> [start_ns, stop_ns, epoch_count]
    epochs: dict[int, list[int | None]] = field(default_factory=dict)
    blocks: dict[int, list[int | None]] = field(default_factory=dict)
    rates: dict[Any, float] = field(default_factory=dict)
    seq: dict[str, int] = field(default_factory=dict)
    last_stopped_epoch: int | None = None

    def add(self, r: Record) -> None:
        """Fold one record in (the caller stops calling after the first run_stop)."""
        self.records += 1
        self.variants.add(r.variant)
        if r.key in FIRST_KEYS and r.key not in self.first and r.value is not None:
            self.first[r.key] = r.value
        if "benchmark" in r.metadata and "submission_benchmark" not in self.first:
            self.first["submission_benchmark"] = r.metadata["benchmark"]  # v0.5's tag
        handler = _HANDLERS.get(r.key)
        if handler is not None:
            handler(self, r)

    def _run_start(self, r: Record) -> None:
        if not self.started:
            self.started, self.run_start_ns = True, r.time_ns

    def _run_stop(self, r: Record) -> None:
        self.stopped, self.run_stop_ns = True, r.time_ns
        status = r.metadata.get("status")
        if isinstance(r.value, dict) and isinstance(r.value.get("success"), bool) and not status:
            status = "success" if r.value["success"] else "aborted"  # v0.5
        self.stop_status = str(status).lower() if status is not None else None

    def _abort(self, r: Record) -> None:
        self.aborted = True

    def _eval(self, r: Record) -> None:
        acc = _fraction(r.value)
        if acc is None:
            return
        self.eval_count += 1
        self.final_accuracy = acc
        e = number(r.metadata.get("epoch_num"))
        self.last_eval_epoch = e if e is not None else self.last_eval_epoch

    def _epoch(self, r: Record) -> None:
        e = number(r.metadata.get("epoch_num"))
        if e is None:
            return
        span = self.epochs.setdefault(e, [None, None])
        if r.key == "epoch_start":
            span[0] = r.time_ns if span[0] is None else span[0]
        else:
            span[1] = r.time_ns
            self.last_stopped_epoch = e

    def _block(self, r: Record) -> None:
        e = number(r.metadata.get("first_epoch_num"))
        if e is None:
            return
        span = self.blocks.setdefault(e, [None, None, None])
        if r.key == "block_start":
            span[0] = r.time_ns if span[0] is None else span[0]
            span[2] = number(r.metadata.get("epoch_count"))
        else:
            span[1] = r.time_ns

    def _throughput(self, r: Record) -> None:
        # v1.x `throughput`; v2.0 `tracked_stats` {imgs_sec} *and* `throughput` (the same number,
        # counted once: both are keyed by their epoch); v3.1+ `tracked_stats` {throughput}.
        v = _rate(r.value)
        if v is None:
            return
        e = number(r.metadata.get("epoch_num"))
        e = number(r.metadata.get("step")) if e is None else e
        e = self.last_stopped_epoch if e is None else e
        key: Any = e
        if e is None:
            n = self.seq.get(r.key, 0)
            self.seq[r.key] = n + 1
            key = ("seq", n)
        self.rates.setdefault(key, v)

    @property
    def status(self) -> str:
        if self.aborted or self.stop_status in _ABORTED:
            return "aborted"
        return "success" if self.stopped and self.stop_status == "success" else "unknown"


_HANDLERS = {
    "run_start": RunState._run_start,
    "run_stop": RunState._run_stop,
    "abort": RunState._abort,
    "eval_accuracy": RunState._eval,
    "epoch_start": RunState._epoch,
    "epoch_stop": RunState._epoch,
    "block_start": RunState._block,
    "block_stop": RunState._block,
    "throughput": RunState._throughput,
    "tracked_stats": RunState._throughput,
}
