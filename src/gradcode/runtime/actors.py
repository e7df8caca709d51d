"""The worker side of the Ray engine: each gradcode worker is a Ray actor around a
:class:`~gradcode.runtime.worker.WorkerCore` (:mod:`gradcode.runtime.engine` drives them; how a
round reaches them is its transport's, :mod:`gradcode.runtime.transports`).

Two kinds, by whether a run injects delays (Ray 2.60, measured on these machines,
docs/architecture.md "The runtime"): :class:`PlainWorker`, a synchronous actor (a call runs on the
actor's own thread, which makes a round cheaper, and cannot be interrupted), and
:class:`AsyncWorker`, whose injected sleeps are ``await``-ed so that ``abort`` (another coroutine)
ends them at once (``ray.cancel`` does not stop a task running on a synchronous actor). Both rebuild
their problem and partitions in ``__init__`` from a
:class:`~gradcode.runtime.worker.ProblemSpec`, so a restarted actor has its data back, and both
listen for a direct channel (:meth:`WorkerActor.open_channel`) and take the collective path's
calls (replicas, reductions through :mod:`gradcode.runtime.gloo`).
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import ray

from gradcode.errors import GradcodeError
from gradcode.runtime.channel import WorkerChannel
from gradcode.runtime.gloo import Groups, ReductionFailed
from gradcode.runtime.replica import ReduceReply, StaleReplicaError, warm_replica
from gradcode.runtime.worker import WireTask, build_core, keep_freed_memory, limit_threads, return_freed_memory

__all__ = ["AsyncWorker", "PlainWorker", "StaleWorkerError", "WorkerActor", "stale"]

#: seconds a task waits for the reset its engine sent just before it
STALE_WAIT = 2.0


class StaleWorkerError(GradcodeError):
    """A reused worker asked to compute on data it does not hold (Ray restarted it with the
    constructor arguments of another run): its engine resets it and counts the task as lost."""


def stale(exc) -> bool:
    """Whether a task failed because its worker holds another run's data (raised in the worker:
    the cause of Ray's ``RayTaskError`` or of a channel's ``WorkerTaskError``)."""
    return isinstance(getattr(exc, "cause", None), StaleWorkerError)


class WorkerActor:
    """What both kinds of worker actor share: the core, the data generation, identity queries.

    An actor is created holding no data (its constructor takes its thread count only) and gets
    its problem and partitions from its engine's :meth:`reset`, a task argument: so nothing a
    restart needs lives in Ray's object store (Ray restarts an actor with its constructor's
    arguments, which an object-store argument could no longer give once it went out of scope:
    https://github.com/ray-project/ray/issues/53727); a restarted actor holds no data again, its
    next task says so (:class:`StaleWorkerError`, a lost task) and its engine resets it before the
    next one."""

    def __init__(self, threads: int = 1):
        self.core = None
        self._threads = threads
        limit_threads(threads)
        keep_freed_memory()  # a round's large arrays reuse the heap instead of faulting in anew
        # which data the worker holds: 0 as created (and as Ray restarts it), then the number its
        # engine gave with each reset; a task names the one it needs
        self._generation = 0
        self._channel = None

    def _build(self, generation: int, worker: int, spec, partitions: dict, chunks: int) -> None:
        # only the partitions' rows are kept (ProblemSpec.build_partitions)
        self.core = build_core(worker, spec, partitions, chunks)
        limit_threads(self._threads)  # again after the build, which may import torch
        return_freed_memory()  # the data set built and dropped: not kept for the rounds
        self._generation = generation

    def ping(self) -> int:
        return os.getpid()

    def open_channel(self, token: bytes, loopback: bool = False) -> tuple[str, int]:
        """Listen for the driver's direct channel (:mod:`gradcode.runtime.channel`), which must
        present ``token``; returns where. The channel's threads run the rounds it brings beside
        the actor's own calls (``reset``, ``abort`` and the rest)."""
        if self._channel is None:
            host = "127.0.0.1" if loopback else ray.util.get_node_ip_address()
            self._channel = WorkerChannel(self, host, self._check_holds)
        return self._channel.listen(token)

    def _check_holds(self, generation: int) -> None:
        """Raise :class:`StaleWorkerError` unless the worker holds data ``generation`` (Ray
        restarted it with another run's arguments). A channel's task never waits for a reset: the
        engine sends it only once the reset is done."""
        if self._generation != generation:
            raise StaleWorkerError(f"holds data {self._generation}, the task needs {generation}")

    # ------------------------------------------------------------ the collective path
    def join_replica(self, replica, store) -> int:
        """Hold ``replica`` (the run's models) and reach the run's store at ``store`` (host, port,
        timeout) for the reductions' groups. A worker an earlier run left (the embedded cluster's
        pool) drops that run's groups first: its store is gone, and the new one may have been given
        the same port while the driver numbers its groups from 0 again."""
        self._groups = None
        return self.load_replica(replica, store)

    def export_replica(self):
        """A copy of this worker's replica, for a lagging worker (:meth:`load_replica`)."""
        return self.core.replica_copy()

    def load_replica(self, replica, store) -> int:
        """Hold ``replica`` (a copy of an up-to-date worker's: :meth:`export_replica`), with the
        messages this worker kept (a lagging worker's, for the jobs still open)."""
        if self.core.replica is not None:
            replica.take_messages(self.core.replica)
        self.core.replica = replica
        self._reach(store)
        warm_replica()
        return os.getpid()

    def _synced(self, replica, store, replay=None) -> None:
        """Load the up-to-date replica a task brings, or apply the updates it missed (the
        collective path: a lagging worker's task carries them, so it can never compute first;
        an update lost with the worker that kept it fails the task as lost, and the driver sends
        a copy of the models instead)."""
        if replica is not None:
            self.load_replica(replica, store)
        if replay:
            try:
                values = ray.get([ref for _, _, ref in replay])
            except ray.exceptions.RayError as exc:
                raise StaleReplicaError(f"worker {self.core.worker}: an update to replay is lost ({exc})") from None
            self.core.replay([(m, k, v) for (m, k, _), v in zip(replay, values)])

    def _reach(self, store) -> None:
        if getattr(self, "_groups", None) is None or self._groups.address != tuple(store):
            self._groups = Groups(*store)

    def reduce(self, order):
        """This worker's part of a reduction, all-reduced with the other members', and the step
        (:class:`~gradcode.runtime.replica.Replica`): its reply, ``error="failed"`` when the
        collective failed (a member died or never came)."""
        core = self.core
        try:
            part, ok = core.reduce_part(order, extra=order.size), True  # the flags' slots (Groups.allreduce)
        except StaleReplicaError:  # it joins to say so: the others discard the sum at once instead of waiting
            part, ok = np.zeros(order.length + order.size, dtype=order.dtype), False
        try:
            total = self._groups.allreduce(order.group, order.rank, order.size, order.live, part, ok)
        except ReductionFailed as exc:
            return ReduceReply(core.worker, order.round, error="failed", message=str(exc),
                               stale=tuple(order.members[r] for r in exc.absent))
        return core.reduce_apply(order, total)

    def kept(self, model: int, step: int):
        """An update this worker kept for the lagging ones (read into the object store when a lagger
        needs it, beside this worker's own computation)."""
        return self.core.kept(model, step)

    def node(self) -> str:
        """The Ray node this worker runs on (a restarted actor may run on another)."""
        return ray.get_runtime_context().get_node_id()

    def rows_held(self) -> tuple[int, int]:
        """``(training rows, held-out rows)`` of the data this worker keeps."""
        ds = getattr(getattr(self.core, "problem", None), "dataset", None)
        return (int(ds.n_train), int(ds.n_test)) if ds is not None else (-1, -1)


