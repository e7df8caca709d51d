"""Benchmarks of the communication-efficient and adaptive codes; results go to
BENCHMARKS.md.

(a) Decoding coefficients for a fresh straggler pattern, structured decoder (``code.decoding``
    with the cache cleared) against the generic SVD solve on the received rows
    (``code.generic_decoding``), as n grows to 1000:
    * CommFR-GC, systematic MDS ``[20, 10]`` (p = n/20 groups; Proposition 1's per-group solve),
      s = n/10 random stragglers;
    * CommFR-GC, LDPC ``[n, n/2]`` from the (dc, dv) = (6, 3) ensemble, one group, every worker
      straggling independently with probability 0.3 < p* = 0.4294 (the regime of Remark 3,
      m = s = O(n)); peeling decoder of Proposition 2;
    * AGC with d = n/2, L = 2, s = n/10 stragglers, r_s messages each (solve on E_F, eq. 29);
    * G-AGC with d = 4, L = 4 (eq. 31 groups), one straggler in every other group.
(b) Encoding throughput of one worker, D = 2^20 coordinates per partial gradient, against the
    floor of reading its partial gradients once (``partials.sum()``), float64 and float32.
(c) LDPC at Remark 3's scale through ``make_code("commfr", construction="ldpc")``: the dense
    contract (a fresh decoding: the peeling's coefficients and the contract's check of them) at N
    up to 3200; the operator code (``dense=False``) up to N = 20,000: build, one worker's encode,
    and the decode of m = 16-long messages at erasure rates 0.2 and 0.3, with the decode's
    measured error and its bound.

Run: ``python benchmarks/bench_comm_codes.py [--quick]``. Medians over repeats; ratios are between
measurements interleaved in the same run. BLAS runs single-threaded (``BENCH_THREADS`` to change).
"""

from __future__ import annotations

import os

# One BLAS thread for both sides of every comparison: on the shared 2-core machine, OpenBLAS
# threads spinning against other jobs make small solves erratic. Override with BENCH_THREADS.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = os.environ.get("BENCH_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import gradcode  # noqa: E402
from _timing import interleaved  # noqa: E402


def fresh(code, pattern):
    def run():
        code.clear_cache()
        return code.decoding(pattern)

    return run


