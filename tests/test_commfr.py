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


def test_the_operator_ldpc_code_is_the_dense_one_without_the_dense_matrices():
    """dense=False (the default past DENSE_GENERATOR_MAX): no generator is formed, each worker's
    encoder is its generator column computed when asked, and a decode peels the messages; over
    every pattern of up to 3 stragglers it decodes exactly when the dense code does, to the full
    gradient, within its own error bound, in float64, float32 and as Messages with scales."""
    from gradcode.codes import LazyEncoders, Message

    dense = CommFR(24, 24, 12, 6, "ldpc", seed=0)
    op = CommFR(24, 24, 12, 6, "ldpc", seed=0, dense=False)
    assert op.operator and op.lazy and op.G is None and isinstance(op.encoders, LazyEncoders)
    assert not dense.operator and (op.tolerance, op.params["dense"], dense.params["dense"]) == (dense.tolerance,
                                                                                               False, True)
    for w in range(24):
        np.testing.assert_allclose(op.encoders[w], dense.encoders[w], atol=1e-12)
    rng = np.random.default_rng(3)
    g = rng.standard_normal((24, 37))
    full = g.sum(axis=0)
    msgs = encode_all(op, g)
    decoded = 0
    for S in itertools.chain.from_iterable(itertools.combinations(range(24), s) for s in range(4)):
        pattern = {w: 1 for w in range(24) if w not in S}
        assert op.can_decode(pattern) == dense.can_decode(pattern), S
        if not op.can_decode(pattern):
            with pytest.raises(NotDecodableError, match="stopping set"):
                op.check_decodable(pattern)
            continue
        report = op.decode_report({w: msgs[w] for w in pattern}, dim=37)
        error = np.linalg.norm(report.gradient - full)
        assert error <= report.error_bound and report.relative_bound < 1e-13 and report.decoding is None
        decoded += 1
    assert decoded > 1500
    # float32 messages, and Messages that carry their scales, factors included
    f32 = op.decode_report({w: m.astype(np.float32) for w, m in msgs.items()}, dim=37)
    assert f32.precision == "float32" and np.linalg.norm(f32.gradient - full) <= f32.error_bound
    sent = {w: Message(m[0] * 4.0, scale=float(op.message_scales(w, g[list(op.placement[w])])[0]), factor=4.0)
            for w, m in msgs.items()}
    np.testing.assert_allclose(op.decode(sent, dim=37), full, atol=1e-12)
    assert op.decode_report(sent, dim=37).error_bound >= op.decode_report(msgs, dim=37).error_bound * 0.5
    # the simulator's decode rule (index-only peeling) is the dense code's: the same rounds
    np.testing.assert_array_equal(gradcode.simulate(op, "shifted-exp", 50, seed=0, records=True).round_times,
                                  gradcode.simulate(dense, "shifted-exp", 50, seed=0, records=True).round_times)


def test_the_operator_ldpc_code_refuses_what_it_cannot_do_by_name():
    op = CommFR(24, 24, 12, 6, "ldpc", seed=0, dense=False)
    g = np.random.default_rng(0).standard_normal((24, 8))
    msgs = encode_all(op, g)
    with pytest.raises(TypeError, match="decodes by an operator"):
        op.decoding({w: 1 for w in range(24)})
    with pytest.raises(NotDecodableError, match="needs >= 6"):
        op.decode({w: msgs[w] for w in range(5)}, dim=8)
    with pytest.raises(NotDecodableError, match="no messages"):
        op.check_decodable({})
    bad = dict(msgs)
    bad[3] = np.full_like(msgs[3], np.nan)
    with pytest.raises(gradcode.codes.NonFiniteMessageError, match=r"workers \[3\]"):
        op.decode(bad, dim=8)
    with pytest.raises(ValueError, match="scales must cover"):
        op.decode(msgs, dim=8, scales={0: [1.0]})
    with pytest.raises(ValueError, match="shape"):
        op.decode({w: m[:, :1] for w, m in msgs.items()}, dim=8)
    # a peeling chain too long for the precision asked: refused, not returned
    with pytest.raises(gradcode.codes.ImpreciseDecodeError, match="peeling"):
        op.decode({w: m.astype(np.float16) for w, m in msgs.items() if w not in (0, 12, 5)}, dim=8, rtol=1e-9)
    with pytest.raises(TypeError, match="dense must be"):
        CommFR(24, 24, 12, 6, "ldpc", dense="no")
    import pickle

    again = pickle.loads(pickle.dumps(op))
    np.testing.assert_array_equal(again.encoders[7], op.encoders[7])
    np.testing.assert_allclose(again.decode(msgs, dim=8), g.sum(axis=0), atol=1e-12)


def test_remark_3s_ldpc_code_at_n_10000_goes_through_make_code():
    """CommFR over a (6, 3)-regular [10000, 5000] LDPC code (Remark 3's scale) is an operator
    code: built, its workers' messages encoded with the generator columns each worker computes,
    and the gradient decoded by peeling from 80 % of them within its bound (which carries how far
    those columns miss H), through the code contract."""
    N = 10_000
    code = gradcode.make_code("commfr", n=N, k=1, N=N, K=N // 2, construction="ldpc", seed=0)
    assert code.operator and code.triple[:2] == (1, N // 2)
    m = 4
    d = m * code.K - 3
    rng = np.random.default_rng(0)
    g = rng.standard_normal((1, d))
    received = np.sort(rng.choice(N, int(0.8 * N), replace=False))
    padded = np.zeros(m * code.K)
    padded[:d] = g[0]
    chunks = padded.reshape(code.K, m)
    # every received worker's message, as it computes it (its column times the chunks), in blocks
    msgs = {}
    for a in range(0, received.size, 2000):
        block = received[a:a + 2000]
        msgs.update(zip(block.tolist(), code.ldpc.generator_columns(block) @ chunks))
    parity = int(np.setdiff1d(received, code.info_positions)[0])
    assert np.array_equal(code.encoders[parity][0, 0], code.ldpc.generator_columns(received[:2000])[
        int(np.searchsorted(received[:2000], parity))])  # the worker's own column is the one measured
    np.testing.assert_allclose(code.encode(parity, g)[0], msgs[parity], rtol=1e-12, atol=1e-12)
    report = code.decode_report(msgs, dim=d)
    assert np.linalg.norm(report.gradient - g[0]) <= report.error_bound
    assert report.relative_bound < 1e-5


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
        (dict(n=8, k=4, N=4, K=2, dc=4), "dc, dv and dense"),
        (dict(n=8, k=4, N=4, K=2, dense=False), "dc, dv and dense"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gradcode.make_code("commfr", **kwargs)


def test_bad_parameter_types():
    with pytest.raises(TypeError, match="N must be an integer"):
        CommFR(8, 4, 4.0, 2)
