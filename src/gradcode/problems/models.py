"""Problems: a model on a dataset, with the gradient pieces gradient coding needs.

Every problem minimises

    F(w) = (1/N) sum_{i < N} l_i(w) + lambda R(w),        N = number of training rows,

over a flat float64 parameter vector ``w`` of length ``dim``. Gradient coding splits the data sum:
the training rows are cut into partitions ``P_j`` (:func:`~gradcode.problems.partition_rows`), a
worker computes partial gradients ``g_j = sum_{i in P_j} grad l_i(w)`` (:meth:`Problem.gradient`,
a *sum*, no scaling, no regulariser), the master decodes ``g = sum_j g_j`` and forms

    grad F(w) = g / N + lambda grad R(w)                   (:meth:`Problem.full_gradient`)

adding the regulariser once (:meth:`Problem.regularizer_gradient`), never per partition. Tandon et
al. (ICML 2017, Section 5) train logistic regression this way; R is ``||w||^2 / 2`` here
(``l2 = lambda``; the intercept is not penalised).

Registered problems (``available_problems()``):

``logistic``  binary logistic regression, ``l_i = log(1 + e^{z_i}) - y_i z_i``, ``z = X w + b``,
              ``grad = X^T (sigmoid(z) - y)``: dense or scipy.sparse CSR features (then the
              gradient is one sparse transposed product, O(nnz + d)).
``linear``    least squares, ``l_i = (z_i - y_i)^2 / 2``, ``grad = X^T (z - y)``.
``softmax``   multinomial logistic regression for ``multiclass`` data, ``W`` of shape
              ``(p + 1, C)`` flattened row-major.
``mlp``, ``cnn``  PyTorch modules (optional extra ``torch``), see :mod:`gradcode.problems.torch_models`.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_softmax, softmax

from gradcode._validation import check_real
from gradcode.problems.data import Dataset
from gradcode.registry import Registry, package_modules

#: Every problem by name: ``PROBLEMS.make(name, dataset, **params)`` (= :func:`make_problem`),
#: ``.names()``, ``.parameters(name)`` (the constructor's, after ``dataset``).
PROBLEMS: Registry[Problem] = Registry("problem", inputs=("dataset",), modules=package_modules(__file__))


def register_problem(name: str, *, aliases=()):
    """Decorator: register a ``factory(dataset, **params) -> Problem`` (typically a
    :class:`Problem` subclass) under ``name``."""
    return PROBLEMS.register(name, aliases=aliases)


def available_problems() -> tuple[str, ...]:
    """The names accepted by :func:`make_problem`, sorted."""
    return tuple(PROBLEMS.names(aliases=True))


def make_problem(name: str, dataset: Dataset, **params) -> Problem:
    """Build problem ``name`` (see :func:`available_problems`) on ``dataset``.

    An unknown name or parameter raises the registry's error (listing the names, or the
    problem's parameters); the problem's constructor checks the values and the dataset's task."""
    PROBLEMS.get(name)  # an unknown name is reported before a wrong dataset
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a gradcode Dataset (from make_dataset), got {type(dataset).__name__}")
    return PROBLEMS.make(name, dataset, **params)


