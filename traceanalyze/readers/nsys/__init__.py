"""Nsight Systems SQLite exports: slug `nsys_sqlite` (module `nsys_sqlite`); the other modules
here are its own. `SCREENS` is its detection screen (see `readers.common.screen`); this module
is imported before any reader is, so it stays cheap."""

from __future__ import annotations

from collections.abc import Callable

from ..common.core import SQLITE_MAGIC


def screen_sqlite(head: bytes) -> bool:
    # nsys_sqlite's sniff: `head_bytes(path, 16) != SQLITE_MAGIC` -> False, then its tables.
    return head == SQLITE_MAGIC


SCREENS: dict[str, tuple[int, Callable[[bytes], bool]]] = {"nsys_sqlite": (16, screen_sqlite)}
