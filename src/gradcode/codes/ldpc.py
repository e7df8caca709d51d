"""Sparse LDPC codes over the reals for CommFR-GC at Remark 3's scale (Kadhe et al., Sec. IV-A,
Prop. 2): a ``(dc, dv)``-regular parity-check matrix ``H`` kept sparse, a systematic encoder that
never forms the dense generator, and the peeling decoder in ``O(edges)`` steps.

**H.** The configuration model: the ``N dv`` variable sockets are matched uniformly to the ``r =
N dv / dc`` checks' sockets, and a repeated edge is removed by swapping one of its sockets with a
random one until none is left (:func:`regular_parity_check`). Entries are 1; a codeword ``x`` (one
real vector per coordinate) satisfies ``sum_{v in c} x_v = 0`` for every check ``c``.

**Encoder** (greedy triangulation, in the spirit of Richardson and Urbanke's efficient encoding).
Peel with every variable unknown: a check with one unknown variable *determines* it (a pivot);
when no check has one, declare ``d - 1`` unknown variables of a check of least unknown degree
``d`` as information. Every variable ends either information or a pivot, and the pivots come in an
order in which each is the negated sum of variables known before it: a triangular system. The
``g`` checks that lost their last unknown variable without becoming a pivot (the *gap*) constrain
the information variables: their sums, with every pivot substituted (one backward pass over the
pivots, ``O(g edges)``), give ``C x_I = 0`` with ``C`` ``g x |I|``. A column-pivoted QR of ``C``
picks ``g`` information variables whose ``g x g`` block is invertible; they move to the parity
side and are solved from the rest. What is left of ``I`` (``K = N - r`` variables, as many as the
code's dimension when ``H`` has full rank, which this also proves) is the systematic information
set: ``encode`` sets ``x_I`` to the message, solves the ``g`` gap variables, then the pivots in
order, in ``O(edges m + g K m)`` for ``m``-long coordinates. A rank-deficient ``C`` (``H`` not of
full rank) is refused, and so is an encoder whose codewords miss ``H`` by more than
``MAX_RESIDUAL`` (``C``'s entries are integers that grow along the pivot chains, and the chains
round: the residual ``|H x| / |x|`` is ``SparseLDPC.residual``, about ``1e-11`` for the ``(6, 3)``
ensemble at ``N = 10,000`` and ``1e-8`` at ``30,000``); :meth:`SparseLDPC.random` then draws
again.

**A worker's column** (CommFR's operator code, where each worker encodes with its own
``G_j``). Row ``j`` of the encoder's map ``x = X u`` is ``X^T e_j``: the pivots' transpose moves a
pivot's weight onto its check's other variables (``O(edges)``), and the gap hands its own on
through ``R^T F^{-T}`` (``O(g^2 + g K)``), compiled in a fixed order so that a column is the same
bit for bit alone or in a batch (:meth:`SparseLDPC.generator_columns`). Those columns round, so
codewords encoded with them miss the checks a little: :attr:`SparseLDPC.check_residuals` measures
by how much, once for every check (every column computed: ``O(N (edges + g K))``, seconds at
``N = 10,000``), and a decode's bound adds it at each check it peels through.

**Peeling decoder** (Prop. 2). Given the received coordinates, a check with exactly one erased
variable recovers it as the negated sum of the others; recovered variables lower their checks'
counts, so each edge is visited a bounded number of times: ``O(edges)`` steps of ``m``-long sums.
It stops once every information coordinate is known, and reports a *stopping set* (no check with
one erased variable while some information coordinate is erased), where a least-squares decode
might still succeed.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit
from scipy import linalg as sla
from scipy import sparse

from gradcode._validation import as_generator, check_int
from gradcode.codes.precision import UNIT_ROUNDOFF, ImpreciseDecodeError, wire_precision
from gradcode.errors import GradcodeError, NotDecodableError

__all__ = ["SparseLDPC", "regular_parity_check"]

_EPS = float(np.finfo(np.float64).eps)


class _Refused(GradcodeError, ValueError):
    """A drawn H that cannot serve (rank-deficient, or an encoder that rounds too much):
    :meth:`SparseLDPC.random` draws again."""


def regular_parity_check(N: int, dc: int, dv: int, rng) -> sparse.csr_array:
    """A random ``(dc, dv)``-regular binary parity-check matrix (``N dv / dc x N``, CSR) from the
    configuration model without repeated edges (module docstring)."""
    rows = N * dv // dc
    chk = np.repeat(np.arange(rows), dc)
    var = rng.permutation(np.repeat(np.arange(N), dv))
    for _ in range(1000):
        key = chk * N + var
        order = np.argsort(key, kind="stable")
        dup = order[1:][key[order[1:]] == key[order[:-1]]]
        if dup.size == 0:
            H = sparse.csr_array((np.ones(chk.size), (chk, var)), shape=(rows, N))
            H.sort_indices()
            return H
        for a, b in zip(dup, rng.integers(0, var.size, size=dup.size)):
            var[a], var[b] = var[b], var[a]
    raise ValueError(f"could not draw a ({dc}, {dv})-regular parity-check matrix with N={N} without repeated"
                     " edges; use a larger N or smaller dc")


@njit(cache=True)
def _unknown_in(c, c_ptr, c_idx, known):
    """The first variable of check ``c`` not known yet (-1: none)."""
    for j in range(c_ptr[c], c_ptr[c + 1]):
        if not known[c_idx[j]]:
            return c_idx[j]
    return -1


@njit(cache=True)
def _learn(v, known, deg, v_ptr, v_idx, stack, top):
    """Variable ``v`` becomes known: its checks lose an unknown; those left with one are pushed.
    Returns the new stack top."""
    known[v] = True
    for j in range(v_ptr[v], v_ptr[v + 1]):
        c = v_idx[j]
        deg[c] -= 1
        if deg[c] == 1:
            stack[top] = c
            top += 1
    return top


@njit(cache=True)
def _triangulate(c_ptr, c_idx, v_ptr, v_idx, N):
    """The greedy triangulation (module docstring): ``(pivot_checks, pivot_vars, info, gap)``,
    the pivots in the order they are determined, the variables declared information, and the
    checks left without a pivot."""
    r = c_ptr.size - 1
    deg = np.empty(r, dtype=np.int64)  # unknown variables of each check
    stack = np.empty(r + 1, dtype=np.int64)  # a check is pushed once: when its unknowns fall to 1
    top = 0
    for c in range(r):
        deg[c] = c_ptr[c + 1] - c_ptr[c]
        if deg[c] == 1:
            stack[top] = c
            top += 1
    known = np.zeros(N, dtype=np.bool_)
    used = np.zeros(r, dtype=np.bool_)
    pivot_check = np.empty(r, dtype=np.int64)
    pivot_var = np.empty(r, dtype=np.int64)
    info = np.empty(N, dtype=np.int64)
    npiv = ninfo = nknown = 0
    while nknown < N:
        while top > 0:  # peel: a check with one unknown variable determines it
            top -= 1
            c = stack[top]
            if used[c] or deg[c] != 1:
                continue
            v = _unknown_in(c, c_ptr, c_idx, known)
            used[c] = True
            pivot_check[npiv], pivot_var[npiv] = c, v
            npiv += 1
            nknown += 1
            top = _learn(v, known, deg, v_ptr, v_idx, stack, top)
        if nknown >= N:
            break
        # stalled: declare d - 1 unknowns of an unused check of least unknown degree d >= 2 as
        # information (with none, any unknown variable: it is in no unused check)
        best, bestdeg = -1, 1 << 62
        for c in range(r):
            if not used[c] and 2 <= deg[c] < bestdeg:
                best, bestdeg = c, deg[c]
                if bestdeg == 2:
                    break
        left = bestdeg - 1 if best >= 0 else 1
        v = 0
        while left > 0:
            v = _unknown_in(best, c_ptr, c_idx, known) if best >= 0 else v
            while best < 0 and known[v]:
                v += 1
            info[ninfo] = v
            ninfo += 1
            nknown += 1
            left -= 1
            top = _learn(v, known, deg, v_ptr, v_idx, stack, top)
    gap = np.empty(r, dtype=np.int64)
    ngap = 0
    for c in range(r):
        if not used[c]:
            gap[ngap] = c
            ngap += 1
    return pivot_check[:npiv], pivot_var[:npiv], info[:ninfo], gap[:ngap]


@njit(cache=True)
def _adjoint_pivots(Y, c_ptr, c_idx, pivot_check, pivot_var):
    """The transpose of :func:`_solve_pivots` applied to the columns of ``Y`` (``(N, b)``, in
    place): backward over the pivots, a pivot's weight moves onto its check's other variables
    (each pivot is ``x_v = -sum_{u in c, u != v} x_u``, so its transpose is ``y_u -= y_v``, then
    ``y_v = 0``). What is left sits on the variables the pivots are solved from."""
    b = Y.shape[1]
    for p in range(pivot_var.size - 1, -1, -1):
        v, c = pivot_var[p], pivot_check[p]
        for j in range(c_ptr[c], c_ptr[c + 1]):
            u = c_idx[j]
            if u != v:
                for i in range(b):
                    Y[u, i] -= Y[v, i]
        for i in range(b):
            Y[v, i] = 0.0


@njit(cache=True, fastmath=True)
def _add_gap_part(out, yg, LT, piv, RT):
    """``out[i] += R^T F^{-T} yg[:, i]`` for each column ``i`` (``RT``: ``R^T``, C-ordered), ``F``
    given by its LU factors transposed (``LT``, C-ordered, of ``scipy.linalg.lu_factor``; the
    solve is LAPACK ``getrs`` with ``trans='T'``: ``U^T``, then ``L^T``, then the row interchanges
    in reverse). Column by column in a fixed order, so a column comes out bit for bit the same
    whatever batch it is computed in (BLAS blocks a product differently by its shape): what a
    worker computes alone is what :attr:`SparseLDPC.check_residuals` measured."""
    g, b = yg.shape
    K = RT.shape[0]
    W = np.empty((b, g))
    for i in range(b):
        w = W[i]
        for a in range(g):
            s = yg[a, i]
            for c in range(a):
                s -= LT[a, c] * w[c]
            w[a] = s / LT[a, a]
        for a in range(g - 1, -1, -1):
            s = w[a]
            for c in range(a + 1, g):
                s -= LT[a, c] * w[c]
            w[a] = s
        for a in range(g - 1, -1, -1):
            q = piv[a]
            if q != a:
                w[a], w[q] = w[q], w[a]
    # each coordinate is one dot product of length g in the compiled order, whatever the batch;
    # 16 columns at a time share each row of R^T while it is in cache
    for lo in range(0, b, 16):
        hi = min(b, lo + 16)
        for k in range(K):
            r = RT[k]
            for i in range(lo, hi):
                w = W[i]
                s = 0.0
                for a in range(g):
                    s += r[a] * w[a]
                out[i, k] += s


@njit(cache=True)
def _gap_rows(c_ptr, c_idx, pivot_check, pivot_var, gap, N):
    """``(g, N)``: each gap check's sum with every pivot variable substituted by the negated sum
    of its check's other variables (:func:`_adjoint_pivots` of the checks' rows): the weights it
    puts on the information variables."""
    g = gap.size
    Wt = np.zeros((N, g))
    for i in range(g):
        c = gap[i]
        for j in range(c_ptr[c], c_ptr[c + 1]):
            Wt[c_idx[j], i] += 1.0
    _adjoint_pivots(Wt, c_ptr, c_idx, pivot_check, pivot_var)
    return Wt.T.copy()


@njit(cache=True)
def _solve_pivots(x, c_ptr, c_idx, pivot_check, pivot_var):
    """Each pivot variable, in order, as the negated sum of its check's other variables (rows of
    ``x``, in place)."""
    m = x.shape[1]
    for p in range(pivot_var.size):
        v, c = pivot_var[p], pivot_check[p]
        for k in range(m):
            x[v, k] = 0.0
        for j in range(c_ptr[c], c_ptr[c + 1]):
            u = c_idx[j]
            if u != v:
                for k in range(m):
                    x[v, k] -= x[u, k]


@njit(cache=True)
def _peel(known_in, need, c_ptr, c_idx, v_ptr, v_idx):
    """The peeling schedule from the known variables ``known_in``: ``(checks, vars, complete)``,
    the checks used and the variables they recovered, in order, until every variable flagged in
    ``need`` is known (``complete``) or peeling stalls on a stopping set."""
    r = c_ptr.size - 1
    N = v_ptr.size - 1
    known = known_in.copy()
    missing = 0
    for v in range(N):
        if need[v] and not known[v]:
            missing += 1
    erased = np.zeros(r, dtype=np.int64)
    stack = np.empty(r + 1, dtype=np.int64)  # a check is pushed once: when its erased fall to 1
    top = 0
    for c in range(r):
        for j in range(c_ptr[c], c_ptr[c + 1]):
            if not known[c_idx[j]]:
                erased[c] += 1
        if erased[c] == 1:
            stack[top] = c
            top += 1
    checks = np.empty(N, dtype=np.int64)
    vars_ = np.empty(N, dtype=np.int64)
    steps = 0
    while top > 0 and missing > 0:
        top -= 1
        c = stack[top]
        if erased[c] != 1:
            continue
        v = _unknown_in(c, c_ptr, c_idx, known)
        checks[steps], vars_[steps] = c, v
        steps += 1
        if need[v]:
            missing -= 1
        top = _learn(v, known, erased, v_ptr, v_idx, stack, top)
    return checks[:steps], vars_[:steps], missing == 0


@njit(cache=True)
def _peel_bound(err, norms, missed, c_ptr, c_idx, checks, vars_, eps):
    """First-order bounds on each recovered coordinate's error (2-norm), in the schedule's order:
    the errors of the terms it sums, how far the values miss the check (``missed[c]``), plus the
    rounding of adding them (``(terms - 1) eps`` times their norms). ``err`` holds the received
    coordinates' own errors on entry."""
    for p in range(vars_.size):
        v, c = vars_[p], checks[p]
        e, size = missed[c], 0.0
        terms = c_ptr[c + 1] - c_ptr[c] - 1
        for j in range(c_ptr[c], c_ptr[c + 1]):
            u = c_idx[j]
            if u != v:
                e += err[u]
                size += norms[u]
        err[v] = e + max(terms - 1, 0) * eps * size


