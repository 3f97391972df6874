"""Model FLOP utilization (MFU) of ResNet-50 training: achieved training FLOP/s over the GPU's peak.

* **FLOPs per image** are counted from the model itself: torchvision's `resnet50` built on the
  `meta` device (no memory, no weights), one forward and backward pass of a batch of one image
  under `torch.utils.flop_counter.FlopCounterMode`. The counter counts matrix products and
  convolutions (2 FLOPs per multiply-add), the work that tensor cores do; batch norm, ReLU,
  pooling and the optimizer step are left out, as in the usual MFU definition (PaLM, appendix B).
  224x224: 24.3 GFLOP per image (8.2 forward, twice that backward). Cached per image size in the
  process; torch and torchvision (the `collect` extra) are imported only here.
* **Achieved FLOP/s** = images/s x FLOPs per image. images/s per iteration is the iteration's
  `images_per_s`, else `batch_size` / duration (`batch_size` from the table or given).
* **Peak** per GPU and precision from `traceanalyze/data/gpu_peaks.csv` (dense figures, each row
  citing its datasheet; the first row whose pattern matches the device name wins). `fp32` means
  what PyTorch runs by default: on GPUs with TF32 tensor cores, cuDNN convolutions use TF32
  (`torch.backends.cudnn.allow_tf32` defaults to True), so the TF32 peak is the ceiling;
  `fp32-strict` takes the plain FP32 peak. `amp-fp16`/`amp-bf16` (the collector's names) are
  `fp16`/`bf16`.
* **MFU** = achieved / (peak x GPUs). An unknown GPU or a precision without a peak gives no
  number and says why in `note`.
"""

from __future__ import annotations

import csv
import functools
import io
import re
import warnings
from dataclasses import dataclass
from importlib import resources

import polars as pl

from ..errors import NotAnswerable, TraceanalyzeError
from .warmup import steady

Frame = pl.DataFrame | pl.LazyFrame

PRECISIONS: tuple[str, ...] = (
    "fp32",
    "fp32-strict",
    "tf32",
    "fp16",
    "bf16",
    "amp-fp16",
    "amp-bf16",
)


@dataclass(frozen=True)
class Peak:
    gpu: str
    fp32_tflops: float | None
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    source: str


@functools.cache
def gpu_peaks() -> tuple[tuple[re.Pattern[str], Peak], ...]:
    """The peak table, in file order (specific patterns before general ones)."""
    text = (resources.files("traceanalyze") / "data" / "gpu_peaks.csv").read_text("utf-8")

    def num(s: str) -> float | None:
        return float(s) if s.strip() else None

    out = []
    for r in csv.DictReader(io.StringIO(text)):
        peak = Peak(
            r["gpu"],
            num(r["fp32_tflops"]),
            num(r["tf32_tflops"]),
            num(r["fp16_tflops"]),
            num(r["bf16_tflops"]),
            r["source"],
        )
        out.append((re.compile(r["pattern"], re.IGNORECASE), peak))
    return tuple(out)


def find_peak(device_name: str) -> Peak | None:
    """The peak row for a device name ('Tesla V100-SXM2-32GB', 'NVIDIA H100 80GB HBM3'), or None."""
    for pattern, peak in gpu_peaks():
        if pattern.search(device_name):
            return peak
    return None


def peak_flop_per_s(peak: Peak, precision: str) -> tuple[float | None, str]:
    """(dense peak FLOP/s, the precision whose peak it is) for a run precision; None when the
    table has no figure for it."""
    if precision not in PRECISIONS:
        raise TraceanalyzeError(f"unknown precision {precision!r} ({', '.join(PRECISIONS)})")
    p = {"amp-fp16": "fp16", "amp-bf16": "bf16"}.get(precision, precision)
    if p == "fp32":
        p = "tf32" if peak.tf32_tflops is not None else "fp32"
    elif p == "fp32-strict":
        p = "fp32"
    tflops = getattr(peak, f"{p}_tflops")
    return (None if tflops is None else tflops * 1e12), p


