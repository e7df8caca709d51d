"""GC-DC from the command line (issue 10): `gradcode codes` lists the scheme families, `--scheme
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


def test_stragglers_option_is_said_not_to_apply_to_gc_dc():
    res = invoke("simulate", "--scheme", "gc-dc:clusters=4,r=3", "-n", 12, "-s", 2, "--rounds", 5, "--json")
    assert res.exit_code == 0
    assert "takes no s" in res.stderr
    assert json.loads(res.stdout)["summary"]["rounds"] == 5
    assert np.isfinite(json.loads(res.stdout)["summary"]["mean"])
