"""Communication-computation efficient and adaptive gradient codes on the cyclic placement.

* ``cgc``: Ye & Abbe, *Communication-computation efficient gradient coding* (ICML 2018), as
  summarised in Kadhe, Koyluoglu, Ramchandran, *Communication-efficient gradient coding for
  straggler mitigation* (CommFR-GC paper), Appendix A, and in Cao et al., *Adaptive Gradient
  Coding* (AGC paper), Section II-B, eq. 8-9.
* ``agc``: Adaptive Gradient Coding, AGC paper Section V (eq. 16-30).
* ``g-agc`` / ``g-cgc``: the group versions of AGC paper Section VI (eq. 31-35, Remark 5).

Notation (AGC paper): ``n`` workers, ``k = n`` partitions, worker ``j`` stores the ``d``
partitions ``j, j+1, ..., j+d-1 (mod n)``; **d is the number of partitions per worker**, not the
gradient dimension (which the papers call ``w``). Each partial gradient is cut into ``L`` chunks,
``g_i = (g_i(0), ..., g_i(L-1))``, and the stacked vector ``g~`` of eq. 17 is ordered chunk-major:
coordinate ``v = c n + i`` is chunk ``c`` of partition ``i``.

The E·M construction (eq. 18-26)
--------------------------------
Both CGC and AGC send ``X_{j,r} = B^{(r)}_{j,:} g~`` in round ``r`` where ``B = E M``:

* ``E`` stacks per-round blocks ``E^{(r)}`` of shape ``n x (L + (r+1)(n-d))`` padded with zeros to
  ``L + R (n-d)`` columns (``R`` rounds; eq. 21). AGC uses ``R = L`` rounds with i.i.d. Gaussian
  blocks; CGC is the one-round case ``R = 1`` with ``L = m`` chunks and ``E^{(0)} = V^T`` for the
  ``(n-s) x n`` matrix ``V`` of Ye-Abbe (``n - s = m + n - d``).
* ``M = [M^U; M^D]``: ``M^U`` (eq. 23) has row ``c`` equal to the indicator of chunk ``c`` over all
  partitions, so the first ``L`` entries of ``M g~`` are the chunks of the full gradient. ``M^D``
  (``R(n-d)`` rows) is solved column by column (eq. 24-25) so that ``B`` vanishes where a worker
  does not store the partition: for partition ``i`` the workers not storing it are
  ``Q_i = {i+1, ..., i+n-d} (mod n)`` in every round, and ``E_{Q, [L:]} M^D_{:,v} = -E_{Q,[0:L]}
  M^U_{:,v}`` is block lower triangular (eq. 26), solved by forward substitution with the ``L``
  chunks of partition ``i`` as right-hand sides (one ``(n-d) x (n-d)`` solve per round and
  partition).

Decoding (eq. 27-29): the received rows ``E_F`` of ``E`` times ``M`` give the received signals;
since ``M`` has full row rank (with probability 1), coefficients ``A`` reproduce the gradient
(``A B_F = M^U``) iff ``A E_F = [I_L 0]``. The structured decoder solves that small system
(``rows x (L + (n-d) r)`` instead of ``rows x n L``) and returns the minimum-norm ``A``, which is
also the generic decoder's answer. With ``s`` stragglers it succeeds from the first
``r_s = ceil(L / (d - s))`` messages of every active worker (eq. 27), i.e. the communication cost
``r_s / L`` of eq. 30; with ``L = w`` this is Theorem 1's optimal vector ``c*`` (eq. 11).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from gradcode._validation import as_generator, check_choice, check_int
from gradcode.codes.base import LinearCode, register
from gradcode.codes.decoding import Decoding, Pattern
from gradcode.codes.compose import DirectSumCode
from gradcode.codes.linalg import min_norm_left_solve
from gradcode.errors import NotDecodableError

__all__ = [
    "AGC",
    "CGC",
    "GroupAGC",
    "GroupCGC",
    "cyclic_placement",
    "em_matrix_M",
    "group_bounds",
    "optimal_communication_vector",
]


def cyclic_placement(n: int, d: int) -> list[tuple[int, ...]]:
    """Worker ``j`` stores partitions ``j, ..., j+d-1 (mod n)`` (AGC paper Section V)."""
    return [tuple(int(i) for i in (j + np.arange(d)) % n) for j in range(n)]


def optimal_communication_vector(d: int, w: int) -> list[Fraction]:
    """Theorem 1, eq. 11: ``c*_s = ceil(w / (d - s)) / w`` for ``s = 0, ..., d - 1`` where
    ``d = floor(n mu)`` is the number of partitions a worker can store and ``w`` the gradient
    dimension. Exact fractions."""
    d = check_int("d", d, minimum=1)
    w = check_int("w", w, minimum=1)
    return [Fraction(math.ceil(w / (d - s)), w) for s in range(d)]


def em_matrix_M(n: int, d: int, L: int, E_blocks) -> np.ndarray:
    """``M = [M^U; M^D]`` of eq. 22-25 for the round blocks ``E^{(r)}`` (``n x (L + (r+1)(n-d))``).

    Column ``v = c n + i`` of ``M^D`` solves eq. 25; rows of ``E`` for the workers ``Q_i`` not
    storing partition ``i`` give the block lower-triangular system of eq. 26, solved here by
    forward substitution over rounds for all ``L`` chunks of partition ``i`` at once.
    Raises ``ValueError`` if a diagonal block is singular (a measure-zero event for random ``E``;
    for a structured ``E`` it means the construction does not apply)."""
    e = n - d
    R = len(E_blocks)
    M = np.zeros((L + R * e, n * L))
    for c in range(L):
        M[c, c * n : (c + 1) * n] = 1.0
    if e == 0:
        return M
    chunk_cols = n * np.arange(L)
    for i in range(n):
        Q = (i + 1 + np.arange(e)) % n
        xs = []
        for r, Er in enumerate(E_blocks):
            EQ = Er[Q]
            rhs = EQ[:, :L].copy()  # column c: E_{Q,[0:L]} M^U_{:, c n + i} = E_{Q, c}
            for rp, x in enumerate(xs):
                rhs += EQ[:, L + rp * e : L + (rp + 1) * e] @ x
            D = EQ[:, L + r * e : L + (r + 1) * e]
            try:
                x = -np.linalg.solve(D, rhs)
            except np.linalg.LinAlgError:
                raise ValueError(
                    f"the E block of round {r} restricted to the workers not storing partition {i}"
                    " is singular: this E does not give a valid code"
                ) from None
            if not np.isfinite(x).all():
                raise ValueError(f"M^D for partition {i}, round {r} is not finite: E is degenerate")
            xs.append(x)
            M[L + r * e : L + (r + 1) * e, chunk_cols + i] = x
    return M


def _em_encoders(n, L, E_blocks, M, placement) -> list[np.ndarray]:
    """``E_w[r, p, c] = B[r n + w, c n + placement[w][p]]`` with ``B^{(r)} = [E^{(r)} 0] M``; only
    the entries on the worker's own partitions are formed (the rest of ``B`` is zero by eq. 25)."""
    out = []
    chunk_cols = n * np.arange(L)
    for w in range(n):
        p = np.asarray(placement[w])
        cols = (p[:, None] + chunk_cols[None, :]).ravel()  # (partition p, chunk c) -> c n + p
        Ew = np.empty((len(E_blocks), len(p), L))
        for r, Er in enumerate(E_blocks):
            width = Er.shape[1]
            Ew[r] = (Er[w] @ M[:width, cols]).reshape(len(p), L)
        out.append(Ew)
    return out