@functools.cache
def resnet50_train_flops_per_image(image_size: int = 224) -> int:
    """Forward + backward FLOPs of torchvision resnet50 for one image (see the module docstring).

    Counted on the meta device: no GPU is used, so torch's notices about the machine's CUDA
    driver ("CUDA initialization: The NVIDIA driver on your system is too old …", raised where
    torch probes for a GPU) say nothing about the user's data and are not passed on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"(?s).*CUDA initialization")
        warnings.filterwarnings("ignore", message=r"(?s).*(NVIDIA driver|CUDA driver)")
        return _count_flops(image_size)


def _count_flops(image_size: int) -> int:
    try:
        import torch
        import torchvision
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError as e:
        raise TraceanalyzeError(
            f"counting the model's FLOPs needs torch and torchvision "
            f"(pip install 'traceanalyze[collect]'): {e}"
        ) from None
    with torch.device("meta"):
        model = torchvision.models.resnet50(weights=None)
        x = torch.randn(1, 3, image_size, image_size)
    counter = FlopCounterMode(display=False)
    with counter:
        model(x).sum().backward()
    return int(counter.get_total_flops())


def mfu(
    iterations: Frame,
    devices: Frame | None = None,
    *,
    gpu: str | None = None,
    precision: str = "fp32",
    batch_size: int | None = None,
    image_size: int = 224,
    warmup: int | None = None,
    gpus_per_source: int = 1,
    first_steady: int | None = None,
) -> pl.DataFrame:
    """One row per source: median images/s over the steady iterations (`analyses.warmup`'s
    rule per source and rank: `first_steady`, else `warmup`, else max(1, 10 %) left out),
    FLOPs per image, achieved FLOP/s, the GPU and its peak, MFU %.

    The GPU is `gpu` if given, else the source's first device name in `devices`.
    `gpus_per_source` divides the peak when one source's images/s is a job's throughput over
    several GPUs.
    """
    it = (iterations.lazy() if isinstance(iterations, pl.DataFrame) else iterations).collect()
    if it.height == 0:
        raise NotAnswerable("no iterations: MFU needs an iteration log or profiler steps")
    ips = _images_per_s(it, batch_size, warmup, first_steady)
    names = _device_names(devices)
    flops = resnet50_train_flops_per_image(image_size)
    rows = []
    for r in ips.iter_rows(named=True):
        sid = r["source_id"]
        note: list[str] = []
        name = _gpu_name(gpu, names.get(sid), note)
        achieved = None if r["images_per_s"] is None else r["images_per_s"] * flops
        if r["images_per_s"] is None:
            note.append("no images/s (iterations without batch size: give batch_size=N)")
        peak, pk, used = _peak_of(name, precision, note)
        m = None
        if achieved is not None and pk is not None:
            m = 100.0 * achieved / (pk * gpus_per_source)
        rows.append(
            {
                "source_id": sid,
                "iteration_count": r["n"],
                "median_images_per_s": r["images_per_s"],
                "flop_per_image_count": flops,
                "achieved_flop_per_s": achieved,
                "gpu": None if peak is None else peak.gpu,
                "device_name": name,
                "peak_precision": used,
                "peak_flop_per_s": pk,
                "mfu_pct": m,
                "note": "; ".join(note) or None,
            }
        )
    return pl.DataFrame(rows, schema=_SCHEMA)


def _gpu_name(gpu: str | None, own: str | None, note: list[str]) -> str | None:
    """The device name whose peak is used: the trace's own when `gpu` is not given or names
    the same GPU less exactly (`V100` for `Tesla V100-SXM2-32GB`: the SXM2 peak, not the first
    V100 row); `gpu` otherwise, with a note that it overrides the trace's device."""
    if gpu is None or own is None:
        return gpu or own
    same = re.sub(r"[^a-z0-9]", "", gpu.lower()) in re.sub(r"[^a-z0-9]", "", own.lower())
    if same and find_peak(own) is not None:
        note.append(f"{gpu!r} read as the trace's own {own}")
        return own
    note.append(f"{gpu!r} overrides the trace's {own}")
    return gpu


def _peak_of(
    name: str | None, precision: str, note: list[str]
) -> tuple[Peak | None, float | None, str | None]:
    """The GPU's peak row, its FLOP/s for `precision` and the precision used; what is missing
    is added to `note`."""
    peak = find_peak(name) if name else None
    if name is None:
        note.append("GPU unknown (no device name: give gpu=NAME)")
        return None, None, None
    if peak is None:
        note.append(f"no peak for GPU {name!r} in gpu_peaks.csv")
        return None, None, None
    pk, used = peak_flop_per_s(peak, precision)
    if pk is None:
        note.append(f"no {used} peak for {peak.gpu} in gpu_peaks.csv")
    return peak, pk, used


_SCHEMA = {
    "source_id": pl.String,
    "iteration_count": pl.Int64,
    "median_images_per_s": pl.Float64,
    "flop_per_image_count": pl.Int64,
    "achieved_flop_per_s": pl.Float64,
    "gpu": pl.String,
    "device_name": pl.String,
    "peak_precision": pl.String,
    "peak_flop_per_s": pl.Float64,
    "mfu_pct": pl.Float64,
    "note": pl.String,
}


def _images_per_s(
    it: pl.DataFrame, batch_size: int | None, warmup: int | None, first_steady: int | None
) -> pl.DataFrame:
    dur = pl.coalesce("duration_ns", pl.col("end_ns") - pl.col("start_ns"))
    bs = pl.col("batch_size") if batch_size is None else pl.lit(batch_size, pl.Int64)
    kept = steady(it.lazy(), ["source_id", "rank"], warmup=warmup, first_steady=first_steady)
    per = (
        kept.collect()
        .sort("source_id", "rank", "iteration", nulls_last=True)
        .with_columns(
            pl.coalesce(
                pl.col("images_per_s") if batch_size is None else pl.lit(None, pl.Float64),
                bs * 1e9 / dur,
            ).alias("_ips")
        )
    )
    # A source's throughput per iteration: the sum over its ranks (one log per rank is usual).
    return (
        per.group_by("source_id", "iteration")
        .agg(pl.col("_ips").sum())
        .group_by("source_id")
        .agg(
            pl.len().cast(pl.Int64).alias("n"),
            pl.col("_ips").filter(pl.col("_ips") > 0).median().alias("images_per_s"),
        )
        .sort("source_id")
    )


