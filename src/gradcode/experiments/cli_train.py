"""``gradcode train``: real training with gradient coding on Ray (embedded cluster by default).

    gradcode train --scheme crc --workers 12 --stragglers 2 --delay 0.5 --data synthetic \\
        --rounds 100 --seed 0

runs :func:`gradcode.train`: ``--stragglers S`` random workers sleep ``--delay`` extra seconds in
every round (Tandon et al. Sec. 5; the ``fixed`` delay model with ``base=0``) unless
``--delay-model`` names another model, and ``S`` is also the tolerance ``s`` of codes that take one
(``uncoded`` simply faces the delays). ``--scheme`` also takes a scheme family with its parameters
inline or through ``--param``: ``--scheme gc-dc:clusters=2,r=2,ssi=perfect`` trains with GC-DC
(``n`` = ``--workers``; perfect straggler state information is the injected delay model's states
of each round; ``--stragglers`` then only sets the injected delays). A progress bar goes to stderr, a final table to stdout (or,
with ``--json``, exactly one JSON document: ``round_times``, ``final_loss``,
``final_params_checksum``, ``arrivals`` and the rest of :meth:`TrainResult.to_json`). ``--plot``
draws ``loss_auc_vs_time`` (held-out loss and ROC AUC against wall-clock time, Tandon Fig. 7) and
``round_time_vs_delay`` (each round's time against the largest delay injected in it, with the line
``time = delay`` that an uncoded run follows, Tandon Fig. 5): into a folder, or at a ``.png`` path
(the second beside it), as :func:`~gradcode.experiments.cli_output.plot_files` says.

Several schemes, comma-separated (``--scheme crc,frc,uncoded,ignore``), run one after another on the
same data, seed and injected delays (:func:`train_several`): one table, one JSON document with every
run, one subfolder of ``--run-dir`` each, and ``--plot`` draws them all on the same axes.

Data: ``--data`` is a dataset name (``synthetic`` = ``tandon-synthetic``, ``amazon`` =
``amazon-synthetic``, or any registered name) with ``--data-param key=value``, or your own file
(``--data my.csv --target label [--data-param categorical=colour,city]``, ``--data my.npz`` with
arrays ``X`` and ``y``, ``--data my.svm`` in LibSVM format); ``--problem`` defaults
to the data's task (logistic, linear, softmax). Optimizer: ``--optimizer gd|nesterov|sgd`` with
``--lr`` or ``--opt-param key=value`` (default step ``1/L``). Chaos: ``--fail W@R`` (repeatable)
makes worker W's process exit in round R; the run then says after its table which deaths were
planned, instead of Ray's notice that reads as a crash (:func:`ray_output`). ``--checkpoint-every K`` and ``--resume`` (same
``--run-dir``) continue an interrupted run. ``--address`` joins an existing Ray cluster (an address
where nothing answers fails after ``--start-timeout`` seconds).

Failures: a run that stops (a round that cannot be decoded within ``--round-timeout``, a diverging
step, a worker that raises, an unreachable cluster, a damaged checkpoint) exits with status 1 after
saying why on stderr; the rounds it completed stay in the run dir (``rounds.jsonl``, written round
by round, and ``result.json``), and with ``--json`` stdout still gets one JSON document: the
completed rounds' records with ``"error"`` and ``"error_type"`` set (``null`` for a run that
finished). Bad arguments exit with status 2. JSON output is strict: NaN and infinities are written
as ``null``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from gradcode._validation import check_choice, unreadable_file
from gradcode.experiments.cli_output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, PLOT_HELP, error, fail

DATA_ALIASES = {"synthetic": "tandon-synthetic", "amazon": "amazon-synthetic"}


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)


class O:
    """The options of ``gradcode train``, one annotated type each (flags and help), so that
    :func:`train_command`'s signature is one line an option."""

    scheme = Annotated[str, typer.Option(
        "--scheme", "--code",
        help="Code or scheme family, NAME or NAME:key=value,... (see `gradcode codes`); several, comma-"
             "separated (crc,frc,uncoded,ignore), train one after another on the same data, seed and injected "
             "delays.")]
    workers = Annotated[int, typer.Option(
        "--workers", "-n",
        help="Number of workers n (default: 4, or the n that --scheme NAME:n=N or --param n=N sets).")]
    stragglers = Annotated[int, typer.Option(
        "--stragglers", "-s",
        help="Workers delayed per round; tolerance s of codes that take one.")]
    delay = Annotated[float, typer.Option("--delay", help="Seconds each delayed worker sleeps per round.")]
    delay_model = Annotated[str, typer.Option(
        "--delay-model", "-m",
        help="Another delay model instead of the fixed delays.")]
    delay_param = Annotated[list[str], typer.Option(
        "--delay-param", "-M",
        help="key=value for --delay-model (repeatable).")]
    code_param = Annotated[list[str], typer.Option(
        "--param", "-p",
        help="key=value code/scheme parameter (repeatable).")]
    data = Annotated[str, typer.Option(
        "--data",
        help="Dataset: synthetic, amazon, breast-cancer, digits, ..., or your own FILE (.csv with --target, "
             ".npz with X and y, .svm/.libsvm).")]
    target = Annotated[str, typer.Option("--target", help="CSV files: the column to predict.")]
    standardize = Annotated[bool, typer.Option(
        "--standardize/--no-standardize",
        help="File data: centre and scale every feature with the training split's statistics (default on, as "
             "the built-in data sets are).")]
    data_param = Annotated[list[str], typer.Option("--data-param", help="key=value dataset parameter (repeatable).")]
    problem = Annotated[str, typer.Option("--problem", help="logistic, linear, softmax, mlp, cnn (default: by task).")]
    model = Annotated[str, typer.Option(
        "--model",
        help="A PyTorch model: FILE.py:NAME, package.module:NAME or a built-in (mlp, cnn, resnet18); mini-batch"
             " training with torch optimizers (--data digits, mnist:DIR, cifar10:DIR, cifar100:DIR or an .npz).")]
    batch_size = Annotated[int, typer.Option(
        "--batch-size",
        help="--model: samples per job, split over the partitions.")]
    wire_dtype = Annotated[str, typer.Option(
        "--wire-dtype",
        help="--model: float32, float64, float16 or bfloat16 messages.")]
    loss = Annotated[str, typer.Option(
        "--loss",
        help="--model: cross-entropy (class targets), mse (float targets) or FILE.py:NAME / module:NAME, a "
             "loss(output, target) returning the batch's mean (default: by the targets' type).")]
    scheduler = Annotated[str, typer.Option(
        "--scheduler",
        help="--model: the learning rate's schedule, stepped every round: step (x gamma every step_size rounds; "
             "default a third of --rounds, gamma 0.1), cosine (to 0 over --rounds), with parameters as "
             "step:step_size=10,gamma=0.5; or FILE.py:NAME, a factory optimizer -> LR scheduler.")]
    clip_grad_norm = Annotated[float, typer.Option(
        "--clip-grad-norm", help="--model: clip the decoded gradient's norm to this before each step.")]
    device = Annotated[str, typer.Option(
        "--device",
        help="--model: where the workers compute and the master steps: cpu (default), cuda or cuda:N (on Ray "
             "each worker reserves a share of the cluster's GPUs).")]
    tensorboard = Annotated[Path, typer.Option(
        "--tensorboard",
        help="--model: write TensorBoard event files under this folder (one subfolder per scheme): loss, round "
             "time, stragglers and the held-out metrics, by round.")]
    momentum = Annotated[float, typer.Option("--momentum", help="--model: SGD momentum.")]
    weight_decay = Annotated[float, typer.Option("--weight-decay", help="--model: weight decay.")]
    engine = Annotated[str, typer.Option(
        "--engine",
        help="ray (default: an embedded local cluster, or --address), or inprocess (the workers in this process"
             " on a virtual clock, no Ray; their compute as --compute says).")]
    compute = Annotated[str, typer.Option(
        "--compute",
        help="--engine inprocess: what a gradient costs on the virtual clock: calibrated (default: seconds per"
             " sample timed once at start, written in result.json's clock), SECONDS per sample (declared: the same"
             " times on any machine), or measured (each gradient's wall time here, the host's load included).")]
    load_slope = Annotated[float, typer.Option(
        "--load-slope",
        help="--scheme auto: seconds per unit of load that the search adds to the probe's times (SGC App. J's "
             "alpha; default: the injected delays' slope, fitted with --inject full, plus n x the fastest "
             "worker's own time in the probe).")]
    probe = Annotated[int, typer.Option(
        "--probe",
        help="--scheme auto: rounds trained uncoded to measure the workers before switching to the scheme "
             "predicted fastest (default 20; SGC App. K).")]
    optimizer = Annotated[str, typer.Option(
        "--optimizer",
        help="gd, nesterov or sgd; with --model sgd, adam or adamw.")]
    lr = Annotated[float, typer.Option(
        "--lr",
        help="Learning rate of gd/nesterov (default 1/L); --model: sgd 0.1, adam 1e-3.")]
    opt_param = Annotated[list[str], typer.Option("--opt-param", help="key=value optimizer parameter (repeatable).")]
    rounds = Annotated[int, typer.Option("--rounds", help="Training rounds (of each scheme).")]
    models = Annotated[int, typer.Option("--models", help="Models trained at once (round j serves model j mod M).")]
    seed = Annotated[int, typer.Option("--seed", help="Seed of the data, the code and the injected delays.")]
    fail = Annotated[list[str], typer.Option("--fail", help="W@R: worker W's process exits in round R (repeatable).")]
    checkpoint_every = Annotated[int, typer.Option("--checkpoint-every", help="Checkpoint every K rounds (0: never).")]
    resume = Annotated[bool, typer.Option("--resume", help="Continue the run in --run-dir from its checkpoint.")]
    run_dir = Annotated[Path, typer.Option(
        "--run-dir",
        help="Where the run's records go (default: a new folder under ~/.gradcode/runs, or $GRADCODE_RUNS).")]
    address = Annotated[str, typer.Option("--address", help="Join an existing Ray cluster (e.g. auto, host:port).")]
    num_cpus = Annotated[int, typer.Option("--num-cpus", help="CPUs of the embedded Ray cluster.")]
    cpus_per_worker = Annotated[float, typer.Option(
        "--cpus-per-worker",
        help="CPUs each worker reserves on the Ray cluster (Ray's num_cpus; default 0: none, and a warning when"
             " the workers outnumber the cluster's CPUs).")]
    round_timeout = Annotated[float, typer.Option(
        "--round-timeout",
        help="Give up on a round after this many seconds.")]
    start_timeout = Annotated[float, typer.Option(
        "--start-timeout",
        help="Give up joining the cluster or starting the workers after this many seconds.")]
    eval_every = Annotated[int, typer.Option(
        "--eval-every",
        help="Held-out metrics every K rounds (0: at the end only).")]
    inject = Annotated[str, typer.Option(
        "--inject",
        help="What delayed workers sleep on top of their real computation: 'excess' (default) only what the "
             "delay model adds beyond the round's fastest worker (a model without stragglers injects nothing), "
             "'full' the model's whole time.")]
    overwrite = Annotated[bool, typer.Option(
        "--overwrite",
        help="Replace the run already in --run-dir (its checkpoint and records); without it such a run-dir is "
             "refused unless --resume.")]
    close = Annotated[str, typer.Option(
        "--close",
        help="When a round ends: 'decodable' (as soon as it decodes) or a number mu, SGC's mu-rule (wait until "
             "(1 + mu) x the first whole result's time).")]
    waitout = Annotated[str, typer.Option(
        "--waitout",
        help="With --close MU, what a round the deadline leaves undecodable waits for: decodable (until it "
             "decodes) or all (every live worker: the SGC paper's rule).")]
    verify = Annotated[bool, typer.Option(
        "--verify",
        help="Wait for two results more than decoding needs and check them against each other: a worker whose "
             "result is wrong is named and left out.")]
    plot = Annotated[Path, typer.Option(
        "--plot",
        help="Draw held-out loss and AUC against wall-clock time (loss_auc_vs_time) and time per round against "
             "the injected delay (round_time_vs_delay), every scheme on the same axes. " + PLOT_HELP)]
    as_json = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]


