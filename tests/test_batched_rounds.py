"""The simulator's batched rounds (``Scheme.plan_loads`` / ``ready_after`` / ``on_results``) give
the per-message protocol path's results bit for bit: every record, the schemes' own straggler
history and counters, for the sequential codes, static codes run as schemes and GC-DC, under every
closing rule, on draws with enough stragglers to force wait-outs. And the batched calls obey the
protocol's message rules."""

from __future__ import annotations

import numpy as np
import pytest

import gradcode
from gradcode.schemes import StaticScheme, make_scheme
from gradcode.errors import NotDecodableError
from gradcode.schemes.base import ProtocolError
from gradcode.sim import simulator

SCHEMES = [
    ("sr-sgc", dict(n=12, B=1, W=2, lam=3)),
    ("sr-sgc", dict(n=12, B=2, W=3, lam=4, jobs=25)),
    ("sr-sgc-rep", dict(n=12, B=1, W=3, lam=3)),
    ("m-sgc", dict(n=10, B=1, W=2, lam=3)),
    ("m-sgc", dict(n=10, B=2, W=3, lam=2, jobs=25)),
    ("m-sgc", dict(n=8, B=1, W=3, lam=8)),
    ("m-sgc-rep", dict(n=12, B=2, W=3, lam=2)),
    ("crc", dict(n=12, s=3)),
    ("frc", dict(n=12, s=2)),
    ("partial", dict(n=8, s=2, alpha=3.0)),
    ("agc", dict(n=10, d=3, L=4)),
    ("gc-dc", dict(n=12, clusters=3, r=2, ssi="imperfect")),
    ("gc-dc", dict(n=12, clusters=3, r=2, ssi="perfect")),
]
CLOSES = [("decodable", "decodable"), (0.0, "decodable"), (0.3, "decodable"), (1.0, "all")]


def _model():
    # frequent long delays: rounds that break the straggler models, so wait-outs happen
    return gradcode.make_delay_model("bernoulli", p=0.25, slowdown=5.0, comm=0.05)


def _run(name, params, close, waitout, batched, monkeypatch, rounds=40, model=None, seed=7):
    """``batched``: ``False`` (message by message), ``True`` (batched, and compiled blocks for
    the schemes that have them) or ``"batched"`` (batched, never compiled)."""
    monkeypatch.setattr(simulator, "BATCHED", bool(batched))
    monkeypatch.setattr(simulator, "COMPILED", batched is True)
    scheme = make_scheme(name, **params)
    assert scheme.batched_rounds
    res = gradcode.simulate(scheme, model or _model(), rounds, seed=seed, close=close, waitout=waitout, records=True)
    return scheme, res


def _assert_same_run(s1, r1, s0, r0):
    for field in ("round_times", "stragglers", "arrivals", "finish_times", "waitout_rounds", "job_done_round"):
        a, b = getattr(r1, field), getattr(r0, field)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), field
    assert np.array_equal(s1.straggler_history, s0.straggler_history)
    assert r1.stats.jobs_done == r0.stats.jobs_done
    for counter in ("stale_messages", "duplicate_messages", "reattempts"):
        assert getattr(s1, counter, None) == getattr(s0, counter, None)
    if hasattr(s0, "conformance"):  # the sequential codes' state: jobs, finished jobs, tracks
        _assert_same_sgc_state(s1, s0)
    if hasattr(s0, "assignment"):  # GC-DC's: closed rounds, observed states, last plan, the GC-SC rounds
        assert s1._closed == s0._closed and not s1._plans and not s1._received
        for observed in ("_states", "_rates"):
            a, b = getattr(s1, observed), getattr(s0, observed)
            assert sorted(a) == sorted(b) and all(np.array_equal(a[u], b[u]) for u in b)
        assert (s1.last_plan.round, s1.last_plan.source) == (s0.last_plan.round, s0.last_plan.source)
        assert np.array_equal(s1.last_plan.codeword, s0.last_plan.codeword)
        assert np.array_equal(s1._static.straggler_history, s0._static.straggler_history)
        assert s1._static._closed == s0._static._closed


