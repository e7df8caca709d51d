"""Delay models: per-round, per-worker compute times as a function of the work each worker does.

Every model here is *affine in the load* once its randomness is drawn. :meth:`DelayModel.draw`
returns a :class:`Draw` holding, for each round ``t`` and worker ``w``,

    time[t, w](load) = max(0, intercept[t, w] + slope[t, w] * load)

where ``load`` is the fraction of the data set the worker processes in the round (a code's
``worker_loads``). The random state (which workers straggle, their rates, the Markov chains) does
not depend on the load, so a simulator can ask for the instant at which any *prefix* of a worker's
work is done (multi-message codes: AGC, the partial-straggler scheme) from the same draw, and two
schemes compared on one draw see the same straggler realisation. :meth:`DelayModel.sample` is the
shortcut ``draw(...).times(load)``.

Load conventions, model by model (each follows its paper):

* ``fixed`` (Tandon et al., Sec. 5): ``base * load`` plus an *additive* ``delay`` for ``stragglers``
  workers picked uniformly at random each round (the experiments ``time.sleep()`` on s random
  workers per iteration). The delay is the intercept of the affine law: a delayed worker sleeps,
  then computes, so every message it streams is late by ``delay``.
* ``bernoulli``: ``base * load``, multiplied by ``slowdown`` for each worker that straggles,
  independently with probability ``p``.
* ``partial`` (Tandon et al., Sec. 4): ``stragglers`` random workers per round are alpha-partial
  stragglers, taking ``alpha`` times as long as the others on the same work: ``alpha * base * load``.
* ``shifted-exp`` (GC-DC eq. 20): the time to compute ``r`` partial gradients is
  ``P[X <= t] = 1 - exp(-mu (t / r - alpha))`` for ``t >= r alpha``, i.e. ``X = r (alpha + E)`` with
  ``E ~ Exp(mu)`` (one draw per worker and round, scaled by ``r``). ``r = load * partitions``:
  ``partitions`` is the number of equal data partitions (GC-DC uses K partitions for K workers,
  so the default is the number of workers ``n``, and a worker with load ``r / n`` computes ``r``).
* ``gilbert-elliot`` (GC-DC Sec. VI-A; SGC App. C): eq. 20 with a rate that depends on a two-state
  Markov chain per worker (fast rate ``mu_fast``, slow rate ``mu_slow``); the state switches at the
  beginning of each round with probability ``p_switch`` (fast -> slow) and ``p_recover``
  (slow -> fast; defaults to ``p_switch``, the symmetric chain of GC-DC).
* ``gilbert-elliot-het`` (GC-DC Sec. VI-B1): the same chain, with per-worker rates
  ``mu_f ~ U[0, rate_max]`` drawn once per draw and ``mu_s = mu_f / slow_factor``; a worker is a
  straggler when its current rate is below the threshold ``tau``.
* ``time-varying`` (GC-DC eq. 21): ``mu[t+1] = (1 - a[t+1]) mu[t] + a[t+1] U[0, rate_max]`` with
  ``a ~ Bernoulli(p)``; straggler when ``mu < tau``.
* ``shared-access`` (GC-DC Sec. VI-C): other users' tasks arrive at each worker as a Poisson process
  of ``arrival_rate`` tasks per round, each stays ``U{stay_min..stay_max}`` rounds, at most
  ``capacity`` tasks (ours included) are served at once (arrivals beyond it are turned away). With
  ``m`` tasks on the worker (ours included) one partition's computation takes
  ``latency_min + (latency_max - latency_min) (m - 1) / (capacity - 1)`` seconds (20 ms to 200 ms,
  linear in the load, as measured in the paper); ``r = load * partitions`` partitions take ``r``
  times that. Straggler when ``m >= gamma``.
* ``trace``: replays a ``(rounds, workers)`` array of seconds; see :class:`TraceDelays` for how a
  trace recorded at one load is adjusted to another (SGC App. J).

Every model also takes a communication component (AGC Sec. VII assumption 2, CommFR-GC): a
message whose length is a fraction ``f`` of the gradient dimension takes
``comm_latency + comm * f`` seconds (:meth:`DelayModel.message_time`); both default to 0.
"""

from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from gradcode._validation import as_generator, check_int, check_real

__all__ = [
    "DelayModel",
    "Draw",
    "available_delay_models",
    "make_delay_model",
    "model_info",
    "register_delay_model",
]

_REGISTRY: dict[str, type[DelayModel]] = {}
_ALIASES: dict[str, tuple[str, dict[str, Any]]] = {}

#: parameters every model accepts (the communication component)
_COMMON_HELP = {
    "comm": "seconds to send a message as long as the full gradient (message time is proportional to length)",
    "comm_latency": "fixed seconds added to every message",
}


