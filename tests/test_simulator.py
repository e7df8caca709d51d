"""The virtual-clock simulator: hand-computed rounds, order statistics, the mu-rule and wait-outs,
the vectorized path against the protocol path, every code under every delay model, records."""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradcode
from codes_util import SMALL_INSTANCES
from gradcode.schemes import ProtocolError, Scheme, StaticScheme, Task
from gradcode.sim import SimulationResult

make_model = gradcode.make_delay_model


def trace(rows, **kw):
    return make_model("trace", delays=np.array(rows, dtype=float), **kw)


def both(code, model, rounds, **kw):
    """The fast path against the protocol path message by message (the batched event path of a
    static code is the fast path's own code, so it would compare it with itself)."""
    from gradcode.sim import simulator

    a = gradcode.simulate(code, model, rounds, method="fast", **kw)
    batched, simulator.BATCHED = simulator.BATCHED, False
    try:
        b = gradcode.simulate(code, model, rounds, method="events", **kw)
    finally:
        simulator.BATCHED = batched
    assert_same(a, b)
    return a


def assert_same(a: SimulationResult, b: SimulationResult):
    np.testing.assert_array_equal(a.round_times, b.round_times)
    np.testing.assert_array_equal(a.stragglers, b.stragglers)
    np.testing.assert_array_equal(a.arrivals, b.arrivals)
    np.testing.assert_array_equal(a.waitout_rounds, b.waitout_rounds)
    np.testing.assert_array_equal(a.job_done_round, b.job_done_round)
    np.testing.assert_array_equal(a.finish_times, b.finish_times)


# ------------------------------------------------------------------------------ hand-computed


def test_frc_n4_s1_by_hand():
    # frc n=4, s=1: data groups {0, 2} and {1, 3}; the round ends when each group has one worker
    code = gradcode.make_code("frc", n=4, s=1)
    res = both(code, trace([[1, 5, 3, 2], [4, 1, 2, 3], [1, 2, 3, 4]]), 3)
    assert res.round_times.tolist() == [2.0, 2.0, 2.0]
    assert res.stragglers.tolist() == [
        [False, True, True, False],
        [True, False, False, True],
        [False, False, True, True],
    ]
    assert res.arrivals.tolist() == [[1, -1, -1, 2], [-1, 1, 2, -1], [1, 2, -1, -1]]
    assert res.finish_times.tolist() == [[1, 5, 3, 2], [4, 1, 2, 3], [1, 2, 3, 4]]
    assert res.total_time == 6.0 and res.waitouts == 0
    assert res.job_done_round.tolist() == [0, 1, 2]


def test_uncoded_waits_for_the_slowest_and_crc_for_the_n_minus_s_th():
    rng = np.random.default_rng(3)
    rows = rng.exponential(size=(50, 6))
    res = both(gradcode.make_code("uncoded", n=6), trace(rows), 50)
    np.testing.assert_array_equal(res.round_times, rows.max(axis=1))
    assert not res.stragglers.any()
    res = both(gradcode.make_code("crc", n=6, s=2), trace(rows), 50)
    np.testing.assert_array_equal(res.round_times, np.sort(rows, axis=1)[:, 3])
    assert (res.stragglers.sum(axis=1) == 2).all()


@pytest.mark.parametrize("s", [1, 2, 3])
def test_crc_under_fixed_is_the_order_statistic(s):
    n = 8
    code = gradcode.make_code("crc", n=n, s=s, seed=2)
    model = make_model("fixed", stragglers=s, delay=0.5, base=1.0)
    res = both(code, model, 200, seed=7)
    times = model.draw(200, n, np.random.default_rng(7)).times(code.worker_loads)
    np.testing.assert_allclose(res.round_times, np.sort(times, axis=1)[:, n - s - 1], rtol=1e-12)
    # the s delayed workers are exactly the stragglers, and the round time is the undelayed one
    np.testing.assert_allclose(res.round_times, (s + 1) / n, rtol=1e-12)
    drawn = model.draw(200, n, np.random.default_rng(7)).straggling
    np.testing.assert_array_equal(res.stragglers, drawn)


def test_mu_rule_and_waitouts_by_hand():
    code = gradcode.make_code("crc", n=4, s=1)  # any 3 workers decode
    rows = [
        [1.0, 1.2, 1.4, 3.0],  # kappa 1, deadline 1.5: workers 0-2 in, decodable
        [1.0, 1.6, 2.0, 3.0],  # only worker 0 by 1.5: wait-out until the 3rd arrival at 2.0
        [1.0, 1.1, 1.2, 1.3],  # everyone in before the deadline: round ends at 1.3
        [2.0, 1.0, 9.0, 1.5],  # kappa 1 (worker 1), deadline 1.5 (tie counts): 1, 3 in; wait to 2.0
    ]
    res = both(code, trace(rows), 4, close=0.5)
    assert res.round_times.tolist() == [1.5, 2.0, 1.3, 2.0]
    assert res.waitout_rounds.tolist() == [False, True, False, True] and res.waitouts == 2
    assert res.stragglers.tolist() == [
        [False, False, False, True],
        [False, False, False, True],
        [False, False, False, False],
        [False, False, True, False],
    ]
    # under "decodable" the same rows end at the 3rd arrival
    res = both(code, trace(rows), 4)
    assert res.round_times.tolist() == [1.4, 2.0, 1.2, 2.0] and res.waitouts == 0


