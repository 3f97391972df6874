"""The package's shape, checked on its source (docs/architecture.md): readers live in one package
per format family and import only their own family and `readers/common`; nothing imports a
private name across packages; analyses never take a `Dataset` nor import a reader, and families of
analyses are packages; the store is one package, the figures another; the registry's modules
exist and follow the reader protocol; modules stay under 600 lines; no import cycle anywhere,
type-only and function-level imports and the lazy registries' module strings included."""

from __future__ import annotations

import ast
import importlib
import re
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
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # lazy registries: "module:attribute" strings (`_LAZY`) and module names imported by
            # name (`COMMAND_MODULES`); not the bare package name (`resources.files(...)`)
            v = node.value
            if re.fullmatch(r"traceanalyze[\w.]*:\w+", v):
                out.append((v.split(":")[0], "", node.lineno))
            elif v in known and "." in v:
                out.append((v, "", node.lineno))
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


def test_modules_stay_under_600_lines() -> None:
    long = {m: n for m, p in MODULES.items() if (n := p.read_text().count("\n")) > 600}
    assert long == {}


def test_analyses_take_frames_never_a_dataset() -> None:
    """`analyses/` is pure: it imports neither `dataset` nor the adapters, and no parameter of
    its functions is a Dataset (the adapters choose the frames; docs/architecture.md)."""
    analyses = {m: p for m, p in MODULES.items() if m.startswith("traceanalyze.analyses")}
    assert len(analyses) > 15
    for mod, path in analyses.items():
        for target, _name, line in imports_of(path):
            assert not target.startswith(("traceanalyze.dataset", "traceanalyze.adapters")), (
                f"{mod}:{line} imports {target}"
            )
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in [*node.args.args, *node.args.kwonlyargs]:
                    ann = ast.unparse(arg.annotation) if arg.annotation else ""
                    assert "Dataset" not in ann, f"{mod}:{node.lineno} {node.name}({arg.arg})"


def test_no_analysis_imports_a_reader() -> None:
    """Analyses take frames, never a reader's module: what both need (the rank-name rule) lives in
    a neutral module outside `readers/` (`rank_names`)."""
    bad = [
        f"{mod}:{line} imports {target}"
        for mod, path in MODULES.items()
        if mod.startswith("traceanalyze.analyses")
        for target, _name, line in imports_of(path)
        if target == "traceanalyze.readers" or target.startswith("traceanalyze.readers.")
    ]
    assert bad == []
    assert "traceanalyze.rank_names" in MODULES


def test_families_of_analyses_are_packages() -> None:
    """A family of analyses with more than two modules is a package (`critical_path/`, `ranks/`),
    not prefixed modules side by side in `analyses/`."""
    flat = sorted(p.stem for p in (PKG / "analyses").glob("*.py"))
    grouped = [s for s in flat if s.startswith(("_cp", "critical_path", "rank", "straggler"))]
    assert grouped == []
    for family in ("critical_path", "ranks"):
        assert (PKG / "analyses" / family / "__init__.py").exists(), family


CP = "traceanalyze.analyses.critical_path"
# The critical path's stages, in the order its data flows through them (docs/architecture.md)
CP_STAGES = ("windows", "events", "graph", "path", "split", "whatif")


def stage_violations(stage: str, imports: list[tuple[str, str, int]]) -> list[str]:
    """The imports of a critical-path stage that reach a module of the package other than a
    stage before it: a later stage, `ranks`, or the entry (`__init__`) itself."""
    before = {f"{CP}.{s}" for s in CP_STAGES[: CP_STAGES.index(stage)]}
    return [
        f"{stage}:{line} imports {target}"
        for target, _name, line in imports
        if (target == CP or target.startswith(f"{CP}.")) and target not in before
    ]


