"""Read one big SQLite table in parallel: rowid ranges, one worker process each, Arrow IPC back.

Why: decoding SQLite records (sqlite3_step + sqlite3_column_* + the ADBC driver's Arrow
builders, ~60 ns per value) is single-threaded per statement and ~80 % of an nsys kernel-table
read. Separate processes each decode their own rowid range on their own core; the caller may read
the first range itself meanwhile (`local_read`), the ADBC driver releasing the GIL.

Why `subprocess` running this file, not `multiprocessing`: spawn/forkserver re-import the caller's
`__main__` (a script, a notebook, a CLI) in every worker, and fork is unsafe once polars' thread
pool exists. The worker is started as `python -P <this file> …` (`-P`: the readers directory is
not put on sys.path, so no module here can shadow the standard library) and imports only the
standard library, pyarrow and `adbc_driver_manager`/`adbc_driver_sqlite` (not their DB-API
module, which imports pandas and polars and costs ~0.5 s and ~130 MB per worker).

Safety (the file is untrusted): the worker opens the database with a `mode=ro` URI, and before
running anything it prepares the statement on a read-only sqlite3 connection under an authorizer
that allows only SELECT and column reads (no PRAGMA, ATTACH, writes, functions), so it can only
ever run one read-only SELECT. The rowid bounds are integers formatted by the worker.

Protocol: the parent creates each worker's output file (in /dev/shm when there is one) as an
unnamed file (`O_TMPFILE`; elsewhere a `mkstemp` name unlinked at once) and hands the worker its
descriptor (`fd:N`); the worker writes an Arrow IPC file there batch by batch (its own memory
stays at a batch or two) and exits 0; the parent memory-maps it (zero-copy). No name exists while
the workers run, so whatever is killed, the kernel frees the pages with the last descriptor.

Lifetime: a worker dies with its parent. On Linux it asks for SIGKILL when the parent exits
(`prctl(PR_SET_PDEATHSIG)`, which fires on the exit of the parent *thread* that started it:
`read_ranges` reaps every worker before it returns, so a caller's thread outliving the call is
enough) and then checks that the parent it was started by is still its parent (it may have died
before the prctl). Exit code 3 means the ADBC driver refused the cells (mixed types, a
type change after its inference batch, a malformed page): the caller should fall back to its
strict serial path, which says what is wrong. Any other failure (bad arguments, a refused
statement, a crash, a truncated file) raises `WorkerFailed` with the worker's last stderr line.
Measured on 2 cores: a worker costs ~0.2 s to start (interpreter, pyarrow, driver), so tables
under a few hundred thousand rows are better read in one process.
"""

from __future__ import annotations

import mmap
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

EXIT_DRIVER_REFUSED = 3
EXIT_BAD_REQUEST = 2
EXIT_NO_SCRATCH = 4  # the output file could not be written (disk or /dev/shm full)
EXIT_PARENT_GONE = 5  # the parent died before this worker could ask to die with it
PARENT_ENV = "TRACEANALYZE_WORKER_PARENT"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_ROWID_ALIASES = ("rowid", "_rowid_", "oid")
_IDENT_RE = re.compile(r"^(rowid|_rowid_|oid)$")


class WorkerFailed(Exception):
    """A worker process failed for a reason other than the driver refusing the cells."""


class DriverRefused(Exception):
    """A worker's ADBC driver refused the cells; the serial strict path should decide."""


class Unavailable(Exception):
    """Not the file's fault: no worker could be started or its output could not be written (a
    small /dev/shm or a full disk). The caller should read serially."""


