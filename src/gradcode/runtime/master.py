"""Entry points of real training: :func:`train` and :func:`resume`.

They turn a :class:`~gradcode.runtime.config.TrainSpec` (or ``train()``'s keywords, which build
one) into a :class:`~gradcode.runtime.driver.RunSetup` (:func:`prepare`: data, problem, scheme,
optimizers, injected delays and failures, the JSON config record), set up the run dir (refusing
one that holds a run unless resumed or overwritten), start the engine's workers and hand the rounds
to a :class:`~gradcode.runtime.driver.RoundDriver`, whose module docstring states the rules a run
follows. Whatever happens, the completed rounds are saved under the run dir
(:mod:`gradcode.runtime.records`).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from gradcode._validation import check_int, check_real
from gradcode.runtime.base import Engine
from gradcode.runtime.config import ClusterConfig, FaultConfig, RunConfig, TrainSpec, field_names
from gradcode.runtime.driver import RoundDriver, RoundTimeoutError, RunSetup
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
from gradcode.runtime.worker import ProblemSpec

__all__ = ["CheckpointError", "RoundTimeoutError", "RunDirInUseError", "TrainResult", "build_scheme", "json_safe",
           "parse_failures", "prepare", "resume", "train"]


# ----------------------------------------------------------------------------------------- helpers

#: workers of a code or scheme given by name when ``workers`` is not given
DEFAULT_WORKERS = 4


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


def build_scheme(code="crc", *, workers: int | None = None, stragglers: int = 0, seed: int = 0, code_params=None,
                 dim: int | None = None, verify: bool = False):
    """A scheme from a code name (``make_code(name, n=workers, s=stragglers, seed=seed, ...)``,
    passing ``s`` and ``seed`` only to codes that take them, by
    :func:`~gradcode.schemes.factory.resolve_scheme`: ``code_params`` may not set another ``n``,
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
    elif "n" not in (code_params or {}):  # neither the run nor the code says: the default
        workers = DEFAULT_WORKERS
    spec = resolve_scheme(code, code_params, n=workers, s=check_int("stragglers", stragglers, minimum=0), seed=seed,
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


def _delay_model(delay_model, stragglers, delay):
    from gradcode.stragglers import make_delay_model

    delay = check_real("delay", delay, minimum=0.0)
    if delay_model is None:
        if delay > 0 and not stragglers:
            raise ValueError(f"delay={delay:g} delays stragglers={stragglers} random workers a round, i.e."
                             " none: give stragglers > 0 (--stragglers) or a delay model (--delay-model)")
        if stragglers and delay > 0:
            return make_delay_model("fixed", stragglers=stragglers, delay=delay, base=0.0)
        return None
    if delay > 0:
        raise ValueError(f"delay={delay:g} is the extra time of the default straggler model and is not used"
                         " with delay_model; give the model's own parameters (--delay-param) instead")
    if isinstance(delay_model, str):
        return make_delay_model(delay_model)
    if isinstance(delay_model, tuple) and len(delay_model) == 2 and isinstance(delay_model[0], str):
        return make_delay_model(delay_model[0], **dict(delay_model[1]))
    if hasattr(delay_model, "sample"):
        return delay_model
    raise TypeError(f"delay_model must be a delay model, a name or (name, params); got {delay_model!r}")


# ----------------------------------------------------------------------------------------- setup


def prepare(spec: TrainSpec, *, rounds: int, faults: FaultConfig | None = None) -> RunSetup:
    """Build what a run of ``rounds`` rounds of ``spec`` works with: the master's problem and the
    workers' problem spec, the scheme, one optimizer per model (``lr = 1/L`` by default), the
    injected delays (the simulator's convention: one draw for the run from
    ``default_rng(seed)``), the failures to inject (``faults.fail``, checked against the workers
    and rounds) and the JSON config record. Raises ``ValueError``/``TypeError`` for anything
    wrong, before any worker starts."""
    from gradcode.problems import DataSpec, make_dataset, make_optimizer, make_problem

    faults = faults or FaultConfig()
    rounds = check_int("rounds", rounds, minimum=1)
    seed, models, data = spec.seed, spec.models, spec.data

    # ---- data and problem
    if hasattr(data, "build") and not isinstance(data, (str, DataSpec)):
        pspec = data  # a ProblemSpec, or any picklable object whose build() -> (problem, dataset)
        master_problem, _ = pspec.build()
        data_record = pspec.to_dict() if hasattr(pspec, "to_dict") else repr(pspec)
    else:
        if isinstance(data, str):
            dspec = DataSpec(data, dict(spec.data_params or {}), seed=seed, test_fraction=spec.test_fraction)
        elif isinstance(data, DataSpec):
            dspec = data
        else:
            raise TypeError(
                f"data must be a dataset name, a DataSpec or a ProblemSpec, got {type(data).__name__}"
            )
        dataset = make_dataset(dspec)
        problem = spec.problem or _default_problem(dataset)
        pspec = ProblemSpec(dspec, problem, dict(spec.problem_params or {}))
        master_problem = make_problem(problem, dataset, **pspec.params)
        data_record = dspec.to_dict()

    code = spec.code
    scheme = build_scheme(code, workers=spec.workers,
                          stragglers=spec.stragglers, seed=seed, code_params=spec.code_params,
                          dim=int(master_problem.dim), verify=spec.verify)
    n = scheme.n
    if not isinstance(code, str) and spec.workers is not None and spec.workers != n:
        raise ValueError(f"workers={spec.workers} but the code {code!r} has n={n} workers: leave workers out (a code"
                         " object brings its own n) or build the code for that many")

    # ---- optimizers
    optimizer_params = spec.optimizer_params
    if not isinstance(spec.optimizer, str):  # optimizer objects, one per model (gradcode.torch)
        optimizers = list(spec.optimizer)
        if len(optimizers) != models or not all(hasattr(o, "init") and hasattr(o, "step") for o in optimizers):
            raise ValueError(f"optimizer must be a name or {models} optimizer objects (init, step), one per model;"
                             f" got {spec.optimizer!r}")
        opt_params, opt_names = [{} for _ in optimizers], [repr(o) for o in optimizers]
    elif optimizer_params is None or isinstance(optimizer_params, Mapping):
        opt_params = [dict(optimizer_params or {})] * models
    else:
        opt_params = [dict(p) for p in optimizer_params]
        if len(opt_params) != models:
            raise ValueError(f"optimizer_params lists {len(opt_params)} dicts; give one per model ({models})")
    if isinstance(spec.optimizer, str):
        opt_params = [_default_steps(spec.optimizer, p, master_problem) for p in opt_params]
        optimizers = [make_optimizer(spec.optimizer, **p) for p in opt_params]
        opt_names = [f"{spec.optimizer}(" + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v!r}"
                                                      for k, v in p.items()) + ")" for p in opt_params]

    # ---- stragglers and failures
    dmodel = _delay_model(spec.delay_model, spec.stragglers, spec.delay)
    if dmodel is None:
        draw, comm = None, 0.0
    else:  # the simulator's convention: one draw for the run from default_rng(seed)
        draw = dmodel.draw(rounds, n, np.random.default_rng(seed))
        if spec.inject == "excess":
            draw = _excess_over_fastest(draw)
        comm = float(dmodel.message_time(1.0 / int(scheme.chunks)))
    failures_planned = parse_failures(faults.fail, n=n, rounds=rounds)

    config = {
        "code": _scheme_name(code),
        "scheme": repr(scheme),
        "code_params": plain(dict(spec.code_params or {})),
        "verify": bool(spec.verify),
        "workers": n,
        "stragglers": spec.stragglers,
        "delay": spec.delay,
        "delay_model": repr(dmodel) if dmodel is not None else None,
        "inject": spec.inject,
        "close": spec.close,
        "waitout": spec.waitout,
        "data": data_record,
        "problem": getattr(pspec, "problem", None),
        "problem_params": dict(spec.problem_params or {}),
        "optimizer": spec.optimizer if isinstance(spec.optimizer, str) else opt_names,
        "optimizer_params": opt_params,
        "rounds": rounds,
        "models": models,
        "seed": seed,
        "fail": sorted(f"{w}@{r}" for w, r in failures_planned),
        "dim": int(master_problem.dim),
        "n_train": int(master_problem.n_train),
    }
    return RunSetup(spec=spec, config=config, problem_spec=pspec, problem=master_problem, scheme=scheme,
                    optimizers=optimizers, opt_names=opt_names, draw=draw, comm=comm, failures=failures_planned,
                    rounds=rounds)


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

