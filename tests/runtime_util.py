"""What the runtime tests share (the Ray tests of test_runtime*.py and the Ray-free driver tests of
test_driver.py): the single-process reference every exact code must reach, the relative distance
they compare with, runtime parameters for every registered code, and small schemes that exercise
the driver's rules (plans that leave workers out, jobs spanning two rounds, several messages per
worker). The schemes live in the master only (never shipped to workers)."""

from __future__ import annotations

import numpy as np
from codes_util import SMALL_INSTANCES

from gradcode.problems import DataSpec, make_dataset, make_optimizer, make_problem
from gradcode.schemes import Scheme

#: the small logistic problem the runtime tests train (tandon-synthetic, 400 x 6) and its seed
DATA = {"n_samples": 400, "n_features": 6}
SEED = 3


def gd_reference(data: dict, seed: int, steps: int, *, lr: float = 0.5, optimizer: str = "gd") -> np.ndarray:
    """``steps`` of full-gradient descent on ``tandon-synthetic`` with ``data`` and ``seed``, in one
    process: the iterates an exact gradient code reproduces whatever its stragglers."""
    problem = make_problem("logistic", make_dataset(DataSpec("tandon-synthetic", data, seed=seed)))
    opt = make_optimizer(optimizer, lr=lr)
    x = problem.init_params()
    state = opt.init(x)
    for k in range(steps):
        x, state = opt.step(x, problem.full_gradient(x), state, k)
    return x


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


#: runtime parameters (n = 4 workers) for each registered code; multi-chunk and multi-message codes
#: included. A code missing here is skipped with a reason, so adding a family shows up in the run.
#: one instance of every registered code, its first ``examples`` entry (n = 4 where the family allows)
REGISTRY_PARAMS = {name: examples[0] for name, examples in SMALL_INSTANCES.items() if examples}


class SkipsWorkers(Scheme):
    """Uncoded scheme whose round ``t`` plan leaves out the workers ``skip[t]``
    (worker ``w`` holds partition ``w``; a round needs every planned worker)."""

    chunks = 1
    delay = 0

    def __init__(self, n, skip):
        from gradcode.schemes import Task

        self.Task, self.n, self.skip = Task, n, skip
        self.partition_sizes = np.full(n, 1 / n)
        self.placement = [(w,) for w in range(n)]
        self.got = {}

    def _plan(self, t):
        self.got[t] = {}
        return {w: (self.Task(t, (w,), np.ones((1, 1, 1))),) for w in range(self.n) if w not in self.skip.get(t, ())}

    def _on_result(self, t, worker, index, payload, time):
        self.got[t][worker] = payload

    def _ready(self, t):
        return len(self.got[t]) == self.n - len(self.skip.get(t, ()))

    def _close(self, t, arrived):
        return [(t, sum(self.got.pop(t).values()))]

    def stored_partitions(self, w):
        return self.placement[w]


class SplitJobs(Scheme):
    """A scheme with tasks of two jobs per round (delay 1): worker ``w`` holds partitions
    ``2w, 2w+1``; job ``t`` computes partition ``2w`` in round ``t`` and ``2w+1`` in round ``t+1``,
    so every round from 1 on carries the second half of job ``t-1`` and the first half of job
    ``t``. Uncoded (every worker needed). Exercises multi-job rounds as SR-SGC/M-SGC use them."""

    chunks = 1
    delay = 1

    def __init__(self, n):
        from gradcode.schemes import Task

        self.Task = Task
        self.n = n
        self.partition_sizes = np.full(2 * n, 1 / (2 * n))
        self.placement = [(2 * w, 2 * w + 1) for w in range(n)]
        self.got = {}  # round -> {worker: [payloads]}

    def _plan(self, t):
        one = np.ones((1, 1, 1))
        tasks = {}
        for w in range(self.n):
            tasks[w] = ((self.Task(t - 1, (2 * w + 1,), one),) if t else ()) + (self.Task(t, (2 * w,), one),)
        self.got[t] = {}
        return tasks

    def _on_result(self, t, worker, index, payload, time):
        if t in self.got:
            self.got[t].setdefault(worker, []).append(payload)

    def _ready(self, t):
        need = 2 if t else 1
        return all(len(self.got[t].get(w, ())) == need for w in range(self.n))

    def _close(self, t, arrived):
        done = []
        if t:
            first = sum(p[-1] for p in self.got.pop(t - 1).values())
            second = sum(p[0] for p in self.got[t].values())
            done.append((t - 1, first + second))
        self.got[t] = {w: [p[-1]] for w, p in self.got[t].items()}  # keep job t's first half
        return done

    def stored_partitions(self, w):
        return self.placement[w]


