"""How precise a decode is: the rounding-error bound of what arrived, and when it is refused.

A decoding's checks (:class:`~gradcode.codes.base.LinearCode`) are of the *pattern*; each decode is
also checked against the *data* it sums. Message ``i`` carries a rounding error ``||delta_i|| <= u
||m_i|| + nnz_i u_c S_i``: ``u`` the unit roundoff of the precision the messages crossed the wire
in (``2^-53``, ``2^-24``, ``2^-11``, ``2^-8`` for float64, float32, float16, bfloat16), for the
cast to it; ``nnz_i`` the terms of the worker's weighted sum (plus one: its coefficients are
rounded to the partials' type), ``S_i`` what they add up to in norm
(:meth:`~gradcode.codes.base.LinearCode.message_scales`: sent with each
:class:`~gradcode.codes.messages.Message`, as the runtime's workers do, or passed as ``scales=``;
without them ``||m_i||`` stands in, which assumes a worker's terms do not cancel among themselves)
and ``u_c`` the roundoff it was computed in (the wire's, or float32's if that is finer: 16-bit
messages are computed in float32 and cast, as torch's autocast accumulates). The coefficients
themselves are a float64 solve: ``A B_F - T`` is not exactly 0, and the decode adds ``(A B_F - T)
g``, bounded with ``||g_j[c]|| <= S_i / |B_i[jc]|`` from any received row ``i`` that holds
coordinate ``jc``. The decoded chunk ``c`` is ``sum_i A[c, i] m_i``, so its error is at most
``e_c = sum_i |A[c, i]| ||delta_i||`` plus the master's float64 sum, and

    error_bound = sqrt(sum_c e_c^2)          (chunks are disjoint coordinates of the gradient)

is relative to *what was summed* (the received messages, weighted by the decoding coefficients),
not to the answer. Near an optimum the partial gradients cancel: the answer is far smaller than
what was summed, and ``error_bound / ||decoded||`` grows although the pattern is well
conditioned.

The acceptance rule, one for every path (:func:`accept_bound`): a decode whose bound is within
``rtol`` of the result (default :data:`DEFAULT_RTOL` by precision: 1e-5 for float64, 1e-3 for
float32, 5e-2 for float16, 2e-1 for bfloat16) is accepted; one beyond ``rtol`` but within
:data:`PLAIN_SUM_SLACK` times the error of a plain sum of the same partial gradients in that
precision is accepted *and flagged*: what no method could beat (an uncoded sum near an optimum)
is not refused, but :class:`Decoded` says ``within_rtol=False`` and a training run counts such
rounds (``TrainResult.loose_decodes``, in its summary), through :func:`loose_decodes`; anything
else is refused (:class:`ImpreciseDecodeError`). With ``strict=True`` every decode beyond
``rtol`` is refused, and so is a bound that is only an estimate. More received rows give smaller
coefficients (a runtime driver waits for more workers and tries again).

A bound that always holds, or says it is not one: with each message's scale ``S_i`` (sent with a
:class:`~gradcode.codes.messages.Message`, as every runtime worker does, or passed as ``scales=``)
the bound holds whatever the data. Without it the message's own norm stands in, which is only an
estimate when a worker's terms cancel (their rounding is of the terms, not of their small sum):
:class:`Decoded` then says ``guaranteed=False``, and ``strict=True`` refuses such a decode.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass

import numpy as np

from gradcode._validation import check_real
from gradcode.codes.decoding import Decoding
from gradcode.errors import NotDecodableError

__all__ = ["DEFAULT_RTOL", "PLAIN_SUM_SLACK", "UNDERFLOW", "UNIT_ROUNDOFF", "WIRE_DTYPES", "Decoded",
           "ImpreciseDecodeError", "LooseDecode", "accept_bound", "bound_decode", "decode_precision", "error_bound",
           "loose_decodes", "note_loose", "partial_bounds", "row_errors", "wire_dtype", "wire_precision"]

_EPS = float(np.finfo(np.float64).eps)
#: unit roundoff of each wire precision messages may arrive in
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
#: the types messages may cross the wire in, by name (:func:`wire_dtype`)
WIRE_DTYPES = ("float32", "float64", "float16", "bfloat16")
#: half the smallest subnormal of each wire precision: the largest error of rounding a value below
#: the type's normal range, whatever its size (the absolute term of the decode's bound)
UNDERFLOW = {"float64": 2.0**-1075, "float32": 2.0**-150, "float16": 2.0**-25, "bfloat16": 2.0**-134}
#: a decode within this many times the error of a plain sum of the partial gradients is accepted
#: whatever its relative bound (:func:`bound_decode`)
PLAIN_SUM_SLACK = 4.0
#: default acceptance tolerance on a decode's error bound relative to the decoded gradient, by the
#: precision of the messages: float64 keeps the README's 1e-5. The bound is a worst case (errors
#: of all rows aligned; a typical error is about sqrt(rows) smaller), so for 16-bit types, whose
#: own roundoff is 5e-4 (float16) and 4e-3 (bfloat16), a coded decode of n = 40 workers already
#: bounds at a few percent: 5e-2 and 2e-1 accept those (still inside a mini-batch's noise) and
#: refuse what is off by its own size
DEFAULT_RTOL = {"float64": 1e-5, "float32": 1e-3, "float16": 5e-2, "bfloat16": 2e-1}


class ImpreciseDecodeError(NotDecodableError):
    """A decode whose rounding-error bound, relative to the decoded gradient, exceeds ``rtol``
    (module docstring, "Precision of what arrived"). ``relative_bound``, ``precision`` and ``rtol``
    say by how much; more received rows (smaller coefficients), a wider wire type or a code with a
    smaller amplification decode it."""

    def __init__(self, message: str, *, relative_bound: float, precision: str, rtol: float):
        super().__init__(message)
        self.relative_bound, self.precision, self.rtol = relative_bound, precision, rtol


def wire_dtype(dtype) -> np.dtype:
    """The numpy dtype of a wire type: one of :data:`WIRE_DTYPES` by name (``"bfloat16"`` is
    ``ml_dtypes.bfloat16``) or such a dtype; ``ValueError`` naming the choices otherwise. The one
    place a wire type's name becomes a dtype."""
    name = dtype if isinstance(dtype, str) else getattr(dtype, "name", None) or np.dtype(dtype).name
    if name not in WIRE_DTYPES:
        raise ValueError(f"wire_dtype must be one of {', '.join(WIRE_DTYPES)}; got {dtype!r}")
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:  # pragma: no cover - ml_dtypes comes with gradcode[torch]
            raise ImportError("wire_dtype='bfloat16' needs ml_dtypes: pip install ml_dtypes") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def wire_precision(dtype) -> str:
    """The name (a key of :data:`UNIT_ROUNDOFF`) of the precision of ``dtype``: a numpy dtype or
    anything ``np.dtype`` takes, ``ml_dtypes.bfloat16``, or one of the names; integers are exact
    (``"float64"``). ``ValueError`` for anything else."""
    if isinstance(dtype, str) and dtype in UNIT_ROUNDOFF:
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"precision must be one of {sorted(UNIT_ROUNDOFF)} or a numpy float dtype, got"
                         f" {dtype!r}") from None
    if dt.name in UNIT_ROUNDOFF:
        return dt.name
    if dt.kind in "iub":
        return "float64"
    if dt.kind == "f" and dt.itemsize > 8:  # long double: at least float64's precision
        return "float64"
    raise ValueError(f"precision must be one of {sorted(UNIT_ROUNDOFF)} or a numpy float dtype, got {dt}")