def register_delay_model(name: str):
    """Class decorator adding a delay model to the registry under ``name``."""

    def wrap(cls):
        if name in _REGISTRY:
            raise ValueError(f"delay model {name!r} is already registered by {_REGISTRY[name].__name__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def available_delay_models() -> list[str]:
    """The names accepted by :func:`make_delay_model`, sorted."""
    return sorted(set(_REGISTRY) | set(_ALIASES))


def _constructor_params(cls) -> dict[str, Any]:
    sig = inspect.signature(cls.__init__)
    out = {}
    for p in list(sig.parameters.values())[1:]:
        if p.kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            continue
        out[p.name] = None if p.default is inspect.Parameter.empty else p.default
    out.update(comm=0.0, comm_latency=0.0)
    return out


def make_delay_model(name: str, /, **params) -> DelayModel:
    """Build the delay model registered as ``name`` with its keyword parameters, e.g.
    ``make_delay_model("shifted-exp", mu=1.0, alpha=0.01)``.

    Raises ``ValueError`` listing the available names on an unknown name, and ``TypeError`` listing
    the accepted parameters on an unknown parameter."""
    if not isinstance(name, str):
        raise TypeError(f"delay model name must be a string, got {name!r}")
    if name in _ALIASES:
        target, fixed = _ALIASES[name]
        clash = set(fixed) & set(params)
        if clash:
            raise TypeError(f"delay model {name!r} sets {', '.join(sorted(clash))} itself")
        return make_delay_model(target, **fixed, **params)
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown delay model {name!r}; available delay models: {', '.join(available_delay_models())}"
        ) from None
    allowed = _constructor_params(cls)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise TypeError(
            f"delay model {name!r} got unknown parameter(s) {', '.join(unknown)};"
            f" it accepts: {', '.join(allowed)}"
        )
    return cls(**params)


def model_info(name: str) -> dict[str, Any]:
    """Registry entry ``name``: summary line, parameters with their defaults and one-line help."""
    if name in _ALIASES:
        target, fixed = _ALIASES[name]
        info = model_info(target)
        info["name"] = name
        info["summary"] = _REGISTRY[target].alias_summary.get(name, info["summary"])
        hidden = set(fixed) | set(_REGISTRY[target].alias_hidden.get(name, ()))
        info["params"] = {k: v for k, v in info["params"].items() if k not in hidden}
        info["help"] = {k: v for k, v in info["help"].items() if k not in hidden}
        return info
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown delay model {name!r}; available delay models: {', '.join(available_delay_models())}"
        ) from None
    params = _constructor_params(cls)
    helps = {**cls.param_help, **_COMMON_HELP}
    return {
        "name": name,
        "class": cls.__name__,
        "summary": cls.summary,
        "params": params,
        "help": {k: helps.get(k, "") for k in params},
    }


# --------------------------------------------------------------------------- the draw


@dataclass(frozen=True, eq=False)
class Draw:
    """One realisation of a delay model for ``rounds`` rounds and ``n`` workers.

    ``time = max(0, intercept + slope * load)`` per round and worker (seconds); ``straggling`` marks
    the workers the model itself considers stragglers in each round (its hidden state: the slow
    Gilbert-Elliot state, a rate below the threshold ``tau``, ``gamma`` or more ongoing tasks, the
    workers picked to straggle; all ``False`` for ``shifted-exp`` and traces); ``rates`` holds the
    shifted-exponential rate ``mu`` in effect for rate-based models (``None`` otherwise), which
    GC-DC's heterogeneous variant uses to order workers.
    """

    intercept: np.ndarray
    slope: np.ndarray
    straggling: np.ndarray
    rates: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return self.slope.shape

    def times(self, load=1.0) -> np.ndarray:
        """``(rounds, n)`` seconds each worker needs for ``load`` (scalar, ``(n,)`` or
        ``(rounds, n)`` fractions of the data set)."""
        load = _check_load(load, self.shape)
        t = self.intercept + self.slope * load
        np.maximum(t, 0.0, out=t)
        return t


def _check_load(load, shape) -> np.ndarray | float:
    if isinstance(load, numbers.Real) and not isinstance(load, bool):
        value = float(load)
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"load must be a finite fraction >= 0, got {load!r}")
        return value
    arr = np.asarray(load, dtype=np.float64)
    rounds, n = shape
    if arr.shape not in ((), (n,), (rounds, n)):
        raise ValueError(
            f"load must be a scalar, an ({n},) array or a ({rounds}, {n}) array; got shape {arr.shape}"
        )
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError("load must hold finite fractions >= 0")
    return arr


def _readonly(*arrays):
    for a in arrays:
        if a is not None:
            a.flags.writeable = False


def _positive_uniform(rng, high, size):
    """U(0, high]: ``high * (1 - U[0, 1))``, never exactly 0 (a zero rate would give infinite time)."""
    return high * (1.0 - rng.random(size))


