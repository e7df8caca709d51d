"""The compiled rounds of GC-DC, M-SGC and SR-SGC in the simulator, side by side with another
revision: 20,000 rounds at n = 16-20 (the event path plays them in compiled blocks,
:meth:`Scheme.play_rounds`), medians of 5 after a warm-up, each revision in fresh processes,
alternating; the simulated total is printed too (it must be the same bit for bit).

Run: ``python benchmarks/bench_compiled_rounds.py --against REV [--pairs 3]``. Used to check that
a change to the kernels' signatures (named records, inlined helpers) costs nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time

from _timing import exported_source, with_source

CASES = {
    "gc-dc": (dict(n=20, clusters=5, r=3, ssi="perfect"), ("gilbert-elliot", dict(p_switch=0.05, initial_slow=5)),
              {}),
    "m-sgc": (dict(n=16, B=2, W=3, lam=3), ("shifted-exp", dict(mu=1.0, alpha=0.01)), dict(close=1.0, waitout="all")),
    "sr-sgc": (dict(n=16, B=2, W=3, lam=3), ("shifted-exp", dict(mu=1.0, alpha=0.01)), dict(close=1.0, waitout="all")),
}
ROUNDS, REPEATS = 20_000, 5


def measure() -> dict:
    """``{scheme: (median ms, total time)}`` in this process."""
    import statistics

    import gradcode
    from gradcode.schemes import make_scheme

    out = {}
    for name, (params, (model, mparams), rule) in CASES.items():
        dmodel = gradcode.make_delay_model(model, **mparams)

        def run():
            started = time.perf_counter()
            res = gradcode.simulate(make_scheme(name, **params), dmodel, ROUNDS, seed=1, **rule)
            return time.perf_counter() - started, res.total_time

        run()  # compile, or load the compiled kernels
        runs = [run() for _ in range(REPEATS)]
        out[name] = (1e3 * statistics.median(t for t, _ in runs), runs[0][1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--against", required=True, help="git revision to compare with")
    ap.add_argument("--pairs", type=int, default=3, help="before/after pairs, alternating")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure()))
        return
    print(f"# {platform.node()} {platform.machine()}, {time.strftime('%Y-%m-%d')}; {ROUNDS} rounds, median of"
          f" {REPEATS}, ms (simulated total in brackets)")
    with exported_source(args.against) as src:
        for pair in range(args.pairs):
            for label in ("before", "after"):
                done = subprocess.run([sys.executable, __file__, "--against", args.against, "--child"],
                                      env=with_source(src[label]), capture_output=True, text=True, check=True)
                res = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"{label:6s} " + "  ".join(f"{k} {v[0]:.1f} ({v[1]:.6f})" for k, v in res.items()))


if __name__ == "__main__":
    main()
