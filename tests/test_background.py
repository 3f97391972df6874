"""`background.prefetch` and `background.ordered_map`: the items in order, each made once, errors
raised where the item is asked for, and nothing left running when the consumer stops early
(the Perfetto protobuf export relies on all four: tests/test_perfetto_proto.py checks its bytes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from traceanalyze.background import BackgroundWrites, ordered_map, prefetch


class _Source:
    """An iterator that records which thread made each item and whether it was closed."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.made: list[int] = []
        self.threads: set[str] = set()
        self.closed = False

    def __iter__(self) -> Iterator[int]:
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise ValueError(f"item {i} is bad")
                self.threads.add(threading.current_thread().name)
                self.made.append(i)
                yield i
        finally:
            self.closed = True


def _threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_prefetch_keeps_order_and_makes_items_on_its_thread() -> None:
    src = _Source(50)
    got = list(prefetch(iter(src), "t-prefetch"))
    assert got == list(range(50))
    assert src.made == list(range(50))  # each made once
    assert src.threads and all(t.startswith("t-prefetch") for t in src.threads)
    assert not _threads("t-prefetch")


def test_prefetch_raises_where_the_bad_item_is_asked_for() -> None:
    src = _Source(10, fail_at=4)
    got: list[int] = []
    with pytest.raises(ValueError, match="item 4 is bad"):
        for x in prefetch(iter(src), "t-prefetch-err"):
            got.append(x)
    assert got == [0, 1, 2, 3]
    assert not _threads("t-prefetch-err")


def test_prefetch_closed_early_stops_and_closes_the_source() -> None:
    src = _Source(1000)
    it = prefetch(iter(src), "t-prefetch-close", ahead=2)
    assert [next(it), next(it)] == [0, 1]
    it.close()  # type: ignore[attr-defined]
    assert src.closed
    assert len(src.made) <= 2 + 2  # asked for two, at most `ahead` more made
    assert not _threads("t-prefetch-close")


def test_ordered_map_keeps_order_when_later_items_finish_first() -> None:
    def slow_first(i: int) -> int:
        time.sleep(0.02 if i % 2 == 0 else 0.0)  # even items finish after the next odd one
        return i * i

    got = list(ordered_map(slow_first, iter(range(30)), "t-omap"))
    assert got == [i * i for i in range(30)]
    assert not _threads("t-omap")


def test_ordered_map_runs_on_several_threads_and_bounds_the_work_under_way() -> None:
    seen: set[str] = set()
    running, peak = [0], [0]
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            seen.add(threading.current_thread().name)
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        return i

    asked = []

    def items() -> Iterator[int]:
        for i in range(20):
            asked.append(i)
            yield i

    it = ordered_map(work, items(), "t-omap-two", workers=2)
    assert next(it) == 0
    assert len(asked) <= 3  # workers + 1 under way before the first result is handed out
    assert list(it) == list(range(1, 20))
    assert len(seen) == 2 and peak[0] <= 2


def test_ordered_map_raises_the_first_error_in_order() -> None:
    def work(i: int) -> int:
        if i == 3:
            raise KeyError(i)
        return i

    got: list[int] = []
    with pytest.raises(KeyError):
        for x in ordered_map(work, iter(range(10)), "t-omap-err"):
            got.append(x)
    assert got == [0, 1, 2]
    assert not _threads("t-omap-err")


def test_background_writes_keep_order_and_raise_on_drain() -> None:
    out: list[int] = []
    w = BackgroundWrites("t-writes", in_flight=2)
    for i in range(20):
        w.submit(out.append, i)
    w.drain()
    assert out == list(range(20))

    def fail() -> None:
        raise OSError("disk full")

    w.submit(fail)
    with pytest.raises(OSError, match="disk full"):
        w.drain()
    w.shutdown()
    assert not _threads("t-writes")