def _pick_per_round(rng, rounds, n, s):
    """(rounds, n) booleans with exactly ``s`` True per row, uniformly at random."""
    mask = np.zeros((rounds, n), dtype=bool)
    if s == 0 or rounds == 0:
        return mask
    if s == n:
        mask[:] = True
        return mask
    # argpartition of iid uniforms: the s smallest keys of each row are a uniform s-subset
    keys = rng.random((rounds, n))
    idx = np.argpartition(keys, s - 1, axis=1)[:, :s]
    np.put_along_axis(mask, idx, True, axis=1)
    return mask


# --------------------------------------------------------------------------- the base class


class DelayModel:
    """Base class of delay models: a small immutable value built by :func:`make_delay_model`.

    Subclasses validate their parameters in ``__init__``, pass them to ``super().__init__`` and
    implement ``_draw(rounds, n, rng) -> Draw``.
    """

    name: ClassVar[str] = "?"
    summary: ClassVar[str] = ""
    param_help: ClassVar[dict[str, str]] = {}
    alias_summary: ClassVar[dict[str, str]] = {}
    #: parameters an alias leaves unused (not listed by ``model_info``)
    alias_hidden: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, params: dict[str, Any], *, comm=0.0, comm_latency=0.0):
        self._params = dict(params)
        self._comm = check_real("comm", comm, minimum=0.0)
        self._comm_latency = check_real("comm_latency", comm_latency, minimum=0.0)
        if self._comm or self._comm_latency:
            self._params.update(comm=self._comm, comm_latency=self._comm_latency)
        self._frozen = True

    def __setattr__(self, key, value):
        if getattr(self, "_frozen", False):
            raise AttributeError(f"{type(self).__name__} is immutable; build a new model instead")
        object.__setattr__(self, key, value)

    @property
    def params(self) -> dict[str, Any]:
        """The constructor parameters (defaults filled in)."""
        return dict(self._params)

    def __repr__(self) -> str:
        shown = " ".join(f"{k}={_short(v)}" for k, v in self._params.items() if v is not None)
        return f"<{type(self).__name__} {shown}>" if shown else f"<{type(self).__name__}>"

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        a, b = self._params, other._params
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)

    def __hash__(self):
        return hash((type(self).__name__, tuple((k, _hashable(v)) for k, v in self._params.items())))

    # ------------------------------------------------------------------ drawing
    def draw(self, rounds: int, n: int, rng=None) -> Draw:
        """Draw the random state of ``rounds`` rounds for ``n`` workers (see :class:`Draw`).

        ``rng`` is a seed or a ``numpy.random.Generator``; the same seed gives the same draw.
        Stateful models draw the whole sequence of rounds in this one call."""
        rounds = check_int("rounds", rounds, minimum=0)
        n = check_int("n", n, minimum=1)
        gen = as_generator(rng)
        d = self._draw(rounds, n, gen)
        _readonly(d.intercept, d.slope, d.straggling, d.rates)
        return d

    def sample(self, rounds: int, n: int, rng=None, load=1.0) -> np.ndarray:
        """``(rounds, n)`` seconds each worker needs in each round to compute ``load`` (the fraction
        of the data it processes: a scalar, an ``(n,)`` or a ``(rounds, n)`` array)."""
        return self.draw(rounds, n, rng).times(load)

    def _draw(self, rounds: int, n: int, rng: np.random.Generator) -> Draw:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------------ communication
    @property
    def comm(self) -> float:
        return self._comm

    @property
    def comm_latency(self) -> float:
        return self._comm_latency

    def message_time(self, length_fraction):
        """Seconds to send a message whose length is ``length_fraction`` of the gradient dimension:
        ``comm_latency + comm * length_fraction`` (0 for a model built without a communication
        component). Accepts a scalar (returns a float) or an array."""
        if isinstance(length_fraction, numbers.Real) and not isinstance(length_fraction, bool):
            f = float(length_fraction)
            if not np.isfinite(f) or f < 0:
                raise ValueError(f"length_fraction must be a finite number >= 0, got {length_fraction!r}")
            return self._comm_latency + self._comm * f
        arr = np.asarray(length_fraction, dtype=np.float64)
        if not np.isfinite(arr).all() or (arr < 0).any():
            raise ValueError("length_fraction must hold finite numbers >= 0")
        return self._comm_latency + self._comm * arr

    # ------------------------------------------------------------------ description
    def describe(self) -> dict[str, Any]:
        """Name, parameters and a one-line summary (what ``gradcode models`` shows)."""
        return {
            "name": self.name,
            "params": {k: _jsonable(v) for k, v in self._params.items()},
            "summary": self.summary,
        }


def _short(v):
    if isinstance(v, np.ndarray):
        return f"array{v.shape}"
    if isinstance(v, float):
        return f"{v:g}"
    return repr(v) if isinstance(v, str) else v


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    return a == b


def _hashable(v):
    if isinstance(v, np.ndarray):
        return (v.shape, v.tobytes())
    return v


