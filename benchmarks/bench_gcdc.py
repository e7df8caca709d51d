"""GC-DC's per-round planning cost: Algorithm 1 (``dynamic_clustering``) and the whole
``GCDC.plan`` at K = 100 and K = 1000 workers.

For each configuration (K workers, P clusters, n_c clusters per worker) the script draws 200
straggler-state vectors (each worker a straggler with probability 1/2, the Gilbert-Elliot model's
stationary law in Table I) and times, per round:

* ``states``: ``dynamic_clustering(assignment, states)`` (homogeneous workers, eq. 16 order);
* ``rates``: ``dynamic_clustering(assignment, rates=..., tau=...)`` (Sec. VI-B, rates U(0, 5],
  tau = 2.5: the columns are re-sorted by rate every round);
* ``plan``: ``observe_states(t, ...)`` and ``GCDC.plan(t)`` with perfect SSI (Algorithm 1 plus
  the K Tasks), ``r = 2``;
* ``round``: the whole simulated round: ``plan`` plus ``K`` ``on_result`` calls (payloads ``None``)
  and ``close`` (whose decodability check through the clusters' codes dominates at K = 1000).

A second table (``simulate``) measures the simulator's rounds per second for GC-DC at K = 100
against GC-SC on the same draw (Fig. 6's system: P = 10, r = 6, n_c = 6, the homogeneous
Gilbert-Elliot model with p = 0.2, one seed for both): GC-DC perfect and imperfect SSI on the event
path (``gradcode.simulate(scheme, ...)``: Algorithm 1 every round, every message through the
protocol), GC-SC on its vectorized fast path (the per-cluster order statistic) and on the event
path (the same protocol as GC-DC, with a static plan). Wall-clock time (``time.perf_counter``),
best of the repeats, and each run's mean round time (the same draw: GC-DC's is lower).

It reports the median over repeats of the mean time per round, in microseconds, of CPU time
(``time.process_time``: the benchmark machine is shared, and CPU time is what a round costs the
master), plus the conflicts Phase II resolves per round. Lemma 1 holds in every configuration
listed except where marked.

Run: ``python benchmarks/bench_gcdc.py [--quick]``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

from gradcode.schemes.gcdc import GCDC, ClusterAssignment, dynamic_clustering, lemma1_holds

CONFIGS = [
    # K, P, n_c
    (100, 10, 5),  # smallest n_c meeting Lemma 1
    (100, 10, 6),  # Fig. 6
    (100, 10, 10),  # Table I at P = 10 (n_c = P)
    (100, 5, 5),  # Table I at P = 5
    (1000, 10, 5),
    (1000, 10, 10),
    (1000, 50, 25),
    (1000, 50, 50),
]


def per_round(fn, items, repeats):
    """Median over ``repeats`` of the mean CPU seconds of ``fn(item)`` over ``items``."""
    samples = []
    for _ in range(repeats):
        t0 = time.process_time()
        for x in items:
            fn(x)
        samples.append((time.process_time() - t0) / len(items))
    return statistics.median(samples)


def protocol_rounds(assignment, states):
    """CPU seconds per round of ``observe_states`` + ``plan`` alone, and of the whole round."""
    K, P = assignment.workers, assignment.clusters
    scheme = GCDC(K, P, 2, ssi="perfect", assignment=assignment, seed=0)
    in_plan = 0.0
    start = time.process_time()
    for t, s in enumerate(states):
        t0 = time.process_time()
        scheme.observe_states(t, s)
        scheme.plan(t)
        in_plan += time.process_time() - t0
        for w in range(K):
            scheme.on_result(t, w, 0, None, 0.0)
        scheme.close(t, range(K))
    return in_plan / len(states), (time.process_time() - start) / len(states)


def measure(K, P, nc, rounds, repeats):
    rng = np.random.default_rng(K + P + nc)
    A = ClusterAssignment.random(K, P, nc, rng)
    states = rng.random((rounds, K)) < 0.5
    rates = 5.0 * (1.0 - rng.random((rounds, K)))
    t_states = per_round(lambda s: dynamic_clustering(A, s), states, repeats)
    t_rates = per_round(lambda mu: dynamic_clustering(A, rates=mu, tau=2.5), rates, repeats)
    conflicts = float(np.mean([len(dynamic_clustering(A, s).conflicted) for s in states]))
    runs = [protocol_rounds(A, states) for _ in range(repeats)]
    t_plan = statistics.median(r[0] for r in runs)
    t_round = statistics.median(r[1] for r in runs)
    return t_states, t_rates, t_plan, t_round, conflicts


def simulate_rates(rounds, repeats):
    """Rows ``(label, rounds/s, mean round time)`` of the simulator at K = 100 (see the docstring)."""
    from gradcode.codes import make_code
    from gradcode.schemes import StaticScheme
    from gradcode.sim import simulate
    from gradcode.stragglers import make_delay_model

    K, P, r, nc = 100, 10, 6, 6
    model = make_delay_model("gilbert-elliot", p_switch=0.2)
    code = make_code("gc-sc", n=K, clusters=P, s=r - 1, seed=0)
    runs = [
        ("GC-SC fast path", lambda: code, "fast"),
        ("GC-SC event path", lambda: StaticScheme(code), "events"),
        ("GC-DC perfect SSI", lambda: GCDC(K, P, r, clusters_per_worker=nc, ssi="perfect", seed=0), "events"),
        ("GC-DC imperfect SSI", lambda: GCDC(K, P, r, clusters_per_worker=nc, ssi="imperfect", seed=0), "events"),
    ]
    rows = []
    for label, make, method in runs:
        best, mean = float("inf"), None
        for _ in range(repeats):
            obj = make()
            t0 = time.perf_counter()
            res = simulate(obj, model, rounds, seed=1, method=method, progress=False, records=False)
            best = min(best, time.perf_counter() - t0)
            mean = res.summary()["mean"]
        rows.append((label, rounds / best, mean))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    ap.add_argument("--only", choices=["plan", "simulate"], help="one of the two tables")
    args = ap.parse_args()
    rounds, repeats = (50, 3) if args.quick else (200, 5)
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    if args.only != "simulate":
        plan_table(rounds, repeats)
    if args.only != "plan":
        simulate_table(500 if args.quick else 2000, repeats)


def plan_table(rounds, repeats):
    print(f"{rounds} rounds, median of {repeats} repeats, CPU microseconds per round")
    print(f"{'K':>5} {'P':>4} {'n_c':>4} {'lemma1':>6} {'states':>9} {'rates':>9} {'plan':>9} {'round':>9}"
          f" {'conflicts':>10}")
    for K, P, nc in CONFIGS:
        t_states, t_rates, t_plan, t_round, conflicts = measure(K, P, nc, rounds, repeats)
        print(
            f"{K:>5} {P:>4} {nc:>4} {str(lemma1_holds(K, P, nc)):>6} {t_states * 1e6:>9.0f}"
            f" {t_rates * 1e6:>9.0f} {t_plan * 1e6:>9.0f} {t_round * 1e6:>9.0f} {conflicts:>10.2f}"
        )
    print("plan = observe_states + plan(t); round = plan + K on_result calls + close"
          " (simulation mode, everyone arrives, r = 2)")


def simulate_table(sim_rounds, repeats):
    print(f"\nsimulate: K = 100, P = 10, r = 6, n_c = 6, gilbert-elliot p_switch = 0.2, seed 1, {sim_rounds} rounds,"
          f" best of {repeats} (wall clock)")
    print(f"{'scheme':<22} {'rounds/s':>10} {'mean round time':>16}")
    for label, rate, mean in simulate_rates(sim_rounds, repeats):
        print(f"{label:<22} {rate:>10.0f} {mean:>16.4f}")
    print(f"\nGC-DC perfect SSI against K: P = 10, r = 6, n_c the smallest meeting Lemma 1, {sim_rounds // 4} rounds")
    print(f"{'K':>6} {'n_c':>4} {'rounds/s':>10} {'us/round':>9}")
    for K in (100, 300, 1000):
        nc, rate = simulate_k(K, sim_rounds // 4, repeats)
        print(f"{K:>6} {nc:>4} {rate:>10.0f} {1e6 / rate:>9.1f}")


def simulate_k(K, rounds, repeats):
    """``(n_c, rounds/s)`` of GC-DC (perfect SSI) at ``K`` workers on the same model."""
    from gradcode.schemes.gcdc import min_clusters_per_worker
    from gradcode.sim import simulate
    from gradcode.stragglers import make_delay_model

    model = make_delay_model("gilbert-elliot", p_switch=0.2)
    nc = min_clusters_per_worker(K, 10)
    best = float("inf")
    for _ in range(repeats):
        scheme = GCDC(K, 10, 6, clusters_per_worker=nc, ssi="perfect", seed=0)
        t0 = time.perf_counter()
        simulate(scheme, model, rounds, seed=1, progress=False, records=False)
        best = min(best, time.perf_counter() - t0)
    return nc, rounds / best


if __name__ == "__main__":
    main()
