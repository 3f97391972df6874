"""Shared test helpers: paths to real captures (../shared/traces) and the project's fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"
FIXTURES = ROOT / "fixtures"


def shared(rel: str) -> Path:
    """Path of a real capture under ../shared/traces; skips the test when it is absent."""
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"../shared/traces/{rel} is absent (a fresh clone without ../shared)")
    return p


def fixture(rel: str) -> Path:
    p = FIXTURES / rel
    assert p.exists(), f"fixture {rel} missing from fixtures/"
    return p


def all_shared_files() -> list[Path]:
    if not SHARED_TRACES.exists():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.is_file() and p.suffix != ".md")


@pytest.fixture
def write(tmp_path: Path):
    """write(name, bytes_or_text) -> Path: a small inline input file."""

    def _write(name: str, content: bytes | str) -> Path:
        p = tmp_path / name
        p.write_bytes(content.encode() if isinstance(content, str) else content)
        return p

    return _write
