"""Schemes: the master's logic round by round (see ``schemes.base`` for the protocol).

:class:`StaticScheme` runs any linear code (job ``t`` in round ``t``); dynamic and sequential
schemes (GC-DC, SR-SGC, M-SGC) implement the same :class:`Scheme` interface.
"""

from gradcode.schemes.base import PROTOCOL, ProtocolError, Scheme, Task, as_scheme
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
    "PerGroup",
    "ProtocolError",
    "Scheme",
    "StaticScheme",
    "Task",
    "as_scheme",
    "decode_rule",
    "task_schedule",
]
