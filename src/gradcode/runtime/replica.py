"""A worker's model replica on the collective path (engine-free).

On the star path the driver holds each model's parameters and optimizer, decodes and steps; on the
collective path (docs/architecture.md, "Transports") every worker holds a :class:`Replica`: each
model's parameters, optimizer and optimizer state, at a *version* (the optimizer steps applied).
A round's task names ``ReplicaRef(model, version)`` where the star path sends parameters; the
worker computes its messages at its replica, keeps them (:meth:`Replica.keep`) and sends the
driver a :class:`~gradcode.codes.messages.Note` of each. The driver decides on the notes and sends
each member of the round's reduction a :class:`ReduceOrder`; a member contributes its weighted
messages (:meth:`Replica.part`), the members all-reduce the parts, and each applies the same
update to its replica (:meth:`Replica.apply`): the acceptance rule of the decode, then the
optimizer step of :func:`step_model`, the same function the star driver steps with, so the
replicas of the members stay bit-identical to each other and to what the star path computes from
the same gradient.

Workers that were not members (stragglers, restarted workers) lag: before their next task they
replay the updates they missed (:meth:`Replica.replay`, from a member that kept them:
:meth:`Replica.kept`), or, further behind or restarted, the engine copies an up-to-date member's
replica to them (:meth:`Replica.export` / :meth:`Replica.load`), so no worker ever computes at a
stale version. A task naming a version its
worker does not hold is refused (:class:`StaleReplicaError`), never computed at other parameters.
Every ``digest_every`` rounds the members send a digest of their parameters
(:meth:`Replica.digest`), and the driver stops the run, naming the workers, when they differ.

Only problems whose decoded vector carries their training objective (``objective_in_vector``:
the torch models of :mod:`gradcode.torch`, whose vector has the batch loss and size) can step on a
worker: the numpy problems' objective and full gradient need the whole training set, which only
the driver holds.
"""

from __future__ import annotations

import copy
import hashlib
import math
import threading
from dataclasses import dataclass

import numpy as np

from gradcode.codes.messages import Message, Note, sum_squares
from gradcode.codes.precision import ImpreciseDecodeError
from gradcode.codes.reduce import ReducePlan, contribution
from gradcode.errors import GradcodeError

__all__ = ["JobReduction", "JobStep", "Kept", "ModelState", "ReduceOrder", "ReduceReply", "Replica", "ReplicaRef",
           "StaleReplicaError", "step_model", "warm_replica"]


class StaleReplicaError(GradcodeError):
    """A task names a model version its worker's replica does not hold (it missed an update and was
    not brought up to date): refused, never computed at other parameters."""


class DivergedError(GradcodeError):
    """A step was not taken: ``what`` is ``"gradient"`` (the decoded gradient is not finite) or
    what the step made non-finite (``"parameters"``, ``"training objective"``); ``norm`` the
    finite gradient's norm."""

    def __init__(self, what: str, norm: float = math.nan):
        super().__init__(f"the {what} became non-finite" if what != "gradient" else
                         "the decoded gradient holds NaN or infinity")
        self.what, self.norm = what, norm


@dataclass(frozen=True)
class ReplicaRef:
    """What a task sends in place of a job's parameters on the collective path: model ``model``'s
    parameters after ``version`` optimizer steps, which the worker's replica must hold."""

    model: int
    version: int


@dataclass
class ModelState:
    """One model of a replica: its parameters, optimizer (gradcode's interface: ``step(x, g,
    state, k)``), the optimizer's state and the steps applied (its version)."""

    params: np.ndarray
    optimizer: object
    opt_state: object
    step: int