def train_command(
    scheme: O.scheme = "crc",
    workers: O.workers = None,
    stragglers: O.stragglers = 0,
    delay: O.delay = 0.0,
    delay_model: O.delay_model = None,
    delay_param: O.delay_param = None,
    code_param: O.code_param = None,
    data: O.data = "synthetic",
    target: O.target = None,
    standardize: O.standardize = True,
    data_param: O.data_param = None,
    problem: O.problem = None,
    model: O.model = None,
    batch_size: O.batch_size = 64,
    wire_dtype: O.wire_dtype = "float32",
    loss: O.loss = None,
    scheduler: O.scheduler = None,
    clip_grad_norm: O.clip_grad_norm = None,
    device: O.device = None,
    tensorboard: O.tensorboard = None,
    momentum: O.momentum = None,
    weight_decay: O.weight_decay = None,
    engine: O.engine = "ray",
    compute: O.compute = None,
    probe: O.probe = None,
    load_slope: O.load_slope = None,
    optimizer: O.optimizer = "gd",
    lr: O.lr = None,
    opt_param: O.opt_param = None,
    rounds: O.rounds = 100,
    models: O.models = 1,
    seed: O.seed = 0,
    fail: O.fail = None,
    checkpoint_every: O.checkpoint_every = 0,
    resume: O.resume = False,
    run_dir: O.run_dir = None,
    address: O.address = None,
    num_cpus: O.num_cpus = None,
    cpus_per_worker: O.cpus_per_worker = 0.0,
    round_timeout: O.round_timeout = 120.0,
    start_timeout: O.start_timeout = 120.0,
    eval_every: O.eval_every = 1,
    inject: O.inject = "excess",
    overwrite: O.overwrite = False,
    close: O.close = "decodable",
    waitout: O.waitout = "decodable",
    verify: O.verify = False,
    plot: O.plot = None,
    as_json: O.as_json = False,
):
    """Train a model with gradient coding on Ray workers (embedded local cluster by default).

    Several schemes (--scheme crc,frc,uncoded,ignore) train in turn on the same data and delays: one table.
    """
    opts = TrainOptions(**locals())  # first, while locals() holds just the options
    if len(split_schemes(opts.scheme)) > 1:
        return train_several(opts)
    return train_one(opts)


