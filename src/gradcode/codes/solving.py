"""How a code finds its decoding coefficients: the :class:`Solving` mixin of
:class:`~gradcode.codes.base.LinearCode`.

The master holds a prefix of each worker's stream, a *pattern* ``{w: r_w}``, and decodes

    chunk c of g  =  sum_{received rows i} A[c, i] * message_i

where ``A`` solves ``A @ M = T``: ``M`` stacks the received rows of the ``E_w`` scattered over the
``k * L`` (partition, chunk) coordinates (:meth:`Solving.rows_matrix`) and ``T[c, j * L + c] = 1``
(:meth:`Solving.target_matrix`). The generic decoder finds the minimum-norm ``A`` by SVD
(:func:`~gradcode.codes.linalg.lstsq_coefficients`), decides decodability by rank and residual
(never by counting workers), reports the condition number of the solve, refuses a solve whose
condition number exceeds ``max_condition`` (default ``1e10``: a relative error of about
``cond * eps`` is then ~1e-6 for float64 messages), and caches ``A`` per pattern in a bounded LRU
cache (:class:`~gradcode.codes.cache.DecodingCache`, refusals included). Codes may supply a faster
structured solve through the ``_fast_solve`` hook; tests check it agrees with the generic one.

Whichever solve answers, its answer is checked before it is used or cached
(:mod:`gradcode.codes.answer_check`): :meth:`Solving._trusted_solve` is the one place that
chooses between the structured answer, the generic one and a refusal.

The mixin holds no state of its own and has no constructor: it reads what
:class:`~gradcode.codes.base.LinearCode` sets (``_cache``, ``_chunks``, ``_k``, ``_placement``,
``_encoders``, ``max_condition``) and calls its ``normalize_pattern`` and the checks of
:class:`~gradcode.codes.answer_check.AnswerCheck`.
"""

from __future__ import annotations

import numpy as np

from gradcode.codes.decoding import Decoding, Pattern, Refusal
from gradcode.codes.linalg import lstsq_coefficients
from gradcode.codes.rules import DecodeRule, GenericRule
from gradcode.errors import NotDecodableError

__all__ = ["Solving"]


class Solving:
    """How a :class:`~gradcode.codes.base.LinearCode` finds decoding coefficients (module
    docstring): the cached, checked solve of a pattern, the generic least-squares solve, the
    structured-solve hook and the matrices they solve with."""

    def _solution(self, pattern: Pattern) -> Decoding | Refusal:
        """The verdict on ``pattern``: from the cache, else solved, checked and cached (a refusal
        is cached too, as a :class:`~gradcode.codes.decoding.Refusal` saying why)."""
        sol = self._cache.get(pattern)
        if sol is not None:
            return sol
        try:
            sol = self._trusted_solve(pattern)
        except NotDecodableError as exc:
            sol = Refusal(str(exc))
        else:
            sol.coefficients.flags.writeable = False  # shared through the cache
        self._cache.put(pattern, sol)
        return sol

    def _trusted_solve(self, pattern: Pattern) -> Decoding:
        """The structured solve if its answer passes :meth:`_check_answer`, else the generic
        least-squares solve if *its* answer passes, else :class:`NotDecodableError` naming both
        reasons. A structured decoder's refusal is final (refusing is always safe)."""
        if not pattern:
            raise NotDecodableError("no messages received")
        fast = self._fast_solve(pattern)
        if fast is not None:
            amplification, problem, residual = self._check_answer(fast)
            if problem is None:
                return self._accepted(fast, amplification, residual)
            fast_problem = f"the {fast.method} decoder's answer failed its check: {problem}"
        try:
            sol = self._generic_solve(pattern)
        except NotDecodableError as exc:
            if fast is None:
                raise
            raise NotDecodableError(f"{fast_problem}; the least-squares solve: {exc}") from None
        amplification, problem, residual = self._check_answer(sol)
        if problem is not None:
            reasons = ([fast_problem] if fast is not None else []) + [f"the least-squares solve: {problem}"]
            raise NotDecodableError("; ".join(reasons))
        return self._accepted(sol, amplification, residual)

    def decode_rule(self) -> DecodeRule:
        """The code's decodability as a rule on message prefixes (:mod:`gradcode.codes.rules`):
        a closed form where the decoder is a simple rule, else :class:`GenericRule` (binary
        search with :meth:`can_decode`). A subclass with another decoder overrides it."""
        return GenericRule(self)

    def _fast_solve(self, pattern: Pattern) -> Decoding | None:
        """Hook for a structured decoder: return a :class:`Decoding`, raise
        :class:`NotDecodableError`, or return ``None`` to use the generic solve."""
        return None

    def rows_matrix(self, pattern: Pattern) -> tuple[tuple[tuple[int, int], ...], np.ndarray]:
        """The received rows and their ``(rows, k * L)`` coefficient matrix M."""
        L = self._chunks
        rows = tuple((w, r) for w, rw in pattern for r in range(rw))
        M = np.zeros((len(rows), self._k * L))
        i = 0
        for w, rw in pattern:
            cols = (np.asarray(self._placement[w])[:, None] * L + np.arange(L)).ravel()
            M[i : i + rw, cols] = self._encoders[w][:rw].reshape(rw, -1)
            i += rw
        return rows, M

    def target_matrix(self) -> np.ndarray:
        """T of shape (L, k * L): chunk c of the gradient sums coordinate c of every partition."""
        L = self._chunks
        return np.tile(np.eye(L), (1, self._k))

    def _generic_solve(self, pattern: Pattern) -> Decoding:
        """The minimum-norm least-squares ``A`` of ``A M = T`` by SVD, refused by rank, residual
        or a condition number above ``max_condition``
        (:func:`~gradcode.codes.linalg.lstsq_coefficients`)."""
        rows, M = self.rows_matrix(pattern)
        coefficients, cond = lstsq_coefficients(M, self.target_matrix(), self.max_condition)
        return Decoding(pattern, rows, coefficients, cond, "lstsq")

    def generic_decoding(self, received) -> Decoding:
        """The generic least-squares decoding, bypassing any fast path and the cache (for tests
        and benchmarks that compare the two)."""
        return self._generic_solve(self.normalize_pattern(received))
