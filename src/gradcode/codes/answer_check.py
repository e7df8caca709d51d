"""The check of every decoding answer against the real encoder rows: the :class:`AnswerCheck`
mixin of :class:`~gradcode.codes.base.LinearCode`.

No answer is trusted unchecked. Whichever solve produced ``A`` (:mod:`gradcode.codes.solving`), it
is checked against the real received rows ``B_F`` of the encoders
(:meth:`AnswerCheck._check_answer`): the residual ``||A B_F - T|| / ||T||`` and the forward-error
*amplification* ``max_c sum_i |A[c, i]| ||B_F[i]||_1 / k``, which bounds the decoded gradient's
relative error by about ``amplification * eps`` and, unlike the condition number of a structured
solve, sees the size of the encoder rows. A structured answer that fails falls back to the generic
solve; a generic answer that fails is refused. A structured decoder may always refuse on its own.

An accepted answer carries what its decodes' error bounds need (:meth:`AnswerCheck._accepted`: the
amplification, the received rows' indices and numbers of terms, ``|A B_F - T|``), read by
:mod:`gradcode.codes.precision`. The encoder rows are gathered once per code, on first use
(:meth:`AnswerCheck._sparse_rows`), and kept dense where they are mostly non-zero.

The mixin has no constructor: it reads what :class:`~gradcode.codes.base.LinearCode` sets
(``_rows_cache``, ``_encoders``, ``_placement``, ``_messages``, ``_chunks``, ``_k``, ``_exact``,
``_max_condition``, ``lazy``) and keeps the gathered rows in ``_rows_cache``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
from scipy import sparse

from gradcode.codes.decoding import Decoding
from gradcode.codes.linalg import RESIDUAL_TOL
from gradcode.codes.precision import Decoded, bound_decode, decode_precision

__all__ = ["DENSE_ROWS", "DENSE_ROWS_MAX", "AnswerCheck"]

_EPS = float(np.finfo(np.float64).eps)
#: encoder rows at least this dense are kept as a dense array for the decoding check's product,
#: up to this many entries (25M: 200 MB)
DENSE_ROWS, DENSE_ROWS_MAX = 0.25, 25_000_000


class AnswerCheck:
    """The check of a :class:`~gradcode.codes.base.LinearCode`'s decoding answers against its
    encoder rows (module docstring), and the encoder rows it checks with."""

    def _accepted(self, sol: Decoding, amplification: float, residual) -> Decoding:
        """``sol`` with what its decodes' error bounds need: the amplification, the received rows'
        indices and numbers of terms, and ``|A B_F - T|``."""
        _, row_start, _, row_nnz, _ = self._sparse_rows()
        ids = self._row_ids(sol, row_start)
        terms = np.maximum(row_nnz[ids], 1).astype(np.float64)
        return replace(sol, amplification=amplification, row_terms=terms, row_ids=ids, residual=residual)

    @staticmethod
    def _row_ids(sol: Decoding, row_start: np.ndarray) -> np.ndarray:
        """The index among all encoder rows of each row ``sol`` uses (``row_start[w] + r``)."""
        if sol.row_ids is not None:  # a structured decoder that knows them (single-message codes)
            return sol.row_ids
        flat = np.fromiter(itertools.chain.from_iterable(sol.rows), dtype=np.intp, count=2 * len(sol.rows))
        return row_start[flat[0::2]] + flat[1::2]

    def _check_answer(self, sol: Decoding) -> tuple[float, str | None, np.ndarray | None]:
        """Check decoding coefficients ``A`` against the real received encoder rows ``B_F``.

        * residual: ``||A B_F - T||_F / ||T||_F <= RESIDUAL_TOL`` (exact codes only; the
          ``ignore`` baseline is inexact by design), the same measure as the generic solve's;
        * amplification: ``max_c sum_i |A[c, i]| ||B_F[i]||_1 / k``. A worker's message
          ``B_i g~`` carries a rounding error of about ``eps ||B_i||_1 max|g~|``; the decode
          multiplies it by ``A``, so the decoded gradient's error, relative to the ``k`` partial
          gradients it sums, is at most about ``amplification * eps``. It is ``>= 1`` for an exact
          decode (``A B_F = T`` puts ``k`` ones in every row) with equality iff nothing cancels
          (uncoded, FRC), and, unlike the condition number of a structured solve, it sees the
          size of the encoder rows: the AGC/CGC ``E M`` decoder solves a well-conditioned system
          in ``E`` while the entries of ``M`` grow geometrically with ``L``. Refused above
          ``max_condition`` (relative error ~1e-6 in float64 at the default ``1e10``).

        Returns ``(amplification, None, |A B_F - T|)`` when the answer can be trusted (the last is
        ``(L, k L)``, None for inexact codes), else ``(amplification, reason, None)``. Costs one
        product over the received rows (sparse, or dense where the rows are)."""
        BT, row_start, _, _, _ = self._sparse_rows()
        ids = self._row_ids(sol, row_start)
        A = sol.coefficients
        off = None
        amplification = self._amplification(sol)
        with np.errstate(over="ignore", invalid="ignore"):
            if self._exact:
                L = self._chunks
                if isinstance(BT, np.ndarray):  # dense rows (_sparse_rows): BLAS on the received ones
                    AB = (BT[:, ids] @ A.T).T.reshape(L, self._k, L)
                else:  # A B_F as B^T applied to A scattered over all rows: no sparse row slicing
                    scattered = np.zeros((BT.shape[1], L))
                    scattered[ids] = A.T
                    AB = (BT @ scattered).T.reshape(L, self._k, L)
                AB -= np.eye(L)[:, None, :]
                residual = float(np.linalg.norm(AB)) / math.sqrt(self._k * L)
                if not residual <= RESIDUAL_TOL:
                    return amplification, (
                        f"A B_F differs from the target by a relative residual {residual:.2e}"
                        f" (> {RESIDUAL_TOL:.0e})"
                    ), None
                off = np.abs(AB).reshape(L, self._k * L)
        if not amplification <= self._max_condition:
            return amplification, (
                f"its coefficients amplify rounding errors by {amplification:.2e} (> max_condition="
                f"{self._max_condition:.1e}): relative error up to ~{amplification * _EPS:.0e} in float64"
            ), None
        return amplification, None, off

    def _amplification(self, sol: Decoding) -> float:
        """``max_c sum_i |A[c, i]| ||B_F[i]||_1 / k`` (:meth:`_check_answer`): one small product."""
        _, row_start, row_l1, _, _ = self._sparse_rows()
        with np.errstate(over="ignore", invalid="ignore"):
            return float((np.abs(sol.coefficients) @ row_l1[self._row_ids(sol, row_start)]).max()) / self._k

    def _sparse_rows(self):
        """Every encoder row, transposed, as a sparse ``(k L, sum_w R_w)`` matrix ``B^T`` (a dense
        array when at least :data:`DENSE_ROWS` of it is non-zero and it is small enough); the
        index of each worker's first row; the rows' 1-norms and their numbers of non-zeros; ``B``
        itself (CSR). Built on first use (fresh patterns and error bounds only)."""
        if self._rows_cache is None:
            if self.lazy:
                raise TypeError(f"{self!r} builds its encoders when asked (too large to hold): it has no dense"
                                " encoder rows")
            L = self._chunks
            indptr, indices, data = [0], [], []
            for w, E in enumerate(self._encoders):
                cols = (np.asarray(self._placement[w], dtype=np.intp)[:, None] * L + np.arange(L)).ravel()
                flat = E.reshape(E.shape[0], -1)
                for row in flat:
                    nz = row != 0
                    indices.append(cols[nz])
                    data.append(row[nz])
                    indptr.append(indptr[-1] + int(nz.sum()))
            B = sparse.csr_array(
                (np.concatenate(data), np.concatenate(indices), np.asarray(indptr)),
                shape=(len(indptr) - 1, self._k * L),
            )
            row_start = np.concatenate([[0], np.cumsum(self._messages)[:-1]]).astype(np.intp)
            row_l1 = np.asarray(abs(B).sum(axis=1)).ravel()
            # mostly non-zero rows (MDS and LDPC generators) are kept dense for the check's product:
            # a sparse product over them runs far slower than BLAS's dense one (BENCHMARKS.md,
            # "LDPC at Remark 3's scale: a sparse H, an O(edges) encoder and peeling")
            dense = B.nnz >= DENSE_ROWS * B.shape[0] * B.shape[1] and B.shape[0] * B.shape[1] <= DENSE_ROWS_MAX
            BT = B.T.toarray() if dense else B.T.tocsr()
            self._rows_cache = (BT, row_start, row_l1, np.diff(B.indptr), B)
        return self._rows_cache

    # ------------------------------------------------------------------ the data's precision
    def _precision(self, dtypes, precision, rtol) -> tuple[str, float]:
        """``(precision, tolerance)`` of a decode of messages of ``dtypes``, this code's
        ``decode_rtol`` the default tolerance (:func:`~gradcode.codes.precision.decode_precision`)."""
        return decode_precision(dtypes, precision, rtol, self.decode_rtol)

    def _bounded(self, sol: Decoding, gradient, size: float, sums, prec: str, tol: float, factors, m: int, *,
                 measured=None, strict: bool | None = None) -> Decoded:
        """The error bound of a decode and its acceptance (:func:`~gradcode.codes.precision.bound_decode`).
        ``measured``: the rows whose ``S_i`` is their own norm, not given: the bound is guaranteed
        only if none of them sums several terms (a one-term message cannot cancel); ``strict``
        (default ``decode_strict``) refuses an estimate and a decode beyond ``tol``."""
        guaranteed = measured is None or not bool(np.any(np.asarray(measured) & (sol.row_terms > 1)))
        strict = self.decode_strict if strict is None else bool(strict)
        return bound_decode(self, sol, gradient, size, sums, prec, tol, factors, m, guaranteed=guaranteed,
                            strict=strict)