@dataclass(frozen=True)
class TrainOptions:
    """``gradcode train``'s options by name, as typed values (what :func:`configs` turns into the
    runtime's config objects). Every field is given: the defaults are the command's own."""

    scheme: str
    workers: int | None
    stragglers: int
    delay: float
    delay_model: str | None
    delay_param: list[str] | None
    code_param: list[str] | None
    data: str
    target: str | None
    standardize: bool
    data_param: list[str] | None
    problem: str | None
    model: str | None
    batch_size: int
    wire_dtype: str
    loss: str | None
    scheduler: str | None
    clip_grad_norm: float | None
    device: str | None
    tensorboard: Path | None
    momentum: float | None
    weight_decay: float | None
    engine: str
    compute: str | None
    probe: int | None
    load_slope: float | None
    optimizer: str
    lr: float | None
    opt_param: list[str] | None
    rounds: int
    models: int
    seed: int
    fail: list[str] | None
    checkpoint_every: int
    resume: bool
    run_dir: Path | None
    address: str | None
    num_cpus: int | None
    cpus_per_worker: float
    round_timeout: float
    start_timeout: float
    eval_every: int
    inject: str
    overwrite: bool
    close: str
    waitout: str
    verify: bool
    plot: Path | None
    as_json: bool

    def replace(self, **changes) -> TrainOptions:
        return replace(self, **changes)


def train_one(o: TrainOptions) -> None:
    """One scheme's run: the table (or ``--json`` document), the planned deaths, the plots; a run
    that cannot start exits 2, one that stops exits 1 (:func:`_exit_for`)."""
    from gradcode.experiments.cli_output import emit, err, plot_files
    from gradcode.experiments.cli_sim import parse_kv, parse_scheme

    try:
        scheme, inline = parse_scheme(o.scheme)  # gc-dc:clusters=2,r=2,ssi=perfect
        code_params = {**parse_kv(o.code_param, "--param"), **inline}
        if o.workers is None:
            o = o.replace(workers=code_params.get("n", _DEFAULT_WORKERS))
        elif "n" in code_params and code_params["n"] != o.workers:  # the scheme's own n would silently win
            raise ValueError(f"{scheme}'s n={code_params['n']} and --workers/-n {o.workers} disagree: give one of them")
        if o.plot is not None:  # a path that can hold no plot is found out now, not after training
            plot_files(o.plot, PLOT_FIGURES)
        configured = configs(o, scheme, code_params)
        _note_standardized(o, configured)
        callback, finish = _progress(o.rounds, err, enabled=True)
        try:
            # Ray's driver prints some cluster messages (raylet warnings) to sys.stdout: keep
            # stdout for the one JSON document / table
            with contextlib.redirect_stdout(ray_output(planned_failures=bool(o.fail))):
                result = run_configured(configured, callback)
        finally:
            finish()
    except (Exception, KeyboardInterrupt) as exc:
        _exit_for(exc, o.as_json)
        raise
    # the result first: a finished run is never lost to an error while plotting
    if o.as_json:
        emit(result.to_json(), as_json=True)
    else:
        emit({"rows": summary_rows(result)}, as_json=False, title=f"gradcode train ({result.run_dir})")
    if o.fail:
        report_deaths(result, err)
    if o.plot is not None:
        try:
            for path in write_plots(result, o.plot):
                err.print(f"wrote {path}")
        except OSError as exc:
            error(f"plots not written to {o.plot}: {exc} (the run's records are in {result.run_dir})")
            raise typer.Exit(1) from None


def _exit_for(exc: BaseException, as_json: bool) -> None:
    """Exit as a run that failed should (returns for a bug, which the caller re-raises): 130
    after SIGINT, 2 for bad arguments refused before the run started (or a missing extra), 1 for
    a run that stopped (a round timeout, divergence, the cluster, a checkpoint), each after saying
    why; with ``--json`` the document holds the completed rounds."""
    from gradcode.errors import GradcodeError
    from gradcode.experiments.cli_output import emit, err

    started = getattr(exc, "result", None) is not None  # train() attaches the completed rounds
    if isinstance(exc, KeyboardInterrupt):
        _fail(exc, EXIT_INTERRUPTED, as_json, err)
    if isinstance(exc, (ValueError, TypeError, FileNotFoundError, ImportError)) and not started:
        _fail(exc, EXIT_USAGE, as_json, err)
    if isinstance(exc, GradcodeError):
        _fail(exc, EXIT_FAILED, as_json, err)
    if as_json and started:  # a bug: its traceback, after the run's records
        emit(exc.result.to_json(), as_json=True)


def _note_standardized(o: TrainOptions, configured) -> None:
    """Say on stderr that the features of a data file are standardised (or not): it changes what
    the model sees, so the run states it."""
    from gradcode.experiments.cli_output import note

    if isinstance(configured, tuple) and configured[0].data == "file":
        how = ("standardized with the training split's mean and deviation (--no-standardize: as read)"
               if o.standardize else "used as read (not standardized)")
        note(f"{o.data}: features {how}")


#: workers when neither --workers nor the scheme sets n
_DEFAULT_WORKERS = 4


def run_configured(configured, callback):
    """Run what :func:`configs` made: the runtime's config objects through :func:`gradcode.train`,
    or a torch model's through :func:`gradcode.torch.fit`; returns the run's ``TrainResult``."""
    if isinstance(configured, TorchRun):
        from gradcode.experiments.cli_output import note
        from gradcode.torch import fit

        board = None
        if configured.tensorboard is not None:
            from gradcode.torch import TensorBoard

            board = TensorBoard(configured.tensorboard)
            inner = callback

            def callback(record, inner=inner):  # both: the progress line and the event files
                board(record)
                if inner is not None:
                    inner(record)
        try:
            res = fit(configured.model, configured.data, configured.spec, torch_config=configured.torch_config,
                      run=configured.run, faults=configured.faults, cluster=configured.cluster,
                      engine=configured.engine, callback=callback)
        finally:
            if board is not None:
                board.close()
        if res.auto is not None:
            c = res.auto["chosen"]
            note(f"auto: after {res.auto['probe_rounds']} uncoded rounds switched to {c['scheme']} (predicted"
                 f" {c['predicted_total']:.3g} s for the {res.auto['jobs']} jobs left; candidates: "
                 + ", ".join(f"{x['scheme']} {x['params']} {x['time']:.3g} s" for x in res.auto["candidates"][:4])
                 + f"; search {1e3 * res.auto['search_seconds']:.3g} ms; load slope {res.auto['alpha']:.4g} s per unit"
                 f" load, {res.auto['alpha_from']})")
            if "ran_total" in res.auto:
                error = round(100 * res.auto["predicted_error"], 1) + 0.0  # no "-0.0"
                note(f"auto: the rounds after the switch took {res.auto['ran_total']:.3g} s, the prediction's error"
                     f" {error:+.1f} %" + (f": {res.auto['off_because']}" if "off_because" in res.auto else ""))
        return res.result
    from gradcode.runtime import train

    spec, cluster, faults, run, engine = configured
    return train(spec, cluster=cluster, faults=faults, run=run, engine=engine, callback=callback)


