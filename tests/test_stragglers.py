"""stragglers: ranks of one job, collectives matched across ranks, arrival order, causes.

Real data: ../shared/sets/multirank_param_dlrm_8xv100 (all 8 ranks of one DLRM step on 8 V100s,
PyTorch profiler traces with distributedInfo). Expected values are counted here from the raw
JSON with the json module (NCCL kernels per stream and operation in start order, the k-th on
each rank being one collective), never from the code under test. "Why" is tested on the same
traces with telemetry and a loader gap derived deterministically in the test.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze.analyses.ranks import rank_from_name, rank_table
from traceanalyze.cli import main
from traceanalyze.dataset import Dataset
from traceanalyze.errors import NotAnswerable, UsageProblem
from traceanalyze.tables import Tables

SET = Path(__file__).resolve().parents[1].parent / "shared" / "sets" / "multirank_param_dlrm_8xv100"


def dlrm_files() -> list[Path]:
    if not SET.is_dir():
        pytest.skip("../shared/sets/multirank_param_dlrm_8xv100 is absent (a clone without it)")
    return sorted(SET.glob("*.pt.trace.json.gz"))


# --- expected values, from the raw JSON ---------------------------------------------------


def raw_collectives() -> dict[int, dict[tuple[int, str], list[tuple[int, int]]]]:
    """rank -> (stream, op) -> [(start_us, end_us)] in start order."""
    out: dict[int, dict[tuple[int, str], list[tuple[int, int]]]] = {}
    for f in dlrm_files():
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        groups: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_"):
                op = e["name"].split("_")[1]
                groups[(e["args"]["stream"], op)].append((e["ts"], e["ts"] + e["dur"]))
        for v in groups.values():
            v.sort()
        out[doc["distributedInfo"]["rank"]] = groups
    return out


def expected_last_and_wait() -> tuple[Counter[int], dict[int, int], int]:
    raw = raw_collectives()
    last: Counter[int] = Counter()
    wait_us: dict[int, int] = defaultdict(int)
    n = 0
    for key, first in raw[0].items():
        for k in range(len(first)):
            starts = {r: raw[r][key][k][0] for r in raw}
            latest = max(starts.values())
            at_latest = [r for r, s in starts.items() if s == latest]
            if len(at_latest) == 1:  # a tie leaves the instance without a last arriver
                last[at_latest[0]] += 1
            for r, s in starts.items():
                wait_us[r] += latest - s
            n += 1
    return last, wait_us, n


def test_rank_seven_is_the_straggler_counted_from_the_raw_json() -> None:
    last, wait_us, n = expected_last_and_wait()
    assert n == 8 and last == Counter({7: 5, 5: 2, 4: 1})  # the counts
    res = ta.open(*dlrm_files()).stragglers()
    rows = {r["rank"]: r for r in res.ranks.to_dicts()}
    assert sorted(rows) == list(range(8))
    for r, row in rows.items():
        assert row["collectives"] == n
        assert row["arrived_last"] == last.get(r, 0)
        assert row["arrived_last_pct"] == pytest.approx(100 * last.get(r, 0) / n)
        assert row["wait_ms"] == pytest.approx(wait_us[r] / 1000)
        assert row["world_size"] == 8 and row["rank_from"] == "distributedInfo"
    # wait caused: the others' waiting at the instances where rank 7 came last
    raw = raw_collectives()
    caused = 0
    for key, first in raw[0].items():
        for k in range(len(first)):
            starts = {r: raw[r][key][k][0] for r in raw}
            if [r for r in starts if starts[r] == max(starts.values())] == [7]:
                caused += sum(starts[7] - s for s in starts.values())
    assert rows[7]["wait_caused_ms"] == pytest.approx(caused / 1000)
    assert res.stragglers == (7,)
    assert rows[7]["straggler"] and not rows[5]["straggler"]
    assert "last in 5 of 8 collectives (62.5 %)" in res.verdict
    assert "next rank 5 25.0 %" in res.verdict
    assert res.time_base.startswith("epoch")
    assert res.notes == ()


def test_clock_offsets_from_collective_ends_are_small_and_reported() -> None:
    raw = raw_collectives()
    # matched collectives end within a few µs of each other on every rank (MANIFEST)
    for key, first in raw[0].items():
        for k in range(len(first)):
            ends = [raw[r][key][k][1] for r in raw]
            assert max(ends) - min(ends) <= 10
    res = ta.open(*dlrm_files()).stragglers()
    assert res.ranks["clock_offset_us"].abs().max() <= 10  # type: ignore[operator]


# --- derived inputs: one rank's clock shifted, telemetry, a loader gap ----------------------


def dlrm_tables() -> Tables:
    return Tables.concat([ta.read(f) for f in dlrm_files()])


def source_of(t: Tables, rank: int) -> str:
    return str(t.sources.filter(pl.col("rank") == rank)["source_id"][0])


def test_unknown_epoch_offset_is_estimated_and_applied() -> None:
    """Rank 3's clock 5 ms ahead and no epoch origin: the offset is estimated from the ends."""
    t = dlrm_tables()
    sid = source_of(t, 3)
    shift = pl.when(pl.col("source_id") == sid).then(5_000_000).otherwise(0)
    t = replace(
        t,
        kernels=t.kernels.with_columns(pl.col("start_ns") + shift, pl.col("end_ns") + shift),
        sources=t.sources.with_columns(
            pl.when(pl.col("source_id") == sid)
            .then(None)
            .otherwise(pl.col("time_origin_epoch_ns"))
            .alias("time_origin_epoch_ns")
        ),
    )
    res = Dataset.from_tables(t).stragglers()
    assert res.time_base.startswith("collective ends")
    off = dict(res.ranks.select("rank", "clock_offset_us").iter_rows())
    assert off[3] == pytest.approx(5000, abs=10)
    assert res.stragglers == (7,)
    assert res.ranks.filter(pl.col("rank") == 7)["arrived_last"][0] == 5


