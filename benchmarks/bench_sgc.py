"""Sequential gradient coding: the master's bookkeeping per round of SR-SGC and M-SGC in
the simulator's event path at n = 256, and the parameter search of App. J at n = 256.

(a) ``round``: ``gradcode.simulate(scheme, trace, 480, close=mu)`` (the paper's 480 jobs, mu = 1,
the decodable wait-out) on a synthetic trace (256 workers, ``1 + Exp(0.2)`` seconds, 3% of the
cells 2 s slower, load slope 3 s per unit load). ``scheme`` is the time spent inside the
scheme's protocol calls (``plan``, ``on_result``, ``ready``, ``close``, measured by wrapping
them, and the batched calls ``plan_loads``, ``ready_after``, ``on_results`` and
``close_rounds`` that replace them for batched schemes), i.e. the master's bookkeeping; ``total``
the whole simulated round (the simulator's own event handling included). The paper's parameters: M-SGC (1, 2, 27), SR-SGC (2, 3, 23), and the
static CRC s = 15 through the same event path for reference. The sequential codes play whole
blocks of rounds in one compiled call (``play_rounds``); ``scheme`` is then that call.

(b) ``tune``: :func:`gradcode.schemes.sgc.tune.tune` over every parameter set of each family
(GC: s = 0..255; SR-SGC and M-SGC: W <= max_W, default J, every lambda, every delay T that the
profile fits): J = 80 on a 100-round profile with W <= 8 (the earlier default) and W <= J, J = 30
on a 40-round profile (the paper's probe, App. K), J = 480 on a 500-round profile (the paper's
jobs); bounded (tune's default) and exhaustive.

(c) ``ray``: multi-model training on Ray (SGC App. I: job j trains model j mod M) through the
public :func:`gradcode.runtime.train`, M-SGC against GC (CRC) and uncoded on the same injected
delays: n = 8 workers, M = 4 logistic-regression models, J = 40 jobs (J + T rounds: the same
jobs for every scheme). The delays are a trace replayed with SGC App. J's additive load rule,
slept in full (``inject="full"``: the real gradient of the small problem takes milliseconds):
``0.05 s + Exp(0.01 s)`` at the uncoded load 1/n, isolated straggling rounds (B = 1) of
``+0.3 s`` for one or two workers in 40 % of the rounds, and ``alpha = 0.4`` s per unit load, so
that a worker computing all the data needs 0.4 s more than one computing 1/n of it. Rounds
close as soon as the due job decodes, or with ``--close MU [--waitout all]`` by the paper's
mu-rule (the same rule in the runtime and the simulator). Reported: the total wall time of the
J jobs (plan to close, summed over the rounds), the median round and the rounds waited out,
median over repeats, with the simulator's total of the same rounds under the same rule.

(d) ``build``: constructing M-SGC and SR-SGC (B = 1, W = 2) at n = 256 for every 8th lambda and
lambda = 255: the worst time.

Run: ``python benchmarks/bench_sgc.py [--quick] [--only round|tune|build|ray] [--against REV]
[--n 64,256,1024] [--close MU] [--waitout all]``. ``--n``: the numbers of workers of (a) (the
profile and the parameters stay the paper's). Times are medians of wall time; ``--against REV`` times ``tune`` at
git revision REV beside the working tree's, interleaved.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
import warnings
from pathlib import Path

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
    for name in ("plan", "on_result", "ready", "close", "plan_loads", "ready_after", "on_results", "close_rounds",
                 "play_rounds"):
        if not hasattr(scheme, name):
            continue
        fn = getattr(scheme, name)

        def wrapper(*a, _fn=fn, **k):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0

        setattr(scheme, name, wrapper)
    return spent


def bench_rounds(repeats, rounds, n=256):
    alpha = 3.0
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


def tune_at(rev: str):
    """``tune`` as it was at git revision ``rev`` (its module loaded from ``git show``), for
    timings side by side with the working tree's in one run."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    src = subprocess.run(["git", "show", f"{rev}:src/gradcode/schemes/sgc/tune.py"], check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "tune_at_rev.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("tune_at_rev", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tune_at_rev"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.tune


def _old_tune(old, X, J, fam, max_W):
    """A revision's tune called in its own vocabulary: 0.2.0's names, else 0.1's (``alpha``,
    ``max_W``; before the families took the registries' names, crc was "gc")."""
    try:
        return old(X, jobs=J, load_slope=3.0, families=(fam,), max_w=max_W)
    except TypeError:
        return old(X, jobs=J, alpha=3.0, families=({"crc": "gc"}.get(fam, fam),), max_W=max_W)


