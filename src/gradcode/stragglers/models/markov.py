"""The two-state Markov models of GC-DC Sec. VI (``gilbert-elliot``, ``gilbert-elliot-het``) and
the stream helpers that let every Markov model draw block by block (forks of the Generator's
stream). Load conventions: :mod:`gradcode.stragglers.models`."""

from __future__ import annotations


from dataclasses import dataclass
from typing import ClassVar

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


def _markov_states(rng, rounds, n, p_fs, p_sf, initial_slow):
    """(rounds, n) booleans, True = slow: a two-state chain per worker that may switch at the start
    of every round after the first (fast -> slow with p_fs, slow -> fast with p_sf). Round 0 is
    drawn from the stationary law ``P[slow] = p_fs / (p_fs + p_sf)`` or, when ``initial_slow`` is
    an integer, has exactly that many slow workers picked uniformly at random."""
    states = np.empty((rounds, n), dtype=bool)
    if rounds == 0:
        return states
    states[0] = _markov_first(rng, n, p_fs, p_sf, initial_slow)
    states[1:] = _markov_next(rng, states[0], rounds - 1, p_fs, p_sf)
    return states


def _markov_first(rng, n, p_fs, p_sf, initial_slow) -> np.ndarray:
    """Round 0 of :func:`_markov_states` (n uniforms from ``rng``)."""
    if initial_slow is None:
        total = p_fs + p_sf
        pi_slow = 0.5 if total == 0 else p_fs / total
        return rng.random(n) < pi_slow
    return _pick_per_round(rng, 1, n, initial_slow)[0]


def _markov_next(rng, prev, count, p_fs, p_sf) -> np.ndarray:
    """``count`` more rounds of the chain after the states ``prev`` (``count x n`` uniforms)."""
    n = prev.size
    out = np.empty((count, n), dtype=bool)
    if count == 0:
        return out
    u = rng.random((count, n))
    if p_fs == p_sf:
        # symmetric chain: the state flips with probability p whatever it is -> cumulative parity
        parity = np.cumsum(u < p_fs, axis=0, dtype=np.int64) & 1
        out[:] = prev ^ parity.astype(bool)
    else:
        for t in range(count):
            prev = out[t] = np.where(prev, u[t] >= p_sf, u[t] < p_fs)
    return out


def _fork(rng: np.random.Generator, skip: int) -> np.random.Generator | None:
    """A Generator positioned ``skip`` 64-bit outputs after ``rng`` (``rng`` itself untouched), or
    ``None`` when its bit generator cannot jump ahead (PCG64, numpy's default, and Philox can).

    numpy fills an array draw element by element in C order, one 64-bit output per ``random()``
    double, so the ``k``-th array of a whole-run draw starts at a known offset of the stream: a
    fork there lets a model draw its rounds block by block, bit for bit as its whole draw does."""
    bg = rng.bit_generator
    if not hasattr(bg, "advance"):
        return None
    twin = type(bg)()
    twin.state = bg.state
    twin.advance(skip)
    return np.random.Generator(twin)


def _can_fork(rng) -> bool:
    return hasattr(rng.bit_generator, "advance")


def _chain_blocks(model, rounds, n, rng, block, mu_of):
    """Blocks of a Gilbert-Elliot draw (homogeneous or not), equal to the rows of its whole draw.

    The whole draw consumes, in order: what precedes the chain (``mu_of(rng)``: the per-worker
    rates of the heterogeneous model, nothing for the homogeneous one), round 0 of the chain,
    ``(rounds - 1) x n`` uniforms for the chain, ``rounds x n`` exponentials. Here the chain's
    uniforms are read from ``rng`` block by block and the exponentials from a fork positioned after
    them; ``rng`` ends where the whole draw leaves it."""
    _check_count("initial_slow", model.initial_slow, n)
    P = _partitions(model.partitions, n)
    mu_f, mu_s = mu_of(rng)
    prev = _markov_first(rng, n, model.p_switch, model.p_recover, model.initial_slow)
    exp = _fork(rng, (rounds - 1) * n)
    for a in range(0, rounds, block):
        b = min(rounds, a + block)
        if a == 0:
            slow = np.concatenate([prev[None], _markov_next(rng, prev, b - 1, model.p_switch, model.p_recover)])
        else:
            slow = _markov_next(rng, prev, b - a, model.p_switch, model.p_recover)
        prev = slow[-1]
        rates = np.where(slow, mu_s, mu_f)
        e = exp.standard_exponential((b - a, n))
        yield a, b, model._chain_draw(P, slow, rates, e)
    rng.bit_generator.state = exp.bit_generator.state


