"""CGC, AGC and group AGC/CGC (Cao et al., Adaptive Gradient Coding, Sections II-VI): Examples 1,
3 and 4, exact decoding over every straggler set and every message prefix, Theorem 1's optimal
communication vector, the structured decoder against the generic one, and bad input."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import gradcode
from gradcode.codes.adaptive import (
    AGC,
    CGC,
    GroupAGC,
    GroupCGC,
    cyclic_placement,
    group_bounds,
    optimal_communication_vector,
)
from gradcode.errors import NotDecodableError
from gradcode.experiments.repro_codes import measured_comm_cost

# Example 3: B = E M for the (n, mu, w) = (3, 2/3, 2) system with L = 2
E_EX3 = [[3, 2, 1, 0], [3, 1, 1, 0], [1, 3, 2, 0], [2, 1, 3, 3], [2, 3, 2, 3], [2, 1, 1, 3]]
M_EX3 = [
    [1, 1, 1, 0, 0, 0],
    [0, 0, 0, 1, 1, 1],
    [-3, Fraction(-1, 2), -3, -1, Fraction(-3, 2), -2],
    [Fraction(4, 3), Fraction(-1, 2), Fraction(7, 3), Fraction(-1, 3), Fraction(1, 6), Fraction(5, 3)],
]


def encode_all(code, g):
    return {w: code.encode(w, g[list(code.placement[w])]) for w in range(code.n)}


def support_mask(code):
    """True where B = E M may be non-zero: worker j stores partition i (eq. 19)."""
    n, L = code.n, code.chunks
    mask = np.zeros((len(code.E_blocks) * n, n * L), dtype=bool)
    for r in range(len(code.E_blocks)):
        for j, p in enumerate(code.placement):
            for i in p:
                mask[r * n + j, i + n * np.arange(L)] = True
    return mask


def test_example3_matrices():
    code = AGC.from_matrix(3, 2, 2, E_EX3)
    np.testing.assert_allclose(code.M, np.array(M_EX3, dtype=float), atol=1e-12)
    B = code.encoding_matrix()
    np.testing.assert_allclose(B[~support_mask(code)], 0, atol=1e-12)
    assert repr(code) == "<AGC n=3 d=2 L=2>"
    assert code.placement == ((0, 1), (1, 2), (2, 0))


def test_example1_messages_and_costs():
    """Worker 0's first message is 5/2 g_1(0) + g_0(1) + 1/2 g_1(1); with no straggler the first
    round of all three workers decodes (cost 1/2), with one straggler two rounds (cost 1)."""
    code = AGC.from_matrix(3, 2, 2, E_EX3)
    E0 = code.encoders[0]  # (round, stored partition (0, 1), chunk)
    np.testing.assert_allclose(E0[0], [[0, 1], [2.5, 0.5]], atol=1e-12)
    assert [code.comm_cost(s) for s in range(3)] == [0.5, 1.0, None]
    rng = np.random.default_rng(0)
    g = rng.standard_normal((3, 2))  # w = 2
    msgs = encode_all(code, g)
    np.testing.assert_allclose(msgs[0][0, 0], 2.5 * g[1, 0] + g[0, 1] + 0.5 * g[1, 1])
    out = code.decode({w: msgs[w][:1] for w in range(3)}, dim=2)
    np.testing.assert_allclose(out, g.sum(0), atol=1e-12)
    for straggler in range(3):
        got = {w: msgs[w] for w in range(3) if w != straggler}
        np.testing.assert_allclose(code.decode(got, dim=2), g.sum(0), atol=1e-12)
        assert not code.can_decode({w: 1 for w in got})
    # Example 1's CGC baselines: s_max = 0 sends half-length messages, s_max = 1 full ones
    cgc0, cgc1 = CGC(3, 2, 2), CGC(3, 2, 1)
    assert (cgc0.tolerance, cgc0.comm_cost(0), cgc0.comm_cost(1)) == (0, 0.5, None)
    assert (cgc1.tolerance, cgc1.comm_cost(0), cgc1.comm_cost(1)) == (1, 1.0, 1.0)


AGC_CASES = [(3, 2, 2), (4, 3, 3), (5, 3, 2), (4, 4, 2), (5, 2, 3), (4, 1, 2)]


def assert_structured_decoding(code, fast, generic):
    """The E·M decoder's coefficients are the generic solve's (both minimum-norm), except when it
    kept its weighted solve (more messages than unknowns), which it does only for a smaller
    checked amplification; ``generic`` None: the generic solve refused, the weighted one did not."""
    if "weighted" in fast.method:
        assert generic is None or fast.amplification < code._check_answer(generic)[0]
    else:
        assert generic is not None and fast.rows == generic.rows
        np.testing.assert_allclose(fast.coefficients, generic.coefficients, atol=1e-7)


@pytest.mark.parametrize("n,d,L", AGC_CASES)
def test_agc_every_prefix(n, d, L):
    """Every message prefix (r_0, ..., r_{n-1}) in [0, L]^n: the structured decoder accepts
    exactly what the generic one accepts, with the same (minimum-norm) coefficients, decodes
    exactly, and accepts every pattern with at most d-1 stragglers and r_s messages per active
    worker (eq. 27)."""
    code = AGC(n, d, L, seed=n + d + L)
    rng = np.random.default_rng(1)
    dim = 2 * L + 1
    g = rng.standard_normal((n, dim))
    msgs = encode_all(code, g)
    for prefix in itertools.product(range(L + 1), repeat=n):
        pattern = {w: r for w, r in enumerate(prefix) if r}
        try:
            generic = code.generic_decoding(pattern)
        except NotDecodableError:
            generic = None
        ok = code.can_decode(pattern)
        assert ok or generic is None, prefix
        active = [r for r in prefix if r]
        s = n - len(active)
        if s < d and active and min(active) >= code.rounds_needed(s):
            assert ok, prefix
        if ok:
            fast = code.decoding(pattern)
            assert_structured_decoding(code, fast, generic)
            out = code.decode({w: msgs[w][:r] for w, r in pattern.items()}, dim=dim)
            np.testing.assert_allclose(out, g.sum(0), rtol=1e-8, atol=1e-8, err_msg=str(prefix))


@pytest.mark.parametrize("n,d,L", AGC_CASES)
def test_agc_rounds_are_tight(n, d, L):
    """r_s - 1 messages from every active worker never suffice (the converse, eq. 12-13)."""
    code = AGC(n, d, L, seed=0)
    for s in range(d):
        r = code.rounds_needed(s)
        assert r == -(-L // (d - s))
        if r > 1:
            for S in itertools.combinations(range(n), s):
                assert not code.can_decode({w: r - 1 for w in range(n) if w not in S})


def test_agc_zero_pattern_and_shapes():
    code = AGC(6, 3, 3, seed=2)
    B = code.encoding_matrix()
    assert B.shape == (18, 18) and code.M.shape == (3 + 3 * 3, 18)
    np.testing.assert_allclose(B[~support_mask(code)], 0, atol=1e-9)
    assert [E.shape for E in code.E_blocks] == [(6, 6), (6, 9), (6, 12)]
    assert code.messages_per_worker == 3 and code.chunks == 3 and code.tolerance == 2
    assert code.placement == tuple(cyclic_placement(6, 3))


@pytest.mark.parametrize("n,d,w", [(5, 4, 12), (3, 2, 2), (6, 3, 6), (4, 4, 5)])
def test_theorem1_optimal_vector_met_with_L_equal_w(n, d, w):
    """With L = w, AGC's communication vector (eq. 30) is Theorem 1's c* (eq. 11), both by its
    comm_cost and measured by decoding."""
    code = AGC(n, d, w, seed=1)
    cstar = optimal_communication_vector(d, w)
    assert [Fraction(code.comm_cost(s)).limit_denominator(w) for s in range(d)] == cstar
    for s in range(d):
        assert measured_comm_cost(code, s, w) == pytest.approx(float(cstar[s]))
    assert code.comm_cost(d) is None


def test_optimal_vector_example2():
    assert optimal_communication_vector(4, 12) == [Fraction(1, 4), Fraction(1, 3), Fraction(1, 2), Fraction(1)]


@pytest.mark.parametrize("construction", ["vandermonde", "gaussian"])
@pytest.mark.parametrize("n,d,m", [(5, 4, 2), (6, 3, 1), (5, 5, 3), (7, 4, 4), (6, 4, 3)])
def test_cgc_every_straggler_set(n, d, m, construction):
    code = CGC(n, d, m, construction, seed=3)
    assert code.tolerance == d - m and code.chunks == m and code.messages_per_worker == 1
    assert code.comm_cost(d - m) == pytest.approx(1 / m) and (d - m + 1 > n or code.comm_cost(d - m + 1) is None)
    assert code.V.shape == (n - (d - m), n)
    np.testing.assert_allclose(code.encoding_matrix()[~support_mask(code)], 0, atol=1e-9)
    rng = np.random.default_rng(5)
    dim = 3 * m + 2
    g = rng.standard_normal((n, dim))
    msgs = encode_all(code, g)
    for received in itertools.chain.from_iterable(itertools.combinations(range(n), t) for t in range(1, n + 1)):
        pattern = {w: 1 for w in received}
        ok = code.can_decode(pattern)
        assert ok == (len(received) >= n - (d - m)), received
        if ok:
            assert_structured_decoding(code, code.decoding(pattern), code.generic_decoding(pattern))
            out = code.decode({w: msgs[w] for w in received}, dim=dim)
            np.testing.assert_allclose(out, g.sum(0), rtol=1e-9, atol=1e-9)


def test_group_bounds_eq31_and_example4():
    assert group_bounds(7, 2) == [(0, 2), (2, 4), (4, 7)]
    assert group_bounds(9, 3) == [(0, 3), (3, 6), (6, 9)]
    assert group_bounds(5, 4) == [(0, 5)]
    code = GroupAGC(7, 2, 2, seed=0)
    assert [sub.n for sub in code.parts] == [2, 2, 3]
    assert [sub.n for sub in code.subcodes] == [2, 3]  # one subsystem per group size
    assert code.placement[:4] == ((0, 1), (1, 0), (2, 3), (3, 2))
    assert set(code.placement[4:]) == {(4, 5), (5, 6), (6, 4)}
    # one straggler in each group (3 in total, beyond the tolerance 1 of AGC on 7 workers)
    assert code.group_comm_cost([1, 1, 1]) == 1.0 and code.group_comm_cost([0, 0, 0]) == 0.5
    assert code.group_comm_cost([2, 0, 0]) is None
    rng = np.random.default_rng(0)
    g = rng.standard_normal((7, 4))
    msgs = encode_all(code, g)
    for S in itertools.product([0, 1], [2, 3], [4, 5, 6]):
        got = {w: m for w, m in msgs.items() if w not in S}
        np.testing.assert_allclose(code.decode(got, dim=4), g.sum(0), atol=1e-9)
    got = {w: m[:1] for w, m in msgs.items()}
    np.testing.assert_allclose(code.decode(got, dim=4), g.sum(0), atol=1e-9)


@pytest.mark.parametrize("cls,args", [(GroupAGC, (8, 3, 2)), (GroupAGC, (6, 2, 3)), (GroupCGC, (7, 3, 2)), (GroupCGC, (9, 4, 1))])
def test_group_codes_every_straggler_set(cls, args):
    code = cls(*args, seed=1)
    d = args[1]
    rng = np.random.default_rng(2)
    dim = 5
    g = rng.standard_normal((code.n, dim))
    msgs = encode_all(code, g)
    for t in range(code.n + 1):
        for S in itertools.combinations(range(code.n), t):
            per_group = [sum(a <= w < b for w in S) for a, b in code.groups]
            cost = code.group_comm_cost(per_group)
            r = None if cost is None else round(cost * code.chunks)
            if t <= code.tolerance:
                assert cost is not None and cost <= code.comm_cost(t) + 1e-12
            if cost is None:
                assert not code.can_decode({w: code.messages_of(w) for w in range(code.n) if w not in S})
                continue
            pattern = {w: r for w in range(code.n) if w not in S}
            for part, got in zip(code.parts, code.split(code.normalize_pattern(pattern))):  # each group decides
                assert_structured_decoding(part, part.decoding(got), part.generic_decoding(got))
            out = code.decode({w: msgs[w][:r] for w in pattern}, dim=dim)
            np.testing.assert_allclose(out, g.sum(0), rtol=1e-9, atol=1e-9)
            if r > 1:
                assert not code.can_decode({w: r - 1 for w in pattern})
    assert code.tolerance == (d - 1 if cls is GroupAGC else d - args[2])


@pytest.mark.parametrize("cls,args,sub", [
    (GroupAGC, (11, 3, 2), lambda size, rng: AGC(size, 3, 2, rng)),
    (GroupCGC, (11, 3, 2), lambda size, rng: CGC(size, 3, 2, "gaussian", rng)),
])
def test_groups_of_one_size_run_one_subsystem(cls, args, sub):
    """Groups (0, 3), (3, 6), (6, 11): the two of size 3 run one code object, the last its own;
    the subsystems are the seed's draws in group order (group 0's is the draw it always had), and
    the groups' encoders are their subsystem's, on their own workers and partitions."""
    code = cls(*args, seed=4)
    assert code.groups == ((0, 3), (3, 6), (6, 11))
    assert code.parts[0] is code.parts[1] and code.parts[2] is not code.parts[0]
    assert code.subcodes == (code.parts[0], code.parts[2])
    rng = np.random.default_rng(4)
    for want, got in zip([sub(3, rng), sub(5, rng)], code.subcodes, strict=True):
        for E, F in zip(want.encoders, got.encoders, strict=True):
            np.testing.assert_array_equal(E, F)
    for (a, b), part in zip(code.groups, code.parts):
        for i in range(b - a):
            assert code.placement[a + i] == tuple(a + j for j in part.placement[i])
            np.testing.assert_array_equal(code.encoders[a + i], part.encoders[i])


def test_reprs_and_registry():
    assert repr(gradcode.make_code("agc", n=5, d=4, L=12)) == "<AGC n=5 d=4 L=12>"
    assert repr(gradcode.make_code("cgc", n=5, d=4, m=2)) == "<CGC n=5 d=4 m=2 construction=vandermonde>"
    assert repr(gradcode.make_code("g-agc", n=7, d=2, L=2)) == "<GroupAGC n=7 d=2 L=2>"
    assert repr(gradcode.make_code("g-cgc", n=7, d=3, m=2)) == "<GroupCGC n=7 d=3 m=2>"
    a, b = AGC(5, 3, 2, seed=4), AGC(5, 3, 2, seed=4)
    for x, y in zip(a.encoders, b.encoders):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "name,kwargs,exc,match",
    [
        ("agc", dict(n=4, d=5, L=2), ValueError, "d .* must be <= n"),
        ("agc", dict(n=4, d=2, L=0), ValueError, "L must be >= 1"),
        ("agc", dict(n=4, d=0, L=2), ValueError, "d must be >= 1"),
        ("agc", dict(n=4, d=2, L=2.0), TypeError, "L must be an integer"),
        ("cgc", dict(n=5, d=3, m=4), ValueError, "d >= s \\+ m"),
        ("cgc", dict(n=5, d=6, m=2), ValueError, "d .* must be <= n"),
        ("cgc", dict(n=5, d=3, m=2, construction="cauchy"), ValueError, "construction must be one of"),
        ("g-agc", dict(n=5, d=6, L=2), ValueError, "d .* must be <= n"),
        ("g-agc", dict(n=5, d=2, L=0), ValueError, "L must be >= 1"),
        ("g-cgc", dict(n=8, d=3, m=4), ValueError, "d >= s \\+ m"),
    ],
)
def test_bad_parameters(name, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        gradcode.make_code(name, **kwargs)


def test_from_matrix_rejects_bad_E():
    with pytest.raises(ValueError, match="shape"):
        AGC.from_matrix(3, 2, 2, np.ones((6, 3)))
    bad = np.array(E_EX3, dtype=float)
    bad[0, 3] = 1.0  # round 0 may only use L + (n - d) = 3 columns
    with pytest.raises(ValueError, match="zero"):
        AGC.from_matrix(3, 2, 2, bad)


@pytest.mark.parametrize("name,params", [("agc", dict(n=5, d=3, L=4)), ("cgc", dict(n=6, d=4, m=3)),
                                         ("commfr", dict(n=6, k=6, N=3, K=2)), ("g-agc", dict(n=7, d=3, L=2))])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unpadded_encode_equals_padded(name, params, dtype):
    """Encoding when L does not divide the dimension skips the padded copy; same messages."""
    from gradcode.codes.base import LinearCode

    code = gradcode.make_code(name, **params)
    rng = np.random.default_rng(0)
    for dim in (1, 5, 13, 4 * code.chunks):
        for w in range(code.n):
            p = len(code.placement[w])
            x = rng.standard_normal((p, dim)).astype(dtype)
            ref = LinearCode._apply_encoder(code, code.encoders[w], x, code.chunks, p, dim)
            got = code.encode(w, x)
            assert got.dtype == dtype and got.shape == ref.shape
            np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("n,d,L", [(3, 2, 2), (4, 3, 3), (5, 3, 2), (4, 1, 2)])
def test_agc_straggling_every_count_vector(n, d, L):
    """Every count vector in [0, L]^n, one call for all (vectorized), against the rule written
    out: the smallest s with n - s workers holding r_s messages; those holding fewer are the
    stragglers; a vector no s fits (a mixed pattern) marks only the workers holding nothing.
    Where an s fits, the non-stragglers' r_s messages decode on their own."""
    code = AGC(n, d, L, seed=n + d + L)
    counts = np.array(list(itertools.product(range(L + 1), repeat=n)), dtype=np.intp)
    got = code.straggling(counts)
    assert got.shape == counts.shape and got.dtype == bool
    for c, row in zip(counts, got):
        fits = [s for s in range(d) if (c >= code.rounds_needed(s)).sum() >= n - s]
        want = c < code.rounds_needed(fits[0]) if fits else c == 0
        assert row.tolist() == want.tolist(), c
        np.testing.assert_array_equal(code.straggling(c), row)  # (n,) gives the same row
        if fits:
            r = code.rounds_needed(fits[0])
            assert code.can_decode({w: r for w in np.flatnonzero(~row)}), c
    # every worker with all L messages: nobody straggles; nothing received: everybody does
    assert not code.straggling(np.full(n, L)).any()
    assert code.straggling(np.zeros(n, dtype=int)).all()