#: train()'s keywords that each config object replaces
_GROUPS = (
    ("spec", TrainSpec, field_names(TrainSpec)),
    ("cluster", ClusterConfig, ("address", "num_cpus", "start_timeout")),
    ("faults", FaultConfig, field_names(FaultConfig)),
    ("run", RunConfig, field_names(RunConfig)),
)


def train(
    code="crc",
    *,
    workers: int | None = None,
    stragglers: int = 0,
    delay: float = 0.0,
    delay_model=None,
    code_params: Mapping | None = None,
    data="tandon-synthetic",
    data_params: Mapping | None = None,
    test_fraction: float = 0.2,
    problem: str | None = None,
    problem_params: Mapping | None = None,
    optimizer: str = "gd",
    optimizer_params=None,
    rounds: int = 100,
    models: int = 1,
    seed: int = 0,
    fail: Iterable = (),
    checkpoint_every: int = 0,
    resume: bool = False,
    run_dir: str | os.PathLike | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
    round_timeout: float = 120.0,
    max_restarts: int = -1,
    start_timeout: float = 120.0,
    eval_every: int = 1,
    callback: Callable[[dict], None] | None = None,
    verify: bool = False,
    overwrite: bool = False,
    inject: str = "excess",
    close: str | float = "decodable",
    waitout: str = "decodable",
    cluster: ClusterConfig | None = None,
    faults: FaultConfig | None = None,
    run: RunConfig | None = None,
    engine: Engine | None = None,
) -> TrainResult:
    """Train ``models`` models with gradient coding on Ray workers (rules:
    :mod:`gradcode.runtime.driver`).

    Either the keywords below, or the config objects: ``train(TrainSpec(...), cluster=
    ClusterConfig(...), faults=FaultConfig(...), run=RunConfig(...))`` (each object replaces its
    keywords, which must then be left at their defaults; a missing object is built from them).
    ``engine``: an :class:`~gradcode.runtime.base.Engine` to run the workers on (default: a
    :class:`~gradcode.runtime.engine.RayEngine` for ``cluster``), e.g.
    :class:`~gradcode.runtime.inprocess.InProcessEngine` to run without Ray.

    ``code``: a code name (built with ``n=workers``, ``s=stragglers`` and ``seed`` where the code
    takes them, plus ``code_params``), a :class:`~gradcode.LinearCode` or any
    :class:`~gradcode.schemes.Scheme`. ``stragglers``/``delay``: ``stragglers`` random workers per
    round sleep ``delay`` extra seconds (Tandon Sec. 5; the ``fixed`` model with ``base=0``), unless
    ``delay_model`` (a delay model, or ``(name, params)``) is given; also the tolerance ``s`` of codes
    that take one. ``data``: a dataset name or a :class:`~gradcode.problems.DataSpec`; ``problem``
    defaults to ``logistic``/``linear``/``softmax`` by the data's task. ``data`` may also be a
    :class:`~gradcode.runtime.ProblemSpec` or any picklable object whose ``build()`` returns
    ``(problem, dataset)``: workers and master call it to get the same problem. ``optimizer_params`` may be a
    list of ``models`` dicts (one per model: e.g. a learning-rate sweep); without a step size GD and
    Nesterov take ``1/L`` from ``problem.smoothness()``. ``fail``: ``"W@R"``
    strings: worker ``W``'s process exits in round ``R``. ``run_dir``: where records, checkpoints
    and Ray's temp dir go (default ``./gradcode-runs/<code>-<time>``). ``address``: join an existing
    Ray cluster (default: the current Ray session, or an embedded local one with ``num_cpus``).
    ``start_timeout``: seconds the cluster at ``address`` may take to answer and the workers to
    start (build their data) before the run stops with a :class:`~gradcode.errors.GradcodeError`. ``eval_every``: held-out metrics every
    ``K`` rounds and after the last one (0: after the last only), for problems that have
    ``metrics(params)``. ``verify``: each round waits for two results more than decoding needs
    and checks them against each other (:meth:`LinearCode.decode_verified`): a worker whose
    finite result is wrong is named, left out of the round and recorded as a fault; a round
    whose results disagree with no culprit located waits for more (``2e`` spare results locate
    ``e`` wrong workers, :mod:`gradcode.codes.verify`), and stops when every result is in. Its
    cost: a verified round lasts until ``need + 2`` results are in, i.e. with ``s`` stragglers
    tolerated it waits for all but ``s - 2`` workers instead of all but ``s``. ``callback(record)`` is called after every round with a dict (round, time, loss, ...); an
    exception it raises stops the run (a checkpoint taken before survives for ``resume``).

    ``inject``: what a worker sleeps on top of its real computation, from the delay model's draw
    (``time = intercept + slope * load``). ``"excess"`` (default): only what the model adds beyond
    the fastest worker of the round (``intercept`` and ``slope`` less their minimum over workers),
    since the real computation already takes the fastest worker's time: a model with no
    stragglers (``bernoulli`` with ``p=0``) injects nothing, Tandon's ``fixed`` model exactly its
    delays, a shifted exponential its spread. ``"full"``: the model's whole time (workers whose
    real computation is negligible next to the modelled one).

    ``close``: when a round ends. ``"decodable"`` (default): as soon as the due jobs decode.
    A number ``mu >= 0``: SGC's mu-rule (Section 2, as :func:`gradcode.simulate` runs it): with
    ``kappa`` the time the first worker delivers its whole task result, the round waits until
    ``(1 + mu) kappa`` (or until every worker is in or has failed, if sooner), so that workers
    within ``mu`` of the fastest are not stragglers; a round that cannot decode then waits it out
    (``waitout``: ``"decodable"``, until it decodes; ``"all"``, the paper's, for every worker
    that has not failed), and ``TrainResult.waitouts`` marks it. ``round_timeout`` caps these
    waits: a round that decodes when it comes closes then.

    A ``run_dir`` that already holds a run (a checkpoint, a result or round records) is refused
    unless ``resume`` (continue it; ``rounds`` may exceed the checkpoint's to extend a finished
    run, the added rounds taking their injected delays from the draw of the longer run) or
    ``overwrite`` (replace it: the old checkpoint and records are removed first).

    An exception that stops a started run (:class:`RoundTimeoutError`, a diverging step, a worker
    that raises, an unreachable cluster, the callback's, ``KeyboardInterrupt``) is raised after the
    completed rounds are saved under ``run_dir`` with the error; it carries them as ``exc.result``.
    A damaged checkpoint raises :class:`CheckpointError`. :func:`resume` continues a run from its
    folder alone.
    """
    values = dict(locals())
    spec = code if isinstance(code, TrainSpec) else None
    if spec is not None:
        values["code"] = _DEFAULTS["code"]
    objs = {"spec": spec, "cluster": cluster, "faults": faults, "run": run}
    for name, cls, keys in _GROUPS:
        if objs[name] is None:
            objs[name] = cls(**{k: values[k] for k in keys})
        else:
            if not isinstance(objs[name], cls):
                raise TypeError(f"{name} must be a {cls.__name__}, got {type(objs[name]).__name__}")
            both = [k for k in keys if not _is_default(values[k], _DEFAULTS[k])]
            if both:
                raise TypeError(f"give {', '.join(both)} either in the {cls.__name__} or as keywords, not both")
    return run_training(objs["spec"], cluster=objs["cluster"], faults=objs["faults"], run=objs["run"],
                        engine=engine, callback=callback)


