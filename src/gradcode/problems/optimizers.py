"""Optimizers as small pure values (optax-style): ``init(params) -> state`` and
``step(params, grad, state, t) -> (new_params, new_state)``.

``grad`` is the gradient of the full objective at ``params`` (``Problem.full_gradient``), ``t`` the
0-based step number. Nothing is mutated: a step returns new arrays, so a checkpoint of
``(params, state, t)`` resumes a run exactly. States are tuples of float64 arrays (picklable).

Tandon et al. (ICML 2017), Section 5 / Fig. 7: with gradient coding the master has the exact
full gradient and uses Nesterov's accelerated gradient with a constant learning rate; when
stragglers are ignored the gradient is stochastic and they use SGD with learning rate
``c1 / (t + c2)``, c1 and c2 tuned. Registered (``available_optimizers()``):

``gd``        ``w_{t+1} = w_t - lr * grad(w_t)``.
``nesterov``  Nesterov's accelerated gradient, constant step ``lr``. With ``y_0 = w_0``:
              ``y_{t+1} = w_t - lr * grad(w_t)``; ``w_{t+1} = y_{t+1} + mu_t (y_{t+1} - y_t)``,
              where ``mu_t = t / (t + 3)`` (the convex schedule (k - 1)/(k + 2) of Nesterov 1983 /
              Beck-Teboulle with k = t + 1) unless a constant ``momentum`` in [0, 1) is given
              (e.g. ``(1 - sqrt(m/L)) / (1 + sqrt(m/L))`` for an m-strongly convex, L-smooth F).
              The gradient is always taken at the point ``w_t`` that is sent to the workers; the
              state holds ``y_t``.
``sgd``       ``w_{t+1} = w_t - c1 / (t + c2) * grad(w_t)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradcode._validation import check_int, check_real
from gradcode.registry import Registry

#: Every optimizer by name: ``OPTIMIZERS.make(name, **params)`` (= :func:`make_optimizer`),
#: ``.names()``, ``.parameters(name)`` (the dataclass fields).
OPTIMIZERS: Registry[Optimizer] = Registry("optimizer")


def register_optimizer(name: str, *, aliases=()):
    """Decorator adding an optimizer (a frozen dataclass, or a factory) to :data:`OPTIMIZERS`."""
    return OPTIMIZERS.register(name, aliases=aliases)


def available_optimizers() -> tuple[str, ...]:
    """The names accepted by :func:`make_optimizer`, sorted."""
    return tuple(OPTIMIZERS.names(aliases=True))


def make_optimizer(name: str, **params) -> Optimizer:
    """``make_optimizer('gd', lr=0.1)``, ``('nesterov', lr=0.1[, momentum=0.9])``, ``('sgd', c1=1, c2=10)``.

    An unknown parameter raises :class:`~gradcode.registry.ParameterError` (a ``ValueError``)
    naming the optimizer's accepted ones (``sgd`` has no ``lr``: its steps are ``c1 / (t + c2)``)."""
    return OPTIMIZERS.make(name, **params)


def _vec(name, value, shape=None) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a 1-D real vector, got shape {arr.shape} dtype {arr.dtype}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name} has shape {arr.shape}, but params have shape {shape}")
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite; {int(np.sum(~np.isfinite(arr)))} entries are not")
    return arr


@dataclass(frozen=True)
class Optimizer:
    """Base: validates ``params``, ``grad``, ``state`` and ``t``, then calls ``_step``."""

    name = "optimizer"

    def init(self, params) -> tuple:
        return ()

    def learning_rate(self, t: int) -> float:
        raise NotImplementedError

    def step(self, params, grad, state, t: int):
        w = _vec("params", params)
        g = _vec("grad", grad, w.shape)
        t = check_int("t", t, minimum=0)
        if not isinstance(state, tuple):
            raise TypeError(f"state must be the tuple returned by init(), got {type(state).__name__}")
        return self._step(w, g, state, t)

    def _step(self, w, g, state, t):
        return w - self.learning_rate(t) * g, state


@register_optimizer("gd")
@dataclass(frozen=True)
class GD(Optimizer):
    """Gradient descent with a constant step: ``w - lr * grad``."""

    lr: float = 0.1
    name = "gd"

    def __post_init__(self):
        check_real("lr", self.lr, minimum=0.0, strict_min=True)

    def learning_rate(self, t):
        return float(self.lr)


@register_optimizer("sgd")
@dataclass(frozen=True)
class SGD(Optimizer):
    """Steps ``c1 / (t + c2)`` (Tandon et al., Fig. 7, for ignore-stragglers)."""

    c1: float = 1.0
    c2: float = 1.0
    name = "sgd"

    def __post_init__(self):
        check_real("c1", self.c1, minimum=0.0, strict_min=True)
        check_real("c2", self.c2, minimum=0.0, strict_min=True)

    def learning_rate(self, t):
        return float(self.c1) / (t + float(self.c2))


@register_optimizer("nesterov")
@dataclass(frozen=True)
class Nesterov(Optimizer):
    """Nesterov's accelerated gradient with a constant step (see the module docstring)."""

    lr: float = 0.1
    momentum: float | None = None
    name = "nesterov"

    def __post_init__(self):
        check_real("lr", self.lr, minimum=0.0, strict_min=True)
        if self.momentum is not None:
            check_real("momentum", self.momentum, minimum=0.0, maximum=1.0, strict_max=True)

    def learning_rate(self, t):
        return float(self.lr)

    def momentum_at(self, t: int) -> float:
        return float(self.momentum) if self.momentum is not None else t / (t + 3.0)

    def init(self, params):
        return (_vec("params", params).copy(),)

    def _step(self, w, g, state, t):
        if len(state) != 1:
            raise ValueError("nesterov state must be the 1-tuple (y_t,) returned by init()")
        y_prev = _vec("state[0]", state[0], w.shape)
        y = w - self.lr * g
        return y + self.momentum_at(t) * (y - y_prev), (y,)