class Problem:
    """Base class: validation, row handling, the objective and held-out metrics.

    Subclasses set ``dim`` and implement ``_grad_sum(params, X, y)`` (sum of per-sample
    gradients), ``_loss_sum(params, X, y)``, ``_predict(params, X)`` (probabilities of class 1,
    class probabilities, or predictions) and optionally ``_reg_mask`` (which parameters the L2
    penalty covers).
    """

    name = "problem"
    dim: int
    #: the type workers send their messages in (a numpy dtype); None: as computed (float64)
    wire_dtype = None

    def __init__(self, dataset: Dataset, l2: float = 0.0):
        self.dataset = dataset
        self.l2 = check_real("l2", l2, minimum=0.0)
        self._slices: OrderedDict = OrderedDict()
        # the feature matrices the model reads (a GLM may append an intercept column)
        self._X_train, self._X_test = dataset.X_train, dataset.X_test

    # ---------------------------------------------------------------------------- checks, rows
    @property
    def n_train(self) -> int:
        return self.dataset.n_train

    @property
    def task(self) -> str:
        return self.dataset.task

    def _check_params(self, params, name="params") -> np.ndarray:
        arr = np.asarray(params)
        if arr.dtype.kind not in "fiu" or arr.shape != (self.dim,):
            raise ValueError(
                f"{name} must be a real vector of shape ({self.dim},) for {self!r}, "
                f"got shape {arr.shape} dtype {arr.dtype}"
            )
        arr = arr.astype(np.float64, copy=False)
        if not np.all(np.isfinite(arr)):
            bad = np.flatnonzero(~np.isfinite(arr))
            raise ValueError(f"{name} must be finite; {bad.size} entries are not (first at index {bad[0]})")
        return arr

    def _rows(self, rows):
        """Training rows as a slice (contiguous ranges: views, cached sparse slices) or an index array."""
        n = self.n_train
        if rows is None:
            return slice(0, n)
        if isinstance(rows, slice):
            start, stop, step = rows.indices(n)
            rows = np.arange(start, stop, step)
        rows = np.asarray(rows)
        if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
            raise ValueError(f"rows must be a 1-D array of integer row indices, got shape {rows.shape} dtype {rows.dtype}")
        if rows.size == 0:
            return rows.astype(np.int64)
        lo, hi = int(rows.min()), int(rows.max())
        if lo < 0 or hi >= n:
            raise IndexError(f"rows must lie in [0, {n}) (training rows), got indices from {lo} to {hi}")
        if hi - lo + 1 == rows.size and rows[0] == lo and np.all(np.diff(rows) == 1):
            return slice(lo, hi + 1)
        return rows

    def _data(self, rows):
        """``(X, y)`` of the selected training rows; sparse contiguous slices are kept in an LRU."""
        sel = self._rows(rows)
        X, y = self._X_train, self.dataset.y_train
        if isinstance(sel, slice) and sp.issparse(X):
            key = (sel.start, sel.stop)
            hit = self._slices.get(key)
            if hit is None:
                hit = X[sel] if key != (0, self.n_train) else X
                self._slices[key] = hit
                if len(self._slices) > 64:
                    self._slices.popitem(last=False)
            else:
                self._slices.move_to_end(key)
            return hit, y[sel]
        return X[sel], y[sel]

    # ---------------------------------------------------------------------------- public API
    def init_params(self, rng=None) -> np.ndarray:
        """Initial parameters (zeros for the convex models; ``rng`` is used by the neural ones)."""
        return np.zeros(self.dim)

    def gradient(self, params, rows=None) -> np.ndarray:
        """``sum_{i in rows} grad l_i(params)``: a partial gradient ``g_j`` (no 1/N, no regulariser)."""
        w = self._check_params(params)
        X, y = self._data(rows)
        if X.shape[0] == 0:
            return np.zeros(self.dim)
        return self._grad_sum(w, X, y)

    def loss(self, params, rows=None) -> float:
        """Mean data loss ``(1/|rows|) sum_{i in rows} l_i(params)`` (all training rows by default)."""
        w = self._check_params(params)
        X, y = self._data(rows)
        if X.shape[0] == 0:
            raise ValueError("loss over an empty set of rows is undefined")
        return float(self._loss_sum(w, X, y) / X.shape[0])

    def _reg_mask(self) -> np.ndarray | None:
        return None  # all parameters penalised

    def regularizer(self, params) -> float:
        """``lambda R(w) = (l2 / 2) ||w||^2`` over the penalised parameters."""
        w = self._check_params(params)
        m = self._reg_mask()
        v = w if m is None else w[m]
        return 0.5 * self.l2 * float(v @ v)

    def regularizer_gradient(self, params) -> np.ndarray:
        """``lambda grad R(w) = l2 * w`` on the penalised parameters, zero elsewhere."""
        w = self._check_params(params)
        g = self.l2 * w
        m = self._reg_mask()
        if m is not None:
            g[~m] = 0.0
        return g

    def objective(self, params) -> float:
        """``F(w) = loss(w) + lambda R(w)``, over all training rows."""
        return self.loss(params) + self.regularizer(params)

    def full_gradient(self, params, partial_sum=None) -> np.ndarray:
        """``grad F(w) = g / N + lambda grad R(w)``; ``g`` = ``partial_sum`` (a decoded ``sum_j g_j``)
        or, when omitted, computed here over all training rows."""
        if partial_sum is None:
            g = self.gradient(params)
        else:
            g = np.asarray(partial_sum, dtype=np.float64)
            if g.shape != (self.dim,):
                raise ValueError(f"partial_sum must have shape ({self.dim},), got {g.shape}")
        return g / self.n_train + self.regularizer_gradient(params)

    def smoothness(self) -> float | None:
        """An upper bound ``L`` on the curvature of ``F`` (``grad F`` is L-Lipschitz), so that
        ``lr = 1 / L`` is a safe constant step for GD and Nesterov; None where no bound is known
        (neural networks)."""
        return None

    def predict(self, params, X):
        """Model output on a feature matrix: P(y=1) (binary), class probabilities (multiclass) or values."""
        return self._predict(self._check_params(params), X)

    def metrics(self, params) -> dict:
        """Held-out metrics: ``loss`` (mean data loss) and, by task, ``accuracy`` and ``roc_auc``
        (scikit-learn; NaN when the test split has one class), or ``mse`` and ``r2``."""
        from sklearn.metrics import r2_score, roc_auc_score

        w = self._check_params(params)
        X, y = self._X_test, self.dataset.y_test
        if X.shape[0] == 0:
            raise ValueError("the dataset has no held-out rows (test_fraction=0): no metrics")
        out = {"loss": float(self._loss_sum(w, X, y) / X.shape[0])}
        pred = self._predict(w, X)
        if self.task == "binary":
            out["accuracy"] = float(np.mean((pred >= 0.5) == (y == 1)))
            out["roc_auc"] = float(roc_auc_score(y, pred)) if np.unique(y).size == 2 else float("nan")
        elif self.task == "multiclass":
            out["accuracy"] = float(np.mean(pred.argmax(axis=1) == y))
            present = np.unique(y)
            if present.size == pred.shape[1]:
                out["roc_auc"] = float(roc_auc_score(y, pred, multi_class="ovr"))
            else:
                out["roc_auc"] = float("nan")
        else:
            err = pred - y
            out["mse"] = float(np.mean(err**2))
            out["r2"] = float(r2_score(y, pred)) if X.shape[0] > 1 else float("nan")
        return out

    def __repr__(self):
        return f"<{type(self).__name__} dim={self.dim} l2={self.l2} data={self.dataset.name}>"


