"""PyTorch models behind the optional extra ``torch``: an MLP and a small CNN.

torch is imported lazily, when such a problem is built; without it :func:`make_problem` raises an
``ImportError`` that says how to install it. The master only ever sees a flat float64 vector: the
module's parameters, in ``module.parameters()`` order, flattened (``parameters_to_vector``). The
module runs in float64 so that gradient-coded training can be compared with single-process
training to 1e-9 relative. ``gradient`` returns ``sum_i grad l_i`` (loss reduction ``'sum'``):

- ``binary``: one logit, ``l_i = BCEWithLogits``;  ``multiclass``: ``C`` logits, cross-entropy;
- ``regression``: one output, ``l_i = (f(x_i) - y_i)^2 / 2`` (as ``linear``).

``init_params(rng)`` draws PyTorch's default ``nn.Linear`` / ``nn.Conv2d`` initialisation
(``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weights and biases) from the numpy Generator, so runs
are seeded like the rest of gradcode, not by torch's global RNG.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from gradcode.problems.data import Dataset
from gradcode.problems.models import Problem, register_problem

_INSTALL_HINT = (
    "the {name!r} problem needs PyTorch, an optional extra of gradcode: "
    "`pip install torch==2.13.0` (CPU wheel) or `pip install gradcode[torch]`"
)


def _import_torch(name: str):
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised when torch is absent
        raise ImportError(_INSTALL_HINT.format(name=name)) from exc
    return torch


class TorchProblem(Problem):
    """A ``torch.nn.Module`` on a dataset; parameters are a flat float64 vector."""

    def __init__(self, dataset: Dataset, module_fn, l2: float = 0.0):
        super().__init__(dataset, l2)
        torch = self._torch = _import_torch(self.name)
        if sp.issparse(dataset.X_train):
            raise ValueError(f"problem {self.name!r} needs dense features; {dataset.name!r} is sparse")
        self.n_outputs = int(dataset.n_classes) if dataset.task == "multiclass" else 1
        self.module = module_fn(torch.nn, self.n_outputs).to(torch.float64)
        self._params = list(self.module.parameters())
        self._shapes = [tuple(p.shape) for p in self._params]
        self._sizes = [p.numel() for p in self._params]
        self.dim = int(sum(self._sizes))
        self._tensors: dict = {}

    def _tensor(self, which: str, X, y):
        """Cached torch views of the dataset arrays (no copy for contiguous float64 arrays)."""
        torch = self._torch
        key = (which, id(X))
        hit = self._tensors.get(key)
        if hit is None or hit[0] is not X:
            Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64))
            yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64 if self.task == "multiclass" else np.float64))
            hit = (X, Xt, yt)
            self._tensors[key] = hit
        return hit[1], hit[2]

    def _load(self, w: np.ndarray):
        torch = self._torch
        # a copy: vector_to_parameters makes the parameters views of the vector, and the caller's
        # array may be read-only (Ray's object store) or change after the call
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.tensor(w, dtype=torch.float64), self._params)

    def _forward(self, X):
        return self.module(X)

    def _loss_terms(self, out, y):
        F = self._torch.nn.functional
        if self.task == "multiclass":
            return F.cross_entropy(out, y, reduction="sum")
        out = out.reshape(-1)
        if self.task == "binary":
            return F.binary_cross_entropy_with_logits(out, y, reduction="sum")
        return 0.5 * ((out - y) ** 2).sum()

    def _xy(self, rows=None, test=False):
        ds = self.dataset
        if test:
            return self._tensor("test", ds.X_test, ds.y_test)
        Xt, yt = self._tensor("train", ds.X_train, ds.y_train)
        sel = self._rows(rows)
        if not isinstance(sel, slice):
            sel = self._torch.from_numpy(sel.astype(np.int64))
        return Xt[sel], yt[sel]

    # the generic Problem methods call _grad_sum/_loss_sum with numpy data; torch overrides them
    def gradient(self, params, rows=None) -> np.ndarray:
        w = self._check_params(params)
        X, y = self._xy(rows)
        if X.shape[0] == 0:
            return np.zeros(self.dim)
        self._load(w)
        for p in self._params:
            p.grad = None
        self._loss_terms(self._forward(X), y).backward()
        return np.concatenate([p.grad.detach().numpy().ravel() for p in self._params]).astype(np.float64)

    def _eval_sum(self, w, X, y) -> float:
        self._load(w)
        with self._torch.no_grad():
            return float(self._loss_terms(self._forward(X), y))

    def loss(self, params, rows=None) -> float:
        w = self._check_params(params)
        X, y = self._xy(rows)
        if X.shape[0] == 0:
            raise ValueError("loss over an empty set of rows is undefined")
        return self._eval_sum(w, X, y) / X.shape[0]

    def _loss_sum(self, w, X, y):  # used by Problem.metrics on the held-out split
        Xt, yt = self._tensor("test", X, y)
        return self._eval_sum(w, Xt, yt)

    def _predict(self, w, X):
        torch = self._torch
        Xt, _ = self._tensor("test", X, self.dataset.y_test) if X is self.dataset.X_test else (
            torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64)), None)
        self._load(w)
        with torch.no_grad():
            out = self._forward(Xt)
            if self.task == "multiclass":
                return torch.softmax(out, dim=1).numpy()
            out = out.reshape(-1)
            return (torch.sigmoid(out) if self.task == "binary" else out).numpy()

    def _reg_mask(self):
        """L2 covers weights (tensors with 2+ dimensions), not biases."""
        return np.concatenate([np.full(n, len(s) > 1) for n, s in zip(self._sizes, self._shapes)])

    def init_params(self, rng=None) -> np.ndarray:
        from gradcode._validation import as_generator

        rng = as_generator(rng)
        parts = []
        fan_in = None
        for shape, size in zip(self._shapes, self._sizes):
            if len(shape) > 1:
                fan_in = int(np.prod(shape[1:]))
            bound = 1.0 / math.sqrt(fan_in)
            parts.append(rng.uniform(-bound, bound, size))
        return np.concatenate(parts)

    def __repr__(self):
        return f"<{type(self).__name__} dim={self.dim} l2={self.l2} data={self.dataset.name} module={self.module}>"


_ACTIVATIONS = ("relu", "tanh")


@register_problem("mlp")
class MLPProblem(TorchProblem):
    """Fully connected network: ``hidden`` layer widths (``()`` is a generalised linear model)."""

    name = "mlp"

    def __init__(self, dataset: Dataset, hidden=(64,), activation: str = "relu", l2: float = 0.0):
        from gradcode._validation import check_choice, check_int

        hidden = (hidden,) if isinstance(hidden, int) else tuple(hidden)
        hidden = tuple(check_int("hidden", h, minimum=1) for h in hidden)
        check_choice("activation", activation, _ACTIVATIONS)
        self.hidden, self.activation = hidden, activation

        def build(nn, n_out):
            layers, width = [], dataset.n_features
            for h in hidden:
                layers += [nn.Linear(width, h), nn.ReLU() if activation == "relu" else nn.Tanh()]
                width = h
            layers.append(nn.Linear(width, n_out))
            return nn.Sequential(*layers)

        super().__init__(dataset, build, l2)


@register_problem("cnn")
class CNNProblem(TorchProblem):
    """Small CNN for image datasets (``dataset.image_shape``, e.g. digits 1x8x8):
    conv3x3(c) - ReLU - maxpool2 - conv3x3(2c) - ReLU - maxpool2 - linear."""

    name = "cnn"

    def __init__(self, dataset: Dataset, channels: int = 8, l2: float = 0.0):
        from gradcode._validation import check_int

        channels = check_int("channels", channels, minimum=1)
        if dataset.image_shape is None:
            raise ValueError(f"problem 'cnn' needs an image dataset (image_shape set), {dataset.name!r} has none")
        C, H, W = dataset.image_shape
        self.channels, self._image_shape = channels, (C, H, W)

        def build(nn, n_out):
            return nn.Sequential(
                nn.Unflatten(1, (C, H, W)),
                nn.Conv2d(C, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(2 * channels * (H // 4) * (W // 4), n_out),
            )

        super().__init__(dataset, build, l2)
