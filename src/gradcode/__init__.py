"""gradcode: gradient coding for straggler-tolerant synchronous distributed gradient descent.

Layers (see docs/architecture.md): ``codes`` (placement, encode, decode), ``stragglers`` (delay models and
traces), ``schemes`` (the round protocol), ``sim`` and ``runtime`` (the two drivers), ``problems``
(models, data, optimizers, metrics) and ``experiments`` (what the CLI runs).

The top-level names are resolved lazily so that ``import gradcode`` stays cheap and never imports
the engine (Ray) or optional extras.
"""

from gradcode._lazy import lazy_names
from gradcode.errors import GradcodeError, NotDecodableError, StopTraining, TraceError

__version__ = "0.2.0"

_LAZY = {
    "make_code": "gradcode.codes",
    "available_codes": "gradcode.codes",
    "code_info": "gradcode.codes",
    "LinearCode": "gradcode.codes",
    "make_delay_model": "gradcode.stragglers",
    "available_delay_models": "gradcode.stragglers",
    "load_trace": "gradcode.stragglers",
    "simulate": "gradcode.sim",
    "train": "gradcode.runtime",
    "TrainSpec": "gradcode.runtime",
    "RunConfig": "gradcode.runtime",
    "FaultConfig": "gradcode.runtime",
    "ClusterConfig": "gradcode.runtime",
    "DataSpec": "gradcode.problems",
    "make_dataset": "gradcode.problems",
    "make_problem": "gradcode.problems",
    "make_optimizer": "gradcode.problems",
}

__all__ = ["GradcodeError", "NotDecodableError", "StopTraining", "TraceError", "__version__", *_LAZY]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
