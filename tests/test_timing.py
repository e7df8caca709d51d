"""The one timing rule (schemes/timing.py) against its formula, and the padding property the
simulator's event path relies on."""

import numpy as np

from gradcode.schemes.timing import message_arrivals


def reference(intercept, slope, prefix, c):
    out, prev = [], None
    for p in prefix:
        v = max(0.0, intercept + slope * p)
        v = v if prev is None else max(v, prev)
        prev = v + c
        out.append(prev)
    return out


def test_formula_scalar_and_batched():
    rng = np.random.default_rng(0)
    prefix = np.sort(rng.random(5))
    for intercept, slope in [(0.3, 2.0), (-1.0, 0.5), (0.0, 0.0)]:
        for c in (0.0, 0.05):
            assert message_arrivals(intercept, slope, prefix, c).tolist() == reference(intercept, slope, prefix, c)
    I, S = rng.random((7, 3)) - 0.2, rng.random((7, 3))
    P = np.sort(rng.random((3, 4)), axis=1)
    A = message_arrivals(I, S, P, 0.01)
    assert A.shape == (7, 3, 4)
    for t in range(7):
        for w in range(3):
            assert A[t, w].tolist() == reference(I[t, w], S[t, w], P[w], 0.01)


def test_padding_keeps_real_messages():
    prefix = np.array([0.1, 0.4])
    padded = np.pad(prefix, (0, 3), mode="edge")
    assert message_arrivals(0.2, 1.5, padded, 0.1)[:2].tolist() == message_arrivals(0.2, 1.5, prefix, 0.1).tolist()
