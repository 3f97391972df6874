"""Writes done on one background thread while the caller makes the next piece (pyarrow releases
the GIL while it encodes and writes): the store's Parquet row groups (`sink.py`) and a reader's
spill files (`readers/kineto/stream.py`)."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


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