def default_workers() -> int:
    """min(CPUs this process may use, 4): more processes than cores only add start-up cost."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 4))


def rowid_alias(columns: Sequence[str]) -> str | None:
    """A name that means the rowid in this table: one of rowid/_rowid_/oid not used by a column."""
    taken = {c.lower() for c in columns}
    return next((a for a in _ROWID_ALIASES if a not in taken), None)


def split_ranges(lo: int, hi: int, parts: int, head_start: int = 0) -> list[tuple[int, int]]:
    """[lo, hi] cut into `parts` contiguous inclusive rowid ranges, in order (some may be empty
    of rows when rowids have gaps; that is harmless).

    With `head_start`, the first range gets about that many rowids more than each other one (it
    is read in this process, which starts at once, while each worker first spends ~0.2 s
    starting up); at most twice its even share.
    """
    span = hi - lo + 1
    parts = max(1, min(parts, span))
    extra = min(max(head_start, 0), span // parts) if parts > 1 else 0
    first = lo + (span - extra) // parts + extra
    rest = split_ranges(first, hi, parts - 1) if parts > 1 else []
    return [(lo, first - 1), *rest]


# --- worker -----------------------------------------------------------------------------------


def _authorize(action: int, *_: object) -> int:
    ok = action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ)
    return sqlite3.SQLITE_OK if ok else sqlite3.SQLITE_DENY


def check_select(uri: str, sql: str) -> None:
    """Raise sqlite3.DatabaseError unless `sql` is one statement that only selects and reads.

    The statement is compiled (EXPLAIN runs nothing) on a read-only connection with an authorizer
    that denies every action but SELECT and column reads; Python's sqlite3 refuses a second
    statement in one `execute`.
    """
    con = sqlite3.connect(uri, uri=True)
    try:
        con.set_authorizer(_authorize)
        con.execute("EXPLAIN " + sql).fetchone()
    finally:
        con.close()


def worker_sql(sql: str, alias: str, lo: int, hi: int) -> str:
    if not _IDENT_RE.match(alias):
        raise ValueError(f"not a rowid alias: {alias!r}")
    return f"{sql} WHERE {alias} BETWEEN {int(lo):d} AND {int(hi):d}"


def die_with_parent() -> None:
    """SIGKILL this worker when its parent goes (Linux); exit now if it is already gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the parent's kill_all still reaps us
            pass
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):
        os._exit(EXIT_PARENT_GONE)  # re-parented: the parent died before the prctl


def _open_out(out: str) -> Any:
    """The output as a binary file: `fd:N` (the parent's unnamed file) or a path."""
    if out.startswith("fd:"):
        return open(int(out[3:]), "wb")  # noqa: SIM115 (closed by the caller's `with`)
    return open(out, "wb")  # noqa: SIM115


def _pyarrow_without_numpy() -> Any:
    """`import pyarrow` in a worker, keeping numpy out when pyarrow lets it.

    pyarrow imports numpy whenever it is installed (~90 ms of a worker's ~0.15 s start-up, and
    numpy's OpenBLAS starts a spinning thread per core), yet nothing a worker does (ADBC's C
    stream in, Arrow IPC out) touches it. A pyarrow that cannot import without numpy is imported
    again the normal way."""
    blocked = "numpy" not in sys.modules
    if blocked:
        sys.modules["numpy"] = None  # type: ignore[assignment]  # `import numpy` raises
    try:
        import pyarrow

        return pyarrow
    except ImportError:
        if not blocked:
            raise
        for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
            del sys.modules[name]
        del sys.modules["numpy"]
        import pyarrow

        return pyarrow
    finally:
        if blocked and sys.modules.get("numpy", 0) is None:
            del sys.modules["numpy"]


def _worker(argv: list[str]) -> int:
    die_with_parent()
    if len(argv) != 7:
        print(
            "usage: _sqlite_parallel.py PATH SQL ROWID_ALIAS LO HI BATCH_ROWS OUT", file=sys.stderr
        )
        return EXIT_BAD_REQUEST
    path, sql, alias, lo, hi, batch, out_path = argv
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        full = worker_sql(sql, alias, int(lo), int(hi))
        check_select(uri, full)
        batch_rows = int(batch)
    except (ValueError, sqlite3.Error) as e:
        print(f"refused: {e}", file=sys.stderr)
        return EXIT_BAD_REQUEST

    pa = _pyarrow_without_numpy()
    import adbc_driver_manager as adbc
    import adbc_driver_sqlite
    import pyarrow.ipc

    with (
        adbc_driver_sqlite.connect(uri) as db,
        adbc.AdbcConnection(db) as conn,
        adbc.AdbcStatement(conn) as stmt,
    ):
        try:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
            stmt.set_sql_query(full)
            handle, _ = stmt.execute_query()
            reader = pa.RecordBatchReader._import_from_c(handle.address)
        except adbc.Error as e:
            print(f"driver: {e}", file=sys.stderr)
            return EXIT_DRIVER_REFUSED
        # OUT is the parent's unnamed file (fd:N); it maps the finished file.
        try:
            with _open_out(out_path) as f, pyarrow.ipc.new_file(f, reader.schema) as w:
                while True:
                    try:
                        # Errors after the first batch (a cell whose type differs from the one
                        # the driver inferred) come through the C stream as OSError.
                        b = reader.read_next_batch()
                    except StopIteration:
                        break
                    except (OSError, pa.ArrowException, adbc.Error) as e:
                        print(f"driver: {e}", file=sys.stderr)
                        return EXIT_DRIVER_REFUSED
                    w.write_batch(b)
        except OSError as e:  # ENOSPC: a small /dev/shm (Docker: 64 MB) or a full disk
            print(f"output: {e}", file=sys.stderr)
            return EXIT_NO_SCRATCH
    return 0


