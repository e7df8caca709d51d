"""The linear code contract shared by every gradient code, and the generic decoder.

One job computes one gradient ``g = sum_j g_j`` over ``k`` data partitions. Worker ``w`` stores
partitions ``placement[w]`` and computes their partial gradients ``g_j`` (sums of per-sample
gradients). Each ``g_j`` is cut into ``L = chunks`` pieces of length ``m = ceil(d / L)`` (the last
one zero-padded), and the worker sends messages one after another:

    message r of worker w  =  sum_{j in placement[w]} sum_{c < L}  E_w[r, j, c] * g_j[c]     (m,)

A code is therefore fully described by its placement and its encoding tensors ``E_w`` of shape
``(R_w, len(placement[w]), L)``. The master holds a prefix of each worker's stream, written as a
*pattern* ``{w: r_w}`` (``r_w`` leading messages of ``w``), and decodes

    chunk c of g  =  sum_{received rows i} A[c, i] * message_i

where ``A`` solves ``A @ M = T``: ``M`` stacks the received rows of the ``E_w`` scattered over the
``k * L`` (partition, chunk) coordinates and ``T[c, j * L + c] = 1``. The generic decoder finds the
minimum-norm ``A`` by SVD, decides decodability by rank and residual (never by counting workers),
reports the condition number of the solve, refuses a solve whose condition number exceeds
``max_condition`` (default ``1e10``: a relative error of about ``cond * eps`` is then ~1e-6 for
float64 messages), and caches ``A`` per pattern in a bounded LRU cache. Codes may supply a faster
structured solve through the ``_fast_solve`` hook; tests check it agrees with the generic one.

No answer is trusted unchecked. Whichever solve produced ``A``, it is checked against the real
received rows ``B_F`` of the encoders (``LinearCode._check_answer``): the residual
``||A B_F - T|| / ||T||`` and the forward-error *amplification* ``max_c sum_i |A[c, i]|
||B_F[i]||_1 / k``, which bounds the decoded gradient's relative error by about
``amplification * eps`` and, unlike the condition number of a structured solve, sees the size of
the encoder rows. A structured answer that fails falls back to the generic solve; a generic
answer that fails is refused. A structured decoder may always refuse on its own.

Coefficients are always computed in float64; messages may be float64, float32, float16 or
bfloat16 (``ml_dtypes.bfloat16`` arrays), and the decoded gradient is float64.

Precision of what arrived: each decode is also checked against the *data* it sums, its rounding
error bounded relative to what was summed (:mod:`gradcode.codes.precision`).

Codes too large to hold (CommFR over an LDPC code of length 10,000: its dense generator, every
worker's ``E_w`` and the coefficient matrices of its decodings would take gigabytes) give their
encoders as :class:`LazyEncoders`, built when a worker's is asked for, and decode by an operator of
their own (peeling) instead of coefficients ``A``: :meth:`LinearCode.decoding` and everything
built on the dense rows then refuse by name, while :meth:`~LinearCode.encode`,
:meth:`~LinearCode.decode`, :meth:`~LinearCode.can_decode`, :meth:`~LinearCode.check_decodable`
and the decode rule work as for any code.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
from scipy import sparse

from gradcode._validation import check_int, check_real
from gradcode.codes.cache import DecodingCache
from gradcode.codes.decoding import (
    Decoding,
    NonFiniteMessageError,
    Pattern,
    Refusal,
    combine,
    items,
    non_finite,
    received_scales,
    unpack,
)
from gradcode.codes.linalg import RESIDUAL_TOL, encode_without_padding, lstsq_coefficients
from gradcode.codes.precision import Decoded, bound_decode, decode_precision
from gradcode.codes.rules import DecodeRule, GenericRule
from gradcode.errors import NotDecodableError
from gradcode.registry import Registry, package_modules

#: Default refusal threshold on the condition number of a decoding solve.
DEFAULT_MAX_CONDITION = 1e10
_EPS = float(np.finfo(np.float64).eps)
#: encoder rows at least this dense are kept as a dense array for the decoding check's product,
#: up to this many entries (25M: 200 MB)
DENSE_ROWS, DENSE_ROWS_MAX = 0.25, 25_000_000
#: every code family, by name (``gradcode codes`` lists them; ``make_code`` builds them)
CODES: Registry = Registry("code", modules=package_modules(__file__))


class LazyEncoders(Sequence):
    """Every worker's encoder ``E_w`` (``(R_w, len(placement[w]), L)``), built by ``build(w)`` when
    asked for instead of held: for codes whose encoders together are too large (module
    docstring). ``messages[w]`` is ``R_w``. The most recent few are kept; ``build`` must pickle
    (codes travel), e.g. a module-level function with ``functools.partial``."""

    KEEP = 8

    def __init__(self, messages: Sequence[int], build: Callable[[int], np.ndarray]):
        self.messages = tuple(int(r) for r in messages)
        self.build = build
        self._kept: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.messages)

    def __getitem__(self, w):
        if isinstance(w, slice):
            return [self[i] for i in range(*w.indices(len(self)))]
        w = range(len(self))[w]
        with self._lock:
            E = self._kept.pop(w, None)
        if E is None:
            E = np.array(self.build(w), dtype=np.float64)
            if E.ndim != 3 or E.shape[0] != self.messages[w]:
                raise ValueError(f"the encoder built for worker {w} has shape {E.shape}; expected"
                                 f" ({self.messages[w]}, partitions, chunks)")
            E.flags.writeable = False
        with self._lock:
            self._kept[w] = E  # most recent last
            while len(self._kept) > self.KEEP:
                del self._kept[next(iter(self._kept))]
        return E

    def __getstate__(self):
        return {"messages": self.messages, "build": self.build}

    def __setstate__(self, state):
        self.__init__(state["messages"], state["build"])


def check_n_s(n, s) -> tuple[int, int]:
    """``(n, s)`` checked, as every code with ``n`` workers tolerating ``s`` stragglers takes them:
    integers with ``n >= 1`` and ``0 <= s < n`` (at least one worker must finish); a
    ``ValueError``/``TypeError`` naming the argument otherwise. For a new code's constructor."""
    n = check_int("n", n, minimum=1)
    s = check_int("s", s, minimum=0)
    if s >= n:
        raise ValueError(f"s must be < n (at least one worker must finish); got s={s}, n={n}")
    return n, s


