"""Nsight Compute CSV exports and `.ncu-rep` reports: slug `ncu_csv` (module `ncu_csv`); the
other modules here are its own. `SCREENS` is its detection screen (see
`readers.common.screen`); this module is imported before any reader is, so it stays cheap."""

from __future__ import annotations

from collections.abc import Callable


def screen_csv(head: bytes) -> bool:
    # `locate._HEADER_START` (`ID,"Process ID",`, quoted or not) in the head. A report named
    # `.ncu-rep` is never screened out (`SCREEN_ALWAYS_SUFFIXES`).
    return b"\x00" not in head and b"Process ID" in head


SCREENS: dict[str, tuple[int, Callable[[bytes], bool]]] = {"ncu_csv": (65536, screen_csv)}
SCREEN_ALWAYS_SUFFIXES = {"ncu_csv": ".ncu-rep"}
