"""The round protocol: the master's side of a gradient-coding scheme, round by round.

A *job* is one gradient at one model state; a *round* is one request to the workers. Both drivers
(the virtual-clock simulator and the Ray runtime) run a scheme the same way::

    tasks = scheme.plan(t)                       # {worker: (Task, ...)} for round t
    ... each worker computes its tasks in order and streams its messages ...
    scheme.on_result(t, worker, index, payload, time)   # message `index` of the worker's round
    scheme.ready(t)                              # can round t end? (its due jobs decode)
    finished = scheme.close(t, arrived)          # [(job, gradient)], straggler history updated

``index`` counts the worker's messages in round ``t`` across its tasks in plan order (task 0's
messages first). ``payload`` is the message in the runtime and ``None`` in the simulator, where
only timing matters; ``close`` then returns ``None`` for gradients. The runtime's workers send a
:class:`~gradcode.codes.messages.Message`: ``values`` (``(m,)``, ``m = ceil(d / chunks)``, in the
wire type), ``scale`` (what the message summed, for the decode's error bound) and ``factor`` (the
power of two 16-bit values were scaled by); ``code.decode`` takes Messages as they are, and
``np.asarray(payload)`` gives the message in its own units. A scheme driven by hand may pass plain
arrays. The driver, not the scheme, owns time and the closing rule (wait until ready, or the
mu-tolerance deadline of the SGC paper followed by a wait-out when not ready): the scheme only says
whether what it holds suffices. ``arrived`` passed to ``close`` is the set of workers the driver
counted as non-stragglers in the round (their results arrived before the round closed).

Workers are generic: a :class:`Task` names partitions and an encoding tensor, and the worker sends
``sum_j sum_c coefficients[r, j, c] * g_j[c]`` for each message ``r``. All intelligence is here.
"""

from __future__ import annotations

import numbers
from abc import ABC
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from gradcode.errors import GradcodeError
from gradcode.registry import Registry, package_modules

#: scheme families that are not a single static code (GC-DC; the sequential codes), by name.
#: Every code of ``gradcode.codes.CODES`` is a scheme too, through :func:`make_scheme`.
SCHEMES: Registry = Registry("scheme", modules=package_modules(__file__, packages=True))


@dataclass(frozen=True, eq=False)
class Task:
    """Work for one worker in one round, for one job.

    ``coefficients`` has shape ``(R, len(partitions), L)``: message ``r`` of this task is
    ``sum_j sum_c coefficients[r, j, c] * g_{partitions[j]}[c]`` (each partial gradient cut into
    ``L`` chunks of length ``m``).
    """

    job: int
    partitions: tuple[int, ...]
    coefficients: np.ndarray

    @property
    def messages(self) -> int:
        return int(self.coefficients.shape[0])


#: what a driver needs of a scheme: every public member of :class:`Scheme`
PROTOCOL = ("n", "chunks", "delay", "partition_sizes", "static_code", "stored_partitions", "plan", "on_result",
            "ready", "close", "stragglers", "observe_states", "round_stragglers")


