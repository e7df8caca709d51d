"""The round driver: real distributed gradient descent with a gradient-coding scheme on any engine.

:class:`RoundDriver` runs any scheme through the round protocol of :mod:`gradcode.schemes.base`,
the same one the simulator drives, on an :class:`~gradcode.runtime.base.Engine` (Ray actors in
production, :class:`~gradcode.runtime.inprocess.InProcessEngine` in tests)::

    tasks = scheme.plan(t)                          # ship to idle workers, params once per job
    scheme.on_result(t, w, i, payload, time)        # each message as it streams back
    ... until scheme.ready(t) ...
    for job, g in scheme.close(t, arrived):         # decoded g = sum_j g_j (a sum over rows)
        model = job mod M
        params[model] = optimizer.step(params[model], g / N + lambda grad R, ...)

Rules the loop follows (docs/architecture.md, "The runtime"):

* **params once per job**: each job's parameters go to the object store once (``engine.put``) and
  every worker task of the job gets the same reference.
* **closing rule** (``TrainSpec.close``): ``"decodable"`` closes a round at the first message
  that makes its due jobs decode. A number ``mu`` is SGC's mu-rule as the simulator runs it
  (:mod:`gradcode.sim.simulator`): with ``kappa`` the time the first worker delivered its whole
  task result, the round runs until ``(1 + mu) kappa`` after its start (or until every worker
  given a task is settled, if sooner: its whole result in, its result discarded as non-finite,
  or its task failed) and closes there if it decodes; otherwise it is waited out
  (``waitout="decodable"``: until it decodes; ``"all"``: until every worker is settled, then
  until it decodes) and ``waitouts[t]`` records it (also a round that decoded at the deadline
  but whose close failed, e.g. verify dropping a worker, and waited on). ``round_timeout`` caps
  the wait: a round that decodes when the timeout comes during the mu-rule's wait closes then
  instead of stopping the run. On the in-process engine with the model's whole time injected,
  rounds close at the simulator's times with its stragglers under either rule.
* **one wait for many**: the engine delivers every event that is ready in one ``poll``; the driver
  handles them one at a time and checks the scheme after each, so a round still closes at the
  first message that makes it decodable (the rest wait in a backlog, then count as late).
* **skip busy**: a worker still running an earlier round is not given new work (Ray cannot
  cancel a task running on a synchronous actor, and queued work would delay the new round); it is a
  straggler of the new round. If the round cannot decode without it, it receives the round's
  task as soon as it is free.
* **failure-tolerant waiting**: a worker that dies is a straggler, never a crash. Ray restarts it
  (``max_restarts``); it reloads its partitions from the data spec and takes part again from the
  next round. When the round does not decode without it, its task is sent again (with back-off)
  once the actor is back; if the round still does not decode within ``round_timeout`` seconds the
  run stops with :class:`RoundTimeoutError`, which names the workers that held the round up and
  why. A task that raises is a bug: the run stops with its message.
* **no silently wrong gradient**: a message holding NaN or infinity is never handed to the scheme:
  its worker becomes a straggler of the round (its finite leading messages are kept) and the round
  waits for the others, as for any straggler. Finite messages whose decoding overflows are the
  scheme's to judge: StaticScheme drops their senders and, when what is left does not decode,
  ``close`` raises :class:`~gradcode.errors.NotDecodableError` with the round still open, and the
  loop waits for more workers and closes again. A gradient, parameters or training objective that
  is still non-finite stops the run (a diverging step: ``lr`` too large) before it is applied. A
  round closes only when the scheme decodes.
* **faults**: each worker death, non-finite or dropped result is one record in ``failures`` (see
  :class:`TrainResult`): a death counts once however many tasks fail before Ray has restarted the
  worker, with the round it happened in and how that round got over it.
* **cancellation**: once a round closes, the workers still busy with it are aborted (their
  injected sleeps end at once; they send nothing more).
* **injected stragglers**: the delay model is drawn once for the run with the simulator's
  convention (``model.draw(rounds, n, default_rng(seed))``), so :func:`gradcode.simulate` with the
  same model and seed sees the same straggler realisation. Worker ``w``'s message ``i`` of round
  ``t`` is held back until ``a_i = max(0, intercept[t, w] + slope[t, w] * prefix_i)`` seconds
  (accumulated, plus the model's message time), ``prefix_i`` the data fraction message ``i`` needs
  (:func:`gradcode.schemes.task_schedule`): the simulator's timing, slept by the worker on top of
  its real compute. ``TrainSpec(stragglers=S, delay=D)`` uses ``fixed`` with ``base=0``: only the delay
  is injected, the compute time is real.
* **multi-model training** (SGC App. I): with ``models=M`` job ``j`` computes the gradient of model
  ``j mod M`` at its parameters when the job starts. Schemes whose jobs take up to ``T`` rounds
  (``scheme.delay = T``) need ``M > T`` so that a model's previous job is finished when its next
  starts (checked).
* **records**: per round its wall time (plan to close), the ``(rounds, n)`` arrival table
  (seconds after the round started at which the last message a worker delivered before the round
  closed arrived, ``-1`` for a straggler: the table the simulator's ``arrivals`` holds; stragglers
  are judged from the messages delivered by the close with the simulator's rule,
  :meth:`~gradcode.schemes.Scheme.round_stragglers`: the code's ``straggling``, e.g. AGC's workers
  count as arrived with the ``r_s`` messages the master needed, not all ``L``; whole results for
  other schemes), the number of messages received, the
  injected times, the training objective of each model and held-out metrics; written under
  ``run_dir`` as ``result.json`` and ``.npy`` arrays, plus ``trace.npy``: the arrivals with each
  straggler's entry replaced by a lower bound of its time (the round's duration, or its injected
  time if larger), a valid trace for :func:`gradcode.load_trace`. ``rounds.jsonl`` gets each
  round's records as soon as the round completes, so a driver that is killed leaves them on disk;
  a run that stops with an exception writes ``result.json`` and the arrays of its completed rounds
  with ``error`` set, and the exception carries that :class:`TrainResult` as ``exc.result``. JSON
  records are strict: non-finite numbers are written as ``null``.
* **checkpoints**: every ``checkpoint_every`` rounds the models, optimizer states, records, the
  scheme's own state and the parameters of jobs still in flight go to ``run_dir/checkpoint.json``
  and its arrays' ``.npz`` (no pickle, SHA-256-checked, the previous checkpoint kept until the new
  one is whole: :mod:`~gradcode.runtime.safe_state`); ``resume=True`` continues from it with the
  same configuration (checked). Keeping the scheme's state keeps any history-dependent state (e.g.
  GC-DC's straggler history) and, for schemes whose jobs span rounds (``delay > 0``), the messages
  of jobs in flight; a scheme a checkpoint cannot hold (one of a module not given to
  :func:`~gradcode.runtime.safe_state.trust_modules`, or holding a function) is refused up front
  when ``checkpoint_every > 0``. A resumed run reaches the same parameters to rounding (~1e-12
  relative), bit for bit only when the same workers arrived in every round (the decoding
  coefficients depend on who arrived), so ``final_params_checksum`` may differ.

Exactness: with an exact code the decoded ``g`` equals ``sum_j g_j`` up to floating-point rounding
in the decoding coefficients, so training follows single-process full-gradient descent to ~1e-12
relative whichever tolerated set of workers straggled or failed (tests/test_runtime.py).
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradcode.codes.precision import ImpreciseDecodeError, loose_decodes
from gradcode.codes.verify import InconsistentMessagesError
from gradcode.errors import GradcodeError, NotDecodableError
from gradcode.runtime.base import Engine
from gradcode.runtime.config import FaultConfig, RunConfig, TrainSpec
from gradcode.runtime.records import RoundLog, TrainState, finite
from gradcode.runtime.replica import DivergedError, step_model
from gradcode.runtime.round_state import Ledger, OpenRound, WorkerTasks
from gradcode.runtime.worker import WireTask
from gradcode.schemes.static import task_schedule
from gradcode.schemes.timing import message_arrivals

__all__ = ["RoundDriver", "RoundTimeoutError", "RunSetup", "TrainingStopped"]

#: what a non-finite float16 message most likely is, and what to do about it
_FLOAT16_OVERFLOW = ("float16 messages overflow above 65504: send float32 or float64, or use a code with smaller"
                     " coefficients")


class TrainingStopped(GradcodeError):
    """A started run stopped before its last round, for a reason of the run itself: a round that
    could not be decoded in time (:class:`RoundTimeoutError`), a diverging step, a worker that
    raised, a decoded gradient that is not finite, a lost cluster. ``result``: the completed
    rounds as a :class:`~gradcode.runtime.records.TrainResult` (also saved under the run dir),
    set by :func:`~gradcode.runtime.train` before the error reaches the caller."""

    #: the completed rounds (None until the run's records are saved)
    result = None


class ImpreciseWaitWarning(RuntimeWarning):
    """A round waited for more workers than decoding needs because its decode was refused as
    imprecise (a 16-bit or float32 wire type and large decoding coefficients): the round took
    longer than the code's straggler tolerance promises. Issued once a run."""