def with_telemetry(t: Tables, slow_rank: int, *, host_wide: bool = False) -> Tables:
    """An NVML-style log per rank (`nvml_rank<N>.csv` beside the traces): 1,530 MHz, 250 W,
    60 °C; the slow rank 1,180 MHz at its 300 W limit, 83 °C, software power cap. `host_wide`:
    one log (`nvml_node.csv`) with device r for rank r (the DLRM ranks ran on GPU = rank)."""
    lo = int(t.kernels["start_ns"].min()) - 2_000_000_000  # type: ignore[arg-type]
    hi = int(t.kernels["end_ns"].max()) + 2_000_000_000  # type: ignore[arg-type]
    times = list(range(lo, hi, 100_000_000))
    samples, sources = [], []
    for r in range(8):
        sid = "nvmlnode00000000" if host_wide else f"nvml{r:012d}"
        slow = r == slow_rank
        samples.append(
            pl.DataFrame(
                {
                    "source_id": sid,
                    "device_id": r if host_wide else 0,
                    "timestamp_ns": times,
                    "sm_clock_mhz": 1180.0 if slow else 1530.0,
                    "power_w": 300.0 if slow else 250.0,
                    "power_limit_w": 300.0,
                    "temperature_c": 83.0 if slow else 60.0,
                    "clock_event_reasons": 0x4 if slow else 0,
                }
            )
        )
        name = "nvml_node.csv" if host_wide else f"nvml_rank{r}.csv"
        if not (host_wide and r):
            sources.append({"source_id": sid, "path": str(SET / name), "time_origin_epoch_ns": 0})
    extra = Tables.build(sources=pl.DataFrame(sources), gpu_samples=pl.concat(samples))
    return Tables.concat([t, extra])


def test_lowered_clock_is_named_as_the_cause() -> None:
    res = Dataset.from_tables(with_telemetry(dlrm_tables(), 7)).stragglers()
    assert res.stragglers == (7,)
    (line,) = res.causes
    assert line.startswith("rank 7: SM clock 1,180 vs 1,530 MHz median of the others")
    assert "power at its 300 W limit" in line
    assert "temperature 83 vs 60 °C" in line
    assert "software power cap" in line
    tel = dict(res.telemetry.select("rank", "sample_count").iter_rows())
    assert all(n > 0 for n in tel.values())


def test_host_wide_sampler_log_is_taken_by_each_rank_gpu() -> None:
    t = dlrm_tables()
    devs = t.kernels.filter(pl.col("name").str.starts_with("ncclKernel_")).join(
        t.sources.select("source_id", "rank"), on="source_id"
    )
    assert devs.group_by("rank").agg(pl.col("device_id").unique()).sort("rank")[
        "device_id"
    ].to_list() == [[r] for r in range(8)]
    res = Dataset.from_tables(with_telemetry(t, 7, host_wide=True)).stragglers()
    (line,) = res.causes
    assert line.startswith("rank 7: SM clock 1,180 vs 1,530 MHz median of the others")
    assert set(res.telemetry["samples_from"]) == {str(SET / "nvml_node.csv")}


def test_without_telemetry_the_cause_is_not_a_clock() -> None:
    res = ta.open(*dlrm_files()).stragglers()
    (line,) = res.causes
    assert line.startswith("rank 7: ") and "SM clock" not in line


