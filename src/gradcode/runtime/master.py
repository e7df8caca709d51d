"""Entry points of real training: :func:`train` and :func:`resume`.

They turn a :class:`~gradcode.runtime.config.TrainSpec` and its run's config objects into a :class:`~gradcode.runtime.driver.RunSetup` (:func:`prepare`: data, problem, scheme,
optimizers, injected delays and failures, the JSON config record), set up the run dir (refusing
one that holds a run unless resumed or overwritten), start the engine's workers and hand the rounds
to a :class:`~gradcode.runtime.driver.RoundDriver`, whose module docstring states the rules a run
follows. Whatever happens, the completed rounds are saved under the run dir
(:mod:`gradcode.runtime.records`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from gradcode._validation import check_choice, check_int, check_memory, check_real
from gradcode.codes.messages import set_decode_threads, warm_kernels
from gradcode.errors import StopTraining
from gradcode.runtime.base import Engine
from gradcode.runtime.config import ClusterConfig, FaultConfig, RunConfig, TrainSpec, given_configs
from gradcode.runtime.driver import RoundDriver, RoundTimeoutError, RunSetup, TrainingStopped
from gradcode.runtime.records import (
    CHECKPOINT,
    RUN_FILES,
    CheckpointError,
    RoundLog,
    RunDirInUseError,
    TrainResult,
    TrainState,
    atomic_write,
    check_checkpoint_config,
    json_safe,
    plain,
    read_checkpoint,
    save_checkpoint,
)
from gradcode.runtime.worker import ProblemSpec, limit_threads, master_threads

__all__ = ["ENGINES", "CheckpointError", "RoundTimeoutError", "RunDirInUseError", "TrainResult", "TrainingStopped",
           "build_scheme", "json_safe", "make_engine", "parse_failures", "prepare", "resume", "runs_home", "train"]


# ----------------------------------------------------------------------------------------- helpers

#: workers of a code or scheme given by name when ``workers`` is not given
DEFAULT_WORKERS = 4
#: rounds of a run whose RunConfig leaves them unset
DEFAULT_ROUNDS = 100


#: the engines :func:`make_engine` builds by name
ENGINES = ("ray", "inprocess")


def make_engine(engine=None, *, cluster: ClusterConfig | None = None, run_dir=None) -> Engine:
    """The engine a run uses: ``engine`` itself when it is an :class:`Engine`; ``"ray"`` (the
    default, also for None) a :class:`~gradcode.runtime.engine.RayEngine` built from ``cluster``
    (a :class:`~gradcode.runtime.config.ClusterConfig`: the Ray engine's settings) with Ray's
    temp dir under ``run_dir``; ``"inprocess"`` an
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


def parse_failures(specs: Iterable[str | tuple[int, int]], *, n: int, rounds: int) -> frozenset[tuple[int, int]]:
    """``["W@R", ...]`` (or ``(W, R)`` pairs): worker ``W``'s process exits during round ``R``."""
    out = set()
    for spec in specs:
        if isinstance(spec, str):
            try:
                w_s, r_s = spec.split("@")
                w, r = int(w_s), int(r_s)
            except ValueError:
                raise ValueError(f"fail must look like W@R (worker W dies in round R), got {spec!r}") from None
        else:
            w, r = spec
        w = check_int("fail worker", w, minimum=0, maximum=n - 1)
        r = check_int("fail round", r, minimum=0, maximum=max(rounds - 1, 0))
        out.add((w, r))
    return frozenset(out)


def build_scheme(code="crc", *, workers: int | None = None, stragglers: int = 0, seed: int = 0, scheme_params=None,
                 dim: int | None = None, verify: bool = False):
    """A scheme from a code name (``make_code(name, n=workers, s=stragglers, seed=seed, ...)``,
    passing ``s`` and ``seed`` only to codes that take them, by
    :func:`~gradcode.schemes.factory.resolve_scheme`: ``scheme_params`` may not set another ``n``,
    and their ``s`` and ``seed`` stand over the run's; ``workers=None``: the code's own ``n``,
    else :data:`DEFAULT_WORKERS`), a scheme family's name (``gc-dc``),
    a :class:`LinearCode` or a :class:`Scheme` (returned as is). ``dim``: the gradient dimension
    the static scheme decodes to (codes with ``chunks > 1`` zero-pad the last chunk). ``verify``:
    a code's rounds wait for two results more than decoding needs and decode with
    :meth:`LinearCode.decode_verified`, which names and leaves out a corrupted worker."""
    from gradcode.codes import LinearCode, make_code
    from gradcode.schemes import SCHEMES, StaticScheme, as_scheme
    from gradcode.schemes.factory import resolve_scheme

    if verify and (code in SCHEMES if isinstance(code, str) else not isinstance(code, LinearCode)):
        raise ValueError(f"verify applies to codes (run as static schemes), not to the scheme {code!r}")
    if not isinstance(code, str):
        if isinstance(code, LinearCode):
            return StaticScheme(_verifiable(code, verify), dim=dim, verify=verify)
        return as_scheme(code, dim=dim, what="code")  # a Scheme as is
    if workers is not None:
        workers = check_int("workers", workers, minimum=1)
    elif "n" not in (scheme_params or {}):  # neither the run nor the code says: the default
        workers = DEFAULT_WORKERS
    spec = resolve_scheme(code, scheme_params, n=workers, s=check_int("stragglers", stragglers, minimum=0), seed=seed,
                          agree=("n",))
    if spec.kind == "scheme":  # a scheme family (gc-dc, ...)
        return _labelled(spec.build(dim=dim), code)
    return _labelled(StaticScheme(_verifiable(make_code(code, **spec.params), verify), dim=dim, verify=verify), code)


def _verifiable(code, verify: bool):
    """``code``, refused for ``verify`` when it has no redundancy to check results against (no
    straggler tolerated, or an inexact estimate): verification would run unverified."""
    if verify and (code.tolerance == 0 or not code.exact):
        why = "it tolerates no straggler" if code.exact else "it only estimates the gradient"
        raise ValueError(f"verify needs spare results to check against, and {code!r} has none ({why});"
                         " use a code with s >= 1 (e.g. crc or frc with --stragglers 1 or more)")
    return code


def _labelled(scheme, name: str):
    """``scheme`` with ``label = name``: the records name a scheme built from a name by it."""
    scheme.label = name
    return scheme


def _default_steps(optimizer: str, params: dict, problem) -> dict:
    """Step sizes when none are given: ``lr = 1/L`` for GD and Nesterov (``L`` from
    ``problem.smoothness()``), and ``c1 / (t + c2)`` with ``c2 = 10``, ``c1 = 10 / L`` for SGD
    (first step ``1/L``, then decaying as Tandon's ignore-stragglers baseline)."""
    params = dict(params)
    L = problem.smoothness() if hasattr(problem, "smoothness") else None
    if L:
        if optimizer in ("gd", "nesterov"):
            params.setdefault("lr", 1.0 / L)
        elif optimizer == "sgd":
            params.setdefault("c2", 10.0)
            params.setdefault("c1", params["c2"] / L)
    return params


def _default_problem(dataset) -> str:
    return {"binary": "logistic", "regression": "linear", "multiclass": "softmax"}[dataset.task]


def _excess_over_fastest(draw):
    """The draw less, in each round, the smallest intercept and the smallest slope over workers:
    what the model adds beyond the fastest worker (see ``train``'s ``inject``). Straggler states
    and rates are kept (GC-DC's perfect state information reads them)."""
    from gradcode.stragglers.models import Draw

    return Draw(draw.intercept - draw.intercept.min(axis=1, keepdims=True),
                draw.slope - draw.slope.min(axis=1, keepdims=True), draw.straggling, draw.rates)


def _delay_model(spec: TrainSpec):
    """The delay model a run injects: ``spec.delay_model`` (an object, or a name built with
    ``spec.delay_params``), else Tandon's ``fixed`` model of ``stragglers`` workers ``delay``
    seconds late, else None (nothing injected)."""
    from gradcode.stragglers import make_delay_model

    delay_model, stragglers = spec.delay_model, spec.stragglers
    delay = check_real("delay", spec.delay, minimum=0.0)
    if delay_model is None:
        if delay > 0 and not stragglers:
            raise ValueError(f"delay={delay:g} delays stragglers={stragglers} random workers a round, i.e."
                             " none: give stragglers > 0 (--stragglers) or a delay model (--delay-model)")
        if stragglers and delay > 0:
            return make_delay_model("fixed", stragglers=stragglers, delay=delay, base=0.0)
        return None
    if delay > 0:
        raise ValueError(f"delay={delay:g} is the extra time of the default straggler model and is not used"
                         " with delay_model; give the model's own parameters (delay_params) instead")
    if isinstance(delay_model, str):
        return make_delay_model(delay_model, **(spec.delay_params or {}))
    if hasattr(delay_model, "sample"):
        return delay_model
    raise TypeError(f"delay_model must be a delay model or a registry name (with delay_params); got {delay_model!r}")


# ----------------------------------------------------------------------------------------- setup


def prepare(spec: TrainSpec, *, rounds: int, faults: FaultConfig | None = None) -> RunSetup:
    """Build what a run of ``rounds`` rounds of ``spec`` works with: the master's problem and the
    workers' problem spec, the scheme, one optimizer per model (``lr = 1/L`` by default), the
    injected delays (the simulator's convention: one draw for the run from
    ``default_rng(seed)``), the failures to inject (``faults.fail``, checked against the workers
    and rounds) and the JSON config record. Raises ``ValueError``/``TypeError`` for anything
    wrong, before any worker starts."""
    faults = faults or FaultConfig()
    rounds = check_int("rounds", rounds, minimum=1)
    pspec, master_problem, data_record = _problem(spec)
    code = spec.scheme
    scheme = build_scheme(code, workers=spec.workers, stragglers=spec.stragglers, seed=spec.seed,
                          scheme_params=spec.scheme_params, dim=int(master_problem.dim), verify=spec.verify)
    n = scheme.n
    if not isinstance(code, str) and spec.workers is not None and spec.workers != n:
        raise ValueError(f"workers={spec.workers} but the code {code!r} has n={n} workers: leave workers out (a code"
                         " object brings its own n) or build the code for that many")
    # each model's parameters, optimizer state and new parameters, before one optimizer is built
    check_memory(f"models={spec.models} (each {int(master_problem.dim)} parameters, their optimizer state and"
                 " update)", 3.0 * spec.models * int(master_problem.dim) * 8)
    optimizers, opt_names, opt_params = _optimizers(spec, master_problem)
    dmodel = _delay_model(spec)
    draw, comm = _injected(spec, dmodel, scheme.n, scheme.chunks, rounds)
    failures = parse_failures(faults.fail, n=n, rounds=rounds)
    config = {
        "scheme": _scheme_name(code), "scheme_params": plain(dict(spec.scheme_params or {})),
        "verify": bool(spec.verify), "workers": n, "stragglers": spec.stragglers, "delay": spec.delay,
        "delay_model": _delay_model_name(spec.delay_model, dmodel),
        "delay_params": plain(dict(spec.delay_params or {})), "inject": spec.inject, "close": spec.close,
        "waitout": spec.waitout, **data_record, "problem": getattr(pspec, "problem", None),
        "problem_params": dict(spec.problem_params or {}),
        "optimizer": spec.optimizer if isinstance(spec.optimizer, str) else opt_names,
        "optimizer_params": opt_params, "rounds": rounds, "models": spec.models, "seed": spec.seed,
        "fail": sorted(f"{w}@{r}" for w, r in failures), "dim": int(master_problem.dim),
        "n_train": int(master_problem.n_train),
    }
    return RunSetup(spec=spec, config=config, problem_spec=pspec, problem=master_problem, scheme=scheme,
                    optimizers=optimizers, opt_names=opt_names, draw=draw, comm=comm, failures=failures,
                    rounds=rounds)


#: the data set of a run whose spec names none (Tandon et al. Sec. 5's synthetic logistic data)
DEFAULT_DATA = "tandon-synthetic"


def _problem(spec: TrainSpec) -> tuple:
    """``(problem spec the workers build from, the master's problem, the config's data keys)`` of
    ``spec.data``: a problem spec (anything with ``build()``; the keys: ``data``, its record), a
    ``DataSpec``, a dataset name or a path to a data file
    (:func:`~gradcode.problems.files.data_source`; the keys: ``data``, ``data_params``,
    ``test_fraction``, as the spec's fields); None is :data:`DEFAULT_DATA`."""
    from gradcode.problems import DataSpec, make_dataset, make_problem
    from gradcode.problems.files import data_source

    data = DEFAULT_DATA if spec.data is None else spec.data
    if hasattr(data, "build") and not isinstance(data, (str, DataSpec)):
        master_problem, _ = data.build()
        return data, master_problem, {"data": data.to_dict() if hasattr(data, "to_dict") else repr(data)}
    if isinstance(data, str):
        name, params = data_source(data, spec.data_params)
        data = DataSpec(name, params, seed=spec.seed, test_fraction=spec.test_fraction)
    elif not isinstance(data, DataSpec):
        raise TypeError(f"data must be a dataset name, a data file, a DataSpec or a ProblemSpec, got"
                        f" {type(data).__name__}")
    dataset = make_dataset(data)
    pspec = ProblemSpec(data, spec.problem or _default_problem(dataset), dict(spec.problem_params or {}))
    record = data.to_dict()
    keys = {"data": record["dataset"], "data_params": record["params"], "test_fraction": record["test_fraction"]}
    return pspec, make_problem(pspec.problem, dataset, **pspec.params), keys


def _optimizers(spec: TrainSpec, problem) -> tuple[list, list[str], list[dict]]:
    """``(optimizers, their names, their resolved parameters)``, one per model: built from
    ``spec.optimizer``'s name with the default steps filled in (:func:`_default_steps`), or the
    optimizer objects given (which report their own ``hyperparameters`` when they have them)."""
    from gradcode.problems import make_optimizer

    models, given = spec.models, spec.optimizer_params
    if not isinstance(spec.optimizer, str):  # optimizer objects, one per model (gradcode.torch)
        optimizers = list(spec.optimizer)
        if len(optimizers) != models or not all(hasattr(o, "init") and hasattr(o, "step") for o in optimizers):
            raise ValueError(f"optimizer must be a name or {models} optimizer objects (init, step), one per model;"
                             f" got {spec.optimizer!r}")
        return optimizers, [repr(o) for o in optimizers], [plain(dict(getattr(o, "hyperparameters", {})))
                                                           for o in optimizers]
    if given is None or isinstance(given, Mapping):
        params = [dict(given or {})] * models
    else:
        params = [dict(p) for p in given]
        if len(params) != models:
            raise ValueError(f"optimizer_params lists {len(params)} dicts; give one per model ({models})")
    params = [_default_steps(spec.optimizer, p, problem) for p in params]
    names = [f"{spec.optimizer}(" + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v!r}"
                                              for k, v in p.items()) + ")" for p in params]
    return [make_optimizer(spec.optimizer, **p) for p in params], names, params


