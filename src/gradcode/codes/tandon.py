"""Tandon, Lei, Dimakis, Karampatziakis, *Gradient Coding* (ICML 2017): the baselines, the
fractional and cyclic repetition codes (Section 3) and the two-stage scheme for alpha-partial
stragglers (Section 4).

Notation of the paper: ``B`` (n x k) holds the encoding of worker ``i`` in row ``b_i``; the scheme
is robust to ``s`` stragglers iff ``1 in span{b_i : i in I}`` for every ``|I| = n - s``
(Condition 1, the B-span condition). Theorem 1: every row of such a ``B`` has at least
``k (s + 1) / n`` non-zeros, so no exact code has load below ``(s + 1) / n``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from gradcode._validation import as_generator, check_choice, check_int, check_memory, check_real
from gradcode.codes.base import LinearCode, check_n_s, register
from gradcode.codes.decoding import Decoding, Pattern
from gradcode.codes.compose import SequentialCode
from gradcode.codes.linalg import NullspaceSolver
from gradcode.codes.rules import KOfN, PerGroup
from gradcode.errors import NotDecodableError


def _single_message_encoders(B: np.ndarray, placement) -> list[np.ndarray]:
    """Encoders ``(1, |placement[w]|, 1)`` taking row ``w`` of ``B`` on its support."""
    return [B[w, list(p)].reshape(1, len(p), 1) for w, p in enumerate(placement)]


def _decoding_from_weights(pattern: Pattern, weights: dict[int, float], method: str) -> Decoding:
    rows = tuple((w, 0) for w in sorted(weights))
    coefficients = np.array([[weights[w] for w, _ in rows]])
    return Decoding(pattern, rows, coefficients, 1.0, method)


@register("uncoded")
class Uncoded(LinearCode):
    """Naive synchronous GD: worker ``w`` holds partition ``w`` and the master waits for all."""

    examples = (dict(n=4), dict(n=1))

    summary = "naive baseline: one partition per worker, waits for all"

    def __init__(self, n: int):
        n = check_int("n", n, minimum=1)
        placement = [(w,) for w in range(n)]
        super().__init__(
            n=n,
            placement=placement,
            encoders=_single_message_encoders(np.eye(n), placement),
            tolerance=0,
            params={"n": n},
        )

    def _fast_solve(self, pattern):
        if len(pattern) < self.n:
            missing = sorted(set(range(self.n)) - {w for w, _ in pattern})
            raise NotDecodableError(f"uncoded needs every worker; missing {missing}")
        return _decoding_from_weights(pattern, {w: 1.0 for w in range(self.n)}, "uncoded")

    def decode_rule(self):
        return KOfN(self.n)

    #: every message is added with coefficient 1
    streams = True

    def streamed_coefficient(self, added, w, r):
        return 1.0


@register("ignore")
class Ignore(LinearCode):
    """Ignore-s-stragglers baseline: uncoded placement; the master sums whatever arrived once at
    least ``n - s`` workers are in and rescales by ``k / (partitions received)``. Not exact: the
    result is an unbiased estimate of the gradient when stragglers are random."""

    examples = (dict(n=4, s=1), dict(n=5, s=2), dict(n=4, s=0))

    summary = "baseline: sum the first n-s results and rescale (inexact)"

    def __init__(self, n: int, s: int):
        n, s = check_n_s(n, s)
        placement = [(w,) for w in range(n)]
        super().__init__(
            n=n,
            placement=placement,
            encoders=_single_message_encoders(np.eye(n), placement),
            tolerance=s,
            exact=False,
            params={"n": n, "s": s},
        )

    def _fast_solve(self, pattern):
        got = len(pattern)
        if got < self.n - self.tolerance:
            raise NotDecodableError(
                f"ignore-{self.tolerance}-stragglers needs {self.n - self.tolerance} workers, got {got}"
            )
        scale = self.n / got
        return _decoding_from_weights(pattern, {w: scale for w, _ in pattern}, "rescaled-sum")

    def decode_rule(self):
        return KOfN(self.n - self.tolerance)


@register("frc")
class FRC(LinearCode):
    """Fractional repetition code (Section 3.1, eq. 9): ``n/(s+1)`` disjoint data groups of ``s+1``
    partitions each; worker ``w`` serves data group ``w mod n/(s+1)`` and sends the plain sum of
    its ``s+1`` partial gradients. The ``s+1`` replicas of ``B_block`` are stacked, so workers
    ``g, g + n/(s+1), ...`` hold the same data. Decoding (closed form): the first received worker of
    each data group, coefficient 1."""

    examples = (dict(n=4, s=1), dict(n=6, s=2), dict(n=6, s=1), dict(n=4, s=3), dict(n=5, s=0))

    summary = "fractional repetition (Tandon Sec. 3.1): n/(s+1) replicated data groups"

    def __init__(self, n: int, s: int):
        n, s = check_n_s(n, s)
        if n % (s + 1):
            raise ValueError(f"frc needs (s + 1) to divide n; got n={n}, s={s} (n % (s+1) = {n % (s + 1)})")
        self.groups = n // (s + 1)
        placement = [tuple(range((w % self.groups) * (s + 1), (w % self.groups + 1) * (s + 1))) for w in range(n)]
        super().__init__(
            n=n,
            placement=placement,
            encoders=[np.ones((1, s + 1, 1)) for _ in range(n)],
            k=n,
            tolerance=s,
            params={"n": n, "s": s},
        )

    def group_members(self, g: int) -> list[int]:
        return list(range(g, self.n, self.groups))

    def _fast_solve(self, pattern):
        chosen = {}
        for w, _ in pattern:
            chosen.setdefault(w % self.groups, w)
        if len(chosen) < self.groups:
            missing = sorted(set(range(self.groups)) - set(chosen))
            raise NotDecodableError(
                f"frc: no worker of data group(s) {missing} received (each group is workers g, g+{self.groups}, ...)"
            )
        return _decoding_from_weights(pattern, {w: 1.0 for w in chosen.values()}, "frc-groups")

    def decode_rule(self):
        return PerGroup(np.array([self.group_members(g) for g in range(self.groups)]), 1)

    #: the first message of each data group, coefficient 1; the others are not needed
    streams = True

    def streamed_coefficient(self, added, w, r):
        return 0.0 if added[w % self.groups::self.groups].any() else 1.0


def cyclic_repetition_matrix(n: int, s: int, rng: np.random.Generator) -> np.ndarray:
    """``B_cyc`` of Algorithm 2: ``H ~ N(0,1)^{s x n}`` with ``H 1 = 0``; row ``i`` is supported on
    ``i, ..., i+s (mod n)``, starts with 1, and lies in the null space of ``H``.

    Algorithm 2 solves an ``s x s`` system per row (``B[i, j] = -H_j^{-1} h_i`` on the rest ``j`` of
    the row's support). When ``m = n - s < 3 s / 4`` the same rows come cheaper from the ``m``
    dimensional null space ``N`` of ``H``: ``B[i] = N c`` with ``N[o] c = 0`` off the support and
    ``N[i] c = 1``, an ``m x m`` system per row (``n`` of them in one batched solve; the same rows to
    ~1e-12 relative). At n = 256, s = 255 (M-SGC's (n, lambda)-GC with lambda = 255) that is 1 x 1
    instead of 255 x 255 (BENCHMARKS.md, "Sequential gradient codes", building the schemes at
    n = 256). The crossover (3/4) is where the two took the same time at n = 256. Both go by
    blocks of rows, so that what they hold at once stays near 8 MB (at n = 256, s = 160 it was
    53 MB)."""
    if s == 0:
        return np.eye(n)
    H = rng.standard_normal((s, n))
    H[:, n - 1] = -H[:, : n - 1].sum(axis=1)
    cyclic = (np.arange(n)[:, None] + np.arange(n)[None, :]) % n  # row i: i, i+1, ... (mod n)
    window, off = cyclic[:, : s + 1], cyclic[:, s + 1:]  # row i's support (i first), the rest
    rows = np.arange(n)[:, None]
    B = np.zeros((n, n))
    if 4 * (n - s) >= 3 * s:  # Algorithm 2 as written, its n solves in batched calls
        # (r, s, s) blocks H[:, j[1:]] of r rows at a time: ~8 MB at most, not n s^2 doubles at once
        step = max(1, min(n, (1 << 20) // max(s * s, 1)))
        for a in range(0, n, step):
            w = window[a:a + step]
            blocks = H.T[w[:, 1:]].transpose(0, 2, 1)
            B[rows[a:a + step], w[:, 1:]] = -np.linalg.solve(blocks, H.T[w[:, 0]][:, :, None])[:, :, 0]
    else:
        m = n - s
        N = np.linalg.svd(H)[2][s:].T  # (n, m): H N = 0 (H has rank s: its s x s blocks invert)
        step = max(1, min(n, (1 << 20) // max((s + 1) * m, 1)))  # rows at a time: ~8 MB of N[window]
        for a in range(0, n, step):
            r = slice(a, a + step)
            A = np.concatenate([N[off[r]], N[r, None, :]], axis=1)  # (r, m, m): zero off the support, N[i] c = 1
            rhs = np.zeros((A.shape[0], m, 1))
            rhs[:, -1] = 1.0
            c = np.linalg.solve(A, rhs)[:, :, 0]  # (r, m)
            B[rows[r], window[r]] = np.einsum("ikm,im->ik", N[window[r]], c)
    np.fill_diagonal(B, 1.0)
    return B


@register("crc")
class CRC(LinearCode):
    """Cyclic repetition code (Section 3.2, Algorithm 2, eq. 10): worker ``i`` holds partitions
    ``i, ..., i+s (mod n)`` and sends ``b_i g`` with ``b_i`` in the null space of a seeded random
    ``H``. Robust to any ``s`` stragglers with probability 1 (Theorem 3). Works for any
    ``0 <= s < n``.

    Decoding uses the structured null-space solve of :class:`~gradcode.codes.linalg.NullspaceSolver` (an ``s x s`` system
    per straggler pattern) in place of least squares on ``n - s`` rows. Its ``condition`` is that of
    the ``s x s`` system. Tandon's random ``H`` gives badly conditioned decodes at scale (worst
    conditions ~1e7 and coefficients ~4e4 at n = 256, s = 27; see BENCHMARKS.md): coefficients are
    computed in float64 whatever the message dtype.
    """

    examples = (dict(n=4, s=2), dict(n=7, s=3, seed=1), dict(n=5, s=1), dict(n=6, s=5), dict(n=4, s=0),
                dict(n=8, s=2, seed=3))

    summary = "cyclic repetition (Tandon Alg. 2): any s < n, structured null-space decode"

    def __init__(self, n: int, s: int, seed=0):
        n, s = check_n_s(n, s)
        # B and its SVD (the null-space decoder) are dense n x n: refused up front when too large
        check_memory(f"crc with n={n} (dense n x n matrices)", 4 * 8.0 * n * n)
        rng = as_generator(seed)
        B = cyclic_repetition_matrix(n, s, rng)
        B.flags.writeable = False
        self.B = B
        placement = [tuple((i + np.arange(s + 1)) % n) for i in range(n)]
        super().__init__(
            n=n,
            placement=placement,
            encoders=_single_message_encoders(B, placement),
            k=n,
            tolerance=s,
            params={"n": n, "s": s, "seed": seed if not isinstance(seed, np.random.Generator) else None},
        )
        self._solver: NullspaceSolver | None = None

    def _fast_solve(self, pattern):
        if self._solver is None:
            self._solver = NullspaceSolver(self.B, self.n - self.tolerance)
        received = np.fromiter((w for w, _ in pattern), dtype=np.intp, count=len(pattern))
        a, cond = self._solver.solve(received, self.max_condition)
        rows = tuple(zip(received.tolist(), itertools.repeat(0)))
        # one message a worker: its row among all encoder rows is the worker itself
        return Decoding(pattern, rows, a[None, :], cond, "crc-nullspace", row_ids=received)

    def decode_rule(self):
        return KOfN(self.n - self.tolerance)


@register("partial")
class Partial(SequentialCode):
    """Two-stage scheme for alpha-partial stragglers (Section 4, Fig. 4).

    The data is split into ``n`` coded partitions of one unit each and a naive part of
    ``q = (s+1)/(alpha-1)`` units per worker. Worker ``w`` first processes its own naive data and
    sends the plain sum of those partial gradients (message 0, never coded), then its ``s+1`` coded
    partitions and sends ``b_w g`` of the inner ``crc`` or ``frc`` code (message 1). A straggler at
    most ``alpha`` times slower still finishes its naive part when a fast worker finishes both, so
    the master needs message 0 from everyone and message 1 from ``n - s`` workers
    (``straggler_prefix = 1``): the naive sums and the inner code in sequence
    (:class:`~gradcode.codes.compose.SequentialCode`), which gives the decoder and the rule. Each worker computes a fraction
    ``(s+1) alpha / (n (s + alpha))`` of the data, e.g. 4/9 for n = 3, s = 1, alpha = 2.

    Rounding: when ``q`` is an integer each worker gets ``q`` naive partitions of one unit, exactly
    as in the paper (``n + n q`` equal partitions). Otherwise the *count* is rounded up to
    ``ceil(q)`` and those partitions are shrunk to ``q / ceil(q)`` units each, so the split between
    naive and coded data, and hence the load, stays exactly the paper's.
    """

    examples = (dict(n=4, s=1, alpha=2.0, inner="frc"), dict(n=3, s=1, alpha=2), dict(n=4, s=1, alpha=3, inner="frc"),
                dict(n=5, s=2, alpha=2.5, seed=2))

    summary = "two-stage scheme for alpha-partial stragglers (Tandon Sec. 4)"

    def __init__(self, n: int, s: int, alpha: float, inner: str = "crc", seed=0):
        n, s = check_n_s(n, s)
        alpha = check_real("alpha", alpha, minimum=1.0, strict_min=True)
        check_choice("inner", inner, ("crc", "frc"))
        inner_code = CRC(n, s, seed) if inner == "crc" else FRC(n, s)
        q = (s + 1) / (alpha - 1)
        q_count = round(q) if abs(q - round(q)) < 1e-9 else math.ceil(q)
        q_count = max(q_count, 1)
        unit = 1.0 / (n + n * q)
        sizes = [unit] * n + [unit * q / q_count] * (n * q_count)
        self.inner = inner_code
        self.naive_per_worker = q_count
        self._init_sequence(
            first=_NaiveSums(n, q_count),
            second=inner_code,
            partitions=(n + np.arange(n * q_count), np.arange(n)),  # coded partitions first
            partition_sizes=sizes,
            tolerance=s,
            straggler_prefix=1,
            params={"n": n, "s": s, "alpha": alpha, "inner": inner, "seed": seed},
        )


class _NaiveSums(Uncoded):
    """Worker ``w`` sends the plain sum of its own ``per_worker`` partitions (the naive part of the
    partial-straggler scheme); like :class:`Uncoded`, the master needs every worker."""

    def __init__(self, n: int, per_worker: int):
        placement = [tuple(range(w * per_worker, (w + 1) * per_worker)) for w in range(n)]
        LinearCode.__init__(self, n=n, placement=placement, encoders=[np.ones((1, per_worker, 1))] * n,
                            tolerance=0, params={"n": n, "per_worker": per_worker})


@register("matrix")
class MatrixCode(LinearCode):
    """Any single-message code given by its encoding matrix ``B`` (n x k, Section 2.2): worker ``i``
    stores ``supp(b_i)`` and sends ``b_i g``. ``s`` is the claimed tolerance; it is checked against
    the B-span condition (Condition 1) on every straggler set when ``n <= 16``, and found that way
    when omitted. Decoding is the generic least-squares solve, i.e. Algorithm 1 row by row."""

    examples = (dict(B=[[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1], [1, 0, 0, 1]], s=1),
                dict(B=[[0.5, 1, 0], [0, 1, -1], [0.5, 0, 1]]))

    summary = "any single-message code given by its matrix B (Tandon Sec. 2.2)"

    _EXHAUSTIVE_MAX_N = 16

    def __init__(self, B, s: int | None = None):
        B = np.array(B, dtype=np.float64)
        if B.ndim != 2 or 0 in B.shape:
            raise ValueError(f"B must be a non-empty 2-D matrix (workers x partitions), got shape {B.shape}")
        if not np.isfinite(B).all():
            raise ValueError("B must hold finite numbers")
        n, k = B.shape
        placement = [tuple(np.flatnonzero(row)) for row in B]
        if any(len(p) == 0 for p in placement):
            raise ValueError("every row of B (worker) must have at least one non-zero entry")
        if s is not None:
            s = check_int("s", s, minimum=0, maximum=n - 1)
        elif n > self._EXHAUSTIVE_MAX_N:
            raise ValueError(f"give the tolerance s for n > {self._EXHAUSTIVE_MAX_N} (n={n}): it is found by exhaustive search only for small n")
        B.flags.writeable = False
        self.B = B
        super().__init__(
            n=n,
            placement=placement,
            encoders=_single_message_encoders(B, placement),
            k=k,
            tolerance=0 if s is None else s,
            params={"n": n, "k": k, "s": s},
        )
        if n <= self._EXHAUSTIVE_MAX_N:
            found = self._exhaustive_tolerance()
            if s is None:
                self._tolerance = found
                self._params["s"] = found
            elif found < s:
                raise ValueError(f"B does not tolerate s={s} stragglers (Condition 1 fails); it tolerates {found}")

    def _exhaustive_tolerance(self) -> int:
        from itertools import combinations

        tol = -1
        for s in range(self.n):
            if all(
                self.can_decode({w: 1 for w in range(self.n) if w not in S})
                for S in combinations(range(self.n), s)
            ):
                tol = s
            else:
                break
        if tol < 0:
            raise ValueError("B cannot decode even with every worker: 1 is not in the row span of B")
        return tol