def _jsonable(v):
    if isinstance(v, np.ndarray):
        return f"array of shape {v.shape}"
    return v


def _opt_int(name, value, minimum):
    return None if value is None else check_int(name, value, minimum=minimum)


def _partitions(partitions, n):
    return n if partitions is None else partitions


def _check_count(name, value, n):
    if value is not None and value > n:
        raise ValueError(f"{name}={value} exceeds the number of workers n={n}")


_PARTITIONS_HELP = (
    "data partitions a load of 1 stands for: a worker with load r/partitions computes r partial"
    " gradients (default: the number of workers n, as in GC-DC)"
)

# --------------------------------------------------------------------------- Tandon's models


@register_delay_model("fixed")
class FixedDelay(DelayModel):
    """s random workers per round are delayed by a constant (Tandon et al., Sec. 5)."""

    summary = "s random workers per round are delayed by a constant additive delay (Tandon Sec. 5)"
    param_help = {
        "stragglers": "number of workers delayed in every round, picked uniformly at random",
        "delay": "seconds added to a straggler's compute time",
        "base": "seconds to compute the whole data set (load 1) without delay",
    }

    def __init__(self, *, stragglers: int = 1, delay: float = 1.0, base: float = 1.0, **common):
        self.stragglers = check_int("stragglers", stragglers, minimum=0)
        self.delay = check_real("delay", delay, minimum=0.0)
        self.base = check_real("base", base, minimum=0.0)
        super().__init__(dict(stragglers=self.stragglers, delay=self.delay, base=self.base), **common)

    def _draw(self, rounds, n, rng):
        _check_count("stragglers", self.stragglers, n)
        mask = _pick_per_round(rng, rounds, n, self.stragglers)
        return Draw(mask * self.delay, np.full((rounds, n), self.base), mask)


@register_delay_model("bernoulli")
class BernoulliDelay(DelayModel):
    """Each worker straggles independently with probability p, slowed by a factor."""

    summary = "each worker straggles independently with probability p and runs slowdown times slower"
    param_help = {
        "p": "probability that a worker straggles in a round (independent over workers and rounds)",
        "slowdown": "factor by which a straggler's compute time is multiplied (>= 1)",
        "base": "seconds to compute the whole data set (load 1) at normal speed",
    }

    def __init__(self, *, p: float = 0.1, slowdown: float = 10.0, base: float = 1.0, **common):
        self.p = check_real("p", p, minimum=0.0, maximum=1.0)
        self.slowdown = check_real("slowdown", slowdown, minimum=1.0)
        self.base = check_real("base", base, minimum=0.0)
        super().__init__(dict(p=self.p, slowdown=self.slowdown, base=self.base), **common)

    def _draw(self, rounds, n, rng):
        mask = rng.random((rounds, n)) < self.p
        slope = np.where(mask, self.base * self.slowdown, self.base)
        return Draw(np.zeros((rounds, n)), slope, mask)


@register_delay_model("partial")
class PartialStragglers(DelayModel):
    """s random workers per round are alpha-partial stragglers (Tandon et al., Sec. 4).

    An alpha-partial straggler is "at most alpha times slower than any non-straggler"; this model
    takes the worst case the scheme is designed for: a straggler needs exactly ``alpha`` times the
    time of a non-straggler for the same work (``alpha * base * load``)."""

    summary = "s random workers per round run alpha times slower (alpha-partial stragglers, Tandon Sec. 4)"
    param_help = {
        "stragglers": "number of alpha-slow workers in every round, picked uniformly at random",
        "alpha": "slowdown factor of a partial straggler (> 1)",
        "base": "seconds to compute the whole data set (load 1) at normal speed",
    }

    def __init__(self, *, stragglers: int = 1, alpha: float = 2.0, base: float = 1.0, **common):
        self.stragglers = check_int("stragglers", stragglers, minimum=0)
        self.alpha = check_real("alpha", alpha, minimum=1.0, strict_min=True)
        self.base = check_real("base", base, minimum=0.0)
        super().__init__(dict(stragglers=self.stragglers, alpha=self.alpha, base=self.base), **common)

    def _draw(self, rounds, n, rng):
        _check_count("stragglers", self.stragglers, n)
        mask = _pick_per_round(rng, rounds, n, self.stragglers)
        slope = np.where(mask, self.alpha * self.base, self.base)
        return Draw(np.zeros((rounds, n)), slope, mask)


# --------------------------------------------------------------------------- GC-DC's models


