"""Parallel ingest: parse files in worker processes or on a Dask cluster, commit in the caller.

Each file is read and *staged* (written under a temporary directory inside the store) by a
worker; the caller commits the staged sources only when every file has been staged, so the
semantics are serial ingest's: bad input anywhere leaves the store byte-identical, and the
error is the worker's one-line `TraceanalyzeError` naming the file.

* `ingest_parallel(paths, store, jobs=N)`: N local processes (`concurrent.futures`, the
  'forkserver' start method where there is one, else 'spawn': never 'fork', which would copy the
  caller's threads and locks into the workers).
* `ingest_dask(paths, store, scheduler="tcp://host:8786")`: one task per file on the workers of
  a running `dask.distributed` cluster; the store must be on a file system the workers share
  with the caller (paths are sent absolute). Dask is imported only here (extra `[dask]`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import as_completed as cf_as_completed
from pathlib import Path
from typing import Any

from .errors import TraceanalyzeError
from .readers.common.limits import InputLimits, current_limits, input_limits
from .store import STAGING, IngestResult, Staged, Store, plan, remove_dead_staging, stage_file

PathArg = str | os.PathLike[str]
Outcome = tuple[Staged | None, IngestResult]


def stage_one(
    path: str,
    fmt: str,
    store: Store,
    force: bool,
    options: dict[str, Any],
    limits: InputLimits,
) -> Outcome:
    """Worker side: the store's `stage_file` under the caller's input limits (they travel with
    the task, since a remote worker has its own environment). The worker process holds the
    staging's liveness lock until it exits, so the caller commits while the workers live."""
    with input_limits(limits):
        return stage_file(path, fmt, store, force=force, options=options)


def _gather(
    futures: Sequence[Any],
    as_completed: Callable[[Sequence[Any]], Iterator[Any]],
    cancel_after: Callable[[int], None],
    store: Store,
    on_result: Callable[[IngestResult], None] | None,
) -> list[Outcome]:
    """Outcomes in input order. When a file fails, `cancel_after(i)` the files after it that
    have not started; the error raised is that of the first failing file *in input order*, as
    serial ingest would raise, once the files still running are done and everything staged is
    discarded."""
    index = {f: i for i, f in enumerate(futures)}
    outcomes: dict[int, Outcome] = {}
    errors: dict[int, BaseException] = {}
    try:
        for fut in as_completed(futures):
            i = index[fut]
            if fut.cancelled():
                continue
            # exception(), not result(): re-raising one exception object shared by many
            # futures (a broken pool's) would append frames to its traceback every time.
            e = fut.exception()
            if e is not None:  # the worker's error; its remote traceback is chained
                if not errors or i < min(errors):
                    cancel_after(i)
                errors[i] = _with_remote_traceback(fut, e)
                continue
            outcomes[i] = fut.result()
            if not errors and on_result is not None:
                on_result(outcomes[i][1])
    except BaseException as e:  # KeyboardInterrupt in the caller: clean up as for an error
        errors[-1] = e
        cancel_after(-1)
    if errors:
        for staged, _ in outcomes.values():
            if staged is not None:
                store.discard(staged)
        raise errors[min(errors)]
    return [outcomes[i] for i in range(len(futures))]


def _with_remote_traceback(fut: Any, e: BaseException) -> BaseException:
    """A Dask future keeps the worker's traceback apart (`traceback()`); attach it."""
    tb = getattr(fut, "traceback", None)
    if callable(tb) and e.__traceback__ is None:
        return e.with_traceback(tb())
    return e


def _finish(store: Store, outcomes: list[Outcome]) -> list[IngestResult]:
    """Drop repeats of a source within the call (the first in input order wins, as in serial
    ingest), then commit."""
    seen: set[str] = set()
    keep: list[Staged] = []
    results: list[IngestResult] = []
    for staged, res in outcomes:
        if staged is not None and res.source_id in seen:
            store.discard(staged)
            staged, res = None, dataclasses.replace(res, status="unchanged", counts={})
        seen.add(res.source_id)
        if staged is not None:
            keep.append(staged)
        results.append(res)
    statuses = iter(store.commit(keep))
    return [
        res if res.status == "unchanged" else dataclasses.replace(res, status=next(statuses))
        for res in results
    ]


def _mp_context() -> Any:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # The server imports the readers once (polars, pyarrow, msgspec: ~0.5 s of CPU) and each
    # worker forks from it with them loaded; the server has run no polars code, so no threads.
    ctx.set_forkserver_preload(["traceanalyze.parallel"])
    return ctx