def test_mu_rule_with_a_decodable_deadline_marks_late_workers_as_stragglers():
    code = gradcode.make_code("frc", n=4, s=1)  # groups {0, 2}, {1, 3}
    res = both(code, trace([[1.0, 1.4, 1.45, 5.0]]), 1, close=0.5)
    assert res.round_times.tolist() == [1.5]
    assert res.stragglers.tolist() == [[False, False, False, True]]  # 2 was in by the deadline
    res = both(code, trace([[1.0, 1.4, 1.45, 5.0]]), 1, close=0.0)
    assert res.round_times.tolist() == [1.4] and res.waitouts == 1  # waited for group {1, 3}


def test_partial_code_alpha_partial_stragglers_finish_their_naive_part():
    """Tandon Sec. 4: with n=3, s=1, alpha=2 a straggler at most alpha times slower delivers its
    naive message by the time the fast workers deliver both, so the round takes the fast time."""
    code = gradcode.make_code("partial", n=3, s=1, alpha=2)
    L = code.load  # 4/9; the trace gives seconds at that load, scaled proportionally to prefixes
    res = both(code, trace([[1.0, 1.0, 2.0], [1.0, 1.0, 3.0]], trace_load=L, load_rule="proportional"), 2)
    # row 0: naive messages at 0.5, 0.5, 1.0; coded at 1, 1, 2 -> decodable at 1.0
    # row 1: the straggler is 3x slower: its naive message arrives at 1.5
    assert res.round_times.tolist() == pytest.approx([1.0, 1.5])
    assert res.stragglers.tolist() == [[False, False, True]] * 2


def test_communication_time_queues_messages():
    code = gradcode.make_code("partial", n=3, s=1, alpha=2)
    L = code.load
    # compute: naive part at 0.5, everything at 1.0; each message takes 0.75 s on the link
    res = both(code, trace([[1.0, 1.0, 1.0]], trace_load=L, load_rule="proportional", comm=0.75), 1)
    # message 0 arrives at 0.5 + 0.75 = 1.25, message 1 at max(1.0, 1.25) + 0.75 = 2.0
    assert res.round_times.tolist() == [2.0]
    assert res.arrivals.tolist() == [[2.0, 2.0, 2.0]]
    code = gradcode.make_code("crc", n=3, s=1)
    res = both(code, trace([[1.0, 2.0, 3.0]], comm=0.5, comm_latency=0.25), 1)
    assert res.round_times.tolist() == [2.75]


# ------------------------------------------------------------------------------ paths and models


def model_instances():
    out = []
    for name in gradcode.available_delay_models():
        params = {}
        if name == "trace":
            # one 12-worker trace for codes of every n: its first n workers, asked for
            params = dict(delays=np.random.default_rng(0).exponential(size=(30, 12)), subset=True)
        out.append(pytest.param(name, params, id=name))
    return out


def code_instances():
    """Two small instances of every registered code (a family with none is reported by the code
    contract suite, test_code_contract.py::test_every_registered_code_has_instances)."""
    out = []
    for name in gradcode.available_codes():
        for params in SMALL_INSTANCES.get(name, [])[:2]:
            out.append((name, params))
    return out


@pytest.mark.parametrize("model_name,model_params", model_instances())
def test_every_code_under_every_model_both_paths_agree(model_name, model_params):
    model = make_model(model_name, **model_params)
    for name, params in code_instances():
        code = gradcode.make_code(name, **params)
        for close in ("decodable", 0.3):
            res = both(code, model, 30, seed=11, close=close)
            assert res.rounds == 30 and res.n == code.n
            assert (res.round_times >= 0).all() and np.isfinite(res.round_times).all()
            assert res.stragglers.sum(axis=1).max() <= code.n
            assert ((res.arrivals == -1) == res.stragglers).all()
            assert (res.arrivals[~res.stragglers] <= res.round_times.repeat(code.n).reshape(30, -1)[~res.stragglers]).all()
            if code.messages_per_worker == 1:
                # single-message codes: the workers that arrived decode on their own
                for row in res.stragglers[:5]:
                    assert code.can_decode({w: code.messages_of(w) for w in np.flatnonzero(~row)})


def test_same_seed_same_result_and_seeds_matter():
    code = gradcode.make_code("crc", n=10, s=3)
    model = make_model("shifted-exp", mu=1.0, alpha=0.01)
    a = gradcode.simulate(code, model, 100, seed=4)
    b = gradcode.simulate(code, model, 100, seed=4)
    assert_same(a, b)
    c = gradcode.simulate(code, model, 100, seed=5)
    assert not np.array_equal(a.round_times, c.round_times)
    g = gradcode.simulate(code, model, 100, seed=np.random.default_rng(4))
    assert_same(a, g)


