"""Benchmarks of the Ray runtime. Prints medians; run from the repo root:

    python benchmarks/bench_runtime.py [--quick] [--only overhead|delay|target|scale]
    python benchmarks/bench_runtime.py --only overhead --against REF [--repeats 3]

(a) **Master overhead per round** for n = 8 and 32 workers and d = 1e3, 1e5, 1e6 parameters:
    the median time of a full training round (plan, one ``ray.put`` of the parameters, n streamed
    tasks, decode, optimizer step) with a problem whose partial gradient costs only writing d
    numbers (so the round is all overhead), against two floors measured in the same run on the
    same actors' cluster: the *Ray floor*, one ``ray.put`` of the model and n actor calls that
    each return a d-vector with no compute (the cheapest way to copy the model out and the results
    back once through Ray), and the *memcpy floor*, (1 + n) copies of d float64 in this process.
(b) **Time per round against injected delay**: uncoded, ignore-s, frc and crc (n = 8, s = 3) on
    Tandon's synthetic data with s random workers delayed by ``delay`` each round: coded schemes
    stay flat, uncoded grows with the delay. The simulator runs the same model and seed: its
    median round time (compute is free there) and the share of rounds whose straggler set the
    real run reproduces.
(c) **Time to a target loss** under injected stragglers (n = 8, s = 3, delay 0.2 s): Nesterov for
    the exact codes and uncoded, SGD c1/(t + c2) for ignore-s (Tandon Sec. 5); the target is the
    training objective single-process Nesterov reaches after ``K`` steps.

(d) **Round time against n** (``--only scale``): the overhead round of (a) at d = 1e5 for n = 8,
    16, 32 and 64 workers (actors reserving no CPU, so 64 of them run on 2 cores), with the Ray
    floor of each n.

``--against REF`` measures (a) side by side for this working tree and the git revision ``REF``
(its ``src/`` exported with ``git archive``): each measurement is a fresh process with its own
Ray session, the two alternating ``--repeats`` times so that machine noise hits both alike; it
prints each one's median round, the median Ray floor, and the ratios.

All runs share one embedded Ray session (num_cpus=2; workers reserve no CPU). On a 2-core machine
shared with other work the absolute numbers are noisy; the ratios measured side by side are what
to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _timing import ROOT, exported_source, with_source

#: where gradcode is imported from: this tree's src/, or another revision's (--against, via the env)
SRC = os.environ.get("GRADCODE_BENCH_SRC") or str(ROOT / "src")
sys.path.insert(0, SRC)

#: (n, d) of the side-by-side comparison: the sizes of the master-overhead target (n = 8, d = 1e6: <= 2x Ray's floor)
AGAINST_SIZES = ((8, 10**5), (8, 10**6), (32, 10**5), (32, 10**6))


class ConstProblem:
    """A problem whose partial gradient is ``len(rows)`` in every coordinate: the worker's compute
    is one write of d numbers, so a training round measures the runtime's overhead."""

    def __init__(self, d: int, n_train: int):
        self.dim, self.n_train = d, n_train

    def gradient(self, params, rows):
        return np.full(self.dim, float(len(rows)))

    def init_params(self, rng=None):
        return np.zeros(self.dim)

    def full_gradient(self, params, g):
        return np.asarray(g) / self.n_train

    def objective(self, params):
        return 0.0

    def smoothness(self):
        return None


class ConstSpec:
    def __init__(self, d: int, n_train: int = 1024):
        self.d, self.n_train = d, n_train

    def build(self):
        return ConstProblem(self.d, self.n_train), None

    def __repr__(self):
        return f"ConstSpec(d={self.d})"


def _ray_floor(n: int, d: int, reps: int) -> float:
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        def __init__(self, d):
            self.out = np.ones(d)

        def run(self, x):
            return self.out

    actors = [Echo.remote(d) for _ in range(n)]
    ray.get([a.run.remote(np.zeros(1)) for a in actors])
    x = np.zeros(d)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        ref = ray.put(x)
        outs = ray.get([a.run.remote(ref) for a in actors])
        times.append(time.perf_counter() - t0)
        del outs
    for a in actors:
        ray.kill(a)
    return float(np.median(times))


def _memcpy_floor(n: int, d: int, reps: int) -> float:
    x = np.ones(d)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n + 1):
            y = x.copy()
        times.append(time.perf_counter() - t0)
        del y
    return float(np.median(times))


