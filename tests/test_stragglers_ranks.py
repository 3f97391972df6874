"""Who is which rank, from what nsys and nvprof exports carry, and which job a source is in;
nsys GPU metrics as telemetry for "why it is late" (issue 23, points 1 and 3).

Real files: the 2022.2 MPI export (`pipit_…`: nsys `--trace=mpi` names the rank's thread
`MPI Rank 0`, an NVTX thread name), the 2-GPU torchrun export (`nsysai_h100x2_…`: no name in it
states a rank) and the nvprof database (`profilinglm_…`: its command line has no
`--local_rank`); expected values are read from them here with sqlite3. What the shared files lack
(an NVTX range "rank 3", two processes naming their ranks, `--local_rank`, a collect manifest,
GPU_METRICS) is built inline.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest

import traceanalyze as ta
from traceanalyze.analyses.ranks.causes import metric_samples
from traceanalyze.errors import UsageProblem
from traceanalyze.rank_names import local_rank_arg, named_rank

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
PIPIT = SHARED / "nsys_sqlite" / "pipit_saxpy_mpi_cuda_a100_nsys2022.2.sqlite"
TORCHRUN = SHARED / "nsys_sqlite" / "nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
NVPROF_DB = SHARED / "nvprof_sqlite" / "profilinglm_pytorch_lm_v100_pyprof_net.sql"


def need(p: Path) -> Path:
    if not p.exists():
        pytest.skip(f"../shared/traces/{p.parent.name}/{p.name} is absent")
    return p


def sql(p: Path, q: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


# --- the name rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("MPI Rank 0", (0, None)),
        ("rank 3", (3, None)),
        ("Rank 3 of 8", (3, 8)),
        ("rank=5/16", (5, 16)),
        ("worker-2", (2, None)),
        ("RANK_7", (7, None)),
        ("Rank 0 => Correct results! it: 0", None),  # the pipit app's stdout, not a name
        ("kworker/8:0-rcu_par_gp", None),
        ("*2Worker", None),
        ("ranking 3", None),
        (None, None),
    ],
)
def test_a_whole_name_names_a_rank(name: str | None, want: tuple[int, int | None] | None) -> None:
    assert named_rank(name) == want


@pytest.mark.parametrize(
    ("cmd", "want"),
    [
        ("/usr/bin/python -u torch_imagenet_resnet.py --local_rank=3 --batch-size 64", 3),
        ("python train.py --local-rank 1", 1),
        ("python -m torch.distributed.launch --nproc_per_node=4 train.py", None),
        ("python train.py --local_rank=1 --local_rank=2", None),
        ("python train.py --local_rank_x=1", None),
    ],
)
def test_local_rank_of_a_command_line(cmd: str, want: int | None) -> None:
    assert local_rank_arg(cmd) == want


# --- real exports ------------------------------------------------------------------------------


def test_mpi_export_states_its_rank_in_an_nvtx_thread_name() -> None:
    p = need(PIPIT)
    # NvtxThread rows (ENUM_NSYS_EVENT_TYPE 39) and the rank they name, read here
    names = [r[0] for r in sql(p, "SELECT text FROM NVTX_EVENTS WHERE eventType = 39")]
    ranks = {int(m.group(1)) for n in names if (m := re.fullmatch(r"MPI Rank (\d+)", n))}
    assert ranks == {0}
    src = ta.read(p).sources.row(0, named=True)
    assert (src["rank"], src["world_size"], src["rank_from"]) == (0, None, "NVTX thread name")
    row = ta.open(p).ranks().row(0, named=True)
    assert (row["rank"], row["rank_from"]) == (0, "NVTX thread name")
    assert (row["job"], row["job_from"]) == (str(p.parent), "directory")


def test_torchrun_export_names_no_rank_so_processes_are_ranked_by_gpu() -> None:
    p = need(TORCHRUN)
    # Nothing in the file names a rank: no NvtxThread rows, no such thread or process name.
    assert sql(p, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 39") == [(0,)]
    names = [r[0] for r in sql(p, "SELECT name FROM PROCESSES")]
    names += [
        r[0]
        for r in sql(p, "SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId")
    ]
    assert not [n for n in names if re.fullmatch(r"(?i)(mpi )?(rank|worker)[ _=-]?\d+", n)]
    # NCCL declares an NVTX payload with "Rank", but no event in this window carries one.
    entries = {r[0] for r in sql(p, "SELECT name FROM NVTX_PAYLOAD_SCHEMA_ENTRIES")}
    assert "Rank" in entries
    assert sql(p, "SELECT count(*) FROM NVTX_EVENTS WHERE binaryData IS NOT NULL") == [(0,)]
    assert ta.read(p).sources["rank_from"].to_list() == [None]
    got = ta.open(p).ranks().filter(pl.col("collective_count") > 0)
    assert got.select("rank", "rank_from").rows() == [
        (0, "process on GPU 0"),
        (1, "process on GPU 1"),
    ]
    assert set(got["job_from"]) == {"file"}


def test_nvprof_database_command_line_without_local_rank_states_none() -> None:
    p = need(NVPROF_DB)
    (cmd,) = sql(p, "SELECT value FROM StringTable WHERE _id_ = 1")[0]
    assert "--local_rank" not in cmd and "--local-rank" not in cmd
    src = ta.read(p).sources.row(0, named=True)
    assert (src["rank"], src["rank_from"]) == (None, None)


# --- inline nsys exports ------------------------------------------------------------------------


def nsys_export(path: Path, procs: dict[int, tuple[int, list[str]]], *, thread_names=()) -> Path:
    """A minimal nsys export: per pid (GPU, NVTX range texts), 3 AllReduce kernels on its GPU
    (the later process arriving 5 ns later each time), its ranges; `thread_names`: NvtxThread
    rows (pid, text)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2026.2.1.210')")
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("INSERT INTO StringIds VALUES (1, 'ncclDevKernel_AllReduce_Sum_f32_RING_LL')")
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, "
        "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER)"
    )
    con.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, "
        "globalTid INTEGER, textId INTEGER, domainId INTEGER)"
    )
    for i, (pid, (gpu, texts)) in enumerate(sorted(procs.items())):
        for k in range(3):
            start = 1000 * (k + 1) + 5 * i
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 7, ?, ?, 1)",
                (start, 1000 * (k + 1) + 500, gpu, k, pid << 24),
            )
        for t in texts:
            con.execute(
                "INSERT INTO NVTX_EVENTS VALUES (10, 20, 59, ?, ?, NULL, 0)", (t, (pid << 24) | pid)
            )
    for pid, text in thread_names:
        con.execute(
            "INSERT INTO NVTX_EVENTS VALUES (5, NULL, 39, ?, ?, NULL, 0)", (text, (pid << 24) | pid)
        )
    con.commit()
    con.close()
    return path