def _injected(spec: TrainSpec, dmodel, n: int, chunks: int, rounds: int):
    """``(draw, comm)``: the delays injected in a run of ``n`` workers (the simulator's convention:
    one draw of the delay model for the run from ``default_rng(seed)``; ``inject="excess"``: less
    the fastest worker's) and the modelled communication time of each message (``1/chunks`` of a
    gradient); ``(None, 0.0)`` without a model."""
    if dmodel is None:
        return None, 0.0
    draw = dmodel.draw(rounds, n, np.random.default_rng(spec.seed))
    if spec.inject == "excess":
        draw = _excess_over_fastest(draw)
    return draw, float(dmodel.message_time(1.0 / int(chunks)))


def injected_load_fit(spec: TrainSpec, n: int, rounds: int):
    """App. J's load slope fitted (Fig. 16: the workers' mean time against their load;
    :func:`~gradcode.stragglers.traces.fit_draw_slope`) on the delays a run of ``spec`` with ``n``
    workers injects, when they are the workers' whole time (``inject="full"``); None otherwise (no
    delay model, or ``"excess"``, which leaves out what every worker shares, the load's cost
    included)."""
    from gradcode.stragglers.traces import fit_draw_slope

    dmodel = _delay_model(spec)
    if dmodel is None or spec.inject != "full":
        return None
    draw, comm = _injected(spec, dmodel, n, 1, rounds)
    return fit_draw_slope(draw, comm=comm)