_CHAIN_HELP = {
    "p_switch": "probability that a fast worker turns slow at the start of a round",
    "p_recover": "probability that a slow worker turns fast at the start of a round (default: p_switch)",
    "alpha": "minimum seconds per partition (the shift of eq. 20)",
    "initial_slow": "workers slow in round 0 (picked at random); default: drawn from the stationary law",
    "partitions": _PARTITIONS_HELP,
}
_HET_HELP = {
    "rate_max": "heterogeneous: upper end of the uniform fast rates",
    "slow_factor": "heterogeneous: how many times slower the slow state is",
    "tau": "heterogeneous: a worker whose current rate is below tau is a straggler",
}


class _TwoStateChain:
    """What the two Gilbert-Elliot models share (their chain parameters are fields of each, so
    that each lists its parameters in its own order): checks and the stationary law."""

    def _check_chain(self) -> None:
        p_switch = check_real("p_switch", self.p_switch, minimum=0.0, maximum=1.0)
        p_recover = p_switch if self.p_recover is None else check_real(
            "p_recover", self.p_recover, minimum=0.0, maximum=1.0)
        self._set(p_switch=p_switch, p_recover=p_recover,
                  alpha=check_real("alpha", self.alpha, minimum=0.0),
                  initial_slow=_opt_int("initial_slow", self.initial_slow, 0),
                  partitions=_opt_int("partitions", self.partitions, 1))

    @property
    def stationary_slow(self) -> float:
        """Long-run fraction of rounds a worker spends in the slow state."""
        total = self.p_switch + self.p_recover
        return 0.5 if total == 0 else self.p_switch / total


@register_delay_model("gilbert-elliot")
@dataclass(**_MODEL)
class GilbertElliot(_TwoStateChain, DelayModel):
    """Gilbert-Elliot two-state straggling (GC-DC Sec. VI-A, SGC App. C) on top of eq. 20.

    Each worker is in a fast state (rate ``mu_fast``) or a slow state (rate ``mu_slow``); at the
    beginning of every round after the first it switches fast -> slow with probability
    ``p_switch`` and slow -> fast with probability ``p_recover`` (default ``p_switch``: the
    symmetric chain of GC-DC, "transitions ... with probability p"). The stationary slow fraction
    is ``p_switch / (p_switch + p_recover)``; with ``initial_slow=None`` round 0 is drawn from it,
    with an integer exactly that many random workers start slow (GC-DC starts 10 of 20). Given the
    state, compute times follow eq. 20. Straggling = slow state.

    Workers with rates of their own are :class:`GilbertElliotHet` (``gilbert-elliot-het``).
    """

    examples = (dict(mu_fast=10, mu_slow=0.1, p_switch=0.05, alpha=0.01),)

    name: ClassVar[str] = "gilbert-elliot"
    summary = "two-state Markov (fast/slow) rates on top of eq. 20, homogeneous workers (GC-DC VI-A)"
    param_help = {
        "mu_fast": "rate in the fast (non-straggling) state",
        "mu_slow": "rate in the slow (straggling) state",
        **_CHAIN_HELP,
    }

    mu_fast: float = 10.0
    mu_slow: float = 0.1
    p_switch: float = 0.05
    p_recover: float | None = None
    alpha: float = 0.01
    initial_slow: int | None = None
    partitions: int | None = None

    def __post_init__(self):
        self._check_chain()
        mu_fast = check_real("mu_fast", self.mu_fast, minimum=0.0, strict_min=True)
        mu_slow = check_real("mu_slow", self.mu_slow, minimum=0.0, strict_min=True)
        if mu_slow > mu_fast:
            raise ValueError(f"mu_slow must be <= mu_fast (the slow state is slower); got "
                             f"mu_slow={mu_slow}, mu_fast={mu_fast}")
        self._set(mu_fast=mu_fast, mu_slow=mu_slow)

    def _draw(self, rounds, n, rng):
        _check_count("initial_slow", self.initial_slow, n)
        P = _partitions(self.partitions, n)
        slow = _markov_states(rng, rounds, n, self.p_switch, self.p_recover, self.initial_slow)
        rates = np.where(slow, self.mu_slow, self.mu_fast)
        e = rng.standard_exponential((rounds, n))
        return self._chain_draw(P, slow, rates, e)

    def _chain_draw(self, P, slow, rates, e) -> Draw:
        return Draw(np.zeros(slow.shape), P * (self.alpha + e / rates), slow, rates)

    def _blocks(self, rounds, n, rng, block):
        """Blocks bit for bit as the whole draw (see :func:`_chain_blocks`)."""
        if not _can_fork(rng):
            return None
        return _chain_blocks(self, rounds, n, rng, block, lambda g: (self.mu_fast, self.mu_slow))


