"""What a training run is made of, as four frozen values (the shape of Ray Train's ScalingConfig /
RunConfig / FailureConfig), instead of one function with thirty keywords.

* :class:`TrainSpec`: *what* is trained: the code or scheme, the data and problem, the optimizer,
  the models, the injected stragglers and the seed. Two runs with the same spec train the same
  models to the same iterates (exact codes), whatever the cluster or the faults.
* :class:`ClusterConfig`: *where*: the Ray cluster to join or start and what each worker reserves.
* :class:`FaultConfig`: what goes wrong and how much of it is tolerated: worker deaths to inject,
  Ray's restarts, how long a round may wait.
* :class:`RunConfig`: *how long and where to*: rounds, checkpoints, the run dir, evaluation cadence,
  and whether a run already in the run dir is continued or replaced.

Each validates its fields when it is built (``ValueError``/``TypeError`` naming the field, as
``train()``'s keywords always did), so a bad value is refused before any data is loaded or any
worker started. They are plain picklable values: a checkpoint keeps the spec and the run config, so
:func:`gradcode.runtime.resume` continues a run from its folder alone. Mappings given to them are
copied, so changing the caller's dict afterwards does not change a spec.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from gradcode._validation import check_choice, check_closing_rule, check_int, check_real

__all__ = ["ClusterConfig", "FaultConfig", "RunConfig", "TrainSpec"]


def _set(obj, name: str, value) -> None:
    object.__setattr__(obj, name, value)  # frozen dataclasses normalise their fields this way


@dataclass(frozen=True)
class ClusterConfig:
    """Where the workers run.

    ``address``: join an existing Ray cluster (``"auto"``, ``"host:port"``, ``"ray://..."``);
    None uses the Ray session already running in this process, or starts an embedded local one
    with ``num_cpus`` cores. ``start_timeout``: seconds the cluster may take to answer and the
    workers to start (build their data) before the run stops with a clear error.
    ``worker_cpus``: CPUs each worker reserves; 0 (default) so that the number of workers is not
    limited by the cores Ray sees (stragglers are simulated on few cores; 64 workers run on 2).
    """

    address: str | None = None
    num_cpus: int | None = None
    start_timeout: float = 120.0
    worker_cpus: float = 0.0

    def __post_init__(self):
        if self.num_cpus is not None:
            _set(self, "num_cpus", check_int("num_cpus", self.num_cpus, minimum=1))
        _set(self, "start_timeout", check_real("start_timeout", self.start_timeout, minimum=0.0, strict_min=True))
        _set(self, "worker_cpus", check_real("worker_cpus", self.worker_cpus, minimum=0.0))


@dataclass(frozen=True)
class FaultConfig:
    """Faults to inject and how they are tolerated.

    ``fail``: ``"W@R"`` strings or ``(W, R)`` pairs: worker ``W``'s process exits in round ``R``
    (checked against the number of workers and rounds when the run is set up). ``max_restarts``:
    how often Ray restarts a dead worker (-1: without limit, 0: never). ``round_timeout``: seconds
    a round may wait to decode before the run stops with
    :class:`~gradcode.runtime.RoundTimeoutError`.
    """

    fail: tuple = ()
    max_restarts: int = -1
    round_timeout: float = 120.0

    def __post_init__(self):
        items = (self.fail,) if isinstance(self.fail, str) else tuple(self.fail or ())
        out = []
        for spec in items:
            if isinstance(spec, str):
                try:
                    w_s, r_s = spec.split("@")
                    int(w_s), int(r_s)
                except ValueError:
                    raise ValueError(f"fail must look like W@R (worker W dies in round R), got {spec!r}") from None
                out.append(spec)
            else:
                w, r = spec
                out.append((check_int("fail worker", w, minimum=0), check_int("fail round", r, minimum=0)))
        _set(self, "fail", tuple(out))
        _set(self, "max_restarts", check_int("max_restarts", self.max_restarts, minimum=-1))
        _set(self, "round_timeout", check_real("round_timeout", self.round_timeout, minimum=0.0, strict_min=True))


@dataclass(frozen=True)
class RunConfig:
    """How long the run goes and where its records go.

    ``rounds``: training rounds (with ``resume``, the total: more than the checkpoint's extends a
    finished run). ``checkpoint_every``: rounds between checkpoints (0: none). ``run_dir``: where
    records, checkpoints and Ray's temp dir go (None: a new ``./gradcode-runs/<code>-n<n>-<time>``).
    ``eval_every``: held-out metrics every ``K`` rounds and after the last (0: after the last only).
    ``resume``: continue the run in ``run_dir`` from its checkpoint (same spec, checked);
    ``overwrite``: replace the run in ``run_dir`` (without either, a run dir that holds a run is
    refused).
    """

    rounds: int = 100
    checkpoint_every: int = 0
    run_dir: str | os.PathLike | None = None
    eval_every: int = 1
    resume: bool = False
    overwrite: bool = False

    def __post_init__(self):
        _set(self, "rounds", check_int("rounds", self.rounds, minimum=1))
        _set(self, "checkpoint_every", check_int("checkpoint_every", self.checkpoint_every, minimum=0))
        _set(self, "eval_every", check_int("eval_every", self.eval_every, minimum=0))
        if self.resume and self.run_dir is None:  # the default run_dir is a new timestamped folder
            raise ValueError("resume=True needs run_dir: the folder of the run to continue")


@dataclass(frozen=True)
class TrainSpec:
    """What is trained (see :func:`gradcode.runtime.train` for each field's meaning).

    ``code``: a code name, a :class:`~gradcode.LinearCode` or a :class:`~gradcode.schemes.Scheme`
    (with ``workers`` (default 4), ``stragglers``, ``seed`` and ``code_params`` for a name; a code
    or scheme object brings its own ``n``, and a ``workers`` that differs is refused); ``data`` a
    dataset name (with ``data_params`` and ``test_fraction``), a ``DataSpec``, or a problem spec
    (anything picklable whose ``build()`` returns ``(problem, dataset)``); ``problem`` defaults to
    the data's task. ``optimizer_params``: one dict for every model or a list of ``models`` dicts.
    ``stragglers``/``delay``/``delay_model``/``inject``: the injected stragglers (also the
    tolerance ``s`` of codes that take one). ``verify``: rounds wait for two spare results and
    check them against each other. ``close``/``waitout``: the closing rule, ``"decodable"`` or the
    ``mu >= 0`` of SGC's mu-rule, and what a round that rule leaves undecodable waits for
    (``"decodable"`` or ``"all"``), as in :func:`gradcode.simulate`.
    """

    code: Any = "crc"
    workers: int | None = None
    stragglers: int = 0
    delay: float = 0.0
    delay_model: Any = None
    code_params: Mapping | None = None
    data: Any = "tandon-synthetic"
    data_params: Mapping | None = None
    test_fraction: float = 0.2
    problem: str | None = None
    problem_params: Mapping | None = None
    optimizer: str = "gd"
    optimizer_params: Mapping | Sequence[Mapping] | None = None
    models: int = 1
    seed: int = 0
    verify: bool = False
    inject: str = "excess"
    close: str | float = "decodable"
    waitout: str = "decodable"

    def __post_init__(self):
        _set(self, "models", check_int("models", self.models, minimum=1))
        _set(self, "seed", check_int("seed", self.seed, minimum=0))
        _set(self, "delay", check_real("delay", self.delay, minimum=0.0))
        check_choice("inject", self.inject, ("excess", "full"))
        mu = check_closing_rule(self.close, self.waitout)
        if mu is not None:
            _set(self, "close", mu)
        for name in ("code_params", "data_params", "problem_params"):
            value = getattr(self, name)
            if value is not None:
                _set(self, name, dict(value))
        opt = self.optimizer_params
        if opt is not None:
            _set(self, "optimizer_params", dict(opt) if isinstance(opt, Mapping) else tuple(dict(p) for p in opt))

    def replace(self, **changes) -> TrainSpec:
        """A copy with ``changes`` (validated again)."""
        return replace(self, **changes)


def field_names(cls) -> tuple[str, ...]:
    """The fields of one of the config classes, in order (what ``train()`` maps its keywords to)."""
    return tuple(f.name for f in fields(cls))

