""":func:`fit`: train a user's own PyTorch model with gradient coding, on Ray or in process.

Every round the master asks for one job per model: a batch of ``batch_size`` samples split into
the code's ``k`` partitions (AGC Sec. VII's set-up: partition ``j`` of the data set contributes
``b_j = batch_size * size_j`` samples), each worker holding partition ``j`` computes on the same
samples (:meth:`~gradcode.torch.problem.TorchSpec.batch_rows`), sends coded float32 (or 16-bit)
messages, and the master decodes the batch's exact summed gradient in float64 from whichever
workers suffice, then steps a ``torch.optim`` optimizer with the mean. The rounds are driven by the
same :class:`~gradcode.runtime.driver.RoundDriver` and scheme objects as every gradcode run, so
stragglers, deaths, the mu-rule, non-finite workers and every scheme (static codes, multi-message
codes, GC-DC, SR-SGC and M-SGC with ``models=M``) work unchanged. See
:mod:`gradcode.torch.problem` for the vector that travels, reductions and BatchNorm.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import sys
import sysconfig
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from gradcode._validation import check_choice, check_int
from gradcode.errors import GradcodeError, UserCodeError
from gradcode.runtime.progress import RoundBar, show_progress
from gradcode.schemes.switch import ProbeThenSwitch, SlopeSource, set_decode_rtol
from gradcode.torch.data import from_path
from gradcode.torch.config import TorchConfig, batch_size_given
from gradcode.torch.loading import optimizer_class, scheduler_factory
from gradcode.torch.problem import (
    ModelLayout,
    TorchOptimizer,
    TorchSpec,
    as_samples,
    check_device,
    copy_factory,
    fetch,
    length,
    model_device,
    read_source,
    seeded_factory,
)

__all__ = ["FitResult", "TorchConfig", "fit"]


@dataclass
class FitResult:
    """What :func:`fit` returns. ``model``: the trained module (the user's class, weights and
    buffers loaded; ``models`` all of them with ``models=M``); ``history``: one dict per round
    (``round``, ``time``: the round's duration in seconds, ``elapsed``, ``loss``: the mean batch
    loss of the job the round finished, ``batch_size``: the samples that loss and the step's
    gradient average over, ``TorchConfig.batch_size`` as split over the code's partitions
    (:attr:`~gradcode.torch.problem.TorchSpec.samples_per_job`), ``stragglers``, and ``metrics`` on
    evaluation rounds; a
    resumed run's history holds every round, those before the resume rebuilt from its checkpoint);
    ``result``: the runtime's :class:`~gradcode.runtime.TrainResult` (arrivals, faults, records
    under ``run_dir``); ``spec``: the run's :class:`~gradcode.torch.problem.TorchSpec` (which
    samples each job's partitions used: ``spec.batch_indices(job, j)``)."""

    model: nn.Module
    models: list
    history: list = field(default_factory=list)
    result: Any = None
    run_dir: str | None = None
    spec: Any = None
    #: with ``scheme="auto"``: what the probe measured, the candidates' predicted totals, the choice
    auto: dict | None = None

    @property
    def losses(self) -> list[float]:
        return [h["loss"] for h in self.history]

    @property
    def clock(self) -> dict | None:
        """What timed the run (``result.clock``, ``result.json``'s ``clock``): the wall clock on
        Ray; in process the virtual clock's compute, with its calibration (``clock["calibration"]``:
        per-sample seconds, repeats, timer) when it was calibrated at start.
        :func:`gradcode.runtime.describe_clock` says it in one line."""
        return None if self.result is None else self.result.clock