def _assert_same_sgc_state(s1, s0):
    assert s1._next == s0._next and s1._round is None and s0._round is None
    j1, j0 = s1.live_jobs(), s0.live_jobs()
    assert sorted(j1) == sorted(j0) and s1._finished == s0._finished
    for u, job in j0.items():
        for field, value in job.items():
            assert np.array_equal(j1[u][field], value), (u, field)
    f1, f0 = s1.conformance.flags, s0.conformance.flags
    assert sorted(f1) == sorted(f0) and all(np.array_equal(f1[a], f0[a]) for a in f0)
    assert s1.conformance.broken == s0.conformance.broken


@pytest.mark.parametrize("close,waitout", CLOSES)
@pytest.mark.parametrize("name,params", SCHEMES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SCHEMES)])
def test_batched_rounds_equal_the_per_message_path(name, params, close, waitout, monkeypatch):
    s0, r0 = _run(name, params, close, waitout, False, monkeypatch)
    modes = (True, "batched") if make_scheme(name, **params).compiled_rounds else (True,)
    for mode in modes:
        s1, r1 = _run(name, params, close, waitout, mode, monkeypatch)
        _assert_same_run(s1, r1, s0, r0)


def test_compiled_rounds_equal_the_other_paths_on_random_configurations(monkeypatch):
    """Random SR-SGC / M-SGC (and GC-Rep) parameters, job counts, closing rules, delay models and
    run lengths: the compiled blocks, the batched rounds and the per-message path agree on every
    record and leave the scheme in the same state."""
    rng = np.random.default_rng(2026)
    rules = [("decodable", "decodable"), (0.0, "decodable"), (0.3, "decodable"), (1.0, "all"), (0.5, "all")]
    played = 0
    while played < 60:
        family = str(rng.choice(["sr-sgc", "sr-sgc-rep", "m-sgc", "m-sgc-rep"]))
        n, B = int(rng.integers(3, 16)), int(rng.integers(1, 4))
        if family.startswith("sr"):
            params = dict(n=n, B=B, W=B * int(rng.integers(1, 4)) + 1, lam=int(rng.integers(1, n + 1)))
        else:
            params = dict(n=n, B=B, W=int(rng.integers(B + 1, B + 4)), lam=int(rng.integers(0, n + 1)))
        if rng.random() < 0.3:
            params["jobs"] = int(rng.integers(1, 30))
        try:
            make_scheme(family, **params)
        except ValueError:
            continue
        close, waitout = rules[int(rng.integers(len(rules)))]
        model = (gradcode.make_delay_model("bernoulli", p=float(rng.uniform(0.05, 0.5)), slowdown=5.0,
                                           comm=float(rng.choice([0.0, 0.05])))
                 if rng.random() < 0.7 else gradcode.make_delay_model("shifted-exp", mu=1.0, alpha=0.1))
        kw = dict(rounds=int(rng.integers(1, 50)), model=model, seed=int(rng.integers(1000)))
        s0, r0 = _run(family, params, close, waitout, False, monkeypatch, **kw)
        for mode in (True, "batched"):
            s1, r1 = _run(family, params, close, waitout, mode, monkeypatch, **kw)
            _assert_same_run(s1, r1, s0, r0)
        played += 1


