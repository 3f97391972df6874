"""Nsight Systems SQLite exports: slug `nsys_sqlite` (module `nsys_sqlite`), and reports
(`.nsys-rep`, `.qdrep`), slug `nsys_rep`, read through an `nsys export` to SQLite; the other modules
here are theirs. `SCREENS` is its detection screen (see `readers.common.screen`); this module
is imported before any reader is, so it stays cheap."""

from __future__ import annotations

from collections.abc import Callable

from ..common.core import SQLITE_MAGIC


def screen_sqlite(head: bytes) -> bool:
    # nsys_sqlite's sniff: `head_bytes(path, 16) != SQLITE_MAGIC` -> False, then its tables.
    return head == SQLITE_MAGIC


# nsys_rep's sniff: the report's first bytes (nsys_rep.REPORT_MAGIC).
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"


def screen_report(head: bytes) -> bool:
    return head == REPORT_MAGIC


SCREENS: dict[str, tuple[int, Callable[[bytes], bool]]] = {
    "nsys_sqlite": (16, screen_sqlite),
    "nsys_rep": (len(REPORT_MAGIC), screen_report),
}
