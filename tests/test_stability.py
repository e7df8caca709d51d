"""Numerical stability (CommFR-GC Section IV-B): eq. 7 and 8, Theorem 2's threshold against
measured condition numbers, the two reproductions against the papers' tables, and refusal of
ill-conditioned decodes."""

from __future__ import annotations

import math

import pytest

from gradcode.codes.adaptive import CGC
from gradcode.codes.commfr import CommFR
from gradcode.codes.stability import (
    LEMMA1_C,
    commfr_f,
    commfr_kappa_bound,
    commfr_s_kappa,
    sample_conditions,
    worst_condition,
    ya_s_kappa,
)
from gradcode.errors import NotDecodableError
from gradcode.experiments.reproduce import run_reproduction

# CommFR-GC paper, Table I (kappa = 1000, eps = 1e-3): (n, s, m) -> (s_kappa^YA, s_kappa)
PAPER_TABLE1 = {
    (60, 3, 2): (0, 2), (60, 8, 2): (2, 6), (60, 13, 2): (6, 11),
    (60, 3, 12): (0, 1), (60, 8, 12): (2, 4), (60, 13, 12): (2, 4),
    (1000, 40, 10): (8, 32), (1000, 90, 10): (29, 78), (1000, 190, 10): (85, 172),
    (1000, 40, 210): (8, 16), (1000, 90, 210): (29, 48), (1000, 190, 210): (85, 121),
}
#: the paper's row that eq. 7 does not give (it repeats the row above it)
ODD_ROW = (60, 13, 12)

# AGC paper, Table I: costs for (n, mu, w) = (5, 4/5, 12); None is the table's cross
PAPER_AGC_TABLE1 = {
    "CGC q=12": [1, 1, 1, 1],
    "CGC q=6": [1 / 2, 1 / 2, 1 / 2, None],
    "CGC q=4": [1 / 3, 1 / 3, None, None],
    "CGC q=3": [1 / 4, None, None, None],
    "AGC": [1 / 4, 1 / 3, 1 / 2, 1],
}


def test_eq7_closed_form():
    for t, s, m, kappa, C in [(3, 2, 2, 100.0, 6.414), (5, 8, 2, 1000.0, 7.0), (12, 3, 12, 50.0, 1.0)]:
        e = t - m + 1
        direct = math.comb(m + s, t) / math.sqrt(2 * math.pi) * (C * t / (kappa * e)) ** e
        assert commfr_f(t, s, m, kappa, C) == pytest.approx(direct, rel=1e-12)
    with pytest.raises(ValueError, match="t must be"):
        commfr_f(1, 3, 2, 100.0)


@pytest.mark.parametrize("s,m", [(3, 2), (8, 12), (13, 2), (40, 10)])
def test_eq8_gives_decreasing_f_with_tail_below_eps(s, m):
    eps = 1e-3
    for C in (LEMMA1_C, 7.0):
        kappa = 1.01 * commfr_kappa_bound(s, m, eps, C)
        f = [commfr_f(t, s, m, kappa, C) for t in range(m, m + s + 1)]
        assert all(a > b for a, b in zip(f, f[1:]))
        assert f[-1] <= eps
        assert commfr_s_kappa(s, m, kappa, eps, C) is not None


def test_ya_threshold_is_the_substitution():
    """Ye-Abbe: Theorem 2 with m + s -> n and m -> n - s (a [n, n - s] Gaussian code)."""
    for n, s in [(60, 8), (1000, 90), (30, 5)]:
        assert ya_s_kappa(n, s, 1000.0, 1e-3) == commfr_s_kappa(s, n - s, 1000.0, 1e-3)
    assert ya_s_kappa(60, 8, 1000.0, 1e-3, C=7.0) < commfr_s_kappa(8, 2, 1000.0, 1e-3, C=7.0)


