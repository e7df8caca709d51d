"""Tandon et al.'s codes and GC-SC: the paper's worked examples, exhaustive sweeps for every s at
n <= 8, random sweeps up to n = 256, and parameter validation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import gradcode
from gradcode.codes.tandon import cyclic_repetition_matrix
from codes_util import encode_all, random_partials, received


def _sweep(code, d=3, seed=0, rtol=1e-9):
    rng = np.random.default_rng(seed)
    g, partials = random_partials(code, d, rng)
    messages = encode_all(code, partials)
    for S in itertools.combinations(range(code.n), code.tolerance):
        out = code.decode(received(code, messages, set(S)), dim=d)
        np.testing.assert_allclose(out, g.sum(0), rtol=rtol, atol=rtol, err_msg=f"{code} stragglers {S}")


def test_figure1_worked_example():
    """Fig. 1b / eq. 6: B = [[1/2, 1, 0], [0, 1, -1], [1/2, 0, 1]] and the decoding matrix A."""
    B = [[0.5, 1, 0], [0, 1, -1], [0.5, 0, 1]]
    A = np.array([[0, 1, 2], [1, 0, 1], [2, -1, 0]], dtype=float)
    code = gradcode.make_code("matrix", B=B)
    assert code.tolerance == 1 and code.load == pytest.approx(2 / 3)
    for row in A:
        alive = np.flatnonzero(row)
        sol = code.decoding({int(w): 1 for w in alive})
        np.testing.assert_allclose(sol.coefficients[0], row[alive], atol=1e-12)
    np.testing.assert_allclose(A @ np.array(B), np.ones((3, 3)), atol=1e-12)


def test_frc_structure_matches_eq9():
    """n = 6, s = 2 (Fig. 3): two data groups of three partitions, each replicated three times."""
    code = gradcode.make_code("frc", n=6, s=2)
    assert code.placement == ((0, 1, 2), (3, 4, 5)) * 3
    assert code.load == pytest.approx(3 / 6)
    # decodes from one worker per data group, fails when a whole group straggles
    assert code.can_decode({0: 1, 5: 1})
    assert not code.can_decode({0: 1, 2: 1, 4: 1})
    assert code.decoding({0: 1, 2: 1, 3: 1, 5: 1}).method == "frc-groups"


def test_crc_support_and_null_space():
    """eq. 10: row i supported on i..i+s (mod n) with leading 1, every row in null(H), H 1 = 0."""
    n, s = 7, 3
    code = gradcode.make_code("crc", n=n, s=s, seed=5)
    B = code.B
    for i in range(n):
        assert set(np.flatnonzero(B[i])) == {(i + j) % n for j in range(s + 1)}
        assert B[i, i] == 1.0
    H = np.random.default_rng(5).standard_normal((s, n))
    H[:, n - 1] = -H[:, : n - 1].sum(axis=1)
    np.testing.assert_allclose(H @ B.T, 0, atol=1e-10)
    np.testing.assert_allclose(B, cyclic_repetition_matrix(n, s, np.random.default_rng(5)))
    assert np.linalg.matrix_rank(B) == n - s


def test_crc_seed_is_reproducible_and_matters():
    a, b, c = (gradcode.make_code("crc", n=6, s=2, seed=x).B for x in (1, 1, 2))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


@pytest.mark.parametrize("n", range(1, 9))
def test_exhaustive_every_s_small_n(n):
    """Every code of the paper, every s < n, every straggler set of size s (n <= 8)."""
    for s in range(n):
        _sweep(gradcode.make_code("crc", n=n, s=s, seed=n * 10 + s))
        if n % (s + 1) == 0:
            _sweep(gradcode.make_code("frc", n=n, s=s))
        if s >= 1 and n >= 2:
            _sweep(gradcode.make_code("partial", n=n, s=s, alpha=1.5 + s, seed=s))


@pytest.mark.parametrize("n,s", [(16, 3), (32, 4), (64, 8), (128, 13), (256, 27)])
def test_random_sweeps_large_n(n, s):
    """Random straggler sets at scale; CRC's conditioning at n = 256 costs digits, so the check is
    relative to the gradient's norm."""
    rng = np.random.default_rng(n)
    code = gradcode.make_code("crc", n=n, s=s, seed=0)
    frc_n = n - n % (s + 1)
    frc = gradcode.make_code("frc", n=frc_n, s=s)
    d = 4
    for c in (code, frc):
        g, partials = random_partials(c, d, rng)
        messages = encode_all(c, partials)
        full = g.sum(0)
        for _ in range(5):
            S = set(rng.choice(c.n, size=s, replace=False).tolist())
            out = c.decode(received(c, messages, S), dim=d)
            assert np.linalg.norm(out - full) <= 1e-7 * np.linalg.norm(full) * c.n
        fewer = set(rng.choice(c.n, size=s // 2, replace=False).tolist())
        out = c.decode(received(c, messages, fewer), dim=d)
        assert np.linalg.norm(out - full) <= 1e-7 * np.linalg.norm(full) * c.n


def test_crc_float32_messages_decode_with_float64_coefficients():
    n, s, d = 64, 6, 50
    code = gradcode.make_code("crc", n=n, s=s, seed=0)
    rng = np.random.default_rng(0)
    g = rng.standard_normal((n, d)).astype(np.float32)
    msgs = {w: code.encode(w, g[list(code.placement[w])]) for w in range(n)}
    assert msgs[0].dtype == np.float32
    S = set(range(0, 2 * s, 2))
    out = code.decode({w: m for w, m in msgs.items() if w not in S}, dim=d)
    exact = g.astype(np.float64).sum(0)
    # float32 messages carry ~1e-7 relative error, amplified by the decoding coefficients
    sol = code.decoding({w: 1 for w in range(n) if w not in S})
    bound = 1e-6 * np.abs(sol.coefficients).sum() * np.abs(g).max() * (s + 1)
    assert np.abs(out - exact).max() <= bound


def test_partial_load_fig4_and_rounding():
    code = gradcode.make_code("partial", n=3, s=1, alpha=2)
    assert code.load == pytest.approx(4 / 9)
    assert code.k == 9 and code.naive_per_worker == 2
    assert code.messages_per_worker == 2 and code.straggler_prefix == 1
    # non-integer (s+1)/(alpha-1) = 2/1.5: ceil to 2 naive partitions of 2/3 unit each
    code = gradcode.make_code("partial", n=4, s=1, alpha=2.5)
    q = 2 / 1.5
    assert code.naive_per_worker == 2
    assert code.load == pytest.approx((1 + 1) * 2.5 / (4 * (1 + 2.5)))
    unit = 1 / (4 + 4 * q)
    np.testing.assert_allclose(code.partition_sizes[:4], unit)
    np.testing.assert_allclose(code.partition_sizes[4:], unit * q / 2)
    # a full straggler (no naive message) cannot be tolerated
    assert not code.can_decode({0: 2, 1: 2, 2: 2})
    assert code.can_decode({0: 2, 1: 2, 2: 2, 3: 1})


def test_gc_sc_eq5_assignment_and_spread_stragglers():
    """GC-DC eq. 5: K = 12, P = 4, r = 2 (s = 1); clusters are the columns of A_cluster."""
    A = np.array([[1, 2, 3, 4], [6, 7, 8, 5], [9, 10, 11, 12]]) - 1
    code = gradcode.make_code("gc-sc", n=12, clusters=4, s=1, assignment=A)
    assert code.placement[0] == (0, 1) and code.placement[5] == (1, 2) and code.placement[8] == (2, 0)
    assert code.placement[4] == (10, 11)  # worker 5 is the second worker of cluster 4
    assert code.load == pytest.approx(2 / 12)
    # Realization 1 of Fig. 1: one straggler per cluster (4 stragglers) still decodes
    _sweep_set(code, {0, 6, 10, 4})
    # two stragglers in the same cluster do not
    assert not code.can_decode({w: 1 for w in range(12) if w not in (0, 5)})


def _sweep_set(code, S, d=3):
    rng = np.random.default_rng(0)
    g, partials = random_partials(code, d, rng)
    out = code.decode(received(code, encode_all(code, partials), S), dim=d)
    np.testing.assert_allclose(out, g.sum(0), atol=1e-9)


def test_ignore_rescales_and_waits_for_n_minus_s():
    code = gradcode.make_code("ignore", n=4, s=1)
    g = np.arange(8.0).reshape(4, 2)
    msgs = {w: code.encode(w, g[[w]]) for w in range(4)}
    out = code.decode({w: msgs[w] for w in (0, 1, 2)}, dim=2)
    np.testing.assert_allclose(out, g[:3].sum(0) * 4 / 3)
    assert not code.can_decode({0: 1, 1: 1})
    assert code.exact is False


def test_uncoded_needs_everyone():
    code = gradcode.make_code("uncoded", n=3)
    assert not code.can_decode({0: 1, 1: 1})
    with pytest.raises(gradcode.NotDecodableError, match="missing \\[2\\]"):
        code.decoding({0: 1, 1: 1})


def test_ill_conditioned_solve_is_refused():
    """A decode whose condition number exceeds max_condition raises instead of returning an
    inaccurate gradient."""
    eps = 1e-12
    B = [[1.0, 1.0], [1.0, 1.0 + eps], [1.0, 0.0]]
    code = gradcode.make_code("matrix", B=B, s=0)
    with pytest.raises(gradcode.NotDecodableError, match="ill-conditioned"):
        code.decoding({0: 1, 1: 1})
    assert code.can_decode({0: 1, 2: 1})
    assert code.decoding({0: 1, 2: 1}).condition < 10
    # the same pattern is accepted under a looser documented threshold
    code.max_condition = 1e15  # clears the cached refusal
    assert code.can_decode({0: 1, 1: 1})
    with pytest.raises(ValueError, match="max_condition must be >= 1.0"):
        code.max_condition = 0.5


def test_decodability_is_by_rank_not_count():
    code = gradcode.make_code("frc", n=6, s=2)
    assert code.can_decode({0: 1, 1: 1})  # 2 workers of 6, one per data group
    assert not code.can_decode({0: 1, 2: 1, 4: 1, 3: 0})


def test_cache_hits_and_bound():
    code = gradcode.make_code("crc", n=6, s=2)
    code._cache.size = 2  # the LRU bound (LinearCode.CACHE_SIZE, 4096, by default)
    pats = [{w: 1 for w in range(6) if w not in S} for S in [(0, 1), (2, 3), (4, 5)]]
    for p in pats:
        code.decoding(p)
    assert len(code._cache) == 2 and code.cache_misses == 3
    code.decoding(pats[2])
    assert code.cache_hits == 1
    assert code.decoding(pats[2]) is code.decoding(pats[2])


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("crc", dict(n=4, s=4), "s must be < n"),
        ("crc", dict(n=4, s=-1), "s must be >= 0"),
        ("crc", dict(n=4.0, s=1), "n must be an integer"),
        ("crc", dict(n=4, s=1.5), "s must be an integer"),
        ("crc", dict(n=True, s=0), "n must be an integer"),
        ("frc", dict(n=6, s=3), "divide n"),
        ("frc", dict(n=0, s=0), "n must be >= 1"),
        ("partial", dict(n=3, s=1, alpha=1), "alpha must be > 1"),
        ("partial", dict(n=3, s=1, alpha=2, inner="mds"), "inner must be one of"),
        ("gc-sc", dict(n=12, clusters=5, s=1), "clusters must divide n"),
        ("gc-sc", dict(n=12, clusters=4, s=3), "cluster size"),
        ("gc-sc", dict(n=4, clusters=2, s=0, assignment=[[0, 1], [2, 2]]), "exactly once"),
        ("ignore", dict(n=3, s=3), "s must be < n"),
        ("matrix", dict(B=[[1, 0], [0, 1]], s=1), "does not tolerate"),
        ("nope", dict(), "unknown code 'nope'"),
    ],
)
def test_bad_parameters(name, params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        gradcode.make_code(name, **params)


def test_wrong_message_count_and_prefix_validation():
    code = gradcode.make_code("partial", n=3, s=1, alpha=2)
    with pytest.raises(ValueError, match="worker 0 must be <= 2, got 3"):
        code.can_decode({0: 3})
    with pytest.raises(ValueError, match="unknown worker id 3"):
        code.can_decode({3: 1})
    m = code.message_length(5)
    with pytest.raises(ValueError, match="at most 2 messages"):
        code.decode({0: np.zeros((3, m))}, dim=5)


def test_message_length_and_chunks():
    code = gradcode.make_code("crc", n=4, s=1)
    assert code.message_length(10) == 10 and code.chunks == 1
    assert math.isclose(code.comm_cost(1), 1.0) and code.comm_cost(2) is None


@pytest.mark.parametrize("n,s", [(10, 5), (10, 6), (10, 8), (10, 9), (40, 31), (64, 63)])
def test_crc_rows_by_algorithm_2_and_by_the_null_space_agree(n, s):
    """Algorithm 2 row by row (an s x s solve each) and the construction used when n - s < 3s/4
    (an (n - s) x (n - s) solve in H's null space) give the same B, to rounding."""
    rng = np.random.default_rng(3)
    H = rng.standard_normal((s, n))
    H[:, n - 1] = -H[:, : n - 1].sum(axis=1)
    expected = np.zeros((n, n))
    for i in range(n):
        j = np.arange(i, i + s + 1) % n
        expected[i, i] = 1.0
        expected[i, j[1:]] = -np.linalg.solve(H[:, j[1:]], H[:, j[0]])
    B = cyclic_repetition_matrix(n, s, np.random.default_rng(3))
    np.testing.assert_allclose(B, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
    support = np.zeros((n, n), dtype=bool)
    for i in range(n):
        support[i, (i + np.arange(s + 1)) % n] = True
    assert (B[~support] == 0).all() and (np.diag(B) == 1).all()
