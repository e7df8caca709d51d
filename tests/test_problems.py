"""Problems layer: datasets, partitions, gradients, metrics and bad input."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from gradcode.problems import (
    DataSpec,
    Dataset,
    available_datasets,
    available_problems,
    make_dataset,
    make_problem,
    partition_rows,
)
from gradcode.problems.amazon import COLUMNS, one_hot_interactions, read_amazon_csv

SMALL = {
    "tandon-synthetic": {"n_samples": 300, "n_features": 7},
    "linear-synthetic": {"n_samples": 200, "n_features": 6},
    "amazon-synthetic": {"n_samples": 600, "scale": 0.02},
    "breast-cancer": {},
    "digits": {},
}


@pytest.fixture(scope="module")
def datasets():
    return {name: make_dataset(DataSpec(name, params, seed=3)) for name, params in SMALL.items()}


def _same(a, b):
    if sp.issparse(a):
        return sp.issparse(b) and a.shape == b.shape and (a != b).nnz == 0
    return np.array_equal(a, b)


# ------------------------------------------------------------------------------------- data specs


def test_registry_lists_every_dataset():
    assert set(SMALL) | {"amazon-csv", "file"} == set(available_datasets())  # file-based ones: tests/test_data_files.py


@pytest.mark.parametrize("name", sorted(SMALL))
def test_datasets_are_deterministic_given_the_spec(name, datasets):
    spec = DataSpec(name, SMALL[name], seed=3)
    again = make_dataset(pickle.loads(pickle.dumps(spec)))  # what a restarted actor does
    first = datasets[name]
    for attr in ("X_train", "y_train", "X_test", "y_test"):
        assert _same(getattr(first, attr), getattr(again, attr)), attr
    assert again.spec == spec


@pytest.mark.parametrize("name", ["tandon-synthetic", "linear-synthetic", "amazon-synthetic", "breast-cancer", "digits"])
def test_seed_changes_the_split(name):
    a = make_dataset(DataSpec(name, SMALL[name], seed=0))
    b = make_dataset(DataSpec(name, SMALL[name], seed=1))
    assert not np.array_equal(a.y_train, b.y_train) or not _same(a.X_train, b.X_train)


def test_documented_shapes(datasets):
    d = datasets["tandon-synthetic"]
    assert (d.n_train, d.n_test, d.n_features, d.task) == (240, 60, 7, "binary")
    assert set(np.unique(d.y_train)) == {0.0, 1.0}
    d = datasets["breast-cancer"]
    assert (d.n_train + d.n_test, d.n_features, d.task) == (569, 30, "binary")
    np.testing.assert_allclose(d.X_train.mean(axis=0), 0, atol=1e-12)  # standardised on train rows
    d = datasets["digits"]
    assert (d.n_train + d.n_test, d.n_features, d.task, d.n_classes, d.image_shape) == (1797, 64, "multiclass", 10, (1, 8, 8))
    assert d.X_train.max() <= 1.0 and d.y_train.dtype == np.int64
    d = datasets["linear-synthetic"]
    assert (d.n_train, d.n_features, d.task) == (160, 6, "regression")


def test_tandon_synthetic_follows_the_paper_model():
    """x ~ 0.5 N(mu1, I) + 0.5 N(mu2, I), P(y=1|x) = 1/(exp(2 x^T beta*) + 1) (Tandon Sec. 5):
    the mixture means are recovered, and the maximum-likelihood logistic fit is near -2 beta*."""
    from sklearn.linear_model import LogisticRegression as SkLogistic

    d = make_dataset(DataSpec("tandon-synthetic", {"n_samples": 40000, "n_features": 3}, seed=7, test_fraction=0.0))
    mu, beta = d.info["mu"], d.info["beta_true"]
    X = d.X_train
    # each row is nearer (in expectation) to its own component's mean; means of the halves match
    side = (X - mu.mean(axis=0)) @ (mu[1] - mu[0]) > 0
    assert 0.4 < side.mean() < 0.6
    np.testing.assert_allclose(X.mean(axis=0), mu.mean(axis=0), atol=0.05)
    np.testing.assert_allclose(np.cov(X.T), np.eye(3) + np.outer(mu[1] - mu[0], mu[1] - mu[0]) / 4, atol=0.1)
    fit = SkLogistic(C=np.inf, tol=1e-10, max_iter=1000).fit(X, d.y_train)
    np.testing.assert_allclose(fit.coef_[0], -2 * beta, atol=0.12)
    assert abs(fit.intercept_[0]) < 0.1


def test_amazon_synthetic_structure(datasets):
    d = datasets["amazon-synthetic"]
    assert d.task == "binary" and sp.isspmatrix_csr(d.X_train) and d.X_train.dtype == np.float64
    # one active feature per column and per pair of columns: 9 + 36 ones per training row
    np.testing.assert_array_equal(np.diff(d.X_train.indptr), 45)
    assert d.X_train.max() == 1.0
    blocks = d.info["block_sizes"]
    assert len(blocks) == 45 and sum(blocks) == d.n_features
    assert 0.85 < d.y_train.mean() < 0.99  # ~94 % positive, like ACTION
    # unseen test categories encode as zeros, never as extra columns
    assert np.all(np.diff(d.X_test.indptr) <= 45)
    small = make_dataset(DataSpec("amazon-synthetic", {"n_samples": 600, "scale": 0.02, "interactions": False}, seed=3))
    np.testing.assert_array_equal(np.diff(small.X_train.indptr), 9)


def test_amazon_synthetic_default_size_matches_the_paper():
    """Tandon et al. Sec. 5: 26200 training samples, p = 241915 after one-hot + interactions."""
    d = make_dataset(DataSpec("amazon-synthetic", {}, seed=0))
    assert abs(d.n_train - 26200) < 100
    assert 2.0e5 < d.n_features < 2.8e5


def test_amazon_label_is_learnable(datasets):
    from gradcode.problems import make_optimizer

    d = make_dataset(DataSpec("amazon-synthetic", {"n_samples": 3000, "scale": 0.05}, seed=1))
    p = make_problem("logistic", d, l2=1e-3)
    opt = make_optimizer("nesterov", lr=2.0)
    w = p.init_params()
    state = opt.init(w)
    for t in range(60):
        w, state = opt.step(w, p.full_gradient(w), state, t)
    assert p.metrics(w)["roc_auc"] > 0.65


def test_one_hot_interactions_small_example():
    train = np.array([[0, 1], [1, 1], [0, 0]])
    test = np.array([[1, 0], [2, 1]])
    Xtr, Xte, blocks = one_hot_interactions(train, test)
    assert blocks == [2, 2, 3]  # col 0: {0,1}, col 1: {0,1}, pair: {(0,1),(1,1),(0,0)}
    expected_tr = np.array(
        [[1, 0, 0, 1, 0, 1, 0], [0, 1, 0, 1, 0, 0, 1], [1, 0, 1, 0, 1, 0, 0]], dtype=float
    )  # pair codes a*2+b sorted: 0 -> (0,0), 1 -> (0,1), 3 -> (1,1)
    np.testing.assert_array_equal(Xtr.toarray(), expected_tr)
    # (1, 0) pair unseen, value 2 of col 0 unseen: zeros there
    np.testing.assert_array_equal(Xte.toarray(), [[0, 1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0, 0]])


def test_amazon_csv_loader(tmp_path):
    rng = np.random.default_rng(0)
    header = ["ACTION", *COLUMNS, "extra"]
    n = 60
    cats = rng.integers(0, 4, size=(n, 9))
    y = (cats[:, 0] >= 1).astype(int)
    lines = [",".join(header)] + [
        ",".join([str(y[i]), *[f"v{c}" for c in cats[i]], "x"]) for i in range(n)
    ]
    path = tmp_path / "train.csv"
    path.write_text("\n".join(lines) + "\n")
    codes, action = read_amazon_csv(path)
    np.testing.assert_array_equal(codes, cats)  # "v0" < "v1" < ... keeps the order
    np.testing.assert_array_equal(action, y)
    spec = DataSpec("amazon-csv", {"path": str(path)}, seed=0, test_fraction=0.25)
    d = make_dataset(spec)
    assert (d.n_train, d.n_test, d.task) == (45, 15, "binary")
    np.testing.assert_array_equal(np.diff(d.X_train.indptr), 45)
    assert _same(d.X_train, make_dataset(spec).X_train)
    # the label depends on RESOURCE only: logistic regression separates it
    p = make_problem("logistic", d)
    w = p.init_params()
    for _ in range(200):
        w = w - 1.0 * p.full_gradient(w)
    assert p.loss(w) < 0.05 and p.metrics(w)["accuracy"] > 0.8


def test_amazon_csv_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="amazon-synthetic"):
        make_dataset(DataSpec("amazon-csv", {"path": str(tmp_path / "missing.csv")}))
    with pytest.raises(ValueError, match="needs params"):
        make_dataset(DataSpec("amazon-csv", {}))
    bad = tmp_path / "bad.csv"
    bad.write_text("ACTION,RESOURCE\n1,2\n")
    with pytest.raises(ValueError, match="lacks column"):
        read_amazon_csv(bad)
    bad.write_text(",".join(["ACTION", *COLUMNS]) + "\n" + ",".join(["2"] + ["1"] * 9) + "\n")
    with pytest.raises(ValueError, match="must be 0 or 1"):
        read_amazon_csv(bad)


def test_bad_specs():
    with pytest.raises(ValueError, match="unknown dataset 'mnist'; available datasets: amazon-csv"):
        DataSpec("mnist")
    with pytest.raises(TypeError, match="dataset 'digits' does not take 'n_samples'; its parameters are binary$"):
        make_dataset(DataSpec("digits", {"n_samples": 10}))
    with pytest.raises(TypeError, match="holds no arrays"):
        DataSpec("digits", {"x": np.zeros(3)})
    with pytest.raises(ValueError, match="test_fraction"):
        DataSpec("digits", test_fraction=1.0)
    with pytest.raises(ValueError, match="seed"):
        DataSpec("digits", seed=-1)
    with pytest.raises(TypeError, match="DataSpec"):
        make_dataset("digits")
    with pytest.raises(ValueError, match="n_samples"):
        make_dataset(DataSpec("tandon-synthetic", {"n_samples": 1}))


def test_spec_round_trips_through_dict_and_hashes():
    spec = DataSpec("amazon-synthetic", {"n_samples": 600, "scale": 0.02}, seed=5, test_fraction=0.1)
    with pytest.raises(TypeError, match="read-only"):
        spec.params["n_samples"] = 10
    assert pickle.loads(pickle.dumps(spec)) == spec and pickle.loads(pickle.dumps(spec)).params == spec.params
    import json

    assert json.loads(json.dumps(spec.to_dict()))["params"] == {"n_samples": 600, "scale": 0.02}
    assert DataSpec.from_dict(spec.to_dict()) == spec
    assert hash(spec) == hash(DataSpec.from_dict(spec.to_dict()))
    with pytest.raises(ValueError, match="unknown DataSpec fields"):
        DataSpec.from_dict({"dataset": "digits", "sead": 1})


# -------------------------------------------------------------------------------------- partitions


def test_partition_rows_largest_remainder():
    parts = partition_rows(10, [1 / 3, 1 / 3, 1 / 3])
    assert [len(p) for p in parts] == [4, 3, 3]  # equal remainders: the lower index wins
    np.testing.assert_array_equal(np.concatenate(parts), np.arange(10))
    parts = partition_rows(100, [0.125, 0.375, 0.5])
    assert [len(p) for p in parts] == [13, 37, 50]  # 12.5, 37.5: equal remainders, index 0 first
    parts = partition_rows(7, [0.1, 0.2, 0.7])
    assert [len(p) for p in parts] == [1, 1, 5]  # 0.7, 1.4, 4.9: +1 to 4.9 then 0.7
    assert [p[0] for p in parts] == [0, 1, 2]


def test_partition_rows_follows_code_sizes_exhaustively():
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(1, 9))
        sizes = rng.dirichlet(np.ones(k))
        n = int(rng.integers(k * 20, 500))
        try:
            parts = partition_rows(n, sizes)
        except ValueError:
            assert np.any(np.floor(sizes * n) == 0)
            continue
        counts = np.array([len(p) for p in parts])
        assert counts.sum() == n and np.all(np.abs(counts - sizes * n) < 1)
        np.testing.assert_array_equal(np.concatenate(parts), np.arange(n))


def test_partition_rows_bad_input():
    with pytest.raises(ValueError, match="sum to 1"):
        partition_rows(10, [0.5, 0.4])
    with pytest.raises(ValueError, match="would be empty"):
        partition_rows(3, [0.25] * 4)
    with pytest.raises(ValueError, match="non-negative"):
        partition_rows(10, [1.5, -0.5])
    with pytest.raises(ValueError, match="n_samples"):
        partition_rows(0, [1.0])
    with pytest.raises(ValueError, match="1-D"):
        partition_rows(10, [])


# --------------------------------------------------------------------------------------- gradients


def _finite_difference(f, w, eps=1e-6):
    g = np.zeros_like(w)
    for i in range(w.size):
        e = np.zeros_like(w)
        e[i] = eps
        g[i] = (f(w + e) - f(w - e)) / (2 * eps)
    return g


CASES = [
    ("logistic", "tandon-synthetic", {"l2": 0.1}),
    ("logistic", "breast-cancer", {"fit_intercept": False}),
    ("logistic", "amazon-synthetic", {"l2": 0.01}),
    ("linear", "linear-synthetic", {"l2": 0.3}),
    ("softmax", "digits", {"l2": 0.01}),
]


@pytest.mark.parametrize("problem,data,kw", CASES)
def test_gradient_matches_finite_differences(problem, data, kw, datasets):
    p = make_problem(problem, datasets[data], **kw)
    rng = np.random.default_rng(0)
    w = 0.1 * rng.standard_normal(p.dim)
    rows = np.sort(rng.choice(p.n_train, size=min(40, p.n_train), replace=False))
    # check a random subset of coordinates (all of them for small d)
    coords = rng.choice(p.dim, size=min(p.dim, 25), replace=False)

    def f_rows(v):
        return p.loss(v, rows) * rows.size  # sum of l_i over rows

    g = p.gradient(w, rows)
    frozen = w.copy()
    frozen.flags.writeable = False  # as params arrive from Ray's object store
    np.testing.assert_array_equal(p.gradient(frozen, rows), g)
    for i in coords:
        e = np.zeros(p.dim)
        e[i] = 1e-6
        fd = (f_rows(w + e) - f_rows(w - e)) / 2e-6
        assert abs(fd - g[i]) <= 1e-5 * max(1.0, abs(g[i])), (i, fd, g[i])
    # full objective: grad F = g / N + l2 w (intercept excluded)
    G = p.full_gradient(w)
    for i in coords[:8]:
        e = np.zeros(p.dim)
        e[i] = 1e-6
        fd = (p.objective(w + e) - p.objective(w - e)) / 2e-6
        assert abs(fd - G[i]) <= 1e-6 * max(1.0, abs(G[i]))


@pytest.mark.parametrize("problem,data,kw", CASES)
def test_partial_gradients_sum_to_the_full_gradient(problem, data, kw, datasets):
    p = make_problem(problem, datasets[data], **kw)
    w = 0.1 * np.random.default_rng(1).standard_normal(p.dim)
    full = p.gradient(w)
    for sizes in ([1.0], [0.5, 0.5], [0.1, 0.2, 0.3, 0.4], np.full(7, 1 / 7)):
        parts = partition_rows(p.n_train, sizes)
        total = sum(p.gradient(w, rows) for rows in parts)
        np.testing.assert_allclose(total, full, rtol=1e-12, atol=1e-10 * np.abs(full).max())
    # non-contiguous rows, and the mean loss is the row-weighted average of partition losses
    perm = np.random.default_rng(2).permutation(p.n_train)
    halves = [perm[: p.n_train // 3], perm[p.n_train // 3 :]]
    np.testing.assert_allclose(sum(p.gradient(w, r) for r in halves), full, rtol=1e-10, atol=1e-10)
    losses = [p.loss(w, r) * r.size for r in halves]
    assert np.isclose(sum(losses) / p.n_train, p.loss(w))


def test_sparse_and_dense_logistic_agree(datasets):
    d = datasets["amazon-synthetic"]
    dense = Dataset("dense", "binary", d.X_train.toarray(), d.y_train, d.X_test.toarray(), d.y_test)
    ps, pd = make_problem("logistic", d, l2=0.1), make_problem("logistic", dense, l2=0.1)
    w = 0.05 * np.random.default_rng(0).standard_normal(ps.dim)
    rows = np.arange(10, 90)
    np.testing.assert_allclose(ps.gradient(w, rows), pd.gradient(w, rows), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ps.full_gradient(w), pd.full_gradient(w), rtol=1e-12, atol=1e-14)
    assert ps.metrics(w) == pytest.approx(pd.metrics(w), rel=1e-12)
    assert isinstance(ps.gradient(w, rows), np.ndarray)


def test_linear_regression_closed_form(datasets):
    p = make_problem("linear", datasets["linear-synthetic"], l2=0.01)
    w = p.solve()
    np.testing.assert_allclose(p.full_gradient(w), 0, atol=1e-10)
    assert p.metrics(w)["r2"] > 0.99
    assert p.regularizer_gradient(w)[-1] == 0.0  # the intercept is not penalised


def test_metrics_match_scikit_learn(datasets):
    from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

    d = datasets["breast-cancer"]
    p = make_problem("logistic", d)
    w = 0.3 * np.random.default_rng(0).standard_normal(p.dim)
    prob = p.predict(w, d.X_test)
    m = p.metrics(w)
    assert m["roc_auc"] == pytest.approx(roc_auc_score(d.y_test, prob))
    assert m["accuracy"] == pytest.approx(accuracy_score(d.y_test, prob >= 0.5))
    assert m["loss"] == pytest.approx(log_loss(d.y_test, prob), rel=1e-9)
    ps = make_problem("softmax", datasets["digits"])
    w = 0.1 * np.random.default_rng(1).standard_normal(ps.dim)
    m = ps.metrics(w)
    P = ps.predict(w, datasets["digits"].X_test)
    assert m["loss"] == pytest.approx(log_loss(datasets["digits"].y_test, P, labels=range(10)), rel=1e-9)
    assert set(m) == {"loss", "accuracy", "roc_auc"}


def test_regularizer_applies_once(datasets):
    p = make_problem("logistic", datasets["tandon-synthetic"], l2=0.5)
    w = np.random.default_rng(0).standard_normal(p.dim)
    np.testing.assert_allclose(p.regularizer_gradient(w)[:-1], 0.5 * w[:-1])
    np.testing.assert_allclose(p.full_gradient(w, p.gradient(w)), p.full_gradient(w))
    assert p.objective(w) == pytest.approx(p.loss(w) + 0.25 * w[:-1] @ w[:-1])


# ------------------------------------------------------------------------------------- bad input


def test_bad_problem_input(datasets):
    with pytest.raises(ValueError, match="unknown problem 'svm'; available problems: cnn, linear, logistic"):
        make_problem("svm", datasets["digits"])
    with pytest.raises(ValueError, match="task"):
        make_problem("logistic", datasets["digits"])  # multiclass data
    with pytest.raises(ValueError, match="task"):
        make_problem("linear", datasets["breast-cancer"])
    with pytest.raises(TypeError, match="Dataset"):
        make_problem("logistic", np.zeros((3, 3)))
    with pytest.raises(ValueError, match="l2"):
        make_problem("logistic", datasets["breast-cancer"], l2=-1.0)
    with pytest.raises(TypeError, match="problem 'logistic' does not take 'lr'; its parameters are l2, fit_intercept$"):
        make_problem("logistic", datasets["breast-cancer"], lr=1.0)
    p = make_problem("logistic", datasets["breast-cancer"])
    with pytest.raises(ValueError, match=r"shape \(31,\)"):
        p.gradient(np.zeros(30), np.arange(5))
    with pytest.raises(ValueError, match="finite"):
        p.gradient(np.r_[np.zeros(30), np.nan], np.arange(5))
    with pytest.raises(ValueError, match="finite"):
        p.loss(np.r_[np.inf, np.zeros(30)])
    with pytest.raises(IndexError, match="rows must lie"):
        p.gradient(np.zeros(31), np.array([0, p.n_train]))
    with pytest.raises(ValueError, match="integer row indices"):
        p.gradient(np.zeros(31), np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="partial_sum"):
        p.full_gradient(np.zeros(31), np.zeros(5))
    np.testing.assert_array_equal(p.gradient(np.zeros(31), np.array([], dtype=int)), 0)


def test_problem_registry():
    assert {"logistic", "linear", "softmax", "mlp", "cnn"} <= set(available_problems())


# ----------------------------------------------------------------------------------- torch models


def test_torch_missing_gives_install_hint(monkeypatch, datasets):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    for name in ("mlp", "cnn"):
        with pytest.raises(ImportError, match=r"pip install torch==2\.13\.0.*gradcode\[torch\]"):
            make_problem(name, datasets["digits"])


def test_mlp_without_hidden_layers_is_logistic_regression(datasets):
    pytest.importorskip("torch")
    d = datasets["breast-cancer"]
    mlp, lr = make_problem("mlp", d, hidden=(), l2=0.2), make_problem("logistic", d, l2=0.2)
    assert mlp.dim == lr.dim  # nn.Linear: weight (1, p) then bias, the same flat layout
    w = 0.2 * np.random.default_rng(0).standard_normal(lr.dim)
    rows = np.arange(7, 150)
    np.testing.assert_allclose(mlp.gradient(w, rows), lr.gradient(w, rows), rtol=1e-12, atol=1e-12)
    assert mlp.loss(w, rows) == pytest.approx(lr.loss(w, rows), rel=1e-12)
    np.testing.assert_allclose(mlp.full_gradient(w), lr.full_gradient(w), rtol=1e-12, atol=1e-13)
    assert mlp.metrics(w) == pytest.approx(lr.metrics(w), rel=1e-10)


@pytest.mark.parametrize("name,kw", [("mlp", {"hidden": (5,), "activation": "tanh", "l2": 0.1}), ("cnn", {"channels": 2})])
def test_torch_gradients(name, kw, datasets):
    pytest.importorskip("torch")
    d = datasets["digits"]
    p = make_problem(name, d, **kw)
    w = p.init_params(np.random.default_rng(0))
    assert w.dtype == np.float64 and w.shape == (p.dim,)
    np.testing.assert_array_equal(w, p.init_params(np.random.default_rng(0)))
    rows = np.arange(30)
    g = p.gradient(w, rows)
    rng = np.random.default_rng(1)
    for i in rng.choice(p.dim, size=12, replace=False):
        e = np.zeros(p.dim)
        e[i] = 1e-6
        fd = (p.loss(w + e, rows) - p.loss(w - e, rows)) * rows.size / 2e-6
        assert abs(fd - g[i]) <= 1e-5 * max(1.0, abs(g[i])), (i, fd, g[i])
    parts = partition_rows(p.n_train, [0.3, 0.3, 0.4])
    np.testing.assert_allclose(sum(p.gradient(w, r) for r in parts), p.gradient(w), rtol=1e-10, atol=1e-10)
    m = p.metrics(w)
    assert set(m) == {"loss", "accuracy", "roc_auc"} and 0 <= m["accuracy"] <= 1
    frozen = w.copy()
    frozen.flags.writeable = False  # as params arrive from Ray's object store
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(p.gradient(frozen, rows), g)
    with pytest.raises(ValueError, match="finite"):
        p.gradient(np.full(p.dim, np.nan), rows)


def test_torch_bad_input(datasets):
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="image dataset"):
        make_problem("cnn", datasets["breast-cancer"])
    with pytest.raises(ValueError, match="dense"):
        make_problem("mlp", datasets["amazon-synthetic"])
    with pytest.raises(ValueError, match="activation"):
        make_problem("mlp", datasets["digits"], activation="gelu")


# ------------------------------------------------------------------------------ with real codes


@pytest.mark.parametrize("code_name,kw", [("crc", {"n": 6, "s": 2}), ("frc", {"n": 6, "s": 1}), ("partial", {"n": 3, "s": 1, "alpha": 2.0})])
def test_coded_partial_gradients_decode_to_the_full_gradient(code_name, kw, datasets):
    """Workers encode the g_j of their partitions; the master decodes sum_j g_j from any tolerated
    set of survivors, and it equals the single-process gradient (sparse Amazon features)."""
    import itertools

    import gradcode

    code = gradcode.make_code(code_name, **kw)
    p = make_problem("logistic", datasets["amazon-synthetic"], l2=0.01)
    w = 0.05 * np.random.default_rng(0).standard_normal(p.dim)
    parts = partition_rows(p.n_train, code.partition_sizes)
    assert [len(r) for r in parts] == [len(r) for r in partition_rows(p.n_train, code.partition_sizes)]
    g = [p.gradient(w, rows) for rows in parts]
    messages = {wk: code.encode(wk, np.stack([g[j] for j in code.placement[wk]])) for wk in range(code.n)}
    full = p.gradient(w)
    prefix = getattr(code, "straggler_prefix", 0)
    for stragglers in itertools.combinations(range(code.n), code.tolerance):
        # a straggler still delivers its first straggler_prefix messages (partial: the naive part)
        got = {wk: m[: prefix] if wk in stragglers else m for wk, m in messages.items()}
        got = {wk: m for wk, m in got.items() if len(m)}
        decoded = code.decode(got, dim=p.dim)
        np.testing.assert_allclose(decoded, full, rtol=1e-9, atol=1e-9 * np.abs(full).max())
        np.testing.assert_allclose(p.full_gradient(w, decoded), p.full_gradient(w), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("problem,data,kw", CASES)
def test_smoothness_bounds_the_curvature(problem, data, kw, datasets):
    """L from smoothness() bounds the Hessian (finite differences of the gradient along random
    directions); for least squares it equals lambda_max of the exact Hessian."""
    p = make_problem(problem, datasets[data], **kw)
    L = p.smoothness()
    rng = np.random.default_rng(0)
    w = 0.1 * rng.standard_normal(p.dim)
    for _ in range(5):
        v = rng.standard_normal(p.dim)
        v /= np.linalg.norm(v)
        hv = (p.full_gradient(w + 1e-5 * v) - p.full_gradient(w - 1e-5 * v)) / 2e-5
        assert np.linalg.norm(hv) <= L * (1 + 1e-6)
    if problem == "linear":
        X1 = np.hstack([p.dataset.X_train, np.ones((p.n_train, 1))])
        assert L == pytest.approx(np.linalg.eigvalsh(X1.T @ X1 / p.n_train)[-1] + kw["l2"], rel=1e-9)


def test_a_path_that_is_not_a_regular_file_says_what_it_is(tmp_path):
    """A regression: a directory, /dev/zero and a symlink loop all said "no such file"."""
    import os

    from gradcode.problems.files import data_source

    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "gone").symlink_to(tmp_path / "missing.csv")
    cases = {str(tmp_path) + os.sep: "a directory, not a file", str(tmp_path / "loop1"): "a symbolic link loop",
             str(tmp_path / "gone"): "a broken symbolic link", str(tmp_path / "none.csv"): "no such file"}
    if os.path.exists("/dev/zero"):
        cases["/dev/zero"] = "not a regular file"
    for path, why in cases.items():
        with pytest.raises(ValueError, match=why):
            data_source(path)