@ray.remote
class PlainWorker(WorkerActor):
    """Synchronous actor around :class:`WorkerCore`, for runs that inject no delays: a call runs
    on the actor's own thread, a round cheaper than on the async :class:`AsyncWorker` because no
    call crosses into an event loop (BENCHMARKS.md, "2026-11-27: synchronous workers when nothing
    sleeps, small parameters inside the task"). It cannot be interrupted (``abort`` runs after the
    task), which only matters for injected sleeps. Calls from one submitter run in order, so a
    task always finds the data of the :meth:`reset` sent before it."""

    def reset(self, generation: int, worker: int, spec, partitions: dict, chunks: int) -> int:
        """Become worker ``worker`` (of this run, or of another), holding data ``generation``."""
        self._build(generation, worker, spec, partitions, chunks)
        return os.getpid()

    def run(self, t: int, generation: int, tasks: list[WireTask], sleeps: tuple, fail: bool, *params, sync=None,
            store=None, replay=None):
        self._check_holds(generation)
        self._synced(sync, store, replay)
        yield from self.core.run(t, tasks, params, sleeps, fail)

    def run_one(self, t: int, generation: int, tasks: list[WireTask], sleeps: tuple, fail: bool, *params, sync=None,
                store=None, replay=None):
        self._check_holds(generation)
        self._synced(sync, store, replay)
        out = None
        for out in self.core.run(t, tasks, params, sleeps, fail):
            pass
        return out

    def abort(self, t: int) -> None:
        if self.core is not None:  # nothing runs on a worker that holds no data yet
            self.core.abort(t)


