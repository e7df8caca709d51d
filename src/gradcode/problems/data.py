"""Data specs, datasets and deterministic row partitions.

A :class:`DataSpec` is a small, frozen, picklable *recipe* for a dataset (a name, parameters, a seed
and the held-out fraction); it holds no arrays. :func:`make_dataset` turns it into a
:class:`Dataset`, deterministically: the same spec gives bit-identical arrays in every process, so a
Ray actor restarted on another node rebuilds exactly the partitions it held before.

Every dataset is built the same way: the generator (or loader) yields all rows, the rows are
shuffled once by a Generator seeded from ``spec.seed``, the last ``round(test_fraction * n)`` shuffled
rows are held out, and any fitted preprocessing (standardisation, one-hot vocabularies) is fitted on
the training rows only. The training rows are therefore *already shuffled*, and
:func:`partition_rows` cuts them into contiguous blocks.

Registered datasets (``available_datasets()``):

``tandon-synthetic``  Tandon et al., Gradient Coding, ICML 2017, Section 5 (artificial dataset).
``linear-synthetic``  Gaussian design with a linear response plus noise (for least squares).
``amazon-synthetic``  categorical data shaped like Kaggle's Amazon Employee Access, one-hot plus
                      pairwise interactions (see :mod:`gradcode.problems.amazon`).
``amazon-csv``        the real Kaggle ``train.csv`` (``path`` parameter), same featurisation.
``breast-cancer``     scikit-learn's bundled Wisconsin breast-cancer set (binary, standardised).
``digits``            scikit-learn's bundled 8x8 digits (10 classes, pixels / 16, images 1x8x8).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from gradcode._validation import check_choice, check_int, check_real
from gradcode.registry import Registry, package_modules

TASKS = ("binary", "regression", "multiclass")

#: Every dataset by name: ``DATASETS.make(name, rng, test_fraction, **params)`` builds one (what
#: :func:`make_dataset` does from a :class:`DataSpec`); ``.names()``, ``.parameters(name)`` (the
#: builder's, after ``rng`` and ``test_fraction``), ``.info(name)``.
DATASETS: Registry[Dataset] = Registry("dataset", inputs=("rng", "test_fraction"), modules=package_modules(__file__))


def register_dataset(name: str, *, aliases=()):
    """Decorator: register ``builder(rng, test_fraction, **params) -> Dataset`` under ``name``."""
    return DATASETS.register(name, aliases=aliases)


def available_datasets() -> tuple[str, ...]:
    """Names accepted by :class:`DataSpec` / :func:`make_dataset`."""
    return tuple(DATASETS.names(aliases=True))


def _plain(value, where: str):
    """Check that a spec parameter is a plain, picklable, JSON-friendly value."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v, where) for v in value)
    raise TypeError(
        f"DataSpec params[{where!r}] must be None, bool, int, float, str or a tuple of those "
        f"(a spec describes how to regenerate data, it holds no arrays); got {type(value).__name__}"
    )


class _Params(dict):
    """A read-only dict (spec parameters must not change after the spec is made); pickles as itself."""

    def _readonly(self, *args, **kwargs):
        raise TypeError("DataSpec params are read-only; make a new DataSpec instead")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly
    __ior__ = _readonly

    def __reduce__(self):
        return (_Params, (dict(self),))

    def __repr__(self):
        return repr(dict(self))


