"""Timing and memory helpers shared by the benchmark scripts (run as ``python benchmarks/bench_*.py``,
so this folder is on ``sys.path``)."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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


def memory_mb(pid: int) -> tuple[float, float]:
    """``(resident, private)`` MB of process ``pid`` (Linux ``/proc/PID/smaps_rollup``): resident
    counts the shared pages it has read (Ray's object store: one copy a node), private
    (``Private_Clean + Private_Dirty``) only its own."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                fields[key] = int(rest.split()[0]) / 1024
    return fields.get("Rss", float("nan")), fields.get("Private_Clean", 0.0) + fields.get("Private_Dirty", 0.0)


@contextlib.contextmanager
def exported_source(ref: str):
    """``{"before": src of git revision ref, "after": the src this process imports gradcode from}``
    (this tree's, or another put first on ``PYTHONPATH``): the paths to put first on ``PYTHONPATH``
    of a child process (``git archive`` into a temporary folder, removed after)."""
    import gradcode

    with tempfile.TemporaryDirectory(prefix="gcref-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield {"before": str(Path(tmp) / "src"), "after": str(Path(gradcode.__file__).resolve().parents[1])}


def with_source(path: str) -> dict:
    """This process's environment with ``path`` first on ``PYTHONPATH`` (Ray's workers inherit it)."""
    return dict(os.environ, GRADCODE_BENCH_SRC=path,
                PYTHONPATH=os.pathsep.join([path, os.environ.get("PYTHONPATH", "")]))


def source_envs(stack: contextlib.ExitStack, against: str | None, runs_dir: str) -> dict[str, dict]:
    """The child processes' environments of a benchmark that compares this tree with git revision
    ``against`` (None: this tree only), by label, each with ``GRADCODE_RUNS=runs_dir``; the exported
    source lives as long as ``stack``."""
    sources = {"this tree": None}
    if against:
        exported = stack.enter_context(exported_source(against))
        sources = {"this tree": exported["after"], against: exported["before"]}
    return {name: dict(with_source(src) if src else os.environ, GRADCODE_RUNS=runs_dir)
            for name, src in sources.items()}


@contextlib.contextmanager
def busy_loops(hogs: int):
    """``hogs`` processes spinning at normal priority while the block runs (a machine with other work)."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        time.sleep(0.5 if hogs else 0.0)  # running before the measured process starts
        yield
    finally:
        for p in spin:
            p.kill()
            p.wait()
