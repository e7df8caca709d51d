"""``time-varying`` (GC-DC eq. 21): per-worker rates that are redrawn with probability ``p`` each
round. Load conventions: :mod:`gradcode.stragglers.models`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradcode._validation import check_real
from gradcode.stragglers.models.base import (
    _MODEL,
    _PARTITIONS_HELP,
    DelayModel,
    Draw,
    _check_count,
    _opt_int,
    _partitions,
    _pick_per_round,
    _positive_uniform,
    register_delay_model,
)
from gradcode.stragglers.models.markov import _can_fork, _fork


@register_delay_model("time-varying")
@dataclass(**_MODEL)
class TimeVaryingRates(DelayModel):
    """Heterogeneous workers with time-varying rates, GC-DC eq. 21, on top of eq. 20.

    ``mu[k, t+1] = (1 - a[t+1]) mu[k, t] + a[t+1] U[0, rate_max]``, ``a ~ Bernoulli(p)`` iid: each
    round a worker re-samples its rate with probability ``p``. Initial rates: with
    ``initial_slow=None`` all ``U(0, rate_max]`` (the stationary law); with an integer, that many
    random workers start ``U(0, tau)`` and the rest ``U[tau, rate_max]`` (GC-DC starts 10 of 20
    this way). A worker is a straggler when ``mu < tau``. Uniform rates are drawn in
    ``(0, rate_max]`` so that no rate is exactly 0 (an infinite time)."""

    examples = (dict(p=0.05, tau=1.0, initial_slow=3),)

    summary = "per-worker rates re-sampled U(0, rate_max] with probability p each round (GC-DC eq. 21)"
    param_help = {
        "p": "probability that a worker re-samples its rate at the start of a round",
        "tau": "a worker whose rate is below tau is a straggler",
        "rate_max": "rates are uniform on (0, rate_max]",
        "alpha": "minimum seconds per partition (the shift of eq. 20)",
        "initial_slow": "workers starting with a rate below tau; default: all rates from the stationary law",
        "partitions": _PARTITIONS_HELP,
    }

    p: float = 0.05
    tau: float = 1.0
    rate_max: float = 5.0
    alpha: float = 0.01
    initial_slow: int | None = None
    partitions: int | None = None

    def __post_init__(self):
        rate_max = check_real("rate_max", self.rate_max, minimum=0.0, strict_min=True)
        self._set(p=check_real("p", self.p, minimum=0.0, maximum=1.0),
                  rate_max=rate_max,
                  tau=check_real("tau", self.tau, minimum=0.0, maximum=rate_max),
                  alpha=check_real("alpha", self.alpha, minimum=0.0),
                  initial_slow=_opt_int("initial_slow", self.initial_slow, 0),
                  partitions=_opt_int("partitions", self.partitions, 1))

    def _blocks(self, rounds, n, rng, block):
        """Blocks bit for bit as the whole draw: the whole draw consumes the initial rates, then
        ``rounds x n`` resampling uniforms, ``rounds x n`` fresh rates and ``rounds x n``
        exponentials; each of the three is read block by block from its own fork of the stream,
        and the rate in effect is carried from block to block."""
        if not _can_fork(rng):
            return None

        def blocks(gen):
            _check_count("initial_slow", self.initial_slow, n)
            P = _partitions(self.partitions, n)
            mu0 = self._initial_rates(gen, n)
            fresh_stream = _fork(gen, rounds * n)
            exp = _fork(gen, 2 * rounds * n)
            carry = mu0
            for a in range(0, rounds, block):
                b = min(rounds, a + block)
                resample = gen.random((b - a, n)) < self.p
                fresh = _positive_uniform(fresh_stream, self.rate_max, (b - a, n))
                if a == 0:
                    resample[0] = True
                    fresh[0] = mu0
                idx = np.where(resample, np.arange(b - a)[:, None], -1)
                np.maximum.accumulate(idx, axis=0, out=idx)
                rates = np.where(idx >= 0, np.take_along_axis(fresh, np.maximum(idx, 0), axis=0), carry)
                carry = rates[-1]
                e = exp.standard_exponential((b - a, n))
                yield a, b, Draw(np.zeros((b - a, n)), P * (self.alpha + e / rates), rates < self.tau, rates)
            gen.bit_generator.state = exp.bit_generator.state

        return blocks(rng)

    def _initial_rates(self, rng, n):
        if self.initial_slow is None:
            return _positive_uniform(rng, self.rate_max, n)
        slow = _pick_per_round(rng, 1, n, self.initial_slow)[0]
        low = _positive_uniform(rng, self.tau, n) if self.tau > 0 else np.zeros(n)
        # U[tau, rate_max] for the others
        high = self.tau + (self.rate_max - self.tau) * rng.random(n)
        mu0 = np.where(slow, low, high)
        if self.tau > 0:  # (0, tau] -> keep strictly below tau for the designated stragglers
            mu0 = np.where(slow & (mu0 >= self.tau), np.nextafter(self.tau, 0), mu0)
        return mu0

    def _draw(self, rounds, n, rng):
        _check_count("initial_slow", self.initial_slow, n)
        P = _partitions(self.partitions, n)
        mu0 = self._initial_rates(rng, n)
        rates = np.empty((rounds, n))
        if rounds:
            resample = rng.random((rounds, n)) < self.p
            fresh = _positive_uniform(rng, self.rate_max, (rounds, n))
            resample[0] = True
            fresh[0] = mu0
            # forward-fill: the rate in round t is the value drawn at the last resampling round <= t
            idx = np.where(resample, np.arange(rounds)[:, None], 0)
            np.maximum.accumulate(idx, axis=0, out=idx)
            rates = np.take_along_axis(fresh, idx, axis=0)
        e = rng.standard_exponential((rounds, n))
        slope = P * (self.alpha + e / rates)
        return Draw(np.zeros((rounds, n)), slope, rates < self.tau, rates)
