"""The package's shape, checked on its source (docs/architecture.md): readers live in one package
per format family and import only their own family and `readers/common`; nothing imports a
private name across packages; no import cycle among the readers, type-only and function-level
imports included; the registry's modules exist and follow the reader protocol."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from conftest import ROOT

from traceanalyze.readers import READERS

PKG = ROOT / "traceanalyze"
READERS_DIR = PKG / "readers"
FAMILIES = sorted(
    p.name
    for p in READERS_DIR.iterdir()
    if p.is_dir() and (p / "__init__.py").exists() and p.name != "common"
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def imports_of(path: Path) -> list[tuple[str, str, int]]:
    return imports_in(path.read_text(), module_name(path), is_pkg=path.name == "__init__.py")


def imports_in(
    text: str, me: str, *, is_pkg: bool, known: dict[str, Path] | dict[str, str] = MODULES
) -> list[tuple[str, str, int]]:
    """(module imported, name imported or '', line) for every import in the source, wherever it
    stands (module level, `if TYPE_CHECKING:`, inside a function)."""
    out: list[tuple[str, str, int]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = me.split(".") if is_pkg else me.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                # `from pkg import submodule` imports the submodule, not a name of pkg
                out.append((sub, "", node.lineno) if sub in known else (mod, a.name, node.lineno))
    return out


def family_of(mod: str) -> str | None:
    parts = mod.split(".")
    if parts[:2] != ["traceanalyze", "readers"] or len(parts) < 3:
        return None
    return parts[2]


def test_every_reader_module_is_in_a_family_package() -> None:
    flat = sorted(p.name for p in READERS_DIR.glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"modules left in the flat readers folder: {flat}"
    for slug, reader in READERS.items():
        family = reader.module_name.split(".")[0]
        assert family in FAMILIES, (slug, reader.module_name)
        mod = importlib.import_module(f"traceanalyze.readers.{reader.module_name}")
        assert callable(getattr(mod, f"read_{slug}")), slug
        assert callable(mod.sniff), slug
        assert mod.__doc__, f"{reader.module_name} has no docstring naming its tool"


@pytest.mark.parametrize("path", sorted(READERS_DIR.rglob("*.py")), ids=lambda p: module_name(p))
def test_a_format_imports_only_its_own_family_and_common(path: Path) -> None:
    me = module_name(path)
    mine = family_of(me)
    for target, _name, line in imports_of(path):
        fam = family_of(target)
        if fam is None:
            continue  # outside the readers (errors, schema, tables) or the registry itself
        if mine == "common":
            assert fam == "common", f"{me}:{line}: common imports the format module {target}"
        elif mine is not None:
            assert fam in (mine, "common"), f"{me}:{line}: imports another family's {target}"


def test_no_private_name_is_imported_across_packages() -> None:
    """A name with a leading underscore is its module's (or its package's) own: importing it
    from another package is reaching into that package's internals."""
    bad = []
    for mod, path in MODULES.items():
        my_pkg = mod.rsplit(".", 1)[0] if path.name != "__init__.py" else mod
        for target, name, line in imports_of(path):
            if not target.startswith("traceanalyze") or target not in MODULES:
                continue
            tpkg = target.rsplit(".", 1)[0] if MODULES[target].name != "__init__.py" else target
            private = (name.startswith("_") and not name.startswith("__")) or any(
                part.startswith("_") and not part.startswith("__")
                for part in target.split(".")[len(tpkg.split(".")) :]
            )
            if private and tpkg != my_pkg and family_of(mod) is not None:
                bad.append(f"{mod}:{line} imports {target}{'.' + name if name else ''}")
    assert bad == []


def edges_of(modules: dict[str, Path]) -> dict[str, set[str]]:
    return {
        m: {t for t, _, _ in imports_of(p) if t in modules and t != m} for m, p in modules.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_among_the_readers() -> None:
    readers = {m: p for m, p in MODULES.items() if family_of(m) is not None}
    assert len(readers) > 30
    assert cycles(edges_of(readers)) == []


def test_the_cycle_finder_sees_function_level_and_type_only_imports() -> None:
    sources = {
        "traceanalyze.x.a": "from . import b\n",
        "traceanalyze.x.b": "def f():\n    from .c import g\n",
        "traceanalyze.x.c": "if TYPE_CHECKING:\n    import traceanalyze.x.a\n",
        "traceanalyze.x.d": "from .a import h\n",
    }
    edges = {
        m: {t for t, _, _ in imports_in(src, m, is_pkg=False, known=sources) if t in sources}
        for m, src in sources.items()
    }
    assert edges["traceanalyze.x.d"] == {"traceanalyze.x.a"}
    assert cycles(edges) == [["traceanalyze.x.a", "traceanalyze.x.b", "traceanalyze.x.c"]]


def test_modules_stay_under_600_lines_in_readers_and_the_store() -> None:
    checked = [p for p in READERS_DIR.rglob("*.py")] + [
        PKG / n for n in ("store.py", "store_files.py", "manifest.py", "_safefs.py", "sink.py")
    ]
    long = {module_name(p): n for p in checked if (n := p.read_text().count("\n")) > 600}
    assert long == {}