def _delay_model_name(given, dmodel) -> str | None:
    """How the config names the injected delay model: its registry name (its parameters are
    ``delay_params``), ``fixed`` for the default stragglers (``stragglers``, ``delay``), or a
    model object's repr."""
    if dmodel is None:
        return None
    if isinstance(given, str):
        return given
    return "fixed" if given is None else repr(dmodel)


def _scheme_name(code) -> str:
    """How the config names the code: its name, or an object's repr. An object without its own
    repr is named by its class (the default repr holds an address, which would make every
    resumption of it look like another configuration)."""
    if isinstance(code, str):
        return code
    if isinstance(getattr(code, "label", None), str):  # a scheme build_scheme made from a name
        return code.label
    return repr(code) if type(code).__repr__ is not object.__repr__ else type(code).__qualname__


def initial_state(setup: RunSetup, params: list | None = None) -> TrainState:
    """The state before round 0: each model's initial parameters (``params``, or from its own
    stream of ``SeedSequence(seed)``, so adding a model does not change the others')."""
    if params is None:
        streams = np.random.SeedSequence(setup.spec.seed).spawn(2)  # [unused, initial parameters]
        init_rngs = [np.random.default_rng(s) for s in streams[1].spawn(setup.models)]
        params = [setup.problem.init_params(r) for r in init_rngs]
    elif len(params) != setup.models:
        raise ValueError(f"initial_params lists {len(params)} vectors; give one per model ({setup.models})")
    return TrainState.fresh(list(params), setup.optimizers, rounds=setup.rounds, n=setup.n)


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
    (:func:`~gradcode.runtime.master.make_engine`). ``callback(record)`` is called after every
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