class TwoMessages(Scheme):
    """Uncoded, two messages per worker: worker ``w`` holds partitions ``2w, 2w+1`` and sends
    ``g_{2w}`` then ``g_{2w+1}``. Records every ``on_result`` call."""

    chunks = 1
    delay = 0

    def __init__(self, n):
        from gradcode.schemes import Task

        self.Task, self.n = Task, n
        self.partition_sizes = np.full(2 * n, 1 / (2 * n))
        self.placement = [(2 * w, 2 * w + 1) for w in range(n)]
        self.got, self.calls = {}, []

    def _plan(self, t):
        self.got[t] = {}
        E = np.array([[[1.0], [0.0]], [[0.0], [1.0]]])
        return {w: (self.Task(t, (2 * w, 2 * w + 1), E),) for w in range(self.n)}

    def _on_result(self, t, worker, index, payload, time):
        self.calls.append((t, worker, index))
        self.got[t].setdefault(worker, {})[index] = payload

    def _ready(self, t):
        return all(len(self.got[t].get(w, ())) == 2 for w in range(self.n))

    def _close(self, t, arrived):
        return [(t, sum(np.asarray(p) for msgs in self.got.pop(t).values() for p in msgs.values()))]

    def stored_partitions(self, w):
        return self.placement[w]


class _Poison:
    """Wraps a problem: the partial gradient of the rows ``bad`` is ``value`` everywhere."""

    def __init__(self, inner, bad, value):
        self.inner, self.bad, self.value = inner, {int(r) for r in bad}, value

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def gradient(self, x, rows):
        if len(rows) and int(rows[0]) in self.bad:
            return np.full(self.inner.dim, self.value)
        return self.inner.gradient(x, rows)


class PoisonedWorker:
    """Problem spec of :data:`DATA`: the worker that stores exactly the partitions ``parts``
    computes ``value`` for partition ``bad`` (for all of its partitions when ``bad`` is None);
    every other worker and the master compute the true gradients."""

    def __init__(self, parts, value, bad=None):
        self.parts, self.value, self.bad = tuple(parts), float(value), bad

    def build(self):
        ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
        return make_problem("logistic", ds), ds

    def build_partitions(self, partitions):
        problem, _ = self.build()
        local = {int(j): np.asarray(r) for j, r in partitions.items()}
        if set(local) == set(self.parts):
            bad = np.concatenate([local[j] for j in (self.parts if self.bad is None else (self.bad,))])
            problem = _Poison(problem, bad, self.value)
        return problem, local


def train_options(scheme=None, *, engine=None, callback=None, **options):
    """:func:`gradcode.runtime.train` with its options flat (``workers=4, rounds=6, fail=[...]``),
    split among the config objects (:func:`config_util.split_options`)."""
    from config_util import split_options

    from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig, TrainSpec, train

    if scheme is not None:
        options["scheme"] = scheme
    configs = split_options(options, {"spec": TrainSpec, "cluster": ClusterConfig, "faults": FaultConfig,
                                      "run": RunConfig})
    return train(**configs, engine=engine, callback=callback)
