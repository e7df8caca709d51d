"""Decoding as messages arrive, for codes whose decoding coefficients are known when a message
arrives.

For most codes the coefficient of a message depends on which other messages arrive (a CRC
decode solves for the received pattern), so the master holds the messages until the round
closes. Some codes know it at once: uncoded adds every message with coefficient 1; FRC adds the
first message of each data group with coefficient 1 and needs no other (coefficient 0). A code
says so with :attr:`LinearCode.streams <gradcode.codes.LinearCode.streams>` and
:meth:`LinearCode.streamed_coefficient <gradcode.codes.LinearCode.streamed_coefficient>`;
:class:`RunningDecode` then adds each message into one float64 running sum as it arrives, so
decoding hides behind the wait for the others and the master holds one sum instead of ``n``
messages.

Nothing is trusted more than a held decode: at the end the coefficients used are compared with
the code's checked decoding of the messages added (the same ``decoding(pattern)`` a held decode
uses, checked against the encoder rows), and the error bound is the same
(:meth:`LinearCode._bounded`), from each message's scale (or its norm, measured in the same pass,
for plain arrays). A non-finite plain array is refused before it touches the sum (one extra read
of it); a :class:`~gradcode.codes.messages.Message` is trusted to be finite when its ``scale``
is (a worker's message is a sum of terms whose norms make up ``scale``); one whose values are not
finite all the same poisons the sum: the round is refused, never decoded from it.
"""

from __future__ import annotations

import math

import numpy as np

from gradcode.codes.messages import Message, sum_squares, weighted_add
from gradcode.errors import NotDecodableError

__all__ = ["RunningDecode"]


class RunningDecode:
    """One job's decode, built message by message (module docstring). ``offer(w, r, payload)``
    adds message ``r`` of worker ``w`` (True), or says its coefficient is not known yet (False:
    hold it); :meth:`result` is the :class:`~gradcode.codes.precision.Decoded` of what was added."""

    def __init__(self, code):
        self.code = code
        #: messages added in, per worker (a decoding pattern)
        self.added = np.zeros(code.n, dtype=np.intp)
        self.total: np.ndarray | None = None
        #: (w, r) -> (coefficient, scale (NaN: none sent), factor, measured norm)
        self.rows: dict[tuple[int, int], tuple[float, float, float, float]] = {}
        self.dtypes: set = set()
        self.skipped = 0

    def offer(self, w: int, r: int, payload) -> bool:
        """Add message ``r`` of worker ``w`` if its coefficient is known now. Raises
        :class:`~gradcode.codes.NonFiniteMessageError` (naming ``w``) for a plain array holding
        NaN or infinity, before it is added."""
        from gradcode.codes.decoding import NonFiniteMessageError

        c = self.code.streamed_coefficient(self.added, w, r)
        if c is None:
            return False
        if c == 0.0:
            self.skipped += 1
            return True
        if isinstance(payload, Message):
            values, scale, factor = np.asarray(payload.values), float(payload.scale), float(payload.factor)
        else:
            values, scale, factor = np.asarray(payload), math.nan, 1.0
        if values.ndim != 1 or (self.total is not None and values.shape != self.total.shape):
            want = "(m,)" if self.total is None else str(self.total.shape)
            raise ValueError(f"message {r} of worker {w} must have shape {want}, got {values.shape}")
        plain = math.isnan(scale)
        if plain:  # checked before it can poison the sum (its squares: its norm, as no scale came)
            got = sum_squares(values)
            if not math.isfinite(got):
                raise NonFiniteMessageError(f"message {r} of worker {w} holds NaN or infinity (or values past"
                                            " ~1e154); treat the worker as a straggler", (w,))
        first = self.total is None
        if first:
            self.total = np.empty(values.shape[0])
        squares = weighted_add(self.total, values, c / factor, first, not plain)  # a Message's squares: its check
        got = got if plain else squares
        if not math.isfinite(got):
            self.total = None  # poisoned: no result can come of it
            raise NotDecodableError(
                f"message {r} of worker {w} holds NaN or infinity although its scale ({scale:g}) is finite:"
                " the worker does not follow the message contract, and the round's running sum is lost")
        self.rows[(w, r)] = (c, scale, factor, math.sqrt(got) / factor)
        self.added[w] = max(self.added[w], r + 1)
        self.dtypes.add(values.dtype)
        return True

    def result(self, *, dim: int | None = None, rtol: float | None = None):
        """The decoded gradient of the messages added, with its checked error bound (as
        :meth:`LinearCode.decode_report`). ``dim`` defaults to the message length."""
        code = self.code
        if self.total is None:
            raise NotDecodableError("no message was added in (or the running sum was lost)")
        m = self.total.shape[0]
        dim = m * code.chunks if dim is None else dim
        sol = code.decoding(self.added)
        used = np.array([self.rows[row][0] for row in sol.rows])
        if sol.coefficients.shape[0] != 1 or not np.array_equal(sol.coefficients[0], used):
            raise NotDecodableError(
                f"{code!r}: the coefficients its messages were added in with {used.tolist()} are not its checked"
                f" decoding's {sol.coefficients.tolist()}: the code's streamed_coefficient disagrees with its decoder")
        scale = np.array([self.rows[row][1] for row in sol.rows])
        factors = np.array([self.rows[row][2] for row in sol.rows])
        measured = np.array([self.rows[row][3] for row in sol.rows])
        sums = np.where(np.isnan(scale), measured, scale)
        prec, tol = code._precision(self.dtypes, None, rtol)
        gradient = self.total[:dim]
        size = math.sqrt(sum_squares(gradient))
        if not math.isfinite(size):  # squares past ~1e154, or a sum that overflowed
            if not np.isfinite(gradient).all():
                raise NotDecodableError(f"the running sum of the messages of workers"
                                        f" {sorted(set(w for w, _ in sol.rows))} overflowed")
            size = float(np.linalg.norm(gradient))
        return code._bounded(sol, gradient, size, sums, prec, tol, factors, m, measured=np.isnan(scale))
