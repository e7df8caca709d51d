"""Entry points of real training: :func:`train` and :func:`resume` (and :func:`run_training`, which
the torch front end shares).

They turn a :class:`~gradcode.runtime.config.TrainSpec` and its run's config objects into a
:class:`~gradcode.runtime.driver.RunSetup` (:func:`~gradcode.runtime.setup.prepare`), open a
session (:func:`~gradcode.runtime.session.open_session`: the run dir, the engine's workers, the
:class:`~gradcode.runtime.driver.RoundDriver`, whose module docstring states the rules a run
follows) and run its rounds. Whatever happens, the completed rounds are saved under the run dir
(:mod:`gradcode.runtime.records`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gradcode.runtime.base import Engine
from gradcode.runtime.config import ClusterConfig, FaultConfig, RunConfig, TrainSpec, given_configs
from gradcode.runtime.records import CHECKPOINT, CheckpointError, TrainResult, read_checkpoint
from gradcode.runtime.session import open_session
from gradcode.runtime.setup import DEFAULT_ROUNDS

__all__ = ["resume", "run_training", "train"]


# ----------------------------------------------------------------------------------------- train


def train(
    spec: TrainSpec | None = None,
    *,
    cluster: ClusterConfig | None = None,
    faults: FaultConfig | None = None,
    run: RunConfig | None = None,
    engine: Engine | str | None = None,
    callback: Callable[[dict], None] | None = None,
) -> TrainResult:
    """Train with gradient coding on workers (rules: :mod:`gradcode.runtime.driver`).

    ``spec``: *what* is trained (:class:`~gradcode.runtime.config.TrainSpec`: the code or scheme,
    data, problem, optimizer, injected stragglers, seed; default ``TrainSpec()``); ``cluster``:
    the Ray engine's settings (:class:`~gradcode.runtime.config.ClusterConfig`); ``faults``:
    failures to inject and how long a round may wait (:class:`~gradcode.runtime.config.FaultConfig`);
    ``run``: rounds, checkpoints, the run dir (:class:`~gradcode.runtime.config.RunConfig`). As Ray
    Train's trainers take ``ScalingConfig``/``RunConfig``/``FailureConfig``::

        train(TrainSpec("crc", workers=8, stragglers=2, delay=0.5), run=RunConfig(rounds=50))

    ``engine``: ``"ray"`` (default: an embedded local cluster, or ``cluster.address``),
    ``"inprocess"`` (the workers in this process on a virtual clock timed by their measured
    compute: no processes) or an :class:`~gradcode.runtime.base.Engine` object
    (:func:`~gradcode.runtime.session.make_engine`). ``callback(record)`` is called after every
    round with a dict (round, time, loss, ...); an exception it raises stops the run (a
    checkpoint taken before survives for ``resume``).

    A ``run.run_dir`` that already holds a run (a checkpoint, a result or round records) is
    refused unless ``run.resume`` (continue it; ``rounds`` may exceed the checkpoint's to extend
    a finished run, the added rounds taking their injected delays from the draw of the longer run)
    or ``run.overwrite`` (replace it: the old checkpoint and records are removed first).

    A run that stops raises :class:`~gradcode.runtime.driver.TrainingStopped` (a round that cannot
    be decoded in time: its subclass :class:`RoundTimeoutError`; a diverging step, a worker that
    raises, a lost cluster) after the completed rounds are saved under the run dir with the
    error; ``exc.result`` holds them as a :class:`TrainResult`. Any other exception that stops a
    started run (the callback's, ``KeyboardInterrupt``) is raised as it is, carrying ``result``
    too. A damaged checkpoint raises :class:`CheckpointError`. :func:`resume` continues a run
    from its folder alone.

    """
    out = given_configs({"spec": spec, "cluster": cluster, "faults": faults, "run": run},
                        {"spec": TrainSpec, "cluster": ClusterConfig, "faults": FaultConfig, "run": RunConfig})
    run = out["run"] if out["run"].rounds is not None else replace(out["run"], rounds=DEFAULT_ROUNDS)
    return run_training(out["spec"], cluster=out["cluster"], faults=out["faults"], run=run, engine=engine,
                        callback=callback)


def resume(
    run_dir: str | os.PathLike,
    *,
    rounds: int | None = None,
    cluster: ClusterConfig | None = None,
    faults: FaultConfig | None = None,
    engine: Engine | None = None,
    callback: Callable[[dict], None] | None = None,
    trust_checkpoint: bool = False,
) -> TrainResult:
    """Continue the run in ``run_dir`` from its checkpoint, with the spec, run config and faults it
    was started with (kept in the checkpoint). ``rounds``: the run's total rounds (default: as
    started; more extends a finished run). ``cluster``: where to run now (default: the current Ray
    session or an embedded local cluster). ``faults``: another round timeout or restart limit
    (without ``fail`` it keeps the run's planned failures; with one, it must be the run's). Same
    result as ``train(spec, run=RunConfig(..., resume=True))`` with the original arguments; a
    checkpoint written by a version without this entry point is refused with that advice."""
    path = Path(run_dir) / CHECKPOINT
    saved = read_checkpoint(path, trust=trust_checkpoint)
    spec, run = saved.get("spec"), saved.get("run")
    if not isinstance(spec, TrainSpec) or not isinstance(run, RunConfig):
        raise CheckpointError(
            f"resume: {path} does not hold the run's spec (its spec held objects a checkpoint cannot hold:"
            " a function, a class from outside gradcode, in-memory data); continue it with train(spec,"
            " run=RunConfig(..., resume=True)) and the spec it was started with"
        )
    saved_faults = saved.get("faults") or FaultConfig()
    if faults is None:
        faults = saved_faults
    elif not faults.fail:  # a new timeout or restart limit keeps the run's planned failures
        faults = replace(faults, fail=saved_faults.fail)
    run = replace(run, run_dir=run_dir, resume=True, overwrite=False,
                  rounds=run.rounds if rounds is None else rounds)
    return run_training(spec, cluster=cluster or ClusterConfig(), faults=faults, run=run, engine=engine,
                        callback=callback, checkpoint=saved)


def run_training(
    spec: TrainSpec,
    *,
    cluster: ClusterConfig,
    faults: FaultConfig,
    run: RunConfig,
    engine: Engine | str | None = None,
    callback: Callable[[dict], None] | None = None,
    checkpoint: dict | None = None,
    initial_params: list | None = None,
) -> TrainResult:
    """What :func:`train` and :func:`resume` do once the config objects are built: open the run
    (:func:`open_session`: prepare it, its folder, its state), then drive its rounds on the engine
    in a :class:`RunSession`, which saves the records. ``checkpoint``: the checkpoint document
    already read (resume); ``initial_params``: each model's parameters before round 0 (default:
    the problem's ``init_params``; :func:`gradcode.torch.fit` gives the user's modules' own
    weights). A callback that raises :class:`~gradcode.errors.StopTraining` ends the run after
    that round, as a finished one."""
    with open_session(spec, cluster=cluster, faults=faults, run=run, engine=engine, checkpoint=checkpoint,
                      initial_params=initial_params) as session:
        session.run_all(callback)
    return session.result
