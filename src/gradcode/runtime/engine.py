"""The Ray engine: gradcode's workers as Ray actors (:mod:`gradcode.runtime.actors`), the rounds
reaching them through a transport (:mod:`gradcode.runtime.transports`: direct channels by default,
Ray's actor calls, or the collective path); with :mod:`gradcode.runtime.cluster`, which starts or
joins the cluster, the only modules that import Ray.

:class:`RayEngine` implements the engine interface of :mod:`gradcode.runtime.base` (``spawn``,
``put``, ``submit``, ``poll``, ``busy``, ``release``, ``abort``, ``kill``, ``shutdown``), which is all
the round driver (:mod:`gradcode.runtime.driver`) uses, so another engine replaces this file only
(:mod:`gradcode.runtime.inprocess` is one, without Ray). The engine owns the workers and what each
one runs; its transport moves the requests (the protocol: :mod:`gradcode.runtime.transports.base`),
and whatever the transport cannot take goes by actor call.

Behaviour of Ray 2.60 measured on these machines (docs/architecture.md, "The runtime") and what is done about it:

* a worker is an actor created with ``max_restarts`` and ``max_task_retries=0`` and no data: its
  engine's first call (``reset``) hands it a :class:`~gradcode.runtime.worker.ProblemSpec` and its
  partitions' rows, from which it builds its problem, keeping only those rows
  (:meth:`~gradcode.runtime.worker.ProblemSpec.build_partitions`). Ray restarts an actor with its
  constructor's arguments, and one held in the object store may be gone by then (which Ray reports
  as an error at every such actor's creation,
  https://github.com/ray-project/ray/issues/53727): so the data travel as a task
  argument, and a restarted worker, which holds no data again, is reset before its next task (its
  task in flight says it holds none: a lost task). A task that was running when the process died
  is *not* retried (the master decides what to do with it); a dead worker becomes an event, never
  an exception;
* ``ray.cancel`` does not stop a task running on a synchronous actor (measured: a 3 s sleep ran to
  its end), so the runtime never queues work behind an unfinished task (the master skips busy
  workers), and the workers of a run that injects delays are async actors
  (:class:`~gradcode.runtime.actors.AsyncWorker`) whose injected sleeps :meth:`RayEngine.abort`
  ends at once (BENCHMARKS.md, "Runtime on Ray"); a run without injected delays gets synchronous actors
  (:class:`~gradcode.runtime.actors.PlainWorker`), whose calls do not cross into an event loop;
* a job's parameters go to the object store once (``ray.put``) unless they fit what the transport
  carries inside a request (:attr:`~gradcode.runtime.transports.base.Transport.inline_bytes`: a
  channel's 2 MiB, Ray's 100 KiB inline limit), in which case they travel inside each request;
* a task on a Ray node that died never answers (Ray queues a dead actor's calls until a restart):
  the engine looks at the nodes once a :attr:`RayEngine.NODE_CHECK` and reports such a worker's
  death itself;
* starting or joining the cluster, one session for several runs and Ray's temp dirs:
  :mod:`gradcode.runtime.cluster`.

Workers are created with ``num_cpus=0`` so that the number of workers is not limited by the cores
Ray sees (stragglers are simulated on few cores); pass ``worker_cpus`` to reserve cores on a real
cluster.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
import warnings
from typing import Any

import numpy as np
import ray

from gradcode.errors import GradcodeError
from gradcode.runtime.actors import AsyncWorker, PlainWorker, StaleWorkerError, stale
from gradcode.runtime.base import Engine, Event
from gradcode.runtime.channel import WorkerTaskError
from gradcode.runtime.cluster import connect, disconnect, session
from gradcode.runtime.replica import StaleReplicaError
from gradcode.runtime.transports import load_transport
from gradcode.runtime.transports.channels import ChannelWarning
from gradcode.runtime.transports.ray import ActorCalls
from gradcode.runtime.worker import WORKER_ENV, ProblemSpec, WireTask, task_messages, worker_threads

__all__ = ["ChannelWarning", "NodeDiedError", "RayEngine", "SharedCoresWarning", "StaleWorkerError"]


class NodeDiedError(GradcodeError):
    """A worker's Ray node died: its task will never answer (Ray may restart the worker elsewhere)."""


