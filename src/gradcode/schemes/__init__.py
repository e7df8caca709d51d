"""Schemes: the master's logic round by round, behind one declared protocol.

What this layer owns. :class:`Scheme` (``schemes.base``) is the protocol both drivers rely on and
on nothing else: ``plan`` a round's tasks, take each message with ``on_result``, say whether the
round is ``ready``, ``close`` it into finished jobs, keep the straggler history, optionally
``observe_states`` (perfect straggler state information) and say how a round's stragglers are
counted. :class:`StaticScheme` runs any code (job ``t`` in round ``t``); GC-DC (``schemes.gcdc``)
re-plans each round's placement; sequential schemes give a worker tasks of several jobs.
``schemes.timing`` holds the one rule for when a worker's messages arrive; ``schemes.factory``
turns a name and its parameters into a scheme.

What it may import: ``gradcode.codes`` and numpy. No clocks, no engine: the drivers (``sim``,
``runtime``) call schemes; schemes never call drivers, and no driver branches on a scheme's class.
"""

from gradcode.schemes.base import (
    PROTOCOL,
    SCHEMES,
    ProtocolError,
    Scheme,
    Task,
)
from gradcode.schemes.factory import as_scheme, available_schemes, make_scheme
from gradcode.schemes.static import (
    AllOf,
    DecodeRule,
    GenericRule,
    KOfN,
    PerGroup,
    StaticScheme,
    decode_rule,
    task_schedule,
)

__all__ = [
    "AllOf",
    "DecodeRule",
    "GenericRule",
    "KOfN",
    "PROTOCOL",
    "SCHEMES",
    "PerGroup",
    "ProtocolError",
    "Scheme",
    "StaticScheme",
    "Task",
    "as_scheme",
    "available_schemes",
    "make_scheme",
    "decode_rule",
    "task_schedule",
]
