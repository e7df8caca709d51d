"""What SR-SGC and M-SGC share: the base gradient codes, the wait-out rule (conformance of the
effective straggler pattern to the scheme's model) and the round bookkeeping of the protocol.

Krishnan, Ebrahimi, Khisti, *Sequential Gradient Coding for Straggler Mitigation* (ICLR 2023).
Rounds and jobs are 0-indexed here: the paper's job ``t`` / round ``t`` (``t >= 1``) is our job /
round ``t - 1``; jobs with a negative index (the paper's ``t <= 0``) are trivial and never planned.

Base codes (Sec. 3.1, App. G)
-----------------------------
``(n, s)``-GC is gradcode's cyclic repetition code (:class:`~gradcode.codes.tandon.CRC`): worker
``i`` holds partitions ``[i : i + s]*`` and sends ``l_i = sum_j alpha_{i,j} g_j``; any ``n - s``
results decode ``sum_j g_j``. GC-Rep (App. G, Fig. 14, for ``(s + 1) | n``) puts worker ``i`` in
group ``floor(i / (s + 1))``, which holds partitions ``[g (s + 1) : (g + 1)(s + 1) - 1]`` and sends
their plain sum ``l^(g)``; one result per group decodes. It is gradcode's
:class:`~gradcode.codes.tandon.FRC` with its workers renumbered (FRC puts worker ``w`` in group
``w mod n/(s+1)``), so both base codes decode with the codes layer's own decoders.

The wait-out rule (Sec. 2, Remark 2.3)
--------------------------------------
"In any round, if the actual straggler pattern deviates from the straggler model assumption, the
master will wait for stragglers to return results in that round. This way, the actual straggler
pattern will 'effectively' continue to conform to the assumed straggler model." The *effective*
pattern marks, in each closed round, the workers given a task that did not deliver all of it by
the close (a worker given no task is not a straggler). :class:`Conformance` checks
it round by round on *tracks*, each a stretch of rounds that must conform to one of a list of
models (the rule written once, compiled, in :mod:`.conformance`; the compiled rounds run it too):

* SR-SGC (Prop. 3.1: "conforms to either (i) the (B, W, lambda)-bursty model or else (ii) the
  s-stragglers-per-round model, when restricted to any window of W consecutive rounds"): one
  track per window ``[j : j + W - 1]``; the window must be bursty or have at most ``s``
  stragglers in each of its rounds.
* M-SGC (Prop. 3.2 and App. E): job ``u``'s mini-tasks all lie in rounds ``[u : u + T]``,
  ``T = W - 2 + B``, and the proof uses only the pattern there, so one track per job: its span
  must conform to the (B, W, lambda)-bursty model or to the (N = B, W' = W + B - 1,
  lambda' = lambda)-arbitrary model (restricted to the span: windows truncated at its ends).

A round is *ready* when every job due in it decodes and the effective pattern with the round's
current stragglers (workers given a task whose results are not all in yet) conforms on every
live track. Conformance only improves as results arrive, so waiting for every worker always
restores it (a straggler-free round conforms whenever the past did), and by Props. 3.1 / 3.2 the
due job then decodes: a deviation costs a wait-out, never a wrong or missing gradient.
"""

from __future__ import annotations

import numpy as np

from gradcode._validation import check_int
from gradcode.codes.tandon import CRC, FRC
from gradcode.codes.messages import Message, Note
from gradcode.codes.reduce import reduce_plan, relabel
from gradcode.errors import NotDecodableError, ResultsLostError
from gradcode.schemes.base import (
    PlayedRounds,
    ProtocolError,
    RoundLoads,
    Scheme,
    Task,
    accept_messages,
    check_round,
)
from gradcode.schemes.compiled import Timing
from gradcode.schemes.sgc.conformance import KINDS, Models, evaluate, first_conforming, scratch, window
from gradcode.schemes.sgc.rounds import AT, FINISHED, LAST_JOB, RECEIVED, STATUS, Tables

__all__ = ["BaseGC", "Conformance", "SequentialScheme"]

#: the coefficients of a task that computes one partial gradient (message = g_p): read-only, so
#: the simulator's schedule cache keys it by identity
ONE = np.ones((1, 1, 1))
ONE.flags.writeable = False