def lost(exc) -> bool:
    """Whether a failed task's exception says the worker's process died or is restarting (a
    straggler), as opposed to an exception raised by the task itself (a bug: not retried)."""
    if isinstance(exc, WorkerTaskError):  # raised by the task, reported through its channel
        return False
    return not (isinstance(exc, ray.exceptions.RayTaskError) and not isinstance(exc, ray.exceptions.RayActorError))


def _end_reserving(pool: dict, keep) -> None:
    """End the idle workers in ``pool`` of another kind than ``keep`` that reserve CPUs or GPUs:
    the new workers about to be created may need them (Ray would not place them while idle actors
    hold the cluster's cores). Idle workers that reserve nothing stay for a later run of their kind."""
    for key in [k for k in pool if k != keep and (k[1] > 0 or k[2] > 0)]:
        for actor, _ in pool.pop(key):
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)


class SharedCoresWarning(RuntimeWarning):
    """More workers than the cluster has CPUs, none reserving a core: they share cores, so round
    times include that contention (a coded scheme can then look slower than uncoded)."""


class RayEngine(Engine):
    """Ray actors as gradcode workers.

    ``address=None`` uses this process's embedded local cluster (``num_cpus`` cores), started by
    the first engine that needs it and kept for the next ones with the workers they leave
    (:func:`~gradcode.runtime.cluster.local_cluster`), or a Ray session you started yourself;
    ``address="auto"`` or ``"host:port"`` joins an existing cluster for this engine's run (raising
    :class:`GradcodeError` when nothing answers there within ``start_timeout`` seconds) and leaves
    it in :meth:`shutdown` (:func:`~gradcode.runtime.cluster.connect`).
    ``worker_cpus``: CPUs each worker actor reserves (0: none, and a :class:`SharedCoresWarning`
    when the workers outnumber the cluster's CPUs). ``worker_gpus``: GPUs each reserves (None: as
    :class:`~gradcode.runtime.config.ClusterConfig` says, by the problem's ``device``).
    ``transport``: the name of a module of :mod:`gradcode.runtime.transports`: ``"channels"``
    (a direct channel to each worker, Ray's object store for larger parameters), ``"ray"`` (actor
    calls only) or ``"collective"``. Whatever the transport cannot take goes by actor call.
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
        self.run_dir = run_dir
        #: how this engine reached Ray (:func:`~gradcode.runtime.cluster.connect`): "embedded", "joined", "running"
        self.connection = connect(address, num_cpus, run_dir=run_dir, start_timeout=start_timeout, user=self)
        self._connected = True
        #: the embedded cluster's temp dir (None on another cluster); it outlives the engine
        self.temp_dir = session["embedded"]["temp_dir"] if self.connection == "embedded" else None
        #: the worker actors, by worker id
        self.actors: list[Any] = []
        #: worker -> (round, reference, streaming) of the task it runs; the reference is None for a
        #: task its transport sent (an actor call's is the call's)
        self.running: dict[int, tuple[int, Any, bool]] = {}
        #: events known without waiting (a reduction that could not be sent)
        self.pending_events: list[Event] = []
        #: workers ended for good (never restarted, never left to another run)
        self.killed: set[int] = set()
        self.calls = ActorCalls(self)
        kind = load_transport(transport)
        #: how the rounds reach the workers (:mod:`gradcode.runtime.transports`); ``calls`` takes the rest
        self.transport = self.calls if kind is ActorCalls else kind(self)
        self.transport_name = transport
        self._resetting: dict[int, Any] = {}  # worker -> its reset's reference, until the reset is done
        self._specs: list[tuple] = []  # each worker's (problem spec, partitions, chunks)
        self._stale: set[int] = set()  # reused workers to reset before their next task
        self._generations: list[int] = []  # the data each worker holds (reset count), which its tasks name
        self._pool_key = None
        self._nodes: list[str | None] = []  # each worker's Ray node (None: being learnt, _node_refs)
        self._node_refs: dict[int, Any] = {}
        self._nodes_checked = -math.inf

    def _transports(self) -> list:
        return [self.transport] if self.transport is self.calls else [self.transport, self.calls]

    # ----------------------------------------------------------------- workers
    def spawn(self, specs: list[tuple[ProblemSpec, dict, int]], *, max_restarts: int = -1,
              start_timeout: float = 120.0, interruptible: bool = True) -> None:
        """One actor per ``(problem spec, {partition: rows}, chunks)``; returns once all are up, or
        raises :class:`GradcodeError` after ``start_timeout`` seconds (workers that cannot be
        placed or whose ``__init__`` hangs, e.g. loading data) or when a worker fails to start.
        ``interruptible``: async actors whose injected sleeps :meth:`abort` ends; False (a run
        that injects no delays) gives synchronous actors, cheaper a call
        (:class:`~gradcode.runtime.actors.PlainWorker`)."""
        gpus = self._gpus_each(specs)
        kind = AsyncWorker if interruptible else PlainWorker
        cls = kind.options(
            max_restarts=max_restarts,
            max_task_retries=0,
            num_cpus=self.worker_cpus,
            num_gpus=gpus,
            runtime_env={"env_vars": dict(WORKER_ENV)},
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
        if len(reused) < len(specs):
            _end_reserving(session.get("pool", {}), keep=self._pool_key)
        self._specs = [tuple(x) for x in specs]
        self._stale = set()
        self.actors = [a for a, _ in reused] + [cls.remote(worker_threads(self.worker_cpus))
                                                for _ in range(len(reused), len(specs))]
        self._generations = [g + 1 for _, g in reused] + [1] * (len(specs) - len(reused))
        try:
            self._start(len(reused), cls, start_timeout)
        except ray.exceptions.GetTimeoutError:
            self.killed.update(range(len(self.actors)))  # still starting: never left to another run
            self.shutdown()
            raise GradcodeError(
                f"the workers did not start within {start_timeout:g} s (each rebuilds its problem from"
                " the data spec in __init__: a slow data load, or a cluster without room for"
                f" {len(specs)} workers?); raise the start timeout if they only need longer"
            ) from None
        except ray.exceptions.RayError as exc:
            self.killed.update(range(len(self.actors)))
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
        """Wait until every worker holds its data (:meth:`~gradcode.runtime.actors.AsyncWorker.reset`,
        new and reused actors alike); a reused actor that is dead is replaced by a new one. Then the
        transport reaches them."""
        deadline = time.monotonic() + timeout
        refs = [a.reset.remote(self._generations[w], w, *self._specs[w]) for w, a in enumerate(self.actors)]
        for w, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=max(deadline - time.monotonic(), 0.0))
            except ray.exceptions.RayActorError:
                if w >= reused:
                    raise
                self.actors[w], self._generations[w] = cls.remote(worker_threads(self.worker_cpus)), 1
                ray.get(self.actors[w].reset.remote(1, w, *self._specs[w]),
                        timeout=max(deadline - time.monotonic(), 0.0))
        self._nodes = ray.get([a.node.remote() for a in self.actors], timeout=max(deadline - time.monotonic(), 0.0))
        self.transport.start(deadline)

    def one_machine(self) -> bool:
        """Whether every live node of the cluster is the driver's machine (the embedded local
        cluster): the workers' channels then listen on the loopback address only."""
        try:
            here = ray.util.get_node_ip_address()
            return all(n.get("NodeManagerAddress") == here for n in ray.nodes() if n.get("Alive", True))
        except Exception:  # cannot tell: the node's address, as on a cluster
            return False

    def reset_done(self, w: int) -> bool:
        """Whether no reset of worker ``w``'s data is still running (looked at without waiting):
        until it is done, ``w``'s requests go by actor call, queued behind it."""
        if w in self._resetting:
            if not ray.wait([self._resetting[w]], timeout=0)[0]:
                return False
            del self._resetting[w]
        return True

    def process_died(self, w: int) -> None:
        """Worker ``w``'s process died (its transport saw it): Ray restarts it without data, so it
        is reset before its next task."""
        self._stale.add(w)

    @property
    def n(self) -> int:
        return len(self.actors)

    def pids(self) -> list[int | None]:
        """Process id of each worker (None for one that does not answer within 5 s)."""
        out = []
        for a in self.actors:
            try:
                out.append(ray.get(a.ping.remote(), timeout=5))
            except Exception:
                out.append(None)
        return out

    def rows_held(self) -> list[tuple[int, int]]:
        """``(training rows, held-out rows)`` each worker keeps in memory."""
        return ray.get([a.rows_held.remote() for a in self.actors])

    def put(self, array: np.ndarray):
        """Store ``array`` once in the object store, where every worker of the round reads that
        copy; an array the transport carries inside a request
        (:attr:`~gradcode.runtime.transports.base.Transport.inline_bytes`) goes as it is: no object
        to create, look up and free, which makes a small model's round cheaper (BENCHMARKS.md,
        "2026-11-27: synchronous workers when nothing sleeps, small parameters inside the task");
        above the limit each task would store its own copy."""
        return array if array.nbytes <= self.transport.inline_bytes else ray.put(array)

    def busy(self, w: int) -> bool:
        return w in self.running

    def running_round(self, w: int) -> int | None:
        entry = self.running.get(w)
        return None if entry is None else entry[0]

    def submit(self, w: int, t: int, tasks: list[WireTask], params: list, sleeps=(), fail: bool = False) -> None:
        """Start round ``t`` on worker ``w`` (which must be idle); messages come back via :meth:`poll`.
        The transport sends it; a task it cannot take (or that must bring a replica first) goes by
        actor call: a plain call for a task of one message, else a stream."""
        if w in self.running:
            raise RuntimeError(f"worker {w} is still busy with round {self.running[w][0]}")
        if w in self._stale:  # a reused actor Ray may have restarted with another run's arguments
            self._stale.discard(w)
            self._generations[w] += 1
            # its tasks go by actor call, queued behind the reset, until the reset is done: a
            # channel's request would not wait for a reset that reloads a data set
            self._resetting[w] = self.actors[w].reset.remote(self._generations[w], w, *self._specs[w])
        sleeps = tuple(float(x) for x in sleeps)
        one = task_messages(tasks) == 1
        first = self.transport.task_arguments(w) if self.transport.reduces else {}
        args = (w, t, self._generations[w], tasks, sleeps, bool(fail), one, params)
        if not first and self.transport is not self.calls and self.transport.send(*args):
            self.running[w] = (t, None, not one)
            return
        self.calls.send(*args, **first)

    def poll(self, timeout: float | None) -> list[Event]:
        """Everything the running workers delivered: one wait for the first (up to ``timeout``
        seconds; ``[]`` if nothing came), then every other that is ready without waiting. While
        both the transport and actor calls have something outstanding (a worker's channel is being
        re-opened), their waits take turns of :attr:`MIXED_SLICE` seconds."""
        if self.pending_events:
            events, self.pending_events = self.pending_events, []
            return events
        waiting = [x for x in self._transports() if x.waiting()]
        if not waiting:
            if timeout:
                time.sleep(timeout)
            return []
        deaths = self._node_deaths()
        if deaths:
            return deaths
        wait = self.NODE_CHECK if timeout is None else min(timeout, self.NODE_CHECK)
        if len(waiting) == 1:
            return waiting[0].events(wait) or self._node_deaths()
        end = time.monotonic() + wait
        while True:
            events = waiting[0].events(0.0) + waiting[1].events(min(self.MIXED_SLICE, wait))
            wait = end - time.monotonic()
            if events or wait <= 0:
                return events or self._node_deaths()

    #: seconds each wait takes in turn while tasks run both by the transport and by actor call
    MIXED_SLICE = 0.002

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
        for w, (t, _, _) in list(self.running.items()):
            node = self._nodes[w] if w < len(self._nodes) else None
            if node is not None and node in dead:
                self.forget(w)
                self.transport.worker_lost(w)  # a socket to a dead machine may never say so
                self.process_died(w)
                self._nodes[w] = None
                self._node_refs[w] = self.actors[w].node.remote()  # answers once Ray has restarted it
                events.append(Event(w, t, "failed", NodeDiedError(f"worker {w}'s Ray node {node[:12]} died"),
                                    lost=True))
        return events

    def lost_worker(self, w: int, exc) -> bool:
        """Whether a failed task of worker ``w`` was lost. A worker whose task was lost may come
        back restarted by Ray, holding no data (also after a death while idle: its next task then
        finds no data and says so, a lost task too): it is reset before its next task."""
        if lost(exc) or stale(exc):
            self._stale.add(w)
            return True
        if isinstance(getattr(exc, "cause", None), StaleReplicaError):  # its replica lagged: re-synced, re-sent
            return True
        return lost(exc)

    def forget(self, w: int) -> None:
        """Worker ``w`` runs nothing any more (its task ended, failed, or is no longer awaited)."""
        entry = self.running.pop(w, None)
        if entry is not None:
            self.calls.owner.pop(entry[1], None)

    def release(self, w: int) -> None:
        """Forget worker ``w``'s stream: all its messages arrived, only its end marker is left, so
        it counts as idle (a new task queues behind nothing but that marker)."""
        self.forget(w)

    def abort(self, w: int, t: int) -> None:
        """Tell worker ``w`` to stop its work of rounds ``<= t`` (its injected sleep ends at once),
        through its transport unless it runs a task sent by actor call."""
        if not self.transport.abort(w, t):
            self.calls.abort(w, t)

    def kill(self, w: int) -> None:
        """End worker ``w`` for good; a task it ran is reported failed (lost) as its process ends
        (its channel closes, or its actor call fails)."""
        ray.kill(self.actors[w], no_restart=True)
        self.killed.add(w)
        self.transport.killed(w)

    # ----------------------------------------------------------------- the collective path
    @property
    def collective(self) -> bool:
        """Whether this engine runs the collective path: its transport's workers reduce among
        themselves and it can (:attr:`~gradcode.runtime.transports.collective.Collective.available`)."""
        return self.transport.reduces and self.transport.available

    def join(self, replica) -> None:
        self.transport.join(replica)

    def reduce(self, t: int, orders: dict) -> None:
        """Send each member its order through the transport (its reductions run beside its tasks,
        in the order sent), or by actor call while its channel is not open (a restarted worker's
        is re-opened; the call waits for the task it runs). A member whose order cannot be sent
        has died: the others' group fails without it."""
        for w, order in orders.items():
            if not self.transport.reduce(w, t, order):
                self.calls.reduce(w, t, order)

    def cancel_reduction(self, group: int) -> None:
        self.transport.cancel(group)

    def sync(self, w: int, source: int) -> None:
        self.transport.sync(w, source)

    def catch_up(self, w: int, updates: list) -> None:
        self.transport.catch_up(w, updates)

    def fetch(self, w: int) -> list:
        return self.transport.fetch(w)

    def clock_info(self) -> dict:
        info = super().clock_info()
        if self.transport.reduces and self.transport.store is not None:  # the run took the collective path
            info["transport"] = "collective (gloo)"
        return info

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
        """End this engine's part: on the embedded cluster or inside a
        :func:`~gradcode.runtime.cluster.ray_session` its workers not killed are left to the next
        engine (their sleeping tasks aborted; a synchronous one still computing is killed), and the
        cluster stays up for it; otherwise the
        workers are killed, and a cluster this engine joined is left
        (:func:`~gradcode.runtime.cluster.disconnect`)."""
        pool = session.get("pool") if self._pool_key is not None else None
        for w, a in enumerate(self.actors):
            # a synchronous worker still computing a task (a run that timed out or was interrupted)
            # would make the next run's reset wait behind it: it is killed, not pooled
            busy = pool is not None and w in self.running and not self._pool_key[0]
            if pool is not None and w not in self.killed and not busy:
                with contextlib.suppress(Exception):
                    a.abort.remote(2**62)  # the run's sleeping tasks end now
                pool.setdefault(self._pool_key, []).append((a, self._generations[w]))
                continue
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        for transport in self._transports():
            transport.shutdown()
        self._resetting = {}
        self.actors = []
        self.running = {}
        self.pending_events = []
        if self._connected:
            disconnect(self, self.connection)
            self._connected = False
