"""Contract tests over every reader in READERS: schema-valid output, bad input errors, detection."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import traceanalyze as ta
from traceanalyze import schema
from traceanalyze.errors import MalformedInput, TraceanalyzeError, UnknownFormat
from traceanalyze.readers import READERS, detect_format

from .conftest import FIXTURES, SHARED_SETS, SHARED_TRACES, all_shared_files

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


# ../shared/sets/rocm/<dir>: the AMD ROCm samples (kept out of ../shared/traces, see its MANIFEST);
# a folder holds one format, but rocprof_csv holds rocprof v1's results.csv, .db and .stats.csv.
ROCM_DIR_TO_SLUG = {
    "rocprofv3_json": "rocprofv3_json",
    "rpd": "rpd",
    "rocprof_csv": "rocprof_csv",
    "rocm_smi": "rocm_smi_csv",
}


def _rocm_files() -> list[tuple[Path, str]]:
    root = SHARED_SETS / "rocm"
    if not root.exists():
        return []
    out = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.suffix == ".md" or p.name.endswith(".stats.csv"):
            continue  # results.stats.csv is refused (tests/test_rocprof_csv.py)
        slug = "rocprof_sqlite" if p.suffix == ".db" else ROCM_DIR_TO_SLUG[p.parent.name]
        out.append((p, slug))
    return out


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
    assert str(p) in msg and "format=SLUG" in msg
    for slug in SLUGS:
        assert slug in msg


def _real_files() -> list[tuple[Path, str]]:
    out = []
    for p in all_shared_files():
        out.append((p, DIR_TO_SLUG[p.parent.name]))
    for p in _fixture_files():
        slug = p.parent.name.split("-", 1)[0]
        out.append((p, slug))
    return out + _rocm_files()


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


# Reader options, written out by hand: what each reader's documentation says it takes.
OPTIONS = {
    "smi_csv": {"tz", "fields", "interval_ms"},
    "nsys_sqlite": {"engine", "workers"},
    "nsys_rep": {"engine", "workers"},
    "mlperf_log": {"system"},
}


@pytest.mark.parametrize("slug", SLUGS)
def test_reader_options_are_its_keyword_parameters(slug: str) -> None:
    """A reader's signature is its option declaration: no **kwargs that would accept anything."""
    import inspect

    params = list(inspect.signature(READERS[slug].function).parameters.values())
    assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(
        p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
        for p in params
    )
    assert READERS[slug].options == OPTIONS.get(slug, set())


@pytest.mark.parametrize("slug", SLUGS)
def test_an_option_the_reader_does_not_take_is_a_clean_error(tmp_path: Path, slug: str) -> None:
    from traceanalyze.errors import UnsupportedOption

    p = tmp_path / "x"
    p.write_bytes(b"anything")
    with pytest.raises(UnsupportedOption) as e:
        ta.read(p, format=slug, no_such_option=1)
    assert str(e.value).startswith(f"{p}: option 'no_such_option' is taken by no reader")


def _overflowing_cast(path: object, **options: object) -> None:
    import polars as pl

    pl.Series("x", [float("inf")]).cast(pl.Int64)  # InvalidOperationError, as from 1e400 s


def _python_overflow(path: object, **options: object) -> None:
    int(float("inf"))  # OverflowError


@pytest.mark.parametrize("raiser", [_overflowing_cast, _python_overflow])
@pytest.mark.parametrize("slug", SLUGS)
def test_unchecked_overflow_in_any_reader_is_malformed_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slug: str, raiser
) -> None:
    """The dispatch's net: a value a reader did not check cannot leave as a traceback."""
    module = READERS[slug].module
    monkeypatch.setattr(module, f"read_{slug}", raiser)
    p = tmp_path / "big.txt"
    p.write_bytes(b"whatever")
    with pytest.raises(MalformedInput) as e:
        ta.read(p, format=slug)
    msg = str(e.value)
    assert msg.startswith(f"{p}: cannot parse as {slug}: ")
    assert "\n" not in msg


@pytest.mark.parametrize("slug", SLUGS)
def test_an_error_raised_without_the_path_gets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slug: str
) -> None:
    def raiser(path: object, **options: object) -> None:
        raise MalformedInput("bad cell", table="t")

    monkeypatch.setattr(READERS[slug].module, f"read_{slug}", raiser)
    p = tmp_path / "f.bin"
    p.write_bytes(b"x")
    with pytest.raises(MalformedInput, match=rf"^{p}, table t: bad cell$"):
        ta.read(p, format=slug)


def _shared_with_suffix(*suffixes: str) -> list[Path]:
    return [p for p in all_shared_files() if p.name.endswith(suffixes)]


@pytest.mark.parametrize("src", _shared_with_suffix(".gz"), ids=lambda p: p.name)
def test_truncated_gzip_is_reported_as_such(tmp_path: Path, src: Path) -> None:
    """Cut anywhere, a gzip trace says "truncated gzip", never "no reader recognizes"."""
    data = src.read_bytes()
    for n in (20, 100, 1500, len(data) // 2, len(data) - 1):
        p = tmp_path / f"cut{n}{''.join(src.suffixes)}"
        p.write_bytes(data[:n])
        with pytest.raises(MalformedInput, match=r"truncated gzip \(no end of stream\)$"):
            ta.read(p)


@pytest.mark.parametrize("src", _shared_with_suffix(".sqlite", ".sql"), ids=lambda p: p.name)
def test_truncated_sqlite_is_reported_as_such(tmp_path: Path, src: Path) -> None:
    """Cut anywhere, an SQLite export says "unreadable SQLite database"; even a cut in pages
    no query touches (SQLite would read them as zeros) is caught by the header's page count."""
    data = src.read_bytes()
    for n in (50, 4096, len(data) // 2, len(data) - 1):
        p = tmp_path / f"cut{n}.sqlite"
        p.write_bytes(data[:n])
        with pytest.raises(MalformedInput, match=r": unreadable SQLite database"):
            ta.read(p)


def test_corrupt_gzip_is_reported_as_such(tmp_path: Path) -> None:
    import gzip as gz

    body = gz.compress(b"neither json nor csv " * 20000)
    bad = bytearray(body)
    for i in range(200, 260):  # garble the deflate stream early on
        bad[i] ^= 0xFF
    p = tmp_path / "x.gz"
    p.write_bytes(bytes(bad))
    with pytest.raises(MalformedInput, match=r"corrupt gzip"):
        detect_format(p)
