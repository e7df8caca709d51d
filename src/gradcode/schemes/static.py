"""Static codes as round-by-round schemes, and the decodability rules of the static code families.

:class:`StaticScheme` wraps any :class:`~gradcode.codes.LinearCode`: job ``t`` is computed in round
``t`` by every worker with the same placement and encoder (Tandon's FRC/CRC, GC-SC, the partial
straggler scheme, the baselines...). It is the reference implementation of the protocol of
:mod:`gradcode.schemes.base` that both drivers run::

    plan(t)                                  every worker: (Task(job=t, placement[w], E_w),)
    on_result(t, w, i, payload, time)        message i of worker w in round t
    ready(t)                                 the code's rule on the prefixes held for round t
                                             (and code.can_decode once payloads arrive)
    close(t, arrived)                        [(t, gradient or None)]; straggler history updated

Message rules (what the master does with what it receives), tested in tests/test_static_scheme.py:

* **stale**: a message for a round that is already closed is ignored (counted in
  ``stale_messages``); a round that was never planned is a :class:`ProtocolError`.
* **duplicate**: a message index already received from that worker is counted once: the copy is
  ignored (counted in ``duplicate_messages``), whatever its payload.
* **out of order**: workers send their messages one after another, so index ``i`` of worker ``w``
  must follow index ``i - 1``; a gap, or an index beyond the worker's messages, raises
  :class:`ProtocolError` (it means a broken driver or transport, not a straggler).
* **non-finite payloads**: ``code.decode`` raises :class:`~gradcode.codes.NonFiniteMessageError`
  naming the senders; ``close`` drops them (they count as stragglers of the round, their later
  messages are ignored) and decodes without them. If what is left does not decode, ``close``
  raises :class:`~gradcode.errors.NotDecodableError` and the round stays open: ``ready`` is then
  False and a runtime driver may wait for more workers and call ``close`` again.
* **imprecise decodes**: a decode whose rounding-error bound exceeds its tolerance
  (:class:`~gradcode.codes.ImpreciseDecodeError`: the messages' precision, amplified by the
  coefficients, against a gradient whose partial sums cancel) raises from ``close`` with the round
  open; ``ready`` is False until more messages arrive, whose rows give smaller coefficients.
* **decoded as they arrive**: for a code that knows each message's coefficient when it arrives
  (``code.streams``: uncoded, FRC) the payload is added into the round's running sum at once
  (:class:`~gradcode.codes.streaming.RunningDecode`) and not held: the decode hides behind the wait
  for the others and the round holds one sum, not ``n`` messages. A non-finite array is dropped
  (its worker a straggler) before it is added; ``close`` checks the coefficients used against
  the code's checked decoding and bounds the error as a held decode does. Not with ``verify``.
* payloads are all arrays (runtime: ``close`` returns the decoded gradient) or all ``None``
  (simulator: ``close`` returns ``(t, None)``); mixing them in one round is a ProtocolError.

The straggler history (``straggler_history``: a ``(closed rounds, n)`` boolean array, row ``t`` for
round ``t``) records the workers not in ``arrived`` plus those dropped for non-finite messages.

How dynamic schemes plug in with no change to the drivers
---------------------------------------------------------
A driver needs from a scheme only ``n``, ``chunks``, ``partition_sizes`` (data fraction of each
partition index a Task names) and the four protocol calls. The simulator draws the delay model's
random state once for all rounds (:meth:`DelayModel.draw`: ``time = intercept + slope * load``),
so whatever load a round's plan gives a worker, and whatever prefix of it a message needs, is
timed from the same draw. Everything round-specific travels in the plan:

* **GC-DC** (dynamic clustering): ``plan(t)`` reads ``straggler_history`` (or its own estimate of
  the straggler states) and returns, for each worker, a Task of job ``t`` whose ``coefficients`` are
  the codeword picked for this round; ``ready`` decodes with the round's assignment. Loads do not
  change (every worker computes ``r`` partitions).
* **SR-SGC / M-SGC** (sequential codes, delay ``T``): ``plan(t)`` gives a worker several Tasks, of
  jobs ``t - T .. t`` (different ``job`` fields; M-SGC with unequal ``partition_sizes``). Message
  indices run across a worker's tasks in plan order, and the simulator times message ``i`` by the
  partitions it depends on in that order, so a worker finishing an old job's task first delivers it
  first. ``ready(t)`` says whether every job due in round ``t`` (job ``t - T``) decodes from the
  results of rounds ``t - T .. t`` (a scheme may demand more, e.g. results it needs to keep later
  jobs decodable, which turns a deviation from its straggler model into a wait-out). ``close``
  returns every job finished in the round: the driver fills ``job_done_round`` from it.
* **perfect straggler state information** (GC-DC Sec. VI): a scheme defining
  ``observe_states(t, straggling)`` is handed, before ``plan(t)``, the delay model's own straggler
  states of round ``t`` (``Draw.straggling[t]``, an ``(n,)`` boolean array); schemes with imperfect
  information use ``straggler_history`` instead.

:meth:`LinearCode.decode_rule` gives each static family its decodability as a closed rule (any ``n - s``
workers for CRC, one worker per data group for FRC, ``l - s`` per cluster for GC-SC, ...): the
simulator's vectorized path computes decode times from it with no per-event loop, and
``StaticScheme.ready`` uses it as an exact prefilter; with payloads it confirms with
``code.can_decode`` (the solve's conditioning), in simulation the rule decides, as on the fast path.
Codes without a rule get :class:`GenericRule` (``can_decode`` on growing prefixes).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gradcode.codes.base import LinearCode
from gradcode.codes.decoding import NonFiniteMessageError
from gradcode.codes.precision import ImpreciseDecodeError
from gradcode.codes.verify import InconsistentMessagesError
from gradcode.codes.messages import Message, Note
from gradcode.codes.reduce import reduce_plan
from gradcode.codes.streaming import RunningDecode
from gradcode.codes.rules import AllOf, DecodeRule, GenericRule, KOfN, PerGroup  # noqa: F401  re-exported
from gradcode.errors import NotDecodableError
from gradcode.schemes.base import (
    ClosedRounds,
    ProtocolError,
    RoundLoads,
    Scheme,
    Task,
    accept_messages,
    check_round,
)


# ---------------------------------------------------------------------------------- timing


def task_schedule(tasks: Iterable[Task], partition_sizes: np.ndarray) -> tuple[np.ndarray, float]:
    """How much of a worker's round must be computed before each of its messages can go out.

    The worker processes the partitions of its tasks in plan order (task by task, each in its
    ``partitions`` order). Message ``i`` (counted across tasks) can go out once every partition its
    coefficients touch (non-zero ``coefficients[r, j, :]``) is done, and not before message
    ``i - 1``. Returns ``(prefix_loads, load)``: ``prefix_loads[i]`` is the data fraction processed
    when message ``i`` is ready (non-decreasing; e.g. only the naive part for message 0 of the
    ``partial`` code) and ``load`` the data fraction of the whole round (partition sizes summed
    over tasks; a partition in two tasks is computed twice, at two model states). Both drivers and
    both simulator paths use this function, so their floating-point results agree exactly.
    """
    order: list[int] = []
    last: list[int] = []
    for task in tasks:
        coef = np.asarray(task.coefficients)
        base = len(order)
        order.extend(task.partitions)
        if coef.shape[0]:
            used = np.any(coef != 0, axis=2)  # (R, p)
            pos = np.where(
                used.any(axis=1), base + used.shape[1] - 1 - np.argmax(used[:, ::-1], axis=1), -1
            )
            last.extend(int(p) for p in pos)
    if not order:
        return np.zeros(len(last)), 0.0
    cum = np.cumsum(partition_sizes[np.asarray(order, dtype=np.intp)])
    prefix = np.array([cum[p] if p >= 0 else 0.0 for p in last])
    if prefix.size:
        prefix = np.maximum.accumulate(prefix)
    return prefix, float(cum[-1])


def code_loads(code: LinearCode) -> tuple[np.ndarray, np.ndarray]:
    """``(n, R)`` prefix loads of each worker's messages in every round of ``code`` run as a
    static scheme (:func:`task_schedule` of its one task, padded by repeating the last) and
    ``(n,)`` its messages per worker: how both simulator paths time a static code."""
    R = code.messages_per_worker
    P = np.zeros((code.n, R))
    Rw = np.zeros(code.n, dtype=np.intp)
    for w in range(code.n):
        prefix, _ = task_schedule([Task(0, code.placement[w], code.encoders[w])], code.partition_sizes)
        Rw[w] = prefix.size
        P[w, : prefix.size] = prefix
        P[w, prefix.size :] = prefix[-1] if prefix.size else 0.0
    P.flags.writeable = False
    Rw.flags.writeable = False
    return P, Rw


def decode_rule(code: LinearCode) -> DecodeRule:
    """The decodability rule of ``code``: :meth:`LinearCode.decode_rule` (kept here for callers
    of the scheme layer)."""
    return code.decode_rule()


def round_stragglers(scheme: Scheme, counts, planned) -> np.ndarray:
    """The stragglers of a closed round: :meth:`Scheme.round_stragglers`."""
    return scheme.round_stragglers(counts, planned)


# ---------------------------------------------------------------------------------- scheme


class _Round:
    __slots__ = ("counts", "payloads", "times", "batches", "dropped", "real", "retry_at", "out", "running", "plan")

    def __init__(self, n: int):
        self.counts = np.zeros(n, dtype=np.intp)
        self.payloads: dict[int, list] = {}
        self.times: dict[int, list[float]] = {}
        #: messages received by on_results, as (workers, times) arrays (arrival_times reads them)
        self.batches: list[tuple[np.ndarray, np.ndarray]] = []
        self.dropped: set[int] = set()
        self.real: bool | None = None
        #: messages held when a decode was refused as imprecise, or verification found them
        #: inconsistent without naming the culprits: not ready again until more arrive
        self.retry_at: int | None = None
        #: workers that will deliver nothing more this round (the driver discarded their result)
        self.out: set[int] = set()
        #: the decode built as messages arrive, for codes that stream (None: messages are held)
        self.running: RunningDecode | None = None
        #: the collective path's last plan (a ReducePlan): the close after a reduction returns the
        #: plan the members reduced by, whatever notes came meanwhile, instead of solving again
        self.plan = None


class StaticScheme(Scheme):
    """Any :class:`~gradcode.codes.LinearCode` run as a scheme: job ``t`` in round ``t``.

    ``dim`` is the gradient dimension ``d`` used to decode (default ``m * chunks``, i.e. the
    zero-padded length, for codes with ``chunks > 1``; exactly ``m`` for single-chunk codes).
    See the module docstring for the message rules.
    """

    delay = 0

    def __init__(self, code: LinearCode, *, dim: int | None = None, verify: bool = False):
        if not isinstance(code, LinearCode):
            raise TypeError(f"code must be a gradcode LinearCode, got {type(code).__name__}")
        if not isinstance(verify, (bool, np.bool_)):
            raise TypeError(f"verify must be True or False, got {verify!r}")
        self.code = code
        self.verify = bool(verify)
        #: rounds in which verification named and excluded a worker: {round: (workers, ...)}
        self.corrupt_workers: dict[int, tuple[int, ...]] = {}
        self.n = code.n
        self.chunks = code.chunks
        self.partition_sizes = code.partition_sizes
        self.dim = dim
        self.rule = decode_rule(code)
        self._R = np.array([code.messages_of(w) for w in range(code.n)], dtype=np.intp)
        self._open: dict[int, _Round] = {}
        self._closed = ClosedRounds()
        self.stale_messages = 0
        self.duplicate_messages = 0

    def __repr__(self) -> str:
        return f"StaticScheme({self.code!r}{', verify=True' if self.verify else ''})"

    @property
    def streams(self) -> bool:
        """Whether messages are added in as they arrive (:mod:`gradcode.codes.streaming`), not held:
        the code knows their coefficients then; verification needs them held."""
        return self.code.streams and not self.verify

    def _task(self, t: int, w: int) -> Task:
        return Task(job=t, partitions=self.code.placement[w], coefficients=self.code.encoders[w])

    @property
    def static_code(self) -> LinearCode:
        return self.code

    def round_stragglers(self, counts, planned) -> np.ndarray:
        """The code's own rule (:meth:`LinearCode.straggling`: e.g. AGC's active workers need
        only ``r_s`` of their ``L`` messages)."""
        return self.code.straggling(np.asarray(counts, dtype=np.intp))

    # -------------------------------------------------------------- protocol hooks
    def _plan(self, t: int) -> dict[int, tuple[Task, ...]]:
        if t in self._closed:
            raise ProtocolError(f"round {t} is already closed; it cannot be planned again")
        self._open.setdefault(t, _Round(self.n))
        return {w: (self._task(t, w),) for w in range(self.n)}

    def _on_result(self, t: int, w: int, index: int, payload, time: float) -> None:
        if t in self._closed:
            self.stale_messages += 1
            return
        state = self._open.get(t)
        if state is None:
            raise ProtocolError(f"message for round {t}, which was never planned")
        if w in state.dropped:
            return
        have = int(state.counts[w])
        if index < have:
            self.duplicate_messages += 1
            return
        if index >= self._R[w]:
            raise ProtocolError(
                f"worker {w} sends {self._R[w]} message(s) per round; got index {index} in round {t}"
            )
        if index > have:
            raise ProtocolError(
                f"message {index} of worker {w} in round {t} arrived before message {have}: workers"
                " send their messages in order"
            )
        real = payload is not None
        if state.real is None:
            state.real = real
        elif state.real != real:
            raise ProtocolError(
                f"round {t} mixes array payloads and None payloads (worker {w}, message {index})"
            )
        state.counts[w] = have + 1
        if state.batches:
            _flush_times(state)
        state.times.setdefault(w, []).append(float(time))
        if not real:
            return
        if self.streams and not isinstance(payload, Note):  # a note has no values to add in
            if state.running is None:
                state.running = RunningDecode(self.code)
            try:
                state.running.offer(w, index, payload)
            except NonFiniteMessageError:
                state.dropped.add(w)  # a straggler of the round, as a held non-finite message is
            return
        state.payloads.setdefault(w, []).append(payload if isinstance(payload, (Message, Note)) else np.asarray(payload))

    # -------------------------------------------------------------- batched rounds
    _batched_family = True

    @property
    def batched_rounds(self) -> bool:
        """Batched in simulation (:attr:`Scheme.batched_rounds`), except with verification, whose
        wait the protocol path runs."""
        return not self.verify and super().batched_rounds

    def plan_loads(self, t: int) -> RoundLoads:
        """Round ``t`` opened as by :meth:`plan`; every worker's messages timed by
        :func:`code_loads`."""
        t = check_round(t)
        if t in self._closed:
            raise ProtocolError(f"round {t} is already closed; it cannot be planned again")
        self._open.setdefault(t, _Round(self.n))
        loads = self.__dict__.get("_loads")
        if loads is None:
            loads = self._loads = code_loads(self.code)
        return RoundLoads(loads[0], loads[1], t)

    def ready_after(self, t: int, workers: np.ndarray, indices: np.ndarray) -> int | None:
        """The code's rule (:meth:`DecodeRule.decode_time` on the messages' positions in the
        sequence, those held counting as position -1) gives the first prefix that decodes;
        it is confirmed as :meth:`ready` confirms, and moved on message by message where that
        refuses (a solve too ill-conditioned, with payloads)."""
        state = self._open.get(check_round(t))
        if state is None:
            return None
        held = self._usable(state)
        N = len(workers)
        pos = np.full((self.n, int(self._R.max())), np.inf)
        pos[np.arange(pos.shape[1]) < held[:, None]] = -1.0
        pos[workers, indices] = np.arange(N)
        first = self.rule.decode_time(pos[None])[0]
        if not np.isfinite(first):
            return None
        k = int(first) + 1
        counts = held + np.bincount(workers[:k], minlength=self.n)
        while not self._ready_counts(state, counts):
            if k == N:
                return None
            counts[workers[k]] += 1
            k += 1
        return k

    def on_results(self, t: int, workers: np.ndarray, indices: np.ndarray, times: np.ndarray) -> None:
        """:meth:`on_result` for each message in order (payload ``None``), with the same rules
        (stale, duplicate, out of order), checked on the arrays
        (:func:`~gradcode.schemes.base.accept_messages`)."""
        t = check_round(t)
        if t in self._closed:
            self.stale_messages += len(workers)
            return
        state = self._open.get(t)
        if state is None:
            raise ProtocolError(f"message for round {t}, which was never planned")
        workers = np.asarray(workers, dtype=np.intp)
        times = np.asarray(times, dtype=np.float64)
        if state.dropped:
            keep = ~np.isin(workers, list(state.dropped))
            workers, indices, times = workers[keep], np.asarray(indices)[keep], times[keep]
        duplicates, workers, indices, times = accept_messages(state.counts, self._R, t, workers, indices, times)
        self.duplicate_messages += duplicates
        if not workers.size:
            return
        if state.real:
            raise ProtocolError(f"round {t} mixes array payloads and None payloads (on_results)")
        state.real = False
        state.counts += np.bincount(workers, minlength=self.n)
        state.batches.append((workers.copy(), times.copy()))  # the caller's buffers may be reused

    def close_rounds(self, first: int, rows: np.ndarray) -> None:
        """Rounds ``first .. first + len(rows) - 1``, played whole by a driver with the code's
        exact rule (the simulator's static blocks, no payloads), closed as :meth:`close` would
        close them: ``rows[i]`` marks the workers not in by the close of round ``first + i``."""
        first = check_round(first)
        rows = np.asarray(rows, dtype=bool)
        if rows.ndim != 2 or rows.shape[1] != self.n:
            raise ValueError(f"rows must be (rounds, {self.n}) booleans, got shape {rows.shape}")
        last = first + rows.shape[0]
        block = range(first, last)
        if not self._closed.isdisjoint(block) or any(t in block for t in self._open):
            raise ProtocolError(f"rounds {first}..{last - 1} include a round already planned or closed;"
                                " close_rounds takes fresh rounds")
        if rows.shape[0]:
            self._record(last - 1, rows[-1])
            self._history[first:last] = rows
            self._closed.update(range(first, last))

    def _ready_counts(self, state: _Round, counts: np.ndarray) -> bool:
        """:meth:`ready` for ``counts`` usable messages per worker."""
        if state.retry_at is not None and int(counts.sum()) <= state.retry_at:
            return False
        if not self.rule.satisfied(counts):
            return False
        if self.verify and not self._enough_to_locate(counts, state.out | state.dropped):
            return False
        if isinstance(self.rule, GenericRule) or (self.rule.exact and not state.real):
            return True  # GenericRule asked can_decode; a simulated round has nothing to solve
        return self.code.can_decode(counts)

    def _usable(self, state: _Round) -> np.ndarray:
        counts = state.counts
        if state.dropped:
            counts = counts.copy()
            counts[list(state.dropped)] = 0
        return counts

    def _ready(self, t: int) -> bool:
        state = self._open.get(t)
        if state is None:
            return False
        return self._ready_counts(state, self._usable(state))

    def _enough_to_locate(self, counts: np.ndarray, out: set) -> bool:
        """Verification mode: results enough to *locate* one corrupted worker, i.e. two more
        than decoding needs (one more only detects). For an any-``need``-of-``n`` rule that is
        ``need + 2`` workers, per group for per-group rules (capped at the group's size);
        otherwise every worker's whole result. Workers ``out`` of the round (their result was
        discarded, e.g. non-finite) cannot add to it: the wait caps at what the others can give,
        and the round then verifies with the redundancy it has (detecting with one spare result)."""
        rule = self.rule
        alive = np.ones(self.n, dtype=bool)
        alive[list(out)] = False
        if isinstance(rule, KOfN):
            return int(np.count_nonzero(counts > rule.msg)) >= min(int(alive.sum()), rule.need + 2)
        if isinstance(rule, PerGroup):
            have = (counts[rule.groups] > rule.msg).sum(axis=1)
            return bool((have >= np.minimum(alive[rule.groups].sum(axis=1), rule.need + 2)).all())
        return bool((counts[alive] >= self._R[alive]).all())

    def worker_out(self, t: int, worker: int) -> None:
        """Worker ``worker`` will deliver nothing more in round ``t`` (a driver discarded its
        non-finite result): verification stops waiting for it."""
        state = self._open.get(t)
        if state is not None:
            state.out.add(self._check_worker(worker))

    def _close(self, t: int, arrived: frozenset[int]) -> list[tuple[int, np.ndarray | None]]:
        state = self._round_to_close(t)
        # a simulated round (no payloads) that the code's exact rule passes has nothing to decode
        simulated = state.real is not True and self._ready_counts(state, self._usable(state))
        gradient = None if simulated else self._decode(t, state, arrived)
        row = np.ones(self.n, dtype=bool)
        row[list(arrived)] = False
        if state.dropped:
            row[list(state.dropped)] = True
        self._record(t, row)
        del self._open[t]
        self._closed.add(t)
        return [(t, gradient)]

    def _round_to_close(self, t: int) -> _Round:
        if t in self._closed:
            raise ProtocolError(f"round {t} is already closed")
        state = self._open.get(t)
        if state is None:
            raise ProtocolError(f"round {t} was never planned")
        return state

    def _decode(self, t: int, state: _Round, arrived: frozenset[int], reduced_by: int = 0):
        """Round ``t``'s gradient (None when it held no payloads), or when it held notes (the
        collective path) its :class:`~gradcode.codes.reduce.ReducePlan` for ``reduced_by``
        reducing workers (default: the workers in ``arrived``)."""
        while True:
            counts = self._usable(state)
            pattern = {w: int(c) for w, c in enumerate(counts) if c}
            try:
                self.code.check_decodable(pattern)
            except NotDecodableError as exc:
                dropped = (
                    f" after dropping workers {sorted(state.dropped)} (non-finite or inconsistent messages)"
                    if state.dropped else ""
                )
                raise NotDecodableError(f"round {t} cannot be decoded{dropped}: {exc}") from None
            if not state.real:
                return None
            if state.running is not None:
                return state.running.result(dim=self.dim).gradient
            # the messages themselves (arrays or Messages), no (n x d) copy
            msgs = {w: state.payloads[w][:c] if c > 1 else state.payloads[w][0] for w, c in pattern.items()}
            m = state.payloads[next(iter(pattern))][0].shape[-1]
            dim = self.dim if self.dim is not None else m * self.chunks
            try:
                if reduced_by or isinstance(state.payloads[next(iter(pattern))][0], Note):
                    if not reduced_by and state.plan is not None:
                        return state.plan  # the close of a round its members reduced
                    state.plan = reduce_plan(self.code, {w: state.payloads[w][:c] for w, c in pattern.items()},
                                             dim=dim, reduced_by=reduced_by or max(len(arrived), 1))
                    return state.plan
                if self.verify:
                    gradient, check = self.code.decode_verified(msgs, dim=dim)
                    if check.excluded:
                        state.dropped.update(check.excluded)
                        self.corrupt_workers[t] = check.excluded
                    return gradient
                return self.code.decode(msgs, dim=dim)
            except (ImpreciseDecodeError, InconsistentMessagesError):
                # the data cancel too much for these coefficients (more rows give smaller ones),
                # or the results disagree and the checks cannot yet say who is wrong (more results
                # give more checks): wait for more before trying again
                state.retry_at = int(counts.sum())
                raise
            except NonFiniteMessageError as exc:
                if not set(exc.workers) - state.dropped:  # overflow from finite messages
                    raise NotDecodableError(f"round {t}: {exc}") from None
                state.dropped.update(exc.workers)

    # -------------------------------------------------------------- the collective path
    def collective_support(self) -> str | None:
        """None for a code with decoding coefficients; verification (it reads the values of the
        spare results) and operator codes (peeling) keep the star path."""
        if self.verify:
            return "verify=True checks the messages' values against each other, which only the star path holds"
        if getattr(self.code, "lazy", False):
            return f"{self.code!r} decodes by an operator of its own (peeling), not by fixed coefficients"
        return None

    def reduce_plans(self, t: int, arrived, reduced_by: int | None = None) -> list[tuple[int, object]]:
        """``[(t, ReducePlan)]`` of round ``t`` from the notes held (:meth:`Scheme.reduce_plans`),
        for ``reduced_by`` reducing workers (default: those in ``arrived``)."""
        t = check_round(t)
        state = self._round_to_close(t)
        arrived = frozenset(arrived)
        k = len(arrived) if reduced_by is None else int(reduced_by)
        return [(t, self._decode(t, state, arrived, reduced_by=max(k, 1)))]

    def forget_results(self, t: int, worker: int) -> None:
        """``worker``'s messages of round ``t`` are gone (its process died holding them): the
        round holds none of them, and a task sent again delivers them anew from index 0."""
        state = self._open.get(check_round(t))
        w = self._check_worker(worker)
        if state is not None:
            state.counts[w] = 0
            state.payloads.pop(w, None)
            state.times.pop(w, None)
            state.retry_at = None
            state.plan = None  # it read the messages that are gone

    def arrival_times(self, t: int) -> dict[int, list[float]]:
        """Arrival time of each message received so far in open round ``t``, per worker."""
        state = self._open.get(t)
        if state is None:
            return {}
        _flush_times(state)
        return {w: list(v) for w, v in state.times.items()}


def _flush_times(state: _Round) -> None:
    """Move the times of batched messages into ``state.times`` (per worker, in arrival order)."""
    for workers, times in state.batches:
        for w, x in zip(workers.tolist(), times.tolist()):
            state.times.setdefault(w, []).append(x)
    state.batches.clear()
