"""The engine interface: what the round driver (:mod:`gradcode.runtime.driver`) needs from whatever
runs the workers, and nothing more: everything engine-specific sits in one small adapter
(docs/architecture.md, "The runtime").

Two engines implement it: :class:`~gradcode.runtime.engine.RayEngine` (Ray actors; it and
:mod:`~gradcode.runtime.cluster` are the only modules that import Ray) and
:class:`~gradcode.runtime.inprocess.InProcessEngine` (the workers'
:class:`~gradcode.runtime.worker.WorkerCore` called in this process on a virtual clock, so that
the driver's rules are tested in milliseconds and deterministically). The driver never branches on
the engine's class.

The contract, as the driver relies on it:

* ``spawn(specs, interruptible=)`` starts one worker per ``(problem spec, {partition: rows},
  chunks)`` and returns once all are up (or raises :class:`~gradcode.errors.GradcodeError`);
  ``interruptible=False`` promises that no task will sleep (no injected delays), so ``abort``
  need not reach a running task;
* ``put(array)`` stores a job's parameters once; every task of the job gets the same handle;
* ``submit(w, t, tasks, params, sleeps, fail)`` starts round ``t`` on idle worker ``w``: it sleeps
  ``sleeps[i]`` before message ``i``; ``fail`` makes its process exit before it sends anything;
* ``poll(timeout)`` returns the :class:`Event` s delivered since the last call (several at once
  when several are ready: one wait covers every running worker), or ``[]`` after ``timeout``
  seconds of the engine's clock;
* ``busy(w)`` / ``running_round(w)``: whether ``w`` still runs a task (and of which round); a busy
  worker is never given new work (skip busy: Ray cannot stop a queued task);
* ``release(w)``: every message of ``w``'s task arrived, only its end is left: count it idle;
* ``abort(w, t)``: stop ``w``'s work of rounds ``<= t`` now (its injected sleep ends at once);
* ``kill(w)``: end ``w`` for good (no restart); ``shutdown()``: end every worker and whatever the
  engine started;
* ``clock()``: the engine's time in seconds, which the driver uses for round times, arrivals,
  deadlines and back-off: wall time for a real engine, virtual time for the in-process one.

The collective path (:mod:`gradcode.runtime.replica`; an engine with ``collective = True``):

* ``join(replica)`` gives every worker its own copy of the models (parameters, optimizers and
  their states); a task then names ``ReplicaRef(model, version)`` in place of parameters and its
  messages come back as :class:`~gradcode.codes.messages.Note` s, the worker keeping the values;
* ``reduce(t, orders)`` starts round ``t``'s reduction among the workers of ``orders`` (``{w:
  ReduceOrder}``): each contributes its part, they all-reduce the parts among themselves and step
  their replicas (a member may still be computing a task: the reduction does not wait for it);
  each answers with a ``"reduced"`` :class:`Event` whose payload is its
  :class:`~gradcode.runtime.replica.ReduceReply` (``error`` set when it did not step: the
  reduction failed because a member died, naming it in ``lost``; the decode was imprecise; the
  step diverged), or dies (a lost ``"failed"`` event);
* ``cancel_reduction(group)``: a member of that reduction died; the others stop waiting for it;
* ``sync(w, source)``: before ``w``'s next task its replica becomes a copy of ``source``'s (a
  task of a worker whose copy failed raises :class:`~gradcode.runtime.replica.StaleReplicaError`,
  reported as lost); ``catch_up(w, updates)``: before ``w``'s next task it applies ``updates``
  (``[(model, step, JobStep.update)]``, kept by the member a job's order named its ``keeper``), the
  cheap way to bring a worker one or a few steps behind up to date;
* ``fetch(w)``: a copy of ``w``'s models (for records, metrics and checkpoints).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Engine", "Event"]


@dataclass
class Event:
    """What :meth:`Engine.poll` saw: ``kind`` is ``"message"`` (``payload`` is the array),
    ``"done"`` (the worker's task for round ``round`` ended), ``"failed"`` (``payload`` is the
    exception) or ``"reduced"`` (the collective path: ``payload`` is the worker's
    :class:`~gradcode.runtime.replica.ReduceReply`). ``lost``: a failure because the worker's process died or is restarting (a
    straggler, and its task may be sent again), as opposed to an exception raised by the task
    itself (a bug: the run stops). An engine must set it on every death it reports: left at its
    default, a dead worker stops the run instead of counting as a straggler."""

    worker: int
    round: int
    kind: str
    payload: Any = None
    lost: bool = False


class Engine(ABC):
    """Runs the workers of one training run; see the module docstring for the contract."""

    #: the workers compute in the master's own process (each timed on one thread there)
    in_master_process = False
    #: whether the engine runs the collective path (``join``, ``reduce``, ``sync``, ``fetch``)
    collective = False

    def join(self, replica) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not run the collective path")

    def reduce(self, t: int, orders: dict) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not run the collective path")

    def cancel_reduction(self, group: int) -> None:
        """A member of the reduction in group ``group`` died: the others need not wait for it
        (an engine whose members could wait on it stops them; default: nothing to do)."""

    def sync(self, w: int, source: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not run the collective path")

    def catch_up(self, w: int, updates: list) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not run the collective path")

    def fetch(self, w: int) -> list:
        raise NotImplementedError(f"{type(self).__name__} does not run the collective path")

    @abstractmethod
    def spawn(self, specs: list, *, max_restarts: int = -1, start_timeout: float = 120.0,
              interruptible: bool = True) -> None: ...

    @property
    @abstractmethod
    def n(self) -> int:
        """Number of workers spawned."""

    @abstractmethod
    def put(self, array: np.ndarray) -> Any: ...

    @abstractmethod
    def submit(self, w: int, t: int, tasks: list, params: list, sleeps=(), fail: bool = False) -> None: ...

    @abstractmethod
    def poll(self, timeout: float | None) -> list[Event]: ...

    @abstractmethod
    def busy(self, w: int) -> bool: ...

    @abstractmethod
    def running_round(self, w: int) -> int | None: ...

    @abstractmethod
    def release(self, w: int) -> None: ...

    @abstractmethod
    def abort(self, w: int, t: int) -> None: ...

    @abstractmethod
    def kill(self, w: int) -> None: ...

    @abstractmethod
    def shutdown(self) -> None: ...

    def clock_info(self) -> dict:
        """What :meth:`clock` measures, for the run's records (``result.json``'s ``clock``)."""
        return {"clock": "wall", "compute": "measured"}

    def clock(self) -> float:
        """Seconds on the engine's clock (wall time unless the engine keeps its own)."""
        return time.perf_counter()

    def lost(self) -> str | None:
        """Why the cluster the workers run on is gone, if it is; None while it is there (or when
        the engine cannot tell). The driver asks before blaming a round's workers one by one."""
        return None