def register(name: str):
    """Class decorator adding a code family to :data:`CODES` under ``name`` (``cls.name``)."""
    return CODES.register(name)


def available_codes() -> list[str]:
    """The registry names accepted by :func:`make_code`, sorted."""
    return CODES.names()


def make_code(name: str, /, **params) -> LinearCode:
    """Build the code registered as ``name`` with its keyword parameters, e.g.
    ``make_code("crc", n=12, s=2, seed=0)``; unknown names and parameters get one error listing
    what is accepted."""
    return CODES.make(name, **params)


def code_info(name: str) -> dict[str, Any]:
    """Registry entry ``name``: its class, summary line and constructor parameters (for the CLI)."""
    return CODES.info(name)


class LinearCode:
    """Base class of every gradient code (see the module docstring for the math).

    Subclasses build their placement and encoding tensors, validate their parameters and call
    ``super().__init__``. Instances are immutable: arrays are read-only, and once the outermost
    constructor returns, assigning or deleting an attribute raises ``AttributeError`` (only the
    decoding caches and the ``max_condition`` threshold change; the cache is guarded by a lock,
    so a code can be shared by threads).

    Stragglers of a round: :meth:`straggling` says, from the number of leading messages each
    worker had delivered when the round closed, which workers count as stragglers (the drivers'
    straggler matrix and arrival table use it). By default a worker is a straggler unless it
    delivered its whole task result (all ``R_w`` messages); codes whose master stops the workers
    as soon as it can decode (AGC, whose active workers need only ``r_s <= L`` messages) override
    it, and grouped codes apply their groups' rules.
    """

    name: ClassVar[str] = "?"
    #: what may change after construction: the decoding caches, their counters, lazily built
    #: solvers, and the ``max_condition`` threshold (whose setter clears the cache)
    _MUTABLE: ClassVar[frozenset] = frozenset(
        {"_cache", "_rows_cache", "_solver", "max_condition", "_max_condition", "decode_rtol", "_decode_rtol"}
    )
    #: one line for listings (``gradcode codes``)
    summary: ClassVar[str] = ""
    #: small valid parameter sets of a registered code, the first with n = 4 where the family
    #: allows: the contract suite (``tests/test_code_contract.py`` and the tests that run every
    #: registered code) builds and checks each, so a code that registers joins it with no test
    #: edited; a registered code must declare its own
    examples: ClassVar[tuple[dict, ...]] = ()
    #: decodings kept per code (least recently used dropped first; 0: none)
    CACHE_SIZE: ClassVar[int] = 4096
    #: codes this one decodes through (clusters, groups, an inner code); settings such as
    #: ``max_condition`` are passed on to them
    subcodes: tuple = ()

    def __init__(
        self,
        *,
        n: int,
        placement: Iterable[Iterable[int]],
        encoders: Iterable[np.ndarray],
        params: Mapping[str, Any],
        k: int | None = None,
        partition_sizes: Iterable[float] | None = None,
        chunks: int = 1,
        tolerance: int,
        exact: bool = True,
        straggler_prefix: int = 0,
    ):
        self._n = check_int("n", n, minimum=1)
        placement = tuple(tuple(int(j) for j in p) for p in placement)
        if len(placement) != n:
            raise ValueError(f"placement must list {n} workers, got {len(placement)}")
        k = 1 + max((max(p) for p in placement if p), default=-1) if k is None else k
        self._k = check_int("k", k, minimum=1)
        for w, p in enumerate(placement):
            if len(set(p)) != len(p) or any(not 0 <= j < self._k for j in p):
                raise ValueError(f"placement[{w}] = {p} must hold distinct partitions in [0, {k})")
        self._placement = placement
        self._chunks = check_int("chunks", chunks, minimum=1)
        if isinstance(encoders, LazyEncoders):
            self._init_lazy(encoders, placement)
        else:
            self._init_encoders(encoders, placement)
        if partition_sizes is None:
            sizes = np.full(self._k, 1.0 / self._k)
        else:
            sizes = np.array(partition_sizes, dtype=np.float64)
            if sizes.shape != (self._k,) or (sizes <= 0).any() or abs(sizes.sum() - 1) > 1e-9:
                raise ValueError(f"partition_sizes must be {self._k} positive fractions summing to 1")
        sizes.flags.writeable = False
        self._sizes = sizes
        self._tolerance = check_int("tolerance", tolerance, minimum=0)
        self._exact = bool(exact)
        self._straggler_prefix = check_int("straggler_prefix", straggler_prefix, minimum=0)
        self._params = dict(params)
        self._cache = DecodingCache(self.CACHE_SIZE)
        self._max_condition = DEFAULT_MAX_CONDITION  # the max_condition setter changes it (and its subcodes')
        self._rows_cache = None

    def _init_encoders(self, encoders, placement) -> None:
        """The encoders checked against the placement and chunks, made read-only."""
        enc = []
        for w, E in enumerate(encoders):
            E = np.array(E, dtype=np.float64)
            if E.ndim != 3 or E.shape[1:] != (len(placement[w]), self._chunks):
                raise ValueError(
                    f"encoder of worker {w} must have shape (R, {len(placement[w])}, {self._chunks}),"
                    f" got {E.shape}"
                )
            E.flags.writeable = False
            enc.append(E)
        if len(enc) != len(placement):
            raise ValueError(f"encoders must list {len(placement)} workers, got {len(enc)}")
        self._encoders = tuple(enc)
        self._messages = tuple(E.shape[0] for E in enc)
        self._message_counts = np.array(self._messages, dtype=np.intp)

    def _init_lazy(self, encoders: LazyEncoders, placement) -> None:
        """Encoders built when asked for (:class:`LazyEncoders`): their shapes are checked then."""
        if len(encoders) != len(placement):
            raise ValueError(f"encoders must list {len(placement)} workers, got {len(encoders)}")
        self._encoders = encoders
        self._messages = encoders.messages
        self._message_counts = np.array(self._messages, dtype=np.intp)

    @property
    def lazy(self) -> bool:
        """Whether the encoders are built when asked for and decoding is an operator of the code's
        own, with no dense coefficients (module docstring)."""
        return isinstance(self._encoders, LazyEncoders)

    # ------------------------------------------------------------------ immutability
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _freezing(cls.__dict__["__init__"])

    def __setattr__(self, name, value):
        if self.__dict__.get("_frozen") and name not in self._MUTABLE:
            raise AttributeError(
                f"{type(self).__name__} is immutable: cannot set {name!r} after construction"
                " (build a new code with the parameters you want)"
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        if self.__dict__.get("_frozen"):
            raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")
        object.__delattr__(self, name)

    # ------------------------------------------------------------------ attributes
    n = property(lambda self: self._n, doc="Number of workers.")
    k = property(lambda self: self._k, doc="Number of data partitions.")
    placement = property(lambda self: self._placement, doc="Partitions stored by each worker.")
    partition_sizes = property(lambda self: self._sizes, doc="Fraction of the data per partition.")
    chunks = property(lambda self: self._chunks, doc="L: pieces each partial gradient is cut into.")
    tolerance = property(lambda self: self._tolerance, doc="Stragglers tolerated in the worst case.")
    exact = property(lambda self: self._exact, doc="Whether decode returns the exact gradient.")
    encoders = property(lambda self: self._encoders, doc="E_w of shape (R_w, |placement[w]|, L).")
    params = property(lambda self: dict(self._params), doc="Constructor parameters.")
    cache_hits = property(lambda self: self._cache.hits, doc="Decodings answered from the cache.")
    cache_misses = property(lambda self: self._cache.misses, doc="Decodings solved (and then cached).")

    @property
    def max_condition(self) -> float:
        """Decoding solves whose condition number exceeds this are refused (NotDecodableError).
        Setting it clears the decoding cache, so earlier verdicts are re-judged."""
        return self._max_condition

    @max_condition.setter
    def max_condition(self, value: float) -> None:
        self._max_condition = check_real("max_condition", value, minimum=1.0)
        for sub in self.subcodes:
            sub.max_condition = value
        self.clear_cache()

    @property
    def decode_rtol(self) -> float | None:
        """The tolerance :meth:`decode_report` applies when called without ``rtol`` (None: the
        precision's :data:`~gradcode.codes.precision.DEFAULT_RTOL`). A run sets it to accept a
        looser worst-case bound."""
        return getattr(self, "_decode_rtol", None)

    @decode_rtol.setter
    def decode_rtol(self, value: float | None) -> None:
        self._decode_rtol = None if value is None else check_real("decode_rtol", value, minimum=0.0, strict_min=True)

    @property
    def straggler_prefix(self) -> int:
        """Leading messages a tolerated straggler is still assumed to deliver: 0 for full
        stragglers; 1 for the alpha-partial-straggler scheme, whose slow workers finish their
        naive part."""
        return self._straggler_prefix

    @property
    def messages_per_worker(self) -> int:
        """R: the most messages any worker sends in one job."""
        return max(E.shape[0] for E in self._encoders)

    def messages_of(self, w: int) -> int:
        """R_w: the number of messages worker ``w`` sends."""
        return self._messages[w]

    def straggling(self, counts) -> np.ndarray:
        """Which workers were stragglers of a round, from ``counts[..., w]``: the number of leading
        messages worker ``w`` had delivered when the round closed (shape ``(n,)`` or
        ``(rounds, n)``; returns booleans of the same shape). Default: ``counts < R_w``, a worker
        that had not delivered its whole task result (for the ``partial`` code: a worker without
        its second message)."""
        counts = self._check_counts(counts)
        return counts < np.asarray(self._messages)

    def _check_counts(self, counts) -> np.ndarray:
        counts = np.asarray(counts)
        if counts.ndim not in (1, 2) or counts.shape[-1] != self._n:
            raise ValueError(f"counts must have shape ({self._n},) or (rounds, {self._n}), got {counts.shape}")
        if counts.size and not np.issubdtype(counts.dtype, np.integer):
            raise TypeError(f"counts must hold integer message counts, got dtype {counts.dtype}")
        return counts

    @property
    def worker_loads(self) -> np.ndarray:
        """Fraction of the data each worker computes on per job."""
        return np.array([self._sizes[list(p)].sum() for p in self._placement])

    @property
    def load(self) -> float:
        """Max over workers of the fraction of the data computed per job."""
        return float(self.worker_loads.max())

    def message_length(self, d: int) -> int:
        """m = ceil(d / L): the length of every message for a gradient of dimension d."""
        return math.ceil(check_int("d", d, minimum=1) / self._chunks)

    def comm_cost(self, s: int) -> float | None:
        """Message length each active worker sends to decode with ``s`` stragglers, as a fraction
        of d; ``None`` where the code cannot decode with ``s`` stragglers in the worst case."""
        s = check_int("s", s, minimum=0, maximum=self._n)
        return self.messages_per_worker / self._chunks if s <= self._tolerance else None

    def __repr__(self) -> str:
        shown = " ".join(f"{k}={v}" for k, v in self._params.items() if k != "seed" and v is not None)
        return f"<{type(self).__name__} {shown}>"

    # ------------------------------------------------------------------ encoding
    def encode(self, w: int, partials) -> np.ndarray:
        """Messages of worker ``w``: ``partials`` is ``(len(placement[w]), d)``, one row per stored
        partition in placement order; returns ``(R_w, m)`` in the partials' float dtype."""
        w = self.check_worker(w)
        partials = np.asarray(partials)
        p = len(self._placement[w])
        if partials.ndim != 2 or partials.shape[0] != p:
            raise ValueError(
                f"partials of worker {w} must have shape ({p}, d), one row per stored partition;"
                f" got {partials.shape}"
            )
        if partials.dtype.kind == "c":
            raise TypeError(f"partials of worker {w} must be real numbers, got dtype {partials.dtype}")
        if not np.issubdtype(partials.dtype, np.floating):
            partials = partials.astype(np.float64)
        d = partials.shape[1]
        E = self._encoders[w]
        L = self._chunks
        with np.errstate(invalid="ignore", over="ignore"):
            out = self._apply_encoder(E, partials, L, p, d)
        if not np.isfinite(out).all():
            raise ValueError(f"partials of worker {w} hold non-finite values (NaN or infinity)")
        return out

    def _apply_encoder(self, E, partials, L, p, d):
        if L == 1:
            return E[:, :, 0].astype(partials.dtype) @ partials
        if d % L:  # no zero-padded copy of the partials (same result as padding)
            return encode_without_padding(E, partials, L)
        return E.reshape(E.shape[0], p * L).astype(partials.dtype) @ partials.reshape(p * L, d // L)

    # ------------------------------------------------------------------ decoding
    def normalize_pattern(self, received) -> Pattern:
        """``{w: r_w}`` (or pairs, or an ``(n,)`` integer array of counts ``r_w``) -> sorted tuple
        of ``(w, r_w)`` with ``r_w > 0``, validated."""
        n, R = self._n, self._messages
        if isinstance(received, np.ndarray) and received.dtype.kind in "iu":
            if received.shape != (n,):
                raise ValueError(f"received as counts must have shape ({n},), got {received.shape}")
            if (received < 0).any() or (received > self._message_counts).any():
                w = int(np.flatnonzero((received < 0) | (received > self._message_counts))[0])
                raise ValueError(f"messages received from worker {w} must be between 0 and {R[w]},"
                                 f" got {int(received[w])}")
            held = np.flatnonzero(received)
            return tuple(zip(held.tolist(), received[held].tolist()))
        out = []
        for w, r in items(received, "received"):
            # fast path for plain ints in range; anything else goes through the full checks
            if type(w) is not int or type(r) is not int or not 0 <= w < n or not 0 <= r <= R[w]:
                w = self.check_worker(w)
                r = check_int(f"messages received from worker {w}", r, minimum=0, maximum=R[w])
            if r:
                out.append((w, r))
        out.sort()
        return tuple(out)

    def can_decode(self, received) -> bool:
        """Whether the leading ``r_w`` messages of each worker ``w`` determine the gradient (by rank
        and residual of the decoding solve, and a condition number below ``max_condition``)."""
        return isinstance(self._solution(self.normalize_pattern(received)), Decoding)

    def decoding(self, received) -> Decoding:
        """The decoding coefficients for pattern ``{w: r_w}``, checked against the received encoder
        rows (module docstring; ``amplification`` reports the check's measure); raises
        :class:`NotDecodableError` when the messages do not determine the gradient or no solve's
        answer passes the check."""
        if self.lazy:
            raise TypeError(f"{self!r} decodes by an operator of its own, not by dense coefficients (it is too large"
                            " to hold them): use decode(), decode_report(), can_decode() or check_decodable()")
        pattern = self.normalize_pattern(received)
        sol = self._solution(pattern)
        if isinstance(sol, Refusal):
            raise NotDecodableError(sol.reason)
        return sol

    def check_decodable(self, received) -> None:
        """Raise :class:`NotDecodableError`, saying why, unless the messages of pattern ``received``
        decode (:meth:`decoding`'s check; codes that decode by an operator answer without
        coefficients)."""
        self.decoding(received)

    #: whether :meth:`streamed_coefficient` knows every message's coefficient when it arrives
    #: (:mod:`gradcode.codes.streaming`: the master then adds messages in as they arrive)
    streams: ClassVar[bool] = False

    def streamed_coefficient(self, added: np.ndarray, w: int, r: int) -> float | None:
        """The coefficient message ``r`` of worker ``w`` has in the decode, given the messages
        already added in (``added``: counts per worker), whatever arrives later: 0.0 when it is not
        needed, None when it is not known until the round closes (the default). Codes that set
        :attr:`streams` answer for every message; the coefficients must be those of their checked
        :meth:`decoding` of the messages added (:class:`~gradcode.codes.streaming.RunningDecode`
        compares them)."""
        return None

    def decode(self, messages, *, dim: int, precision=None, rtol: float | None = None, scales=None) -> np.ndarray:
        """The full gradient ``sum_j g_j`` (length ``dim``) from ``{w: msgs_w}``, ``msgs_w`` of shape
        ``(r_w, m)`` holding the leading ``r_w`` messages of worker ``w``. Refuses
        (:class:`~gradcode.codes.precision.ImpreciseDecodeError`) a decode whose rounding-error
        bound exceeds ``rtol`` of the result; see :meth:`decode_report` for ``precision`` and
        ``rtol``."""
        return self.decode_report(messages, dim=dim, precision=precision, rtol=rtol, scales=scales).gradient

    def decode_report(self, messages, *, dim: int, precision=None, rtol: float | None = None, scales=None) -> Decoded:
        """:meth:`decode` with its checked error bound (:class:`~gradcode.codes.precision.Decoded`;
        the bound is :mod:`gradcode.codes.precision`'s).

        ``precision``: the type the messages crossed the wire in (a name of
        :data:`~gradcode.codes.precision.UNIT_ROUNDOFF` or a dtype); by default the coarsest dtype
        among the arrays given (float16 arrays decode as float16; pass ``"bfloat16"`` for bfloat16
        values held in wider arrays), never finer than that. ``rtol``: the largest accepted
        ``error_bound / ||gradient||`` (default :data:`~gradcode.codes.precision.DEFAULT_RTOL` of
        the precision). ``scales``: ``{w: (r_w,)}``, what each message summed at its worker
        (:meth:`message_scales`), for the workers whose messages are plain arrays (a
        :class:`~gradcode.codes.messages.Message` carries its own); without them a message's own
        norm stands for it, which assumes a worker's terms do not cancel among themselves.
        ``messages[w]`` may be an ``(r_w, m)`` array, a Message or a list of Messages."""
        d = check_int("dim", dim, minimum=1)
        m = self.message_length(d)
        arrays, sent = {}, {}
        for w, msgs in items(messages, "messages"):
            w = self.check_worker(w)
            rows, meta = unpack(w, msgs, m, d, self._chunks)
            if len(rows) > self.messages_of(w):
                raise ValueError(f"worker {w} sends at most {self.messages_of(w)} messages, got {len(rows)}")
            if len(rows):
                arrays[w] = rows
                if meta is not None:
                    sent[w] = meta
        prec, tol = self._precision({a.dtype for a in arrays.values()}, precision, rtol)
        sol = self.decoding({w: len(a) for w, a in arrays.items()})
        # what each used row summed (S_i): sent with it (a Message), or passed as ``scales``; the
        # rows with neither have their norm measured in the sum's own pass and stand for it
        given = np.full(len(sol.rows), np.nan)
        factors = np.ones(len(sol.rows))
        for i, (w, r) in enumerate(sol.rows):
            if w in sent:
                given[i], factors[i] = sent[w][0][r], sent[w][1][r]
        if scales is not None:
            given = np.fmax(given, received_scales(self, sol, scales, arrays, sent))
        measure = np.isnan(given)
        with np.errstate(over="ignore", invalid="ignore"):
            out, norms, out_sq = combine(sol, arrays, self._chunks, m, factors, measure)
        bad_scale = ~measure & ~np.isfinite(given)
        # a non-finite element makes the sum of squares non-finite; so may a finite overflow of it
        if bad_scale.any() or (not math.isfinite(out_sq) and not np.isfinite(out).all()):
            raise NonFiniteMessageError(*non_finite(sol, arrays, factors, bad_scale))
        if not np.isfinite(norms).all():  # finite values past ~1e154: no bound can be computed for them
            bad = tuple(sorted({w for (w, _), v in zip(sol.rows, norms) if not np.isfinite(v)}))
            raise NonFiniteMessageError(
                f"messages from workers {list(bad)} hold values so large (beyond ~1e154) that the decode's"
                " error bound overflows; treat them as stragglers and decode without them", bad)
        sums = np.where(measure, norms, given)  # ||m_i|| <= S_i: no pass over a message with its scale
        gradient = out[:d]
        # the output's norm from its own pass, unless its squares overflowed (values past ~1e154)
        size = math.sqrt(out_sq) if math.isfinite(out_sq) and len(out) == d else float(np.linalg.norm(gradient))
        return self._bounded(sol, gradient, size, sums, prec, tol, factors, m)

    def _precision(self, dtypes, precision, rtol) -> tuple[str, float]:
        """``(precision, tolerance)`` of a decode of messages of ``dtypes``, this code's
        :attr:`decode_rtol` the default tolerance (:func:`~gradcode.codes.precision.decode_precision`)."""
        return decode_precision(dtypes, precision, rtol, self.decode_rtol)

    def _bounded(self, sol: Decoding, gradient, size: float, sums, prec: str, tol: float, factors, m: int) -> Decoded:
        """The error bound of a decode and its acceptance (:func:`~gradcode.codes.precision.bound_decode`)."""
        return bound_decode(self, sol, gradient, size, sums, prec, tol, factors, m)

    def message_scales(self, w: int, partials) -> np.ndarray:
        """What each message of worker ``w`` sums: ``sum_j sum_c |E_w[r, j, c]| ||g_j[c]||_2``,
        shape ``(R_w,)``; sent beside the messages, it makes :meth:`decode_report`'s bound hold
        whatever the data (its terms may cancel)."""
        w = self.check_worker(w)
        partials = np.asarray(partials, dtype=np.float64)
        p, L = len(self._placement[w]), self._chunks
        if partials.ndim != 2 or partials.shape[0] != p:
            raise ValueError(f"partials of worker {w} must have shape ({p}, d); got {partials.shape}")
        d = partials.shape[1]
        m = math.ceil(d / L)
        padded = np.zeros((p, L * m))
        padded[:, :d] = partials
        chunk_norms = np.linalg.norm(padded.reshape(p, L, m), axis=2)  # (p, L)
        return np.einsum("rjc,jc->r", np.abs(self._encoders[w]), chunk_norms)

    def decode_verified(self, messages, *, dim: int, tol: float | None = None, probes: int = 2, seed=0):
        """Decode after checking the received messages' consistency with the code's spare
        redundancy; names and excludes a single corrupted worker. Returns ``(gradient,
        Verification)``; see :mod:`gradcode.codes.verify`."""
        from gradcode.codes.verify import verified_decode

        return verified_decode(self, messages, dim=dim, tol=tol, probes=probes, seed=seed)

    def __getstate__(self):
        # codes travel (checkpoints, Ray): the caches are rebuilt where they are needed
        state = self.__dict__.copy()
        state["_rows_cache"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("_message_counts", np.array(self._messages, dtype=np.intp))

    def clear_cache(self) -> None:
        self._cache.clear()

    # ------------------------------------------------------------------ internals
    def check_worker(self, w) -> int:
        """``w`` as a worker id in ``0..n-1``; ``TypeError``/``ValueError`` naming it otherwise."""
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)):
            raise TypeError(f"worker id must be an integer in [0, {self._n}), got {w!r}")
        if not 0 <= w < self._n:
            raise ValueError(f"unknown worker id {w}: workers are 0..{self._n - 1}")
        return int(w)

    def _solution(self, pattern: Pattern) -> Decoding | Refusal:
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

    def _accepted(self, sol: Decoding, amplification: float, residual) -> Decoding:
        """``sol`` with what its decodes' error bounds need: the amplification, the received rows'
        indices and numbers of terms, and ``|A B_F - T|``."""
        _, row_start, _, row_nnz, _ = self._sparse_rows()
        ids = self._row_ids(sol, row_start)
        terms = np.maximum(row_nnz[ids], 1).astype(np.float64)
        return replace(sol, amplification=amplification, row_terms=terms, row_ids=ids, residual=residual)

    @staticmethod
    def _row_ids(sol: Decoding, row_start: np.ndarray) -> np.ndarray:
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
            # a sparse product over them runs 10x slower than BLAS
            dense = B.nnz >= DENSE_ROWS * B.shape[0] * B.shape[1] and B.shape[0] * B.shape[1] <= DENSE_ROWS_MAX
            BT = B.T.toarray() if dense else B.T.tocsr()
            self._rows_cache = (BT, row_start, row_l1, np.diff(B.indptr), B)
        return self._rows_cache

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
        rows, M = self.rows_matrix(pattern)
        coefficients, cond = lstsq_coefficients(M, self.target_matrix(), self.max_condition)
        return Decoding(pattern, rows, coefficients, cond, "lstsq")

    def generic_decoding(self, received) -> Decoding:
        """The generic least-squares decoding, bypassing any fast path and the cache (for tests
        and benchmarks that compare the two)."""
        return self._generic_solve(self.normalize_pattern(received))


def _freezing(init):
    """Wrap a code class's ``__init__`` so that the object is frozen when the outermost
    constructor returns (subclass constructors run the base's inside their own)."""

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        depth = self.__dict__.get("_init_depth", 0)
        object.__setattr__(self, "_init_depth", depth + 1)
        try:
            init(self, *args, **kwargs)
        finally:
            object.__setattr__(self, "_init_depth", depth)
        if depth == 0:
            object.__setattr__(self, "_frozen", True)

    return __init__


LinearCode.__init__ = _freezing(LinearCode.__init__)


