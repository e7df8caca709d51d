"""Problems: datasets, models with partial gradients, optimizers and held-out metrics.

Pure and engine-free (no Ray): the runtime builds a :class:`DataSpec` on the master, ships it to
its workers, and each worker rebuilds the same :class:`Dataset` with :func:`make_dataset`, takes
its partitions with :func:`partition_rows` and computes partial gradients with
:meth:`Problem.gradient`. The master combines them with :meth:`Problem.full_gradient` and steps an
:class:`Optimizer`.

    spec = DataSpec("tandon-synthetic", {"n_samples": 4000}, seed=0)
    ds = make_dataset(spec)
    problem = make_problem("logistic", ds, l2=1e-4)
    parts = partition_rows(ds.n_train, code.partition_sizes)
    g = sum(problem.gradient(w, rows) for rows in parts)       # = problem.gradient(w)
    opt = make_optimizer("nesterov", lr=1.0); state = opt.init(w)
    w, state = opt.step(w, problem.full_gradient(w, g), state, t)
"""

from gradcode.problems.data import (
    DataSpec,
    Dataset,
    available_datasets,
    make_dataset,
    partition_rows,
    register_dataset,
)
from gradcode.problems import amazon as _amazon  # noqa: F401  registers amazon-synthetic, amazon-csv
from gradcode.problems.models import (
    LinearRegression,
    LogisticRegression,
    Problem,
    SoftmaxRegression,
    available_problems,
    make_problem,
    register_problem,
)
from gradcode.problems import torch_models as _torch_models  # noqa: F401  registers mlp, cnn (torch lazily)
from gradcode.problems.optimizers import (
    GD,
    SGD,
    Nesterov,
    Optimizer,
    available_optimizers,
    make_optimizer,
    register_optimizer,
)

__all__ = [
    "DataSpec", "Dataset", "available_datasets", "make_dataset", "partition_rows", "register_dataset",
    "Problem", "LogisticRegression", "LinearRegression", "SoftmaxRegression", "available_problems",
    "make_problem", "register_problem",
    "Optimizer", "GD", "Nesterov", "SGD", "available_optimizers", "make_optimizer", "register_optimizer",
]
