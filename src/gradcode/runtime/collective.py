"""The collective path: the workers reduce among themselves, the driver only chooses.

On the star path (:class:`~gradcode.runtime.driver.RoundDriver`) every message travels to the
driver, which decodes, steps the optimizer and sends the parameters back: ``n`` gradients through
one process a round. The decode is linear, so :class:`CollectiveDriver` runs the same rounds with
the data kept where it is computed:

1. every worker holds a replica of the models (:mod:`gradcode.runtime.replica`, given by
   ``engine.join`` when the run starts); a task names ``ReplicaRef(model, version)``;
2. a worker computes its messages at its replica, keeps them, and sends the driver a
   :class:`~gradcode.codes.messages.Note` of each (scale, factor, type: no values);
3. the scheme decides on the notes exactly as on messages (the same ``ready``, the same closing
   rules) and plans the decode (``scheme.reduce_plans``: the checked decoding of the pattern, each
   worker's weights, the error bound from the scales, grown by the reduction's own rounding);
4. the driver sends each *member* (every worker the round's task reached and not known down:
   those whose messages the decode reads, a straggler's prefix included, those not needed, and
   the stragglers still computing, who all receive the result rather than lag, their reductions
   running beside their computation; a member still streaming is aborted first; and every
   worker holding a message a plan reads, which for a sequential scheme may have been kept
   rounds earlier by a worker straggling in this one) a
   :class:`~gradcode.runtime.replica.ReduceOrder` carrying every job the round's close finishes
   (a static code's one; a sequential scheme's none, one or two: a round with none closes
   without a reduction); the members all-reduce their weighted messages, the jobs' parts end to
   end, among themselves (the engine's group of exactly those
   members, created by them and cached) and each steps its replica's models with the same bits,
   after each decode's acceptance rule on its reduced gradient;
5. the round closes once a reduction succeeded (``scheme.close``, which records the stragglers).

Faults. A member that dies during the reduction fails it for all: its results are forgotten
(``scheme.forget_results``), it becomes a straggler of the round, and the round is planned again
among the living (waiting for more workers if they no longer decode): the run goes on, exact, and
the death is one fault record. A reduction the acceptance rule refuses (imprecise) in float32 is
run once more in float64 unless that is certain to be refused too
(:func:`~gradcode.codes.reduce.reduced_in_float64`: the float32 ring's own rounding, which grows
with the members, is what the star path's float64 decode does not have); else the round waits
for more messages, as a refused held decode does, and a later plan whose refusal is certain at
any norm the gradient can have is not all-reduced (:meth:`CollectiveDriver._certain_refusal`);
a diverging step stops the run as on the star path.

Replicas that never drift. The driver knows each worker's version; a worker that was not a member
(one still busy with an earlier round when this one started, a worker that died and was restarted,
one whose reduction failed) is brought up to date before its next task: when a round leaves a live
worker out, a member at the job's version keeps the reduced gradient (``JobReduction.keeper``: in
its memory, the vector it reduced into, no copy; the driver holds a
:class:`~gradcode.runtime.replica.Kept` naming it), and a worker at most
:attr:`CollectiveDriver.REPLAY` steps behind applies the updates it missed (``engine.catch_up``:
the keeper puts the vector in Ray's object store beside its own next computation, the lagger reads
it there; one optimizer step each, the same function and bits as the members); a worker further
behind, or restarted (no replica), or whose updates were lost with their keeper, gets a copy of an
up-to-date worker's whole state (``engine.sync``). Every ``digest_every`` rounds the members send a
digest of their parameters, every other round a fingerprint (a digest of a strided sample:
:meth:`~gradcode.runtime.replica.Replica.fingerprint`), and the run stops, naming the workers, when
they differ; their training objectives are compared too.

Sequential schemes (SR-SGC, M-SGC): a job's messages are computed over up to ``T`` rounds, so a
replica keeps its messages ``T`` rounds (``Replica.window``) and a plan names the ``(round,
index)`` of each message it reads. A worker's reductions run on a thread of their own
(:mod:`gradcode.runtime.channel`), so a straggler of the current round reduces a message it kept
earlier without the round waiting for its computation. Models step only when their one pending
job finishes (``models > T``), so a job's tasks name the same version in every round of its
life. A death loses the messages the worker kept: those of the current round are computed again
by the task sent again; an earlier round's are asked for again where the scheme's rule can (SR-SGC
before the job's re-attempt round); otherwise the run stops with a
:class:`~gradcode.errors.ResultsLostError` naming the worker and job (the star path keeps every
message at the driver and has no such case). A resumed run's workers hold no messages: the same
rule applies to every open job of the checkpoint.

What stays at the driver: the notes, the plans and the replies (the loss of each step). The
parameters come back only when the run needs them: held-out metrics (``eval_every``), checkpoints
and the end of the run (``engine.fetch`` from one up-to-date worker). Schemes that cannot plan a
reduction (``scheme.collective_support()`` says why: verification, operator codes) and problems
whose objective needs the whole training set (numpy problems) keep the star path, with a
:class:`CollectiveFallbackWarning` naming the reason (:func:`collective_blocker`).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from gradcode.codes.precision import ImpreciseDecodeError, note_loose
from gradcode.codes.reduce import reduced_in_float64
from gradcode.errors import ResultsLostError
from gradcode.runtime.driver import RoundDriver, RoundTimeoutError, TrainingStopped
from gradcode.runtime.gloo import LIVE_GROUPS
from gradcode.runtime.replica import JobReduction, ModelState, ReduceOrder, Replica, ReplicaRef, StaleReplicaError
from gradcode.runtime.round_state import OpenRound, WorkerTasks

__all__ = ["CollectiveDriver", "CollectiveFallbackWarning", "collective_blocker"]


class CollectiveFallbackWarning(RuntimeWarning):
    """``transport="collective"`` was asked for a run that cannot take it: the run keeps the star
    path (every message to the driver), and the warning says why."""


def collective_blocker(setup, engine) -> str | None:
    """Why the run of ``setup`` cannot take the collective path on ``engine`` (None when it can)."""
    if not getattr(engine, "collective", False):
        return f"the {type(engine).__name__} does not run the collective path"
    if not getattr(setup.problem, "objective_in_vector", False):
        return (f"the problem {type(setup.problem).__name__} computes its objective and full gradient from the"
                " whole training set, which only the driver holds (torch models carry theirs in the decoded"
                " vector)")
    return setup.scheme.collective_support()


class CollectiveDriver(RoundDriver):
    """:class:`~gradcode.runtime.driver.RoundDriver`'s rounds on the collective path (module
    docstring); ``digest_every``: rounds between parameter digests (0: never)."""

    #: steps of a model whose updates are kept for lagging workers (what a keeper keeps); a worker
    #: further behind gets a copy
    REPLAY = Replica.KEEP

    def __init__(self, setup, engine, state, *, faults=None, digest_every: int = 20):
        super().__init__(setup, engine, state, faults=faults)
        self.digest_every = int(digest_every)
        n = setup.n
        #: each worker's replica versions (steps of every model), None when unknown or lost
        self.versions: list[tuple | None] = [None] * n
        #: deaths seen of each worker: part of a group's name, so a restarted worker never meets
        #: a group of its previous process
        self.incarnation = [0] * n
        self.losses: dict[int, float] = {}  # job -> the training objective its members reported
        self._groups: OrderedDict[tuple, int] = OrderedDict()  # member key -> group number (the live ones)
        self._next_group = 0
        self.reductions_failed = 0
        #: a job whose reduction was refused as imprecise: the most its gradient's norm can be (the
        #: refused gradient's norm plus its error bound; the least over its refusals), until it finishes
        self.refused_norms: dict[int, float] = {}
        #: the reduced gradients kept for lagging workers: ``(model, step) -> ReduceReply.update``
        self.updates: dict[tuple[int, int], object] = {}
        self.replayed = self.synced = 0  # laggers brought up to date by updates, by copies
        self._members: set[int] = set()  # of the reduction under way
        self.stale_tasks = 0  # tasks refused by a replica that could not be brought up to date
        self._params_at = self._current()  # the steps state.params are at
        self._run = None
        models = [ModelState(_frozen(state.params[m]), opt, state.opt_states[m], int(state.steps[m]))
                  for m, opt in enumerate(setup.optimizers)]
        engine.join(Replica(models, window=setup.scheme.delay))
        self.versions = [self._current()] * n

    def _current(self) -> tuple:
        return tuple(int(k) for k in self.state.steps)

    # -------------------------------------------------------------- tasks name the replica
    def _job_params(self, m: int) -> tuple:
        """No parameters travel: the job's tasks name the replica's version."""
        return None, ReplicaRef(m, int(self.state.steps[m]))

    def _send(self, t: int, w: int, sent: WorkerTasks, *, elapsed: float = 0.0) -> None:
        """:meth:`RoundDriver._send`, after bringing ``w``'s replica up to date when it lags: the
        updates it missed when the members kept them all (at most :attr:`REPLAY` steps a model:
        one step's work, and a vector's transfer, each), else a copy of an up-to-date replica."""
        now = self._current()
        have = self.versions[w]
        if have != now:
            missing = [] if have is None else [(m, k) for m in range(self.models) for k in range(have[m], now[m])]
            if missing and all(key in self.updates for key in missing):
                self.engine.catch_up(w, [(m, k, self.updates[(m, k)]) for m, k in missing])
                self.replayed += 1
            else:
                self.engine.sync(w, self._source(exclude=w))
                self.synced += 1
            self.versions[w] = now
        super()._send(t, w, sent, elapsed=elapsed)

    def _source(self, exclude: int = -1) -> int:
        """An up-to-date worker that is not known to be down (the lowest such id)."""
        now = self._current()
        for w in range(self.setup.n):
            if w != exclude and self.versions[w] == now and w not in self.down:
                return w
        raise TrainingStopped(f"no worker holds the models at their current steps {list(now)} any more (every"
                              " up-to-date worker died): the run cannot go on; resume it from its last checkpoint")

    def _handle(self, ev) -> None:
        if ev.kind == "reduced":  # a reply of a reduction already settled (a late member)
            return
        if ev.kind == "failed" and ev.lost and _stale_replica(ev.payload):
            # the worker lives, but could not be brought up to date (the member that kept an
            # update it needed died): its task is sent again, after a copy of the models
            self.ledger.at(ev.round, ev.worker).lost = True
            self.versions[ev.worker] = None
            self.incarnation[ev.worker] += 1
            self.stale_tasks += 1
            return
        super()._handle(ev)
        if ev.kind == "failed" and ev.lost:  # its process (and replica) may be a new one
            self._gone(ev.worker)

    def _gone(self, w: int) -> None:
        """Worker ``w``'s process died (or may have): its replica and the messages it kept went with
        it, so the current round forgets them (a re-sent task delivers them anew)."""
        self.versions[w] = None
        self.incarnation[w] += 1  # its groups are not this process's any more
        if w not in self._members:  # a member's death is its reduction's to settle
            self._forget_results(self.current, w)

    def _forget_results(self, t: int, w: int) -> None:
        """The scheme forgets ``w``'s messages (of round ``t``; a sequential scheme's, of every
        job still open), and the round's ledger its deliveries."""
        try:
            self.scheme.forget_results(t, w)
        except ResultsLostError as exc:
            raise TrainingStopped(f"round {t}: {exc}") from None
        got = self.ledger.of(t, w)
        if got.count:
            got.count = 0
            self.state.arrivals[t, w] = -1.0

    # -------------------------------------------------------------- the close is a reduction
    def _close_once(self, rnd: OpenRound, arrived: frozenset, counts: np.ndarray):
        """Plan round ``t``'s decodes, reduce them among the members, and close the round once they
        stepped (None: a member died, the round is planned again)."""
        t, sent = rnd.t, rnd.tasks
        # every worker the round's task reached and not known down: those whose messages are in
        # (the decode may read a straggler's prefix), those not needed, and the stragglers still
        # computing: a worker's reductions run beside its computation, so it takes part with
        # nothing to add and need not catch up before its next task (a step and a copy of the
        # update), which shortens a step with a straggler (BENCHMARKS.md, "The collective path, third
        # part: sequential schemes, stragglers as members, transports as modules (2026-11-28)")
        reached = {w for w in sent if counts[w] > 0 or (
            w not in rnd.unsent and w not in self.down and self.versions[w] is not None)}
        members, plans = self._plan(t, arrived, reached)
        try:
            doomed = self._certain_refusal(t, plans)
            if doomed is not None:
                raise doomed
            if plans and not self._reduce(rnd, plans, members):
                return None
        except ImpreciseDecodeError:
            wider = self._wider(rnd, arrived, reached, members, plans)
            if wider is None:
                raise
            members, plans = wider
            if not self._reduce(rnd, plans, members):
                return None
        finished = self.scheme.close(t, arrived)
        for job, _ in finished:
            self.refused_norms.pop(job, None)
        return [(job, self.losses.pop(job)) for job, _ in finished], arrived

    def _plan(self, t: int, arrived: frozenset, reached: set) -> tuple[list, list]:
        """``(members, plans)`` of round ``t``'s reduction: ``reached`` and every worker holding a
        message a plan reads (a sequential scheme's job reads those of earlier rounds too, kept by
        workers that may be busy with a round still), the plans bounded for that many reducers."""
        plans = self.scheme.reduce_plans(t, arrived, reduced_by=max(len(reached), 1))
        members = sorted(reached.union(*(p.workers for _, p in plans)))
        if len(members) != max(len(reached), 1):  # the plans' bounds count the reducing workers
            plans = self.scheme.reduce_plans(t, arrived, reduced_by=len(members))
        return members, plans

    #: the relative margin on a refused reduction's norm (computed in float64: its own rounding)
    NORM_MARGIN = 1e-6

    def _certain_refusal(self, t: int, plans: list) -> ImpreciseDecodeError | None:
        """The refusal of a reduction of ``plans`` known before it runs, or None. A job refused
        once has a gradient of norm at most ``M`` (:attr:`refused_norms`: the refused gradient's
        measured norm plus its error bound), so a plan of bound ``b`` will measure at most
        ``M + b``: when even that leaves ``b`` beyond its tolerance, the members would refuse it,
        and the all-reduce of a whole gradient is saved (a code that streams its messages, AGC,
        tries again at each one while its coefficients are still too large). Exact: never a
        reduction that could be accepted; only for a job of one plan judged after the sum."""
        for job, plan in plans:
            most = self.refused_norms.get(job)
            if most is None or plan.checked or sum(1 for j, _ in plans if j == job) != 1:
                continue
            most = most * (1 + self.NORM_MARGIN) + plan.error_bound
            rel = plan.error_bound / most if most > 0 else math.inf
            if rel > plan.rtol:
                return ImpreciseDecodeError(
                    f"round {t}: job {job}'s decode from the messages in so far would be refused as imprecise in"
                    f" {plan.precision}: its error bound is at least {rel:.1e} of any norm its gradient can have"
                    f" (rtol {plan.rtol:g}; the norm is at most {most:.3g}, from a refused reduction before)",
                    relative_bound=rel, precision=plan.precision, rtol=plan.rtol)
        return None

    def _wider(self, rnd: OpenRound, arrived: frozenset, reached: set, members: list, plans: list):
        """A reduction refused as imprecise in float32 (by the members, or certain to be):
        ``(members, plans)`` of the same messages reduced in float64, unless they too are certain
        to be refused (:meth:`_certain_refusal`), else None (the round waits for more messages).
        The float32 ring's own rounding grows with the members, and the star path's float64 decode
        has none of it: in float64 the plan's bound is essentially the held decode's, at twice the
        bytes."""
        if all(p.reduce_precision == "float64" for _, p in plans):
            return None
        if any(w in self.down or self.versions[w] is None for w in members):  # a member lost meanwhile
            return None
        with reduced_in_float64():  # the members again: more messages may have come meanwhile
            members, plans = self._plan(rnd.t, arrived, reached)
        if self._certain_refusal(rnd.t, plans) is not None:
            return None
        return members, plans

    def _reduce(self, rnd: OpenRound, plans: list, members: list[int]) -> bool:
        """Run round ``rnd.t``'s reduction of the jobs of ``plans`` (``[(job, ReducePlan)]``, a job's
        plans summed) among ``members``: True when members stepped, False when a member died and
        the round must be planned again; raises :class:`ImpreciseDecodeError` when the members
        refused a reduced gradient (:meth:`_close_once` reduces again in float64 unless that is
        certain to be refused too, else the round waits for more messages)."""
        t = rnd.t
        by_job: dict[int, list] = {}
        for job, plan in plans:
            by_job.setdefault(job, []).append(plan)
        key = tuple((w, self.incarnation[w]) for w in members)
        group, live = self._group(key)
        digest = bool(self.digest_every) and (t + 1) % self.digest_every == 0
        # workers left out (alive) will lag: a member at the job's version keeps the update for them
        left_out = any(w not in members and w not in self.down for w in range(self.setup.n))
        jobs = []
        for job, job_plans in by_job.items():
            m = job % self.models
            step = int(self.state.steps[m])
            first = next((w for w in members if self.versions[w] is not None and self.versions[w][m] == step), None)
            jobs.append(JobReduction(job, m, step, tuple(job_plans), keeper=first if left_out else None,
                                     reporter=first))
        orders = {w: ReduceOrder(t, tuple(jobs), key, rank, len(members), digest, group, live)
                  for rank, w in enumerate(members)}
        if all(p.checked for _, p in plans):  # a member still streaming (AGC's spare messages) stops, then
            # reduces; a plan judged after the sum may need those messages, so it lets them come
            for w in members:
                if self.engine.running_round(w) == t:
                    self.engine.abort(w, t)
        self.engine.reduce(t, orders)
        self._members = set(members)  # their deaths are the reduction's to settle (_gone)
        try:
            replies, died = self._replies(rnd, orders, members)
        finally:
            self._members = set()
        return self._settle(rnd, jobs, orders, replies, died)

    def _replies(self, rnd: OpenRound, orders: dict, members: list[int]) -> tuple[dict, set]:
        """Each member's reply to round ``rnd.t``'s reduction, or its death; events of other
        workers are handled as they come (as :meth:`_wait_ready` handles them)."""
        t, deadline = rnd.t, rnd.deadline
        replies: dict[int, object] = {}
        died: set[int] = set()
        while len(set(replies) | died) < len(members):
            now = self.clock()
            if now >= deadline:
                raise RoundTimeoutError(
                    f"round {t}: the reduction among workers {members} did not finish within round_timeout="
                    f"{self.timeout:g} s ({sorted(replies)} answered); no gradient was used for this round")
            if not self.backlog:
                self.backlog.extend(self.engine.poll(min(self.POLL, deadline - now)))
                continue
            ev = self.backlog.popleft()
            if ev.kind == "reduced" and ev.round == t and ev.worker in orders:
                replies[ev.worker] = ev.payload
                died.update(w for w in ev.payload.lost if w not in replies)  # no answer will come from them
                continue
            self._take(ev, rnd)
            if ev.kind == "failed" and ev.worker in orders and ev.worker not in replies:
                if not died:  # the others may be waiting for it to join their group: they stop
                    self.engine.cancel_reduction(orders[ev.worker].group)
                died.add(ev.worker)
        return replies, died

    def _group(self, key: tuple) -> tuple[int, tuple]:
        """The number of the members' group and the numbers alive (:mod:`gradcode.runtime.gloo`):
        a key seen before keeps its number while it is among the :data:`LIVE_GROUPS` most recent;
        a number is never given twice."""
        group = self._groups.pop(key, None)
        if group is None:
            group, self._next_group = self._next_group, self._next_group + 1
        self._groups[key] = group
        while len(self._groups) > LIVE_GROUPS:
            self._groups.popitem(last=False)
        return group, tuple(self._groups.values())

    def _settle(self, rnd: OpenRound, jobs: list, orders, replies, died):
        """What a reduction's replies mean (see :meth:`_reduce`)."""
        t = rnd.t
        stepped = {w: r for w, r in replies.items() if r.error is None}
        if stepped:
            for job in jobs:
                by = {w: s for w, r in stepped.items() for s in r.steps if s.job == job.job}
                if not by:
                    raise TrainingStopped(f"round {t}: no member of the reduction stepped job {job.job} (model"
                                          f" {job.model} at step {job.step}): their replicas lag")
                self._check_replicas(t, job.model, by)
                self.losses[job.job] = by[min(by)].loss
                rel = max((s.relative_bound for s in by.values() if not math.isnan(s.relative_bound)), default=0.0)
                tol = min(p.rtol for p in job.plans)
                if rel > tol:  # accepted as no worse than a plain sum: counted in the run's records
                    note_loose(rel, tol)
                update = next((s.update for s in by.values() if s.update is not None), None)
                if update is not None:
                    self.updates[(job.model, job.step)] = update
                for key in [k for k in self.updates if k[0] == job.model and k[1] < job.step + 1 - self.REPLAY]:
                    del self.updates[key]
            for w, r in stepped.items():
                have = list(self.versions[w] or self._current())
                for s in r.steps:
                    have[s.model] = s.step + 1
                self.versions[w] = tuple(have)
            return True
        errors = {r.error for r in replies.values()}
        if "diverged" in errors:
            reply = next(r for r in replies.values() if r.error == "diverged")
            job = next(j for j in jobs if j.job == reply.job)
            raise TrainingStopped(self._diverged(t, job.job, job.model, job.step, reply.message, reply.relative_bound))
        if "imprecise" in errors:
            reply = next(r for r in replies.values() if r.error == "imprecise")
            job = next(j for j in jobs if j.job == reply.job)
            plan = job.plans[reply.plan] if reply.plan is not None else next(p for p in job.plans if not p.checked)
            if len(job.plans) == 1 and math.isfinite(reply.norm):  # how large the job's gradient can be
                most = reply.norm + plan.error_bound
                self.refused_norms[job.job] = min(most, self.refused_norms.get(job.job, math.inf))
            raise ImpreciseDecodeError(reply.message, relative_bound=reply.relative_bound, precision=plan.precision,
                                       rtol=plan.rtol)
        dead = set(died).union(*(r.lost for r in replies.values()))
        out = set().union(*(r.stale for r in replies.values())) - dead
        for w in sorted(out):  # alive, but its replica could not take part: planned again without it, re-sent
            self._gone(w)
            self.stale_tasks += 1
            if w in rnd.tasks:  # sent again at once
                rnd.retries[w] = (self.clock(), 1)
                rnd.unsent.add(w)
        if not dead and out:
            return False
        if not dead:
            reasons = sorted({r.message for r in replies.values()})
            raise TrainingStopped(f"round {t}: the reduction among workers {sorted(orders)} failed with no member"
                                  f" dead: {'; '.join(reasons)}")
        self.reductions_failed += 1
        for w in sorted(dead):  # gone with their messages: the round is planned again without them
            if w not in self.down:
                self.down[w] = self._fault(t, w, "died", "died during the round's reduction (collective path)")
            self._gone(w)
            if w in rnd.tasks:  # its task again once it is back, should the round need it
                rnd.retries[w] = (self.clock() + self.BACKOFF, 1)
                rnd.unsent.add(w)
        return False

    def _check_replicas(self, t: int, m: int, stepped: dict) -> None:
        """The members' replicas are bit-identical: the same objective, and the same digest when
        one was sent (``stepped``: each member's :class:`~gradcode.runtime.replica.JobStep` of
        model ``m``); else the run stops naming the workers."""
        for what, values in (("training objective", {w: s.loss for w, s in stepped.items()}),
                             ("parameter digest", {w: s.digest for w, s in stepped.items() if s.digest})):
            groups: dict = {}
            for w, v in sorted(values.items()):
                groups.setdefault(np.float64(v).tobytes() if isinstance(v, float) else v, []).append(w)
            if len(groups) > 1:
                agree = max(groups.values(), key=len)
                odd = sorted(w for ws in groups.values() if ws is not agree for w in ws)
                raise TrainingStopped(
                    f"round {t}: the replicas of model {m} differ after the same update: the {what} of workers"
                    f" {odd} differs from that of workers {agree} ("
                    + ", ".join(f"worker {w}: {v}" for w, v in sorted(values.items()))
                    + "); a worker computes differently (its hardware or library versions?): the run stops before"
                    " they drift further")

    # -------------------------------------------------------------- steps without parameters
    def _apply(self, t: int, finished) -> dict[int, float]:
        """The members stepped their replicas: count the steps and take the objective they report."""
        losses = {}
        for job, loss in finished:
            m = job % self.models
            self.job_params.pop(job, None)
            self.pending_job.pop(m, None)
            self.state.steps[m] += 1
            losses[m] = float(loss)
        return losses

    def step(self, run, **kwargs) -> dict:
        self._run = run
        return super().step(run, **kwargs)

    def round(self, t: int) -> dict[int, float]:
        losses = super().round(t)
        run = self._run
        if run is not None and ((run.eval_every and (t + 1) % run.eval_every == 0) or t == (run.rounds or 0) - 1
                                or (run.checkpoint_every and (t + 1) % run.checkpoint_every == 0)):
            self.refresh_params()
        return losses

    def refresh_params(self) -> None:
        """The driver's copy of the parameters and optimizer states from an up-to-date worker (for
        metrics, checkpoints and the run's result)."""
        models = self.engine.fetch(self._source())
        for m, s in enumerate(models):
            if s.step != self.state.steps[m]:
                raise TrainingStopped(f"worker {self._source()} holds model {m} at step {s.step}, the driver counts"
                                      f" {self.state.steps[m]}")
            self.state.params[m], self.state.opt_states[m] = s.params, s.opt_state
        self._params_at = self._current()

    def stopped(self) -> None:
        """The run stopped: its faults, and the parameters of its last completed round (best effort)."""
        super().stopped()
        self._refresh_quietly()

    def unfired(self) -> None:
        super().unfired()
        self._refresh_quietly()  # a callback's StopTraining ends the run between two refreshes

    def _refresh_quietly(self) -> None:
        if self._params_at != self._current():
            try:
                self.refresh_params()
            except Exception:  # no worker to read them from: the result keeps the last read (its round is known)
                pass

    def inflight(self) -> dict:
        return {"jobs": {}, "pending_job": dict(self.pending_job)}

    def restore(self, inflight: dict) -> None:
        """A resumed run: its jobs in flight start from their models' versions (a model steps only
        when its one pending job finishes, so the version is the job's), and the messages the
        workers of the run that wrote the checkpoint kept (a sequential scheme's open jobs) are
        gone with them: the scheme asks for them again, or the run stops saying so
        (:meth:`_forget_results`)."""
        super().restore(inflight)
        for w in range(self.setup.n):
            self._forget_results(self.state.next_round, w)


def _stale_replica(exc) -> bool:
    """Whether a failed task was refused for its replica's version (raised in the worker)."""
    return isinstance(exc, StaleReplicaError) or isinstance(getattr(exc, "cause", None), StaleReplicaError)


def _frozen(x) -> np.ndarray:
    x = np.array(x)
    x.flags.writeable = False
    return x