class SparseLDPC:
    """A binary LDPC code over the reals with sparse parity checks ``H`` (``r x N``): ``info``,
    the ``K = N - r`` positions of its systematic information set, in increasing order;
    :meth:`encode` (``O(edges m)``), :meth:`decode` and :meth:`decodable` (peeling, ``O(edges)``
    steps), :meth:`generator` (the dense ``K x N`` generator, for small codes). See the module
    docstring."""

    #: the largest relative residual ``max |H x| / max |x|`` of the encoder on a random message:
    #: beyond it the pivot chains and the gap's entries (integers that grow along the chains)
    #: round too much for the codewords to be trusted
    MAX_RESIDUAL = 1e-6
    #: the gap substitution's ``N x g`` work array is refused beyond this many bytes
    MAX_GAP_BYTES = 1 << 30

    def __init__(self, H):
        H = sparse.csr_array(H)
        if len(H.shape) != 2:
            raise ValueError(f"H must be a 2-D (checks x N) matrix, got shape {H.shape}")
        if np.iscomplexobj(H.data):
            raise ValueError("H must be real (a binary parity-check matrix)")
        H = H.astype(np.float64)
        H.sum_duplicates()  # a repeated (row, column) entry adds up, as scipy reads it
        H.eliminate_zeros()
        if H.nnz and not np.all(H.data == 1.0):
            raise ValueError("SparseLDPC takes a binary parity-check matrix (entries 0 or 1)")
        H.sort_indices()
        for a in (H.data, H.indices, H.indptr):
            a.flags.writeable = False
        self.H = H
        self.r, self.N = H.shape
        Hc = H.tocsc()
        Hc.sort_indices()
        self._c = (H.indptr.astype(np.int64), H.indices.astype(np.int64))
        self._v = (Hc.indptr.astype(np.int64), Hc.indices.astype(np.int64))
        pc, pv, info, gap = _triangulate(*self._c, *self._v, self.N)
        if gap.size * self.N * 8 > self.MAX_GAP_BYTES:
            raise ValueError(f"the triangulation left a gap of {gap.size} checks: substituting it needs a"
                             f" {self.N} x {gap.size} array ({gap.size * self.N * 8 / 1e9:.1f} GB, more than"
                             f" MAX_GAP_BYTES); use a smaller N")
        moved = np.zeros(0, dtype=np.intp)
        if gap.size:
            C = _gap_rows(*self._c, pc, pv, gap, self.N)[:, info]
            _, R, piv = sla.qr(C, mode="economic", pivoting=True)
            diag = np.abs(np.diag(R))
            # numpy's matrix_rank rule: singular values (here R's diagonal) below max(shape) eps of
            # the largest are zero
            if diag.size < gap.size or not diag[-1] > max(C.shape) * np.finfo(np.float64).eps * diag[0]:
                raise _Refused(f"H does not have full row rank over the reals (a {gap.size}-check gap of rank"
                               f" < {gap.size})")
            moved = np.sort(piv[: gap.size])
        keep = np.setdiff1d(np.arange(info.size), moved)
        order = np.argsort(info[keep])
        self.info = info[keep][order]
        self.K = self.info.size
        self._gap_vars = info[moved]
        self._pivots = (pc, pv)
        if gap.size:  # C_G x_G = -C_I x_I
            LU, piv = sla.lu_factor(C[:, moved])
            self._gap_lu = (LU, piv)
            self._gap_solve = (np.ascontiguousarray(LU.T), piv.astype(np.int64))  # what _add_gap_part takes
            self._gap_rhs = -C[:, keep][:, order]
            self._gap_rhs_t = np.ascontiguousarray(self._gap_rhs.T)
        self.gap = int(gap.size)
        self.info.flags.writeable = False
        probe = self.encode(np.random.default_rng(0).standard_normal((self.K, 1)))
        #: the encoder's relative residual ``max |H x| / max |x|`` on a random message
        self.residual = float(np.abs(H @ probe).max(initial=0.0) / max(np.abs(probe).max(initial=0.0), 1e-300))
        if not self.residual <= self.MAX_RESIDUAL:
            raise _Refused(f"the encoder's codewords miss H by {self.residual:.1e} of their size (> MAX_RESIDUAL ="
                           f" {self.MAX_RESIDUAL:g}): its pivot chains and gap ({self.gap} checks) round too much;"
                           " use a smaller N or another ensemble")

    @classmethod
    def random(cls, N: int, dc: int, dv: int, seed=0, tries: int = 50) -> "SparseLDPC":
        """A ``(dc, dv)``-regular code of length ``N`` from the configuration model, drawn again
        until ``H`` has full row rank (``K = N (1 - dv / dc)``)."""
        N = check_int("N", N, minimum=2)
        dc = check_int("dc", dc, minimum=2, maximum=N)
        dv = check_int("dv", dv, minimum=1)
        if (N * dv) % dc:
            raise ValueError(f"a ({dc}, {dv})-regular code of length N needs dc | N dv; got N={N}")
        rng = as_generator(seed)
        reason = ""
        for _ in range(tries):
            try:
                return cls(regular_parity_check(N, dc, dv, rng))
            except _Refused as exc:
                reason = str(exc)
        raise ValueError(f"could not draw a usable ({dc}, {dv})-regular code of length N={N} in {tries} tries;"
                         f" the last: {reason}")

    def encode(self, u) -> np.ndarray:
        """The codeword ``(N, m)`` whose information coordinates ``x[info]`` are the ``(K, m)``
        message ``u``: the gap's ``g x g`` solve, then every pivot in order (module docstring).
        The codeword misses ``H`` by about :attr:`residual` of its size (rounding along the pivot
        chains); a decode of it carries that inconsistency on top of its own bound."""
        u = np.asarray(u, dtype=np.float64)
        if u.ndim != 2 or u.shape[0] != self.K:
            raise ValueError(f"the message must be a (K={self.K}, m) array, got shape {u.shape}")
        if not np.isfinite(u).all():
            raise ValueError("the message must be finite")
        x = np.zeros((self.N, u.shape[1]))
        x[self.info] = u
        if self.gap:
            x[self._gap_vars] = sla.lu_solve(self._gap_lu, self._gap_rhs @ u)
        _solve_pivots(x, *self._c, *self._pivots)
        return x

    def generator(self) -> np.ndarray:
        """The dense systematic generator ``G`` (``K x N``, ``G[:, info] = I``): ``O(K N)`` memory."""
        return self.encode(np.eye(self.K)).T

    def generator_columns(self, positions) -> np.ndarray:
        """Columns ``positions`` of the generator, as ``(len(positions), K)`` rows (``G[:, j]``:
        what coordinate ``j`` of a codeword weighs each message coordinate with), without the
        dense ``G``: :meth:`encode` is ``x = X u``, and row ``j`` of ``X`` is ``X^T e_j``: the
        pivots' transpose (:func:`_adjoint_pivots`, ``O(edges)``) leaves weights on the
        information and gap variables, and the gap's ``x_G = F^{-1} R u`` hands its own on
        through ``R^T F^{-T}`` (``O(g^2 + g K)``)."""
        positions = np.asarray(positions, dtype=np.intp).reshape(-1)
        if positions.size and (positions.min() < 0 or positions.max() >= self.N):
            raise ValueError(f"positions must be in 0..{self.N - 1}")
        Y = np.zeros((self.N, positions.size))
        Y[positions, np.arange(positions.size)] = 1.0
        _adjoint_pivots(Y, *self._c, *self._pivots)
        out = Y[self.info].T.copy()
        if self.gap:
            _add_gap_part(out, Y[self._gap_vars], *self._gap_solve, self._gap_rhs_t)
        return out

    #: the largest block of check residuals built at once (bytes), :attr:`check_residuals`
    RESIDUAL_BLOCK_BYTES = 1 << 28

    @functools.cached_property
    def check_residuals(self) -> np.ndarray:
        """``(r,)``: for each check ``c``, ``||sum_{v in c} G~_v||_2`` over the columns
        :meth:`generator_columns` computes, plus the rounding of that sum (``gamma_{dc-1} sum_v
        ||G~_v||``): how far codewords encoded with those columns (what a worker sends: ``x_v =
        G~_v^T u``) miss check ``c``, per unit of ``||u||_F``. Peeling through ``c`` adds
        ``sum_{v in c} x_v``, so a decode's error grows by this times ``||u||_F`` at each check it
        uses (:meth:`decode_report`'s ``check_errors``): the operator code's counterpart of the
        dense contract's ``A B_F - T``. Every column is computed once (``O(N (edges + g K))``, a
        few seconds at ``N = 10,000``), in blocks of checks whose residuals fit
        :data:`RESIDUAL_BLOCK_BYTES`."""
        c_ptr, c_idx = self._c
        out = np.empty(self.r)
        per_block = max(1, self.RESIDUAL_BLOCK_BYTES // (8 * max(self.K, 1)))
        for lo in range(0, self.r, per_block):
            hi = min(self.r, lo + per_block)
            rows = np.zeros((hi - lo, self.K))
            sizes = np.zeros(hi - lo)
            owners = np.repeat(np.arange(hi - lo), np.diff(c_ptr[lo:hi + 1]))
            variables = c_idx[c_ptr[lo]:c_ptr[hi]]
            order = np.argsort(variables, kind="stable")
            for a in range(0, variables.size, 1024):  # each variable's column once per block of checks
                pick = order[a:a + 1024]
                distinct, back = np.unique(variables[pick], return_inverse=True)
                cols = self.generator_columns(distinct)
                np.add.at(rows, owners[pick], cols[back])
                np.add.at(sizes, owners[pick], np.linalg.norm(cols, axis=1)[back])
            terms = np.diff(c_ptr[lo:hi + 1]) - 1
            gamma = terms * _EPS / 2 / (1 - terms * _EPS / 2)
            out[lo:hi] = np.linalg.norm(rows, axis=1) + gamma * sizes
        return out

    def _ids(self, received) -> np.ndarray:
        """``received`` checked: distinct integer coordinate ids in ``0 .. N - 1``, 1-D."""
        ids = np.asarray(received)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise TypeError(f"received must be a 1-D sequence of integer coordinate ids, got dtype {ids.dtype}"
                            f" and shape {ids.shape}")
        ids = ids.astype(np.intp)
        if ids.size and (ids.min() < 0 or ids.max() >= self.N):
            raise ValueError(f"received ids must be in 0..{self.N - 1}; got {ids[(ids < 0) | (ids >= self.N)][:5].tolist()}")
        if np.unique(ids).size != ids.size:
            raise ValueError("received ids must be distinct (a coordinate arrives once)")
        return ids

    def _schedule(self, ids):
        known = np.zeros(self.N, dtype=np.bool_)
        known[ids] = True
        need = np.zeros(self.N, dtype=np.bool_)
        need[self.info] = True
        return _peel(known, need, *self._c, *self._v)

    def decodable(self, received) -> bool:
        """Whether peeling from the coordinates ``received`` recovers every information one."""
        return bool(self._schedule(self._ids(received))[2])

    def decoding_matrix(self, received) -> np.ndarray:
        """``A`` (``K x t``): the information coordinates as combinations of the received ones
        (peeling applied to the identity, ``O(edges t)``); :class:`NotDecodableError` on a
        stopping set."""
        received = self._ids(received)
        checks, vars_, complete = self._schedule(received)
        if not complete:
            raise NotDecodableError("LDPC peeling stalled on a stopping set before recovering the information"
                                    " coordinates")
        x = np.zeros((self.N, received.size))
        x[received, np.arange(received.size)] = 1.0
        _solve_pivots(x, *self._c, checks, vars_)
        return x[self.info]

    def decode_report(self, received, values, *, precision: str = "float64", errors=None,
                      check_errors=None) -> tuple[np.ndarray, float]:
        """``(u, relative_bound)``: the ``(K, m)`` message from the coordinates ``received`` (``t``
        ids) and their ``(t, m)`` values, by peeling, and a first-order bound on its error
        relative to ``||u||``: the received values' errors (``errors``: bounds on each one's
        2-norm, default 0) plus their rounding to ``precision`` (the wire type: a dtype or its
        name, :func:`~gradcode.codes.precision.wire_precision`), carried along the peeling chains
        with the float64 sums' own rounding (so the bound grows with the chains' depth), and, at
        each check used, how far the values miss it (``check_errors``, ``(r,)``, per unit of
        ``||u||``: :attr:`check_residuals` for values encoded by :meth:`generator_columns`;
        default 0, values that satisfy ``H`` exactly). :class:`NotDecodableError` on a stopping
        set."""
        received = self._ids(received)
        unit = UNIT_ROUNDOFF[wire_precision(precision)]
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 2 or values.shape[0] != received.size:
            raise ValueError(f"values must be ({received.size}, m), one row per received coordinate; got {values.shape}")
        if not np.isfinite(values).all():
            raise ValueError("values must be finite")
        checks, vars_, complete = self._schedule(received)
        if not complete:
            raise NotDecodableError("LDPC peeling stalled on a stopping set before recovering the information"
                                    " coordinates")
        x = np.zeros((self.N, values.shape[1]))
        x[received] = values
        _solve_pivots(x, *self._c, checks, vars_)
        norms = np.linalg.norm(x, axis=1)
        err = np.zeros(self.N)
        err[received] = unit * norms[received]
        if errors is not None:
            errors = np.broadcast_to(np.asarray(errors, dtype=np.float64), received.shape)
            if not (np.isfinite(errors).all() and (errors >= 0).all()):
                raise ValueError("errors must be finite bounds >= 0, one per received coordinate")
            err[received] += errors
        size = float(np.linalg.norm(norms[self.info]))
        missed = np.zeros(self.r)
        if check_errors is not None:
            missed = np.asarray(check_errors, dtype=np.float64) * size
            if missed.shape != (self.r,) or not (np.isfinite(missed).all() and (missed >= 0).all()):
                raise ValueError(f"check_errors must be {self.r} finite bounds >= 0, one per check")
        _peel_bound(err, norms, missed, *self._c, checks, vars_, _EPS)
        u = x[self.info]
        bound = float(np.linalg.norm(err[self.info]))
        return u, (bound / size if size > 0 else (0.0 if bound == 0 else np.inf))

    def decode(self, received, values, *, precision: str = "float64", errors=None, rtol: float = 1e-6) -> np.ndarray:
        """The ``(K, m)`` message (:meth:`decode_report`); :class:`ImpreciseDecodeError` when its
        error bound exceeds ``rtol`` of it (long peeling chains amplify the received values'
        errors), :class:`NotDecodableError` on a stopping set."""
        u, rel = self.decode_report(received, values, precision=precision, errors=errors)
        if not rel <= rtol:
            raise ImpreciseDecodeError(
                f"the peeling decode's error bound is {rel:.1e} of the message (> rtol={rtol:g}) for {precision}"
                " values: its chains add up the received values' rounding; more received coordinates (shorter"
                " chains) or a wider wire type decode it", relative_bound=rel, precision=precision, rtol=rtol)
        return u