def test_shifted_exp_crc_mean_round_time_matches_order_statistics():
    """GC-DC eq. 20: X = r (alpha + Exp(mu)); the (n-s)-th fastest of n has mean
    r (alpha + (H_n - H_s) / mu). Monte-Carlo over 20000 rounds, within 4 standard errors."""
    n, s, mu, alpha = 10, 2, 2.0, 0.05
    code = gradcode.make_code("crc", n=n, s=s)
    res = gradcode.simulate(code, make_model("shifted-exp", mu=mu, alpha=alpha), 20000, seed=0)
    H = lambda m: sum(1.0 / i for i in range(1, m + 1))  # noqa: E731
    expect = (s + 1) * (alpha + (H(n) - H(s)) / mu)
    se = res.round_times.std() / np.sqrt(res.rounds)
    assert abs(res.round_times.mean() - expect) < 4 * se


def test_static_scheme_passed_in_keeps_its_history():
    code = gradcode.make_code("frc", n=6, s=1)
    scheme = StaticScheme(code)
    res = gradcode.simulate(scheme, make_model("bernoulli", p=0.3, slowdown=5), 40, seed=2)
    assert res.method == "events"
    np.testing.assert_array_equal(scheme.straggler_history, res.stragglers)
    fast = gradcode.simulate(code, make_model("bernoulli", p=0.3, slowdown=5), 40, seed=2)
    assert_same(res, fast)


class _Observing(StaticScheme):
    def __init__(self, code):
        super().__init__(code)
        self.seen = []

    def _observe_states(self, t, straggling, rates):
        self.seen.append(np.array(straggling))


def test_perfect_state_information_hook():
    code = gradcode.make_code("crc", n=5, s=1)
    model = make_model("fixed", stragglers=1, delay=1.0)
    scheme = _Observing(code)
    gradcode.simulate(scheme, model, 10, seed=3)
    np.testing.assert_array_equal(np.array(scheme.seen), model.draw(10, 5, np.random.default_rng(3)).straggling)


class _Pipelined(Scheme):
    """A toy sequential scheme (delay T = 1): each worker owns two half partitions 2w, 2w+1; in
    round t it computes half 2w of job t and then half 2w+1 of job t-1, so job t needs every
    worker in rounds t and t+1 (uncoded, no straggler tolerance)."""

    delay = 1

    def __init__(self, n, jobs):
        self.n, self.jobs = n, jobs
        self.partition_sizes = np.full(2 * n, 1 / (2 * n))
        self.got = {}
        self.one = np.ones((1, 1, 1))

    def _plan(self, t):
        out = {}
        for w in range(self.n):
            tasks = []
            if t < self.jobs:
                tasks.append(Task(t, (2 * w,), self.one))
            if 1 <= t <= self.jobs:
                tasks.append(Task(t - 1, (2 * w + 1,), self.one))
            out[w] = tuple(tasks)
        return out

    def _on_result(self, t, worker, index, payload, time):
        job = t if (t < self.jobs and index == 0) else t - 1
        self.got.setdefault(job, set()).add((worker, job == t))

    def _ready(self, t):
        # job t-1 is complete and every worker delivered its half of job t (needed next round)
        done = t == 0 or len(self.got.get(t - 1, ())) == 2 * self.n
        started = t >= self.jobs or len(self.got.get(t, ())) == self.n
        return done and started

    def _close(self, t, arrived):
        return [] if t == 0 else [(t - 1, None)]


def test_sequential_scheme_through_the_protocol_path():
    rows = np.array([[1.0, 2.0], [4.0, 1.0], [2.0, 2.0], [1.0, 1.0]])
    res = gradcode.simulate(_Pipelined(2, 3), trace(rows, trace_load=0.5, load_rule="proportional"), 4)
    # round 0: one half (load 1/4) -> half the trace time; rounds 1-2: both halves; round 3: one
    # half; each round needs every worker's results -> the slowest worker
    assert res.round_times.tolist() == [1.0, 4.0, 2.0, 0.5]
    assert res.job_done_round.tolist() == [1, 2, 3]
    assert res.arrivals[1].tolist() == [4.0, 1.0]
    # a job started but not finished when the run ends is reported, as -1
    short = gradcode.simulate(_Pipelined(2, 5), trace(rows, trace_load=0.5, load_rule="proportional"), 4)
    assert short.job_done_round.tolist() == [1, 2, 3, -1]


