"""Simulator benchmarks (issue 4, item 7); results go to BENCHMARKS.md.

(a) simulated rounds per second of the vectorized path for static codes at n = 100 under
    ``shifted-exp`` (mu = 1, alpha = 0.01), target >= 50,000 rounds/s on the 2-core machines, with
    the share spent drawing the delay model (``model.draw``) measured side by side;
(b) the cost per round of the protocol path (``method="events"``: plan, per-message on_result,
    ready, close, the path dynamic schemes use), at n = 100, and its ratio to the vectorized path
    on the same code;
(c) the cost per round of the generic decodability rule (binary search with ``can_decode``), the
    vectorized fallback for codes without a closed rule, on CRC n = 100.

Run: ``python benchmarks/bench_simulator.py [--quick]``. Medians over repeats; measurements that
are compared are interleaved in the same run.
"""

from __future__ import annotations

import argparse
import os
import platform

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


def bench_fast(rounds, repeats):
    model = gradcode.make_delay_model("shifted-exp", mu=1.0, alpha=0.01)
    print(f"(a) vectorized path, n = 100, shifted-exp mu=1 alpha=0.01, {rounds} rounds, median of {repeats}")
    print(f"    {'code':<42} {'s/run':>8} {'rounds/s':>11} {'draw s':>8} {'draw share':>10}")
    for name, params in CODES:
        code = gradcode.make_code(name, **params)
        gradcode.simulate(code, model, 1000, seed=0)  # warm caches
        t_sim, t_draw = interleaved(
            [lambda: gradcode.simulate(code, model, rounds, seed=1, progress=False),
             lambda: model.draw(rounds, code.n, 1)],
            repeats,
        )
        print(f"    {repr(code):<42} {t_sim:8.3f} {rounds / t_sim:11,.0f} {t_draw:8.3f} {t_draw / t_sim:10.0%}")


def bench_events(rounds, fast_rounds, repeats):
    model = gradcode.make_delay_model("shifted-exp", mu=1.0, alpha=0.01)
    print(f"\n(b) protocol path (method='events'), n = 100, {rounds} rounds, median of {repeats};"
          f" vectorized path on {fast_rounds} rounds alongside")
    print(f"    {'code':<42} {'close':>9} {'events us/round':>16} {'fast us/round':>14} {'ratio':>7}")
    for name, params in CODES[:3] + CODES[5:]:
        code = gradcode.make_code(name, **params)
        for close in ("decodable", 0.5):
            gradcode.simulate(code, model, 50, seed=0, method="events", close=close)
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
    closed = gradcode.schemes.decode_rule(code)
    assert np.array_equal(rule.decode_time(A[:20]), closed.decode_time(A[:20]))
    t_gen, t_closed = interleaved([lambda: rule.decode_time(A), lambda: closed.decode_time(A)], repeats)
    print(f"\n(c) decode times of {rounds} rounds of {code!r}: generic rule (binary search with can_decode)"
          f" {t_gen / rounds * 1e6:.0f} us/round, closed rule (order statistic) {t_closed / rounds * 1e6:.3f}"
          f" us/round, ratio {t_gen / t_closed:,.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cpus,"
          f" {platform.machine()}")
    if args.quick:
        bench_fast(20_000, 3)
        bench_events(100, 20_000, 3)
        bench_generic(100, 3)
    else:
        bench_fast(100_000, 7)
        bench_events(300, 100_000, 5)
        bench_generic(300, 5)


if __name__ == "__main__":
    main()