@dataclass(frozen=True)
class JobReduction:
    """One job's share of a round's reduction: job ``job`` of model ``model`` at version ``step``,
    its gradient the sum of what ``plans`` decode (one plan for a code's decode; a sequential
    scheme's job sums several, each judged by its own rule: :func:`~gradcode.codes.reduce.merge_plans`
    joins those judged before the sum); ``keeper``: the member that keeps the reduced gradient for
    the workers left out (:class:`Kept`), None when none is left out; ``reporter``: the member that
    measures the relative bound of a plan accepted before the sum, for the run's records (a decode
    accepted beyond its tolerance is counted whether or not anyone is left out)."""

    job: int
    model: int
    step: int
    plans: tuple[ReducePlan, ...]
    keeper: int | None = None
    reporter: int | None = None

    @property
    def length(self) -> int:
        """Values this job's plans take in the reduced vector (each plan's ``chunks * length``)."""
        return sum(p.chunks * p.length for p in self.plans)


@dataclass(frozen=True)
class ReduceOrder:
    """What the driver sends each member of round ``round``'s reduction: the jobs it finishes
    (:class:`JobReduction`, their parts laid end to end in one all-reduce: a sequential scheme may
    finish two jobs, or none, in a round), the member's place in the group (``key``: the members
    and their incarnations; ``group``: the number the driver gave that key, ``live`` the numbers of
    the groups it keeps, :mod:`gradcode.runtime.gloo`; ``rank`` of ``size``) and whether to send a
    digest."""

    round: int
    jobs: tuple[JobReduction, ...]
    key: tuple
    rank: int
    size: int
    digest: bool = False
    group: int = 0
    live: tuple = ()

    def __post_init__(self):
        if len({reduce_dtype(p) for j in self.jobs for p in j.plans}) > 1:
            raise ValueError("a reduction's plans must share one reduce type")

    @property
    def members(self) -> tuple[int, ...]:
        return tuple(w for w, _ in self.key)

    @property
    def length(self) -> int:
        """Values of the reduced vector (every job's, less the flags' slots)."""
        return sum(j.length for j in self.jobs)

    @property
    def dtype(self) -> np.dtype:
        """The type the parts are all-reduced in (:func:`reduce_dtype`)."""
        return reduce_dtype(self.jobs[0].plans[0]) if self.jobs else np.dtype(np.float32)


@dataclass(frozen=True)
class JobStep:
    """A member's step of one job: model ``model`` went from ``step`` to ``step + 1`` with training
    objective ``loss``; ``relative_bound`` the decode's (a plan accepted before the sum: measured by
    the job's reporter only, NaN at the other members);
    ``digest`` of the new parameters (a full one when asked, else a :meth:`Replica.fingerprint`);
    ``update``: where the reduced gradient is kept for the lagging workers (:class:`Kept`), when
    this member is the job's keeper."""

    job: int
    model: int
    step: int
    loss: float = math.nan
    relative_bound: float = math.nan
    digest: str | None = None
    update: object = None


@dataclass(frozen=True)
class ReduceReply:
    """A member's answer: the jobs it stepped (``steps``, :class:`JobStep`; a model this member
    lags on is left for it to catch up), or why it stepped none (``error``: ``"imprecise"`` or
    ``"diverged"`` for job ``job``, with ``relative_bound`` (the finite gradient's norm for a
    divergence), or ``"failed"``: the reduction itself failed, a member died or could not take
    part; with ``message``)."""

    worker: int
    round: int
    steps: tuple[JobStep, ...] = ()
    error: str | None = None
    message: str = ""
    job: int | None = None
    relative_bound: float = math.nan
    #: members found dead when the reduction failed (``error="failed"``)
    lost: tuple = ()
    #: members that could not take part, alive (``error="failed"``)
    stale: tuple = ()
    #: ``error="imprecise"``: which of the job's plans was refused, and its reduced gradient's norm
    plan: int | None = None
    norm: float = math.nan


@dataclass(frozen=True)
class Kept:
    """A reduced gradient a member keeps for the workers left out of its round: worker ``worker``'s
    :meth:`Replica.kept`, model ``model``'s update from step ``step``."""

    worker: int
    model: int
    step: int


def reduce_dtype(plan: ReducePlan) -> np.dtype:
    """The type the members reduce ``plan``'s parts in (bfloat16's in float32: numpy and gloo have
    no bfloat16 sum)."""
    return np.dtype(plan.reduce_precision if plan.reduce_precision != "bfloat16" else "float32")


