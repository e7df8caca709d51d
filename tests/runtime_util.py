"""What the runtime tests share: the single-process reference every exact code must reach, and
the relative distance they compare with."""

from __future__ import annotations

import numpy as np

from gradcode.problems import DataSpec, make_dataset, make_optimizer, make_problem


def gd_reference(data: dict, seed: int, steps: int, *, lr: float = 0.5, optimizer: str = "gd") -> np.ndarray:
    """``steps`` of full-gradient descent on ``tandon-synthetic`` with ``data`` and ``seed``, in one
    process: the iterates an exact gradient code reproduces whatever its stragglers."""
    problem = make_problem("logistic", make_dataset(DataSpec("tandon-synthetic", data, seed=seed)))
    opt = make_optimizer(optimizer, lr=lr)
    x = problem.init_params()
    state = opt.init(x)
    for k in range(steps):
        x, state = opt.step(x, problem.full_gradient(x), state, k)
    return x


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))
