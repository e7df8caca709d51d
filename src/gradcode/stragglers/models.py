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

A model is a small immutable value (a frozen dataclass whose fields are its parameters, checked
when it is built), registered by name in :data:`DELAY_MODELS` and built by
:func:`make_delay_model`. Load conventions, model by model (each follows its paper):

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
* ``gilbert-elliot`` (GC-DC Sec. VI-A; SGC App. C; :class:`GilbertElliot`): eq. 20 with a rate
  that depends on a two-state Markov chain per worker (fast rate ``mu_fast``, slow rate
  ``mu_slow``); the state switches at the beginning of each round with probability ``p_switch``
  (fast -> slow) and ``p_recover`` (slow -> fast; defaults to ``p_switch``, the symmetric chain of
  GC-DC).
* ``gilbert-elliot-het`` (GC-DC Sec. VI-B1; :class:`GilbertElliotHet`): the same chain, with
  per-worker rates ``mu_f ~ U[0, rate_max]`` drawn once per draw and ``mu_s = mu_f / slow_factor``;
  a worker is a straggler when its current rate is below the threshold ``tau``. The name
  ``gilbert-elliot`` with ``heterogeneous=True`` builds this class too (the flag is kept for
  callers of the time when one class held both variants).
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

Communication (AGC Sec. VII assumption 2, CommFR-GC) is a component composed onto any model
rather than a parameter of each: :func:`with_communication` wraps a model in
:class:`WithCommunication`, whose messages take ``comm_latency + comm * f`` seconds for a message
a fraction ``f`` of the gradient long (:meth:`DelayModel.message_time`; 0 for a model without the
component), while its compute times are the wrapped model's, draw for draw. Every registry name
accepts ``comm=`` and ``comm_latency=`` (both default 0) and :func:`make_delay_model` applies them
this way, so ``make_delay_model("shifted-exp", comm=0.5)`` is
``with_communication(make_delay_model("shifted-exp"), comm=0.5)``.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from gradcode._validation import as_generator, check_choice, check_int, check_real
from gradcode.registry import Registry

__all__ = [
    "DELAY_MODELS",
    "BernoulliDelay",
    "DelayModel",
    "Draw",
    "FixedDelay",
    "GilbertElliot",
    "GilbertElliotHet",
    "PartialStragglers",
    "SharedAccess",
    "ShiftedExponential",
    "TimeVaryingRates",
    "TraceDelays",
    "WithCommunication",
    "available_delay_models",
    "make_delay_model",
    "model_info",
    "register_delay_model",
    "with_communication",
]

