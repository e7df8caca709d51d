"""Timing helpers shared by the benchmark scripts (run as ``python benchmarks/bench_*.py``, so this
folder is on ``sys.path``)."""

from __future__ import annotations

import statistics
import time


def interleaved(fns, repeats, clock=time.perf_counter):
    """Median time of each function, run in turn so that machine noise hits all alike; ``clock``:
    wall time by default, ``time.process_time`` for CPU time."""
    times = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = clock()
            fn()
            times[i].append(clock() - t0)
    return [statistics.median(t) for t in times]


def median_time(fn, repeats):
    """Median wall time of ``fn()`` over ``repeats`` calls."""
    return interleaved([fn], repeats)[0]
