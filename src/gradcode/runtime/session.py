"""A run in progress: its engine (:func:`make_engine`), its run dir (made, or refused when it
holds a run unless resumed or overwritten), its first state (fresh, or a checkpoint's:
:mod:`gradcode.runtime.restore`), its workers and its :class:`~gradcode.runtime.driver.RoundDriver`
(:func:`open_session` -> :class:`RunSession`, which runs the rounds and saves the records and
checkpoints, :mod:`gradcode.runtime.records`, whatever happens).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from gradcode._validation import check_choice
from gradcode.codes.messages import set_decode_threads, warm_kernels
from gradcode.errors import StopTraining
from gradcode.runtime.base import Engine
from gradcode.runtime.config import ClusterConfig, FaultConfig, RunConfig, TrainSpec
from gradcode.runtime.driver import RoundDriver, RunSetup, TrainingStopped
from gradcode.runtime.records import (
    CHECKPOINT,
    RUN_FILES,
    CheckpointError,
    RoundLog,
    RunDirInUseError,
    TrainResult,
    TrainState,
    atomic_write,
    read_checkpoint,
    save_checkpoint,
)
from gradcode.runtime.restore import restore_checkpoint
from gradcode.runtime.setup import initial_state, prepare
from gradcode.runtime.worker import limit_threads, master_threads

__all__ = ["ENGINES", "RunSession", "make_engine", "open_session", "runs_home"]


#: the engines :func:`make_engine` builds by name
ENGINES = ("ray", "inprocess")


def make_engine(engine=None, *, cluster: ClusterConfig | None = None, run_dir=None) -> Engine:
    """The engine a run uses: ``engine`` itself when it is an :class:`Engine`; ``"ray"`` (the
    default, also for None) a :class:`~gradcode.runtime.engine.RayEngine` built from ``cluster``
    (a :class:`~gradcode.runtime.config.ClusterConfig`: the Ray engine's settings) on this
    process's embedded cluster (kept for the next runs; Ray's logs go to the latest run's
    ``run_dir/ray/logs`` when it stops) or the cluster at its address; ``"inprocess"`` an
    :class:`~gradcode.runtime.inprocess.InProcessEngine` (no processes, no Ray) on its declared
    clock: compute at a per-sample cost calibrated once when the workers start (``"inprocess"``
    with another clock: pass the engine, ``InProcessEngine(compute_time=...)``); it refuses cluster
    settings it would ignore."""
    if isinstance(engine, Engine):
        return engine
    name = _check_engine(engine, cluster)
    cluster = cluster if cluster is not None else ClusterConfig()
    if name == "inprocess":
        from gradcode.runtime.inprocess import InProcessEngine

        return InProcessEngine(compute_time="calibrated")
    from gradcode.runtime.engine import RayEngine

    return RayEngine.from_config(cluster, run_dir=run_dir)


def _check_engine(engine, cluster: ClusterConfig | None) -> str | None:
    """The engine's name (None for an engine object), after refusing an unknown name and Ray
    settings given to the in-process engine, which would ignore them."""
    if isinstance(engine, Engine):
        return None
    name = check_choice("engine", "ray" if engine is None else engine, ENGINES)
    if name == "inprocess" and cluster is not None:
        set_ = [f for f in ("address", "num_cpus") if getattr(cluster, f) is not None]
        set_ += ["worker_cpus"] if cluster.worker_cpus else []
        set_ += ["transport"] if cluster.transport not in ("channels", "collective") else []
        if set_:
            raise ValueError(f"the in-process engine runs the workers in this process, without a cluster:"
                             f" {', '.join(set_)} are the Ray engine's settings (engine='ray', --engine ray)")
    return name


def open_session(spec: TrainSpec, *, cluster: ClusterConfig, faults: FaultConfig, run: RunConfig,
                 engine: Engine | str | None = None, checkpoint: dict | None = None,
                 initial_params: list | None = None) -> RunSession:
    """The :class:`RunSession` of a run, not yet entered: the run prepared, its folder opened
    (:func:`_open_run_dir`) and its state made (fresh or from the checkpoint: :func:`_start_state`).
    ``run.rounds`` None: an open-ended run, stepped as long as its caller goes on
    (:class:`gradcode.torch.Workers`; :func:`~gradcode.runtime.setup.prepare` says which schemes
    can run so)."""
    _check_engine(engine, cluster)  # a bad engine is refused before the run dir holds anything
    if run.rounds is None and (run.resume or run.checkpoint_every):
        raise ValueError("a run of as many rounds as its loop makes (rounds=None) writes no checkpoint and resumes"
                         " none: give RunConfig(rounds=...)")
    held = None if checkpoint is None else checkpoint["state"].get("params")
    if checkpoint is not None and (not isinstance(held, list) or len(held) != spec.models):
        # a state that cannot be this spec's is refused before anything is built (its tables are
        # checked when it is restored, TrainState.from_dict)
        raise CheckpointError(f"resume: the checkpoint's state holds {len(held) if isinstance(held, list) else 'no'}"
                              f" model(s), its spec {spec.models}: it is damaged or was edited")
    setup = prepare(spec, rounds=run.rounds, faults=faults)
    worker_specs = setup.worker_specs()  # data too small for the partitions is refused before the run starts
    run_dir = _open_run_dir(run, setup.config, setup.n)
    extra = _checkpoint_extra(spec, run, faults, setup.scheme) if run.checkpoint_every else None
    state, inflight, resumed_from = _start_state(setup, run, run_dir, checkpoint, initial_params)
    atomic_write(run_dir / "config.json", json.dumps(setup.config, indent=1, default=str).encode())
    return RunSession(setup, state, inflight, worker_specs, run_dir=run_dir, resumed_from=resumed_from, extra=extra,
                      options=(cluster, faults, run, engine))


def _start_state(setup: RunSetup, run: RunConfig, run_dir: Path, checkpoint, initial_params):
    """``(state, in-flight jobs, round resumed from)``: the checkpoint's for a resumed run (read
    from ``run_dir`` unless given), else a fresh state and None, None."""
    if not run.resume:
        return initial_state(setup, initial_params), None, None
    saved = checkpoint if checkpoint is not None else read_checkpoint(run_dir / CHECKPOINT,
                                                                      trust=run.trust_checkpoint)
    state, inflight = restore_checkpoint(saved, setup, run)
    return state, inflight, state.next_round


class RunSession:
    """A started run, one round at a time: ``with RunSession(...) as s: s.step()`` spawns the
    engine's workers and a :class:`~gradcode.runtime.driver.RoundDriver` on entry; each
    :meth:`step` runs and records the next round; on exit the records are saved under the run dir
    (``result``; a run stopped by an exception saves its completed rounds and the exception carries
    them as ``exc.result``), the caller's thread settings come back and the engine shuts down. What
    :func:`train` drives to the last round, and :class:`gradcode.torch.Workers` round by round from
    a user's own loop."""

    def __init__(self, setup: RunSetup, state: TrainState, inflight, worker_specs, *, run_dir: Path, resumed_from,
                 extra, options: tuple):
        self.setup, self.state, self.inflight, self.worker_specs = setup, state, inflight, worker_specs
        self.run_dir, self.resumed_from, self.extra = run_dir, resumed_from, extra
        self.cluster, self.faults, self.run, self.engine = options
        self.driver: RoundDriver | None = None
        self.result: TrainResult | None = None
        self.log: RoundLog | None = None
        self._restore_threads = None

    def __enter__(self) -> RunSession:
        state, run = self.state, self.run
        self.log = RoundLog(self.run_dir / "rounds.jsonl", keep_before=state.next_round if run.resume else 0)
        try:
            self.engine = make_engine(self.engine, cluster=self.cluster, run_dir=self.run_dir)
            # without injected sleeps there is nothing to interrupt: the cheaper synchronous workers
            self.engine.spawn(self.worker_specs, max_restarts=self.faults.max_restarts,
                              start_timeout=self.cluster.start_timeout, interruptible=self.setup.sleeps)
            # the master's own work (decode, step) gets master_threads(); the in-process engine's
            # workers compute here too, each timed as one worker on one thread
            threads = 1 if self.engine.in_master_process else master_threads()
            restore = limit_threads(threads)
            before = set_decode_threads(threads)

            def restore_both() -> None:
                restore()
                set_decode_threads(before)

            self._restore_threads = restore_both
            warm_kernels()  # the decode's compiled sums, before round 0
            driver = self._driver_class()
            extra = {"digest_every": self.cluster.replica_check} if driver is not RoundDriver else {}
            self.driver = driver(self.setup, self.engine, state, faults=self.faults, **extra)
            if self.inflight is not None:
                self.driver.restore(self.inflight)
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def _driver_class(self) -> type[RoundDriver]:
        """:class:`~gradcode.runtime.collective.CollectiveDriver` when the collective transport was
        asked for and the run can take it; the star path's :class:`RoundDriver` otherwise (with a
        :class:`~gradcode.runtime.collective.CollectiveFallbackWarning` saying why, when asked)."""
        if self.cluster is None or self.cluster.transport != "collective":
            return RoundDriver
        from gradcode.runtime.collective import CollectiveDriver, CollectiveFallbackWarning, collective_blocker

        why = collective_blocker(self.setup, self.engine)
        if why is None:
            return CollectiveDriver
        warnings.warn(f"transport 'collective': this run keeps the star path (every message to the driver): {why}",
                      CollectiveFallbackWarning, stacklevel=4)
        return RoundDriver

    def save(self) -> None:
        """Write the checkpoint (models, optimizer states, records, the scheme's state, the jobs in flight)."""
        save_checkpoint(self.run_dir / CHECKPOINT, self.setup.config, self.state, self.setup.scheme,
                        self.driver.inflight(), extra=self.extra)

    def run_all(self, callback: Callable[[dict], None] | None = None) -> None:
        """Run and record every round left (:meth:`RoundDriver.run`)."""
        self.driver.run(self.run, log=self.log, checkpoint=self.save, callback=callback)

    def step(self, callback: Callable[[dict], None] | None = None) -> dict:
        """Run and record the next round (:meth:`RoundDriver.step`); returns its record. Past
        ``RunConfig.rounds`` it raises :class:`TrainingStopped`; an open-ended run (``rounds``
        None) first doubles its tables and injected delays when the next round is past them."""
        limit, t = self.run.rounds, self.state.next_round
        if limit is not None and t >= limit:
            raise TrainingStopped(f"the run has done its {limit} rounds (RunConfig.rounds)")
        if t >= self.state.rounds:
            self._grow(2 * self.state.rounds)
        return self.driver.step(self.run, log=self.log, checkpoint=self.save, callback=callback)

    def _grow(self, rounds: int) -> None:
        """An open-ended run's tables and injected delays, grown to ``rounds`` rounds."""
        from gradcode.runtime.setup import grow_setup

        if not self.setup.open_ended:
            raise TrainingStopped(f"the run's tables hold {self.state.rounds} rounds")
        grow_setup(self.setup, rounds)
        self.state.grow(rounds)
        self.driver.draw = self.setup.draw

    def _save_model_files(self, result: TrainResult) -> None:
        """Each model's files for other code, written by its optimizer object when it has
        ``save_files`` (a torch model's ``model.pt`` and ``optimizer.pt``:
        :mod:`gradcode.torch.saved`), from the run's last parameters and optimizer states; their
        paths go into ``result.files`` (one path per kind, a list of them with several models)."""
        optimizers = self.setup.optimizers
        if not any(hasattr(o, "save_files") for o in optimizers):
            return
        models = len(optimizers)
        for m, opt in enumerate(optimizers):
            written = opt.save_files(self.state.params[m], self.state.opt_states[m], self.run_dir, models=models, m=m)
            for kind, path in written.items():
                if models == 1:
                    result.files[kind] = path
                else:
                    result.files.setdefault(kind, []).append(path)

    def _clock(self) -> dict | None:
        return self.engine.clock_info() if isinstance(self.engine, Engine) else None

    def __exit__(self, kind, exc, tb) -> bool:
        config = self.setup.config
        try:
            if exc is not None and not isinstance(exc, StopTraining):
                # keep what the run did: the completed rounds, every fault, and why it stopped
                if self.driver is not None:
                    self.driver.stopped()
                partial = self.state.result(config, self.run_dir, self.resumed_from, error=exc, clock=self._clock())
                try:
                    self._save_model_files(partial)
                except Exception:  # noqa: BLE001 - nor a model file that cannot be written
                    pass
                try:
                    partial.save(self.run_dir)
                except OSError:  # a full disk must not hide the error that stopped the run
                    pass
                self.log.close()
                if isinstance(exc, (Exception, KeyboardInterrupt)):
                    exc.result = partial  # TrainingStopped declares it; others carry it too (the CLI's --json)
                return False
            if self.driver is not None:  # also a run stopped early (StopTraining, a loop that ended)
                self.driver.unfired()
            self.log.close()
            self.result = self.state.result(config, self.run_dir, self.resumed_from, clock=self._clock())
            self._save_model_files(self.result)
            self.result.save(self.run_dir)
            return exc is not None  # StopTraining: the run ends there, as a finished one
        finally:
            if self._restore_threads is not None:
                self._restore_threads()
                self._restore_threads = None
            if isinstance(self.engine, Engine):
                self.engine.shutdown()