def test_nvtx_range_names_the_rank_over_the_file_name(tmp_path: Path) -> None:
    a = nsys_export(tmp_path / "trace_rank5.sqlite", {100: (0, ["step", "rank 3"])})
    b = nsys_export(tmp_path / "other.sqlite", {200: (1, ["Rank 1 of 4"])})
    got = ta.open(a, b).ranks().sort("rank")
    assert got.select("rank", "world_size", "rank_from").rows() == [
        (1, 4, "NVTX"),
        (3, None, "NVTX"),
    ]
    assert ta.read(a).sources["rank"].to_list() == [None]  # NVTX ranges: the analysis reads them


def test_one_file_of_two_processes_each_naming_its_rank(tmp_path: Path) -> None:
    # The process on GPU 0 says rank 1 and the one on GPU 1 rank 0: NVTX wins over GPU order.
    p = nsys_export(tmp_path / "job.sqlite", {100: (0, ["rank 1"]), 200: (1, ["rank 0"])})
    got = ta.open(p).ranks().sort("rank")
    assert got.select("rank", "process_id", "rank_from").rows() == [
        (0, 200, "NVTX"),
        (1, 100, "NVTX"),
    ]
    res = ta.open(p).stragglers()
    # pid 200 starts each AllReduce 5 ns after pid 100 (built so): rank 0 arrives last
    rows = {r["rank"]: r["arrived_last"] for r in res.ranks.to_dicts()}
    assert rows == {0: 3, 1: 0}


