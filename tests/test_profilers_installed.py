"""The collectors against the real profilers, on a machine without a GPU (`make test-profilers`
installs Debian 12's nsight-systems, nvidia-profiler and nsight-compute): `collect --device cpu`
under nsys end to end, nvprof and ncu failing with their own reason, the flags the collectors
build checked against each tool's `--help`, and no nsys process left behind. Skipped, with the
reason, where a tool is absent; the parts that need no profiler run everywhere."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import tool_path

import traceanalyze as ta
from traceanalyze.cli import main
from traceanalyze.collect import profilers as P
from traceanalyze.collect.nsys_steps import run_in_session
from traceanalyze.collect.run import CollectConfig, plan
from traceanalyze.errors import CollectError

SMALL = ["--device", "cpu", "--iterations", "3", "--batch-size", "2", "--image-size", "32"]


def running_nsys() -> set[int]:
    """Live (not zombie) processes whose program is nsys or one of its helpers (argv[0] under
    nsight-systems or named nsys*; not any command line that mentions "nsys", such as a test
    file's path): read from /proc here, with no help from the code under test."""
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            state = Path(f"/proc/{d}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        prog = cmd.split(b"\0", 1)[0]
        nsys = b"nsight-systems" in prog or os.path.basename(prog).startswith(b"nsys")
        if nsys and state != b"Z":
            out.add(int(d))
    return out


def collect(tmp_path: Path, profiler: str, run_id: str = "r"):
    args = ["collect", "--profiler", profiler, *SMALL, "--out", str(tmp_path), "--run-id", run_id]
    r = CliRunner().invoke(main, args)
    manifest = json.loads((tmp_path / run_id / "manifest.json").read_text())
    return r, manifest


def error_lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith("traceanalyze: error:")]


# --- nsys -------------------------------------------------------------------------------------


@pytest.mark.requires_nsys
@pytest.mark.requires_torch("torchvision")
def test_collect_cpu_nsys_end_to_end(tmp_path: Path) -> None:
    before = running_nsys()
    r, m = collect(tmp_path, "nsys")
    assert r.exit_code == 0, r.output
    run = tmp_path / "r"
    assert m["status"] == "completed" and m["failed_step"] is None
    version = subprocess.run(
        [str(tool_path("nsys")), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert m["versions"]["profiler"] == version
    assert not list(run.glob("*.qdstrm"))  # imported, then removed
    db = run / "nsys_bs2_rank0.sqlite"
    assert "nsys_bs2_rank0.sqlite" in m["ingested"]
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    counts = dict(
        con.execute("SELECT text, count(*) FROM NVTX_EVENTS WHERE eventType = 59 GROUP BY text")
    )
    con.close()
    # every step's four phases and the step itself, as in the PyTorch-profiler path
    assert {
        k: counts.get(k) for k in ("data", "forward", "backward", "optimizer")
    } == dict.fromkeys(("data", "forward", "backward", "optimizer"), 3)
    assert [counts.get(f"iteration {i}") for i in range(3)] == [1, 1, 1]
    markers = ta.Store(run / "store").scan("markers").collect()
    got = markers.group_by("name").len()
    assert dict(zip(got["name"], got["len"], strict=True)) == counts
    assert running_nsys() <= before  # no nsys process outlives collect


@pytest.mark.requires_nsys
@pytest.mark.requires_torch("torchvision")
def test_collect_nsys_failed_export_names_the_step(tmp_path: Path, monkeypatch) -> None:
    # the real nsys profiles; its export fails as nsys 2022.4 does on a newer report, leaving a
    # partial .sqlite, which must not reach the store
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "nsys"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = export ]; then\n'
        '  while [ "$#" -gt 1 ]; do [ "$1" = --output ] && out="$2"; shift; done\n'
        '  printf "SQLite format 3\\000partial" > "$out"; echo ProtobufParseException; exit 1\n'
        "fi\n"
        f'exec {tool_path("nsys")} "$@"\n'
    )
    wrapper.chmod(0o755)
    # the wrapper's importer is the real one: host-linux-x64/ beside the wrapper's bin/
    real = Path(str(tool_path("nsys")))
    while not (real.parent.parent / "host-linux-x64").is_dir() and real.is_symlink():
        real = real.parent / os.readlink(real)
    (tmp_path / "host-linux-x64").symlink_to(real.parent.parent / "host-linux-x64")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    r, m = collect(tmp_path / "runs", "nsys")
    assert r.exit_code == 1
    [line] = error_lines(r.output)
    assert "nsys export of nsys_bs2_rank0.nsys-rep exited with status 1" in line
    assert m["status"] == "failed" and m["failed_step"] == "export"
    run = tmp_path / "runs" / "r"
    assert not list(run.glob("*.sqlite")) and not (run / "store").exists()


@pytest.mark.requires_nsys
def test_ctrl_c_leaves_no_nsys_process(tmp_path: Path) -> None:
    before = running_nsys()
    argv = [str(tool_path("nsys")), "profile", "--trace=osrt", "--sample=none", "-o"]
    argv += [str(tmp_path / "r"), sys.executable, "-c", "import time; time.sleep(120)"]
    t0 = time.monotonic()

    def tick() -> None:
        if time.monotonic() - t0 > 4:  # nsys and its helpers are up by now
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_in_session(argv, {}, tmp_path / "log", on_tick=tick)
    assert running_nsys() <= before


def test_run_in_session_kills_what_escaped_the_session(tmp_path: Path) -> None:
    # a helper that calls setsid() and outlives its parent, as `nsys --start-agent` did
    mark = f"traceanalyze-test-{os.getpid()}"
    code = "import os, time; os.setsid(); time.sleep(300)"
    script = f"{sys.executable} -c '{code}' {mark} & sleep 1; exit 0"
    rc, killed = run_in_session(["sh", "-c", script], {}, tmp_path / "log")
    assert rc == 0 and len(killed) == 1
    alive = [d for d in os.listdir("/proc") if d.isdigit() and mark.encode() in _cmd(d)]
    assert alive == []


def _cmd(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


# --- nvprof and ncu without a GPU ----------------------------------------------------------------


@pytest.mark.requires_nvprof
@pytest.mark.requires_torch("torchvision")
def test_collect_cpu_nvprof_fails_with_nvprofs_reason(tmp_path: Path) -> None:
    r, m = collect(tmp_path, "nvprof")
    assert r.exit_code == 1
    [line] = error_lines(r.output)
    logs = list((tmp_path / "r").glob("nvprof_*.csv"))
    # nvprof's own words, as its log has them
    own = [ln for f in logs for ln in f.read_text().splitlines() if ln.startswith("========")]
    assert own and all(w in line for w in own)
    assert m["status"] == "failed" and m["failed_step"] == "profile"


@pytest.mark.requires_ncu
@pytest.mark.requires_torch("torchvision")
def test_collect_cpu_ncu_fails_with_ncus_reason(tmp_path: Path) -> None:
    r, m = collect(tmp_path, "ncu")
    assert r.exit_code == 1
    [line] = error_lines(r.output)
    text = (tmp_path / "r" / "batch_2.csv").read_text()
    own = [ln for ln in text.splitlines() if ln.startswith("==WARNING==")]
    assert own and all(w in line for w in own)
    assert m["status"] == "failed" and m["failed_step"] == "profile"


# --- the flags the collectors build exist in the installed tools -------------------------------


def _cfg(tmp_path: Path, **kw: object) -> CollectConfig:
    return CollectConfig(out=tmp_path, batch_sizes=(8,), iterations=4, run_id="f", **kw)  # type: ignore[arg-type]


def _missing(help_text: str, argv: list[str]) -> set[str]:
    known = P.help_flags(help_text)
    return {f for f in P.argv_flags(argv) if f not in known}


@pytest.mark.requires_nsys
def test_nsys_flags_exist(tmp_path: Path) -> None:
    nsys = str(tool_path("nsys"))
    profile = subprocess.run([nsys, "profile", "--help"], capture_output=True, text=True).stdout
    export = subprocess.run([nsys, "export", "--help"], capture_output=True, text=True).stdout
    inner = ["CMD"]
    for argv in (
        P.nsys_argv("/r", 8, inner, device="cpu"),
        P.nsys_argv("/r", 8, inner),
        P.nsys_argv("/r", 8, inner, node=1),
    ):
        assert _missing(profile, argv[2:-1]) == set(), argv
    assert _missing(export, P.nsys_export_argv("r.nsys-rep")[2:-1]) == set()
    gm = _missing(profile, P.nsys_argv("/r", 8, inner, gpu_metrics=True)[2:-1])
    # nsys before 2023 spells it --gpu-metrics-device: refused before anything runs, one line
    assert gm <= {"--gpu-metrics-devices"}
    if gm:
        with pytest.raises(CollectError) as e:
            plan(
                _cfg(tmp_path, profiler="nsys", gpu_metrics=True),
                device="cuda",
                capabilities=[(8, 0)],
            )
        assert "has no --gpu-metrics-devices" in str(e.value) and "\n" not in str(e.value)
        assert not (tmp_path / "f").exists()


@pytest.mark.requires_nvprof
def test_nvprof_flags_exist() -> None:
    text = subprocess.run([str(tool_path("nvprof")), "--help"], capture_output=True, text=True)
    assert _missing(text.stdout + text.stderr, P.nvprof_argv("/r", ["CMD"])[1:-1]) == set()


@pytest.mark.requires_ncu
def test_ncu_flags_exist() -> None:
    text = subprocess.run([str(tool_path("ncu")), "--help"], capture_output=True, text=True)
    argv = P.ncu_argv("/r", 8, ["CMD"], ["gpu__time_duration.sum"], node=2)
    assert _missing(text.stdout + text.stderr, argv[1:-1]) == set()


def test_help_flags_parsing() -> None:
    text = "\t-t, --trace=\n\t--capture-range-end=\n  -h [ --help ]   Print\n  --csv    x\n"
    assert P.help_flags(text) >= {"--trace", "-t", "--capture-range-end", "--help", "-h", "--csv"}
    assert P.argv_flags(["--trace=cuda", "-o", "x", "--csv"]) == ["--trace", "-o", "--csv"]


def test_importer_found_through_the_debian_links(tmp_path: Path) -> None:
    # Debian 12: /usr/bin/nsys -> ../lib/nsight-systems/bin/nsys -> ../target-linux-x64/nsys,
    # itself a link into /usr/lib/x86_64-linux-gnu/, where no host-linux-x64/ is
    from traceanalyze.collect.nsys_steps import importer_path

    arch = tmp_path / "usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"
    arch.mkdir(parents=True)
    (arch / "nsys").write_text("#!/bin/sh\n")
    pkg = tmp_path / "usr/lib/nsight-systems"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "target-linux-x64").symlink_to("../x86_64-linux-gnu/nsight-systems/target-linux-x64")
    (pkg / "bin/nsys").symlink_to("../target-linux-x64/nsys")
    (tmp_path / "usr/bin").mkdir()
    (tmp_path / "usr/bin/nsys").symlink_to("../lib/nsight-systems/bin/nsys")
    assert importer_path(str(tmp_path / "usr/bin/nsys")) is None  # no importer yet
    imp = pkg / "host-linux-x64" / "QdstrmImporter"
    imp.parent.mkdir()
    imp.write_text("#!/bin/sh\n")
    imp.chmod(0o755)
    assert importer_path(str(tmp_path / "usr/bin/nsys")) == imp


@pytest.mark.requires_torch("torchvision")
def test_collect_nsys_without_importer_fails_at_import(tmp_path: Path, monkeypatch) -> None:
    # a stand-in nsys that, like Debian's, leaves only the .qdstrm (and runs no workload)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(
        "#!/bin/sh\n"
        '[ "$1" = profile ] || exit 0\n'
        'while [ "$#" -gt 1 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
        '[ -n "$out" ] || exit 0  # `nsys profile --help`, asked for its flags\n'
        'out=$(echo "$out" | sed "s/%q{RANK}/0/"); : > "$out.qdstrm"\n'
        'echo "Importer error status: The importer binary and its dependencies were not found."\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    r, m = collect(tmp_path / "runs", "nsys")
    assert r.exit_code == 1
    [line] = error_lines(r.output)
    assert "nsys left nsys_bs2_rank0.qdstrm, and no host-linux-x64/QdstrmImporter" in line
    assert m["status"] == "failed" and m["failed_step"] == "import"
