"""SGC deterministic straggler models: checkers on hand-made patterns, against a brute-force
reading of the definitions on every small pattern, and the generators' output."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gradcode.stragglers import (
    arbitrary_pattern,
    bursty_pattern,
    check_arbitrary,
    check_bursty,
    check_per_round,
    per_round_pattern,
)


def P(rows: str) -> np.ndarray:
    """Pattern from text: one line per round, one character per worker, 'x' = straggler."""
    lines = [r.strip() for r in rows.strip().splitlines()]
    return np.array([[c == "x" for c in line] for line in lines], dtype=bool)


# --------------------------------------------------------------------------- brute force


def windows(rounds, W):
    return [(j, min(j + W - 1, rounds - 1)) for j in range(rounds)]


def brute_bursty(S, B, W, lam) -> bool:
    rounds, n = S.shape
    for a, b in windows(rounds, W):
        win = S[a : b + 1]
        if win.any(axis=0).sum() > lam:
            return False
        for i in range(n):
            hits = np.flatnonzero(win[:, i])
            if hits.size and hits[-1] - hits[0] > B - 1:
                return False
    return True


def brute_arbitrary(S, N, W, lam) -> bool:
    rounds, _ = S.shape
    for a, b in windows(rounds, W):
        win = S[a : b + 1]
        if win.any(axis=0).sum() > lam or (win.sum(axis=0) > N).any():
            return False
    return True


def first_violation(S, brute, *args):
    """Smallest t such that S[: t + 1] violates (None if S conforms)."""
    for t in range(S.shape[0]):
        if not brute(S[: t + 1], *args):
            return t
    return None


# --------------------------------------------------------------------------- bursty


def test_bursty_paper_example_conforms():
    # SGC Sec. 3.3 example (B=2, W=3, lambda=2, n=4): worker 0 straggles in round 2, worker 1 in
    # rounds 2 and 3 (0-indexed rounds 1, 2 here)
    S = P("""
        ....
        xx..
        .x..
        ....
        ....
    """)
    assert check_bursty(S, 2, 3, 2)
    assert bool(check_bursty(S, 2, 3, 2)) is True


def test_bursty_burst_too_long():
    S = P("""
        x...
        x...
        x...
        ....
    """)
    c = check_bursty(S, 2, 3, 2)
    assert not c and c.round == 2 and c.workers == (0,) and c.window == (0, 2)
    assert "B - 1 = 1" in c.reason


def test_bursty_gap_inside_window_is_violation():
    # two bursts of length 1 separated by one round fall in one window of W = 3
    S = P("""
        x..
        ...
        x..
        ...
    """)
    c = check_bursty(S, 1, 3, 3)
    assert not c and c.round == 2 and c.workers == (0,)
    assert check_bursty(S, 1, 2, 3)  # with W = 2 they are in different windows


def test_bursty_too_many_distinct_stragglers():
    S = P("""
        x...
        .x..
        ..x.
        ...x
    """)
    c = check_bursty(S, 1, 3, 2)
    assert not c and c.round == 2 and c.workers == (0, 1, 2) and c.window == (0, 2)
    assert "at most 2" in c.reason
    assert check_bursty(S, 1, 2, 2)


def test_bursty_periodic_worst_case_conforms_and_is_tight():
    for B, W, lam, n in [(2, 3, 2, 4), (1, 2, 4, 4), (3, 3, 1, 3), (2, 5, 3, 5)]:
        S = bursty_pattern(40, n, B, W, lam, periodic=True)
        assert check_bursty(S, B, W, lam)
        assert S.sum(axis=1).max() == lam
        if B < W:  # one round less of quiet between bursts breaks it (Fig. 8 is tight)
            assert not check_bursty(S, B, W + 1, lam)


# --------------------------------------------------------------------------- arbitrary


def test_arbitrary_hand_made():
    S = P("""
        x..
        ...
        x..
        ...
        x..
    """)
    assert check_arbitrary(S, 2, 3, 1)
    assert not check_bursty(S, 2, 3, 1)  # not a burst: two separate straggles in a window
    c = check_arbitrary(S, 2, 5, 1)
    assert not c and c.round == 4 and c.workers == (0,) and c.window == (0, 4)
    c = check_arbitrary(S, 1, 3, 1)
    assert not c and c.round == 2
    S2 = P("""
        xx.
        ..x
    """)
    c = check_arbitrary(S2, 1, 2, 2)
    assert not c and c.round == 1 and c.workers == (0, 1, 2)


def test_arbitrary_periodic_worst_case():
    for N, W, lam, n in [(1, 3, 2, 4), (2, 4, 3, 3), (3, 3, 1, 2)]:
        S = arbitrary_pattern(30, n, N, W, lam, periodic=True)
        assert check_arbitrary(S, N, W, lam)
        assert S[:W, 0].sum() == N


# --------------------------------------------------------------------------- per round


def test_per_round():
    S = P("""
        xx..
        x...
        xxx.
    """)
    assert check_per_round(S, 3)
    c = check_per_round(S, 2)
    assert not c and c.round == 2 and c.workers == (0, 1, 2) and c.window is None


def test_per_round_generator():
    S = per_round_pattern(200, 6, 2, rng=1)
    assert (S.sum(axis=1) == 2).all() and check_per_round(S, 2)
    T = per_round_pattern(500, 6, 2, p=0.3, rng=1)
    assert T.sum(axis=1).max() == 2 and T.sum(axis=1).min() == 0
    np.testing.assert_array_equal(T, per_round_pattern(500, 6, 2, p=0.3, rng=1))


# --------------------------------------------------------------------------- exhaustive


@pytest.mark.parametrize("rounds, n", [(4, 2), (3, 3)])
def test_checkers_agree_with_definitions_on_every_small_pattern(rounds, n):
    cells = rounds * n
    params_b = [(B, W, lam) for W in (1, 2, 3) for B in range(1, W + 1) for lam in range(n + 1)]
    params_a = [(N, W, lam) for W in (1, 2, 3) for N in range(W + 1) for lam in range(n + 1)]
    for bits in itertools.product((False, True), repeat=cells):
        S = np.array(bits).reshape(rounds, n)
        for B, W, lam in params_b:
            c = check_bursty(S, B, W, lam)
            assert c.ok == brute_bursty(S, B, W, lam), (S, B, W, lam)
            if not c.ok:
                assert c.round == first_violation(S, brute_bursty, B, W, lam)
        for N, W, lam in params_a:
            c = check_arbitrary(S, N, W, lam)
            assert c.ok == brute_arbitrary(S, N, W, lam), (S, N, W, lam)
            if not c.ok:
                assert c.round == first_violation(S, brute_arbitrary, N, W, lam)


# --------------------------------------------------------------------------- generators


@pytest.mark.parametrize("B, W, lam", [(1, 2, 2), (2, 3, 3), (3, 5, 1), (4, 4, 2)])
def test_random_bursty_patterns_conform(B, W, lam):
    S = bursty_pattern(300, 8, B, W, lam, p=0.2, rng=3)
    assert check_bursty(S, B, W, lam)
    assert S.any()  # not trivially empty
    np.testing.assert_array_equal(S, bursty_pattern(300, 8, B, W, lam, p=0.2, rng=3))


@pytest.mark.parametrize("N, W, lam", [(1, 3, 2), (2, 4, 3), (0, 3, 8), (3, 3, 1)])
def test_random_arbitrary_patterns_conform(N, W, lam):
    S = arbitrary_pattern(300, 8, N, W, lam, p=0.3, rng=5)
    assert check_arbitrary(S, N, W, lam)
    assert S.any() == (N > 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="B must be <= 3"):
        check_bursty(np.zeros((2, 2), bool), 4, 3, 1)
    with pytest.raises(ValueError, match="lam must be <= 2"):
        check_bursty(np.zeros((2, 2), bool), 1, 3, 5)
    with pytest.raises(ValueError, match="2-D"):
        check_per_round(np.zeros(3, bool), 1)
    with pytest.raises(ValueError, match="booleans"):
        check_per_round(np.full((2, 2), 2), 1)
    with pytest.raises(ValueError, match="N must be <= 2"):
        arbitrary_pattern(5, 3, 3, 2, 1)
    with pytest.raises(ValueError, match="s must be <= 3"):
        per_round_pattern(5, 3, 4)