class _EMCode(LinearCode):
    """Shared machinery of CGC and AGC: cyclic placement and ``B = E M`` (module docstring)."""

    def _build(self, *, n, d, L, E_blocks, tolerance, params):
        self.d = d
        self.L = L
        self.E_blocks = tuple(np.array(E, dtype=np.float64) for E in E_blocks)
        for E in self.E_blocks:
            E.flags.writeable = False
        self.M = em_matrix_M(n, d, L, self.E_blocks)
        self.M.flags.writeable = False
        placement = cyclic_placement(n, d)
        super().__init__(
            n=n,
            placement=placement,
            encoders=_em_encoders(n, L, self.E_blocks, self.M, placement),
            k=n,
            chunks=L,
            tolerance=tolerance,
            params=params,
        )

    def encoding_matrix(self) -> np.ndarray:
        """The full ``B = E M`` of eq. 18/20, ``(R n) x (n L)``, row ``r n + j`` = round ``r`` of
        worker ``j``, column ``c n + i`` = chunk ``c`` of partition ``i`` (for tests and display)."""
        n, L = self.n, self.L
        B = np.zeros((len(self.E_blocks) * n, n * L))
        for r, Er in enumerate(self.E_blocks):
            B[r * n : (r + 1) * n] = Er @ self.M[: Er.shape[1]]
        return B

    def _fast_solve(self, pattern: Pattern) -> Decoding:
        """Decode from ``E_F`` (eq. 28-29): ``A`` with ``A E_F = [I_L 0]``, of minimum norm.

        When more messages arrived than unknowns (every worker's ``L`` messages, say), the
        solutions form a family, and the plain minimum-norm one spreads weight over AGC's later
        rounds, whose rows of ``B`` are orders of magnitude larger (``M^D`` comes from
        ill-conditioned solves): at n = 20, d = 3, L = 6 it amplified the messages' rounding 8e6x
        with every message in, against 4e2x from the first two rounds alone. So the solve is also
        done weighted, minimising ``||A D||`` with ``D`` the received encoder rows' sizes
        ``||B_F[i]||_1`` (the 2-norm form of the amplification that
        :meth:`~gradcode.codes.base.LinearCode._check_answer` measures), and kept when its
        amplification is clearly smaller (:meth:`_better`)."""
        L = self.L
        rows = tuple((w, r) for w, rw in pattern for r in range(rw))
        width = max(self.E_blocks[rw - 1].shape[1] for _, rw in pattern)
        Erows = np.zeros((len(rows), width))
        i = 0
        for w, rw in pattern:
            for r in range(rw):
                Er = self.E_blocks[r]
                Erows[i, : Er.shape[1]] = Er[w]
                i += 1
        T = np.zeros((L, width))
        T[:, :L] = np.eye(L)
        try:
            A, cond = min_norm_left_solve(Erows, T, self.max_condition)
        except NotDecodableError as exc:
            plain, refusal = None, exc
        else:
            plain = Decoding(pattern, rows, A, cond, "em-structured")
        if len(rows) > width:
            weighted = self._weighted_solve(pattern, rows, Erows, T)
            if weighted is not None and (plain is None or self._better(weighted, plain)):
                return weighted
        if plain is None:
            got = ", ".join(f"{w}:{r}" for w, r in pattern)
            raise NotDecodableError(f"{type(self).__name__}: messages {{{got}}} do not suffice: {refusal}") from None
        return plain

    def _weighted_solve(self, pattern, rows, Erows, T) -> Decoding | None:
        """The minimiser of ``||A D||`` (:meth:`_fast_solve`), or None if that solve fails or would
        change little: with row sizes within 8x of each other the plain answer's ``||A D||`` is within
        8x of the weighted one's (``||A D|| <= max D ||A||`` and the plain ``||A||`` is least), so
        the second solve is skipped (CGC's single round, AGC's first rounds: a fresh pattern's
        decode stays one solve)."""
        _, row_start, row_l1, _, _ = self._sparse_rows()  # ||B[r n + w]||_1 of every encoder row
        size = np.maximum(row_l1[[row_start[w] + r for w, r in rows]], np.finfo(float).tiny)
        if size.max() <= 8.0 * size.min():
            return None
        try:  # no condition guard: the answer is checked against B_F before it is used
            A, cond = min_norm_left_solve(Erows / size[:, None], T, np.inf)
        except NotDecodableError:
            return None
        return Decoding(pattern, rows, A / size[None, :], cond, "em-structured, weighted")

    def _better(self, a: Decoding, b: Decoding) -> bool:
        """Whether ``a`` amplifies rounding at least 1 % less than ``b`` (the plain minimum-norm
        answer, eq. 29, stays unless weighting really matters). Only the amplifications are
        compared here; the answer kept is checked once, by :meth:`_trusted_solve`, whose fallback
        (the generic solve) gives the plain answer again should the weighted one fail its check."""
        return self._amplification(a) < 0.99 * self._amplification(b)


