"""Delay-model draw throughput; results go to BENCHMARKS.md.

For n = 100 workers and a block of rounds drawn in one call, the rounds per second each delay
model produces (``model.sample(rounds, 100, rng, load=...)``), next to the floor of one
``rng.standard_exponential((rounds, 100))`` measured in the same run (the cheapest possible
random (rounds, n) draw), so the ratio says what the model's own bookkeeping costs. The
simulator's target is >= 50,000 simulated rounds/s for a static code under ``shifted-exp``: the
draw is one part of that budget.

Run: ``python benchmarks/bench_delay_models.py [--quick]``. Medians over repeats; models are
measured in turn within each repeat so machine noise hits all alike.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

from gradcode.stragglers import make_delay_model

MODELS = {
    "fixed": dict(stragglers=10, delay=0.5),
    "bernoulli": dict(p=0.1, slowdown=10),
    "partial": dict(stragglers=10, alpha=2.0),
    "shifted-exp": dict(mu=1.0, alpha=0.01),
    "gilbert-elliot": dict(mu_fast=10, mu_slow=0.1, p_switch=0.05, alpha=0.01),
    "gilbert-elliot (asymmetric)": dict(mu_fast=10, mu_slow=0.1, p_switch=0.05, p_recover=0.2, alpha=0.01),
    "gilbert-elliot-het": dict(p_switch=0.05),
    "time-varying": dict(p=0.05),
    "shared-access": dict(arrival_rate=1.0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 100
    rounds = 2_000 if args.quick else 20_000
    repeats = 3 if args.quick else 7
    rng = np.random.default_rng(0)
    trace = rng.exponential(1.0, size=(rounds, n))
    fns = {"floor: rng.standard_exponential": lambda: rng.standard_exponential((rounds, n))}
    for label, params in MODELS.items():
        name = label.split(" ")[0]
        model = make_delay_model(name, **params)
        fns[label] = lambda m=model: m.sample(rounds, n, rng, load=3 / n)
    tm = make_delay_model("trace", delays=trace)
    fns["trace"] = lambda: tm.sample(rounds, n, rng, load=3 / n)
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    print(f"# delay-model draws, n={n}, {rounds} rounds per call, median of {repeats}; "
          f"numpy {np.__version__}, {platform.processor() or platform.machine()}")
    floor = statistics.median(times["floor: rng.standard_exponential"])
    print(f"{'model':32s} {'rounds/s':>12s} {'x floor time':>13s}")
    for k, ts in times.items():
        med = statistics.median(ts)
        print(f"{k:32s} {rounds / med:12,.0f} {med / floor:13.2f}")


if __name__ == "__main__":
    main()