def _scratch_dir(need_bytes: int = 0) -> str | None:
    """/dev/shm when it is there with room for `need_bytes` (RAM: the parent maps the results
    without any disk I/O; containers often give it only 64 MB), else the default temporary
    directory (None)."""
    shm = Path("/dev/shm")
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    roomy = st.f_bavail * st.f_frsize >= need_bytes * 1.25 + (64 << 20)
    return str(shm) if roomy and os.access(shm, os.W_OK | os.X_OK) else None


def _unnamed_file(directory: str | None) -> int:
    """A read-write descriptor of a new file in `directory` that has no name: nothing to clean
    up whoever is killed. O_TMPFILE where the file system has it (ext4, xfs, tmpfs, btrfs),
    else a mkstemp name unlinked at once."""
    d = directory or tempfile.gettempdir()
    o_tmpfile = getattr(os, "O_TMPFILE", 0)
    if o_tmpfile:
        try:
            return os.open(d, o_tmpfile | os.O_RDWR, 0o600)
        except OSError:  # EOPNOTSUPP / EISDIR: no O_TMPFILE on this file system
            pass
    fd, name = tempfile.mkstemp(prefix="traceanalyze-", suffix=".arrow", dir=d)
    os.unlink(name)
    return fd


# --- parent -----------------------------------------------------------------------------------


# As `core.SAFE_PATH` (this file runs as a script too, so it imports nothing of the package).
SAFE_PATH: list[str] = ["-P"] if sys.version_info >= (3, 11) else []


def worker_command() -> list[str]:
    """The worker command line prefix: this file run by the same interpreter."""
    return [sys.executable, *SAFE_PATH, str(Path(__file__).resolve())]


def read_ranges(
    path: str | os.PathLike[str],
    sql: str,
    alias: str,
    ranges: Sequence[tuple[int, int]],
    *,
    batch_rows: int = 1 << 16,
    local_read: Callable[[str], Any] | None = None,
    scratch_bytes: int = 0,
) -> list[Any]:
    """Run `sql WHERE <alias> BETWEEN lo AND hi` for each range in its own worker process and
    return the frames in range order (the local one as `local_read` gave it, the workers' as
    pyarrow Tables).

    With `local_read`, the first range is read in this process instead, by
    `local_read(<its full SQL>)` (any frame, returned as it is: the reader's is a polars
    DataFrame; it must release the GIL, as ADBC's C stream read by polars does), while
    the workers read the others: one process start (~0.1 s of CPU) and one Arrow file less. It
    should raise DriverRefused when its driver refuses the cells.

    Each worker writes an Arrow IPC file into an unnamed file (in /dev/shm when there is one)
    that this process memory-maps: the Tables' buffers are the mapped pages, so
    nothing is copied or parsed here. (Streaming through pipes instead cost this process ~0.65 s
    of CPU per 5 M × 19 integers, on a machine whose cores the workers already fill.) The files
    have no name at any time (see the module docstring); the pages live as long as the Tables.

    `scratch_bytes`: about how big the workers' files will be together (to choose /dev/shm).

    Raises DriverRefused (exit code 3 from a worker), Unavailable (no worker could start, or
    one could not write its file) or WorkerFailed (anything else). The first failure kills the
    other workers; every worker is reaped before this returns or raises.
    """
    remote = list(enumerate(ranges))[1:] if local_read is not None else list(enumerate(ranges))
    pool = _Pool()
    try:
        pool.start(path, sql, alias, [r for _, r in remote], batch_rows, scratch_bytes)
        threads = pool.watch()
        first_table = None
        if local_read is not None:
            lo, hi = ranges[0]
            try:
                first_table = local_read(worker_sql(sql, alias, lo, hi))
            except BaseException:
                pool.kill_all()
                raise
        for t in threads:
            t.join()
        _raise_first_failure(pool.procs, pool.errs, remote)
        tables = [] if local_read is None else [first_table]
        return tables + _map_outputs([r for _, r in remote], pool.outs)
    finally:
        pool.close()