class Scheme(ABC):
    """Base class of round-by-round schemes: the protocol both drivers rely on, and on nothing
    else (see the module docstring).

    Public methods validate their arguments and call the private hooks, which see clean input
    (galois's pattern): a subclass implements ``_plan``, ``_on_result``, ``_ready``, ``_close``
    and ``straggler_history``, and may override ``_observe_states`` (perfect straggler state
    information), ``round_stragglers`` and ``static_code``. Validation errors are
    :class:`ProtocolError` (a driver broke the protocol) or ``TypeError``/``ValueError`` naming the
    argument.
    """

    #: number of workers
    n: int
    #: L: each partial gradient is cut into this many chunks; messages have length ceil(d / L)
    chunks: int = 1
    #: jobs finish at most ``delay`` rounds after they start (0 for static codes)
    delay: int = 0
    #: data fraction of each partition index that Tasks name (drivers time a task by its sizes)
    partition_sizes: np.ndarray
    #: whether the partitions (``partition_sizes``) change during a run: a runtime driver then
    #: sends each task with the current sizes and the workers hold the whole data set
    changes_layout: bool = False

    @property
    def static_code(self):
        """The :class:`~gradcode.codes.LinearCode` this scheme runs unchanged in every round (job
        ``t`` in round ``t``, every worker the same task each round), or ``None``. A driver may
        then use the code's closed decodability rule over many rounds at once (the simulator's
        vectorized path); it never needs to know the scheme's class."""
        return None

    @property
    def load(self) -> float | None:
        """Data fraction a worker computes per round (the most over workers), for reports: the
        static code's ``load``; ``None`` where a dynamic scheme does not declare its own."""
        code = self.static_code
        return None if code is None else float(code.load)

    def stored_partitions(self, worker: int) -> tuple[int, ...]:
        """The partitions worker ``worker`` stores for the whole run (the runtime loads them
        once; every task a plan gives the worker must name only these). Default: the static
        code's placement, else every partition."""
        worker = self._check_worker(worker)
        code = self.static_code
        if code is not None:
            return code.placement[worker]
        return tuple(range(len(self.partition_sizes)))

    # -------------------------------------------------------------- the protocol
    def plan(self, t: int) -> dict[int, tuple[Task, ...]]:
        """Tasks of round ``t`` per worker (a worker absent from the dict idles this round)."""
        return self._plan(check_round(t))

    def on_result(self, t: int, worker: int, index: int, payload: Any, time: float) -> None:
        """Message ``index`` of ``worker`` in round ``t`` arrived at ``time`` (seconds since the
        round started). ``payload``: the message (runtime: a :class:`~gradcode.codes.messages.Message`;
an array when driven by hand) or ``None`` (simulator)."""
        if type(t) is not int:
            t = check_round(t)
        if type(worker) is not int or not 0 <= worker < self.n:
            worker = self._check_worker(worker)
        if type(index) is not int or index < 0:
            if isinstance(index, bool) or not isinstance(index, numbers.Integral) or index < 0:
                raise ProtocolError(f"message index must be an integer >= 0, got {index!r}")
            index = int(index)
        self._on_result(t, worker, index, payload, time)

    def ready(self, t: int) -> bool:
        """Whether every job due by round ``t`` can be decoded from what round ``t`` (and earlier
        rounds) delivered."""
        if type(t) is not int or t < 0:  # the simulator asks after every message: ints pass fast
            t = check_round(t)
        return self._ready(t)

    def close(self, t: int, arrived) -> list[tuple[int, np.ndarray | None]]:
        """End round ``t``: return the jobs finished in it with their decoded gradients (``None``
        in simulation); the scheme records the stragglers (at least the workers not in
        ``arrived``) with :meth:`_record`. ``arrived``: worker ids, or an ``(n,)`` boolean mask."""
        t = check_round(t)
        n = self.n
        if isinstance(arrived, np.ndarray) and arrived.dtype == bool:
            if arrived.shape != (n,):
                raise ValueError(f"arrived as a mask must have shape ({n},), got {arrived.shape}")
            return self._close(t, frozenset(np.flatnonzero(arrived).tolist()))
        return self._close(t, frozenset(w if type(w) is int and 0 <= w < n else self._check_worker(w)
                                        for w in arrived))

    def observe_states(self, t: int, straggling, rates=None) -> None:
        """Perfect straggler state information: before ``plan(t)``, a driver that knows the
        delay model's states of round ``t`` (``straggling``: ``(n,)`` booleans; ``rates``:
        ``(n,)`` per-worker rates for heterogeneous models, or ``None``) hands them over. Schemes
        without a use for them ignore them."""
        t = check_round(t)
        straggling = np.asarray(straggling)
        if straggling.shape != (self.n,) or straggling.dtype != bool:
            raise ValueError(f"straggling must be ({self.n},) booleans, got {straggling.dtype} {straggling.shape}")
        if rates is not None:
            rates = np.asarray(rates, dtype=np.float64)
            if rates.shape != (self.n,):
                raise ValueError(f"rates must have shape ({self.n},), got {rates.shape}")
        self._observe_states(t, straggling, rates)

    def observe_times(self, t: int, times, injected=None) -> None:
        """After round ``t`` closed, a driver hands over its measured times: ``times[w]`` seconds
        after the round started at which worker ``w`` delivered its result, ``-1`` for a
        straggler, and ``injected[w]`` the delay it injected into that worker's task (None: none).
        Schemes that adapt to measured times (:class:`~gradcode.schemes.switch.ProbeThenSwitch`)
        use them; others ignore them."""

    def worker_out(self, t: int, worker: int) -> None:
        """A driver says ``worker`` will deliver nothing more in round ``t`` (its result held NaN
        or infinity and was discarded). Schemes that wait for spare results (verification) stop
        waiting for it; others need not care."""

    # ------------------------------------------------------------ the collective path (optional)
    def collective_support(self) -> str | None:
        """None when a driver may run this scheme on the collective path (its payloads are
        :class:`~gradcode.codes.messages.Note` s, :meth:`reduce_plans` plans the decode and the
        workers that hold the messages reduce them), else why not, in words. Default: not."""
        return f"{type(self).__name__} does not plan its decodes as reductions"

    def reduce_plans(self, t: int, arrived, reduced_by: int | None = None) -> list[tuple[int, object]]:
        """What :meth:`close` would decode in round ``t``, as ``[(job, ReducePlan)]``
        (:mod:`gradcode.codes.reduce`) for ``reduced_by`` reducing workers (default: those in
        ``arrived``), without closing the round: a driver reduces first and closes only once a
        reduction succeeded. A job listed with several plans is their sum (M-SGC's groups); a
        round finishing no job gives ``[]``. Raises what ``close`` raises for a round that does
        not decode."""
        raise NotImplementedError(self.collective_support())

    def forget_results(self, t: int, worker: int) -> None:
        """``worker``'s results of round ``t`` are gone (its process died holding them, on the
        collective path): decode without them; a task sent again delivers them anew. A scheme
        whose jobs span rounds forgets those of earlier rounds too, and raises
        :class:`~gradcode.errors.ResultsLostError` for one it cannot do without."""
        raise NotImplementedError(self.collective_support())

    @property
    def stragglers(self) -> np.ndarray:
        """The straggler history: ``(closed rounds, n)`` booleans, row ``t`` marks the stragglers
        of round ``t`` (read-only)."""
        return self.straggler_history

    def round_stragglers(self, counts, planned) -> np.ndarray:
        """The stragglers of a closed round as both drivers count them: ``counts[w]`` leading
        messages of worker ``w`` had been delivered when the round closed, ``planned[w]`` were
        planned. Default: a worker is a straggler unless it delivered all its planned messages
        (workers given no task are not stragglers); a scheme whose master stops workers early
        (AGC) asks its code."""
        return np.asarray(counts, dtype=np.intp) < np.asarray(planned, dtype=np.intp)

    def should_close(self, t: int, now: float) -> bool:
        """Default closing rule: as soon as ready. Drivers apply the mu-rule themselves."""
        return self.ready(t)

    # -------------------------------------------------------------- batched rounds (simulator)
    @property
    def batched_rounds(self) -> bool:
        """Whether the simulator may play this scheme's rounds with :meth:`plan_loads`,
        :meth:`ready_after` and :meth:`on_results` (a few array operations instead of one
        protocol call per message, with the same results bit for bit: tests compare the two).
        A class declares it with ``_batched_family = True``; a subclass of it that overrides a
        member the batched calls bypass (:data:`BATCH_BYPASSED`) is played message by message."""
        family = next((c for c in type(self).__mro__ if "_batched_family" in c.__dict__), None)
        if family is None or not family.__dict__["_batched_family"]:
            return False
        cls = type(self)
        return all(getattr(cls, name, None) is getattr(family, name, None) for name in BATCH_BYPASSED)

    def plan_loads(self, t: int) -> RoundLoads:
        """Open round ``t`` as :meth:`plan` does, but return only what the simulator times it by
        (:class:`RoundLoads`); the Tasks are not built. A batched scheme's loads equal, bit for
        bit, :func:`~gradcode.schemes.static.task_schedule` over its ``plan(t)``."""
        raise NotImplementedError(f"{type(self).__name__} does not play batched rounds")

    def ready_after(self, t: int, workers: np.ndarray, indices: np.ndarray) -> int | None:
        """Without receiving them: the fewest leading messages of the sequence ``(workers[i],
        indices[i])`` (round ``t``'s messages not received yet, in arrival order) after which
        :meth:`ready` would hold: ``0`` if it holds now, ``None`` if not even after all. Batched
        schemes' readiness never turns False as messages arrive, so this is one threshold."""
        raise NotImplementedError(f"{type(self).__name__} does not play batched rounds")

    def close_rounds(self, first: int, rows: np.ndarray) -> None:
        """A batched scheme with a :attr:`static_code`: close rounds ``first .. first + len(rows)
        - 1`` that a driver played whole with the code's rule (``rows[i]``: the workers not in by
        the close of round ``first + i``), as :meth:`close` would have closed them one by one."""
        raise NotImplementedError(f"{type(self).__name__} does not close rounds by blocks")

    @property
    def compiled_rounds(self) -> bool:
        """Whether the simulator may play whole blocks of this scheme's rounds in one call
        (:meth:`play_rounds`: compiled, with the batched path's results bit for bit; tests
        compare the three paths). A class declares it with ``_compiled_family = True``; as the
        compiled code replaces the scheme's methods wholesale, a subclass of it that defines any
        method or property of its own is played by the batched path."""
        if not self.batched_rounds:
            return False
        mro = type(self).__mro__
        family = next((c for c in mro if "_compiled_family" in c.__dict__), None)
        if family is None or not family.__dict__["_compiled_family"]:
            return False
        own = mro[: mro.index(family)]
        return not any(callable(v) or isinstance(v, (property, classmethod, staticmethod))
                       for c in own for k, v in c.__dict__.items() if not k.startswith("__"))

    def play_rounds(self, first: int, intercept: np.ndarray, slope: np.ndarray, message_time: float,
                    mu: float | None, wait_all: bool, records: bool, straggling: np.ndarray | None = None,
                    rates: np.ndarray | None = None) -> PlayedRounds:
        """Play rounds ``first .. first + m - 1`` as the simulator's event path plays them
        (``intercept``/``slope``: ``(m, n)``, the delay draw of those rounds; ``message_time``;
        the closing rule ``mu`` (``None``: decodable) and ``wait_all``; ``straggling`` and
        ``rates``: ``(m, n)``, what the driver would hand to :meth:`observe_states` before each
        round, or ``None``), planning, receiving and closing each in the scheme, which is left as
        after closing the last round played. It may play fewer rounds than given (the result's
        length says how many): the driver then plays the next round through the protocol and
        calls again. With ``records`` the arrival and finish tables are filled too. Schemes with
        :attr:`compiled_rounds` implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not play compiled rounds")

    def on_results(self, t: int, workers: np.ndarray, indices: np.ndarray, times: np.ndarray) -> None:
        """:meth:`on_result` with payload ``None`` for each message of the sequence, in order
        (the simulator's batched rounds; a batched scheme updates its state with array
        operations)."""
        for w, i, x in zip(workers.tolist(), indices.tolist(), times.tolist()):
            self.on_result(t, w, i, None, x)

    # -------------------------------------------------------------- hooks
    def _plan(self, t: int) -> dict[int, tuple[Task, ...]]:
        """Round ``t``'s tasks (``t`` a validated round number)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _plan")

    def _on_result(self, t: int, worker: int, index: int, payload: Any, time: float) -> None:
        """Record a message (``t``, ``worker``, ``index`` validated ints)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _on_result")

    def _ready(self, t: int) -> bool:
        """Whether round ``t``'s due jobs decode."""
        raise NotImplementedError(f"{type(self).__name__} must implement _ready")

    def _close(self, t: int, arrived: frozenset[int]) -> list[tuple[int, np.ndarray | None]]:
        """End round ``t`` (``arrived``: validated worker ids)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _close")

    @property
    def straggler_history(self) -> np.ndarray:
        """``(rounds, n)`` booleans: row ``t`` marks the stragglers of round ``t`` (rows of rounds
        not closed yet are all False). A read-only view."""
        history = self.__dict__.get("_history")
        if history is None:
            return np.zeros((0, self.n), dtype=bool)
        view = history[: self._history_rounds].view()
        view.flags.writeable = False
        return view

    def _record(self, t: int, row: np.ndarray) -> None:
        """Record round ``t``'s stragglers (``_close`` calls it; ``straggler_history`` shows it)."""
        self._history_rows(t + 1)[t] = row
        self._history_rounds = max(self._history_rounds, t + 1)

    def _history_rows(self, rows: int) -> np.ndarray:
        """The history array, grown (doubling) to hold at least ``rows`` rounds."""
        history = self.__dict__.get("_history")
        if history is None or rows > history.shape[0]:
            size = 0 if history is None else history.shape[0]
            grown = np.zeros((max(2 * size, rows, 64), self.n), dtype=bool)
            if history is not None:
                grown[:size] = history
            self._history = history = grown
            self._history_rounds = getattr(self, "_history_rounds", 0)
        return history

    def _observe_states(self, t: int, straggling: np.ndarray, rates: np.ndarray | None) -> None:
        """Default: ignore the states (imperfect information: use ``straggler_history``)."""

    def _check_worker(self, w) -> int:
        if isinstance(w, bool) or not isinstance(w, numbers.Integral):
            raise TypeError(f"worker id must be an integer in [0, {self.n}), got {w!r}")
        if not 0 <= w < self.n:
            raise ValueError(f"unknown worker id {w}: workers are 0..{self.n - 1}")
        return int(w)


