"""Problems-layer benchmarks; results go to BENCHMARKS.md.

(a) partial gradient of one partition, logistic regression on the Amazon look-alike (26215 x ~2.4e5
    sparse one-hot + interactions, 45 non-zeros per row), n = 10 partitions: ``Problem.gradient``
    on contiguous rows (cached CSR slice) against the floor of the two sparse products
    ``X_j @ w`` and ``X_j.T @ r`` on a pre-sliced matrix, against non-contiguous rows (fancy
    indexing each call), and against densified features (what a dense implementation would cost);
(b) the same on Tandon's dense synthetic data (p = 100) with the paper's 554400 / 12 rows per
    partition, against the floor of the two BLAS products;
(c) time to build each dataset from its spec (what a Ray actor pays in ``__init__``).

Run: ``python benchmarks/bench_problems.py [--quick]``. Medians; ratios between measurements
interleaved in the same run.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from scipy.special import expit

from gradcode.problems import DataSpec, make_dataset, make_problem, partition_rows
from _timing import interleaved  # noqa: E402


def once(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    reps = 5 if args.quick else 30
    print(f"# {platform.processor() or platform.machine()}, numpy {np.__version__}")

    # (a) sparse logistic on the Amazon look-alike
    t_build, ds = once(lambda: make_dataset(DataSpec("amazon-synthetic", {}, seed=0)))
    p = make_problem("logistic", ds, l2=1e-4)
    w = 0.01 * np.random.default_rng(0).standard_normal(p.dim)
    rows = partition_rows(ds.n_train, np.full(10, 0.1))[3]
    Xj, yj = ds.X_train[rows[0] : rows[-1] + 1], ds.y_train[rows]
    scattered = np.sort(np.random.default_rng(1).choice(ds.n_train, rows.size, replace=False))
    p.gradient(w, rows)  # fill the slice cache

    def floor():
        r = expit(Xj @ w[:-1] + w[-1]) - yj
        return Xj.T @ r

    fns = [lambda: p.gradient(w, rows), floor, lambda: p.gradient(w, scattered)]
    t_grad, t_floor, t_fancy = interleaved(fns, reps)
    print(f"(a) amazon-synthetic n_train={ds.n_train} d={p.dim} nnz/row=45, one partition of {rows.size} rows")
    print(f"    Problem.gradient, contiguous rows : {t_grad * 1e3:8.3f} ms")
    print(f"    floor (X_j @ w, X_j.T @ r)        : {t_floor * 1e3:8.3f} ms   ratio {t_grad / t_floor:.2f}")
    print(f"    non-contiguous rows (fancy index) : {t_fancy * 1e3:8.3f} ms   ratio {t_fancy / t_floor:.2f}")
    dense_rows = rows[:256]
    Xd = ds.X_train[dense_rows[0] : dense_rows[-1] + 1].toarray()
    yd = ds.y_train[dense_rows]

    def dense():
        return Xd.T @ (expit(Xd @ w[:-1] + w[-1]) - yd)

    def sparse256():
        return p.gradient(w, dense_rows)

    p.gradient(w, dense_rows)
    t_dense, t_sp256 = interleaved([dense, sparse256], max(3, reps // 3))
    print(f"    256 rows: sparse {t_sp256 * 1e3:.3f} ms, densified {t_dense * 1e3:.3f} ms "
          f"(x{t_dense / t_sp256:.0f}; dense for all {rows.size} rows would need "
          f"{rows.size * p.dim * 8 / 2**30:.1f} GiB)")

    # (b) dense logistic, Tandon's synthetic data at the paper's size
    n_paper = 554400 if not args.quick else 55440
    t_tandon, dt = once(lambda: make_dataset(DataSpec("tandon-synthetic", {"n_samples": n_paper}, seed=0, test_fraction=0.0)))
    pt = make_problem("logistic", dt)
    wt = 0.1 * np.random.default_rng(0).standard_normal(pt.dim)
    rows_t = partition_rows(dt.n_train, np.full(12, 1 / 12))[5]
    Xt, ytr = dt.X_train[rows_t[0] : rows_t[-1] + 1], dt.y_train[rows_t]

    def floor_t():
        return Xt.T @ (expit(Xt @ wt[:-1] + wt[-1]) - ytr)

    g_t, f_t = interleaved([lambda: pt.gradient(wt, rows_t), floor_t], reps)
    print(f"(b) tandon-synthetic n={n_paper} p=100, one of 12 partitions ({rows_t.size} rows)")
    print(f"    Problem.gradient {g_t * 1e3:.3f} ms, floor {f_t * 1e3:.3f} ms, ratio {g_t / f_t:.2f}")

    # (c) build times
    print("(c) make_dataset(spec) wall time")
    print(f"    amazon-synthetic (32769 rows, {ds.n_features} features): {t_build:.2f} s")
    print(f"    tandon-synthetic ({n_paper} rows, p=100)            : {t_tandon:.2f} s")
    for name in ("breast-cancer", "digits"):
        t, _ = once(lambda: make_dataset(DataSpec(name, {}, seed=0)))
        print(f"    {name:16s}: {t:.3f} s")


if __name__ == "__main__":
    main()