@register("cgc")
class CGC(_EMCode):
    """Ye-Abbe communication-computation efficient gradient code (CommFR-GC paper App. A).

    Cyclic placement of ``d`` partitions per worker, gradient cut into ``m`` chunks, one message of
    length ``ceil(w/m)`` per worker, tolerating ``s = d - m`` stragglers (the trade-off
    ``d/n >= (s + m)/n`` of CommFR eq. 1 met with equality). Encoding ``G = B V`` with
    ``V`` the ``(n-s) x n`` matrix whose every ``(n-s)``-column submatrix is invertible: in the
    E·M form of the module docstring, ``E^{(0)} = V^T`` and ``B^T = M``.

    ``construction="vandermonde"``: ``V[p, j] = alpha_j^p`` on Chebyshev nodes
    ``alpha_j = cos((2j+1) pi / (2 n'))`` with ``n' = n`` (``n + 1`` for odd ``n``, dropping the node
    at 0, since the ``M^D`` solve needs non-zero nodes). Exact in theory, but real Vandermonde
    systems are ill-conditioned: Ye and Abbe report instability beyond ``n ~ 25``; decoding refuses
    solves above ``max_condition``. ``construction="gaussian"``: ``V`` i.i.d. ``N(0, 1)`` (seeded).
    """

    examples = (dict(n=4, d=2, m=2), dict(n=5, d=3, m=2), dict(n=6, d=4, m=1, construction="gaussian", seed=1),
                dict(n=4, d=4, m=2))

    summary = "Ye-Abbe CGC: cyclic placement, m-fold shorter messages, tolerates d-m stragglers"

    def __init__(self, n: int, d: int, m: int, construction: str = "vandermonde", seed=0):
        n = check_int("n", n, minimum=1)
        d = check_int("d", d, minimum=1)
        if d > n:
            raise ValueError(f"d (partitions per worker) must be <= n; got d={d}, n={n}")
        m = check_int("m", m, minimum=1)
        if m > d:
            raise ValueError(
                f"cgc needs d >= s + m with s = d - m >= 0 stragglers, i.e. m <= d; got d={d}, m={m}"
            )
        check_choice("construction", construction, ("vandermonde", "gaussian"))
        s = d - m
        width = n - s  # = m + (n - d)
        if construction == "vandermonde":
            count = n if n % 2 == 0 else n + 1
            nodes = np.cos((2 * np.arange(count) + 1) * np.pi / (2 * count))
            nodes = nodes[np.abs(nodes) > 1e-12][:n]
            E0 = nodes[:, None] ** np.arange(width)[None, :]
        else:
            E0 = as_generator(seed).standard_normal((n, width))
        self.s = s
        self.m = m
        self._build(
            n=n,
            d=d,
            L=m,
            E_blocks=[E0],
            tolerance=s,
            params={
                "n": n,
                "d": d,
                "m": m,
                "construction": construction,
                "seed": None if construction == "vandermonde" or isinstance(seed, np.random.Generator) else seed,
            },
        )

    @property
    def V(self) -> np.ndarray:
        """The ``(n - s) x n`` matrix ``V`` of Ye-Abbe (``G = B V``)."""
        return self.E_blocks[0].T


