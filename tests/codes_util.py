"""Helpers shared by the code tests: small instances of every registered family, and a harness that
encodes random partial gradients and decodes them under a straggler pattern."""

from __future__ import annotations

import itertools


def small_instances() -> dict[str, list[dict]]:
    """Each registered code's own ``examples`` (:attr:`gradcode.LinearCode.examples`): the
    contract suite's instances, so a code joins it by registering."""
    from gradcode.codes import CODES

    return {name: list(CODES.get(name).__dict__.get("examples", ())) for name in CODES.names()}


#: small instances of each registered code family, read from the codes themselves
SMALL_INSTANCES: dict[str, list[dict]] = small_instances()


def instances():
    """(name, params) pairs for every registered code, for pytest parametrization (``None`` for a
    code that declares no examples: the contract suite fails it)."""
    return [(name, params) for name, examples in small_instances().items() for params in (examples or [None])]


def random_partials(code, d, rng):
    """Random partial gradients g_j (k, d) and the worker-side partials for each worker."""
    g = rng.standard_normal((code.k, d))
    return g, {w: g[list(code.placement[w])] for w in range(code.n)}


def encode_all(code, partials):
    return {w: code.encode(w, partials[w]) for w in range(code.n)}


def received(code, messages, stragglers):
    """What the master holds when ``stragglers`` only deliver ``code.straggler_prefix`` messages."""
    out = {}
    for w in range(code.n):
        msgs = messages[w][: code.straggler_prefix] if w in stragglers else messages[w]
        if len(msgs):
            out[w] = msgs
    return out


def straggler_sets(n, s):
    """Every straggler set of size at most ``s``."""
    for size in range(s + 1):
        yield from itertools.combinations(range(n), size)