def test_critical_path_stages_flow_one_way() -> None:
    """Inside the critical path the data flows one way, windows -> events -> graph -> path ->
    split -> whatif: each stage imports only the stages before it and never the package's entry
    (`__init__`, which calls each stage once per window) nor `ranks` (which may use them all).
    A new module of the package takes its place in this order first."""
    pkg = PKG / "analyses" / "critical_path"
    assert sorted(p.stem for p in pkg.glob("*.py")) == sorted({*CP_STAGES, "__init__", "ranks"})
    bad = [v for s in CP_STAGES for v in stage_violations(s, imports_of(pkg / f"{s}.py"))]
    assert bad == []
    entry = {t for t, _, _ in imports_of(pkg / "__init__.py")}
    assert {f"{CP}.{s}" for s in CP_STAGES} <= entry
    # the check flags a later stage, `ranks` and the entry, not an earlier stage
    text = "from .split import rows\nfrom . import ranks\nfrom . import WhatIf\n"
    text += "from .events import NONE\n"
    got = stage_violations("graph", imports_in(text, f"{CP}.graph", is_pkg=False))
    assert got == [
        f"graph:1 imports {CP}.split",
        f"graph:2 imports {CP}.ranks",
        f"graph:3 imports {CP}",
    ]


STORE_MODULES = ("files", "log", "lease", "hashing", "manifest", "sink", "_safefs")


def test_the_store_is_one_package() -> None:
    """The store's modules (transaction, files, log, leases, hashing, manifest, sink, the
    descriptor-safe file operations) live under `store/`, and nothing outside it reaches past
    the package's own names (`traceanalyze.store`)."""
    top = sorted(
        p.name
        for p in PKG.glob("*.py")
        if p.stem.startswith("store") or p.stem in ("manifest", "sink", "_safefs")
    )
    assert top == [], f"store modules outside store/: {top}"
    assert {f"traceanalyze.store.{m}" for m in STORE_MODULES} <= set(MODULES)
    bad = [
        f"{mod}:{line} imports {target}"
        for mod, path in MODULES.items()
        if mod != "traceanalyze.store" and not mod.startswith("traceanalyze.store.")
        for target, _name, line in imports_of(path)
        if target.startswith("traceanalyze.store.")
    ]
    assert bad == []


def test_the_figures_are_one_package() -> None:
    """Every figure is drawn in `plot/` (`ta.plot.<name>(result, path)` and its private modules):
    nothing else imports matplotlib, and there is no second figures folder."""
    assert not (PKG / "plots").exists() and (PKG / "plot" / "__init__.py").exists()
    bad = [
        f"{mod}:{line} imports {target}"
        for mod, path in MODULES.items()
        if mod != "traceanalyze.plot" and not mod.startswith("traceanalyze.plot.")
        for target, _name, line in imports_of(path)
        if target.split(".")[0] == "matplotlib"
    ]
    assert bad == []


def test_every_dataset_analysis_returns_a_result_class_or_a_frame() -> None:
    """`Dataset`'s analysis methods return a frozen class of `results.py` or a polars frame
    (never a bare tuple); each result class is a frozen dataclass."""
    import dataclasses

    from traceanalyze import results
    from traceanalyze.dataset import Dataset

    accessors = {"scan", "scan_all", "table", "source_ids", "all_source_ids", "names", "where"}
    accessors |= {"one_source", "from_files", "from_store", "from_tables", "active_devices"}
    kinds = {getattr(results, n) for n in results.__all__}
    checked = 0
    for name, fn in vars(Dataset).items():
        if name.startswith("_") or name in accessors or not callable(fn):
            continue
        ret = fn.__annotations__["return"]  # a string (postponed annotations)
        assert ret in results.__all__ or ret.startswith("pl."), (name, ret)
        checked += 1
    assert checked >= 20
    for kind in kinds:
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen, kind


# --- no import cycle anywhere -------------------------------------------------------------------


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [{"a", "b", "c"}]


def test_no_import_cycle_anywhere() -> None:
    """Every import counts: module level, function level, under `if TYPE_CHECKING:` (a cycle of
    type-only imports is still two modules that cannot be understood apart), and the lazy
    command registry's module strings."""
    g = {m: {t for t, _, _ in imports_of(p) if t in MODULES and t != m} for m, p in MODULES.items()}
    # the parse sees what matters: the command registry, a function-level and a type-only import
    assert "traceanalyze.cli.analyses" in g["traceanalyze.cli"]
    assert "traceanalyze.adapters.reports" in g["traceanalyze.dataset"]
    assert "traceanalyze.dataset" in g["traceanalyze"]  # `if TYPE_CHECKING:` in __init__
    assert cycles(g) == []


def test_functions_stay_under_60_lines() -> None:
    """No function (docstring included) over 60 lines: a longer one is split into named steps."""
    long = []
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1 if node.end_lineno else 0
                if n > 60:
                    long.append(f"{mod}:{node.lineno} {node.name} ({n} lines)")
    assert long == []
