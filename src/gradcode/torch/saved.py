"""What a torch run leaves in its folder for other torch code, and :func:`load_run`, which reads it.

Every run of :func:`~gradcode.torch.fit` (``gradcode train --model``) writes beside its records,
when it ends (also when it stops early: the weights of its last completed round):

* ``model.pt``: the trained module's ``state_dict()`` (parameters, BatchNorm's running statistics
  and batch counters), ``torch.save`` of plain tensors on the CPU: what
  ``net.load_state_dict(torch.load("model.pt", weights_only=True))`` loads into a fresh instance of
  the model's class, without gradcode;
* ``optimizer.pt``: the torch optimizer's ``state_dict()`` (Adam's moments and step counts, SGD's
  momentum buffers, the parameter groups' settings), for ``optimizer.load_state_dict``;
* ``scheduler.pt``: the learning-rate scheduler's ``state_dict()``, when the run had one.

A run of several models at once (``TrainSpec(models=M)``) writes ``model-0.pt`` ... ``model-<M-1>.pt``
and ``optimizer-<m>.pt`` (and ``scheduler-<m>.pt``), one set per model: model ``m`` is the one
``FitResult.models[m]`` holds. The run's ``result.json`` names the files it wrote (``files``).

The files are plain torch serialisations with no code in them, and :func:`load_run` reads them as
such: through :func:`~gradcode._validation.read_regular` (a regular file of bounded size) and
``torch.load(..., weights_only=True)``, which refuses anything but tensors and plain values, so a
run folder from elsewhere cannot run code when it is read.

A run stopped by a diverging step keeps in ``model.pt`` the weights from before that step; its
``optimizer.pt`` holds the torch optimizer's state as it stands, which that step may have moved
(torch optimizers update their moments in place).
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from gradcode._validation import read_regular
from gradcode.errors import GradcodeError

__all__ = ["ModelMismatchError", "RunFilesError", "SavedRun", "load_run", "model_files", "save_plain"]

#: the kinds of file a torch run writes, each ``<kind>.pt`` (``<kind>-<m>.pt`` with several models)
KINDS = ("model", "optimizer", "scheduler")


class RunFilesError(GradcodeError, ValueError):
    """A run folder's torch files are missing, or are not what a torch run writes (not loadable
    with ``weights_only=True``, or not a ``state_dict``)."""


class ModelMismatchError(GradcodeError, ValueError):
    """A module given to :func:`load_run` does not have the saved model's keys and shapes."""


@dataclass(frozen=True)
class SavedRun:
    """What :func:`load_run` read from a run folder: model ``index`` (of ``models``) as its
    ``state_dict`` (CPU tensors), the optimizer's and scheduler's ``state_dict`` (None when not
    written), ``model`` (the module given to :func:`load_run`, now holding the weights, or None),
    and the paths read (``files``, by kind)."""

    run_dir: str
    state_dict: dict
    optimizer_state: dict | None
    scheduler_state: dict | None
    model: nn.Module | None
    index: int
    models: int
    files: dict


def model_files(run_dir, models: int, m: int) -> dict[str, Path]:
    """The paths model ``m`` of a run of ``models`` models writes, by kind (module docstring)."""
    suffix = f"-{m}" if models > 1 else ""
    return {kind: Path(run_dir) / f"{kind}{suffix}.pt" for kind in KINDS}


def save_plain(obj, path: Path) -> None:
    """``torch.save`` of ``obj`` with every tensor moved to the CPU (a GPU run's weights load on
    any machine), written through a temporary file and a rename, so that a crash leaves the old
    file or the new one."""
    from gradcode.runtime.safe_state import atomic_write

    buffer = io.BytesIO()
    torch.save(_on_cpu(obj), buffer)
    atomic_write(Path(path), buffer.getvalue())