@register("agc")
class AGC(_EMCode):
    """Adaptive Gradient Coding (AGC paper Section V): ``B = E M`` with ``L`` rounds of random
    lower block-triangular ``E`` (eq. 21) and ``M^D`` solved column by column (eq. 25); each worker
    sends up to ``L`` messages of length ``ceil(w/L)`` in order, and the master decodes with ``s``
    stragglers after ``r_s = ceil(L/(d - s))`` messages from each of the ``n - s`` active workers
    (eq. 27): communication cost ``r_s / L`` (eq. 30), Theorem 1's ``c*`` for ``L = w``.

    ``d`` is the number of partitions per worker (``floor(n mu)``), ``1 <= d <= n``; ``L >= 1``.
    Tolerates ``d - 1`` stragglers (with all ``L`` messages of the others).
    """

    examples = (dict(n=4, d=2, L=2), dict(n=3, d=2, L=2), dict(n=5, d=4, L=3, seed=1), dict(n=5, d=3, L=2, seed=2),
                dict(n=4, d=4, L=2))

    summary = "adaptive gradient coding: up to L messages, cost ceil(L/(d-s))/L with s stragglers"

    def __init__(self, n: int, d: int, L: int, seed=0):
        n, d, L = _check_ndL(n, d, L)
        rng = as_generator(seed)
        e = n - d
        E_blocks = [rng.standard_normal((n, L + (r + 1) * e)) for r in range(L)]
        seed_param = None if isinstance(seed, np.random.Generator) else seed
        self._build(n=n, d=d, L=L, E_blocks=E_blocks, tolerance=d - 1,
                    params={"n": n, "d": d, "L": L, "seed": seed_param})

    @classmethod
    def from_matrix(cls, n: int, d: int, L: int, E) -> AGC:
        """AGC with a given ``E`` of shape ``(n L) x ((n - d + 1) L)`` (eq. 21; e.g. AGC Example 3).
        Entries that eq. 21 requires to be zero must be zero."""
        n, d, L = _check_ndL(n, d, L)
        E = np.asarray(E, dtype=np.float64)
        e = n - d
        if E.shape != (n * L, (e + 1) * L):
            raise ValueError(f"E must have shape ({n * L}, {(e + 1) * L}) for n={n}, d={d}, L={L}; got {E.shape}")
        blocks = []
        for r in range(L):
            width = L + (r + 1) * e
            Er = E[r * n : (r + 1) * n]
            if np.any(Er[:, width:] != 0):
                raise ValueError(f"rows {r * n}..{(r + 1) * n - 1} of E must be zero beyond column {width} (eq. 21)")
            blocks.append(Er[:, :width])
        obj = cls.__new__(cls)
        obj._build(n=n, d=d, L=L, E_blocks=blocks, tolerance=d - 1,
                   params={"n": n, "d": d, "L": L, "seed": None})
        return obj

    def rounds_needed(self, s: int) -> int | None:
        """``r_s = ceil(L / (d - s))`` (eq. 27): messages each active worker sends with ``s``
        stragglers; ``None`` for ``s >= d``."""
        s = check_int("s", s, minimum=0, maximum=self.n)
        return math.ceil(self.L / (self.d - s)) if s < self.d else None

    def comm_cost(self, s: int) -> float | None:
        """``r_s / L`` (eq. 30 without the padding of ``ceil(w/L)``); ``None`` for ``s >= d``."""
        r = self.rounds_needed(s)
        return None if r is None else r / self.L

    def straggling(self, counts) -> np.ndarray:
        """Stragglers of a round the master stopped once it could decode (eq. 27): the smallest
        ``s`` in ``0..d-1`` such that at least ``n - s`` workers hold ``>= r_s`` messages; the
        workers holding fewer than ``r_s`` are the stragglers. With a random ``E`` the master can
        also decode from a *mixed* pattern that fits no ``s`` (e.g. counts ``(3, 0, 3, 3, 0, 1)``
        for ``n=6, d=4, L=4``: some workers' extra messages make up for another's missing ones);
        the decoder then uses every message held, so only the workers that delivered nothing are
        stragglers (the whole-result rule would mark all six). Vectorized over rounds
        (``counts`` ``(n,)`` or ``(rounds, n)``)."""
        counts = self._check_counts(counts)
        c = counts.reshape(-1, self.n)
        need = np.ones(c.shape[0], dtype=np.intp)  # no s fits: stragglers delivered nothing
        for s in range(self.d - 1, -1, -1):  # smallest fitting s wins: overwrite from the top
            r = self.rounds_needed(s)
            fits = (c >= r).sum(axis=1) >= self.n - s
            need[fits] = r
        return (c < need[:, None]).reshape(counts.shape)