def test_nvtx_thread_names_in_the_export_state_the_rank(tmp_path: Path) -> None:
    one = nsys_export(tmp_path / "a.sqlite", {100: (0, [])}, thread_names=[(100, "MPI Rank 2")])
    src = ta.read(one).sources.row(0, named=True)
    assert (src["rank"], src["rank_from"]) == (2, "NVTX thread name")
    two = nsys_export(
        tmp_path / "b.sqlite",
        {100: (0, []), 200: (1, [])},
        thread_names=[(100, "MPI Rank 0"), (200, "MPI Rank 1")],
    )
    assert ta.read(two).sources["rank"].to_list() == [None]  # several ranks: no one rank


# --- inline nvprof ------------------------------------------------------------------------------


def nvprof_db(path: Path, command: str, thread_name: str | None = None) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringTable (_id_ INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    strings = ["-- null --", command, "ncclKernel_AllReduce_RING_LL_Sum_float"]
    con.executemany("INSERT INTO StringTable VALUES (?, ?)", list(enumerate(strings)))
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL (_id_ INTEGER PRIMARY KEY, start INT,"
        " end INT, deviceId INT, contextId INT, streamId INT, correlationId INT, name INT)"
    )
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL VALUES (1, 10, 20, 0, 1, 7, 1, 2)"
    )
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_NAME (_id_ INTEGER PRIMARY KEY, objectKind INT, "
        "objectId BLOB, name INT)"
    )
    if thread_name is not None:
        con.execute("INSERT INTO StringTable VALUES (3, ?)", (thread_name,))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_NAME VALUES (1, 2, x'00', 3)")
    con.commit()
    con.close()
    return path


def test_nvprof_database_local_rank_and_thread_name(tmp_path: Path) -> None:
    cmd = "/usr/bin/python -u torch_imagenet_resnet.py --local_rank=2 --batch-size 64"
    src = ta.read(nvprof_db(tmp_path / "a.nvvp", cmd)).sources.row(0, named=True)
    assert (src["rank"], src["rank_from"]) == (2, "command line")
    src = ta.read(nvprof_db(tmp_path / "b.nvvp", cmd, "MPI Rank 1")).sources.row(0, named=True)
    assert (src["rank"], src["rank_from"]) == (1, "NVTX thread name")  # NVTX comes first
    t = ta.read(nvprof_db(tmp_path / "c.nvvp", cmd))
    for name, df in t.items():  # the command line itself is never copied
        for c, dt in df.schema.items():
            if dt == pl.String:
                assert cmd not in df[c].drop_nulls().to_list(), f"{name}.{c}"


def test_nvprof_csv_profiled_command_gives_the_local_rank(tmp_path: Path) -> None:
    body = (
        "==4711== NVPROF is profiling process 4711, command: python -u train.py --local_rank=1\n"
        "==4711== Profiling application: python -u train.py --local_rank=1\n"
        "==4711== Profiling result:\n"
        '"Start","Duration","Grid X","Grid Y","Grid Z","Block X","Block Y","Block Z",'
        '"Registers Per Thread","Static SMem","Dynamic SMem","Size","Throughput","Device",'
        '"Context","Stream","Name"\n'
        "ms,ms,,,,,,,,KB,B,KB,MB/s,,,,\n"
        '1.0,0.5,1,1,1,64,1,1,16,0,0,,,"Tesla V100 (0)","1","7","ncclKernel_AllReduce_x"\n'
    )
    p = tmp_path / "resnet_4711.csv"
    p.write_text(body)
    src = ta.read(p).sources.row(0, named=True)
    assert (src["rank"], src["rank_from"]) == (1, "command line")


# --- the job: a collect run's manifest ----------------------------------------------------------


