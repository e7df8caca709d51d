"""Gradient codes: one linear code per job (one gradient): placement, encoding and decoding.

What this layer owns. A code is a small immutable object (:class:`LinearCode`, ``codes.base``):
which partitions each worker stores, the encoding tensors of its messages, and the decoder that
turns any sufficient set of message prefixes into the exact gradient, checking every answer
against the real encoder rows. Each family has a module (``tandon``: baselines, FRC, CRC,
partial; ``clustering``: GC-SC; ``commfr``: CommFR-GC; ``adaptive``: CGC, AGC, group codes);
shared pieces have theirs (``messages``: a message as a worker sends it, with the scale its error
bound needs, and the compiled sums that decode at memory speed; ``linalg``: the solves; ``rules``: decodability as closed rules;
``compose``: direct sums and sequences of codes; ``verify``: corrupted-worker detection;
``stability``: condition measures and the papers' analytic thresholds).

What it may import: numpy, scipy and ``gradcode.errors`` / ``gradcode._validation`` only. No
clocks, no engine, no I/O: the layers above (``schemes``, the drivers) import codes, never the
reverse. Randomness comes only from explicit seeds or Generators.

Importing this package registers every code family; ``make_code(name, **params)`` builds one.
"""

from gradcode.codes.base import (
    CODES,
    DEFAULT_MAX_CONDITION,
    DEFAULT_RTOL,
    PLAIN_SUM_SLACK,
    UNIT_ROUNDOFF,
    Decoded,
    Decoding,
    ImpreciseDecodeError,
    LinearCode,
    NonFiniteMessageError,
    available_codes,
    code_info,
    make_code,
    register,
    wire_precision,
)
from gradcode.codes.messages import Message
from gradcode.codes.verify import InconsistentMessagesError, Verification
from gradcode.errors import NotDecodableError

# Each import registers its families with the registry.
from gradcode.codes import tandon  # noqa: E402,F401  uncoded, ignore, frc, crc, partial
from gradcode.codes import clustering  # noqa: E402,F401  gc-sc
from gradcode.codes import commfr, adaptive  # noqa: E402,F401  commfr; cgc, agc, g-agc, g-cgc

__all__ = [
    "CODES",
    "DEFAULT_MAX_CONDITION",
    "DEFAULT_RTOL",
    "PLAIN_SUM_SLACK",
    "UNIT_ROUNDOFF",
    "Decoded",
    "Decoding",
    "ImpreciseDecodeError",
    "InconsistentMessagesError",
    "LinearCode",
    "Message",
    "NonFiniteMessageError",
    "NotDecodableError",
    "Verification",
    "available_codes",
    "code_info",
    "make_code",
    "register",
    "wire_precision",
]
