"""nvprof outputs: CSV (slug `nvprof_csv`, module `nvprof_csv`) and SQLite (slug `nvprof_sqlite`,
module `nvprof_sqlite`); the other modules here are theirs alone.

This module holds the formats' detection screens (`SCREENS`, see `readers.common.screen`): it is
imported before any reader is, so it stays cheap (no reader module, no compiled tables).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..common.core import SQLITE_MAGIC

# nvprof CSV: one of these names is in every header line of each table kind (`split`: `HEADERS`
# and `header_kind`, which parses a line only when it holds one of them).
KEY_NAMES = ("Duration", "Time(%)", "Invocations", "Kernel")


def content_lines(text: str) -> Iterator[str]:
    """nvprof CSV lines that are neither `==` envelope lines nor blank."""
    for line in text.lstrip("\ufeff").splitlines():
        if line.startswith("==") or not line.strip():
            continue
        yield line


def screen_csv(head: bytes) -> bool:
    # The sniff takes the first content line: a header by prefix (each prefix holds a key name)
    # or by `header_kind` (None unless the line holds a key name).
    if b"\x00" in head:
        return False
    for line in content_lines(head.decode("utf-8", "replace")):
        return any(k in line for k in KEY_NAMES)
    return False


def screen_sqlite(head: bytes) -> bool:
    # nvprof_sqlite's sniff: `is_sqlite`, then its tables.
    return head == SQLITE_MAGIC


SCREENS: dict[str, tuple[int, Callable[[bytes], bool]]] = {
    "nvprof_csv": (65536, screen_csv),
    "nvprof_sqlite": (16, screen_sqlite),
}