@dataclass(frozen=True)
class Decoded:
    """A decode and its checked error (:meth:`LinearCode.decode_report`): ``gradient`` (float64,
    length ``dim``); ``error_bound``, a bound on ``||gradient - sum_j g_j||_2`` from the messages'
    rounding in ``precision``; ``relative_bound = error_bound / ||gradient||``; ``summed``, the
    norm of what the decode summed (``sqrt(sum_c (sum_i |A[c, i]| ||m_i||)^2)``: ``summed /
    ||gradient||`` is how much the terms cancelled); ``plain_bound``, the error of adding the
    partial gradients themselves in ``precision`` (the floor any method has; NaN for an operator
    code's decode); ``decoding``, the coefficients used (None for an operator code, which has
    none: :mod:`gradcode.codes.base`); ``rtol``, the tolerance on ``relative_bound`` it was
    accepted under.

    ``guaranteed``: whether ``error_bound`` holds whatever the data, i.e. every message used came
    with what it summed (a :class:`~gradcode.codes.messages.Message`'s scale, or ``scales=``);
    False when some message's own norm stood in for it, which assumes that worker's terms did not
    cancel among themselves: the bound is then an estimate (a worker whose terms cancel can err by
    far more). ``within_rtol``: whether ``relative_bound <= rtol``; False for a decode accepted
    only because it is no worse than :data:`PLAIN_SUM_SLACK` times a plain sum of the partial
    gradients (the acceptance rule, module docstring; ``strict=True`` refuses those instead)."""

    gradient: np.ndarray
    error_bound: float
    relative_bound: float
    summed: float
    plain_bound: float
    precision: str
    decoding: Decoding | None
    rtol: float = math.nan
    guaranteed: bool = True
    within_rtol: bool = True