def bench_tune(repeats, quick=False, against=None):
    """(b): each search on a synthetic profile (``profile``), n = 256: the bounded search (tune's
    default, ``within=0``), the exhaustive one (``within=None``: every set replayed to the end), and
    with ``--against REV`` the revision's tune on the same (profile, J, max_W), interleaved."""
    n = 256
    # (profile rounds, J, max_W): the W <= 8 search of earlier revisions, the default W <= J, the
    # paper's probe (App. K: 40 rounds) and its 480 jobs
    cases = [(100, 80, 8), (100, 80, None), (40, 30, None)] + ([] if quick else [(500, 480, None)])
    tune(profile(8, 12), jobs=4, load_slope=1.0)  # compile (or load) the replay before timing
    old = None if against is None else tune_at(against)
    print(f"\n(b) tune, n = {n}, waitout = all (seconds, median of {repeats}; sets: searched / listed)")
    print(f"{'family':7s} {'rounds':>6s} {'J':>4s} {'max_W':>5s} {'sets':>16s} {'bounded':>8s} {'every':>8s}"
          + (f" {against:>9s}" if against else "") + "  best")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sets the profile is too short for
        for R, J, max_W in cases:
            X = profile(n, R, seed=1)
            for fam in ("crc", "sr-sgc", "m-sgc"):
                runs = {"bounded": lambda: tune(X, jobs=J, load_slope=3.0, families=(fam,), max_w=max_W),
                        "every": lambda: tune(X, jobs=J, load_slope=3.0, families=(fam,), max_w=max_W, within=None)}
                if old is not None and max_W is not None:
                    runs[against] = lambda: _old_tune(old, X, J, fam, max_W)
                if J >= 480 and fam == "sr-sgc":
                    del runs["every"]  # 438k sets of 500 rounds each: minutes
                times = {k: [] for k in runs}
                for _ in range(repeats):  # interleaved: the versions share the machine's state
                    for k, fn in runs.items():
                        t0 = time.perf_counter()
                        res = fn()
                        times[k].append(time.perf_counter() - t0)
                        if k == "bounded":
                            b, listed, searched = res.best[fam], len(res.candidates), len(res.candidates) + res.bounded
                cells = [f"{statistics.median(times[k]):8.2f}" if k in times else f"{'-':>8s}"
                         for k in ("bounded", "every")]
                if against:
                    cells.append(f"{statistics.median(times[against]):9.2f}" if against in times else f"{'-':>9s}")
                print(f"{fam:7s} {R:6d} {J:4d} {str(max_W or 'J'):>5s} {f'{searched} / {listed}':>16s} "
                      + " ".join(cells) + f"  {b.params} load {b.load:.4f} est. {b.time:.1f} s")