def _check_ndL(n, d, L):
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=1)
    if d > n:
        raise ValueError(f"d (partitions per worker) must be <= n; got d={d}, n={n}")
    L = check_int("L", L, minimum=1)
    return n, d, L


def group_bounds(n: int, d: int) -> list[tuple[int, int]]:
    """The worker (and partition) groups of eq. 31: ``floor(n/d) - 1`` groups ``[j d, (j+1) d)``
    and a last group ``[(floor(n/d) - 1) d, n)`` of ``d`` to ``2d - 1`` workers."""
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=1, maximum=n)
    count = n // d
    starts = [j * d for j in range(count)]
    return [(a, b) for a, b in zip(starts, starts[1:] + [n])]


class _Grouped(DirectSumCode):
    """Group scheme of AGC paper Section VI: worker group ``j`` (eq. 31) stores and computes only the
    partitions of the same index range, running its own subsystem code; the master decodes each
    group's partial gradient (eq. 32) and adds them (eq. 34): the direct sum of the subsystems
    (:class:`~gradcode.codes.compose.DirectSumCode`), with each group's straggler rule.

    Groups of the same size run one subsystem code, one object (``parts[j]``; ``subcodes`` holds
    one per size): eq. 31's groups are copies of one ``(n_j, d, w)`` system on their own workers
    and partitions, and any generic draw of it serves every group. Sharing it lets the decoder
    solve and check a group-local straggler pattern once for all the groups showing it: a fresh
    pattern at n = 1000, d = 4 is a few 4-worker solves, not 250. (Before, every group drew its
    own ``E``; a seed now gives group 0's draw to every group of its size.)"""

    part_label = "group"

    def _build_groups(self, n, d, make_sub, tolerance, params):
        """``make_sub(size)`` builds the subsystem of a group of ``size`` workers; it is called once
        per distinct size, in group order (so group 0's subsystem is the first draw)."""
        self.d = d
        self.groups = tuple(group_bounds(n, d))
        by_size: dict[int, LinearCode] = {}
        for a, b in self.groups:
            if b - a not in by_size:
                by_size[b - a] = make_sub(b - a)
        subs = tuple(by_size[b - a] for a, b in self.groups)
        ranges = [np.arange(a, b) for a, b in self.groups]
        self._init_parts(parts=subs, workers=ranges, partitions=ranges, n=n, k=n,
                         chunks=subs[0].chunks, tolerance=tolerance, params=params)

    def group_comm_cost(self, stragglers) -> float | None:
        """Communication cost with ``stragglers[j]`` stragglers in group ``j`` (eq. 33): the largest
        of the groups' costs; ``None`` if some group cannot decode."""
        stragglers = list(stragglers)
        if len(stragglers) != len(self.groups):
            raise ValueError(f"stragglers must give one count per group ({len(self.groups)}), got {len(stragglers)}")
        costs = []
        for j, (s, sub) in enumerate(zip(stragglers, self.parts)):
            s = check_int(f"stragglers[{j}]", s, minimum=0, maximum=sub.n)
            costs.append(sub.comm_cost(s))
        return None if any(c is None for c in costs) else max(costs)

    def comm_cost(self, s: int) -> float | None:
        """Worst case over where ``s`` stragglers fall: all in one group (eq. 33 with
        ``max_j s_j = s``)."""
        s = check_int("s", s, minimum=0, maximum=self.n)
        costs = [sub.comm_cost(s) if s <= sub.n else None for sub in self.parts]
        return None if any(c is None for c in costs) else max(costs)