def _delay_model(o: TrainOptions):
    """``(--delay-model, its --delay-param)``, or None."""
    from gradcode.experiments.cli_sim import parse_kv

    if o.delay_model is not None:
        return o.delay_model, parse_kv(o.delay_param, "--delay-param")
    if o.delay_param:
        raise ValueError("--delay-param sets a parameter of --delay-model, which is not given;"
                         " add --delay-model NAME (gradcode models lists them)")
    return None


def _shared_configs(o: TrainOptions, run_dir):
    """The config objects every run of ``o`` shares: ``(ClusterConfig, FaultConfig, RunConfig)``."""
    from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig

    if o.resume and o.run_dir is None:  # the default run dir is a new timestamped folder
        raise ValueError("--resume needs --run-dir: the folder of the run to continue")
    cluster = ClusterConfig(address=o.address, num_cpus=o.num_cpus, start_timeout=o.start_timeout,
                            worker_cpus=o.cpus_per_worker)
    faults = FaultConfig(fail=tuple(o.fail or ()), round_timeout=o.round_timeout)
    run = RunConfig(rounds=o.rounds, checkpoint_every=o.checkpoint_every,
                    run_dir=o.run_dir if run_dir is None else run_dir, eval_every=o.eval_every,
                    resume=o.resume, overwrite=o.overwrite)
    return cluster, faults, run


def configs(o: TrainOptions, code: str, code_params: dict, *, run_dir=None):
    """The config objects ``(TrainSpec, ClusterConfig, FaultConfig, RunConfig, engine)`` of
    ``gradcode train``'s options ``o`` for the scheme ``code`` with ``code_params``, or with
    ``--model`` a :class:`TorchRun` (:func:`torch_configs`); ``run_dir`` (several schemes: each
    its subfolder) replaces ``--run-dir``. Refuses the options that would otherwise be silently
    dropped."""
    from gradcode.experiments.cli_sim import parse_close, parse_kv
    from gradcode.runtime import ENGINES, TrainSpec

    check_choice("--engine", o.engine, ENGINES)
    if o.model is not None:
        return torch_configs(o, code, code_params, run_dir=run_dir)
    if code == "auto":
        raise ValueError("--scheme auto switches the workers' partitions mid-run, which needs every worker to hold"
                         " the whole data set: it trains torch models (--model); the built-in problems keep"
                         " only their partitions")
    torch_only = [flag for flag, key, default in TORCH_ONLY if getattr(o, key) != default]
    if torch_only:
        raise ValueError(f"{', '.join(torch_only)} go with --model (a PyTorch model); the built-in problems train"
                         " full-batch with --optimizer gd|nesterov|sgd")
    data_name, data_params = _data_source(o.data, o.target, parse_kv(o.data_param, "--data-param"))
    if data_name == "file" and not o.standardize:
        data_params["standardize"] = False
    elif not o.standardize:
        raise ValueError("--no-standardize is for data files; the built-in data sets come prepared")
    opt_params = parse_kv(o.opt_param, "--opt-param")
    if o.lr is not None:
        opt_params["lr"] = o.lr
    spec = TrainSpec(code, workers=o.workers, stragglers=o.stragglers, delay=o.delay, delay_model=_delay_model(o),
                     code_params=code_params or None, data=data_name, data_params=data_params, problem=o.problem,
                     optimizer=o.optimizer, optimizer_params=opt_params, models=o.models, seed=o.seed,
                     verify=o.verify, inject=o.inject, close=parse_close(o.close), waitout=o.waitout)
    return (spec, *_shared_configs(o, run_dir), _engine(o))


def _engine(o: TrainOptions):
    """``--engine``, or with ``--compute`` the in-process engine on that clock."""
    if o.compute is None:
        return o.engine
    if o.engine != "inprocess":
        raise ValueError("--compute sets the virtual clock of --engine inprocess; on Ray the workers really compute")
    from gradcode.runtime.inprocess import ComputeCost, InProcessEngine

    if o.compute in ("calibrated", "measured"):
        return InProcessEngine(compute_time=o.compute)
    try:
        seconds = float(o.compute)
    except ValueError:
        raise ValueError(f"--compute takes calibrated, measured or seconds per sample, got {o.compute!r}") from None
    return InProcessEngine(compute_time=ComputeCost(per_sample=seconds))


#: options that only a torch model takes: (flag, option name, default)
TORCH_ONLY = (("--batch-size", "batch_size", 64), ("--wire-dtype", "wire_dtype", "float32"),
              ("--momentum", "momentum", None), ("--weight-decay", "weight_decay", None),
              ("--probe", "probe", None), ("--load-slope", "load_slope", None), ("--loss", "loss", None),
              ("--scheduler", "scheduler", None),
              ("--clip-grad-norm", "clip_grad_norm", None), ("--device", "device", None),
              ("--tensorboard", "tensorboard", None))


@dataclass(frozen=True)
class TorchRun:
    """A ``gradcode train --model`` run: :func:`gradcode.torch.fit`'s arguments."""

    model: object
    data: object
    spec: object
    torch_config: object
    cluster: object
    faults: object
    run: object
    engine: str
    #: TensorBoard event files' folder (None: none written)
    tensorboard: Path | None = None