def warm_replica() -> None:
    """What a worker process's first step would load inside a round, loaded now: the reduction's
    compiled sums, and ``torch._dynamo``, which ``torch.optim`` imports at its first step: seconds
    of the first round on busy cores otherwise (BENCHMARKS.md, "The collective path: the members
    reduce among themselves (2026-11-27)")."""
    import sys

    from gradcode.codes.messages import warm_kernels

    warm_kernels()
    if "torch" in sys.modules:
        import torch._dynamo  # noqa: F401


def step_model(problem, optimizer, params, opt_state, k: int, g, *, at=None) -> tuple[np.ndarray, object, float]:
    """One optimizer step with a decoded gradient ``g`` (the sum over the data, as decoded):
    ``(new params, new state, training objective)``, or :class:`DivergedError` (nothing committed)
    when the gradient, the new parameters or the objective is not finite. ``at``: the parameters the
    gradient was computed at (default ``params``; a job of a sequential scheme started earlier).
    The star driver and every replica step with this function."""
    from gradcode.runtime.records import finite

    if not finite(g):
        raise DivergedError("gradient")
    grad = problem.full_gradient(params if at is None else at, g)
    with np.errstate(over="ignore", invalid="ignore"):
        new, state = optimizer.step(params, grad, opt_state, k)
        bad = "parameters" if not finite(new) else None
        loss = float(problem.objective(new)) if bad is None else math.nan
    if bad is None and not math.isfinite(loss):
        bad = "training objective"
    if bad is not None:
        raise DivergedError(bad, float(np.linalg.norm(grad)))
    return new, state, loss