def test_records_json_csv_and_arrivals(tmp_path):
    code = gradcode.make_code("frc", n=4, s=1)
    res = gradcode.simulate(code, trace([[1, 5, 3, 2], [4, 1, 2, 3]]), 2)
    recs = res.to_records()
    assert recs[0] == {"scheme": repr(code), "round": 0, "start": 0.0, "time": 2.0, "stragglers": 2,
                       "waitout": False, "jobs": [0]}
    assert recs[1]["start"] == 2.0
    doc = json.loads(res.to_json(tmp_path / "r.json"))
    assert doc["summary"]["total_time"] == 4.0 and doc["summary"]["mean"] == 2.0
    assert json.loads((tmp_path / "r.json").read_text())["records"] == json.loads(json.dumps(recs))
    csv_text = res.to_csv(tmp_path / "r.csv")
    assert csv_text.splitlines()[0] == "scheme,round,start,time,stragglers,waitout,jobs"
    assert csv_text.splitlines()[1].endswith(",0,0.0,2.0,2,False,0")
    res.save_arrivals(tmp_path / "a.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), res.arrivals)
    # the finish times are a trace: replaying them gives the same run
    for name in ("t.npy", "t.csv"):
        res.save_trace(tmp_path / name)
        back = gradcode.load_trace(tmp_path / name)
        np.testing.assert_array_equal(back, res.finish_times)
        assert_same(gradcode.simulate(code, back, 2), res)
    with pytest.raises(ValueError, match=".npy or .csv"):
        res.save_arrivals(tmp_path / "a.txt")


def test_progress_bar_and_model_shortcuts(capsys):
    code = gradcode.make_code("crc", n=4, s=1)
    a = gradcode.simulate(code, "shifted-exp", 50, progress=True)
    b = gradcode.simulate(code, make_model("shifted-exp"), 50, method="events", progress=True)
    assert_same(a, b)
    assert capsys.readouterr().out == ""
    rows = np.ones((3, 4))
    assert gradcode.simulate(code, rows, 3).round_times.tolist() == [1.0, 1.0, 1.0]


def test_bad_arguments():
    code = gradcode.make_code("crc", n=4, s=1)
    model = make_model("shifted-exp")
    with pytest.raises(ValueError, match="rounds"):
        gradcode.simulate(code, model, 0)
    with pytest.raises(ValueError, match="close"):
        gradcode.simulate(code, model, 5, close="fastest")
    with pytest.raises(ValueError, match="close"):
        gradcode.simulate(code, model, 5, close=-0.5)
    with pytest.raises(TypeError, match="close"):
        gradcode.simulate(code, model, 5, close=True)
    with pytest.raises(ValueError, match="method"):
        gradcode.simulate(code, model, 5, method="gpu")
    with pytest.raises(ValueError, match="method='fast'"):
        gradcode.simulate(_Pipelined(2, 2), model, 5, method="fast")
    with pytest.raises(TypeError, match="scheme_or_code"):
        gradcode.simulate("crc", model, 5)
    with pytest.raises(TypeError, match="model"):
        gradcode.simulate(code, object(), 5)
    with pytest.raises(ValueError, match="workers"):
        gradcode.simulate(code, np.ones((5, 3)), 5)  # a trace with too few workers


def test_a_scheme_that_never_decodes_is_reported():
    class Never(_Pipelined):
        def ready(self, t):
            return False

    with pytest.raises(gradcode.NotDecodableError, match="round 0"):
        gradcode.simulate(Never(2, 2), make_model("shifted-exp"), 3)


def test_a_scheme_finishing_a_job_twice_is_a_protocol_error():
    class Twice(_Pipelined):
        def close(self, t, arrived):
            return [(0, None)]

    with pytest.raises(ProtocolError, match="job 0 twice"):
        gradcode.simulate(Twice(2, 2), make_model("shifted-exp"), 3)


# ------------------------------------------------------------------------------ CLI


def _cli(*args):
    from typer.testing import CliRunner

    from gradcode.cli import app

    return CliRunner().invoke(app, list(args))


def test_cli_simulate_json_matches_the_library():
    r = _cli("simulate", "--scheme", "crc", "--workers", "6", "--tolerance", "2", "--delay-model", "bernoulli",
             "-M", "p=0.2", "-M", "slowdown=5", "--rounds", "50", "--repeats", "2", "--seed", "3", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    code = gradcode.make_code("crc", n=6, s=2)
    model = make_model("bernoulli", p=0.2, slowdown=5)
    for i, row in enumerate(doc["rows"]):
        res = gradcode.simulate(code, model, 50, seed=3 + i)
        assert row["seed"] == 3 + i and row["total_time"] == pytest.approx(res.total_time)
        assert row["p95"] == pytest.approx(np.percentile(res.round_times, 95))
    assert doc["summary"]["scheme"] == "CRC n=6 s=2" and doc["summary"]["repeats"] == 2


def test_cli_simulate_trace_file_mu_rule_and_records(tmp_path):
    rows = np.array([[1.0, 1.2, 1.4, 3.0], [1.0, 1.6, 2.0, 3.0]])
    np.save(tmp_path / "t.npy", rows)
    r = _cli("simulate", "--scheme", "crc", "-n", "4", "-s", "1", "--trace", str(tmp_path / "t.npy"),
             "--close", "0.5", "--records", str(tmp_path / "rec.csv"), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["rows"][0]["total_time"] == 3.5 and doc["rows"][0]["waitouts"] == 1
    assert doc["summary"]["rounds"] == 2  # the trace's length by default
    lines = (tmp_path / "rec.csv").read_text().splitlines()
    assert len(lines) == 3 and "waitout" in lines[0]


def test_cli_compare_same_draws_speedup_and_plot(tmp_path):
    png = tmp_path / "cmp.png"
    r = _cli("compare", "--scheme", "frc", "--scheme", "crc:seed=1", "-n", "6", "-s", "1", "--delay-model", "fixed",
             "-M", "stragglers=1", "-M", "delay=2", "--rounds", "20", "--plot", str(png), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    by = {row["scheme"]: row for row in doc["rows"]}
    assert set(by) == {"Uncoded n=6", "FRC n=6 s=1", "CRC n=6 s=1"}
    # uncoded waits for the delayed worker (1/6 + 2 s); the codes never do (2/6 s)
    assert by["Uncoded n=6"]["mean"] == pytest.approx(1 / 6 + 2)
    assert by["CRC n=6 s=1"]["mean"] == pytest.approx(2 / 6)
    assert by["CRC n=6 s=1"]["speedup"] == pytest.approx((1 / 6 + 2) / (2 / 6))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_errors_exit_2():
    assert _cli("simulate", "--scheme", "nope", "--rounds", "5").exit_code == 2
    assert _cli("simulate", "--scheme", "crc", "-n", "4", "-s", "9").exit_code == 2
    assert _cli("simulate", "--delay-model", "shifted-exp", "-M", "mu", "--rounds", "5").exit_code == 2
    assert _cli("simulate", "-n", "4", "-s", "1", "--close", "soon", "--rounds", "5").exit_code == 2
    assert _cli("compare", "--scheme", "crc:n=4,s=1", "--scheme", "frc:n=6,s=1", "--rounds", "5").exit_code == 2
    r = _cli("simulate", "--scheme", "gc-sc", "-n", "6", "-s", "1", "--rounds", "5")
    assert r.exit_code == 2 and "clusters" in r.output


def test_cli_compare_scheme_specs_and_params():
    """JSON values keep their commas; --param reaches only the schemes that take it; the default
    scheme set works without --stragglers; a parameter no scheme takes is refused."""
    r = _cli("compare", "--scheme", "gc-sc:clusters=2,assignment=[[0,1],[2,3],[4,5]]", "-n", "6", "-s", "1",
             "--rounds", "20", "--json")
    assert r.exit_code == 0, r.output
    assert [row["scheme"] for row in json.loads(r.stdout)["rows"]] == ["Uncoded n=6", "GCSC n=6 clusters=2 s=1"]
    r = _cli("compare", "-n", "6", "-s", "1", "--rounds", "20", "-p", "seed=3", "--json")
    assert r.exit_code == 0, r.output
    names = [row["scheme"] for row in json.loads(r.stdout)["rows"]]
    assert names == ["Uncoded n=6", "Ignore n=6 s=1 (inexact)", "FRC n=6 s=1", "CRC n=6 s=1"]
    r = _cli("compare", "-n", "6", "--rounds", "20", "--json")
    assert r.exit_code == 0, r.output
    r = _cli("compare", "-n", "6", "-s", "1", "--rounds", "20", "-p", "alpha=2")
    assert r.exit_code == 2 and "no compared scheme takes it" in r.output


def test_cli_warns_about_ignored_stragglers_and_load_blind_traces(tmp_path):
    r = _cli("simulate", "--scheme", "agc", "-n", "6", "-p", "d=3", "-p", "L=2", "-s", "1", "--rounds", "10")
    assert r.exit_code == 0, r.output
    assert "takes no s" in r.stderr
    trace = tmp_path / "t.npy"
    np.save(trace, np.random.default_rng(0).exponential(size=(20, 6)))
    r = _cli("compare", "-n", "6", "-s", "2", "--trace", str(trace))
    assert r.exit_code == 0 and "--load-slope" in r.stderr
    # the paper's additive rule (SGC App. J) charges the load: no warning
    r = _cli("compare", "-n", "6", "-s", "2", "--trace", str(trace), "--trace-load", f"{1 / 6}", "--load-slope", "2")
    assert r.exit_code == 0 and "warning" not in r.stderr
    r = _cli("compare", "-n", "6", "-s", "2", "--trace", str(trace), "-M", f"trace_load={1 / 6}", "-M", "load_slope=2")
    assert r.exit_code == 0 and "warning" not in r.stderr


# ------------------------------------------------------------------------------ stop-signal codes


def test_agc_workers_that_sent_the_messages_the_master_needed_are_not_stragglers():
    """agc(n=3, d=2, L=2), every worker computes in 1 s and each message takes comm/L = 0.5 s:
    message 0 of all three arrives at 1.5 s and decodes (s = 0, r_0 = 1), so the master stops
    there; nobody is a straggler and each arrival is its message 0 (not -1 for want of message 1)."""
    code = gradcode.make_code("agc", n=3, d=2, L=2)
    res = both(code, trace([[1.0, 1.0, 1.0]], comm=1.0), 1)
    assert res.round_times.tolist() == [1.5]
    assert res.stragglers.tolist() == [[False, False, False]]
    assert res.arrivals.tolist() == [[1.5, 1.5, 1.5]]
    assert res.finish_times.tolist() == [[2.0, 2.0, 2.0]]  # message 1 would have come at 2.0
    assert res.summary()["stragglers_per_round"] == 0.0


def test_agc_marks_exactly_the_slow_worker():
    """agc(n=4, d=3, L=2): r_1 = ceil(2/2) = 1. Worker 2 is slow (10 s); the others deliver message
    0 at 1.5 s, which decodes with s = 1, so only worker 2 is a straggler; the arrivals of the
    others are their message 0. With worker 2 at 1.8 s the round waits for nobody else: s = 0 with
    r_0 = 1 needs all four message 0s, so it closes at 2.3 s with no straggler."""
    code = gradcode.make_code("agc", n=4, d=3, L=2)
    res = both(code, trace([[1.0, 1.0, 10.0, 1.0]], comm=1.0), 1)
    assert res.round_times.tolist() == [1.5]
    assert res.stragglers.tolist() == [[False, False, True, False]]
    assert res.arrivals.tolist() == [[1.5, 1.5, -1.0, 1.5]]
    # a d=2 code needs r_1 = 2 messages from three workers: the slow one is still the only straggler
    code = gradcode.make_code("agc", n=4, d=2, L=2)
    res = both(code, trace([[1.0, 1.0, 10.0, 1.0]], comm=1.0), 1)
    assert res.round_times.tolist() == [2.0]
    assert res.stragglers.tolist() == [[False, False, True, False]]
    assert res.arrivals.tolist() == [[2.0, 2.0, -1.0, 2.0]]


def test_group_agc_judges_each_group_by_its_own_rule():
    """g-agc(n=4, d=2, L=2): groups {0, 1} and {2, 3}, each an agc(2, 2, 2) (r_0 = 1 from both,
    r_1 = 2 from one). Worker 3 is slow: group 0 decodes from message 0 of both workers, group 1
    from both messages of worker 2, so only worker 3 is a straggler."""
    code = gradcode.make_code("g-agc", n=4, d=2, L=2)
    res = both(code, trace([[1.0, 1.0, 1.0, 10.0]], comm=1.0), 1)
    assert res.round_times.tolist() == [2.0]
    assert res.stragglers.tolist() == [[False, False, False, True]]
    assert res.arrivals.tolist() == [[2.0, 2.0, 2.0, -1.0]]


def test_agc_under_shifted_exp_marks_only_the_workers_the_master_did_without():
    """agc(6, 4, 4) under shifted-exp (the whole-result rule marked all six workers in 55% of
    the rounds): never more than d - 1 = 3 stragglers; where the master stopped at an ``s`` of
    eq. 27 the n - s non-stragglers' r_s messages decode on their own; otherwise (a mixed pattern)
    the stragglers are the workers that delivered nothing."""
    code = gradcode.make_code("agc", n=6, d=4, L=4, seed=2)
    model = make_model("shifted-exp", mu=5, alpha=0.5, comm=1)
    res = both(code, model, 200, seed=0)
    s = res.stragglers.sum(axis=1)
    assert s.max() <= code.d - 1 and s.min() >= 0
    assert (s == code.n).sum() == 0
    # the messages each worker held at the close, from the finish times and arrivals of the run
    from gradcode.schemes.static import code_loads
    from gradcode.sim.simulator import _arrival_table

    draw = model.draw(200, code.n, np.random.default_rng(0))
    P, Rw = code_loads(code)
    A = _arrival_table(draw.intercept, draw.slope, P, Rw, float(model.message_time(1 / code.L)))
    counts = (A <= res.round_times[:, None, None]).sum(axis=2)
    kinds = set()
    for t in range(200):
        fits = [q for q in range(code.d) if (counts[t] >= code.rounds_needed(q)).sum() >= code.n - q]
        if fits:
            r = code.rounds_needed(fits[0])
            assert res.stragglers[t].tolist() == (counts[t] < r).tolist()
            assert code.can_decode({w: r for w in np.flatnonzero(~res.stragglers[t])})
            kinds.add("s")
        else:
            assert res.stragglers[t].tolist() == (counts[t] == 0).tolist()
            kinds.add("mixed")
        assert code.can_decode({w: int(c) for w, c in enumerate(counts[t]) if c})
    assert kinds == {"s", "mixed"}  # both cases occur in this run


@pytest.mark.parametrize("method", ["fast", "events"])
def test_the_papers_waitout_waits_for_every_worker(method):
    """SGC Sec. 2: a round the mu-deadline leaves unresolved waits out *all* the workers
    (waitout='all'); the default waits only until it decodes. Rounds resolved by the deadline
    are the same under both rules."""
    code = gradcode.make_code("crc", n=6, s=1, seed=0)
    rows = np.array([[1.0, 1.0, 1.0, 1.0, 5.0, 9.0],   # two slow workers: not decodable at 2.0
                     [1.0, 1.0, 1.0, 1.0, 1.0, 9.0]])  # one slow worker: decodable at the deadline
    model = trace(rows)
    decodable = gradcode.simulate(code, model, 2, close=1.0, method=method)
    everyone = gradcode.simulate(code, model, 2, close=1.0, method=method, waitout="all")
    assert decodable.round_times.tolist() == [5.0, 2.0]
    assert everyone.round_times.tolist() == [9.0, 2.0]
    assert everyone.waitout_rounds.tolist() == [True, False]
    with pytest.raises(ValueError, match="waitout"):
        gradcode.simulate(code, model, 2, close=1.0, waitout="some")


@pytest.mark.parametrize("target", ["code", "sr-sgc", "gc-dc"])
def test_a_model_that_draws_a_non_finite_delay_is_refused_on_every_path(target):
    """A delay model of one's own that draws NaN or infinity: a clear error naming the round and
    worker, before any path times it (the paths would otherwise each read NaN their own way)."""
    import dataclasses

    class Broken:
        def __init__(self):
            self.inner = gradcode.make_delay_model("bernoulli", p=0.2, slowdown=3.0)

        def draw(self, *args):
            return self.inner.draw(*args)

        def message_time(self, fraction):
            return 0.0

        def draw_blocks(self, rounds, n, rng, block):
            for a, b, draw in self.inner.draw_blocks(rounds, n, rng, block):
                slope = np.array(draw.slope)
                slope[min(3, b - a - 1), 1] = np.inf
                yield a, b, dataclasses.replace(draw, slope=slope)

        def __repr__(self):
            return "Broken()"

    from gradcode.schemes import make_scheme

    subject = {"code": lambda: gradcode.make_code("crc", n=6, s=1),
               "sr-sgc": lambda: make_scheme("sr-sgc", n=6, B=1, W=2, lam=2),
               "gc-dc": lambda: make_scheme("gc-dc", n=6, clusters=2, r=2, ssi="perfect")}[target]()
    with pytest.raises(ValueError, match=r"Broken\(\) drew a non-finite delay for worker 1 in round 3"):
        gradcode.simulate(subject, Broken(), 10, seed=0)


# ---------------------------------------------------------------------------------- transports


def test_ring_allreduce_time_formula():
    from gradcode.schemes.timing import ring_allreduce_time

    step = lambda f: 0.01 + 2.0 * f  # noqa: E731  (comm_latency 0.01, comm 2 s a whole gradient)
    got = ring_allreduce_time(np.array([[0, 1, 2], [4, 8, 4]]), step)
    want = [[0.0, 0.0, 2 * 0.01 + 2.0], [6 * 0.01 + 6 / 4 * 2.0, 14 * 0.01 + 14 / 8 * 2.0, 6 * 0.01 + 6 / 4 * 2.0]]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    assert ring_allreduce_time(1, step) == 0.0


@pytest.mark.parametrize("name, kw", [("uncoded", dict(n=6)), ("crc", dict(n=6, s=2)), ("frc", dict(n=6, s=1)),
                                      ("partial", dict(n=6, s=1, alpha=2.0))])
@pytest.mark.parametrize("close", ["decodable", 0.5])
def test_collective_round_is_the_notes_close_plus_the_members_ring(name, kw, close):
    """A collective round closes where a star round with message time ``comm_latency`` closes
    (the notes carry no payload), and then takes the ring all-reduce over its members, the
    workers with a message in by the close (for ``partial``, the stragglers whose message 0 came
    too): the same compute draws (the communication component draws nothing)."""
    from gradcode.schemes.static import code_loads
    from gradcode.schemes.timing import message_arrivals

    comm, latency, rounds = 0.8, 0.003, 300
    code = gradcode.make_code(name, **kw)
    coll = gradcode.simulate(code, make_model("shifted-exp", comm=comm, comm_latency=latency), rounds, seed=4,
                             close=close, transport="collective", records=True)
    notes = gradcode.simulate(code, make_model("shifted-exp", comm_latency=latency), rounds, seed=4, close=close,
                              records=True)
    np.testing.assert_array_equal(coll.stragglers, notes.stragglers)
    np.testing.assert_array_equal(coll.arrivals, notes.arrivals)
    draw = make_model("shifted-exp").draw(rounds, code.n, np.random.default_rng(4))
    first = message_arrivals(draw.intercept, draw.slope, code_loads(code)[0], latency)[:, :, 0]
    k = (first <= notes.round_times[:, None]).sum(axis=1)
    if name == "partial":
        assert (k > code.n - notes.stragglers.sum(axis=1)).any()  # stragglers' message 0 counted
    ring = np.where(k > 1, 2 * (k - 1) * (latency + comm / k), 0.0)
    np.testing.assert_allclose(coll.round_times, notes.round_times + ring, rtol=1e-13, atol=0)
    assert coll.transport.startswith("collective") and f"message_time(1) = {comm + latency:.6g} s" in coll.transport
    assert coll.summary()["transport"] == coll.transport and notes.summary()["transport"] == "star"


def test_collective_transport_drives_a_static_scheme_and_refuses_the_others():
    """A scheme given as such is closed round by round (its straggler history) with the code's
    times; a scheme the runtime cannot run collectively, and an unknown transport, are refused."""
    model = make_model("shifted-exp", comm=0.5)
    code = gradcode.make_code("crc", n=5, s=1)
    scheme = StaticScheme(code)
    a = gradcode.simulate(scheme, model, 50, seed=2, transport="collective", records=True)
    b = gradcode.simulate(code, model, 50, seed=2, transport="collective", records=True)
    np.testing.assert_array_equal(a.round_times, b.round_times)
    np.testing.assert_array_equal(scheme.stragglers, a.stragglers)
    sgc = gradcode.schemes.make_scheme("sr-sgc", n=6, B=1, W=2, lam=1)
    with pytest.raises(gradcode.errors.CollectiveUnsupportedError, match="cannot simulate SRSGC.*static codes"):
        gradcode.simulate(sgc, model, 5, transport="collective")
    gcdc = gradcode.schemes.make_scheme("gc-dc", n=6, clusters=2, r=2)  # the runtime's, not yet the simulator's
    with pytest.raises(gradcode.errors.CollectiveUnsupportedError, match="cannot simulate GCDC.*static codes"):
        gradcode.simulate(gcdc, model, 5, transport="collective")
    with pytest.raises(ValueError, match="transport must be one of"):
        gradcode.simulate(code, model, 5, transport="ring")
    verified = StaticScheme(code, verify=True)  # waits for spare results message by message: not here
    with pytest.raises(gradcode.errors.CollectiveUnsupportedError, match="verify"):
        gradcode.simulate(verified, model, 5, transport="collective")
    with pytest.raises(ValueError, match="do not batch"):
        gradcode.simulate(verified, model, 5, master_link="shared")


def test_a_shared_master_link_queues_the_stars_messages_and_sends_the_parameters_back():
    """Worked example: workers done at 1, 2, 3 s, a message takes 0.5 s on a link. Separate links
    (the papers' model): the last arrives at 3.5 s. One link at the master: the messages reach it at
    1.5, 2.5, 3.5 and are through at 2.0, 3.0, 4.0, then the parameters go to 3 workers (1.5 s):
    5.5 s. Collective: notes at 1, 2, 3 (no latency), then a 3-member ring, 4 steps of a third of
    the vector: 3 + 4 x 0.5 / 3 s, with either link."""
    model = make_model("trace", delays=np.array([[1.0, 2.0, 3.0]] * 3), comm=0.5)
    code = gradcode.make_code("uncoded", n=3)
    want = {("star", "separate"): 3.5, ("star", "shared"): 5.5, ("collective", "separate"): 3 + 2 / 3,
            ("collective", "shared"): 3 + 2 / 3}
    for (transport, link), t in want.items():
        res = gradcode.simulate(code, model, 3, transport=transport, master_link=link, records=True)
        np.testing.assert_allclose(res.round_times, t, rtol=1e-12)
    assert "one link at the master" in gradcode.simulate(code, model, 1, master_link="shared").transport


def test_through_one_link_is_a_first_come_first_served_queue():
    from gradcode.sim.simulator import through_one_link

    rng = np.random.default_rng(5)
    A = rng.exponential(1.0, size=(7, 5, 3)).cumsum(axis=2)
    A[2, 1, 1:] = np.inf  # a worker with one message
    got = through_one_link(A, 0.3)
    for t in range(A.shape[0]):  # each message, in the order it reaches the link, through it one at a time
        ready = A[t].ravel()
        want, free = np.full(ready.size, np.inf), -np.inf
        for i in sorted(range(ready.size), key=lambda i: ready[i]):
            if np.isfinite(ready[i]):
                free = max(free, ready[i]) + 0.3
                want[i] = free
        np.testing.assert_allclose(got[t].ravel(), want, rtol=1e-13)
    assert np.isinf(got[2, 1, 1:]).all() and np.isfinite(got[2, 1, 0])


def test_at_scale_the_shared_link_makes_the_star_pay_for_n_and_the_collective_does_not():
    model = make_model("shifted-exp", comm=0.2)
    code = gradcode.make_code("crc", n=64, s=4)
    star = gradcode.simulate(code, model, 200, seed=1, master_link="shared").summary()["mean"]
    coll = gradcode.simulate(code, model, 200, seed=1, transport="collective").summary()["mean"]
    papers = gradcode.simulate(code, model, 200, seed=1).summary()["mean"]
    assert papers < coll < star  # the collective pays its ring, the shared star 2 x 64 messages' time
    assert star > papers + 64 * 0.2  # at least the parameters' trip back
    with pytest.raises(ValueError, match="master_link must be one of"):
        gradcode.simulate(code, model, 5, master_link="one")
    with pytest.raises(ValueError, match="master_link=.shared. times static codes on the fast path"):
        gradcode.simulate(gradcode.schemes.make_scheme("gc-dc", n=6, clusters=2, r=2), model, 5, master_link="shared")
