"""Straggler models: random delay models, deterministic straggler patterns, and traces.

* :func:`make_delay_model` / :func:`available_delay_models`: per-round, per-worker compute times
  for a given load (``fixed``, ``bernoulli``, ``partial``, ``shifted-exp``, ``gilbert-elliot``,
  ``gilbert-elliot-het``, ``time-varying``, ``shared-access``, ``trace``), each with an optional
  communication-time component; see :mod:`gradcode.stragglers.models`.
* :mod:`gradcode.stragglers.patterns`: the (B, W, lambda)-bursty, (N, W', lambda')-arbitrary and
  s-per-round models of the SGC paper: generators and conformance checkers.
* :mod:`gradcode.stragglers.traces`: reading, validating, writing and load-adjusting measured
  delay traces.

Everything here is a pure function of an explicit seed or ``numpy.random.Generator``.
"""

from gradcode.stragglers.models import (
    DelayModel,
    Draw,
    available_delay_models,
    make_delay_model,
    model_info,
    register_delay_model,
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
    adjust_trace_load,
    fit_load_slope,
    load_trace,
    save_trace,
    validate_trace,
)

__all__ = [
    "Conformance",
    "DelayModel",
    "Draw",
    "adjust_trace_load",
    "arbitrary_pattern",
    "available_delay_models",
    "bursty_pattern",
    "check_arbitrary",
    "check_bursty",
    "check_per_round",
    "fit_load_slope",
    "load_trace",
    "make_delay_model",
    "model_info",
    "per_round_pattern",
    "register_delay_model",
    "save_trace",
    "validate_trace",
]
