"""The scheme protocol (schemes/base.py) and a contract suite every scheme joins by adding a row.

``SCHEME_CASES``: factories of fresh schemes. Each is driven here by a minimal payload-mode driver
(the protocol and nothing else: plan, compute the tasks' messages from random partial gradients,
deliver them in a random order with random stragglers, ready, close), and every finished job's
gradient must equal the true sum; the public methods must validate their input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradcode
from gradcode.schemes import PROTOCOL, ProtocolError, Scheme, StaticScheme, Task, as_scheme, make_scheme
from gradcode.schemes.gcdc import GCDC

SCHEME_CASES = {
    "static-crc": lambda: StaticScheme(gradcode.make_code("crc", n=6, s=2, seed=0)),
    "static-frc": lambda: StaticScheme(gradcode.make_code("frc", n=6, s=1)),
    "static-gc-sc": lambda: StaticScheme(gradcode.make_code("gc-sc", n=6, clusters=2, s=1)),
    "static-partial": lambda: StaticScheme(gradcode.make_code("partial", n=4, s=1, alpha=2)),
    "static-commfr": lambda: StaticScheme(gradcode.make_code("commfr", n=6, k=6, N=3, K=2,
                                                             construction="mds-systematic", seed=1)),
    "static-agc": lambda: StaticScheme(gradcode.make_code("agc", n=5, d=3, L=2, seed=2)),
    "gc-dc-perfect": lambda: GCDC(8, clusters=2, r=2, ssi="perfect", seed=0),
    "gc-dc-imperfect": lambda: GCDC(12, clusters=3, r=2, clusters_per_worker=2, seed=1),
    "sr-sgc": lambda: make_scheme("sr-sgc", n=4, B=1, W=2, lam=1),
    "m-sgc": lambda: make_scheme("m-sgc", n=4, B=2, W=3, lam=2),
    "sr-sgc-rep": lambda: make_scheme("sr-sgc-rep", n=4, B=1, W=2, lam=1),
    "m-sgc-rep": lambda: make_scheme("m-sgc-rep", n=4, B=1, W=2, lam=1),
}


def messages_of(tasks, partials, L, d):
    """What a generic worker sends for its tasks: message r of a task is
    sum_p sum_c coefficients[r, p, c] * chunk c of the partial gradient of partitions[p]."""
    m = math.ceil(d / L)
    out = []
    for task in tasks:
        g = partials[task.job][list(task.partitions)]
        padded = np.zeros((g.shape[0], m * L))
        padded[:, :d] = g
        chunks = padded.reshape(g.shape[0], L, m)
        out.extend(np.einsum("rpc,pcm->rm", task.coefficients, chunks))
    return out


def drive(scheme, rounds, rng, d=5, max_stragglers=1):
    """Run ``rounds`` rounds in payload mode; returns {job: (decoded, truth)}."""
    k = len(scheme.partition_sizes)
    partials: dict[int, np.ndarray] = {}
    finished = {}
    for t in range(rounds):
        scheme.observe_states(t, np.zeros(scheme.n, dtype=bool))
        plan = scheme.plan(t)
        for tasks in plan.values():
            for task in tasks:
                partials.setdefault(task.job, rng.standard_normal((k, d)))
        slow = set(rng.choice(scheme.n, size=max_stragglers, replace=False).tolist())
        events = []
        for w, tasks in plan.items():
            for i, msg in enumerate(messages_of(tasks, partials, scheme.chunks, d)):
                events.append((w in slow, rng.random(), w, i, msg))
        events.sort(key=lambda e: (e[0], e[1]))  # stragglers' messages last
        per_worker = {}
        arrived = set()
        for _, _, w, i, msg in events:
            per_worker.setdefault(w, []).append((i, msg))
        # deliver each worker's messages in order, workers interleaved by the event order
        delivered = {w: 0 for w in per_worker}
        for _, _, w, _, _ in events:
            i, msg = sorted(per_worker[w])[delivered[w]]
            scheme.on_result(t, w, i, msg[: math.ceil(d / scheme.chunks)], 0.0)
            delivered[w] += 1
            if delivered[w] == len(per_worker[w]):
                arrived.add(w)
            if scheme.ready(t):
                break
        assert scheme.ready(t), f"{scheme!r} not ready after every message of round {t}"
        for job, gradient in scheme.close(t, arrived):
            finished[job] = (gradient, partials[job].sum(axis=0))
    return finished


@pytest.mark.parametrize("name", sorted(SCHEME_CASES))
def test_contract_exact_gradients(name):
    scheme = SCHEME_CASES[name]()
    assert isinstance(scheme, Scheme)
    rng = np.random.default_rng(0)
    done = drive(scheme, 6, rng)
    assert len(done) >= 6 - scheme.delay
    for job, (gradient, truth) in done.items():
        np.testing.assert_allclose(gradient[: truth.size], truth, atol=1e-9, err_msg=f"job {job}")
    history = scheme.stragglers
    assert history.shape[1] == scheme.n and history.dtype == bool and not history.flags.writeable


@pytest.mark.parametrize("name", sorted(SCHEME_CASES))
def test_contract_public_methods_validate(name):
    scheme = SCHEME_CASES[name]()
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(ProtocolError, match="round must be an integer"):
            scheme.plan(bad)
    scheme.observe_states(0, np.zeros(scheme.n, dtype=bool))
    scheme.plan(0)
    with pytest.raises(ValueError, match="unknown worker id"):
        scheme.on_result(0, scheme.n, 0, None, 0.0)
    with pytest.raises(TypeError, match="worker id must be an integer"):
        scheme.on_result(0, "1", 0, None, 0.0)
    with pytest.raises(ProtocolError, match="message index"):
        scheme.on_result(0, 0, -1, None, 0.0)
    with pytest.raises(ValueError, match="unknown worker id"):
        scheme.close(0, [scheme.n + 3])
    with pytest.raises(ValueError, match="straggling must be"):
        scheme.observe_states(0, np.zeros(scheme.n + 1, dtype=bool))
    with pytest.raises(ValueError, match="straggling must be"):
        scheme.observe_states(0, np.zeros(scheme.n))


def test_as_scheme_names_what_is_missing():
    code = gradcode.make_code("crc", n=4, s=1)
    assert isinstance(as_scheme(code), StaticScheme) and as_scheme(code).static_code is code
    scheme = StaticScheme(code)
    assert as_scheme(scheme) is scheme

    class Duck:
        n = 4

        def plan(self, t):
            return {}

    with pytest.raises(TypeError, match="lacks chunks, delay, partition_sizes, static_code, stored_partitions, on_result"):
        as_scheme(Duck())
    with pytest.raises(TypeError, match="scheme_or_code must be a gradcode Scheme"):
        gradcode.simulate(Duck(), "shifted-exp", 3)
    assert set(PROTOCOL) <= set(dir(Scheme)) | set(Scheme.__annotations__)


def test_round_stragglers_is_the_codes_rule():
    """AGC's master stops workers once it can decode: a worker with r_s of its L messages is not
    a straggler (the code's rule), where the default rule would call it one."""
    code = gradcode.make_code("agc", n=6, d=4, L=4, seed=0)
    scheme = StaticScheme(code)
    counts = np.array([2, 2, 2, 2, 2, 0])  # s = 1: r_1 = ceil(4 / 3) = 2 messages each
    np.testing.assert_array_equal(scheme.round_stragglers(counts, np.full(6, 4)), [0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(Scheme.round_stragglers(scheme, counts, np.full(6, 4)), [1] * 6)


def test_a_subclass_without_hooks_says_what_to_implement():
    class Half(Scheme):
        n = 2
        partition_sizes = np.array([0.5, 0.5])

    with pytest.raises(NotImplementedError, match="Half must implement _plan"):
        Half().plan(0)


def test_task_shapes():
    task = Task(0, (1, 2), np.ones((2, 2, 1)))
    assert task.messages == 2


def test_resolve_scheme_is_the_one_rule_for_run_wide_values():
    from gradcode.registry import UnknownNameError
    from gradcode.schemes.factory import resolve_scheme

    spec = resolve_scheme("crc", {}, n=6, s=1, seed=4)
    assert (spec.kind, dict(spec.params), spec.ignored) == ("code", {"n": 6, "s": 1, "seed": 4}, ())
    assert spec.build().code.n == 6
    # GC-DC takes no s: listed, not passed; the sequential codes take jobs
    gcdc = resolve_scheme("gc-dc", {"clusters": 2, "r": 2}, n=6, s=1)
    assert gcdc.ignored == ("s",) and "s" not in gcdc.params and gcdc.build().n == 6
    assert resolve_scheme("m-sgc", {"B": 1, "W": 2, "lam": 1}, n=6, jobs=5).build().jobs == 5
    # agree-keys must agree; the others are defaults that the entry's own value overrides
    with pytest.raises(ValueError, match="crc's n=8 and the run's workers 6 disagree"):
        resolve_scheme("crc", {"n": 8}, n=6)
    with pytest.raises(ValueError, match="crc's s=2 and the run's tolerance 1 disagree"):
        resolve_scheme("crc", {"s": 2}, n=6, s=1)
    assert resolve_scheme("crc", {"s": 2}, n=6, s=1, agree=("n",)).params["s"] == 2
    assert resolve_scheme("crc", {"seed": 3}, n=6, seed=0).params["seed"] == 3
    with pytest.raises(UnknownNameError, match="available codes"):
        resolve_scheme("nope", {}, n=4)


def test_closed_rounds_behave_as_a_set_of_ints_in_bounded_memory():
    """The schemes' record of closed rounds answers as the set it replaced (membership, add,
    update, isdisjoint, equality, pickling) while keeping only the rounds closed out of order."""
    import copy
    import pickle
    import random

    from gradcode.schemes.base import ClosedRounds

    rng = random.Random(0)
    for _ in range(1000):
        closed, reference = ClosedRounds(), set()
        for _ in range(rng.randint(0, 30)):
            a = rng.randint(0, 40)
            b = a + rng.randint(0, 10)
            op = rng.random()
            if op < 0.5:
                closed.add(a)
                reference.add(a)
            elif op < 0.75:
                closed.update(range(a, b))
                reference.update(range(a, b))
            else:
                a -= 3
                assert closed.isdisjoint(range(a, b)) == reference.isdisjoint(range(a, b))
                assert closed.isdisjoint([a, b]) == reference.isdisjoint([a, b])
        assert all((t in closed) == (t in reference) for t in range(-2, 55))
        assert pickle.loads(pickle.dumps(closed)) == closed == copy.deepcopy(closed)
    in_order = ClosedRounds()
    in_order.update(range(10**6))
    in_order.add(10**6)
    assert (in_order.floor, in_order.ahead) == (10**6 + 1, set())
