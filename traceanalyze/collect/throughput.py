"""Batch-size sweep summary: `throughput.csv` and `throughput.png` from the iteration logs.

Steady state = iterations numbered `>= warmup`. With several ranks, an iteration's throughput is
the sum of the ranks' images/s for that iteration (the job's throughput); iterations that not
every rank logged are dropped. Median, p10 and p90 are over those iterations.

MFU columns (`analyses.mfu`): `achieved_flop_per_s` = median images/s x the model's training
FLOPs per image (counted by torch's FLOP counter at the run's image size), and `mfu_pct` = that
over (dense peak of the run's GPU for its precision x ranks). The GPU, precision and image size
come from the run's manifest; on CPU, or for a GPU not in `data/gpu_peaks.csv`, both are null
and a warning says why.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from ..readers.iterlog import read_iterlog

COLUMNS = (
    "batch_size",
    "ranks",
    "median_images_per_s",
    "p10_images_per_s",
    "p90_images_per_s",
    "iterations",
)


def throughput_table(logs: Sequence[str | Path], warmup: int) -> pl.DataFrame:
    """One row per batch size, sorted by batch size."""
    frames = [read_iterlog(p).iterations for p in logs]
    schema = {
        "batch_size": pl.Int64,
        "ranks": pl.Int64,
        "median_images_per_s": pl.Float64,
        "p10_images_per_s": pl.Float64,
        "p90_images_per_s": pl.Float64,
        "iterations": pl.Int64,
    }
    if not frames:
        return pl.DataFrame(schema=schema)
    df = pl.concat(frames).filter(pl.col("iteration") >= warmup)
    ranks = df.group_by("batch_size").agg(pl.col("rank").n_unique().alias("ranks"))
    per_iter = (
        df.group_by("batch_size", "iteration")
        .agg(pl.col("images_per_s").sum().alias("ips"), pl.col("rank").n_unique().alias("n"))
        .join(ranks, on="batch_size")
        .filter(pl.col("n") == pl.col("ranks"))
    )
    q = per_iter.group_by("batch_size").agg(
        pl.col("ranks").first(),
        pl.col("ips").median().alias("median_images_per_s"),
        pl.col("ips").quantile(0.1, interpolation="linear").alias("p10_images_per_s"),
        pl.col("ips").quantile(0.9, interpolation="linear").alias("p90_images_per_s"),
        pl.len().cast(pl.Int64).alias("iterations"),
    )
    return q.select(COLUMNS).cast(schema).sort("batch_size")  # type: ignore[arg-type]


def with_mfu(
    table: pl.DataFrame, gpu: str | None, precision: str, image_size: int, device: str = "cuda"
) -> pl.DataFrame:
    """`table` with `achieved_flop_per_s` and `mfu_pct` (null, with a warning, when the GPU or
    its peak for `precision` is unknown)."""
    from ..analyses.mfu import find_peak, peak_flop_per_s, resnet50_train_flops_per_image

    null = table.with_columns(
        pl.lit(None, pl.Float64).alias("achieved_flop_per_s"),
        pl.lit(None, pl.Float64).alias("mfu_pct"),
    )
    if table.height == 0:
        return null
    peak = find_peak(gpu) if gpu else None
    pk = peak_flop_per_s(peak, precision)[0] if peak is not None else None
    if pk is None:
        if device == "cpu":
            return null
        why = "no GPU" if not gpu else f"no {precision} peak for {gpu!r} in gpu_peaks.csv"
        warnings.warn(f"MFU left out of throughput.csv: {why}", stacklevel=2)
        return null
    flops = resnet50_train_flops_per_image(image_size)
    achieved = pl.col("median_images_per_s") * flops
    return table.with_columns(
        achieved.alias("achieved_flop_per_s"),
        (100.0 * achieved / (pk * pl.col("ranks"))).alias("mfu_pct"),
    )


def _run_settings(run_dir: Path) -> tuple[str, str | None, str, int]:
    """(device, GPU name, precision, image size) from the run's manifest; defaults if absent."""
    try:
        m = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    except (OSError, ValueError):
        return "cuda", None, "fp32", 224
    cfg = m.get("config") or {}
    gpus = [g.get("name") for g in m.get("gpus") or [] if g.get("name")]
    return (
        str(cfg.get("device") or "cuda"),
        gpus[0] if gpus else None,
        str(cfg.get("precision") or "fp32"),
        int(cfg.get("image_size") or 224),
    )


def write_throughput(logs: Sequence[str | Path], warmup: int, run_dir: Path) -> pl.DataFrame:
    table = throughput_table(logs, warmup)
    device, gpu, precision, image_size = _run_settings(run_dir)
    # A CPU run has no GPU peak: null MFU columns, nothing to warn about.
    table = with_mfu(table, gpu if device != "cpu" else None, precision, image_size, device)
    table.write_csv(run_dir / "throughput.csv")
    if table.height:
        from .. import plot

        plot.throughput(table, run_dir / "throughput.png")
    return table