def test_agc_straggling_examples_and_bad_counts():
    code = AGC(3, 2, 2, seed=0)  # r_0 = 1 (all three), r_1 = 2 (two of them)
    assert code.straggling([1, 1, 1]).tolist() == [False, False, False]
    assert code.straggling([2, 2, 0]).tolist() == [False, False, True]
    assert code.straggling([2, 2, 1]).tolist() == [False, False, False]  # s = 0 fits first
    assert code.straggling([[2, 1, 0], [0, 2, 2]]).tolist() == [[False, False, True], [True, False, False]]
    with pytest.raises(ValueError, match=r"counts must have shape \(3,\)"):
        code.straggling([1, 1])
    with pytest.raises(TypeError, match="integer message counts"):
        code.straggling([1.0, 1.0, 1.0])


def test_group_codes_straggling_per_group():
    """g-agc(6, 2, 2): groups {0,1}, {2,3}, {4,5}, each agc(2, 2, 2) (r_0 = 1 from both workers,
    r_1 = 2 from one). g-cgc keeps the whole-result rule (one message) in each group."""
    code = GroupAGC(6, 2, 2, seed=1)
    got = code.straggling([1, 1, 2, 0, 2, 1])
    assert got.tolist() == [False, False, False, True, False, False]
    rows = np.array([[1, 1, 2, 0, 2, 1], [2, 2, 2, 2, 0, 0]])
    assert code.straggling(rows).tolist() == [got.tolist(), [False] * 4 + [True, True]]
    for (a, b), sub in zip(code.groups, code.parts, strict=True):
        np.testing.assert_array_equal(code.straggling(rows)[:, a:b], sub.straggling(rows[:, a:b]))
    cgc = GroupCGC(7, 3, 2, seed=1)
    assert cgc.straggling([1, 0, 1, 1, 1, 1, 0]).tolist() == [False, True, False, False, False, False, True]


def test_agc_decode_from_every_message_does_not_amplify_more_than_from_fewer():
    """With every worker's L messages in, the plain minimum-norm decode put weight on AGC's later
    rounds, whose encoder rows are ~1e7x larger, and amplified rounding 8e6x at n = 20 where the
    first two rounds alone give 4e2x; the weighted solve keeps it at the level of the fewer rows."""
    code = AGC(20, 3, 6, seed=0)
    few = code.decoding({w: 2 for w in range(20)})
    every = code.decoding({w: 6 for w in range(20)})
    mixed = code.decoding({**{w: 6 for w in range(18)}, 18: 2, 19: 2})
    assert few.amplification < 1e3 and "weighted" in every.method
    assert every.amplification <= few.amplification and mixed.amplification < 2 * few.amplification
    rng = np.random.default_rng(0)
    g = rng.standard_normal((20, 60))
    report = code.decode_report(encode_all(code, g), dim=60)
    assert np.linalg.norm(report.gradient - g.sum(0)) <= report.error_bound
    assert report.relative_bound < 1e-6
