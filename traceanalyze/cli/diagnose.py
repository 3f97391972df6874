"""The `diagnose` command: what is wrong with this run and how much fixing it would save.

Option parsing around one `Dataset.diagnose` call plus rendering (found by
`cli.analysis_commands` through `__all__`).
"""

from __future__ import annotations

from pathlib import Path

import click

from ..dataset import Dataset
from . import render
from .common import dataset_input, output_path, wrote


@click.command("diagnose")
@dataset_input
@click.option("--json", "out_json", is_flag=True, help="The diagnosis as JSON.")
@click.option("--markdown", "out_md", is_flag=True, help="The report as Markdown.")
@click.option(
    "-o",
    "--output",
    "out_html",
    type=click.Path(path_type=Path),
    callback=output_path,
    help="Write the report as one self-contained HTML file.",
)
@click.option("--no-replay", is_flag=True, help="Skip the what-if replays (no savings).")
@click.option(
    "--group-savings",
    is_flag=True,
    help="Also replay each top kernel group of the gpu_bound finding (one replay each).",
)
def diagnose(
    ds: Dataset,
    out_json: bool,
    out_md: bool,
    out_html: Path | None,
    no_replay: bool,
    group_savings: bool,
) -> None:
    """What is wrong with this run, and how much fixing each problem would save.

    A verdict (gpu-, host-, communication-bound or mixed, from the critical path's split),
    then the findings of every rule (data loader, host-bound, synchronizations, synchronous
    and pageable copies, small kernels, exposed communication, stragglers, throttling, FP32
    math without Tensor Cores, layout transposes, the top kernels, warm-up and outlier
    iterations), sorted by the saving the critical path predicts when the finding's what-if is
    replayed (critical-path --each-iteration --what-if SPEC, mean of path_ms - predicted_ms),
    and the rules this input could not answer. Rules and thresholds: docs/diagnose.md.
    """
    if out_json and out_md:
        raise click.UsageError("--json and --markdown are exclusive")
    d = ds.diagnose(replay=not no_replay, groups=group_savings)
    if out_html is not None:
        d.to_html(out_html)
        wrote(out_html)
    if out_json:
        click.echo(render.to_json(d.to_dict()))
    elif out_md:
        click.echo(d.to_markdown(), nl=False)
    else:
        click.echo(_text(d))


def _text(d: object) -> str:
    """The diagnosis as wrapped text (lines within the tables' 120 columns)."""
    import textwrap

    from ..results import Diagnosis

    assert isinstance(d, Diagnosis)
    wrap = textwrap.TextWrapper(width=render.WIDTH or 120, subsequent_indent="   ")
    v = d.verdict
    shares = ", ".join(f"{k} {s} %" for k, s in v["shares_pct"].items() if s is not None)
    lines = [
        f"verdict: {v['bound']}-bound ({shares} of the iterations' own critical path); "
        f"median iteration {v['median_iteration_ms']} ms, "
        + (
            f"{v['iterations']} iteration(s)"
            if v["iterations"]
            else "one window (no iterations: first to last event)"
        ),
        "",
    ]
    for i, f in enumerate(d.findings, 1):
        saving = "—" if f.saving_ms is None else f"{f.saving_ms:.2f} ms ({f.saving_pct:.1f} %)"
        lines += wrap.wrap(f"{i}. [{f.severity}] {f.rule}: {f.title}")
        lines += wrap.wrap(f"   saving/iteration: {saving}; what-if: {f.what_if or '—'}")
        lines += wrap.wrap(f"   advice: {f.advice}")
    if d.not_checked:
        lines += ["", "not checked:"]
        lines += [x for r, why in d.not_checked for x in wrap.wrap(f"  {r}: {why}")]
    return "\n".join(wrap.fill(x) if len(x) > wrap.width else x for x in lines)


__all__ = ["diagnose"]
