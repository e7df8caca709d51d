"""A long run on Ray with every process's memory sampled. From the repo root:

    python benchmarks/bench_long_run.py [--rounds 10000] [--every 500] [--scheme crc]

Trains ``--scheme`` (n = 4, s = 1, one straggler injected 2 ms late a round, so that rounds close
without one worker and abort it) on Tandon's synthetic data for ``--rounds`` rounds in one run,
driving it round by round (:class:`gradcode.runtime.session.RunSession`), and every ``--every``
rounds reads the driver's and each worker's resident and private memory (``/proc/PID/smaps_rollup``)
and the object store's use. Prints the samples and the growth per 1000 rounds after the first
sample up to the last round (a least-squares slope; the last round's held-out evaluation allocates
once and is reported apart): flat memory is what a long run needs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _timing import memory_mb  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10_000)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--scheme", default="crc")
    args = ap.parse_args()
    import ray

    from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig, TrainSpec
    from gradcode.runtime.cluster import ray_session
    from gradcode.runtime.session import open_session

    spec = TrainSpec(args.scheme, workers=4, stragglers=1, delay=0.002, data="tandon-synthetic",
                     data_params={"n_samples": 400})
    run = RunConfig(rounds=args.rounds, eval_every=0, run_dir=tempfile.mkdtemp())
    samples = []
    start = time.perf_counter()
    with ray_session(ClusterConfig()):
        with open_session(spec, cluster=ClusterConfig(), faults=FaultConfig(), run=run) as session:
            pids = session.engine.pids()
            for t in range(args.rounds):
                session.step()
                if t % args.every == 0 or t == args.rounds - 1:
                    driver = memory_mb(os.getpid())
                    workers = [memory_mb(p) for p in pids]
                    store = ray.available_resources().get("object_store_memory", 0.0)
                    samples.append({"round": t, "seconds": round(time.perf_counter() - start, 1),
                                    "driver_rss": round(driver[0], 1), "driver_private": round(driver[1], 1),
                                    "worker_private": [round(w[1], 1) for w in workers],
                                    "store_free_mb": round(store / 2**20, 1)})
                    print(json.dumps(samples[-1]), flush=True)
    # the slope from the first sample on (warm-up done), before the last round (its evaluation of
    # the held-out metrics imports and allocates once: reported, not a growth)
    steady = [s for s in samples[1:] if s["round"] < args.rounds - 1]
    rounds = np.array([s["round"] for s in steady], dtype=float)

    def slope(values) -> float:  # MB per 1000 rounds
        return float(np.polyfit(rounds, np.asarray(values, dtype=float), 1)[0] * 1000) if rounds.size > 1 else 0.0

    summary = {"machine": f"{platform.node()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
               "rounds": args.rounds, "seconds": round(time.perf_counter() - start, 1),
               "driver_private_mb_per_1000_rounds": round(slope([s["driver_private"] for s in steady]), 3),
               "worker_private_mb_per_1000_rounds": [
                   round(slope([s["worker_private"][w] for s in steady]), 3) for w in range(len(pids))],
               "driver_private_after_last_round_mb": samples[-1]["driver_private"]}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
