"""A worker's message as it crosses the wire, and the compiled sums that decode messages at
memory speed.

:class:`Message` is what a runtime worker sends: the message's values in the wire type, and the
few numbers the master's error bound needs, computed by the worker where the data already is:

* ``scale`` ``S_i = sum_j sum_c |E_w[r, j, c]| ||g_j[c]||_2``: what the message summed
  (:meth:`LinearCode.message_scales <gradcode.codes.LinearCode.message_scales>`). By the triangle
  inequality ``||m_i|| <= S_i``, so with ``S_i`` the bound of :meth:`LinearCode.decode_report`
  needs no pass over the message at the master, and it holds when a worker's own terms cancel
  (``||m_i|| << S_i``), which a norm measured at the master cannot see.
* ``factor``: a power of two the values were multiplied by before the cast to a 16-bit wire type
  (:func:`to_wire`), as loss scaling does, so that ``factor * m_i`` fills the type's range: no
  element overflows (``|m_i[x]| <= ||m_i|| <= S_i``, and ``factor * S_i <= max / 2``) and as few as
  possible fall below its normal range. The decoder divides it back out (exactly: a power of two).

The compiled sums (numba): :func:`weighted_sum` forms ``sum_i c_i v_i`` in a float64 block, four
rows a pass (the block is read and written once per four rows), and returns each row's
``sum(v**2)`` in float64 if asked (the same pass); :func:`weighted_add` adds one row;
:func:`sum_squares` is the sum of squares alone. Both read float64 or float32 values, widening each element in registers: no float64 copy
of a float32 message is ever made. The sums of squares are norms for a bound, so their
reduction may be reassociated (vectorized); the weighted add is elementwise and not reordered.

Threads: the kernels release the GIL, so a long sum is cut into :func:`decode_threads` contiguous
parts summed at once (:func:`over_parts`): memory bandwidth grows with threads up to a few per
socket, and the master's decode is the serial part of a round that the workers' parallel
transfers do not hide (16 cores: 3.7x Ray's floor with one thread). One thread (the default, and
what :func:`~gradcode.runtime.worker.master_threads` gives a machine of 2 or 3 cores) runs inline.
The decoded values are the same whatever the threads (each element is summed in the same
order); the sums of squares, norms for the bound, are added part by part.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import numpy as np
from numba import njit
from numpy.lib.mixins import NDArrayOperatorsMixin

__all__ = ["Message", "Note", "as_rows", "decode_threads", "is_narrow", "over_parts", "set_decode_threads", "sum_squares",
           "to_wire", "warm_kernels", "weighted_add", "weighted_sum"]

#: types whose range is narrow enough that messages are scaled into it before the cast
_NARROW = ("float16", "bfloat16")


@dataclass(frozen=True, slots=True, eq=False)  # == compares values elementwise, as for an array
class Message(NDArrayOperatorsMixin):
    """One message of a worker: ``values`` (``(m,)``, in the wire type) ``= wire(factor * m_i)``;
    ``scale`` ``S_i`` what ``m_i`` summed, in the message's own units (module docstring);
    ``factor`` the power of two the values were scaled by (1 for wide wire types);
    ``overflows`` the backward passes behind the partials first computed for this message that
    overflowed float16's loss scale and were run again at a smaller one (the runtime records them
    per round: :attr:`~gradcode.runtime.TrainResult.overflows`).

    To numpy it is the message in its own units (``np.asarray``, arithmetic, ufuncs), so a
    scheme written for plain array payloads keeps working."""

    values: np.ndarray
    scale: float
    factor: float = 1.0
    overflows: int = 0

    @property
    def finite(self) -> bool:
        """Whether the worker's sum was finite. A worker forms ``m_i`` from partial gradients whose
        chunk norms make up ``scale``, so a NaN or infinite term makes ``scale`` non-finite; the
        values are checked again where they are used (the decoded gradient must be finite)."""
        return math.isfinite(self.scale)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(np.asarray(x) if isinstance(x, Message) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __array__(self, dtype=None, copy=None):
        """The message in its own units: the values, divided by ``factor`` (in float64) if scaled."""
        out = self.values if self.factor == 1.0 else self.values.astype(np.float64) / self.factor
        return out if dtype is None else out.astype(dtype, copy=False)

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def shape(self):
        return self.values.shape


@dataclass(frozen=True, slots=True)
class Note:
    """What a worker on the collective path tells the driver of a message it keeps
    (:mod:`gradcode.codes.reduce`): everything of a :class:`Message` but its values. ``scale`` and
    ``factor`` (and ``overflows``) as the Message's; ``dtype`` the wire type the values are held in;
    ``length`` their number (``m``). The error bound needs no more (``||m_i|| <= S_i``), so a decode is planned and
    bounded on notes; the values never leave the worker."""

    scale: float
    factor: float
    dtype: np.dtype
    length: int
    overflows: int = 0

    @classmethod
    def of(cls, message: Message) -> Note:
        return cls(float(message.scale), float(message.factor), np.dtype(message.values.dtype),
                   int(message.values.shape[-1]), int(message.overflows))

    @property
    def finite(self) -> bool:
        """Whether the worker's sum was finite (:attr:`Message.finite`)."""
        return math.isfinite(self.scale)

    @property
    def shape(self) -> tuple[int]:
        return (self.length,)


