"""The diagnose report's figures as inline SVG text (no matplotlib, nothing external): the
critical path's split per iteration, and one bar chart per finding of its evidence (the top
events, the kernel groups, the ranks' waits, the copies by kind)."""

from __future__ import annotations

from html import escape
from typing import Any

import polars as pl

_COLORS = {
    "gpu_compute_ms": "#4c78a8",
    "gpu_comm_ms": "#f58518",
    "gpu_memory_ms": "#72b7b2",
    "host_ms": "#e45756",
    "launch_ms": "#ff9da6",
    "sync_ms": "#b279a2",
    "idle_ms": "#bab0ac",
    "carry_ms": "#dddddd",
}
W, ROW, LEFT = 720, 22, 230


def _svg(height: int, body: list[str], title: str) -> str:
    return (
        f'<svg role="img" width="{W}" height="{height}" '
        f'viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="11">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def path_split(iterations: pl.DataFrame) -> str:
    """One stacked bar per iteration (and source): the critical path's split, in ms."""
    cols = [c for c in _COLORS if c in iterations.columns]
    rows = iterations.head(40).to_dicts()
    top = max((sum(float(r[c] or 0) for c in cols) for r in rows), default=1.0) or 1.0
    scale = (W - LEFT - 20) / top
    body: list[str] = []
    for i, r in enumerate(rows):
        y = 10 + i * ROW
        label = f"{r.get('file', '')}"[-28:] + (
            f" #{r['iteration']}" if r["iteration"] is not None else ""
        )
        body.append(f'<text x="{LEFT - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>')
        x = float(LEFT)
        for c in cols:
            w = float(r[c] or 0) * scale
            if w > 0:
                body.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{ROW - 6}" '
                    f'fill="{_COLORS[c]}">'
                    f"<title>{c}: {float(r[c]):.3f} ms</title></rect>"
                )
            x += w
    y = 14 + len(rows) * ROW
    x = 10.0
    for c in cols:
        body.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{_COLORS[c]}"/>')
        body.append(f'<text x="{x + 13}" y="{y + 9}">{c.removesuffix("_ms")}</text>')
        x += 88
    return _svg(y + 24, body, "critical path split per iteration (ms)")


def bars(items: list[tuple[str, float]], unit: str, title: str) -> str:
    """Horizontal bars, one per (label, value)."""
    items = items[:12]
    top = max((v for _, v in items), default=1.0) or 1.0
    scale = (W - LEFT - 80) / top
    body = []
    for i, (label, v) in enumerate(items):
        y = 10 + i * ROW
        body.append(
            f'<text x="{LEFT - 6}" y="{y + 14}" text-anchor="end">{escape(label[:40])}</text>'
        )
        body.append(
            f'<rect x="{LEFT}" y="{y}" width="{max(v * scale, 1):.1f}" height="{ROW - 6}" '
            f'fill="#4c78a8"><title>{escape(label)}: {v:.3f} {unit}</title></rect>'
        )
        body.append(
            f'<text x="{LEFT + max(v * scale, 1) + 4:.1f}" y="{y + 14}">{v:.3f} {unit}</text>'
        )
    return _svg(20 + len(items) * ROW, body, title)


def timeline(iterations: pl.DataFrame, events: list[dict[str, Any]]) -> str | None:
    """One iteration (the one holding the first event) as a bar from its start to its path's
    end, the finding's events in it marked at their times; None when none falls in one."""
    timed = [e for e in events if e.get("start_ns") is not None]
    if not timed or iterations.is_empty():
        return None
    e0 = timed[0]
    its = iterations.with_columns(
        end=pl.col("start_ns") + (pl.col("path_ms") * 1e6).cast(pl.Int64)
    ).filter(
        (pl.col("start_ns") <= e0["start_ns"])
        & (pl.col("end") >= e0["start_ns"])
        & (pl.col("source_id") == e0.get("source_id", pl.col("source_id")))
    )
    if its.is_empty():
        return None
    it = its.row(0, named=True)
    lo, span = int(it["start_ns"]), max(int(it["end"]) - int(it["start_ns"]), 1)
    scale = (W - 40) / span
    body = [
        f'<rect x="20" y="24" width="{W - 40}" height="18" fill="#eeeeee">'
        f"<title>iteration {it['iteration']}: {span / 1e6:.3f} ms of path</title></rect>",
        f'<text x="20" y="14">iteration {it["iteration"]}: 0 to {span / 1e6:.1f} ms '
        "(the path)</text>",
    ]
    for e in timed:
        x = 20 + (int(e["start_ns"]) - lo) * scale
        if not 20 <= x <= W - 20:
            continue
        w = max(float(e["duration_ms"]) * 1e6 * scale, 2.0)
        body.append(
            f'<rect x="{x:.1f}" y="22" width="{min(w, W - 20 - x):.1f}" height="22" '
            f'fill="#e45756"><title>{escape(str(e["name"]))}: {e["duration_ms"]:.3f} ms at '
            f"{(int(e['start_ns']) - lo) / 1e6:.3f} ms</title></rect>"
        )
    return _svg(52, body, "the finding's events in one iteration")


def finding_figure(f: dict[str, Any]) -> str | None:
    """The figure of one finding (its `to_dict()`), or None when its evidence has no rows."""
    ev = f["evidence"]
    if ev.get("groups"):
        return bars(
            [(g["name"], float(g["total_ms"] or 0)) for g in ev["groups"]],
            "ms",
            "kernel groups: GPU time",
        )
    if ev.get("ranks"):
        return bars(
            [(f"rank {r['rank']}", float(r["wait_caused_ms"] or 0)) for r in ev["ranks"]],
            "ms",
            "wait each rank caused the others",
        )
    if ev.get("devices"):
        key = "exposed_ms" if "exposed_ms" in ev["devices"][0] else "clock_mhz"
        return bars(
            [(f"device {d['device_id']}", float(d[key] or 0)) for d in ev["devices"]],
            "ms" if key == "exposed_ms" else "MHz",
            key,
        )
    if ev.get("iterations"):
        return bars(
            [(f"iteration {r['iteration']}", float(r["duration_ms"])) for r in ev["iterations"]],
            "ms",
            "iteration durations",
        )
    if ev.get("top"):
        return bars(
            [(str(e["name"]), float(e["duration_ms"])) for e in ev["top"]], "ms", "longest events"
        )
    totals = [(k, float(v)) for k, v in ev.items() if k.endswith("_ms") and v is not None]
    return bars(totals, "ms", "the totals the rule used") if totals else None


__all__ = ["bars", "finding_figure", "path_split", "timeline"]