@ray.remote
class AsyncWorker(WorkerActor):
    """Async actor around :class:`WorkerCore`, for runs that inject delays: ``run`` streams the
    messages of a round and sleeps injected delays with ``await``, so ``abort`` (another
    coroutine) ends them at once. Its round costs about a synchronous actor's (which cannot be
    interrupted) and much less than a threaded actor's with a control concurrency group, the other
    way to interrupt a task (BENCHMARKS.md, "Runtime on Ray")."""

    def __init__(self, threads: int = 1):
        super().__init__(threads)
        self._wake = asyncio.Event()

    async def reset(self, generation: int, worker: int, spec, partitions: dict, chunks: int) -> int:
        """Become worker ``worker`` of another run (the embedded cluster and a
        :func:`~gradcode.runtime.cluster.ray_session` keep idle actors for the next runs), holding
        data ``generation``: the tasks of the previous data end at their next sleep, the new core
        is built."""
        self._build(generation, worker, spec, partitions, chunks)
        self._wake.set()
        return os.getpid()

    async def _holds(self, generation: int) -> None:
        """Wait (briefly: a reset sent just before the task may run after it starts, as an async
        actor's calls may) until the worker holds data ``generation``; raise
        :class:`StaleWorkerError` when it does not: Ray restarted it with another run's data."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STALE_WAIT
        while self._generation != generation:
            if loop.time() > deadline:
                self._check_holds(generation)
            await asyncio.sleep(0.001)

    async def run(self, t: int, generation: int, tasks: list[WireTask], sleeps: tuple, fail: bool, *params,
                  sync=None, store=None, replay=None):
        await self._holds(generation)
        self._synced(sync, store, replay)
        for item in self.core.steps(t, tasks, params, sleeps, fail):
            if isinstance(item, float):
                if not await self._sleep(t, item, generation):
                    return
            else:
                yield item

    async def run_one(self, t: int, generation: int, tasks: list[WireTask], sleeps: tuple, fail: bool, *params,
                      sync=None, store=None, replay=None):
        """A round whose tasks send one message: a plain call returning it (None when aborted
        during its injected sleep). No generator: one object and one wait instead of a stream's
        item and end marker."""
        await self._holds(generation)
        self._synced(sync, store, replay)
        out = None
        for item in self.core.steps(t, tasks, params, sleeps, fail):
            if isinstance(item, float):
                if not await self._sleep(t, item, generation):
                    return None
            else:
                out = item
        return out

    async def _sleep(self, t: int, seconds: float, generation: int) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        core = self.core
        while core._aborted < t and self._generation == generation:
            left = deadline - loop.time()
            if left <= 0:
                return True
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                return True
            self._wake.clear()
        return False

    async def abort(self, t: int) -> None:
        if self.core is not None:  # nothing runs on a worker that holds no data yet
            self.core.abort(t)
        self._wake.set()
