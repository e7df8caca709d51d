"""The round protocol: the master's side of a gradient-coding scheme, round by round.

A *job* is one gradient at one model state; a *round* is one request to the workers. Both drivers
(the virtual-clock simulator and the Ray runtime) run a scheme the same way::

    tasks = scheme.plan(t)                       # {worker: (Task, ...)} for round t
    ... each worker computes its tasks in order and streams its messages ...
    scheme.on_result(t, worker, index, payload, time)   # message `index` of the worker's round
    scheme.ready(t)                              # can round t end? (its due jobs decode)
    finished = scheme.close(t, arrived)          # [(job, gradient)], straggler history updated

``index`` counts the worker's messages in round ``t`` across its tasks in plan order (task 0's
messages first). ``payload`` is the message (an ``(m,)`` array, ``m = ceil(d / chunks)``) in the
runtime and ``None`` in the simulator, where only timing matters; ``close`` then returns ``None``
for gradients. The driver, not the scheme, owns time and the closing rule (wait until ready, or the
mu-tolerance deadline of the SGC paper followed by a wait-out when not ready): the scheme only says
whether what it holds suffices. ``arrived`` passed to ``close`` is the set of workers the driver
counted as non-stragglers in the round (their results arrived before the round closed).

Workers are generic: a :class:`Task` names partitions and an encoding tensor, and the worker sends
``sum_j sum_c coefficients[r, j, c] * g_j[c]`` for each message ``r``. All intelligence is here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class Task:
    """Work for one worker in one round, for one job.

    ``coefficients`` has shape ``(R, len(partitions), L)``: message ``r`` of this task is
    ``sum_j sum_c coefficients[r, j, c] * g_{partitions[j]}[c]`` (each partial gradient cut into
    ``L`` chunks of length ``m``).
    """

    job: int
    partitions: tuple[int, ...]
    coefficients: np.ndarray

    @property
    def messages(self) -> int:
        return int(self.coefficients.shape[0])


class Scheme(ABC):
    """Base class of round-by-round schemes. See the module docstring for the protocol."""

    #: number of workers
    n: int
    #: L: each partial gradient is cut into this many chunks; messages have length ceil(d / L)
    chunks: int = 1
    #: jobs finish at most ``delay`` rounds after they start (0 for static codes)
    delay: int = 0
    #: data fraction of each partition index that Tasks name (drivers time a task by its sizes)
    partition_sizes: np.ndarray

    @abstractmethod
    def plan(self, t: int) -> dict[int, tuple[Task, ...]]:
        """Tasks of round ``t`` per worker (a worker absent from the dict idles this round)."""

    @abstractmethod
    def on_result(self, t: int, worker: int, index: int, payload: Any, time: float) -> None:
        """Message ``index`` of ``worker`` in round ``t`` arrived at ``time`` (seconds since the
        round started)."""

    @abstractmethod
    def ready(self, t: int) -> bool:
        """Whether every job due by round ``t`` can be decoded from what round ``t`` (and earlier
        rounds) delivered."""

    def should_close(self, t: int, now: float) -> bool:
        """Default closing rule: as soon as ready. Drivers apply the mu-rule themselves."""
        return self.ready(t)

    @abstractmethod
    def close(self, t: int, arrived: frozenset[int]) -> list[tuple[int, np.ndarray | None]]:
        """End round ``t``: return the jobs finished in it with their decoded gradients (``None``
        in simulation) and record the stragglers (workers not in ``arrived``)."""
