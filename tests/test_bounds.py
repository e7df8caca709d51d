"""GC-DC's lower bound LB and SGC's load bounds (Theorems F.1 / F.2) against the papers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gradcode.analysis.bounds import (
    arbitrary_load_bound,
    bursty_load_bound,
    gc_load,
    gcdc_lower_bound,
    msgc_load,
    srsgc_load,
)
from gradcode.experiments.repro_analysis import SGC_LOADS, sgc_load_and_bound
from gradcode.experiments.reproduce import run_reproduction

# ---------------------------------------------------------------- GC-DC LB


def cluster_time(times, clusters, r):
    """GC-DC eq. (14)-(15): each cluster waits for its (l - r + 1)-th result; the round for all."""
    ell = len(clusters[0])
    return max(np.sort(times[list(c)])[ell - r] for c in clusters)


def all_partitions(workers, ell):
    """Every split of `workers` into unordered blocks of size ell."""
    if not workers:
        yield []
        return
    first, rest = workers[0], workers[1:]
    for others in itertools.combinations(rest, ell - 1):
        block = (first,) + others
        remaining = tuple(w for w in rest if w not in others)
        for tail in all_partitions(remaining, ell):
            yield [block] + tail


@pytest.mark.parametrize("K,P,r", [(6, 2, 2), (6, 3, 1), (6, 2, 3), (8, 2, 3), (6, 1, 4)])
def test_lb_is_the_best_clustering_with_known_times(K, P, r):
    # the bound is what a clairvoyant assignment achieves: the minimum over every clustering of
    # eq. (15), and no clustering does better (exhaustive over all splits into P clusters)
    rng = np.random.default_rng(K * 100 + P * 10 + r)
    for _ in range(5):
        t = rng.exponential(size=K)
        best = min(cluster_time(t, parts, r) for parts in all_partitions(tuple(range(K)), K // P))
        assert gcdc_lower_bound(t, P, r) == pytest.approx(best, rel=0, abs=0)


def test_lb_with_one_cluster_is_the_gc_time_and_is_below_static_clustering():
    rng = np.random.default_rng(0)
    t = rng.exponential(size=(200, 20))
    # P = 1: the master needs K - r + 1 results, exactly GC's completion time
    np.testing.assert_array_equal(gcdc_lower_bound(t, 1, 3), np.sort(t, axis=1)[:, 20 - 3])
    static = [tuple(range(c * 4, c * 4 + 4)) for c in range(5)]  # GC-SC, K = 20, P = 5, l = 4
    lb = gcdc_lower_bound(t, 5, 3)
    assert lb.shape == (200,)
    assert np.all(lb <= np.array([cluster_time(row, static, 3) for row in t]))


def test_lb_monte_carlo_against_shifted_exponential_order_statistics():
    # GC-DC eq. (20): X = r (alpha + E / mu), E ~ Exp(1). The k-th smallest of K i.i.d. Exp(1) has
    # mean sum_{j<k} 1/(K - j), so E[LB] = r (alpha + H / mu) with k = P (l - r + 1).
    K, P, r, mu, alpha, rounds = 20, 5, 3, 1.0, 0.01, 20_000
    rng = np.random.default_rng(2024)
    times = r * (alpha + rng.exponential(size=(rounds, K)) / mu)
    lb = gcdc_lower_bound(times, P, r)
    k = P * (K // P - r + 1)
    expected = r * (alpha + np.sum(1.0 / (K - np.arange(k))) / mu)
    stderr = lb.std(ddof=1) / np.sqrt(rounds)
    assert abs(lb.mean() - expected) < 4.5 * stderr  # 4.5 standard errors, fixed seed


def test_lb_handles_never_finishing_workers_and_scalar_rounds():
    t = np.array([1.0, np.inf, 2.0, 0.5, np.inf, 3.0])
    assert gcdc_lower_bound(t, 2, 2) == 3.0  # P (l - r + 1) = 4th smallest of 0.5, 1, 2, 3, inf, inf
    assert isinstance(gcdc_lower_bound(t, 2, 2), float)


def test_lb_errors():
    t = np.ones((3, 6))
    with pytest.raises(ValueError, match="clusters must divide the number of workers K=6"):
        gcdc_lower_bound(t, 4, 1)
    with pytest.raises(ValueError, match="r must be <= 3"):
        gcdc_lower_bound(t, 2, 4)
    with pytest.raises(ValueError, match="non-negative"):
        gcdc_lower_bound(np.array([1.0, np.nan]), 1, 1)
    with pytest.raises(ValueError, match="shape"):
        gcdc_lower_bound(np.array(1.0), 1, 1)
    with pytest.raises(TypeError, match="clusters must be an integer"):
        gcdc_lower_bound(t, 2.0, 1)


# ---------------------------------------------------------------- SGC Theorems F.1 / F.2


def test_bursty_and_arbitrary_bounds_formulae():
    assert bursty_load_bound(256, 1, 2, 27) == pytest.approx(2 / (256 + 229))
    assert bursty_load_bound(10, 3, 3, 4) == pytest.approx(1 / 6)
    assert arbitrary_load_bound(10, 2, 5, 4) == pytest.approx(5 / (10 * 3 + 2 * 6))
    assert arbitrary_load_bound(10, 5, 5, 4) == pytest.approx(1 / 6)
    assert bursty_load_bound(4, 2, 2, 4) == float("inf")
    # nobody straggles: every worker must still do its share, L >= 1/n
    assert bursty_load_bound(7, 1, 3, 0) == pytest.approx(1 / 7)


@pytest.mark.parametrize("n", [4, 9, 16])
def test_msgc_meets_theorem_f1_with_equality_at_lambda_n_minus_1_and_n(n):
    # Remark F.1: M-SGC is optimal for lambda in {n - 1, n}
    for B in range(1, 4):
        for W in range(B + 1, B + 6):
            for lam in (n - 1, n):
                assert msgc_load(n, B, W, lam) == pytest.approx(bursty_load_bound(n, B, W, lam), rel=1e-13)
            for lam in range(0, n + 1):
                assert msgc_load(n, B, W, lam) >= bursty_load_bound(n, B, W, lam) * (1 - 1e-13)
                # M-SGC also tolerates the (N = B, W' = W + B - 1, lambda' = lambda)-arbitrary model
                assert msgc_load(n, B, W, lam) >= arbitrary_load_bound(n, B, W + B - 1, lam) * (1 - 1e-13)
                assert arbitrary_load_bound(n, B, W + B - 1, lam) == pytest.approx(bursty_load_bound(n, B, W, lam))


def test_msgc_gap_to_the_bound_shrinks_like_one_over_w():
    n, B, lam = 16, 2, 5
    Ws = np.arange(B + 1, 400)
    gaps = np.array([msgc_load(n, B, int(W), lam) - bursty_load_bound(n, B, int(W), lam) for W in Ws])
    assert np.all(gaps > 0) and np.all(np.diff(gaps) < 0)
    scaled = gaps * Ws
    assert scaled.max() < 2 * scaled[-1]  # gap * W stays bounded: O(1/W)


def test_gc_and_srsgc_loads_respect_the_bounds():
    n = 20
    for s in range(n):
        # (n, s)-GC tolerates s stragglers in every round: the (B = W, lambda = s)-bursty pattern
        assert gc_load(n, s) >= bursty_load_bound(n, 1, 1, s)
    for B, x in itertools.product(range(1, 4), range(1, 4)):
        W = x * B + 1
        for lam in range(1, n + 1):
            assert srsgc_load(n, B, W, lam) >= bursty_load_bound(n, B, W, lam)


def _decimals(x: float) -> int:
    text = repr(x)
    return len(text.split(".")[1]) if "." in text else 0


@pytest.mark.parametrize("scheme,params,printed,source", SGC_LOADS)
def test_sgc_tables_1_and_3_loads_and_bounds(scheme, params, printed, source):
    load, lb_bursty, lb_arbitrary = sgc_load_and_bound(scheme, params)
    # the formulas give the printed loads to the printed precision
    assert abs(load - printed) <= 0.5 * 10 ** -_decimals(printed) + 1e-12
    assert load >= lb_bursty
    if lb_arbitrary is not None:
        assert load >= lb_arbitrary
    if scheme == "No Coding":
        assert load == pytest.approx(lb_bursty)  # lambda = 0: the bound 1/n is met


def test_sgc_reproduction_rows():
    rows = run_reproduction("sgc-load-bounds")["rows"]
    assert len(rows) == len(SGC_LOADS)
    assert all(r["load"] >= r["bound_F1"] for r in rows)
    msgc = [r for r in rows if r["scheme"] == "M-SGC"]
    assert all(r["ratio"] < 2 for r in msgc)  # M-SGC within a factor 2 of the bound, GC far from it
    assert all(r["ratio"] > 8 for r in rows if r["scheme"] in ("GC", "SR-SGC"))


def test_bound_and_load_errors():
    with pytest.raises(ValueError, match="W must be >= 3"):
        bursty_load_bound(10, 3, 2, 1)
    with pytest.raises(ValueError, match="lam must be <= 10"):
        bursty_load_bound(10, 1, 2, 11)
    with pytest.raises(ValueError, match="W_prime must be >= 2"):
        arbitrary_load_bound(10, 2, 1, 1)
    with pytest.raises(ValueError, match="B to divide W - 1"):
        srsgc_load(10, 2, 4, 3)
    with pytest.raises(ValueError, match="W must be >= 2"):
        msgc_load(10, 1, 1, 3)
    with pytest.raises(ValueError, match="s must be <= 9"):
        gc_load(10, 10)
    with pytest.raises(TypeError, match="B must be an integer"):
        bursty_load_bound(10, 1.5, 2, 1)
