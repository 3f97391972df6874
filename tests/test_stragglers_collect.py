"""End to end without a GPU: `collect --device cpu --nproc-per-node 2` runs a real 2-rank job
(gloo, torchrun), and `stragglers` matches what it wrote. Small on purpose: 4 steps of batch 2 at
32 px (about 25 s on 2 cores). Expected counts come from the traces' raw JSON.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyze.cli import main


def test_two_rank_cpu_job_collected_then_matched(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    out = tmp_path / "runs"
    args = ["collect", "--device", "cpu", "--nproc-per-node", "2", "--profiler", "torch"]
    args += ["--iterations", "4", "--batch-size", "2", "--image-size", "32", "--out", str(out)]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    (run,) = out.iterdir()
    traces = sorted(run.glob("torch_bs2_rank*.pt.trace.json.gz"))
    assert len(traces) == 2
    counts = []
    for t in traces:
        doc = json.loads(gzip.decompress(t.read_bytes()))
        assert doc["distributedInfo"]["backend"] == "gloo"
        assert doc["distributedInfo"]["world_size"] == 2
        names = Counter(
            e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("gloo:")
        )
        counts.append(names)
    assert counts[0] == counts[1] and sum(counts[0].values()) > 0
    n = sum(counts[0].values())

    r = CliRunner().invoke(main, ["stragglers", "--store", str(run / "store"), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["rank"] for x in rows] == [0, 1]
    assert {x["collectives"] for x in rows} == {n}
    assert sum(x["arrived_last"] for x in rows) == n
    assert {x["rank_from"] for x in rows} == {"distributedInfo"}
    assert {x["world_size"] for x in rows} == {2}
    # the job is the run id from the run's manifest, per batch size
    run_id = json.loads((run / "manifest.json").read_text())["run_id"]
    assert {(x["job"], x["job_from"]) for x in rows} == {(f"{run_id}/bs2", "collect manifest")}
    r = CliRunner().invoke(main, ["stragglers", *map(str, traces)])
    assert r.exit_code == 0, r.output
    assert "straggler" in r.output  # a verdict line, either way