def _set_fields(obj, state) -> None:
    """Restore a frozen slotted dataclass from its pickled field values, in field order; fields a
    pickle of an earlier version does not have (added since at the end: ``overflows``) take their
    defaults. (Set on the classes after their definition: ``dataclass(slots=True)`` replaces a
    ``__setstate__`` written in the class body.)"""
    for i, f in enumerate(fields(obj)):
        object.__setattr__(obj, f.name, state[i] if i < len(state) else f.default)


# a pickle of an earlier version (a checkpoint's held messages) restores with today's defaults
Message.__setstate__ = Note.__setstate__ = _set_fields


def as_rows(msgs) -> np.ndarray:
    """One worker's messages as an ``(r, m)`` array of their values in the message's own units:
    ``msgs`` an array (``(r, m)`` or ``(m,)``), a :class:`Message` or a sequence of them (scaled
    values are divided by their factor, in float64)."""
    if isinstance(msgs, Message):
        msgs = (msgs,)
    if isinstance(msgs, (list, tuple)) and msgs and all(isinstance(x, Message) for x in msgs):
        return np.stack([np.asarray(x) for x in msgs])
    return np.atleast_2d(np.asarray(msgs))


def is_narrow(dtype) -> bool:
    """Whether messages in ``dtype`` are scaled into its range before the cast (16-bit types)."""
    return dtype is not None and np.dtype(dtype).name in _NARROW


def to_wire(values: np.ndarray, scale: float, dtype) -> Message:
    """``values`` (one message, computed in float32 or float64) cast to ``dtype`` (None: kept),
    scaled first by the largest power of two that keeps ``factor * scale`` within half the wire
    type's maximum when it is a 16-bit type, or when ``scale`` alone would overflow it."""
    if dtype is None or values.dtype == dtype:
        return Message(values, float(scale))
    exponent = 0
    big = float(_finfo_max(dtype)) / 2
    if math.isfinite(scale) and scale > 0 and (is_narrow(dtype) or scale > big):
        exponent = min(max(math.floor(math.log2(big / scale)), -1000), 1000)
    with np.errstate(over="ignore", under="ignore"):
        # ldexp: exact, and right where 2**exponent itself is outside the values' type (bfloat16)
        scaled = values if exponent == 0 else np.ldexp(values, exponent)
        return Message(scaled.astype(dtype), float(scale), 2.0**exponent)


def _finfo_max(dtype) -> float:
    dt = np.dtype(dtype)
    if dt.name == "bfloat16":
        return 3.3895313892515355e38
    return float(np.finfo(dt).max)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _sum_squares(v):
    s = 0.0
    for i in range(v.size):
        x = np.float64(v[i])
        s += x * x
    return s


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _add_into(out, v, c, first, squares):
    s = 0.0
    if first and squares:
        for i in range(v.size):
            x = np.float64(v[i])
            out[i] = c * x
            s += x * x
    elif first:
        for i in range(v.size):
            out[i] = c * np.float64(v[i])
    elif squares:
        for i in range(v.size):
            x = np.float64(v[i])
            out[i] += c * x
            s += x * x
    else:
        for i in range(v.size):
            out[i] += c * np.float64(v[i])
    return s


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _add4_into(out, v0, v1, v2, v3, c, first, squares):
    # four rows a pass (coefficients c[0..3]): the output block is read and written once for four
    # rows, not four times
    c0, c1, c2, c3 = c[0], c[1], c[2], c[3]
    s0 = s1 = s2 = s3 = 0.0
    if squares:
        for i in range(out.size):
            x0 = np.float64(v0[i])
            x1 = np.float64(v1[i])
            x2 = np.float64(v2[i])
            x3 = np.float64(v3[i])
            acc = c0 * x0 + c1 * x1 + c2 * x2 + c3 * x3
            out[i] = acc if first else out[i] + acc
            s0 += x0 * x0
            s1 += x1 * x1
            s2 += x2 * x2
            s3 += x3 * x3
    elif first:
        for i in range(out.size):
            out[i] = c0 * np.float64(v0[i]) + c1 * np.float64(v1[i]) + c2 * np.float64(v2[i]) + c3 * np.float64(v3[i])
    else:
        for i in range(out.size):
            out[i] += c0 * np.float64(v0[i]) + c1 * np.float64(v1[i]) + c2 * np.float64(v2[i]) + c3 * np.float64(v3[i])
    return s0, s1, s2, s3