@register_delay_model("shifted-exp")
class ShiftedExponential(DelayModel):
    """Shifted exponential compute times, GC-DC eq. 20.

    ``P[X_r <= t] = 1 - exp(-mu (t / r - alpha))`` for ``t >= r alpha``: ``X_r = r (alpha + E)``,
    ``E ~ Exp(mu)`` (mean ``1 / mu``), so ``E[X_r] = r (alpha + 1 / mu)`` and the k-th fastest of n
    workers has mean ``r (alpha + (H_n - H_{n-k}) / mu)`` (H: harmonic numbers)."""

    summary = "shifted exponential: r partitions take r (alpha + Exp(mu)) seconds (GC-DC eq. 20)"
    param_help = {
        "mu": "rate of the exponential part (straggling effect: smaller is slower)",
        "alpha": "minimum seconds per partition (the shift)",
        "partitions": _PARTITIONS_HELP,
    }

    def __init__(self, *, mu: float = 1.0, alpha: float = 0.01, partitions: int | None = None, **common):
        self.mu = check_real("mu", mu, minimum=0.0, strict_min=True)
        self.alpha = check_real("alpha", alpha, minimum=0.0)
        self.partitions = _opt_int("partitions", partitions, 1)
        super().__init__(dict(mu=self.mu, alpha=self.alpha, partitions=self.partitions), **common)

    def _draw(self, rounds, n, rng):
        P = _partitions(self.partitions, n)
        e = rng.standard_exponential((rounds, n))
        slope = P * (self.alpha + e / self.mu)
        return Draw(np.zeros((rounds, n)), slope, np.zeros((rounds, n), dtype=bool),
                    np.full((rounds, n), self.mu))


def _markov_states(rng, rounds, n, p_fs, p_sf, initial_slow):
    """(rounds, n) booleans, True = slow: a two-state chain per worker that may switch at the start
    of every round after the first (fast -> slow with p_fs, slow -> fast with p_sf). Round 0 is
    drawn from the stationary law ``P[slow] = p_fs / (p_fs + p_sf)`` or, when ``initial_slow`` is
    an integer, has exactly that many slow workers picked uniformly at random."""
    states = np.empty((rounds, n), dtype=bool)
    if rounds == 0:
        return states
    if initial_slow is None:
        total = p_fs + p_sf
        pi_slow = 0.5 if total == 0 else p_fs / total
        states[0] = rng.random(n) < pi_slow
    else:
        states[0] = _pick_per_round(rng, 1, n, initial_slow)[0]
    u = rng.random((rounds - 1, n))
    if p_fs == p_sf:
        # symmetric chain: the state flips with probability p whatever it is -> cumulative parity
        flips = u < p_fs
        parity = np.cumsum(flips, axis=0, dtype=np.int64) & 1
        states[1:] = states[0] ^ parity.astype(bool)
    else:
        for t in range(1, rounds):
            prev = states[t - 1]
            states[t] = np.where(prev, u[t - 1] >= p_sf, u[t - 1] < p_fs)
    return states