class _Pool:
    """The worker processes of one `read_ranges` call, their stderr files and their unnamed
    output files; `close` kills and reaps whatever was started, whenever it is called."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.errs: list[Any] = []
        self.outs: list[int] = []  # the workers' output files, unnamed: descriptors only
        self._lock = threading.Lock()

    def start(
        self,
        path: str | os.PathLike[str],
        sql: str,
        alias: str,
        ranges: Sequence[tuple[int, int]],
        batch_rows: int,
        scratch_bytes: int,
    ) -> None:
        """One worker per range; Unavailable when a file or a process cannot be made."""
        prefix = worker_command()
        scratch = _scratch_dir(scratch_bytes)
        # OPENBLAS_NUM_THREADS: pyarrow imports numpy, whose OpenBLAS otherwise starts a thread
        # per core that spins ~0.1 s of CPU; a worker never calls BLAS, and on a machine whose
        # cores are all reading, that CPU is taken from the read.
        env = {**os.environ, PARENT_ENV: str(os.getpid()), "OPENBLAS_NUM_THREADS": "1"}
        for lo, hi in ranges:
            err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in `close`)
            self.errs.append(err)
            try:
                out = _unnamed_file(scratch)
            except OSError as e:
                raise Unavailable(f"cannot create a worker's output file: {e}") from None
            self.outs.append(out)
            args = [*prefix, str(path), sql, alias, str(lo), str(hi), str(batch_rows), f"fd:{out}"]
            try:
                p = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=err,
                    stderr=err,
                    pass_fds=(out,),
                    env=env,
                )
            except OSError as e:  # EAGAIN (process limit), ENOMEM, …
                raise Unavailable(f"cannot start a worker: {e}") from None
            with self._lock:
                self.procs.append(p)

    def watch(self) -> list[threading.Thread]:
        """A started thread per worker that kills the others as soon as one fails: no point
        waiting for them, the caller gets no result."""

        def watch_one(p: subprocess.Popen[bytes]) -> None:
            if p.wait() != 0:
                self.kill_all()

        threads = [threading.Thread(target=watch_one, args=(p,), daemon=True) for p in self.procs]
        for t in threads:
            t.start()
        return threads

    def kill_all(self) -> None:
        with self._lock:
            for p in self.procs:
                if p.poll() is None:
                    p.kill()

    def close(self) -> None:
        self.kill_all()
        for p in self.procs:
            p.wait()
        for f in self.errs:
            f.close()
        for fd in self.outs:
            os.close(fd)


def _map_outputs(ranges: Sequence[tuple[int, int]], outs: Sequence[int]) -> list[Any]:
    """The workers' Arrow files as pyarrow Tables over memory-mapped pages (zero-copy)."""
    import pyarrow as pa
    import pyarrow.ipc

    tables = []
    for (lo, hi), out in zip(ranges, outs, strict=True):
        try:
            # The mapping keeps the pages after the descriptor is closed; zero-copy.
            mapped = mmap.mmap(out, 0, access=mmap.ACCESS_READ)
            tables.append(pyarrow.ipc.open_file(pa.py_buffer(mapped)).read_all())
        except (pa.ArrowException, OSError, ValueError) as e:
            raise WorkerFailed(f"worker for rowids {lo}..{hi}: bad output: {e}") from None
    return tables


def _raise_first_failure(
    procs: Sequence[subprocess.Popen[bytes]], errs: Sequence[Any], remote: Sequence[Any]
) -> None:
    """Raise for the first worker that failed by itself, not one killed because of it."""
    failed = [i for i, p in enumerate(procs) if p.returncode != 0]
    first = [i for i in failed if procs[i].returncode != -signal.SIGKILL] or failed
    if not first:
        return
    i = first[0]
    errs[i].seek(0)
    lines = errs[i].read().decode("utf-8", "replace").strip().splitlines()
    code = procs[i].returncode
    why = lines[-1] if lines else f"exit status {code}"
    if code == EXIT_DRIVER_REFUSED:
        raise DriverRefused(why)
    if code == EXIT_NO_SCRATCH:
        raise Unavailable(why)
    lo, hi = remote[i][1]
    raise WorkerFailed(f"worker for rowids {lo}..{hi}: {why}")


if __name__ == "__main__":
    # A worker's objects die with it: its last exit handler freezes them, so that the
    # interpreter's shutdown does not walk and free pyarrow's modules one by one (the output is
    # closed by then). A worker that reads nothing: 0.097 -> 0.084 s.
    import atexit
    import gc

    atexit.register(gc.freeze)
    sys.exit(_worker(sys.argv[1:]))
