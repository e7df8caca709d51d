"""The sequential schemes (SR-SGC, M-SGC and their -Rep variants) on the collective path: a job's
messages are kept on the workers for up to ``T`` rounds, a round's reduction carries every job its
close finishes (none, one, or two), and a worker straggling in the current round still takes part
in the reduction of a message it kept earlier."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gradcode.torch as gt  # noqa: E402
from gradcode import ClusterConfig, RunConfig, TrainSpec  # noqa: E402
from gradcode.codes.messages import Message, Note  # noqa: E402
from gradcode.codes.reduce import ReducePlan  # noqa: E402
from gradcode.errors import ResultsLostError  # noqa: E402
from gradcode.runtime.collective import CollectiveFallbackWarning  # noqa: E402
from gradcode.runtime.driver import TrainingStopped  # noqa: E402
from gradcode.runtime.inprocess import InProcessEngine  # noqa: E402
from gradcode.runtime.replica import JobReduction, ModelState, ReduceOrder, Replica, StaleReplicaError  # noqa: E402
from gradcode.schemes import make_scheme  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_collective import CrashInReduce, data, flat, net  # noqa: E402,F401  (data: the shared fixture)

SEQUENTIAL = [  # (scheme, its parameters, stragglers a round)
    ("sr-sgc", {"B": 1, "W": 2, "lam": 1}, 1),
    ("sr-sgc", {"B": 1, "W": 2, "lam": 2}, 2),  # more than s = 1: jobs decode a round late, two a round
    ("sr-sgc", {"B": 2, "W": 3, "lam": 2}, 2),
    ("sr-sgc-rep", {"B": 1, "W": 2, "lam": 1}, 1),
    ("m-sgc", {"B": 1, "W": 2, "lam": 1}, 1),
    ("m-sgc", {"B": 2, "W": 3, "lam": 2}, 2),
    ("m-sgc-rep", {"B": 1, "W": 2, "lam": 1}, 1),
    ("m-sgc", {"B": 1, "W": 2, "lam": 4}, 1),  # lam = n (Remark 3.2): D_1 only
]


class Replicas:
    """A callback that checks, after every round, that the workers holding a model at its newest
    step hold it bit for bit alike, for every model (white box: the in-process engine's cores), and
    records the jobs each round finished."""

    def __init__(self, engine):
        self.engine, self.jobs = engine, []

    def __call__(self, record):
        cores = [s.core for s in self.engine._slots if s.core is not None and s.core.replica is not None]
        for m in range(len(cores[0].replica.models)):
            newest = max(c.replica.models[m].step for c in cores)
            digests = {c.replica.digest(m) for c in cores if c.replica.models[m].step == newest}
            assert len(digests) == 1, f"round {record['round']}: replicas of model {m} differ: {digests}"
        self.jobs.append(list(record["jobs"]))


def fit(data, transport, scheme, params, *, engine=None, callback=None, rounds=10, delay=0.3, stragglers=1, models=4):
    engine = engine if engine is not None else InProcessEngine(compute_time=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CollectiveFallbackWarning)  # the collective path, never the star's
        return gt.fit(net(), data, TrainSpec(scheme, workers=4, stragglers=stragglers, delay=delay, seed=3,
                                             models=models, scheme_params=params),
                      torch_config=gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.05, "momentum": 0.9},
                                                  batch_size=96),
                      run=RunConfig(rounds=rounds, run_dir=None), cluster=ClusterConfig(transport=transport),
                      engine=engine, callback=callback)


@pytest.mark.parametrize("scheme,params,stragglers", SEQUENTIAL)
def test_sequential_schemes_on_the_collective_path_follow_the_star_path(data, scheme, params, stragglers, tmp_path,
                                                                        monkeypatch):
    """The same rounds, stragglers, finished jobs, losses and final weights (float32 rounding: the
    members reduce in float32) as the star path; every model's up-to-date replicas identical after
    every round."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    star_jobs = []
    star = fit(data, "channels", scheme, params, stragglers=stragglers,
               callback=lambda r: star_jobs.append(list(r["jobs"])))
    engine = InProcessEngine(compute_time=1e-3)
    watch = Replicas(engine)
    coll = fit(data, "collective", scheme, params, stragglers=stragglers, engine=engine, callback=watch)
    assert coll.result.clock["allreduce_bandwidth"] > 0  # the collective path ran
    assert watch.jobs == star_jobs
    assert np.array_equal(star.result.arrivals < 0, coll.result.arrivals < 0)
    assert (coll.result.arrivals < 0).any()  # stragglers to mitigate
    np.testing.assert_allclose(coll.losses, star.losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(flat(coll.model), flat(star.model), rtol=1e-5, atol=1e-5)


def test_a_round_reduces_two_jobs_at_once_or_none(data, tmp_path, monkeypatch):
    """SR-SGC (B = 1, s = 1) with two stragglers a round: a job decodes only with its re-attempts,
    so rounds alternate between finishing none (no reduction at all) and two (the job due and the
    round's own, in one all-reduce)."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    engine = InProcessEngine(compute_time=1e-3)
    watch = Replicas(engine)
    fit(data, "collective", "sr-sgc", {"B": 1, "W": 2, "lam": 2}, engine=engine, callback=watch, rounds=8,
        stragglers=2)
    assert watch.jobs == [[], [0, 1], [], [2, 3], [], [4, 5], [], [6, 7]]


def test_a_worker_that_dies_holding_an_earlier_rounds_result_is_asked_again_when_the_scheme_can():
    """SR-SGC (B = 2, s = 1): worker 1's result for job 0 (round 0) is lost before job 0's
    re-attempt round: the scheme counts it as not returned, so Algorithm 1 re-attempts it in round
    B; worker 0's, lost in that round (after the plan), leaves job 0 unable to decode, and the loss
    is an error naming it."""
    scheme = make_scheme("sr-sgc", n=4, B=2, W=3, lam=2)
    note = Note(1.0, 1.0, np.dtype(np.float32), 5)
    scheme.plan(0)
    for w in (0, 1):  # workers 2 and 3 straggle: job 0 needs n - s = 3 results
        scheme.on_result(0, w, 0, note, 0.1)
    assert scheme.close(0, {0, 1}) == []
    scheme.plan(1)
    for w in range(4):
        scheme.on_result(1, w, 0, note, 0.1)
    assert [u for u, _ in scheme.close(1, set(range(4)))] == [1]
    scheme.forget_results(1, 1)  # worker 1 died between rounds 1 and 2, its job-0 result with it
    assert scheme.live_jobs()[0]["count"] == 1
    plan = scheme.plan(2)
    assert [plan[w][0].job for w in range(4)] == [2, 0, 0, 2]  # workers 1 and 2 re-attempt job 0
    with pytest.raises(ResultsLostError, match="worker 0 died holding its result for job 0"):
        scheme.forget_results(2, 0)


def test_a_death_that_loses_a_result_no_round_asks_for_again_stops_the_run_saying_so(data, tmp_path, monkeypatch):
    """M-SGC keeps each job's D_1 chunks on the workers for T rounds; a member dying in a
    reduction loses them: the run stops with an error naming the worker, the job and what to do
    (never a wrong step, never a wait until the round's timeout)."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    engine = CrashInReduce(1, 3, compute_time=1e-3)  # round 3 finishes job 0 (T = 3): the first reduction
    with pytest.raises(TrainingStopped, match=r"worker 1 died holding its D_1 chunk .* transport='channels'"):
        fit(data, "collective", "m-sgc", {"B": 2, "W": 3, "lam": 2}, engine=engine, delay=0.0, rounds=6)
    assert engine.fired


def test_sr_sgc_recovers_a_member_that_dies_during_a_reduction(data, tmp_path, monkeypatch):
    """SR-SGC, no injected delays: job t finishes in round t, so a member dying in round 2's
    reduction loses only round 2's result; the round is planned again without it and the run ends
    where the star path ends (each job's gradient is exact, whoever delivered it)."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    params = {"B": 1, "W": 2, "lam": 1}
    star = fit(data, "channels", "sr-sgc", params, delay=0.0, rounds=6)
    engine = CrashInReduce(1, 2, compute_time=1e-3)
    coll = fit(data, "collective", "sr-sgc", params, engine=engine, delay=0.0, rounds=6)
    assert engine.fired
    assert [(f["worker"], f["round"]) for f in coll.result.failures if f["kind"] == "died"] == [(1, 2)]
    np.testing.assert_allclose(flat(coll.model), flat(star.model), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------ the replica's window


def _message(values) -> Message:
    return Message(np.asarray(values, dtype=np.float32), float(np.abs(values).sum()), 1.0)


def _plan(weights, rows) -> ReducePlan:
    return ReducePlan(None, weights, 1, 3, 3, 0.0, 0.0, 0.0, "float32", 1e-3, "float32", True, rows)


class _Problem:
    def full_gradient(self, x, g):
        return g

    def objective(self, x):
        return float(np.sum(x))


class _SGD:
    def step(self, x, g, state, k):
        return x - 0.5 * g, state


def test_a_replica_keeps_messages_for_its_window_and_reduces_those_a_plan_names():
    rep = Replica([ModelState(np.zeros(3), _SGD(), None, 0), ModelState(np.ones(3), _SGD(), None, 5)], window=1)
    rep.keep(0, 0, _message([1, 2, 3]))
    rep.keep(1, 0, _message([10, 20, 30]))
    rep.keep(1, 1, _message([100, 200, 300]))
    # job 0 reads round 0's message and round 1's second; job 1 round 1's first
    order = ReduceOrder(1, (JobReduction(0, 0, 0, (_plan({0: np.array([[1.0], [2.0]])}, {0: ((0, 0), (1, 1))}),)),
                            JobReduction(1, 1, 5, (_plan({0: np.array([[1.0]])}, {0: ((1, 0),)}),))),
                        ((0, 0),), 0, 1)
    part = rep.part(order, 0)
    np.testing.assert_array_equal(part, [201, 402, 603, 10, 20, 30])
    reply = rep.apply(order, part, _Problem(), 0)
    assert reply.error is None and [(s.job, s.model, s.step) for s in reply.steps] == [(0, 0, 0), (1, 1, 5)]
    np.testing.assert_allclose(rep.models[0].params, [-100.5, -201, -301.5])
    assert rep.versions == (1, 6)
    with pytest.raises(StaleReplicaError, match="no longer holds"):  # read once: dropped after the step
        rep.part(order, 0)
    rep.keep(3, 0, _message([1, 1, 1]))  # round 3 - window 1: rounds before 2 are gone
    assert list(rep._held) == [(3, 0)]


def test_a_lagging_member_steps_the_models_it_is_current_on_and_keeps_its_messages_on_a_copy():
    rep = Replica([ModelState(np.zeros(3), _SGD(), None, 0), ModelState(np.zeros(3), _SGD(), None, 2)], window=2)
    rep.keep(4, 0, _message([1, 2, 3]))
    plan = _plan({0: np.array([[1.0]])}, {0: ((4, 0),)})
    order = ReduceOrder(5, (JobReduction(7, 1, 3, (plan,)), JobReduction(8, 0, 0, (_plan({}, {}),))),
                        ((0, 0), (1, 0)), 0, 2)
    total = np.concatenate([rep.part(order, 0), np.zeros(3, dtype=np.float32)])
    reply = rep.apply(order, total, _Problem(), 0)
    # model 1 is at step 2, the job steps it from 3: this member lags on it and leaves it to catch up
    assert [(s.job, s.step) for s in reply.steps] == [(8, 0)] and rep.versions == (1, 2)
    lagging = Replica([ModelState(np.zeros(3), _SGD(), None, 0)], window=2)
    lagging.keep(6, 0, _message([5, 5, 5]))
    fresh = Replica([ModelState(np.ones(3), _SGD(), None, 9)], window=2).copy()
    fresh.take_messages(lagging)
    assert fresh.versions == (9,) and fresh.window == 2 and list(fresh._held) == [(6, 0)]
    assert math.isclose(float(np.sum(fresh._held[(6, 0)].values)), 15.0)


# ------------------------------------------------------------------------------ on Ray (gloo)


def test_on_ray_a_straggler_reduces_a_result_it_kept_while_it_computes(data, ray_session, tmp_path, monkeypatch):
    """Ray actors, channels, gloo: SR-SGC with two workers 0.3 s late a round. A job decoding a
    round late reads results kept by workers that may be straggling in the round that finishes it:
    their reductions run on a thread of their own beside the computation. The run ends where the
    star path ends."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    params = {"B": 1, "W": 2, "lam": 2}
    star = fit(data, "channels", "sr-sgc", params, engine="ray", rounds=6, stragglers=2)
    coll = fit(data, "collective", "sr-sgc", params, engine="ray", rounds=6, stragglers=2)
    assert coll.result.clock["transport"] == "collective (gloo)"
    assert np.array_equal(star.result.arrivals < 0, coll.result.arrivals < 0)
    np.testing.assert_allclose(flat(coll.model), flat(star.model), rtol=1e-5, atol=1e-6)