def torch_configs(o: TrainOptions, code: str, code_params: dict, *, run_dir=None) -> TorchRun:
    """``gradcode train --model M``: :func:`gradcode.torch.fit`'s arguments. ``--data`` is
    ``digits`` (the default ``synthetic`` means it here), ``mnist:DIR``, ``cifar10:DIR``,
    ``cifar100:DIR`` or an ``.npz`` of ``X`` and ``y``; ``--optimizer`` ``sgd`` (``gd`` is plain
    SGD, ``nesterov`` SGD with Nesterov momentum 0.9), ``adam`` or ``adamw``."""
    from gradcode.experiments.cli_sim import parse_close
    from gradcode.runtime import TrainSpec
    from gradcode.torch import TorchConfig, load_data
    from gradcode.torch.data import from_path

    refused = [flag for flag, key, default in (("--verify", "verify", False), ("--problem", "problem", None),
                                               ("--target", "target", None),
                                               ("--data-param", "data_param", None),
                                               ("--no-standardize", "standardize", True))
               if getattr(o, key) not in (default, [], ())]
    if refused:
        raise ValueError(f"{', '.join(refused)} cannot be used with --model yet (torch models train from the"
                         " options --data, --batch-size, --optimizer, --lr, --momentum, --weight-decay, --wire-dtype,"
                         " --loss, --scheduler, --clip-grad-norm, --device)")
    if o.device is not None:
        from gradcode.torch.problem import check_device

        check_device(o.device)  # before the data are read and a run starts
    data = "digits" if o.data == "synthetic" else o.data
    train_data, test_data = load_data(data, seed=o.seed)
    name = {"gd": "sgd", "nesterov": "sgd"}.get(o.optimizer, o.optimizer)
    spec = TrainSpec(code=code, workers=o.workers, stragglers=o.stragglers, delay=o.delay,
                     delay_model=_delay_model(o), code_params=code_params or None, models=o.models, seed=o.seed,
                     close=parse_close(o.close), waitout=o.waitout, inject=o.inject)
    torch_config = TorchConfig(optimizer=name, optimizer_params=_torch_optimizer_params(o, name),
                               batch_size=o.batch_size, wire_dtype=o.wire_dtype, eval_data=test_data,
                               probe=o.probe if code == "auto" else None,
                               load_slope=o.load_slope if code == "auto" else None, loss=resolve_loss(o.loss),
                               scheduler=resolve_scheduler(o.scheduler, o.rounds),
                               clip_grad_norm=o.clip_grad_norm, device=o.device)
    board = None
    if o.tensorboard is not None:
        label = re.sub(r"[^\w.=,-]+", "_", code + ("-" + ",".join(f"{k}={v}" for k, v in sorted(code_params.items()))
                                                 if code_params else ""))
        board = Path(o.tensorboard) / label
    # the workers read the data themselves (each keeping its partitions), not a copy shipped to each
    return TorchRun(resolve_model(o.model, train_data), from_path(data, o.seed), spec, torch_config,
                    *_shared_configs(o, run_dir), _engine(o), board)


#: --loss's names
LOSSES = ("cross-entropy", "mse")
#: --scheduler's names and their defaults (``rounds``: the run's rounds)
SCHEDULERS = ("step", "cosine")


def resolve_loss(spec: str | None):
    """``--loss``: None (by the targets), ``cross-entropy``, ``mse`` or ``FILE.py:NAME`` /
    ``module:NAME`` naming a ``loss(output, target)``."""
    import torch.nn.functional as F

    if spec is None:
        return None
    if ":" not in spec:
        check_choice("--loss", spec, LOSSES)
        return F.cross_entropy if spec == "cross-entropy" else F.mse_loss
    return load_object(spec, "--loss")