@register_delay_model("gilbert-elliot-het")
@dataclass(**_MODEL)
class GilbertElliotHet(_TwoStateChain, DelayModel):
    """Heterogeneous Gilbert-Elliot straggling (GC-DC Sec. VI-B1) on top of eq. 20.

    The two-state chain of :class:`GilbertElliot` (same ``p_switch``, ``p_recover``,
    ``initial_slow``), with rates of each worker's own: ``mu_f ~ U(0, rate_max]`` drawn once per
    draw, ``mu_s = mu_f / slow_factor``. A worker counts as a straggler when its current rate is
    below ``tau`` (a fast worker with a small ``mu_f`` can be one, a slow worker with a large one
    not), which is what GC-DC's heterogeneous experiments count.
    """

    examples = (dict(p_switch=0.2, tau=0.5),)

    summary = ("two-state Markov rates with per-worker mu_f ~ U(0, rate_max], mu_s = mu_f / slow_factor,"
               " straggler when rate < tau (GC-DC VI-B1)")
    param_help = {**_CHAIN_HELP, **_HET_HELP}

    p_switch: float = 0.05
    p_recover: float | None = None
    alpha: float = 0.01
    initial_slow: int | None = None
    partitions: int | None = None
    rate_max: float = 5.0
    slow_factor: float = 10.0
    tau: float = 0.5

    def __post_init__(self):
        self._check_chain()
        self._set(rate_max=check_real("rate_max", self.rate_max, minimum=0.0, strict_min=True),
                  slow_factor=check_real("slow_factor", self.slow_factor, minimum=1.0),
                  tau=check_real("tau", self.tau, minimum=0.0))

    def _draw(self, rounds, n, rng):
        _check_count("initial_slow", self.initial_slow, n)
        P = _partitions(self.partitions, n)
        mu_f, mu_s = self._worker_rates(rng, n)  # drawn before the chain: the Generator order is fixed
        slow = _markov_states(rng, rounds, n, self.p_switch, self.p_recover, self.initial_slow)
        rates = np.where(slow, mu_s, mu_f)
        e = rng.standard_exponential((rounds, n))
        return self._chain_draw(P, slow, rates, e)

    def _worker_rates(self, rng, n):
        mu_f = _positive_uniform(rng, self.rate_max, n)
        return mu_f, mu_f / self.slow_factor

    def _chain_draw(self, P, slow, rates, e) -> Draw:
        return Draw(np.zeros(slow.shape), P * (self.alpha + e / rates), rates < self.tau, rates)

    def _blocks(self, rounds, n, rng, block):
        """Blocks bit for bit as the whole draw (see :func:`_chain_blocks`)."""
        if not _can_fork(rng):
            return None
        return _chain_blocks(self, rounds, n, rng, block, lambda g: self._worker_rates(g, n))


