"""What every delay model shares: :class:`Draw`, the :class:`DelayModel` base class, the
communication component (:class:`WithCommunication`), the registry :data:`DELAY_MODELS` and the
parameter checks. The models and their load conventions: :mod:`gradcode.stragglers.models`."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar


import numpy as np

from gradcode._validation import as_generator, check_int, check_real
from gradcode.registry import Registry, package_modules

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
    #: valid parameter sets of a registered model: the model tests (``tests/test_delay_models.py``)
    #: build and check each, so a model joins them by registering; a registered model declares its own
    examples: ClassVar[tuple[dict, ...]] = ()

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
    "delay model", common={"comm": 0.0, "comm_latency": 0.0}, wrap=with_communication,
    # every module of this package registers its models when first needed: a new module needs
    # no edit elsewhere
    modules=package_modules(__file__),
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
