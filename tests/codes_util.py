"""Helpers shared by the code tests: small instances of every registered family, and a harness that
encodes random partial gradients and decodes them under a straggler pattern."""

from __future__ import annotations

import itertools


#: Small instances of each registered code family. The contract suite fails if a registered family
#: has no entry here, so every new family gets the same checks.
SMALL_INSTANCES: dict[str, list[dict]] = {
    "uncoded": [dict(n=1), dict(n=4)],
    "ignore": [dict(n=5, s=2), dict(n=4, s=0)],
    "frc": [dict(n=6, s=2), dict(n=6, s=1), dict(n=4, s=3), dict(n=5, s=0)],
    "crc": [dict(n=7, s=3, seed=1), dict(n=5, s=1), dict(n=6, s=5), dict(n=4, s=0), dict(n=8, s=2, seed=3)],
    "partial": [
        dict(n=3, s=1, alpha=2),
        dict(n=4, s=1, alpha=3, inner="frc"),
        dict(n=5, s=2, alpha=2.5, seed=2),
    ],
    "gc-sc": [dict(n=6, clusters=2, s=1), dict(n=8, clusters=2, s=2, seed=4)],
    "matrix": [dict(B=[[0.5, 1, 0], [0, 1, -1], [0.5, 0, 1]])],
    "commfr": [
        dict(n=8, k=4, N=4, K=2, generator=[[1, 0, 1, 1], [0, 1, 1, 2]]),
        dict(n=6, k=6, N=3, K=2, construction="mds-systematic", seed=1),
        dict(n=6, k=4, N=3, K=1, construction="repetition"),
        dict(n=6, k=6, N=6, K=3, construction="mds-gaussian", seed=2),
        dict(n=12, k=6, N=12, K=6, construction="ldpc", dc=6, dv=3, seed=0),
    ],
    "cgc": [dict(n=5, d=3, m=2), dict(n=6, d=4, m=1, construction="gaussian", seed=1), dict(n=4, d=4, m=2)],
    # large-L AGC such as AGC(5, 4, 12) has decoding errors above the suite's 1e-9 (see test_adaptive)
    "agc": [dict(n=3, d=2, L=2), dict(n=5, d=4, L=3, seed=1), dict(n=5, d=3, L=2, seed=2), dict(n=4, d=4, L=2)],
    "g-agc": [dict(n=7, d=2, L=2), dict(n=8, d=3, L=2, seed=1)],
    "g-cgc": [dict(n=7, d=3, m=2), dict(n=9, d=4, m=2, seed=1)],
}


def instances():
    """(name, params) pairs for every registered code, for pytest parametrization."""
    import gradcode

    out = []
    for name in gradcode.available_codes():
        for params in SMALL_INSTANCES.get(name, [None]):
            out.append((name, params))
    return out


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