def weighted_sum(out: np.ndarray, rows: list, coefs: list, squares: bool) -> list[float]:
    """``out = sum_i coefs[i] * rows[i]`` in float64 (``out`` zeroed when there are no rows),
    four rows a pass; returns each row's ``sum(v**2)`` (float64) when ``squares``, else zeros."""
    rows = [v if v.dtype == np.float64 or v.dtype == np.float32 else v.astype(np.float32) for v in rows]
    coefs = np.asarray(coefs, dtype=np.float64)
    sq = [0.0] * len(rows)
    if not rows:
        out[:] = 0.0
    first = True
    for k in range(0, len(rows) - 3, 4):
        sq[k:k + 4] = _add4_into(out, rows[k], rows[k + 1], rows[k + 2], rows[k + 3], coefs[k:k + 4], first, squares)
        first = False
    for k in range(len(rows) - len(rows) % 4, len(rows)):
        sq[k] = _add_into(out, rows[k], float(coefs[k]), first, squares)
        first = False
    return sq if squares else [0.0] * len(rows)


def sum_squares(v: np.ndarray) -> float:
    """``sum(v**2)`` accumulated in float64 (float64 or float32 ``v``; others are widened)."""
    if v.dtype != np.float64 and v.dtype != np.float32:
        v = v.astype(np.float64)
    return float(_sum_squares(v))


def weighted_add(out: np.ndarray, v: np.ndarray, c: float, first: bool, squares: bool) -> float:
    """``out = c * v`` (``first``) or ``out += c * v``, each product and sum in float64 and stored
    in ``out``'s type (float64, or float32 for a worker's message); returns ``sum(v**2)`` (float64)
    when ``squares``, else 0. ``v`` float64 or float32 is read as it is; 16-bit values (float16,
    ``ml_dtypes.bfloat16``, which numba cannot read) are widened one block at a time by the
    caller's slicing. Long rows are summed in :func:`decode_threads` parts at once."""
    if v.dtype != np.float64 and v.dtype != np.float32:
        v = v.astype(np.float32)  # exact for both 16-bit types
    c = float(c)
    s = sum(over_parts(out.size, lambda lo, hi: _add_into(out[lo:hi], v[lo:hi], c, first, squares)))
    return float(s) if squares else 0.0


#: threads of the decode's sums (:func:`set_decode_threads`), and the pool that runs them
_threads = 1
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
#: the smallest part worth a thread (1 MB of float64: below it the hand-off costs more than it saves)
_MIN_PART = 1 << 17


def decode_threads() -> int:
    """Threads the decode's sums use (1: inline)."""
    return _threads


def set_decode_threads(threads: int) -> int:
    """Set the decode's threads; returns the previous setting (to restore it)."""
    global _threads, _pool, _pool_size
    previous, _threads = _threads, max(1, int(threads))
    if _threads > _pool_size:
        if _pool is not None:
            _pool.shutdown(wait=False)
        _pool = ThreadPoolExecutor(max_workers=_threads, thread_name_prefix="gradcode-decode")
        _pool_size = _threads
    return previous


def over_parts(n: int, fn) -> list:
    """``[fn(lo, hi), ...]`` over contiguous parts of ``range(n)``: one part run inline with one
    thread or a short range, else :func:`decode_threads` parts of at least ``_MIN_PART`` each, run
    at once (``fn`` must release the GIL: the compiled kernels do)."""
    parts = min(_threads, max(1, n // _MIN_PART))
    if parts <= 1:
        return [fn(0, n)]
    bounds = [n * i // parts for i in range(parts + 1)]
    return list(_pool.map(lambda i: fn(bounds[i], bounds[i + 1]), range(parts)))


def warm_kernels() -> None:
    """Make the compiled sums ready for every type they read (float64 and float32, writable and
    read-only, as messages arrive from Ray's object store) and write (float64, and float32 for a
    worker's combined message), so that no round pays for numba's
    first call (a compile, or a load from its cache)."""
    for dtype in (np.float64, np.float32):
        for writeable in (True, False):
            v = np.zeros(2, dtype=dtype)
            v.flags.writeable = writeable
            for first, squares in ((True, True), (False, False), (True, False)):
                weighted_add(np.zeros(2), v, 1.0, first, squares)
                if dtype is np.float32 and not squares:  # a worker's float32 message (its _combine)
                    weighted_add(np.zeros(2, dtype=np.float32), v, 1.0, first, squares)
                weighted_sum(np.zeros(2), [v] * 4, [1.0] * 4, squares)
            sum_squares(v)