def kineto(path: Path, rank: int, starts: list[int]) -> Path:
    ev = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            "pid": rank,
            "tid": 7,
            "ts": s,
            "dur": 100 - (s % 100),
            "args": {"stream": 7, "device": rank},
        }
        for s in starts
    ]
    doc = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}, "traceEvents": ev}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_collect_run_id_is_the_job_of_each_node_directory(tmp_path: Path) -> None:
    # Two nodes of one `collect --nnodes 2 --run-id R7` run, each its own directory and manifest.
    files = []
    for node, rank in ((0, 0), (1, 1)):
        d = tmp_path / f"node{node}" / "R7"
        d.mkdir(parents=True)
        manifest = {"manifest_version": 1, "run_id": "R7", "status": "completed"}
        (d / "manifest.json").write_text(json.dumps(manifest))
        starts = [1000, 2000, 3000] if rank == 0 else [1010, 2010, 3010]
        files.append(kineto(d / f"torch_bs8_rank{rank}.1.pt.trace.json.gz", rank, starts))
    got = ta.open(*files).ranks()
    assert set(got.select("job", "job_from").rows()) == {("R7/bs8", "collect manifest")}
    res = ta.open(*files).stragglers()
    assert res.job == "R7/bs8"
    assert dict(res.ranks.select("rank", "arrived_last").iter_rows()) == {0: 0, 1: 3}
    # Without the manifests the two directories are two jobs.
    for f in files:
        (f.parent / "manifest.json").unlink()
    assert set(ta.open(*files).ranks()["job_from"]) == {"directory"}
    with pytest.raises(UsageProblem, match="several jobs"):
        ta.open(*files).stragglers()


def test_a_json_that_is_not_a_collect_manifest_states_no_job(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "x"}))  # no manifest_version
    f = kineto(tmp_path / "torch_bs8_rank0.pt.trace.json.gz", 0, [1000])
    assert ta.read(f).sources["job"].to_list() == [None]


# --- nsys GPU metrics as telemetry ----------------------------------------------------------


def with_gpu_metrics(tmp_path: Path, clocks: dict[int, float]) -> Path:
    """The 2-GPU torchrun export, copied, with GPU_METRICS as `nsys --gpu-metrics-devices=all`
    writes them: GPC Clock Frequency `clocks[gpu]` and SMs Active 60 % every 10 ms over the
    kernels' span (typeId & 0xFF = the GPU)."""
    p = shutil.copy(need(TORCHRUN), tmp_path / "h100x2_gpu_metrics.sqlite")
    con = sqlite3.connect(p)
    lo, hi = con.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.execute(
        "CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, sourceId INTEGER, typeName TEXT,"
        " metricId INTEGER, metricName TEXT)"
    )
    con.execute(
        "CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER, metricId INTEGER, value)"
    )
    for gpu, clock in clocks.items():
        t = 0x10000 | gpu
        con.execute(
            "INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, 1, 'GH100', 9, "
            "'GPC Clock Frequency [MHz]'), (?, 1, 'GH100', 12, 'SMs Active [Throughput %]')",
            (t, t),
        )
        rows = [(ts, t, 9, clock) for ts in range(lo, hi, 10_000_000)]
        rows += [(ts, t, 12, 60) for ts in range(lo, hi, 10_000_000)]
        con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return Path(p)


def straggler_gpu() -> int:
    """The GPU whose SendRecv kernels start last most often, counted from the raw export."""
    rows = sql(
        need(TORCHRUN),
        "SELECT k.start, k.deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON "
        "s.id = k.demangledName WHERE s.value LIKE 'ncclDevKernel_SendRecv%' ORDER BY k.start",
    )
    by: dict[int, list[int]] = defaultdict(list)
    for start, dev in rows:
        by[dev].append(start)
    last = Counter(0 if a > b else 1 for a, b in zip(by[0], by[1], strict=True))
    return last.most_common(1)[0][0]


