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
    with pytest.raises(
        MalformedInput,
        match=r"x\.txt, line 1: no 'Iteration Duration <i> <dev> : <s>' records "
        r"\(malformed: 'Iteration Duration'\)$",
    ):
        ta.read(p, format="iterlog")
    p = write("y.txt", "Iteration Duration is printed below\n\nTraining time: 0:00:01\n")
    with pytest.raises(MalformedInput, match=r"y\.txt, line 1: no 'Iteration Duration"):
        ta.read(p, format="iterlog")


def test_sc22_malformed_record_warns_with_line_and_is_skipped(write) -> None:
    text = (
        "Epoch 1\n"  # line 1
        "Iteration Duration 0 0 : 0.5\n"  # line 2
        "Iteration Duration 1 0 : garbage\n"  # line 3: not a number
        "\n"  # line 4
        "Iteration Duration 2 0 : 0.25Iteration Duration 2 1 : nan\n"  # line 5: 2nd is bad
        "Training time: 0:00:01.000000\n"
    )
    p = write("log.txt", text)
    with pytest.warns(UserWarning) as rec:
        t = ta.read(p)
    msgs = [str(w.message) for w in rec if "malformed record" in str(w.message)]
    assert len(msgs) == 1
    assert "log.txt, line 3: malformed record 'Iteration Duration 1 0 : garbage'" in msgs[0]
    assert "1 more at line(s) 5" in msgs[0]
    got = t.iterations.sort("iteration", "device_id")
    # by hand: 0.5 s and 0.25 s; the `Training time:` line adds no row
    assert got.select("iteration", "device_id", "duration_ns").rows() == [
        (0, 0, 500_000_000),
        (2, 0, 250_000_000),
    ]


@pytest.mark.parametrize(
    ("record", "what"),
    [
        ("Iteration Duration 3 0 : 1e400", "duration does not fit int64"),  # inf seconds
        ("Iteration Duration 3 0 : 9300000000", "duration does not fit int64"),  # 9.3e18 ns
        ("Iteration Duration 99999999999999999999 0 : 1", "iteration does not fit"),
        ("Iteration Duration 3 99999999999999999999 : 1", "device id does not fit"),
    ],
)
def test_sc22_overflow_is_an_error_naming_the_line(write, record: str, what: str) -> None:
    p = write("big.txt", f"Iteration Duration 0 0 : 0.5\n\n{record}\n")
    with pytest.raises(MalformedInput, match=rf"big\.txt, line 3: .*{what}"):
        ta.read(p)


def test_sc22_largest_fitting_duration(write) -> None:
    # 9.2e9 s = 9.2e18 ns < 2**63 - 1 (9.223e18): fits
    p = write("ok.txt", "Iteration Duration 0 0 : 9200000000\n")
    assert ta.read(p).iterations["duration_ns"].to_list() == [9_200_000_000_000_000_000]


def test_own_log_end_overflow_is_an_error_naming_the_line(write) -> None:
    rows = [
        "0,0,0,1000,5,,",
        # 9223372036854775000 + 1000 > 2**63 - 1 = 9223372036854775807: would wrap negative
        "0,0,1,9223372036854775000,1000,,",
    ]
    p = write("it.csv", f"{MAGIC}\n{HEADER}\n" + "\n".join(rows) + "\n")
    with pytest.raises(
        MalformedInput, match=r"it\.csv, line 4, column 'duration_ns': start_ns \+ duration_ns"
    ):
        ta.read(p)


def test_own_log_end_at_int64_max_fits(write) -> None:
    p = write("it.csv", f"{MAGIC}\n{HEADER}\n0,0,0,9223372036854774807,1000,,\n")
    assert ta.read(p).iterations["end_ns"].to_list() == [2**63 - 1]


def test_own_log_bad_value_names_line_and_column(write) -> None:
    p = write("it.csv", f"{MAGIC}\n{HEADER}\n0,0,0,1,2,3,4\n0,0,1,99999999999999999999,2,3,4\n")
    with pytest.raises(
        MalformedInput, match=r"it\.csv, line 4, column 'start_ns': not a 64-bit integer"
    ):
        ta.read(p)


def test_cli_overflow_is_one_line_exit_1(write) -> None:
    from click.testing import CliRunner

    from traceanalyze.cli import main

    p = write("i.txt", "Iteration Duration 0 0 : 1e400\n")
    res = CliRunner().invoke(main, ["ingest", str(p), "--store", str(p.parent / "s")])
    assert res.exit_code == 1
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert res.output.strip().splitlines() == [
        f"traceanalyze: error: {p}, line 1: iteration duration does not fit int64 nanoseconds"
        " (> ~292 years)"
    ]
    assert not (p.parent / "s").exists()
