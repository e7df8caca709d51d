"""Straggler models: random delay models, deterministic straggler patterns, and traces.

What this layer owns: how long workers take. Delay models give each worker's time in each round
as a function of its load (:mod:`gradcode.stragglers.models`: ``fixed``, ``bernoulli``,
``partial``, ``shifted-exp``, ``gilbert-elliot``, ``gilbert-elliot-het``, ``time-varying``,
``shared-access``, ``trace``, each a frozen dataclass registered in :data:`DELAY_MODELS` and built
by :func:`make_delay_model`; a communication component is composed onto any of them by
:func:`with_communication`); :mod:`gradcode.stragglers.patterns` generates and checks the
(B, W, lambda)-bursty, (N, W', lambda')-arbitrary and s-per-round patterns of the SGC paper;
:mod:`gradcode.stragglers.traces` reads, validates, writes and load-adjusts measured delay traces.

What it may import: numpy, the bottom modules (:mod:`gradcode._validation`,
:mod:`gradcode.errors`, :mod:`gradcode.registry`) and itself; never codes, schemes, problems, the
drivers (sim, runtime) or the engine. It knows nothing of codes: a model sees only a load per
worker, and the drivers turn a code's placement into loads and a :class:`Draw` into arrivals.
Everything here is a pure function of an explicit seed or ``numpy.random.Generator`` (no global
state), so the simulator and the runtime draw the same delays from the same seed.
"""

from gradcode.stragglers.models import (
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
from gradcode.stragglers.patterns import (
    Conformance,
    arbitrary_pattern,
    bursty_pattern,
    check_arbitrary,
    check_bursty,
    check_per_round,
    per_round_pattern,
)
from gradcode.stragglers.traces import (
    LoadFit,
    adjust_trace_load,
    fit_load_line,
    fit_load_slope,
    fit_model_slope,
    load_trace,
    save_trace,
    validate_trace,
)

__all__ = [
    "DELAY_MODELS",
    "Conformance",
    "DelayModel",
    "Draw",
    "LoadFit",
    "WithCommunication",
    "adjust_trace_load",
    "arbitrary_pattern",
    "available_delay_models",
    "bursty_pattern",
    "check_arbitrary",
    "check_bursty",
    "check_per_round",
    "fit_load_line",
    "fit_load_slope",
    "fit_model_slope",
    "load_trace",
    "make_delay_model",
    "model_info",
    "per_round_pattern",
    "register_delay_model",
    "save_trace",
    "validate_trace",
    "with_communication",
]
