"""Detection's first pass: which readers could claim a file, judged from its first bytes without
importing them (docs/scale.md, "Speed on one file").

`detect_format` asks every reader's `sniff`, and importing a reader runs its module body (name
tables, compiled patterns, decoders, its helper modules): ~50 ms for the first five screened, half
of what loading the 15 MB ResNet-50 Kineto trace takes, and 7-12 ms for the six ROCm readers.
A format package may declare screens in its
`__init__` (`SCREENS = {slug: (head bytes, screen)}`, cheap to import): each is a *necessary*
condition of its reader's sniff, written from that sniff: whenever the sniff says yes, so does
the screen. A reader whose screen says no is not imported or asked; every other reader is. The
answer is therefore the sniffs' own, ambiguity included. `tests/test_screen.py` checks the
implication on every real file and on generated heads. Readers that are cheap to import (iterlog,
kineto_json) are not screened, nor is mlperf_log (its package is its reader: a screen there would
import it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .core import PathLike, head_bytes

# The format packages that declare screens (each `__init__` is cheap: no reader module).
_SCREENING_PACKAGES = ("nsys", "nvprof", "smi", "ncu", "rocm")


def _collect() -> tuple[dict[str, tuple[int, Callable[[bytes], bool]]], dict[str, str]]:
    screens: dict[str, tuple[int, Callable[[bytes], bool]]] = {}
    always: dict[str, str] = {}
    for pkg in _SCREENING_PACKAGES:
        mod = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.{pkg}")
        screens.update(mod.SCREENS)
        always.update(getattr(mod, "SCREEN_ALWAYS_SUFFIXES", {}))
    return screens, always


# slug -> (bytes of head its sniff reads, the screen of that head). Each screen gets the very
# head its sniff reads, not a prefix of a longer one: on a damaged gzip a longer head can come
# out shorter (`core._gunzip_prefix` drops the output of the call that meets the damage).
SCREENS, ALWAYS_SUFFIXES = _collect()


def candidates(path: PathLike, slugs: list[str]) -> list[str]:
    """The slugs, in order, whose readers could claim `path` (every unscreened one)."""
    heads: dict[int, bytes] = {}
    out = []
    for slug in slugs:
        suffix = ALWAYS_SUFFIXES.get(slug)
        if slug in SCREENS and not (suffix and str(path).endswith(suffix)):
            n, screen = SCREENS[slug]
            if n not in heads:
                heads[n] = head_bytes(path, n)
            if not screen(heads[n]):
                continue
        out.append(slug)
    return out
