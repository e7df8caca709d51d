"""Simulator benchmarks; results go to BENCHMARKS.md.

(a) simulated rounds per second of the vectorized path for static codes at n = 100 under
    ``shifted-exp`` (mu = 1, alpha = 0.01), target >= 50,000 rounds/s on the 2-core machines, with
    the share spent drawing the delay model (``model.draw``) measured side by side;
(b) the cost per round of the protocol path (``method="events"``: plan, per-message on_result,
    ready, close, the path dynamic schemes use), at n = 100, and its ratio to the vectorized path
    on the same code;
(c) the cost per round of the generic decodability rule (binary search with ``can_decode``), the
    vectorized fallback for codes without a closed rule, on CRC n = 100;
(d) memory: peak memory of one run of CRC n = 12, s = 2 under ``shifted-exp``
    for 1e5, 1e6 and 1e7 rounds, with and without per-round records, each in a fresh process:
    its peak resident set (``ru_maxrss``) less the same process's after imports and a warm-up
    run, and tracemalloc's peak (numpy reports its buffers to it) during the run.

``--baseline REV`` also runs the simulator of git revision ``REV`` (its ``src/gradcode/sim``,
imported as a separate package over the current codes and schemes, so the comparison isolates
the simulator), interleaved with the current one in (a) and alongside it in (d).

Run: ``python benchmarks/bench_simulator.py [--quick] [--baseline REV] [--only a,d]``. Medians over
repeats; measurements that are compared are interleaved in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import gradcode
from gradcode.schemes import GenericRule, StaticScheme
from _timing import interleaved  # noqa: E402


CODES = [
    ("crc", dict(n=100, s=10, seed=0)),
    ("frc", dict(n=100, s=9)),
    ("gc-sc", dict(n=100, clusters=10, s=2, seed=0)),
    ("uncoded", dict(n=100)),
    ("ignore", dict(n=100, s=10)),
    ("partial", dict(n=100, s=10, alpha=2)),
]


def load_baseline(rev: str) -> str:
    """Write revision ``rev``'s ``src/gradcode/sim`` into a temporary folder as the package
    ``_baseline_sim`` (its ``gradcode.sim.`` imports pointed at itself) and return the folder."""
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    names = subprocess.run(["git", "ls-tree", "--name-only", rev, "src/gradcode/sim/"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    folder = Path(tempfile.mkdtemp(prefix="gradcode-baseline-"))
    pkg = folder / "_baseline_sim"
    pkg.mkdir()
    for path in names:
        text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root, capture_output=True, text=True,
                              check=True).stdout
        (pkg / Path(path).name).write_text(text.replace("gradcode.sim.", "_baseline_sim."))
    return str(folder)


def baseline_simulate(folder: str):
    if folder not in sys.path:
        sys.path.insert(0, folder)
    from _baseline_sim import simulate

    return simulate


def bench_fast(rounds, repeats, baseline=None):
    model = gradcode.make_delay_model("shifted-exp", mu=1.0, alpha=0.01)
    print(f"(a) vectorized path, n = 100, shifted-exp mu=1 alpha=0.01, {rounds} rounds, median of {repeats}")
    if baseline is not None:
        old = baseline_simulate(baseline)
        print(f"    {'code':<42} {'baseline':>10} {'default':>10} {'ratio':>6} {'records=True':>12} {'ratio':>6}"
              f" {'draw share':>10}   (rounds/s; ratio: baseline time / current time)")
    else:
        print(f"    {'code':<42} {'s/run':>8} {'rounds/s':>11} {'draw s':>8} {'draw share':>10}")
    for name, params in CODES:
        code = gradcode.make_code(name, **params)
        gradcode.simulate(code, model, 1000, seed=0)  # warm caches
        fns = [lambda: gradcode.simulate(code, model, rounds, seed=1, progress=False),
               lambda: model.draw(rounds, code.n, 1)]
        if baseline is not None:
            old(code, model, 1000, seed=0)
            fns += [lambda: old(code, model, rounds, seed=1, progress=False),
                    lambda: gradcode.simulate(code, model, rounds, seed=1, progress=False, records=True)]
        t_sim, t_draw, *more = interleaved(fns, repeats)
        if baseline is not None:
            t_old, t_rec = more
            print(f"    {repr(code):<42} {rounds / t_old:10,.0f} {rounds / t_sim:10,.0f} {t_old / t_sim:6.2f}"
                  f" {rounds / t_rec:12,.0f} {t_old / t_rec:6.2f} {t_draw / t_sim:10.0%}")
        else:
            print(f"    {repr(code):<42} {t_sim:8.3f} {rounds / t_sim:11,.0f} {t_draw:8.3f} {t_draw / t_sim:10.0%}")


def bench_events(rounds, fast_rounds, repeats):
    model = gradcode.make_delay_model("shifted-exp", mu=1.0, alpha=0.01)
    print(f"\n(b) protocol path (method='events'), n = 100, {rounds} rounds, median of {repeats};"
          f" vectorized path on {fast_rounds} rounds alongside")
    print(f"    {'code':<42} {'close':>9} {'events us/round':>16} {'fast us/round':>14} {'ratio':>7}")
    for name, params in CODES[:3] + CODES[5:]:
        code = gradcode.make_code(name, **params)
        for close in ("decodable", 0.5):
            gradcode.simulate(StaticScheme(code), model, 50, seed=0, close=close)
            t_ev, t_fast = interleaved(
                [lambda: gradcode.simulate(StaticScheme(code), model, rounds, seed=2, close=close,
                                           progress=False),
                 lambda: gradcode.simulate(code, model, fast_rounds, seed=2, close=close, progress=False)],
                repeats,
            )
            ev, fa = t_ev / rounds * 1e6, t_fast / fast_rounds * 1e6
            print(f"    {repr(code):<42} {str(close):>9} {ev:16.0f} {fa:14.2f} {ev / fa:7.0f}")


def bench_generic(rounds, repeats):
    model = gradcode.make_delay_model("shifted-exp", mu=1.0, alpha=0.01)
    code = gradcode.make_code("crc", n=100, s=10, seed=0)
    draw = model.draw(rounds, code.n, 3)
    A = draw.times(code.worker_loads)[:, :, None]
    rule = GenericRule(code)
    closed = code.decode_rule()
    assert np.array_equal(rule.decode_time(A[:20]), closed.decode_time(A[:20]))
    t_gen, t_closed = interleaved([lambda: rule.decode_time(A), lambda: closed.decode_time(A)], repeats)
    print(f"\n(c) decode times of {rounds} rounds of {code!r}: generic rule (binary search with can_decode)"
          f" {t_gen / rounds * 1e6:.0f} us/round, closed rule (order statistic) {t_closed / rounds * 1e6:.3f}"
          f" us/round, ratio {t_gen / t_closed:,.0f}")


def bench_small_n(rounds, repeats, baseline):
    import time

    old = baseline_simulate(baseline)
    model = gradcode.make_delay_model("shifted-exp", mu=1.0, alpha=0.01)
    code = gradcode.make_code("crc", n=12, s=2, seed=0)
    fns = [lambda: old(code, model, rounds, seed=1, progress=False),
           lambda: gradcode.simulate(code, model, rounds, seed=1, progress=False, records=False),
           lambda: gradcode.simulate(code, model, rounds, seed=1, progress=False, records=True)]
    for f in fns:
        f()
    t_old, t_off, t_on = interleaved(fns, repeats, clock=time.process_time)
    print(f"\n(e) {code!r}, shifted-exp, {rounds} rounds, CPU ms, median of {repeats}: baseline {t_old * 1e3:.1f},"
          f" records=False {t_off * 1e3:.1f} ({t_old / t_off:.2f}x), records=True {t_on * 1e3:.1f}"
          f" ({t_old / t_on:.2f}x)")


_MEMORY_CHILD = """
import json, resource, sys, time, tracemalloc
baseline, rounds, records, model_name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
import gradcode
if baseline:
    sys.path.insert(0, baseline)
    from _baseline_sim import simulate
