"""GC-DC from the command line: `gradcode codes` lists the scheme families, `--scheme
gc-dc:...` runs in simulate and compare (the simulator's event path, a fresh scheme per repeat),
the reproductions print Table I and write the figures' curves, and bad input is one line on
stderr with exit status 2. Tiny sizes only."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from gradcode.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_json(res):
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_codes_lists_the_scheme_families_with_their_kind():
    rows = {r["name"]: r for r in one_json(invoke("codes", "--json"))["rows"]}
    assert rows["crc"]["kind"] == "code"
    gcdc = rows["gc-dc"]
    assert gcdc["kind"] == "scheme"
    for p in ("clusters", "r", "ssi=imperfect", "tau", "clusters_per_worker"):
        assert p in gcdc["params"].split(", ")
    assert "assignment" not in gcdc["params"] and "dim" not in gcdc["params"]


@pytest.mark.parametrize("ssi", ["perfect", "imperfect"])
def test_simulate_runs_gc_dc_inline_and_through_params(ssi):
    base = ["simulate", "-n", 12, "-m", "gilbert-elliot", "--rounds", 40, "--repeats", 2, "--json"]
    inline = one_json(invoke(*base, "--scheme", f"gc-dc:clusters=4,r=3,ssi={ssi}"))
    params = one_json(invoke(*base, "--scheme", "gc-dc", "-p", "clusters=4", "-p", "r=3", "-p", f"ssi={ssi}"))
    assert inline == params
    s = inline["summary"]
    assert s["kind"] == "scheme" and f"ssi='{ssi}'" in s["scheme"]
    assert s["load"] == pytest.approx(3 / 12) and s["rounds"] == 40 and s["repeats"] == 2
    # each repeat is the library's simulate on a fresh scheme, seed + i
    import gradcode
    from gradcode.schemes import make_scheme

    for i, row in enumerate(inline["rows"]):
        scheme = make_scheme("gc-dc", n=12, clusters=4, r=3, ssi=ssi)
        res = gradcode.simulate(scheme, gradcode.make_delay_model("gilbert-elliot"), 40, seed=i)
        assert row["mean"] == pytest.approx(res.summary()["mean"])


def test_compare_gc_dc_against_gc_sc_on_the_same_draws():
    doc = one_json(invoke("compare", "-n", 12, "-m", "gilbert-elliot", "--rounds", 60, "--json",
                          "--scheme", "gc-sc:clusters=4,s=2", "--scheme", "gc-dc:clusters=4,r=3,ssi=perfect"))
    rows = doc["rows"]
    assert [r["scheme"].split()[0].split("(")[0] for r in rows] == ["Uncoded", "GCSC", "GCDC"]
    assert rows[1]["load"] == rows[2]["load"] == pytest.approx(0.25)
    assert rows[0]["speedup"] == 1.0 and rows[2]["speedup"] > 1.0


def test_fast_method_is_refused_for_a_scheme_family_in_one_line():
    res = invoke("simulate", "--scheme", "gc-dc:clusters=4,r=3", "-n", 12, "--rounds", 5, "--method", "fast")
    assert res.exit_code == 2
    assert "static code" in res.stderr and "Traceback" not in res.output


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("gc-dc:clusters=5,r=3", "clusters must divide"),  # P does not divide K
        ("gc-dc:clusters=4,r=4", "r (partitions per codeword)"),  # r > l = 3
        ("gc-dc:clusters=4,r=3,clusters_per_worker=5", "clusters_per_worker"),  # n_c > P
        ("gc-dc:clusters=4,r=3,ssi=oracle", "ssi"),
        ("gc-dc:clusters=4,r=3,tau=-1", "tau"),
        ("gc-dc:clusters=4,r=3,assignment=1", "command line"),
        ("gc-dc:clusters=4,r=3,colour=2", "colour"),
        ("gc-dx", "unknown code or scheme"),
    ],
)
def test_bad_scheme_input_is_one_line_exit_2(spec, needle):
    res = invoke("simulate", "--scheme", spec, "-n", 12, "--rounds", 5)
    assert res.exit_code == 2, res.output
    assert needle in res.stderr
    assert "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1


def test_tolerance_option_is_said_not_to_apply_to_gc_dc():
    res = invoke("simulate", "--scheme", "gc-dc:clusters=4,r=3", "-n", 12, "-s", 2, "--rounds", 5, "--json")
    assert res.exit_code == 0
    assert "takes no s" in res.stderr
    assert json.loads(res.stdout)["summary"]["rounds"] == 5
    assert np.isfinite(json.loads(res.stdout)["summary"]["mean"])


# ---------------------------------------------------------------------------- reproductions


def test_reproduce_gcdc_table1_json_rows_carry_paper_values_and_intervals():
    doc = one_json(invoke("reproduce", "gcdc-table1", "--rounds", 800, "--seed", 1, "--json"))
    rows = doc["rows"]
    assert {r["scheme"] for r in rows} == {"GC", "GC-SC", "GC-DC"}
    assert [r["P"] for r in rows if r["scheme"] == "GC-DC"] == [1, 2, 4, 5, 10]
    paper = {(r["scheme"], r["P"]): r["paper"] for r in rows}
    assert paper["GC", 4] == 166.81 and paper["GC-SC", 5] == 37.23 and paper["GC-DC", 10] == 0.70
    for r in rows:
        assert set(r) >= {"scheme", "P", "time", "ci", "paper"}
        assert isinstance(r["P"], int) and r["time"] > 0 and r["ci"] >= 0
    assert doc["rounds"] == 800 and doc["runs"] == 2 and doc["seed"] == 1
    assert [r["P"] for r in doc["imperfect_ssi_rows"]] == [1, 2, 4, 5, 10]
    # P = 1: one cluster of K, the three schemes are the same code on the same draws
    p1 = {r["scheme"]: r["time"] for r in rows if r["P"] == 1}
    assert p1["GC"] == pytest.approx(p1["GC-SC"]) == pytest.approx(p1["GC-DC"])
    # the rows are table1's numbers
    from gradcode.experiments.gcdc_table1 import table1

    res = table1(rounds=800, seed=1)
    assert [r["time"] for r in rows if r["scheme"] == "GC-SC"] == pytest.approx(res.row("GC-SC").mean)


def test_reproduce_bad_parameters_are_one_line():
    res = invoke("reproduce", "gcdc-table1", "--rounds", 500)
    assert res.exit_code == 2 and "multiple of run_length" in res.stderr and "Traceback" not in res.output
    res = invoke("reproduce", "gcdc-figs", "-p", "figures=3")
    assert res.exit_code == 2 and "4..12" in res.stderr
    res = invoke("reproduce", "commfr-table1", "--rounds", 5)
    assert res.exit_code == 2 and "does not take 'rounds'" in res.stderr


def test_reproduce_gcdc_figures_write_json_and_png(tmp_path):
    doc = one_json(invoke("reproduce", "gcdc-figs", "-p", "figures=4,12", "-p", "runs=2", "-p", "iterations=15",
                          "--out", tmp_path, "--json"))
    assert doc["runs"] == 2 and doc["iterations"] == 15
    assert sorted({r["figure"] for r in doc["rows"]}) == [4, 12]
    assert {(r["ssi"], r["scheme"]) for r in doc["rows"] if r["figure"] == 4} == {
        (s, k) for s in ("imperfect", "perfect") for k in ("GC", "GC-SC", "GC-DC", "LB")}
    for n in (4, 12):
        assert (tmp_path / f"gcdc-fig{n}.png").stat().st_size > 1000
        fig = json.loads((tmp_path / f"gcdc-fig{n}.json").read_text())
        assert fig["figure"] == n and fig["runs"] == 2 and fig["iterations"] == 15
        curves = fig["curves"]
        assert set(curves) == {"GC", "GC-SC", "GC-DC (imperfect SSI)", "GC-DC (perfect SSI)", "LB"}
        for c in curves.values():
            assert len(c["running_mean"]) == len(c["per_iteration"]) == 15
            assert c["running_mean"][-1] == pytest.approx(c["mean"]) and c["ci"] >= 0
        # LB is below every scheme in every iteration (it needs the fewest finished workers)
        lb = np.array(curves["LB"]["per_iteration"])
        for name in ("GC", "GC-SC", "GC-DC (imperfect SSI)", "GC-DC (perfect SSI)"):
            assert (lb <= np.array(curves[name]["per_iteration"]) + 1e-12).all()
    one = one_json(invoke("reproduce", "gcdc-fig9", "-p", "runs=2", "-p", "iterations=5", "-p", "plot=false",
                          "--out", tmp_path, "--json"))
    assert one["files"] == [str(tmp_path / "gcdc-fig9.json")]
