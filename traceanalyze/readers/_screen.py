"""Detection's first pass: which readers could claim a file, judged from its first 64 KiB without
importing them (docs/scale.md, "Speed on one file").

`detect_format` asks every reader's `sniff`, and importing a reader runs its module body (name
tables, compiled patterns, decoders, its helper modules): ~50 ms for the five below, half of
what loading the 15 MB ResNet-50 Kineto trace takes. A screen here is a *necessary* condition of
its reader's sniff, written from that sniff: whenever the sniff says yes, so does the screen. A
reader whose screen says no is not imported or asked; every other reader is. The answer is
therefore the sniffs' own, ambiguity included. `tests/test_screen.py` checks the implication on
every real file and on generated heads. Readers that are cheap to import (iterlog, kineto_json)
are not screened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ._common import SQLITE_MAGIC, PathLike, head_bytes

# nvprof CSV: one of these names is in every header line of each table kind (`_nvprof_split`:
# `HEADERS` and `header_kind`, which parses a line only when it holds one of them).
KEY_NAMES = ("Duration", "Time(%)", "Invocations", "Kernel")


def content_lines(text: str) -> Iterator[str]:
    """nvprof CSV lines that are neither `==` envelope lines nor blank."""
    for line in text.lstrip("\ufeff").splitlines():
        if line.startswith("==") or not line.strip():
            continue
        yield line


def _sqlite(head: bytes) -> bool:
    # nsys_sqlite: `head_bytes(path, 16) != SQLITE_MAGIC` -> False; nvprof_sqlite: `is_sqlite`.
    return head == SQLITE_MAGIC


def _nvprof_csv(head: bytes) -> bool:
    # The sniff takes the first content line: a header by prefix (each prefix holds a key name)
    # or by `header_kind` (None unless the line holds a key name).
    if b"\x00" in head:
        return False
    for line in content_lines(head.decode("utf-8", "replace")):
        return any(k in line for k in KEY_NAMES)
    return False


def _smi_csv(head: bytes) -> bool:
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


def _ncu_csv(head: bytes) -> bool:
    # `_ncu_locate._HEADER_START` (`ID,"Process ID",`, quoted or not) in the head, or a report
    # named `.ncu-rep` (checked by `candidates`, which never screens such a name out).
    return b"\x00" not in head and b"Process ID" in head


# slug -> (bytes of head its sniff reads, the screen of that head). Each screen gets the very
# head its sniff reads, not a prefix of a longer one: on a damaged gzip a longer head can come
# out shorter (`_gunzip_prefix` drops the output of the call that meets the damage).
SCREENS: dict[str, tuple[int, Callable[[bytes], bool]]] = {
    "nsys_sqlite": (16, _sqlite),
    "nvprof_sqlite": (16, _sqlite),
    "nvprof_csv": (65536, _nvprof_csv),
    "smi_csv": (16384, _smi_csv),
    "ncu_csv": (65536, _ncu_csv),
}


def candidates(path: PathLike, slugs: list[str]) -> list[str]:
    """The slugs, in order, whose readers could claim `path` (every unscreened one)."""
    heads: dict[int, bytes] = {}
    out = []
    for slug in slugs:
        if slug in SCREENS and not (slug == "ncu_csv" and str(path).endswith(".ncu-rep")):
            n, screen = SCREENS[slug]
            if n not in heads:
                heads[n] = head_bytes(path, n)
            if not screen(heads[n]):
                continue
        out.append(slug)
    return out
