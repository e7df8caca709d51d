"""The linear code contract shared by every gradient code.

One job computes one gradient ``g = sum_j g_j`` over ``k`` data partitions. Worker ``w`` stores
partitions ``placement[w]`` and computes their partial gradients ``g_j`` (sums of per-sample
gradients). Each ``g_j`` is cut into ``L = chunks`` pieces of length ``m = ceil(d / L)`` (the last
one zero-padded), and the worker sends messages one after another:

    message r of worker w  =  sum_{j in placement[w]} sum_{c < L}  E_w[r, j, c] * g_j[c]     (m,)

A code is therefore fully described by its placement and its encoding tensors ``E_w`` of shape
``(R_w, len(placement[w]), L)``. The master holds a prefix of each worker's stream, written as a
*pattern* ``{w: r_w}`` (``r_w`` leading messages of ``w``), and decodes

    chunk c of g  =  sum_{received rows i} A[c, i] * message_i

where ``A`` solves ``A @ M = T`` (``M``: the received rows of the ``E_w``; ``T``: the sum over
partitions). :class:`LinearCode` is this contract (constructor, attributes, encoding, patterns,
decodability, decoding), here with the registry of code families (:data:`CODES`). It inherits what
reads apart: how ``A`` is found (:mod:`gradcode.codes.solving`: the generic SVD solve, the
``_fast_solve`` hook, the per-pattern LRU cache), how every answer is checked against the real
encoder rows before it is trusted (:mod:`gradcode.codes.answer_check`), who straggled in a round
(:mod:`gradcode.codes.rounds`) and immutability (:mod:`gradcode.codes.immutable`).

Coefficients are always computed in float64; messages may be float64, float32, float16 or
bfloat16 (``ml_dtypes.bfloat16`` arrays), and the decoded gradient is float64. Each decode is also
checked against the *data* it sums, its rounding error bounded relative to what was summed
(:mod:`gradcode.codes.precision`).

Codes too large to hold (CommFR over an LDPC code of length 10,000) give their encoders as
:class:`~gradcode.codes.lazy.LazyEncoders`, built when a worker's is asked for, and decode by an
operator of their own (peeling) instead of coefficients ``A``: :meth:`LinearCode.decoding` and
everything built on the dense rows then refuse by name; encode, decode, can_decode,
check_decodable and the decode rule work as for any code.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from gradcode._validation import check_int, check_real
from gradcode.codes.answer_check import DENSE_ROWS, DENSE_ROWS_MAX, AnswerCheck  # noqa: F401 (their old home)
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
from gradcode.codes.immutable import Immutable
from gradcode.codes.lazy import LazyEncoders
from gradcode.codes.linalg import encode_without_padding
from gradcode.codes.precision import Decoded
from gradcode.codes.rounds import RoundRules
from gradcode.codes.solving import Solving
from gradcode.errors import NotDecodableError
from gradcode.registry import Registry, package_modules

#: Default refusal threshold on the condition number of a decoding solve.
DEFAULT_MAX_CONDITION = 1e10
#: every code family, by name (``gradcode codes`` lists them; ``make_code`` builds them)
CODES: Registry = Registry("code", modules=package_modules(__file__))


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


class LinearCode(Immutable, RoundRules, Solving, AnswerCheck):
    """Base class of every gradient code (see the module docstring for the math).

    Subclasses build their placement and encoding tensors, validate their parameters and call
    ``super().__init__``. Instances are immutable: arrays are read-only, and once the outermost
    constructor returns, assigning or deleting an attribute raises ``AttributeError`` (only the
    decoding caches and the ``max_condition`` threshold change; the cache is guarded by a lock,
    so a code can be shared by threads). Who straggled in a round (:meth:`straggling`) and what an
    active worker sends (:meth:`comm_cost`): :mod:`gradcode.codes.rounds`; AGC and grouped codes
    override them.
    """

    name: ClassVar[str] = "?"
    #: what may change after construction: the decoding caches, their counters, lazily built
    #: solvers, and the ``max_condition`` threshold (whose setter clears the cache)
    _MUTABLE: ClassVar[frozenset] = frozenset(
        {"_cache", "_rows_cache", "_solver", "max_condition", "_max_condition", "decode_rtol", "_decode_rtol",
         "decode_strict"}
    )
    #: the ``strict`` a decode applies when called without it: refuse a bound that is only an
    #: estimate or beyond ``rtol`` (:func:`~gradcode.codes.precision.accept_bound`); a run sets it
    decode_strict: bool = False
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

    def decode(self, messages, *, dim: int, precision=None, rtol: float | None = None, scales=None,
               strict: bool | None = None) -> np.ndarray:
        """The full gradient ``sum_j g_j`` (length ``dim``) from ``{w: msgs_w}``, ``msgs_w`` of shape
        ``(r_w, m)`` holding the leading ``r_w`` messages of worker ``w``. Refuses
        (:class:`~gradcode.codes.precision.ImpreciseDecodeError`) a decode whose rounding-error
        bound exceeds ``rtol`` of the result; see :meth:`decode_report` for the keywords."""
        return self.decode_report(messages, dim=dim, precision=precision, rtol=rtol, scales=scales,
                                  strict=strict).gradient

    def decode_report(self, messages, *, dim: int, precision=None, rtol: float | None = None, scales=None,
                      strict: bool | None = None) -> Decoded:
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
        norm stands for it, which assumes a worker's terms do not cancel among themselves: the bound
        is then an estimate (``Decoded.guaranteed``). ``strict`` (default :attr:`decode_strict`):
        refuse an estimate, and a decode beyond ``rtol`` that the plain-sum rule would accept.
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
        return self._bounded(sol, gradient, size, sums, prec, tol, factors, m, measured=measure, strict=strict)

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

    def decode_verified(self, messages, *, dim: int, tol: float | None = None, probes: int = 2, seed=0,
                        locate: int | None = None):
        """Decode after checking the received messages' consistency with the code's spare
        redundancy; names and excludes up to ``locate`` corrupted workers. Returns ``(gradient,
        Verification)``; see :mod:`gradcode.codes.verify`."""
        from gradcode.codes.verify import verified_decode

        return verified_decode(self, messages, dim=dim, tol=tol, probes=probes, seed=seed, locate=locate)

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