else:
    simulate = gradcode.simulate
code = gradcode.make_code("crc", n=12, s=2, seed=0)
model = gradcode.make_delay_model(model_name, **({"mu": 1.0, "alpha": 0.01} if model_name == "shifted-exp" else {}))
kw = {} if records == "default" else {"records": records == "on"}
simulate(code, model, 1000, seed=0, **kw)  # imports, caches

def status(key):  # kB
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])

try:  # reset the peak RSS (VmHWM) to the current RSS, so the peak below is the run's own
    open("/proc/self/clear_refs", "w").write("5")
    reset = True
except OSError:
    reset = False
before = status("VmRSS:")
t0 = time.perf_counter()
tracemalloc.start()
res = simulate(code, model, rounds, seed=1, progress=False, **kw)
_, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
seconds = time.perf_counter() - t0
peak_rss = status("VmHWM:") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rss_kib": peak_rss - before, "base_kib": before, "traced": peak, "seconds": seconds,
                  "mean": res.total_time / rounds}))
"""


def bench_memory(sizes, baseline=None):
    print("\n(d) peak memory of one run, CRC n=12 s=2, shifted-exp mu=1 alpha=0.01, fresh process each"
          " (RSS: peak during the run less the RSS before it; traced: tracemalloc's peak)")
    print("    (gilbert-elliot: a Markov model, streamed block by block from forks of its Generator)")
    print(f"    {'simulator':<10} {'model':<15} {'records':<8} {'rounds':>11} {'peak RSS MiB':>13}"
          f" {'traced MiB':>11} {'s (traced)':>11} {'mean round s':>13}")
    variants = [("current", "", "off", "shifted-exp"), ("current", "", "on", "shifted-exp")]
    if baseline is not None:
        variants.append(("baseline", baseline, "default", "shifted-exp"))
    variants.append(("current", "", "off", "gilbert-elliot"))
    for rounds in sizes:
        for label, folder, records, model in variants:
            out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, folder, str(rounds), records, model],
                                 capture_output=True, text=True)
            head = f"    {label:<10} {model:<15} {records:<8} {rounds:>11,}"
            if out.returncode:
                print(f"{head} failed: {(out.stderr.strip().splitlines() or ['killed'])[-1]}")
                continue
            r = json.loads(out.stdout)
            print(f"{head} {r['rss_kib'] / 1024:13,.1f} {r['traced'] / 2**20:11,.1f} {r['seconds']:11.2f}"
                  f" {r['mean']:13.6f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    ap.add_argument("--baseline", metavar="REV", help="also run the simulator of this git revision")
    ap.add_argument("--only", default="a,b,c,d,e", help="sections to run, e.g. a,d")
    args = ap.parse_args()
    only = set(args.only.split(","))
    baseline = load_baseline(args.baseline) if args.baseline else None
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cpus,"
          f" {platform.machine()}" + (f"; baseline: {args.baseline}" if baseline else ""))
    try:
        run(only, args.quick, baseline)
    finally:
        if baseline is not None:
            shutil.rmtree(baseline, ignore_errors=True)


def run(only, quick, baseline):
    if "a" in only:
        bench_fast(20_000 if quick else 100_000, 3 if quick else 7, baseline)
    if "b" in only:
        bench_events(100 if quick else 300, 20_000 if quick else 100_000, 3 if quick else 5)
    if "c" in only:
        bench_generic(100 if quick else 300, 3 if quick else 5)
    if "e" in only and baseline is not None:
        bench_small_n(20_000 if quick else 100_000, 3 if quick else 9, baseline)
    if "d" in only:
        bench_memory([100_000, 1_000_000] if quick else [100_000, 1_000_000, 10_000_000], baseline)


if __name__ == "__main__":
    main()
