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

__all__ = ["Kept", "ModelState", "ReduceOrder", "ReduceReply", "Replica", "ReplicaRef", "StaleReplicaError", "step_model",
           "warm_replica"]


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
class ReduceOrder:
    """What the driver sends each member of round ``round``'s reduction for job ``job`` (model
    ``model`` at version ``step``): the :class:`~gradcode.codes.reduce.ReducePlan` (every member
    judges the reduced gradient by it), the member's place in the group (``key``: the members and
    their incarnations; ``group``: the number the driver gave that key, ``live`` the numbers of
    the groups it keeps, :mod:`gradcode.runtime.gloo`; ``rank`` of ``size``) and whether to send
    a digest."""

    round: int
    job: int
    model: int
    step: int
    plan: ReducePlan
    key: tuple
    rank: int
    size: int
    digest: bool = False
    group: int = 0
    live: tuple = ()
    #: keep the reduced gradient for workers that lag (:class:`Kept`)
    publish: bool = False

    @property
    def members(self) -> tuple[int, ...]:
        return tuple(w for w, _ in self.key)


@dataclass(frozen=True)
class ReduceReply:
    """A member's answer: its replica of ``model`` now at ``step + 1`` with training objective
    ``loss`` (``error`` None), or why it did not step (``error``: ``"imprecise"``, ``"diverged"``
    or ``"failed"``: the reduction itself failed, a member died or could not take part; with
    ``message``); ``digest`` of the new parameters (a full one when asked, else a
    :meth:`Replica.fingerprint`)."""

    worker: int
    round: int
    job: int
    model: int
    step: int
    loss: float = math.nan
    relative_bound: float = math.nan
    digest: str | None = None
    error: str | None = None
    message: str = ""
    #: members found dead when the reduction failed (``error="failed"``)
    lost: tuple = ()
    #: members that could not take part, alive (``error="failed"``)
    stale: tuple = ()
    #: with ``ReduceOrder.publish``: where the reduced gradient is kept for the lagging workers
    #: (:class:`Kept`), for :meth:`Replica.replay`
    update: object = None


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
    compiled sums, and ``torch._dynamo``, which ``torch.optim`` imports at its first step (measured:
    2-5 s of the first round on 2 busy cores)."""
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
    """A worker's replica of every model (module docstring). ``problem`` is the worker's problem,
    which must carry its objective in the decoded vector (``objective_in_vector``)."""

    #: updates kept for lagging workers, a model (the driver replays at most this many)
    KEEP = 4

    def __init__(self, models: list[ModelState]):
        self.models = list(models)
        self._held: dict[int, list[Message]] = {}  # round -> the messages kept, in order
        self._kept: dict[tuple[int, int], np.ndarray] = {}  # (model, step) -> a reduced gradient (publish)
        # a step (and its commit) and an export (a copy for a lagging worker, on another thread)
        # exclude each other: a copy never catches an optimizer mid-step
        self._lock = threading.RLock()

    def __getstate__(self):  # travels (Ray) as its models; a copy holds no messages and a lock of its own
        return {"models": self.models}

    def __setstate__(self, state):
        self.__init__(state["models"])

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

    def keep(self, t: int, message: Message) -> Note:
        """Hold message ``message`` of round ``t`` (rounds before ``t`` are dropped: a static
        scheme's round needs only its own) and return its note."""
        for old in [r for r in self._held if r < t]:
            del self._held[old]
        self._held.setdefault(t, []).append(message)
        return Note.of(message)

    def part(self, order: ReduceOrder, worker: int, extra: int = 0) -> np.ndarray:
        """This worker's part of the reduction (:func:`~gradcode.codes.reduce.contribution`, with
        ``extra`` zero slots after it): zeros when the plan reads none of its messages."""
        plan = order.plan
        dtype = reduce_dtype(plan)
        weights = plan.weights.get(worker)
        held = self._held.get(order.round, [])
        if weights is None or not np.any(weights):
            return np.zeros(plan.chunks * plan.length + extra, dtype=dtype)
        if len(held) < len(weights):
            raise StaleReplicaError(f"worker {worker} holds {len(held)} message(s) of round {order.round}; the plan"
                                    f" reads {len(weights)}")
        return contribution(weights, [m.values for m in held[: len(weights)]], chunks=plan.chunks,
                            length=plan.length, dtype=dtype, extra=extra)

    def apply(self, order: ReduceOrder, total: np.ndarray, problem, worker: int) -> ReduceReply:
        """Judge the reduced gradient ``total`` by the plan's acceptance rule and step model
        ``order.model`` with it (:func:`step_model`); the replica changes only on success."""
        plan = order.plan
        state = self.models[order.model]
        g = np.asarray(total)[: np.size(state.params)]  # less a chunked code's zero padding
        base = dict(worker=worker, round=order.round, job=order.job, model=order.model, step=order.step)
        rel = math.nan
        if not plan.checked:
            norm = math.sqrt(sum_squares(g))  # one pass, accumulated in float64 without a float64 copy
            try:
                rel = plan.accept(norm)
            except ImpreciseDecodeError as exc:
                return ReduceReply(**base, relative_bound=exc.relative_bound, error="imprecise", message=str(exc))
        if state.step != order.step:
            raise StaleReplicaError(f"worker {worker}'s replica of model {order.model} is at step {state.step}; the"
                                    f" reduction steps it from {order.step}")
        try:
            with self._lock:
                new, opt_state, loss = step_model(problem, state.optimizer, state.params, state.opt_state, state.step,
                                                  g)
                self._commit(state, new, opt_state)
        except DivergedError as exc:
            return ReduceReply(**base, error="diverged", message=exc.what, relative_bound=exc.norm)
        self._held.pop(order.round, None)
        update = None
        if order.publish:  # the vector itself, no copy: nothing writes to it any more
            self._kept[(order.model, order.step)] = total
            for key in sorted(k for k in self._kept if k[0] == order.model)[:-self.KEEP]:
                del self._kept[key]
            update = Kept(worker, order.model, order.step)
        return ReduceReply(**base, loss=loss, relative_bound=rel, update=update,
                           digest=self.digest(order.model) if order.digest else self.fingerprint(order.model))

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
        """A copy of every model (for a lagging worker: :meth:`load`)."""
        with self._lock:
            return copy.deepcopy(self.models)

    def load(self, models: list[ModelState]) -> None:
        """Become a copy of an up-to-date replica (``export``'s result); held messages are dropped."""
        with self._lock:
            self.models = list(models)
            self._held.clear()
