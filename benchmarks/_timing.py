"""Timing helpers shared by the benchmark scripts (run as ``python benchmarks/bench_*.py``, so this
folder is on ``sys.path``)."""

from __future__ import annotations

import statistics
import time


def interleaved(fns, repeats):
    """Median time of each function, run in turn so that machine noise hits all alike."""
    times = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def median_time(fn, repeats):
    """Median wall time of ``fn()`` over ``repeats`` calls."""
    return interleaved([fn], repeats)[0]
