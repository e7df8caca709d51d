"""The generic worker: partitions and a coefficient tensor in, messages out (engine-free).

A worker holds the data partitions of its placement and, for each task of a round, sends

    message r  =  sum_j sum_c  coefficients[r, j, c] * g_{partitions[j]}[c]          (length m)

where ``g_j`` is the partial gradient of partition ``j`` (the *sum* of per-sample gradients over its
rows, docs/architecture.md, "The linear code contract") at the parameters of the task's job, cut into ``L``
chunks of length ``m = ceil(d / L)`` (zero-padded). It knows nothing of codes or schemes: all
intelligence is in the master's scheme (schemes/base.py).

Partial gradients are computed lazily, message by message: message ``r`` computes only the
partitions it needs (non-zero coefficients) that earlier messages of the same job have not
computed. A message that needs nothing new costs only its weighted sum. This is what makes
multi-message codes stream naturally (the partial-straggler scheme of Tandon Section 4 sends its
naive part first).

Injected stragglers (docs/architecture.md): the master draws the worker's time
for the round from a delay model and sends it with the tasks, already cut into one sleep per message
by the simulator's own timing rule (:func:`gradcode.schemes.task_schedule`: message ``i`` is ready
at the share of the round's data its partitions reach), so the real run is slowed exactly as the
simulator assumes. The worker sleeps before each message, then computes. Sleeps are interruptible:
once the master closes the round it aborts the worker, which stops at once and sends nothing more.
Real computation is never interrupted mid-message.

Mini-batches and wire types: a problem with ``batch_rows(job, j, rows, sizes)`` computes partition
``j``'s partial gradient of a job on the rows that method picks (every worker holding ``j`` picks
the same ones: :mod:`gradcode.torch`), and one with ``wire_dtype`` has its messages cast to that
type before they are sent (float16, ``ml_dtypes.bfloat16``: scaled into the type's range first by a
power of two sent beside them, :func:`gradcode.codes.messages.to_wire`). Every message travels as a
:class:`~gradcode.codes.messages.Message` with the scale the master's error bound needs.

Failure injection: a task with ``fail=True`` makes the worker's process exit (``os._exit``) before
it sends anything, as a crashed machine would.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gradcode._validation import check_int
from gradcode.codes.messages import sum_squares, to_wire, warm_kernels, weighted_add
from gradcode.runtime.replica import ReplicaRef, StaleReplicaError


@dataclass(frozen=True)
class ProblemSpec:
    """How a worker (or the master) rebuilds its problem: the data spec and the problem's name and
    keyword parameters. Picklable and array-free, so a restarted actor rebuilds the same problem
    and gets its partitions back."""

    data: Any  # gradcode.problems.DataSpec
    problem: str
    params: dict = field(default_factory=dict)

    def build(self):
        """``(problem, dataset)`` for this spec."""
        from gradcode.problems import make_dataset, make_problem

        dataset = make_dataset(self.data)
        return make_problem(self.problem, dataset, **dict(self.params)), dataset

    def build_partitions(self, partitions: Mapping[int, np.ndarray]):
        """``(problem, local)``: the problem on only the training rows of ``partitions`` (no held-out
        split), and each partition's rows as indices into it. What a worker keeps (only its
        partitions): the full dataset is built (the data spec describes all of it) and
        dropped once ``__init__`` returns. Partial gradients are sums over rows, so they equal those
        of the full problem; the dataset's ``n_classes`` and ``image_shape`` are kept so the problem
        has the same shape (``dim``)."""
        from gradcode.problems import Dataset, make_dataset, make_problem

        ds = make_dataset(self.data)
        parts = {int(j): np.asarray(r, dtype=np.int64) for j, r in partitions.items()}
        keep = np.unique(np.concatenate(list(parts.values()))) if parts else np.zeros(0, dtype=np.int64)
        if keep.size == 0:  # a Dataset needs one training row; a worker with no partition never reads it
            keep = np.arange(1)
        sub = Dataset(
            name=ds.name, task=ds.task, X_train=ds.X_train[keep], y_train=ds.y_train[keep],
            X_test=ds.X_train[:0], y_test=ds.y_train[:0], n_classes=ds.n_classes,
            image_shape=ds.image_shape, spec=ds.spec, info=dict(ds.info),
        )
        problem = make_problem(self.problem, sub, **dict(self.params))
        return problem, {j: np.searchsorted(keep, r) for j, r in parts.items()}

    def to_dict(self) -> dict:
        return {"data": self.data.to_dict(), "problem": self.problem, "params": dict(self.params)}


@dataclass(frozen=True)
class WireTask:
    """A :class:`gradcode.schemes.base.Task` as sent to a worker: ``param_slot`` indexes the
    parameter arrays sent with the round (one per distinct job)."""

    job: int
    partitions: tuple[int, ...]
    coefficients: np.ndarray
    param_slot: int
    #: the partitions' data fractions, for a scheme whose partitions change during the run (the
    #: worker then holds the whole data set and its problem maps partitions to rows: ``rows_of``)
    sizes: tuple | None = None


class WorkerCore:
    """The computation of one worker, independent of any engine.

    ``problem`` has ``gradient(params, rows)`` (sum of per-sample gradients over ``rows``) and
    ``dim``; ``partitions`` maps each stored partition ``j`` to its row indices in the training set.
    """

    def __init__(self, worker: int, problem, partitions: Mapping[int, np.ndarray], chunks: int = 1):
        self.worker = check_int("worker", worker, minimum=0)
        self.problem = problem
        self.partitions = {int(j): np.asarray(r, dtype=np.int64) for j, r in partitions.items()}
        self.chunks = check_int("chunks", chunks, minimum=1)
        self._batch_rows = getattr(problem, "batch_rows", None)
        #: the type messages are sent in: the problem's ``wire_dtype``, a numpy dtype converted once
        #: where it is declared (:class:`~gradcode.torch.problem.TorchSpec`); None, as computed
        #: (:class:`~gradcode.problems.Problem` declares None)
        self.wire_dtype = getattr(problem, "wire_dtype", None)
        self._aborted = -1
        self._wake = threading.Event()
        #: samples whose gradient this worker has computed (the in-process engine's declared clock)
        self.samples = 0
        #: the models this worker steps itself on the collective path (None on the star path)
        self.replica = None

    # ----------------------------------------------------------------- control (any thread)
    def abort(self, round_: int) -> None:
        """Stop the work of every round ``<= round_`` at the next check (sleeps end at once)."""
        self._aborted = max(self._aborted, int(round_))
        self._wake.set()

    def _sleep(self, t: int, seconds: float) -> bool:
        """Sleep ``seconds`` unless round ``t`` is aborted; returns False when aborted."""
        if seconds <= 0:
            return self._aborted < t
        deadline = _now() + seconds
        while self._aborted < t:
            left = deadline - _now()
            if left <= 0:
                return True
            self._wake.wait(left)
            self._wake.clear()
        return False

    # ----------------------------------------------------------------- work
    def run(
        self,
        t: int,
        tasks: Sequence[WireTask],
        params: Sequence[np.ndarray],
        sleeps: Sequence[float] = (),
        fail: bool = False,
    ) -> Iterator[np.ndarray]:
        """The messages of round ``t``, in plan order (task 0's messages first); ``sleeps[i]``
        seconds of injected delay are slept before message ``i`` (missing entries: none). Stops
        early, sending nothing more, once the round is aborted. (Blocking sleeps: engines with an
        event loop drive :meth:`steps` themselves.)"""
        for item in self.steps(t, tasks, params, sleeps, fail):
            if isinstance(item, float):
                if not self._sleep(t, item):
                    return
            else:
                yield item

    def steps(self, t, tasks, params, sleeps=(), fail=False) -> Iterator[float | np.ndarray]:
        """The round as a sequence of instructions: a ``float`` asks the driver to sleep that many
        seconds (unless round ``t`` is aborted, in which case it stops iterating), a
        :class:`~gradcode.codes.messages.Message` is the next message: its values in the wire type
        (scaled into a 16-bit type's range), and what it summed, ``S = sum |E| ||g_j[c]||`` from
        the chunk norms of the partials computed here (one float64 pass over each, while it is in
        cache), for the master's error bound, and the problem's ``overflows`` (float16 loss
        scaling's re-run backward passes) while they were computed."""
        if fail:
            os._exit(17)  # chaos: the process dies as a crashed machine would
        plan = [self._message_plan(task) for task in tasks]
        keep = any(isinstance(x, ReplicaRef) for x in params)
        params = [self._resolve(x) for x in params]
        i = 0
        for task, per_task in zip(tasks, plan):
            x = params[task.param_slot]
            d = int(np.shape(x)[0])
            m = math.ceil(d / self.chunks)
            partials: dict[int, np.ndarray] = {}
            norms: dict[int, np.ndarray] = {}
            for r, needed in enumerate(per_task):
                pause = float(sleeps[i]) if i < len(sleeps) else 0.0
                if pause > 0:
                    yield pause
                if self._aborted >= t:
                    return
                overflows = getattr(self.problem, "overflows", 0)
                for pos in needed:
                    partials[pos] = g = self._partial(x, task, task.partitions[pos], m)
                    norms[pos] = np.sqrt([sum_squares(chunk) for chunk in g])
                overflows = getattr(self.problem, "overflows", 0) - overflows
                E = task.coefficients[r]
                msg = self._combine(E, partials, m)
                scale = sum(float(np.abs(E[pos]) @ v) for pos, v in norms.items())
                message = to_wire(msg, scale, self.wire_dtype)
                if overflows:
                    message = replace(message, overflows=overflows)
                # the collective path keeps the message and tells the driver its note
                yield self.replica.keep(t, i, message) if keep else message
                i += 1

    def _resolve(self, x):
        """A task's parameter array: itself, or the replica's parameters a
        :class:`~gradcode.runtime.replica.ReplicaRef` names (the collective path)."""
        if not isinstance(x, ReplicaRef):
            return x
        if self.replica is None:
            raise StaleReplicaError(f"worker {self.worker} holds no replica; the task needs model {x.model} at step"
                                    f" {x.version}")
        return self.replica.params(x, self.worker)

    # ----------------------------------------------------------------- the collective path
    def reduce_part(self, order, extra: int = 0) -> np.ndarray:
        """This worker's part of a reduction, ``extra`` zero slots after it (:meth:`Replica.part`)."""
        return self._replica().part(order, self.worker, extra)

    def reduce_apply(self, order, total: np.ndarray):
        """Step the replica with the reduced gradient (:meth:`Replica.apply`)."""
        return self._replica().apply(order, total, self.problem, self.worker)

    def replay(self, updates) -> None:
        """Apply the updates the replica missed (:meth:`Replica.replay`)."""
        self._replica().replay(updates, self.problem, self.worker)

    def replica_copy(self):
        """A copy of this worker's replica (:meth:`Replica.copy`), for a lagging worker."""
        return self._replica().copy()

    def kept(self, model: int, step: int) -> np.ndarray:
        """An update this worker kept for the lagging ones (:meth:`Replica.kept`)."""
        return self._replica().kept(model, step)

    def _replica(self):
        if self.replica is None:
            raise StaleReplicaError(f"worker {self.worker} holds no replica (restarted, not yet brought up to date)")
        return self.replica

    def _message_plan(self, task: WireTask) -> list[list[int]]:
        """For each message of ``task``: the positions of the partitions it computes first."""
        if task.sizes is not None and not hasattr(self.problem, "rows_of"):
            raise ValueError(f"worker {self.worker}: the scheme changes its partitions during the run, which this"
                             " problem cannot follow (it keeps only its partitions' rows); torch models can")
        for j in task.partitions:
            if task.sizes is None and j not in self.partitions:
                raise ValueError(
                    f"worker {self.worker} was asked for partition {j} but stores only "
                    f"{sorted(self.partitions)}"
                )
        coeffs = np.asarray(task.coefficients)
        if coeffs.ndim != 3 or coeffs.shape[1:] != (len(task.partitions), self.chunks):
            raise ValueError(
                f"task coefficients must have shape (R, {len(task.partitions)}, {self.chunks}),"
                f" got {coeffs.shape}"
            )
        done: set[int] = set()
        out = []
        for r in range(coeffs.shape[0]):
            needed = [p for p in np.flatnonzero(np.any(coeffs[r] != 0, axis=1)) if p not in done]
            done.update(needed)
            out.append([int(p) for p in needed])
        return out

    def _partial(self, x: np.ndarray, task: WireTask, j: int, m: int) -> np.ndarray:
        """Partial gradient of partition ``j`` for ``task``'s job, cut into chunks, in the
        problem's float dtype (float64 for the numpy problems, float32 for torch models). A problem
        with ``batch_rows(job, j, rows, sizes)`` (mini-batches) computes on the rows it picks for
        the job; a task that carries ``sizes`` names partitions of that layout (``rows_of``)."""
        rows = self.partitions[j] if task.sizes is None else self.problem.rows_of(task.sizes, j)
        if self._batch_rows is not None:
            rows = self._batch_rows(task.job, j, rows, task.sizes)
        self.samples += _samples(rows)
        g = np.asarray(self.problem.gradient(x, rows)).ravel()
        if g.dtype.kind != "f":
            g = g.astype(np.float64)
        if self.wire_dtype is not None and self.wire_dtype.kind == "f" and self.wire_dtype.itemsize > g.dtype.itemsize:
            g = g.astype(self.wire_dtype)  # a wider wire type: the coded sums are formed in it too
        if self.chunks > 1 and g.size != m * self.chunks:
            g = np.concatenate([g, np.zeros(m * self.chunks - g.size, dtype=g.dtype)])
        return g.reshape(self.chunks, m)

    def time_gradients(self, repeats: int = 20, budget: float = 1.0) -> tuple[int, list[float]]:
        """``(samples, seconds)``: the CPU time of ``repeats`` gradients of this worker's first
        partition's rows for job 0 (a mini-batch problem's batch; at most 256 rows of a full-batch
        one), at zero parameters, after one untimed gradient (the first call pays for allocations
        and lazy initialisation); fewer repeats, at least 3, once ``budget`` CPU seconds are spent
        (a large model). ``(0, [])`` without data.

        Timed in this thread's CPU time (``time.thread_time``), not wall time: time the thread
        waits for a core while other processes run is not counted. The caller runs it on one
        intra-op thread: with several, a thread that waits for the others at the end of a parallel
        region spins on its core, and under contention that spinning is CPU time of its own (beside
        two busy loops on 2 cores it made a gradient's timing two orders of magnitude too long:
        BENCHMARKS.md, "2026-11-28: the in-process clock beside two busy loops"). Even so a repeat can
        be lengthened (cache and branch state lost to the other processes): the minimum is the
        statistic that a busy host does not move."""
        if not self.partitions:
            return 0, []
        j, rows = next(iter(self.partitions.items()))
        rows = self._batch_rows(0, j, rows, None) if self._batch_rows is not None else rows[:256]
        samples = _samples(rows)
        if samples == 0:
            return 0, []
        x = np.zeros(int(self.problem.dim))
        scaling = getattr(self.problem, "loss_scaling", None)  # a loss scale the timing must not move
        times: list[float] = []
        try:
            self.problem.gradient(x, rows)  # warm-up, untimed
            while len(times) < repeats and (len(times) < 3 or sum(times) < budget):
                began = time.thread_time()
                self.problem.gradient(x, rows)
                times.append(time.thread_time() - began)
        finally:
            if scaling is not None:
                self.problem.loss_scaling = scaling
        return samples, times

    @staticmethod
    def _combine(E: np.ndarray, partials: Mapping[int, np.ndarray], m: int) -> np.ndarray:
        """``sum_j sum_c E[j, c] * partials[j][c]`` for the rows ``j`` with non-zero coefficients.

        Each term is one compiled pass (:func:`~gradcode.codes.messages.weighted_add`: the first
        written straight into the output, the others added without a product temporary), each
        product formed in float64 and rounded once into the partials' type: a single-partition
        message (uncoded, FRC) costs one pass over ``m`` numbers instead of three (zero fill,
        product temporary, add), which is most of a worker's time when the gradient itself is
        cheap. A message that is one partial chunk with coefficient 1
        (uncoded, FRC, group codes) is that chunk itself, not a copy: every engine copies a message
        when it is sent (Ray serializes it, the in-process engine copies it), and nothing here writes
        to a partial after computing it."""
        terms = [(pos, c) for pos in partials for c in np.flatnonzero(E[pos])]
        if len(terms) == 1 and E[terms[0]] == 1.0:
            pos, c = terms[0]
            return partials[pos][c]
        out = None
        for pos, G in partials.items():
            coeff = E[pos]
            for c in np.flatnonzero(coeff):
                a, first = float(coeff[c]), out is None
                if G[c].dtype in _COMPILED:  # out (=|+=) a * G[c] in one pass, the product in float64
                    if first:
                        out = np.empty_like(G[c])
                    weighted_add(out, G[c], a, first, squares=False)
                elif first:  # another type, in numpy
                    out = np.multiply(G[c], a)
                else:
                    out += a * G[c]
        return np.zeros(m, dtype=next(iter(partials.values())).dtype if partials else np.float64) if out is None else out


#: the partials' types the compiled sums write
_COMPILED = (np.dtype(np.float32), np.dtype(np.float64))


def _samples(rows) -> int:
    """How many samples ``rows`` names (an index array, or a mini-batch problem's batch of them)."""
    return len(getattr(rows, "rows", rows))


def build_core(worker: int, spec, partitions: Mapping[int, np.ndarray], chunks: int) -> WorkerCore:
    """The :class:`WorkerCore` of worker ``worker``, built from its problem spec as every engine
    builds it (and rebuilds it after a restart): only the partitions' rows are kept
    (:meth:`ProblemSpec.build_partitions`); a spec object that only has ``build()`` keeps what
    ``build()`` returns."""
    if hasattr(spec, "build_partitions"):
        problem, partitions = spec.build_partitions(partitions)
    else:
        problem, _ = spec.build()
    warm_kernels()  # numba's first call (a compile, or a load from its cache) belongs to start-up
    return WorkerCore(worker, problem, partitions, chunks)


def worker_threads(cpus: float) -> int:
    """Intra-op threads of a worker given ``cpus`` CPUs (``ClusterConfig.worker_cpus``; 0, no
    reservation, and fractions count as 1)."""
    return max(1, int(cpus))


def master_threads(cpus: int | None = None) -> int:
    """Threads of the master's own work during a Ray run (the decode's sums, the optimizer step):
    half this machine's cores, at most 8 (memory bandwidth stops growing there), 1 on a machine of
    2 or 3 cores, where the workers need the others. ``cpus``: the cores to count (default
    ``os.cpu_count()``)."""
    cpus = (os.cpu_count() or 1) if cpus is None else int(cpus)
    return max(1, min(8, cpus // 2)) if cpus >= 4 else 1


def limit_threads(threads: int) -> Callable[[], None]:
    """Set this process's intra-op threads to ``threads``: torch's (where torch is imported) and
    every BLAS and OpenMP pool's (threadpoolctl). Returns a function that restores what was set.

    A worker process computes one partial gradient at a time on the CPUs it was given, and the
    master's work per round (the decode, the optimizer's elementwise step) is memory-bound: more
    threads than CPUs only contend with the other processes (on 2 cores torch's default threads
    made the small CNN's steps many times slower than one thread: BENCHMARKS.md, "2026-11-26: the
    round after workers send their scales and the decode runs at memory speed")."""
    from threadpoolctl import threadpool_limits

    threads = check_int("threads", threads, minimum=1)
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    limits = threadpool_limits(limits=threads)
    if torch is not None:
        torch.set_num_threads(threads)

    def restore() -> None:
        limits.restore_original_limits()
        if before is not None:
            torch.set_num_threads(before)

    return restore


#: freed memory a worker process keeps at the top of its heap before returning any to the system
KEEP_FREED_BYTES = 1 << 30

#: the worker processes' environment: one malloc arena for all their threads (a Ray worker has
#: threads with arenas of their own before an actor's ``__init__`` runs, so only the environment
#: sets the limit in time; :func:`keep_freed_memory`)
WORKER_ENV = {"MALLOC_ARENA_MAX": "1"}


def keep_freed_memory() -> bool:
    """Make this process's allocator (glibc's malloc) serve large arrays from its heap and keep
    what is freed (``mallopt``: ``M_MMAP_MAX`` 0, ``M_TRIM_THRESHOLD`` :data:`KEEP_FREED_BYTES`),
    for every thread started after the call (``M_ARENA_MAX`` 1); True where it applied (Linux
    with glibc), False elsewhere (nothing changes).

    Why: by default an array above 32 MiB is a fresh ``mmap`` and is returned to the system when
    freed, so every round's gradient, message, reduced part and new parameters are page-faulted in
    anew, which doubles the cost of each pass over them. Keeping freed memory makes each copy and
    each round cheaper for a little more peak memory (freed arrays are reused, not returned:
    BENCHMARKS.md, "The collective path, continued: heap reuse, one all-reduce, the crossover
    (2026-11-27, later)", "Why the heap"). One arena: glibc gives a new thread an arena of its
    own, whose large blocks live in sub-heaps of at most 64 MiB that are given back to the system
    as soon as they are free, whatever the two settings above; the worker's computations and
    reductions run on threads of their own (:mod:`gradcode.runtime.channel`), so without it every
    gradient-sized array those threads allocate (the step's ``.grad``, the new parameters) is
    faulted in anew (BENCHMARKS.md, "2026-11-28: one malloc arena for the worker's threads").
    A limit set once a process has several arenas only makes new threads share those (not
    necessarily the main one): a Ray worker has threads before an actor starts, so the actors get
    the limit from their environment (:data:`WORKER_ENV`); the ``mallopt`` here covers a process
    whose threads come later.
    PyTorch's CPU guides reach the same with jemalloc or tcmalloc. Called by the Ray workers
    (processes gradcode owns) before they start those threads, never in the user's own process."""
    import ctypes
    import platform

    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8  # <malloc.h>
    return (bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES))
            and bool(libc.mallopt(M_ARENA_MAX, 1)))


def return_freed_memory() -> None:
    """Give the memory this process's heap holds free back to the system (glibc's
    ``malloc_trim``; nothing elsewhere): after a one-off peak, such as a reused worker building
    another run's data, which :func:`keep_freed_memory` would otherwise keep."""
    import ctypes
    import platform

    if sys.platform == "linux" and platform.libc_ver()[0] == "glibc":
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass


def task_messages(tasks: Sequence[WireTask]) -> int:
    """Messages a worker sends for ``tasks``: one per coefficient row of each task."""
    return sum(int(np.shape(task.coefficients)[0]) for task in tasks)


def _now() -> float:
    return time.monotonic()