_DEFAULTS = {name: p.default for name, p in inspect.signature(train).parameters.items()}


def _is_default(value, default) -> bool:
    if value is default:
        return True
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:  # arrays and other values without a truth value
        return False


def resume(
    run_dir: str | os.PathLike,
    *,
    rounds: int | None = None,
    cluster: ClusterConfig | None = None,
    faults: FaultConfig | None = None,
    engine: Engine | None = None,
    callback: Callable[[dict], None] | None = None,
) -> TrainResult:
    """Continue the run in ``run_dir`` from its checkpoint, with the spec, run config and faults it
    was started with (kept in the checkpoint). ``rounds``: the run's total rounds (default: as
    started; more extends a finished run). ``cluster``: where to run now (default: the current Ray
    session or an embedded local cluster). ``faults``: another round timeout or restart limit
    (without ``fail`` it keeps the run's planned failures; with one, it must be the run's). Same
    result as ``train(..., resume=True)`` with the original arguments; a checkpoint written by a
    version without this entry point is refused with that advice."""
    path = Path(run_dir) / CHECKPOINT
    saved = read_checkpoint(path)
    spec, run = saved.get("spec"), saved.get("run")
    if not isinstance(spec, TrainSpec) or not isinstance(run, RunConfig):
        raise CheckpointError(
            f"resume: {path} does not hold the run's spec (its spec held objects a checkpoint cannot hold:"
            " a function, a class from outside gradcode, in-memory data); continue it with train(...,"
            " resume=True) and the arguments it was started with"
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
    engine: Engine | None = None,
    callback: Callable[[dict], None] | None = None,
    checkpoint: dict | None = None,
    initial_params: list | None = None,
) -> TrainResult:
    """What :func:`train` and :func:`resume` do once the config objects are built: prepare the
    run, set up its folder and state (fresh or from the checkpoint), start the workers, drive the
    rounds, save the records. ``checkpoint``: the checkpoint document already read (resume);
    ``initial_params``: each model's parameters before round 0 (default: the problem's
    ``init_params``; :func:`gradcode.torch.fit` gives the user's modules' own weights)."""
    setup = prepare(spec, rounds=run.rounds, faults=faults)
    config = setup.config
    worker_specs = setup.worker_specs()  # data too small for the partitions is refused before the run starts
    run_dir = _open_run_dir(run, config, setup.n)
    ckpt_path = run_dir / CHECKPOINT
    extra = _checkpoint_extra(spec, run, faults, setup.scheme) if run.checkpoint_every else None
    if run.resume:
        saved = checkpoint if checkpoint is not None else read_checkpoint(ckpt_path)
        state, inflight = _restore(saved, setup, run)
        resumed_from = state.next_round
    else:
        state, inflight, resumed_from = initial_state(setup, initial_params), None, None
    atomic_write(run_dir / "config.json", json.dumps(config, indent=1, default=str).encode())

    # ---- engine, workers and rounds
    log = RoundLog(run_dir / "rounds.jsonl", keep_before=state.next_round if run.resume else 0)
    driver = None
    try:
        if engine is None:
            from gradcode.runtime.engine import RayEngine

            engine = RayEngine(address=cluster.address, num_cpus=cluster.num_cpus, run_dir=run_dir,
                               worker_cpus=cluster.worker_cpus, start_timeout=cluster.start_timeout)
        engine.spawn(worker_specs, max_restarts=faults.max_restarts, start_timeout=cluster.start_timeout)
        driver = RoundDriver(setup, engine, state, faults=faults)
        if inflight is not None:
            driver.restore(inflight)

        def save():
            save_checkpoint(ckpt_path, config, state, setup.scheme, driver.inflight(), extra=extra)

        driver.run(run, log=log, checkpoint=save, callback=callback)
    except BaseException as exc:
        # keep what the run did: the completed rounds, every fault, and why it stopped
        if driver is not None:
            driver.stopped()
        partial = state.result(config, run_dir, resumed_from, error=exc)
        try:
            partial.save(run_dir)
        except OSError:  # a full disk must not hide the error that stopped the run
            pass
        log.close()
        if isinstance(exc, (Exception, KeyboardInterrupt)):
            exc.result = partial  # for callers (the CLI prints it with --json, also after SIGINT)
        raise
    finally:
        if engine is not None:
            engine.shutdown()
    log.close()
    result = state.result(config, run_dir, resumed_from)
    result.save(run_dir)
    return result


