"""What a decode is and how it sums what arrived.

:class:`Decoding`: the coefficients ``A`` of one received pattern (``chunk c = sum_i A[c, i]
message_i``), produced by :class:`~gradcode.codes.base.LinearCode`'s solves
(:mod:`gradcode.codes.solving`) and checked (:mod:`gradcode.codes.answer_check`). This module
unpacks the received messages (plain arrays or :class:`~gradcode.codes.messages.Message` objects
with their scales), checks them, and sums them with the coefficients at memory speed
(:func:`combine`); what that sum's rounding may be is :mod:`gradcode.codes.precision`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gradcode.codes.messages import Message, over_parts, sum_squares, weighted_sum
from gradcode.errors import GradcodeError

__all__ = ["Decoding", "NonFiniteMessageError", "Pattern", "Refusal", "combine", "items", "non_finite",
           "received_scales", "unpack"]

Pattern = tuple[tuple[int, int], ...]


#: Element block of the fused weighted sum: its float64 output (1 MB) stays in a core's L2 (or
#: L3) cache while every row adds into it; smaller blocks cost more in calls than they save
#: (BENCHMARKS.md, "Decode at memory speed, the workers' scales, decoding as messages arrive (2026-11-26)")
_BLOCK = 1 << 17

class NonFiniteMessageError(GradcodeError, ValueError):
    """A received message holds NaN or infinity; ``workers`` names the senders at fault.

    Drivers treat those workers as stragglers for the round and decode without them."""

    def __init__(self, message: str, workers: tuple[int, ...]):
        super().__init__(message)
        self.workers = workers


@dataclass(frozen=True)
class Decoding:
    """The decoding coefficients for one received pattern.

    ``rows[i] = (w, r)`` is message ``r`` of worker ``w``; chunk ``c`` of the gradient is
    ``sum_i coefficients[c, i] * message(rows[i])``. ``condition`` is the condition number of the
    solve that produced the coefficients (1.0 for closed-form decoders).
    """

    pattern: Pattern
    rows: tuple[tuple[int, int], ...]
    coefficients: np.ndarray
    condition: float
    method: str = "lstsq"
    #: forward-error amplification of the decode, measured against the real encoder rows (see
    #: :meth:`LinearCode.decoding`): 1 for a decode without cancellation (uncoded, FRC); the
    #: decoded gradient's relative error is at most about ``amplification * eps`` of the
    #: messages' float type
    amplification: float = 1.0
    #: terms of each received row's weighted sum at its worker (non-zero encoder coefficients):
    #: the factor of that row's own rounding in the decode's error bound
    row_terms: np.ndarray | None = None
    #: index of each received row among all encoder rows (workers' rows in order)
    row_ids: np.ndarray | None = None
    #: ``|A B_F - T|`` (``(L, k L)``) of an exact code: the coefficients' own error, which the
    #: decode's bound multiplies by the partial gradients' norms
    residual: np.ndarray | None = None

    @property
    def max_coefficient(self) -> float:
        return float(np.abs(self.coefficients).max()) if self.coefficients.size else 0.0


@dataclass(frozen=True)
class Refusal:
    """A pattern a code cannot decode, and why (cached like a decoding)."""

    reason: str


def items(obj, what: str):
    """Items of a mapping, or of an iterable of ``(worker, value)`` pairs with no repeated worker."""
    if isinstance(obj, Mapping):
        return obj.items()
    try:
        pairs = [tuple(p) for p in obj]
    except TypeError:
        raise TypeError(f"{what} must be a mapping {{worker: ...}} or (worker, ...) pairs") from None
    seen = set()
    for p in pairs:
        if len(p) != 2:
            raise TypeError(f"{what} must be (worker, ...) pairs, got {p!r}")
        if p[0] in seen:
            raise ValueError(f"duplicate worker id {p[0]} in {what}")
        seen.add(p[0])
    return pairs


def unpack(w: int, msgs, m: int, d: int, L: int):
    """One worker's received messages as a list of ``(m,)`` rows, and ``(scales, factors)`` when
    they came as :class:`~gradcode.codes.messages.Message` objects (None for plain arrays):
    ``msgs`` is an ``(r, m)`` or ``(m,)`` array, a Message, or a sequence of Messages."""
    if isinstance(msgs, Message):
        msgs = (msgs,)
    if isinstance(msgs, (list, tuple)) and msgs and all(isinstance(x, Message) for x in msgs):
        rows = [np.asarray(x.values) for x in msgs]
        meta = ([float(x.scale) for x in msgs], [float(x.factor) for x in msgs])
        if any(not (f > 0 and math.isfinite(f)) for f in meta[1]):
            raise ValueError(f"messages of worker {w} must have finite factors > 0, got {meta[1]}")
    else:
        a = np.asarray(msgs)
        if a.ndim == 1:
            a = a[None, :]
        rows, meta = (list(a) if a.ndim == 2 else [a]), None
    for a in rows:
        if a.shape != (m,):
            raise ValueError(f"messages of worker {w} must have shape (r, {m}) for dim={d} and chunks={L};"
                             f" got {np.shape(msgs) if meta is None else a.shape}")
    dtype = rows[0].dtype if rows else np.dtype(np.float64)
    if any(a.dtype != dtype for a in rows):
        raise TypeError(f"messages of worker {w} mix dtypes {sorted({a.dtype.name for a in rows})}")
    if dtype.kind not in "fiu" and dtype.name != "bfloat16":
        raise TypeError(f"messages of worker {w} must be real numbers, got dtype {dtype}")
    return _Rows(rows, dtype), meta


class _Rows(list):
    """A worker's received rows, with the dtype they share (what the precision is read from)."""

    def __init__(self, rows, dtype):
        super().__init__(rows)
        self.dtype = dtype


