"""The diagnose report as Markdown (`--markdown`, for an issue tracker) and as one
self-contained HTML file (`-o report.html`: style inline, figures inline SVG, no script and
nothing from the network, so it reads offline and as an e-mail attachment). The same text in
both: the verdict and the top findings with their savings first, then per finding its
evidence, figure and the command that reproduces its numbers."""

from __future__ import annotations

import json
import os
import shlex
from html import escape
from typing import Any

from ..outpaths import check_output
from .diagnose_svg import finding_figure, path_split, timeline

# `results.Diagnosis` (not imported: results imports this module for its methods)
Diagnosis = Any


def reproduce(d: Diagnosis, what_if: str | None) -> str:
    """The command that reproduces a finding's saving (or the diagnosis itself): the mean of
    path_ms − predicted_ms over its rows, each iteration replayed alone."""
    args = " ".join(shlex.quote(a) for a in d.inputs)
    if what_if is None:
        return f"traceanalyze diagnose {args} --json"
    spec = shlex.quote(what_if)
    return f"traceanalyze critical-path {args} --each-iteration --what-if {spec} --json"


def _saving(f: dict[str, Any]) -> str:
    if f["saving_ms_per_iteration"] is None:
        return "not predicted"
    return f"{f['saving_ms_per_iteration']:.2f} ms/iteration ({f['saving_pct']:.1f} %)"


def _head(d: Diagnosis) -> list[str]:
    v = d.verdict
    shares = ", ".join(f"{k} {s} %" for k, s in v["shares_pct"].items() if s is not None)
    return [
        f"**Verdict: {v['bound']}-bound** ({shares} of the iterations' own critical path)",
        f"Median iteration {v['median_iteration_ms']} ms; median critical path "
        f"{v['median_path_ms']} ms over "
        + (
            f"{v['iterations']} iteration(s)." if v["iterations"] else "one window (no iterations)."
        ),
    ]


def _evidence_rows(ev: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (k, json.dumps(v, default=str) if isinstance(v, list | dict) else str(v))
        for k, v in ev.items()
    ]


def markdown(d: Diagnosis) -> str:
    """The report as Markdown."""
    out = ["# traceanalyze diagnose", "", *_head(d), ""]
    fs = [f.to_dict() for f in d.findings]
    out += ["| # | severity | rule | saving | finding |", "|---|---|---|---|---|"]
    for i, f in enumerate(fs, 1):
        out.append(f"| {i} | {f['severity']} | {f['rule']} | {_saving(f)} | {f['title']} |")
    for i, f in enumerate(fs, 1):
        out += [
            "",
            f"## {i}. {f['rule']} ({f['severity']})",
            "",
            f["title"],
            "",
            f"**Advice:** {f['advice']}",
            "",
        ]
        out += ["| evidence | value |", "|---|---|"]
        out += [f"| {k} | {v.replace('|', '/')} |" for k, v in _evidence_rows(f["evidence"])]
        out += [
            "",
            f"Where: {json.dumps(f['where'], default=str)}",
            "",
            "```sh",
            reproduce(d, f["what_if"]),
            "```",
        ]
        out.append(f"Rule: {f['doc']}")
    if d.not_checked:
        out += ["", "## Not checked", ""] + [f"* {r}: {why}" for r, why in d.not_checked]
    return "\n".join(out) + "\n"


_STYLE = """body{font-family:sans-serif;max-width:60em;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:left;vertical-align:top;font-size:90%}td.v{max-width:40em;overflow-wrap:anywhere}
.high{color:#b00}.medium{color:#b60}.low{color:#555}.info{color:#357}
pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap;overflow-wrap:anywhere}
figure{margin:.5em 0}"""


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f'<td class="v">{c}</td>' for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{trs}</table>"


def html(d: Diagnosis) -> str:
    """The report as one HTML page (figures inline SVG)."""
    fs = [f.to_dict() for f in d.findings]
    parts = ["<h1>traceanalyze diagnose</h1>"] + [f"<p>{_md_bold(escape(x))}</p>" for x in _head(d)]
    summary = [
        [
            str(i),
            f'<span class="{f["severity"]}">{f["severity"]}</span>',
            escape(f["rule"]),
            escape(_saving(f)),
            f'<a href="#f{i}">{escape(f["title"])}</a>',
        ]
        for i, f in enumerate(fs, 1)
    ]
    parts.append(_table(["#", "severity", "rule", "saving", "finding"], summary))
    parts.append(
        f"<figure>{path_split(d.iterations)}<figcaption>The critical path per iteration, "
        "by kind (ms).</figcaption></figure>"
    )
    for i, f in enumerate(fs, 1):
        sev = f["severity"]
        parts.append(
            f'<h2 id="f{i}">{i}. {escape(f["rule"])} <span class="{sev}">({sev})</span></h2>'
        )
        parts.append(f"<p>{escape(f['title'])}</p><p><b>Advice:</b> {escape(f['advice'])}</p>")
        parts.append(_table(["evidence", "value"], _html_evidence(f["evidence"])))
        for fig in (finding_figure(f), timeline(d.iterations, f["evidence"].get("top", []))):
            if fig:
                parts.append(f"<figure>{fig}</figure>")
        parts.append(f"<p>Where: {escape(json.dumps(f['where'], default=str))}</p>")
        parts.append(
            f"<pre>{escape(reproduce(d, f['what_if']))}</pre><p>Rule: {escape(f['doc'])}</p>"
        )
    if d.not_checked:
        parts.append(
            "<h2>Not checked</h2><ul>"
            + "".join(f"<li>{escape(r)}: {escape(w)}</li>" for r, w in d.not_checked)
            + "</ul>"
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>traceanalyze diagnose</title><style>{_STYLE}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )


def _html_evidence(ev: dict[str, Any]) -> list[list[str]]:
    """Evidence rows; a list of records becomes a table of its own."""
    rows = []
    for k, v in ev.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            head = list(dict.fromkeys(c for x in v for c in x))
            cells = [[escape(_cell(x.get(c))) for c in head] for x in v]
            rows.append([escape(k), _table(head, cells)])
        else:
            rows.append([escape(k), escape(_cell(v))])
    return rows


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return json.dumps(v, default=str) if isinstance(v, list | dict) else str(v)


def _md_bold(s: str) -> str:
    while s.count("**") >= 2:
        s = s.replace("**", "<b>", 1).replace("**", "</b>", 1)
    return s


def write_html(d: Diagnosis, path: str | os.PathLike[str]) -> None:
    """`html(d)` to `path`, through a temporary name (never half-written)."""
    p = check_output(path)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(html(d), encoding="utf-8")
    os.replace(tmp, p)


__all__ = ["html", "markdown", "reproduce", "write_html"]
