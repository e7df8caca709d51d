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


def _run(name, params, close, waitout, batched, monkeypatch, rounds=40):
    monkeypatch.setattr(simulator, "BATCHED", batched)
    scheme = make_scheme(name, **params)
    assert scheme.batched_rounds
    res = gradcode.simulate(scheme, _model(), rounds, seed=7, close=close, waitout=waitout, records=True)
    return scheme, res


@pytest.mark.parametrize("close,waitout", CLOSES)
@pytest.mark.parametrize("name,params", SCHEMES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SCHEMES)])
def test_batched_rounds_equal_the_per_message_path(name, params, close, waitout, monkeypatch):
    s1, r1 = _run(name, params, close, waitout, True, monkeypatch)
    s0, r0 = _run(name, params, close, waitout, False, monkeypatch)
    for field in ("round_times", "stragglers", "arrivals", "finish_times", "waitout_rounds", "job_done_round"):
        a, b = getattr(r1, field), getattr(r0, field)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), field
    assert np.array_equal(s1.straggler_history, s0.straggler_history)
    assert r1.stats.jobs_done == r0.stats.jobs_done
    for counter in ("stale_messages", "duplicate_messages", "reattempts"):
        assert getattr(s1, counter, None) == getattr(s0, counter, None)


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
