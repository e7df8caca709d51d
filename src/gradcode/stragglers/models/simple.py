"""The memoryless delay models: ``fixed`` and ``partial`` (Tandon et al., Secs. 4-5), ``bernoulli``
and ``shifted-exp`` (GC-DC eq. 20). Load conventions: :mod:`gradcode.stragglers.models`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradcode._validation import check_int, check_real
from gradcode.stragglers.models.base import (
    _MODEL,
    _PARTITIONS_HELP,
    DelayModel,
    Draw,
    _check_count,
    _opt_int,
    _partitions,
    _pick_per_round,
    register_delay_model,
)


@register_delay_model("fixed")
@dataclass(**_MODEL)
class FixedDelay(DelayModel):
    """s random workers per round are delayed by a constant (Tandon et al., Sec. 5)."""

    examples = (dict(stragglers=2, delay=0.5),)

    _rows_independent = True

    summary = "s random workers per round are delayed by a constant additive delay (Tandon Sec. 5)"
    param_help = {
        "stragglers": "number of workers delayed in every round, picked uniformly at random",
        "delay": "seconds added to a straggler's compute time",
        "base": "seconds to compute the whole data set (load 1) without delay",
    }

    stragglers: int = 1
    delay: float = 1.0
    base: float = 1.0

    def __post_init__(self):
        self._set(stragglers=check_int("stragglers", self.stragglers, minimum=0),
                  delay=check_real("delay", self.delay, minimum=0.0),
                  base=check_real("base", self.base, minimum=0.0))

    def _draw(self, rounds, n, rng):
        _check_count("stragglers", self.stragglers, n)
        mask = _pick_per_round(rng, rounds, n, self.stragglers)
        return Draw(mask * self.delay, np.full((rounds, n), self.base), mask)


@register_delay_model("bernoulli")
@dataclass(**_MODEL)
class BernoulliDelay(DelayModel):
    """Each worker straggles independently with probability p, slowed by a factor."""

    examples = (dict(p=0.1, slowdown=10),)

    _rows_independent = True

    summary = "each worker straggles independently with probability p and runs slowdown times slower"
    param_help = {
        "p": "probability that a worker straggles in a round (independent over workers and rounds)",
        "slowdown": "factor by which a straggler's compute time is multiplied (>= 1)",
        "base": "seconds to compute the whole data set (load 1) at normal speed",
    }

    p: float = 0.1
    slowdown: float = 10.0
    base: float = 1.0

    def __post_init__(self):
        self._set(p=check_real("p", self.p, minimum=0.0, maximum=1.0),
                  slowdown=check_real("slowdown", self.slowdown, minimum=1.0),
                  base=check_real("base", self.base, minimum=0.0))

    def _draw(self, rounds, n, rng):
        mask = rng.random((rounds, n)) < self.p
        slope = np.where(mask, self.base * self.slowdown, self.base)
        return Draw(np.zeros((rounds, n)), slope, mask)


@register_delay_model("partial")
@dataclass(**_MODEL)
class PartialStragglers(DelayModel):
    """s random workers per round are alpha-partial stragglers (Tandon et al., Sec. 4).

    An alpha-partial straggler is "at most alpha times slower than any non-straggler"; this model
    takes the worst case the scheme is designed for: a straggler needs exactly ``alpha`` times the
    time of a non-straggler for the same work (``alpha * base * load``)."""

    examples = (dict(stragglers=1, alpha=2.0),)

    _rows_independent = True

    summary = "s random workers per round run alpha times slower (alpha-partial stragglers, Tandon Sec. 4)"
    param_help = {
        "stragglers": "number of alpha-slow workers in every round, picked uniformly at random",
        "alpha": "slowdown factor of a partial straggler (> 1)",
        "base": "seconds to compute the whole data set (load 1) at normal speed",
    }

    stragglers: int = 1
    alpha: float = 2.0
    base: float = 1.0

    def __post_init__(self):
        self._set(stragglers=check_int("stragglers", self.stragglers, minimum=0),
                  alpha=check_real("alpha", self.alpha, minimum=1.0, strict_min=True),
                  base=check_real("base", self.base, minimum=0.0))

    def _draw(self, rounds, n, rng):
        _check_count("stragglers", self.stragglers, n)
        mask = _pick_per_round(rng, rounds, n, self.stragglers)
        slope = np.where(mask, self.alpha * self.base, self.base)
        return Draw(np.zeros((rounds, n)), slope, mask)


# --------------------------------------------------------------------------- GC-DC's models


@register_delay_model("shifted-exp")
@dataclass(**_MODEL)
class ShiftedExponential(DelayModel):
    """Shifted exponential compute times, GC-DC eq. 20.

    ``P[X_r <= t] = 1 - exp(-mu (t / r - alpha))`` for ``t >= r alpha``: ``X_r = r (alpha + E)``,
    ``E ~ Exp(mu)`` (mean ``1 / mu``), so ``E[X_r] = r (alpha + 1 / mu)`` and the k-th fastest of n
    workers has mean ``r (alpha + (H_n - H_{n-k}) / mu)`` (H: harmonic numbers)."""

    examples = (dict(mu=1.0, alpha=0.01),)

    _rows_independent = True

    summary = "shifted exponential: r partitions take r (alpha + Exp(mu)) seconds (GC-DC eq. 20)"
    param_help = {
        "mu": "rate of the exponential part (straggling effect: smaller is slower)",
        "alpha": "minimum seconds per partition (the shift)",
        "partitions": _PARTITIONS_HELP,
    }

    mu: float = 1.0
    alpha: float = 0.01
    partitions: int | None = None

    def __post_init__(self):
        self._set(mu=check_real("mu", self.mu, minimum=0.0, strict_min=True),
                  alpha=check_real("alpha", self.alpha, minimum=0.0),
                  partitions=_opt_int("partitions", self.partitions, 1))

    def _draw(self, rounds, n, rng):
        P = _partitions(self.partitions, n)
        e = rng.standard_exponential((rounds, n))
        slope = P * (self.alpha + e / self.mu)
        return Draw(np.zeros((rounds, n)), slope, np.zeros((rounds, n), dtype=bool),
                    np.full((rounds, n), self.mu))