def runs_home() -> Path:
    """Where runs go when no run dir is given: ``$GRADCODE_RUNS`` if set, else
    ``~/.gradcode/runs``; never the working directory (a run holds records, checkpoints and Ray's
    logs)."""
    home = os.environ.get("GRADCODE_RUNS")
    return Path(home).expanduser() if home else Path.home() / ".gradcode" / "runs"


def _open_run_dir(run: RunConfig, config: dict, n: int) -> Path:
    """The run's folder, made if missing (default :func:`runs_home` ``/<code>-n<n>-<UTC time>``,
    with ``-2``, ``-3``... when two runs start in the same second). One that holds a run is
    refused unless ``run.resume`` (continue it) or ``run.overwrite`` (its run files are removed
    first)."""
    if run.run_dir is None:
        import re

        stem = re.sub(r"[^\w.=-]+", "_", f"{config['scheme']}-n{n}")[:60]
        base = runs_home() / f"{stem}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"
        run_dir, i = base, 2
        while run_dir.exists():
            run_dir, i = base.with_name(f"{base.name}-{i}"), i + 1
    else:
        run_dir = Path(run.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"run_dir {str(run_dir)!r} is a file, not a folder; pass a folder for the run's records")
    held = [name for name in RUN_FILES if (run_dir / name).exists()]
    if held and not run.resume:
        if not run.overwrite:
            raise RunDirInUseError(
                f"run_dir {str(run_dir)!r} already holds a run ({', '.join(held)}); continue it with"
                " resume=True (--resume) or replace it with overwrite=True (--overwrite)"
            )
        for name in held:
            (run_dir / name).unlink()
        for blob in run_dir.glob("checkpoint-*.npz"):  # the checkpoint's arrays
            blob.unlink()
        for kind in ("model", "optimizer", "scheduler"):  # a torch run's files (gradcode.torch.saved)
            for old in (*run_dir.glob(f"{kind}.pt"), *run_dir.glob(f"{kind}-*.pt")):
                old.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def _checkpoint_extra(spec: TrainSpec, run: RunConfig, faults: FaultConfig, scheme) -> dict:
    """What checkpoints add for :func:`resume` (:func:`_resume_record`), after refusing up front a
    scheme that a checkpoint cannot hold (:mod:`~gradcode.runtime.safe_state`)."""
    from gradcode.runtime.safe_state import UnsafeStateError, encode

    try:
        encode(scheme, [])
    except UnsafeStateError as exc:
        raise ValueError(
            f"checkpoint_every needs a scheme that a checkpoint can hold (gradcode's classes, arrays and plain"
            f" values, or classes of modules given to gradcode.runtime.trust_modules); {scheme!r} holds"
            f" something else: {exc}"
        ) from None
    return _resume_record(spec, run, faults)


def _resume_record(spec: TrainSpec, run: RunConfig, faults: FaultConfig) -> dict:
    """What a checkpoint keeps for :func:`resume`: the spec, run config and faults, when a
    checkpoint can hold them (a spec holding a function or a foreign object is still
    checkpointed, for ``train`` with ``RunConfig(resume=True)``; :func:`resume` then says it cannot)."""
    from gradcode.runtime.safe_state import UnsafeStateError, encode

    if not getattr(spec.data, "checkpoint_record", True):  # e.g. a torch run: no copy of its data set
        return {}
    record = {"spec": spec, "run": replace(run, resume=False, overwrite=False), "faults": faults}
    try:
        encode(record, [])
    except UnsafeStateError:
        return {}
    return record