@pytest.mark.parametrize("scale", [1.0, 1e6], ids=["MHz", "Hz-under-MHz"])
def test_lowered_gpc_clock_from_nsys_gpu_metrics_is_the_cause(tmp_path: Path, scale: float) -> None:
    slow = straggler_gpu()
    clocks = {g: (1500.0 if g == slow else 1980.0) * scale for g in (0, 1)}
    res = ta.open(with_gpu_metrics(tmp_path, clocks)).stragglers()
    assert res.stragglers == (slow,)  # one process per GPU, ranked in GPU order
    (line,) = res.causes
    assert line.startswith(f"rank {slow}: SM clock 1,500 vs 1,980 MHz median of the others")
    tel = {r["rank"]: r for r in res.telemetry.to_dicts()}
    assert {r: tel[r]["sm_active_pct"] for r in tel} == {0: 60.0, 1: 60.0}
    assert all(tel[r]["sample_count"] > 0 for r in tel)


def test_equal_gpc_clocks_are_not_named(tmp_path: Path) -> None:
    res = ta.open(with_gpu_metrics(tmp_path, {0: 1980.0, 1: 1980.0})).stragglers()
    assert res.stragglers and "SM clock" not in res.causes[0]
    assert "unknown (telemetry;" in res.causes[0]


def test_metric_samples_pick_the_clock_and_sm_activity() -> None:
    m = pl.DataFrame(
        {
            "source_id": ["s"] * 5,
            "device_id": [0, 0, 0, 1, 1],
            "timestamp_ns": [10, 10, 10, 10, 20],
            "metric_name": [
                "GPC Clock Frequency [MHz]",
                "SMs Active [Throughput %]",
                "DRAM Read Bandwidth [Throughput %]",
                "GPC Clock Frequency [MHz]",
                "SYS Clock Frequency [MHz]",
            ],
            "unit": ["MHz", "%", "%", "MHz", "MHz"],
            "value": [1755.0, 42.0, 10.0, 1.2e9, 1600.0],
        }
    )
    got = metric_samples(m).rows()
    assert got == [("s", 0, 10, 1755.0, 42.0), ("s", 1, 10, 1200.0, None)]


# --- whose samples cover a rank: the collect layouts ------------------------------------------

DLRM = SHARED.parent / "sets" / "multirank_param_dlrm_8xv100"


def dlrm() -> ta.Tables:
    if not DLRM.is_dir():
        pytest.skip("../shared/sets/multirank_param_dlrm_8xv100 is absent")
    return ta.Tables.concat([ta.read(f) for f in sorted(DLRM.glob("*.pt.trace.json.gz"))])


def gpc_metrics(t: ta.Tables, sid: str, slow_gpu: int) -> pl.DataFrame:
    """nsys-style GPC clock rows in source `sid` for GPUs 0-7 every 100 ms around the step
    (the DLRM ranks ran on GPU = rank): 1,530 MHz, `slow_gpu` 1,180 MHz."""
    lo = int(t.kernels["start_ns"].min()) - 2_000_000_000  # type: ignore[arg-type]
    hi = int(t.kernels["end_ns"].max()) + 2_000_000_000  # type: ignore[arg-type]
    return pl.DataFrame(
        [
            (sid, g, ts, "GPC Clock Frequency [MHz]", "MHz", 1180.0 if g == slow_gpu else 1530.0)
            for g in range(8)
            for ts in range(lo, hi, 100_000_000)
        ],
        schema=["source_id", "device_id", "timestamp_ns", "metric_name", "unit", "value"],
        orient="row",
    )


