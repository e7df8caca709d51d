"""The Ray engine: gradcode's workers as Ray actors (with :mod:`gradcode.runtime.cluster`, which starts
or joins the cluster, the only modules that import Ray).

:class:`RayEngine` implements the engine interface of :mod:`gradcode.runtime.base` (``spawn``,
``put``, ``submit``, ``poll``, ``busy``, ``release``, ``abort``, ``kill``, ``shutdown``), which is all
the round driver (:mod:`gradcode.runtime.driver`) uses, so another engine replaces this file only
(:mod:`gradcode.runtime.inprocess` is one, without Ray).

Behaviour of Ray 2.60 measured on these machines (docs/architecture.md, "The runtime") and what is done about it:

* a worker is an actor created with ``max_restarts`` and ``max_task_retries=0``; it rebuilds its
  problem and partitions in ``__init__`` from a :class:`~gradcode.runtime.worker.ProblemSpec` and the
  partition row indices, so a restarted actor has its data back, and keeps only its partitions' rows
  (:meth:`~gradcode.runtime.worker.ProblemSpec.build_partitions`). A task that was running when the
  process died is *not* retried (the master decides what to do with it);
* ``ray.wait`` counts a failed reference (dead actor) as ready, so :meth:`RayEngine.poll` reads
  each ready reference for what it holds: a message, the end of a stream, or the error of a worker
  that died. A dead worker becomes an event, never an exception. One ``poll`` waits once
  (``num_returns=1``, up to the timeout), then collects every other ready reference without
  waiting and reads all their messages with one ``ray.get`` (one wait per message was most of a
  round's time on 16 cores);
* ``ray.cancel`` does not stop a task running on a synchronous actor (measured: a 3 s sleep ran to
  its end), so the runtime never queues work behind an unfinished task (the master skips busy
  workers), and the workers of a run that injects delays are *async* actors whose injected sleeps
  are ``await``-ed: :meth:`abort` (another coroutine) ends them at once (measured: the stream ends
  within ~4 ms). Compute runs inline in the coroutine; only sleeps yield the event loop. A run
  without injected delays has nothing to interrupt and gets synchronous actors
  (:class:`_PlainWorker`), whose calls do not cross into an event loop;
* an actor call costs the driver ~1 ms, a round of 4 of them 5.7 ms with no work (2 cores), which
  made a coded step cost 1.2-1.7x a DDP step: by default the rounds go through a direct channel
  to each worker instead (:mod:`~gradcode.runtime.channel`; 0.6 ms a round), Ray placing,
  starting, restarting and killing the workers and telling the driver where each listens. What
  follows about calls holds for the rounds that still take them: parameters above
  :data:`~gradcode.runtime.channel.CHANNEL_BYTES`, ``transport="ray"``, and a worker whose
  channel cannot be opened or is being re-opened after its process died;
* a job's parameters go to the object store once (``ray.put``) unless they fit in Ray's inline
  limit (100 KiB: a small model's) or a channel, in which case they travel inside each task;
* tasks of several messages stream back through actor generators (``num_returns="streaming"``);
  a task of one message (every single-message code) is a plain actor call returning it
  (:meth:`_RayWorker.run_one`), which saves the stream's end marker and a wait per worker; a
  message is read zero-copy from the object store (a read-only array the master never writes);
* starting or joining the cluster, one session for several runs and Ray's temp dirs:
  :mod:`gradcode.runtime.cluster`.

Workers are created with ``num_cpus=0`` so that the number of workers is not limited by the cores
Ray sees (stragglers are simulated on few cores); pass ``worker_cpus`` to reserve cores on a real
cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import socket
import time
import warnings
from typing import Any

import numpy as np
import ray

from gradcode.errors import GradcodeError
from gradcode.runtime.base import Engine, Event
from gradcode.runtime.channel import CHANNEL_BYTES, ChannelClosed, DriverChannels, WorkerChannel, WorkerTaskError
from gradcode.runtime.gloo import Groups, ReductionFailed, driver_store
from gradcode.runtime.replica import ReduceReply, StaleReplicaError, warm_replica
from gradcode.runtime.cluster import init_ray, retire_temp_dir, session, warn_ignored
from gradcode.runtime.worker import (ProblemSpec, WireTask, build_core, keep_freed_memory, limit_threads,
                                     return_freed_memory, task_messages, worker_threads)



#: seconds a task waits for the reset its engine sent just before it
_STALE_WAIT = 2.0
#: Ray's ``max_direct_call_object_size`` (100 KiB by default): a task argument up to this size
#: travels inside the task instead of through the object store
_INLINE_BYTES = 100 * 1024


class NodeDiedError(GradcodeError):
    """A worker's Ray node died: its task will never answer (Ray may restart the worker elsewhere)."""


class StaleWorkerError(GradcodeError):
    """A reused worker asked to compute on data it does not hold (Ray restarted it with the
    constructor arguments of another run): its engine resets it and counts the task as lost."""