def fit(
    model,
    data,
    spec=None,
    *,
    torch_config: TorchConfig | None = None,
    run=None,
    faults=None,
    cluster=None,
    engine: str = "ray",
    callback: Callable[[dict], None] | None = None,
) -> FitResult:
    """Train ``model`` on ``data`` with gradient coding::

        fit(net, (X, y), TrainSpec("crc", workers=6, stragglers=2, delay=0.2),
            torch_config=TorchConfig(optimizer="adam", optimizer_params={"lr": 1e-3}, batch_size=128),
            run=RunConfig(rounds=200, eval_every=20))

    ``model``: an ``nn.Module`` (its own initialisation is kept and copied to the workers) or a
    zero-argument factory (called once under ``torch.manual_seed(seed)``; with ``models=M`` each
    model is its own call). ``data``: a map-style ``Dataset`` of ``(input, target)`` pairs, a
    ``DataLoader`` (its dataset, ``collate_fn``, ``num_workers`` and batch size: one given to both
    it and ``TorchConfig`` must agree; its own sampler is refused: :func:`_loader_options`), or
    ``(X, y)`` tensors or arrays.

    ``spec``: a :class:`~gradcode.runtime.config.TrainSpec` for the code or scheme (``"auto"``:
    chosen after a probe, :class:`TorchConfig`), ``workers``, ``stragglers``/``delay``/
    ``delay_model``/``inject`` (the injected stragglers), ``models``, ``seed`` and the closing
    rule (``close``, ``waitout``), as :func:`gradcode.train`; its data, problem and optimizer
    fields are this call's. ``torch_config``: the loss, optimizer, batches, wire type and evaluation
    (:class:`TorchConfig`). ``run``: rounds (None, the default: ``torch_config.epochs``), evaluation
    cadence (without ``run``: 0, after the last round only; a ``RunConfig`` given brings its own,
    default 1), checkpoints (the models, the torch
    optimizers' and schedulers' states and the scheme, every K rounds; ``resume=True`` with the
    same arguments continues, ``rounds`` being the total) and the run dir (default: a new folder
    under :func:`~gradcode.runtime.runs_home`). ``faults``, ``cluster``: as :func:`gradcode.train`.

    ``engine``: ``"ray"`` (an embedded local cluster, or ``cluster.address``) or ``"inprocess"``
    (the workers in this process on a virtual clock: each message takes the time its computation
    took here, plus the injected delays; which workers a round decodes from can therefore vary
    between two runs, and the weights with it, by float32 rounding). ``callback(record)`` after
    every round. A progress bar goes to stderr when it is a terminal (``TorchConfig.progress``:
    always, or never).

    """
    spec, tconf, run, faults, cluster = _fit_configs(spec, torch_config, run, faults, cluster)
    data = _samples(data, tconf, spec.seed)
    auto = isinstance(spec.scheme, str) and spec.scheme == "auto"
    scheme = _scheme(spec, tconf, auto)
    tspec, model_specs = _torch_spec(model, data, spec, tconf, scheme)
    rounds = _rounds(tspec, run.rounds, tconf.epochs, spec.models)
    optimizers = _optimizers(model_specs, tconf, rounds)
    if auto:
        probe = check_int("probe", 20 if tconf.probe is None else tconf.probe, minimum=1)
        if rounds <= probe:
            raise ValueError(f"scheme='auto' probes {probe} rounds uncoded and needs more rounds than that,"
                             f" got {rounds}")
        slope = SlopeSource(tconf.load_slope, *_injected_slope(spec, scheme.n, rounds))
        scheme = ProbeThenSwitch(scheme.n, probe, rounds, models=spec.models, close=spec.close, waitout=spec.waitout,
                                 seed=spec.seed, decode_rtol=tconf.decode_rtol, families=tconf.families, slope=slope,
                                 decode_strict=tconf.decode_strict)
        tspec.hold_all = True  # the partitions change at the switch: every worker keeps every sample
    run_engine, shipping = _engine(engine, tspec)
    spec = _run_spec(spec, scheme, tspec, optimizers)
    run = replace(run, rounds=rounds)
    bar = RoundBar(rounds) if show_progress(tconf.progress) else None
    return _train(spec, optimizers, scheme if auto else None, tspec,
                  (cluster, faults, run, run_engine, shipping, callback, bar))


