"""Problems: datasets, models with partial gradients, optimizers and held-out metrics.

What this layer owns: what is being trained. :mod:`~gradcode.problems.data` builds datasets from
small picklable recipes (:class:`DataSpec`, registry :data:`DATASETS`) and cuts the training rows
into partitions; :mod:`~gradcode.problems.models` holds the problems, a model on a dataset with
partial gradients (sums over a partition's rows), the objective and metrics (registry
:data:`PROBLEMS`; PyTorch modules in :mod:`~gradcode.problems.torch_models`, Kaggle's Amazon data
in :mod:`~gradcode.problems.amazon`); :mod:`~gradcode.problems.optimizers` holds the optimizers,
small frozen values stepping ``(params, grad, state, t)`` (registry :data:`OPTIMIZERS`).

What it may import: numpy, scipy, scikit-learn (bundled data sets, preprocessing, metrics;
imported where used), PyTorch lazily (an optional extra, imported only when a torch problem is
built), the bottom modules (:mod:`gradcode._validation`,
:mod:`gradcode.errors`, :mod:`gradcode.registry`) and itself; never codes, stragglers, schemes,
the drivers or the engine (Ray). It knows nothing of gradient coding beyond "a partial gradient is
a sum over rows": the runtime builds a :class:`DataSpec` on the master, ships it to its workers,
and each worker rebuilds the same :class:`Dataset` with :func:`make_dataset`, takes its partitions
with :func:`partition_rows` and computes partial gradients with :meth:`Problem.gradient`. The
master combines them with :meth:`Problem.full_gradient` and steps an :class:`Optimizer`.
Everything is deterministic given the spec's seed.

    spec = DataSpec("tandon-synthetic", {"n_samples": 4000}, seed=0)
    ds = make_dataset(spec)
    problem = make_problem("logistic", ds, l2=1e-4)
    parts = partition_rows(ds.n_train, code.partition_sizes)
    g = sum(problem.gradient(w, rows) for rows in parts)       # = problem.gradient(w)
    opt = make_optimizer("nesterov", lr=1.0); state = opt.init(w)
    w, state = opt.step(w, problem.full_gradient(w, g), state, t)
"""

from gradcode.problems.data import (
    DATASETS,
    DataSpec,
    Dataset,
    available_datasets,
    make_dataset,
    partition_rows,
    register_dataset,
)
from gradcode.problems.models import (
    PROBLEMS,
    LinearRegression,
    LogisticRegression,
    Problem,
    SoftmaxRegression,
    available_problems,
    make_problem,
    register_problem,
)
from gradcode.problems.optimizers import (
    GD,
    OPTIMIZERS,
    SGD,
    Nesterov,
    Optimizer,
    available_optimizers,
    make_optimizer,
    register_optimizer,
)

__all__ = [
    "DATASETS", "PROBLEMS", "OPTIMIZERS",
    "DataSpec", "Dataset", "available_datasets", "make_dataset", "partition_rows", "register_dataset",
    "Problem", "LogisticRegression", "LinearRegression", "SoftmaxRegression", "available_problems",
    "make_problem", "register_problem",
    "Optimizer", "GD", "Nesterov", "SGD", "available_optimizers", "make_optimizer", "register_optimizer",
]