def nccl_ends(k: pl.DataFrame, sid: str) -> list[int]:
    mine = k.filter((pl.col("source_id") == sid) & pl.col("name").str.starts_with("ncclKernel_"))
    return mine.sort("start_ns")["end_ns"].to_list()


def widen_loader_gap(t: Tables, rank: int, d_ns: int) -> Tables:
    """`rank` starts every collective after the first `d_ns` later (a data-loader operator
    fills the gap); the other ranks wait that much longer inside the collective, so matched
    collectives still end together."""
    parts, loader = [], []
    for sid in t.sources["source_id"].to_list():
        k = t.kernels.filter(pl.col("source_id") == sid)
        ends = nccl_ends(t.kernels, sid)
        mine = sid == source_of(t, rank)
        bounds = ends[:-1] if mine else ends[1:]
        n_before = sum((pl.col("start_ns") >= b).cast(pl.Int64) for b in bounds)
        shift = n_before * d_ns
        is_coll = pl.col("name").str.starts_with("ncclKernel_")
        # a waiting rank's collective ends one step later than it starts
        end_extra = pl.when(is_coll & pl.lit(not mine) & (pl.col("end_ns").is_in(bounds)))
        k = k.with_columns(
            pl.col("start_ns") + shift,
            pl.col("end_ns") + shift + end_extra.then(d_ns).otherwise(0),
        )
        parts.append(k)
        if mine:
            for i, b in enumerate(bounds):
                loader.append(
                    {
                        "source_id": sid,
                        "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                        "category": "user_annotation",
                        "start_ns": b + i * d_ns,
                        "end_ns": b + (i + 1) * d_ns,
                        "duration_ns": d_ns,
                    }
                )
    ops = pl.concat([t.ops, Tables.build(ops=pl.DataFrame(loader)).ops])
    return replace(t, kernels=pl.concat(parts), ops=ops)


def test_widened_loader_gap_is_named_as_the_cause() -> None:
    t = widen_loader_gap(dlrm_tables(), 2, 3_000_000)
    # the derivation keeps matched collectives ending together on every rank
    ends = [nccl_ends(t.kernels, source_of(t, r)) for r in range(8)]
    assert all(max(col) - min(col) <= 10_000 for col in zip(*ends, strict=True))
    res = Dataset.from_tables(t).stragglers()
    rows = dict(res.ranks.select("rank", "arrived_last").iter_rows())
    assert rows[2] == 7 and rows[7] == 1  # every collective after the first, and the first
    assert res.stragglers == (2,)
    (line,) = res.causes
    assert re.match(r"rank 2: 3\.000 ms data-loader gap before each collective vs 0\.000 ms", line)
    host = dict(res.host.select("rank", "loader_ms").iter_rows())
    assert host[2] == pytest.approx(3.0) and host[0] == 0