class _GLM(Problem):
    """Generalised linear model ``z = X w (+ b)``; subclasses give the loss in ``z`` and its derivative."""

    tasks: tuple[str, ...] = ()

    def __init__(self, dataset: Dataset, l2: float = 0.0, fit_intercept: bool = True):
        super().__init__(dataset, l2)
        if dataset.task not in self.tasks:
            raise ValueError(
                f"problem {self.name!r} needs a dataset with task in {self.tasks}, "
                f"but {dataset.name!r} has task {dataset.task!r}"
            )
        if not isinstance(fit_intercept, bool):
            raise TypeError(f"fit_intercept must be a bool, got {fit_intercept!r}")
        self.fit_intercept = fit_intercept
        self.n_outputs = 1
        self.dim = dataset.n_features + int(fit_intercept)
        if fit_intercept and dataset.sparse:
            # a column of ones carries the intercept: z = X1 @ w and grad = X1^T r come out of one
            # sparse product each, with no (d,)-sized concatenation per call (1 extra nnz per row)
            self._X_train = _with_ones(dataset.X_train)
            self._X_test = _with_ones(dataset.X_test)

    def _reg_mask(self):
        if not self.fit_intercept:
            return None
        m = np.ones(self.dim, dtype=bool)
        m[-self.n_outputs :] = False  # the intercept (last row of W) is not penalised
        return m

    def _z(self, w, X):
        """``X @ W (+ b)``; ``X`` either has the intercept column already (one row of W per
        column) or not (then the last row of W is added as the intercept)."""
        W = w if self.n_outputs == 1 else w.reshape(-1, self.n_outputs)
        if X.shape[1] == W.shape[0]:
            return X @ W
        return X @ W[:-1] + W[-1]

    #: sup of the second derivative of l in z (logistic 1/4, least squares 1, softmax 1/2)
    _curvature = 1.0

    def smoothness(self) -> float:
        """``L = c * lambda_max(X1^T X1) / N + l2`` with ``X1`` the features (plus the intercept
        column) and ``c`` the curvature bound of the loss in ``z``; computed once by Lanczos
        (``eigsh``, fixed start vector: deterministic)."""
        if getattr(self, "_L", None) is None:
            from scipy.sparse.linalg import LinearOperator, eigsh

            X = self._X_train
            ones = self.fit_intercept and X.shape[1] == self.dataset.n_features
            n_cols = X.shape[1] + int(ones)

            def mv(v):
                v = np.ravel(v)
                z = X @ (v[:-1] if ones else v) + (v[-1] if ones else 0.0)
                out = np.asarray(X.T @ z).ravel()
                return np.concatenate([out, [z.sum()]]) if ones else out

            if n_cols <= 500:
                Xd = X.toarray() if sp.issparse(X) else np.asarray(X)
                if ones:
                    Xd = np.hstack([Xd, np.ones((Xd.shape[0], 1))])
                lam = float(np.linalg.eigvalsh(Xd.T @ Xd)[-1])
            else:
                op = LinearOperator((n_cols, n_cols), matvec=mv, dtype=np.float64)
                lam = float(eigsh(op, k=1, which="LA", v0=np.ones(n_cols), tol=1e-6)[0][0]) * (1 + 1e-5)
            self._L = self._curvature * lam / self.n_train + self.l2
        return self._L

    def _grad_sum(self, w, X, y):
        r = self._dz(self._z(w, X), y)  # dl_i / dz_i, shape (n,) or (n, C)
        gw = np.asarray(X.T @ r, dtype=np.float64)
        if gw.size == self.dim:
            return gw.ravel()
        return np.concatenate([gw.ravel(), np.atleast_1d(r.sum(axis=0))])

    def _loss_sum(self, w, X, y):
        return float(np.sum(self._l(self._z(w, X), y)))


