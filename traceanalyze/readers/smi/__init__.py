"""GPU telemetry logs (nvidia-smi, the NVML sampler, dcgmi dmon, dumpGpuPower): slug `smi_csv`
(module `smi_csv`); the other modules here are its own. `SCREENS` is its detection screen (see
`readers.common.screen`); this module is imported before any reader is, so it stays cheap."""

from __future__ import annotations

from collections.abc import Callable


def screen_csv(head: bytes) -> bool:
    # `smi_csv._variant` on the first non-blank line: the sampler's magic and dcgmi's `#Entity`
    # start with '#'; an nvidia-smi header cell with [a-z]; an unheaded nvidia-smi row with a
    # date; a generic log with a time column name, maybe quoted. Only the dumpGpuPower variant
    # looks further, for `[<n>] Power: ` lines or `… with energy <n> at <t>`.
    text = head.decode("utf-8", "replace").lstrip("\ufeff")
    if "\x00" in text:
        return False
    lines = (ln.strip("\r") for ln in text.split("\n"))
    first = next((ln for ln in lines if ln.strip()), "")
    c = first.lstrip().lstrip('"')[:1]
    if c == "#" or "a" <= c <= "z" or c.isdigit():
        return True
    return "] Power: " in text or " with energy " in text


SCREENS: dict[str, tuple[int, Callable[[bytes], bool]]] = {"smi_csv": (16384, screen_csv)}
