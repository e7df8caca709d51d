"""``gradcode train``: real training with gradient coding on Ray (embedded cluster by default).

    gradcode train --scheme crc --workers 12 --stragglers 2 --delay 0.5 --rounds 100 --seed 0

runs :func:`gradcode.train`: ``--stragglers S`` random workers sleep ``--delay`` extra seconds in
every round (Tandon et al. Sec. 5; the ``fixed`` delay model with ``base=0``) unless
``--delay-model`` names another model; the tolerance ``s`` of codes that take one is ``--tolerance``,
by default ``S`` (``uncoded`` simply faces the delays). ``--scheme`` also takes a scheme family with its parameters
inline or through ``--scheme-params`` (``-p``): ``--scheme gc-dc:clusters=2,r=2,ssi=perfect`` trains with GC-DC
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

Every option but those of :class:`CommandLine` is a field of the config objects under the same
name (``--worker-cpus`` is ``ClusterConfig.worker_cpus`` and ``"worker_cpus"`` in the JSON;
:mod:`~gradcode.experiments.cli_options` builds them from the fields, and ``--help`` groups them by
object). Data: ``--data`` is a dataset name (default ``tandon-synthetic``; ``amazon-synthetic``, or
any registered name) with ``--data-params key=value``, or your own file (``--data my.csv
--data-params target=label [--data-params categorical=colour,city]``, ``--data my.npz`` with
arrays ``X`` and ``y``, ``--data my.svm`` in LibSVM format); ``--problem`` defaults to the data's
task (logistic, linear, softmax). Optimizer: ``--optimizer gd|nesterov|sgd`` with
``--optimizer-params lr=0.1`` (default step ``1/L``); with ``--model`` any ``torch.optim`` optimizer
by name (``--optimizer RMSprop --optimizer-params lr=0.01,alpha=0.9``) or ``FILE.py:NAME``. Every
``key=value`` option takes several items with commas or repeated. Chaos: ``--fail W@R`` (repeatable)
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import typer

from gradcode._options import described
from gradcode._validation import check_choice
from gradcode.errors import GradcodeError
from gradcode.experiments.cli_options import (Output, Values, command, options, params_per_scheme, parse_scheme,
                                              split_schemes)
from gradcode.experiments.cli_output import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, PLOT_HELP, emit, err, error,
                                             fail, make_parents, note, plot_files)
from gradcode.problems.files import data_source
from gradcode.runtime import ENGINES, ClusterConfig, FaultConfig, RunConfig, TrainSpec, build_scheme, train
from gradcode.runtime.inprocess import ComputeCost, InProcessEngine, describe_clock
from gradcode.runtime.progress import RoundBar
from gradcode.runtime.setup import DEFAULT_DATA, DEFAULT_ROUNDS, DEFAULT_WORKERS
from gradcode.torch.config import TorchConfig


def register(app: typer.Typer) -> None:
    app.command("train")(command(train_options(), train_command, name="train", doc=train_command.__doc__))


@dataclass(frozen=True)
class CommandLine:
    """``gradcode train``'s own options: those that are no field of the config objects (a model
    given by name, the engine, plots, the output's form). The others are the fields of
    :class:`~gradcode.runtime.TrainSpec`, :class:`~gradcode.torch.TorchConfig`,
    :class:`~gradcode.runtime.ClusterConfig`, :class:`~gradcode.runtime.FaultConfig` and
    :class:`~gradcode.runtime.RunConfig`, under their own names."""

    model: str | None = described(
        None, "A PyTorch model: FILE.py:NAME, package.module:NAME or a built-in (mlp, cnn, resnet18); mini-batch"
              " training with torch optimizers (--data digits, mnist:DIR, cifar10:DIR, cifar100:DIR or an .npz).")
    engine: str = described("ray", "ray (an embedded local cluster, or --address), or inprocess (the workers in"
                                   " this process on a virtual clock, no Ray; their compute as --compute says).")
    compute: str | None = described(
        None, "--engine inprocess: what a gradient costs on the virtual clock: calibrated (default: seconds per"
              " sample, the minimum of up to 20 gradients in one thread's CPU time at start, printed and written in"
              " result.json's clock), SECONDS per sample (declared: the"
              " same times on any machine), or measured (each gradient's wall time here, the host's load"
              " included).")
    tensorboard: Path | None = described(
        None, "Write TensorBoard event files under this folder (one subfolder per scheme): loss, round time,"
              " stragglers and the held-out metrics, by round.", torch_only=True)
    plot: Path | None = described(
        None, "Draw held-out loss and AUC against wall-clock time (loss_auc_vs_time) and time per round against"
              " the injected delay (round_time_vs_delay), every scheme on the same axes. " + PLOT_HELP)
    json_params: bool = described(False, "With --json: also embed each model's final parameters (final_params);"
                                         " by default the document names the files that hold them (files).")
    debug: bool = described(False, "On an error, print its whole traceback before the one-line message (an"
                                   " exception your model, loss or data code raised: where in your code).")


def train_options() -> list:
    """``gradcode train``'s options: the fields of the config objects and of :class:`CommandLine`,
    grouped in ``--help`` by the object they belong to."""
    return options(("What is trained", TrainSpec), ("Model, engine and output", CommandLine),
                   ("Model, engine and output", Output),
                   ("PyTorch models (--model)", TorchConfig), ("Cluster", ClusterConfig), ("Faults", FaultConfig),
                   ("Run", RunConfig))


def train_command(o: Values):
    """Train a model with gradient coding on Ray workers (embedded local cluster by default).

    Several schemes (--scheme crc,frc,uncoded,ignore) train in turn on the same data and delays: one table.
    """
    try:
        several = len(split_schemes(o.scheme)) > 1
    except ValueError as exc:  # a list with an empty name: bad input, before anything runs
        _exit_for(exc, o.json, o.debug)
        raise
    return train_several(o) if several else train_one(o)


def train_one(o: Values) -> None:
    """One scheme's run: the table (or ``--json`` document), the planned deaths, the plots; a run
    that cannot start exits 2, one that stops exits 1 (:func:`_exit_for`)."""
    try:
        scheme, inline = parse_scheme(o.scheme)  # gc-dc:clusters=2,r=2,ssi=perfect
        scheme_params = {**(o.scheme_params or {}), **inline}
        if o.workers is None:
            o = o.replace(workers=scheme_params.get("n", DEFAULT_WORKERS))
        elif "n" in scheme_params and scheme_params["n"] != o.workers:  # the scheme's own n would silently win
            raise ValueError(f"{scheme}'s n={scheme_params['n']} and --workers/-n {o.workers} disagree: give one of"
                             " them")
        if o.plot is not None:  # a path that can hold no plot is found out now, not after training
            plot_files(o.plot, PLOT_FIGURES)
        configured = configs(o, scheme, scheme_params)
        _note_standardized(configured)
        callback, finish = _progress(_rounds_of(configured), err, enabled=True)
        try:
            # Ray's driver prints some cluster messages (raylet warnings) to sys.stdout: keep
            # stdout for the one JSON document / table
            with contextlib.redirect_stdout(ray_output(planned_failures=bool(o.fail))):
                result = run_configured(configured, callback)
        finally:
            finish()
    except (Exception, KeyboardInterrupt) as exc:
        _exit_for(exc, o.json, o.debug)
        raise
    # the result first: a finished run is never lost to an error while plotting
    if o.json:
        emit(result.to_json(params=o.json_params), as_json=True)
    else:
        emit({"rows": summary_rows(result)}, as_json=False, title=f"gradcode train ({result.run_dir})")
    _note_clock(result)
    if o.fail:
        report_deaths(result)
    if o.plot is not None:
        try:
            for path in write_plots(result, o.plot):
                note(f"wrote {path}")
        except OSError as exc:
            error(f"plots not written to {o.plot}: {exc} (the run's records are in {result.run_dir})")
            raise typer.Exit(1) from None


def _exit_for(exc: BaseException, as_json: bool, debug: bool = False) -> None:
    """Exit as a run that failed should (returns for a bug, which the caller re-raises): 130
    after SIGINT, 2 for bad arguments refused before the run started (a missing extra, or an
    exception the user's model, loss or data code raised at set-up:
    :class:`~gradcode.errors.UserCodeError`), 1 for a run that stopped (a round timeout,
    divergence, the cluster, a checkpoint), each after saying why in one line (``debug``: after the
    traceback); with ``--json`` the document holds the completed rounds."""
    started = getattr(exc, "result", None) is not None  # train() attaches the completed rounds
    if isinstance(exc, KeyboardInterrupt):
        _fail(exc, EXIT_INTERRUPTED, as_json, debug)
    if isinstance(exc, (ValueError, TypeError, FileNotFoundError, ImportError)) and not started:
        _fail(exc, EXIT_USAGE, as_json, debug)
    if isinstance(exc, GradcodeError):
        _fail(exc, EXIT_FAILED, as_json, debug)
    if as_json and started:  # a bug: its traceback, after the run's records
        emit(exc.result.to_json(), as_json=True)


def _note_clock(result) -> None:
    """Say on stderr what timed an in-process run (its virtual clock's calibration): its times mean
    little without it. Ray runs are timed by the wall clock and say nothing."""
    if (result.clock or {}).get("clock") == "virtual":
        note(describe_clock(result.clock))


def _note_standardized(configured) -> None:
    """Say on stderr that the features of a data file are standardised (or not): it changes what
    the model sees, so the run states it."""
    if isinstance(configured, tuple) and isinstance(configured[0].data or DEFAULT_DATA, str):
        spec = configured[0]
        name, params = data_source(spec.data or DEFAULT_DATA, spec.data_params)
        if name == "file":
            how = ("standardized with the training split's mean and deviation (--data-params standardize=false: as"
                   " read)" if params.get("standardize", True) else "used as read (not standardized)")
            note(f"{spec.data}: features {how}")


def _rounds_of(configured) -> int | None:
    """The rounds a run will take, for the progress bar (None: a torch run's epochs decide)."""
    if isinstance(configured, TorchRun):
        return configured.run.rounds
    return configured[3].rounds or DEFAULT_ROUNDS


def run_configured(configured, callback):
    """Run what :func:`configs` made: the runtime's config objects through :func:`gradcode.train`,
    or a torch model's through :func:`gradcode.torch.fit`; returns the run's ``TrainResult``."""
    if isinstance(configured, TorchRun):
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

    spec, cluster, faults, run, engine = configured
    return train(spec, cluster=cluster, faults=faults, run=run, engine=engine, callback=callback)


def _shared_configs(o: Values, run_dir):
    """The config objects every run of ``o`` shares: ``(ClusterConfig, FaultConfig, RunConfig)``."""
    return (ClusterConfig(**o.fields_of(ClusterConfig)), FaultConfig(**o.fields_of(FaultConfig)),
            RunConfig(**o.fields_of(RunConfig, run_dir=o.run_dir if run_dir is None else run_dir)))


def configs(o: Values, scheme: str, scheme_params: dict, *, run_dir=None):
    """The config objects ``(TrainSpec, ClusterConfig, FaultConfig, RunConfig, engine)`` of
    ``gradcode train``'s options ``o`` for ``scheme`` with ``scheme_params`` (each field taken by
    its name), or with ``--model`` a :class:`TorchRun` (:func:`torch_configs`); ``run_dir``
    (several schemes: each its subfolder) replaces ``--run-dir``. Refuses the options that would
    otherwise be silently dropped."""
    check_choice("--engine", o.engine, ENGINES)
    if o.model is not None:
        return torch_configs(o, scheme, scheme_params, run_dir=run_dir)
    if scheme == "auto":
        raise ValueError("--scheme auto switches the workers' partitions mid-run, which needs every worker to hold"
                         " the whole data set: it trains torch models (--model); the built-in problems keep"
                         " only their partitions")
    torch_only = [opt.flag for opt in o.changed() if opt.torch_only]
    if torch_only:
        raise ValueError(f"{', '.join(torch_only)} go with --model (a PyTorch model); the built-in problems train"
                         " full-batch with --optimizer gd|nesterov|sgd")
    spec = TrainSpec(**o.fields_of(TrainSpec, scheme=scheme, scheme_params=scheme_params or None))
    return (spec, *_shared_configs(o, run_dir), _engine(o))


def _engine(o: Values):
    """``--engine``, or with ``--compute`` the in-process engine on that clock."""
    if o.compute is None:
        return o.engine
    if o.engine != "inprocess":
        raise ValueError("--compute sets the virtual clock of --engine inprocess; on Ray the workers really compute")

    if o.compute in ("calibrated", "measured"):
        return InProcessEngine(compute_time=o.compute)
    try:
        seconds = float(o.compute)
    except ValueError:
        raise ValueError(f"--compute takes calibrated, measured or seconds per sample, got {o.compute!r}") from None
    return InProcessEngine(compute_time=ComputeCost(per_sample=seconds))


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


#: the TrainSpec fields of the built-in problems that a torch model's run cannot take (its data
#: and optimizer options are read here, for the torch model)
_NOT_TORCH = ("data_params", "test_fraction", "problem", "problem_params", "verify")
#: the auto scheme's options: they go to the ``auto`` scheme only, when several are trained
_AUTO_ONLY = ("probe", "load_slope", "families")


def torch_configs(o: Values, scheme: str, scheme_params: dict, *, run_dir=None) -> TorchRun:
    """``gradcode train --model M``: :func:`gradcode.torch.fit`'s arguments. ``--data`` is
    ``digits`` (default), ``mnist:DIR``, ``cifar10:DIR``, ``cifar100:DIR`` or an ``.npz`` of ``X``
    and ``y``; ``--optimizer`` any ``torch.optim`` optimizer by name in any case (``sgd``,
    ``adam``, ``RMSprop``, ...; the built-in problems' ``gd`` is plain SGD, ``nesterov`` SGD with
    Nesterov momentum 0.9) or ``FILE.py:NAME`` (:func:`~gradcode.torch.loading.optimizer_class`)."""
    from gradcode.torch.data import from_path, load_data
    from gradcode.torch.training import NOT_FIT
    from gradcode.torch.loading import model_factory

    refused = [opt.flag for opt in o.changed() if opt.name in _NOT_TORCH]
    if refused:
        raise ValueError(f"{', '.join(refused)} cannot be used with --model (a torch model trains on --data with its"
                         " own loss and optimizer)")
    if o.device is not None:
        from gradcode.torch.problem import check_device

        check_device(o.device)  # before the data are read and a run starts
    data = "digits" if o.data is None else o.data
    train_data, test_data = load_data(data, seed=o.seed)
    name = {"gd": "sgd", "nesterov": "sgd"}.get(o.optimizer, o.optimizer)
    spec = TrainSpec(**{k: v for k, v in o.fields_of(TrainSpec, scheme=scheme, scheme_params=scheme_params or None)
                        .items() if k not in NOT_FIT})
    auto = {k: getattr(o, k) if scheme == "auto" else None for k in _AUTO_ONLY}
    # progress=False: the command draws the same bar itself, for every run (train_one, _run_each)
    torch_config = TorchConfig(**o.fields_of(TorchConfig, optimizer=name, eval_data=test_data, **auto,
                                             optimizer_params=_torch_optimizer_params(o, name), progress=False))
    board = None
    if o.tensorboard is not None:
        label = re.sub(r"[^\w.=,-]+", "_", scheme + ("-" + ",".join(f"{k}={v}" for k, v in
                                                                   sorted(scheme_params.items()))
                                                    if scheme_params else ""))
        board = Path(o.tensorboard) / label
    # the workers read the data themselves (each keeping its partitions), not a copy shipped to each
    return TorchRun(model_factory(o.model, train_data, "--model"), from_path(data, o.seed), spec, torch_config,
                    *_shared_configs(o, run_dir), _engine(o), board)


def _torch_optimizer_params(o: Values, name: str) -> dict:
    """The torch optimizer's parameters from ``--optimizer-params`` (``lr`` 0.1 for SGD by
    default, the class's own default for the others; ``--optimizer nesterov``: SGD with Nesterov
    momentum 0.9)."""
    params = dict(o.optimizer_params or {})
    if name.lower() == "sgd":
        params.setdefault("lr", 0.1)
    if o.optimizer == "nesterov":
        params.setdefault("momentum", 0.9)
        params["nesterov"] = True
    return params


def _fail(exc: BaseException, code: int, as_json: bool, debug: bool = False) -> None:
    """Report a run that could not start, stopped or was interrupted, and exit with ``code``
    (:func:`~gradcode.experiments.cli_output.fail`): with ``--json`` the document holds the records
    of the completed rounds when the run started, else just the error; ``debug`` (``--debug``)
    prints the exception's whole traceback (the user's exception behind a
    :class:`~gradcode.errors.UserCodeError` first) on stderr before the one-line message."""
    if debug:
        _print_traceback(exc)
    result = getattr(exc, "result", None)
    if result is not None:
        note(f"{result.round_times.size} completed round(s) kept in {result.run_dir}")
    fail(exc, code, as_json=as_json, doc=result.to_json() if result is not None else None)


def _print_traceback(exc: BaseException) -> None:
    """``--debug``: ``exc``'s whole traceback, its causes first (as Python prints them), on stderr."""
    import traceback

    sys.stderr.write("".join(traceback.format_exception(exc)))
    sys.stderr.flush()


def summary_rows(result) -> list[dict]:
    """One row per model, its keys in snake_case with their unit (the same keys in the table and
    in ``--json``): ``time_s`` (total training time), ``round_ms`` (median round),
    ``stragglers_per_round`` (mean), ``faults`` (each worker death, non-finite or dropped result
    once, however many tasks it failed), ``waitouts`` (rounds waited out, ``--close MU`` only),
    ``loose_rounds`` (rounds whose gradient was accepted beyond its tolerance as no worse than a
    plain sum; shown when there were any), ``overflows`` (float16 loss scaling's backward passes
    run again at a smaller scale; shown when there were any), ``loss`` (final training objective) and the last
    held-out ``test_loss``, ``accuracy`` and ``roc_auc``."""
    rows = []
    last = {}
    for m in result.metrics:
        last[m["model"]] = m
    strag = result.stragglers
    for m, _ in enumerate(result.params):
        met = last.get(m, {})
        rows.append({
            "scheme": result.config["scheme"] + (f"/{m}" if len(result.params) > 1 else ""),
            "rounds": int(result.round_times.size),
            "time_s": float(result.round_times.sum()),
            "round_ms": 1e3 * float(np.median(result.round_times)),
            "stragglers_per_round": float(strag.sum(axis=1).mean()),
            "faults": len(result.faults),
            **({} if result.config.get("close", "decodable") == "decodable"
               else {"waitouts": int(result.waitouts.sum())}),
            **({"loose_rounds": result.loose_rounds} if result.loose_rounds else {}),
            **({"overflows": result.total_overflows} if result.total_overflows else {}),
            "loss": float(result.losses[-1, m]),
            "test_loss": met.get("loss"),
            "accuracy": met.get("accuracy"),
            "roc_auc": met.get("roc_auc"),
        })
    return rows


def _progress(rounds: int | None, console, *, enabled: bool):
    """``(callback, finish)``: the run's progress bar on stderr fed by its per-round callback
    (:class:`~gradcode.runtime.progress.RoundBar`, the bar :func:`gradcode.torch.fit` draws too;
    ``rounds`` None: a count without a total, for a torch run whose epochs decide)."""
    if not enabled:
        return None, lambda: None
    bar = RoundBar(rounds, console)
    return bar, bar.close


def write_plots(result, plot: Path) -> list[Path]:
    """``--plot`` of one run: loss and AUC against wall-clock time (Tandon Fig. 7) and time per
    round against the round's largest injected delay (Tandon Fig. 5: uncoded follows
    ``time = delay``, coded stays flat), at the paths :func:`~gradcode.experiments.cli_output.plot_files`
    gives; a folder also gets ``train_summary.json`` and ``round_times.npy``."""


    paths = write_comparison_plots([{"spec": result.config["scheme"], "exact": True}], [result],
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


def report_deaths(result, prefix: str = "") -> None:
    """One stderr line per worker death of a run with ``--fail``: planned, or not (with Ray's error)."""
    for f in result.faults:
        if f.get("kind") != "died":
            continue
        why = "planned by --fail" if f.get("injected") else f"not planned: {f.get('error')}"
        note(f"{prefix}worker {f['worker']} died in round {f['round']} ({why}); recovery: {f.get('recovery')}")


# ------------------------------------------------------------------------- several schemes side by side

#: figures of ``--plot``: the first is the main one (a ``.png`` path names its file)
PLOT_FIGURES = ["loss_auc_vs_time", "round_time_vs_delay"]


def _subfolder(spec: str, taken: set) -> str:
    """A folder name for one scheme's run under ``--run-dir`` (``gc-dc_clusters=2_r=2``)."""
    name = re.sub(r"[^\w.=-]+", "_", spec).strip("_") or "scheme"
    base, i = name, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    taken.add(name)
    return name


def train_several(o: Values) -> None:
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
    try:
        o, runs, pngs = _plan_runs(o)
        session = _session(o)
    except (ValueError, TypeError, FileNotFoundError, ImportError, GradcodeError) as exc:
        _fail(exc, EXIT_USAGE, o.json, o.debug)
    # Ray prints its notices (a worker's death) to sys.stdout whenever they come, also between
    # two runs: stdout is kept for the table or the JSON document while the session lasts
    with contextlib.redirect_stdout(ray_output(planned_failures=bool(o.fail))), contextlib.ExitStack() as stack:
        try:
            stack.enter_context(session)
        except GradcodeError as exc:  # no cluster at --address, Ray could not start: nothing ran
            _fail(exc, EXIT_FAILED, o.json, o.debug)
        results, errors = _run_each(runs, o)
    _report_several(runs, results, errors, pngs, o)


def _session(o: Values):
    """One Ray session for every scheme of ``train_several`` (:func:`~gradcode.runtime.cluster.ray_session`:
    Ray starts once, not once a scheme), or nothing to open for ``--engine inprocess``."""
    if o.engine != "ray":
        return contextlib.nullcontext()
    from gradcode.runtime.cluster import ray_session

    return ray_session(ClusterConfig(**o.fields_of(ClusterConfig)), run_dir=o.run_dir)


def _plan_runs(o: Values) -> tuple[Values, list[dict], list[Path] | None]:
    """``(options, runs, plot files)`` of ``train_several``: each scheme built and its config
    objects made (so that a bad one is refused before anything runs); the options' ``workers`` is
    the n the schemes share when ``-n`` is absent."""
    plot, run_dir = o.plot, o.run_dir
    specs = split_schemes(o.scheme)
    if len(set(specs)) < len(specs):
        raise ValueError(f"--scheme {o.scheme} names a scheme twice")
    if run_dir is not None and run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--run-dir {run_dir} is a file; give a folder (each scheme gets a subfolder)")
    pngs = plot_files(plot, PLOT_FIGURES) if plot is not None else None
    parsed = [parse_scheme(spec) for spec in specs]
    params_of = params_per_scheme(o.scheme_params or {}, parsed)
    if o.workers is None:  # n from the schemes that set one (they must agree), else the default
        own = sorted({p["n"] for p in params_of if "n" in p})
        if len(own) > 1:
            raise ValueError(f"the schemes set different n ({', '.join(map(str, own))}); they are compared on"
                             " the same workers: give one -n")
        o = o.replace(workers=own[0] if own else DEFAULT_WORKERS)
    runs, taken = [], set()
    for spec, (name, _), params in zip(specs, parsed, params_of):
        if name == "auto":  # chosen during the run (torch models): refused below without --model
            configured = configs(o, name, params, run_dir=None if run_dir is None else run_dir / _subfolder(spec, taken))
            runs.append({"spec": spec, "name": name, "params": params, "configs": configured, "exact": True})
            continue
        built = build_scheme(name, workers=o.workers, stragglers=o.stragglers, tolerance=o.tolerance, seed=o.seed,
                             scheme_params=params or None, verify=o.verify)
        if built.n != o.workers:  # same injected delays need the same n
            raise ValueError(f"{spec} has n = {built.n} but --workers is {o.workers}: the schemes are"
                             " compared on the same workers; leave n to --workers")
        code = getattr(built, "static_code", None)
        configured = configs(o, name, params, run_dir=None if run_dir is None else run_dir / _subfolder(spec, taken))
        runs.append({"spec": spec, "name": name, "params": params, "configs": configured,
                     "exact": bool(getattr(code, "exact", True)) if code is not None else True})
    return o, runs, pngs


def _run_each(runs: list[dict], o: Values) -> tuple[list, list]:
    """Train each run in turn: ``(results, errors)``, a result (``None`` when nothing ran) and an
    error text (``None`` when it finished) per run. A run that stops is reported and the next one
    starts; when the first run fails before any round, the command stops as a single run would."""


    results, errors = [], [None] * len(runs)
    for i, r in enumerate(runs):
        note(f"[{i + 1}/{len(runs)}] {r['spec']}")
        callback, finish = _progress(_rounds_of(r["configs"]), err, enabled=True)
        try:
            with contextlib.redirect_stdout(ray_output(planned_failures=bool(o.fail))):
                result = run_configured(r["configs"], callback)
        except Exception as exc:
            result = getattr(exc, "result", None)  # the rounds a stopped run completed
            bad_args = isinstance(exc, (ValueError, TypeError, FileNotFoundError, ImportError))
            if not results and result is None and (bad_args or isinstance(exc, GradcodeError)):
                _fail(exc, EXIT_USAGE if bad_args else EXIT_FAILED, o.json, o.debug)  # nothing ran: as one run
            if not isinstance(exc, (GradcodeError, ValueError, TypeError, FileNotFoundError, ImportError)):
                raise  # a bug: its traceback (the finished runs' records are in their run dirs)
            if o.debug:
                _print_traceback(exc)
            error(f"{r['spec']}: {exc}")
            errors[i] = f"{type(exc).__name__}: {exc}"
        finally:
            finish()
        results.append(result)
        if result is not None:
            note(f"records in {result.run_dir}")
    return results, errors


def _report_several(runs: list[dict], results: list, errors: list, pngs: list[Path] | None, o: Values) -> None:
    """The table (or ``--json`` document) of ``train_several``, the planned deaths, the plots;
    exit status 1 when a run stopped or the plots could not be written."""
    rows = comparison_rows(runs, results, errors)
    written, plot_error = [], None
    if pngs is not None and any(res is not None for res in results):
        try:  # before printing, so that the document names the files written; the records are saved
            written = write_comparison_plots(runs, results, pngs)
        except Exception as exc:  # noqa: BLE001 - a plot never loses the printed result
            plot_error = f"plots not written to {o.plot}: {type(exc).__name__}: {exc}"
    if o.json:
        doc = {"schemes": [r["spec"] for r in runs], "rows": rows, "plots": [str(p) for p in written],
               "runs": [dict(res.to_json(params=o.json_params), scheme=r["spec"], exact=r["exact"]) if res is not None
                        else {"scheme": r["spec"], "exact": r["exact"], "error": e}
                        for r, res, e in zip(runs, results, errors)]}
        emit(doc, as_json=True)
    else:
        columns = [c for c in rows[0] if any(row.get(c) is not None for row in rows)] if rows else None
        emit({"rows": rows}, as_json=False, columns=columns,
             title=f"gradcode train: {len(runs)} schemes, same data, seed and injected delays")
    if results and results[0] is not None:  # the runs share one clock
        _note_clock(results[0])
    if o.fail:
        for r, res in zip(runs, results):
            if res is not None:
                report_deaths(res, prefix=f"{r['spec']}: ")
    for p in written:
        note(f"wrote {p}")
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

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


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