def _open_run_dir(run: RunConfig, config: dict, n: int) -> Path:
    """The run's folder, made if missing (default ``./gradcode-runs/<code>-n<n>-<time>``). One that
    holds a run is refused unless ``run.resume`` (continue it) or ``run.overwrite`` (its run files
    are removed first)."""
    run_dir = Path(run.run_dir) if run.run_dir is not None else Path("gradcode-runs") / (
        f"{config['code']}-n{n}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"
    )
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
    # checkpoints written before the closing rule was configurable closed when decodable
    saved["config"] = {"close": "decodable", "waitout": "decodable", **saved["config"]}
    # a code built from its name is fully described by the config (name, code_params, workers,
    # stragglers, seed) and its repr; a code or scheme object's repr may hold an address
    ignore = ("rounds",) if isinstance(setup.spec.code, str) else ("rounds", "scheme")
    check_checkpoint_config(saved, setup.config, ignore=ignore)
    state = TrainState.from_dict(saved["state"])
    setup.scheme = saved["scheme"]
    if run.rounds < state.next_round:
        raise ValueError(f"resume: the checkpoint has {state.next_round} rounds done; rounds must be at least"
                         f" that, got {run.rounds}")
    state.grow(run.rounds)
    return state, saved["inflight"]


def _resume_record(spec: TrainSpec, run: RunConfig, faults: FaultConfig) -> dict:
    """What a checkpoint keeps for :func:`resume`: the spec, run config and faults, when a
    checkpoint can hold them (a spec holding a function or a foreign object is still
    checkpointed, for ``train(..., resume=True)``; :func:`resume` then says it cannot)."""
    from gradcode.runtime.safe_state import UnsafeStateError, encode

    if not getattr(spec.data, "checkpoint_record", True):  # e.g. a torch run: no copy of its data set
        return {}
    record = {"spec": spec, "run": replace(run, resume=False, overwrite=False), "faults": faults}
    try:
        encode(record, [])
    except UnsafeStateError:
        return {}
    return record