def _injected_slope(spec, n: int, rounds: int) -> tuple[float, str]:
    """The load slope of the delays a ``scheme="auto"`` run injects and what it is: App. J's fit on
    them when they are the model's whole time (``inject="full"``,
    :func:`~gradcode.runtime.setup.injected_load_fit`); 0 otherwise (``"excess"`` leaves out what
    every worker shares, the load's cost included; or nothing injected)."""
    from gradcode.runtime.setup import injected_load_fit

    fitted = injected_load_fit(spec, n, rounds)
    if fitted is None:
        return 0.0, "no load-dependent delay injected"
    return max(fitted.slope, 0.0), f"the injected delays' slope, fitted as App. J does (Fig. 16: {fitted.line()})"


def _run_spec(spec, scheme, tspec: TorchSpec, optimizers: list):
    """The runtime's TrainSpec of a torch run: the caller's stragglers, seed and closing rule, the
    built scheme, the torch spec as its data and the optimizer objects (one per model)."""
    from gradcode.runtime import TrainSpec

    return TrainSpec(scheme=scheme, workers=scheme.n, stragglers=spec.stragglers, tolerance=spec.tolerance,
                     delay=spec.delay, delay_model=spec.delay_model, delay_params=spec.delay_params, data=tspec,
                     optimizer=optimizers, models=spec.models, seed=spec.seed, close=spec.close,
                     waitout=spec.waitout, inject=spec.inject)


def _fit_configs(spec, tconf, run, faults, cluster) -> tuple:
    """:func:`fit`'s config objects: those given, the rest default (``RunConfig(eval_every=0)``:
    rounds by epochs, held-out metrics after the last round). TrainSpec fields fit does not use
    are refused, not dropped."""
    from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig, TrainSpec
    from gradcode.runtime.config import given_configs

    out = given_configs({"spec": spec, "torch_config": tconf, "run": run, "faults": faults, "cluster": cluster},
                        {"torch_config": TorchConfig, "spec": TrainSpec, "run": lambda: RunConfig(eval_every=0),
                         "faults": FaultConfig, "cluster": ClusterConfig})
    spec = out["spec"]
    default = TrainSpec()
    ignored = [f for f in NOT_FIT if getattr(spec, f) != getattr(default, f)]
    if ignored:
        raise ValueError(f"{', '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} not used by a torch model's"
                         " run (its data, loss and optimizer are fit's arguments and its TorchConfig; verify is for"
                         " the built-in problems): leave them at their defaults")
    return spec, out["torch_config"], out["run"], out["faults"], out["cluster"]


#: TrainSpec fields that fit does not use (its data, loss and optimizer come from its own arguments)
NOT_FIT = ("data", "data_params", "test_fraction", "problem", "problem_params", "optimizer", "optimizer_params",
            "verify")


@dataclass(frozen=True)
class _Data:
    """The training data of a run as :func:`_samples` resolves it."""

    samples: Any  # the master's copy: (X, y) tensors or a Dataset
    eval_samples: Any
    batch_size: int | None
    source: Callable | None = None  # what each worker reads its samples from (None: shipped)
    collate: Callable | None = None
    loader: Any = None  # a DataLoader's options the workers honour (gradcode.torch.reading.LoaderOptions)


def _samples(data, tconf: TorchConfig, seed: int = 0) -> _Data:
    """The run's data: ``data`` as :func:`as_samples` reads it (a factory or a path: a source
    each worker reads itself, read here once for the master), the held-out samples, the batch
    size (:func:`_batch_size`), and a DataLoader's ``collate_fn`` and the options its workers
    honour (:func:`_loader_options`). ``seed``: a path's split (:func:`~gradcode.torch.data.load_data`)."""
    source = None
    if isinstance(data, (str, os.PathLike)):
        source = from_path(str(data), seed)
    elif _is_factory(data):
        source = data
    collate, loader, loader_batch = None, None, None
    if source is not None:
        samples = read_source(source)
    else:
        collate, loader = _loader_options(data)
        samples, loader_batch = as_samples(data, "data")
    batch_size = _batch_size(loader_batch, tconf)
    eval_samples = None if tconf.eval_data is None else as_samples(tconf.eval_data, "eval_data")[0]
    N = length(samples)
    if batch_size is not None and N < batch_size:
        raise ValueError(f"data has {N} samples, fewer than one batch (batch_size={batch_size})")
    return _Data(samples, eval_samples, batch_size, source, collate, loader)


