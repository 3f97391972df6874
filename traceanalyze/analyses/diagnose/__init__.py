"""`diagnose`: what is wrong with a run and how much fixing it would save (docs/diagnose.md).

Rules are pure functions over frames (`Inputs -> list[Finding] | Skip`), one small module per
family, registered in `RULES`. A finding names a `what_if` (a `critical-path --what-if` spec
that removes or shrinks the problem); the caller replays it (`Dataset.diagnose` through
`adapters.diagnose`) and `finalize` turns the replays into savings, severities and the order.
Adding a rule = its function, its line here, its tests and its section in docs/diagnose.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ...results import Finding
from . import comm, gpu, host, memory, steps
from .model import Inputs, Outcome, Skip

Rule = Callable[[Inputs], Outcome]

RULES: tuple[tuple[str, Rule], ...] = (
    ("data_loader", host.data_loader),
    ("host_bound", host.host_bound),
    ("sync", host.sync),
    ("sync_memcpy", memory.sync_memcpy),
    ("pageable_memcpy", memory.pageable_memcpy),
    ("small_kernels", host.small_kernels),
    ("exposed_comm", comm.exposed_comm),
    ("straggler", comm.straggler),
    ("throttling", steps.throttling),
    ("no_tensor_cores", gpu.no_tensor_cores),
    ("layout_transposes", gpu.layout_transposes),
    ("gpu_bound", gpu.gpu_bound),
    ("iteration_variability", steps.iteration_variability),
)

SEVERITIES = ("high", "medium", "low", "info")
# Severity of a predicted saving, as a share of the mean path: what a user would act on first.
HIGH_PCT, MEDIUM_PCT, LOW_PCT = 10.0, 3.0, 0.5
# Shares of the iterations' own path (carry left out) that decide the verdict.
BOUND_SHARE = 0.6


def run(inp: Inputs) -> tuple[list[Finding], list[tuple[str, str]]]:
    """Every rule over `inp`: the findings (unsorted, no savings yet) and the rules that could
    not run, with why."""
    found: list[Finding] = []
    skipped: list[tuple[str, str]] = []
    for name, rule in RULES:
        out = rule(inp)
        if isinstance(out, Skip):
            skipped.append((name, out.reason))
        else:
            found.extend(out)
    return found, skipped


def specs(findings: list[Finding], groups: bool = False) -> list[str]:
    """Every what-if the findings name, once each (`groups`: their evidence groups' too)."""
    out: dict[str, None] = {}
    for f in findings:
        if f.what_if:
            out[f.what_if] = None
        for g in f.evidence.get("groups", []) if groups else []:
            if g.get("what_if"):
                out[g["what_if"]] = None
    return list(out)


def _severity(f: Finding, pct: float | None) -> str:
    if pct is None:
        return f.severity
    if pct >= HIGH_PCT:
        return "high"
    if pct >= MEDIUM_PCT:
        return "medium"
    return "low" if pct >= LOW_PCT else "info"


def _title(f: Finding, saving: float | None, pct: float | None) -> str:
    if saving is None or pct is None:
        return f.title
    if pct < LOW_PCT:
        return f"{f.title} — off the critical path: saves ~{saving:.2f} ms ({pct:.1f} %)"
    return f"{f.title} — fixing it saves {saving:.2f} ms per iteration ({pct:.1f} %)"


def finalize(
    findings: list[Finding], savings: Mapping[str, float], mean_path_ms: float
) -> list[Finding]:
    """Savings (`savings`: what-if spec -> mean ms saved), severities from them, the titles
    saying them; sorted by saving, then those without one by severity."""
    out = []
    for f in findings:
        saving = savings.get(f.what_if) if f.what_if else None
        pct = 100 * saving / mean_path_ms if saving is not None and mean_path_ms > 0 else None
        ev = dict(f.evidence)
        if "groups" in ev:
            ev["groups"] = [_with_saving(g, savings, mean_path_ms) for g in ev["groups"]]
        out.append(
            replace(
                f,
                severity=_severity(f, pct),
                title=_title(f, saving, pct),
                saving_ms=None if saving is None else round(saving, 4),
                saving_pct=None if pct is None else round(pct, 2),
                evidence=ev,
            )
        )
    with_saving = sorted(
        (f for f in out if f.saving_ms is not None), key=lambda f: -(f.saving_ms or 0)
    )
    rest = sorted(
        (f for f in out if f.saving_ms is None), key=lambda f: SEVERITIES.index(f.severity)
    )
    return with_saving + rest


def _with_saving(g: dict[str, Any], savings: Mapping[str, float], mean: float) -> dict[str, Any]:
    s = savings.get(g.get("what_if") or "")
    pct = None if s is None or mean <= 0 else round(100 * s / mean, 2)
    return {**g, "saving_ms_per_iteration": None if s is None else round(s, 4), "saving_pct": pct}


def verdict(inp: Inputs) -> dict[str, Any]:
    """What bounds the run, from the critical path's split summed over iterations (the carry,
    the wait on earlier iterations' GPU work, left out): `gpu` (kernels, copies), `host`
    (host work, launches, synchronization waits, gaps), `communication` (collectives), or
    `mixed` when none reaches `BOUND_SHARE`."""
    p = inp.path
    own = float((p["path_ms"] - p["carry_ms"]).sum()) if p.height else 0.0
    parts = {
        "gpu": float((p["gpu_compute_ms"] + p["gpu_memory_ms"]).sum()) if p.height else 0.0,
        "communication": float(p["gpu_comm_ms"].sum()) if p.height else 0.0,
        "host": float((p["host_ms"] + p["launch_ms"] + p["sync_ms"] + p["idle_ms"]).sum())
        if p.height
        else 0.0,
    }
    shares = {k: (round(100 * v / own, 1) if own > 0 else None) for k, v in parts.items()}
    best = max(parts, key=lambda k: parts[k])
    bound = best if own > 0 and parts[best] / own >= BOUND_SHARE else "mixed"
    med = p["duration_ms"].median() if p.height else None
    return {
        "bound": bound,
        "shares_pct": shares,
        "iterations": p["iteration"].drop_nulls().n_unique() if p.height else 0,
        "median_iteration_ms": None if med is None else round(float(med), 3),  # type: ignore[arg-type]
        "median_path_ms": round(float(p["path_ms"].median()), 3) if p.height else None,  # type: ignore[arg-type]
        "mean_own_path_ms": round(inp.mean_path_ms, 3),
        "carry_pct": round(100 * float(p["carry_ms"].sum()) / float(p["path_ms"].sum()), 1)
        if p.height and float(p["path_ms"].sum()) > 0
        else None,
    }


__all__ = ["RULES", "Inputs", "Skip", "finalize", "run", "specs", "verdict"]
