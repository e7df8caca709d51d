"""Gradient codes: one linear code per job (one gradient): placement, encoding and decoding.

What this layer owns. A code is a small immutable object (:class:`LinearCode`, ``codes.base``: the
contract and the registry, inheriting ``solving``: how decoding coefficients are found,
``answer_check``: their check against the encoder rows, ``rounds``: who straggled in a round, and
``immutable``; ``lazy``: encoders built when asked for; ``decoding``: what a decoding is and how a
decode sums what arrived; ``precision``: the error bound of a decode and when it is refused;
``cache``: the codes' decoding cache): which partitions each worker stores, the encoding tensors of
its messages, and the decoder that turns any sufficient set of message prefixes into the exact
gradient, checking every answer against the real encoder rows. Each family has a module
(``tandon``: baselines, FRC, CRC, partial; ``clustering``: GC-SC; ``commfr``: CommFR-GC;
``adaptive``: CGC, AGC, group codes); shared pieces have theirs (``messages``: a message as a
worker sends it, with the scale its error bound needs, and the compiled sums that decode at memory
speed; ``linalg``: the solves; ``rules``: decodability as closed rules; ``compose``: direct sums
and sequences of codes; ``verify``: corrupted-worker detection; ``stability``: condition measures
and the papers' analytic thresholds).

What it may import: numpy, scipy and ``gradcode.errors`` / ``gradcode._validation`` only. No
clocks, no engine, no I/O: the layers above (``schemes``, the drivers) import codes, never the
reverse. Randomness comes only from explicit seeds or Generators.

``make_code(name, **params)`` builds a code by name: :data:`CODES` imports every module of this
package the first time it is read (:func:`~gradcode.registry.package_modules`, the rule of every
registry), so a new family is one module that registers its class; docs/architecture.md has the
recipe.
"""

from gradcode.codes.base import (
    CODES,
    DEFAULT_MAX_CONDITION,
    LazyEncoders,
    LinearCode,
    available_codes,
    check_n_s,
    code_info,
    make_code,
    register,
)
from gradcode.codes.decoding import Decoding, NonFiniteMessageError
from gradcode.codes.messages import Message
from gradcode.codes.precision import (
    DEFAULT_RTOL,
    PLAIN_SUM_SLACK,
    UNIT_ROUNDOFF,
    Decoded,
    ImpreciseDecodeError,
    wire_precision,
)
from gradcode.codes.verify import InconsistentMessagesError, Verification
from gradcode.errors import NotDecodableError

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
    "LazyEncoders",
    "LinearCode",
    "Message",
    "NonFiniteMessageError",
    "NotDecodableError",
    "Verification",
    "available_codes",
    "check_n_s",
    "code_info",
    "make_code",
    "register",
    "wire_precision",
]
