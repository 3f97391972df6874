"""`.ncu-rep` reading through `ncu_report`, on a stand-in module (tests/standins/ncu_report.py)
put on sys.path by a fixture: the success path of the reader's `.ncu-rep` module runs here without
Nsight Compute. The stand-in's API is checked against the real module's: against the names of
ncu-report 2026.3.1 listed below (taken from that wheel with `dir()`), against every call the
reader makes (found in its source), and against the real module itself where it is importable.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import TOOLS_HOWTO, tool_path

import traceanalyze as ta
from traceanalyze.errors import MalformedInput, TraceanalyzeError
from traceanalyze.readers import READERS, detect_format

STANDINS = Path(__file__).resolve().parent / "standins"
# The module of the ncu reader that calls ncu_report (found through the registry, wherever the
# reader package keeps it).
reader_module = sys.modules[READERS["ncu_csv"].module._report_long.__module__]

# Public members of ncu-report 2026.3.1 (PyPI wheel, `dir()` of each class), the part the
# stand-in may mimic: it must define no name these lack.
REAL_API: dict[str, set[str]] = {
    "module": {"load_report", "IContext", "IRange", "IAction", "IMetric"},
    "IContext": {"backend", "controller", "frontend", "get_version", "handle_exception"}
    | {"num_ranges", "range_by_idx"},
    "IRange": {"action_by_idx", "actions_by_nvtx", "num_actions"},
    "IAction": {"NameBase_DEMANGLED", "NameBase_FUNCTION", "NameBase_MANGLED"}
    | {f"WorkloadType_{w}" for w in ("CMDLIST", "GRAPH", "KERNEL", "RANGE", "SUBGRID_SCHEDULE")}
    | {"add_double_metric", "add_integer_metric", "add_metric", "add_string_metric"}
    | {"metric_by_name", "metric_names", "name", "nvtx_state", "ptx_by_pc", "rule_results"}
    | {"rule_results_as_dicts", "sass_by_pc", "sections", "source_files", "source_info"}
    | {"source_markers", "timed_warp_samples", "timelines", "workload_type"},
    "IMetric": {f"ValueKind_{k}" for k in ("ANY", "DOUBLE", "FLOAT", "STRING", "UINT32")}
    | {"ValueKind_UINT64", "ValueKind_UNKNOWN"}
    | {"as_double", "as_string", "as_uint64", "correlation_ids", "description"}
    | {"has_correlation_ids", "has_value", "kind", "label", "metric_subtype", "metric_type"}
    | {"name", "num_instances", "rollup_operation", "unit", "value"},
}
# Constant values in 2026.3.1.
REAL_CONSTANTS = {
    ("IMetric", "ValueKind_UNKNOWN"): 0,
    ("IMetric", "ValueKind_ANY"): 1,
    ("IMetric", "ValueKind_STRING"): 2,
    ("IMetric", "ValueKind_FLOAT"): 3,
    ("IMetric", "ValueKind_DOUBLE"): 4,
    ("IMetric", "ValueKind_UINT32"): 5,
    ("IMetric", "ValueKind_UINT64"): 6,
    ("IAction", "NameBase_FUNCTION"): 0,
    ("IAction", "NameBase_DEMANGLED"): 1,
    ("IAction", "NameBase_MANGLED"): 2,
}
# What each variable of the reader holds.
READER_VARS = {
    "ncu_report": "module",
    "ctx": "IContext",
    "rng": "IRange",
    "action": "IAction",
    "metric": "IMetric",
}


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    mod = importlib.import_module("ncu_report")
    assert Path(str(mod.__file__)).parent == STANDINS
    monkeypatch.setitem(sys.modules, "ncu_report", mod)  # removed again after the test
    return mod


def _installed_ncu_report() -> Path | None:
    """The directory of NVIDIA's own `ncu_report.py` beside the installed ncu: the toolkit's
    `<ncu dir>/extras/python`, or Debian's `nsight-compute` package, which puts it (and
    `_ncu_report.so`) in /usr/lib/python3/dist-packages."""
    ncu = tool_path("ncu")
    cands = [] if ncu is None else [Path(os.path.realpath(ncu)).parent / "extras" / "python"]
    cands.append(Path("/usr/lib/python3/dist-packages"))
    return next((d for d in cands if (d / "ncu_report.py").is_file()), None)


@pytest.fixture
def real_ncu_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """NVIDIA's `ncu_report` from the installed Nsight Compute (`make test-profilers`), imported
    from a directory holding only its two files (so no other system package shadows the
    venv's); skipped when Nsight Compute is not installed."""
    d = _installed_ncu_report()
    if d is None:
        pytest.skip("needs Nsight Compute's ncu_report (extras/python); " + TOOLS_HOWTO)
    only = tmp_path / "ncu_report_only"
    only.mkdir()
    for f in d.iterdir():
        if f.name == "ncu_report.py" or f.name.startswith("_ncu_report"):
            (only / f.name).symlink_to(f)
    monkeypatch.syspath_prepend(str(only))
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    mod = importlib.import_module("ncu_report")
    monkeypatch.setitem(sys.modules, "ncu_report", mod)
    return mod


@pytest.fixture(params=["standin", pytest.param("real", marks=pytest.mark.requires_ncu)])
def any_ncu_report(request: pytest.FixtureRequest) -> ModuleType:
    """The stand-in, then the real module where installed: a test using it must agree on both."""
    name = "standin" if request.param == "standin" else "real_ncu_report"
    mod: ModuleType = request.getfixturevalue(name)
    return mod


def public(obj: object) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def reader_calls() -> dict[str, set[str]]:
    """Attributes the reader reads off each ncu_report object, from its source."""
    tree = ast.parse(Path(reader_module.__file__).read_text("utf-8"))
    used: dict[str, set[str]] = {k: set() for k in REAL_API}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if isinstance(v, ast.Name) and v.id in READER_VARS:
            used[READER_VARS[v.id]].add(node.attr)
        elif (
            isinstance(v, ast.Attribute)
            and isinstance(v.value, ast.Name)
            and v.value.id == "ncu_report"
            and v.attr in REAL_API
        ):
            used[v.attr].add(node.attr)  # ncu_report.IMetric.ValueKind_STRING
    return used


def test_standin_offers_only_real_names_and_every_call_the_reader_makes(standin) -> None:
    calls = reader_calls()
    assert calls["IMetric"] >= {"has_value", "kind", "unit", "as_double", "ValueKind_STRING"}
    for cls, names in calls.items():
        assert names <= REAL_API[cls], (cls, names - REAL_API[cls])
        obj = standin if cls == "module" else getattr(standin, cls)
        assert names <= public(obj), (cls, names - public(obj))
        mine = public(obj) if cls != "module" else public(obj) - {"annotations", "json", "Any"}
        mine -= {"Path"}
        assert mine <= REAL_API[cls], (cls, mine - REAL_API[cls])
    for (cls, name), value in REAL_CONSTANTS.items():
        assert getattr(getattr(standin, cls), name) == value


@pytest.mark.requires_ncu
def test_standin_matches_the_real_module_where_installed(standin, request) -> None:
    real = request.getfixturevalue("real_ncu_report")
    assert Path(str(real.__file__)).parent != STANDINS
    older = {} if hasattr(real.IMetric, "unit") else OLDER_LACKS
    for cls in ("IContext", "IRange", "IAction", "IMetric"):
        lacks = public(getattr(standin, cls)) - public(getattr(real, cls))
        assert lacks == older.get(cls, set()), cls
    for (cls, name), value in REAL_CONSTANTS.items():
        assert getattr(getattr(real, cls), name) == value
    # every call the reader makes exists in the real module too, but for what an older one
    # lacks, which the reader refuses with one line (test_an_ncu_report_without_units)
    for cls, names in reader_calls().items():
        obj = real if cls == "module" else getattr(real, cls)
        assert names - public(obj) == older.get(cls, set()), cls


# What ncu_report 2022.3 (Debian 12's nsight-compute) lacks of the calls the reader makes.
OLDER_LACKS = {"IMetric": {"unit"}}


def test_an_ncu_report_without_units_is_refused(standin, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delattr(standin.IMetric, "unit")
    p = tmp_path / "run.ncu-rep"
    p.write_text(json.dumps(REPORT))
    with pytest.raises(TraceanalyzeError, match=r"no IMetric.unit\(\).*ncu --import") as e:
        ta.read(p)
    assert str(p) in str(e.value)


# Two ranges, three launches: units in several spellings, a unit the reader does not know on a
# metric nothing needs (kept as given), a string metric (skipped: no number), a metric without a
# value (skipped).
REPORT = {
    "ranges": [
        {
            "actions": [
                {
                    "name": "gemm",
                    "demangled": "gemm(float const*, float*, int)",
                    "mangled": "_Z4gemmPKfPfi",
                    "metrics": {
                        "gpu__time_duration.sum": {"unit": "usecond", "kind": "DOUBLE",
                                                   "value": 12.5},
                        "dram__bytes.sum": {"unit": "Kbyte", "kind": "DOUBLE", "value": 2.048},
                        "launch__cluster_max_active": {"unit": "cluster", "kind": "UINT32",
                                                       "value": 8},
                        "launch__func_cache_config": {"unit": "", "kind": "STRING",
                                                      "value": "CachePreferNone"},
                        "sm__throughput.avg.pct_of_peak_sustained_elapsed": {
                            "unit": "%", "kind": "DOUBLE", "value": None},
                    },
                }
            ]
        },
        {
            "actions": [
                {
                    "name": "relu",
                    "demangled": "relu(float*)",
                    "metrics": {
                        "gpu__time_duration.sum": {"unit": "nsecond", "kind": "UINT64",
                                                   "value": 3000},
                        "launch__registers_per_thread": {"unit": "register/thread",
                                                         "kind": "UINT32", "value": 16},
                    },
                },
                {
                    "name": "copy",
                    "metrics": {
                        "gpu__time_duration.sum": {"unit": "msecond", "kind": "DOUBLE",
                                                   "value": 0.25},
                    },
                },
            ]
        },
    ]
}  # fmt: skip
NS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6}


def test_ncu_rep_success_path(standin, tmp_path: Path) -> None:
    p = tmp_path / "run.ncu-rep"
    p.write_text(json.dumps(REPORT))
    assert detect_format(p) == "ncu_csv"
    t = ta.read(p)
    launches = [a for r in REPORT["ranges"] for a in r["actions"]]
    # kernel_id counts launches over all ranges, in report order; names demangled as in the CSV
    want_names = [a.get("demangled", a["name"]) for a in launches]
    assert t.kernels.select("kernel_id", "name").rows() == list(enumerate(want_names))
    durs = [a["metrics"]["gpu__time_duration.sum"] for a in launches]
    assert t.kernels["duration_ns"].to_list() == [round(d["value"] * NS[d["unit"]]) for d in durs]
    got = {
        (r["kernel_id"], r["metric_name"]): (r["unit"], r["value"])
        for r in t.kernel_metrics.iter_rows(named=True)
    }
    want = {}
    for kid, a in enumerate(launches):
        for m, spec in a["metrics"].items():
            if spec["value"] is None or spec["kind"] == "STRING":
                continue
            u, v = spec["unit"], float(spec["value"])
            if u in NS:
                u, v = "ns", v * NS[u]
            elif u == "Kbyte":
                u, v = "bytes", v * 1000
            want[(kid, m)] = (u, v)
    assert set(got) == set(want)
    for k, (u, v) in want.items():
        assert got[k][0] == u and got[k][1] == pytest.approx(v), k
    assert got[(0, "launch__cluster_max_active")] == ("cluster", 8.0)


def test_ncu_rep_that_is_no_report(any_ncu_report, tmp_path: Path) -> None:
    # The real module loads a file that is no report as an empty one (no ranges), as the
    # stand-in does; the reader then says so. (A real .ncu-rep with kernels needs a GPU to make,
    # so the success path above runs on the stand-in only.)
    p = tmp_path / "junk.ncu-rep"
    p.write_bytes(b"\x00\x01not a report" * 10)
    with pytest.raises(MalformedInput, match="cannot load any profiled kernel"):
        ta.read(p, format="ncu_csv")
