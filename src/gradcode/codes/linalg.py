"""The linear algebra every decoder shares: minimum-norm left solves with rank, residual and
condition checks, the structured null-space solve of single-message codes, and encoding without a
zero-padded copy. Pure numpy/scipy; imports nothing else from gradcode but its errors.

Every solve here is followed, in :meth:`gradcode.codes.base.LinearCode.decoding`, by a check of
its answer against the real encoder rows: these functions decide what they can from their own
(small) systems, and the caller never trusts them further than that.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_triangular

from gradcode.errors import NotDecodableError

__all__ = ["NullspaceSolver", "RESIDUAL_TOL", "encode_without_padding", "lstsq_coefficients", "min_norm_left_solve"]

#: Relative residual ``||A M - T|| / ||T||`` above which the target is not in the received span.
RESIDUAL_TOL = 1e-6


def lstsq_coefficients(M: np.ndarray, T: np.ndarray, max_condition: float) -> tuple[np.ndarray, float]:
    """Minimum-norm ``A`` with ``A @ M = T`` by SVD, with rank, residual and condition checks.

    Raises :class:`NotDecodableError` when ``T`` is not in the row span of ``M`` (relative residual
    above ``RESIDUAL_TOL``) or when the condition number ``s_max / s_rank`` exceeds
    ``max_condition``. Returns ``(A, condition)``.
    """
    if M.shape[0] == 0:
        raise NotDecodableError("no messages received")
    U, S, Vt = np.linalg.svd(M, full_matrices=False)
    tol = S[0] * max(M.shape) * np.finfo(np.float64).eps if S.size else 0.0
    rank = int((S > tol).sum())
    if rank == 0:
        raise NotDecodableError("the received messages are all zero")
    cond = float(S[0] / S[rank - 1])
    # A = T V_r S_r^-1 U_r^T
    A = ((T @ Vt[:rank].T) / S[:rank]) @ U[:, :rank].T
    residual = np.linalg.norm(A @ M - T) / np.linalg.norm(T)
    if not residual <= RESIDUAL_TOL:
        raise NotDecodableError(
            f"the received messages do not span the full gradient (rank {rank} of {M.shape[0]} rows,"
            f" relative residual {residual:.2e})"
        )
    if cond > max_condition:
        raise NotDecodableError(
            f"decoding solve too ill-conditioned to trust: condition number {cond:.3e} exceeds"
            f" max_condition={max_condition:.1e}"
        )
    return A, cond


def min_norm_left_solve(Mat: np.ndarray, T: np.ndarray, max_condition: float) -> tuple[np.ndarray, float]:
    """Minimum-norm ``A`` with ``A @ Mat = T``: by QR when ``Mat`` has full column rank (then
    ``A = T R^{-1} Q^T``, condition from the singular values of ``R``), else by the SVD solve of
    :func:`lstsq_coefficients` (which decides rank, residual and refusal)."""
    rows, cols = Mat.shape
    if rows >= cols > 0:
        Q, R = np.linalg.qr(Mat)
        sv = np.linalg.svd(R, compute_uv=False)
        if sv[-1] > sv[0] * max(Mat.shape) * np.finfo(np.float64).eps:
            cond = float(sv[0] / sv[-1])
            if cond <= max_condition:
                Y = solve_triangular(R, T.T, trans="T", lower=False)
                return (Q @ Y).T, cond
    return lstsq_coefficients(Mat, T, max_condition)


class NullspaceSolver:
    """Structured solve of ``B_I^T a = 1`` for a single-message code of rank ``n - s``.

    Every solution of ``B^T a = 1`` is ``a0 + N c`` with ``a0`` the minimum-norm solution and ``N``
    an orthonormal basis of the left null space of ``B`` (``n x (n - rank B)``). Silencing the
    stragglers ``S`` means ``a_S = 0``, i.e. the small system ``N[S] c = -a0[S]`` with ``|S|`` rows
    and ``n - rank B`` unknowns. Both are precomputed once, so a fresh straggler pattern costs an
    ``|S| x s`` solve and one ``n x s`` product instead of a least-squares solve on ``n - s`` rows
    of length ``n``. The solution is then verified against ``B`` directly.
    """

    def __init__(self, B: np.ndarray, rank: int):
        U, S, Vt = np.linalg.svd(B)
        self.B = B
        self.null = U[:, rank:]  # left null space of B: B^T N = 0
        # minimum-norm solution of B^T a = 1 on the rank-r part (1 lies in the row space of B)
        self.a0 = U[:, :rank] @ ((Vt[:rank] @ np.ones(B.shape[1])) / S[:rank])

    def solve(self, received: np.ndarray, max_condition: float) -> tuple[np.ndarray, float]:
        n = self.B.shape[0]
        mask = np.ones(n, dtype=bool)
        mask[received] = False
        stragglers = np.flatnonzero(mask)
        a = self.a0.copy()
        cond = 1.0
        if stragglers.size:
            Ns = self.null[stragglers]
            c = None
            if Ns.shape[0] == Ns.shape[1]:  # as many stragglers as the null space's dimension
                # the singular values alone (half an SVD's cost) give the condition; a full-rank
                # square system then solves by LU, the same answer as the pseudo-inverse below
                sv = np.linalg.svd(Ns, compute_uv=False)
                if sv[-1] > sv[0] * Ns.shape[0] * np.finfo(float).eps:
                    cond = float(sv[0] / sv[-1])
                    c = np.linalg.solve(Ns, -self.a0[stragglers])
            if c is None:
                u, sv, vt = np.linalg.svd(Ns, full_matrices=False)
                tol = (sv[0] if sv.size else 0.0) * max(Ns.shape) * np.finfo(float).eps
                r = int((sv > tol).sum())
                if r:
                    cond = float(sv[0] / sv[r - 1])
                    c = vt[:r].T @ ((u[:, :r].T @ -self.a0[stragglers]) / sv[:r])
            if c is not None:
                a += self.null @ c
            a[stragglers] = 0.0
        residual = np.linalg.norm(self.B.T @ a - 1.0) / math.sqrt(self.B.shape[1])
        if not residual <= 1e-6:
            raise NotDecodableError(
                f"the {received.size} received workers do not span the full gradient"
                f" ({stragglers.size} stragglers; relative residual {residual:.2e})"
            )
        if cond > max_condition:
            raise NotDecodableError(
                f"decoding solve too ill-conditioned to trust: condition number {cond:.3e} exceeds"
                f" max_condition={max_condition:.1e}"
            )
        return a[received], cond


def encode_without_padding(E: np.ndarray, partials: np.ndarray, L: int) -> np.ndarray:
    """``E_w`` applied to ``partials`` (``(p, d)``) when ``L`` does not divide ``d``, without the
    zero-padded copy of the partials: the ``full = d // m`` complete chunks of each partition are
    a free ``(full, m)`` view, contracted partition by partition, and the short last chunk is added
    on its own. Same result as padding; one read of the partials instead of a copy and a read."""
    p, d = partials.shape
    m = math.ceil(d / L)
    full = d // m
    R = E.shape[0]
    Ec = E.astype(partials.dtype)
    out = np.zeros((R, m), dtype=partials.dtype)
    head = partials[:, : full * m]
    for i in range(p):
        out += Ec[:, i, :full] @ head[i].reshape(full, m)
    tail = d - full * m
    if tail:
        out[:, :tail] += Ec[:, :, full] @ partials[:, full * m :]
    return out