#: the members a batched round does not call: overriding one turns batching off
BATCH_BYPASSED = ("plan", "on_result", "ready", "close", "round_stragglers", "observe_states", "_plan", "_on_result",
                  "_ready", "_close", "_observe_states", "_record", "_receive", "_decodable")


class RoundLoads(NamedTuple):
    """What :meth:`Scheme.plan_loads` returns for a round: ``loads`` ``(n, R)``, the data fraction
    worker ``w`` has processed when its message ``i`` can go out (padded past its last message by
    repeating it; a row of zeros for an idle worker); ``messages`` ``(n,)`` intp, each worker's
    number of messages (0: idle); ``last_job`` the highest job given work (``-1``: none)."""

    loads: np.ndarray
    messages: np.ndarray
    last_job: int


class ClosedRounds:
    """The rounds a scheme has closed (``t in closed``, ``add``, ``update``, ``isdisjoint``, as a
    set of ints), in memory bounded by the rounds closed out of order: every round below
    ``floor`` is closed and ``ahead`` holds the closed rounds above it. (A set grew by about 60
    bytes a round: 120 MB over a million-round GC-DC run, which keeps two.)"""

    __slots__ = ("ahead", "floor")

    def __init__(self, rounds=()):
        self.floor = 0
        self.ahead: set[int] = set()
        self.update(rounds)

    def __contains__(self, t) -> bool:
        return 0 <= t < self.floor or t in self.ahead

    def add(self, t: int) -> None:
        if t > self.floor:
            self.ahead.add(t)
        elif t == self.floor:
            self.floor += 1
            self._absorb()

    def update(self, rounds) -> None:
        if isinstance(rounds, range) and rounds.step == 1 and 0 <= rounds.start <= self.floor:
            self.floor = max(self.floor, rounds.stop)
            self.ahead.difference_update(range(rounds.start, rounds.stop))
            self._absorb()
            return
        for t in rounds:
            self.add(t)

    def isdisjoint(self, rounds) -> bool:
        if isinstance(rounds, range) and rounds.step == 1:
            if max(rounds.start, 0) < min(rounds.stop, self.floor):
                return False
            return not any(t in rounds for t in self.ahead)
        return not any(t in self for t in rounds)

    def _absorb(self) -> None:
        while self.floor in self.ahead:
            self.ahead.remove(self.floor)
            self.floor += 1

    def __eq__(self, other) -> bool:
        if isinstance(other, ClosedRounds):
            return self.floor == other.floor and self.ahead == other.ahead
        return NotImplemented

    def __repr__(self) -> str:
        return f"ClosedRounds(below={self.floor}, ahead={sorted(self.ahead)})"


