"""iterlog reader: SC22 'Iteration Duration' stdout and the project's own CSV log."""

from __future__ import annotations

import re

import pytest

import traceanalyze as ta
from traceanalyze.errors import MalformedInput, MissingColumn
from traceanalyze.readers.iterlog import HEADER, MAGIC


def test_sc22_lines_including_merged_ranks(write) -> None:
    text = (
        "Epoch 1\n\nIteration Duration 0 0 : 0.412\n\nIteration Duration 0 1 : 0.398"
        "Iteration Duration 0 2 : 0.5e-1\nnoise\nIteration Duration 1 0 : 0.25\n"
        "Training time: 0:03:12.345678\n"
    )
    p = write("resnet_iterdur_1_c001-002_0_1.txt", text)
    assert ta.detect_format(p) == "iterlog"
    t = ta.read(p)
    # expected computed from the text independently
    recs = re.findall(r"Iteration Duration (\d+) (\d+) : ([\d.e-]+)", text)
    got = t.iterations.sort("iteration", "device_id")
    exp = sorted((int(i), int(d), round(float(s) * 1e9)) for i, d, s in recs)
    assert got.select("iteration", "device_id", "duration_ns").rows() == exp
    assert got["start_ns"].null_count() == got.height
    assert t.sources["tool"].item() == "sc22-train-stdout"


def test_own_log_round_trip(write) -> None:
    rows = [
        (0, 0, 0, 1_700_000_000_000_000_000, 400_000_000, 64, 160.0),
        (0, 0, 1, 1_700_000_000_400_000_000, 200_000_000, 64, 320.0),
        (1, 1, 1, None, 250_000_000, 64, None),
    ]
    body = "\n".join(",".join("" if v is None else str(v) for v in r) for r in rows)
    p = write("iterations_rank0.csv", f"{MAGIC}\n{HEADER}\n{body}\n")
    t = ta.read(p)
    it = t.iterations.sort("rank", "iteration")
    assert (
        it.select(
            "rank",
            "device_id",
            "iteration",
            "start_ns",
            "duration_ns",
            "batch_size",
            "images_per_s",
        ).rows()
        == rows
    )
    assert it["end_ns"].to_list() == [1_700_000_000_400_000_000, 1_700_000_000_600_000_000, None]
    assert t.sources["time_origin_epoch_ns"].item() == 0


def test_own_log_wrong_header(write) -> None:
    p = write("it.csv", f"{MAGIC}\nrank,iteration\n0,1\n")
    with pytest.raises(MissingColumn, match=r"it\.csv, line 2: expected header"):
        ta.read(p)


def test_own_log_bad_value_names_file(write) -> None:
    p = write("it.csv", f"{MAGIC}\n{HEADER}\n0,0,zero,1,2,3,4\n")
    with pytest.raises(MalformedInput, match="it.csv"):
        ta.read(p)


def test_no_records(write) -> None:
    p = write("x.txt", "Iteration Duration\n")
    with pytest.raises(MalformedInput, match="no 'Iteration Duration"):
        ta.read(p, format="iterlog")