def bench_build(repeats):
    """(d) Constructors at n = 256 over a grid: W in 2, 3, 8, 16, 32, 64, B in 1, 2, W/2, W - 1
    (M-SGC: B < W; SR-SGC: B | W - 1 not needed to build), lambda every 32 and 255; the worst
    median build time of each family with its parameters, and what the worst one keeps in
    memory (tracemalloc, a separate build)."""
    import tracemalloc

    n = 256
    print(f"\n(d) building the schemes at n = {n} (seconds, median of {repeats})")
    for cls in (MSGC, SRSGC):
        worst, built = (0.0, None), 0
        for W in (2, 3, 8, 16, 32, 64):
            for B in sorted({1, 2, W // 2, W - 1}):
                for lam in [*range(1 if cls is SRSGC else 0, n, 32), n - 1]:
                    try:
                        cls(n, B, W, lam)
                    except ValueError:  # not a valid parameter set of this family
                        continue
                    built += 1
                    times = []
                    for _ in range(repeats):
                        t0 = time.perf_counter()
                        cls(n, B, W, lam)
                        times.append(time.perf_counter() - t0)
                    worst = max(worst, (statistics.median(times), (B, W, lam)))
        tracemalloc.start()
        scheme = cls(n, *worst[1])
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del scheme
        print(f"{cls.__name__:6s} {built} parameter sets: worst {worst[0]:.3f} s at (B, W, lam) = {worst[1]};"
              f" it keeps {kept / 1e6:.1f} MB (peak {peak / 1e6:.1f} MB while built)")


def ray_delays(n, rounds, seed=2):
    """The injected delays of (c): seconds at load 1/n, isolated straggling rounds (B = 1)."""
    rng = np.random.default_rng(seed)
    X = 0.05 + rng.exponential(0.01, (rounds, n))
    for t in range(rounds):
        if rng.random() < 0.4 and not (t and (X[t - 1] > 0.3).any()):  # bursts of length 1, a gap after
            X[t, rng.choice(n, size=rng.integers(1, 3), replace=False)] += 0.3
    return X


def build(code, n, params):
    """A code (``make_code``) or a scheme family (``make_scheme``) by name, as train builds it."""
    from gradcode.schemes import SCHEMES, make_scheme

    return make_scheme(code, n=n, **params) if code in SCHEMES else gradcode.make_code(code, n=n, **params)


def bench_ray(repeats, jobs, close="decodable", waitout="decodable"):
    import ray

    from gradcode.runtime import RunConfig, TrainSpec, train

    n, M, alpha = 8, 4, 0.4
    X = ray_delays(n, jobs + 4)
    model = gradcode.make_delay_model("trace", delays=X, trace_load=1 / n, load_slope=alpha)
    runs = {  # (scheme, scheme_params)
        "uncoded": ("uncoded", {}),
        "gc (crc s=2)": ("crc", {"s": 2}),
        "m-sgc (1,2,2)": ("m-sgc", {"B": 1, "W": 2, "lam": 2, "jobs": jobs}),
        "sr-sgc (1,2,2)": ("sr-sgc", {"B": 1, "W": 2, "lam": 2, "jobs": jobs}),
    }
    tmp = tempfile.mkdtemp(prefix="gcb-")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=os.path.join(tmp, "ray"))
    try:
        rule = "decodable" if close == "decodable" else f"mu = {close:g}, wait-out {waitout}"
        print(f"\n(c) Ray, n = {n}, M = {M} models, J = {jobs} jobs, injected delays in full, close: {rule}"
              f" (ray {ray.__version__}; seconds, median of {repeats})")
        print(f"{'scheme':16s} {'load':>6s} {'rounds':>6s} {'total':>7s} {'round':>7s} {'waitouts':>8s}"
              f" {'modelled':>8s} {'sim waitouts':>12s}")
        for name, (code, params) in runs.items():
            scheme = build(code, n, params)
            rounds = jobs + int(getattr(scheme, "delay", 0) or 0)
            totals, medians, waits = [], [], []
            for r in range(repeats):
                res = train(TrainSpec(code, workers=n, scheme_params=params, delay_model=model, inject="full", models=M,
                                      seed=0, close=close, waitout=waitout),
                            run=RunConfig(rounds=rounds, eval_every=0, run_dir=os.path.join(tmp, f"{code}-{r}")))
                totals.append(float(np.sum(res.round_times)))
                medians.append(float(np.median(res.round_times)))
                waits.append(int(res.waitouts.sum()))
            # the simulator's time of the same rounds under the same closing rule
            sim = gradcode.simulate(build(code, n, params), model, rounds, seed=0, close=close,
                                    **({} if close == "decodable" else {"waitout": waitout}))
            print(f"{name:16s} {scheme.load:6.3f} {rounds:6d} {statistics.median(totals):7.2f}"
                  f" {statistics.median(medians):7.3f} {statistics.median(waits):8g} {sim.total_time:8.2f}"
                  f" {sim.waitouts:12d}")
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["round", "tune", "build", "ray"], action="append")
    ap.add_argument("--against", metavar="REV", help="time tune at git revision REV beside the working tree's")
    ap.add_argument("--n", default="256", help="(a): the numbers of workers, comma-separated (default 256)")
    ap.add_argument("--close", type=float, default=None, help="(c): the mu of the mu-rule (default: decodable)")
    ap.add_argument("--waitout", choices=["decodable", "all"], default="decodable", help="(c): with --close")
    args = ap.parse_args()
    which = args.only or ["round", "tune", "build", "ray"]
    if (args.close is not None or args.waitout != "decodable") and "ray" not in which:
        ap.error("--close and --waitout set the closing rule of (c) ray only")
    if args.waitout == "all" and args.close is None:
        ap.error("--waitout all waits out the mu-rule's deadline: give --close MU too")
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    if "round" in which:
        for n in (int(x) for x in args.n.split(",")):
            bench_rounds(1 if args.quick else 3, 120 if args.quick else 480, n)
    if "build" in which:
        bench_build(3)
    if "tune" in which:
        bench_tune(1 if args.quick else 3, args.quick, args.against)
    if "ray" in which:
        bench_ray(1 if args.quick else 3, 12 if args.quick else 40,
                  "decodable" if args.close is None else args.close, args.waitout)


if __name__ == "__main__":
    main()
