"""No silently wrong gradient, no lost run (issue 8, items 2-7): what the runtime does when a worker
sends NaN or an overflowing value, when a run stops midway (round timeout, divergence), when the
cluster address answers nothing or the checkpoint is damaged, and when a driver is SIGKILLed.
"""

import numpy as np
import pytest

from gradcode.codes import NonFiniteMessageError, make_code

SEED = 3


# ---------------------------------------------------------------- item 2: non-finite results


def test_decode_names_the_workers_whose_finite_messages_overflow():
    """Finite messages whose weighted sum overflows used to give 'workers [] hold non-finite
    values': the decoder now names the workers whose scaled contribution reaches the overflow."""
    code = make_code("crc", n=6, s=2, seed=SEED)  # decoding coefficients for workers 0-3: 1, 0.6, -2.3, -0.04
    rng = np.random.default_rng(0)
    msgs = {w: rng.standard_normal(5) for w in range(4)}
    msgs[2] = np.full(5, 1e308)  # finite; times -2.3 it is not
    with pytest.raises(NonFiniteMessageError, match=r"workers \[2\]") as info:
        code.decode(msgs, dim=5)
    assert info.value.workers == (2,)
    msgs = {w: rng.standard_normal(5) for w in range(4)}
    msgs[0] = msgs[1] = np.full(5, 1.5e308)  # each contribution finite (1.5e308, 0.9e308), their sum not
    with pytest.raises(NonFiniteMessageError) as info:
        code.decode(msgs, dim=5)
    assert info.value.workers == (0, 1)