def test_one_rank_sampling_every_gpu_serves_the_others() -> None:
    """`collect --profiler nsys --gpu-metrics`: local rank 0 samples every GPU of the node."""
    t = dlrm()
    rank0 = str(t.sources.filter(pl.col("rank") == 0)["source_id"][0])
    res = ta.Dataset.from_tables(
        ta.Tables.concat([t, ta.Tables.build(gpu_metrics=gpc_metrics(t, rank0, 7))])
    ).stragglers()
    assert res.stragglers == (7,)
    assert res.causes[0].startswith("rank 7: SM clock 1,180 vs 1,530 MHz median of the others")
    files = t.sources.filter(pl.col("rank") == 0)["path"][0]
    assert set(res.telemetry["samples_from"]) == {files}
    # Two sources sampling every GPU (two nodes' local rank 0): whose GPU 7 is it? Neither.
    rank1 = str(t.sources.filter(pl.col("rank") == 1)["source_id"][0])
    both = ta.Tables.build(
        gpu_metrics=pl.concat([gpc_metrics(t, rank0, 7), gpc_metrics(t, rank1, 7)])
    )
    res = ta.Dataset.from_tables(ta.Tables.concat([t, both])).stragglers()
    tel = dict(res.telemetry.select("rank", "sample_count").iter_rows())
    assert tel[0] > 0 and tel[1] > 0 and tel[7] == 0
    assert "SM clock" not in res.causes[0]


def test_a_run_wide_sampler_log_serves_each_batch_size_job() -> None:
    """`collect`: ranks' job `<run-id>/bs<B>`, the host-wide NVML log's job `<run-id>`."""
    t = dlrm()
    lo = int(t.kernels["start_ns"].min()) - 2_000_000_000  # type: ignore[arg-type]
    hi = int(t.kernels["end_ns"].max()) + 2_000_000_000  # type: ignore[arg-type]
    samples = pl.DataFrame(
        [
            ("nvmlhost0000000", g, ts, 1180.0 if g == 7 else 1530.0)
            for g in range(8)
            for ts in range(lo, hi, 100_000_000)
        ],
        schema=["source_id", "device_id", "timestamp_ns", "sm_clock_mhz"],
        orient="row",
    )
    log = {"source_id": "nvmlhost0000000", "path": str(DLRM / "nvml_host.csv"), "job": "R1"}
    log |= {"time_origin_epoch_ns": 0}
    src = pl.concat(
        [t.sources.with_columns(pl.lit("R1/bs64").alias("job")), pl.DataFrame([log])],
        how="diagonal_relaxed",
    )
    res = ta.Dataset.from_tables(
        ta.Tables.build(**{**dict(t.items()), "sources": src, "gpu_samples": samples})
    ).stragglers()
    assert res.job == "R1/bs64"
    assert res.causes[0].startswith("rank 7: SM clock 1,180 vs 1,530 MHz median of the others")
    assert set(res.telemetry["samples_from"]) == {str(DLRM / "nvml_host.csv")}


def test_ranks_stated_in_the_file_survive_the_store(tmp_path: Path) -> None:
    """`ingest` streams: the nsys and nvprof CSV readers' sources carry the rank there too."""
    csv = tmp_path / "resnet_4711.csv"
    csv.write_text(
        "==4711== NVPROF is profiling process 4711, command: python -u train.py --local_rank=1\n"
        '"Start","Duration","Grid X","Grid Y","Grid Z","Block X","Block Y","Block Z",'
        '"Registers Per Thread","Static SMem","Dynamic SMem","Size","Throughput","Device",'
        '"Context","Stream","Name"\n'
        "ms,ms,,,,,,,,KB,B,KB,MB/s,,,,\n"
        '1.0,0.5,1,1,1,64,1,1,16,0,0,,,"Tesla V100 (0)","1","7","ncclKernel_AllReduce_x"\n'
    )
    ta.ingest([need(PIPIT), csv], tmp_path / "store")
    got = ta.open(store=tmp_path / "store").scan("sources").collect()
    assert sorted(got.select("rank", "rank_from").rows()) == [
        (0, "NVTX thread name"),
        (1, "command line"),
    ]


def test_an_oversized_or_broken_manifest_states_no_job_and_says_so(tmp_path: Path) -> None:
    f = kineto(tmp_path / "torch_bs8_rank0.pt.trace.json.gz", 0, [1000])
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.warns(UserWarning, match="manifest.json unreadable"):
        assert ta.read(f).sources["job"].to_list() == [None]
    (tmp_path / "manifest.json").write_bytes(b" " * ((4 << 20) + 1))
    with pytest.warns(UserWarning, match="over 4194304 bytes"):
        assert ta.read(f).sources["job"].to_list() == [None]
