"""Sequential gradient coding (issue 11): the master's bookkeeping per round of SR-SGC and M-SGC in
the simulator's event path at n = 256, and the parameter search of App. J at n = 256.

(a) ``round``: ``gradcode.simulate(scheme, trace, 480, close=mu)`` (the paper's 480 jobs, mu = 1,
the decodable wait-out) on a synthetic trace (256 workers, ``1 + Exp(0.2)`` seconds, 3% of the
cells 2 s slower, load slope 3 s per unit load). ``scheme`` is the time spent inside the
scheme's protocol calls (``plan``, ``on_result``, ``ready``, ``close``, measured by wrapping
them), i.e. the master's bookkeeping; ``total`` the whole simulated round (the simulator's own
event handling included). The paper's parameters: M-SGC (1, 2, 27), SR-SGC (2, 3, 23), and the
static CRC s = 15 through the same event path for reference.

(b) ``tune``: :func:`gradcode.schemes.sgc.tune.tune` over every parameter set of each family
(GC: s = 0..255; SR-SGC and M-SGC: W <= max_W, every lambda) on a 100-round profile, J = 80.

Run: ``python benchmarks/bench_sgc.py [--quick]``. Times are medians of wall time.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

import gradcode
from gradcode.schemes import StaticScheme
from gradcode.schemes.sgc import MSGC, SRSGC
from gradcode.schemes.sgc.tune import tune


def profile(n, rounds, seed=0):
    rng = np.random.default_rng(seed)
    X = 1.0 + rng.exponential(0.2, (rounds, n))
    X[rng.random((rounds, n)) < 0.03] += 2.0
    return X


def timed(scheme):
    """Wrap the protocol calls of ``scheme`` (instance attributes shadow the methods)."""
    spent = [0.0]
    for name in ("plan", "on_result", "ready", "close"):
        fn = getattr(scheme, name)

        def wrapper(*a, _fn=fn, **k):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0

        setattr(scheme, name, wrapper)
    return spent


def bench_rounds(repeats, rounds):
    n, alpha = 256, 3.0
    X = profile(n, rounds + 8)
    model = gradcode.make_delay_model("trace", delays=X, trace_load=1 / n, load_slope=alpha)
    makers = {
        "m-sgc (1,2,27)": lambda: MSGC(n=n, B=1, W=2, lam=27),
        "sr-sgc (2,3,23)": lambda: SRSGC(n=n, B=2, W=3, lam=23),
        "crc s=15 (StaticScheme)": lambda: StaticScheme(gradcode.make_code("crc", n=n, s=15)),
    }
    print(f"(a) event path, n = {n}, {rounds} rounds, close = mu 1 (us per round, median of {repeats})")
    print(f"{'scheme':26s} {'scheme calls':>13s} {'total':>9s} {'wait-outs':>10s}")
    for name, make in makers.items():
        inside, total = [], []
        for _ in range(repeats):
            s = make()
            spent = timed(s)
            t0 = time.perf_counter()
            res = gradcode.simulate(s, model, rounds, close=1.0, records=True)
            total.append((time.perf_counter() - t0) / rounds * 1e6)
            inside.append(spent[0] / rounds * 1e6)
        print(f"{name:26s} {statistics.median(inside):13.0f} {statistics.median(total):9.0f}"
              f" {int(np.sum(res.waitout_rounds)):10d}")


def bench_tune(repeats, max_Ws):
    n = 256
    X = profile(n, 100, seed=1)
    print(f"\n(b) tune, n = {n}, 100-round profile, J = 80, waitout = all (seconds, median of {repeats})")
    print(f"{'family':8s} {'max_W':>5s} {'sets':>6s} {'time':>7s}  best")
    for max_W in max_Ws:
        for fam in ("gc", "sr-sgc", "m-sgc"):
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                res = tune(X, jobs=80, alpha=3.0, families=(fam,), max_W=max_W)
                times.append(time.perf_counter() - t0)
            b = res.best[fam]
            print(f"{fam:8s} {max_W:5d} {len(res.candidates):6d} {statistics.median(times):7.2f}  {b.params}"
                  f" load {b.load:.4f} est. {b.time:.1f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    bench_rounds(1 if args.quick else 3, 120 if args.quick else 480)
    bench_tune(1, (4,) if args.quick else (4, 8))


if __name__ == "__main__":
    main()