class PlayedRounds(NamedTuple):
    """What :meth:`Scheme.play_rounds` returns for ``m`` rounds: ``end`` ``(m,)`` each round's
    length, ``waitout`` ``(m,)`` whether the mu-rule waited it out, ``stragglers`` ``(m, n)`` (the
    simulator's rows: workers given a task that had not delivered it all by the close),
    ``arrivals`` and ``finish`` ``(m, n)`` (the simulator's records; ``None`` without records),
    ``jobs`` and ``job_rounds``: the jobs finished and the round of each, in order, and
    ``last_job``: the highest job given work (``-1``: none)."""

    end: np.ndarray
    waitout: np.ndarray
    stragglers: np.ndarray
    arrivals: np.ndarray | None
    finish: np.ndarray | None
    jobs: np.ndarray
    job_rounds: np.ndarray
    last_job: int


class ProtocolError(GradcodeError, ValueError):
    """A driver broke the round protocol (a message out of order, a round closed twice, ...)."""


def check_round(t) -> int:
    if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 0:
        raise ProtocolError(f"round must be an integer >= 0, got {t!r}")
    return int(t)


def accept_messages(counts: np.ndarray, limit: np.ndarray, t: int, workers, indices, *others) -> tuple:
    """The message rules of :meth:`Scheme.on_result` applied to a whole sequence at once (what a
    batched :meth:`Scheme.on_results` receives): worker ``w`` holds ``counts[w]`` leading
    messages of ``limit[w]``; its messages in the sequence must continue them in order. Returns
    ``(duplicates, workers, indices, *others)``: the sequence (and arrays ``others`` aligned with
    it) without repeated messages, and how many were dropped; an index beyond the worker's
    messages, or one that arrives before an earlier one, is a :class:`ProtocolError`, as
    :meth:`on_result` raises it. When every message is new and in order (the simulator's case)
    a few array operations say so and the arrays come back as they are."""
    workers = np.asarray(workers, dtype=np.intp)
    indices = np.asarray(indices, dtype=np.intp)
    keep = _repeated(counts, limit, t, workers, indices)
    if keep is None:
        return (0, workers, indices, *others)
    return (int(keep.size - np.count_nonzero(keep)), workers[keep], indices[keep], *(np.asarray(o)[keep] for o in others))


