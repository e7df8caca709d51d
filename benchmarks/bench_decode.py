"""Decoding benchmarks of the foundation codes (issue 2); results go to BENCHMARKS.md.

(a) decode time, n = 64, s = 8, d = 1e6, float64, against the memory floor: one ``sum`` over the
    same (n - s) x d array (``sum(axis=0)``, the issue's floor), measured side by side, and against
    a stricter read-once floor (a full reduction ``sum()`` that only streams the array once);
(b) decoding coefficients for a fresh CRC straggler pattern at n = 64, 128, 256 (s ~ n/10), the
    structured solve *with* its check against the encoder rows (what a user gets; ``check_ms`` is
    the check alone) against ``numpy.linalg.lstsq`` on the received rows, and the worst condition
    number / coefficient size / amplification over random patterns;
(c) the cost of a decoding-cache hit;
(d) the cost of verified decoding (a corrupted worker named and excluded) against a plain decode.

Run: ``python benchmarks/bench_decode.py [--quick]``. Medians over repeats; ratios are taken
between measurements interleaved in the same run.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import gradcode
from _timing import interleaved, median_time  # noqa: E402


def bench_a(repeats):
    n, s, d = 64, 8, 1_000_000
    rng = np.random.default_rng(0)
    out = []
    for name in ("crc", "frc"):
        # frc needs (s + 1) | n: n = 63 is the nearest size to 64
        code = gradcode.make_code("frc", n=63, s=s) if name == "frc" else gradcode.make_code("crc", n=n, s=s, seed=0)
        stragglers = set(rng.choice(code.n, size=s, replace=False).tolist())
        alive = [w for w in range(code.n) if w not in stragglers]
        msgs = {w: rng.standard_normal((1, d)) for w in alive}
        stacked = np.concatenate([msgs[w] for w in alive])
        used = {w for w, _ in code.decoding({w: 1 for w in alive}).rows}  # warm the cache
        floor_rows = stacked[: len(used)] if name == "frc" else stacked
        t_dec, t_floor, t_read = interleaved(
            [lambda: code.decode(msgs, dim=d), lambda: floor_rows.sum(axis=0), lambda: floor_rows.sum()],
            repeats,
        )
        out.append(
            dict(code=repr(code), rows_used=len(used), decode_ms=t_dec * 1e3, floor_ms=t_floor * 1e3,
                 ratio=t_dec / t_floor, read_once_ms=t_read * 1e3, ratio_read_once=t_dec / t_read)
        )
    return out


def bench_b(repeats):
    rows = []
    for n in (64, 128, 256):
        s = round(n / 10) if n != 256 else 27
        code = gradcode.make_code("crc", n=n, s=s, seed=0)
        rng = np.random.default_rng(n)
        patterns = [
            tuple((w, 1) for w in sorted(set(range(n)) - set(rng.choice(n, s, replace=False).tolist())))
            for _ in range(repeats)
        ]
        code._fast_solve(patterns[0])  # one-time precomputation (null space), outside the timing
        B = code.B

        def fast(i=[0]):
            # what a fresh pattern costs a user: the structured solve and its check against B
            code._trusted_solve(patterns[i[0] % repeats])
            i[0] += 1

        def check(i=[0]):
            code._check_answer(sols[i[0] % repeats])
            i[0] += 1

        def lstsq(i=[0]):
            alive = [w for w, _ in patterns[i[0] % repeats]]
            np.linalg.lstsq(B[alive].T, np.ones(n), rcond=None)
            i[0] += 1

        sols = [code._trusted_solve(p) for p in patterns]
        t_fast, t_lstsq, t_check = interleaved([fast, lstsq, check], repeats)
        worst_cond_rows = worst_cond_fast = worst_coef = worst_amp = 0.0
        for p, sol in zip(patterns, sols):
            alive = [w for w, _ in p]
            worst_cond_rows = max(worst_cond_rows, np.linalg.cond(B[alive]))
            worst_cond_fast = max(worst_cond_fast, sol.condition)
            worst_coef = max(worst_coef, sol.max_coefficient)
            worst_amp = max(worst_amp, sol.amplification)
        rows.append(
            dict(n=n, s=s, fast_ms=t_fast * 1e3, check_ms=t_check * 1e3, lstsq_ms=t_lstsq * 1e3,
                 speedup=t_lstsq / t_fast, worst_cond_B_I=worst_cond_rows,
                 worst_cond_nullspace=worst_cond_fast, max_abs_coefficient=worst_coef,
                 worst_amplification=worst_amp, patterns=len(patterns))
        )
    return rows


def bench_c(repeats):
    code = gradcode.make_code("crc", n=256, s=27, seed=0)
    pattern = {w: 1 for w in range(27, 256)}
    code.decoding(pattern)
    t_hit = median_time(lambda: code.decoding(pattern), repeats * 50)
    t_can = median_time(lambda: code.can_decode(pattern), repeats * 50)
    code.clear_cache()
    t_miss = median_time(lambda: (code.clear_cache(), code.decoding(pattern)), repeats)
    return [dict(what="cache hit: decoding()", us=t_hit * 1e6), dict(what="cache hit: can_decode()", us=t_can * 1e6),
            dict(what="cache miss (fresh solve)", us=t_miss * 1e6)]


def bench_d(repeats):
    """Verified decoding (codes/verify.py) against the plain decode on the same messages: CRC
    n = 64, s = 8, d = 1e6, every worker in (8 checks), honest and with one corrupted worker."""
    n, s, d = 64, 8, 1_000_000
    code = gradcode.make_code("crc", n=n, s=s, seed=0)
    rng = np.random.default_rng(1)
    partials = rng.standard_normal((code.k, d))
    msgs = {w: code.encode(w, partials[list(code.placement[w])]) for w in range(n)}
    bad = dict(msgs)
    bad[7] = msgs[7] * 1000.0
    code.decode(msgs, dim=d)  # warm the cache
    t_plain, t_ver, t_bad = interleaved(
        [lambda: code.decode(msgs, dim=d), lambda: code.decode_verified(msgs, dim=d),
         lambda: code.decode_verified(bad, dim=d)], repeats)
    return [dict(what="plain decode (64 workers, cached)", ms=t_plain * 1e3, ratio=1.0),
            dict(what="verified, honest", ms=t_ver * 1e3, ratio=t_ver / t_plain),
            dict(what="verified, worker 7 corrupted (named, re-decoded)", ms=t_bad * 1e3, ratio=t_bad / t_plain)]


def table(title, rows):
    print(f"\n{title}")
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    reps = 5 if args.quick else 21
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, numpy {np.__version__}, "
          f"{time.strftime('%Y-%m-%d')}")
    table("(a) decode vs memory floor (n=64, s=8, d=1e6, float64)", bench_a(reps))
    table("(b) fresh-pattern CRC coefficients vs numpy.linalg.lstsq", bench_b(reps * 3))
    table("(c) decoding cache (crc n=256 s=27)", bench_c(reps))
    table("(d) verified decoding (crc n=64 s=8, d=1e6, all 64 workers)", bench_d(max(5, reps // 3)))


if __name__ == "__main__":
    main()
