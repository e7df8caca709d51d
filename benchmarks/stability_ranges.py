"""Where each code decodes reliably in float64: the table behind the README's "Numerical range".

For each family and a grid of parameters, draw random straggler sets of the size the code is meant
to tolerate (``s`` = the tolerance; AGC: ``d - 1`` stragglers with ``r_s`` messages from the
others), decode random Gaussian partial gradients, and report:

* ``accepted``: the share of patterns the decoder accepts (the rest are refused because the
  answer's check against the encoder rows fails: residual or amplification above
  ``max_condition = 1e10``);
* ``worst_amp``: the worst forward-error amplification over the patterns, with the threshold
  lifted, so the amplification that caused a refusal is shown;
* ``worst_err``: the worst relative error of an accepted decode (the contract: below 1e-5).

``--wire float32|float16|bfloat16``: the partial gradients are float32 (as a torch worker's) and
the messages cross in that type; accepted decodes must then stay within the checked bound's
tolerance of that precision (``gradcode.codes.DEFAULT_RTOL``), and ``worst_bound`` is the largest
relative bound an accepted decode reported. ``--cancel``: the partial gradients sum to almost
nothing (``g -= g.mean(0)``, plus 1e-6 noise), as near an optimum.

Run: ``python benchmarks/stability_ranges.py [--samples 30] [--wire float32] [--cancel]``.
"""

from __future__ import annotations

import argparse
import copy
import math
import platform
import time

import numpy as np

import gradcode
from gradcode.errors import NotDecodableError

GRID = [
    ("crc", [dict(n=n, s=max(1, n // 10), seed=0) for n in (16, 64, 128, 256, 512)]
     + [dict(n=n, s=n // 4, seed=0) for n in (16, 64, 128, 256)]),
    ("gc-sc", [dict(n=n, clusters=n // 32, s=3, seed=0) for n in (64, 256)]),
    ("partial", [dict(n=64, s=6, alpha=2, seed=0), dict(n=256, s=25, alpha=2, seed=0)]),
    ("commfr", [dict(n=N * 5, k=5, N=N, K=N // 2, construction="mds-gaussian", seed=0) for N in (10, 20, 40, 60)]
     + [dict(n=N * 5, k=5, N=N, K=N // 2, construction="mds-systematic", seed=0) for N in (20, 60)]
     + [dict(n=60, k=5, N=12, K=6, construction="ldpc", dc=6, dv=3, seed=0)]),
    ("cgc", [dict(n=n, d=8, m=4) for n in (12, 16, 20, 24, 28, 32)]
     + [dict(n=n, d=8, m=4, construction="gaussian", seed=0) for n in (32, 64, 100)]),
    ("agc", [dict(n=n, d=d, L=L, seed=0) for d, L in ((2, 2), (3, 6), (4, 12), (5, 60)) for n in (d + 1, d + 2, 2 * d + 2)]
     + [dict(n=n, d=3, L=L, seed=0) for n in (8, 16) for L in (12, 24, 60)]),
    # n = 100 + d - 1: the last group has 2d - 1 workers (n - d = d - 1), the hardest subsystem
    ("g-agc", [dict(n=99 + d, d=d, L=L, seed=0) for d, L in ((2, 2), (3, 6), (4, 12), (5, 60))]),
    ("g-cgc", [dict(n=99 + d, d=d, m=d // 2, seed=0) for d in (4, 8, 12, 16)]),
]


def pattern_for(code, stragglers):
    """Stragglers deliver ``straggler_prefix`` messages (the partial scheme's naive part); the
    others all of theirs, or AGC's ``r_s``."""
    rounds = getattr(code, "rounds_needed", None)
    r = rounds(len(stragglers)) if rounds is not None else None
    full = {w: (code.messages_of(w) if r is None else min(r, code.messages_of(w))) for w in range(code.n)}
    out = {w: (code.straggler_prefix if w in stragglers else full[w]) for w in range(code.n)}
    return {w: c for w, c in out.items() if c}


WIRE = {"float64": np.float64, "float32": np.float32, "float16": np.float16}


def measure(name, params, samples, rng, wire="float64", cancel=False):
    code = gradcode.make_code(name, **params)
    free = copy.deepcopy(code)
    free.max_condition = 1e300
    s = code.tolerance
    d = 4 * code.chunks + 1
    g = rng.standard_normal((code.k, d))
    if cancel:
        g -= g.mean(axis=0)
        g[0] += 1e-6 * rng.standard_normal(d)
    if wire != "float64":
        g = g.astype(np.float32)
    truth = g.astype(np.float64).sum(axis=0)
    if wire == "bfloat16":
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    else:
        dtype = WIRE[wire]
    try:
        with np.errstate(over="ignore"):
            msgs = {w: code.encode(w, g[list(code.placement[w])]).astype(dtype) for w in range(code.n)}
    except ValueError:  # the encoder's coefficients overflow the partials' float32
        return dict(code=repr(code), s=s, accepted="overflow", worst_amp=math.nan, worst_err=math.nan,
                    worst_bound=math.nan)
    accepted, worst_amp, worst_err, worst_bound = 0, 0.0, 0.0, 0.0
    for _ in range(samples):
        S = set(rng.choice(code.n, size=s, replace=False).tolist())
        pattern = pattern_for(code, S)
        try:
            worst_amp = max(worst_amp, free.decoding(pattern).amplification)
        except NotDecodableError:
            worst_amp = math.inf
        try:
            rep = code.decode_report({w: msgs[w][:r] for w, r in pattern.items()}, dim=d)
        except (NotDecodableError, ValueError):  # refused, or a 16-bit message overflowed
            continue
        accepted += 1
        worst_err = max(worst_err, float(np.linalg.norm(rep.gradient - truth) / np.linalg.norm(truth)))
        worst_bound = max(worst_bound, rep.relative_bound)
    return dict(code=repr(code), s=s, accepted=f"{accepted}/{samples}", worst_amp=worst_amp,
                worst_err=worst_err if accepted else math.nan, worst_bound=worst_bound if accepted else math.nan)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=30, help="straggler sets per parameter point")
    ap.add_argument("--only", default=None, help="one family")
    ap.add_argument("--wire", default="float64", choices=("float64", "float32", "float16", "bfloat16"))
    ap.add_argument("--cancel", action="store_true", help="partial gradients that cancel (near an optimum)")
    args = ap.parse_args()
    print(f"# {platform.node()} {platform.machine()}, numpy {np.__version__}, {time.strftime('%Y-%m-%d')},"
          f" wire {args.wire}{', cancelling gradients' if args.cancel else ''}")
    print("code | s | accepted | worst_amp | worst_err | worst_bound")
    rng = np.random.default_rng(0)
    for name, grid in GRID:
        if args.only and name != args.only:
            continue
        for params in grid:
            r = measure(name, params, args.samples, rng, args.wire, args.cancel)
            print(f"{r['code']} | {r['s']} | {r['accepted']} | {r['worst_amp']:.2g} | {r['worst_err']:.1e}"
                  f" | {r['worst_bound']:.1e}", flush=True)


if __name__ == "__main__":
    main()
