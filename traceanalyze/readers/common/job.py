"""The job a file belongs to, where something beside the file states it.

`traceanalyze collect` writes each run to its own directory with a `manifest.json`
(`traceanalyze/collect/run.py`) whose `run_id` names the run on every node (`--nnodes > 1` needs
the same `--run-id` on each, so the nodes' files, wherever they are ingested from, carry one id).
A run trains once per batch size, each a torchrun job of its own, and the outputs name it
(`torch_bs<B>_rank<R>…`, `nsys_bs<B>_rank<R>…`, `iterations_bs<B>_rank<R>.csv`): their job is
`<run-id>/bs<B>`; an output of the whole run (the host-wide NVML log `nvml_<host>.csv`) has job
`<run-id>`. Only `run_id` is read from the manifest, and only from a JSON object with a
`manifest_version`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .core import PathLike, warn

MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 4 << 20  # a collect manifest is a few KiB
_BATCH = re.compile(r"(?:^|_)bs(\d+)(?=[_.])")


def collect_job(path: PathLike) -> str | None:
    """`<run-id>[/bs<B>]` for a file of a collect run (module doc), else None."""
    p = Path(path)
    m = p.parent / MANIFEST
    if p.name == MANIFEST or not m.is_file():
        return None
    try:
        with open(m, "rb") as f:  # bounded: never more than the cap, whatever the file is
            raw = f.read(MANIFEST_MAX_BYTES + 1)
        if len(raw) > MANIFEST_MAX_BYTES:
            raise ValueError(f"over {MANIFEST_MAX_BYTES} bytes")
        data = json.loads(raw)
    except (OSError, ValueError) as e:
        warn(f"{path}: {m} unreadable ({e}); its run id is not the job")
        return None
    if not isinstance(data, dict) or "manifest_version" not in data:
        return None
    run = data.get("run_id")
    if not isinstance(run, str) or not run:
        return None
    b = _BATCH.search(p.name)
    return f"{run}/bs{int(b.group(1))}" if b else run