def test_compiled_gcdc_rounds_equal_the_other_paths_on_random_configurations(monkeypatch):
    """GC-DC with random shapes, SSI, clusters per worker (down to 1 and 2, where Lemma 1 fails
    and Algorithm 1 needs its augmenting chains: the compiled code stops before those rounds and
    the protocol plays them), closing rules, and rates with tau on the heterogeneous model."""
    rng = np.random.default_rng(11)
    rules = [("decodable", "decodable"), (0.0, "decodable"), (0.3, "decodable"), (1.0, "all")]
    for _ in range(40):
        P, ell = int(rng.integers(2, 6)), int(rng.integers(2, 6))
        params = dict(n=P * ell, clusters=P, r=int(rng.integers(1, ell + 1)), ssi=str(rng.choice(["perfect", "imperfect"])),
                      clusters_per_worker=int(rng.integers(1, P + 1)), seed=int(rng.integers(100)))
        if rng.random() < 0.3:
            params["tau"] = 1.0
            model = gradcode.make_delay_model("gilbert-elliot-het")
        else:
            model = gradcode.make_delay_model("bernoulli", p=float(rng.uniform(0.1, 0.5)), slowdown=5.0, comm=0.05)
        close, waitout = rules[int(rng.integers(len(rules)))]
        kw = dict(rounds=int(rng.integers(1, 60)), model=model, seed=int(rng.integers(1000)))
        s0, r0 = _run("gc-dc", params, close, waitout, False, monkeypatch, **kw)
        for mode in (True, "batched"):
            s1, r1 = _run("gc-dc", params, close, waitout, mode, monkeypatch, **kw)
            _assert_same_run(s1, r1, s0, r0)


def test_compiled_gcdc_places_the_rounds_that_need_chains_in_python(monkeypatch):
    """Where Lemma 1's condition fails, some rounds need Algorithm 1's augmenting chains: the
    kernel stops before each, ``dynamic_clustering`` places it and the kernel goes on; one call
    plays the whole block, with the protocol's results."""
    from gradcode.schemes.gcdc import GCDC
    from gradcode.schemes.gcdc import scheme as gcdc_scheme

    calls, short = [0], []
    placing, play = gcdc_scheme.dynamic_clustering, GCDC.play_rounds

    def counted(*args, **kwargs):
        calls[0] += 1
        return placing(*args, **kwargs)

    def whole(self, first, intercept, *args):
        out = play(self, first, intercept, *args)
        short.append(out.end.shape[0] < intercept.shape[0])
        return out

    monkeypatch.setattr(gcdc_scheme, "dynamic_clustering", counted)
    monkeypatch.setattr(GCDC, "play_rounds", whole)
    params = dict(n=20, clusters=5, r=2, clusters_per_worker=2, ssi="perfect", seed=3)
    model = gradcode.make_delay_model("bernoulli", p=0.4, slowdown=5.0)
    s1, r1 = _run("gc-dc", params, 0.5, "decodable", True, monkeypatch, rounds=300, model=model, seed=1)
    assert calls[0] >= 4 and not any(short)  # chains placed in Python, every round played compiled
    s0, r0 = _run("gc-dc", params, 0.5, "decodable", False, monkeypatch, rounds=300, model=model, seed=1)
    _assert_same_run(s1, r1, s0, r0)


def test_play_rounds_leaves_a_round_that_cannot_finish_to_the_protocol():
    """A round the compiled code cannot finish (here: a scheme whose state was tampered with, so
    that its due job cannot decode even with every message) is not played: the call returns the
    rounds before it and leaves the scheme as it was, and the protocol then reports the round."""
    from gradcode.schemes.sgc import SRSGC

    scheme = SRSGC(6, 1, 2, 2)
    draw = _model().draw(6, 6, np.random.default_rng(0))
    played = scheme.play_rounds(0, draw.intercept[:3], draw.slope[:3], 0.0, None, False, False)
    assert played.end.shape == (3,)
    x = scheme._slot(2)  # sabotage: job 2 lost what it received, so round 3 cannot decode it
    scheme._recv[x] = False
    scheme._count[x], scheme._fresh[x] = 0, 6  # ... and asks for no re-attempt
    scheme._finished.discard(2)

    def state():
        jobs = {u: (j["recv"].tobytes(), j["count"], j["fresh"]) for u, j in scheme.live_jobs().items()}
        return jobs, set(scheme._finished), scheme._next, scheme.reattempts

    before = state()
    out = scheme.play_rounds(3, draw.intercept[3:], draw.slope[3:], 0.0, None, False, False)
    assert out.end.shape == (0,)
    assert state() == before
    scheme.plan_loads(3)
    workers = np.arange(6)
    scheme.on_results(3, workers, np.zeros(6, dtype=np.intp), np.ones(6))
    with pytest.raises(NotDecodableError, match="job 2"):
        scheme.close(3, np.ones(6, dtype=bool))


