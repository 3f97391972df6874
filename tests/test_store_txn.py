"""The store as a transaction: SIGKILL at every step of a real ingest, concurrent writers, readers
during `--force`, the parallel SQLite reader's workers dying with their parent, one-line errors,
plain run ids.

Kills use the test-only hook TRACEANALYZE_TEST_KILL_AT (store.py): the `traceanalyze ingest`
subprocess SIGKILLs itself at the named point. What the store holds afterwards is checked three
ways: through `Store`, and through polars and DuckDB reading only `Store.files()`; the expected
row counts come from reading the input files directly (`ta.read`), not from the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput
from traceanalyze.store import KILL_ENV, MARKER, STAGING, Store

from . import _store_state
from .conftest import shared

ROOT = Path(__file__).resolve().parents[1]
EARLY = "nsys_sqlite/nsysai_h100x2_torchrun_train_1window_nsys2026.2.sqlite"
TARGET = "kineto_json/hta_resnet50_v100_ns_resolution_rank0.pt.trace.json.gz"  # 8 tables
SMALL = [
    "smi_logs/roofline_custom_nvml_sampler_rtx5070.csv",
    "ncu_csv/roofline_ncu2026.2_rtx5070_saxpy_long.csv",
    "nvprof_csv/magus_matrixMul_gtx1080ti_gputrace.csv",
    "kineto_json/hta_alexnet_a100_param_benchmark_trace.json.gz",
    "nsys_sqlite/pipit_saxpy_mpi_cuda_a100_nsys2022.2.sqlite",
    "nvprof_sqlite/profilinglm_pytorch_lm_v100_pyprof_net.sql",
]


def cli(args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    env.update({"PYTHONPATH": str(ROOT), **(extra_env or {})})
    cmd = [sys.executable, "-m", "traceanalyze", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def sid_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def counts_of(path: Path) -> dict[str, int]:
    """Rows per table of a file, read directly (not through any store)."""
    return {t: n for t, n in ta.read(path).counts().items() if n}


def committed_hashes(st: Path) -> dict[str, str]:
    store = Store(st)
    return {
        str(f.relative_to(st)): hashlib.sha256(f.read_bytes()).hexdigest()
        for t in schema.TABLE_NAMES
        for f in store.files(t)
    }


def check_visible(st: Path, expected: dict[str, dict[str, int]]) -> None:
    """Exactly the expected sources, each whole, through Store, polars and DuckDB over files()."""
    store = Store(st).snapshot()
    assert store.source_ids() == sorted(expected)
    for t in schema.TABLE_NAMES:
        want = {sid: c[t] for sid, c in expected.items() if c.get(t)}
        via_store = store.scan(t).group_by("source_id").len().collect().rows()
        assert dict(via_store) == want, t
        files = [str(f) for f in store.files(t)]
        if not files:
            assert want == {}, t
            continue
        via_polars = (
            pl.scan_parquet(files, hive_partitioning=True, hive_schema={"source_id": pl.String})
            .group_by("source_id")
            .len()
            .collect()
            .rows()
        )
        assert dict(via_polars) == want, t
        via_duckdb = duckdb.sql(
            f"SELECT source_id, count(*) FROM read_parquet({files!r}, hive_partitioning=true, "
            "hive_types={'source_id': 'VARCHAR'}) GROUP BY 1"
        ).fetchall()
        assert dict(via_duckdb) == want, t


def unlisted_files(st: Path) -> list[str]:
    """Parquet files in the table directories that the manifest neither lists nor keeps as
    garbage (a killed writer's renamed files)."""
    known = _store_state.listed(st)  # the manifest and the log entries after it
    on_disk = {str(p.relative_to(st)) for p in st.glob("*/source_id=*/*.parquet")}
    return sorted(on_disk - known)


def assert_clean(st: Path) -> None:
    """No staging, no unlisted file, no empty partition directory."""
    assert not (st / STAGING).exists() or not list((st / STAGING).iterdir())
    assert unlisted_files(st) == []
    assert [p for p in st.glob("*/source_id=*") if not any(p.iterdir())] == []


# --- SIGKILL at every step --------------------------------------------------------------------

KILL_POINTS = [
    "stage-start",  # parsed, nothing written
    "stage-mid",  # one table staged
    "commit-locked",  # all staged, store lock taken
    "rename-1",  # first file renamed into its table directory
    "rename-4",
    "rename-8",  # every file renamed, manifest not yet written
    "before-manifest",
    "after-manifest",  # committed, staging not yet cleaned
]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_at_each_step_of_an_ingest(tmp_path: Path, point: str) -> None:
    early, target = shared(EARLY), shared(TARGET)
    exp_early, exp_target = counts_of(early), counts_of(target)
    assert len(exp_target) == 8  # so rename-8 is the last rename of its commit
    st = tmp_path / "st"
    ta.ingest([early], st)
    before = committed_hashes(st)

    r = cli(["ingest", str(target), "--store", str(st), "--quiet"], {KILL_ENV: point})
    assert r.returncode == -signal.SIGKILL, r.stderr

    committed = point == "after-manifest"
    after = committed_hashes(st)
    assert {k: after[k] for k in before} == before  # the earlier source's files untouched
    expected = {sid_of(early): exp_early}
    if committed:
        expected[sid_of(target)] = exp_target
    check_visible(st, expected)
    # The kill really hit where it says: renamed files nobody lists, or staging left behind.
    if point.startswith("rename") or point == "before-manifest":
        n = 8 if point == "before-manifest" else int(point.split("-")[1])
        assert len(unlisted_files(st)) == n
    if point not in ("stage-start",):
        assert list((st / STAGING).iterdir())

    [res] = ta.ingest([target], st)  # the same file again, no --force
    assert res.status == ("unchanged" if committed else "ingested")
    check_visible(st, {sid_of(early): exp_early, sid_of(target): exp_target})
    assert committed_hashes(st).items() >= before.items()
    assert_clean(st)


def test_sigkill_mid_commit_of_a_new_store(tmp_path: Path) -> None:
    target = shared(TARGET)
    st = tmp_path / "st"
    r = cli(["ingest", str(target), "--store", str(st), "--quiet"], {KILL_ENV: "rename-2"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert Store(st).source_ids() == [] and len(unlisted_files(st)) == 2
    [res] = ta.ingest([target], st)
    assert res.status == "ingested"
    check_visible(st, {sid_of(target): counts_of(target)})
    assert_clean(st)


# --- concurrent writers -----------------------------------------------------------------------


@pytest.mark.parametrize("fresh", [True, False])
def test_four_concurrent_writers_one_failing(tmp_path: Path, fresh: bool) -> None:
    files = [shared(f) for f in SMALL]
    bad = tmp_path / "cut.pt.trace.json.gz"
    whole = shared(TARGET).read_bytes()
    bad.write_bytes(whole[: len(whole) // 2])  # a real trace cut in half: truncated gzip
    a, b, c, d, e, f = files
    lists = [[a, b, c], [b, c, d, e], [c, d, e, a], [f, d, bad, e]]  # the last one fails
    st = tmp_path / "st"
    if not fresh:
        ta.ingest([shared(EARLY)], st)
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    env["PYTHONPATH"] = str(ROOT)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "traceanalyze", "ingest", *map(str, fl), "--store", str(st)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for fl in lists
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs[:3], outs[:3], strict=True):
        assert p.returncode == 0 and err == "", err
    assert procs[3].returncode == 1
    err = outs[3][1]
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(f"traceanalyze: error: {bad}:")
    assert st.is_dir()
    # every good file once (f was only in the failed list), each intact: equal to a serial ingest
    serial = tmp_path / "serial"
    ta.ingest([a, b, c, d, e] if fresh else [shared(EARLY), a, b, c, d, e], serial)
    got, want = Store(st), Store(serial)
    assert got.source_ids() == want.source_ids()
    assert sid_of(f) not in got.source_ids()
    for t in schema.TABLE_NAMES:
        g, w = got.table(t), want.table(t)
        assert g.sort(g.columns).equals(w.sort(w.columns)), t
    # each source committed by exactly one writer: "ingested" said once per good file
    said = [ln for out, _ in outs for ln in out.splitlines() if ": ingested as " in ln]
    assert sorted(ln.split(":")[0] for ln in said) == sorted(map(str, [a, b, c, d, e]))
    assert_clean(st)


def test_readers_during_force_reingests_never_see_a_partial_source(tmp_path: Path) -> None:
    early, target = shared(EARLY), shared(TARGET)
    exp = {sid_of(early): counts_of(early), sid_of(target): counts_of(target)}
    st = tmp_path / "st"
    ta.ingest([early, target], st)
    code = (
        "import sys, traceanalyze as ta\n"
        "for _ in range(4): ta.ingest([sys.argv[1]], sys.argv[2], force=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(KILL_ENV, None)
    writer = subprocess.Popen([sys.executable, "-c", code, str(target), str(st)], env=env)
    reads = 0
    while writer.poll() is None or reads == 0:
        store = Store(st).snapshot()
        assert store.source_ids() == sorted(exp)
        for t in ("sources", "kernels", "ops", "iterations"):
            want = {s: c[t] for s, c in exp.items() if c.get(t)}
            got = dict(store.scan(t).group_by("source_id").len().collect().rows())
            assert got == want, t
        files = [str(f) for f in store.files("kernels")]
        via_duckdb = duckdb.sql(
            f"SELECT source_id, count(*) FROM read_parquet({files!r}, hive_partitioning=true, "
            "hive_types={'source_id': 'VARCHAR'}) GROUP BY 1"
        ).fetchall()
        assert dict(via_duckdb) == {s: c["kernels"] for s, c in exp.items()}
        reads += 1
    assert writer.wait() == 0
    check_visible(st, exp)
    # the replaced files wait out the grace period as garbage, listed with their time
    doc = _store_state.committed(st)
    assert len(doc["garbage"]) == 4 * len(exp[sid_of(target)])
    print(f"{reads} consistent reads during 4 --force re-ingests")


def test_reading_commands_see_one_commit(tmp_path: Path, write) -> None:
    """open_store (every reading command, Dataset over a store) pins one manifest, so its tables
    agree even when a source is committed between two of its scans."""
    from traceanalyze.adapters.reports import open_store

    st = tmp_path / "st"
    ta.ingest([write("a.txt", "Iteration Duration 0 0 : 0.5\n")], st)
    pinned = open_store(st)
    ta.ingest([write("b.txt", "Iteration Duration 0 1 : 0.25\n")], st)
    assert pinned.table("sources").height == pinned.table("iterations").height == 1
    assert open_store(st).table("iterations").height == 2


def test_replaced_files_go_after_the_grace_period(tmp_path: Path, write) -> None:
    log = write("a.txt", "Iteration Duration 0 0 : 0.5\n")
    st = tmp_path / "st"
    ta.ingest([log], st)
    [old] = Store(st).files("iterations")
    ta.ingest([log], st, force=True)
    assert old.is_file() and old not in Store(st).files("iterations")  # hidden, not yet gone
    Store(st).vacuum()  # within the default grace: kept
    assert old.is_file()
    Store(st).vacuum(grace_s=0)
    assert not old.exists()
    assert _store_state.committed(st)["garbage"] == []
    assert Store(st).table("iterations").height == 1


def test_a_layout_1_store_is_read_and_upgraded_by_the_next_writer(tmp_path: Path, write) -> None:
    """A store written before the manifest listed files: committed = has a `sources` partition;
    a partial source (kernels without sources, as a kill left it) is invisible and removed."""
    st = tmp_path / "st"
    a = write("a.txt", "Iteration Duration 0 0 : 0.5\n")
    b = write("b.txt", "Iteration Duration 0 1 : 0.25\n")
    t = ta.read(a)
    for name in ("sources", "iterations"):
        part = st / name / f"source_id={sid_of(a)}"
        part.mkdir(parents=True)
        t[name].drop("source_id").write_parquet(part / "part-0.parquet")
    partial = st / "iterations" / "source_id=00000000deadbeef"
    partial.mkdir()
    t.iterations.drop("source_id").write_parquet(partial / "part-0.parquet")
    (st / ".tmp-x-1234").mkdir()
    (st / MARKER).write_text('{"layout": 1, "schema_version": 1}\n')
    assert Store(st).source_ids() == [sid_of(a)]
    assert Store(st).table("iterations")["source_id"].to_list() == [sid_of(a)]
    ta.ingest([b], st)
    doc = _store_state.committed(st)  # migrated to layout 3: its manifest and log
    assert doc["layout"] == 3 and sorted(doc["sources"]) == sorted([sid_of(a), sid_of(b)])
    assert doc["garbage"][0] == "iterations/source_id=00000000deadbeef/part-0.parquet"
    assert not (st / ".tmp-x-1234").exists()
    Store(st).vacuum(grace_s=0)
    assert not partial.exists()
    assert Store(st).table("iterations").height == 2


def test_a_live_writers_staging_is_not_removed(tmp_path: Path, write) -> None:
    st = tmp_path / "st"
    store = Store(st)
    a = write("a.txt", "Iteration Duration 0 0 : 0.5\n")
    staged = store.stage(ta.read(a))  # alive: this process holds its txn lock
    ta.ingest([write("b.txt", "Iteration Duration 0 1 : 0.5\n")], st)  # another commit
    assert (st / STAGING / staged.txn).is_dir()
    assert store.commit([staged]) == ["ingested"]
    assert store.has_source(sid_of(a)) and not (st / STAGING).exists()


def _lock_fds(st: Path) -> int:
    """Descriptors of this process open on the store's staging lock files."""
    fds = Path("/proc/self/fd")
    targets = [os.readlink(fds / fd) for fd in os.listdir(fds) if (fds / fd).is_symlink()]
    return sum(str(st / STAGING) in t and t.endswith(".lock") for t in targets)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_process_holds_one_lock_however_many_it_stages(tmp_path: Path, write) -> None:
    st = tmp_path / "st"
    store = Store(st)
    staged = [
        store.stage(ta.read(write(f"{i}.txt", f"Iteration Duration 0 {i} : 0.5\n")))
        for i in range(5)
    ]
    assert len({s.txn for s in staged}) == 5
    assert len(list((st / STAGING).glob("*.lock"))) == 1 and _lock_fds(st) == 1
    assert store.commit(staged) == ["ingested"] * 5
    assert not (st / STAGING).exists() and _lock_fds(st) == 0


def test_commit_of_a_batch_says_what_happened_to_each(tmp_path: Path, write) -> None:
    st = tmp_path / "st"
    store = Store(st)
    a = write("a.txt", "Iteration Duration 0 0 : 0.5\n")
    ta.ingest([a], st)
    s_a, s_a2 = store.stage(ta.read(a)), store.stage(ta.read(a), replace_existing=True)
    s_b = store.stage(ta.read(write("b.txt", "Iteration Duration 0 3 : 0.5\n")))
    assert store.commit([s_a, s_b, s_a2]) == ["unchanged", "ingested", "replaced"]
    assert len(store.source_ids()) == 2 and not (st / STAGING).exists()


def test_staged_is_picklable_and_committed_by_another_process(tmp_path: Path, write) -> None:
    import pickle

    st = tmp_path / "st"
    a = write("a.txt", "Iteration Duration 0 0 : 0.5\n")
    staged = Store(st).stage(ta.read(a))
    code = (
        "import pickle, sys, traceanalyze as ta\n"
        "s = pickle.loads(bytes.fromhex(sys.argv[1]))\n"
        "print(ta.Store(s.store_root).commit(s))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", code, pickle.dumps(staged).hex()],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.stdout.strip() == "['ingested']", r.stderr
    assert Store(st).source_ids() == [sid_of(a)]
    Store(st).discard(staged)  # releases this process's lock; the store keeps the source
    assert Store(st).source_ids() == [sid_of(a)] and not (st / STAGING).exists()


# --- the parallel SQLite reader's workers -----------------------------------------------------


def _big_nsys(dest: Path, rows: int) -> Path:
    """The real 2×H100 export with its kernel rows replicated past the parallel threshold
    (as benchmarks/bench_nsys_sqlite.py does)."""
    dest.write_bytes(shared(EARLY).read_bytes())
    con = sqlite3.connect(dest)
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    cols = [r[1] for r in con.execute(f"PRAGMA table_info({k})")]
    while True:
        n, lo, hi, cmax = con.execute(
            f'SELECT count(*), min(start), max("end"), max(correlationId) FROM {k}'
        ).fetchone()
        if n >= rows:
            break
        shift = {
            "start": f"start + {hi - lo + 1}",
            "end": f'"end" + {hi - lo + 1}',
            "correlationId": f"correlationId + {cmax + 1}",
        }
        sel = ", ".join(shift.get(c, f'"{c}"') for c in cols)
        con.execute(f"INSERT INTO {k} SELECT {sel} FROM {k} LIMIT {rows - n}")
        con.commit()
    con.close()
    return dest


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _state(pid: int) -> str:
    """A process's state letter from /proc (R, S, T stopped, Z zombie; '' once reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _workers_of(pid: int) -> list[int]:
    """The reader workers among `pid`'s children (matched on their own command line, not on
    their parent's, which a child has between fork and exec)."""
    out = []
    for p in _children(pid):
        try:
            if b"common/sqlite_parallel.py\x00" in Path(f"/proc/{p}/cmdline").read_bytes():
                out.append(p)
        except OSError:
            continue
    return out


def _subreaper(on: bool) -> None:
    """Make this process adopt orphaned descendants (PR_SET_CHILD_SUBREAPER), so that it can
    wait for the workers of a killed parent and see how they ended."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_sigkill_of_the_parent_mid_read_leaves_no_worker_and_no_file(tmp_path: Path) -> None:
    """The workers are frozen (SIGSTOP) mid-read, the parent is SIGKILLed, the workers are
    thawed: each must be killed then (PR_SET_PDEATHSIG), not finish its read; and no file is
    left in the scratch directory."""
    from traceanalyze.readers.nsys import nsys_sqlite

    db = _big_nsys(tmp_path / "big.sqlite", nsys_sqlite.PARALLEL_MIN_ROWS + 10_000)
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    scratch = base / f"traceanalyze-test-{os.getpid()}-{tmp_path.name}"
    scratch.mkdir()
    code = (
        "import sys\n"
        "import traceanalyze.readers.common.sqlite_parallel as sp\n"
        "sp._scratch_dir = lambda need=0: sys.argv[2]\n"
        "import traceanalyze.readers.nsys.nsys_sqlite as ns\n"
        # ~330 record batches per worker, not ~3: under load, a worker let run until its first
        # write must still be far from the end of its range when it is frozen again.
        "ns._BATCH = 512\n"
        "while True: ns.read_nsys_sqlite(sys.argv[1], engine='adbc', workers=3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    _subreaper(True)
    workers: list[int] = []
    try:
        parent = subprocess.Popen([sys.executable, "-c", code, str(db), str(scratch)], env=env)
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline and parent.poll() is None:
            workers = _workers_of(parent.pid)
        assert len(workers) == 2, "workers not seen"
        # Mid-read: each worker has begun writing its output (its fd, named in its argv).
        for w in workers:
            os.kill(w, signal.SIGSTOP)
        outs = []
        for w in workers:
            fd = Path(f"/proc/{w}/cmdline").read_bytes().split(b"fd:")[1].rstrip(b"\x00")
            outs.append(Path(f"/proc/{w}/fd/{fd.decode()}"))
        # Freeze both, then let each run until its file has begun (it has ~330 batches to
        # read) and freeze it again; it must be stopped, not finished, when the parent dies.
        for w, o in zip(workers, outs, strict=True):
            os.kill(w, signal.SIGCONT)
            while o.stat().st_size == 0 and time.monotonic() < deadline:
                pass
            os.kill(w, signal.SIGSTOP)
        for w in workers:
            while _state(w) not in ("T", "t") and time.monotonic() < deadline:
                pass
            assert _state(w) in ("T", "t"), f"worker {w} is {_state(w)!r}, not stopped"
        assert list(scratch.iterdir()) == []  # the workers' output files have no name
        parent.send_signal(signal.SIGKILL)
        assert parent.wait(timeout=30) == -signal.SIGKILL
        ends = []
        for w in workers:
            try:
                os.kill(w, signal.SIGCONT)
            except ProcessLookupError:
                # Already reaped, by the dying parent: its main thread exits first, which fires
                # the workers' PDEATHSIG, and a watcher thread of the parent blocked in
                # waitpid() can reap the killed worker before the SIGKILL ends that thread
                # too. The worker was stopped (checked above) and nobody continued it, so it
                # can only have left by a SIGKILL.
                ends.append(-signal.SIGKILL)
                continue
            _, status = os.waitpid(w, 0)  # adopted: this process is their subreaper
            ends.append(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
        assert ends == [-signal.SIGKILL, -signal.SIGKILL]
        assert list(scratch.iterdir()) == []
    finally:
        for w in workers:
            with contextlib.suppress(OSError):
                os.kill(w, signal.SIGKILL)
                os.waitpid(w, 0)
        _subreaper(False)
        for p in scratch.iterdir():
            p.unlink()
        scratch.rmdir()


def test_a_worker_whose_parent_is_already_gone_exits(tmp_path: Path) -> None:
    from traceanalyze.readers.common import sqlite_parallel as sp

    env = {**os.environ, sp.PARENT_ENV: "1" if os.getppid() != 1 else "2"}
    r = subprocess.run(
        [*sp.worker_command(), "x", "SELECT 1", "rowid", "1", "2", "10", "fd:9"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == sp.EXIT_PARENT_GONE


# --- one-line errors, plain run ids -----------------------------------------------------------


def test_a_newline_in_a_file_name_cannot_forge_an_error_line(tmp_path: Path) -> None:
    from traceanalyze.cli import main

    bad = tmp_path / "x.txt\ntraceanalyze: error: forged"
    bad.write_text("Iteration Duration x\n")
    r = CliRunner().invoke(main, ["ingest", str(bad), "--store", str(tmp_path / "st")])
    assert r.exit_code == 1
    assert r.output.count("\n") == 1
    assert repr(str(bad)) in r.output
    good = tmp_path / "y.txt\nforged: ingested"
    good.write_text("Iteration Duration 0 0 : 0.5\n")
    r = CliRunner().invoke(main, ["ingest", str(good), "--store", str(tmp_path / "st")])
    assert r.exit_code == 0 and r.output.count("\n") == 1
    assert r.output.startswith(repr(str(good)) + ": ingested as iterlog")
    e = MalformedInput("saw 'a\r\x1b[2Kb'", path="f.csv", line=2)
    assert str(e) == "f.csv, line 2: saw 'a\\r\\x1b[2Kb'"


@pytest.mark.parametrize("run_id", ["../../x", "a/b", "a\\b", ".hidden", "..", "", "a\nb"])
def test_collect_refuses_a_run_id_that_is_not_a_plain_name(tmp_path: Path, run_id: str) -> None:
    from traceanalyze.cli import main

    r = CliRunner().invoke(
        main, ["collect", "--out", str(tmp_path), "--run-id", run_id, "--dry-run"]
    )
    assert r.exit_code == 2
    assert "--run-id must be a plain name" in r.output
    assert list(tmp_path.iterdir()) == []


def test_collect_takes_a_plain_run_id(tmp_path: Path) -> None:
    from traceanalyze.cli import main

    r = CliRunner().invoke(
        main,
        ["collect", "--out", str(tmp_path), "--run-id", "run-1_a", "--dry-run", "--device", "cpu"],
    )
    assert r.exit_code == 0, r.output
    assert str(tmp_path / "run-1_a") in r.output