@register_delay_model("gilbert-elliot")
class GilbertElliot(DelayModel):
    """Gilbert-Elliot two-state straggling (GC-DC Sec. VI-A, SGC App. C) on top of eq. 20.

    Each worker is in a fast state (rate ``mu_fast``) or a slow state (rate ``mu_slow``); at the
    beginning of every round after the first it switches fast -> slow with probability
    ``p_switch`` and slow -> fast with probability ``p_recover`` (default ``p_switch``: the
    symmetric chain of GC-DC, "transitions ... with probability p"). The stationary slow fraction
    is ``p_switch / (p_switch + p_recover)``; with ``initial_slow=None`` round 0 is drawn from it,
    with an integer exactly that many random workers start slow (GC-DC starts 10 of 20). Given the
    state, compute times follow eq. 20. Straggling = slow state.

    With ``heterogeneous=True`` (the ``gilbert-elliot-het`` name; GC-DC Sec. VI-B1) every worker
    has its own rates: ``mu_f ~ U(0, rate_max]`` drawn once per draw, ``mu_s = mu_f / slow_factor``,
    and a worker counts as a straggler when its current rate is below ``tau`` (``mu_fast`` and
    ``mu_slow`` are then unused).
    """

    summary = "two-state Markov (fast/slow) rates on top of eq. 20, homogeneous workers (GC-DC VI-A)"
    alias_summary = {
        "gilbert-elliot-het": "two-state Markov rates with per-worker mu_f ~ U(0, rate_max], mu_s = mu_f / slow_factor,"
        " straggler when rate < tau (GC-DC VI-B1)"
    }
    alias_hidden = {"gilbert-elliot-het": ("mu_fast", "mu_slow")}
    param_help = {
        "mu_fast": "rate in the fast (non-straggling) state",
        "mu_slow": "rate in the slow (straggling) state",
        "p_switch": "probability that a fast worker turns slow at the start of a round",
        "p_recover": "probability that a slow worker turns fast at the start of a round (default: p_switch)",
        "alpha": "minimum seconds per partition (the shift of eq. 20)",
        "initial_slow": "workers slow in round 0 (picked at random); default: drawn from the stationary law",
        "partitions": _PARTITIONS_HELP,
        "heterogeneous": "per-worker rates mu_f ~ U(0, rate_max], mu_s = mu_f / slow_factor (GC-DC VI-B1)",
        "rate_max": "heterogeneous: upper end of the uniform fast rates",
        "slow_factor": "heterogeneous: how many times slower the slow state is",
        "tau": "heterogeneous: a worker whose current rate is below tau is a straggler",
    }

    def __init__(
        self,
        *,
        mu_fast: float = 10.0,
        mu_slow: float = 0.1,
        p_switch: float = 0.05,
        p_recover: float | None = None,
        alpha: float = 0.01,
        initial_slow: int | None = None,
        partitions: int | None = None,
        heterogeneous: bool = False,
        rate_max: float = 5.0,
        slow_factor: float = 10.0,
        tau: float = 0.5,
        **common,
    ):
        if not isinstance(heterogeneous, (bool, np.bool_)):
            raise TypeError(f"heterogeneous must be True or False, got {heterogeneous!r}")
        self.heterogeneous = bool(heterogeneous)
        self.p_switch = check_real("p_switch", p_switch, minimum=0.0, maximum=1.0)
        self.p_recover = self.p_switch if p_recover is None else check_real(
            "p_recover", p_recover, minimum=0.0, maximum=1.0)
        self.alpha = check_real("alpha", alpha, minimum=0.0)
        self.initial_slow = _opt_int("initial_slow", initial_slow, 0)
        self.partitions = _opt_int("partitions", partitions, 1)
        params: dict[str, Any] = {}
        if self.heterogeneous:
            self.rate_max = check_real("rate_max", rate_max, minimum=0.0, strict_min=True)
            self.slow_factor = check_real("slow_factor", slow_factor, minimum=1.0)
            self.tau = check_real("tau", tau, minimum=0.0)
            self.mu_fast = self.mu_slow = None
            params.update(heterogeneous=True, rate_max=self.rate_max, slow_factor=self.slow_factor, tau=self.tau)
        else:
            self.mu_fast = check_real("mu_fast", mu_fast, minimum=0.0, strict_min=True)
            self.mu_slow = check_real("mu_slow", mu_slow, minimum=0.0, strict_min=True)
            if self.mu_slow > self.mu_fast:
                raise ValueError(f"mu_slow must be <= mu_fast (the slow state is slower); got "
                                 f"mu_slow={self.mu_slow}, mu_fast={self.mu_fast}")
            self.rate_max = self.slow_factor = self.tau = None
            params.update(mu_fast=self.mu_fast, mu_slow=self.mu_slow)
        params.update(p_switch=self.p_switch, p_recover=self.p_recover, alpha=self.alpha,
                      initial_slow=self.initial_slow, partitions=self.partitions)
        super().__init__(params, **common)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self.heterogeneous:
            d.update(name="gilbert-elliot-het", summary=self.alias_summary["gilbert-elliot-het"])
        return d

    @property
    def stationary_slow(self) -> float:
        """Long-run fraction of rounds a worker spends in the slow state."""
        total = self.p_switch + self.p_recover
        return 0.5 if total == 0 else self.p_switch / total

    def _draw(self, rounds, n, rng):
        _check_count("initial_slow", self.initial_slow, n)
        P = _partitions(self.partitions, n)
        if self.heterogeneous:
            mu_f = _positive_uniform(rng, self.rate_max, n)
            mu_s = mu_f / self.slow_factor
        else:
            mu_f, mu_s = self.mu_fast, self.mu_slow
        slow = _markov_states(rng, rounds, n, self.p_switch, self.p_recover, self.initial_slow)
        rates = np.where(slow, mu_s, mu_f)
        e = rng.standard_exponential((rounds, n))
        slope = P * (self.alpha + e / rates)
        straggling = rates < self.tau if self.heterogeneous else slow
        return Draw(np.zeros((rounds, n)), slope, straggling, rates)


_ALIASES["gilbert-elliot-het"] = ("gilbert-elliot", {"heterogeneous": True})