@pytest.mark.parametrize("name,params", [("sr-sgc", dict(n=12, B=2, W=3, lam=4)), ("m-sgc-rep", dict(n=12, B=2, W=3, lam=2)),
                                         ("m-sgc", dict(n=10, B=2, W=4, lam=3, jobs=20))])
def test_play_rounds_goes_on_from_a_scheme_played_message_by_message(name, params):
    """The compiled blocks start from whatever state the protocol left (rings filled from the
    scheme's jobs and tracks): 13 rounds by hand, then the rest in one block, as 30 by hand."""
    from gradcode.schemes.timing import message_arrivals

    draw = _model().draw(30, params["n"], np.random.default_rng(4))
    c = _model().message_time(1.0)

    def by_hand(scheme, t):
        loads = scheme.plan_loads(t)
        A = message_arrivals(draw.intercept[t], draw.slope[t], loads.loads, c)
        workers = np.repeat(np.arange(scheme.n), loads.messages)
        indices = np.concatenate([np.arange(m) for m in loads.messages])
        times = A[workers, indices]
        order = np.argsort(times, kind="stable")
        workers, indices, times = workers[order], indices[order], times[order]
        k = scheme.ready_after(t, workers, indices)
        fed = int(np.searchsorted(times, times[max(k, 1) - 1], side="right")) if times.size else 0
        scheme.on_results(t, workers[:fed], indices[:fed], times[:fed])
        arrived = np.bincount(workers[:fed], minlength=scheme.n) == loads.messages
        end = times[fed - 1] if fed else 0.0
        return end, [job for job, _ in scheme.close(t, arrived & (loads.messages > 0))]

    whole, part = make_scheme(name, **params), make_scheme(name, **params)
    expected = [by_hand(whole, t) for t in range(30)]
    head = [by_hand(part, t) for t in range(13)]
    played = part.play_rounds(13, draw.intercept[13:], draw.slope[13:], c, None, False, False)
    assert [e for e, _ in head] + played.end.tolist() == [e for e, _ in expected]
    jobs = [j for _, js in expected[13:] for j in js]
    assert played.jobs.tolist() == jobs
    assert np.array_equal(part.straggler_history, whole.straggler_history)
    _assert_same_sgc_state(part, whole)
    # and it goes on by hand after the block
    def tasks(scheme):
        return {w: [(task.job, task.partitions) for task in ts] for w, ts in scheme.plan(30).items()}

    assert tasks(part) == tasks(whole)


def test_play_rounds_refuses_rounds_out_of_order():
    scheme = make_scheme("sr-sgc", n=6, B=1, W=2, lam=2)
    draw = _model().draw(4, 6, np.random.default_rng(0))
    with pytest.raises(ProtocolError, match="round 0 is next"):
        scheme.play_rounds(2, draw.intercept, draw.slope, 0.0, None, False, False)
    scheme.plan_loads(0)
    with pytest.raises(ProtocolError, match="still open"):
        scheme.play_rounds(0, draw.intercept, draw.slope, 0.0, None, False, False)
    fresh = make_scheme("m-sgc", n=6, B=1, W=2, lam=2)
    with pytest.raises(ValueError, match="rounds, 6"):
        fresh.play_rounds(0, draw.intercept[:, :5], draw.slope[:, :5], 0.0, None, False, False)