def overhead_round(tmp: Path, n: int, d: int, reps: int) -> float:
    """Median seconds of a training round at ``n`` workers and ``d`` parameters (uncoded, the
    gradient one write of d numbers), over ``reps`` rounds after 2 warm-up rounds."""
    from gradcode.runtime import RunConfig, TrainSpec, train

    res = train(TrainSpec("uncoded", workers=n, data=ConstSpec(d), optimizer="gd", optimizer_params={"lr": 0.1}),
                run=RunConfig(rounds=reps + 2, eval_every=0, run_dir=tmp / f"oh-{n}-{d}-{time.monotonic_ns()}"))
    return float(np.median(res.round_times[2:]))  # first rounds warm caches


def bench_overhead(tmp: Path, quick: bool) -> list[dict]:
    rows = []
    reps = 10 if quick else 20
    for n in ((8,) if quick else (8, 32)):
        for d in (10**3, 10**5, 10**6):
            master = overhead_round(tmp, n, d, reps)
            ray_floor = _ray_floor(n, d, reps)
            mem = _memcpy_floor(n, d, reps)
            rows.append({"n": n, "d": d, "master ms": 1e3 * master, "ray floor ms": 1e3 * ray_floor,
                         "memcpy floor ms": 1e3 * mem, "master / ray floor": master / ray_floor})
            print(_fmt(rows[-1]), flush=True)
    return rows


def bench_scale(tmp: Path, quick: bool) -> list[dict]:
    """Round time against the number of workers at d = 1e5 (workers reserve no CPU)."""
    rows = []
    reps = 10 if quick else 20
    for n in (8, 16, 32, 64):
        t0 = time.perf_counter()
        master = overhead_round(tmp, n, 10**5, reps)
        total = time.perf_counter() - t0
        ray_floor = _ray_floor(n, 10**5, reps)
        rows.append({"n": n, "d": 10**5, "master ms": 1e3 * master, "ray floor ms": 1e3 * ray_floor,
                     "master / ray floor": master / ray_floor, "run incl. start s": total})
        print(_fmt(rows[-1]), flush=True)
    return rows


def _child(sizes, reps: int) -> None:
    """One side of --against: median round and Ray floor per size, as one JSON line."""
    from gradcode.runtime.cluster import init_ray

    out = []
    with tempfile.TemporaryDirectory(prefix="gcbench-") as tmp:
        init_ray(num_cpus=2)
        for n, d in sizes:
            out.append({"n": n, "d": d, "master": overhead_round(Path(tmp), n, d, reps),
                        "floor": _ray_floor(n, d, reps)})
        import ray

        ray.shutdown()
    print("RESULT " + json.dumps(out), flush=True)


def bench_against(ref: str, repeats: int, quick: bool) -> list[dict]:
    """(a) for this tree and for revision ``ref``, alternating fresh processes (see the module
    docstring); medians over the repeats of each process's median round."""
    reps = 10 if quick else 20
    sizes = AGAINST_SIZES[:2] if quick else AGAINST_SIZES
    with exported_source(ref) as sources:
        got: dict[str, list] = {k: [] for k in sources}
        for i in range(repeats):
            for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
                env = with_source(sources[name])
                proc = subprocess.run([sys.executable, __file__, "--child", json.dumps([list(s) for s in sizes]),
                                       "--reps", str(reps)], env=env, capture_output=True, text=True, check=False)
                line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
                if proc.returncode or not line:
                    raise RuntimeError(f"{name} run failed:\n{proc.stderr[-3000:]}")
                got[name].append(json.loads(line[0][7:]))
                print(f"  repeat {i} {name}: " + "  ".join(f"n={r['n']} d={r['d']:.0e} {1e3 * r['master']:.1f} ms"
                                                          for r in got[name][-1]), flush=True)
    rows = []
    for k, (n, d) in enumerate(sizes):
        before = statistics.median(run[k]["master"] for run in got["before"])
        after = statistics.median(run[k]["master"] for run in got["after"])
        floor = statistics.median([run[k]["floor"] for name in got for run in got[name]])
        rows.append({"n": n, "d": d, "before ms": 1e3 * before, "after ms": 1e3 * after,
                     "ray floor ms": 1e3 * floor, "after / before": after / before,
                     "before / floor": before / floor, "after / floor": after / floor})
        print(_fmt(rows[-1]), flush=True)
    return rows


SCHEMES = [("uncoded", {}), ("ignore", {}), ("frc", {}), ("crc", {})]