def test_commfr_table1_reproduction():
    doc = run_reproduction("commfr-table1")
    assert doc["C"] == 7.0 and doc["kappa"] == 1000.0 and doc["eps"] == 1e-3
    rows = {(r["n"], r["s"], r["m"]): (r["s_kappa_ya"], r["s_kappa"]) for r in doc["rows"]}
    assert set(rows) == set(PAPER_TABLE1)
    for key, paper in PAPER_TABLE1.items():
        if key != ODD_ROW:
            assert rows[key] == paper, key
    # the 12th row: eq. 7 gives (6, 8); the paper repeats (2, 4) from (60, 8, 12). s_kappa^YA does
    # not depend on m, so it must equal the m = 2 row's value.
    assert rows[ODD_ROW] == (6, 8) != PAPER_TABLE1[ODD_ROW]
    assert rows[ODD_ROW][0] == rows[(60, 13, 2)][0]
    assert all(ck > ya for ya, ck in rows.values())  # CommFR-GC beats Ye-Abbe on every row


def test_table1_with_paper_constant_differs():
    """With the constant as the paper states it (C = 6.414) only 4 of the 12 rows come out."""
    doc = run_reproduction("commfr-table1", C=LEMMA1_C)
    hits = sum((r["s_kappa_ya"], r["s_kappa"]) == PAPER_TABLE1[(r["n"], r["s"], r["m"])] for r in doc["rows"])
    assert hits == 4


def test_agc_table1_reproduction():
    doc = run_reproduction("agc-table1")
    got = {}
    for r in doc["rows"]:
        got.setdefault(r["scheme"], [None] * 4)[r["s"]] = r["cost"]
    assert set(got) == set(PAPER_AGC_TABLE1)
    for scheme, costs in PAPER_AGC_TABLE1.items():
        for s, want in enumerate(costs):
            assert (got[scheme][s] is None) == (want is None), (scheme, s)
            if want is not None:
                assert got[scheme][s] == pytest.approx(want), (scheme, s)


def test_theorem2_threshold_holds_on_a_gaussian_code():
    """The (60, 8, 2) row: an [m + s, m] = [10, 2] Gaussian code keeps every decode within
    kappa = 1000 with s_kappa = 6 stragglers (all 210 sets of its single group examined)."""
    s, m = 8, 2
    sk = commfr_s_kappa(s, m, 1000.0, 1e-3, C=7.0)
    assert sk == 6
    code = CommFR(10, 10, 10, 2, "mds-gaussian", seed=0)
    sample = sample_conditions(code, sk, samples=1000)
    assert sample.exhaustive and sample.sets == math.comb(10, 6) and sample.refused == 0
    assert sample.worst <= 1000.0
    assert worst_condition(code, s) >= sample.worst  # fewer columns, worse conditioning


def test_sampling_is_seeded_and_counts_refusals():
    code = CGC(12, 6, 2, "gaussian", seed=1)
    a = sample_conditions(code, 3, samples=50, seed=7)
    b = sample_conditions(code, 3, samples=50, seed=7)
    assert a == b and not a.exhaustive and a.sets == 50 and a.refused == 0
    assert 1.0 <= a.median <= a.worst < math.inf
    beyond = sample_conditions(code, 5, samples=20, seed=0)  # tolerance is 4
    assert beyond.refused == 20 and beyond.worst == math.inf


def test_agc_sampling_uses_rounds_needed():
    from gradcode.codes.adaptive import AGC

    code = AGC(6, 4, 4, seed=0)
    sample = sample_conditions(code, 2)  # 15 sets, r_2 = 2 messages each
    assert sample.exhaustive and sample.refused == 0
    assert sample_conditions(code, 2, messages=1).refused == sample.sets


def test_decoders_refuse_ill_conditioned_solves():
    """Vandermonde CGC is exact in theory but ill-conditioned as n grows (Ye-Abbe); a decode whose
    condition exceeds max_condition is refused, never silently returned. (At n = 20 the answer
    itself fails the check against the encoder rows: see test_decoders_check_their_answer.)"""
    code = CGC(16, 12, 2)
    pattern = {w: 1 for w in range(6)}  # n - s = 6 workers
    cond = code.decoding(pattern).condition
    assert cond > 1e3
    strict = CGC(16, 12, 2)
    strict.max_condition = cond / 10
    with pytest.raises(NotDecodableError, match="ill-conditioned"):
        strict.decoding(pattern)
    assert not strict.can_decode(pattern)