def test_a_subclass_with_methods_of_its_own_is_not_compiled():
    from gradcode.schemes.sgc import MSGC, SRSGCRep

    class Logged(MSGC):
        def _receive_batch(self, r, workers, indices):
            return super()._receive_batch(r, workers, indices)

    assert not Logged(6, 1, 2, 2).compiled_rounds and Logged(6, 1, 2, 2).batched_rounds
    assert SRSGCRep(6, 1, 2, 2).compiled_rounds  # data attributes (_rep) only


def test_the_draws_above_do_wait_out(monkeypatch):
    """The comparison reaches the wait-out branches (else it would test little of them)."""
    _, res = _run("sr-sgc", dict(n=12, B=1, W=2, lam=3), 0.3, "decodable", True, monkeypatch)
    assert 0 < int(res.waitout_rounds.sum()) < 40


def test_n256_sequential_codes_equal_the_per_message_path(monkeypatch):
    """The benchmark's size: n = 256, the SGC paper's parameters, mu = 1."""
    rng = np.random.default_rng(3)
    X = 1.0 + rng.exponential(0.2, (40, 256))
    X[rng.random((40, 256)) < 0.03] += 2.0
    model = gradcode.make_delay_model("trace", delays=X, trace_load=1 / 256, load_slope=3.0)
    for make in (lambda: make_scheme("m-sgc", n=256, B=1, W=2, lam=27),
                 lambda: make_scheme("sr-sgc", n=256, B=2, W=3, lam=23)):
        out = []
        for batched in (True, False):
            monkeypatch.setattr(simulator, "BATCHED", batched)
            out.append(gradcode.simulate(make(), model, 30, close=1.0, records=True))
        assert np.array_equal(out[0].round_times, out[1].round_times)
        assert np.array_equal(out[0].arrivals, out[1].arrivals)
        assert out[0].waitout_rounds.sum() > 0


@pytest.mark.parametrize("ssi", ["perfect", "imperfect"])
def test_gcdc_at_fig6_size_equals_the_per_message_path(ssi, monkeypatch):
    """GC-DC at K = 100 (Fig. 6's system: P = 10, r = 6, n_c = 6) on the Gilbert-Elliot model:
    the compiled blocks and the per-message path agree on every record and on the state."""
    params = dict(n=100, clusters=10, r=6, clusters_per_worker=6, ssi=ssi, seed=0)
    model = gradcode.make_delay_model("gilbert-elliot", p_switch=0.2)
    s1, r1 = _run("gc-dc", params, 0.5, "decodable", True, monkeypatch, rounds=40, model=model, seed=1)
    s0, r0 = _run("gc-dc", params, 0.5, "decodable", False, monkeypatch, rounds=40, model=model, seed=1)
    _assert_same_run(s1, r1, s0, r0)
    assert r1.waitout_rounds.any() and r1.stragglers.any()


def test_plan_loads_equal_task_schedule_of_the_plan():
    from gradcode.schemes.static import task_schedule

    for name, params in SCHEMES:
        if name == "gc-dc" and params["ssi"] == "perfect":
            continue
        scheme = make_scheme(name, **params)
        loads = scheme.plan_loads(0)
        plan = scheme.plan(0)
        sizes = np.asarray(scheme.partition_sizes, dtype=np.float64)
        for w in range(scheme.n):
            prefix = task_schedule(plan[w], sizes)[0] if w in plan else np.zeros(0)
            assert loads.messages[w] == prefix.size
            assert np.array_equal(loads.loads[w, : prefix.size], prefix)


