"""Deterministic straggler models of the SGC paper (Krishnan et al., Sec. 2): generators of
conforming patterns and conformance checkers.

A straggler pattern is a ``(rounds, n)`` boolean matrix, ``S[t, i] = True`` when worker ``i`` is a
straggler in round ``t`` (the paper's indicator ``S_i(t)``). Windows are ``W_j = [j : j + W - 1]``.

* **(B, W, lambda)-bursty**: (1) in every window ``W_j`` at most ``lambda`` distinct workers
  straggle; (2) in every window, a worker's first and last straggling rounds are at most ``B - 1``
  apart: if ``S_i(t) = 1`` for some ``t`` in ``W_j`` then ``S_i(l) = 0`` for ``l`` in
  ``[t + B : j + W - 1]``. ``0 <= lambda <= n``, ``1 <= B <= W``.
* **(N, W', lambda')-arbitrary**: at most ``lambda'`` distinct stragglers in every window of
  ``W'`` rounds, and every worker straggles in at most ``N`` rounds of every such window.
  ``0 <= lambda' <= n``, ``0 <= N <= W'``.
* **s-stragglers-per-round**: at most ``s`` stragglers in every round, ``0 <= s < n`` (``s = n``
  is accepted too, meaning no constraint).

A finite pattern is checked on every window that starts in ``[0, rounds - 1]`` (windows running
past the end are truncated; windows starting before round 0 impose nothing more, since their
truncation lies inside window ``W_0``). The checkers return a :class:`Conformance` that is truthy
when the pattern conforms and otherwise says where it *first* stops conforming: the smallest round
``t`` such that the prefix ``S[: t + 1]`` already violates the model, with the worker(s) and the
window involved.

The generators either draw a random conforming pattern (a two-state Markov proposal per worker,
filtered round by round so that each prefix conforms) or build the periodic worst-case patterns
of the paper's lower-bound proofs (App. F, Figs. 8-10).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradcode._validation import as_generator, check_int, check_real

__all__ = [
    "Conformance",
    "arbitrary_pattern",
    "bursty_pattern",
    "check_arbitrary",
    "check_bursty",
    "check_per_round",
    "per_round_pattern",
]


@dataclass(frozen=True)
class Conformance:
    """Result of a conformance check; truthy when the pattern conforms.

    On a violation: ``round`` is the first round at which the pattern stops conforming,
    ``workers`` the workers involved, ``window`` the ``(first, last)`` rounds of the violated
    window (``None`` for the per-round model) and ``reason`` a sentence for people."""

    ok: bool
    round: int | None = None
    workers: tuple[int, ...] = ()
    window: tuple[int, int] | None = None
    reason: str = "conforms"

    def __bool__(self) -> bool:
        return self.ok


def _as_pattern(S) -> np.ndarray:
    arr = np.asarray(S)
    if arr.ndim != 2:
        raise ValueError(f"a straggler pattern must be a 2-D (rounds, n) array, got shape {arr.shape}")
    if arr.dtype != bool:
        if not np.isin(arr, (0, 1)).all():
            raise ValueError("a straggler pattern must hold booleans (or 0/1)")
        arr = arr.astype(bool)
    return arr


def _positions(S):
    """Per worker, the sorted rounds in which it straggles."""
    return [np.flatnonzero(S[:, i]) for i in range(S.shape[1])]


def _kth_from(pos, starts, k):
    """For each window start j in ``starts``: the round of the worker's (k+1)-th straggle at or
    after j (k = 0: the first), or a huge sentinel if there is none."""
    idx = np.searchsorted(pos, starts) + k
    out = np.full(starts.shape, np.iinfo(np.int64).max, dtype=np.int64)
    ok = idx < pos.size
    out[ok] = pos[idx[ok]]
    return out


def _spatial(S, W, lam, label):
    """First completion of a window with more than ``lam`` distinct stragglers."""
    rounds, n = S.shape
    if lam >= n or rounds == 0:
        return None
    starts = np.arange(rounds, dtype=np.int64)
    first = np.stack([_kth_from(p, starts, 0) for p in _positions(S)], axis=1)  # (rounds, n)
    # the (lam+1)-th distinct straggler of window j enters at the (lam+1)-th smallest first-straggle
    kth = np.partition(first, lam, axis=1)[:, lam]
    ends = starts + W - 1
    bad = kth <= ends
    if not bad.any():
        return None
    j = int(np.argmin(np.where(bad, kth, np.iinfo(np.int64).max)))
    t = int(kth[j])
    workers = tuple(int(i) for i in np.flatnonzero(first[j] <= t))
    return Conformance(False, t, workers, (j, j + W - 1),
                       f"{len(workers)} distinct stragglers in window [{j}, {j + W - 1}] by round {t};"
                       f" the {label} model allows at most {lam}")


def check_bursty(S, B: int, W: int, lam: int) -> Conformance:
    """Whether ``S`` conforms to the (B, W, lambda)-bursty model (see the module docstring)."""
    S = _as_pattern(S)
    rounds, n = S.shape
    W = check_int("W", W, minimum=1)
    B = check_int("B", B, minimum=1, maximum=W)
    lam = check_int("lam", lam, minimum=0, maximum=n)
    found = []
    spatial = _spatial(S, W, lam, f"({B}, {W}, {lam})-bursty")
    if spatial is not None:
        found.append(spatial)
    starts = np.arange(rounds, dtype=np.int64)
    for i, pos in enumerate(_positions(S)):
        if pos.size < 2:
            continue
        f = _kth_from(pos, starts, 0)
        inside = f <= starts + W - 1
        # first straggle at or after f + B, inside the same window, breaks the burst
        g = np.full(rounds, np.iinfo(np.int64).max, dtype=np.int64)
        g[inside] = _kth_from(pos, f[inside] + B, 0)
        bad = inside & (g <= starts + W - 1)
        if bad.any():
            j = int(np.argmin(np.where(bad, g, np.iinfo(np.int64).max)))
            found.append(Conformance(
                False, int(g[j]), (i,), (j, j + W - 1),
                f"worker {i} straggles in rounds {int(f[j])} and {int(g[j])} of window [{j}, {j + W - 1}],"
                f" {int(g[j] - f[j])} rounds apart; a burst spans at most B - 1 = {B - 1}"))
    if not found:
        return Conformance(True)
    return min(found, key=lambda c: (c.round, c.window[0] if c.window else 0))


def check_arbitrary(S, N: int, W: int, lam: int) -> Conformance:
    """Whether ``S`` conforms to the (N, W', lambda')-arbitrary model (``W`` is W')."""
    S = _as_pattern(S)
    rounds, n = S.shape
    W = check_int("W", W, minimum=1)
    N = check_int("N", N, minimum=0, maximum=W)
    lam = check_int("lam", lam, minimum=0, maximum=n)
    found = []
    spatial = _spatial(S, W, lam, f"({N}, {W}, {lam})-arbitrary")
    if spatial is not None:
        found.append(spatial)
    starts = np.arange(rounds, dtype=np.int64)
    for i, pos in enumerate(_positions(S)):
        if pos.size <= N:
            continue
        g = _kth_from(pos, starts, N)  # the (N+1)-th straggle at or after the window start
        bad = g <= starts + W - 1
        if bad.any():
            j = int(np.argmin(np.where(bad, g, np.iinfo(np.int64).max)))
            found.append(Conformance(
                False, int(g[j]), (i,), (j, j + W - 1),
                f"worker {i} straggles in {N + 1} rounds of window [{j}, {j + W - 1}] by round {int(g[j])};"
                f" at most N = {N} allowed"))
    if not found:
        return Conformance(True)
    return min(found, key=lambda c: (c.round, c.window[0] if c.window else 0))


def check_per_round(S, s: int) -> Conformance:
    """Whether ``S`` has at most ``s`` stragglers in every round."""
    S = _as_pattern(S)
    s = check_int("s", s, minimum=0, maximum=S.shape[1])
    counts = S.sum(axis=1)
    bad = np.flatnonzero(counts > s)
    if bad.size == 0:
        return Conformance(True)
    t = int(bad[0])
    workers = tuple(int(i) for i in np.flatnonzero(S[t]))
    return Conformance(False, t, workers, None,
                       f"{len(workers)} stragglers in round {t}; the {s}-stragglers-per-round model allows at most {s}")


# --------------------------------------------------------------------------- generators


def _markov_proposal(rng, rounds, n, p, p_stay):
    u = rng.random((rounds, n))
    prop = np.empty((rounds, n), dtype=bool)
    if rounds == 0:
        return prop
    prop[0] = u[0] < p
    for t in range(1, rounds):
        prop[t] = np.where(prop[t - 1], u[t] < p_stay, u[t] < p)
    return prop


def _filter(rng, prop, W, lam, allowed_worker):
    """Accept proposed stragglers round by round, in random worker order, whenever the window
    ``[t - W + 1, t]`` (the tightest constraint on round t given the past) stays within the model."""
    rounds, n = prop.shape
    S = np.zeros_like(prop)
    for t in range(rounds):
        cand = np.flatnonzero(prop[t])
        if cand.size == 0:
            continue
        lo = max(0, t - W + 1)
        past = S[lo:t]
        distinct = set(np.flatnonzero(past.any(axis=0)).tolist())
        for i in rng.permutation(cand):
            if i not in distinct and len(distinct) >= lam:
                continue
            if allowed_worker(past[:, i], t - lo):
                S[t, i] = True
                distinct.add(int(i))
    return S


def _check_rounds_n(rounds, n):
    return check_int("rounds", rounds, minimum=0), check_int("n", n, minimum=1)


def bursty_pattern(rounds: int, n: int, B: int, W: int, lam: int, *, p: float = 0.1,
                   p_stay: float = 0.7, periodic: bool = False, rng=None) -> np.ndarray:
    """A ``(rounds, n)`` straggler pattern conforming to the (B, W, lambda)-bursty model.

    Random (default): each worker proposes straggling by a two-state Markov chain (enter with
    probability ``p``, stay with ``p_stay``, as in a Gilbert-Elliot channel) and a proposal is
    accepted only if the pattern so far still conforms (at most ``lam`` distinct stragglers in the
    last ``W`` rounds, bursts no longer than ``B`` within the window).

    ``periodic=True``: the worst case of SGC App. F (Fig. 8 for ``B < W``, Fig. 9 for ``B = W``):
    workers ``0..lam-1`` straggle in rounds ``[k (W - 1 + B) : k (W - 1 + B) + B - 1]`` for every
    ``k`` (every round when ``B = W``); no randomness."""
    rounds, n = _check_rounds_n(rounds, n)
    W = check_int("W", W, minimum=1)
    B = check_int("B", B, minimum=1, maximum=W)
    lam = check_int("lam", lam, minimum=0, maximum=n)
    if periodic:
        S = np.zeros((rounds, n), dtype=bool)
        if B == W:
            S[:, :lam] = True
        else:
            period = W - 1 + B
            S[(np.arange(rounds) % period) < B, :lam] = True
        return S
    p = check_real("p", p, minimum=0.0, maximum=1.0)
    p_stay = check_real("p_stay", p_stay, minimum=0.0, maximum=1.0)
    gen = as_generator(rng)
    prop = _markov_proposal(gen, rounds, n, p, p_stay)

    def allowed(col, t_rel):
        hits = np.flatnonzero(col)
        return hits.size == 0 or t_rel - hits[0] <= B - 1

    return _filter(gen, prop, W, lam, allowed)


def arbitrary_pattern(rounds: int, n: int, N: int, W: int, lam: int, *, p: float = 0.1,
                      p_stay: float = 0.3, periodic: bool = False, rng=None) -> np.ndarray:
    """A ``(rounds, n)`` pattern conforming to the (N, W', lambda')-arbitrary model (``W`` is W').

    Random (default): Markov proposals as in :func:`bursty_pattern`, accepted while every window
    so far has at most ``lam`` distinct stragglers and at most ``N`` straggling rounds per worker.
    ``periodic=True``: the worst case of SGC App. F (Fig. 10 for ``N < W'``, Fig. 9 for ``N = W'``):
    workers ``0..lam-1`` straggle in the first ``N`` rounds of every block of ``W'`` rounds."""
    rounds, n = _check_rounds_n(rounds, n)
    W = check_int("W", W, minimum=1)
    N = check_int("N", N, minimum=0, maximum=W)
    lam = check_int("lam", lam, minimum=0, maximum=n)
    if periodic:
        S = np.zeros((rounds, n), dtype=bool)
        S[(np.arange(rounds) % W) < N, :lam] = True
        return S
    p = check_real("p", p, minimum=0.0, maximum=1.0)
    p_stay = check_real("p_stay", p_stay, minimum=0.0, maximum=1.0)
    gen = as_generator(rng)
    prop = _markov_proposal(gen, rounds, n, p, p_stay)
    return _filter(gen, prop, W, lam, lambda col, t_rel: int(col.sum()) + 1 <= N)


def per_round_pattern(rounds: int, n: int, s: int, *, p: float | None = None, rng=None) -> np.ndarray:
    """A ``(rounds, n)`` pattern with at most ``s`` stragglers per round.

    ``p=None`` (default): exactly ``s`` workers per round, uniformly at random (Tandon's
    experiments). With ``p``: each worker proposes to straggle with probability ``p`` and at most
    ``s`` of the proposers, chosen at random, are kept."""
    rounds, n = _check_rounds_n(rounds, n)
    s = check_int("s", s, minimum=0, maximum=n)
    gen = as_generator(rng)
    keys = gen.random((rounds, n))
    if p is None:
        proposers = np.ones((rounds, n), dtype=bool)
    else:
        p = check_real("p", p, minimum=0.0, maximum=1.0)
        proposers = gen.random((rounds, n)) < p
    # keep the s proposers with the smallest keys in each round
    keys = np.where(proposers, keys, np.inf)
    order = np.argsort(keys, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(n)[None, :].repeat(rounds, axis=0), axis=1)
    return proposers & (rank < s)