def ingest_parallel(
    paths: PathArg | Iterable[PathArg],
    store: Store | PathArg,
    *,
    jobs: int,
    format: str | None = None,
    force: bool = False,
    on_result: Callable[[IngestResult], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    limits: InputLimits | None = None,
    **options: Any,
) -> list[IngestResult]:
    """`traceanalyze.ingest` with the files parsed in `jobs` processes; same results, same
    all-or-nothing commit. `on_start(path)` is called as a file is handed to the pool."""
    if jobs < 1:
        raise TraceanalyzeError(f"jobs must be at least 1, got {jobs}")
    st = store if isinstance(store, Store) else Store(store)
    todo = plan(paths, format, options)
    if not todo:
        return []
    lim = limits or current_limits()
    created_root = not st.root.exists()
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=_mp_context()) as ex:
            futures: list[Future[Outcome]] = []
            for path, fmt in todo:
                if on_start is not None:
                    on_start(path)
                futures.append(ex.submit(stage_one, path, fmt, st, force, options, lim))

            def cancel_after(i: int) -> None:
                for f in futures[i + 1 :]:
                    f.cancel()  # only those not started; running ones finish and are discarded

            outcomes = _gather(futures, cf_as_completed, cancel_after, st, on_result)
            # Committed before the pool shuts down: each worker holds its stagings' liveness
            # lock until it exits, and a concurrent writer removes the stagings of dead writers.
            results = _finish(st, outcomes)
    except BaseException:
        _tidy(st, created_root)
        raise
    # The workers are gone, and with them the locks they held: their `.staging/<owner>.lock`
    # files would stay behind (issue 21), so remove them as a failed ingest does.
    _tidy(st, created_root=False)
    return results


def _tidy(st: Store, created_root: bool) -> None:
    """After a parallel ingest, once the workers are gone: their liveness locks (an empty
    `.staging` too), and after a failure the store directory if this call created it and nothing
    else is in it (as serial ingest)."""
    staging = st.root / STAGING
    remove_dead_staging(staging, strict=False)  # never hides the failure being cleaned up
    with contextlib.suppress(OSError):
        staging.rmdir()
    if created_root:
        with contextlib.suppress(OSError):
            st.root.rmdir()


def ingest_dask(
    paths: PathArg | Iterable[PathArg],
    store: Store | PathArg,
    *,
    scheduler: str | Any,
    format: str | None = None,
    force: bool = False,
    on_result: Callable[[IngestResult], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    limits: InputLimits | None = None,
    connect_timeout: float = 30.0,
    **options: Any,
) -> list[IngestResult]:
    """`traceanalyze.ingest` with one task per file on a Dask cluster.

    `scheduler` is an address (`tcp://host:8786`) or a `distributed.Client`. Files and the store
    must be reachable at the same absolute paths from every worker (a shared file system); the
    `sources` table records the absolute path. Reader options and `limits` travel with each
    task; `connect_timeout` is how long to try to reach the scheduler. On an error every task
    still running is waited for, so nothing it staged is left behind.
    """
    try:
        from distributed import Client
        from distributed import as_completed as dask_as_completed
    except ImportError:
        raise TraceanalyzeError(
            "ingest_dask needs dask.distributed: pip install 'traceanalyze[dask]'"
        ) from None
    root = (store.root if isinstance(store, Store) else Path(store)).absolute()
    st = Store(root)
    todo = plan([os.path.abspath(p) for p in _as_list(paths)], format, options)
    if not todo:
        return []
    lim = limits or current_limits()
    own = isinstance(scheduler, str)
    client: Any
    if own:
        try:
            client = _client(Client, scheduler, connect_timeout)
        except OSError as e:
            msg = " ".join(str(e).split())
            raise TraceanalyzeError(f"cannot reach the Dask scheduler {scheduler}: {msg}") from None
    else:
        client = scheduler
    try:
        futures = _submit_all(client, todo, st, force, options, lim, on_start)
        # No cancel on error: a running task cannot be stopped and would leave its staging
        # directory behind, so all are waited for and their stages discarded.
        with client.as_current():  # as_completed finds the client this way
            outcomes = _gather(futures, dask_as_completed, lambda i: None, st, on_result)
    finally:
        if own:
            client.close()
    return _finish(st, outcomes)


def _submit_all(
    client: Any,
    todo: list[tuple[str, str]],
    st: Store,
    force: bool,
    options: dict[str, Any],
    lim: InputLimits,
    on_start: Callable[[str], None] | None,
) -> list[Any]:
    """One `stage_one` task per file, keyed uniquely per call so reruns are never deduplicated."""
    batch = uuid.uuid4().hex[:8]
    futures = []
    for i, (path, fmt) in enumerate(todo):
        if on_start is not None:
            on_start(path)
        key = f"traceanalyze-ingest-{batch}-{i}"
        futures.append(
            client.submit(stage_one, path, fmt, st, force, options, lim, key=key, pure=False)
        )
    return futures


def _client(client_cls: Any, address: str, timeout: float) -> Any:
    return client_cls(address, timeout=timeout, set_as_default=False)


def _as_list(paths: PathArg | Iterable[PathArg]) -> list[PathArg]:
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)


__all__ = ["ingest_parallel", "ingest_dask", "stage_one"]