# --- identification and bad input -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank3.nsys-rep.sqlite", 3),
        ("run_rank_12.csv", 12),
        ("worker-0.pt.trace.json", 0),
        ("job/worker7_step_12.1694128201553.pt.trace.json.gz", 7),
        ("myrank3x.sqlite", None),
        ("ranks.sqlite", None),
        ("profile.nvprof", None),
    ],
)
def test_rank_from_file_name(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


def test_rank_table_states_where_each_rank_came_from() -> None:
    src = pl.DataFrame(
        {
            "source_id": ["a", "b", "c"],
            "path": ["runs/j1/rank1.sqlite", "runs/j1/trace.pt.trace.json", "x/notes.csv"],
            "format": ["nsys_sqlite", "kineto_json", "smi_csv"],
            "rank": [None, 4, None],
            "world_size": [None, 8, None],
        }
    )
    got = rank_table(src).select("source_id", "job", "rank", "rank_from").rows()
    assert got == [
        ("a", "runs/j1", 1, "file name"),
        ("b", "runs/j1", 4, "distributedInfo"),
        ("c", "x", None, None),
    ]
    # a job the source states wins over the directory
    stated = src.with_columns(pl.Series("job", ["run-42", None, None]))
    assert rank_table(stated)["job"].to_list() == ["run-42", "runs/j1", "x"]


def nccl_frames(names_by_rank: dict[int, list[tuple[str, int]]]) -> Tables:
    """Tiny two-or-more-rank job: kernels (name, start µs) of 10 µs on stream 7, one file each."""
    srcs, kerns = [], []
    for r, evs in names_by_rank.items():
        sid = f"s{r}"
        srcs.append({"source_id": sid, "path": f"job/rank{r}.sqlite", "time_origin_epoch_ns": 0})
        for name, us in evs:
            kerns.append(
                {
                    "source_id": sid,
                    "device_id": r,
                    "stream_id": 7,
                    "name": name,
                    "start_ns": us * 1000,
                    "end_ns": us * 1000 + 10_000,
                }
            )
    return Tables.build(sources=pl.DataFrame(srcs), kernels=pl.DataFrame(kerns))


DEV = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SR = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def test_newer_nccl_names_and_file_name_ranks() -> None:
    t = nccl_frames(
        {
            0: [(DEV, 100), (SR, 200), (DEV, 300), (SR, 400)],
            1: [(DEV, 105), (SR, 190), (DEV, 330), (SR, 395)],
        }
    )
    res = Dataset.from_tables(t).stragglers()
    rows = dict(res.ranks.select("rank", "arrived_last").iter_rows())
    assert rows == {0: 2, 1: 2}
    assert set(res.ranks["rank_from"]) == {"file name"}
    assert res.stragglers == ()
    assert res.verdict.startswith("no clear straggler")
    waits = dict(res.ranks.select("rank", "wait_ms").iter_rows())
    assert waits == {0: pytest.approx(0.035), 1: pytest.approx(0.015)}
    # one more AllReduce where rank 1 is last: 3 of 5 (60 %) against 2 (40 %) is not clear
    t = nccl_frames(
        {
            0: [(DEV, 100), (SR, 200), (DEV, 300), (SR, 400), (DEV, 500)],
            1: [(DEV, 105), (SR, 190), (DEV, 330), (SR, 395), (DEV, 520)],
        }
    )
    assert Dataset.from_tables(t).stragglers().stragglers == ()


def test_cpu_collectives_recorded_as_gloo_operators() -> None:
    ops = []
    for r, starts in {0: [10, 50], 1: [30, 52]}.items():
        for s in starts:
            ops.append(
                {
                    "source_id": f"s{r}",
                    "name": "gloo:all_reduce",
                    "category": "cpu_op",
                    "start_ns": s * 1000,
                    "end_ns": 60_000,
                }
            )
    src = pl.DataFrame(
        {
            "source_id": ["s0", "s1"],
            "path": ["j/w0.json", "j/w1.json"],
            "rank": [0, 1],
            "world_size": [2, 2],
            "time_origin_epoch_ns": [0, 0],
        }
    )
    res = Dataset.from_tables(Tables.build(sources=src, ops=pl.DataFrame(ops))).stragglers()
    assert dict(res.ranks.select("rank", "arrived_last").iter_rows()) == {0: 0, 1: 2}
    assert res.stragglers == (1,)


def test_a_rank_with_fewer_collectives_and_a_missing_rank_are_said() -> None:
    t = dlrm_tables()
    drop = source_of(t, 3)
    sid5 = source_of(t, 5)
    last_ar = (
        t.kernels.filter(
            (pl.col("source_id") == sid5) & pl.col("name").str.starts_with("ncclKernel_AllReduce")
        )
        .sort("start_ns")["kernel_id"]
        .to_list()[-1]
    )
    keep = (pl.col("source_id") != drop) & ~(
        (pl.col("source_id") == sid5) & (pl.col("kernel_id") == last_ar)
    )
    t = replace(
        t, kernels=t.kernels.filter(keep), sources=t.sources.filter(pl.col("source_id") != drop)
    )
    res = Dataset.from_tables(t).stragglers()
    assert sorted(res.ranks["rank"]) == [0, 1, 2, 4, 5, 6, 7]
    assert set(res.ranks["collectives"]) == {7}
    notes = " | ".join(res.notes)
    assert "missing rank(s) 3" in notes
    assert "has 3 AllReduce on stream #1, the fewest of any rank 2: its last 1 left out" in notes


def test_duplicate_ranks_mixed_world_sizes_and_two_jobs_are_errors() -> None:
    t = dlrm_tables()
    s2, s3 = source_of(t, 2), source_of(t, 3)

    def with_sources(expr_col: str, value: object, sid: str) -> Dataset:
        col = pl.when(pl.col("source_id") == sid).then(pl.lit(value)).otherwise(pl.col(expr_col))
        return Dataset.from_tables(
            replace(
                t,
                sources=t.sources.with_columns(
                    col.cast(t.sources.schema[expr_col]).alias(expr_col)
                ),
            )
        )

    with pytest.raises(UsageProblem, match=r"rank 2 appears more than once: .*worker2_.*worker3_"):
        with_sources("rank", 2, s3).stragglers()
    with pytest.raises(UsageProblem, match=r"ranks from different jobs .*world size 4: .*worker2_"):
        with_sources("world_size", 4, s2).stragglers()
    other = with_sources("path", "/elsewhere/worker2.json", s2)
    several = r"ranks of several jobs; choose one \(job=NAME\): "
    with pytest.raises(UsageProblem, match=several) as err:
        other.stragglers()
    # both jobs named, sorted (the order depends on where ../shared lies)
    listed = str(err.value).split("(job=NAME): ", 1)[1].split(", ")
    assert listed == sorted(["/elsewhere", str(SET)])
    res = other.stragglers(job=str(SET))
    assert 2 not in res.ranks["rank"].to_list() and "missing rank(s) 2" in " ".join(res.notes)
    with pytest.raises(UsageProblem, match="no job 'nope'"):
        other.stragglers(job="nope")


def test_no_ranks_or_no_collectives_cannot_answer() -> None:
    t = nccl_frames({0: [("volta_sgemm", 1)]})
    with pytest.raises(NotAnswerable, match="no collectives"):
        Dataset.from_tables(t).stragglers()
    t = nccl_frames({0: [(DEV, 1)]})
    with pytest.raises(NotAnswerable, match="at least 2 ranks; found 1"):
        Dataset.from_tables(t).stragglers()


# --- CLI, plot, Perfetto ----------------------------------------------------------------------


def test_cli_json_rows_and_table(tmp_path: Path) -> None:
    files = [str(f) for f in dlrm_files()]
    r = CliRunner().invoke(main, ["stragglers", *files, "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert len(rows) == 8
    need = {"rank", "collectives", "arrived_last", "arrived_last_pct", "wait_ms", "wait_caused_ms"}
    assert need <= set(rows[0])
    assert [x["rank"] for x in rows if x["straggler"]] == [7]
    png, trace = tmp_path / "s.png", tmp_path / "s.json"
    r = CliRunner().invoke(
        main, ["stragglers", *files, "--plot", str(png), "--perfetto", str(trace)]
    )
    assert r.exit_code == 0, r.output
    assert "straggler: rank 7: last in 5 of 8" in r.output and "why: rank 7:" in r.output
    assert png.stat().st_size > 0
    doc = json.loads(trace.read_text())
    ev = doc["traceEvents"]
    procs = {e["pid"] for e in ev if e.get("name") == "process_name"}
    assert procs == set(range(8))
    assert sum(e["ph"] == "s" for e in ev) == 8 * 7 == sum(e["ph"] == "f" for e in ev)
    colls = [e for e in ev if e.get("cat") == "collective" and e["ph"] == "X"]
    assert len(colls) == 64 and min(e["ts"] for e in ev if "ts" in e) == 0


def test_cli_error_line_for_duplicate_ranks(tmp_path: Path) -> None:
    f = dlrm_files()[0]
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x.json.gz").write_bytes(f.read_bytes())
    r = CliRunner().invoke(main, ["stragglers", str(a / "x.json.gz")])
    assert r.exit_code == 1
    assert (
        "traceanalyze: error: stragglers needs collectives of at least 2 ranks; found 1" in r.output
    )


def test_plot_axes_carry_units() -> None:
    res = ta.open(*dlrm_files()).stragglers()
    fig = ta.plot.stragglers(res)
    labels = [ax.get_ylabel() + ax.get_xlabel() for ax in fig.axes]
    assert any("(ms)" in s for s in labels) and any("%" in s for s in labels)


# --- several ranks in one nsys file (torchrun under nsys) --------------------------------------

NSYS_2GPU = (
    SET.parents[1]
    / "traces"
    / "nsys_sqlite"
    / "nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
)


def test_one_nsys_file_with_two_ranks_is_split_by_process() -> None:
    if not NSYS_2GPU.exists():
        pytest.skip("../shared/traces/nsys_sqlite 2-GPU torchrun trace is absent")
    import sqlite3

    con = sqlite3.connect(f"file:{NSYS_2GPU}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT k.start, k.deviceId, k.globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'ncclDevKernel_SendRecv%' "
        "ORDER BY k.start"
    ).fetchall()
    con.close()
    by_dev: dict[int, list[int]] = defaultdict(list)
    for start, dev, _pid in rows:
        by_dev[dev].append(start)
    assert sorted(by_dev) == [0, 1] and len(by_dev[0]) == len(by_dev[1])
    last = Counter(0 if a > b else 1 for a, b in zip(by_dev[0], by_dev[1], strict=True))
    res = ta.open(NSYS_2GPU).stragglers()
    got = {r["rank"]: r for r in res.ranks.to_dicts()}
    assert {r: got[r]["arrived_last"] for r in got} == {0: last[0], 1: last[1]}
    assert {r: got[r]["rank_from"] for r in got} == {0: "process on GPU 0", 1: "process on GPU 1"}
    assert got[0]["process_id"] != got[1]["process_id"]
    assert {got[r]["collectives"] for r in got} == {len(by_dev[0])}


def test_covered_length_before_each_time() -> None:
    import numpy as np

    from traceanalyze.analyses import _intervals as iv
    from traceanalyze.analyses.ranks.causes import _covered

    a = iv.as_set([10, 15, 40], [20, 30, 50])  # -> [10, 30), [40, 50)
    t = np.array([0, 10, 12, 30, 35, 45, 60], dtype=np.int64)
    assert _covered(a, t).tolist() == [0, 0, 2, 20, 20, 25, 30]
    assert _covered(iv.EMPTY, t).tolist() == [0] * 7


def test_timeline_over_several_ranks_draws_one_lane_and_process_per_rank(tmp_path: Path) -> None:
    files = [str(f) for f in dlrm_files()]
    png, trace = tmp_path / "t.png", tmp_path / "t.json"
    r = CliRunner().invoke(main, ["timeline", *files, "-o", str(png), "--perfetto", str(trace)])
    assert r.exit_code == 0, r.output
    assert png.stat().st_size > 0
    ev = json.loads(trace.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert sorted(names) == list(range(8))
    assert all(names[r].startswith(f"rank {r} · ") for r in names)
    # every kernel of every rank is exported, on that rank's process
    raw = 0
    for f in dlrm_files():
        with gzip.open(f, "rt") as fh:
            raw += sum(e.get("cat") == "kernel" for e in json.load(fh)["traceEvents"])
    assert sum(e.get("cat") == "kernel" for e in ev) == raw
    r = CliRunner().invoke(main, ["timeline", *files, "-o", str(png), "--iteration", "10"])
    assert r.exit_code == 2 and "take one source" in r.output


def test_a_trace_without_collectives_is_said_not_a_rank() -> None:
    resnet = SET.parents[1] / "traces" / "kineto_json"
    resnet = resnet / "hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"
    if not resnet.exists():
        pytest.skip("../shared/traces/kineto_json ResNet-50 trace is absent")
    res = ta.open(*dlrm_files(), resnet).stragglers(job=str(SET))
    assert f"{resnet}: kernels but no collectives; not a rank here" in res.notes
    assert res.stragglers == (7,)


def test_cli_json_equals_the_library() -> None:
    from traceanalyze.cli import render

    files = [str(f) for f in dlrm_files()]
    r = CliRunner().invoke(main, ["stragglers", *files, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == json.loads(render.to_json(ta.open(*files).stragglers().ranks))


def test_a_clock_offset_on_epoch_time_is_reported_and_applied_only_when_asked() -> None:
    """Rank 3's epoch clock 5 ms ahead: reported with a note, applied with align=True."""
    t = dlrm_tables()
    sid = source_of(t, 3)
    shift = pl.when(pl.col("source_id") == sid).then(5_000_000).otherwise(0)
    t = replace(
        t, kernels=t.kernels.with_columns(pl.col("start_ns") + shift, pl.col("end_ns") + shift)
    )
    ds = Dataset.from_tables(t)
    res = ds.stragglers()
    assert res.time_base.startswith("epoch") and "not applied" in res.time_base
    assert any(re.search(r"clocks up to (5,00|4,99)\d\.\d µs apart", n) for n in res.notes), (
        res.notes
    )
    assert res.stragglers == (3,)  # 5 ms "late" everywhere on its own clock
    aligned = ds.stragglers(align=True)
    assert aligned.time_base.startswith("collective ends")
    assert aligned.stragglers == (7,)
    assert aligned.ranks.filter(pl.col("rank") == 7)["arrived_last"][0] == 5


def test_nvidia_smi_logs_beside_the_traces_name_the_cause(tmp_path: Path) -> None:
    """Real nvidia-smi CSV logs (`--query-gpu=timestamp,index,clocks.sm,power.draw,power.limit,
    temperature.gpu,clocks_event_reasons.active --format=csv`), one per rank, in the job's
    directory (the traces linked there): rank 7's GPU at 1,245 MHz and its power cap."""
    import datetime as dt

    for f in dlrm_files():
        (tmp_path / f.name).symlink_to(f)
    t0 = 1694128199.0  # 2 s before the step (epoch s), 40 samples at 100 ms
    head = "timestamp, index, clocks.sm [MHz], power.draw [W], power.limit [W], "
    head += "temperature.gpu, clocks_event_reasons.active"
    parts = [ta.read(tmp_path / f.name) for f in dlrm_files()]
    for r in range(8):
        slow = r == 7
        lines = [head]
        for i in range(40):
            stamp = dt.datetime.fromtimestamp(t0 + i / 10, dt.timezone.utc)
            lines.append(
                f"{stamp.strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, {r}, "
                f"{1245 if slow else 1530} MHz, {300 if slow else 210}.00 W, 300.00 W, "
                f"{71 if slow else 68}, 0x{4 if slow else 0:016x}"
            )
        log = tmp_path / f"nvidia_smi_rank{r}.csv"
        log.write_text("\n".join(lines) + "\n")
        parts.append(ta.read(log, tz="UTC"))
    res = Dataset.from_tables(Tables.concat(parts)).stragglers()
    assert res.stragglers == (7,)
    (line,) = res.causes
    assert line.startswith("rank 7: SM clock 1,245 vs 1,530 MHz median of the others")
    assert "power at its 300 W limit (300 W)" in line and "software power cap" in line
    assert "temperature" not in line  # 71 vs 68 °C: under the 5 °C rule
    tel = dict(res.telemetry.select("rank", "samples_from").iter_rows())
    assert tel[3] == str(tmp_path / "nvidia_smi_rank3.csv")


def test_ranks_whose_collectives_do_not_overlap_are_from_different_jobs() -> None:
    t = dlrm_tables()
    sid = source_of(t, 4)
    later = pl.when(pl.col("source_id") == sid).then(3_600_000_000_000).otherwise(0)  # +1 h
    t = replace(
        t, kernels=t.kernels.with_columns(pl.col("start_ns") + later, pl.col("end_ns") + later)
    )
    with pytest.raises(UsageProblem, match=r"ranks from different jobs \(or steps\): rank 4 "):
        Dataset.from_tables(t).stragglers()


@pytest.mark.parametrize(
    ("name", "op"),
    [
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "AllReduce",
        ),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "SendRecv"),
        ("void ncclKernel_ReduceScatter_RING_SIMPLE_Sum_half(ncclWorkElem)", "ReduceScatter"),
        ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "Generic"),  # RCCL
        ("volta_sgemm_128x64_nn", None),
        ("my_ncclKernel_AllReduce", None),
    ],
)
def test_collective_kernel_names(name: str, op: str | None) -> None:
    from traceanalyze.analyses.ranks import NCCL_KERNEL

    got = pl.DataFrame({"n": [name]}).select(pl.col("n").str.extract(NCCL_KERNEL))["n"][0]
    assert got == op


def test_two_jobs_in_one_store_stay_apart(tmp_path: Path) -> None:
    if not NSYS_2GPU.exists():
        pytest.skip("../shared/traces/nsys_sqlite 2-GPU torchrun trace is absent")
    st = tmp_path / "store"
    ta.ingest([*dlrm_files(), NSYS_2GPU], st)
    ds = ta.open(store=st)
    with pytest.raises(UsageProblem, match="ranks of several jobs; choose one") as e:
        ds.stragglers()
    assert str(SET) in str(e.value) and str(NSYS_2GPU) in str(e.value)
    dlrm = ds.stragglers(job=str(SET))
    files = ta.open(*dlrm_files()).stragglers()
    assert dlrm.ranks.drop("source_id").equals(files.ranks.drop("source_id"))
    assert dlrm.verdict == files.verdict
    nsys = ds.stragglers(job=str(NSYS_2GPU))
    assert nsys.ranks["rank_from"].to_list() == ["process on GPU 0", "process on GPU 1"]
    r = CliRunner().invoke(main, ["stragglers", "--store", str(st), "--job", str(SET), "--json"])
    assert r.exit_code == 0 and len(json.loads(r.output)) == 8


def test_gaps_before_collectives_split_into_kernels_launch_gaps_and_nothing_queued() -> None:
    """Hand-made 2-rank job (µs): each rank runs AllReduce #0, a compute kernel, AllReduce #1.
    Rank 0: AllReduce 0-10, compute 20-30 launched at 12, AllReduce 40-50 launched at 35; the
    gap 10-40 holds 10 µs of kernels, 20 idle, of which 8 (12-20) + 5 (35-40) launched."""
    ar = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"
    plan = {  # rank: [(name, start, end, launch call start)]
        0: [(ar, 0, 10, 0), ("gemm", 20, 30, 12), (ar, 40, 50, 35)],
        1: [(ar, 5, 10, 1), ("gemm", 12, 38, 11), (ar, 38, 50, 37)],
    }
    srcs, kerns, calls = [], [], []
    for r, evs in plan.items():
        sid = f"s{r}"
        srcs.append({"source_id": sid, "path": f"job/rank{r}.sqlite", "time_origin_epoch_ns": 0})
        for i, (name, s, e, c) in enumerate(evs):
            kerns.append(
                {
                    "source_id": sid,
                    "device_id": r,
                    "stream_id": 7 if name == ar else 8,
                    "name": name,
                    "start_ns": s * 1000,
                    "end_ns": e * 1000,
                    "correlation_id": i,
                }
            )
            calls.append(
                {
                    "source_id": sid,
                    "correlation_id": i,
                    "api": "runtime",
                    "name": "cudaLaunchKernel",
                    "start_ns": c * 1000,
                    "end_ns": c * 1000 + 500,
                }
            )
    t = Tables.build(
        sources=pl.DataFrame(srcs), kernels=pl.DataFrame(kerns), api_calls=pl.DataFrame(calls)
    )
    res = Dataset.from_tables(t).stragglers()
    host = {r["rank"]: r for r in res.host.to_dicts()}
    assert host[0]["gap_ms"] == pytest.approx(0.030)
    assert host[0]["compute_ms"] == pytest.approx(0.010)
    assert host[0]["idle_ms"] == pytest.approx(0.020)
    assert host[0]["launch_gap_ms"] == pytest.approx(0.013)
    # rank 1: gap 10-38, kernel 12-38, idle 10-12, launched at 11: 1 µs
    assert (host[1]["idle_ms"], host[1]["launch_gap_ms"]) == pytest.approx((0.002, 0.001))
    # without launch calls the split is not known
    res = Dataset.from_tables(replace(t, api_calls=Tables.empty().api_calls)).stragglers()
    assert res.host["launch_gap_ms"].null_count() == 2


def test_a_tie_for_last_counts_for_no_rank() -> None:
    t = nccl_frames({0: [(DEV, 100), (DEV, 200)], 1: [(DEV, 100), (DEV, 150)]})
    res = Dataset.from_tables(t).stragglers()
    assert dict(res.ranks.select("rank", "arrived_last").iter_rows()) == {0: 1, 1: 0}
    first = res.instances.filter(pl.col("instance") == 0)
    assert not first["last"].any() and first["wait_ns"].to_list() == [0, 0]


def test_dataset_ranks_lists_every_source_with_its_rank_and_job() -> None:
    if not NSYS_2GPU.exists():
        pytest.skip("../shared/traces/nsys_sqlite 2-GPU torchrun trace is absent")
    files = dlrm_files()[:2]
    got = ta.open(*files, NSYS_2GPU).ranks()
    rows = got.select("file", "job", "rank", "world_size", "rank_from", "collective_count").rows()
    assert rows == [
        (str(files[0]), str(SET), 0, 8, "distributedInfo", 8),
        (str(files[1]), str(SET), 1, 8, "distributedInfo", 8),
        (str(NSYS_2GPU), str(NSYS_2GPU), 0, None, "process on GPU 0", 33),
        (str(NSYS_2GPU), str(NSYS_2GPU), 1, None, "process on GPU 1", 33),
    ]
    # source ids stay the files' own (no per-process suffix)
    assert got["source_id"].n_unique() == 3


def test_cli_several_jobs_is_a_usage_error_and_job_picks_one() -> None:
    if not NSYS_2GPU.exists():
        pytest.skip("../shared/traces/nsys_sqlite 2-GPU torchrun trace is absent")
    files = [str(f) for f in dlrm_files()] + [str(NSYS_2GPU)]
    r = CliRunner().invoke(main, ["stragglers", *files])
    assert r.exit_code == 2
    assert (
        f"traceanalyze: error: ranks of several jobs; choose one (--job NAME): {SET}, {NSYS_2GPU}"
        in r.output
    )
    r = CliRunner().invoke(main, ["stragglers", *files, "--job", str(NSYS_2GPU)])
    assert r.exit_code == 0 and "straggler: rank 1: last in 22 of 33" in r.output


def test_files_without_ranks_one_gpu_each_are_ranked_in_gpu_order() -> None:
    """nvprof's `%p` names say no rank: rank = the file's GPU's place in device order."""
    t = nccl_frames({1: [(DEV, 100), (DEV, 200)], 0: [(DEV, 110), (DEV, 190)]})
    named = {"s1": "job/nvprof_4242.csv", "s0": "job/nvprof_5151.csv"}
    t = replace(t, sources=t.sources.with_columns(pl.col("source_id").replace(named).alias("path")))
    res = Dataset.from_tables(t).stragglers()
    got = res.ranks.select("rank", "source_id", "rank_from").rows()
    assert got == [(0, "s0", "file on GPU 0"), (1, "s1", "file on GPU 1")]
    # two files on the same GPU (two nodes): no rank, said so
    t2 = replace(t, kernels=t.kernels.with_columns(pl.lit(0, dtype=pl.Int64).alias("device_id")))
    with pytest.raises(NotAnswerable, match="no source with collectives names its rank"):
        Dataset.from_tables(t2).stragglers()