def _batch_size(loader_batch: int | None, tconf: TorchConfig) -> int | None:
    """The run's batch size, by one rule: a DataLoader's ``batch_size`` counts as given unless it
    is 1 (the DataLoader's default: ``DataLoader(ds)`` says nothing about batches, and one sample
    cannot be split over a code's partitions), ``TorchConfig.batch_size`` unless left at its
    default (:func:`~gradcode.torch.config.batch_size_given`). Both given and different: refused,
    naming both (neither silently wins); only the loader's: the loader's; otherwise the
    TorchConfig's (64 by default, None for full batches)."""
    own = tconf.batch_size
    if loader_batch is None or loader_batch == 1 or loader_batch == own:
        return own
    if batch_size_given(tconf):
        raise ValueError(f"the DataLoader's batch_size={loader_batch} and TorchConfig.batch_size={own} disagree:"
                         " give one, or the same in both")
    return loader_batch


def _is_factory(data) -> bool:
    from torch.utils.data import DataLoader, Dataset

    return callable(data) and not isinstance(data, (Dataset, DataLoader, nn.Module, tuple, list, torch.Tensor))


def _loader_options(data):
    """``(collate_fn, options)`` of a DataLoader: its ``collate_fn`` (None for the default stacking)
    and the options each worker honours in reading its items
    (:class:`~gradcode.torch.reading.LoaderOptions`: ``num_workers``, ``timeout``,
    ``worker_init_fn``, ``multiprocessing_context``, ``pin_memory``; None when all are defaults);
    ``(None, None)`` for data that is no DataLoader.

    Refused, by name: a ``sampler`` or ``batch_sampler`` of one's own (every worker holding a
    partition must draw the same samples, from the run's seed: gradcode draws the batches itself,
    shuffling each partition every epoch) and ``batch_size=None`` (no batching: gradcode needs the
    loader's items to be single samples it batches). Options gradcode does not use and left at
    other values than their defaults are named in one warning; defaults never warn (``shuffle``
    and ``drop_last`` whichever way: the order is gradcode's, and a partition's epoch is whole
    batches, as ``drop_last=True``)."""
    from torch.utils.data import DataLoader, RandomSampler, SequentialSampler
    from torch.utils.data._utils.collate import default_collate

    from gradcode.torch.reading import LoaderOptions

    if not isinstance(data, DataLoader):
        return None, None
    why = (" gradcode draws each partition's batches itself (every worker holding a partition computes on the same"
           " samples, drawn from the run's seed), so a sampler of one's own cannot be honoured; pass the Dataset")
    if data.batch_sampler is not None and data.batch_size is None:  # DataLoader(batch_sampler=...)
        own = data.batch_sampler
        size = getattr(own, "batch_size", None)
        raise ValueError(f"the DataLoader's batch_sampler, a {type(own).__name__}"
                         f"{'' if size is None else f' of batch_size={size}'}:{why} in"
                         f" DataLoader(dataset, batch_size={size or 'B'}) or with TorchConfig.batch_size")
    if data.batch_size is None:
        raise ValueError("DataLoader(batch_size=None) does not batch (each item is used as a batch); gradcode"
                         " batches the samples itself, so give the DataLoader a batch_size (or leave it out and"
                         " set TorchConfig.batch_size), with a Dataset whose items are single (input, target)"
                         " pairs")
    sampler = data.sampler
    if type(sampler) not in (RandomSampler, SequentialSampler) or (
            isinstance(sampler, RandomSampler) and (sampler.replacement or sampler._num_samples is not None)):
        raise ValueError(f"the DataLoader's {type(sampler).__name__}:{why}")
    unused = []
    if data.generator is not None:
        unused.append("generator (each partition's samples are shuffled from the run's seed, TrainSpec.seed)")
    if data.prefetch_factor not in (None, 2):
        unused.append(f"prefetch_factor={data.prefetch_factor} (a worker reads the batch in hand, split over"
                      " num_workers)")
    if not getattr(data, "in_order", True):
        unused.append("in_order=False (a batch's items keep the training order, as every copy of the partition"
                      " must)")
    if data.pin_memory_device:
        unused.append(f"pin_memory_device={data.pin_memory_device!r} (a batch is pinned for the run's device)")
    if unused:
        warnings.warn("DataLoader options gradcode does not use: " + "; ".join(unused), UserWarning, stacklevel=4)
    collate = None if data.collate_fn is default_collate else data.collate_fn
    return collate, LoaderOptions.of(data)


