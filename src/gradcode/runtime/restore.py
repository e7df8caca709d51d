"""Resuming from a checkpoint: the checkpointed state and scheme, checked against what the run's
configuration builds before the first round (:func:`check_restored`), so that a damaged or edited
checkpoint is a :class:`~gradcode.runtime.records.CheckpointError` naming what does not fit, never
a traceback in a later round.
"""

from __future__ import annotations

import numpy as np

from gradcode.runtime.config import RunConfig
from gradcode.runtime.driver import RunSetup
from gradcode.runtime.records import CheckpointError, TrainState, check_checkpoint_config

__all__ = ["check_restored", "restore_checkpoint"]


def restore_checkpoint(saved: dict, setup: RunSetup, run: RunConfig) -> tuple[TrainState, dict]:
    """The state and in-flight jobs of the checkpoint ``saved``, after checking it is this run's
    configuration; ``setup.scheme`` becomes the checkpointed scheme (its history kept) and the
    state's tables grow to ``run.rounds``."""
    if "scheme" not in saved.get("config", {}):  # 0.1 named it "code" (CHANGELOG.md, 0.2.0)
        raise CheckpointError("resume: this checkpoint was written by gradcode 0.1, whose configuration names changed"
                              " in 0.2.0 (CHANGELOG.md); start the run anew")
    # a scheme built from its name is fully described by the config (name, scheme_params, workers,
    # stragglers, seed); a code or scheme object is named by its repr, which may hold an address
    ignore = ("rounds",) if isinstance(setup.spec.scheme, str) else ("rounds", "scheme")
    check_checkpoint_config(saved, setup.config, ignore=ignore)
    state = TrainState.from_dict(saved["state"])
    check_restored(state, saved["scheme"], setup)
    setup.scheme = saved["scheme"]
    if run.rounds < state.next_round:
        raise ValueError(f"resume: the checkpoint has {state.next_round} rounds done; rounds must be at least"
                         f" that, got {run.rounds}")
    state.grow(run.rounds)
    return state, saved["inflight"]


def check_restored(state: TrainState, scheme, setup: RunSetup) -> None:
    """Every value a checkpoint restores, against what this run's configuration builds, before the
    run starts: each model's parameters (the problem's shape and type, finite), its step count (an
    integer, at most the rounds done, all of them together too), and the scheme (the class, the
    sizes and the code the configuration builds: its placement, encoders and own fields); a value
    that does not fit is a :class:`CheckpointError` naming it, never a traceback in a later round."""
    bad = []
    problem = setup.problem
    want = np.asarray(problem.init_params(np.random.default_rng(0)))
    finite = getattr(problem, "parameters_finite", None) or (lambda x: bool(np.isfinite(x).all()))
    for m, x in enumerate(state.params):
        x = np.asarray(x)
        if x.shape != want.shape or x.dtype.kind != "f":
            bad.append(f"model {m}'s parameters are {x.dtype} {x.shape}, the problem's {want.dtype} {want.shape}")
        elif not finite(x):
            bad.append(f"model {m}'s parameters hold NaN or infinity")
    rounds = int(state.next_round)
    steps = list(state.steps)
    wrong = [k for k in steps if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= rounds]
    if wrong or sum(int(k) for k in steps) > rounds:
        bad.append(f"step counts {steps} after {rounds} rounds (each an integer from 0, a job a step at most)")
    why = _scheme_difference(setup.scheme, scheme)
    if why:
        bad.append(why)
    if bad:
        raise CheckpointError("resume: the checkpoint does not fit this run's configuration (" + "; ".join(bad)
                              + "): it is damaged or was edited")


def _scheme_difference(fresh, restored) -> str | None:
    """How the checkpoint's scheme ``restored`` differs from the one the configuration builds
    (``fresh``) in what the configuration decides, or None. A scheme that changes its partitions
    as it runs (the probe-then-switch) is compared by its class and size only."""
    if type(restored) is not type(fresh):
        return f"the scheme is a {type(restored).__name__}, the configuration builds a {type(fresh).__name__}"
    for name in ("n", "chunks", "delay"):
        if getattr(fresh, name, None) != getattr(restored, name, None):
            return (f"the scheme's {name} is {getattr(restored, name, None)!r}, the configuration's"
                    f" {getattr(fresh, name)!r}")
    if getattr(fresh, "changes_layout", False):
        return None
    if not np.array_equal(np.asarray(fresh.partition_sizes), np.asarray(restored.partition_sizes)):
        return "the scheme's partition sizes differ from the configuration's"
    a, b = fresh.static_code, restored.static_code
    if (a is None) != (b is None):
        return "the scheme's code differs from the configuration's"
    if a is None:
        return None
    # the linear code contract's own fields (codes/base.py), what every decode reads
    fields = ("n", "k", "chunks", "tolerance", "exact", "straggler_prefix", "params", "partition_sizes")
    changed = [f for f in fields if not _same(getattr(a, f, None), getattr(b, f, None))]
    if not _same([tuple(p) for p in a.placement], [tuple(p) for p in b.placement]):
        changed.append("placement")
    if changed:
        return f"the code's {', '.join(changed)} differ from the code the configuration builds"
    if not getattr(a, "lazy", False) and any(not np.array_equal(np.asarray(a.encoders[w]), np.asarray(b.encoders[w]))
                                             for w in range(a.n)):
        return "the code's encoding coefficients differ from the configuration's"
    return None


def _same(x, y) -> bool:
    """Whether two configuration values are equal (arrays by value, containers item by item)."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.shape == y.shape and np.array_equal(x, y)
    if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    try:
        return bool(x == y)
    except Exception:  # a value that does not compare: not the same
        return False