#: help for the parameters every registry name accepts (the communication component)
_COMMON_HELP = {
    "comm": "seconds to send a message as long as the full gradient (message time is proportional to length)",
    "comm_latency": "fixed seconds added to every message",
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


@dataclass(frozen=True, repr=False)
class DelayModel:
    """Base class of delay models: a small immutable value built by :func:`make_delay_model`.

    A subclass is a frozen, keyword-only dataclass whose fields are its parameters: its
    ``__post_init__`` validates them (``ValueError``/``TypeError`` naming the parameter, the bad
    value and what is allowed) and stores the normalised values with :meth:`_set`; it implements
    ``_draw(rounds, n, rng) -> Draw``, which :meth:`draw` calls with checked arguments. Equality
    and hashing compare the class and the parameters; assigning an attribute raises
    ``dataclasses.FrozenInstanceError`` (an ``AttributeError``).
    """

    name: ClassVar[str] = "?"
    summary: ClassVar[str] = ""
    param_help: ClassVar[dict[str, str]] = {}

    def _set(self, **values) -> None:
        """Store validated values on the frozen instance (for ``__post_init__`` only)."""
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def params(self) -> dict[str, Any]:
        """The parameters (defaults filled in), in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def compute_model(self) -> DelayModel:
        """The model whose draw this model's :meth:`draw` is: the model itself, or for a
        :class:`WithCommunication` the model it wraps (how a driver that draws in blocks
        recognises the compute-time model under a communication component)."""
        return self

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

    #: rows of a draw are independent and drawn by Generator calls over ``(rounds, n)`` arrays
    #: (numpy fills them in C order), so per-block draws continue the same stream. A subclass
    #: that draws otherwise sets it back to False or overrides :meth:`_blocks`.
    _rows_independent: ClassVar[bool] = False

    def draw_blocks(self, rounds: int, n: int, rng=None, block: int = 8192):
        """Yield ``(a, b, draw)``: the rounds ``a .. b - 1`` of :meth:`draw` in blocks of ``block``
        rounds, equal to the rows ``a:b`` of ``draw(rounds, n, rng)`` and leaving ``rng`` in the
        same state, with memory bounded by the block where the model can stream (row-independent
        models, traces, the Markov models); otherwise one whole draw handed out by slices."""
        rounds = check_int("rounds", rounds, minimum=0)
        n = check_int("n", n, minimum=1)
        block = check_int("block", block, minimum=1)
        gen = as_generator(rng)
        blocks = self._blocks(rounds, n, gen, block) if rounds else None
        if blocks is None:
            full = self.draw(rounds, n, gen)
            for a in range(0, rounds, block):
                b = min(rounds, a + block)
                yield a, b, Draw(full.intercept[a:b], full.slope[a:b], full.straggling[a:b],
                                 None if full.rates is None else full.rates[a:b])
            return
        for a, b, d in blocks:
            _readonly(d.intercept, d.slope, d.straggling, d.rates)
            yield a, b, d

    def _blocks(self, rounds: int, n: int, rng: np.random.Generator, block: int):
        """Hook: an iterator of ``(a, b, Draw)`` blocks equal to the whole draw's rows, or ``None``
        when this model (or this Generator) cannot stream. Default: per-block draws for
        row-independent models."""
        if not self._rows_independent:
            return None
        return ((a, min(rounds, a + block), self._draw(min(rounds, a + block) - a, n, rng))
                for a in range(0, rounds, block))

    def sample(self, rounds: int, n: int, rng=None, load=1.0) -> np.ndarray:
        """``(rounds, n)`` seconds each worker needs in each round to compute ``load`` (the fraction
        of the data it processes: a scalar, an ``(n,)`` or a ``(rounds, n)`` array)."""
        return self.draw(rounds, n, rng).times(load)

    def _draw(self, rounds: int, n: int, rng: np.random.Generator) -> Draw:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------------ communication
    def message_time(self, length_fraction):
        """Seconds to send a message whose length is ``length_fraction`` of the gradient dimension:
        ``comm_latency + comm * length_fraction`` under a communication component
        (:func:`with_communication`), 0 without one. Accepts a scalar (returns a float) or an
        array."""
        if isinstance(length_fraction, numbers.Real) and not isinstance(length_fraction, bool):
            f = float(length_fraction)
            if not np.isfinite(f) or f < 0:
                raise ValueError(f"length_fraction must be a finite number >= 0, got {length_fraction!r}")
            return self._message_time(f)
        arr = np.asarray(length_fraction, dtype=np.float64)
        if not np.isfinite(arr).all() or (arr < 0).any():
            raise ValueError("length_fraction must hold finite numbers >= 0")
        return self._message_time(arr)

    def _message_time(self, f):
        """Hook: message seconds for a checked float or float64 array ``f``; none by default."""
        return np.zeros_like(f) if isinstance(f, np.ndarray) else 0.0

    # ------------------------------------------------------------------ description
    def describe(self) -> dict[str, Any]:
        """Name, parameters and a one-line summary (what ``gradcode models`` shows)."""
        return {
            "name": self.name,
            "params": {k: _jsonable(v) for k, v in self.params.items()},
            "summary": self.summary,
        }

    def __repr__(self) -> str:
        parts = self._repr_parts()
        cls = type(self.compute_model).__name__
        return f"<{cls} {' '.join(parts)}>" if parts else f"<{cls}>"

    def _repr_parts(self, extra=()) -> list[str]:
        """``key=value`` texts of the repr: the parameters, then ``extra`` (a wrapper's), without
        those left at ``None``."""
        return [f"{k}={_short(v)}" for k, v in (*self.params.items(), *extra) if v is not None]


# --------------------------------------------------------------------------- communication


@dataclass(frozen=True, kw_only=True, repr=False)
class WithCommunication(DelayModel):
    """``model`` plus a communication component (AGC Sec. VII assumption 2, CommFR-GC).

    Compute times are ``model``'s, draw for draw (the same Generator calls, so the same seed gives
    the same straggler realisation with or without the component); a message whose length is a
    fraction ``f`` of the gradient dimension takes ``comm_latency + comm * f`` seconds on top of
    whatever ``model`` itself charges (components compose by adding). Built by
    :func:`with_communication`, or by the ``comm=`` / ``comm_latency=`` that every registry name
    accepts."""

    model: DelayModel
    comm: float = 0.0
    comm_latency: float = 0.0

    def __post_init__(self):
        if not isinstance(self.model, DelayModel):
            raise TypeError(
                f"model must be a delay model (make_delay_model), got {self.model!r} ({type(self.model).__name__})"
            )
        self._set(comm=check_real("comm", self.comm, minimum=0.0),
                  comm_latency=check_real("comm_latency", self.comm_latency, minimum=0.0))

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.model.name

    @property
    def summary(self) -> str:  # type: ignore[override]
        return self.model.summary

    @property
    def params(self) -> dict[str, Any]:
        """The wrapped model's parameters, then ``comm`` and ``comm_latency``."""
        return {**self.model.params, "comm": self.comm, "comm_latency": self.comm_latency}

    @property
    def compute_model(self) -> DelayModel:
        return self.model.compute_model

    def _draw(self, rounds, n, rng):
        return self.model._draw(rounds, n, rng)

    def _blocks(self, rounds, n, rng, block):
        return self.model._blocks(rounds, n, rng, block)

    def _message_time(self, f):
        return self.comm_latency + self.comm * f + self.model._message_time(f)

    def _repr_parts(self, extra=()) -> list[str]:
        return self.model._repr_parts((("comm", self.comm), ("comm_latency", self.comm_latency), *extra))


def with_communication(model: DelayModel, *, comm: float = 0.0, comm_latency: float = 0.0) -> DelayModel:
    """``model`` with messages taking ``comm_latency + comm * f`` seconds (``f``: the message's
    length as a fraction of the gradient dimension), as a :class:`WithCommunication`; ``model``
    itself when both are 0 (after checking them), so that a model built with the default
    ``comm=0`` equals, and is drawn exactly like, the same model built without it."""
    comm = check_real("comm", comm, minimum=0.0)
    comm_latency = check_real("comm_latency", comm_latency, minimum=0.0)
    if not isinstance(model, DelayModel):
        raise TypeError(f"model must be a delay model (make_delay_model), got {model!r} ({type(model).__name__})")
    if comm == 0.0 and comm_latency == 0.0:
        return model
    return WithCommunication(model=model, comm=comm, comm_latency=comm_latency)


# --------------------------------------------------------------------------- the registry

#: Every delay model by name: ``DELAY_MODELS.make(name, **params)`` (= :func:`make_delay_model`),
#: ``.names()``, ``.parameters(name)``; ``comm`` and ``comm_latency`` are accepted by every name
#: and applied by :func:`with_communication`.
DELAY_MODELS: Registry[DelayModel] = Registry(
    "delay model", common={"comm": 0.0, "comm_latency": 0.0}, wrap=with_communication
)


def register_delay_model(name: str, *, aliases=()):
    """Class decorator adding a delay model to :data:`DELAY_MODELS` under ``name``."""
    return DELAY_MODELS.register(name, aliases=aliases)


def available_delay_models() -> list[str]:
    """The names accepted by :func:`make_delay_model`, sorted."""
    return DELAY_MODELS.names(aliases=True)


def make_delay_model(name: str, /, **params) -> DelayModel:
    """Build the delay model registered as ``name`` with its keyword parameters, e.g.
    ``make_delay_model("shifted-exp", mu=1.0, alpha=0.01)``; ``comm`` / ``comm_latency`` add a
    communication component (:func:`with_communication`).

    Raises ``ValueError`` listing the available names on an unknown name, and
    :class:`~gradcode.registry.ParameterError` (a ``ValueError`` and a ``TypeError``) listing the
    accepted parameters on an unknown parameter."""
    return DELAY_MODELS.make(name, **params)


def model_info(name: str) -> dict[str, Any]:
    """Registry entry ``name``: summary line, parameters with their defaults (``None`` when there
    is none) and one-line help for each (what ``gradcode models`` shows)."""
    info = DELAY_MODELS.info(name)
    helps = {**getattr(DELAY_MODELS.get(name), "param_help", {}), **_COMMON_HELP}
    info["help"] = {k: helps.get(k, "") for k in info["params"]}
    return info


def _short(v):
    if isinstance(v, np.ndarray):
        return f"array{v.shape}"
    if isinstance(v, float):
        return f"{v:g}"
    return repr(v) if isinstance(v, str) else v


def _jsonable(v):
    if isinstance(v, np.ndarray):
        return f"array of shape {v.shape}"
    return v


def _opt_int(name, value, minimum):
    return None if value is None else check_int(name, value, minimum=minimum)


def _check_bool(name, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _partitions(partitions, n):
    return n if partitions is None else partitions


def _check_count(name, value, n):
    if value is not None and value > n:
        raise ValueError(f"{name}={value} exceeds the number of workers n={n}")


_PARTITIONS_HELP = (
    "data partitions a load of 1 stands for: a worker with load r/partitions computes r partial"
    " gradients (default: the number of workers n, as in GC-DC)"
)

#: the dataclass options of every concrete model
_MODEL = dict(frozen=True, kw_only=True, repr=False)

# --------------------------------------------------------------------------- Tandon's models


@register_delay_model("fixed")
@dataclass(**_MODEL)
class FixedDelay(DelayModel):
    """s random workers per round are delayed by a constant (Tandon et al., Sec. 5)."""

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

    Workers with rates of their own are :class:`GilbertElliotHet`. Registered as
    ``gilbert-elliot`` through :func:`gilbert_elliot`, which also builds the heterogeneous model
    when given ``heterogeneous=True``.
    """

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


@register_delay_model("gilbert-elliot")
def gilbert_elliot(
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
) -> GilbertElliot | GilbertElliotHet:
    """The ``gilbert-elliot`` name: :class:`GilbertElliot`, or with ``heterogeneous=True``
    :class:`GilbertElliotHet` (then ``mu_fast`` and ``mu_slow`` are unused, as ``rate_max``,
    ``slow_factor`` and ``tau`` are without it).

    The flag predates the two classes; it is kept so that existing calls and ``--model-param
    heterogeneous=true`` keep working, and the name lists the parameters it has always listed.
    """
    chain = dict(p_switch=p_switch, p_recover=p_recover, alpha=alpha, initial_slow=initial_slow,
                 partitions=partitions)
    if _check_bool("heterogeneous", heterogeneous):
        return GilbertElliotHet(**chain, rate_max=rate_max, slow_factor=slow_factor, tau=tau)
    return GilbertElliot(mu_fast=mu_fast, mu_slow=mu_slow, **chain)


gilbert_elliot.summary = GilbertElliot.summary
gilbert_elliot.param_help = {
    **GilbertElliot.param_help,
    "heterogeneous": "per-worker rates mu_f ~ U(0, rate_max], mu_s = mu_f / slow_factor (GC-DC VI-B1)",
    **_HET_HELP,
}


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


@register_delay_model("trace")
@dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class TraceDelays(DelayModel):
    """Replay a ``(rounds, workers)`` array of seconds (a measured delay profile).

    Round ``t`` of a draw is row ``offset + t`` of the trace (modulo its length when ``wrap``),
    and its columns are the ``n`` workers: a trace of ``W`` workers replays ``n = W`` exactly (a
    smaller ``n`` would drop the other workers' times, and with them their stragglers, SGC Sec. 2),
    unless ``subset=True`` asks for its first ``n`` columns. The randomness argument is ignored: a
    trace is deterministic.

    Load: with ``trace_load=None`` the recorded times are replayed as they are, whatever the load
    asked for. With ``trace_load = L0`` (the load the trace was recorded at, ``>= 0``; SGC records
    its reference profile uncoded, ``L0 = 1 / n``) a load ``L`` is handled by SGC App. J's additive
    rule, ``delay + (L - L0) * load_slope`` (``load_slope``: seconds per unit load, the slope of
    the linear fit of mean run time against load, :func:`gradcode.stragglers.fit_load_slope`; on
    the command line ``--load-slope``, or fitted from ``--trace FILE --trace-load L`` given for
    several loads). ``trace_load`` without ``load_slope`` is refused: the slope cannot be guessed,
    and scaling a trace by ``L / L0`` instead charges a scheme's whole recorded time (communication
    and fixed costs included) for its extra data: at ``L0 = 1/n`` it makes CRC with ``s = 15``
    sixteen times slower than the uncoded run. That proportional rule, ``delay * L / L0`` (times
    that are pure compute at a constant rate), is there only by name: ``load_rule="proportional"``
    (with ``trace_load > 0`` and no slope). Times are clipped at 0.

    Built from ``path``, the model holds the trace read from the file in ``delays`` and the path
    (as a string) in ``path``; two traces are equal when their arrays and load rules are, wherever
    they were read from.
    """

    summary = "replay a (rounds, workers) array of measured seconds, load-adjusted by SGC App. J"
    param_help = {
        "delays": "(rounds, workers) array of seconds (or give path)",
        "path": "file to read the trace from (.npy, .csv or an SGC pickle), instead of delays",
        "trace_load": "load the trace was recorded at (needs load_slope); default: replay times as they are",
        "load_slope": "seconds per unit load: SGC App. J's additive adjustment delay + (L - trace_load) * load_slope",
        "load_rule": "'additive' (SGC App. J, needs load_slope) or 'proportional' (delay * L / trace_load)",
        "offset": "trace row replayed in round 0",
        "wrap": "start over at the first row when the trace runs out (otherwise an error)",
        "subset": "replay the first n workers of a wider trace (otherwise n must be its number of workers)",
    }

    delays: Any = None
    path: Any = None
    trace_load: float | None = None
    load_slope: float | None = None
    load_rule: str = "additive"
    offset: int = 0
    wrap: bool = False
    subset: bool = False

    def __post_init__(self):
        from gradcode.errors import TraceError
        from gradcode.stragglers.traces import load_trace, validate_trace

        if (self.delays is None) == (self.path is None):
            raise TypeError("trace needs exactly one of delays (an array of seconds) or path (a trace file)")
        if self.path is not None:
            arr = load_trace(self.path)
            source = str(self.path)
        else:
            try:
                arr = validate_trace(self.delays, source="delays")
            except TraceError as exc:
                raise ValueError(str(exc)) from None
            source = None
        arr = np.array(arr, dtype=np.float64)
        arr.flags.writeable = False
        trace_load = None if self.trace_load is None else check_real("trace_load", self.trace_load, minimum=0.0)
        load_slope = None if self.load_slope is None else check_real("load_slope", self.load_slope)
        rule = check_choice("load_rule", self.load_rule, ("additive", "proportional"))
        if load_slope is not None and trace_load is None:
            raise ValueError("load_slope needs trace_load (the load the trace was recorded at)")
        if rule == "proportional":
            if load_slope is not None:
                raise ValueError("load_rule='proportional' scales delays by L / trace_load and takes no load_slope;"
                                 " drop load_slope, or drop load_rule for the additive rule that uses it")
            if trace_load is None or trace_load == 0:
                raise ValueError("load_rule='proportional' needs trace_load > 0 (the load the trace was recorded"
                                 f" at), got trace_load={trace_load}")
        elif trace_load is not None and load_slope is None:
            raise ValueError(
                f"trace_load={trace_load:g} without load_slope: a trace is adjusted to a scheme's load L by SGC"
                " App. J's additive rule, delay + (L - trace_load) * load_slope, which needs the slope (seconds"
                " per unit load). Give load_slope (simulate/compare: --load-slope A; train: --delay-param"
                " load_slope=A), or fit it from profiles measured at two or more loads"
                " (gradcode.stragglers.fit_load_slope; simulate/compare: --trace F1 --trace-load L1 --trace F2"
                " --trace-load L2), or pass load_rule='proportional' to scale delays by L / trace_load instead")
        self._set(delays=arr, path=source, trace_load=trace_load, load_slope=load_slope, load_rule=rule,
                  offset=check_int("offset", self.offset, minimum=0), wrap=_check_bool("wrap", self.wrap),
                  subset=_check_bool("subset", self.subset))

    @property
    def params(self) -> dict[str, Any]:
        """The parameters; ``delays`` is ``None`` for a trace read from ``path``."""
        p = super().params
        if self.path is not None:
            p["delays"] = None
        return p

    def _load_rule(self) -> tuple:
        return (self.trace_load, self.load_slope, self.load_rule, self.offset, self.wrap, self.subset)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return np.array_equal(self.delays, other.delays) and self._load_rule() == other._load_rule()

    def __hash__(self):
        return hash((type(self).__name__, self.delays.shape, self.delays.tobytes()))

    def _repr_parts(self, extra=()) -> list[str]:
        shown = [f"rounds={self.delays.shape[0]}", f"workers={self.delays.shape[1]}"]
        if self.path:
            shown.append(f"path={self.path!r}")
        items = [(k, v) for k, v in self.params.items() if k not in ("delays", "path")
                 and not (k == "load_rule" and v == "additive")]
        # trace_load=0 is a load (the Fig. 16 intercept), not an unset option
        shown += [f"{k}={_short(v)}" for k, v in (*items, *extra)
                  if v is not None and v is not False and (v != 0 or k == "trace_load")]
        return shown

    def _blocks(self, rounds, n, rng, block):
        """The rows ``offset + a .. offset + b - 1`` (modulo the trace when ``wrap``), replayed by a
        trace over just those rows with the same load rule; ``None`` (so the whole draw raises its
        own error) when the trace is too short or too narrow."""
        T, W = self.delays.shape
        if n > W or (n < W and not self.subset) or (not self.wrap and self.offset + rounds > T):
            return None

        def blocks():
            for a in range(0, rounds, block):
                b = min(rounds, a + block)
                rows = (self.offset + np.arange(a, b)) % T
                part = TraceDelays(delays=self.delays[rows, :n], trace_load=self.trace_load,
                                   load_slope=self.load_slope, load_rule=self.load_rule)
                yield a, b, part.draw(b - a, n)

        return blocks()

    def _draw(self, rounds, n, rng):
        T, W = self.delays.shape
        if n > W:
            raise ValueError(f"the trace has {W} workers, fewer than the n={n} asked for")
        if n < W and not self.subset:
            raise ValueError(f"the trace has {W} workers but n={n} was asked for: replaying it would drop the"
                             f" times of its last {W - n} workers; use a trace of {n} workers, or pass subset=True"
                             f" to replay its first {n}")
        if not self.wrap and self.offset + rounds > T:
            raise ValueError(
                f"the trace has {T} rounds; rounds={rounds} from offset={self.offset} needs"
                f" {self.offset + rounds} (pass wrap=True to start over)"
            )
        rows = (self.offset + np.arange(rounds)) % T
        d = self.delays[rows][:, :n]
        if self.trace_load is None:
            intercept, slope = d.copy(), np.zeros((rounds, n))
        elif self.load_rule == "proportional":
            intercept, slope = np.zeros((rounds, n)), d / self.trace_load
        else:
            intercept = d - self.trace_load * self.load_slope
            slope = np.full((rounds, n), self.load_slope)
        return Draw(intercept, slope, np.zeros((rounds, n), dtype=bool))
