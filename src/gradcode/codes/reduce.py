"""Decoding as a reduction: the plan the collective path runs (docs/architecture.md, "Transports").

Every decode of a code with coefficients is linear in the messages: chunk ``c`` of the gradient is
``sum_i A[c, i] m_i`` over the received rows ``i = (w, r)``. So the workers that hold the messages
can form the gradient among themselves: worker ``w`` contributes

    p_w = [ sum_r A[c, (w, r)] / f_(w, r) * values_(w, r) ]_c        (float64, cast to the reduce type)

(``f`` the power of two a 16-bit message was scaled by, :func:`~gradcode.codes.messages.to_wire`),
and an all-reduce (a sum) of the ``p_w`` over the workers gives every one of them the decoded
gradient, as the master's own sum would (:func:`~gradcode.codes.decoding.combine`). A worker that
holds no row of the decoding contributes zeros and still receives the result.

A plan is made from :class:`~gradcode.codes.messages.Note` s alone (scale, factor, dtype: no
values): the code's checked decoding of the pattern (the same cached solve as a held decode), each
worker's weights, and the error bound from the scales (``||m_i|| <= S_i``), grown by the
reduction's own rounding (:func:`~gradcode.codes.precision.error_bound` with ``reduced_by``: each
part cast to the reduce type, the ring's additions in it). The acceptance rule is the held
decode's (:func:`~gradcode.codes.precision.accept_bound`): a bound within
:data:`~gradcode.codes.precision.PLAIN_SUM_SLACK` times a plain sum's is accepted before anything
is summed (``checked``); otherwise it is judged against the reduced gradient's norm by every worker
that holds it (:meth:`ReducePlan.accept`), each reaching the same verdict on the same bits, before
any of them uses it. Codes that decode by an operator of their own (CommFR's LDPC past its dense
size: peeling is not linear in a fixed set of coefficients) have no plan:
:class:`~gradcode.errors.CollectiveUnsupportedError`.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from gradcode._validation import check_int
from gradcode.codes.decoding import Decoding, NonFiniteMessageError, items
from gradcode.codes.messages import Note, weighted_sum
from gradcode.codes.precision import PLAIN_SUM_SLACK, accept_bound, error_bound, wire_precision
from gradcode.errors import CollectiveUnsupportedError

__all__ = ["ReducePlan", "contribution", "merge_plans", "reduce_plan", "reduced_in_float64", "relabel"]

_WIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("gradcode_reduced_in_float64", default=False)


@contextmanager
def reduced_in_float64():
    """Plans made while the block runs (:func:`reduce_plan` without a ``reduce_dtype``) reduce in
    float64 whatever the messages' type: a driver's second attempt at a reduction whose float32
    sum was refused as imprecise. The reduction's own float32 rounding, which grows with the number
    of members, is what the held decode (float64 sums) does not have; in float64 the plan's bound
    is essentially the held decode's (the float64 ring's own rounding is all it adds), so the
    collective path accepts what the star path accepts."""
    token = _WIDE.set(True)
    try:
        yield
    finally:
        _WIDE.reset(token)


@dataclass(frozen=True, eq=False)
class ReducePlan:
    """How the workers holding a round's messages reduce them to the decoded gradient (module
    docstring). ``weights[w]``: ``(r_w, L)`` float64, ``A[c, (w, r)] / f_(w, r)`` for worker ``w``'s
    leading ``r_w`` messages (zeros for rows the decoding does not use); ``chunks`` ``L``,
    ``length`` ``m``, ``dim`` ``d``; ``error_bound``, ``plain_bound``, ``summed`` as in
    :class:`~gradcode.codes.precision.Decoded`; ``checked``: accepted already by the plain-sum rule
    (no check after the reduction); ``reduce_precision``: the type the parts are all-reduced in;
    ``rows``: which messages each worker's weight rows read, ``{w: ((round, index), ...)}`` (a
    sequential scheme's job reads messages of several rounds), or None: the leading ``r_w``
    messages of the round being reduced (a static code's); ``strict``: the acceptance without the
    plain-sum allowance (:func:`~gradcode.codes.precision.accept_bound`; never ``checked``)."""

    decoding: Decoding
    weights: Mapping[int, np.ndarray]
    chunks: int
    length: int
    dim: int
    error_bound: float
    plain_bound: float
    summed: float
    precision: str
    rtol: float
    reduce_precision: str
    checked: bool
    rows: Mapping[int, tuple[tuple[int, int], ...]] | None = None
    strict: bool = False

    @property
    def workers(self) -> tuple[int, ...]:
        """The workers whose messages the plan reads (a non-zero weight)."""
        return tuple(sorted(w for w, a in self.weights.items() if np.any(a)))

    def accept(self, norm: float) -> float:
        """The held decode's acceptance rule on the reduced gradient of norm ``norm``: its relative
        bound, or :class:`~gradcode.codes.precision.ImpreciseDecodeError`."""
        return accept_bound(self.decoding, self.error_bound, self.plain_bound, self.summed, float(norm),
                            self.precision, self.rtol, strict=self.strict)

    def relative_bound(self, norm: float) -> float:
        """``error_bound / norm``: a checked plan's relative bound once the reduced gradient's norm
        is known (above ``rtol``: accepted as no worse than a plain sum, and flagged)."""
        return self.error_bound / norm if norm > 0 else (0.0 if self.error_bound == 0 else math.inf)


def reduce_plan(code, notes, *, dim: int, reduced_by: int, reduce_dtype=None, precision=None,
                rtol: float | None = None, strict: bool | None = None) -> ReducePlan:
    """The plan of a decode of the messages described by ``notes`` (``{w: [Note, ...]}``, the
    leading ``r_w`` messages each worker holds) reduced by ``reduced_by`` workers in
    ``reduce_dtype`` (default: float64 when a message is float64, the wire type a user chooses for
    a code whose coefficients amplify float32's rounding, or inside :func:`reduced_in_float64`,
    else float32, which 16-bit messages are widened to); ``precision``, ``rtol`` and ``strict`` as for
    :meth:`~gradcode.codes.base.LinearCode.decode_report`. Raises what a held decode of the same
    pattern raises: :class:`~gradcode.errors.NotDecodableError` for a pattern that does not decode,
    :class:`~gradcode.codes.NonFiniteMessageError` naming the workers whose sums were not finite.
    Imprecision is judged after the reduction (:meth:`ReducePlan.accept`), once the gradient's
    norm is known, unless the plain-sum rule accepts the plan first (``checked``)."""
    if getattr(code, "lazy", False):
        raise CollectiveUnsupportedError(
            f"{code!r} decodes by an operator of its own (peeling), not by a fixed set of coefficients: the"
            " collective path cannot reduce it; it keeps the star path")
    d = check_int("dim", dim, minimum=1)
    k = check_int("reduced_by", reduced_by, minimum=1)
    m = code.message_length(d)
    held: dict[int, list[Note]] = {}
    for w, ns in items(notes, "notes"):
        w = code.check_worker(w)
        ns = [ns] if isinstance(ns, Note) else list(ns)
        if not all(isinstance(x, Note) for x in ns):
            raise TypeError(f"notes of worker {w} must be Note objects, got {[type(x).__name__ for x in ns]}")
        if len(ns) > code.messages_of(w):
            raise ValueError(f"worker {w} sends at most {code.messages_of(w)} messages, got {len(ns)}")
        for x in ns:
            if x.length != m:
                raise ValueError(f"messages of worker {w} must have length {m} for dim={d} and chunks={code.chunks};"
                                 f" its note says {x.length}")
            if not (x.factor > 0 and math.isfinite(x.factor)):
                raise ValueError(f"messages of worker {w} must have finite factors > 0, got {x.factor}")
        if ns:
            held[w] = ns
    bad = tuple(sorted(w for w, ns in held.items() if not all(x.finite for x in ns)))
    if bad:
        raise NonFiniteMessageError(
            f"messages from workers {list(bad)} hold non-finite values (their sums are not finite); treat them"
            " as stragglers and decode without them", bad)
    if reduce_dtype is None:
        wide = _WIDE.get() or any(np.dtype(x.dtype) == np.float64 for ns in held.values() for x in ns)
        reduce_dtype = np.float64 if wide else np.float32
    reduce_prec = wire_precision(reduce_dtype)
    # judged in the coarser of the wire's and the reduction's precision (float64 messages reduced in
    # float32 are float32's sums, and their default tolerance is float32's)
    prec, tol = code._precision({x.dtype for ns in held.values() for x in ns} | {reduce_prec}, precision, rtol)
    sol = code.decoding({w: len(ns) for w, ns in held.items()})
    sums = np.array([held[w][r].scale for w, r in sol.rows])
    factors = np.array([held[w][r].factor for w, r in sol.rows])
    bound, plain, summed = error_bound(code, sol, sums, prec, factors, m, reduced_by=k,
                                       reduce_precision=reduce_prec)
    weights = {w: np.zeros((len(ns), code.chunks)) for w, ns in held.items()}
    A = sol.coefficients / factors
    for i, (w, r) in enumerate(sol.rows):
        weights[w][r] = A[:, i]
    strict = code.decode_strict if strict is None else bool(strict)
    return ReducePlan(sol, weights, int(code.chunks), m, d, bound, plain, summed, prec, tol, reduce_prec,
                      bool(not strict and bound <= PLAIN_SUM_SLACK * plain), strict=strict)


def relabel(plan: ReducePlan, holders: Mapping[int, tuple[int, Sequence[tuple[int, int]]]]) -> ReducePlan:
    """``plan`` (made over a code's own worker ids) for the workers that hold its messages:
    ``holders[q] = (w, rows)``, worker ``w`` holds the messages of the code's worker ``q`` at
    ``rows`` (``(round, index)`` each). A sequential scheme runs a base code over its workers, or
    over the chunks of its data, several of which one worker may hold."""
    weights: dict[int, list] = {}
    rows: dict[int, list] = {}
    for q in sorted(plan.weights):
        w, at = holders[q]
        a = plan.weights[q]
        if len(at) != a.shape[0]:
            raise ValueError(f"the code's worker {q} has {a.shape[0]} weight rows; {len(at)} positions given")
        weights.setdefault(w, []).append(a)
        rows.setdefault(w, []).extend((int(r), int(i)) for r, i in at)
    return replace(plan, weights={w: np.concatenate(a) for w, a in weights.items()},
                   rows={w: tuple(r) for w, r in rows.items()})


def merge_plans(plans: Sequence[ReducePlan]) -> ReducePlan:
    """One plan summing the decodes of ``plans`` (each with ``rows``, reading distinct messages,
    every one ``checked``: a sum of plans judged only after the reduction would need each one's
    norm, so those stay apart): the weights of each worker's rows joined, the bounds added."""
    if not plans:
        raise ValueError("merge_plans needs at least one plan")
    if any(p.rows is None or not p.checked for p in plans):
        raise ValueError("merge_plans merges checked plans with rows only")
    first = plans[0]
    if len({(p.chunks, p.length, p.dim, p.reduce_precision) for p in plans}) != 1:
        raise ValueError("merge_plans needs plans of one shape and reduce type")
    weights: dict[int, list] = {}
    rows: dict[int, list] = {}
    for p in plans:
        for w, a in p.weights.items():
            weights.setdefault(w, []).append(a)
            rows.setdefault(w, []).extend(p.rows[w])
    widest = max(plans, key=lambda p: p.error_bound)
    return replace(first, decoding=widest.decoding, weights={w: np.concatenate(a) for w, a in weights.items()},
                   rows={w: tuple(r) for w, r in rows.items()},
                   error_bound=math.fsum(p.error_bound for p in plans),
                   plain_bound=math.fsum(p.plain_bound for p in plans), summed=math.fsum(p.summed for p in plans),
                   precision=widest.precision, rtol=min(p.rtol for p in plans))


def contribution(weights: np.ndarray, values: Sequence[np.ndarray], *, chunks: int, length: int,
                 dtype=np.float32, extra: int = 0) -> np.ndarray:
    """A worker's part of a reduction: ``sum_r weights[r, c] * values[r]`` for each chunk ``c``
    (the values in their wire type, ``(length,)`` each), cast to ``dtype``; ``(chunks * length +
    extra,)``, a new writable array (the all-reduce sums into it) whose ``extra`` last slots are
    zeros (what the all-reduce carries beside the part: :mod:`gradcode.runtime.gloo`'s flags). A
    part of one message, in ``dtype``, is one product in that type (uncoded, FRC, CRC: one pass); others are summed in float64 and cast.
    :func:`~gradcode.codes.precision.error_bound` counts either rounding (the weight's own rounding
    to ``dtype`` and the product's: ``2 u_r`` of the part, within its ``reduced_by + 1``)."""
    weights = np.asarray(weights, dtype=np.float64)
    dtype = np.dtype(dtype)
    if weights.shape != (len(values), chunks):
        raise ValueError(f"weights must have shape ({len(values)}, {chunks}), got {weights.shape}")
    used = [r for r in range(len(values)) if np.any(weights[r])]
    part = np.empty(chunks * length + int(extra), dtype=dtype)
    part[chunks * length:] = 0
    if chunks == 1 and len(used) == 1 and np.asarray(values[used[0]]).dtype == dtype:
        v, w = np.asarray(values[used[0]]), weights[used[0], 0]
        if w == 1.0:
            np.copyto(part[:length], v)
        else:
            np.multiply(v, dtype.type(w), out=part[:length])
        return part
    out = np.empty(chunks * length, dtype=np.float64) if dtype != np.float64 else part[: chunks * length]
    for c in range(chunks):
        rows = [r for r in used if weights[r, c] != 0.0]
        weighted_sum(out[c * length:(c + 1) * length], [np.asarray(values[r]) for r in rows],
                     [weights[r, c] for r in rows], False)
    if out.base is not part:
        part[: chunks * length] = out
    return part
