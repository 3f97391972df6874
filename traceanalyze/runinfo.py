"""What a `collect` run's manifest says about the sources it wrote: the file `manifest.json` (or
`manifest.node<N>.json`) beside each source's file, its `config` (image size, warm-up, ...).

I/O, so not an analysis: `adapters.ops` asks here and hands the value to the pure function.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import NotAnswerable

MANIFEST_GLOB = "manifest*.json"


def run_config(path: str) -> dict[str, Any] | None:
    """`config` of the collect manifest beside `path` (None when there is none, or it is not a
    collect manifest)."""
    folder = Path(path).parent
    for m in sorted(folder.glob(MANIFEST_GLOB)) if folder.is_dir() else []:
        try:
            data = json.loads(m.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        cfg = data.get("config") if isinstance(data, dict) else None
        if isinstance(cfg, dict):
            return cfg
    return None


def run_configs(paths: Mapping[str, str]) -> dict[str, dict[str, Any] | None]:
    """`run_config` of each source (`source_id -> file path`), each directory read once (a store
    of a thousand files of one directory lists it once, not a thousand times)."""
    by_folder: dict[Path, dict[str, Any] | None] = {}
    out: dict[str, dict[str, Any] | None] = {}
    for sid, path in paths.items():
        folder = Path(path).parent
        if folder not in by_folder:
            by_folder[folder] = run_config(path)
        out[sid] = by_folder[folder]
    return out


def image_size(paths: Mapping[str, str]) -> int:
    """The image side, in pixels, the run of these sources (`source_id -> file path`) trained
    at, from its manifest; `NotAnswerable` when no manifest says it or they disagree. FLOPs per
    image grow with its area (64 px: 1/12 of 224 px), so it is never assumed."""
    sizes: dict[int, list[str]] = {}
    configs = run_configs(paths)
    for sid, path in paths.items():
        cfg = configs[sid]
        size = cfg.get("image_size") if cfg else None
        if isinstance(size, int) and size > 0:
            sizes.setdefault(size, []).append(path)
    if len(sizes) == 1:
        return next(iter(sizes))
    if not sizes:
        files = ", ".join(sorted(paths.values())) or "these sources"
        raise NotAnswerable(
            f"image size unknown: no collect manifest (manifest.json with config.image_size) "
            f"beside {files}; give image_size=N (224 for ImageNet-size training)"
        )
    raise NotAnswerable(
        "sources trained at different image sizes ("
        + ", ".join(f"{s} px: {len(p)} files" for s, p in sorted(sizes.items()))
        + "); give image_size=N, or one run at a time (source=ID)"
    )


def first_steady(paths: Mapping[str, str]) -> int | None:
    """The run's own `--warmup` (iterations numbered below it are warm-up) when every source
    has a collect manifest and they agree; else None (`analyses.warmup`'s rule then counts)."""
    found: set[int] = set()
    for cfg in run_configs(paths).values():
        w = cfg.get("warmup") if cfg else None
        if not isinstance(w, int) or w < 0:
            return None
        found.add(w)
    return found.pop() if len(found) == 1 else None


# collect's file names: iterations_bs<B>_rank<R>.csv, torch_bs<B>_rank<R>.<pid>.pt.trace.json.gz,
# nsys_bs<B>_rank<R>…, ncu_bs<B>_rank<R>…
_BS_RANK = re.compile(r"_bs(\d+)_rank(\d+)\b")


def gpu_run_keys(paths: Mapping[str, str]) -> dict[str, str | None]:
    """What names each source's GPU-run of a collect run: the manifest's directory, batch size
    and rank (from collect's file names); None when the file is not from a collect run (no
    manifest beside it) or its name says neither."""
    configs = run_configs(paths)
    out: dict[str, str | None] = {}
    for sid, path in paths.items():
        m = _BS_RANK.search(Path(path).name)
        ok = m is not None and configs[sid] is not None
        out[sid] = (
            f"{Path(path).parent.resolve()}|bs{m.group(1)}|rank{m.group(2)}" if m and ok else None
        )
    return out


def located(path: str, store_root: str | None) -> str:
    """`path` as recorded at ingest, found again: as is when it exists, else (a relative path
    recorded from another directory) beside the store's directory, where collect puts them."""
    if store_root is None or Path(path).exists() or Path(path).is_absolute():
        return path
    beside = _store_parent(os.getcwd(), store_root) / Path(path).name
    return str(beside) if beside.exists() else path


@functools.lru_cache(maxsize=64)
def _store_parent(cwd: str, store_root: str) -> Path:
    """The store's parent directory, resolved once per store and working directory (not once
    per source: a store of 10,000 sources resolved it 10,000 times)."""
    return (Path(cwd) / store_root).resolve().parent


__all__ = ["first_steady", "gpu_run_keys", "image_size", "located", "run_config", "run_configs"]
