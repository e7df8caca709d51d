"""StaticScheme: the round protocol for any linear code, its message rules, and the decodability
rules of the static families against ``code.can_decode`` (exhaustive on small codes)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradcode
from codes_util import SMALL_INSTANCES
from gradcode.codes import NonFiniteMessageError
from gradcode.schemes import (
    GenericRule,
    KOfN,
    PerGroup,
    ProtocolError,
    Scheme,
    StaticScheme,
    Task,
    decode_rule,
    task_schedule,
)


def small_codes():
    out = []
    for name in gradcode.available_codes():
        for params in SMALL_INSTANCES.get(name, []):
            out.append(pytest.param(name, params, id=f"{name}-{'-'.join(f'{k}{v}' for k, v in params.items() if k != 'B')}"))
    return out


def feed(scheme, t, code, msgs, workers, upto=None):
    for w in workers:
        r = code.messages_of(w) if upto is None else upto
        for i in range(r):
            scheme.on_result(t, w, i, None if msgs is None else msgs[w][i], 0.0)


# ------------------------------------------------------------------------------ rules


@pytest.mark.parametrize("name,params", small_codes())
def test_rule_agrees_with_can_decode_on_every_pattern(name, params):
    """Every prefix pattern (random ones when there are more than 5000)."""
    code = gradcode.make_code(name, **params)
    rule = decode_rule(code)
    ranges = [range(code.messages_of(w) + 1) for w in range(code.n)]
    total = np.prod([len(r) for r in ranges])
    if total <= 5000:
        patterns = itertools.product(*ranges)
    else:  # large multi-message instances: 3000 random patterns
        rng = np.random.default_rng(0)
        patterns = [[int(rng.integers(0, len(r))) for r in ranges] for _ in range(3000)]
    for counts in patterns:
        counts = np.array(counts)
        expect = code.can_decode({w: int(c) for w, c in enumerate(counts) if c})
        assert rule.satisfied(counts) == expect, (counts, rule)


@pytest.mark.parametrize("name,params", small_codes())
def test_rule_decode_time_is_the_first_decodable_instant(name, params):
    """decode_time against a brute force: the earliest arrival time whose tie-inclusive set of
    arrived messages decodes, on random arrival tables (with ties)."""
    code = gradcode.make_code(name, **params)
    rule = decode_rule(code)
    rng = np.random.default_rng(5)
    R = code.messages_per_worker
    for _ in range(20):
        A = np.sort(rng.integers(0, 6, size=(1, code.n, R)).astype(float), axis=2)
        for w in range(code.n):
            A[0, w, code.messages_of(w):] = np.inf
        best = np.inf
        for T in np.unique(A[np.isfinite(A)]):
            counts = (A[0] <= T).sum(axis=1)
            if code.can_decode({w: int(c) for w, c in enumerate(counts) if c}):
                best = T
                break
        assert rule.decode_time(A)[0] == best
        assert GenericRule(code).decode_time(A)[0] == best


def test_rules_of_the_families():
    assert isinstance(decode_rule(gradcode.make_code("crc", n=7, s=2)), KOfN)
    assert decode_rule(gradcode.make_code("crc", n=7, s=2)).need == 5
    assert decode_rule(gradcode.make_code("uncoded", n=4)).need == 4
    r = decode_rule(gradcode.make_code("frc", n=6, s=1))
    assert isinstance(r, PerGroup) and r.need == 1 and r.groups.tolist() == [[0, 3], [1, 4], [2, 5]]
    r = decode_rule(gradcode.make_code("gc-sc", n=8, clusters=2, s=1))
    assert isinstance(r, PerGroup) and r.need == 3 and sorted(map(sorted, r.groups.tolist())) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert isinstance(decode_rule(gradcode.make_code("matrix", B=[[0.5, 1, 0], [0, 1, -1], [0.5, 0, 1]])), GenericRule)


# ------------------------------------------------------------------------------ timing


def test_task_schedule_partial_code_message_zero_needs_only_the_naive_part():
    code = gradcode.make_code("partial", n=3, s=1, alpha=2)  # q = 2 naive units of 1/9, 2 coded
    prefix, load = task_schedule(StaticScheme(code).plan(0)[1], code.partition_sizes)
    assert load == pytest.approx(4 / 9)
    assert prefix == pytest.approx([2 / 9, 4 / 9])


def test_task_schedule_across_tasks_and_unused_partitions():
    sizes = np.array([0.1, 0.2, 0.3, 0.4])
    E1 = np.zeros((2, 2, 1))
    E1[0, 0, 0] = 1.0  # message 0 uses partition 2 only
    E1[1, 1, 0] = 1.0  # message 1 uses partition 0
    E2 = np.ones((1, 1, 1))
    tasks = (Task(0, (2, 0), E1), Task(1, (3,), E2))
    prefix, load = task_schedule(tasks, sizes)
    assert load == pytest.approx(0.8)
    assert prefix == pytest.approx([0.3, 0.4, 0.8])
    # a message that depends on nothing is ready at once, but never before the one it follows
    E3 = np.zeros((2, 1, 1))
    E3[0, 0, 0] = 1.0
    prefix, _ = task_schedule((Task(0, (1,), E3),), sizes)
    assert prefix == pytest.approx([0.2, 0.2])


# ------------------------------------------------------------------------------ protocol


@pytest.mark.parametrize("name,params", small_codes())
def test_round_trip_decodes_the_gradient(name, params):
    code = gradcode.make_code(name, **params)
    scheme = StaticScheme(code, dim=5)
    assert isinstance(scheme, Scheme) and scheme.n == code.n and scheme.delay == 0
    rng = np.random.default_rng(0)
    for t in range(3):
        plan = scheme.plan(t)
        assert sorted(plan) == list(range(code.n))
        for w, (task,) in plan.items():
            assert task.job == t and task.partitions == code.placement[w]
            assert task.coefficients is code.encoders[w]
        g = rng.standard_normal((code.k, 5))
        msgs = {w: code.encode(w, g[list(code.placement[w])]) for w in range(code.n)}
        assert not scheme.ready(t)
        feed(scheme, t, code, msgs, range(code.n))
        assert scheme.ready(t)
        [(job, grad)] = scheme.close(t, frozenset(range(code.n)))
        assert job == t
        if code.exact:
            np.testing.assert_allclose(grad, g.sum(axis=0), atol=1e-8)
    assert scheme.straggler_history.shape == (3, code.n) and not scheme.straggler_history.any()


def test_ready_and_close_with_stragglers_and_history():
    code = gradcode.make_code("crc", n=5, s=2, seed=1)
    scheme = StaticScheme(code)
    scheme.plan(0)
    feed(scheme, 0, code, None, [0, 3])
    assert not scheme.ready(0)
    with pytest.raises(gradcode.NotDecodableError, match="round 0"):
        scheme.close(0, {0, 3})
    feed(scheme, 0, code, None, [4])
    assert scheme.ready(0)
    assert scheme.close(0, {0, 3, 4}) == [(0, None)]
    assert scheme.straggler_history.tolist() == [[False, True, True, False, False]]
    with pytest.raises(ValueError):
        scheme.straggler_history[0, 0] = True


def test_stale_duplicate_and_out_of_order_messages():
    code = gradcode.make_code("partial", n=3, s=1, alpha=2)  # two messages per worker
    scheme = StaticScheme(code)
    scheme.plan(0)
    scheme.on_result(0, 1, 0, None, 0.1)
    scheme.on_result(0, 1, 0, None, 0.2)  # duplicate: counted once
    assert scheme.duplicate_messages == 1
    with pytest.raises(ProtocolError, match="arrived before message 0"):
        scheme.on_result(0, 2, 1, None, 0.3)  # index 1 before index 0
    with pytest.raises(ProtocolError, match="2 message"):
        scheme.on_result(0, 1, 2, None, 0.3)  # beyond the worker's messages
    with pytest.raises(ProtocolError, match="never planned"):
        scheme.on_result(5, 1, 0, None, 0.3)
    with pytest.raises(ProtocolError, match="index"):
        scheme.on_result(0, 1, -1, None, 0.3)
    with pytest.raises(ValueError, match="unknown worker"):
        scheme.on_result(0, 7, 0, None, 0.3)
    feed(scheme, 0, code, None, [0, 2])
    scheme.on_result(0, 1, 1, None, 0.5)
    assert scheme.arrival_times(0)[1] == [0.1, 0.5]
    assert scheme.ready(0)
    scheme.close(0, {0, 1, 2})
    scheme.on_result(0, 1, 1, None, 9.0)  # stale: round 0 is closed
    assert scheme.stale_messages == 1
    with pytest.raises(ProtocolError, match="already closed"):
        scheme.close(0, {0})
    with pytest.raises(ProtocolError, match="already closed"):
        scheme.plan(0)
    scheme.plan(1)
    scheme.on_result(1, 0, 0, None, 0.0)
    with pytest.raises(ProtocolError, match="mixes"):
        scheme.on_result(1, 1, 0, np.zeros(3), 0.0)


def test_non_finite_messages_are_dropped_as_stragglers():
    code = gradcode.make_code("crc", n=5, s=1, seed=0)
    scheme = StaticScheme(code)
    rng = np.random.default_rng(1)
    g = rng.standard_normal((code.k, 4))
    msgs = {w: code.encode(w, g[list(code.placement[w])]) for w in range(code.n)}
    bad = {w: m.copy() for w, m in msgs.items()}
    bad[2][0, 1] = np.nan
    scheme.plan(0)
    feed(scheme, 0, code, bad, range(5))
    [(job, grad)] = scheme.close(0, set(range(5)))
    np.testing.assert_allclose(grad, g.sum(axis=0), atol=1e-8)
    assert scheme.straggler_history[0].tolist() == [False, False, True, False, False]

    # not decodable without the bad worker: the round stays open until another one arrives
    scheme.plan(1)
    feed(scheme, 1, code, bad, [0, 1, 2, 3])
    assert scheme.ready(1)
    with pytest.raises(gradcode.NotDecodableError, match=r"dropping workers \[2\]"):
        scheme.close(1, {0, 1, 2, 3})
    assert not scheme.ready(1)
    scheme.on_result(1, 2, 0, msgs[2][0], 1.0)  # the dropped worker's copy is ignored
    assert not scheme.ready(1)
    feed(scheme, 1, code, bad, [4])
    [(job, grad)] = scheme.close(1, {0, 1, 3, 4})
    np.testing.assert_allclose(grad, g.sum(axis=0), atol=1e-8)
    assert scheme.straggler_history[1].tolist() == [False, False, True, False, False]
    assert issubclass(NonFiniteMessageError, ValueError)


def test_overflow_from_finite_messages_is_not_decodable():
    code = gradcode.make_code("uncoded", n=2)
    scheme = StaticScheme(code)
    scheme.plan(0)
    big = np.full((1, 3), 1e308)
    feed(scheme, 0, code, {0: big, 1: big}, [0, 1])
    with pytest.raises(gradcode.NotDecodableError, match="round 0"):
        scheme.close(0, {0, 1})


def test_dim_for_multichunk_payloads_defaults_to_padded_length():
    code = gradcode.make_code("crc", n=4, s=1)
    scheme = StaticScheme(code, dim=3)
    g = np.arange(12.0).reshape(4, 3)
    msgs = {w: code.encode(w, g[list(code.placement[w])]) for w in range(4)}
    scheme.plan(0)
    feed(scheme, 0, code, msgs, [0, 1, 3])
    [(_, grad)] = scheme.close(0, {0, 1, 3})
    np.testing.assert_allclose(grad, g.sum(axis=0))


def test_bad_arguments():
    with pytest.raises(TypeError, match="LinearCode"):
        StaticScheme("crc")
    scheme = StaticScheme(gradcode.make_code("uncoded", n=2))
    with pytest.raises(ProtocolError, match="round"):
        scheme.plan(-1)
    with pytest.raises(ProtocolError, match="never planned"):
        scheme.close(3, set())
    assert repr(scheme) == "StaticScheme(<Uncoded n=2>)"