def _stale(exc) -> bool:
    """Whether a task failed because its worker holds another run's data (raised in the worker:
    the cause of Ray's ``RayTaskError`` or of a channel's ``WorkerTaskError``)."""
    return isinstance(getattr(exc, "cause", None), StaleWorkerError)


def _lost(exc) -> bool:
    """Whether a failed task's exception says the worker's process died or is restarting (a
    straggler), as opposed to an exception raised by the task itself (a bug: not retried)."""
    if isinstance(exc, WorkerTaskError):  # raised by the task, reported through its channel
        return False
    return not (isinstance(exc, ray.exceptions.RayTaskError) and not isinstance(exc, ray.exceptions.RayActorError))


class _WorkerBase:
    """What both kinds of worker actor share: the core, the data generation, identity queries."""

    def __init__(self, worker: int, spec, partitions: dict, chunks: int, threads: int = 1):
        # only the partitions' rows are kept (ProblemSpec.build_partitions)
        self.core = build_core(worker, spec, partitions, chunks)
        limit_threads(threads)  # after the build, which may import torch: for the actor's life
        keep_freed_memory()  # a round's large arrays reuse the heap instead of faulting in anew
        # which data the worker holds: 0 as created (and as Ray restarts it: with the constructor's
        # arguments), then the number its engine gave with each reset; a task names the one it needs
        self._generation = 0
        self._channel = None

    def ping(self) -> int:
        return os.getpid()

    def open_channel(self, token: bytes) -> tuple[str, int]:
        """Listen for the driver's direct channel (:mod:`gradcode.runtime.channel`), which must
        present ``token``; returns where. The channel's threads run the rounds it brings beside
        the actor's own calls (``reset``, ``abort`` and the rest)."""
        if self._channel is None:
            self._channel = WorkerChannel(self, ray.util.get_node_ip_address(), self._check_holds)
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
        timeout) for the reductions' groups."""
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
        ds = getattr(self.core.problem, "dataset", None)
        return (int(ds.n_train), int(ds.n_test)) if ds is not None else (-1, -1)


@ray.remote
class _PlainWorker(_WorkerBase):
    """Synchronous actor around :class:`WorkerCore`, for runs that inject no delays: a call runs
    on the actor's own thread, 2-3 ms a round cheaper than the async :class:`_RayWorker` on 2
    cores (measured: ``ray.put`` + 4 calls + waits, 6.3 ms against 8.8 ms) because no call crosses
    into an event loop. It cannot be interrupted (``abort`` runs after the task), which only
    matters for injected sleeps. Calls from one submitter run in order, so a task always finds
    the data of the :meth:`reset` sent before it."""

    def reset(self, generation: int, worker: int, spec, partitions: dict, chunks: int) -> int:
        """Become worker ``worker`` of another run, holding data ``generation``."""
        self.core = build_core(worker, spec, partitions, chunks)
        return_freed_memory()  # the data set built and dropped: not kept for the rounds
        self._generation = generation
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
        self.core.abort(t)


