"""Lower bounds: GC-DC's per-iteration time bound and SGC's load bounds (Theorems F.1 / F.2).

GC-DC (Buyukates et al., Sec. VI-A, the curve "LB" of Figs. 4-12). ``K`` workers form ``P``
clusters of ``l = K / P`` workers and each computes ``r`` partitions; with any codeword assignment
an iteration ends once every cluster has heard from ``l - r + 1`` of its workers (eq. 14-15), hence
not before ``P (l - r + 1)`` workers in all have finished. The bound takes the iteration to end at
the ``P (l - r + 1)``-th smallest finishing time of that iteration: it is what a clairvoyant
assignment (known computation times, ``n = P``: every worker may join every cluster) achieves.

SGC (Krishnan et al., App. F). A sequential gradient code with constant normalized load ``L`` (the
fraction of a job's data one worker processes per round) and finite delay ``T`` that tolerates every
pattern of the ``(B, W, lambda)``-bursty model needs, eq. (2) of Theorem F.1,

    L >= L_B* = (W - 1 + B) / (n (W - 1) + B (n - lambda))   if B < W,
                 1 / (n - lambda)                             if B = W,

and for the ``(N, W', lambda')``-arbitrary model, eq. (3) of Theorem F.2,

    L >= L_A* = W' / (n (W' - N) + N (n - lambda'))           if N < W',
                 1 / (n - lambda')                            if N = W'.

For comparison the module also gives the loads the SGC paper's schemes achieve: ``(s + 1)/n`` for
(n, s)-GC, SR-SGC with ``s = ceil(B lambda / (W - 1 + B))`` (Sec. 3.1) and M-SGC, eq. (1). M-SGC
meets eq. (2) with equality when ``lambda`` is ``n - 1`` or ``n`` (Remark F.1).
"""

from __future__ import annotations

import numpy as np

from gradcode._validation import check_int

__all__ = [
    "gcdc_lower_bound",
    "bursty_load_bound",
    "arbitrary_load_bound",
    "gc_load",
    "srsgc_load",
    "msgc_load",
]


def gcdc_lower_bound(times, clusters: int, r: int) -> np.ndarray | float:
    """GC-DC's LB: the time the earliest ``P (l - r + 1)`` workers have finished, per round.

    ``times``: finishing times, shape ``(..., K)`` (one row per round, e.g. ``(rounds, K)``);
    ``clusters``: ``P`` (must divide ``K``); ``r``: partitions per worker, ``1 <= r <= l = K/P``.
    Returns the ``P (l - r + 1)``-th order statistic along the last axis (a float for one round).
    Workers that never finish (``inf``) are allowed as long as enough of them do.
    """
    t = np.asarray(times, dtype=float)
    if t.ndim == 0 or t.shape[-1] == 0:
        raise ValueError(f"times must have shape (..., K) with K >= 1 workers, got shape {t.shape}")
    if np.any(np.isnan(t)) or np.any(t < 0):
        raise ValueError("times must be non-negative (inf marks a worker that never finishes), got NaN or negative")
    K = t.shape[-1]
    P = check_int("clusters", clusters, minimum=1, maximum=K)
    if K % P:
        raise ValueError(f"clusters must divide the number of workers K={K}, got clusters={P}")
    ell = K // P
    r = check_int("r", r, minimum=1, maximum=ell)
    k = P * (ell - r + 1)
    out = np.partition(t, k - 1, axis=-1)[..., k - 1]
    return float(out) if out.ndim == 0 else out


def _bursty_args(n, B, W, lam, names):
    n = check_int("n", n, minimum=1)
    B = check_int(names[0], B, minimum=1)
    W = check_int(names[1], W, minimum=B)
    lam = check_int(names[2], lam, minimum=0, maximum=n)
    return n, B, W, lam


def bursty_load_bound(n: int, B: int, W: int, lam: int) -> float:
    """Theorem F.1, eq. (2): minimum normalized load under the ``(B, W, lambda)``-bursty model.

    ``1 <= B <= W`` (a burst lasts at most ``B`` rounds in any window of ``W``), ``0 <= lambda <= n``
    workers may straggle. For ``B = W = lambda``-free rounds with ``lambda = n`` no finite load
    works and the bound is ``inf``.
    """
    n, B, W, lam = _bursty_args(n, B, W, lam, ("B", "W", "lam"))
    if B == W:
        return float("inf") if lam == n else 1.0 / (n - lam)
    return (W - 1 + B) / (n * (W - 1) + B * (n - lam))


def arbitrary_load_bound(n: int, N: int, W_prime: int, lam_prime: int) -> float:
    """Theorem F.2, eq. (3): minimum normalized load under the ``(N, W', lambda')``-arbitrary model.

    ``1 <= N <= W'`` (at most ``N`` straggling rounds per worker in any window of ``W'``),
    ``0 <= lambda' <= n``.
    """
    n, N, Wp, lam = _bursty_args(n, N, W_prime, lam_prime, ("N", "W_prime", "lam_prime"))
    if N == Wp:
        return float("inf") if lam == n else 1.0 / (n - lam)
    return Wp / (n * (Wp - N) + N * (n - lam))


def gc_load(n: int, s: int) -> float:
    """Normalized load ``(s + 1) / n`` of (n, s)-GC (Tandon et al.; SGC Sec. 1)."""
    n = check_int("n", n, minimum=1)
    s = check_int("s", s, minimum=0, maximum=n - 1)
    return (s + 1) / n


def srsgc_load(n: int, B: int, W: int, lam: int) -> float:
    """SR-SGC's load ``(s + 1)/n`` with ``s = ceil(B lambda / (W - 1 + B))`` (SGC Sec. 3.1)."""
    n = check_int("n", n, minimum=1)
    B = check_int("B", B, minimum=1)
    W = check_int("W", W, minimum=B + 1)
    lam = check_int("lam", lam, minimum=1, maximum=n)
    if (W - 1) % B:
        raise ValueError(f"SR-SGC needs B to divide W - 1; got B={B}, W={W}")
    s = -(-B * lam // (W - 1 + B))
    return gc_load(n, min(s, n - 1))


def msgc_load(n: int, B: int, W: int, lam: int) -> float:
    """M-SGC's load, SGC eq. (1).

    ``(lambda + 1)(W - 1 + B) / (n (B + (W - 1)(lambda + 1)))`` for ``lambda < n`` and
    ``(W - 1 + B) / (n (W - 1))`` for ``lambda = n``; ``0 < B < W``.
    """
    n = check_int("n", n, minimum=1)
    B = check_int("B", B, minimum=1)
    W = check_int("W", W, minimum=B + 1)
    lam = check_int("lam", lam, minimum=0, maximum=n)
    if lam == n:
        return (W - 1 + B) / (n * (W - 1))
    return (lam + 1) * (W - 1 + B) / (n * (B + (W - 1) * (lam + 1)))