def bench_delay(tmp: Path, quick: bool) -> list[dict]:
    from gradcode.runtime import RunConfig, TrainSpec, train

    rows = []
    n, s = 8, 3
    rounds = 6 if quick else 10
    data = {"n_samples": 4000, "n_features": 100}
    from gradcode import make_code, make_delay_model, simulate

    for delay in ((0.0, 0.2) if quick else (0.0, 0.1, 0.2, 0.4)):
        row = {"delay s": delay}
        agree, sim_ms = {}, {}
        for name, _ in SCHEMES:
            res = train(TrainSpec(name, workers=n, stragglers=s, delay=delay, data="tandon-synthetic",
                                  data_params=data),
                        run=RunConfig(rounds=rounds, eval_every=0, run_dir=tmp / f"dl-{name}-{delay}"))
            row[f"{name} ms"] = 1e3 * float(np.median(res.round_times[1:]))
            if delay > 0:  # the simulator on the same model and seed: same stragglers?
                code = make_code(name, n=n) if name == "uncoded" else make_code(name, n=n, s=s)
                model = make_delay_model("fixed", stragglers=s, delay=delay, base=0.0)
                sim = simulate(code, model, rounds, seed=0)
                agree[name] = float(np.mean((sim.arrivals < 0).__eq__(res.arrivals < 0).all(axis=1)))
                sim_ms[name] = 1e3 * float(np.median(sim.round_times[1:]))
        rows.append(row)
        print(_fmt(row), flush=True)
        if agree:
            print("   simulated ms: " + "  ".join(f"{k}={v:.4g}" for k, v in sim_ms.items())
                  + "   rounds with the same stragglers as simulated: "
                  + "  ".join(f"{k}={v:.2f}" for k, v in agree.items()), flush=True)
    return rows


def bench_target(tmp: Path, quick: bool) -> list[dict]:
    from gradcode.problems import DataSpec, make_dataset, make_optimizer, make_problem
    from gradcode.runtime import RunConfig, TrainSpec, train

    n, s, delay, seed = 8, 3, 0.2, 0
    data = {"n_samples": 8000, "n_features": 100}
    K = 15 if quick else 30
    rounds = 2 * K
    ds = make_dataset(DataSpec("tandon-synthetic", data, seed=seed))
    problem = make_problem("logistic", ds)
    lr = 1.0 / problem.smoothness()
    opt = make_optimizer("nesterov", lr=lr)
    x = problem.init_params()
    st = opt.init(x)
    for k in range(K):
        x, st = opt.step(x, problem.full_gradient(x), st, k)
    target = problem.objective(x)
    rows = []
    for name, _ in SCHEMES:
        optimizer = "sgd" if name == "ignore" else "nesterov"
        res = train(TrainSpec(name, workers=n, stragglers=s, delay=delay, data="tandon-synthetic", data_params=data,
                              optimizer=optimizer, seed=seed),
                    run=RunConfig(rounds=rounds, eval_every=0, run_dir=tmp / f"tg-{name}"))
        hit = np.flatnonzero(res.losses[:, 0] <= target + 1e-12)
        rows.append({
            "scheme": name, "optimizer": optimizer, "target loss": target,
            "rounds to target": int(hit[0]) + 1 if hit.size else None,
            "time to target s": float(res.elapsed[hit[0]]) if hit.size else None,
            "median round ms": 1e3 * float(np.median(res.round_times)),
            "final loss": res.final_loss,
        })
        print(_fmt(rows[-1]), flush=True)
    return rows


def _fmt(row: dict) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and rounds")
    ap.add_argument("--only", choices=["overhead", "delay", "target", "scale"], action="append")
    ap.add_argument("--against", metavar="REF", help="compare (a) with git revision REF, side by side")
    ap.add_argument("--repeats", type=int, default=3, help="alternations of --against (default 3)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=20, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child([tuple(s) for s in json.loads(args.child)], args.reps)
        return
    if args.against:
        print(f"# (a) side by side: this tree (after) vs {args.against} (before); median ms per round")
        bench_against(args.against, args.repeats, args.quick)
        return
    from gradcode.runtime.cluster import init_ray

    which = args.only or ["overhead", "delay", "target"]
    with tempfile.TemporaryDirectory(prefix="gcbench-") as tmp:
        init_ray(num_cpus=2)
        tmp = Path(tmp)
        if "overhead" in which:
            print("# (a) master overhead per round (median), against the Ray and memcpy floors")
            bench_overhead(tmp, args.quick)
        if "delay" in which:
            print("# (b) median time per round (ms) as the injected delay grows; n=8, s=3")
            bench_delay(tmp, args.quick)
        if "target" in which:
            print("# (c) time to a target loss under injected stragglers; n=8, s=3, delay=0.2 s")
            bench_target(tmp, args.quick)
        if "scale" in which:
            print("# (d) round time against the number of workers; d=1e5, uncoded, workers reserve no CPU")
            bench_scale(tmp, args.quick)
        import ray

        ray.shutdown()


if __name__ == "__main__":
    main()