@register("g-agc")
class GroupAGC(_Grouped):
    """Group AGC (AGC paper Section VI): the groups of eq. 31, each an ``AGC(n_j, d, L)`` subsystem
    (``(d, 1, w)`` systems and a last ``(n - md, d/(n - md), w)`` one). Tolerates any ``d - 1``
    stragglers, and more when they spread: any ``s_j <= d - 1`` per group (Theorem 3), at cost
    ``ceil(L/(d - max_j s_j))/L`` (eq. 33, :meth:`group_comm_cost`)."""

    examples = (dict(n=4, d=2, L=2), dict(n=7, d=2, L=2), dict(n=8, d=3, L=2, seed=1))

    summary = "group AGC: floor(n/d) AGC subsystems (eq. 31), decoded per group"

    def __init__(self, n: int, d: int, L: int, seed=0):
        n, d, L = _check_ndL(n, d, L)
        rng = as_generator(seed)
        self.L = L
        self._build_groups(
            n, d, lambda size: AGC(size, d, L, rng), d - 1,
            {"n": n, "d": d, "L": L, "seed": None if isinstance(seed, np.random.Generator) else seed},
        )


@register("g-cgc")
class GroupCGC(_Grouped):
    """Group CGC (AGC paper Remark 5): the groups of eq. 31, each a ``CGC(n_j, d, m)`` subsystem
    with a seeded Gaussian ``V`` (``construction="gaussian"``, so ``seed`` matters); works for every
    ``d <= n`` (no ``d | n`` needed). Tolerates any ``d - m`` stragglers and up to ``d - m`` per
    group."""

    examples = (dict(n=4, d=2, m=2), dict(n=7, d=3, m=2), dict(n=9, d=4, m=2, seed=1))

    summary = "group CGC: floor(n/d) Ye-Abbe subsystems (eq. 31), decoded per group"

    def __init__(self, n: int, d: int, m: int, seed=0):
        n = check_int("n", n, minimum=1)
        d = check_int("d", d, minimum=1)
        if d > n:
            raise ValueError(f"d (partitions per worker) must be <= n; got d={d}, n={n}")
        m = check_int("m", m, minimum=1)
        if m > d:
            raise ValueError(f"g-cgc needs d >= s + m with s = d - m >= 0, i.e. m <= d; got d={d}, m={m}")
        self.m = m
        rng = as_generator(seed)
        self._build_groups(
            n, d, lambda size: CGC(size, d, m, "gaussian", rng), d - m,
            {"n": n, "d": d, "m": m, "seed": None if isinstance(seed, np.random.Generator) else seed},
        )
