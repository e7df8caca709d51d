"""CommFR-GC (Kadhe, Koyluoglu, Ramchandran): the n=8, k=4 example with G of eq. 6, Theorem 1's
triple, exhaustive straggler sweeps per construction, repetition == frc, the systematic and
peeling decoders against the generic solve, the LDPC threshold of Remark 3, and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradcode
from gradcode.codes.commfr import CommFR, ldpc_threshold, regular_ldpc_parity_check
from gradcode.codes.tandon import FRC
from gradcode.errors import NotDecodableError

G6 = [[1, 0, 1, 1], [0, 1, 1, 2]]  # eq. 6: an [N=4, K=2, delta=3] MDS code


def encode_all(code, g):
    return {w: code.encode(w, g[list(code.placement[w])]) for w in range(code.n)}


def subsets(n):
    for size in range(n + 1):
        yield from itertools.combinations(range(n), size)


def test_example_eq6_placement_encoding_and_triple():
    code = gradcode.make_code("commfr", n=8, k=4, N=4, K=2, generator=G6)
    assert code.triple == (2, 2, 2) and code.tolerance == 2 and code.chunks == 2
    assert code.construction == "custom" and code.load == pytest.approx(0.5)
    # two groups of four workers storing {D1, D2} and {D3, D4}
    groups = [code.group_members(i) for i in range(2)]
    assert sorted(groups[0] + groups[1]) == list(range(8))
    assert {code.placement[w] for w in groups[0]} == {(0, 1)}
    assert {code.placement[w] for w in groups[1]} == {(2, 3)}
    rng = np.random.default_rng(0)
    g = rng.standard_normal((4, 4))  # gradient length d = 4
    for i, members in enumerate(groups):
        gi = g[2 * i] + g[2 * i + 1]
        gmat = np.array([[gi[0], gi[2]], [gi[1], gi[3]]])  # eq. 4 with ceil(d/K) = 2
        for j, w in enumerate(members):
            msg = code.encode(w, g[list(code.placement[w])])
            np.testing.assert_allclose(msg[0], gmat @ np.array(G6)[:, j], atol=1e-12)
    assert code.comm_cost(2) == 0.5 and code.comm_cost(3) is None


def test_example_eq6_any_two_stragglers_per_group():
    """Any two columns of G are independent: up to two stragglers in *each* group decode."""
    code = CommFR(8, 4, 4, 2, generator=G6)
    rng = np.random.default_rng(1)
    d = 7
    g = rng.standard_normal((4, d))
    msgs = encode_all(code, g)
    groups = [code.group_members(i) for i in range(2)]
    for S0 in itertools.combinations(groups[0], 2):
        for S1 in itertools.combinations(groups[1], 2):
            got = {w: m for w, m in msgs.items() if w not in S0 + S1}
            np.testing.assert_allclose(code.decode(got, dim=d), g.sum(0), atol=1e-12)
    for S in itertools.combinations(groups[0], 3):  # three in one group: K=2 columns left < ... fail
        assert not code.can_decode({w: 1 for w in range(8) if w not in S})


CODES = [
    dict(n=8, k=4, N=4, K=2, generator=G6),
    dict(n=8, k=4, N=4, K=2, construction="mds-gaussian", seed=3),
    dict(n=6, k=6, N=6, K=3, construction="mds-gaussian", seed=1),
    dict(n=8, k=8, N=4, K=3, construction="mds-systematic", seed=2),
    dict(n=6, k=6, N=6, K=2, construction="mds-systematic", seed=5),
    dict(n=6, k=4, N=3, K=1, construction="repetition"),
    dict(n=12, k=6, N=12, K=6, construction="ldpc", seed=0),
]


@pytest.mark.parametrize("params", CODES, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items() if k != "generator"))
def test_every_straggler_subset(params):
    """Exact decoding for every received subset the code's decoder accepts; every set of at most
    ``tolerance`` stragglers is accepted; the fast path decodes where and as the generic one does
    (LDPC peeling excepted: it may refuse a stopping set the generic solve decodes)."""
    code = CommFR(**params)
    rng = np.random.default_rng(4)
    d = 5
    g = rng.standard_normal((code.k, d))
    msgs = encode_all(code, g)
    full = g.sum(0)
    for received in subsets(code.n):
        pattern = {w: 1 for w in received}
        stragglers = code.n - len(received)
        fast = code.can_decode(pattern)
        try:
            code.generic_decoding(pattern)
            generic = True
        except NotDecodableError:
            generic = False
        if stragglers <= code.tolerance:
            assert fast, received
        if code.construction == "ldpc":
            assert generic or not fast, received  # peeling never beats the generic solve
        else:
            assert fast == generic, received
        if fast:
            out = code.decode({w: msgs[w] for w in received}, dim=d)
            np.testing.assert_allclose(out, full, atol=1e-9, err_msg=str(received))
            if code.construction in ("custom", "mds-gaussian"):  # both minimum-norm: identical
                sol, ref = code.decoding(pattern), code.generic_decoding(pattern)
                assert sol.rows == ref.rows
                np.testing.assert_allclose(sol.coefficients, ref.coefficients, atol=1e-9)


@pytest.mark.parametrize("params", CODES[:5], ids=lambda p: p.get("construction", "custom"))
def test_mds_triple_meets_eq1(params):
    """Theorem 1 / Corollary 1: an MDS code gives (l, m, s) = (kN/n, K, N-K) with l/k = (s+m)/n."""
    code = CommFR(**params)
    l, m, s = code.triple
    assert (l, m, s) == (code.k * code.N // code.n, code.K, code.N - code.K)
    assert l / code.k == pytest.approx((s + m) / code.n)
    assert code.tolerance_certified


@pytest.mark.parametrize("n,s", [(6, 2), (6, 1), (4, 3), (8, 1), (5, 0)])
def test_repetition_is_frc(n, s):
    """Remark 1: CommFR-GC with the [N, 1, N] repetition code is the fractional repetition code."""
    rep = gradcode.make_code("commfr", n=n, k=n, N=s + 1, K=1, construction="repetition")
    frc = FRC(n, s)
    assert rep.placement == frc.placement and rep.tolerance == frc.tolerance == s
    assert rep.chunks == frc.chunks == 1 and rep.k == frc.k
    for a, b in zip(rep.encoders, frc.encoders):
        np.testing.assert_array_equal(a, b)
    for received in subsets(n):
        pattern = {w: 1 for w in received}
        assert rep.can_decode(pattern) == frc.can_decode(pattern)
        if frc.can_decode(pattern):
            x, y = rep.decoding(pattern), frc.decoding(pattern)
            assert x.rows == y.rows
            np.testing.assert_array_equal(x.coefficients, y.coefficients)


def test_systematic_fast_path_is_proposition1_and_matches_generic():
    code = CommFR(6, 6, 6, 3, "mds-systematic", seed=7)
    np.testing.assert_array_equal(code.G[:, :3], np.eye(3))
    # all systematic workers in: chunks are read off, coefficient 1, no solve
    sol = code.decoding({0: 1, 1: 1, 2: 1, 4: 1})
    assert sol.rows == ((0, 0), (1, 0), (2, 0)) and sol.condition == 1.0
    np.testing.assert_array_equal(sol.coefficients, np.eye(3))
    # exactly K workers received: the coefficients are unique, so fast == generic
    for T in itertools.combinations(range(6), 3):
        pattern = {w: 1 for w in T}
        fast, generic = code.decoding(pattern), code.generic_decoding(pattern)
        dense = np.zeros((3, 6))
        dense[:, [w for w, _ in fast.rows]] = fast.coefficients
        ref = np.zeros((3, 6))
        ref[:, [w for w, _ in generic.rows]] = generic.coefficients
        np.testing.assert_allclose(dense, ref, atol=1e-9)


def test_ldpc_peeling_agrees_with_generic_and_reports_stopping_sets():
    code = CommFR(12, 6, 12, 6, "ldpc", seed=0)
    H = code.parity_check
    assert H.shape == (6, 12) and (H.sum(axis=0) == 3).all() and (H.sum(axis=1) == 6).all()
    np.testing.assert_allclose(H @ code.G.T, 0, atol=1e-12)
    np.testing.assert_array_equal(code.G[:, code.info_positions], np.eye(6))
    rng = np.random.default_rng(0)
    d = 4
    g = rng.standard_normal((code.k, d))
    msgs = encode_all(code, g)
    both = peel_only_fails = 0
    for received in subsets(12):
        if len(received) < 6:
            continue
        pattern = {w: 1 for w in received}
        try:
            generic = code.generic_decoding(pattern)
        except NotDecodableError:
            generic = None
        try:
            peel = code.decoding(pattern)
        except NotDecodableError as exc:
            assert "stopping set" in str(exc) or "peeling" in str(exc)
            peel_only_fails += generic is not None
            continue
        assert generic is not None and peel.method == "commfr-ldpc"
        both += 1
        stacked = np.stack([msgs[w][0] for w, _ in peel.rows])
        stacked_g = np.stack([msgs[w][0] for w, _ in generic.rows])
        np.testing.assert_allclose(peel.coefficients @ stacked, generic.coefficients @ stacked_g, atol=1e-9)
    assert both > 100 and peel_only_fails > 0  # peeling is weaker than ML on some patterns
    # the tolerance is the worst case of the peeling decoder, and it is tight
    t = code.tolerance
    assert code.tolerance_certified and t >= 1
    assert all(code.can_decode({w: 1 for w in range(12) if w not in S})
               for S in itertools.combinations(range(12), t))
    assert not all(code.can_decode({w: 1 for w in range(12) if w not in S})
                   for S in itertools.combinations(range(12), t + 1))


def test_ldpc_threshold_remark3():
    assert ldpc_threshold(6, 3) == pytest.approx(0.4294, abs=1e-4)
    assert ldpc_threshold(4, 3) == pytest.approx(0.6474, abs=1e-4)  # rate-1/4 (3,4) ensemble
    assert ldpc_threshold(6, 3) < ldpc_threshold(4, 3)


def test_ldpc_recovers_random_erasures_below_threshold():
    """Proposition 2: below p* = 0.4294 peeling recovers random erasures with high probability;
    well above it, it fails."""
    code = CommFR(600, 1, 600, 300, "ldpc", seed=1)
    rng = np.random.default_rng(2)
    def success(p):
        return sum(code.can_decode({w: 1 for w in range(600) if rng.random() >= p}) for _ in range(10))
    assert success(0.25) == 10
    assert success(0.6) == 0


def test_ldpc_parity_check_is_regular():
    H = regular_ldpc_parity_check(30, 6, 3, np.random.default_rng(0))
    assert H.shape == (15, 30) and set(np.unique(H)) == {0.0, 1.0}
    assert (H.sum(axis=0) == 3).all() and (H.sum(axis=1) == 6).all()


def test_spread_stragglers_beyond_worst_case():
    """Up to N - K stragglers in every group: p (N - K) in total, beyond the worst-case s."""
    code = CommFR(9, 3, 3, 2, "mds-gaussian", seed=0)
    S = [code.group_members(i)[0] for i in range(3)]
    assert code.tolerance == 1 and code.can_decode({w: 1 for w in range(9) if w not in S})


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(n=8, k=4, N=3, K=2), "N .* must divide n"),
        (dict(n=8, k=3, N=4, K=2), "n must divide k N"),
        (dict(n=8, k=4, N=4, K=5), "K .* must be <= N"),
        (dict(n=8, k=4, N=4, K=2, construction="repetition"), "K = 1"),
        (dict(n=8, k=4, N=4, K=2, construction="polar"), "construction must be one of"),
        (dict(n=8, k=4, N=4, K=2, construction="mds-gaussian", generator=G6), "generator"),
        (dict(n=8, k=4, N=4, K=2, construction="custom"), "generator"),
        (dict(n=8, k=4, N=4, K=2, generator=[[1, 0, 1], [0, 1, 1]]), "shape"),
        (dict(n=8, k=4, N=4, K=2, generator=[[1, 1, 1, 1], [2, 2, 2, 2]]), "rank"),
        (dict(n=12, k=6, N=12, K=5, construction="ldpc"), "K = N \\(1 - dv/dc\\)"),
        (dict(n=8, k=4, N=4, K=2, dc=4), "dc and dv"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gradcode.make_code("commfr", **kwargs)


def test_bad_parameter_types():
    with pytest.raises(TypeError, match="N must be an integer"):
        CommFR(8, 4, 4.0, 2)
