"""An engine without Ray: the workers' :class:`~gradcode.runtime.worker.WorkerCore` called in this
process, on a virtual clock.

Why: the round driver's rules (closing as soon as the scheme decodes, skip-busy, aborts, re-sends
after deaths, round timeouts, checkpoints, multi-model scheduling, verify mode) do not depend on
Ray; with this engine they are tested in milliseconds, deterministically, and a 30-second injected
straggler costs nothing. The Ray tests then only need to check what is Ray's: actors, restarts,
streaming, the object store.

How time passes: :meth:`InProcessEngine.clock` is a virtual clock that only :meth:`poll` moves.
A submitted task is :meth:`WorkerCore.steps` driven lazily: an injected sleep of ``s`` seconds
schedules the worker's next step ``s`` virtual seconds later, a message is delivered when its
computation is done on the engine's compute clock (``compute_time``), and an abort ends a sleep
at once, exactly as the Ray actor's interruptible sleep does.

The compute clock is *declared*, not read from the host, unless asked for: a
:class:`ComputeCost` charges each message ``per_sample`` seconds for every sample whose gradient
it computed plus ``per_message`` (so a worker with more partitions is slower by exactly its extra
samples), the same on a loaded and an idle machine; ``"calibrated"`` (what ``engine="inprocess"``
uses) fixes ``per_sample`` once, when the workers start, from the *minimum* over repeated
gradients of worker 0's first partition (:meth:`~gradcode.runtime.worker.WorkerCore.time_gradients`),
timed in this thread's CPU time on one intra-op thread, so that other processes on the machine
do not lengthen it (beside two busy loops on 2 cores it stays within a few per cent of a quiet
calibration; a median of wall times, or CPU time on two threads, came out up to 100 times the
quiet value there). The run's ``clock`` record holds the value used and how it was measured
(``calibration``: :class:`Calibration`; :func:`describe_clock` says it in one line; pass the value
as a :class:`ComputeCost` to repeat the run to the bit); ``"measured"`` charges each message the
wall time its computation took here (the host's load included: labelled so in the records).
A message is delivered as a read-only copy, as Ray serializes it when the worker sends it: what
the worker's problem does with its buffers afterwards cannot change a message the driver holds.
``poll(timeout)`` jumps the clock to the next due step (or by ``timeout`` when none is due
before), so events come in virtual-time order; ties are broken by submission order, so a run is
reproducible bit for bit.

Faults, as Ray shows them to the driver:

* ``submit(..., fail=True)``: the worker's "process" dies before it sends anything: a lost
  ``"failed"`` event after ``death_report`` seconds (Ray reports a dead actor late); Ray restarts
  it (``max_restarts`` times, -1 without limit) ``restart_time`` seconds after its death, with its
  data rebuilt from the problem spec. A task sent to a worker that is down fails at once (lost);
* :meth:`kill`: the worker dies for good (its running task fails, lost); :meth:`crash`: it dies
  now and is restarted (a death in the middle of a stream);
* a task that raises gives a ``"failed"`` event that is not lost (a bug: the driver stops).

The collective path (:mod:`gradcode.runtime.replica`): each worker holds its replica; ``reduce``
sums the members' parts in rank order in the reduce type, each member steps its replica with its
own copy of the sum, and the replies arrive :class:`CollectiveCost` seconds later on the virtual
clock (a ring all-reduce: latency and bytes over bandwidth, over the members; printed with the
run's ``clock``). A member that is down fails the reduction for all (``error="failed"``, naming it).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gradcode._validation import check_real
from gradcode.codes.messages import Message
from gradcode.errors import GradcodeError
from gradcode.runtime.base import Engine, Event
from gradcode.runtime.replica import ReduceReply, StaleReplicaError
from gradcode.runtime.worker import build_core, limit_threads
from gradcode.schemes.timing import ring_allreduce_time

__all__ = ["Calibration", "CollectiveCost", "ComputeCost", "InProcessEngine", "WorkerDied", "describe_clock"]


class WorkerDied(GradcodeError):
    """The in-process stand-in for Ray's ``RayActorError``: the worker's process is gone."""


@dataclass(frozen=True)
class ComputeCost:
    """A declared compute clock: a message takes ``per_sample * samples + per_message`` virtual
    seconds, ``samples`` being how many samples' gradients the worker computed for it (its new
    partials; a message that reuses partials already computed costs ``per_message`` only)."""

    per_sample: float = 0.0
    per_message: float = 0.0

    def __post_init__(self):
        for name in ("per_sample", "per_message"):
            object.__setattr__(self, name, check_real(f"ComputeCost.{name}", getattr(self, name), minimum=0.0))

    def seconds(self, samples: int) -> float:
        return self.per_sample * samples + self.per_message


@dataclass(frozen=True)
class Calibration:
    """How a calibrated compute clock's ``per_sample`` was measured: ``repeats`` gradients of
    ``samples`` samples each, timed by ``timer`` on ``threads`` intra-op thread(s), after one
    untimed warm-up gradient; ``per_sample`` is the minimum over the repeats per sample (the
    statistic a busy host does not move), ``median_per_sample`` the median, for how much the
    repeats varied."""

    per_sample: float
    median_per_sample: float
    repeats: int
    samples: int
    timer: str = "thread_time"
    threads: int = 1
    statistic: str = "minimum"

    @classmethod
    def of(cls, samples: int, times: list[float], *, threads: int = 1) -> Calibration:
        """The calibration of ``times`` (seconds of each repeat) over ``samples`` samples."""
        if samples <= 0 or not times:
            return cls(0.0, 0.0, len(times), int(samples), threads=threads)
        return cls(min(times) / samples, float(np.median(times)) / samples, len(times), int(samples), threads=threads)

    def to_dict(self) -> dict:
        return {"per_sample": self.per_sample, "median_per_sample": self.median_per_sample, "repeats": self.repeats,
                "samples": self.samples, "timer": self.timer, "threads": self.threads, "statistic": self.statistic}


def describe_clock(clock: dict | None) -> str:
    """One line saying what timed a run (its ``clock`` record, :meth:`Engine.clock_info`): the
    wall clock, or the in-process engine's virtual clock with its declared, calibrated (how:
    :class:`Calibration`) or measured compute. For printing beside a run's result, since its
    times mean little without it."""
    if not clock:
        return "clock: not recorded"
    if clock.get("clock") != "virtual":
        return f"{clock.get('clock', '?')} clock, compute {clock.get('compute', '?')}"
    if clock.get("compute") == "measured":
        return "virtual clock: each gradient's measured wall time (the host's load included)"
    line = f"virtual clock: {clock.get('per_sample', 0.0) * 1e6:.3g} us/sample"
    if clock.get("per_message"):
        line += f" + {clock['per_message']:.3g} s/message"
    cal = clock.get("calibration")
    if cal is None:
        return line + " (declared)"
    threads = f"{cal['threads']} thread{'s' if cal['threads'] != 1 else ''}"
    return (line + f", calibrated on {cal['repeats']} gradients of {cal['samples']} samples ({cal['statistic']}"
            f" {cal['timer']}, {threads}; median {cal['median_per_sample'] * 1e6:.3g})")


@dataclass(frozen=True)
class CollectiveCost:
    """A declared cost of the collective path's all-reduce: a ring over ``k`` members moves
    ``2 (k - 1) / k`` of the vector's bytes through each link in ``2 (k - 1)`` steps, so it takes
    ``2 (k - 1) latency + 2 (k - 1) / k * bytes / bandwidth`` seconds (the bandwidth-optimal
    all-reduce of Patarasuk and Yuan, 2009; what gloo's and NCCL's rings cost). Defaults: 50 us a
    step and 1.25e9 bytes a second (10 Gbit/s Ethernet)."""

    latency: float = 50e-6
    bandwidth: float = 1.25e9

    def __post_init__(self):
        object.__setattr__(self, "latency", check_real("CollectiveCost.latency", self.latency, minimum=0.0))
        object.__setattr__(self, "bandwidth", check_real("CollectiveCost.bandwidth", self.bandwidth, minimum=0.0,
                                                         strict_min=True))

    def seconds(self, members: int, nbytes: int) -> float:
        return float(ring_allreduce_time(int(members), lambda f: self.latency + f * nbytes / self.bandwidth))


@dataclass
class _Task:
    round: int
    steps: Any = None  # the WorkerCore.steps iterator; None: the task fails (lost) when due
    error: Exception | None = None
    epoch: int = 0
    computing: Any = None  # a message being computed, delivered when its compute_time is up


@dataclass
class _Slot:
    spec: Any
    partitions: dict
    chunks: int
    core: Any = None
    restarts_left: float = math.inf
    up_at: float = 0.0  # virtual time from which a dead worker is back (inf: never)
    task: _Task | None = None
    sleeping: bool = False
    builds: int = field(default=0)


class InProcessEngine(Engine):
    """Workers as plain objects in this process, on a virtual clock (see the module docstring).

    ``compute_time``: how long a message takes to compute, after its injected pause: a
    :class:`ComputeCost` (declared), a number (seconds per message; 0: messages of a round arrive
    at their injected times exactly), ``"calibrated"`` (a :class:`ComputeCost` whose ``per_sample``
    is timed once when the workers start: the minimum of repeated gradients in this thread's CPU
    time, on one thread; :attr:`calibration` says how) or ``"measured"`` (the wall time each
    computation took in this process: the host's load included). ``death_report``: seconds
    between a worker's death and the failed event that reports it. ``restart_time``: seconds a
    restart takes.
    """

    in_master_process = True
    collective = True

    def __init__(self, *, compute_time: ComputeCost | float | str = 0.0, death_report: float = 0.0,
                 restart_time: float = 1.0, collective_cost: CollectiveCost | None = None):
        if isinstance(compute_time, str) and compute_time not in ("measured", "calibrated"):
            raise ValueError(f"compute_time must be a ComputeCost, seconds per message, 'calibrated' or 'measured',"
                             f" got {compute_time!r}")
        #: "measured": each message takes the wall time its computation really took here
        self.measured = compute_time == "measured"
        self._calibrate = compute_time == "calibrated"
        #: how ``cost.per_sample`` was measured (a :class:`Calibration`), once a calibrated engine's workers start
        self.calibration: Calibration | None = None
        if isinstance(compute_time, ComputeCost):
            self.cost = compute_time
        else:
            self.cost = ComputeCost(per_message=0.0 if isinstance(compute_time, str) else compute_time)
        self.death_report = float(death_report)
        self.restart_time = float(restart_time)
        self.collective_cost = collective_cost if collective_cost is not None else CollectiveCost()
        self._reductions: dict[int, list[Event]] = {}  # heap id -> the replies of one reduction
        self._joined = False  # the workers hold replicas (the collective path): its cost is recorded
        self._now = 0.0
        self._slots: list[_Slot] = []
        self._heap: list[tuple[float, int, int, int]] = []  # (due, order, worker, epoch)
        self._order = itertools.count()
        self._epochs = itertools.count(1)

    # ----------------------------------------------------------------- workers
    def spawn(self, specs: list, *, max_restarts: int = -1, start_timeout: float = 120.0,
              interruptible: bool = True) -> None:
        restarts = math.inf if max_restarts < 0 else int(max_restarts)
        self._slots = []
        for w, (spec, parts, chunks) in enumerate(specs):
            slot = _Slot(spec, dict(parts), int(chunks), restarts_left=restarts)
            try:
                self._build(w, slot)
            except Exception as exc:
                self._slots = []
                raise GradcodeError(f"the workers could not start (each rebuilds its problem from the data"
                                    f" spec): worker {w}: {type(exc).__name__}: {exc}") from None
            self._slots.append(slot)
        if self._calibrate and self._slots:
            self._calibrate_cost(self._slots[0].core)

    def _calibrate_cost(self, core) -> None:
        """Fix ``cost.per_sample`` from ``core``'s timed gradients (:meth:`WorkerCore.time_gradients`)
        on one intra-op thread, as every worker computes during the run (the session limits the
        threads only after the workers start), and keep how in :attr:`calibration`."""
        restore = limit_threads(1)
        try:
            samples, times = core.time_gradients()
        finally:
            restore()
        self.calibration = Calibration.of(samples, times, threads=1)
        self.cost = ComputeCost(per_sample=self.calibration.per_sample)
        self._calibrate = False

    def clock_info(self) -> dict:
        reduce = {"allreduce_latency": self.collective_cost.latency,
                  "allreduce_bandwidth": self.collective_cost.bandwidth} if self._joined else {}
        if self.measured:
            return {"clock": "virtual", "compute": "measured", **reduce}
        calibration = {"calibration": self.calibration.to_dict()} if self.calibration is not None else {}
        return {"clock": "virtual", "compute": "declared", "per_sample": self.cost.per_sample,
                "per_message": self.cost.per_message, **calibration, **reduce}

    def _build(self, w: int, slot: _Slot) -> None:
        slot.core = build_core(w, slot.spec, slot.partitions, slot.chunks)
        slot.builds += 1

    @property
    def n(self) -> int:
        return len(self._slots)

    def builds(self, w: int) -> int:
        """How often worker ``w``'s data was built (1 + its restarts)."""
        return self._slots[w].builds

    def clock(self) -> float:
        return self._now

    def put(self, array: np.ndarray):
        """The array itself (read-only: workers share it as they share an object-store copy)."""
        array = np.asarray(array)
        if array.flags.writeable:
            array = array.copy()
            array.flags.writeable = False
        return array

    def busy(self, w: int) -> bool:
        return self._slots[w].task is not None

    def running_round(self, w: int) -> int | None:
        task = self._slots[w].task
        return None if task is None else task.round

    # ----------------------------------------------------------------- tasks
    def submit(self, w: int, t: int, tasks: list, params: list, sleeps=(), fail: bool = False) -> None:
        slot = self._slots[w]
        if slot.task is not None:
            raise RuntimeError(f"worker {w} is still busy with round {slot.task.round}")
        self._revive(w, slot)
        task = _Task(int(t))
        if slot.core is None:  # down: Ray fails a task sent to a dead or restarting actor
            task.error = WorkerDied(f"worker {w} is dead or restarting")
            self._schedule(w, slot, task, self._now)
        elif fail:  # the process exits before sending anything, as os._exit in WorkerCore.steps
            self._die(w, slot)
            task.error = WorkerDied(f"worker {w}'s process exited (injected failure)")
            self._schedule(w, slot, task, self._now + self.death_report)
        else:
            task.steps = slot.core.steps(int(t), tasks, list(params), [float(s) for s in sleeps], False)
            self._schedule(w, slot, task, self._now)

    def _schedule(self, w: int, slot: _Slot, task: _Task, due: float) -> None:
        task.epoch = next(self._epochs)
        slot.task = task
        heapq.heappush(self._heap, (due, next(self._order), w, task.epoch))

    def _die(self, w: int, slot: _Slot) -> None:
        slot.core = None
        slot.sleeping = False
        if slot.restarts_left > 0:
            slot.restarts_left -= 1
            slot.up_at = self._now + self.restart_time
        else:
            slot.up_at = math.inf

    def _revive(self, w: int, slot: _Slot) -> None:
        if slot.core is None and slot.up_at <= self._now:
            self._build(w, slot)

    def poll(self, timeout: float | None) -> list[Event]:
        """The events due next on the virtual clock (all those of the same instant), moving the
        clock to them; ``[]`` after ``timeout`` virtual seconds (at once when nothing runs and
        ``timeout`` is None)."""
        deadline = math.inf if timeout is None else self._now + max(float(timeout), 0.0)
        events: list[Event] = []
        while self._heap:
            due, _, w, epoch = self._heap[0]
            if w < 0:  # a reduction's replies
                if due > deadline or (events and due > self._now):
                    break
                heapq.heappop(self._heap)
                self._now = max(self._now, due)
                events.extend(self._reductions.pop(epoch))
                continue
            slot = self._slots[w]
            if slot.task is None or slot.task.epoch != epoch:  # released, aborted or replaced
                heapq.heappop(self._heap)
                continue
            if due > deadline or (events and due > self._now):
                break
            heapq.heappop(self._heap)
            self._now = max(self._now, due)
            events.extend(self._step(w, slot))
        if not events and math.isfinite(deadline):
            self._now = max(self._now, deadline)
        return events

    def _step(self, w: int, slot: _Slot) -> list[Event]:
        task = slot.task
        t = task.round
        if task.steps is None:
            slot.task = None
            return [Event(w, t, "failed", task.error, lost=True)]
        if task.computing is not None:  # its compute_time is up: deliver it, go on at once
            message, task.computing = task.computing, None
            heapq.heappush(self._heap, (self._now, next(self._order), w, task.epoch))
            return [Event(w, t, "message", message)]
        slot.sleeping = False
        began, samples = time.perf_counter(), slot.core.samples
        try:
            item = next(task.steps)
        except StopIteration:
            slot.task = None
            return [Event(w, t, "done")]
        except Exception as exc:  # the task raised: a bug, not a straggler (unless its replica lagged)
            slot.task = None
            return [Event(w, t, "failed", exc, lost=isinstance(exc, StaleReplicaError))]
        if isinstance(item, Message):  # sent: a read-only copy, as Ray's object store gives the driver
            values = np.array(item.values)  # in the dtype it was sent in (float32, float16: the wire type)
            values.flags.writeable = False
            item = replace(item, values=values)
        if isinstance(item, float):
            # a sleep of an aborted round ends at once (as the actor's interruptible sleep does)
            aborted = slot.core._aborted >= t
            slot.sleeping = not aborted
            heapq.heappush(self._heap, (self._now + (0.0 if aborted else item), next(self._order), w, task.epoch))
            return []
        took = time.perf_counter() - began if self.measured else self.cost.seconds(slot.core.samples - samples)
        if took > 0:  # the message arrives its compute time after its pause
            task.computing = item
            heapq.heappush(self._heap, (self._now + took, next(self._order), w, task.epoch))
            return []
        heapq.heappush(self._heap, (self._now, next(self._order), w, task.epoch))
        return [Event(w, t, "message", item)]

    def release(self, w: int) -> None:
        self._slots[w].task = None

    def abort(self, w: int, t: int) -> None:
        slot = self._slots[w]
        if slot.core is None:
            return
        slot.core.abort(t)
        task = slot.task
        if task is not None and task.steps is not None and task.round <= t and slot.sleeping:
            # the interrupted sleep ends now: the next step sees the abort and ends the stream
            slot.sleeping = False
            self._schedule(w, slot, task, self._now)

    def kill(self, w: int) -> None:
        slot = self._slots[w]
        slot.restarts_left = 0
        running = slot.task is not None and slot.task.steps is not None and slot.core is not None
        self._die(w, slot)
        if running:
            task = _Task(slot.task.round, error=WorkerDied(f"worker {w} was killed"))
            self._schedule(w, slot, task, self._now + self.death_report)

    def crash(self, w: int) -> None:
        """Worker ``w``'s process dies now, as a machine failure would: its running task fails
        (lost, after ``death_report`` seconds) and it is restarted like any dead worker. For tests
        of deaths in the middle of a stream."""
        slot = self._slots[w]
        if slot.core is None:
            return
        running = slot.task
        self._die(w, slot)
        if running is not None:
            self._schedule(w, slot, _Task(running.round, error=WorkerDied(f"worker {w} crashed")),
                           self._now + self.death_report)

    # ----------------------------------------------------------------- the collective path
    def join(self, replica) -> None:
        self._joined = True
        for slot in self._slots:
            if slot.core is not None:
                slot.core.replica = replica.copy()

    def reduce(self, t: int, orders: dict) -> None:
        """Round ``t``'s reduction, done now; its replies are due after the declared
        :class:`CollectiveCost` (module docstring)."""
        ranked = sorted(orders.items(), key=lambda item: item[1].rank)
        dead = tuple(w for w, _ in ranked if self._slots[w].core is None)
        events: list[Event] = []
        nbytes = 0
        if dead:
            for w, order in ranked:
                if w not in dead:
                    events.append(Event(w, t, "reduced", ReduceReply(
                        w, t, error="failed", lost=dead,
                        message=f"the reduction failed: members {list(dead)} are dead")))
        else:
            # what gloo's all-reduce moves: the part and the members' flags (gloo.Groups.allreduce),
            # also when a member cannot contribute (the members learn it from the sum's flags)
            first = ranked[0][1]
            nbytes = first.dtype.itemsize * (first.length + len(ranked))
            parts, stale = [], []
            for w, order in ranked:  # a fixed order: every member gets the same bits
                try:
                    parts.append(self._slots[w].core.reduce_part(order))
                except StaleReplicaError:  # it cannot contribute: the sum is discarded
                    stale.append(w)
            if stale:
                events = [Event(w, t, "reduced", ReduceReply(
                    w, t, error="failed", stale=tuple(stale), message=f"members {stale} cannot contribute"))
                          for w, order in ranked]
            else:
                total = np.array(parts[0])
                for part in parts[1:]:
                    np.add(total, part, out=total)
                for w, order in ranked:
                    events.append(Event(w, t, "reduced", self._slots[w].core.reduce_apply(order, total.copy())))
        key = next(self._epochs)
        self._reductions[key] = events
        due = self._now + self.collective_cost.seconds(len(ranked), nbytes)
        heapq.heappush(self._heap, (due, next(self._order), -1, key))

    def sync(self, w: int, source: int) -> None:
        """``w``'s replica becomes a copy of ``source``'s now (left as it was when either is down:
        its next task then finds it stale)."""
        self._revive(w, self._slots[w])  # a restarted worker is synced before its first task
        src, dst = self._slots[source].core, self._slots[w].core
        if src is not None and dst is not None and src.replica is not None:
            replica = src.replica.copy()
            if dst.replica is not None:  # the messages it kept stay (a sequential scheme's open jobs)
                replica.take_messages(dst.replica)
            dst.replica = replica

    def catch_up(self, w: int, updates: list) -> None:
        """``w`` applies ``updates`` now (a worker that is down keeps its lag: its next task finds it)."""
        self._revive(w, self._slots[w])
        core = self._slots[w].core
        if core is not None and core.replica is not None:
            try:
                core.replay([(m, k, self._kept(kept)) for m, k, kept in updates])
            except (StaleReplicaError, WorkerDied):  # left behind: its next task finds it stale, and says so
                pass

    def _kept(self, kept):
        keeper = self._slots[kept.worker].core
        if keeper is None:
            raise WorkerDied(f"worker {kept.worker}, which kept the update, is down")
        return keeper.kept(kept.model, kept.step)

    def fetch(self, w: int) -> list:
        core = self._slots[w].core
        if core is None or core.replica is None:
            raise WorkerDied(f"worker {w} is down or holds no replica")
        return core.replica.export()

    def shutdown(self) -> None:
        self._slots = []
        self._heap = []
        self._reductions = {}