def _torch_spec(model, data: _Data, spec, tconf: TorchConfig, scheme):
    """``(TorchSpec of the run, one TorchSpec per model)``, after one forward and backward pass on
    a copy of the model (:func:`_probe`)."""
    factories = _model_factories(model, spec.models, spec.seed)
    device = str(check_device(model_device(model) if tconf.device is None else tconf.device))
    samples = data.samples
    loss = _default_loss(samples) if tconf.loss is None else tconf.loss
    sizes = np.asarray(scheme.partition_sizes, dtype=np.float64)
    N = length(samples)
    if N < sizes.size:
        raise ValueError(f"data has {N} samples, fewer than the code's {sizes.size} partitions")
    order = np.random.default_rng([spec.seed, 0]).permutation(N)
    spec_args = dict(samples=samples, order=order, loss=loss, loss_reduction=tconf.loss_reduction,
                     batch_size=data.batch_size, sizes=sizes, seed=spec.seed,
                     wire_dtype=tconf.wire_dtype, eval_samples=data.eval_samples,
                     metrics=tconf.metrics, models=spec.models, device=device, source=data.source,
                     collate=data.collate, loader=data.loader, autocast=tconf.autocast)
    tspec = TorchSpec(model=factories[0], **spec_args)
    _probe(tspec)
    return tspec, [TorchSpec(model=f, **spec_args) for f in factories]


def _optimizers(model_specs: list, tconf: TorchConfig, rounds: int) -> list:
    """One :class:`TorchOptimizer` per model, its schedule sized to the run's ``rounds``."""
    opt_factory = _optimizer_factory(tconf.optimizer, tconf.optimizer_params)
    _check_optimizer(model_specs[0], opt_factory)
    schedule = scheduler_factory(tconf.scheduler, rounds)
    return [TorchOptimizer(m, opt_factory, schedule, tconf.clip_grad_norm) for m in model_specs]


def _train(spec, optimizers: list, switch, tspec: TorchSpec, options: tuple) -> FitResult:
    """Run the rounds (:func:`~gradcode.runtime.training.run_training`) from the modules' own
    weights; load the trained weights back into them."""
    from gradcode.runtime.training import run_training

    cluster, faults, run, engine, shipping, callback, bar = options
    history: list[dict] = []
    batch = tspec.samples_per_job

    def record(rec: dict) -> None:
        rec["batch_size"] = batch
        history.append(rec)
        if bar is not None:
            bar(rec)
        if callback is not None:
            callback(rec)

    initial = [opt.layout.flatten(opt.module) for opt in optimizers]
    try:
        with shipping:
            result = run_training(spec, cluster=cluster, faults=faults, run=run, engine=engine, callback=record,
                                  initial_params=initial)
    finally:
        if bar is not None:
            bar.close()
    if result.resumed_from:  # the rounds run before the resume, from the checkpoint's tables
        history[:0] = _earlier_records(result, result.resumed_from, batch)
    if switch is not None:  # what was chosen and why, and how the prediction fared, in the records too
        _compare_prediction(switch, result)
        result.config["auto"] = switch.report
        result.save(result.run_dir)
    trained = []
    for opt, x in zip(optimizers, result.params):
        opt.layout.load(opt.module, x)
        opt.module.train()
        trained.append(opt.module)
    return FitResult(model=trained[0], models=trained, history=history, result=result, run_dir=str(result.run_dir),
                     spec=tspec, auto=switch.report if switch is not None else None)