class Replica:
    """A worker's replica of every model (module docstring). ``window``: rounds a kept message may
    wait for its reduction after its own (a sequential scheme's delay ``T``: its job decodes up to
    ``T`` rounds later; 0 for a static code, whose round reads only its own messages)."""

    #: updates kept for lagging workers, a model (the driver replays at most this many)
    KEEP = 4

    def __init__(self, models: list[ModelState], window: int = 0):
        self.models = list(models)
        self.window = int(window)
        self._held: dict[tuple[int, int], Message] = {}  # (round, index) -> a message kept
        self._kept: dict[tuple[int, int], np.ndarray] = {}  # (model, step) -> a reduced gradient (its keeper's)
        # a step (and its commit), an export (a copy for a lagging worker) and the messages held
        # are shared by the compute thread and the reductions' thread: a copy never catches an
        # optimizer mid-step, a part never reads the held messages while a task drops old ones
        self._lock = threading.RLock()

    def __getstate__(self):  # travels (Ray) as its models; a copy holds no messages and a lock of its own
        return {"models": self.models, "window": self.window}

    def __setstate__(self, state):
        self.__init__(state["models"], state.get("window", 0))

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(s.step for s in self.models)

    def params(self, ref: ReplicaRef, worker: int) -> np.ndarray:
        """Model ``ref.model``'s parameters, which must be at version ``ref.version``."""
        state = self.models[ref.model]
        if state.step != ref.version:
            raise StaleReplicaError(f"worker {worker}'s replica of model {ref.model} is at step {state.step}; the task"
                                    f" needs step {ref.version}")
        return state.params

    def keep(self, t: int, index: int, message: Message) -> Note:
        """Hold message ``index`` of round ``t`` (messages of rounds before ``t - window`` are
        dropped: no reduction reads them any more) and return its note."""
        with self._lock:
            for key in [k for k in self._held if k[0] < t - self.window]:
                del self._held[key]
            self._held[(t, index)] = message
        return Note.of(message)

    @staticmethod
    def _rows(plan: ReducePlan, order: ReduceOrder, worker: int, weights) -> tuple:
        rows = plan.rows
        return rows[worker] if rows is not None else tuple((order.round, r) for r in range(len(weights)))

    def part(self, order: ReduceOrder, worker: int, extra: int = 0) -> np.ndarray:
        """This worker's part of the reduction: each job's plans' contributions
        (:func:`~gradcode.codes.reduce.contribution`) end to end, ``extra`` zero slots after
        them; zeros where a plan reads none of its messages."""
        dtype = order.dtype
        plans = [p for j in order.jobs for p in j.plans]
        if len(plans) == 1:  # a static code's round: the contribution itself, no copy
            return self._contribution(plans[0], order, worker, dtype, extra)
        out = np.zeros(order.length + extra, dtype=dtype)
        off = 0
        for plan in plans:
            size = plan.chunks * plan.length
            out[off:off + size] = self._contribution(plan, order, worker, dtype, 0)
            off += size
        return out

    def _contribution(self, plan: ReducePlan, order: ReduceOrder, worker: int, dtype, extra: int) -> np.ndarray:
        weights = plan.weights.get(worker)
        if weights is None or not np.any(weights):
            return np.zeros(plan.chunks * plan.length + extra, dtype=dtype)
        rows = self._rows(plan, order, worker, weights)
        with self._lock:
            missing = [key for key in rows if key not in self._held]
            values = [self._held[key].values for key in rows if key not in missing]
        if missing:
            raise StaleReplicaError(f"worker {worker} no longer holds message(s) {missing} (round, index) that the"
                                    f" plan of round {order.round} reads")
        return contribution(weights, values, chunks=plan.chunks, length=plan.length, dtype=dtype, extra=extra)

    def apply(self, order: ReduceOrder, total: np.ndarray, problem, worker: int) -> ReduceReply:
        """Judge each job's reduced gradient in ``total`` by its plans' acceptance rules and step
        the jobs' models with them (:func:`step_model`), all or none: a model this replica lags on
        (it was not brought up to date: a straggler holding an older job's message) is left for
        it to catch up."""
        total = np.asarray(total)
        base = dict(worker=worker, round=order.round)
        grads, rels = [], []
        off = 0
        for job in order.jobs:
            state = self.models[job.model]
            g = None
            rel = math.nan
            for i, plan in enumerate(job.plans):
                seg = total[off: off + plan.chunks * plan.length][: np.size(state.params)]  # less a chunk's padding
                off += plan.chunks * plan.length
                if not plan.checked:
                    norm = math.sqrt(sum_squares(seg))  # one pass in float64, without a float64 copy
                    try:
                        rel = max(plan.accept(norm), 0.0 if math.isnan(rel) else rel)
                    except ImpreciseDecodeError as exc:
                        return ReduceReply(**base, job=job.job, relative_bound=exc.relative_bound, error="imprecise",
                                           message=str(exc), plan=i, norm=norm)
                elif job.reporter == worker:  # accepted before the sum: one member says by how much, for the records
                    rel = max(plan.relative_bound(math.sqrt(sum_squares(seg))), 0.0 if math.isnan(rel) else rel)
                g = seg if g is None else g + seg  # a sequential job's plans summed in the reduce type
            grads.append(g)
            rels.append(rel)
        steps = []
        with self._lock:
            new_states = []
            for job, g in zip(order.jobs, grads):
                state = self.models[job.model]
                if state.step < job.step:
                    continue  # lagging: it catches up before its next task
                if state.step != job.step:
                    raise StaleReplicaError(f"worker {worker}'s replica of model {job.model} is at step {state.step};"
                                            f" the reduction steps it from {job.step}")
                try:
                    new, opt_state, loss = step_model(problem, state.optimizer, state.params, state.opt_state,
                                                      state.step, g)
                except DivergedError as exc:
                    return ReduceReply(**base, job=job.job, error="diverged", message=exc.what,
                                       relative_bound=exc.norm)
                new_states.append((job, state, new, opt_state, loss))
            for job, state, new, opt_state, loss in new_states:
                self._commit(state, new, opt_state)
            for job in order.jobs:  # the messages read are needed no more
                for plan in job.plans:
                    weights = plan.weights.get(worker)
                    if weights is not None:
                        for key in self._rows(plan, order, worker, weights):
                            self._held.pop(key, None)
        off = 0
        for job, g, rel in zip(order.jobs, grads, rels):
            stepped = next((x for x in new_states if x[0] is job), None)
            if stepped is not None:
                update = None
                if job.keeper == worker:  # the vector itself, no copy: nothing writes to it any more
                    self._kept[(job.model, job.step)] = g
                    for key in sorted(k for k in self._kept if k[0] == job.model)[:-self.KEEP]:
                        del self._kept[key]
                    update = Kept(worker, job.model, job.step)
                steps.append(JobStep(job.job, job.model, job.step, stepped[4], rel, update=update,
                                     digest=self.digest(job.model) if order.digest else self.fingerprint(job.model)))
        return ReduceReply(**base, steps=tuple(steps))

    def kept(self, model: int, step: int) -> np.ndarray:
        """The reduced gradient of model ``model``'s step ``step`` this replica kept (:class:`Kept`)."""
        try:
            return self._kept[(model, step)]
        except KeyError:
            raise StaleReplicaError(f"the update of model {model}'s step {step} is no longer kept here") from None

    def replay(self, updates, problem, worker: int) -> None:
        """Catch up: apply the updates this replica missed, ``[(model, step, reduced gradient)]`` in
        order (each accepted already by the members that reduced it), as they applied them. An
        update for a step this replica is not at is refused (:class:`StaleReplicaError`)."""
        for model, step, total in updates:
            state = self.models[model]
            if state.step > step:
                continue  # already applied (a copy of the models came first)
            if state.step != step:
                raise StaleReplicaError(f"worker {worker}'s replica of model {model} is at step {state.step}; the"
                                        f" update to replay is step {step}'s")
            g = np.asarray(total)[: np.size(state.params)]
            with self._lock:
                new, opt_state, _ = step_model(problem, state.optimizer, state.params, state.opt_state, state.step, g)
                self._commit(state, new, opt_state)

    def _commit(self, state: ModelState, new, opt_state) -> None:
        with self._lock:
            if isinstance(new, np.ndarray):
                new.flags.writeable = False  # tasks read it as the star path's frozen parameters
            state.params, state.opt_state, state.step = new, opt_state, state.step + 1

    #: the stride of :meth:`fingerprint`'s sample
    SAMPLE = 997

    def fingerprint(self, model: int) -> str:
        """A cheap digest of model ``model``'s parameters, sent every round: BLAKE2b of every
        :attr:`SAMPLE`-th value and of the last (a drift anywhere shows in :meth:`digest`, sent every
        ``replica_check`` rounds; a drift of the whole vector, what a different optimizer or
        library makes, shows here at once)."""
        p = np.asarray(self.models[model].params)
        sample = np.concatenate([p[:: self.SAMPLE], p[-1:]])
        return f"{self.models[model].step}~" + hashlib.blake2b(sample.tobytes(), digest_size=8).hexdigest()

    def digest(self, model: int) -> str:
        """A digest of model ``model``'s parameters (BLAKE2b of their bytes) at its version."""
        state = self.models[model]
        return f"{state.step}:" + hashlib.blake2b(np.ascontiguousarray(state.params).tobytes(),
                                                  digest_size=16).hexdigest()

    def export(self) -> list[ModelState]:
        """A copy of every model (the driver's copy of the parameters: metrics, checkpoints)."""
        with self._lock:
            return copy.deepcopy(self.models)

    def copy(self) -> Replica:
        """A copy of this replica for a lagging worker (its models and window; no messages)."""
        return Replica(self.export(), self.window)

    def take_messages(self, other: Replica) -> None:
        """Hold the messages ``other`` (this worker's previous replica) kept: a lagging worker
        given a copy of the models keeps the messages it computed for jobs still open (a
        sequential scheme's)."""
        with other._lock:
            held = dict(other._held)
        with self._lock:
            self._held.update(held)