def _device_names(devices: Frame | None) -> dict[str, str]:
    if devices is None:
        return {}
    d = (devices.lazy() if isinstance(devices, pl.DataFrame) else devices).collect()
    out: dict[str, str] = {}
    for sid, name in d.filter(pl.col("name").is_not_null()).select("source_id", "name").rows():
        out.setdefault(sid, name)
    return out


# --- roofline from Nsight Compute counters -------------------------------------------------------


# FLOPs per precision from SASS thread-instruction counters, as Nsight Compute's own roofline
# (SpeedOfLight_RooflineChart section) counts them: add + mul + 2 x fma.
def _flop_metrics(x: str) -> tuple[str, str, str]:
    m = "smsp__sass_thread_inst_executed_op_{}{}_pred_on.sum"
    return (m.format(x, "add"), m.format(x, "mul"), m.format(x, "fma"))


_FLOP_METRICS: dict[str, tuple[str, str, str]] = {
    "fp32": _flop_metrics("f"),
    "fp64": _flop_metrics("d"),
    "fp16": _flop_metrics("h"),
}
_BYTES = ("dram__bytes.sum",)
_BYTES_PAIRS = (
    ("dram__bytes_read.sum", "dram__bytes_write.sum"),
    ("dram__bytes_op_read.sum", "dram__bytes_op_write.sum"),
)
_TIME = "gpu__time_duration.sum"


def kernel_roofline(kernel_metrics: Frame) -> pl.DataFrame:
    """Per profiled kernel launch (ncu): FLOPs (fp32, fp64, fp16 from SASS add/mul/fma
    counters), DRAM bytes, duration, arithmetic intensity (FLOP/byte) and achieved FLOP/s.

    Tensor-core work is not in these counters (ncu's roofline leaves it out too). Raises
    NotAnswerable naming the missing counters when the capture has no FLOP or no DRAM byte
    counters (the `--metrics` list of the roofline CSVs in ../shared has bytes and time only).
    """
    lazy = kernel_metrics.lazy() if isinstance(kernel_metrics, pl.DataFrame) else kernel_metrics
    km = lazy.filter(pl.col("kernel_id").is_not_null()).collect()
    have = set(km["metric_name"].unique().to_list())
    flop_names = [m for ms in _FLOP_METRICS.values() for m in ms]
    if not have & set(flop_names):
        raise NotAnswerable(
            "no FLOP counters in the Nsight Compute data (need "
            "smsp__sass_thread_inst_executed_op_{f,d,h}{add,mul,fma}_pred_on.sum, e.g. "
            "ncu --section SpeedOfLight_RooflineChart)"
        )
    pairs = [p for p in _BYTES_PAIRS if set(p) <= have]
    if not (set(_BYTES) & have or pairs):
        raise NotAnswerable("no DRAM byte counters (dram__bytes.sum or read/write pairs)")
    wide = km.pivot(
        on="metric_name",
        index=["source_id", "kernel_id", "name"],
        values="value",
        aggregate_function="first",
    )

    def col(n: str) -> pl.Expr:
        return pl.col(n).fill_null(0.0) if n in wide.columns else pl.lit(0.0)

    flops = {p: col(a) + col(m) + 2.0 * col(f) for p, (a, m, f) in _FLOP_METRICS.items()}
    if "dram__bytes.sum" in wide.columns:
        dram = pl.col("dram__bytes.sum")
    else:
        dram = col(pairs[0][0]) + col(pairs[0][1])
    dur = pl.col(_TIME) if _TIME in wide.columns else pl.lit(None, pl.Float64)
    out = wide.select(
        "source_id",
        "kernel_id",
        "name",
        *[e.alias(f"{p}_flop_count") for p, e in flops.items()],
        dram.alias("dram_bytes"),
        dur.alias("duration_ns"),
    ).with_columns(
        (pl.col("fp32_flop_count") + pl.col("fp64_flop_count") + pl.col("fp16_flop_count")).alias(
            "flop_count"
        )
    )
    return out.with_columns(
        pl.when(pl.col("dram_bytes") > 0)
        .then(pl.col("flop_count") / pl.col("dram_bytes"))
        .alias("flop_per_byte_ratio"),
        pl.when(pl.col("duration_ns") > 0)
        .then(pl.col("flop_count") * 1e9 / pl.col("duration_ns"))
        .alias("achieved_flop_per_s"),
    ).sort("source_id", "kernel_id")