@dataclass(frozen=True)
class DataSpec:
    """How to regenerate a dataset deterministically (no arrays inside).

    ``dataset``: a registered name; ``params``: keyword arguments of its builder (plain values);
    ``seed``: seeds every random choice (generation, shuffle, split); ``test_fraction``: the share
    of rows held out for metrics, in ``[0, 1)``.
    """

    dataset: str
    params: dict = field(default_factory=dict)
    seed: int = 0
    test_fraction: float = 0.2

    def __post_init__(self):
        if not isinstance(self.params, Mapping):
            raise TypeError(f"params must be a dict, got {type(self.params).__name__}")
        clean = {}
        for key, value in self.params.items():
            if not isinstance(key, str):
                raise TypeError(f"params keys must be strings, got {key!r}")
            clean[key] = _plain(value, key)
        # the name and the parameter names now, not when a worker builds the data
        DATASETS.check(self.dataset, **clean)
        object.__setattr__(self, "params", _Params(clean))
        object.__setattr__(self, "seed", check_int("seed", self.seed, minimum=0))
        object.__setattr__(
            self,
            "test_fraction",
            check_real("test_fraction", self.test_fraction, minimum=0.0, maximum=1.0, strict_max=True),
        )

    def __hash__(self):
        return hash((self.dataset, tuple(sorted(self.params.items())), self.seed, self.test_fraction))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (for run records and checkpoints); :meth:`from_dict` inverts it."""
        params = {k: list(v) if isinstance(v, tuple) else v for k, v in self.params.items()}
        return {"dataset": self.dataset, "params": params, "seed": self.seed, "test_fraction": self.test_fraction}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DataSpec":
        unknown = set(d) - {"dataset", "params", "seed", "test_fraction"}
        if unknown:
            raise ValueError(f"unknown DataSpec fields {sorted(unknown)}")
        return cls(d["dataset"], dict(d.get("params", {})), d.get("seed", 0), d.get("test_fraction", 0.2))


@dataclass(eq=False)
class Dataset:
    """Training and held-out arrays of one dataset.

    ``X_*`` are float64 dense arrays or ``scipy.sparse`` CSR matrices with ``n_features`` columns;
    ``y_*`` are float64 (``binary``: 0/1, ``regression``: real) or int64 class labels
    (``multiclass``: ``0..n_classes-1``). ``image_shape`` is ``(channels, height, width)`` when the
    features are flattened images (used by the CNN), else None.
    """

    name: str
    task: str
    X_train: Any
    y_train: np.ndarray
    X_test: Any
    y_test: np.ndarray
    n_classes: int | None = None
    image_shape: tuple[int, ...] | None = None
    spec: DataSpec | None = None
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        check_choice("task", self.task, TASKS)
        for part in ("train", "test"):
            X, y = getattr(self, f"X_{part}"), getattr(self, f"y_{part}")
            if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
                raise ValueError(f"X_{part} {X.shape} and y_{part} {y.shape} do not match")
        if self.X_train.shape[1] != self.X_test.shape[1]:
            raise ValueError("X_train and X_test have different numbers of columns")
        if self.X_train.shape[0] == 0:
            raise ValueError("the training split is empty")
        for part in ("train", "test"):  # found now, not at the round whose batch first reads it
            rows = nonfinite_rows(getattr(self, f"X_{part}"), getattr(self, f"y_{part}"))
            if rows.size:
                shown = ", ".join(str(r) for r in rows[:5].tolist()) + (", ..." if rows.size > 5 else "")
                raise ValueError(f"the {part} split of {self.name!r} holds NaN or infinity in {rows.size} row(s)"
                                 f" ({shown}, counted from 0 in that split)")
        if self.task == "multiclass" and self.n_classes is None:
            self.n_classes = int(max(self.y_train.max(), self.y_test.max(initial=0))) + 1

    @property
    def n_features(self) -> int:
        return int(self.X_train.shape[1])

    @property
    def n_train(self) -> int:
        return int(self.X_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.X_test.shape[0])

    @property
    def sparse(self) -> bool:
        return sp.issparse(self.X_train)

    def __repr__(self):
        kind = f"sparse nnz={self.X_train.nnz}" if self.sparse else "dense"
        return (
            f"<Dataset {self.name} task={self.task} n_train={self.n_train} n_test={self.n_test} "
            f"n_features={self.n_features} {kind}>"
        )


def nonfinite_rows(X, y) -> np.ndarray:
    """The rows (sorted) of ``X`` (dense or sparse CSR) or ``y`` holding NaN or infinity."""
    if sp.issparse(X):
        X = X.tocsr()
        bad_values = ~np.isfinite(X.data)
        bad = np.zeros(X.shape[0], dtype=bool)
        if bad_values.any():
            bad[np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))[bad_values]] = True
    else:
        X = np.asarray(X)
        bad = ~np.isfinite(X).all(axis=1) if X.dtype.kind in "fc" else np.zeros(X.shape[0], dtype=bool)
    y = np.asarray(y)
    if y.dtype.kind in "fc":
        bad |= ~np.isfinite(y)
    return np.flatnonzero(bad)


def make_dataset(spec: DataSpec) -> Dataset:
    """Build the dataset a spec describes; deterministic (bit-identical) for equal specs."""
    if not isinstance(spec, DataSpec):
        raise TypeError(f"spec must be a DataSpec, got {type(spec).__name__}")
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed))
    ds = DATASETS.make(spec.dataset, rng, spec.test_fraction, **spec.params)
    ds.spec = spec
    return ds


# --------------------------------------------------------------------------------------------- split


def shuffle_split(n: int, rng: np.random.Generator, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """A random permutation of ``range(n)`` cut into (train, test) index arrays.

    The test split has ``round(test_fraction * n)`` rows; the training split must keep at least one.
    """
    perm = rng.permutation(n)
    n_test = int(round(test_fraction * n))
    if n - n_test < 1:
        raise ValueError(f"test_fraction={test_fraction} leaves no training rows out of {n}")
    return perm[: n - n_test], perm[n - n_test :]


def partition_rows(n_samples: int, sizes) -> list[np.ndarray]:
    """Cut ``range(n_samples)`` into contiguous blocks whose sizes follow the fractions ``sizes``.

    Block ``j`` gets ``floor(sizes[j] * n)`` rows plus one of the ``n - sum floor(...)`` leftover rows
    if its fractional part is among the largest (largest-remainder / Hamilton rounding; ties go to
    the lower index). The result is deterministic and the blocks are in order, so partition ``j`` is
    ``rows[start_j:end_j]`` of the (already shuffled) training rows. ``sizes`` is typically
    ``code.partition_sizes``; every block must be non-empty, else ``ValueError``.
    """
    n = check_int("n_samples", n_samples, minimum=1)
    sizes = np.asarray(sizes, dtype=np.float64)
    if sizes.ndim != 1 or sizes.size == 0:
        raise ValueError(f"sizes must be a non-empty 1-D array of fractions, got shape {sizes.shape}")
    if not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
        raise ValueError(f"sizes must be finite and non-negative, got {sizes.tolist()}")
    total = float(sizes.sum())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"sizes must sum to 1, got sum {total!r}")
    sizes = sizes / total
    exact = sizes * n
    counts = np.floor(exact).astype(np.int64)
    leftover = n - int(counts.sum())
    if leftover:
        # stable sort on -remainder: ties keep index order
        order = np.argsort(-(exact - counts), kind="stable")
        counts[order[:leftover]] += 1
    if np.any(counts == 0):
        empty = np.flatnonzero(counts == 0).tolist()
        raise ValueError(
            f"partitions {empty} would be empty: {n} samples cannot be split into {sizes.size} "
            f"partitions of fractions {np.round(sizes, 6).tolist()}; use more data or fewer partitions"
        )
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [np.arange(bounds[j], bounds[j + 1]) for j in range(sizes.size)]


# ------------------------------------------------------------------------------------------ builders


def _standardise(X_train: np.ndarray, X_test: np.ndarray):
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(X_train)
    return scaler.transform(X_train), scaler.transform(X_test)


@register_dataset("tandon-synthetic")
def _tandon_synthetic(rng, test_fraction, n_samples: int = 20000, n_features: int = 100, label_scale: float = 2.0):
    """Tandon et al. (ICML 2017) Section 5: x ~ 0.5 N(mu1, I) + 0.5 N(mu2, I), logistic labels.

    The paper: "x ~ 0.5 x N(mu1, I) + 0.5 x N(mu2, I) (for random mu1, mu2 in R^p), and
    y ~ Ber(p), with p = 1/(exp(2 x^T beta*) + 1)", p = 100 features, 554400 samples, beta*
    random. We keep that exactly: ``P(y = 1 | x) = 1 / (exp(label_scale * x @ beta) + 1)`` with
    ``label_scale = 2``, i.e. ``sigmoid(-2 x @ beta*)``: the true logistic-regression parameter is
    ``-2 beta*`` with zero intercept (``info['beta_true']`` holds ``beta*``). What the paper leaves open we choose so that the problem is neither
    trivial nor hopeless: ``mu1, mu2 ~ N(0, I_p)`` independently, ``beta* ~ N(0, I_p / p)`` (so
    ``x @ beta*`` is O(1)), and the mixture component of each row is a fair coin. Default
    ``n_samples`` is 20000 (the paper's 554400 works, at 440 MB); features are not rescaled.
    """
    n = check_int("n_samples", n_samples, minimum=2)
    p = check_int("n_features", n_features, minimum=1)
    scale = check_real("label_scale", label_scale)
    mu = rng.standard_normal((2, p))
    beta = rng.standard_normal(p) / math.sqrt(p)
    comp = rng.integers(0, 2, size=n)
    X = mu[comp] + rng.standard_normal((n, p))
    prob = 1.0 / (np.exp(scale * (X @ beta)) + 1.0)
    y = (rng.random(n) < prob).astype(np.float64)
    tr, te = shuffle_split(n, rng, test_fraction)
    return Dataset(
        "tandon-synthetic", "binary", X[tr], y[tr], X[te], y[te],
        info={"beta_true": beta, "mu": mu, "label_scale": scale},
    )


@register_dataset("linear-synthetic")
def _linear_synthetic(rng, test_fraction, n_samples: int = 2000, n_features: int = 50, noise: float = 0.1):
    """Least-squares data: x ~ N(0, I), y = x @ beta* + 0.5 + noise * N(0, 1), beta* ~ N(0, I)."""
    n = check_int("n_samples", n_samples, minimum=2)
    p = check_int("n_features", n_features, minimum=1)
    noise = check_real("noise", noise, minimum=0.0)
    beta = rng.standard_normal(p)
    X = rng.standard_normal((n, p))
    y = X @ beta + 0.5 + noise * rng.standard_normal(n)
    tr, te = shuffle_split(n, rng, test_fraction)
    return Dataset(
        "linear-synthetic", "regression", X[tr], y[tr], X[te], y[te],
        info={"beta_true": beta, "intercept_true": 0.5, "noise": noise},
    )


@register_dataset("breast-cancer")
def _breast_cancer(rng, test_fraction, standardize: bool = True):
    """scikit-learn's bundled Wisconsin breast-cancer data: 569 rows, 30 features, binary.

    Features are standardised with the training split's mean and standard deviation.
    """
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    tr, te = shuffle_split(X.shape[0], rng, test_fraction)
    Xtr, Xte = X[tr].astype(np.float64), X[te].astype(np.float64)
    if standardize:
        Xtr, Xte = _standardise(Xtr, Xte)
    return Dataset("breast-cancer", "binary", Xtr, y[tr].astype(np.float64), Xte, y[te].astype(np.float64))


@register_dataset("digits")
def _digits(rng, test_fraction, binary: bool = False):
    """scikit-learn's bundled 8x8 digits: 1797 rows, 64 pixels scaled to [0, 1], 10 classes.

    ``binary=True`` gives the task "digit is odd" (labels 0/1) for the binary models.
    """
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float64) / 16.0
    tr, te = shuffle_split(X.shape[0], rng, test_fraction)
    if binary:
        yb = (y % 2).astype(np.float64)
        return Dataset("digits", "binary", X[tr], yb[tr], X[te], yb[te], image_shape=(1, 8, 8))
    y = y.astype(np.int64)
    return Dataset("digits", "multiclass", X[tr], y[tr], X[te], y[te], n_classes=10, image_shape=(1, 8, 8))
