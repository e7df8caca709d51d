"""Decoding benchmarks of the foundation codes; results go to BENCHMARKS.md.

(a) checked decodes, n = 64, s = 8, d = 1e6, float64 and float32 messages (and the ResNet-18-size
    round: uncoded, n = 4, 11.2 M float32), against the memory floor of one ``sum(axis=0)`` over
    the rows used, in the messages' own type, measured side by side; plain arrays (the master
    measures the norms the bound needs) and Messages (the workers' scales travel with them);
(b) decoding coefficients for a fresh CRC straggler pattern at n = 64, 128, 256 (s ~ n/10), the
    structured solve *with* its check against the encoder rows (what a user gets; ``check_ms`` is
    the check alone) against ``numpy.linalg.lstsq`` on the received rows, and the worst condition
    number / coefficient size / amplification over random patterns;
(c) the cost of a decoding-cache hit;
(d) the cost of verified decoding (a corrupted worker named and excluded) against a plain decode;
(e) decoding coefficients for a fresh pattern of the group codes at n = 1000
    (G-AGC's groups share one subsystem, so a local pattern is solved and checked once);
(f) the master's peak memory in a round at n = 64 (``--only memory``): codes that decode as
    messages arrive against codes that hold them.

Run: ``python benchmarks/bench_decode.py [--quick] [--only a|b|c|d|gagc|memory]``. Medians over repeats;
ratios are taken between measurements interleaved in the same run.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import gradcode
from _timing import interleaved, median_time  # noqa: E402


def bench_a(repeats):
    """Checked decodes (the error bound included) against the floor of one ``sum(axis=0)`` over
    the same rows in the messages' own type, float64 and float32, side by side: ``arrays`` are
    plain arrays (the master measures each row's norm in the sum's pass), ``messages`` are
    :class:`~gradcode.codes.messages.Message` objects carrying the scales a runtime worker sends."""
    from gradcode.codes.messages import Message

    n, s, d = 64, 8, 1_000_000
    rng = np.random.default_rng(0)
    out = []
    for name, dtype in (("crc", np.float64), ("frc", np.float64), ("crc", np.float32), ("uncoded-11M", np.float32)):
        # frc needs (s + 1) | n: n = 63 is the nearest size to 64; the ResNet-18-size round: n = 4
        if name == "frc":
            code, dim = gradcode.make_code("frc", n=63, s=s), d
        elif name == "crc":
            code, dim = gradcode.make_code("crc", n=n, s=s, seed=0), d
        else:
            code, dim = gradcode.make_code("uncoded", n=4), 11_220_132
        stragglers = set(rng.choice(code.n, size=code.tolerance, replace=False).tolist())
        alive = [w for w in range(code.n) if w not in stragglers]
        arrays = {w: rng.standard_normal((1, dim)).astype(dtype) for w in alive}
        messages = {w: Message(arrays[w][0], float(np.linalg.norm(arrays[w][0]))) for w in alive}
        used = [w for w, _ in code.decoding({w: 1 for w in alive}).rows]  # warm the cache
        floor_rows = np.concatenate([arrays[w] for w in used])
        t_arr, t_msg, t_floor = interleaved(
            [lambda: code.decode(arrays, dim=dim), lambda: code.decode(messages, dim=dim),
             lambda: floor_rows.sum(axis=0)],
            repeats,
        )
        out.append(dict(code=repr(code), dtype=np.dtype(dtype).name, rows_used=len(used), arrays_ms=t_arr * 1e3,
                        messages_ms=t_msg * 1e3, floor_ms=t_floor * 1e3, arrays_ratio=t_arr / t_floor,
                        messages_ratio=t_msg / t_floor))
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
    n = 64, s = 8, d = 1e6, every worker in (8 checks), honest and with one corrupted worker; the
    exact syndrome (the default) and a 2-column random sketch (``probes=2``) side by side."""
    n, s, d = 64, 8, 1_000_000
    code = gradcode.make_code("crc", n=n, s=s, seed=0)
    rng = np.random.default_rng(1)
    partials = rng.standard_normal((code.k, d))
    msgs = {w: code.encode(w, partials[list(code.placement[w])]) for w in range(n)}
    bad = dict(msgs)
    bad[7] = msgs[7] * 1000.0
    code.decode(msgs, dim=d)  # warm the cache
    t_plain, t_ver, t_bad, t_sk, t_skbad = interleaved(
        [lambda: code.decode(msgs, dim=d), lambda: code.decode_verified(msgs, dim=d),
         lambda: code.decode_verified(bad, dim=d), lambda: code.decode_verified(msgs, dim=d, probes=2),
         lambda: code.decode_verified(bad, dim=d, probes=2)], repeats)
    return [dict(what="plain decode (64 workers, cached)", ms=t_plain * 1e3, ratio=1.0),
            dict(what="verified, honest", ms=t_ver * 1e3, ratio=t_ver / t_plain),
            dict(what="verified, worker 7 corrupted (named, re-decoded)", ms=t_bad * 1e3, ratio=t_bad / t_plain),
            dict(what="verified on a sketch (probes=2), honest", ms=t_sk * 1e3, ratio=t_sk / t_plain),
            dict(what="verified on a sketch (probes=2), worker 7 corrupted", ms=t_skbad * 1e3,
                 ratio=t_skbad / t_plain)]