def combine(sol: Decoding, arrays: Mapping[int, list], L: int, m: int, factors: np.ndarray,
             measure: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sum_i A[:, i] / f_i * message_i`` over the received rows, in float64, and the 2-norm of
    each received row marked in ``measure`` divided by its factor ``f_i`` (0 for the rest, and for
    rows whose coefficients are all zero: they are not read).

    For single-chunk codes this is a compiled, cache-blocked weighted sum
    (:func:`~gradcode.codes.messages.weighted_sum`): each message is read once, in its own type
    (a float32 element is widened in a register, never in a float64 copy of the message), the
    output block stays in cache, and a measured row's sum of squares comes from the same pass.
    That is what keeps decoding at the memory floor of summing the received messages once.
    Multi-chunk codes stack the rows and multiply by ``A`` (BLAS). The third value is the output's
    sum of squares (NaN where not computed): non-finite when the output is."""
    A = sol.coefficients / factors
    if L == 1:
        used = np.flatnonzero(A[0])  # rows with a zero coefficient are not read
        vecs = [arrays[w][r] for w, r in (sol.rows[i] for i in used)]
        coefs = A[0, used]
        out = np.empty(m, dtype=np.float64)
        squares = bool(measure[used].any())

        def part(lo: int, hi: int):  # contiguous blocks of the output, one part per decode thread
            sq, osq = np.zeros(len(used)), 0.0
            for start in range(lo, hi, _BLOCK):
                stop = min(start + _BLOCK, hi)
                blk = out[start:stop]
                sq += weighted_sum(blk, [v[start:stop] for v in vecs], coefs, squares)
                osq += sum_squares(blk)  # the block is still in cache
            return sq, osq

        sumsq = np.zeros(len(sol.rows))
        out_sq = 0.0
        for sq, osq in over_parts(m, part):
            sumsq[used] += sq
            out_sq += osq
        return out, np.sqrt(sumsq) / factors, out_sq
    stacked = np.stack([arrays[w][r] for w, r in sol.rows]).astype(np.float64, copy=False)
    out = (A @ stacked).reshape(L * m)
    return out, np.where(measure, np.linalg.norm(stacked, axis=1), 0.0) / factors, math.nan


def non_finite(sol: Decoding, arrays, factors, bad_scale) -> tuple[str, tuple[int, ...]]:
    """The message and senders of a :class:`NonFiniteMessageError`: the senders of
    non-finite messages or scales, and of finite messages whose scaled contribution
    ``|A[c, i]| * |message_i|`` reaches max / (rows used): below that bound for every row the
    weighted sum cannot overflow, so an overflow from finite messages (1e308 everywhere) always
    names the workers that caused it."""
    peak = np.abs(sol.coefficients).max(axis=0) / factors  # per received row
    limit = np.finfo(np.float64).max / max(int(np.count_nonzero(peak)), 1)
    bad = {w for (w, _), b in zip(sol.rows, bad_scale) if b}
    with np.errstate(over="ignore", invalid="ignore"):
        for (w, r), a in zip(sol.rows, peak):
            v = np.asarray(arrays[w][r], dtype=np.float64)
            if not np.isfinite(v).all() or (a and not a * np.abs(v).max() < limit):
                bad.add(w)
    bad = tuple(sorted(bad))
    return (
        f"messages from workers {list(bad)} hold non-finite values (NaN or infinity) or values"
        " so large that the decoded gradient overflows; "
        "treat them as stragglers and decode without them",
        bad,
    )


def received_scales(code, sol: Decoding, scales, arrays, sent) -> np.ndarray:
    """``scales`` (``{w: (r_w,)}``) of the rows ``sol`` uses, validated (NaN for the rows of
    workers that sent their own, :class:`~gradcode.codes.messages.Message`)."""
    table = {}
    for w, v in items(scales, "scales"):
        w = code.check_worker(w)
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        if w in arrays and (v.size < len(arrays[w]) or not (np.isfinite(v) & (v >= 0)).all()):
            raise ValueError(
                f"scales of worker {w} must be {len(arrays[w])} finite numbers >= 0, one per"
                f" message; got {v.size} values"
            )
        table[w] = v
    missing = sorted({w for w, _ in sol.rows} - set(table) - set(sent))
    if missing:
        raise ValueError(f"scales must cover every worker whose messages are decoded; missing {missing}")
    return np.array([table[w][r] if w in table else np.nan for w, r in sol.rows])
