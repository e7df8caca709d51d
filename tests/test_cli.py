"""The command line as a newcomer meets it: no traceback for a user's mistake or environment."""

from typer.testing import CliRunner

from gradcode.cli import app


def test_a_run_too_large_for_memory_is_refused_with_its_size():
    """gradcode simulate -n 1000000 used to end in a MemoryError traceback (a dense 7 TiB matrix)."""
    res = CliRunner().invoke(app, ["simulate", "-n", "1000000", "-s", "2", "--rounds", "1"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "not enough memory" in said and "TiB" in said and "Traceback" not in said


def test_tune_prints_the_best_of_each_family(tmp_path):
    """gradcode tune --trace FILE --load-slope A --mu 1 --waitout all --jobs J --json (SGC App. J):
    the issue's interface."""
    import json

    import numpy as np

    rng = np.random.default_rng(0)
    np.save(tmp_path / "p.npy", 1.0 + rng.exponential(0.3, size=(60, 8)) + (rng.random((60, 8)) < 0.1) * 3)
    args = ["tune", "--trace", str(tmp_path / "p.npy"), "--load-slope", "2", "--mu", "1", "--jobs", "40",
            "--max-w", "3", "--json"]
    res = CliRunner().invoke(app, args + ["--waitout", "all"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc["best"]) == {"none", "gc", "sr-sgc", "m-sgc"}
    for family, best in doc["best"].items():
        assert best["scheme"] == family and {"params", "load", "time"} <= set(best)
        assert best["time"] == min(c["time"] for c in doc["candidates"] if c["scheme"] == family)
    assert set(doc["best"]["m-sgc"]["params"]) == {"B", "W", "lam"} and set(doc["best"]["gc"]["params"]) == {"s"}
    decodable = json.loads(CliRunner().invoke(app, args + ["--waitout", "decodable"]).stdout)
    assert decodable["waitout"] == "decodable"
    short = CliRunner().invoke(app, ["tune", "--trace", str(tmp_path / "p.npy"), "--load-slope", "2", "--jobs", "100"])
    assert short.exit_code == 2 and "rounds are not recycled" in " ".join(short.output.split())


def test_simulate_offers_the_papers_waitout(tmp_path):
    import json

    import numpy as np

    np.save(tmp_path / "t.npy", np.array([[1.0, 1, 1, 1, 5, 9], [1, 1, 1, 1, 1, 9]]))
    base = ["simulate", "--scheme", "crc", "-n", "6", "-s", "1", "--trace", str(tmp_path / "t.npy"), "--close", "1",
            "--json"]
    mean = {w: json.loads(CliRunner().invoke(app, base + ["--waitout", w]).stdout)["summary"]["mean"]
            for w in ("decodable", "all")}
    assert mean == {"decodable": 3.5, "all": 5.5}  # round 0 waits for worker 5 (9 s) instead of 4 (5 s)


def test_compare_marks_inexact_schemes_and_names_the_fastest_exact_one():
    import json

    res = CliRunner().invoke(app, ["compare", "-n", "12", "-s", "2", "-m", "fixed", "-M", "stragglers=2",
                                   "-M", "delay=0.5", "--rounds", "50", "--json"])
    doc = json.loads(res.stdout)
    rows = {r["scheme"]: r for r in doc["rows"]}
    assert rows["Ignore n=12 s=2 (inexact)"]["exact"] is False
    assert rows["Ignore n=12 s=2 (inexact)"]["speedup"] > rows["CRC n=12 s=2"]["speedup"]  # by not being exact
    assert doc["fastest_exact"] in ("FRC n=12 s=2", "CRC n=12 s=2")


def test_a_missing_optional_extra_is_one_line_with_the_install_hint(tmp_path):
    import importlib.util

    import pytest

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    res = CliRunner().invoke(app, ["train", "--problem", "mlp", "--workers", "2", "--rounds", "1",
                                   "--run-dir", str(tmp_path / "r")])
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "pip install torch==2.13.0" in said and "Traceback" not in said


def _said(res) -> str:
    """The output as one line: rich's wrapping and help-panel borders taken out."""
    return " ".join(res.output.replace("│", " ").split())


def test_agc_table6_says_which_rows_differ_and_why():
    """The explanation of the rows that differ from the paper used to live only in the source."""
    import json

    doc = json.loads(CliRunner().invoke(app, ["reproduce", "agc-table6", "--json"]).stdout)
    assert [d["row"] for d in doc["differences"]] == ["G-CGC(1)", "AGC", "G-AGC"]
    assert all(d["why"] != "not explained" for d in doc["differences"])
    assert sum(r["agrees"] for r in doc["rows"]) == 12 and len(doc["rows"]) == 18
    assert "bounds the AET below by 10.58" in doc["differences"][2]["why"]
    text = _said(CliRunner().invoke(app, ["reproduce", "agc-table6"]))
    assert "12 of 18 values agree with the paper" in text
    assert "G-AGC (p = 0.05: 11.03 vs 9.95, p = 0.1: 12.78 vs 11.10): no reading can reach the print" in text
