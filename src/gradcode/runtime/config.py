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

from gradcode._options import close_option, described, waitout_option
from gradcode._validation import check_choice, check_closing_rule, check_int, check_real
from gradcode.runtime.transports import transport_names

__all__ = ["ClusterConfig", "FaultConfig", "RunConfig", "TrainSpec", "given_configs"]

#: how a round reaches the Ray workers (``ClusterConfig.transport``): the modules of
#: :mod:`gradcode.runtime.transports`, the default first
TRANSPORTS = transport_names()


def _set(obj, name: str, value) -> None:
    object.__setattr__(obj, name, value)  # frozen dataclasses normalise their fields this way


@dataclass(frozen=True)
class ClusterConfig:
    """Where the workers run: the Ray engine's settings (:func:`gradcode.runtime.make_engine`
    builds a :class:`~gradcode.runtime.engine.RayEngine` from them; the in-process engine has no
    cluster and refuses settings that would be ignored).

    ``address``: join an existing Ray cluster (``"auto"``, ``"host:port"``, ``"ray://..."``) for
    the run; None uses the Ray session already running in this process, or this process's
    embedded local cluster, started with ``num_cpus`` cores by the first run and kept for the later
    ones (other ``num_cpus`` start it again: :func:`gradcode.runtime.cluster.local_cluster`).
    ``start_timeout``: seconds the cluster may take to answer and the
    workers to start (build their data) before the run stops with a clear error.
    ``worker_cpus``: CPUs each worker reserves (Ray's ``num_cpus`` of the worker actors;
    ``--worker-cpus``); 0 (default) so that the number of workers is not limited by the cores
    Ray sees (stragglers are simulated on few cores; 64 workers run on 2). With 0, a run whose
    workers outnumber the cluster's CPUs is warned about: they share cores, so the measured round
    times include that contention. ``worker_gpus``: GPUs each worker reserves (Ray's ``num_gpus``;
    a fraction shares one); None (default): none, unless the problem computes on a CUDA device
    (``gradcode.torch``'s ``device="cuda"``), whose workers share the cluster's GPUs evenly (at most
    one each). ``transport``: ``"channels"`` (default) sends each round's tasks and messages
    through a direct socket to each worker (:mod:`gradcode.runtime.channel`: a round costs a
    fraction of Ray's actor calls; BENCHMARKS.md, "2026-11-27: rounds through direct channels, Ray
    for the rest"), and parameters above
    2 MiB through Ray's object store; ``"ray"`` sends every round through Ray's actor calls (for a
    cluster whose nodes accept no other connections from the driver; a worker that cannot be
    reached by a channel falls back to them by itself).
    """

    address: str | None = described(None, "Join an existing Ray cluster (auto, host:port, ray://...); default: this"
                                         " process's Ray session, or an embedded local cluster.")
    num_cpus: int | None = described(None, "CPUs of the embedded Ray cluster (default: the machine's).")
    start_timeout: float = described(120.0, "Give up joining the cluster or starting the workers after this many"
                                            " seconds.")
    worker_cpus: float = described(0.0, "CPUs each worker reserves on the Ray cluster (Ray's num_cpus; 0: none, and"
                                        " a warning when the workers outnumber the cluster's CPUs); torch and BLAS"
                                        " run that many threads in each worker (at least 1).")
    worker_gpus: float | None = described(None, "GPUs each worker reserves (a fraction shares one; default: none,"
                                                " or an even share when the model computes on CUDA).")
    transport: str = described("channels", "How rounds reach the workers: channels (a direct socket to each worker,"
                                            " Ray's object store for parameters over 2 MiB), ray (every round"
                                            " through Ray's actor calls) or collective (the workers keep the messages"
                                            " and model replicas and all-reduce the decode among themselves).")
    replica_check: int = described(20, "With --transport collective: compare a digest of the workers' model replicas"
                                       " every K rounds (0: never); replicas that differ stop the run.")

    def __post_init__(self):
        if self.num_cpus is not None:
            _set(self, "num_cpus", check_int("num_cpus", self.num_cpus, minimum=1))
        _set(self, "start_timeout", check_real("start_timeout", self.start_timeout, minimum=0.0, strict_min=True))
        _set(self, "worker_cpus", check_real("worker_cpus", self.worker_cpus, minimum=0.0))
        if self.worker_gpus is not None:
            _set(self, "worker_gpus", check_real("worker_gpus", self.worker_gpus, minimum=0.0))
        _set(self, "transport", check_choice("transport", self.transport, TRANSPORTS))
        _set(self, "replica_check", check_int("replica_check", self.replica_check, minimum=0))