@register_delay_model("time-varying")
class TimeVaryingRates(DelayModel):
    """Heterogeneous workers with time-varying rates, GC-DC eq. 21, on top of eq. 20.

    ``mu[k, t+1] = (1 - a[t+1]) mu[k, t] + a[t+1] U[0, rate_max]``, ``a ~ Bernoulli(p)`` iid: each
    round a worker re-samples its rate with probability ``p``. Initial rates: with
    ``initial_slow=None`` all ``U(0, rate_max]`` (the stationary law); with an integer, that many
    random workers start ``U(0, tau)`` and the rest ``U[tau, rate_max]`` (GC-DC starts 10 of 20
    this way). A worker is a straggler when ``mu < tau``. Uniform rates are drawn in
    ``(0, rate_max]`` so that no rate is exactly 0 (an infinite time)."""

    summary = "per-worker rates re-sampled U(0, rate_max] with probability p each round (GC-DC eq. 21)"
    param_help = {
        "p": "probability that a worker re-samples its rate at the start of a round",
        "tau": "a worker whose rate is below tau is a straggler",
        "rate_max": "rates are uniform on (0, rate_max]",
        "alpha": "minimum seconds per partition (the shift of eq. 20)",
        "initial_slow": "workers starting with a rate below tau; default: all rates from the stationary law",
        "partitions": _PARTITIONS_HELP,
    }

    def __init__(self, *, p: float = 0.05, tau: float = 1.0, rate_max: float = 5.0, alpha: float = 0.01,
                 initial_slow: int | None = None, partitions: int | None = None, **common):
        self.p = check_real("p", p, minimum=0.0, maximum=1.0)
        self.rate_max = check_real("rate_max", rate_max, minimum=0.0, strict_min=True)
        self.tau = check_real("tau", tau, minimum=0.0, maximum=self.rate_max)
        self.alpha = check_real("alpha", alpha, minimum=0.0)
        self.initial_slow = _opt_int("initial_slow", initial_slow, 0)
        self.partitions = _opt_int("partitions", partitions, 1)
        super().__init__(dict(p=self.p, tau=self.tau, rate_max=self.rate_max, alpha=self.alpha,
                              initial_slow=self.initial_slow, partitions=self.partitions), **common)

    def _draw(self, rounds, n, rng):
        _check_count("initial_slow", self.initial_slow, n)
        P = _partitions(self.partitions, n)
        if self.initial_slow is None:
            mu0 = _positive_uniform(rng, self.rate_max, n)
        else:
            slow = _pick_per_round(rng, 1, n, self.initial_slow)[0]
            low = _positive_uniform(rng, self.tau, n) if self.tau > 0 else np.zeros(n)
            # U[tau, rate_max] for the others
            high = self.tau + (self.rate_max - self.tau) * rng.random(n)
            mu0 = np.where(slow, low, high)
            if self.tau > 0:  # (0, tau] -> keep strictly below tau for the designated stragglers
                mu0 = np.where(slow & (mu0 >= self.tau), np.nextafter(self.tau, 0), mu0)
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


@register_delay_model("shared-access")
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

    def __init__(self, *, arrival_rate: float = 0.1, stay_min: int = 2, stay_max: int = 5, capacity: int = 10,
                 latency_min: float = 0.02, latency_max: float = 0.2, gamma: int = 7, warmup: int = 20,
                 partitions: int | None = None, **common):
        self.arrival_rate = check_real("arrival_rate", arrival_rate, minimum=0.0)
        self.stay_min = check_int("stay_min", stay_min, minimum=1)
        self.stay_max = check_int("stay_max", stay_max, minimum=self.stay_min)
        self.capacity = check_int("capacity", capacity, minimum=1)
        self.latency_min = check_real("latency_min", latency_min, minimum=0.0)
        self.latency_max = check_real("latency_max", latency_max, minimum=self.latency_min)
        self.gamma = check_int("gamma", gamma, minimum=1)
        self.warmup = check_int("warmup", warmup, minimum=0)
        self.partitions = _opt_int("partitions", partitions, 1)
        super().__init__(dict(arrival_rate=self.arrival_rate, stay_min=self.stay_min, stay_max=self.stay_max,
                              capacity=self.capacity, latency_min=self.latency_min,
                              latency_max=self.latency_max, gamma=self.gamma, warmup=self.warmup,
                              partitions=self.partitions), **common)

    def latency(self, m):
        """Seconds per partition with ``m`` tasks (ours included) on the worker."""
        m = np.asarray(m, dtype=np.float64)
        if self.capacity == 1:
            return np.full(m.shape, self.latency_min) if m.ndim else self.latency_min
        return self.latency_min + (self.latency_max - self.latency_min) * (m - 1) / (self.capacity - 1)

    def occupancy(self, rounds: int, n: int, rng=None) -> np.ndarray:
        """``(rounds, n)`` number of tasks on each worker, ours included (what :meth:`draw` uses)."""
        rng = as_generator(rng)
        slots = self.capacity - 1  # room for other users' tasks
        remaining = np.zeros((n, slots), dtype=np.int64)  # rounds left for each occupied slot (0 = free)
        out = np.empty((rounds, n), dtype=np.int64)
        for t in range(-self.warmup, rounds):
            arrivals = rng.poisson(self.arrival_rate, n)
            stays = rng.integers(self.stay_min, self.stay_max + 1, size=(n, slots))
            free = remaining == 0
            # admit min(arrivals, free slots) tasks into the first free slots of each worker
            rank = np.cumsum(free, axis=1)
            admit = free & (rank <= arrivals[:, None])
            remaining = np.where(admit, stays, remaining)
            if t >= 0:
                out[t] = 1 + (remaining > 0).sum(axis=1)
            np.subtract(remaining, 1, out=remaining, where=remaining > 0)
        return out

    def _draw(self, rounds, n, rng):
        P = _partitions(self.partitions, n)
        m = self.occupancy(rounds, n, rng)
        slope = P * self.latency(m)
        return Draw(np.zeros((rounds, n)), slope, m >= self.gamma)