def decode_precision(dtypes, precision, rtol, code_rtol=None) -> tuple[str, float]:
    """``(precision, tolerance)`` of a decode of messages of ``dtypes``: the coarsest of their
    types and ``precision`` (a wire type named by the caller), and ``rtol``, else ``code_rtol``
    (the code's :attr:`~gradcode.codes.base.LinearCode.decode_rtol`), else :data:`DEFAULT_RTOL` of
    that precision."""
    prec = max((wire_precision(t) for t in dtypes), key=UNIT_ROUNDOFF.get, default="float64")
    if precision is not None:
        named = wire_precision(precision)
        if not (isinstance(precision, str) and precision in UNIT_ROUNDOFF) and np.dtype(precision).kind in "iub":
            # integer *arrays* are exact; an integer *wire type* is not one messages cross in
            raise ValueError(f"precision names the float type the messages crossed the wire in: one of"
                             f" {sorted(UNIT_ROUNDOFF)} or a float dtype, got {precision!r}")
        prec = max(prec, named, key=UNIT_ROUNDOFF.get)
    if rtol is None:
        rtol = code_rtol
    return prec, DEFAULT_RTOL[prec] if rtol is None else check_real("rtol", rtol, minimum=0.0, strict_min=True)


def partial_bounds(code, ids: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """A bound on ``||g_j[c]||`` for every (partition, chunk) coordinate: row ``i`` sums
    ``|B_i[jc]| ||g_j[c]||`` to at most ``S_i``, so ``||g_j[c]|| <= S_i / |B_i[jc]|`` for each
    received row that holds it (infinite for coordinates no received row holds; ``A B_F - T``
    is 0 there)."""
    B = code._sparse_rows()[4][ids]
    per_nz = np.repeat(sums, np.diff(B.indptr)) / np.abs(B.data)
    out = np.full(B.shape[1], np.inf)
    np.minimum.at(out, B.indices, per_nz)
    out[~np.isfinite(out)] = 0.0
    return out


def bound_decode(code, sol: Decoding, gradient, size: float, sums, prec: str, tol: float, factors, m: int, *,
                 guaranteed: bool = True, strict: bool = False) -> Decoded:
    """The error bound of a decode (module docstring) and its acceptance: row ``i`` errs by at
    most ``u S_i + sqrt(m) eta / f_i + (nnz_i + 1) (u_c S_i + sqrt(m) eta_c)`` (the cast to
    the wire type of the values scaled by ``f_i``, whose elements below its normal range err by
    up to ``eta``, half its smallest subnormal, whatever their size; the worker's sum, in
    ``u_c = min(u, float32's)``, of terms whose norms add to ``S_i``, its coefficients rounded
    to that type too) plus the master's float64 sum; chunk ``c`` by ``sum_i |A[c, i]|`` times
    that, plus the coefficients' residual times the partial gradients' bounded norms. Accepted
    when the bound is at most ``tol`` of the result, or at most :data:`PLAIN_SUM_SLACK` times
    ``plain_bound``, the same bound for adding the partial gradients themselves in this
    precision (from the same bounded norms ``||g_j||``): a decode is never refused for being as
    good as a plain sum, which every trainer's gradient is (near an optimum such a sum cancels
    too, and its relative error grows for any method). ``guaranteed``: whether every row's
    ``S_i`` was given rather than measured (:class:`Decoded`); ``strict``: refuse a bound that is
    not guaranteed or not within ``tol`` (:func:`accept_bound`)."""
    bound, plain, summed = error_bound(code, sol, sums, prec, factors, m)
    rel = accept_bound(sol, bound, plain, summed, size, prec, tol, strict=strict, guaranteed=guaranteed)
    return Decoded(gradient, bound, rel, summed, plain, prec, sol, tol, guaranteed, rel <= tol)


def row_errors(sums, terms, factors, prec: str, m: int, rows: int) -> np.ndarray:
    """A bound on each received message's own rounding error, ``||m_i~ - m_i||`` (module
    docstring): its cast to the wire type ``u S_i`` (plus the master's float64 sum over ``rows``
    rows), values scaled by ``f_i`` below the wire type's normal range ``sqrt(m) eta / f_i``, and
    the worker's sum of ``terms_i`` terms with its coefficients rounded, ``(terms_i + 1) (u_c S_i
    + sqrt(m) eta_c)`` in the precision it computed in. What :func:`error_bound` weights by the
    decoding coefficients, and :mod:`gradcode.codes.verify` by the checks."""
    u = UNIT_ROUNDOFF[prec]
    computed = "float32" if u > UNIT_ROUNDOFF["float32"] else prec
    root_m = math.sqrt(m)
    with np.errstate(over="ignore", invalid="ignore"):
        return ((u + rows * _EPS) * sums + root_m * UNDERFLOW[prec] / factors
                + (np.asarray(terms) + 1) * (UNIT_ROUNDOFF[computed] * sums + root_m * UNDERFLOW[computed]))


def error_bound(code, sol: Decoding, sums, prec: str, factors, m: int, *, reduced_by: int = 0,
                reduce_precision: str = "float64") -> tuple[float, float, float]:
    """``(error bound, plain-sum bound, summed)`` of a decode with coefficients ``sol`` of rows
    that summed ``sums`` (:func:`bound_decode`), computed before any value is read: from the
    scales alone, as the collective path needs (:mod:`gradcode.codes.reduce`).

    ``reduced_by``: the decoded sum is formed not by one float64 sum but by ``reduced_by``
    processes, each adding its own rows in float64, casting its part to ``reduce_precision`` and
    all-reducing the parts in that precision (a ring adds ``reduced_by - 1`` times per element):
    each row's error grows by ``(reduced_by + 1) u_r S_i`` (the part's product and cast, the
    weight's own rounding when the product is formed in ``u_r``, and the ring's additions, each at
    most ``u_r`` of a partial sum no larger than ``sum_i |A[c, i]| S_i``). The plain sum it is
    compared with is then the one data-parallel training forms: the partial gradients all-reduced
    the same way (DDP's float32 ring), so an uncoded reduction is never refused for the ring's own
    rounding."""
    u = UNIT_ROUNDOFF[prec]
    u_c = min(u, UNIT_ROUNDOFF["float32"])
    absA = np.abs(sol.coefficients)
    terms = sol.row_terms if sol.row_terms is not None else np.ones(absA.shape[1])
    L = code.chunks
    with np.errstate(over="ignore", invalid="ignore"):
        row_error = row_errors(sums, terms, factors, prec, m, absA.shape[1])
        if reduced_by:
            row_error = row_error + (reduced_by + 1) * UNIT_ROUNDOFF[reduce_precision] * sums
        per_chunk = absA @ row_error
        plain = 0.0
        if sol.row_ids is not None:
            gb = partial_bounds(code, sol.row_ids, sums)  # ||g_j[c]|| bounds, (k L,)
            if sol.residual is not None:
                per_chunk = per_chunk + sol.residual @ gb
            # the same bound for a plain sum of the k partials: each cast, summed by the master,
            # its one term (and unit coefficient) rounded at the worker
            per_partial = u + code.k * _EPS + 2 * u_c
            if reduced_by:
                per_partial += (reduced_by + 1) * UNIT_ROUNDOFF[reduce_precision]
            plain = per_partial * float(np.linalg.norm(gb.reshape(code.k, L).sum(axis=0)))
        bound = float(np.sqrt(per_chunk @ per_chunk))
        summed = float(np.linalg.norm(absA @ sums))
    return bound, plain, summed


@dataclass(frozen=True)
class LooseDecode:
    """A decode accepted beyond its tolerance, as no worse than a plain sum (:func:`accept_bound`):
    its ``relative_bound`` and the ``rtol`` it exceeds."""

    relative_bound: float
    rtol: float


_LOOSE: contextvars.ContextVar[list | None] = contextvars.ContextVar("gradcode_loose_decodes", default=None)


@contextlib.contextmanager
def loose_decodes():
    """Collect the decodes accepted beyond their tolerance while the block runs (in this thread):
    yields a list that :func:`accept_bound` (and :func:`note_loose`) append a :class:`LooseDecode`
    to. A training driver wraps each round's close in it and records what it caught, so a
    gradient no better than a plain sum is counted, never silent."""
    token = _LOOSE.set([])
    try:
        yield _LOOSE.get()
    finally:
        _LOOSE.reset(token)


def note_loose(relative_bound: float, rtol: float) -> None:
    """Record a decode accepted beyond ``rtol`` in the enclosing :func:`loose_decodes` (if any):
    for acceptances judged elsewhere (a collective reduction's members) and reported back."""
    caught = _LOOSE.get()
    if caught is not None:
        caught.append(LooseDecode(float(relative_bound), float(rtol)))


def accept_bound(sol: Decoding, bound: float, plain: float, summed: float, size: float, prec: str,
                 tol: float, *, strict: bool = False, guaranteed: bool = True) -> float:
    """The acceptance rule, stated once, for a decoded gradient of norm ``size``: returns ``bound /
    size`` when it is at most ``tol``; a decode beyond ``tol`` whose bound is at most
    :data:`PLAIN_SUM_SLACK` times ``plain`` (no worse than adding the partial gradients themselves
    in this precision, which near an optimum no method beats) is accepted too, but flagged: it is
    noted in the enclosing :func:`loose_decodes` and :class:`Decoded` says ``within_rtol=False``.
    Anything else raises :class:`ImpreciseDecodeError`. ``strict``: refuse every decode beyond
    ``tol``, and a bound that is not ``guaranteed`` (some message's scale was measured from its own
    norm, an estimate), whatever its size."""
    u = UNIT_ROUNDOFF[prec]
    if size > 0:
        rel = bound / size
    else:
        rel = 0.0 if bound == 0 else math.inf
    if strict and not guaranteed:
        raise ImpreciseDecodeError(
            f"decoded gradient's error bound ({rel:.1e} of its norm) is an estimate, not a guarantee: some messages"
            " came without what their worker summed (no Message scale, no scales=), so their own norm stood in,"
            " which assumes a worker's terms did not cancel; strict decoding refuses it. Send the scales"
            " (LinearCode.message_scales, or Messages as the runtime's workers do) or decode without strict",
            relative_bound=rel, precision=prec, rtol=tol)
    within = rel <= tol
    if not within and not strict and bound <= PLAIN_SUM_SLACK * plain:
        note_loose(rel, tol)
        return rel
    if not within:
        cancel = summed / size if size > 0 else math.inf
        wider = [p for p in ("float32", "float64") if UNIT_ROUNDOFF[p] < u]
        plain_note = (f" and {bound / plain if plain else math.inf:.2g}x the error of adding the partial"
                      f" gradients themselves in {prec}")
        raise ImpreciseDecodeError(
            f"decoded gradient not trusted in {prec}: its rounding-error bound is {rel:.1e} of its norm"
            f" (> rtol={tol:g}){plain_note if not strict else ' (strict: no plain-sum allowance)'};"
            f" the decoding coefficients amplify the messages'"
            f" rounding {sol.amplification:.2g}x and the summed terms cancel {cancel:.2g}x (what was"
            f" summed over the result's norm). Decode with more workers' messages (smaller"
            f" coefficients)" + (f", send messages as {' or '.join(wider)}" if wider else "")
            + ", or use a code with a smaller amplification (frc, uncoded, commfr)",
            relative_bound=rel, precision=prec, rtol=tol,
        )
    return rel