class RoundTimeoutError(TrainingStopped):
    """A round could not be decoded within ``round_timeout`` seconds. The message names the round,
    the workers that held it up and why (died and not back, non-finite result, still computing or
    still busy with an earlier round)."""


@dataclass
class RunSetup:
    """A :class:`~gradcode.runtime.config.TrainSpec` resolved for one run of ``rounds`` rounds:
    the objects the driver works with, built once by :func:`gradcode.runtime.setup.prepare`.

    ``config``: the run's JSON record (``config.json``, ``result.json``; compared on resume);
    ``problem_spec``: what every worker rebuilds its problem from; ``problem``: the master's copy
    (full gradients, objective, metrics); ``scheme``: the round protocol; ``optimizers`` and
    ``opt_names`` one per model; ``draw``: the injected delays (a
    :class:`~gradcode.stragglers.models.Draw` of ``(rounds, n)``, None without a delay model) and
    ``comm`` the model's time per message; ``failures``: the ``(worker, round)`` deaths to inject.
    """

    spec: TrainSpec
    config: dict
    problem_spec: Any
    problem: Any
    scheme: Any
    optimizers: list
    opt_names: list
    draw: Any
    comm: float
    failures: frozenset
    rounds: int
    #: as many rounds as the loop makes (``RunConfig.rounds=None`` under
    #: :class:`gradcode.torch.Workers`): ``rounds`` is what the tables and ``draw`` hold so far
    open_ended: bool = False

    @property
    def models(self) -> int:
        return len(self.optimizers)

    @property
    def sleeps(self) -> bool:
        """Whether a task of the run may sleep an injected delay: a draw with a positive time
        somewhere (``max(0, intercept + slope * load)``), or a time per message."""
        d = self.draw
        return d is not None and (self.comm > 0 or bool(np.any(d.intercept > 0)) or bool(np.any(d.slope > 0)))

    @property
    def n(self) -> int:
        return int(self.scheme.n)

    def worker_specs(self) -> list[tuple[Any, dict, int]]:
        """``(problem spec, {partition: rows}, chunks)`` of each worker, what ``Engine.spawn`` takes:
        the partitions the scheme stores on it, as rows of the training set."""
        from gradcode.problems import partition_rows

        rows = partition_rows(self.problem.n_train, self.scheme.partition_sizes)
        chunks = int(self.scheme.chunks)
        return [(self.problem_spec, {int(j): rows[int(j)] for j in self.scheme.stored_partitions(w)}, chunks)
                for w in range(self.n)]


