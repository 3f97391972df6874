"""Stage a big file while its SHA-256 is computed, for `store.stage_file` (every ingest).

A source's id is its file's SHA-256, and `ingest` skips a file whose id the store (or an earlier
file of the same call) already has. Hashing before reading costs the whole file once more before
the read starts (~0.7-1 s per GB on the project's 2-core machine, SHA-NI included). From
`HASH_ALONGSIDE_BYTES` on, the hash is computed in a thread instead (file reads and `hashlib`
release the GIL) while the reader reads:

* nothing needs the id before the first chunk: the sink names a table's directory by the source
  when it opens its first writer (`sink.TableSink`), and `readers.stream` asks for the hash at
  its first chunk, waiting for it if need be;
* once the hash is in, a reader that polls `check_stop` (the Kineto reader, every 8 MiB) stops
  as soon as the file turns out to be known: skipping a 1 GB trace costs about the hash, as
  before; a reader that does not poll is stopped at its first chunk;
* a file found to be known gets the result "unchanged", and what was staged for it is dropped;
* extra work for the read (the Kineto reader's helper process, `kineto.split`) starts once the
  hash is in and the file is not known (`read_settled`), so that skipping a file costs no
  more than it did: the hash on one core and the read begun meanwhile on the other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import polars as pl

# Smaller files are hashed first: a thread would cost more than it saves.
HASH_ALONGSIDE_BYTES = 64 << 20


class _Store(Protocol):
    """What this module needs of `store.Store` (named here, not imported: `store` imports this)."""

    def has_source(self, source_id: str) -> bool: ...

    def stage_stream(
        self,
        source_id: str | Callable[[], str],
        produce: Callable[[Path], Iterable[tuple[str, pl.DataFrame]]],
        *,
        replace_existing: bool = False,
    ) -> tuple[Any, dict[str, int]]: ...

    def discard(self, staged: Any) -> None: ...


def stage_hashing(
    path: str,
    fmt: str,
    store: _Store,
    *,
    force: bool,
    options: dict[str, Any],
    on_start: Callable[[str], None] | None,
    skip: Callable[[str], bool] | None,
) -> tuple[Any, str, str, dict[str, int]]:
    """`stage_file` for a file not hashed yet: read it and hash it at once (module docstring).
    `skip(source_id)` true: the caller has the source already (as the store having it).
    Returns the Staged (None when the source is known), its id, the status ("unchanged",
    "ingested", "replaced") and the rows per table."""
    from ..readers import Sha256Thread, source_id_for
    from ..readers import stream as stream_one
    from ..readers.common.core import ReadStopped, stop_reading_when

    hashing = Sha256Thread(path)

    def sid() -> str:
        return source_id_for(hashing.result())

    @functools.cache
    def is_known() -> bool:
        """Whether to skip the file (asked once the hash is in, answered once)."""
        s = sid()
        return bool(skip is not None and skip(s)) or (not force and store.has_source(s))

    def produce(work: Path) -> Iterator[tuple[str, pl.DataFrame]]:
        for item in stream_one(path, format=fmt, sha256=hashing.result, workdir=work, **options):
            if is_known():
                raise ReadStopped()
            yield item

    if on_start is not None:
        on_start(path)
    try:
        with stop_reading_when(
            lambda: hashing.done() and is_known(), lambda: hashing.done() and not is_known()
        ):
            staged, counts = store.stage_stream(sid, produce, replace_existing=force)
    except ReadStopped:
        return None, sid(), "unchanged", {}
    except BaseException:
        hashing.cancel()
        raise
    if is_known():  # no chunk at all came, so nothing asked
        store.discard(staged)
        return None, sid(), "unchanged", {}
    return staged, sid(), "replaced" if store.has_source(sid()) else "ingested", counts
