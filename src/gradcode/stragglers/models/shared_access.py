"""``shared-access`` (GC-DC Sec. VI-C): other users' tasks share each worker. Load conventions:
:mod:`gradcode.stragglers.models`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradcode._validation import as_generator, check_int, check_real
from gradcode.stragglers.models.base import (
    _MODEL,
    _PARTITIONS_HELP,
    DelayModel,
    Draw,
    _opt_int,
    _partitions,
    register_delay_model,
)


@register_delay_model("shared-access")
@dataclass(**_MODEL)
class SharedAccess(DelayModel):
    """Shared-access workers, GC-DC Sec. VI-C.

    Reading of the paper (its text gives the ingredients, not the exact process): at each worker,
    other users' tasks arrive as a Poisson process, ``Poisson(arrival_rate)`` new tasks per round;
    a task arriving in round t stays for rounds ``t .. t + D - 1`` with ``D ~ U{stay_min..stay_max}``
    (integers, the paper's "uniformly at random from [2, 5]" iterations); a worker serves at most
    ``capacity`` tasks at once, ours included, and turns away arrivals beyond that. With ``m``
    tasks on it (ours included, ``1 <= m <= capacity``) one partition's computation takes

        latency(m) = latency_min + (latency_max - latency_min) (m - 1) / (capacity - 1)

    seconds: 20 ms alone and 200 ms at capacity 10, linear in the number of tasks as measured on
    RTX 2080 Ti workers; ``r = load * partitions`` partitions take ``r * latency(m)``. A worker is a
    straggler when ``m >= gamma``. The system starts empty ``warmup`` rounds before round 0.

    Note: with the paper's ``arrival_rate = 0.1`` tasks per round the number of other tasks is
    about Poisson(0.35) and ``m >= 7`` has probability ~2e-6 per worker and round, so GC-DC's
    Fig. 12 regime (stragglers present) needs a larger arrival rate under this reading; the text
    does not say in which time unit lambda is expressed.
    """

    examples = (dict(arrival_rate=1.0),)

    summary = "Poisson task arrivals share each worker; latency linear in its load, 20-200 ms (GC-DC VI-C)"
    param_help = {
        "arrival_rate": "mean number of other users' tasks arriving at a worker per round (Poisson)",
        "stay_min": "fewest rounds an arriving task stays",
        "stay_max": "most rounds an arriving task stays (uniform integer in [stay_min, stay_max])",
        "capacity": "most tasks a worker serves at once, ours included (arrivals beyond are turned away)",
        "latency_min": "seconds per partition with our task alone on the worker",
        "latency_max": "seconds per partition with capacity tasks on the worker",
        "gamma": "a worker with gamma or more tasks (ours included) is a straggler",
        "warmup": "rounds simulated (from an empty system) before round 0",
        "partitions": _PARTITIONS_HELP,
    }

    arrival_rate: float = 0.1
    stay_min: int = 2
    stay_max: int = 5
    capacity: int = 10
    latency_min: float = 0.02
    latency_max: float = 0.2
    gamma: int = 7
    warmup: int = 20
    partitions: int | None = None

    def __post_init__(self):
        stay_min = check_int("stay_min", self.stay_min, minimum=1)
        latency_min = check_real("latency_min", self.latency_min, minimum=0.0)
        self._set(arrival_rate=check_real("arrival_rate", self.arrival_rate, minimum=0.0),
                  stay_min=stay_min,
                  stay_max=check_int("stay_max", self.stay_max, minimum=stay_min),
                  capacity=check_int("capacity", self.capacity, minimum=1),
                  latency_min=latency_min,
                  latency_max=check_real("latency_max", self.latency_max, minimum=latency_min),
                  gamma=check_int("gamma", self.gamma, minimum=1),
                  warmup=check_int("warmup", self.warmup, minimum=0),
                  partitions=_opt_int("partitions", self.partitions, 1))

    def latency(self, m):
        """Seconds per partition with ``m`` tasks (ours included) on the worker."""
        m = np.asarray(m, dtype=np.float64)
        if self.capacity == 1:
            return np.full(m.shape, self.latency_min) if m.ndim else self.latency_min
        return self.latency_min + (self.latency_max - self.latency_min) * (m - 1) / (self.capacity - 1)

    def occupancy(self, rounds: int, n: int, rng=None) -> np.ndarray:
        """``(rounds, n)`` number of tasks on each worker, ours included (what :meth:`draw` uses)."""
        rng = as_generator(rng)
        out = np.empty((rounds, n), dtype=np.int64)
        for a, b, m in self._occupancy_blocks(rounds, n, rng, max(rounds, 1)):
            out[a:b] = m
        return out

    def _occupancy_blocks(self, rounds, n, rng, block):
        """The occupancy round by round (the process is sequential), handed out in blocks."""
        slots = self.capacity - 1  # room for other users' tasks
        remaining = np.zeros((n, slots), dtype=np.int64)  # rounds left for each occupied slot (0 = free)
        out = np.empty((min(block, max(rounds, 1)), n), dtype=np.int64)
        start = 0
        for t in range(-self.warmup, rounds):
            arrivals = rng.poisson(self.arrival_rate, n)
            stays = rng.integers(self.stay_min, self.stay_max + 1, size=(n, slots))
            free = remaining == 0
            # admit min(arrivals, free slots) tasks into the first free slots of each worker
            rank = np.cumsum(free, axis=1)
            admit = free & (rank <= arrivals[:, None])
            remaining = np.where(admit, stays, remaining)
            if t >= 0:
                out[t - start] = 1 + (remaining > 0).sum(axis=1)
                if t + 1 - start == out.shape[0] or t == rounds - 1:
                    yield start, t + 1, out[: t + 1 - start].copy()
                    start = t + 1
            np.subtract(remaining, 1, out=remaining, where=remaining > 0)

    def _draw(self, rounds, n, rng):
        P = _partitions(self.partitions, n)
        m = self.occupancy(rounds, n, rng)
        slope = P * self.latency(m)
        return Draw(np.zeros((rounds, n)), slope, m >= self.gamma)

    def _blocks(self, rounds, n, rng, block):
        """Blocks bit for bit as the whole draw: the occupancy process is simulated round by round
        anyway, so each block is handed out as it is done."""
        P = _partitions(self.partitions, n)
        return (
            (a, b, Draw(np.zeros((b - a, n)), P * self.latency(m), m >= self.gamma))
            for a, b, m in self._occupancy_blocks(rounds, n, rng, block)
        )


# --------------------------------------------------------------------------- trace replay