class RoundDriver:
    """Runs a training run's rounds on any :class:`~gradcode.runtime.base.Engine`, one round at a
    time, following the rules of the module docstring.

    ``setup``: the run's resolved spec (:class:`RunSetup`: scheme, problems, optimizers, injected
    draw and failures); ``engine``: workers already spawned from ``setup.worker_specs()``;
    ``state``: the :class:`~gradcode.runtime.records.TrainState` it advances (fresh, or from a
    checkpoint, then call :meth:`restore` with the checkpoint's ``inflight``); ``faults``: round
    timeout and Ray's restarts (the failures to inject are ``setup.failures``, already checked
    against the workers and rounds). Times (round times, arrivals, deadlines, back-off) are read
    from ``engine.clock()``.
    """

    POLL = 0.5  # seconds between checks when nothing arrives
    BACKOFF = 0.2  # first wait before re-sending a failed worker's task (doubles per attempt)

    def __init__(self, setup: RunSetup, engine: Engine, state: TrainState, *, faults: FaultConfig | None = None):
        faults = faults or FaultConfig()
        self.setup, self.engine, self.state = setup, engine, state
        self.scheme, self.problem, self.optimizers = setup.scheme, setup.problem, setup.optimizers
        self.draw, self.comm, self.failures, self.models = setup.draw, setup.comm, setup.failures, setup.models
        self.opt_names = list(setup.opt_names)
        self.timeout, self.max_restarts = faults.round_timeout, faults.max_restarts
        self.clock = engine.clock
        # planned failures already fired (also those of a checkpointed run's earlier rounds)
        self.fired: set[tuple[int, int]] = {
            (rec["worker"], rec["planned_round"]) for rec in state.failures if rec.get("injected") and rec.get("fired")
        }
        self.job_params: dict[int, tuple[np.ndarray, Any]] = {}  # job -> (params, object ref)
        self.pending_job: dict[int, int] = {}  # model -> job in flight
        self.ledger = Ledger()  # (round, worker) -> what came back of its task, for the open rounds
        self.starts: dict[int, float] = {}
        self.current = 0
        self.stale_messages = 0
        # events the engine delivered together, handled one at a time so that a round closes as
        # soon as the scheme is ready (the rest wait here: late messages, deaths, ends of streams)
        self.backlog: deque = deque()
        # faults: the open "died" record of each worker that has not delivered since it died (a
        # death is one fault however many of its tasks fail before Ray has restarted it)
        self.down: dict[int, dict] = {}
        self._cluster_checked = -math.inf  # when the engine was last asked whether its cluster is gone
        self.fault_version = 0  # bumped on every change of state.failures (rounds.jsonl)
        self.close_error: str | None = None  # why the last close of the current round failed
        self.warned_imprecise = False  # ImpreciseWaitWarning issued
        #: the last round a checkpoint holds (None: none written, nor resumed from)
        self.checkpointed: int | None = state.next_round - 1 if state.next_round > 0 else None
        close = setup.spec.close  # TrainSpec.close: "decodable" or the mu of the mu-rule
        self.mu: float | None = None if isinstance(close, str) else float(close)
        self.wait_all = setup.spec.waitout == "all"
        self.first_done: dict[int, float] = {}  # round -> kappa: when its first whole result was in
        self.finished_jobs: list[int] = []  # the jobs the last round finished
        self.current_loss: list | None = None  # each model's training objective, as of the last round

    # -------------------------------------------------------------- the run
    def run(self, run: RunConfig, *, log: RoundLog | None = None, checkpoint: Callable[[], None] | None = None,
            callback: Callable[[dict], None] | None = None) -> None:
        """Rounds ``state.next_round`` to ``run.rounds - 1`` (:meth:`step` each); planned failures
        that never fired are recorded at the end. An exception leaves ``state`` at the last
        completed round (call :meth:`stopped` to mark its faults unrecovered)."""
        while self.state.next_round < run.rounds:
            self.step(run, log=log, checkpoint=checkpoint, callback=callback)
        self.unfired()

    def step(self, run: RunConfig, *, log: RoundLog | None = None, checkpoint: Callable[[], None] | None = None,
             callback: Callable[[dict], None] | None = None) -> dict:
        """Round ``state.next_round``, recorded: the objective of every model, held-out metrics
        every ``run.eval_every`` rounds and after the last (problems that have ``metrics``), the
        round's line in ``log``, ``checkpoint()`` every ``run.checkpoint_every`` rounds, then
        ``callback(record)``. Returns the round's record (what ``callback`` gets)."""
        state, problem, models = self.state, self.problem, self.models
        t, rounds = state.next_round, run.rounds
        if self.current_loss is None:  # each model's objective until its first step here
            self.current_loss = [problem.objective(p) for p in state.params]
        current_loss = self.current_loss
        for m, loss in self.round(t).items():
            current_loss[m] = loss
        state.losses[t] = current_loss
        elapsed = float(state.round_times[: t + 1].sum())
        record = {
            "round": t,
            "time": float(state.round_times[t]),
            "elapsed": elapsed,
            "loss": current_loss[0] if models == 1 else list(current_loss),
            "stragglers": int((state.arrivals[t] < 0).sum()),
            "overflows": int(state.overflows[t]),
            "jobs": list(self.finished_jobs),  # the jobs this round finished (their models stepped)
        }
        # 0: at the end only (an open-ended run, rounds None, has no last round to evaluate)
        evaluate = (run.eval_every and (t + 1) % run.eval_every == 0) or t == (rounds or 0) - 1
        if evaluate and hasattr(problem, "metrics"):  # a spec's problem may have none
            for m in range(models):
                met = problem.metrics(state.params[m])
                state.metrics.append({"round": t, "elapsed": elapsed, "model": m,
                                      "train_loss": current_loss[m], **met})
            record["metrics"] = state.metrics[-models:]
        state.next_round = t + 1
        if log is not None:
            log.write(t, state, record, self.fault_version)
        if checkpoint is not None and run.checkpoint_every and (t + 1) % run.checkpoint_every == 0:
            checkpoint()
            self.checkpointed = t
        if callback is not None:
            callback(record)
        return record

    # -------------------------------------------------------------- per round
    def round(self, t: int) -> dict[int, float]:
        """Run round ``t`` to its close; returns ``{model: training objective}`` of the models
        updated in it: open it (:meth:`_open_round`), wait until the scheme decodes and close it
        (:meth:`_close_when_decodable`), record who arrived and step (:meth:`_record_round`)."""
        rnd = self._open_round(t, self.clock())
        waited = False
        if self.mu is not None:
            waited = self._wait_mu_deadline(rnd)
        self.state.waitouts[t] = waited
        finished, arrived = self._close_when_decodable(rnd)
        losses = self._record_round(rnd, arrived, finished)
        self.state.round_times[t] = self.clock() - rnd.start
        self._end_round(t)
        return losses

    def _open_round(self, t: int, start: float) -> OpenRound:
        """Plan round ``t`` and send each idle worker its tasks (a busy one's wait in
        ``OpenRound.unsent``)."""
        scheme = self.scheme
        self.current = t
        self.starts[t] = start
        self.close_error = None
        if self.draw is not None:  # perfect straggler state information, for schemes that use it
            scheme.observe_states(t, self.draw.straggling[t],
                                  None if self.draw.rates is None else self.draw.rates[t])
        sent = {}
        for w, tasks in scheme.plan(t).items():
            sent[w] = self._worker_tasks(t, w, tasks)
            self.state.injected[t, w] = sent[w].ready_at[-1] if len(sent[w].ready_at) else 0.0
        rnd = OpenRound(t, sent, set(sent), start, start + self.timeout)
        for w in sorted(sent):
            if not self.engine.busy(w):
                self._send(t, w, sent[w])
                rnd.unsent.discard(w)
        return rnd

    def _close_when_decodable(self, rnd: OpenRound) -> tuple[list, frozenset]:
        """Wait until the scheme can decode round ``t`` and close it: ``(finished jobs, workers
        whose results it used)``. Stragglers by the simulator's rule (``round_stragglers``: the
        code's, e.g. AGC's ``r_s`` messages; whole results for other schemes). A close the scheme
        refuses keeps the round open: it waits for more (an imprecise or inconsistent decode: the
        next message), re-sends, or times out."""
        t, sent, scheme, ledger = rnd.t, rnd.tasks, self.scheme, self.ledger
        while True:
            self._wait_ready(rnd)
            counts = np.array([ledger.of(t, w).count for w in range(scheme.n)], dtype=np.intp)
            planned = np.array([(ledger.of(t, w).expected or 0) if w in sent else 0 for w in range(scheme.n)],
                               dtype=np.intp)
            late = scheme.round_stragglers(counts, planned)
            arrived = frozenset(w for w in sent if counts[w] > 0 and not late[w] and not ledger.of(t, w).discarded)
            try:
                with loose_decodes() as loose:  # decodes accepted beyond rtol (no worse than a plain sum)
                    closed = self._close_once(rnd, arrived, counts)
            except NotDecodableError as exc:
                self._refused(rnd, exc)
                continue
            if closed is not None:
                if loose:
                    self.state.loose[t] = max(x.relative_bound for x in loose)
                return closed

    def _close_once(self, rnd: OpenRound, arrived: frozenset, counts: np.ndarray):
        """One attempt to close round ``rnd.t`` with the results of ``arrived`` (``counts``:
        messages delivered per worker): ``(finished jobs, arrived)``, None to wait and try again,
        or the scheme's :class:`NotDecodableError`."""
        return self.scheme.close(rnd.t, arrived), arrived

    def _refused(self, rnd: OpenRound, exc: NotDecodableError) -> None:
        """A close (or a collective reduction) of round ``rnd.t`` was refused: record why and
        return once it is worth trying again (more messages, a re-sent task), or raise when nothing
        more can come."""
        t = rnd.t
        if self.mu is not None:  # past the mu-rule's deadline: the round is waited out
            self.state.waitouts[t] = True
        # the scheme dropped results it could not decode with (StaticScheme: non-finite
        # values, or finite ones whose weighted sum overflows) and what is left does not
        # decode: the round stays open (schemes/static.py) and, like any round short of
        # results, waits for the workers still computing, re-sends, or times out
        self.close_error = str(exc)
        if isinstance(exc, ImpreciseDecodeError) and not self.warned_imprecise:
            self.warned_imprecise = True
            warnings.warn(
                f"round {t} waits for more workers: its decode from the results in so far was refused as"
                f" imprecise in {exc.precision} (error bound {exc.relative_bound:.1e} of the gradient,"
                f" rtol {exc.rtol:g}); later rounds may wait too (said once). A wider wire type or a"
                " code with smaller coefficients decodes without the wait", ImpreciseWaitWarning,
                stacklevel=3)
        if isinstance(exc, (ImpreciseDecodeError, InconsistentMessagesError)):
            # more rows give smaller coefficients, more results more checks: wait for the
            # next message of the round (or, with nothing more to come, stop)
            held = self.ledger.received(t)
            self._wait_ready(rnd, until=lambda: self.ledger.received(t) > held or self._settled(rnd))
            if self.ledger.received(t) == held:
                what = ("the decoded gradient is still not accurate enough"
                        if isinstance(exc, ImpreciseDecodeError) else
                        "the results still disagree with no culprit located")
                raise TrainingStopped(f"round {t}: every worker's result is in and {what}: {exc}") from exc
            return
        if self.scheme.ready(t):  # nothing the workers send can change that: a scheme bug
            raise TrainingStopped(f"round {t}: the scheme is ready but cannot decode: {exc}") from exc

    def _record_round(self, rnd: OpenRound, arrived: frozenset, finished) -> dict[int, float]:
        """Record round ``t``'s arrivals (the last message each non-straggler delivered), the
        results the scheme dropped, how each fault of the round was recovered, then step the
        models with the decoded gradients (:meth:`_apply`)."""
        t, scheme = rnd.t, self.scheme
        dropped = self._dropped_by_scheme(t, arrived)
        for w in rnd.tasks:
            self.state.arrivals[t, w] = self.ledger.of(t, w).last if w in arrived and w not in dropped else -1.0
        observe = getattr(scheme, "observe_times", None)  # schemes that adapt to measured times
        if observe is not None:
            observe(t, self.state.arrivals[t].copy(), self.state.injected[t].copy())
        for w in sorted(dropped):
            self._fault(t, w, "dropped", self.close_error or (
                "the scheme dropped its result: decoding with it gave non-finite values, or (verify)"
                " it disagreed with the other workers' results"))
        for rec in self.state.failures:
            if rec["round"] == t and rec.get("recovery") is None and rec.get("fired", True):
                rec["recovery"] = "resent" if rec["worker"] in arrived and rec["worker"] not in dropped else "tolerated"
                self.fault_version += 1
        losses = self._apply(t, finished)
        self.finished_jobs = [int(job) for job, _ in finished]
        return losses

    def _end_round(self, t: int) -> None:
        """After round ``t`` closed: its message counts recorded, its work still running aborted,
        and everything kept about it forgotten (later messages of the round are stale)."""
        for w in range(self.scheme.n):
            self.state.messages[t, w] = self.ledger.of(t, w).count
        for w in range(self.scheme.n):
            r = self.engine.running_round(w)
            if r is not None and r <= t:
                self.engine.abort(w, t)
        self.ledger.forget_through(t)
        self.first_done.pop(t, None)

    def _wait_mu_deadline(self, rnd: OpenRound) -> bool:
        """The mu-rule's wait (module docstring): handle events until ``(1 + mu) kappa`` after the
        round's start, or until every worker given a task is settled; then, if the round does not
        decode, its wait-out for every worker (``waitout="all"``; the decodable wait-out is
        :meth:`_wait_ready`'s). Returns whether the round was waited out."""
        t = rnd.t

        def settled() -> bool:
            return self._settled(rnd)

        def cutoff() -> float | None:
            kappa = self.first_done.get(t)
            return None if kappa is None else rnd.start + (1.0 + self.mu) * kappa

        def in_by_cutoff() -> bool:
            c = cutoff()
            return settled() or (c is not None and self.clock() >= c and not self.backlog)

        self._wait_ready(rnd, until=in_by_cutoff, wake=cutoff)
        if self.scheme.ready(t):
            return False
        if self.wait_all:  # the paper's wait-out: every worker that can still send
            self._wait_ready(rnd, until=settled)
        return True

    def _settled(self, rnd: OpenRound) -> bool:
        """Nothing more to wait for in round ``rnd.t``: every worker given a task has its whole
        result in, its result discarded as non-finite, or its task failed."""
        return all((d.complete or d.lost or d.discarded) for d in (self.ledger.of(rnd.t, w) for w in rnd.planned()))

    def _wait_ready(self, rnd: OpenRound, *, until=None, wake=None) -> None:
        """Handle events until the scheme is ready to close round ``rnd.t`` (or until ``until()``):
        send late work to workers that became idle, re-send (with back-off) the task of a worker
        that died, stop the run when a task raises, and raise :class:`RoundTimeoutError` at
        ``deadline`` (with ``until``, the mu-rule's waits, only if the round cannot decode then:
        the timeout caps them). ``wake()``: a time (or None) to look again at even if nothing
        arrives."""
        engine, scheme = self.engine, self.scheme
        t, sent, unsent, retries, deadline = rnd.t, rnd.tasks, rnd.unsent, rnd.retries, rnd.deadline
        capped = until is not None
        if until is None:
            def until():
                return scheme.ready(t)
        while not until():
            now = self.clock()
            if now >= deadline:
                if capped and scheme.ready(t):
                    return
                self._check_cluster(t)
                raise RoundTimeoutError(self._timeout_message(rnd, now - rnd.start))
            if self.down and set(sent) <= set(self.down) and now >= self._cluster_checked + 1.0:
                self._cluster_checked = now  # every worker of the round died: is the cluster gone?
                self._check_cluster(t)
            # late work: idle workers whose task this round still lacks
            for w in sorted(unsent):
                if engine.busy(w):
                    continue
                not_before, attempts = retries.get(w, (0.0, 0))
                if now >= not_before:
                    if w in retries and w in self.down:
                        self.down[w]["resends"] += 1
                        self.fault_version += 1
                    self._send(t, w, sent[w], elapsed=now - rnd.start)
                    unsent.discard(w)
            waits = [nb for w, (nb, _) in retries.items() if w in unsent]
            woken = None if wake is None else wake()
            if woken is not None:
                waits.append(woken)
            timeout = min([self.POLL, deadline - now] + [max(nb - now, 0.0) for nb in waits])
            if not self.backlog:
                self.backlog.extend(engine.poll(max(timeout, 0.0)))
                if not self.backlog:
                    continue
            self._take(self.backlog.popleft(), rnd)

    def _take(self, ev, rnd: OpenRound) -> None:
        """Handle one event while round ``rnd.t`` is open: stop the run when a task raised (or the
        round's non-finite results leave nothing to decode), and schedule a failed task of the
        round to be sent again (with back-off)."""
        t = rnd.t
        self._handle(ev)
        if ev.kind == "message" and ev.round == t and self.ledger.any_discarded(t):
            self._stop_if_non_finite_blocks(rnd)
        if ev.kind == "failed" and not ev.lost:
            cause = getattr(ev.payload, "cause", None) or ev.payload
            raise TrainingStopped(
                f"worker {ev.worker} raised in round {ev.round}: {type(cause).__name__}: {cause}"
            ) from None
        if ev.kind == "failed" and ev.round == t and not self.ledger.of(t, ev.worker).discarded:
            self._resend_later(rnd, ev.worker)

    def _resend_later(self, rnd: OpenRound, w: int) -> None:
        """Send worker ``w`` its task of round ``rnd.t`` again, after a back-off that doubles with
        each attempt."""
        _, attempts = rnd.retries.get(w, (0.0, 0))
        rnd.retries[w] = (self.clock() + self.BACKOFF * 2**attempts, attempts + 1)
        rnd.unsent.add(w)

    def _stop_if_non_finite_blocks(self, rnd: OpenRound) -> None:
        """Every worker of round ``t`` has answered, some with NaN or infinity, and the finite results
        do not decode: nothing more can come, so the run stops now, saying why, instead of waiting
        out ``round_timeout`` (and then calling it a timeout)."""
        t, planned = rnd.t, rnd.planned()
        if not planned or not all(self.ledger.of(t, w).discarded or self.ledger.of(t, w).complete for w in planned):
            return
        if self.scheme.ready(t):
            return
        bad = sorted(w for w in planned if self.ledger.of(t, w).discarded)
        params_finite = getattr(self.problem, "parameters_finite", finite)  # torch: less the loss slot
        params = "" if all(params_finite(p) for p in self.state.params) else " (the parameters themselves hold them)"
        who = "every worker's result" if len(bad) == len(planned) else f"the results of workers {bad} of {len(planned)}"
        raise TrainingStopped(
            f"round {t}: {who} held NaN or infinity{params} and the finite ones cannot decode the round: the"
            " gradients are not finite at these parameters (a loss that diverged, inputs or targets holding NaN,"
            " a learning rate too large)")

    def _dropped_by_scheme(self, t: int, arrived: frozenset) -> set[int]:
        """Workers the driver counted as arrived but the scheme's straggler history marks as
        stragglers of round ``t``: StaticScheme drops the results it cannot decode with. Schemes
        without a ``straggler_history`` drop nothing the driver can see."""
        history = self.scheme.stragglers
        if not arrived or t >= history.shape[0]:
            return set()
        return {w for w in arrived if history[t, w]}

    def inflight(self) -> dict:
        """What a checkpoint needs beyond ``state`` and the scheme: the parameters each job still in
        flight was started at (schemes with ``delay > 0``), and which job each model waits for."""
        return {"jobs": {job: x for job, (x, _) in self.job_params.items()}, "pending_job": dict(self.pending_job)}

    def restore(self, inflight: dict) -> None:
        """Undo :meth:`inflight` on a resumed run (parameters go to the object store again)."""
        for job, x in inflight["jobs"].items():
            x = np.array(x)
            x.flags.writeable = False
            self.job_params[job] = (x, self.engine.put(x))
        self.pending_job.update(inflight["pending_job"])

    def _worker_tasks(self, t: int, w: int, tasks) -> WorkerTasks:
        """Worker ``w``'s wire tasks of round ``t``, the parameters they read, the injected
        schedule and the number of messages (:class:`WorkerTasks`).

        The schedule is the simulator's: message ``i`` is ready ``a_i`` seconds into the round,
        ``a_i = max(0, intercept + slope * prefix_i)`` accumulated (``prefix_i`` from
        :func:`task_schedule`), plus the model's message time per message."""
        slots: dict[int, int] = {}
        out = []
        sizes = np.asarray(self.scheme.partition_sizes, dtype=np.float64)  # the scheme's current partitions
        layout = tuple(sizes.tolist()) if getattr(self.scheme, "changes_layout", False) else None
        for task in tasks:
            job = int(task.job)
            if job not in slots:
                slots[job] = len(slots)
                self._ensure_job(job)
            out.append(WireTask(job, tuple(task.partitions), np.asarray(task.coefficients, dtype=np.float64), slots[job],
                                layout))
        refs = [self.job_params[job][1] for job in slots]
        total = sum(task.messages for task in tasks)
        if self.draw is None:
            return WorkerTasks(out, refs, np.zeros(total), total)
        prefix, _ = task_schedule(tasks, sizes)
        return WorkerTasks(out, refs, message_arrivals(self.draw.intercept[t, w], self.draw.slope[t, w], prefix,
                                                       self.comm), total)

    def _ensure_job(self, job: int) -> None:
        if job in self.job_params:
            return
        m = job % self.models
        prev = self.pending_job.get(m)
        if prev is not None and prev != job:
            raise GradcodeError(
                f"job {job} of model {m} starts before job {prev} of the same model finished: train"
                f" more models than the scheme's delay ({self.scheme.delay})"
            )
        self.job_params[job] = self._job_params(m)
        self.pending_job[m] = job

    def _job_params(self, m: int) -> tuple:
        """``(parameters, what the job's tasks send)`` of a job of model ``m`` starting now."""
        x = self.state.params[m]
        if not isinstance(x, np.ndarray) or x.base is not None or not x.flags.owndata:
            x = np.array(x)  # a copy in the model's own dtype (float32: torch)
        # optimizers return new arrays (never step in place), so the model's own array is frozen
        # and sent as it is: no copy of an 11 M-parameter model per job
        x.flags.writeable = False
        return x, self.engine.put(x)

    def _send(self, t: int, w: int, sent: WorkerTasks, *, elapsed: float = 0.0) -> None:
        """Submit round ``t`` to worker ``w``; a late submission sleeps only what is left of the
        worker's injected schedule.

        A planned failure ``(w, r)`` fires on worker ``w``'s first submission in a round ``>= r``:
        a worker that is busy during all of round ``r`` (skip-busy), or that round ``r``'s plan
        leaves out, fails on its next task instead of never. It is recorded when it is sent
        (``injected: True``, ``planned_round: r``), not when Ray reports the dead actor (~2 s
        later, possibly after the run ended), and it is the worker's open fault: Ray's reports of
        the failed tasks that follow, until the worker delivers again, belong to it."""
        left = np.maximum(np.asarray(sent.ready_at) - elapsed, 0.0)
        sleeps = np.diff(np.concatenate([[0.0], left])) if left.size else left
        due = sorted(r for (fw, r) in self.failures if fw == w and r <= t and (fw, r) not in self.fired)
        fail = bool(due)
        if fail:
            self.fired.add((w, due[0]))
            self.down[w] = self._fault(t, w, "died", "injected: the worker's process exits (fail W@R)",
                                       injected=True, planned_round=due[0], fired=True)
        self.ledger.sent(t, w, sent.messages)
        self.engine.submit(w, t, sent.tasks, sent.params, sleeps.tolist(), fail)

    def _fault(self, t: int, w: int, kind: str, error: str, *, injected: bool = False, **extra) -> dict:
        """Append a fault record (see :class:`TrainResult`) and return it."""
        rec = {"round": t, "worker": w, "kind": kind, "error": error, "injected": injected, **extra,
               "recovery": "tolerated" if t < self.current else None,  # its round closed already
               "resends": 0, "failed_tasks": 0, "back_in_round": None}
        self.state.failures.append(rec)
        self.fault_version += 1
        return rec

    def _handle(self, ev) -> None:
        t, w = ev.round, ev.worker
        if ev.kind == "message":
            # a message of the death's round or later: the worker is alive (restarted, if it died);
            # one of an earlier round, delivered late (one poll can bring many), proves nothing
            back = self.down.get(w)
            if back is not None and t >= back["round"]:
                del self.down[w]
                back["back_in_round"] = t
                self.fault_version += 1
            if t < self.current:  # the round is closed: a late message (aborted work)
                self.stale_messages += 1
                return
            # a task re-sent after its worker died mid-stream recomputes the same messages: the
            # first `counts` of the new stream were delivered by the dead one, so the scheme gets
            # each message index once (the protocol does not ask schemes to drop duplicates)
            got = self.ledger.at(t, w)
            i = got.streamed
            got.streamed = i + 1
            if i >= got.tallied:
                self.state.overflows[t] += getattr(ev.payload, "overflows", 0)
                got.tallied = i + 1
            if i < got.count or got.discarded:
                return
            if not finite(ev.payload):
                # a worker that computes NaN or infinity is a straggler of the round, never part of
                # a gradient: its messages of the round are withheld from the scheme (which holds
                # the finite prefix before them) and the round waits for the others
                overflowed = getattr(ev.payload, "dtype", None) == np.float16
                self.ledger.discard(t, w, overflowed=overflowed)
                overflow = f" ({_FLOAT16_OVERFLOW})" if overflowed else ""
                self._fault(t, w, "non-finite", f"message {i} of round {t} held NaN or infinity, or values so large"
                            f" that what it summed overflows{overflow}; the worker's result for the round was discarded")
                out = getattr(self.scheme, "worker_out", None)
                if out is not None:
                    out(t, w)
                self.engine.abort(w, t)
                return
            got.count = i + 1
            now = self.clock() - self.starts.get(t, 0.0)
            self.scheme.on_result(t, w, i, ev.payload, now)
            got.last = now
            if i + 1 == got.expected:
                self.first_done.setdefault(t, now)
                self.state.arrivals[t, w] = now
                self.engine.release(w)  # all its messages are in: free for the next round
        elif ev.kind == "failed":
            error = _short_error(ev.payload)
            if not ev.lost:  # the task raised: a bug, the run stops (_wait_ready raises)
                self._fault(t, w, "raised", error)
                return
            self.ledger.at(t, w).lost = True
            rec = self.down.get(w)
            if rec is None:  # a new death
                self.down[w] = rec = self._fault(t, w, "died", error)
            elif rec["injected"] and not rec["failed_tasks"]:  # Ray reporting an injected failure
                rec["error"] = error
            rec["failed_tasks"] += 1
            self.fault_version += 1

    def unfired(self) -> None:
        """Record the planned failures that never fired (the run ended before the worker was sent
        a task of their round or later); once."""
        for w, r in sorted(self.failures - self.fired):
            self.fired.add((w, r))
            self.state.failures.append({
                "round": r, "worker": w, "kind": "died",
                "error": "not fired: the worker got no task from this round on",
                "injected": True, "fired": False, "planned_round": r,
                "recovery": None, "resends": 0, "failed_tasks": 0, "back_in_round": None,
            })
            self.fault_version += 1

    def stopped(self) -> None:
        """The run stopped in the current round: its faults were not recovered."""
        for rec in self.state.failures:
            if rec.get("recovery") is None and rec.get("fired", True):
                rec["recovery"] = "none"
                self.fault_version += 1

    def _apply(self, t: int, finished) -> dict[int, float]:
        """Optimizer steps for the jobs finished in round ``t``; returns ``{model: objective}``.

        Nothing is committed unless every gradient, every new parameter vector and every
        objective is finite: a diverging step (``lr`` far too large) stops the run with a
        :class:`GradcodeError` that says so, and the kept parameters are the last finite ones."""
        updates = []
        for job, g in finished:
            x, _ = self.job_params[job]
            m = job % self.models
            g = np.asarray(g)[: x.size]  # drop the zero padding of a chunked code's last chunk
            k = self.state.steps[m]
            try:
                params, opt_state, loss = step_model(self.problem, self.optimizers[m], self.state.params[m],
                                                     self.state.opt_states[m], k, g, at=x)
            except DivergedError as exc:
                raise TrainingStopped(self._diverged(t, job, m, k, exc.what, exc.norm)) from None
            updates.append((job, m, params, opt_state, k, loss))
        losses = {}
        for job, m, params, opt_state, k, loss in updates:
            self.job_params.pop(job)
            self.pending_job.pop(m, None)
            self.state.params[m], self.state.opt_states[m] = params, opt_state
            self.state.steps[m] = k + 1
            losses[m] = loss
        return losses

    def _diverged(self, t: int, job: int, m: int, k: int, what: str, norm: float) -> str:
        """Why round ``t``'s step of job ``job`` (model ``m``, optimizer step ``k``) was not taken."""
        if what == "gradient":  # every message used was finite: the scheme's sum overflowed
            return (f"round {t}: the decoded gradient of job {job} (model {m}) holds NaN or infinity"
                    " although every message used was finite; it was not applied")
        return (f"round {t}: training diverged: model {m}'s {what} became non-finite (NaN or"
                f" infinity) at optimizer step {k} ({self.opt_names[m]}), from a finite decoded"
                f" gradient (norm {norm:.3g}): the step size is too large for"
                " this problem. Lower the learning rate (--optimizer-params lr=...; by default GD and Nesterov take 1/L"
                " from the problem's smoothness). The parameters after the last completed round"
                " are kept")

    def _check_cluster(self, t: int) -> None:
        """Stop with one clear error when the engine's cluster itself is gone, instead of a round timeout per worker."""
        why = self.engine.lost()
        if why is not None:
            then = (f"continue the run with --resume (its checkpoint holds rounds 0-{self.checkpointed})"
                    if self.checkpointed is not None else
                    "run it again: it wrote no checkpoint to resume from (--checkpoint-every N writes them)")
            raise TrainingStopped(f"round {t}: {why}; the workers' failures follow from that. Start the cluster"
                                  f" again and {then}")

    def _timeout_message(self, rnd: OpenRound, elapsed: float) -> str:
        """Which workers held round ``rnd.t`` up, and why; says "died" only of workers that died."""
        t, sent, unsent = rnd.t, rnd.tasks, rnd.unsent
        held = []
        for w in sorted(sent):
            got = self.ledger.of(t, w)  # a worker never sent this round's task (busy) is owed all of it
            have, need = got.count, got.expected if got.expected is not None else sent[w].messages
            if have >= need and not got.discarded:
                continue
            inj = float(self.state.injected[t, w])
            running = self.engine.running_round(w)
            if got.discarded:
                why = "its result held NaN or infinity and was discarded" + (
                    f" ({_FLOAT16_OVERFLOW})" if got.overflowed else "")
            elif w in self.down:
                rec = self.down[w]
                restarts = (" Ray does not restart it (max_restarts=0)" if self.max_restarts == 0 else
                            f" it had not come back (task re-sent {rec['resends']} times; Ray restarts a dead"
                            f" worker {'without limit' if self.max_restarts < 0 else f'up to {self.max_restarts} times'})")
                why = f"its process died in round {rec['round']} ({rec['error']});{restarts}"
            elif w in unsent and running is not None:
                why = f"still busy with round {running}, so it never got this round's task"
            else:
                why = f"still computing: {have} of {need} messages delivered after {elapsed:.3g} s"
                if inj > 0:
                    why += f" (injected delay {inj:.3g} s)"
            held.append((w, why))
        complete = sorted(w for w in sent if self.ledger.of(t, w).complete and not self.ledger.of(t, w).discarded)
        text = f"round {t} could not be decoded within round_timeout={self.timeout:g} s"
        if held:
            text += f"; it was held up by workers {[w for w, _ in held]}: " + "; ".join(
                f"worker {w}: {why}" for w, why in held)
        else:
            text += "; every planned worker delivered its result"
        if self.close_error:
            text += f"; the scheme could not decode what it held: {self.close_error}"
        return text + (f". Complete results came from workers {complete} of {self.scheme.n}. No gradient was"
                       " used for this round; the completed rounds are kept")


def _short_error(exc) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0][:200]