def _with_ones(X):
    X1 = sp.hstack([X, np.ones((X.shape[0], 1))], format="csr", dtype=np.float64)
    X1.sort_indices()
    return X1


@register_problem("logistic")
class LogisticRegression(_GLM):
    """Binary logistic regression: ``l_i = log(1 + exp(z_i)) - y_i z_i``, ``grad = X^T (sigmoid(z) - y)``."""

    name = "logistic"
    tasks = ("binary",)
    _curvature = 0.25

    def _l(self, z, y):
        return np.logaddexp(0.0, z) - y * z

    def _dz(self, z, y):
        return expit(z) - y

    def _predict(self, w, X):
        return expit(self._z(w, X))


@register_problem("linear")
class LinearRegression(_GLM):
    """Least squares: ``l_i = (z_i - y_i)^2 / 2``, ``grad = X^T (X w + b - y)``."""

    name = "linear"
    tasks = ("regression",)

    def _l(self, z, y):
        return 0.5 * (z - y) ** 2

    def _dz(self, z, y):
        return z - y

    def _predict(self, w, X):
        return self._z(w, X)

    def solve(self) -> np.ndarray:
        """The exact minimiser of ``F`` (normal equations), to check optimisers against."""
        X = self.dataset.X_train
        X = X.toarray() if sp.issparse(X) else X
        if self.fit_intercept:
            X = np.hstack([X, np.ones((X.shape[0], 1))])
        N = X.shape[0]
        A = X.T @ X / N + self.l2 * np.diag(self._reg_mask() if self.fit_intercept else np.ones(self.dim))
        return np.linalg.solve(A, X.T @ self.dataset.y_train / N)


@register_problem("softmax")
class SoftmaxRegression(_GLM):
    """Multinomial logistic regression: ``l_i = logsumexp(z_i) - z_{i, y_i}``, ``grad = X^T (P - Y)``.

    Parameters are ``W`` of shape ``(p + 1, C)`` (last row: intercepts) flattened row-major."""

    name = "softmax"
    tasks = ("multiclass",)
    _curvature = 0.5  # Hessian of logsumexp is diag(p) - p p^T, with norm <= 1/2

    def __init__(self, dataset: Dataset, l2: float = 0.0, fit_intercept: bool = True):
        super().__init__(dataset, l2, fit_intercept)
        self.n_outputs = int(dataset.n_classes)
        self.dim = (dataset.n_features + int(fit_intercept)) * self.n_outputs

    def _l(self, Z, y):
        return -log_softmax(Z, axis=1)[np.arange(Z.shape[0]), y]

    def _dz(self, Z, y):
        P = softmax(Z, axis=1)
        P[np.arange(Z.shape[0]), y] -= 1.0
        return P

    def _predict(self, w, X):
        return softmax(self._z(w, X), axis=1)