@ray.remote
class _RayWorker(_WorkerBase):
    """Async actor around :class:`WorkerCore`, for runs that inject delays: ``run`` streams the
    messages of a round and sleeps injected delays with ``await``, so ``abort`` (another
    coroutine) ends them at once. Measured with n = 8, d = 1e5: 20 ms per round, against 18 ms for
    a synchronous actor (which cannot be interrupted) and 34 ms for a threaded actor with a control
    concurrency group."""

    def __init__(self, worker: int, spec, partitions: dict, chunks: int, threads: int = 1):
        super().__init__(worker, spec, partitions, chunks, threads)
        self._wake = asyncio.Event()

    async def reset(self, generation: int, worker: int, spec, partitions: dict, chunks: int) -> int:
        """Become worker ``worker`` of another run (:func:`~gradcode.runtime.cluster.ray_session` reuses actors between
        runs), holding data ``generation``: the tasks of the previous data end at their next
        sleep, the new core is built."""
        self.core = build_core(worker, spec, partitions, chunks)
        return_freed_memory()  # the data set built and dropped: not kept for the rounds
        self._generation = generation
        self._wake.set()
        return os.getpid()

    async def _holds(self, generation: int) -> None:
        """Wait (briefly: a reset sent just before the task may run after it starts, as an async
        actor's calls may) until the worker holds data ``generation``; raise
        :class:`StaleWorkerError` when it does not: Ray restarted it with another run's data."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _STALE_WAIT
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
        self.core.abort(t)
        self._wake.set()


class _Failed:
    """A reference whose ``ray.get`` raised (kept apart from the messages read with it)."""

    def __init__(self, exc):
        self.exc = exc


class ChannelWarning(RuntimeWarning):
    """A worker's direct channel could not be opened: its rounds go through Ray's actor calls."""


class SharedCoresWarning(RuntimeWarning):
    """More workers than the cluster has CPUs, none reserving a core: they share cores, so round
    times include that contention (a coded scheme can then look slower than uncoded)."""


class RayEngine(Engine):
    """Ray actors as gradcode workers.

    ``address=None`` uses the Ray session already initialised in this process, or starts an
    embedded local cluster (``num_cpus`` cores, temp dir from :func:`ray_temp_dir`) and stops it in
    :meth:`shutdown`; ``address="auto"`` or ``"host:port"`` joins an existing cluster (raising
    :class:`GradcodeError` when nothing answers there within ``start_timeout`` seconds).
    ``worker_cpus``: CPUs each worker actor reserves (0: none, and a :class:`SharedCoresWarning`
    when the workers outnumber the cluster's CPUs). ``worker_gpus``: GPUs each reserves (None: as
    :class:`~gradcode.runtime.config.ClusterConfig` says, by the problem's ``device``).
    ``transport``: ``"channels"`` runs the rounds through a direct channel to each worker
    (:mod:`gradcode.runtime.channel`) and Ray's object store for larger parameters; ``"ray"``
    through actor calls only. A worker whose channel cannot be opened, or is being re-opened
    after its process died, takes its rounds through actor calls meanwhile.
    """

    @classmethod
    def from_config(cls, cluster, *, run_dir=None) -> RayEngine:
        """The engine of a :class:`~gradcode.runtime.config.ClusterConfig` (its Ray settings)."""
        return cls(address=cluster.address, num_cpus=cluster.num_cpus, run_dir=run_dir,
                   worker_cpus=cluster.worker_cpus, worker_gpus=cluster.worker_gpus,
                   start_timeout=cluster.start_timeout, transport=cluster.transport)

    def __init__(
        self,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        run_dir: str | os.PathLike | None = None,
        worker_cpus: float = 0.0,
        worker_gpus: float | None = None,
        start_timeout: float = 120.0,
        transport: str = "channels",
    ):
        self.address = address
        self.worker_cpus = float(worker_cpus)
        self.worker_gpus = worker_gpus
        self._owned = False
        self.temp_dir = None
        self.run_dir = run_dir
        if not ray.is_initialized():
            self.temp_dir = init_ray(address=address, num_cpus=num_cpus, run_dir=run_dir,
                                     start_timeout=start_timeout)
            self._owned = True
        elif session.get("cluster") is None or (session["cluster"].address, session["cluster"].num_cpus) != (
                address, num_cpus):  # settings that ray_session applied are not ignored
            ignored = [f"{k}={v!r}" for k, v in (("address", address), ("num_cpus", num_cpus)) if v is not None]
            if ignored:
                warn_ignored(f"{' and '.join(ignored)} ignored: Ray is already running in this process"
                              " and its session is used")
        self._actors: list[Any] = []
        self._run: list[Any] = []
        # worker -> (round, reference, streaming); the reference is None for a task sent by channel
        self._running: dict[int, tuple[int, Any, bool]] = {}
        self.transport = transport
        self._channels = DriverChannels() if transport in ("channels", "collective") else None
        self._store = None  # the collective path's TCPStore (gloo groups' rendezvous), and its address
        self._store_address = None
        self._reducing: dict[int, int] = {}  # worker -> round of the reduction it is in (by channel)
        self._reduce_refs: dict[Any, tuple[int, int]] = {}  # a reduction by actor call -> (worker, round)
        self._syncs: dict[int, Any] = {}  # worker -> the replica its next task brings (export_replica's reference)
        self._replays: dict[int, list] = {}  # worker -> the updates its next task applies first
        self._pending_events: list[Event] = []  # events known without waiting (a reduction refused at once)
        self._token = secrets.token_bytes(32)
        self._reopen: dict[int, Any] = {}  # worker -> its open_channel reference, after its channel closed
        self._unreachable: set[int] = set()  # workers whose channel could not be opened: actor calls only
        self._resetting: dict[int, Any] = {}  # worker -> its reset's reference, until the reset is done
        self._owner: dict[Any, int] = {}  # reference -> worker
        self._specs: list[tuple] = []  # each worker's (problem spec, partitions, chunks)
        self._reused: set[int] = set()  # workers taken over from the session's previous engine
        self._stale: set[int] = set()  # reused workers to reset before their next task
        self._killed: set[int] = set()
        self._generations: list[int] = []  # the data each worker holds (reset count), which its tasks name
        self._pool_key = None
        self._nodes: list[str | None] = []  # each worker's Ray node (None: being learnt, _node_refs)
        self._node_refs: dict[int, Any] = {}
        self._nodes_checked = -math.inf

    # ----------------------------------------------------------------- workers
    def spawn(self, specs: list[tuple[ProblemSpec, dict, int]], *, max_restarts: int = -1,
              start_timeout: float = 120.0, interruptible: bool = True) -> None:
        """One actor per ``(problem spec, {partition: rows}, chunks)``; returns once all are up, or
        raises :class:`GradcodeError` after ``start_timeout`` seconds (workers that cannot be
        placed or whose ``__init__`` hangs, e.g. loading data) or when a worker fails to start.
        ``interruptible``: async actors whose injected sleeps :meth:`abort` ends; False (a run
        that injects no delays) gives synchronous actors, cheaper a call (:class:`_PlainWorker`)."""
        gpus = self._gpus_each(specs)
        kind = _RayWorker if interruptible else _PlainWorker
        cls = kind.options(
            max_restarts=max_restarts,
            max_task_retries=0,
            num_cpus=self.worker_cpus,
            num_gpus=gpus,
        )
        cpus = ray.cluster_resources().get("CPU", 0.0)
        if self.worker_cpus == 0 and len(specs) > cpus:
            warnings.warn(f"{len(specs)} workers share the cluster's {cpus:g} CPUs: their computations contend for"
                          " cores, so round times include that (a coded scheme, with more work a worker, can look"
                          " slower than uncoded); reserve cores with --worker-cpus (ClusterConfig.worker_cpus)"
                          " or use fewer workers", SharedCoresWarning, stacklevel=2)
        # Ray counts an actor's restarts over its life: only actors restarted without limit are shared
        self._pool_key = (interruptible, self.worker_cpus, gpus) if max_restarts == -1 else None
        pool = session.get("pool", {}).pop(self._pool_key, []) if self._pool_key is not None else []
        reused = pool[: len(specs)]
        for entry in pool[len(specs):]:  # more than this run needs: kept for the next one
            session["pool"].setdefault(self._pool_key, []).append(entry)
        self._specs = [tuple(x) for x in specs]
        self._stale = set()
        self._actors = [a for a, _ in reused] + [cls.remote(w, *specs[w], worker_threads(self.worker_cpus))
                                                    for w in range(len(reused), len(specs))]
        self._generations = [g + 1 for _, g in reused] + [0] * (len(specs) - len(reused))
        self._run = [a.run.options(num_returns="streaming") for a in self._actors]
        try:
            self._start(len(reused), cls, start_timeout)
        except ray.exceptions.GetTimeoutError:
            self._killed.update(range(len(self._actors)))  # still starting: never left to another run
            self.shutdown()
            raise GradcodeError(
                f"the workers did not start within {start_timeout:g} s (each rebuilds its problem from"
                " the data spec in __init__: a slow data load, or a cluster without room for"
                f" {len(specs)} workers?); raise the start timeout if they only need longer"
            ) from None
        except ray.exceptions.RayError as exc:
            self._killed.update(range(len(self._actors)))
            self.shutdown()
            raise GradcodeError(
                "the workers could not start (each rebuilds its problem from the data spec in"
                f" __init__; on a remote cluster gradcode must be installed on every node): {exc}"
            ) from None

    def _gpus_each(self, specs: list) -> float:
        """GPUs each worker actor reserves: ``worker_gpus`` when set; else, for a problem on a CUDA
        device (a torch spec's ``device``), the cluster's GPUs shared evenly, at most one each (a
        :class:`GradcodeError` when it has none); else none."""
        if self.worker_gpus is not None:
            return float(self.worker_gpus)
        device = str(getattr(specs[0][0], "device", "cpu")) if specs else "cpu"
        if not device.startswith("cuda"):
            return 0.0
        total = ray.cluster_resources().get("GPU", 0.0)
        if total <= 0:
            raise GradcodeError(f"device={device!r}: the Ray cluster has no GPUs for the workers (start it on machines"
                                " with GPUs, or use device='cpu')")
        return min(1.0, total / len(specs))

    def _start(self, reused: int, cls, timeout: float) -> None:
        """Wait until every worker is up: new actors answer a ping, the ``reused`` first ones
        finish their :meth:`_RayWorker.reset`; a reused actor that is dead is replaced by a new one."""
        deadline = time.monotonic() + timeout
        refs = [self._actors[w].reset.remote(self._generations[w], w, *self._specs[w]) for w in range(reused)]
        refs += [a.ping.remote() for a in self._actors[reused:]]
        for w, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=max(deadline - time.monotonic(), 0.0))
            except ray.exceptions.RayActorError:
                if w >= reused:
                    raise
                actor = cls.remote(w, *self._specs[w], worker_threads(self.worker_cpus))
                self._actors[w], self._generations[w] = actor, 0
                self._run[w] = self._actors[w].run.options(num_returns="streaming")
                ray.get(self._actors[w].ping.remote(), timeout=max(deadline - time.monotonic(), 0.0))
        self._reused = set(range(reused))
        self._nodes = ray.get([a.node.remote() for a in self._actors], timeout=max(deadline - time.monotonic(), 0.0))
        if self._channels is not None:
            refs = [a.open_channel.remote(self._token) for a in self._actors]
            for w, ref in enumerate(refs):
                self._connect(w, ray.get(ref, timeout=max(deadline - time.monotonic(), 0.0)),
                              timeout=min(5.0, max(deadline - time.monotonic(), 0.1)))

    def _connect(self, w: int, address, timeout: float = 5.0) -> None:
        """Open worker ``w``'s channel at ``address``; when the driver cannot reach it (a firewall
        between nodes), ``w`` takes its rounds through actor calls, and a warning says so."""
        try:
            self._channels.connect(w, address, self._token, timeout)
        except OSError as exc:
            self._unreachable.add(w)
            warnings.warn(f"worker {w}'s direct channel at {address[0]}:{address[1]} cannot be opened ({exc}): its"
                          " rounds go through Ray's actor calls (transport='ray' says so for every worker)",
                          ChannelWarning, stacklevel=3)

    def _has_channel(self, w: int) -> bool:
        """Whether worker ``w``'s rounds can go by channel: its channel is open (after its process
        died: once Ray has restarted it and it listens again) and no reset of its data is still
        running (looked at without waiting)."""
        if self._channels is None:
            return False
        if w in self._resetting:
            if not ray.wait([self._resetting[w]], timeout=0)[0]:
                return False
            del self._resetting[w]
        if not self._channels.has(w) and w in self._reopen:
            ref = self._reopen[w]
            if ray.wait([ref], timeout=0)[0]:
                del self._reopen[w]
                with contextlib.suppress(ray.exceptions.RayError):
                    self._connect(w, ray.get(ref))
        return self._channels.has(w)

    def _channel_lost(self, w: int) -> None:
        """Worker ``w``'s channel closed (its process died, or its node): ask for the restarted
        process's address, which Ray answers once it is back."""
        self._channels.close(w)
        if w not in self._killed and w not in self._unreachable:
            self._reopen[w] = self._actors[w].open_channel.remote(self._token)

    @property
    def n(self) -> int:
        return len(self._actors)

    def pids(self) -> list[int | None]:
        """Process id of each worker (None for one that does not answer within 5 s)."""
        out = []
        for a in self._actors:
            try:
                out.append(ray.get(a.ping.remote(), timeout=5))
            except Exception:
                out.append(None)
        return out

    def rows_held(self) -> list[tuple[int, int]]:
        """``(training rows, held-out rows)`` each worker keeps in memory."""
        return ray.get([a.rows_held.remote() for a in self._actors])

    def put(self, array: np.ndarray):
        """Store ``array`` once in the object store, where every worker of the round reads that
        copy; an array of at most :data:`~gradcode.runtime.channel.CHANNEL_BYTES` (channels) or
        :data:`_INLINE_BYTES` (actor calls) goes as it is, inside each request (Ray inlines such
        arguments: no object to create, look up and free; measured 2.8 ms a round less for the
        small CNN's 82 KB, n = 4, 2 cores; above the limit each task would store its own copy)."""
        limit = CHANNEL_BYTES if self._channels is not None else _INLINE_BYTES
        return array if array.nbytes <= limit else ray.put(array)

    def busy(self, w: int) -> bool:
        return w in self._running

    def running_round(self, w: int) -> int | None:
        entry = self._running.get(w)
        return None if entry is None else entry[0]

    def submit(self, w: int, t: int, tasks: list[WireTask], params: list, sleeps=(), fail: bool = False) -> None:
        """Start round ``t`` on worker ``w`` (which must be idle); messages come back via :meth:`poll`.
        Tasks that send one message go as a plain call (:meth:`_RayWorker.run_one`), others as a
        stream."""
        if w in self._running:
            raise RuntimeError(f"worker {w} is still busy with round {self._running[w][0]}")
        if w in self._stale:  # a reused actor Ray may have restarted with another run's arguments
            self._stale.discard(w)
            self._generations[w] += 1
            # its tasks go by actor call, queued behind the reset, until the reset is done: a
            # channel's request would not wait for a reset that reloads a data set
            self._resetting[w] = self._actors[w].reset.remote(self._generations[w], w, *self._specs[w])
        sleeps = tuple(float(x) for x in sleeps)
        one = task_messages(tasks) == 1
        sync, replay = self._syncs.pop(w, None), self._replays.pop(w, None)
        if (sync is None and replay is None and self._has_channel(w) and not any(isinstance(p, ray.ObjectRef) for p in params)
                and self._channels.request(w, t, self._generations[w], tasks, sleeps, fail, one, params)):
            self._running[w] = (t, None, not one)
            return
        if self._channels is not None and not self._channels.has(w) and w not in self._reopen:
            self._channel_lost(w)  # the request found it closed: its process died (or it never opened)
        args = (t, self._generations[w], tasks, sleeps, bool(fail), *params)
        kwargs = {} if sync is None and replay is None else {"sync": sync, "store": self._store_address,
                                                              "replay": replay}
        if one:
            ref = self._actors[w].run_one.remote(*args, **kwargs)
            self._running[w] = (t, ref, False)
        else:
            ref = self._run[w].remote(*args, **kwargs)
            self._running[w] = (t, ref, True)
        self._owner[ref] = w

    def poll(self, timeout: float | None) -> list[Event]:
        """Everything the running workers delivered: one wait for the first (up to ``timeout``
        seconds; ``[]`` if nothing came), then every other that is ready without waiting. Tasks
        sent by channel are waited for with one ``select`` over the channels; tasks sent by actor
        call with ``ray.wait`` (a failed reference, a dead actor, counts as ready there: its error
        becomes a ``"failed"`` event), and one ``ray.get`` reads all their messages. While both
        kinds run (a worker's channel is being re-opened) the two waits take turns of
        :attr:`MIXED_SLICE` seconds."""
        if self._pending_events:
            events, self._pending_events = self._pending_events, []
            return events
        if not self._running and not self._reducing and not self._reduce_refs:
            if timeout:
                time.sleep(timeout)
            return []
        deaths = self._node_deaths()
        if deaths:
            return deaths
        wait = self.NODE_CHECK if timeout is None else min(timeout, self.NODE_CHECK)
        refs = [ref for _, ref, _ in self._running.values() if ref is not None] + list(self._reduce_refs)
        by_channel = len(refs) - len(self._reduce_refs) < len(self._running) or bool(self._reducing)
        if not refs:
            return self._channel_events(wait) or self._node_deaths()
        if not by_channel:
            return self._ray_events(refs, wait) or self._node_deaths()
        end = time.monotonic() + wait
        while True:
            events = self._channel_events(0.0) + self._ray_events(refs, min(self.MIXED_SLICE, wait))
            wait = end - time.monotonic()
            if events or wait <= 0:
                return events or self._node_deaths()

    #: seconds each wait takes in turn while tasks run both by channel and by actor call
    MIXED_SLICE = 0.002

    def _channel_events(self, timeout: float) -> list[Event]:
        """The events of the frames the channels delivered within ``timeout`` seconds. A frame of
        a task the engine no longer runs (the end of a released stream, an aborted task's end) is
        dropped; a channel that closed is its worker's death (``lost``) when it ran a task."""
        events: list[Event] = []
        for w, frame in self._channels.wait(timeout):
            entry = self._running.get(w)
            mine = entry is not None and entry[1] is None
            if frame is None:  # the process died (or its connection broke)
                self._channel_lost(w)
                if w in self._reused:  # Ray restarts it with the arguments of the run that made it
                    self._stale.add(w)
                if w in self._reducing:  # a member of a reduction: it fails, lost
                    exc = ChannelClosed(f"worker {w}'s process died during a reduction (its channel closed)")
                    events.append(Event(w, self._reducing.pop(w), "failed", exc, lost=True))
                if mine:
                    self._forget(w)
                    exc = ChannelClosed(f"worker {w}'s process died or its connection broke (its channel closed)")
                    events.append(Event(w, entry[0], "failed", exc, lost=self._lost_worker(w, exc)))
                continue
            t, kind, payload = frame
            if kind in ("reduced", "reduce-error"):
                if self._reducing.get(w) == t:
                    del self._reducing[w]
                    events.append(Event(w, t, "reduced", payload) if kind == "reduced" else
                                  Event(w, t, "failed", payload, lost=self._lost_worker(w, payload)))
                continue
            if kind == "unreadable" and mine:  # a whole frame that did not unpickle here: a bug
                t, payload = entry[0], WorkerTaskError(f"a message of worker {w} could not be read here: {payload!r}",
                                                       payload)
            elif not mine or entry[0] != t:
                continue
            if kind == "message":
                if not entry[2]:  # a task of one message: this was all of it
                    self._forget(w)
                events.append(Event(w, t, "message", payload))
            elif kind == "end":
                self._forget(w)
                events.append(Event(w, t, "done"))
            else:
                self._forget(w)
                events.append(Event(w, t, "failed", payload, lost=self._lost_worker(w, payload)))
        return events

    def _ray_events(self, pending: list, timeout: float) -> list[Event]:
        """The events of the actor calls among ``pending`` that are ready within ``timeout`` seconds."""
        ready, rest = ray.wait(pending, num_returns=1, timeout=timeout)
        if not ready:
            return []
        if rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        events: list[Event] = []
        fetch: list[tuple[int, int, Any]] = []  # (worker, round, message ref) to read at once
        reductions = set()  # of those, replies of reductions by actor call
        for ref in ready:
            if ref in self._reduce_refs:  # a reduction by actor call: its reply
                w, t = self._reduce_refs.pop(ref)
                reductions.add(ref)
                fetch.append((w, t, ref))
                continue
            w = self._owner[ref]
            t, _, streaming = self._running[w]
            if not streaming:  # a plain call: its one return is the message (or None: aborted)
                self._forget(w)
                fetch.append((w, t, ref))
                continue
            try:
                item = next(ref)
            except StopIteration:
                self._forget(w)
                events.append(Event(w, t, "done"))
                continue
            except Exception as exc:  # the actor died before the stream started
                self._forget(w)
                events.append(Event(w, t, "failed", exc, lost=self._lost_worker(w, exc)))
                continue
            fetch.append((w, t, item))
        if fetch:
            try:
                values = ray.get([ref for _, _, ref in fetch])
            except Exception:  # one of them failed: read them one by one to tell which
                values = []
                for _, _, ref in fetch:
                    try:
                        values.append(ray.get(ref))
                    except Exception as exc:
                        values.append(_Failed(exc))
            for (w, t, ref), value in zip(fetch, values):
                if ref in reductions and not isinstance(value, _Failed):
                    events.append(Event(w, t, "reduced", value))
                elif isinstance(value, _Failed):  # died mid-stream, or the task raised
                    if ref not in reductions:
                        self._forget(w)
                    events.append(Event(w, t, "failed", value.exc, lost=self._lost_worker(w, value.exc)))
                elif value is None:  # a plain call aborted in its sleep: no message
                    events.append(Event(w, t, "done"))
                else:
                    events.append(Event(w, t, "message", value))
        return events

    #: seconds between looks at which Ray nodes are alive (a task on a dead node never answers)
    NODE_CHECK = 1.0

    def _node_deaths(self) -> list[Event]:
        """A ``"failed"`` event (lost) for each busy worker whose Ray node has died since: its task
        will never answer, not even with an error (Ray queues a dead actor's calls until it is
        restarted, which a cluster without room never does). Looked at once a :attr:`NODE_CHECK`."""
        now = time.monotonic()
        if now < self._nodes_checked + self.NODE_CHECK or not self._nodes:
            return []
        self._nodes_checked = now
        for w, ref in list(self._node_refs.items()):  # where restarted workers run now
            done, _ = ray.wait([ref], timeout=0)
            if done:
                try:
                    self._nodes[w] = ray.get(ref)
                except ray.exceptions.RayError:
                    continue
                del self._node_refs[w]
        try:
            dead = {n["NodeID"] for n in ray.nodes() if not n.get("Alive", True)}
        except Exception:  # the GCS itself is gone: lost() says so
            return []
        events = []
        for w, (t, _, _) in list(self._running.items()):
            node = self._nodes[w] if w < len(self._nodes) else None
            if node is not None and node in dead:
                self._forget(w)
                if self._channels is not None:  # a socket to a dead machine may never say so
                    self._channel_lost(w)
                self._nodes[w] = None
                self._node_refs[w] = self._actors[w].node.remote()  # answers once Ray has restarted it
                events.append(Event(w, t, "failed", NodeDiedError(f"worker {w}'s Ray node {node[:12]} died"),
                                    lost=True))
        return events

    def _lost_worker(self, w: int, exc) -> bool:
        """Whether a failed task of worker ``w`` was lost. A reused worker whose task was lost
        may come back restarted by Ray with the arguments of the run that created it (also after
        a death while idle: its next task then finds the wrong data and says so, a lost task
        too): it is reset before its next task."""
        if w in self._reused and (_lost(exc) or _stale(exc)):
            self._stale.add(w)
            return True
        if isinstance(getattr(exc, "cause", None), StaleReplicaError):  # its replica lagged: re-synced, re-sent
            return True
        return _lost(exc)

    def _forget(self, w: int) -> None:
        entry = self._running.pop(w, None)
        if entry is not None:
            self._owner.pop(entry[1], None)

    def release(self, w: int) -> None:
        """Forget worker ``w``'s stream: all its messages arrived, only its end marker is left, so
        it counts as idle (a new task queues behind nothing but that marker)."""
        self._forget(w)

    def abort(self, w: int, t: int) -> None:
        """Tell worker ``w`` to stop its work of rounds ``<= t`` (its injected sleep ends at once),
        through its channel unless it runs a task sent by actor call."""
        entry = self._running.get(w)
        if self._channels is not None and self._channels.has(w) and (entry is None or entry[1] is None):
            self._channels.abort(w, t)
            return
        try:
            self._actors[w].abort.remote(t)
        except Exception:  # a dead actor: nothing to stop
            pass

    def kill(self, w: int) -> None:
        """End worker ``w`` for good; a task it ran is reported failed (lost) as its process ends
        (its channel closes, or its actor call fails)."""
        ray.kill(self._actors[w], no_restart=True)
        self._killed.add(w)
        self._reopen.pop(w, None)

    # ----------------------------------------------------------------- the collective path
    #: seconds a reduction's group may wait for its members (creation and all-reduce)
    GROUP_TIMEOUT = 60.0

    @property
    def collective(self) -> bool:
        """Whether this engine runs the collective path: ``transport="collective"``, torch there to
        form the groups, and a channel to every worker (the reductions' orders go through them)."""
        if self.transport != "collective" or self._unreachable:
            return False
        try:
            import torch.distributed as dist
        except ImportError:
            return False
        return dist.is_available()

    def join(self, replica) -> None:
        """Every worker holds its own copy of ``replica`` (one ``ray.put``, one call each) and
        reaches the run's store, which the driver starts here."""
        if self._store is None:
            host = ray.util.get_node_ip_address() if self.address is not None else "127.0.0.1"
            self._store, port = driver_store(host, self.GROUP_TIMEOUT)
            self._store_address = (host, port, self.GROUP_TIMEOUT)
        ref = ray.put(replica)
        ray.get([a.join_replica.remote(ref, self._store_address) for a in self._actors])

    def reduce(self, t: int, orders: dict) -> None:
        """Send each member its order through its channel (its reductions run beside its tasks,
        in the order sent), or by actor call while its channel is not open (a restarted worker's
        is re-opened; the call waits for the task it runs). A member whose order cannot be sent
        has died: the others' group fails without it."""
        for w, order in orders.items():
            if self._has_channel(w) and self._channels.reduce(w, t, order):
                self._reducing[w] = t
                continue
            try:
                self._reduce_refs[self._actors[w].reduce.remote(order)] = (w, t)
            except Exception as exc:  # a killed actor
                self._pending_events.append(Event(w, t, "failed", exc, lost=True))

    def sync(self, w: int, source: int) -> None:
        """Before ``w``'s next task, its replica becomes a copy of ``source``'s: the copy travels
        through Ray's object store (the driver holds only its reference) as an argument of that
        task, which goes by actor call: Ray resolves it before the task runs. A copy that fails
        (the source died) fails the task, lost, and the driver syncs again from another."""
        self._syncs[w] = self._actors[source].export_replica.remote()

    def clock_info(self) -> dict:
        info = super().clock_info()
        if self._store is not None:  # the run took the collective path
            info["transport"] = "collective (gloo)"
        return info

    def catch_up(self, w: int, updates: list) -> None:
        """Before ``w``'s next task it applies ``updates``: each is asked of the member that kept it
        (an actor call that puts it in the object store), and the references travel with the task,
        which goes by actor call; the worker reads the values there."""
        self._replays[w] = [(m, k, self._actors[kept.worker].kept.remote(kept.model, kept.step))
                            for m, k, kept in updates]

    def fetch(self, w: int) -> list:
        """A copy of ``w``'s models (read here: for metrics, checkpoints and the result)."""
        return ray.get(self._actors[w].export_replica.remote()).export()

    def lost(self) -> str | None:
        """The cluster is gone when its GCS (head node) no longer accepts connections: say so, with
        the address, instead of one death per worker (measured cause: an external cluster stopped
        with ``ray stop`` while a run used it)."""
        if not ray.is_initialized():
            return "Ray is no longer initialised in this process"
        try:
            gcs = ray.get_runtime_context().gcs_address
            host, _, port = gcs.rpartition(":")
            port = int(port)
        except Exception:  # no address to check: cannot tell
            return None
        try:
            with socket.create_connection((host, port), timeout=2.0):
                return None
        except OSError as exc:
            where = f" at {self.address}" if self.address else ""
            return f"the Ray cluster{where} is gone: its head node (GCS {gcs}) does not answer ({exc})"

    def shutdown(self) -> None:
        """Kill the workers; stop Ray if this engine started it (then its temp dir is retired:
        logs kept under ``run_dir/ray/logs``, a ``/tmp/gcray-*`` folder removed). Inside a
        :func:`~gradcode.runtime.cluster.ray_session` the workers not killed are left to the session's next engine."""
        pool = session.get("pool") if self._pool_key is not None else None
        for w, a in enumerate(self._actors):
            if pool is not None and w not in self._killed:
                with contextlib.suppress(Exception):
                    a.abort.remote(2**62)  # the run's sleeping tasks end now
                pool.setdefault(self._pool_key, []).append((a, self._generations[w]))
                continue
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        if self._channels is not None:
            self._channels.close_all()
            self._reopen, self._resetting = {}, {}
        self._actors = []
        self._run = []
        self._running = {}
        self._owner = {}
        self._reducing, self._pending_events, self._reduce_refs, self._syncs, self._replays = {}, [], {}, {}, {}
        self._store = None  # the run's groups end with it
        if self._owned and ray.is_initialized():
            ray.shutdown()
            self._owned = False
            if self.temp_dir is not None:
                retire_temp_dir(self.temp_dir, self.run_dir)
                self.temp_dir = None