# --------------------------------------------------------------------------- trace replay


@register_delay_model("trace")
class TraceDelays(DelayModel):
    """Replay a ``(rounds, workers)`` array of seconds (a measured delay profile).

    Round ``t`` of a draw is row ``offset + t`` of the trace (modulo its length when ``wrap``),
    and the first ``n`` columns are the ``n`` workers (the trace must have at least ``n``). The
    randomness argument is ignored: a trace is deterministic.

    Load: with ``trace_load=None`` the recorded times are replayed as they are, whatever the load
    asked for. With ``trace_load = L0`` (the load the trace was recorded at; SGC records its
    reference profile uncoded, ``L0 = 1 / n``) a load ``L`` is handled by SGC App. J's linear rule,
    ``delay + (L - L0) * load_slope`` (``load_slope``: seconds per unit load, the slope of the
    linear fit of mean run time against load, see :func:`gradcode.stragglers.fit_load_slope`), or,
    without ``load_slope``, by proportional scaling ``delay * L / L0``. Times are clipped at 0.
    """

    summary = "replay a (rounds, workers) array of measured seconds, load-adjusted by SGC App. J"
    param_help = {
        "delays": "(rounds, workers) array of seconds (or give path)",
        "path": "file to read the trace from (.npy, .csv or an SGC pickle), instead of delays",
        "trace_load": "load the trace was recorded at; default: replay times as they are",
        "load_slope": "seconds per unit load for SGC App. J's additive adjustment; default: proportional",
        "offset": "trace row replayed in round 0",
        "wrap": "start over at the first row when the trace runs out (otherwise an error)",
    }

    def __init__(self, *, delays=None, path=None, trace_load: float | None = None,
                 load_slope: float | None = None, offset: int = 0, wrap: bool = False, **common):
        from gradcode.errors import TraceError
        from gradcode.stragglers.traces import load_trace, validate_trace

        if (delays is None) == (path is None):
            raise TypeError("trace needs exactly one of delays (an array of seconds) or path (a trace file)")
        if path is not None:
            arr = load_trace(path)
            source = str(path)
        else:
            try:
                arr = validate_trace(delays, source="delays")
            except TraceError as exc:
                raise ValueError(str(exc)) from None
            source = None
        arr = np.array(arr, dtype=np.float64)
        arr.flags.writeable = False
        self.delays = arr
        self.path = source
        self.trace_load = None if trace_load is None else check_real(
            "trace_load", trace_load, minimum=0.0, strict_min=True)
        self.load_slope = None if load_slope is None else check_real("load_slope", load_slope)
        if self.load_slope is not None and self.trace_load is None:
            raise ValueError("load_slope needs trace_load (the load the trace was recorded at)")
        self.offset = check_int("offset", offset, minimum=0)
        if not isinstance(wrap, (bool, np.bool_)):
            raise TypeError(f"wrap must be True or False, got {wrap!r}")
        self.wrap = bool(wrap)
        params = dict(delays=arr if source is None else None, path=source, trace_load=self.trace_load,
                      load_slope=self.load_slope, offset=self.offset, wrap=self.wrap)
        super().__init__(params, **common)

    def __repr__(self) -> str:
        shown = [f"rounds={self.delays.shape[0]}", f"workers={self.delays.shape[1]}"]
        if self.path:
            shown.append(f"path={self.path!r}")
        shown += [f"{k}={_short(v)}" for k, v in self._params.items()
                  if k not in ("delays", "path") and v is not None and v is not False and v != 0]
        return f"<{type(self).__name__} {' '.join(shown)}>"

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return np.array_equal(self.delays, other.delays) and all(
            self._params[k] == other._params[k] for k in self._params if k not in ("delays", "path"))

    def __hash__(self):
        return hash((type(self).__name__, self.delays.shape, self.delays.tobytes()))

    def _draw(self, rounds, n, rng):
        T, W = self.delays.shape
        if n > W:
            raise ValueError(f"the trace has {W} workers, fewer than the n={n} asked for")
        if not self.wrap and self.offset + rounds > T:
            raise ValueError(
                f"the trace has {T} rounds; rounds={rounds} from offset={self.offset} needs"
                f" {self.offset + rounds} (pass wrap=True to start over)"
            )
        rows = (self.offset + np.arange(rounds)) % T
        d = self.delays[rows][:, :n]
        if self.trace_load is None:
            intercept, slope = d.copy(), np.zeros((rounds, n))
        elif self.load_slope is None:
            intercept, slope = np.zeros((rounds, n)), d / self.trace_load
        else:
            intercept = d - self.trace_load * self.load_slope
            slope = np.full((rounds, n), self.load_slope)
        return Draw(intercept, slope, np.zeros((rounds, n), dtype=bool))
