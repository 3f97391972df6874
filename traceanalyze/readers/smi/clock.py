"""Time zones of GPU telemetry logs that stamp local time without a zone (nvidia-smi's
`timestamp`, zone-less ISO stamps in sampler CSVs): the machine's zone, checking a given one,
and naive local stamps to epoch ns. Shared by `smi_csv` and `smi.variants`, so that neither
imports the other for them.
"""

from __future__ import annotations

import os
import re
import time
import zoneinfo
from pathlib import Path
from typing import Any

import polars as pl

from ...errors import MalformedInput, TraceanalyzeError
from ..common.core import PathLike, warn


def local_timezone() -> str:
    """The machine's zone as an IANA name (from /etc/localtime or /etc/timezone), else its
    current UTC offset as "+HH:MM" (which ignores DST; a warning says so)."""
    try:
        target = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in target:
            name = target.split("zoneinfo/", 1)[1]
            zoneinfo.ZoneInfo(name)
            return name
    except (OSError, ValueError, zoneinfo.ZoneInfoNotFoundError):
        pass
    try:
        name = Path("/etc/timezone").read_text().strip()
        zoneinfo.ZoneInfo(name)
        return name
    except (OSError, ValueError, zoneinfo.ZoneInfoNotFoundError):
        pass
    off = time.localtime().tm_gmtoff
    sign = "+" if off >= 0 else "-"
    h, m = divmod(abs(off) // 60, 60)
    warn(f"no IANA time zone name found; using the fixed offset {sign}{h:02d}:{m:02d}")
    return f"{sign}{h:02d}:{m:02d}"


def check_timezone(tz: str, path: PathLike) -> str:
    if re.fullmatch(r"[+-]\d{2}:\d{2}", tz):
        return tz
    try:
        zoneinfo.ZoneInfo(tz)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise TraceanalyzeError(
            f"unknown time zone {tz!r} (give an IANA name like 'Europe/Berlin', 'UTC', or an "
            "offset like '+01:00')",
            path=path,
        ) from None
    return tz


def local_to_epoch_ns(naive: pl.Series, tz: str, path: PathLike, line_of: Any = None) -> pl.Series:
    """Naive local datetimes → epoch ns in zone `tz`; DST-repeated times at the earlier offset."""
    early = naive.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
    bad = (early.is_null() & naive.is_not_null()).arg_true()
    if bad.len():
        i = int(bad[0])
        raise MalformedInput(
            f"local time {naive[i]} does not exist in time zone {tz} (a DST gap); pass the zone "
            "the log was written in as tz=",
            path=path,
            line=line_of(i) if line_of else None,
        )
    if re.fullmatch(r"[+-]\d{2}:\d{2}|UTC|GMT|Etc/.*", tz):
        return early.dt.epoch("ns")  # fixed offsets: nothing is ambiguous
    late = naive.dt.replace_time_zone(tz, ambiguous="latest", non_existent="null")
    n_amb = int((early != late).sum())
    if n_amb:
        warn(
            f"{path}: {n_amb} local timestamp(s) fall in a repeated DST hour of {tz}; "
            "taken at the earlier offset"
        )
    return early.dt.epoch("ns")
