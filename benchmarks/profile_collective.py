"""Where a collective round's time goes, on the workers and on the driver: bench_collective's step by phase.

    python benchmarks/profile_collective.py [--rounds 25] [--schemes uncoded crc] [--hidden 2862] [--no-compute]

The same trainers as ``bench_collective.py`` (an MLP 1024 -> H -> H -> 10, 4 Ray workers of one
thread each, batch 64, SGD), without delays. Ray is started here with a worker set-up hook that
wraps the functions a round runs on a worker with wall-clock timers (``time.perf_counter``); each
worker writes its totals to a file as it goes, and the table gives, per phase, the median over the
workers of its time a round (after 5 warm-up rounds), in wall time and in the thread's CPU time
(``time.thread_time``: what the phase costs, without the time its thread waited for a core: with
4 workers on 2 cores every phase's wall time includes the others'), beside the round itself (the
median time between consecutive steps at the driver). Phases (nested ones are part of their parent):

* ``gradient``: ``TorchWorkerProblem.gradient`` (per partition): ``load`` (the replica's or the
  task's parameters into the worker's module), ``backward`` (forward and backward pass), the rest
  (the flat float32 message: ``torch.cat`` of the gradients, buffers and loss);
* ``norms``: the chunk norms for the error bound's scale; ``combine``: a coded message's sum
  ``E @ partials`` (none for uncoded);
* ``part``: the member's weighted contribution with its flag slots; ``allreduce``: gloo's
  all-reduce (waiting for the slowest member included);
* ``apply``: the acceptance rule and the optimizer step of the replica: ``apply norm`` (the
  reduced gradient's norm for an unchecked plan), ``finite`` (the gradient's and new parameters'
  finiteness), ``apply_decoded`` (``.grad`` := g / B), ``flatten`` (the new parameters as a flat
  vector), ``fingerprint`` (the replicas' drift check).

The driver's share of the same rounds is timed in this process (medians are over rounds after
the same warm-up): ``open`` (the scheme's plan, the tasks sent), ``wait for the notes`` (the
workers' computations and the notes' trip), ``send the orders``, ``wait for the replies`` (each
member's part, the all-reduce, its step and the reply's trip), ``settle`` and ``record``.

The wrappers cost a few microseconds a call. The phases of 4 workers on 2 cores overlap in time
and do not add up to the round.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np  # noqa: E402

#: (module, attribute path, phase): the functions timed on the workers
TIMED = [
    ("gradcode.torch.problem", "TorchWorkerProblem.gradient", "gradient"),
    ("gradcode.torch.problem", "ModelLayout.load", "load"),
    ("gradcode.torch.problem", "TorchWorkerProblem._backward", "backward"),
    ("gradcode.runtime.worker", "sum_squares", "norms"),
    ("gradcode.runtime.worker", "WorkerCore._combine", "combine"),
    ("gradcode.runtime.replica", "Replica.part", "part"),
    ("gradcode.runtime.gloo", "Groups.allreduce", "allreduce"),
    ("gradcode.runtime.replica", "Replica.apply", "apply"),
    ("gradcode.runtime.replica", "sum_squares", "apply norm"),
    ("gradcode.runtime.records", "finite", "finite"),
    ("gradcode.torch.problem", "apply_decoded", "apply_decoded"),
    ("gradcode.torch.problem", "ModelLayout.flatten", "flatten"),
    ("gradcode.runtime.replica", "Replica.fingerprint", "fingerprint"),
]


#: the driver's share of a round, timed in this process: (module, attribute path, phase)
DRIVER_TIMED = [
    ("gradcode.runtime.driver", "RoundDriver.step", "round"),
    ("gradcode.runtime.driver", "RoundDriver._open_round", "open: plan, send the tasks"),
    ("gradcode.runtime.driver", "RoundDriver._wait_ready", "wait for the notes"),
    ("gradcode.runtime.engine", "RayEngine.reduce", "send the orders"),
    ("gradcode.runtime.collective", "CollectiveDriver._replies", "wait for the replies"),
    ("gradcode.runtime.collective", "CollectiveDriver._settle", "settle the replies"),
    ("gradcode.runtime.driver", "RoundDriver._record_round", "record"),
]


def wrap_timers(entries, snapshot_on: str, warmup: int, write=None) -> dict:
    """Wrap each ``(module, attribute path, phase)`` of ``entries`` with a timer adding its wall
    and thread CPU seconds and its calls to ``{"totals": {phase: [wall, cpu, calls]}, "base":
    ...}`` (returned); ``base`` is a copy of the totals when ``snapshot_on`` had been called
    ``warmup`` times, and ``write(doc)`` runs after each call of ``snapshot_on``."""
    import functools
    import importlib
    import threading

    doc: dict = {"totals": {}, "base": {}}
    lock = threading.Lock()

    def timed(fn, phase):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            began, cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent, used = time.perf_counter() - began, time.thread_time() - cpu
                with lock:
                    row = doc["totals"].setdefault(phase, [0.0, 0.0, 0])
                    row[0] += spent
                    row[1] += used
                    row[2] += 1
                    if phase == snapshot_on:
                        if row[2] == warmup:
                            doc["base"] = {k: list(v) for k, v in doc["totals"].items()}
                        if write is not None:
                            write(doc)
        return wrapper

    for module, path, phase in entries:
        owner = importlib.import_module(module)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        raw = owner.__dict__[name]
        wrapped = timed(raw.__func__ if isinstance(raw, staticmethod) else raw, phase)
        setattr(owner, name, staticmethod(wrapped) if isinstance(raw, staticmethod) else wrapped)
    return doc


def install_timers() -> None:
    """Ray's worker set-up hook: :data:`TIMED` wrapped with timers whose totals go to
    ``$GC_PROFILE_DIR/prof-<pid>.json`` once a round (after each replica step)."""
    out = os.path.join(os.environ["GC_PROFILE_DIR"], f"prof-{os.getpid()}.json")

    def write(doc):
        with open(out + ".tmp", "w") as fh:
            json.dump(doc, fh)
        os.replace(out + ".tmp", out)

    wrap_timers(TIMED, "apply", int(os.environ.get("GC_PROFILE_WARMUP", "5")), write)


def per_round(doc: dict, counter: str) -> dict | None:
    """``{phase: [wall, cpu]}`` seconds a round after the warm-up, rounds counted by the calls of
    ``counter`` (None when there were none)."""
    totals, base = doc["totals"], doc["base"]
    calls = totals.get(counter, [0, 0, 0])[2] - base.get(counter, [0, 0, 0])[2]
    if calls <= 0:
        return None
    return {p: [(v - b) / calls for v, b in zip(row[:2], base.get(p, [0.0, 0.0]))] for p, row in totals.items()}


def profile(scheme: str, hidden: int, rounds: int, folder: str, driver: dict,
            no_compute: bool = False) -> tuple[dict, dict]:
    """One run on the collective path: ``{"round": median round, phase: (median over the workers
    of its wall seconds a round after the warm-up, the same of its thread CPU seconds)}``, and the
    driver's ``{phase: (wall, cpu)}`` a round (``driver``: its timers' document, reset here)."""
    from bench_collective import run_gradcode

    for path in glob.glob(os.path.join(folder, "prof-*.json")):
        os.unlink(path)
    driver["totals"], driver["base"] = {}, {}
    step, _, _ = run_gradcode(scheme, "collective", hidden, rounds, 0.0, no_compute=no_compute)
    per_worker = []
    for path in glob.glob(os.path.join(folder, "prof-*.json")):
        with open(path) as fh:
            got = per_round(json.load(fh), "apply")
        if got is not None:
            per_worker.append(got)
    phases = sorted({p for w in per_worker for p in w}, key=[t[2] for t in TIMED].index)
    workers = {"round": (step, math.nan), **{p: tuple(statistics.median(w.get(p, (0.0, 0.0))[k] for w in per_worker)
                                                      for k in (0, 1)) for p in phases}}
    return workers, {p: tuple(v) for p, v in (per_round(driver, "round") or {}).items()}


def table(rows: dict, phases: list) -> None:
    print("\n| phase | " + " | ".join(f"{s} wall | {s} CPU" for s in rows) + " |")
    print("|---|" + "---|---|" * len(rows))
    for phase in phases:
        cells = [f"{1e3 * r[phase][0]:.1f} | {1e3 * r[phase][1]:.1f}" if phase in r else " | " for r in rows.values()]
        print(f"| {phase} | " + " | ".join(cells).replace("nan", "") + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--hidden", type=int, default=2862)
    ap.add_argument("--schemes", nargs="+", choices=("uncoded", "crc"), default=["uncoded", "crc"])
    ap.add_argument("--no-compute", action="store_true", help="bench_collective's model whose gradient costs nothing")
    args = ap.parse_args()
    import warnings

    import ray

    warnings.simplefilter("ignore")
    folder = tempfile.mkdtemp(prefix="gc-profile-")
    ray.init(include_dashboard=False, log_to_driver=False, _system_config={"worker_niceness": 0},
             runtime_env={"worker_process_setup_hook": install_timers,
                          "env_vars": {"GC_PROFILE_DIR": folder, "GC_PROFILE_WARMUP": "5"}})
    print(f"# {platform.node()} {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}; hidden {args.hidden},"
          f" {args.rounds} rounds, a worker's phases a round (ms, median over the workers)", flush=True)
    driver = wrap_timers(DRIVER_TIMED, "round", 5)
    rows, drivers = {}, {}
    for scheme in args.schemes:
        rows[scheme], drivers[scheme] = profile(scheme, args.hidden, args.rounds, folder, driver, args.no_compute)
        print(f"  {scheme}: round {1e3 * rows[scheme]['round'][0]:.1f} ms", flush=True)
    print("\nOn the workers:")
    table(rows, [p for p in ["round"] + [t[2] for t in TIMED] if any(p in r for r in rows.values())])
    print("\nOn the driver:")
    table(drivers, [t[2] for t in DRIVER_TIMED if any(t[2] in r for r in drivers.values())])
    ray.shutdown()


if __name__ == "__main__":
    main()