@dataclass(frozen=True)
class FaultConfig:
    """Faults to inject and how they are tolerated.

    ``fail``: ``"W@R"`` strings or ``(W, R)`` pairs: worker ``W``'s process exits in round ``R``
    (checked against the number of workers and rounds when the run is set up). ``max_restarts``:
    how often Ray restarts a dead worker (-1: without limit, 0: never). ``round_timeout``: seconds
    a round may wait to decode before the run stops with
    :class:`~gradcode.runtime.RoundTimeoutError`.
    """

    fail: tuple = described((), "W@R: worker W's process exits in round R (repeatable).", metavar="W@R")
    max_restarts: int = described(-1, "How often Ray restarts a dead worker (-1: without limit, 0: never).")
    round_timeout: float = described(120.0, "Give up on a round that has not decoded after this many seconds.")

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
    finished run); None (default): the trainer's default, 100 for :func:`gradcode.train`, one
    epoch (``TorchConfig.epochs``) for :func:`gradcode.torch.fit`. ``checkpoint_every``: rounds between checkpoints (0: none). ``run_dir``: where
    records, checkpoints and Ray's temp dir go (None: a new ``<code>-n<n>-<time>`` folder under
    :func:`~gradcode.runtime.runs_home`, ``~/.gradcode/runs`` or ``$GRADCODE_RUNS``).
    ``eval_every``: held-out metrics every ``K`` rounds and after the last (0: after the last only).
    ``resume``: continue the run in ``run_dir`` from its checkpoint (same spec, checked);
    ``overwrite``: replace the run in ``run_dir`` (without either, a run dir that holds a run is
    refused). ``trust_checkpoint``: with ``resume``, accept a checkpoint whose MACs do not verify
    under this user's checkpoint key (:mod:`gradcode.runtime.safe_state`).
    """

    rounds: int | None = described(None, "Training rounds of each scheme (default: 100; with --model one epoch).")
    checkpoint_every: int = described(0, "Checkpoint every K rounds (0: never).")
    run_dir: str | os.PathLike | None = described(
        None, "Where the run's records go (default: a new folder under ~/.gradcode/runs, or $GRADCODE_RUNS).")
    eval_every: int = described(1, "Held-out metrics every K rounds and after the last (0: after the last only).")
    resume: bool = described(False, "Continue the run in --run-dir from its checkpoint.")
    overwrite: bool = described(False, "Replace the run already in --run-dir (its checkpoint and records); without"
                                       " it such a run dir is refused unless --resume.")
    trust_checkpoint: bool = described(False, "With --resume: accept a checkpoint not written with this user's"
                                              " checkpoint key (another user's, an older gradcode's); only one you"
                                              " know the origin of.")

    def __post_init__(self):
        if self.rounds is not None:  # None: the trainer's default (gradcode.torch.fit: one epoch)
            _set(self, "rounds", check_int("rounds", self.rounds, minimum=1))
        _set(self, "checkpoint_every", check_int("checkpoint_every", self.checkpoint_every, minimum=0))
        _set(self, "eval_every", check_int("eval_every", self.eval_every, minimum=0))
        if self.resume and self.run_dir is None:  # the default run_dir is a new timestamped folder
            raise ValueError("resume=True needs run_dir: the folder of the run to continue")


@dataclass(frozen=True)
class TrainSpec:
    """What is trained: two runs with the same spec train the same models to the same iterates
    (exact codes), whatever the engine, the cluster or the faults.

    ``scheme``: a code name, built with ``n=workers`` (default 4, or the code's own ``n`` from
    ``scheme_params``), ``s=tolerance`` (default ``stragglers``) and ``seed`` where the code takes them, plus
    ``scheme_params`` (:func:`~gradcode.schemes.factory.resolve_scheme`); a scheme family's name
    (``gc-dc``, with its parameters in ``scheme_params``); a :class:`~gradcode.LinearCode` or any
    :class:`~gradcode.schemes.Scheme` (it brings its own ``n``; a ``workers`` that differs is
    refused).

    ``stragglers``/``delay``: ``stragglers`` random workers per round sleep ``delay`` extra seconds
    (Tandon Sec. 5; the ``fixed`` model with ``base=0``), unless ``delay_model`` (a delay model
    object, or a registry name with its ``delay_params``) is given. ``tolerance``: the code's ``s``
    (the stragglers it tolerates), for codes that take one; by default the number of slowed workers
    ``stragglers``, which a ``scheme_params`` ``s`` then stands over, while a ``tolerance`` given and
    a different ``scheme_params`` ``s`` are refused (CRC tolerating 2 with 1 worker slowed:
    ``TrainSpec("crc", stragglers=1, tolerance=2, delay=0.2)``). ``inject``: what a worker sleeps on top of its real
    computation, from the delay model's draw (``time = intercept + slope * load``): ``"excess"``
    (default) only what the model adds beyond the round's fastest worker (``intercept`` and
    ``slope`` less their minimum over workers), since the real computation already takes the fastest
    worker's time: a model with no stragglers injects nothing, Tandon's ``fixed`` model exactly its
    delays, a shifted exponential its spread; ``"full"``: the model's whole time (workers whose real
    computation is negligible next to the modelled one).

    ``data``: None (default: ``tandon-synthetic``), a dataset name (with ``data_params`` and
    ``test_fraction``; ``"file"`` with ``data_params={"path": ..., "target": ...}`` for a CSV, NPZ
    or LibSVM file, whose features are standardised with the training split's statistics unless
    ``standardize=False``), a path to such a file (``data="mydata.csv", data_params={"target":
    "label"}``, as the CLI's ``--data``), a
    :class:`~gradcode.problems.DataSpec`, or a problem spec: anything picklable whose ``build()``
    returns ``(problem, dataset)``, which workers and master call to get the same problem.
    ``problem`` defaults to ``logistic``/``linear``/``softmax`` by the data's task.

    ``optimizer``: ``gd``, ``nesterov`` or ``sgd`` (or one optimizer object per model);
    ``optimizer_params``: one dict for every model or a list of ``models`` dicts (e.g. a
    learning-rate sweep); without a step size GD and Nesterov take ``1/L`` from
    ``problem.smoothness()`` (the run's ``config.json`` records the step used). ``models``: models
    trained at once (round ``j`` serves model ``j mod models``).

    ``verify``: each round waits for two results more than decoding needs and checks them against
    each other (:meth:`LinearCode.decode_verified`): a worker whose finite result is wrong is
    named, left out of the round and recorded as a fault; a round whose results disagree with no
    culprit located waits for more (``2e`` spare results locate ``e`` wrong workers). Its cost: a
    verified round lasts until ``need + 2`` results are in.

    ``close``: when a round ends. ``"decodable"`` (default): as soon as the due jobs decode. A
    number ``mu >= 0``: SGC's mu-rule (Section 2, as :func:`gradcode.simulate` runs it): with
    ``kappa`` the time the first worker delivers its whole task result, the round waits until
    ``(1 + mu) kappa`` (or until every worker is in or has failed, if sooner); a round that cannot
    decode then waits it out (``waitout``: ``"decodable"``, until it decodes; ``"all"``, the
    paper's, for every worker that has not failed), and ``TrainResult.waitouts`` marks it.
    """

    scheme: Any = described("crc", "Code or scheme family, NAME or NAME:key=value,... (see `gradcode codes`); on the"
                                   " command line several, comma-separated (crc,frc,uncoded,ignore), train one after"
                                   " another on the same data, seed and injected delays.")
    workers: int | None = described(None, "Number of workers n (default: 4, or the scheme's own n).", short="-n")
    stragglers: int = described(0, "Workers delayed per round (the injected stragglers); also the code's tolerance"
                                   " unless --tolerance says otherwise.", short="-s")
    tolerance: int | None = described(None, "Stragglers the code tolerates, its s, for codes that take one"
                                            " (default: --stragglers).")
    delay: float = described(0.0, "Seconds each delayed worker sleeps per round.")
    delay_model: Any = described(None, "Another delay model instead of the fixed delays (gradcode models lists"
                                       " them).", short="-m")
    delay_params: Mapping | None = described(None, "key=value parameter of --delay-model (repeatable).", short="-M")
    scheme_params: Mapping | None = described(None, "key=value parameter of the scheme (repeatable).", short="-p")
    data: Any = described(None, "Data set: tandon-synthetic (default), amazon-synthetic, breast-cancer, digits,"
                                " ..., or your own FILE (.csv with --data-params target=COLUMN, .npz with X and y,"
                                " .svm/.libsvm); with --model digits (default), mnist:DIR, cifar10:DIR, cifar100:DIR"
                                " or an .npz.")
    data_params: Mapping | None = described(None, "key=value data set parameter (repeatable; a file's target=COLUMN,"
                                                  " standardize=false).")
    test_fraction: float = described(0.2, "Share of the data held out for the held-out metrics.")
    problem: str | None = described(None, "logistic, linear, softmax, mlp, cnn (default: by the data's task).")
    problem_params: Mapping | None = described(None, "key=value problem parameter (repeatable).")
    optimizer: Any = described("gd", "gd, nesterov or sgd; with --model any torch.optim optimizer by name (sgd, adam,"
                                     " adamw, RMSprop, adagrad, ...; any case) or FILE.py:NAME.")
    optimizer_params: Mapping | Sequence[Mapping] | None = described(
        None, "key=value optimizer parameters (repeatable, or several with commas: lr=0.1,momentum=0.9; default step"
              " of gd and nesterov: 1/L).")
    models: int = described(1, "Models trained at once (round j serves model j mod M).")
    seed: int = described(0, "Seed of the data, the code and the injected delays.")
    verify: bool = described(False, "Wait for two results more than decoding needs and check them against each"
                                    " other: a worker whose result is wrong is named and left out.")
    inject: str = described("excess", "What delayed workers sleep on top of their real computation: excess (what"
                                      " the delay model adds beyond the round's fastest worker) or full (the"
                                      " model's whole time).")
    close: str | float = close_option()
    waitout: str = waitout_option()

    def __post_init__(self):
        _set(self, "models", check_int("models", self.models, minimum=1))
        _set(self, "seed", check_int("seed", self.seed, minimum=0))
        _set(self, "delay", check_real("delay", self.delay, minimum=0.0))
        _set(self, "stragglers", check_int("stragglers", self.stragglers, minimum=0))
        if self.tolerance is not None:
            _set(self, "tolerance", check_int("tolerance", self.tolerance, minimum=0))
        check_choice("inject", self.inject, ("excess", "full"))
        if self.delay_params is not None and not isinstance(self.delay_model, str):
            raise ValueError("delay_params are the parameters of a delay_model given by name; a delay model object"
                             " carries its own" if self.delay_model is not None else
                             "delay_params set the parameters of delay_model, which is not given: name a delay"
                             " model (gradcode models lists them)")
        mu = check_closing_rule(self.close, self.waitout)
        if mu is not None:
            _set(self, "close", mu)
        for name in ("scheme_params", "delay_params", "data_params", "problem_params"):
            value = getattr(self, name)
            if value is not None:
                _set(self, name, dict(value))
        opt = self.optimizer_params
        if opt is not None:
            _set(self, "optimizer_params", dict(opt) if isinstance(opt, Mapping) else tuple(dict(p) for p in opt))

    def replace(self, **changes) -> TrainSpec:
        """A copy with ``changes`` (validated again)."""
        return replace(self, **changes)


def given_configs(given: dict, classes: dict) -> dict:
    """The config objects of an entry point (``{name: object}``): each ``given`` object checked to
    be of its class in ``classes``, a missing one its class's default (``classes[name]``: a class,
    or a zero-argument factory returning the default object)."""
    out = {}
    for name, make in classes.items():
        cls = make if isinstance(make, type) else type(make())
        obj = given.get(name)
        if obj is None:
            out[name] = make()
        elif not isinstance(obj, cls):
            raise TypeError(f"{name} must be a {cls.__name__}, got {type(obj).__name__}")
        else:
            out[name] = obj
    return out


def field_names(cls) -> tuple[str, ...]:
    """The fields of one of the config classes, in order."""
    return tuple(f.name for f in fields(cls))