def _on_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return type(obj)((k, _on_cpu(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_on_cpu(v) for v in obj)
    return obj


def load_run(run_dir, model: nn.Module | None = None, *, index: int = 0,
             optimizer: torch.optim.Optimizer | None = None) -> SavedRun:
    """Read a torch run's ``model.pt``, ``optimizer.pt`` and ``scheduler.pt`` from ``run_dir``
    (model ``index``'s ``model-<index>.pt`` ... for a run of several models); with ``model``, load
    the weights into it (its keys and shapes must be the saved ones: a :class:`ModelMismatchError`
    names those that differ, and the module is left as it was); with ``optimizer`` (built on
    ``model``'s parameters), load the optimizer's state into it. Files are read as data only
    (module docstring); a folder without them is a :class:`RunFilesError` saying what it holds."""
    run_dir = Path(run_dir)
    models = _models_in(run_dir)
    if not 0 <= int(index) < models:
        raise RunFilesError(f"index={index}: the run in {run_dir} trained {models} model{'s' if models > 1 else ''}"
                            f" (index 0 to {models - 1})")
    paths = model_files(run_dir, models, int(index))
    state = _read(paths["model"], "a model's state_dict")
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise RunFilesError(f"{paths['model']} is not a state_dict (a dict of names to tensors)")
    opt_state = _read(paths["optimizer"], "an optimizer's state_dict") if paths["optimizer"].exists() else None
    if opt_state is not None and not (isinstance(opt_state, dict) and {"state", "param_groups"} <= set(opt_state)):
        raise RunFilesError(f"{paths['optimizer']} is not an optimizer's state_dict (no state and param_groups)")
    sched_state = _read(paths["scheduler"], "a scheduler's state_dict") if paths["scheduler"].exists() else None
    if model is not None:
        _check_fits(model, state, paths["model"])
        model.load_state_dict(state)
    if optimizer is not None:
        if opt_state is None:
            raise RunFilesError(f"no {paths['optimizer'].name} in {run_dir} to load into the optimizer")
        optimizer.load_state_dict(opt_state)
    return SavedRun(str(run_dir), state, opt_state, sched_state, model, int(index), models,
                    {kind: str(p) for kind, p in paths.items() if p.exists()})


def _models_in(run_dir: Path) -> int:
    """How many models the run in ``run_dir`` saved: 1 for ``model.pt``, M for ``model-0.pt`` to
    ``model-<M-1>.pt``."""
    if not run_dir.is_dir():
        raise RunFilesError(f"{run_dir} is not a folder (a run's records are a folder: --run-dir, FitResult.run_dir)")
    if (run_dir / "model.pt").exists():
        return 1
    models = 0
    while (run_dir / f"model-{models}.pt").exists():
        models += 1
    if models == 0:
        held = sorted(p.name for p in run_dir.iterdir())[:12]
        raise RunFilesError(f"no model.pt in {run_dir} (it holds {', '.join(held) or 'nothing'}): a torch model's run"
                            " (gradcode.torch.fit, gradcode train --model) writes one when it ends; a built-in"
                            " problem's parameters are in params.npy")
    return models


def _read(path: Path, what: str):
    """The object in ``path``, read as data only (``weights_only=True``) onto the CPU."""
    data = read_regular(path)
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunFilesError(f"{path} is not {what} that torch loads as data only (weights_only=True):"
                            f" {first}") from None


def _check_fits(model: nn.Module, state: dict, path: Path, shown: int = 8) -> None:
    """Refuse ``model`` unless its ``state_dict`` has exactly ``state``'s keys, with its shapes."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f"{k} saved {tuple(state[k].shape)}, module {tuple(own[k].shape)}" for k in own
              if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if not (missing or unexpected or shapes):
        return

    def listed(items):
        more = f" and {len(items) - shown} more" if len(items) > shown else ""
        return ", ".join(items[:shown]) + more

    parts = [f"{label}: {listed(items)}" for label, items in (
        ("keys the module has and the file lacks", missing), ("keys the file has and the module lacks", unexpected),
        ("shapes that differ", shapes)) if items]
    raise ModelMismatchError(f"{path} does not fit {type(model).__name__} ({'; '.join(parts)}); pass a module of the"
                             " class the run trained, built with the same arguments")