def resolve_scheduler(spec: str | None, rounds: int):
    """``--scheduler``: ``step`` (``StepLR``: ``step_size`` default a third of the rounds, ``gamma``
    0.1), ``cosine`` (``CosineAnnealingLR``: ``T_max`` default the rounds), each with parameters
    as ``step:step_size=10,gamma=0.5``; or ``FILE.py:NAME`` / ``module:NAME``, a factory
    ``optimizer -> LR scheduler``. The schedulers step once a round (every optimizer step)."""
    import functools

    from gradcode.experiments.cli_sim import parse_kv

    if spec is None:
        return None
    head, _, rest = spec.partition(":")
    if rest and (head.endswith(".py") or "." in head or "/" in head or "=" not in rest):
        return load_object(spec, "--scheduler")
    check_choice("--scheduler", head, SCHEDULERS)
    params = parse_kv(rest.split(",") if rest else [], "--scheduler")
    import torch

    if head == "step":
        params.setdefault("step_size", max(1, rounds // 3))
        params.setdefault("gamma", 0.1)
        cls = torch.optim.lr_scheduler.StepLR
    else:
        params.setdefault("T_max", rounds)
        cls = torch.optim.lr_scheduler.CosineAnnealingLR
    from gradcode._validation import check_int, check_real

    try:
        for key, value in params.items():  # numbers of the right kind, before a round runs
            if key in ("step_size", "T_max"):
                params[key] = check_int(key, value, minimum=1)
            elif key in ("gamma", "eta_min"):
                params[key] = check_real(key, value, minimum=0.0)
        cls(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), **params)  # unknown parameters
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--scheduler {spec}: {exc}") from None
    return functools.partial(cls, **params)


def _torch_optimizer_params(o: TrainOptions, name: str) -> dict:
    """The torch optimizer's parameters from ``--lr``, ``--momentum``, ``--weight-decay`` and
    ``--opt-param`` (``lr`` 0.1 for SGD, 1e-3 for Adam by default)."""
    from gradcode.experiments.cli_sim import parse_kv

    params = parse_kv(o.opt_param, "--opt-param")
    params.setdefault("lr", o.lr if o.lr is not None else (0.1 if name == "sgd" else 1e-3))
    if o.optimizer == "nesterov":
        params.update(nesterov=True, momentum=o.momentum if o.momentum is not None else 0.9)
    elif o.momentum is not None:
        if name != "sgd":
            raise ValueError(f"--momentum is SGD's; --optimizer {o.optimizer} has its own betas (--opt-param)")
        params["momentum"] = o.momentum
    if o.weight_decay is not None:
        params["weight_decay"] = o.weight_decay
    return params


def resolve_model(spec: str, train_data):
    """``--model``: a built-in name (sized from the data: inputs, image shape, classes), or
    ``FILE.py:NAME`` / ``package.module:NAME`` naming an ``nn.Module`` class or a factory, called
    with no arguments."""
    import functools

    from gradcode.torch import make_model

    X, y = train_data
    if ":" not in spec:
        n_out = int(y.max()) + 1 if not y.is_floating_point() else (1 if y.ndim == 1 else int(y.shape[1]))
        image_shape = tuple(X.shape[1:]) if X.ndim == 4 else None
        make_model(spec, n_in=int(X[0].numel()), n_out=n_out, image_shape=image_shape)  # a bad name, now
        # a factory: fit builds it under the run's seed, so every scheme starts from the same weights
        return functools.partial(make_model, spec, n_in=int(X[0].numel()), n_out=n_out, image_shape=image_shape)
    return load_object(spec, "--model")


def load_object(spec: str, flag: str):
    """``FILE.py:NAME`` or ``package.module:NAME``: the callable it names (a user's file is imported
    under a name of its own and travels to Ray's workers by value)."""
    import importlib
    import importlib.util
    import os

    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        problem = unreadable_file(where)
        if problem:
            raise ValueError(f"{flag} {spec}: {where} is {problem}" if problem != "no such file"
                             else f"{flag} {spec}: no such file {where}")
        mod_name = f"gradcode_user_file_{abs(hash(os.path.abspath(where)))}"
        module = sys.modules.get(mod_name)
        if module is None:
            loader = importlib.util.spec_from_file_location(mod_name, where)
            module = importlib.util.module_from_spec(loader)
            sys.modules[mod_name] = module  # Ray's workers get it by value (gradcode.torch.fit)
            try:
                loader.loader.exec_module(module)
            except Exception as exc:  # the user's file: its error, named, not our traceback
                del sys.modules[mod_name]
                raise ValueError(f"{flag} {spec}: importing {where} raised {type(exc).__name__}: {exc}") from None
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ValueError(f"{flag} {spec}: cannot import {where}: {exc}") from None
    obj = getattr(module, name, None)
    if obj is None or not callable(obj):
        raise ValueError(f"{flag} {spec}: {where} has no class or function {name!r}")
    return obj


def _data_source(data: str, target: str | None, params: dict) -> tuple[str, dict]:
    """``--data``: a dataset name (aliases resolved) or a path to the user's own file, which
    becomes the ``file`` dataset (``path``, and ``target`` for CSV):
    :func:`~gradcode.problems.files.data_source`."""
    from gradcode.problems.files import data_source

    name, params = data_source(DATA_ALIASES.get(data, data), params)
    if name != "file" and target is not None:
        raise ValueError(f"--target names the column to predict in a CSV file; --data {data} is a dataset name")
    if target is not None:
        params["target"] = target
    return name, params


def _fail(exc: BaseException, code: int, as_json: bool, err) -> None:
    """Report a run that could not start, stopped or was interrupted, and exit with ``code``
    (:func:`~gradcode.experiments.cli_output.fail`): with ``--json`` the document holds the records
    of the completed rounds when the run started, else just the error."""
    from rich.markup import escape

    result = getattr(exc, "result", None)
    if result is not None:
        err.print(f"{result.round_times.size} completed round(s) kept in {escape(str(result.run_dir))}",
                  highlight=False)
    fail(exc, code, as_json=as_json, doc=result.to_json() if result is not None else None)


def summary_rows(result) -> list[dict]:
    """One row per model, its keys in snake_case with their unit (the same keys in the table and
    in ``--json``): ``time_s`` (total training time), ``round_ms`` (median round),
    ``stragglers_per_round`` (mean), ``faults`` (each worker death, non-finite or dropped result
    once, however many tasks it failed), ``waitouts`` (rounds waited out, ``--close MU`` only),
    ``loss`` (final training objective) and the last held-out ``test_loss``, ``accuracy`` and
    ``roc_auc``."""
    import numpy as np

    rows = []
    last = {}
    for m in result.metrics:
        last[m["model"]] = m
    strag = result.stragglers
    for m, _ in enumerate(result.params):
        met = last.get(m, {})
        rows.append({
            "scheme": result.config["code"] + (f"/{m}" if len(result.params) > 1 else ""),
            "rounds": int(result.round_times.size),
            "time_s": float(result.round_times.sum()),
            "round_ms": 1e3 * float(np.median(result.round_times)),
            "stragglers_per_round": float(strag.sum(axis=1).mean()),
            "faults": len(result.faults),
            **({} if result.config.get("close", "decodable") == "decodable"
               else {"waitouts": int(result.waitouts.sum())}),
            "loss": float(result.losses[-1, m]),
            "test_loss": met.get("loss"),
            "accuracy": met.get("accuracy"),
            "roc_auc": met.get("roc_auc"),
        })
    return rows


def _progress(rounds: int, console, *, enabled: bool):
    """A rich progress bar on stderr fed by train()'s per-round callback."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if not enabled:
        return None, lambda: None
    progress = Progress(
        TextColumn("training"), BarColumn(), TextColumn("{task.completed}/{task.total} rounds"),
        TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console, transient=False,
    )
    task = progress.add_task("train", total=rounds, info="")
    progress.start()

    def callback(record):
        loss = record["loss"]
        loss = loss if isinstance(loss, float) else min(loss)
        progress.update(task, completed=record["round"] + 1,
                        info=f"loss {loss:.4g}  round {record['time'] * 1e3:.0f} ms")

    return callback, progress.stop


def write_plots(result, plot: Path) -> list[Path]:
    """``--plot`` of one run: loss and AUC against wall-clock time (Tandon Fig. 7) and time per
    round against the round's largest injected delay (Tandon Fig. 5: uncoded follows
    ``time = delay``, coded stays flat), at the paths :func:`~gradcode.experiments.cli_output.plot_files`
    gives; a folder also gets ``train_summary.json`` and ``round_times.npy``."""
    import numpy as np

    from gradcode.experiments.cli_output import plot_files

    paths = write_comparison_plots([{"spec": result.config["code"], "exact": True}], [result],
                                   plot_files(plot, PLOT_FIGURES))
    if paths[0].parent == Path(plot):  # a folder, not a .png path
        (Path(plot) / "train_summary.json").write_text(json.dumps(summary_rows(result), indent=1))
        np.save(Path(plot) / "round_times.npy", result.round_times)
    return paths


# ------------------------------------------------------------------------- Ray's messages during a run

#: what Ray's raylet tells the driver for every worker process that exits while running a task,
#: the planned exits of --fail included ("... unexpected system error ... OOM killer ...")
RAY_DEATH_NOTICE = "A worker died or was killed while executing a task by an unexpected system error"


class _WithoutDeathNotices(io.TextIOBase):
    """A text stream that passes everything to ``stream`` except Ray's worker-death notices
    (and the newline ``print`` writes after each)."""

    def __init__(self, stream):
        self.stream = stream
        self._dropped = False

    def write(self, text: str) -> int:
        if RAY_DEATH_NOTICE in text:
            self._dropped = True
            return len(text)
        if self._dropped and text == "\n":  # print's end of the dropped line
            self._dropped = False
            return len(text)
        self._dropped = False
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def ray_output(*, planned_failures: bool):
    """Where Ray's driver prints during a run (it writes cluster messages to ``sys.stdout``, which
    the CLI keeps for the table or the JSON document): stderr. In a run with ``--fail`` Ray's
    notice for each worker that died, which reads as a crash (SIGSEGV, the OOM killer), is left
    out: the planned exits cause them, and :func:`report_deaths` says after the table which deaths
    were planned and gives Ray's account of any that were not. Without ``--fail`` every notice is
    kept (a worker died for a real reason)."""
    return _WithoutDeathNotices(sys.stderr) if planned_failures else sys.stderr


def report_deaths(result, err, prefix: str = "") -> None:
    """One stderr line per worker death of a run with ``--fail``: planned, or not (with Ray's error)."""
    from rich.markup import escape

    for f in result.faults:
        if f.get("kind") != "died":
            continue
        why = "planned by --fail" if f.get("injected") else f"not planned: {f.get('error')}"
        err.print(escape(f"{prefix}worker {f['worker']} died in round {f['round']} ({why}); recovery:"
                         f" {f.get('recovery')}"), highlight=False, soft_wrap=True)


# ------------------------------------------------------------------------- several schemes side by side

#: figures of ``--plot``: the first is the main one (a ``.png`` path names its file)
PLOT_FIGURES = ["loss_auc_vs_time", "round_time_vs_delay"]


def split_schemes(text: str) -> list[str]:
    """``"crc,frc,gc-dc:clusters=2,r=2"`` -> ``["crc", "frc", "gc-dc:clusters=2,r=2"]``: a comma
    starts a new scheme unless a ``key=`` follows it (a parameter of the scheme before) or it sits
    inside brackets (a JSON value: ``assignment=[[0,1],[2,3]]``)."""
    import re

    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0 and not re.match(r"\s*[A-Za-z_][\w-]*\s*=", text[i + 1:]):
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _subfolder(spec: str, taken: set) -> str:
    """A folder name for one scheme's run under ``--run-dir`` (``gc-dc_clusters=2_r=2``)."""
    import re

    name = re.sub(r"[^\w.=-]+", "_", spec).strip("_") or "scheme"
    base, i = name, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    taken.add(name)
    return name


def train_several(o: TrainOptions) -> None:
    """``gradcode train --scheme crc,frc,uncoded,ignore``: each scheme trained in turn on the same
    data, seed (initial parameters, code randomness) and injected delays (the delay model's draw
    depends on the seed and ``n`` only), one :func:`gradcode.runtime.train` call each; then one
    table (a row per scheme: exact or not, rounds, wall-clock, mean stragglers ignored per round,
    final loss, held-out metrics, speed-up over ``uncoded`` when it ran), or with ``--json`` one
    document with every run, and with ``--plot`` loss and AUC against wall-clock time of all the
    schemes on the same axes (Tandon et al. Figs. 5-7). With ``--run-dir D`` each run goes to its
    own ``D/<scheme>``. Every scheme is built before the first run starts, so a bad name or
    parameter is refused up front; a run that stops (round timeout, a cluster error) is reported
    in its row and the others still run (exit status 1)."""
    from gradcode.experiments.cli_output import err
    from gradcode.errors import GradcodeError

    try:
        o, runs, pngs = _plan_runs(o)
        session = _session(o)
    except (ValueError, TypeError, FileNotFoundError, ImportError, GradcodeError) as exc:
        _fail(exc, EXIT_USAGE, o.as_json, err)
    # Ray prints its notices (a worker's death) to sys.stdout whenever they come, also between
    # two runs: stdout is kept for the table or the JSON document while the session lasts
    with contextlib.redirect_stdout(ray_output(planned_failures=bool(o.fail))), contextlib.ExitStack() as stack:
        try:
            stack.enter_context(session)
        except GradcodeError as exc:  # no cluster at --address, Ray could not start: nothing ran
            _fail(exc, EXIT_FAILED, o.as_json, err)
        results, errors = _run_each(runs, o)
    _report_several(runs, results, errors, pngs, o)


def _session(o: TrainOptions):
    """One Ray session for every scheme of ``train_several`` (:func:`~gradcode.runtime.engine.ray_session`:
    Ray starts once, not once a scheme), or nothing to open for ``--engine inprocess``."""
    if o.engine != "ray":
        return contextlib.nullcontext()
    from gradcode.runtime import ClusterConfig
    from gradcode.runtime.engine import ray_session

    cluster = ClusterConfig(address=o.address, num_cpus=o.num_cpus, start_timeout=o.start_timeout)
    return ray_session(cluster, run_dir=o.run_dir)


def _plan_runs(o: TrainOptions) -> tuple[TrainOptions, list[dict], list[Path] | None]:
    """``(options, runs, plot files)`` of ``train_several``: each scheme built and its config
    objects made (so that a bad one is refused before anything runs); the options' ``workers`` is
    the n the schemes share when ``-n`` is absent."""
    from gradcode.experiments.cli_output import plot_files
    from gradcode.experiments.cli_sim import params_per_scheme, parse_kv, parse_scheme
    from gradcode.runtime import build_scheme

    plot, run_dir = o.plot, o.run_dir
    specs = split_schemes(o.scheme)
    if len(set(specs)) < len(specs):
        raise ValueError(f"--scheme {o.scheme} names a scheme twice")
    if run_dir is not None and run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--run-dir {run_dir} is a file; give a folder (each scheme gets a subfolder)")
    pngs = plot_files(plot, PLOT_FIGURES) if plot is not None else None
    parsed = [parse_scheme(spec) for spec in specs]
    params_of = params_per_scheme(parse_kv(o.code_param, "--param"), parsed)
    if o.workers is None:  # n from the schemes that set one (they must agree), else the default
        own = sorted({p["n"] for p in params_of if "n" in p})
        if len(own) > 1:
            raise ValueError(f"the schemes set different n ({', '.join(map(str, own))}); they are compared on"
                             " the same workers: give one -n")
        o = o.replace(workers=own[0] if own else _DEFAULT_WORKERS)
    runs, taken = [], set()
    for spec, (name, _), params in zip(specs, parsed, params_of):
        if name == "auto":  # chosen during the run (torch models): refused below without --model
            configured = configs(o, name, params, run_dir=None if run_dir is None else run_dir / _subfolder(spec, taken))
            runs.append({"spec": spec, "name": name, "params": params, "configs": configured, "exact": True})
            continue
        built = build_scheme(name, workers=o.workers, stragglers=o.stragglers, seed=o.seed,
                             code_params=params or None, verify=o.verify)
        if built.n != o.workers:  # same injected delays need the same n
            raise ValueError(f"{spec} has n = {built.n} but --workers is {o.workers}: the schemes are"
                             " compared on the same workers; leave n to --workers")
        code = getattr(built, "static_code", None)
        configured = configs(o, name, params, run_dir=None if run_dir is None else run_dir / _subfolder(spec, taken))
        runs.append({"spec": spec, "name": name, "params": params, "configs": configured,
                     "exact": bool(getattr(code, "exact", True)) if code is not None else True})
    return o, runs, pngs


def _run_each(runs: list[dict], o: TrainOptions) -> tuple[list, list]:
    """Train each run in turn: ``(results, errors)``, a result (``None`` when nothing ran) and an
    error text (``None`` when it finished) per run. A run that stops is reported and the next one
    starts; when the first run fails before any round, the command stops as a single run would."""
    from rich.markup import escape

    from gradcode.experiments.cli_output import err
    from gradcode.errors import GradcodeError

    results, errors = [], [None] * len(runs)
    for i, r in enumerate(runs):
        err.print(f"[{i + 1}/{len(runs)}] {escape(r['spec'])}", highlight=False)
        callback, finish = _progress(o.rounds, err, enabled=True)
        try:
            with contextlib.redirect_stdout(ray_output(planned_failures=bool(o.fail))):
                result = run_configured(r["configs"], callback)
        except Exception as exc:
            result = getattr(exc, "result", None)  # the rounds a stopped run completed
            bad_args = isinstance(exc, (ValueError, TypeError, FileNotFoundError, ImportError))
            if not results and result is None and (bad_args or isinstance(exc, GradcodeError)):
                _fail(exc, EXIT_USAGE if bad_args else EXIT_FAILED, o.as_json, err)  # nothing ran: as a single run would
            if not isinstance(exc, (GradcodeError, ValueError, TypeError, FileNotFoundError, ImportError)):
                raise  # a bug: its traceback (the finished runs' records are in their run dirs)
            error(f"{r['spec']}: {exc}")
            errors[i] = f"{type(exc).__name__}: {exc}"
        finally:
            finish()
        results.append(result)
        if result is not None:
            err.print(f"records in {escape(str(result.run_dir))}", highlight=False)
    return results, errors


def _report_several(runs: list[dict], results: list, errors: list, pngs: list[Path] | None, o: TrainOptions) -> None:
    """The table (or ``--json`` document) of ``train_several``, the planned deaths, the plots;
    exit status 1 when a run stopped or the plots could not be written."""
    from gradcode.experiments.cli_output import emit, err

    rows = comparison_rows(runs, results, errors)
    written, plot_error = [], None
    if pngs is not None and any(res is not None for res in results):
        try:  # before printing, so that the document names the files written; the records are saved
            written = write_comparison_plots(runs, results, pngs)
        except Exception as exc:  # noqa: BLE001 - a plot never loses the printed result
            plot_error = f"plots not written to {o.plot}: {type(exc).__name__}: {exc}"
    if o.as_json:
        doc = {"schemes": [r["spec"] for r in runs], "rows": rows, "plots": [str(p) for p in written],
               "runs": [dict(res.to_json(), scheme=r["spec"], exact=r["exact"]) if res is not None
                        else {"scheme": r["spec"], "exact": r["exact"], "error": e}
                        for r, res, e in zip(runs, results, errors)]}
        emit(doc, as_json=True)
    else:
        columns = [c for c in rows[0] if any(row.get(c) is not None for row in rows)] if rows else None
        emit({"rows": rows}, as_json=False, columns=columns,
             title=f"gradcode train: {len(runs)} schemes, same data, seed and injected delays")
    if o.fail:
        for r, res in zip(runs, results):
            if res is not None:
                report_deaths(res, err, prefix=f"{r['spec']}: ")
    for p in written:
        err.print(f"wrote {p}", highlight=False)
    if plot_error is not None:
        error(plot_error)
    if any(errors) or plot_error is not None:
        raise typer.Exit(1)


def comparison_rows(runs: list[dict], results: list, errors: list) -> list[dict]:
    """One row per run (per model with ``--models``): :func:`summary_rows` named by the scheme as
    given, with ``gradient`` (``exact``, or ``estimate`` for ``ignore``), the speed-up over
    ``uncoded`` (the ratio of total times) when it ran, and ``error`` (the kind of error that
    stopped a run)."""
    rows, model_of, base = [], [], {}
    for r, res, e in zip(runs, results, errors):
        if res is None or res.round_times.size == 0:  # nothing ran, or it stopped in its first round
            error = e.partition(":")[0] if e else getattr(res, "error_type", None)
            rows.append({"scheme": r["spec"], "gradient": "exact" if r["exact"] else "estimate", "error": error})
            model_of.append(None)
            continue
        for i, row in enumerate(summary_rows(res)):
            suffix = f"/{i}" if len(res.params) > 1 else ""
            row = {"scheme": r["spec"] + suffix, "gradient": "exact" if r["exact"] else "estimate", **{
                k: v for k, v in row.items() if k != "scheme"}}
            if res.error is not None:
                row["error"] = res.error_type
            elif r["name"] == "uncoded":  # the baseline of model i: a run that stopped is none
                base.setdefault(i, row["time_s"])
            rows.append(row)
            model_of.append(i)
    for row, i in zip(rows, model_of):
        if i is not None:
            b = base.get(i)
            row["speedup"] = b / row["time_s"] if b and row["time_s"] > 0 else None
    return rows


def write_comparison_plots(runs: list[dict], results: list, paths: list[Path]) -> list[Path]:
    """Every run on the same axes: held-out loss and ROC AUC (accuracy where the problem has no
    AUC) against wall-clock time (Tandon Figs. 6-7), and time per round against the round's largest
    injected delay (Fig. 5), drawn only when that delay varies. Inexact schemes are labelled so;
    each run has its own line style and marker. Returns the files written."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gradcode.experiments.cli_output import make_parents

    make_parents(paths)
    drawn = [(r["spec"] + ("" if r["exact"] else " (inexact)"), res) for r, res in zip(runs, results)
             if res is not None]
    score = next((k for k in ("roc_auc", "accuracy") if any(k in m for _, res in drawn for m in res.metrics)),
                 None)
    fig, axes = plt.subplots(1, 2 if score else 1, figsize=(11 if score else 5.5, 4), squeeze=False)
    axes = axes[0]
    # exact schemes reach the same iterates: a line style and marker each keeps identical curves
    # apart (drawn over each other, only the last would show)
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"), ((0, (1, 2)), "x")]
    k = 0
    for label, res in drawn:
        for m in range(len(res.params)):
            pts = [x for x in res.metrics if x["model"] == m]
            if not pts:
                continue
            name = label + (f" model {m}" if len(res.params) > 1 else "")
            t = [x["elapsed"] for x in pts]
            ls, mk = styles[k % len(styles)]
            k += 1
            style = dict(linestyle=ls, marker=mk, markersize=4, markerfacecolor="none", label=name)
            (line,) = axes[0].plot(t, [x["loss"] for x in pts], **style)
            if score and score in pts[0]:
                axes[1].plot(t, [x[score] for x in pts], color=line.get_color(), **style)
    axes[0].set(xlabel="wall-clock time (s)", ylabel="held-out loss", title="loss vs time")
    if score:
        what = "ROC AUC" if score == "roc_auc" else "accuracy"
        axes[1].set(xlabel="wall-clock time (s)", ylabel=f"held-out {what}", title=f"{what} vs time")
    for ax in axes:
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths[0], dpi=120)
    plt.close(fig)

    injected = np.concatenate([res.injected.max(axis=1) for _, res in drawn]) if drawn else np.zeros(0)
    if injected.size == 0 or np.ptp(injected) == 0:  # one delay for every round: a column of points says nothing
        from gradcode.experiments.cli_output import note

        note(f"{paths[1].name} not drawn: every round had the same injected delay"
             f" ({float(injected.max(initial=0.0)):g} s); it plots time per round against a delay that varies")
        return [paths[0]]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    top = 0.0
    for label, res in drawn:
        injected = res.injected.max(axis=1)
        ax.scatter(injected, res.round_times, s=12, label=label)
        top = max(top, float(injected.max(initial=0.0)), float(res.round_times.max(initial=0.0)))
    ax.plot([0, top], [0, top], "k--", lw=0.8, label="time = delay")
    ax.set(xlabel="largest injected delay in the round (s)", ylabel="time per round (s)",
           title="time per round vs injected delay")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths[1], dpi=120)
    plt.close(fig)
    return list(paths)
