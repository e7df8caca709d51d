"""Restart-model analysis: exact AET against the Monte-Carlo estimate of it.

(a) the whole of AGC Table VI (18 AETs, exact, ``gradcode reproduce agc-table6``);
(b) one exact AET (G-AGC, n = 20, p = 0.1) against a Monte-Carlo run of the same model with
    100,000 trials (standard error ~0.01 s), side by side;

Run: ``python benchmarks/bench_restart.py [--quick]``. Medians over interleaved repeats.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np

from gradcode.analysis.restart import agc_comm_vector, average_execution_time, group_sizes, simulate_restart
from gradcode.experiments.repro_analysis import agc_timing
from gradcode.experiments.reproduce import run_reproduction
from _timing import interleaved  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    reps = 3 if args.quick else 15
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")

    (t_table,) = interleaved([lambda: run_reproduction("agc-table6")], reps)
    print(f"(a) AGC Table VI, 18 exact AETs: {t_table * 1e3:.1f} ms")

    timing, comm, groups = agc_timing("agc"), agc_comm_vector(3), group_sizes(20, 3)
    exact = lambda: average_execution_time(20, 0.1, comm, timing, groups=groups)  # noqa: E731
    mc = lambda: simulate_restart(20, 0.1, comm, timing, groups=groups, trials=100_000, seed=0)  # noqa: E731
    t_exact, t_mc = interleaved([exact, mc], reps)
    sim = mc()
    print(f"(b) G-AGC p=0.1: exact {exact():.4f} in {t_exact * 1e3:.2f} ms; Monte Carlo 1e5 trials "
          f"{sim.mean:.4f} +- {sim.stderr:.4f} in {t_mc * 1e3:.1f} ms; ratio {t_mc / t_exact:.0f}x")


if __name__ == "__main__":
    main()
