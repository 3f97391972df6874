"""Contract tests over every reader in READERS: schema-valid output, bad input errors, detection."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput, TraceanalyzeError, UnknownFormat
from traceanalyze.readers import READERS, detect_format

from .conftest import FIXTURES, SHARED_TRACES, all_shared_files

SLUGS = list(READERS)

# The shared traces' directories name their format.
DIR_TO_SLUG = {
    "nvprof_csv": "nvprof_csv",
    "nvprof_sqlite": "nvprof_sqlite",
    "nsys_sqlite": "nsys_sqlite",
    "ncu_csv": "ncu_csv",
    "kineto_json": "kineto_json",
    "smi_logs": "smi_csv",
}


def _fixture_files() -> list[Path]:
    """Project fixtures live in fixtures/<slug>-<app>-<what>/ (the slug prefix names the format)."""
    out = []
    for d in sorted(FIXTURES.glob("*-*")):
        if d.is_dir():
            out += [p for p in sorted(d.iterdir()) if p.is_file() and p.suffix not in {".md"}]
    return out


@pytest.mark.parametrize("slug", SLUGS)
def test_empty_file_raises_malformed(tmp_path: Path, slug: str) -> None:
    p = tmp_path / "empty"
    p.write_bytes(b"")
    with pytest.raises(MalformedInput) as e:
        ta.read(p, format=slug)
    assert str(p) in str(e.value)
    assert not READERS[slug].sniff(p)


@pytest.mark.parametrize("slug", SLUGS)
def test_garbage_raises_a_traceanalyze_error(tmp_path: Path, slug: str) -> None:
    p = tmp_path / "garbage.bin"
    p.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(TraceanalyzeError) as e:
        ta.read(p, format=slug)
    assert str(p) in str(e.value)
    assert "\n" not in str(e.value)
    assert not READERS[slug].sniff(p)


@pytest.mark.parametrize("slug", SLUGS)
def test_gzip_of_garbage_is_not_claimed(tmp_path: Path, slug: str) -> None:
    p = tmp_path / "g.gz"
    p.write_bytes(gzip.compress(b"hello world\n" * 10))
    assert not READERS[slug].sniff(p)


def test_detect_format_none_lists_candidates(tmp_path: Path) -> None:
    p = tmp_path / "x.txt"
    p.write_text("nothing to see\n")
    with pytest.raises(UnknownFormat) as e:
        detect_format(p)
    msg = str(e.value)
    assert str(p) in msg and "--format" in msg
    for slug in SLUGS:
        assert slug in msg


def _real_files() -> list[tuple[Path, str]]:
    out = []
    for p in all_shared_files():
        out.append((p, DIR_TO_SLUG[p.parent.name]))
    for p in _fixture_files():
        slug = p.parent.name.split("-", 1)[0]
        out.append((p, slug))
    return out


REAL = _real_files()


@pytest.mark.skipif(not SHARED_TRACES.exists(), reason="../shared/traces is absent")
def test_every_shared_directory_has_a_reader() -> None:
    missing = sorted({s for _, s in REAL if s not in READERS})
    assert not missing, f"no reader registered for {missing}"


@pytest.mark.parametrize("path,slug", REAL, ids=[p.name for p, _ in REAL])
def test_detect_and_read_every_real_file(path: Path, slug: str) -> None:
    if slug not in READERS:
        pytest.skip(f"reader {slug} not registered")
    assert detect_format(path) == slug
    t = ta.read(path)
    for name, df in t.items():
        assert schema.validate(name, df) == [], name
    src = t.sources.row(0, named=True)
    assert src["format"] == slug and src["sha256"] and src["tool"]
    assert sum(df.height for name, df in t.items() if name != "sources") > 0
