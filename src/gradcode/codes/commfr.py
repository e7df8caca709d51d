"""CommFR-GC: Kadhe, Koyluoglu, Ramchandran, *Communication-Efficient Gradient Coding for Straggler
Mitigation in Distributed Learning* (ISIT 2020), Section III, with the decoders of Section IV.

Framework (Section III-A). Given ``N | n`` and ``n | k N``, let ``l = k N / n`` and ``p = n / N``.
The workers form ``p`` groups of ``N``; every worker of group ``i`` stores the same ``l``
partitions ``i l, ..., (i+1) l - 1`` (fractional-repetition placement) and sums their partial
gradients into ``g^(i)`` (eq. 2). With a generator ``G`` (``K x N``) of an ``[N, K, delta]`` linear
code, the ``j``-th worker of group ``i`` pads ``g^(i)`` to ``K ceil(d/K)``, arranges it as the
``ceil(d/K) x K`` matrix whose column ``c`` is chunk ``c`` (eq. 4), and sends ``g_mat G_j``
(eq. 3), a message of length ``ceil(d/K)``. In the library's contract (``codes.base``) that is one
message with ``chunks = K`` and encoder ``E_w[0, p, c] = G[c, j]`` for each stored partition
``p``. The master decodes every group from its received columns ``G_T`` (eq. 5) and adds the
groups. Theorem 1: the code achieves the triple ``(l = kN/n, m = K, s = delta - 1)``; MDS codes
(``delta = N - K + 1``) meet the bound ``l/k >= (s + m)/n`` of eq. 1 (Corollary 1).

Worker numbering: worker ``w`` is member ``j = w // p`` of group ``i = w mod p``. This is the
stacking of replicas used by Tandon et al.'s fractional repetition code (``frc``), so
``construction="repetition"`` (``[N, 1, N]``, Remark 1) *is* ``frc(n, s = N - 1)``: same
placement, encoders and decodings. (The paper's Fig. 1 numbers the groups contiguously; only the
labels differ.)

Constructions and their group decoders (``_fast_solve``; every one agrees with the generic
least-squares decoder where both decode, see tests):

* ``mds-gaussian``: ``G`` i.i.d. ``N(0, 1)`` (MDS with probability 1, Section IV-B); decode by the
  minimum-norm solve of eq. 5 on the ``K x t`` matrix ``G_T`` (condition ``cond(G_T)``).
* ``mds-systematic``: ``G = [I_K | P]`` with ``P`` i.i.d. ``N(0, 1)`` (every square submatrix of a
  Gaussian ``P`` is invertible with probability 1, so ``G`` is MDS). Proposition 1: received
  systematic columns are chunks; the ``e <= min(K, N - K)`` missing ones come from the received
  parity columns by a small ``|J| x e`` solve (the paper's ``e x e`` inverse, better conditioned).
* ``repetition``: ``K = 1``, ``G = 1``: the first received worker of each group, coefficient 1.
* ``ldpc``: ``G`` the systematic generator of a random ``(dc, dv)``-regular binary parity-check
  matrix ``H`` (``N - K = N dv / dc`` checks, row weight ``dc``, column weight ``dv``;
  configuration-model ensemble without multi-edges, full rank over the reals), kept sparse and
  encoded by a greedy triangulation (:mod:`gradcode.codes.ldpc`, ``parity_check`` is the sparse
  ``H``, ``ldpc`` the :class:`~gradcode.codes.ldpc.SparseLDPC`). Decoding is the peeling decoder
  of Proposition 2 in ``O(edges)`` steps: a check with one erased coordinate recovers it; it stops when
  the ``K`` information coordinates are known and *reports failure* (``NotDecodableError``) on a
  stopping set, even where the generic solve would succeed. The paper's "ensemble C(3,6)" with
  threshold 0.4294 (Remark 3) is the rate-1/2 ensemble with column weight 3 and row weight 6, i.e.
  ``dc = 6``, ``dv = 3`` here (the defaults); :func:`ldpc_threshold` computes ``p*``.
  Large LDPC codes (Remark 3's scale: ``N = 10,000``) are *operator codes*
  (:class:`~gradcode.codes.base.LazyEncoders`): with ``dense=False``, the default once ``K N``
  exceeds :data:`DENSE_GENERATOR_MAX`, the dense generator is never formed, a worker's column
  ``G_j`` is computed when its encoder is asked for (:meth:`SparseLDPC.generator_columns
  <gradcode.codes.ldpc.SparseLDPC.generator_columns>`, ``O(edges + g K)``), and a decode peels the
  received messages themselves (``O(edges m)``) with the peeling's error bound, instead of forming
  and checking the ``K x t`` coefficients (``O(K^2 t)``: 1.7e11 flops at ``N = 10,000``).
* ``custom``: any ``K x N`` generator of rank ``K`` passed as ``generator``; decoded like
  ``mds-gaussian``.

``tolerance`` is the straggler count the code's own decoder tolerates in the worst case
(``delta - 1`` of Theorem 1; for LDPC peeling, the smallest stopping set through an information
coordinate minus one). It is certified by checking every erasure set of increasing size within a
budget; where the budget runs out, MDS constructions use the theory (``N - K``) and the others keep
the largest fully checked size, a certified lower bound (``tolerance_certified`` says which).
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from scipy import linalg as sla

from gradcode._validation import as_generator, check_choice, check_int
from gradcode.codes.base import LazyEncoders, LinearCode, register
from gradcode.codes.decoding import Decoding, NonFiniteMessageError, Pattern, items, unpack
from gradcode.codes.precision import UNDERFLOW, UNIT_ROUNDOFF, Decoded, ImpreciseDecodeError
from gradcode.codes.compose import DirectSumCode
from gradcode.codes.ldpc import SparseLDPC
from gradcode.codes.linalg import min_norm_left_solve
from gradcode.codes.rules import KOfN
from gradcode.errors import NotDecodableError

__all__ = ["CommFR", "ldpc_threshold", "regular_ldpc_parity_check", "systematic_generator"]

_EPS = float(np.finfo(np.float64).eps)

CONSTRUCTIONS = ("mds-gaussian", "mds-systematic", "repetition", "ldpc", "custom")
#: group erasure sets checked when certifying the tolerance at construction
CERTIFY_BUDGET = 3000
#: an LDPC construction's generator is formed densely up to this many entries ``K N`` (32 MB);
#: beyond, the code is an operator code (module docstring)
DENSE_GENERATOR_MAX = 1 << 22



def ldpc_threshold(dc: int, dv: int) -> float:
    """BEC peeling threshold ``p*`` of the ``(dc, dv)``-regular ensemble (Section IV-A): the
    largest ``eps`` with ``eps (1 - (1 - x)^(dc-1))^(dv-1) < x`` for all ``x in (0, 1]``, i.e.
    ``min_x x / (1 - (1 - x)^(dc-1))^(dv-1)``. ``ldpc_threshold(6, 3) = 0.4294`` (Remark 3)."""
    dc = check_int("dc", dc, minimum=2)
    dv = check_int("dv", dv, minimum=2)

    def ratio(x):
        return x / (1.0 - (1.0 - x) ** (dc - 1)) ** (dv - 1)

    grid = np.linspace(1e-4, 1.0, 20001)
    x0 = grid[np.argmin(ratio(grid))]
    lo, hi = max(1e-6, x0 - 1e-3), min(1.0, x0 + 1e-3)
    from scipy.optimize import minimize_scalar  # here: scipy.optimize costs every worker process ~0.2 s to import

    res = minimize_scalar(ratio, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
    return float(min(res.fun, ratio(x0), ratio(1.0)))


def regular_ldpc_parity_check(N: int, dc: int, dv: int, rng, tries: int = 50) -> np.ndarray:
    """A random ``(dc, dv)``-regular binary parity-check matrix ``H`` (``N dv / dc x N``, dense):
    the configuration model without repeated edges, redrawn until ``H`` has full row rank over the
    reals (:meth:`gradcode.codes.ldpc.SparseLDPC.random`, whose sparse ``H`` the ``ldpc``
    construction keeps)."""
    return SparseLDPC.random(N, dc, dv, rng, tries).H.toarray()


def systematic_generator(H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A generator ``G`` (``K x N``) of the null space of full-row-rank ``H``, systematic on an
    information set ``I``: ``G[:, I] = I_K``. The parity positions are the pivots of a
    column-pivoted QR of ``H`` (a well-conditioned ``H_P``); ``G[:, P] = (-H_P^{-1} H_I)^T``.
    Returns ``(G, I)``."""
    r, N = H.shape
    _, _, piv = sla.qr(H, pivoting=True, mode="economic")
    P = np.sort(piv[:r])
    info = np.sort(piv[r:])
    G = np.zeros((N - r, N))
    G[:, info] = np.eye(N - r)
    G[:, P] = (-np.linalg.solve(H[:, P], H[:, info])).T
    return G, info