def open_session(spec: TrainSpec, *, cluster: ClusterConfig, faults: FaultConfig, run: RunConfig,
                 engine: Engine | str | None = None, checkpoint: dict | None = None,
                 initial_params: list | None = None) -> RunSession:
    """The :class:`RunSession` of a run, not yet entered: the run prepared, its folder opened
    (:func:`_open_run_dir`) and its state made (fresh or from the checkpoint: :func:`_start_state`)."""
    _check_engine(engine, cluster)  # a bad engine is refused before the run dir holds anything
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
    state, inflight = _restore(saved, setup, run)
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
        """Run and record the next round (:meth:`RoundDriver.step`); returns its record."""
        if self.state.next_round >= self.run.rounds:
            raise TrainingStopped(f"the run has done its {self.run.rounds} rounds (RunConfig.rounds)")
        return self.driver.step(self.run, log=self.log, checkpoint=self.save, callback=callback)

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


def _restore(saved: dict, setup: RunSetup, run: RunConfig) -> tuple[TrainState, dict]:
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
    _check_restored(state, saved["scheme"], setup)
    setup.scheme = saved["scheme"]
    if run.rounds < state.next_round:
        raise ValueError(f"resume: the checkpoint has {state.next_round} rounds done; rounds must be at least"
                         f" that, got {run.rounds}")
    state.grow(run.rounds)
    return state, saved["inflight"]


def _check_restored(state: TrainState, scheme, setup: RunSetup) -> None:
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
            return f"the scheme's {name} is {getattr(restored, name, None)!r}, the configuration's {getattr(fresh, name)!r}"
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
