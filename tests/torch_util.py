"""Models for the torch tests, in a module of their own so that Ray's workers get them by value
(gradcode.torch.fit registers user modules with cloudpickle)."""

import torch
from torch import nn


class LNBNNet(nn.Module):
    """A model with every kind of state: a LayerNorm first and a BatchNorm inside, with dropout."""

    def __init__(self, n_in: int = 64, hidden: int = 24, n_out: int = 10, dropout: float = 0.0):
        super().__init__()
        self.ln = nn.LayerNorm(n_in)
        self.fc1 = nn.Linear(n_in, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        x = x.reshape(x.shape[0], -1)
        return self.fc2(self.drop(self.bn(torch.relu(self.fc1(self.ln(x))))))


class Unpicklable(nn.Module):
    def __init__(self):
        super().__init__()
        import threading

        self.lock = threading.Lock()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(x.reshape(x.shape[0], -1))


class NaNOnMarker(nn.Module):
    """``inner`` whose output is NaN for every sample whose first input value is ``marker``: a
    model that produces NaN on some of its (finite) data, as an overflowing layer would; the data
    themselves pass the data check, which refuses NaN inputs before the first round."""

    def __init__(self, inner: nn.Module, marker: float = -7.0):
        super().__init__()
        self.inner, self.marker = inner, marker

    def forward(self, x):
        out = self.inner(x)
        hit = x.reshape(x.shape[0], -1)[:, 0] == self.marker
        return torch.where(hit[:, None], torch.full_like(out, float("nan")), out)


def loud_loss(out, target):
    """Cross-entropy times 100: at float16 loss scaling's first scale (2**16) its backward pass
    overflows float16, so a worker must lower the scale before a clean pass."""
    return 100 * nn.functional.cross_entropy(out, target)