@register("commfr")
class CommFR(DirectSumCode):
    """CommFR-GC (Kadhe et al., Section III): fractional-repetition groups of ``N`` workers, each
    worker sends its group's summed gradient, cut into ``K`` chunks, times its column of a ``K x N``
    generator (one message of length ``ceil(d/K)``); triple ``(l = kN/n, m = K, s = delta - 1)``.
    See the module docstring for the constructions (``mds-gaussian``, ``mds-systematic``,
    ``repetition``, ``ldpc`` with ``dc``/``dv``, or a user ``generator``)."""

    examples = (dict(n=4, k=2, N=2, K=1, construction="mds-gaussian"),
                dict(n=8, k=4, N=4, K=2, generator=[[1, 0, 1, 1], [0, 1, 1, 2]]),
                dict(n=6, k=6, N=3, K=2, construction="mds-systematic", seed=1),
                dict(n=6, k=4, N=3, K=1, construction="repetition"),
                dict(n=6, k=6, N=6, K=3, construction="mds-gaussian", seed=2),
                dict(n=12, k=6, N=12, K=6, construction="ldpc", dc=6, dv=3, seed=0))

    summary = "CommFR-GC: fractional repetition + any [N, K] linear code (MDS, systematic, LDPC)"
    #: the Prop. 2 peeling decoder's message when a group's erasures hold a stopping set
    STOPPED = "LDPC peeling stalls on a stopping set before it recovers every information coordinate"

    def __init__(
        self,
        n: int,
        k: int,
        N: int,
        K: int,
        construction: str | None = None,
        seed=0,
        generator=None,
        dc: int | None = None,
        dv: int | None = None,
        dense: bool | None = None,
    ):
        n = check_int("n", n, minimum=1)
        k = check_int("k", k, minimum=1)
        N = check_int("N", N, minimum=1)
        K = check_int("K", K, minimum=1)
        if n % N:
            raise ValueError(f"N (group size, code length) must divide n; got n={n}, N={N}")
        if (k * N) % n:
            raise ValueError(f"n must divide k N (l = kN/n partitions per worker); got n={n}, k={k}, N={N}")
        if K > N:
            raise ValueError(f"K (code dimension) must be <= N (code length); got K={K}, N={N}")
        if construction is None:
            construction = "mds-gaussian" if generator is None else "custom"
        check_choice("construction", construction, CONSTRUCTIONS)
        if (generator is None) == (construction == "custom"):
            raise ValueError(
                "pass generator= exactly when construction='custom' (or leave construction unset);"
                f" got construction={construction!r} with generator {'set' if generator is not None else 'unset'}"
            )
        if construction != "ldpc" and (dc is not None or dv is not None or dense is not None):
            raise ValueError(f"dc, dv and dense are parameters of construction='ldpc', not {construction!r}")
        if dense is not None and not isinstance(dense, (bool, np.bool_)):
            raise TypeError(f"dense must be True, False or None (dense up to DENSE_GENERATOR_MAX entries), got"
                            f" {dense!r}")
        self.p = n // N
        self.l = k * N // n
        self.N, self.K = N, K
        self.construction = construction
        #: an operator code: no dense generator, encoders built when asked, decodes peel the messages
        self.operator = construction == "ldpc" and not (K * N <= DENSE_GENERATOR_MAX if dense is None else dense)
        G, dc, dv = self._generator(construction, as_generator(seed), generator, dc, dv)
        if G is not None:
            G = np.asarray(G, dtype=np.float64)
            G.flags.writeable = False
        #: the ``K x N`` generator (None for an operator code: ``ldpc.generator()`` forms it)
        self.G = G
        self.info_positions.flags.writeable = False
        self.group = _CommFRGroup(self, G)
        params = {
            "n": n,
            "k": k,
            "N": N,
            "K": K,
            "construction": construction,
            "seed": None if construction in ("repetition", "custom") or isinstance(seed, np.random.Generator) else seed,
            "generator": None if generator is None else G.tolist(),
            "dc": dc if construction == "ldpc" else None,
            "dv": dv if construction == "ldpc" else None,
            "dense": (not self.operator) if construction == "ldpc" else None,
        }
        tolerance, self.tolerance_certified = self._certify_tolerance()
        # group i (workers i, i + p, ...) holds partitions i l .. (i + 1) l - 1: the same [N, K]
        # group code p times, one decoding cache for all groups
        self._init_parts(
            parts=(self.group,) * self.p,
            workers=[np.arange(i, n, self.p) for i in range(self.p)],
            partitions=[i * self.l + np.arange(self.l) for i in range(self.p)],
            n=n,
            k=k,
            chunks=K,
            tolerance=tolerance,
            params=params,
        )

    def _generator(self, construction: str, rng, generator, dc, dv) -> tuple[np.ndarray, int | None, int | None]:
        """``(G, dc, dv)``: the ``K x N`` generator of ``construction`` (Sec. IV's Gaussian MDS or
        systematic MDS, the repetition code, a ``(dc, dv)``-regular LDPC code, whose parity check
        and information positions are kept, or the caller's ``generator``, checked)."""
        N, K = self.N, self.K
        self.info_positions = np.arange(K)
        self.parity_check = None
        if construction == "mds-gaussian":
            return rng.standard_normal((K, N)), dc, dv
        if construction == "mds-systematic":
            return np.hstack([np.eye(K), rng.standard_normal((K, N - K))]), dc, dv
        if construction == "repetition":
            if K != 1:
                raise ValueError(f"the repetition code [N, 1, N] has K = 1; got K={K}")
            return np.ones((1, N)), dc, dv
        if construction == "ldpc":
            dc = 6 if dc is None else check_int("dc", dc, minimum=2)
            dv = 3 if dv is None else check_int("dv", dv, minimum=1)
            if dc > N or (N * dv) % dc or N - N * dv // dc != K:
                raise ValueError(
                    f"a ({dc}, {dv})-regular LDPC code of length N has N dv / dc checks, so N dv must be"
                    f" divisible by dc <= N and K = N (1 - dv/dc); got N={N}, K={K}, dc={dc}, dv={dv}"
                )
            self.ldpc = SparseLDPC.random(N, dc, dv, rng)
            self.info_positions = self.ldpc.info.copy()
            self.parity_check = self.ldpc.H
            if self.operator:
                self.ldpc.check_residuals  # noqa: B018 -- every decode's bound needs them: built with the code
                return None, dc, dv
            return self.ldpc.generator(), dc, dv
        G = np.array(generator, dtype=np.float64)
        if G.shape != (K, N) or not np.isfinite(G).all():
            raise ValueError(f"generator must be a finite ({K}, {N}) matrix (K x N); got shape {G.shape}")
        if np.linalg.matrix_rank(G) != K:
            raise ValueError(f"generator must have rank K={K}; got rank {np.linalg.matrix_rank(G)}")
        return G, dc, dv

    # ------------------------------------------------------------------ structure
    @property
    def triple(self) -> tuple[int, int, int]:
        """``(l, m, s)`` of Theorem 1: partitions per worker, communication saving, tolerance."""
        return (self.l, self.K, self.tolerance)

    def group_members(self, i: int) -> list[int]:
        """Workers of group ``i`` in generator-column order (member ``j`` sends ``g_mat G_j``)."""
        return self.part_workers[i].tolist()

    def __repr__(self) -> str:
        extra = f" dc={self._params['dc']} dv={self._params['dv']}" if self.construction == "ldpc" else ""
        return (f"<CommFR n={self.n} k={self.k} N={self.N} K={self.K}"
                f" construction={self.construction}{extra}>")

    def _group_solve(self, T: tuple[int, ...]):
        """Decode one group from its received generator columns ``T`` (sorted positions):
        returns ``(used positions, A (K x len(used)), condition)`` with chunk ``c`` of ``g^(i)`` =
        ``sum_u A[c, u] * message(used[u])``."""
        if not T:
            raise NotDecodableError("no worker of the group received")
        if len(T) < self.K:
            raise NotDecodableError(f"{len(T)} of {self.N} workers received; the [N={self.N}, K={self.K}] code needs >= {self.K}")
        if self.construction == "repetition":
            return ((T[0],), np.ones((1, 1)), 1.0)
        if self.construction == "mds-systematic":
            return self._systematic_solve(T)
        if self.construction == "ldpc":
            return self._peeling_solve(T)
        return self._lstsq_solve(T)

    def _lstsq_solve(self, T):
        A, cond = min_norm_left_solve(self.G[:, list(T)].T, np.eye(self.K), self.group.max_condition)
        return (T, A, cond)

    def _systematic_solve(self, T):
        """Proposition 1: chunk ``c`` is received directly from systematic worker ``c``; the ``e``
        missing chunks ``E`` come from the received parity positions ``J`` through
        ``P[E, J]^T x_E = y_J - P[S, J]^T x_S``, a ``|J| x e`` system (``e <= min(K, N - K)``,
        ``|J| <= N - K``). The paper inverts an ``e x e`` block (``|J| = e``); using every
        received parity column instead gives the same answer in exact arithmetic, at
        ``O(|J| e^2)`` cost, and is in practice much better conditioned than an arbitrary
        ``e x e`` choice (``benchmarks/bench_comm_codes.py``, n = 1000, [20, 10] code: worst
        per-group condition ~450 with the first ``e`` received parity columns)."""
        K = self.K
        S = [j for j in T if j < K]
        have = set(S)
        missing = [c for c in range(K) if c not in have]
        if not missing:
            return (tuple(S), np.eye(K), 1.0)
        J = [j for j in T if j >= K]
        W, cond = min_norm_left_solve(self.G[np.ix_(missing, J)].T, np.eye(len(missing)), self.group.max_condition)
        used = tuple(S) + tuple(J)
        A = np.zeros((K, len(used)))
        for u, c in enumerate(S):
            A[c, u] = 1.0
        A[np.ix_(missing, range(len(S), len(used)))] = W
        if S:
            A[np.ix_(missing, range(len(S)))] = -W @ self.G[np.ix_(S, J)].T
        return (used, A, cond)

    def _peeling_solve(self, T):
        """Peeling decoder (Proposition 2) on the erasure set ``[N] \\ T``: each information
        coordinate as a combination of the received messages (:meth:`SparseLDPC.decoding_matrix`)."""
        return (T, self.ldpc.decoding_matrix(T), 1.0)

    # ------------------------------------------------------------------ tolerance
    def _certify_tolerance(self) -> tuple[int, bool]:
        N, K = self.N, self.K
        if self.construction == "repetition":
            return N - 1, True
        upper = N - K
        if self.construction.startswith("mds") and sum(math.comb(N, s) for s in range(1, upper + 2)) > CERTIFY_BUDGET:
            return upper, False  # MDS with probability 1 (Theorem 1, Corollary 1)
        checked = 0
        for s in range(1, upper + 1):
            if checked + math.comb(N, s) > CERTIFY_BUDGET:
                return s - 1, False
            checked += math.comb(N, s)
            for S in itertools.combinations(range(N), s):
                T = tuple(j for j in range(N) if j not in S)
                if not self._group_decodable(T):
                    return s - 1, True
        return upper, True

    def _group_decodable(self, T: tuple[int, ...]) -> bool:
        """Whether the group decoder succeeds from positions ``T`` (index-only peeling for LDPC)."""
        if self.construction == "ldpc":
            return len(T) >= self.K and self.ldpc.decodable(T)
        return self.group.can_decode({j: 1 for j in T})

    # ------------------------------------------------------------------ operator code (large LDPC)
    def _received(self, pattern: Pattern) -> list[tuple[int, ...]]:
        """Each group's received generator positions (members with a message) in ``pattern``."""
        counts = np.zeros(self.n, dtype=np.intp)
        for w, r in pattern:
            counts[w] = r
        return [tuple(np.flatnonzero(counts[ws] > 0).tolist()) for ws in self.part_workers]

    def _why_not(self, pattern: Pattern) -> str | None:
        """Why ``pattern`` does not decode by peeling (the first group that stalls), or None."""
        if not pattern:
            return "no messages received"
        for i, T in enumerate(self._received(pattern)):
            if not self._group_decodable(T):
                few = len(T) < self.K
                return (f"group {i} ({len(T)} of its {self.N} workers received): "
                        + (f"the [N={self.N}, K={self.K}] code needs >= {self.K}" if few else self.STOPPED))
        return None

    def can_decode(self, received) -> bool:
        if not self.operator:
            return super().can_decode(received)
        return self._why_not(self.normalize_pattern(received)) is None

    def check_decodable(self, received) -> None:
        if not self.operator:
            return super().check_decodable(received)
        reason = self._why_not(self.normalize_pattern(received))
        if reason is not None:
            raise NotDecodableError(reason)

    def decode_report(self, messages, *, dim: int, precision=None, rtol: float | None = None, scales=None,
                      strict: bool | None = None) -> Decoded:
        """:meth:`LinearCode.decode_report`; an operator code peels the received messages of each
        group (Prop. 2) instead of applying coefficients, and bounds the result with the peeling's
        own first-order bound (:meth:`SparseLDPC.decode_report
        <gradcode.codes.ldpc.SparseLDPC.decode_report>`) fed with each message's error: its cast to
        the wire type (``u ||m_j||``) plus its worker's sum of ``nnz(G_j)`` terms (1 at an
        information position, ``K`` elsewhere: a parity column is dense through the gap) in
        ``u_c`` of ``S_j`` (:mod:`gradcode.codes.precision`), and the master's float64 sum of the
        groups. The result's ``decoding`` is None (there are no coefficients). Its acceptance has no
        plain-sum allowance (there is no plain sum to compare with): beyond ``rtol`` is refused."""
        if not self.operator:
            return super().decode_report(messages, dim=dim, precision=precision, rtol=rtol, scales=scales,
                                         strict=strict)
        d = check_int("dim", dim, minimum=1)
        m = self.message_length(d)
        values, factor, scale, dtypes = {}, {}, {}, set()
        for w, msgs in items(messages, "messages"):
            w = self.check_worker(w)
            rows, meta = unpack(w, msgs, m, d, self.chunks)
            if len(rows) > 1:
                raise ValueError(f"worker {w} sends at most 1 message, got {len(rows)}")
            if rows:
                values[w] = rows[0]
                dtypes.add(rows.dtype)
                if meta is not None:
                    scale[w], factor[w] = meta[0][0], meta[1][0]
        if scales is not None:
            for w, v in items(scales, "scales"):
                w = self.check_worker(w)
                v = np.asarray(v, dtype=np.float64).reshape(-1)
                if w in values and (v.size < 1 or not (np.isfinite(v[:1]) & (v[:1] >= 0)).all()):
                    raise ValueError(f"scales of worker {w} must be 1 finite number >= 0, one per message")
                if w not in scale and v.size:
                    scale[w] = float(v[0])
            missing = sorted(set(values) - set(scale))
            if missing:
                raise ValueError(f"scales must cover every worker whose messages are decoded; missing {missing}")
        prec, tol = self._precision(dtypes, precision, rtol)
        self.check_decodable({w: 1 for w in values})
        guaranteed = all(w in scale for w in values)
        if not guaranteed and (self.decode_strict if strict is None else strict):
            raise ImpreciseDecodeError(
                f"the peeling decode's error bound is an estimate, not a guarantee: workers"
                f" {sorted(set(values) - set(scale))} sent no scales (what their messages summed), so their own"
                " norms stood in; strict decoding refuses it. Send the scales or decode without strict",
                relative_bound=math.nan, precision=prec, rtol=tol)
        out = np.zeros(self.K * m)
        bound, sizes = 0.0, []
        for i in range(self.p):
            u_i, error, size = self._peel_group(i, values, factor, scale, prec, m)
            out += u_i.reshape(-1)
            bound += error
            sizes.append(size)
        bound += (self.p - 1) * _EPS * sum(sizes)  # the master's sum of the groups
        gradient = out[:d]
        size = float(np.linalg.norm(gradient))
        rel = bound / size if size > 0 else (0.0 if bound == 0 else math.inf)
        if not rel <= tol:
            raise ImpreciseDecodeError(
                f"the peeling decode's error bound is {rel:.1e} of the gradient (> rtol={tol:g}) for {prec} messages:"
                " its chains add up the received messages' rounding; more received workers (shorter chains) or a"
                " wider wire type decode it", relative_bound=rel, precision=prec, rtol=tol)
        return Decoded(gradient, bound, rel, float(np.linalg.norm(sizes)), math.nan, prec, None, tol, guaranteed)

    def _peel_group(self, i: int, values, factor, scale, prec: str, m: int) -> tuple[np.ndarray, float, float]:
        """Group ``i``'s ``g^(i)`` as ``(K, m)`` chunks peeled from its members' messages, the
        bound on its error and its size (:meth:`decode_report`)."""
        members = self.part_workers[i]
        T = [j for j, w in enumerate(members.tolist()) if w in values]
        got = np.empty((len(T), m))
        for r, j in enumerate(T):
            w = int(members[j])
            got[r] = np.asarray(values[w], dtype=np.float64) / factor.get(w, 1.0)
        finite = np.isfinite(got).all(axis=1)
        if not finite.all():
            bad = tuple(sorted(int(members[j]) for j, ok in zip(T, finite) if not ok))
            raise NonFiniteMessageError(f"messages from workers {list(bad)} hold non-finite values (NaN or infinity);"
                                        " treat them as stragglers and decode without them", bad)
        norms = np.linalg.norm(got, axis=1)
        sums = np.array([scale.get(int(members[j]), np.nan) for j in T])
        sums = np.where(np.isnan(sums), norms, sums)  # without a scale, the message's norm stands for it
        computed = "float32" if UNIT_ROUNDOFF[prec] > UNIT_ROUNDOFF["float32"] else prec
        root_m = math.sqrt(m)
        terms = np.where(np.isin(T, self.info_positions), 1.0, float(self.K))
        f = np.array([factor.get(int(members[j]), 1.0) for j in T])
        errors = ((terms + 1) * (UNIT_ROUNDOFF[computed] * sums + root_m * UNDERFLOW[computed])
                  + root_m * UNDERFLOW[prec] / f)
        u_i, rel = self.ldpc.decode_report(np.asarray(T, dtype=np.intp), got, precision=prec, errors=errors,
                                           check_errors=self.ldpc.check_residuals)
        size = float(np.linalg.norm(u_i))
        return u_i, rel * size, size


