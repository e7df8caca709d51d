"""What a run is made of, built from its :class:`~gradcode.runtime.config.TrainSpec`: the data,
problem, scheme (:func:`build_scheme`), optimizers, injected delays and failures and the JSON
config record (:func:`prepare` -> :class:`~gradcode.runtime.driver.RunSetup`), and its state
before round 0 (:func:`initial_state`). Nothing here starts a worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from gradcode._validation import check_int, check_memory, check_real
from gradcode.runtime.config import FaultConfig, TrainSpec
from gradcode.runtime.driver import RunSetup
from gradcode.runtime.records import TrainState, plain
from gradcode.runtime.worker import ProblemSpec

__all__ = ["DEFAULT_DATA", "DEFAULT_ROUNDS", "DEFAULT_WORKERS", "OPEN_ROUNDS", "build_scheme", "grow_setup",
           "initial_state", "injected_load_fit", "parse_failures", "prepare"]


# ----------------------------------------------------------------------------------------- helpers

#: workers of a code or scheme given by name when ``workers`` is not given
DEFAULT_WORKERS = 4
#: rounds of a run whose RunConfig leaves them unset
DEFAULT_ROUNDS = 100
#: rounds an open-ended run (``rounds=None``: as many as its loop makes) first holds tables and
#: injected delays for; each time the loop passes them they double (:func:`grow_setup`)
OPEN_ROUNDS = 64


def parse_failures(specs: Iterable[str | tuple[int, int]], *, n: int,
                   rounds: int | None) -> frozenset[tuple[int, int]]:
    """``["W@R", ...]`` (or ``(W, R)`` pairs): worker ``W``'s process exits during round ``R``
    (below ``rounds``; any round of an open-ended run, ``rounds=None``)."""
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
        r = check_int("fail round", r, minimum=0, maximum=None if rounds is None else max(rounds - 1, 0))
        out.add((w, r))
    return frozenset(out)


def build_scheme(code="crc", *, workers: int | None = None, stragglers: int = 0, tolerance: int | None = None,
                 seed: int = 0, scheme_params=None, dim: int | None = None, verify: bool = False):
    """A scheme from a code name (``make_code(name, n=workers, s=tolerance, seed=seed, ...)``,
    passing ``s`` and ``seed`` only to codes that take them, by
    :func:`~gradcode.schemes.factory.resolve_scheme`: ``scheme_params`` may not set another ``n``,
    nor another ``s`` than a ``tolerance`` given; without ``tolerance`` the code's ``s`` defaults to
    ``stragglers``, the run's slowed workers, and a ``scheme_params`` ``s`` stands over it; their
    ``seed`` stands over the run's; ``workers=None``: the code's own ``n``,
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
    if tolerance is None:
        s, agree = check_int("stragglers", stragglers, minimum=0), ("n",)
    else:
        s, agree = check_int("tolerance", tolerance, minimum=0), ("n", "s")
    spec = resolve_scheme(code, scheme_params, n=workers, s=s, seed=seed, agree=agree)
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


def prepare(spec: TrainSpec, *, rounds: int | None, faults: FaultConfig | None = None) -> RunSetup:
    """Build what a run of ``rounds`` rounds of ``spec`` works with: the master's problem and the
    workers' problem spec, the scheme, one optimizer per model (``lr = 1/L`` by default), the
    injected delays (the simulator's convention: one draw for the run from
    ``default_rng(seed)``), the failures to inject (``faults.fail``, checked against the workers
    and rounds) and the JSON config record. Raises ``ValueError``/``TypeError`` for anything
    wrong, before any worker starts.

    ``rounds=None``: an open-ended run, as many rounds as its loop makes
    (:class:`gradcode.torch.Workers`): its tables and delays hold :data:`OPEN_ROUNDS` rounds and
    grow as the loop goes on (:func:`grow_setup`); its config records ``"rounds": null``. Only a
    scheme that plans no job ahead can run so (static codes, ``ignore``, GC-DC: each round's job
    finishes in that round); SR-SGC and M-SGC, whose jobs span rounds, are refused."""
    faults = faults or FaultConfig()
    open_ended = rounds is None
    rounds = OPEN_ROUNDS if open_ended else check_int("rounds", rounds, minimum=1)
    pspec, master_problem, data_record = _problem(spec)
    code = spec.scheme
    scheme = build_scheme(code, workers=spec.workers, stragglers=spec.stragglers, tolerance=spec.tolerance,
                          seed=spec.seed, scheme_params=spec.scheme_params, dim=int(master_problem.dim),
                          verify=spec.verify)
    n = scheme.n
    if open_ended and scheme.delay > 0:
        raise ValueError(f"{_scheme_name(code)} plans its jobs ahead (a job spans up to {scheme.delay + 1} rounds),"
                         " so a run of it needs its length: give RunConfig(rounds=...)")
    if not isinstance(code, str) and spec.workers is not None and spec.workers != n:
        raise ValueError(f"workers={spec.workers} but the code {code!r} has n={n} workers: leave workers out (a code"
                         " object brings its own n) or build the code for that many")
    own_s = getattr(getattr(scheme, "static_code", None), "params", {}).get("s")
    if not isinstance(code, str) and spec.tolerance is not None and own_s is not None and own_s != spec.tolerance:
        raise ValueError(f"tolerance={spec.tolerance} but the code {code!r} has s={own_s}: leave tolerance out (a code"
                         " object brings its own s) or build the code for that many")
    # each model's parameters, optimizer state and new parameters, before one optimizer is built
    check_memory(f"models={spec.models} (each {int(master_problem.dim)} parameters, their optimizer state and"
                 " update)", 3.0 * spec.models * int(master_problem.dim) * 8)
    optimizers, opt_names, opt_params = _optimizers(spec, master_problem)
    dmodel = _delay_model(spec)
    draw, comm = _injected(spec, dmodel, scheme.n, scheme.chunks, rounds)
    failures = parse_failures(faults.fail, n=n, rounds=None if open_ended else rounds)
    config = {
        "scheme": _scheme_name(code), "scheme_params": plain(dict(spec.scheme_params or {})),
        "verify": bool(spec.verify), "workers": n, "stragglers": spec.stragglers, "tolerance": spec.tolerance,
        "delay": spec.delay,
        "delay_model": _delay_model_name(spec.delay_model, dmodel),
        "delay_params": plain(dict(spec.delay_params or {})), "inject": spec.inject, "close": spec.close,
        "waitout": spec.waitout, **data_record, "problem": getattr(pspec, "problem", None),
        "problem_params": dict(spec.problem_params or {}),
        "optimizer": spec.optimizer if isinstance(spec.optimizer, str) else opt_names,
        "optimizer_params": opt_params, "rounds": None if open_ended else rounds, "models": spec.models,
        "seed": spec.seed,
        "fail": sorted(f"{w}@{r}" for w, r in failures), "dim": int(master_problem.dim),
        "n_train": int(master_problem.n_train),
    }
    return RunSetup(spec=spec, config=config, problem_spec=pspec, problem=master_problem, scheme=scheme,
                    optimizers=optimizers, opt_names=opt_names, draw=draw, comm=comm, failures=failures,
                    rounds=rounds, open_ended=open_ended)


def grow_setup(setup: RunSetup, rounds: int) -> None:
    """Let an open-ended run's setup hold ``rounds`` rounds: the injected delays of the rounds past
    ``setup.rounds`` are those rows of the delay model's draw for ``rounds`` rounds from
    ``default_rng(seed)`` (the rounds already run keep theirs)."""
    old = setup.rounds
    if rounds <= old:
        return
    if setup.draw is not None:
        from gradcode.stragglers.models import Draw

        new, _ = _injected(setup.spec, _delay_model(setup.spec), setup.n, setup.scheme.chunks, rounds)
        d = setup.draw
        setup.draw = Draw(*(None if a is None else np.concatenate([a, b[old:]])
                            for a, b in ((d.intercept, new.intercept), (d.slope, new.slope),
                                         (d.straggling, new.straggling), (d.rates, new.rates))))
    setup.rounds = rounds


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
