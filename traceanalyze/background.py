"""Work done on one background thread while the caller does the next piece (pyarrow, polars and
numpy release the GIL in their C code): writes (`BackgroundWrites`: the store's Parquet row
groups, `store/sink.py`, and a reader's spill files, `readers/kineto/stream.py`) and the items of an
iterator made ahead of their use (`prefetch`: the Perfetto protobuf export sorts the next chunk
of events while this one is encoded, `export/perfetto_proto.py`)."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")


class BackgroundWrites:
    """Calls run in order, first in first out, on one thread, so every file keeps its order. At
    most `in_flight` are queued (memory stays bounded by them, not by the input); a call's error
    is raised by the next `submit` or by `drain`."""

    def __init__(self, name: str, in_flight: int = 2) -> None:
        self._name = name
        self._in_flight = in_flight
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[Future[Any]] = deque()

    def submit(self, write: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        while len(self._pending) >= self._in_flight:
            self._pending.popleft().result()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=self._name)
        self._pending.append(self._pool.submit(write, *args, **kwargs))

    def drain(self, *, check: bool = True) -> None:
        """Wait for every queued call; raise the first error if `check`, else ignore them (the
        files are being thrown away)."""
        while self._pending:
            fut = self._pending.popleft()
            if check:
                fut.result()
            else:
                with contextlib.suppress(Exception):
                    fut.result()

    def shutdown(self, *, check: bool = False) -> None:
        """`drain`, then stop the thread (a later `submit` starts a new one)."""
        self.drain(check=check)
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def prefetch(items: Iterator[_T], name: str, ahead: int = 2) -> Iterator[_T]:
    """The items of `items`, in order, each made on one background thread up to `ahead` items
    before it is asked for (memory: `ahead` items more). An error making one is raised where
    that item is asked for; closing this iterator stops the thread and closes `items`."""
    end = object()
    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    pending: deque[Future[Any]] = deque()

    def step() -> Any:
        return next(items, end)

    try:
        pending.extend(pool.submit(step) for _ in range(ahead))
        while True:
            item = pending.popleft().result()
            if item is end:
                return
            pending.append(pool.submit(step))
            yield item
    finally:
        for fut in pending:
            fut.cancel()
        pool.shutdown(wait=True)  # a step under way ends first: `items` is not running now
        close = getattr(items, "close", None)
        if close is not None:
            close()


def ordered_map(
    fn: Callable[[_T], _R], items: Iterator[_T], name: str, workers: int = 2
) -> Iterator[_R]:
    """`fn(item)` for each of `items`, in order, computed on `workers` threads (for work that
    releases the GIL: Arrow and numpy kernels); at most `workers + 1` items are under way."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    pending: deque[Future[_R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for fut in pending:
            fut.cancel()
        pool.shutdown(wait=True)