def _repeated(counts, limit, t, workers, indices) -> np.ndarray | None:
    """:func:`accept_messages`' check: ``None`` if every message is new and in order, else the
    mask of those to keep."""
    N = workers.size
    if N and ((workers < 0) | (workers >= counts.shape[0])).any():
        w = int(workers[(workers < 0) | (workers >= counts.shape[0])][0])
        raise ValueError(f"unknown worker id {w} in round {t}: workers are 0..{counts.shape[0] - 1}")
    if N and (indices < 0).any():
        raise ProtocolError(f"message index must be an integer >= 0, got {int(indices[indices < 0][0])}")
    first = counts[workers]
    if not N or ((indices >= first) & (indices < limit[workers])).all():
        seen = np.bincount(workers, minlength=counts.shape[0])
        if (seen <= 1).all():
            if (indices == first).all():
                return None
        else:  # several messages of a worker: indices first .. first + seen - 1, each once, in order
            width = int(limit.max())
            pos = np.full((counts.shape[0], width), -1, dtype=np.intp)
            pos[workers, indices] = np.arange(N)
            taken = np.arange(width) < (counts + seen)[:, None]
            expect = (np.arange(width) >= counts[:, None]) & taken
            if np.count_nonzero(pos >= 0) == N and (expect == (pos >= 0)).all():
                later = (np.diff(pos, axis=1) > 0) | ~(expect[:, 1:])
                if later.all():
                    return None
    keep = np.ones(N, dtype=bool)
    have = counts.copy()
    for j, (w, i) in enumerate(zip(workers.tolist(), indices.tolist())):
        if i < have[w]:
            keep[j] = False
        elif i >= limit[w]:
            raise ProtocolError(f"worker {w} has {int(limit[w])} message(s) in round {t}; got message index {i}")
        elif i > have[w]:
            raise ProtocolError(f"message {i} of worker {w} in round {t} arrived before message {int(have[w])}:"
                                " workers send their messages in order")
        else:
            have[w] += 1
    return keep