def _compare_prediction(switch: ProbeThenSwitch, result) -> None:
    """Add to ``switch.report`` the time the rounds after the switch took (``ran_total``) and the
    prediction's relative error (``predicted_error``); beyond 20 % the report's ``off_because``
    says why it can be: the replay stands the probe's times, repeated, for the rounds after it
    (whose own delays differ), with the load slope it was given or fitted."""
    report = switch.report
    if report is None or "predicted_total" not in report.get("chosen", {}) or result.round_times.size <= switch.probe:
        return
    ran = float(result.round_times[switch.probe:].sum())
    predicted = float(report["chosen"]["predicted_total"])
    report["ran_total"] = ran
    report["predicted_error"] = predicted / ran - 1 if ran > 0 else math.nan
    if not abs(report["predicted_error"]) <= 0.2:
        report["off_because"] = (
            f"the replay repeats the probe's {report['probe_rounds']} rounds for the {report['jobs']} jobs after it,"
            f" whose own delays differ, with a load slope of {report['alpha']:.4g} s per unit load"
            f" ({report['alpha_from']}); the rounds after the switch are the run's, not a repetition of the probe")


def _earlier_records(result, rounds: int, batch_size: int) -> list[dict]:
    """The history records of a resumed run's first ``rounds`` rounds, as the callback gave them
    then, rebuilt from the checkpoint's tables (all but ``jobs``, which the tables do not hold)."""
    models = result.losses.shape[1] if result.losses.ndim == 2 else 1
    elapsed = np.cumsum(result.round_times[:rounds])
    out = []
    for t in range(rounds):
        losses = [float(v) for v in np.atleast_1d(result.losses[t])]
        rec = {"round": t, "time": float(result.round_times[t]), "elapsed": float(elapsed[t]),
               "loss": losses[0] if models == 1 else losses, "stragglers": int((result.arrivals[t] < 0).sum()),
               "overflows": int(result.overflows[t]), "batch_size": batch_size}
        metrics = [m for m in result.metrics if m.get("round") == t]
        if metrics:
            rec["metrics"] = metrics
        out.append(rec)
    return out


# ----------------------------------------------------------------------------------- steps of fit


def _scheme(spec, tconf: TorchConfig, auto: bool):
    """The run's scheme: the named code or a copy of the caller's object (``decode_rtol`` is set on
    the run's own codes, never on the caller's), or for ``scheme="auto"`` the probe's uncoded one
    (:class:`ProbeThenSwitch` wraps it once the rounds are known)."""
    from gradcode.runtime.setup import build_scheme

    if auto:
        if spec.scheme_params:
            raise ValueError("scheme='auto' chooses its own parameters; scheme_params go with a named scheme")
        workers = spec.workers if spec.workers is not None else 4
        return build_scheme("uncoded", workers=check_int("workers", workers, minimum=2))
    if any(option is not None for option in (tconf.probe, tconf.load_slope, tconf.families)):
        raise ValueError("probe, load_slope and families go with scheme='auto' (start uncoded, measure, switch)")
    code = spec.scheme
    scheme = build_scheme(code if isinstance(code, str) else copy.deepcopy(code), workers=spec.workers,
                          stragglers=spec.stragglers, tolerance=spec.tolerance, seed=spec.seed,
                          scheme_params=spec.scheme_params)
    set_decode_rtol(scheme, tconf.decode_rtol, strict=tconf.decode_strict)
    return scheme