def _column_encoder(ldpc: SparseLDPC, L: int, j: int) -> np.ndarray:
    """Member ``j``'s encoder in an operator code: ``G_j`` for each of its ``L`` partitions."""
    return np.repeat(ldpc.generator_columns([j])[:, None, :], L, axis=1)


class _CommFRGroup(LinearCode):
    """One group of CommFR-GC: ``N`` workers storing the same ``l`` partitions, worker ``j``
    sending ``g_mat G_j`` (one message, ``K`` chunks). Decoded by the construction's group solve
    of the owning :class:`CommFR` (least squares on ``G_T``, Proposition 1, peeling); an operator
    code's group builds its encoders when asked and decides decodability by index-only peeling."""

    def __init__(self, owner: CommFR, G: np.ndarray | None):
        self._owner = owner
        L = owner.l
        if G is None:
            encoders = LazyEncoders((1,) * owner.N, functools.partial(_column_encoder, owner.ldpc, L))
        else:
            encoders = [np.repeat(G[:, j][None, None, :], L, axis=1) for j in range(owner.N)]
        super().__init__(
            n=owner.N,
            placement=[tuple(range(L))] * owner.N,
            encoders=encoders,
            k=L,
            chunks=owner.K,
            tolerance=0,
            params={"N": owner.N, "K": owner.K, "l": L},
        )

    def decode_rule(self):
        """Any ``K`` of the ``N`` workers for MDS constructions (1 for repetition); LDPC peeling
        depends on which positions are erased: the generic rule."""
        construction = self._owner.construction
        if construction.startswith("mds") or construction == "repetition":
            return KOfN(self._owner.K)
        return super().decode_rule()

    def can_decode(self, received) -> bool:
        if not self._owner.operator:
            return super().can_decode(received)
        return self._owner._group_decodable(tuple(j for j, _ in self.normalize_pattern(received)))

    def _fast_solve(self, pattern: Pattern) -> Decoding:
        used, A, cond = self._owner._group_solve(tuple(j for j, _ in pattern))
        return Decoding(pattern, tuple((int(j), 0) for j in used), A, cond, f"commfr-{self._owner.construction}")