def test_on_results_obeys_the_message_rules():
    scheme = StaticScheme(gradcode.make_code("partial", n=4, s=1, alpha=3.0))
    scheme.plan_loads(0)
    with pytest.raises(ProtocolError, match="arrived before"):
        scheme.on_results(0, np.array([1]), np.array([1]), np.array([0.5]))
    with pytest.raises(ProtocolError, match="message"):
        scheme.on_results(0, np.array([1]), np.array([7]), np.array([0.5]))
    # a worker's two messages out of order in one batch
    with pytest.raises(ProtocolError, match="arrived before"):
        scheme.on_results(0, np.array([2, 2]), np.array([1, 0]), np.array([0.5, 0.6]))
    # a repeated message is counted and ignored, as on_result does
    scheme.on_results(0, np.array([0, 0, 0]), np.array([0, 0, 1]), np.array([0.1, 0.2, 0.3]))
    assert scheme.duplicate_messages == 1
    assert scheme.arrival_times(0) == {0: [0.1, 0.3]}
    # a closed round's messages are stale
    seq = make_scheme("sr-sgc", n=6, B=1, W=2, lam=2)
    seq.plan_loads(0)
    seq.on_results(0, np.arange(6), np.zeros(6, dtype=np.intp), np.ones(6))
    seq.close(0, np.ones(6, dtype=bool))
    seq.on_results(0, np.array([1]), np.array([0]), np.array([1.0]))
    assert seq.stale_messages == 1
    with pytest.raises(ProtocolError, match="never planned"):
        seq.on_results(5, np.array([1]), np.array([0]), np.array([1.0]))


def test_ready_after_does_not_receive():
    scheme = make_scheme("m-sgc", n=6, B=1, W=2, lam=2)
    loads = scheme.plan_loads(0)
    workers = np.repeat(np.arange(6), loads.messages)
    indices = np.concatenate([np.arange(c) for c in loads.messages])
    k = scheme.ready_after(0, workers, indices)
    assert k is not None and 0 < k <= workers.size
    assert not scheme.ready(0)
    scheme.on_results(0, workers[:k], indices[:k], np.zeros(k))
    assert scheme.ready(0)


def test_a_subclass_that_overrides_a_bypassed_member_is_played_message_by_message():
    from gradcode.schemes.sgc import SRSGC

    class Counting(SRSGC):
        def _ready(self, t):
            self.asked = getattr(self, "asked", 0) + 1
            return super()._ready(t)

    class Plain(SRSGC):
        pass

    scheme = Counting(6, 1, 2, 2)
    assert not scheme.batched_rounds and Plain(6, 1, 2, 2).batched_rounds
    gradcode.simulate(scheme, _model(), 5, seed=1)
    assert scheme.asked > 0  # its override ran
    assert not StaticScheme(gradcode.make_code("crc", n=6, s=1), verify=True).batched_rounds


def test_msgc_state_survives_a_copy_mid_run():
    """M-SGC's job state is numpy views of byte buffers: a copy (checkpoint, pickle) rebuilds the
    views, so the copy goes on exactly as the original."""
    import copy

    scheme = make_scheme("m-sgc-rep", n=4, B=1, W=2, lam=1)
    plan = scheme.plan(0)
    for w, tasks in plan.items():
        for i in range(len(tasks)):
            scheme.on_result(0, w, i, None, 0.0)
    scheme.close(0, set(plan))
    twin = copy.deepcopy(scheme)
    for s in (scheme, twin):
        plan = s.plan(1)
        for w, tasks in plan.items():
            for i in range(len(tasks)):
                s.on_result(1, w, i, None, 0.0)
    assert scheme.ready(1) and twin.ready(1)


def test_on_results_refuses_a_negative_index():
    scheme = make_scheme("sr-sgc", n=6, B=1, W=2, lam=2)
    scheme.plan_loads(0)
    with pytest.raises(ProtocolError, match=">= 0"):
        scheme.on_results(0, np.array([1]), np.array([-1]), np.array([0.5]))


def test_the_kernels_quickselect_equals_np_partition():
    from gradcode.schemes.compiled import kth_smallest

    rng = np.random.default_rng(5)
    for trial in range(2000):
        n = int(rng.integers(1, 80))
        a = rng.integers(0, 4, n).astype(float) if trial % 2 else rng.exponential(1.0, n)  # ties, then none
        k = int(rng.integers(0, n))
        assert kth_smallest(a.copy(), k) == np.partition(a, k)[k]
