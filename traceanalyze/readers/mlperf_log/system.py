"""The system a run ran on: accelerators, nodes, accelerator model, framework.

Looked up in this order (docs/runs.md): a `:::SYSJSON` line in the log; the system description
at its place in the MLCommons results layout, `<org>/systems/<name>.json` beside
`<org>/results/<system>/<benchmark>/<log>`, `<name>` being the log's `submission_platform`, then
the `<system>` directory; the reader option `system=FILE`. Numbers may be strings ("8", "1.0").
accelerators = number_of_nodes x max(accelerators_per_node, 1). Nothing found: nulls and a
warning, never a guess. A description in the layout that does not parse is skipped with a
warning; a `system=` file that is missing or does not parse is an error (it was asked for).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import MalformedInput, TraceanalyzeError
from ..common.core import PathLike, warn

_MAX_SYSTEM_BYTES = 1 << 20  # a system description is ~2 KB


@dataclass(frozen=True)
class System:
    name: str | None
    nodes: int | None
    accelerators_per_node: int | None
    accelerator_model: str | None
    framework: str | None
    origin: str

    @property
    def accelerators(self) -> int | None:
        if self.nodes is None or self.accelerators_per_node is None:
            return None
        return self.nodes * max(self.accelerators_per_node, 1)


def number(v: Any) -> int | None:
    """An integer from 8, 8.0, "8", " 1.0 "; None for anything else (text, 1.5, NaN, bool)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            return None
    if isinstance(v, (int, float)) and math.isfinite(v) and float(v).is_integer():
        return int(v)
    return None


def _text(v: Any) -> str | None:
    return v.strip() or None if isinstance(v, str) else None


def from_mapping(d: dict[str, Any], origin: str) -> System:
    return System(
        name=_text(d.get("system_name")),
        nodes=number(d.get("number_of_nodes")),
        accelerators_per_node=number(d.get("accelerators_per_node")),
        accelerator_model=_text(d.get("accelerator_model_name")),
        framework=_text(d.get("framework")),
        origin=origin,
    )


def _load(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; MalformedInput naming it when it is not one."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_SYSTEM_BYTES + 1)
    except OSError as e:
        raise TraceanalyzeError(
            f"system description unreadable ({e.strerror})", path=path
        ) from None
    if len(raw) > _MAX_SYSTEM_BYTES:
        raise MalformedInput("system description larger than 1 MiB", path=path)
    try:
        obj = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as e:
        raise MalformedInput(f"system description is not JSON ({e})", path=path) from None
    if not isinstance(obj, dict):
        raise MalformedInput("system description is not a JSON object", path=path)
    return obj


def layout_place(log: Path) -> tuple[Path, str] | None:
    """(`<org>/systems`, `<system>`) when `log` sits at `<org>/results/<system>/<bench>/<file>`."""
    parts = log.resolve().parents
    if len(parts) < 4 or parts[2].name != "results":
        return None
    return parts[3] / "systems", parts[1].name


def _safe(name: str | None) -> bool:
    return bool(name) and "/" not in str(name) and "\\" not in str(name) and name not in (".", "..")


def find_system(
    log: PathLike, sysjson: dict[str, Any] | None, platform: str | None, option: PathLike | None
) -> System | None:
    if sysjson is not None:
        return from_mapping(sysjson, "SYSJSON line")
    looked: list[str] = []
    place = layout_place(Path(log))
    if place is not None:
        systems, dirname = place
        names = [n for n in (platform, dirname) if n is not None and _safe(n)]
        for name in dict.fromkeys(names):
            candidate = systems / f"{name}.json"
            looked.append(str(candidate))
            if not candidate.is_file():
                continue
            try:
                return from_mapping(_load(candidate), str(candidate))
            except TraceanalyzeError as e:
                warn(f"{log}: system description skipped: {e}")
    if option is not None:
        return from_mapping(_load(Path(option)), str(option))
    where = f" (looked for {', '.join(looked)})" if looked else " (not in a results layout)"
    warn(
        f"{log}: no system description found{where}: accelerators, nodes, accelerator model "
        "and framework are null; give one with system=FILE"
    )
    return None
