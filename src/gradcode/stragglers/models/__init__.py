"""Delay models: per-round, per-worker compute times as a function of the work each worker does.

The package: :mod:`.base` (:class:`Draw`, :class:`DelayModel`, the communication component, the
registry), :mod:`.simple` (``fixed``, ``bernoulli``, ``partial``, ``shifted-exp``), :mod:`.markov`
(``gilbert-elliot``, ``gilbert-elliot-het`` and the block-streaming helpers), :mod:`.time_varying`,
:mod:`.shared_access` and :mod:`.trace`. A new module of this package that registers a model with
:func:`register_delay_model` is found by the registry on first use.

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
  a worker is a straggler when its current rate is below the threshold ``tau``.
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

from gradcode.stragglers.models.base import (
    DELAY_MODELS,
    DelayModel,
    Draw,
    WithCommunication,
    available_delay_models,
    make_delay_model,
    model_info,
    register_delay_model,
    with_communication,
)
from gradcode.stragglers.models.markov import GilbertElliot, GilbertElliotHet
from gradcode.stragglers.models.shared_access import SharedAccess
from gradcode.stragglers.models.simple import BernoulliDelay, FixedDelay, PartialStragglers, ShiftedExponential
from gradcode.stragglers.models.time_varying import TimeVaryingRates
from gradcode.stragglers.models.trace import TraceDelays

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
