"""Real Nsight Systems reports made in the tests, of a small CPU-only Python program (no GPU
needed): `nsys profile --trace=osrt,nvtx --sample=none`, then, where this nsys packaging cannot
find its importer (Debian 12's nsight-systems 2022.4 prints "Importer error status: The importer
binary and its dependencies were not found" and leaves only the `.qdstrm`), the package's own
`host-linux-x64/QdstrmImporter`. Written independently of `traceanalyze.collect`, which does the
same for `collect --profiler nsys`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import tool_path

# NVTX ranges from torch.cuda.nvtx, which works without a GPU: nsys injects its NVTX library.
PROGRAM = """import torch.cuda.nvtx as nvtx
for i in range(3):
    nvtx.range_push(f"step {i}")
    for phase in ("data", "forward", "backward", "optimizer"):
        nvtx.range_push(phase)
        sum(range(2000))
        nvtx.range_pop()
    nvtx.range_pop()
nvtx.mark("done")
"""


def importer(nsys: str) -> Path:
    """`host-linux-x64/QdstrmImporter` beside the `bin/` or `target-linux-x64/` of one of the
    links from `nsys` to the binary (Debian: /usr/bin/nsys -> /usr/lib/nsight-systems/bin/nsys ->
    ../target-linux-x64/nsys, a link into /usr/lib/x86_64-linux-gnu without the host half)."""
    p = Path(nsys)
    for _ in range(10):
        cand = p.parent.parent / "host-linux-x64" / "QdstrmImporter"
        if cand.exists():
            return cand
        if not p.is_symlink():
            break
        p = p.parent / os.readlink(p)
    raise AssertionError(f"no QdstrmImporter found from {nsys}")


def make_report(out_dir: Path, name: str = "r") -> Path:
    """A real `.nsys-rep` of `PROGRAM`, in `out_dir`."""
    nsys = tool_path("nsys")
    assert nsys is not None
    script = out_dir / "program.py"
    script.write_text(PROGRAM)
    base = out_dir / name
    argv = [nsys, "profile", "--trace=osrt,nvtx", "--sample=none", "--cpuctxsw=none"]
    argv += ["--force-overwrite=true", "-o", str(base), sys.executable, str(script)]
    subprocess.run(argv, check=True, capture_output=True, timeout=300, start_new_session=True)
    rep = base.with_suffix(".nsys-rep")
    if not rep.exists():
        qd = base.with_suffix(".qdstrm")
        subprocess.run(
            [str(importer(nsys)), "-i", str(qd)], check=True, capture_output=True, timeout=300
        )
        qd.unlink()
    assert rep.exists()
    return rep


def export(report: Path, out: Path) -> Path:
    """`nsys export --type sqlite` of `report`, as a user runs it by hand."""
    nsys = tool_path("nsys")
    assert nsys is not None
    subprocess.run(
        [nsys, "export", "--type", "sqlite", "-o", str(out), str(report)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out
