"""Trace replay from the command line: SGC App. J's additive load adjustment
with a given or fitted slope, n taken from the trace, J jobs in J + T rounds, the total time of J
jobs in the tables and the jobs-against-time plot (Fig. 2a)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from gradcode.cli import app

PNG = b"\x89PNG\r\n\x1a\n"


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def said(res) -> str:
    return " ".join(res.output.split())


def _profile(n=8, rounds=30, seed=0):
    rng = np.random.default_rng(seed)
    return 1.0 + rng.exponential(0.3, size=(rounds, n)) + (rng.random((rounds, n)) < 0.1) * 2.0


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "ref.npy"
    np.save(path, _profile())
    return path


# ------------------------------------------------------------------ (a) load adjustment


def test_crc_s15_is_charged_its_extra_load_additively_not_sixteen_times(tmp_path):
    """The worked example: a trace recorded uncoded (load 1/n), replayed for CRC s = 15 at n = 16
    (load 1). SGC App. J adds (1 - 1/16) alpha seconds; -M trace_load alone used to scale every
    time by L / L0 = 16 instead."""
    rounds = np.linspace(1.0, 2.0, 10)
    np.save(tmp_path / "t.npy", np.repeat(rounds[:, None], 16, axis=1))  # all workers alike per round
    args = ["compare", "--trace", tmp_path / "t.npy", "--scheme", "crc:s=15", "--json"]
    res = cli(*args, "--load-slope", "0.5")
    assert res.exit_code == 0, res.output
    rows = {r["scheme"]: r for r in json.loads(res.stdout)["rows"]}
    assert rows["Uncoded n=16"]["mean"] == pytest.approx(rounds.mean())
    assert rows["CRC n=16 s=15"]["mean"] == pytest.approx(rounds.mean() + (1 - 1 / 16) * 0.5)
    # trace_load without a slope: refused with the way to get one, not scaled 16-fold
    old = cli(*args, "-M", f"trace_load={1 / 16}")
    assert old.exit_code == 2
    assert "--load-slope" in said(old) and "--trace-load" in said(old) and "additive" in said(old)
    only_load = cli(*args, "--trace-load", 1 / 16)
    assert only_load.exit_code == 2 and "--load-slope" in said(only_load) and "Traceback" not in said(only_load)
    # proportional scaling only by name
    prop = cli(*args, "--trace-load", 1 / 16, "-M", "load_rule=proportional")
    assert prop.exit_code == 0, prop.output
    rows = {r["scheme"]: r for r in json.loads(prop.stdout)["rows"]}
    assert rows["CRC n=16 s=15"]["mean"] == pytest.approx(16 * rounds.mean())


def test_load_slope_is_fitted_from_traces_at_several_loads(tmp_path):
    """--trace FILE --trace-load L repeated: the slope is fitted as gradcode tune fits it, and the
    trace at the smallest load is replayed with it (the same run as giving that slope)."""
    X = _profile()
    loads = [1 / 8, 0.5, 1.0]
    args = []
    for i, L in enumerate(loads):
        np.save(tmp_path / f"p{i}.npy", X + 3.0 * L)
        args += ["--trace", tmp_path / f"p{i}.npy", "--trace-load", L]
    base = ["simulate", "--scheme", "crc:s=3", "--close", "1", "--json"]
    fitted = cli(*base, *args)
    assert fitted.exit_code == 0, fitted.output
    doc = json.loads(fitted.stdout)["summary"]
    assert doc["trace"]["fitted"] and doc["trace"]["load_slope"] == pytest.approx(3.0)
    assert doc["trace"]["trace_load"] == pytest.approx(1 / 8) and doc["trace"]["files"][0].endswith("p0.npy")
    assert "fitted from 3 traces" in " ".join(fitted.stderr.split())
    given = cli(*base, "--trace", tmp_path / "p0.npy", "--trace-load", 1 / 8, "--load-slope", 3.0)
    assert json.loads(given.stdout)["summary"]["total_time"] == pytest.approx(doc["total_time"], rel=1e-12)
    # compare takes the same options
    cmp = cli("compare", "--scheme", "crc:s=3", *args, "--json")
    assert cmp.exit_code == 0 and json.loads(cmp.stdout)["trace"]["load_slope"] == pytest.approx(3.0)


def test_a_negative_fitted_slope_is_warned_about(tmp_path):
    X = _profile()
    args = []
    for i, L in enumerate([1 / 8, 1.0]):
        np.save(tmp_path / f"p{i}.npy", X + 2.0 - 1.5 * L)  # slower at the lighter load
        args += ["--trace", tmp_path / f"p{i}.npy", "--trace-load", L]
    res = cli("simulate", "--scheme", "crc:s=1", *args, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["summary"]["trace"]["load_slope"] == pytest.approx(-1.5)
    warned = " ".join(res.stderr.split())
    assert "warning" in warned and "negative" in warned and "heavier scheme faster" in warned


def test_trace_options_refuse_what_they_cannot_use(trace, tmp_path):
    np.save(tmp_path / "other.npy", _profile())
    two = ["--trace", trace, "--trace", tmp_path / "other.npy"]
    for args, words in [
        (two, "--trace-load"),  # two traces without their loads
        (two + ["--trace-load", 0.125], "one load per --trace"),
        (["--trace", trace, "--trace-load", 0.125, "-M", "trace_load=0.125", "--load-slope", 1], "not both"),
        (["--load-slope", 1], "need --trace"),
    ]:
        res = cli("simulate", "--scheme", "crc:s=1", "--rounds", 5, *args)
        assert res.exit_code == 2 and words in said(res), (args, res.output)


def test_a_trace_recorded_at_load_zero(trace):
    """trace_load = 0 (a profile extrapolated to no load, the intercept of Fig. 16) is a load."""
    res = cli("simulate", "--scheme", "crc:s=1", "--trace", trace, "--trace-load", 0, "--load-slope", 2, "--json")
    assert res.exit_code == 0, res.output
    X = _profile()
    # CRC s = 1 at n = 8: load 2/8, so every time grows by 0.5 s; the round ends at the 7th arrival
    assert json.loads(res.stdout)["summary"]["total_time"] == pytest.approx(np.sort(X, axis=1)[:, 6].sum() + 15)


def test_one_trace_with_a_slope_is_taken_as_recorded_uncoded(trace):
    """App. J's reference profile is recorded with no coding, at load 1/n."""
    res = cli("simulate", "--scheme", "crc:s=1", "--trace", trace, "--load-slope", 2, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["summary"]["trace"]["trace_load"] == pytest.approx(1 / 8)
    assert "1/n" in res.stderr


# ------------------------------------------------------------------ (b) n from the trace


def test_n_comes_from_the_trace(trace):
    res = cli("simulate", "--scheme", "crc", "-s", "1", "--trace", trace, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["summary"]["scheme"] == "CRC n=8 s=1"
    cmp = cli("compare", "-s", "1", "--trace", trace, "--json")  # the default schemes too
    assert cmp.exit_code == 0, cmp.output
    assert [r["scheme"] for r in json.loads(cmp.stdout)["rows"]][0] == "Uncoded n=8"


def test_compare_with_the_traces_n_as_a_param_builds_the_uncoded_baseline_too(trace):
    """-p n=8 on a trace of 8 workers: uncoded (which gets no --param) used to be left with no n
    at all ("code 'uncoded' needs 'n'")."""
    for schemes in ([], ["--scheme", "crc", "--scheme", "uncoded"]):
        res = cli("compare", *schemes, "-p", "n=8", "-s", 1, "--rounds", 5, "--trace", trace, "--json")
        assert res.exit_code == 0, res.output
        assert {r["scheme"] for r in json.loads(res.stdout)["rows"]} >= {"Uncoded n=8", "CRC n=8 s=1"}


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_an_n_other_than_the_traces_is_refused(trace, command):
    """-n 6 on a trace of 8 workers used to drop the last two columns silently."""
    smaller = cli(command, "--scheme", "crc", "-n", 6, "-s", 1, "--trace", trace)
    assert smaller.exit_code == 2 and "drop" in said(smaller) and "leave out -n" in said(smaller)
    inline = cli(command, "--scheme", "crc:n=6,s=1", "--trace", trace)  # no -n: the trace's n is no -n either
    assert inline.exit_code == 2 and "drop" in said(inline) and "--workers" not in said(inline)
    param = cli(command, "--scheme", "crc", "-p", "n=6", "-s", 1, "--trace", trace)
    assert param.exit_code == 2 and "drop" in said(param)
    larger = cli(command, "--scheme", "crc", "-n", 10, "-s", 1, "--trace", trace)
    assert larger.exit_code == 2 and "fewer than n = 10" in said(larger) and "leave out -n" in said(larger)
    same = cli(command, "--scheme", "crc", "-n", 8, "-s", 1, "--trace", trace)
    assert same.exit_code == 0, same.output


# ------------------------------------------------------------------ (c) J jobs take J + T rounds


def test_jobs_run_j_plus_t_rounds_and_a_short_trace_is_refused(trace):
    msgc = "m-sgc:B=1,W=3,lam=2"  # T = W - 2 + B = 2
    ok = cli("simulate", "--scheme", msgc, "--trace", trace, "--load-slope", 1, "--close", 1, "--jobs", 28, "--json")
    assert ok.exit_code == 0, ok.output
    s = json.loads(ok.stdout)["summary"]
    assert (s["rounds"], s["jobs"], s["delay"]) == (30, 28, 2)
    short = cli("simulate", "--scheme", msgc, "--trace", trace, "--load-slope", 1, "--jobs", 29)
    assert short.exit_code == 2
    assert "30 rounds" in said(short) and "J + T = 31" in said(short) and "wrap" in said(short)
    wrapped = cli("simulate", "--scheme", msgc, "--trace", trace, "--load-slope", 1, "--jobs", 29, "-M", "wrap=true",
                  "--json")
    assert wrapped.exit_code == 0 and json.loads(wrapped.stdout)["summary"]["rounds"] == 31
    both = cli("simulate", "--scheme", msgc, "--trace", trace, "--jobs", 5, "--rounds", 7)
    assert both.exit_code == 2 and "not both" in said(both)
    # gradcode tune on the same trace and jobs: the parameter sets that do not fit are left out,
    # said once, with the same rule (it searches, so it does not stop at the first that does not fit)
    tune = cli("tune", "--trace", trace, "--load-slope", 1, "--jobs", 29, "--max-w", 3, "--json")
    assert tune.exit_code == 0, tune.output
    doc = json.loads(tune.stdout)
    assert doc["skipped"] > 0 and all(c["delay"] <= 1 for c in doc["candidates"])
    warned = " ".join(tune.stderr.split())
    assert warned.count("left out") == 1 and "only T <= 1 fit" in warned


def test_compare_times_the_same_jobs_for_every_scheme(trace):
    res = cli("compare", "--scheme", "m-sgc:B=1,W=3,lam=2", "--scheme", "sr-sgc:B=1,W=2,lam=2", "--scheme", "crc:s=2",
              "--trace", trace, "--load-slope", 1, "--close", 1, "--waitout", "all", "--jobs", 25, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = {r["scheme"].split("(")[0].split(" ")[0]: r for r in doc["rows"]}
    assert {k: (r["rounds"], r["jobs"]) for k, r in rows.items()} == {
        "Uncoded": (25, 25), "MSGC": (27, 25), "SRSGC": (26, 25), "CRC": (25, 25)}
    for r in doc["rows"]:  # speedup: the uncoded time of the 25 jobs over the scheme's
        assert r["speedup"] == pytest.approx(rows["Uncoded"]["total_time"] / r["total_time"])
    # without --jobs the schemes finish different numbers of jobs in the same rounds: said
    plain = cli("compare", "--scheme", "m-sgc:B=1,W=3,lam=2", "--trace", trace, "--load-slope", 1, "--close", 1)
    assert plain.exit_code == 0 and "--jobs" in " ".join(plain.stderr.split())


# ------------------------------------------------------------------ (d) totals and Fig. 2a


def test_tables_show_the_total_time_of_the_jobs(trace):
    sim = cli("simulate", "--scheme", "m-sgc:B=1,W=2,lam=2", "--trace", trace, "--load-slope", 1, "--jobs", 20)
    doc = json.loads(cli("simulate", "--scheme", "m-sgc:B=1,W=2,lam=2", "--trace", trace, "--load-slope", 1,
                         "--jobs", 20, "--json").stdout)["summary"]
    assert sim.exit_code == 0 and f"20 jobs in {doc['total_time']:.4g} s" in said(sim)
    cmp = cli("compare", "--scheme", "m-sgc:B=1,W=2,lam=2", "--trace", trace, "--load-slope", 1, "--jobs", 20)
    assert cmp.exit_code == 0, cmp.output
    header = next(line for line in cmp.stdout.splitlines() if "┃ scheme" in line)  # total_time, as words
    assert "total time" in header and "jobs" in header


def test_plots_of_jobs_completed_against_time(trace, tmp_path):
    png = tmp_path / "sim.png"
    res = cli("simulate", "--scheme", "m-sgc:B=1,W=2,lam=2", "--trace", trace, "--load-slope", 1, "--jobs", 20,
              "--close", 1, "--repeats", 2, "--plot", png, "--json")
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == PNG and json.loads(res.stdout)["plot"] == str(png)
    png2 = tmp_path / "cmp.png"
    res = cli("compare", "--scheme", "m-sgc:B=1,W=2,lam=2", "--scheme", "crc:s=2", "--trace", trace, "--load-slope", 1,
              "--jobs", 20, "--plot", png2)
    assert res.exit_code == 0, res.output
    assert png2.read_bytes()[:8] == PNG


def test_job_completion_times_are_the_ends_of_the_rounds_that_decode_them():
    """Fig. 2a's curve: job t of M-SGC (T = 1, no stragglers) is done at the end of round t + 1."""
    import gradcode
    from gradcode.experiments.cli_sim import job_completions
    from gradcode.schemes.sgc import MSGC

    X = np.ones((6, 4))
    res = gradcode.simulate(MSGC(n=4, B=1, W=2, lam=1, jobs=5), X, 6, records=True)
    (times,) = job_completions([res])
    ends = np.cumsum(res.round_times)
    np.testing.assert_allclose(times, ends[1:])


def test_a_smaller_n_replays_the_traces_first_workers_only_when_asked(tmp_path):
    """-n below the trace's workers is refused (it would drop their times); -M subset=true asks
    for the first n workers, as TraceDelays(subset=True) does in Python."""
    import json

    import numpy as np
    from typer.testing import CliRunner

    from gradcode.cli import app

    trace = np.ones((20, 6))
    trace[:, 5] = 9.0  # the slow worker a 4-worker replay leaves out
    np.save(tmp_path / "t.npy", trace)
    base = ["simulate", "--scheme", "uncoded", "--trace", str(tmp_path / "t.npy"), "-n", "4", "--json"]
    refused = CliRunner().invoke(app, base)
    assert refused.exit_code == 2 and "-M subset=true" in " ".join(refused.output.split())
    res = CliRunner().invoke(app, base + ["-M", "subset=true"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["summary"]["mean"] == 1.0