def bench_gagc(repeats):
    """(e) G-AGC (d = 4, L = 4) and G-CGC (d = 4, m = 2) at n = 1000, 250 groups of 4: a fresh
    decode, ``clear_cache()`` (the whole code's cache and its groups' shared subsystem's) then
    ``decoding``, for 5 random stragglers with the others sending what the worst group needs
    (eq. 33); every answer is still checked against the encoder rows. ``parts_warm_ms``: only the
    whole code's cache cleared (the groups' local solves cached: the assembly and its check).
    Target: fresh <= 2 ms; it was 81 ms with every group solved on its own."""
    rows = []
    for label, code in (("g-agc d=4 L=4", gradcode.make_code("g-agc", n=1000, d=4, L=4, seed=0)),
                        ("g-cgc d=4 m=2", gradcode.make_code("g-cgc", n=1000, d=4, m=2, seed=0))):
        rng = np.random.default_rng(0)
        patterns = []
        for _ in range(repeats):
            S = set(rng.choice(code.n, size=5, replace=False).tolist())
            r = round(code.group_comm_cost([sum(a <= w < b for w in S) for a, b in code.groups]) * code.chunks)
            patterns.append({w: r for w in range(code.n) if w not in S})

        def fresh(i=[0]):
            code.clear_cache()
            code.decoding(patterns[i[0] % repeats])
            i[0] += 1

        def parts_warm(i=[0]):
            code.decoding(patterns[i[0] % repeats])  # outside the timing below: warms the groups
            with code._lock:
                code._cache.clear()
            t0 = time.perf_counter()
            code.decoding(patterns[i[0] % repeats])
            i[0] += 1
            return time.perf_counter() - t0

        t_fresh = median_time(fresh, repeats)
        t_warm = float(np.median([parts_warm() for _ in range(repeats)]))
        sol = code.decoding(patterns[0])
        rows.append(dict(code=label, n=code.n, groups=len(code.parts), subsystems=len(code.subcodes),
                         rows=len(sol.rows), fresh_ms=t_fresh * 1e3, parts_warm_ms=t_warm * 1e3,
                         amplification=sol.amplification))
    return rows


def bench_memory(repeats):
    """(f) What the master holds in a round at n = 64, d = 1e6, float32 messages: each message is
    a fresh allocation as it arrives (as Ray's object store hands it over), given to a
    ``StaticScheme`` and dropped by the caller; ``tracemalloc``'s peak over the round, in messages'
    worth (4 MB). Codes that stream add each message in as it arrives (a float64 sum: 2 messages'
    worth); the others hold what they will decode. ``round_ms``: the round's master work."""
    import tracemalloc

    from gradcode.codes.messages import Message
    from gradcode.schemes import StaticScheme

    d = 1_000_000
    rows = []
    for name, params in (("uncoded", dict(n=64)), ("frc", dict(n=64, s=7)), ("crc", dict(n=64, s=8, seed=0))):
        code = gradcode.make_code(name, **params)
        base = np.random.default_rng(0).standard_normal(d).astype(np.float32)
        scheme = StaticScheme(code)
        peaks, times = [], []
        for t in range(max(3, repeats // 5)):
            scheme.plan(t)
            tracemalloc.start()
            t0 = time.perf_counter()
            for w in range(code.n):
                scheme.on_result(t, w, 0, Message(base.copy(), 1.0), 0.0)  # a fresh message, dropped here
            scheme.close(t, frozenset(range(code.n)))
            times.append(time.perf_counter() - t0)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        rows.append(dict(code=repr(code), streams=scheme.streams, peak_messages=float(np.median(peaks)) / base.nbytes,
                         round_ms=float(np.median(times)) * 1e3))
    return rows


def table(title, rows):
    print(f"\n{title}")
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--only", choices=["a", "b", "c", "d", "gagc", "memory"], help="run one section")
    args = parser.parse_args()
    reps = 5 if args.quick else 21
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, numpy {np.__version__}, "
          f"{time.strftime('%Y-%m-%d')}")
    sections = {
        "a": lambda: table("(a) checked decode vs the sum(axis=0) floor (n=64, s=8, d=1e6; 4 x 11.2M)", bench_a(reps)),
        "b": lambda: table("(b) fresh-pattern CRC coefficients vs numpy.linalg.lstsq", bench_b(reps * 3)),
        "c": lambda: table("(c) decoding cache (crc n=256 s=27)", bench_c(reps)),
        "d": lambda: table("(d) verified decoding (crc n=64 s=8, d=1e6, all 64 workers)", bench_d(max(5, reps // 3))),
        "gagc": lambda: table("(e) fresh group-code coefficients at n=1000 (5 stragglers)", bench_gagc(reps)),
        "memory": lambda: table("(f) master's peak memory in a round (n=64, d=1e6 float32)", bench_memory(reps)),
    }
    for name, run in sections.items():
        if args.only in (None, name):
            run()


if __name__ == "__main__":
    main()
