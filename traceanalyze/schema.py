"""The normalized schema, as data.

Every reader produces these tables; the store writes them; every analysis reads them. The docs
(`docs/schema.md`) are generated from this module (`traceanalyze schema --markdown`), and a test
fails when they drift.

Rules (see the house style):
* snake_case; every numeric quantity carries its unit as a suffix (`_ns`, `_bytes`, `_w`, …);
  unitless integers are listed in `UNITLESS_ALLOWLIST`.
* Times are int64 nanoseconds in the source's own clock; `sources.time_origin_epoch_ns` says how
  to reach Unix epoch time when the format tells it.
* Missing values are nulls, never sentinels.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

SCHEMA_VERSION = 1

# Suffixes that carry a unit. `_id` marks identifiers (not quantities, but numeric).
UNIT_SUFFIXES: tuple[str, ...] = (
    "_ns",
    "_s",
    "_bytes",
    "_bytes_per_s",
    "_per_s",
    "_w",
    "_j",
    "_c",
    "_mhz",
    "_pct",
    "_ratio",
    "_count",
    "_id",
)

# Numeric columns that are legitimately unitless. Anything else numeric without a unit suffix is a
# schema error (tests/test_schema.py).
UNITLESS_ALLOWLIST: frozenset[str] = frozenset(
    {
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "registers_per_thread",
        "iteration",
        "rank",
        "world_size",
        "batch_size",
        "return_code",
        "clock_event_reasons",
        "schema_version",
        "value",  # kernel_metrics / gpu_metrics: long tables carry their unit in `unit`
        # runs (issue 22 names them): counts of things and accuracies as fractions (0-1)
        "accelerators",
        "nodes",
        "global_batch_size",
        "epochs",
        "target_accuracy",
        "final_accuracy",
    }
)

_INT = pl.Int64()
_F = pl.Float64()
_S = pl.String()


@dataclass(frozen=True)
class Column:
    name: str
    dtype: pl.DataType
    description: str
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    name: str
    description: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def polars_schema(self) -> pl.Schema:
        return pl.Schema({c.name: c.dtype for c in self.columns})


def _c(name: str, dtype: pl.DataType, description: str, nullable: bool = True) -> Column:
    return Column(name, dtype, description, nullable)


SOURCE_ID = _c("source_id", _S, "First 16 hex digits of the input file's SHA-256.", False)

_TIMES = (
    _c("start_ns", _INT, "Start time, ns in the source's clock."),
    _c("end_ns", _INT, "End time, ns in the source's clock."),
    _c("duration_ns", _INT, "end_ns - start_ns, or the duration the source states."),
)
# API calls that replay a graph; `graph_launch` and the analyses that count replays use it.
GRAPH_LAUNCH_API = r"^(?:cuda|cu|hip)GraphLaunch"
_GRAPH = (
    _c(
        "graph_launch",
        pl.Boolean(),
        "True when the row ran in a CUDA/HIP graph replay: a graph launch call "
        "(cudaGraphLaunch*, cuGraphLaunch*, hipGraphLaunch*) in the source has its correlation "
        "id, or the source gives it graph ids; False otherwise (also when its launch call is "
        "not in the trace); null where the format cannot tell.",
    ),
    _c("graph_id", _INT, "Graph id the source gives (Kineto 'graph id', nsys graphId)."),
    _c(
        "graph_node_id",
        _INT,
        "Graph node id the source gives (Kineto 'graph node id', nsys graphNodeId; for a "
        "node cloned at instantiation, the captured node's id: originalGraphNodeId).",
    ),
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table(
            "sources",
            "One row per ingested input file.",
            (
                SOURCE_ID,
                _c("path", _S, "Path of the file as given at ingest."),
                _c("format", _S, "Reader slug (nvprof_csv, kineto_json, …)."),
                _c("tool", _S, "Producing tool (nvprof, nsys, ncu, pytorch-profiler, …)."),
                _c("tool_version", _S, "Producing tool's version when the file states it."),
                _c("sha256", _S, "SHA-256 of the file's bytes."),
                _c("size_bytes", _INT, "File size."),
                _c(
                    "time_origin_epoch_ns",
                    _INT,
                    "Unix epoch ns of the source's time 0 (so epoch = this + *_ns); "
                    "null when the format does not tell.",
                ),
                _c("timezone", _S, "Timezone used to convert local wall-clock stamps, if any."),
                _c(
                    "requested_interval_ns",
                    _INT,
                    "Sampling interval the sampler was asked for (the NVML sampler's header, "
                    "dcgmi `-d`), if the file or the caller states it.",
                ),
                _c("rank", _INT, "Distributed rank of the process that wrote the file, if known."),
                _c("world_size", _INT, "Distributed world size, if known."),
                _c(
                    "rank_from",
                    _S,
                    "Where the file states `rank` (NVTX thread name, thread name, process name, "
                    "command line; docs/stragglers.md); null when `rank` is null or the format "
                    "has one place for it (PyTorch profiler: distributedInfo).",
                ),
                _c(
                    "job",
                    _S,
                    "Job the source belongs to, when the file or the caller states one; null "
                    "otherwise (analyses across ranks then take the file's directory).",
                ),
                _c("job_from", _S, "Where `job` comes from (collect manifest); null without job."),
                _c("schema_version", _INT, "traceanalyze schema version of the rows."),
            ),
        ),
        Table(
            "devices",
            "GPUs (and other devices) the source saw.",
            (
                SOURCE_ID,
                _c("device_id", _INT, "Device ordinal as the activity tables use it."),
                _c("name", _S, "Marketing name (e.g. 'NVIDIA H100 80GB HBM3')."),
                _c("uuid", _S, "Device UUID ('GPU-…'), when known."),
                _c("compute_capability", _S, "Major.minor, e.g. '9.0'."),
                _c("sm_count", _INT, "Number of SMs (multiprocessors)."),
                _c("memory_bytes", _INT, "Total device memory."),
                _c("vendor", _S, "NVIDIA, AMD, … when known."),
                _c(
                    "node_id",
                    _INT,
                    "AMD: the agent's KFD node id (rocprof v1 `gpu-id`, rocprofv3 `node_id`), "
                    "kept as the profiler gives it; device_id is the 0-based GPU index where the "
                    "file says how (rocprofv3 `logical_node_type_id`), else this node id.",
                ),
            ),
        ),
        Table(
            "kernels",
            "GPU kernel executions, one row per launch.",
            (
                SOURCE_ID,
                _c("kernel_id", _INT, "Row identity within the source (launch index).", False),
                _c("process_id", _INT, "OS process id of the launching process."),
                _c("device_id", _INT, "Device ordinal."),
                _c("context_id", _INT, "CUDA context id."),
                _c("stream_id", _INT, "CUDA stream id."),
                _c("correlation_id", _INT, "CUPTI correlation id (joins to api_calls)."),
                _c("name", _S, "Demangled kernel name."),
                _c("short_name", _S, "Base name without signature, when the source gives one."),
                _c("mangled_name", _S, "Mangled name, when the source gives one."),
                *_TIMES,
                _c("grid_x", _INT, "Grid size x."),
                _c("grid_y", _INT, "Grid size y."),
                _c("grid_z", _INT, "Grid size z."),
                _c("block_x", _INT, "Block size x."),
                _c("block_y", _INT, "Block size y."),
                _c("block_z", _INT, "Block size z."),
                _c("registers_per_thread", _INT, "Registers per thread."),
                _c("static_smem_bytes", _INT, "Static shared memory per block."),
                _c("dynamic_smem_bytes", _INT, "Dynamic shared memory per block."),
                _c(
                    "total_smem_bytes",
                    _INT,
                    "Static + dynamic shared memory per block, when the source gives only the "
                    "total (PyTorch profiler's 'shared memory').",
                ),
                *_GRAPH,
            ),
        ),
        Table(
            "memcpy",
            "Memory copies and memsets on the GPU.",
            (
                SOURCE_ID,
                _c("process_id", _INT, "OS process id."),
                _c("device_id", _INT, "Device ordinal."),
                _c("context_id", _INT, "CUDA context id."),
                _c("stream_id", _INT, "CUDA stream id."),
                _c("correlation_id", _INT, "CUPTI correlation id."),
                _c(
                    "kind",
                    _S,
                    "HtoD, DtoH, DtoD, PtoP, HtoH, HtoA, AtoH, AtoA, AtoD, DtoA, memset.",
                ),
                _c("src_kind", _S, "Source memory kind (Pageable, Pinned, Device, …)."),
                _c("dst_kind", _S, "Destination memory kind."),
                _c("size_bytes", _INT, "Bytes copied or set."),
                *_TIMES,
                *_GRAPH,
            ),
        ),
        Table(
            "graph_replays",
            "Whole CUDA graph replays, one row per launch of a graph, where the source times "
            "the replay as one interval and gives no row per kernel (nsys "
            "`--cuda-graph-trace=graph`, its default: CUPTI_ACTIVITY_KIND_GRAPH_TRACE). Busy "
            "GPU time, but no kernel: not counted as kernels.",
            (
                SOURCE_ID,
                _c("replay_id", _INT, "Row identity within the source (table order).", False),
                _c("process_id", _INT, "OS process id of the launching process."),
                _c("device_id", _INT, "Device ordinal (where the graph's first node ran)."),
                _c("context_id", _INT, "CUDA context id."),
                _c("stream_id", _INT, "CUDA stream the graph was launched on."),
                _c(
                    "correlation_id",
                    _INT,
                    "CUPTI correlation id of the graph launch call (joins to api_calls).",
                ),
                _c("graph_id", _INT, "Graph id the source gives (nsys graphId)."),
                _c("graph_exec_id", _INT, "Executable graph id the source gives (graphExecId)."),
                *_TIMES,
            ),
        ),
        Table(
            "api_calls",
            "CUDA runtime and driver API calls on the host.",
            (
                SOURCE_ID,
                _c("process_id", _INT, "OS process id."),
                _c("thread_id", _INT, "OS thread id."),
                _c("correlation_id", _INT, "CUPTI correlation id (joins to kernels/memcpy)."),
                _c("api", _S, "'runtime' or 'driver'."),
                _c("name", _S, "API function name, version suffix stripped (cudaLaunchKernel)."),
                _c("callback_id", _INT, "CUPTI callback id, when the source gives it."),
                _c("return_code", _INT, "Return value, when recorded."),
                _c(
                    "kernel_name",
                    _S,
                    "Kernel a launch call names, when the source gives it (Kineto on ROCm).",
                ),
                *_TIMES,
            ),
        ),
        Table(
            "ops",
            "Framework operators on the host (aten::conv2d, …).",
            (
                SOURCE_ID,
                _c("process_id", _INT, "OS process id."),
                _c("thread_id", _INT, "OS thread id."),
                _c("name", _S, "Operator name."),
                _c("category", _S, "Source category (cpu_op, python_function, …)."),
                _c("external_id", _INT, "Profiler's external id linking ops to launches."),
                *_TIMES,
            ),
        ),
        Table(
            "markers",
            "NVTX ranges and marks, and user annotations.",
            (
                SOURCE_ID,
                _c("process_id", _INT, "OS process id."),
                _c("thread_id", _INT, "OS thread id."),
                _c("device_id", _INT, "Device ordinal, for GPU-side annotations."),
                _c("stream_id", _INT, "CUDA stream id, for GPU-side annotations."),
                _c("name", _S, "Range or mark text."),
                _c("domain", _S, "NVTX domain, when known."),
                _c("category", _S, "Source category (nvtx, user_annotation, …)."),
                _c("start_ns", _INT, "Start time, ns in the source's clock."),
                _c("end_ns", _INT, "End time; null for instantaneous marks."),
                _c("duration_ns", _INT, "end_ns - start_ns; null for marks."),
            ),
        ),
        Table(
            "kernel_metrics",
            "Per-kernel counters and metrics, long format (ncu, nvprof --metrics).",
            (
                SOURCE_ID,
                _c("kernel_id", _INT, "Launch id (ncu 'ID'); null for aggregates over launches."),
                _c("process_id", _INT, "OS process id."),
                _c("device_id", _INT, "Device ordinal."),
                _c("name", _S, "Kernel name."),
                _c("metric_name", _S, "Metric name as the tool spells it."),
                _c("stat", _S, "For aggregates: min, max, avg; null for one launch's value."),
                _c("unit", _S, "Unit after conversion to the base (ns, bytes, %, …)."),
                _c("value", _F, "Value in `unit`."),
                _c("invocations_count", _INT, "Launches behind an aggregate row."),
            ),
        ),
        Table(
            "gpu_samples",
            "GPU telemetry samples (NVML, nvidia-smi, nvprof --system-profiling, rocm-smi, "
            "rpd monitor), wide.",
            (
                SOURCE_ID,
                _c("device_id", _INT, "Device ordinal / nvidia-smi index."),
                _c("device_uuid", _S, "Device UUID, when the log has it."),
                _c("timestamp_ns", _INT, "Sample time, ns in the source's clock.", False),
                _c("sm_clock_mhz", _F, "SM (graphics) clock."),
                _c("mem_clock_mhz", _F, "Memory clock."),
                _c("power_w", _F, "Power draw."),
                _c("power_kind", _S, "'instant' or 'average' when the source says."),
                _c("power_limit_w", _F, "Enforced power limit."),
                _c(
                    "temperature_c",
                    _F,
                    "GPU temperature, the one analyses use; on AMD GPUs the junction (hotspot) "
                    "sensor, as rocm-smi/amd-smi log it.",
                ),
                _c(
                    "edge_temperature_c",
                    _F,
                    "AMD: the edge sensor's temperature, kept beside the junction one "
                    "(temperature_c); no analysis uses it.",
                ),
                _c("fan_pct", _F, "Fan speed."),
                _c("gpu_util_pct", _F, "GPU utilization."),
                _c("mem_util_pct", _F, "Memory-controller utilization."),
                _c("energy_j", _F, "Cumulative energy counter, when sampled."),
                _c("clock_event_reasons", _INT, "NVML clock event (throttle) reasons bitmask."),
            ),
        ),
        Table(
            "gpu_metrics",
            "Other sampled GPU metrics, long (nsys GPU_METRICS, DCGM profiling fields).",
            (
                SOURCE_ID,
                _c("device_id", _INT, "Device ordinal."),
                _c("timestamp_ns", _INT, "Sample time, ns in the source's clock.", False),
                _c("metric_name", _S, "Metric name as the tool spells it."),
                _c("unit", _S, "Unit, when known."),
                _c("value", _F, "Value in `unit`."),
            ),
        ),
        Table(
            "iterations",
            "Training iterations (steps).",
            (
                SOURCE_ID,
                _c("device_id", _INT, "Device ordinal (or rank's device)."),
                _c("rank", _INT, "Distributed rank, when known."),
                _c("iteration", _INT, "Iteration number as the source counts it.", False),
                _c("start_ns", _INT, "Start time, ns in the source's clock; null if unknown."),
                _c("end_ns", _INT, "End time; null if unknown."),
                _c("duration_ns", _INT, "Iteration duration."),
                _c("batch_size", _INT, "Images per iteration on this device, when known."),
                _c("images_per_s", _F, "Throughput of this iteration, when known."),
            ),
        ),
        Table(
            "runs",
            "Training runs, one row per run (MLPerf result logs; `collect` runs); docs/runs.md.",
            (
                SOURCE_ID,
                _c("run_id", _S, "The run's name: the log file's stem, or collect's run id."),
                _c("benchmark", _S, "Benchmark (MLPerf `submission_benchmark`, e.g. 'resnet')."),
                _c("org", _S, "Submitting organization (`submission_org`)."),
                _c("platform", _S, "`submission_platform` as logged (or the collect host)."),
                _c("system", _S, "System name: its results-layout directory, else system_name."),
                _c("division", _S, "closed, open, … (`submission_division`)."),
                _c("framework", _S, "Framework, from the system description (or the manifest)."),
                _c("accelerator_model", _S, "Accelerator model name, from the system description."),
                _c("accelerators", _INT, "number_of_nodes x max(accelerators_per_node, 1)."),
                _c("nodes", _INT, "Number of nodes."),
                _c("global_batch_size", _INT, "Global batch size, as logged."),
                _c("status", _S, "success, aborted, or unknown (no run_stop)."),
                _c("run_start_ns", _INT, "First run_start, Unix epoch ns."),
                _c("run_stop_ns", _INT, "First run_stop, Unix epoch ns."),
                _c("time_to_train_s", _F, "run_stop - run_start, when both exist (any status)."),
                _c("target_accuracy", _F, "Quality target, when the log states it."),
                _c("final_accuracy", _F, "The last eval_accuracy (a fraction for ResNet-50)."),
                _c("epochs", _INT, "Epochs completed."),
                _c("eval_count", _INT, "eval_accuracy records."),
                _c("throughput_img_per_s", _F, "Training throughput, images/s (whole system)."),
                _c("throughput_basis", _S, "logged (mean of logged per-epoch rates) or derived."),
            ),
        ),
    )
}

TABLE_NAMES: tuple[str, ...] = tuple(TABLES)


def has_unit(name: str) -> bool:
    """Whether a column name carries a unit suffix or is on the allow-list."""
    return name in UNITLESS_ALLOWLIST or any(name.endswith(s) for s in UNIT_SUFFIXES)


def unit_rule_violations() -> list[str]:
    """Numeric columns that carry neither a unit suffix nor an allow-list entry."""
    bad = []
    for t in TABLES.values():
        for c in t.columns:
            if c.dtype.is_numeric() and not has_unit(c.name):
                bad.append(f"{t.name}.{c.name}")
    return bad


def table(name: str) -> Table:
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; tables: {', '.join(TABLE_NAMES)}") from None


_EMPTY: dict[str, pl.DataFrame] = {}


def empty(name: str) -> pl.DataFrame:
    """An empty frame with the table's full schema: a clone of one made once per table (0.2 ms
    to make, ~1 µs to clone; a read fills most tables of its result with these). A clone is a
    frame of its own: changing it in place leaves the others as they are."""
    df = _EMPTY.get(name)
    if df is None:
        df = _EMPTY[name] = pl.DataFrame(schema=table(name).polars_schema)
    return df.clone()


def conform(name: str, df: pl.DataFrame) -> pl.DataFrame:
    """Select the table's columns in order, add missing ones as nulls, cast to the schema's dtypes.

    Extra columns are a reader bug (ValueError), not bad input.
    """
    t = table(name)
    if df.columns == t.names and all(df.dtypes[i] == c.dtype for i, c in enumerate(t.columns)):
        return df  # conformed already (a streamed chunk is conformed by the reader and the sink)
    known = set(t.names)  # once: `polars_schema` builds a new Schema on every access
    extra = [c for c in df.columns if c not in known]
    if extra:
        raise ValueError(f"table {name}: columns not in the schema: {extra}")
    exprs = []
    for c in t.columns:
        if c.name in df.columns:
            exprs.append(pl.col(c.name).cast(c.dtype, strict=True))
        else:
            exprs.append(pl.lit(None, dtype=c.dtype).alias(c.name))
    return df.select(exprs)


def validate(name: str, df: pl.DataFrame, *, finalized: bool = True) -> list[str]:
    """Problems with a frame against the table's schema; empty when it conforms.

    `finalized=False` accepts a null `source_id` (a reader's raw output, before `read()` fills it).
    """
    t = table(name)
    problems = []
    if df.columns != t.names:
        problems.append(f"{name}: columns {df.columns} != schema {t.names}")
    for c in t.columns:
        if c.name not in df.columns:
            continue
        if df.schema[c.name] != c.dtype:
            problems.append(f"{name}.{c.name}: dtype {df.schema[c.name]} != {c.dtype}")
        elif c.name == "source_id" and not finalized:
            continue
        elif not c.nullable and df.height and df[c.name].null_count():
            problems.append(
                f"{name}.{c.name}: {df[c.name].null_count()} nulls in a required column"
            )
    return problems


def render_markdown() -> str:
    """docs/schema.md, generated."""
    out = [
        "# traceanalyze schema",
        "",
        "Generated from `traceanalyze/schema.py` by `traceanalyze schema --markdown`; do not edit.",
        f"Schema version {SCHEMA_VERSION}.",
        "",
        "Times are int64 nanoseconds in the source's clock (`sources.time_origin_epoch_ns` reaches "
        "epoch time where the format tells it). Numeric columns carry a unit suffix "
        f"({', '.join(f'`{s}`' for s in UNIT_SUFFIXES)}) or are on the unitless allow-list: "
        f"{', '.join(f'`{n}`' for n in sorted(UNITLESS_ALLOWLIST))}. Missing values are nulls.",
        "",
    ]
    for t in TABLES.values():
        out += [f"## `{t.name}`", "", t.description, "", "| column | type | null | description |"]
        out.append("|---|---|---|---|")
        for c in t.columns:
            null = "yes" if c.nullable else "no"
            out.append(f"| `{c.name}` | {c.dtype} | {null} | {c.description} |")
        out.append("")
    return "\n".join(out)


# Physically plausible ranges of telemetry values, one rule for every reader (issue 9): a value
# outside its range (or NaN) is a sensor glitch, a sentinel (NVML's 0xFFFF mW, a 1e308 in a
# broken log) or a wrong unit, never a reading. Readers set such values to null and warn with the
# count (`readers.common.core.check_telemetry`). Bounds are generous: the hottest GPU throttles near
# 90-110 °C, boards draw at most ~1.5 kW (GB200 superchip), SM clocks stay below ~3.5 GHz; NVML
# reports GDDR memory clocks as effective data rates (14001 MHz on the RTX 5070 sampler log in
# ../shared/traces), so the memory clock's bound is wider.
PLAUSIBLE_RANGES: dict[str, tuple[float, float]] = {
    "power_w": (0.0, 5000.0),
    "power_limit_w": (0.0, 5000.0),
    "temperature_c": (-50.0, 200.0),
    "edge_temperature_c": (-50.0, 200.0),
    "sm_clock_mhz": (0.0, 10000.0),
    "mem_clock_mhz": (0.0, 50000.0),
    "fan_pct": (0.0, 100.0),
    "gpu_util_pct": (0.0, 100.0),
    "mem_util_pct": (0.0, 100.0),
    "energy_j": (0.0, 1e12),
}