def _rounds(spec: TorchSpec, rounds, epochs, models: int) -> int:
    """``rounds``, or those ``epochs`` (default 1) of every model take: ``N / batch_size`` jobs an
    epoch (the smallest partition's count of whole batches), one a round."""
    if rounds is None:
        steps = int(min(spec.shards // np.maximum(spec.per_job, 1))) if spec.batch_size is not None else 1
        rounds = max(1, math.ceil((1.0 if epochs is None else float(epochs)) * max(steps, 1) * models))
    elif epochs is not None:
        raise ValueError("give rounds or epochs, not both")
    return check_int("rounds", rounds, minimum=1)


def _engine(engine, spec: TorchSpec):
    """``(engine, context)``: Ray (the user's code travels by value while the run lasts) or the
    in-process engine timed by measured compute (:func:`~gradcode.runtime.session.make_engine`)."""
    if engine is None or engine == "ray" or type(engine).__module__ == "gradcode.runtime.engine":
        return engine, _user_code_by_value(spec)
    if isinstance(engine, str):
        check_choice("engine", engine, ("ray", "inprocess"))
    return engine, contextlib.nullcontext()


# ----------------------------------------------------------------------------------- inputs


def _default_loss(samples):
    _, y = fetch(samples, np.arange(1))
    if y.is_floating_point():
        return torch.nn.functional.mse_loss
    return torch.nn.functional.cross_entropy


def _model_factories(model, models: int, seed: int) -> list:
    if isinstance(model, nn.Module):
        try:
            return [copy_factory(model)] * models
        except Exception as exc:
            raise TypeError(f"model cannot be copied to the workers (copy.deepcopy, pickling for Ray):"
                            f" {type(exc).__name__}: {exc}") from None
    if callable(model):
        return [seeded_factory(model, seed + m) for m in range(models)]
    raise TypeError(f"model must be an nn.Module or a zero-argument factory returning one, got {type(model).__name__}")


def _optimizer_factory(optimizer, params: Mapping | None) -> Callable:
    """A factory ``parameters -> torch optimizer`` of ``TorchConfig.optimizer``: a class (by name,
    :func:`~gradcode.torch.loading.optimizer_class`, or given) built with ``optimizer_params``
    (``"sgd"`` by name defaults to ``lr=0.01``), or the user's factory as it is. Parameters the
    class refuses (an unknown keyword, a value of the wrong kind) are a ``ValueError`` naming
    ``optimizer_params`` when the factory is first called."""
    params = dict(params or {})
    named = isinstance(optimizer, str)
    optimizer = optimizer_class(optimizer)
    if named and optimizer is torch.optim.SGD:
        params.setdefault("lr", 0.01)
    if isinstance(optimizer, type):
        if not issubclass(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer class, got {optimizer.__name__}")
        return _ClassOptimizer(optimizer, params)
    if callable(optimizer):
        if params:
            raise TypeError("optimizer_params go with an optimizer class or name, not with a factory")
        return optimizer
    raise TypeError(f"optimizer must be a torch.optim class (or its name: sgd, adam, RMSprop, ...) or a factory;"
                    f" got {optimizer!r}")


@dataclass(frozen=True)
class _ClassOptimizer:
    """``cls(parameters, **params)``, its refusal of ``params`` said in terms of the option."""

    cls: type
    params: dict

    def __call__(self, parameters):
        try:
            return self.cls(parameters, **self.params)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"optimizer_params {self.params}: {self.cls.__name__} refuses them: {exc}") from None


def _check_optimizer(spec: TorchSpec, factory: Callable) -> None:
    """One step of the optimizer on a copy of the model with zero gradients, before any worker
    starts: an optimizer gradcode cannot step (one that needs a closure, as LBFGS; one for sparse
    gradients only) is a clear error now, not a run that fails in its first round."""
    module = spec.model()
    params = [p for p in module.parameters() if p.requires_grad]
    opt = factory(params)
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim class or a factory params -> Optimizer; it made"
                        f" {type(opt).__name__}")
    for p in params:
        p.grad = torch.zeros_like(p)
    try:
        opt.step()
    except Exception as exc:
        raise ValueError(f"optimizer {type(opt).__name__} cannot step here (gradcode steps it once a round with the"
                         f" decoded gradient, without a closure): {type(exc).__name__}: {exc}") from None


def _probe(spec: TorchSpec) -> None:
    """One forward and backward pass on the smallest partition's share of a batch, on a copy of
    the model, before any worker starts: a model, loss or target that does not work is a clear
    error naming the argument, not a worker that raises in round 0."""
    b = int(max(1, spec.per_job.min()))
    try:
        X, y = fetch(spec.samples, spec.order[:b], seed=spec.seed, collate=spec.collate)
    except GradcodeError:
        raise
    except Exception as exc:  # the user's Dataset or collate_fn
        raise UserCodeError.of(exc, f"data: reading {b} samples") from exc
    X, y = X.to(spec.device), y.to(spec.device)
    module = spec.model().to(spec.device)
    module.train()
    wrong = sorted({str(p.dtype) for p in module.parameters() if p.dtype != torch.float32})
    if wrong:
        raise GradcodeError(f"model: parameters must be float32 (the workers compute in float32 and send"
                            f" wire_dtype); got {', '.join(wrong)}: call .float() on the model")
    cumulative = [name for name, m in module.named_modules()
                  if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.momentum is None]
    if cumulative:
        raise GradcodeError(f"model: BatchNorm with momentum=None (a cumulative average) in {cumulative} is not"
                            " supported: its update depends on each worker's own count of forward passes; give"
                            " it a momentum")
    try:
        out = module(X)
    except Exception as exc:
        raise UserCodeError.of(exc, f"model: the forward pass on {b} samples of data (inputs {tuple(X.shape)},"
                                    f" {X.dtype})") from exc
    classes = _classes(spec.samples, y)
    too_few = classes is not None and out.ndim == 2 and out.shape[1] < classes
    outputs = (f"model: it outputs {out.shape[1] if out.ndim == 2 else '?'} values per sample, but the targets hold"
               f" {classes} classes (0 to {(classes or 1) - 1}): its last layer needs {classes} outputs")
    if too_few and spec.loss is torch.nn.functional.cross_entropy:  # the probe's batch may not hold every class
        raise GradcodeError(outputs)
    try:
        value = spec.loss(out, y)
    except Exception as exc:
        if too_few:  # a loss of one's own that failed: most likely for that reason
            raise GradcodeError(f"{outputs} (loss: {type(exc).__name__}: {exc})") from exc
        raise UserCodeError.of(exc, f"loss(output, target) on the model's output {tuple(out.shape)} and targets"
                                    f" {tuple(y.shape)} ({y.dtype}); check the targets' dtype (class indices:"
                                    " int64; regression: float)") from exc
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise GradcodeError(f"loss must return a scalar (reduction 'mean' or 'sum'), got {shape}")
    if not value.requires_grad:
        raise GradcodeError("loss: its value does not depend on the model's parameters (no gradient)")
    value.backward()
    if ModelLayout(module).d_params == 0:
        raise GradcodeError("model has no parameters to train")


def _classes(samples, probe_targets) -> int | None:
    """Classes of integer class-index targets (the largest index + 1, over every target of ``(X, y)``
    tensors, over the probe's for a ``Dataset``); None for other targets."""
    y = samples[1] if isinstance(samples, tuple) else probe_targets
    if y.is_floating_point() or y.ndim != 1 or y.numel() == 0:
        return None
    return int(y.max()) + 1


@contextlib.contextmanager
def _user_code_by_value(spec: TorchSpec):
    """While a Ray run lasts, the user's own modules (those of the model's class, the loss and the
    metrics that are not installed packages or the standard library: a script's, a test's, a
    ``--model FILE.py``) travel to the workers by value, since the workers cannot import them; what
    cannot be pickled is refused up front, naming it. Cloudpickle's registration is global, so it
    is undone when the run ends."""
    import ray.cloudpickle as cloudpickle

    installed = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    registered = []
    for obj in (spec.model, spec.loss, *spec.metrics.values()):
        target = getattr(obj, "module", obj)  # a copy factory holds the user's module
        for name in {type(target).__module__, getattr(target, "__module__", None), getattr(obj, "__module__", None)}:
            mod = sys.modules.get(name or "")
            path = getattr(mod, "__file__", None)
            if mod is None or name == "__main__" or path is None or name.split(".")[0] in ("gradcode", "torch"):
                continue
            if any(str(path).startswith(root) for root in installed) or mod in registered:
                continue
            cloudpickle.register_pickle_by_value(mod)
            registered.append(mod)
    try:
        try:
            cloudpickle.dumps(spec)
        except Exception as exc:
            raise GradcodeError(f"model, loss or data cannot be pickled for Ray's workers: {type(exc).__name__}:"
                                f" {exc} (use engine='inprocess', or define them at module level)") from exc
        yield
    finally:
        for mod in registered:
            cloudpickle.unregister_pickle_by_value(mod)
