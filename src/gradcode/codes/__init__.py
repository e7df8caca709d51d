"""Gradient codes: placement, encoding and decoding of one job (see ``codes.base``).

Importing this package registers every code family; ``make_code(name, **params)`` builds one.
"""

from gradcode.codes.base import (
    DEFAULT_MAX_CONDITION,
    Decoding,
    LinearCode,
    NonFiniteMessageError,
    available_codes,
    code_info,
    make_code,
    register,
)
from gradcode.codes.verify import InconsistentMessagesError, Verification
from gradcode.errors import NotDecodableError

# Each import registers its families with the registry.
from gradcode.codes import tandon  # noqa: E402,F401  uncoded, ignore, frc, crc, partial
from gradcode.codes import clustering  # noqa: E402,F401  gc-sc
from gradcode.codes import commfr, adaptive  # noqa: E402,F401  commfr; cgc, agc, g-agc, g-cgc

__all__ = [
    "DEFAULT_MAX_CONDITION",
    "Decoding",
    "InconsistentMessagesError",
    "LinearCode",
    "NonFiniteMessageError",
    "NotDecodableError",
    "Verification",
    "available_codes",
    "code_info",
    "make_code",
    "register",
]
