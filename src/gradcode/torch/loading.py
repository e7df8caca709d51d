"""Names for a torch run's pieces, so that the command line and :class:`~gradcode.torch.TorchConfig`
take the same strings: a loss (``"cross-entropy"``, ``"mse"``), an optimizer (any ``torch.optim``
class by name: ``"sgd"``, ``"RMSprop"``), a learning-rate schedule (``"step:step_size=10,gamma=0.5"``,
``"cosine"``), a model (``"cnn"``, ``"resnet18"``), or the user's own object as ``FILE.py:NAME`` /
``package.module:NAME`` (:func:`load_object`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable

from gradcode._options import parse_kv
from gradcode._validation import check_choice, check_int, check_real, unreadable_file

__all__ = ["LOSSES", "SCHEDULERS", "is_object_path", "load_object", "loss_function", "model_factory",
           "optimizer_class", "scheduler_factory", "torch_optimizers"]

#: the losses by name
LOSSES = ("cross-entropy", "mse")
#: the learning-rate schedules by name
SCHEDULERS = ("step", "cosine")


def is_object_path(spec: str) -> bool:
    """Whether ``spec`` names the user's own object (``FILE.py:NAME``, ``package.module:NAME``)
    rather than a built-in with parameters (``step:gamma=0.5``)."""
    head, sep, rest = spec.partition(":")
    return bool(sep) and bool(rest) and (head.endswith(".py") or "." in head or "/" in head or "=" not in rest)


def loss_function(spec: str | Callable | None, what: str = "loss") -> Callable | None:
    """A loss ``loss(output, target)``: None (by the targets' type, at fit), a callable as given,
    ``"cross-entropy"``, ``"mse"``, or ``FILE.py:NAME`` / ``module:NAME``."""
    import torch.nn.functional as F

    if spec is None or callable(spec):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"{what} must be a callable loss(output, target) or a name, got {type(spec).__name__}")
    if is_object_path(spec):
        return load_object(spec, what)
    check_choice(what, spec, LOSSES)
    return F.cross_entropy if spec == "cross-entropy" else F.mse_loss


def torch_optimizers() -> dict:
    """``torch.optim``'s optimizer classes by lower-case name (``"sgd"``, ``"adam"``, ``"rmsprop"``,
    ...), read from the installed torch so that its new optimizers are names here too."""
    import torch

    return {name.lower(): cls for name, cls in vars(torch.optim).items()
            if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer}


def optimizer_class(spec, what: str = "optimizer"):
    """The optimizer ``spec`` names: a ``torch.optim`` class by its name in any case (``"sgd"``,
    ``"adamw"``, ``"RMSprop"``: :func:`torch_optimizers`), or the user's own class or factory
    ``params -> Optimizer`` as ``FILE.py:NAME`` / ``package.module:NAME``; anything else is
    returned as given (a class or factory passed from Python). An unknown name is refused,
    listing the names."""
    if not isinstance(spec, str):
        return spec
    if is_object_path(spec):
        return load_object(spec, what)
    classes = torch_optimizers()
    cls = classes.get(spec.strip().lower())
    if cls is None:
        names = ", ".join(sorted((c.__name__ for c in classes.values()), key=str.lower))
        raise ValueError(f"{what} {spec!r} is not a torch.optim optimizer; give one of {names} (any case), or your"
                         " own as FILE.py:NAME or package.module:NAME")
    return cls


def _schedule_params(spec: str, what: str) -> tuple[str, dict]:
    """``"step:step_size=10,gamma=0.5"`` -> ``("step", {...})``, numbers checked."""
    head, _, rest = spec.partition(":")
    check_choice(what, head, SCHEDULERS)
    params = parse_kv([rest] if rest.strip() else [], f"{what} {spec}: a parameter")
    try:
        for key, value in params.items():
            if key in ("step_size", "T_max"):
                params[key] = check_int(key, value, minimum=1)
            elif key in ("gamma", "eta_min"):
                params[key] = check_real(key, value, minimum=0.0)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} {spec}: {exc}") from None
    return head, params


def check_scheduler(spec, what: str = "scheduler") -> None:
    """Refuse a bad schedule now, before data are read: an unknown name or parameter, a number of
    the wrong kind, a file that does not import."""
    if spec is None or callable(spec):
        return
    if not isinstance(spec, str):
        raise TypeError(f"{what} must be a factory optimizer -> LR scheduler or a name, got {type(spec).__name__}")
    if is_object_path(spec):
        load_object(spec, what)
        return
    scheduler_factory(spec, rounds=1, what=what)


def scheduler_factory(spec, rounds: int, what: str = "scheduler") -> Callable | None:
    """A factory ``optimizer -> LR scheduler`` stepped once a round: None, a callable as given,
    ``FILE.py:NAME`` / ``module:NAME``, ``step`` (``StepLR``: ``step_size`` default a third of the
    ``rounds``, ``gamma`` 0.1) or ``cosine`` (``CosineAnnealingLR``: ``T_max`` default the
    ``rounds``), each with parameters as ``step:step_size=10,gamma=0.5``."""
    import torch

    if spec is None or callable(spec):
        return spec
    if is_object_path(spec):
        return load_object(spec, what)
    head, params = _schedule_params(spec, what)
    if head == "step":
        params.setdefault("step_size", max(1, rounds // 3))
        params.setdefault("gamma", 0.1)
        cls = torch.optim.lr_scheduler.StepLR
    else:
        params.setdefault("T_max", rounds)
        cls = torch.optim.lr_scheduler.CosineAnnealingLR
    try:
        cls(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), **params)  # unknown parameters
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} {spec}: {exc}") from None
    return functools.partial(cls, **params)


def model_factory(spec: str, train_data, what: str = "model") -> Callable:
    """A model by name: a built-in (sized from the data: inputs, image shape, classes; a factory
    that :func:`~gradcode.torch.fit` calls under the run's seed, so every scheme starts from the
    same weights), or ``FILE.py:NAME`` / ``package.module:NAME`` naming an ``nn.Module`` class or a
    factory, called with no arguments."""
    from gradcode.torch.models import make_model

    X, y = train_data
    if ":" in spec:
        return load_object(spec, what)
    n_out = int(y.max()) + 1 if not y.is_floating_point() else (1 if y.ndim == 1 else int(y.shape[1]))
    image_shape = tuple(X.shape[1:]) if X.ndim == 4 else None
    make_model(spec, n_in=int(X[0].numel()), n_out=n_out, image_shape=image_shape)  # a bad name, now
    return functools.partial(make_model, spec, n_in=int(X[0].numel()), n_out=n_out, image_shape=image_shape)


def load_object(spec: str, what: str) -> Callable:
    """``FILE.py:NAME`` or ``package.module:NAME``: the callable it names (a user's file is imported
    under a name of its own and travels to Ray's workers by value). ``what`` names the option in
    errors."""
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        problem = unreadable_file(where)
        if problem:
            raise ValueError(f"{what} {spec}: {where} is {problem}" if problem != "no such file"
                             else f"{what} {spec}: no such file {where}")
        mod_name = f"gradcode_user_file_{abs(hash(os.path.abspath(where)))}"
        module = sys.modules.get(mod_name)
        if module is None:
            loader = importlib.util.spec_from_file_location(mod_name, where)
            module = importlib.util.module_from_spec(loader)
            sys.modules[mod_name] = module  # Ray's workers get it by value (gradcode.torch.fit)
            try:
                loader.loader.exec_module(module)
            except Exception as exc:  # the user's file: its error, named, not our traceback (gradcode
                del sys.modules[mod_name]  # train --debug shows the file's own, its cause)
                raise ValueError(f"{what} {spec}: importing {where} raised {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ValueError(f"{what} {spec}: cannot import {where}: {exc}") from None
    obj = getattr(module, name, None)
    if obj is None or not callable(obj):
        raise ValueError(f"{what} {spec}: {where} has no class or function {name!r}")
    return obj
