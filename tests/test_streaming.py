"""Decoding as messages arrive (``gradcode.codes.streaming``, ``StaticScheme`` with a code that
streams): the same gradient and bound as a held decode over every straggler set and arrival
order, no message held, non-finite and contract-breaking messages refused."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gradcode.codes import Message, NotDecodableError, make_code
from gradcode.codes.streaming import RunningDecode
from gradcode.codes.tandon import FRC
from gradcode.schemes import StaticScheme

D = 37


def _messages(code, g):
    return {w: Message(m[0], float(s[0])) for w in range(code.n)
            for m, s in [(code.encode(w, g[list(code.placement[w])]), code.message_scales(w, g[list(code.placement[w])]))]}


def _round(scheme, msgs, order, t=0):
    scheme.plan(t)
    for w in order:
        scheme.on_result(t, w, 0, msgs[w], 0.0)
    assert scheme.ready(t)
    return scheme.close(t, frozenset(order))[0][1]


@pytest.mark.parametrize("name, params", [("uncoded", {"n": 5}), ("frc", {"n": 6, "s": 1}), ("frc", {"n": 6, "s": 2})])
def test_a_streamed_decode_equals_the_held_one_over_every_straggler_set_and_order(name, params):
    code = make_code(name, **params)
    assert code.streams
    rng = np.random.default_rng(0)
    g = rng.standard_normal((code.k, D))
    msgs = _messages(code, g)
    truth = g.sum(axis=0)
    for s in range(code.tolerance + 1):
        for stragglers in itertools.combinations(range(code.n), s):
            alive = [w for w in range(code.n) if w not in stragglers]
            held = code.decode_report({w: msgs[w] for w in alive}, dim=D)
            for order in (alive, alive[::-1], list(rng.permutation(alive))):
                scheme = StaticScheme(code)
                got = _round(scheme, msgs, order)
                np.testing.assert_allclose(got, held.gradient, rtol=1e-13, atol=1e-13)
                assert np.linalg.norm(got - truth) <= held.error_bound


def test_no_message_is_held_and_the_unneeded_ones_are_not_read():
    code = make_code("frc", n=64, s=7)
    g = np.random.default_rng(1).standard_normal((code.k, D))
    msgs = _messages(code, g)
    scheme = StaticScheme(code)
    scheme.plan(0)
    for w in range(code.n):
        scheme.on_result(0, w, 0, msgs[w], 0.0)
    state = scheme._open[0]
    assert state.payloads == {} and state.running.skipped == code.n - code.groups
    assert int(state.running.added.sum()) == code.groups
    np.testing.assert_allclose(scheme.close(0, frozenset(range(code.n)))[0][1], g.sum(axis=0), rtol=1e-12)


def test_a_non_finite_array_is_dropped_before_it_is_added():
    code = make_code("frc", n=4, s=1)
    g = np.random.default_rng(2).standard_normal((code.k, D))
    arrays = {w: code.encode(w, g[list(code.placement[w])])[0] for w in range(4)}
    bad = arrays[0].copy()
    bad[3] = np.inf
    scheme = StaticScheme(code)
    scheme.plan(0)
    scheme.on_result(0, 0, 0, bad, 0.0)  # worker 0 first: dropped, its group still open
    scheme.on_result(0, 1, 0, arrays[1], 0.0)
    assert not scheme.ready(0)
    scheme.on_result(0, 2, 0, arrays[2], 0.0)  # worker 2 serves worker 0's group
    np.testing.assert_allclose(scheme.close(0, frozenset({1, 2}))[0][1], g.sum(axis=0), rtol=1e-12)
    assert scheme.straggler_history[0].tolist() == [True, False, False, True]


def test_a_message_that_breaks_the_contract_is_refused_never_used():
    code = make_code("uncoded", n=3)
    msgs = _messages(code, np.ones((3, D)))
    nan = msgs[1].values.copy()
    nan[0] = np.nan
    scheme = StaticScheme(code)
    scheme.plan(0)
    with pytest.raises(NotDecodableError, match="does not follow the message contract"):
        scheme.on_result(0, 1, 0, Message(nan, 1.0), 0.0)  # NaN values, yet a finite scale


class LyingFRC(FRC):
    def streamed_coefficient(self, added, w, r):
        return 2.0 * super().streamed_coefficient(added, w, r)


def test_a_code_whose_streamed_coefficients_disagree_with_its_decoder_is_refused():
    code = LyingFRC(4, 1)
    msgs = _messages(code, np.ones((4, D)))
    with pytest.raises(NotDecodableError, match="disagrees with its decoder"):
        _round(StaticScheme(code), msgs, range(4))


def test_verification_and_codes_that_do_not_stream_hold_their_messages():
    assert not StaticScheme(make_code("frc", n=6, s=2), verify=True).streams
    assert not StaticScheme(make_code("crc", n=6, s=2)).streams
    running = RunningDecode(make_code("crc", n=4, s=1))
    assert running.offer(0, 0, np.ones(D)) is False and running.total is None
    with pytest.raises(ValueError, match="shape"):
        r = RunningDecode(make_code("uncoded", n=2))
        r.offer(0, 0, np.ones(D))
        r.offer(1, 0, np.ones(D + 1))