def patterns_commfr_sys(code, rng):
    while True:
        S = set(rng.choice(code.n, size=code.n // 10, replace=False).tolist())
        pattern = {w: 1 for w in range(code.n) if w not in S}
        if code.can_decode(pattern):
            code.clear_cache()
            return pattern, len(S)


def patterns_ldpc(code, rng, p=0.3):
    for _ in range(100):
        pattern = {w: 1 for w in range(code.n) if rng.random() >= p}
        if code.can_decode(pattern):
            code.clear_cache()
            return pattern, code.n - len(pattern)
    raise RuntimeError("peeling failed on 100 random erasure patterns")


def patterns_agc(code, rng):
    s = code.n // 10
    S = set(rng.choice(code.n, size=s, replace=False).tolist())
    r = code.rounds_needed(s)
    return {w: r for w in range(code.n) if w not in S}, s


def patterns_gagc(code, rng):
    S = {int(rng.integers(a, b)) for j, (a, b) in enumerate(code.groups) if j % 2 == 0}
    per = [sum(a <= w < b for w in S) for a, b in code.groups]
    r = round(code.group_comm_cost(per) * code.chunks)
    return {w: r for w in range(code.n) if w not in S}, len(S)


def bench_a(sizes, repeats):
    rng = np.random.default_rng(0)
    rows = []
    families = [
        ("commfr mds-systematic [20,10]", lambda n: gradcode.make_code(
            "commfr", n=n, k=n // 20, N=20, K=10, construction="mds-systematic", seed=0), patterns_commfr_sys),
        ("commfr ldpc [n, n/2] (6,3)", lambda n: gradcode.make_code(
            "commfr", n=n, k=1, N=n, K=n // 2, construction="ldpc", seed=0), patterns_ldpc),
        ("agc d=n/2 L=2", lambda n: gradcode.make_code("agc", n=n, d=n // 2, L=2, seed=0), patterns_agc),
        ("g-agc d=4 L=4", lambda n: gradcode.make_code("g-agc", n=n, d=4, L=4, seed=0), patterns_gagc),
    ]
    for label, make, pick in families:
        for n in sizes:
            t0 = time.perf_counter()
            code = make(n)
            build = time.perf_counter() - t0
            pattern, s = pick(code, rng)
            sol = code.decoding(pattern)
            gen = code.generic_decoding(pattern)
            reps = repeats if n <= 250 else max(3, repeats // 3)
            t_fast, t_gen = interleaved([fresh(code, pattern), lambda: code.generic_decoding(pattern)], reps)
            rows.append(
                dict(code=label, n=n, s=s, rows=sum(pattern.values()), build_s=build, fast_ms=t_fast * 1e3,
                     generic_ms=t_gen * 1e3, speedup=t_gen / t_fast, cond_fast=sol.condition,
                     cond_generic=gen.condition)
            )
            r = rows[-1]
            print(f"  {label:32s} n={n:5d} s={s:4d} rows={r['rows']:5d} build={build:7.2f}s "
                  f"structured={r['fast_ms']:9.3f} ms generic={r['generic_ms']:9.2f} ms "
                  f"speed-up={r['speedup']:8.1f}x cond={r['cond_fast']:.1e}/{r['cond_generic']:.1e}",
                  flush=True)
    return rows


def bench_b(repeats, D=1 << 20):
    rng = np.random.default_rng(1)
    codes = [
        gradcode.make_code("commfr", n=8, k=8, N=4, K=2, construction="mds-systematic", seed=0),
        gradcode.make_code("commfr", n=20, k=20, N=20, K=10, construction="mds-gaussian", seed=0),
        gradcode.make_code("cgc", n=8, d=4, m=2),
        gradcode.make_code("agc", n=8, d=4, L=4, seed=0),
        gradcode.make_code("agc", n=8, d=4, L=12, seed=0),
    ]
    rows = []
    for code in codes:
        p = len(code.placement[0])
        for dtype in (np.float64, np.float32):
            partials = rng.standard_normal((p, D)).astype(dtype)
            t_enc, t_floor = interleaved([lambda: code.encode(0, partials), lambda: partials.sum()], repeats)
            gb = partials.nbytes / 1e9
            rows.append(dict(code=repr(code), dtype=np.dtype(dtype).name, partitions=p,
                             messages=code.messages_of(0), encode_ms=t_enc * 1e3, floor_ms=t_floor * 1e3,
                             ratio=t_enc / t_floor, gb_per_s=gb / t_enc))
            r = rows[-1]
            print(f"  {r['code']:58s} {r['dtype']:8s} p={p:3d} R={r['messages']:3d} encode={r['encode_ms']:8.2f} ms "
                  f"floor={r['floor_ms']:7.2f} ms ratio={r['ratio']:5.2f} ({r['gb_per_s']:.2f} GB/s)", flush=True)
    return rows


def bench_c(dense_sizes, operator_sizes, repeats, m=16):
    """(c) LDPC at Remark 3's scale through ``make_code("commfr", construction="ldpc")``, one group
    [N, N/2] (6, 3): the dense contract (coefficients formed and checked) at N up to 3200, and the
    operator code (``dense=False``: no dense generator, a worker's generator column when asked,
    decodes that peel the messages) up to N = 20,000: build, one parity worker's encode, and the
    decode of m-long messages at erasure rates 0.2 and 0.3 with its error and bound. The operator
    code runs first, so the process's peak RSS after each N is what that N took at most."""
    import resource

    rng = np.random.default_rng(3)
    for N in operator_sizes:
        t0 = time.perf_counter()
        code = gradcode.make_code("commfr", n=N, k=1, N=N, K=N // 2, construction="ldpc", seed=0, dense=False)
        build = time.perf_counter() - t0
        d = m * code.K
        g = rng.standard_normal((1, d))
        parity = np.setdiff1d(np.arange(N), code.info_positions)
        workers = iter(rng.permutation(parity).tolist())  # a fresh worker each time: its column is computed
        t_enc = interleaved([lambda: code.encode(next(workers), g)], repeats)[0]
        x = np.empty((N, m))  # every worker's message, as it computes it: its column times the chunks
        for lo in range(0, N, 1000):
            x[lo:lo + 1000] = code.ldpc.generator_columns(np.arange(lo, min(N, lo + 1000))) @ g.reshape(code.K, m)
        line = (f"  commfr ldpc operator N={N:6d} gap={code.ldpc.gap:4d} build={build:6.2f} s"
                f"  encode one={t_enc * 1e3:6.2f} ms")
        for p in (0.2, 0.3):
            rec = np.flatnonzero(rng.random(N) >= p).tolist()
            msgs = {w: x[w] for w in rec}
            if not code.can_decode({w: 1 for w in rec}):
                line += f"  p={p}: stopping set"
                continue
            t_dec = interleaved([lambda: code.decode_report(msgs, dim=d, rtol=1e300)], repeats)[0]
            rep = code.decode_report(msgs, dim=d, rtol=1e300)
            err = float(np.linalg.norm(rep.gradient - g[0]) / np.linalg.norm(g[0]))
            taken = "accepted" if rep.relative_bound <= gradcode.codes.DEFAULT_RTOL["float64"] else "refused"
            line += (f"  p={p}: decode={t_dec * 1e3:7.2f} ms error={err:.0e} (bound {rep.relative_bound:.0e},"
                     f" {taken} at the default rtol)")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(line + f"  peak RSS so far {rss:.0f} MB", flush=True)
    for N in dense_sizes:
        t0 = time.perf_counter()
        code = gradcode.make_code("commfr", n=N, k=1, N=N, K=N // 2, construction="ldpc", seed=0, dense=True)
        build = time.perf_counter() - t0
        pattern, s = patterns_ldpc(code, rng)
        t_fresh = interleaved([fresh(code, pattern)], repeats)[0]
        print(f"  commfr ldpc dense    N={N:6d} build={build:7.2f} s  fresh decoding (peeling + the contract's check)="
              f"{t_fresh * 1e3:9.2f} ms  (s={s})", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats (smoke run)")
    ap.add_argument("--part", choices=("a", "b", "c", "all"), default="all", help="run only part (a), (b) or (c)")
    args = ap.parse_args()
    sizes = [60, 120] if args.quick else [60, 120, 240, 500, 1000]
    repeats = 3 if args.quick else 9
    print(f"# bench_comm_codes  python {platform.python_version()}  numpy {np.__version__}  "
          f"{platform.processor() or platform.machine()}  BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}")
    if args.part in ("a", "all"):
        print("(a) decoding coefficients for a fresh straggler pattern: structured vs generic SVD solve")
        bench_a(sizes, repeats)
    if args.part in ("b", "all"):
        print("(b) encode one worker, D = 2^20 per partial gradient, vs reading its partials once")
        bench_b(repeats)
    if args.part in ("c", "all"):
        print("(c) LDPC [N, N/2] (6, 3) through make_code('commfr'): the dense contract, and the operator code, m = 16")
        bench_c([400, 800] if args.quick else [400, 800, 1600, 3200],
                [1000, 3000] if args.quick else [1000, 3000, 10000, 20000], 3)


if __name__ == "__main__":
    main()