def check_params(n, B, W, lam):
    """``n, B, W, lam`` as ints (``TypeError`` naming the argument otherwise)."""
    n = check_int("n", n, minimum=1)
    return n, check_int("B", B), check_int("W", W), check_int("lam", lam)


def check_jobs(jobs):
    return None if jobs is None else check_int("jobs (J, the number of jobs)", jobs, minimum=1)


class BaseGC:
    """An ``(n, s)`` gradient code as the sequential schemes use it (module docstring): the
    partitions and coefficients of worker ``i`` (local partition ids ``0..n-1``), the
    decodability rule on a mask of workers whose result arrived, and the decoder.

    ``rep=False``: ``(n, s)``-GC (CRC, any ``n - s`` results). ``rep=True``: GC-Rep (needs
    ``(s + 1) | n``; one result per group ``floor(i / (s + 1))``)."""

    def __init__(self, n: int, s: int, *, rep: bool = False, seed=0):
        self.n, self.s, self.rep = n, s, rep
        if rep:
            self.code = FRC(n, s)
            groups = n // (s + 1)
            i = np.arange(n)
            #: FRC worker that plays worker i (FRC serves group w mod groups)
            self.inner = (i // (s + 1) + groups * (i % (s + 1))).astype(np.intp)
            self.group = i // (s + 1)
            self.groups = groups
        else:
            self.code = CRC(n, s, seed=seed)
            self.inner = np.arange(n, dtype=np.intp)
            self.group = None
            self.groups = None
        self.need = n - s
        self._parts = [tuple(int(p) for p in self.code.placement[int(q)]) for q in self.inner]
        coefs = []
        for q in self.inner:
            c = np.array(self.code.encoders[int(q)], dtype=np.float64)
            c.flags.writeable = False
            coefs.append(c)
        self._coefs = coefs

    def partitions(self, i: int) -> tuple[int, ...]:
        """Local partitions of worker ``i``: ``[i : i + s]*`` (GC) or its group's (GC-Rep)."""
        return self._parts[i]

    def coefficients(self, i: int) -> np.ndarray:
        """``(1, s + 1, 1)`` read-only encoder of worker ``i``."""
        return self._coefs[i]

    def decodable(self, mask: np.ndarray, count: int | None = None) -> bool:
        """Whether the results of the workers in ``mask`` (``(n,)`` booleans) decode."""
        if self.rep:
            return bool(np.bincount(self.group[mask], minlength=self.groups).all())
        return (int(mask.sum()) if count is None else count) >= self.need

    def _chosen(self, workers) -> list[int]:
        """The workers whose results the decode reads: all, or for GC-Rep the first of each group
        (one worker per group suffices)."""
        if not self.rep:
            return sorted(workers)
        chosen: dict[int, int] = {}
        for w in sorted(workers):
            chosen.setdefault(int(self.group[w]), w)
        return list(chosen.values())

    def decode(self, messages: dict[int, np.ndarray], dim: int) -> np.ndarray:
        """``sum_j g_j`` over the code's ``n`` local partitions from ``{worker: message}``."""
        return self.code.decode({int(self.inner[w]): messages[w] for w in self._chosen(messages)}, dim=dim)

    def reduce_plan(self, notes: dict[int, Note], where: dict[int, tuple[int, int]], dim: int, reduced_by: int):
        """:meth:`decode` as a reduction (:func:`~gradcode.codes.reduce.reduce_plan`) of the
        results ``notes`` describes, worker ``w``'s kept at ``where[w]`` (round, index)."""
        ws = self._chosen(notes)
        plan = reduce_plan(self.code, {int(self.inner[w]): [notes[w]] for w in ws}, dim=dim, reduced_by=reduced_by)
        return relabel(plan, {int(self.inner[w]): (w, [where[w]]) for w in ws})


# --------------------------------------------------------------------------- conformance


class Conformance:
    """Round-by-round conformance of the effective straggler pattern on tracks (module
    docstring). ``models``: ``("bursty", B, W, lam)``, ``("arbitrary", N, W', lam')`` and
    ``("per-round", s)`` entries; a track conforms when it conforms to at least one.

    Use: :meth:`begin` (round ``t``, the closed rounds' rows, the live tracks' start rounds) once a
    round, :meth:`ok` with the round's current stragglers as often as needed, :meth:`commit` with
    the round's final row. A track that ended up conforming to no model (a driver closed a round
    that was not ready) stops constraining later rounds (``broken``). Every check is the compiled
    rounds' own (module docstring); this object holds the tracks' flags between rounds."""

    def __init__(self, n: int, models):
        self.n = n
        self.models = tuple(models)
        self.flags: dict[int, np.ndarray] = {}  # track start -> per-model flags (still conforming)
        self.broken: set[int] = set()
        self._starts: list[int] = []
        self._compiled()

    def _compiled(self) -> None:
        """The models as the compiled functions take them, and their scratch."""
        kinds = [KINDS[kind] for kind, *_ in self.models]
        params = [(0, 0, p[0]) if kind == "per-round" else tuple(p) for kind, *p in self.models]
        self._models = Models(*(np.array(col, dtype=np.int64) for col in (kinds, *zip(*params))))
        self._longest = max([p[1] for kind, *p in self.models if kind != "per-round"], default=1)
        self._tracks = scratch(self._longest, len(self.models), self.n)

    def __getstate__(self):  # what is derived from the models is rebuilt where the object lands
        state = self.__dict__.copy()
        for name in ("_models", "_tracks"):
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._compiled()  # also for a checkpoint written before the rule was compiled

    def begin(self, t: int, history: np.ndarray, starts) -> None:
        """Round ``t`` with the closed rounds' rows ``history`` and the live tracks' ``starts``
        (the broken ones left out): the entries' windows (:func:`~.conformance.window`)."""
        starts = [a for a in starts if a not in self.broken]
        K, M = len(starts), len(self.models)
        if K > self._tracks.starts.shape[0]:
            self._tracks = scratch(max(K, self._longest), M, self.n)
        tr = self._tracks
        tr.starts[:K] = starts
        prev = tr.prev[:K * M].reshape(K, M)
        prev[:] = True
        for k, a in enumerate(starts):
            f = self.flags.get(a)
            if f is not None:
                prev[k] = f
        self._starts = starts
        self._empty_ok = bool(prev.any(axis=1).all())
        window(t, np.asarray(history), tr, K, self._models)
        self._D = tr.base[:K * M].copy()

    def _per_track(self, cur: np.ndarray) -> np.ndarray:
        """``(K, M)``: whether each track still conforms to each model with ``cur``."""
        K, M = len(self._starts), len(self.models)
        out = np.empty(K * M, dtype=bool)
        evaluate(self._D, np.asarray(cur, dtype=np.bool_), self._tracks, K, M, out)
        return out.reshape(K, M)

    def first_ok(self, done: np.ndarray, cur: np.ndarray, never: int) -> int:
        """The smallest ``k`` such that :meth:`ok` holds for ``cur & (done > k)`` (worker ``w``
        leaves the round's stragglers once ``done[w]`` messages are in, ``never`` if it does not;
        :func:`~.conformance.first_conforming`)."""
        if not self._starts:
            return 0
        return int(first_conforming(self._D, np.asarray(done, dtype=np.int64), np.asarray(cur, dtype=np.bool_), never,
                            self._tracks, len(self._starts), len(self.models)))

    def ok(self, cur: np.ndarray) -> bool:
        """Whether the past and ``cur`` (``(n,)`` booleans: this round's stragglers) conform on
        every live track."""
        if not cur.any():
            return self._empty_ok
        if not self._starts:
            return True
        return bool(self._per_track(cur).any(axis=1).all())

    def violations(self, cur: np.ndarray) -> list[int]:
        """Start rounds of the live tracks that ``cur`` makes non-conforming."""
        if not self._starts:
            return []
        bad = ~self._per_track(cur).any(axis=1)
        return [a for a, b in zip(self._starts, bad) if b]

    def commit(self, row: np.ndarray, ending) -> None:
        """Record round ``t``'s final stragglers ``row``; tracks starting at ``ending`` end."""
        if self._starts:
            for a, f in zip(self._starts, self._per_track(row)):
                if f.any():
                    self.flags[a] = f
                else:
                    self.broken.add(a)
                    self.flags.pop(a, None)
        for a in ending:
            self.flags.pop(a, None)
            self.broken.discard(a)


# --------------------------------------------------------------------------- the scheme


class _Round:
    """An open round: per worker, the messages planned and received (arrays, so that batched
    rounds update them at once), the workers still incomplete (``cur``), the subclass's plan
    arrays (``plan``) and the Tasks, built only when a driver asks ``plan(t)``."""

    __slots__ = ("counts", "cur", "incomplete", "last_job", "plan", "planned", "ready_at", "t", "tasks", "version")

    def __init__(self, t: int, planned: np.ndarray, plan, last_job: int):
        self.t = t
        self.planned = planned
        self.plan = plan
        self.last_job = last_job
        self.counts = np.zeros(planned.shape[0], dtype=np.intp)
        self.cur = planned > 0
        self.incomplete = int(np.count_nonzero(self.cur))
        self.version = 0
        self.ready_at = (-1, False)
        self.tasks = None


class SequentialScheme(Scheme):
    """Round bookkeeping shared by the sequential schemes (module docstring).

    Rounds are played in order: ``plan(t)`` needs round ``t - 1`` closed (planning an open round
    again returns the same plan). Every task sends one message, so a worker's message ``index``
    is its ``index``-th task in plan order. Message rules as in
    :class:`~gradcode.schemes.static.StaticScheme`: a message for a closed round is ignored
    (``stale_messages``), a repeated index is ignored (``duplicate_messages``), an index out of
    order or beyond the worker's tasks is a :class:`ProtocolError`; payloads are all arrays
    (decode) or all ``None`` (simulate) over a run. A straggler's messages that did arrive are
    used (M-SGC: its finished mini-tasks count as received; more results never hurt either
    scheme). ``close`` on a round that is not ready raises :class:`NotDecodableError` and leaves
    it open.

    Batched rounds (:attr:`Scheme.batched_rounds`): readiness is the conjunction of three
    conditions that only improve as messages arrive (at most ``max_cur`` workers incomplete, the
    due job decodes, the pattern conforms), so :meth:`ready_after` is the largest of their three
    thresholds, each computed on the message positions at once.

    A round is planned as arrays (``_new_round(t)`` -> :class:`_Round` with the subclass's ``plan``
    arrays); subclasses implement ``_new_round``, ``_round_tasks(r)`` (the Tasks of the plan),
    ``_round_loads(r)`` (their prefix loads, as :func:`~gradcode.schemes.static.task_schedule`
    gives them), ``_receive(r, worker, index, payload)`` and ``_receive_batch(r, workers,
    indices)``, ``_due_after(r, u, at)`` (the messages after which job ``u`` decodes),
    ``_decodable(job)``, ``_decode(job)``, ``_track_starts(t)``, ``_ending_tracks(t)`` and
    ``_forget(job)``.
    """

    #: parameters for Python callers only, not listed or accepted by the CLI
    api_only_params = ("dim",)

    chunks = 1

    def _init_common(self, n, jobs, dim, models, max_cur):
        self.n = n
        self.jobs = check_jobs(jobs)
        self.dim = None if dim is None else check_int("dim", dim, minimum=1)
        self.conformance = Conformance(n, models)
        self._max_cur = max_cur  # no model allows more stragglers in one round
        self._round: _Round | None = None
        self._next = 0  # the round plan() expects
        self._finished: set[int] = set()
        self._real: bool | None = None
        self._notes = False  # the payloads are notes (the collective path): the workers keep the values
        #: where each received note's message is kept: ``{job: {key: (worker, round, index)}}``
        #: (the key the subclass files the note under), for the reductions' plans
        self._where: dict[int, dict] = {}
        self.stale_messages = 0
        self.duplicate_messages = 0

    # ----------------------------------------------------------- description
    @property
    def delay(self) -> int:
        """T: job ``t`` finishes by the end of round ``t + T``."""
        return self._T

    def _job_range(self, u: int) -> bool:
        return u >= 0 and (self.jobs is None or u < self.jobs)

    def due_job(self, t: int) -> int | None:
        """The job that must finish in round ``t`` (``t - T``), or ``None``."""
        u = t - self._T
        return u if self._job_range(u) and u not in self._finished else None

    # ----------------------------------------------------------- protocol hooks
    def _open(self, t: int) -> _Round:
        r = self._round
        if r is not None and r.t == t:
            return r
        if t != self._next:
            raise ProtocolError(
                f"{type(self).__name__} plays rounds in order: round {self._next} is next"
                + (f" (round {r.t} is still open: close it first)" if r is not None else "")
                + f"; got plan({t})"
            )
        r = self._new_round(t)
        self.conformance.begin(t, self.straggler_history, self._track_starts(t))
        self._round = r
        return r

    def _plan(self, t: int) -> dict[int, tuple[Task, ...]]:
        r = self._open(t)
        if r.tasks is None:
            r.tasks = self._round_tasks(r)
        return r.tasks

    def plan_loads(self, t: int) -> RoundLoads:
        r = self._open(check_round(t))
        return RoundLoads(self._round_loads(r), r.planned, r.last_job)

    def _on_result(self, t: int, w: int, index: int, payload, time: float) -> None:
        r = self._round
        if r is None or r.t != t:
            if t < self._next:
                self.stale_messages += 1
                return
            raise ProtocolError(f"message for round {t}, which was never planned")
        have = int(r.counts[w])
        planned = int(r.planned[w])
        if index != have or index >= planned:
            if index < have:
                self.duplicate_messages += 1
                return
            if index >= planned:
                raise ProtocolError(f"worker {w} has {planned} task(s) in round {t}; got message index {index}")
            raise ProtocolError(
                f"message {index} of worker {w} in round {t} arrived before message {have}: workers"
                " send their messages in order"
            )
        real = payload is not None
        if real and type(payload) is Note:
            self._notes = True
        if real is not self._real:
            if self._real is None:
                self._real = real
            else:
                raise ProtocolError(f"{type(self).__name__} got array payloads and None payloads in one run"
                                    f" (worker {w}, round {t}, message {index})")
        if real and not isinstance(payload, (Message, Note)):
            payload = np.asarray(payload)
        r.counts[w] = have + 1
        r.version += 1
        if have + 1 == planned:
            r.cur[w] = False
            r.incomplete -= 1
        self._receive(r, w, index, payload)

    def on_results(self, t: int, workers: np.ndarray, indices: np.ndarray, times: np.ndarray) -> None:
        """:meth:`on_result` for each message in order (payload ``None``), with the same rules,
        checked on the arrays (:func:`~gradcode.schemes.base.accept_messages`)."""
        t = check_round(t)
        r = self._round
        if r is None or r.t != t:
            if t < self._next:
                self.stale_messages += len(workers)
                return
            raise ProtocolError(f"message for round {t}, which was never planned")
        duplicates, workers, indices = accept_messages(r.counts, r.planned, t, workers, indices)
        self.duplicate_messages += duplicates
        if not workers.size:
            return
        if self._real:
            raise ProtocolError(f"{type(self).__name__} got array payloads and None payloads in one run (round {t})")
        self._real = False
        r.counts += np.bincount(workers, minlength=self.n)
        r.version += 1
        r.cur = r.counts < r.planned
        r.incomplete = int(np.count_nonzero(r.cur))
        self._receive_batch(r, workers, indices)

    def _ready(self, t: int) -> bool:
        r = self._round
        if r is None or r.t != t:
            return False
        if r.ready_at[0] == r.version:
            return r.ready_at[1]
        ok = self._ready_now(r)
        r.ready_at = (r.version, ok)
        return ok

    def _ready_now(self, r: _Round) -> bool:
        if r.incomplete > self._max_cur:
            return False
        u = self.due_job(r.t)
        if u is not None and not self._decodable(u):
            return False
        return self.conformance.ok(r.cur)

    def ready_after(self, t: int, workers: np.ndarray, indices: np.ndarray) -> int | None:
        """The largest of the three conditions' thresholds (class docstring). Positions: ``at[w,
        i]`` is the number of leading messages of the sequence by which worker ``w``'s message
        ``i`` is in (0 if held, ``N + 1`` if not in the sequence)."""
        r = self._round
        if r is None or r.t != check_round(t):
            return None
        N = len(workers)
        never = N + 1
        n = self.n
        R = max(1, int(r.planned.max(initial=0)))
        at = np.full((n, R), never, dtype=np.intp)
        at[np.arange(R) < r.counts[:, None]] = 0
        at[workers, indices] = np.arange(1, N + 1)
        done = at[np.arange(n), np.maximum(r.planned - 1, 0)]
        done[~r.cur] = 0
        k = 0
        over = r.incomplete - self._max_cur  # incomplete workers that must still come in
        if over > 0:
            k = int(np.partition(done[r.cur], over - 1)[over - 1])
        u = self.due_job(r.t)
        if u is not None:
            k = max(k, self._due_after(r, u, at, never))
        k = max(k, self.conformance.first_ok(done, r.cur, never))
        return None if k > N else k

    # ----------------------------------------------------------- compiled rounds (simulator)
    def play_rounds(self, first, intercept, slope, message_time, mu, wait_all, records, straggling=None,
                    rates=None) -> PlayedRounds:
        """:meth:`Scheme.play_rounds`: the rounds played by the compiled kernels of
        :mod:`~gradcode.schemes.sgc.rounds` on rings of the scheme's state (``_to_rings``),
        which are written back after the block (``_from_rings``), so the scheme ends as the
        batched path leaves it, history, jobs, tracks and counters alike (the states and rates
        of straggler state information are not used by these schemes). Every round given,
        unless one cannot finish even with every message: the call then returns the rounds
        before it, and the driver's protocol round raises ``NotDecodableError`` with the round
        left open, as the protocol leaves it."""
        first = check_round(first)
        if self._round is not None or first != self._next:
            raise ProtocolError(f"{type(self).__name__} plays rounds in order: round {self._next} is next"
                                + (f" (round {self._round.t} is still open)" if self._round is not None else "")
                                + f"; got play_rounds({first})")
        if self._real:
            raise ProtocolError(f"{type(self).__name__} got array payloads earlier; play_rounds simulates without")
        intercept = np.ascontiguousarray(intercept, dtype=np.float64)
        slope = np.ascontiguousarray(slope, dtype=np.float64)
        m, n = intercept.shape
        if n != self.n or slope.shape != (m, n):
            raise ValueError(f"intercept and slope must be (rounds, {self.n}); got {intercept.shape}, {slope.shape}")
        hist = self._history_rows(first + m)
        while True:
            end = np.empty(m)
            waited = np.zeros(m, dtype=bool)
            strag = np.zeros((m, n), dtype=bool)
            arr = np.empty((m, n) if records else (0, 0))
            fin = np.empty((m, n) if records else (0, 0))
            fjobs = np.empty(m * (self._T + 1), dtype=np.int64)
            frounds = np.empty_like(fjobs)
            info = np.zeros(7, dtype=np.int64)
            info[LAST_JOB] = -1
            rings = self._to_rings()
            timing = Timing(intercept[:m], slope[:m], float(message_time), -1.0 if mu is None else float(mu),
                            bool(wait_all))
            self._kernel(first, timing, hist, rings, Tables(bool(records), end, waited, strag, arr, fin, fjobs,
                                                            frounds, info))
            if not info[STATUS]:
                break
            # a round the kernel cannot finish (it cannot finish by the protocol either: the driver's
            # NotDecodableError) or a state the rules exclude: the scheme is still as before the call
            # (the rings are copies); play the rounds before it again, and leave that round to the
            # driver, which plays it through the protocol
            m = int(info[AT]) - first
            if not m:
                return PlayedRounds(end[:0], waited[:0], strag[:0], arr[:0] if records else None,
                                    fin[:0] if records else None, fjobs[:0], frounds[:0], -1)
        self._from_rings(rings, info)
        self._history_rounds = max(self._history_rounds, first + m)
        self._next = first + m
        if info[RECEIVED]:
            self._real = False
        nfin = int(info[FINISHED])
        return PlayedRounds(end, waited, strag, arr if records else None, fin if records else None,
                            fjobs[:nfin].copy(), frounds[:nfin].copy(), int(info[LAST_JOB]))

    def _rings(self, R: int, FR: int, jobs) -> tuple:
        """Shared part of ``_to_rings``: the track flags at ``start mod FR`` (``fl_id`` the start
        or -1, ``fl_st`` 1 flags / 2 broken, ``fl_val`` per model) and the job ids and finished
        flags at ``u mod R`` for the jobs ``jobs``."""
        fl_id = np.full(FR, -1, dtype=np.int64)
        fl_st = np.zeros(FR, dtype=np.int8)
        fl_val = np.zeros((FR, len(self.conformance.models)), dtype=bool)
        conf = self.conformance
        for a, state in [*((a, 1) for a in conf.flags), *((a, 2) for a in conf.broken)]:
            x = a % FR
            if fl_id[x] >= 0:
                raise ProtocolError(f"{type(self).__name__}: tracks {int(fl_id[x])} and {a} are both live; the"
                                    " compiled rounds keep at most the scheme's window of them")
            fl_id[x], fl_st[x] = a, state
            if state == 1:
                fl_val[x] = conf.flags[a]
        jid = np.full(R, -1, dtype=np.int64)
        jfin = np.zeros(R, dtype=bool)
        for u in jobs:
            x = u % R
            if jid[x] >= 0:
                raise ProtocolError(f"{type(self).__name__}: jobs {int(jid[x])} and {u} are both live; the"
                                    " compiled rounds keep at most the scheme's window of them")
            jid[x] = u
            jfin[x] = u in self._finished
        return fl_id, fl_st, fl_val, jid, jfin

    def _unrings(self, fl_id, fl_st, fl_val, jid, jfin) -> list[tuple[int, int]]:
        """Shared part of ``_from_rings``: the track flags, the finished set; returns the live
        jobs as ``(job, ring slot)``, for the subclass to rebuild."""
        conf = self.conformance
        conf.flags = {int(a): fl_val[x].copy() for x, a in enumerate(fl_id.tolist()) if a >= 0 and fl_st[x] == 1}
        conf.broken = {int(a) for x, a in enumerate(fl_id.tolist()) if a >= 0 and fl_st[x] == 2}
        live = sorted((int(u), x) for x, u in enumerate(jid.tolist()) if u >= 0)
        self._finished = {u for u, x in live if jfin[x]}
        return live

    def why_not_ready(self, t: int) -> str:
        """Why round ``t`` is not ready (for errors and people)."""
        r = self._round
        if r is None or r.t != t:
            return f"round {t} is not open"
        u = self.due_job(t)
        parts = []
        if u is not None and not self._decodable(u):
            parts.append(f"job {u} (due in round {t}, T = {self._T}) does not decode yet")
        if not self.conformance.ok(r.cur):
            bad = self.conformance.violations(r.cur)
            parts.append(
                f"the stragglers so far ({int(r.cur.sum())} workers) break the straggler model on the"
                f" track(s) starting in round(s) {bad}: wait for more results (a wait-out)")
        return "; ".join(parts) or "ready"

    def _close(self, t: int, arrived: frozenset[int]) -> list[tuple[int, np.ndarray | None]]:
        r = self._round
        if r is None or r.t != t:
            if t < self._next:
                raise ProtocolError(f"round {t} is already closed")
            raise ProtocolError(f"round {t} was never planned")
        if not self._ready(t):
            raise NotDecodableError(f"round {t} cannot be closed yet: {self.why_not_ready(t)}")
        row = r.planned > 0
        if arrived:
            row[list(arrived)] = False
        lo = max(0, t - self._T)
        # decode first: a decode that is refused (ImpreciseDecodeError) leaves the round open and
        # the scheme's state as it was, so that the driver can wait for more results and close again
        decode = self._real and not self._notes  # notes: the members reduced it
        out = [(u, self._decode(u) if decode else None) for u in self._finishing(t)]
        self._record(t, row)
        self.conformance.commit(row, self._ending_tracks(t))
        self._finished.update(u for u, _ in out)
        for u, _ in out:  # reduced or decoded: where its messages were kept matters no more
            self._where.pop(u, None)
        if lo - 1 in self._finished:  # job t - T - 1 left the window: forget it
            self._finished.discard(lo - 1)
            self._forget(lo - 1)
        self._round = None
        self._next = t + 1
        return out

    def _check_dim(self, m: int) -> int:
        return self.dim if self.dim is not None else m

    def _restored(self) -> None:
        """After a checkpoint's state is loaded (the subclasses' ``__setstate__``): what one written
        before the collective path lacks."""
        self.__dict__.setdefault("_notes", False)
        self.__dict__.setdefault("_where", {})

    def _finishing(self, t: int) -> list[int]:
        """The jobs a close of round ``t`` finishes: every live job that decodes."""
        return [u for u in range(max(0, t - self._T), t + 1)
                if self._job_range(u) and u not in self._finished and self._decodable(u)]

    def _file(self, u: int, key, w: int, t: int, index: int, payload) -> None:
        """Note where a received note's message is kept (the collective path's plans read it)."""
        if type(payload) is Note:
            self._where.setdefault(u, {})[key] = (w, t, index)

    # ----------------------------------------------------------- the collective path
    def collective_support(self) -> str | None:
        """None: a job's decode is linear in the messages of its rounds (the base GC's decoding
        coefficients; M-SGC's ``D_1`` chunks summed), so the workers that kept them reduce it.
        A worker's replica keeps its messages ``T`` rounds
        (:class:`~gradcode.runtime.replica.Replica`'s ``window``), and a round's reduction carries
        every job its close finishes (none, one, or two: a job decoded in its own round beside the
        one due)."""
        return None

    def reduce_plans(self, t: int, arrived, reduced_by: int | None = None) -> list[tuple[int, object]]:
        """:meth:`Scheme.reduce_plans`: ``(job, ReducePlan)`` for each job the close of round
        ``t`` finishes (M-SGC: several plans for one job, summed), from the notes held."""
        t = check_round(t)
        r = self._round
        if r is None or r.t != t:
            raise ProtocolError(f"round {t} is already closed" if t < self._next else f"round {t} was never planned")
        if not self._ready(t):
            raise NotDecodableError(f"round {t} cannot be closed yet: {self.why_not_ready(t)}")
        k = max(len(frozenset(arrived)) if reduced_by is None else int(reduced_by), 1)
        return [(u, plan) for u in self._finishing(t) for plan in self._reduce_plans(u, k)]

    def forget_results(self, t: int, worker: int) -> None:
        """``worker``'s messages are gone (its process died holding them, on the collective path):
        those of round ``t`` (a task sent again delivers them anew) and those it kept of earlier
        rounds for jobs still open. Raises :class:`~gradcode.errors.ResultsLostError` when a job
        needed one that the scheme will not ask for again (its last round has begun)."""
        t = check_round(t)
        w = self._check_worker(worker)
        r = self._round
        if r is not None and r.t == t and r.counts[w]:
            r.counts[w] = 0
            r.cur[w] = r.planned[w] > 0
            r.incomplete = int(np.count_nonzero(r.cur))
            r.version += 1
        where = self._where
        for u in sorted(where):
            lost = [(key, at) for key, at in where[u].items() if at[0] == w]
            for key, (_, rnd, _) in lost:
                del where[u][key]
                self._unreceive(u, key, rnd, t)

    def _unreceive(self, u: int, key, rnd: int, t: int) -> None:
        """Job ``u`` no longer holds the message filed under ``key`` (received in round ``rnd``;
        round ``t`` is open): undo its receipt, or raise :class:`~gradcode.errors.ResultsLostError`."""
        raise NotImplementedError

    def _lost(self, u: int, w: int, rnd: int, what: str) -> ResultsLostError:
        return ResultsLostError(
            f"worker {w} died holding {what} for job {u} (computed in round {rnd}), which job {u} cannot finish"
            f" without and {type(self).__name__} does not ask for again: the collective path keeps results on the"
            " workers; resume from the last checkpoint, or train with transport='channels' (the star path keeps"
            " them at the driver)")

