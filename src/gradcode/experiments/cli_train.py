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
import sys
from pathlib import Path

import typer

from gradcode.experiments.cli_output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, PLOT_HELP, error, fail

DATA_ALIASES = {"synthetic": "tandon-synthetic", "amazon": "amazon-synthetic"}


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)


def train_command(
    scheme: str = typer.Option("crc", "--scheme", "--code",
                               help="Code or scheme family, NAME or NAME:key=value,... (see `gradcode codes`);"
                               " several, comma-separated (crc,frc,uncoded,ignore), train one after another on the"
                               " same data, seed and injected delays."),
    workers: int = typer.Option(None, "--workers", "-n", help="Number of workers n (default: 4, or the n"
                                " that --scheme NAME:n=N or --param n=N sets)."),
    stragglers: int = typer.Option(0, "--stragglers", "-s", help="Workers delayed per round; tolerance s of codes that take one."),
    delay: float = typer.Option(0.0, "--delay", help="Seconds each delayed worker sleeps per round."),
    delay_model: str = typer.Option(None, "--delay-model", "-m", help="Another delay model instead of the fixed delays."),
    delay_param: list[str] = typer.Option(None, "--delay-param", "-M", help="key=value for --delay-model (repeatable)."),
    code_param: list[str] = typer.Option(None, "--param", "-p", help="key=value code/scheme parameter (repeatable)."),
    data: str = typer.Option("synthetic", "--data", help="Dataset: synthetic, amazon, breast-cancer, digits, ...,"
                             " or your own FILE (.csv with --target, .npz with X and y, .svm/.libsvm)."),
    target: str = typer.Option(None, "--target", help="CSV files: the column to predict."),
    data_param: list[str] = typer.Option(None, "--data-param", help="key=value dataset parameter (repeatable)."),
    problem: str = typer.Option(None, "--problem", help="logistic, linear, softmax, mlp, cnn (default: by task)."),
    model: str = typer.Option(None, "--model", help="A PyTorch model: FILE.py:NAME, package.module:NAME or a built-in"
                              " (mlp, cnn, resnet18); mini-batch training with torch optimizers (--data digits,"
                              " mnist:DIR, cifar10:DIR, cifar100:DIR or an .npz)."),
    batch_size: int = typer.Option(64, "--batch-size", help="--model: samples per job, split over the partitions."),
    wire_dtype: str = typer.Option("float32", "--wire-dtype", help="--model: float32, float64, float16 or bfloat16"
                                   " messages."),
    momentum: float = typer.Option(None, "--momentum", help="--model: SGD momentum."),
    weight_decay: float = typer.Option(None, "--weight-decay", help="--model: weight decay."),
    engine: str = typer.Option("ray", "--engine", help="--model: ray, or inprocess (virtual clock, no processes)."),
    probe: int = typer.Option(None, "--probe", help="--scheme auto: rounds trained uncoded to measure the workers"
                              " before switching to the scheme predicted fastest (default 20; SGC App. K)."),
    optimizer: str = typer.Option("gd", "--optimizer", help="gd, nesterov or sgd; with --model sgd, adam or adamw."),
    lr: float = typer.Option(None, "--lr", help="Learning rate of gd/nesterov (default 1/L); --model: sgd 0.1,"
                             " adam 1e-3."),
    opt_param: list[str] = typer.Option(None, "--opt-param", help="key=value optimizer parameter (repeatable)."),
    rounds: int = typer.Option(100, "--rounds", help="Training rounds (of each scheme)."),
    models: int = typer.Option(1, "--models", help="Models trained at once (round j serves model j mod M)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data, the code and the injected delays."),
    fail: list[str] = typer.Option(None, "--fail", help="W@R: worker W's process exits in round R (repeatable)."),
    checkpoint_every: int = typer.Option(0, "--checkpoint-every", help="Checkpoint every K rounds (0: never)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --run-dir from its checkpoint."),
    run_dir: Path = typer.Option(None, "--run-dir", help="Where records go (default ./gradcode-runs/...)."),
    address: str = typer.Option(None, "--address", help="Join an existing Ray cluster (e.g. auto, host:port)."),
    num_cpus: int = typer.Option(None, "--num-cpus", help="CPUs of the embedded Ray cluster."),
    round_timeout: float = typer.Option(120.0, "--round-timeout", help="Give up on a round after this many seconds."),
    start_timeout: float = typer.Option(120.0, "--start-timeout",
                                        help="Give up joining the cluster or starting the workers after this many seconds."),
    eval_every: int = typer.Option(1, "--eval-every", help="Held-out metrics every K rounds (0: at the end only)."),
    inject: str = typer.Option("excess", "--inject", help="What delayed workers sleep on top of their real computation:"
                               " 'excess' (default) only what the delay model adds beyond the round's fastest worker"
                               " (a model without stragglers injects nothing), 'full' the model's whole time."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the run already in --run-dir (its checkpoint"
                                   " and records); without it such a run-dir is refused unless --resume."),
    close: str = typer.Option("decodable", "--close", help="When a round ends: 'decodable' (as soon as it decodes)"
                              " or a number mu, SGC's mu-rule (wait until (1 + mu) x the first whole result's time)."),
    waitout: str = typer.Option("decodable", "--waitout", help="With --close MU, what a round the deadline leaves"
                                " undecodable waits for: decodable (until it decodes) or all (every live worker:"
                                " the SGC paper's rule)."),
    verify: bool = typer.Option(False, "--verify", help="Wait for two results more than decoding needs and check "
                                "them against each other: a worker whose result is wrong is named and left out."),
    plot: Path = typer.Option(None, "--plot", help="Draw held-out loss and AUC against wall-clock time"
                              " (loss_auc_vs_time) and time per round against the injected delay"
                              " (round_time_vs_delay), every scheme on the same axes. " + PLOT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
):
    """Train a model with gradient coding on Ray workers (embedded local cluster by default).

    Several schemes (--scheme crc,frc,uncoded,ignore) train in turn on the same data and delays: one table.
    """
    opts = dict(locals())  # first, while locals() holds just the options
    if len(split_schemes(scheme)) > 1:
        return train_several(opts)
    from gradcode.experiments.cli_output import emit, err, plot_files
    from gradcode.experiments.cli_sim import parse_kv, parse_scheme

    try:
        scheme, inline = parse_scheme(scheme)  # gc-dc:clusters=2,r=2,ssi=perfect
        code_params = {**parse_kv(code_param, "--param"), **inline}
        if workers is None:
            opts["workers"] = _DEFAULT_WORKERS
        elif "n" in code_params and code_params["n"] != workers:  # the scheme's own n would silently win
            raise ValueError(f"{scheme}'s n={code_params['n']} and --workers/-n {workers} disagree: give one of them")
        if plot is not None:  # a path that can hold no plot is found out now, not after training
            plot_files(plot, PLOT_FIGURES)
        configured = configs(opts, scheme, code_params)
        callback, finish = _progress(rounds, err, enabled=True)
        try:
            # Ray's driver prints some cluster messages (raylet warnings) to sys.stdout: keep
            # stdout for the one JSON document / table
            with contextlib.redirect_stdout(ray_output(planned_failures=bool(fail))):
                result = run_configured(configured, callback)
        finally:
            finish()
    except (Exception, KeyboardInterrupt) as exc:
        from gradcode.errors import GradcodeError

        started = getattr(exc, "result", None) is not None  # train() attaches the completed rounds
        if isinstance(exc, KeyboardInterrupt):  # SIGINT: what was done, then exit 130
            _fail(exc, EXIT_INTERRUPTED, as_json, err)
        if isinstance(exc, (ValueError, TypeError, FileNotFoundError, ImportError)) and not started:
            _fail(exc, EXIT_USAGE, as_json, err)  # refused before the run started: bad arguments, a missing extra
        if isinstance(exc, GradcodeError):  # round timeout, divergence, cluster, checkpoint...
            _fail(exc, EXIT_FAILED, as_json, err)
        if as_json and started:  # a bug: its traceback, after the run's records
            emit(exc.result.to_json(), as_json=True)
        raise
    # the result first: a finished run is never lost to an error while plotting
    if as_json:
        emit(result.to_json(), as_json=True)
    else:
        emit({"rows": summary_rows(result)}, as_json=False, title=f"gradcode train ({result.run_dir})")
    if fail:
        report_deaths(result, err)
    if plot is not None:
        try:
            for path in write_plots(result, plot):
                err.print(f"wrote {path}")
        except OSError as exc:
            error(f"plots not written to {plot}: {exc} (the run's records are in {result.run_dir})")
            raise typer.Exit(1) from None


#: workers when neither --workers nor the scheme sets n
_DEFAULT_WORKERS = 4


def run_configured(configured, callback):
    """Run what :func:`configs` made: the runtime's config objects through :func:`gradcode.train`,
    or a torch model's :func:`gradcode.torch.fit` keywords; returns the run's ``TrainResult``."""
    if isinstance(configured, dict):
        from gradcode.experiments.cli_output import note
        from gradcode.torch import fit

        res = fit(**configured, callback=callback)
        if res.auto is not None:
            c = res.auto["chosen"]
            note(f"auto: after {res.auto['probe_rounds']} uncoded rounds switched to {c['scheme']} (predicted"
                 f" {c['predicted_total']:.3g} s for the {res.auto['jobs']} jobs left; candidates: "
                 + ", ".join(f"{x['scheme']} {x['params']} {x['time']:.3g} s" for x in res.auto["candidates"][:4])
                 + f"; search {1e3 * res.auto['search_seconds']:.3g} ms)")
        return res.result
    from gradcode.runtime import train

    spec, cluster, faults, run = configured
    return train(spec, cluster=cluster, faults=faults, run=run, callback=callback)


def configs(o: dict, code: str, code_params: dict, *, run_dir=None):
    """The config objects ``(TrainSpec, ClusterConfig, FaultConfig, RunConfig)`` of
    ``gradcode train``'s options ``o`` (its parameters by name) for the scheme ``code`` with
    ``code_params``, or with ``--model`` the keywords of :func:`gradcode.torch.fit`
    (:func:`torch_configs`); ``run_dir`` (several schemes: each its subfolder) replaces
    ``--run-dir``. Refuses the options that would otherwise be silently dropped."""
    from gradcode.experiments.cli_sim import parse_close, parse_kv
    from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig, TrainSpec

    if o["model"] is not None:
        return torch_configs(o, code, code_params, run_dir=run_dir)
    if code == "auto":
        raise ValueError("--scheme auto switches the workers' partitions mid-run, which needs every worker to hold"
                         " the whole data set: it trains torch models (--model); the built-in problems keep"
                         " only their partitions")
    torch_only = [flag for flag, key, default in TORCH_ONLY if o[key] != default]
    if torch_only:
        raise ValueError(f"{', '.join(torch_only)} go with --model (a PyTorch model); the built-in problems train"
                         " full-batch with --optimizer gd|nesterov|sgd")
    if o["resume"] and o["run_dir"] is None:  # the default run dir is a new timestamped folder
        raise ValueError("--resume needs --run-dir: the folder of the run to continue")
    data_name, data_params = _data_source(o["data"], o["target"], parse_kv(o["data_param"], "--data-param"))
    delay_model = None
    if o["delay_model"] is not None:
        delay_model = (o["delay_model"], parse_kv(o["delay_param"], "--delay-param"))
    elif o["delay_param"]:
        raise ValueError("--delay-param sets a parameter of --delay-model, which is not given;"
                         " add --delay-model NAME (gradcode models lists them)")
    opt_params = parse_kv(o["opt_param"], "--opt-param")
    if o["lr"] is not None:
        opt_params["lr"] = o["lr"]
    spec = TrainSpec(code, workers=o["workers"], stragglers=o["stragglers"], delay=o["delay"],
                     delay_model=delay_model, code_params=code_params or None, data=data_name,
                     data_params=data_params, problem=o["problem"], optimizer=o["optimizer"],
                     optimizer_params=opt_params, models=o["models"], seed=o["seed"], verify=o["verify"],
                     inject=o["inject"], close=parse_close(o["close"]), waitout=o["waitout"])
    cluster = ClusterConfig(address=o["address"], num_cpus=o["num_cpus"], start_timeout=o["start_timeout"])
    faults = FaultConfig(fail=tuple(o["fail"] or ()), round_timeout=o["round_timeout"])
    run = RunConfig(rounds=o["rounds"], checkpoint_every=o["checkpoint_every"],
                    run_dir=o["run_dir"] if run_dir is None else run_dir, eval_every=o["eval_every"],
                    resume=o["resume"], overwrite=o["overwrite"])
    return spec, cluster, faults, run


#: options that only a torch model takes: (flag, option name, default)
TORCH_ONLY = (("--batch-size", "batch_size", 64), ("--wire-dtype", "wire_dtype", "float32"),
              ("--momentum", "momentum", None), ("--weight-decay", "weight_decay", None),
              ("--engine", "engine", "ray"), ("--probe", "probe", None))


def torch_configs(o: dict, code: str, code_params: dict, *, run_dir=None) -> dict:
    """``gradcode train --model M``: the keywords of :func:`gradcode.torch.fit`. ``--data`` is
    ``digits`` (the default ``synthetic`` means it here), ``mnist:DIR``, ``cifar10:DIR``,
    ``cifar100:DIR`` or an ``.npz`` of ``X`` and ``y``; ``--optimizer`` ``sgd`` (``gd`` is plain
    SGD, ``nesterov`` SGD with Nesterov momentum 0.9), ``adam`` or ``adamw``."""
    from gradcode.experiments.cli_sim import parse_close, parse_kv
    from gradcode.torch import load_data

    refused = [flag for flag, key, default in (("--verify", "verify", False), ("--problem", "problem", None),
                                               ("--target", "target", None), ("--inject", "inject", "excess"),
                                               ("--data-param", "data_param", None))
               if o[key] not in (default, [], ())]
    if refused:
        raise ValueError(f"{', '.join(refused)} cannot be used with --model yet (torch models train from the"
                         " options --data, --batch-size, --optimizer, --lr, --momentum, --weight-decay, --wire-dtype)")
    data = "digits" if o["data"] == "synthetic" else o["data"]
    train_data, test_data = load_data(data, seed=o["seed"])
    name = {"gd": "sgd", "nesterov": "sgd"}.get(o["optimizer"], o["optimizer"])
    opt_params = parse_kv(o["opt_param"], "--opt-param")
    opt_params.setdefault("lr", o["lr"] if o["lr"] is not None else (0.1 if name == "sgd" else 1e-3))
    if o["optimizer"] == "nesterov":
        opt_params.update(nesterov=True, momentum=o["momentum"] if o["momentum"] is not None else 0.9)
    elif o["momentum"] is not None:
        if name != "sgd":
            raise ValueError(f"--momentum is SGD's; --optimizer {o['optimizer']} has its own betas (--opt-param)")
        opt_params["momentum"] = o["momentum"]
    if o["weight_decay"] is not None:
        opt_params["weight_decay"] = o["weight_decay"]
    delay_model = None
    if o["delay_model"] is not None:
        delay_model = (o["delay_model"], parse_kv(o["delay_param"], "--delay-param"))
    return dict(
        model=resolve_model(o["model"], train_data), data=train_data, eval_data=test_data, optimizer=name,
        optimizer_params=opt_params, batch_size=o["batch_size"], code=code, workers=o["workers"],
        stragglers=o["stragglers"], delay=o["delay"], delay_model=delay_model, code_params=code_params or None,
        rounds=o["rounds"], models=o["models"], seed=o["seed"], engine=o["engine"], address=o["address"],
        num_cpus=o["num_cpus"], wire_dtype=o["wire_dtype"], eval_every=o["eval_every"],
        close=parse_close(o["close"]), waitout=o["waitout"], fail=tuple(o["fail"] or ()),
        round_timeout=o["round_timeout"], run_dir=o["run_dir"] if run_dir is None else run_dir,
        overwrite=o["overwrite"], checkpoint_every=o["checkpoint_every"], resume=o["resume"],
        probe=o["probe"] if code == "auto" else None,
    )


def resolve_model(spec: str, train_data):
    """``--model``: a built-in name (sized from the data: inputs, image shape, classes), or
    ``FILE.py:NAME`` / ``package.module:NAME`` naming an ``nn.Module`` class or a factory, called
    with no arguments."""
    import functools
    import importlib
    import importlib.util
    import os

    from gradcode.torch import make_model

    X, y = train_data
    if ":" not in spec:
        n_out = int(y.max()) + 1 if not y.is_floating_point() else (1 if y.ndim == 1 else int(y.shape[1]))
        image_shape = tuple(X.shape[1:]) if X.ndim == 4 else None
        make_model(spec, n_in=int(X[0].numel()), n_out=n_out, image_shape=image_shape)  # a bad name, now
        # a factory: fit builds it under the run's seed, so every scheme starts from the same weights
        return functools.partial(make_model, spec, n_in=int(X[0].numel()), n_out=n_out, image_shape=image_shape)
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        if not os.path.isfile(where):
            raise ValueError(f"--model {spec}: no such file {where}")
        mod_name = f"gradcode_user_model_{abs(hash(os.path.abspath(where)))}"
        loader = importlib.util.spec_from_file_location(mod_name, where)
        module = importlib.util.module_from_spec(loader)
        sys.modules[mod_name] = module  # Ray's workers get it by value (gradcode.torch.fit)
        loader.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ValueError(f"--model {spec}: cannot import {where}: {exc}") from None
    factory = getattr(module, name, None)
    if factory is None or not callable(factory):
        raise ValueError(f"--model {spec}: {where} has no class or function {name!r}")
    return factory


def _data_source(data: str, target: str | None, params: dict) -> tuple[str, dict]:
    """``--data``: a dataset name (aliases resolved) or a path to the user's own file, which
    becomes the ``file`` dataset (``path``, and ``target`` for CSV)."""
    import os

    from gradcode.problems.files import FORMATS

    looks_like_file = os.path.sep in data or os.path.splitext(data)[1].lower() in FORMATS or os.path.isfile(data)
    if looks_like_file:
        if not os.path.isfile(data):
            raise ValueError(f"--data {data}: no such file")
        params = {**params, "path": os.path.abspath(data)}
        if target is not None:
            params["target"] = target
        return "file", params
    if target is not None:
        raise ValueError(f"--target names the column to predict in a CSV file; --data {data} is a dataset name")
    return DATA_ALIASES.get(data, data), params


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
    """One row per model: total training time, median round (ms), mean stragglers per round,
    faults (each worker death, non-finite or dropped result once, however many tasks it failed),
    the rounds waited out (``--close MU`` only), final training objective and the last held-out
    loss, accuracy and ROC AUC."""
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
            "time s": float(result.round_times.sum()),
            "round ms": 1e3 * float(np.median(result.round_times)),
            "strag": float(strag.sum(axis=1).mean()),
            "fails": len(result.faults),
            **({} if result.config.get("close", "decodable") == "decodable"
               else {"wait-outs": int(result.waitouts.sum())}),
            "loss": float(result.losses[-1, m]),
            "test loss": met.get("loss"),
            "acc": met.get("accuracy"),
            "AUC": met.get("roc_auc"),
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


def train_several(opts: dict) -> None:
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

    o = dict(opts)
    try:
        runs, pngs = _plan_runs(o)
    except (ValueError, TypeError, FileNotFoundError, ImportError, GradcodeError) as exc:
        _fail(exc, EXIT_USAGE, o["as_json"], err)
    results, errors = _run_each(runs, o)
    _report_several(runs, results, errors, pngs, o)


def _plan_runs(o: dict) -> tuple[list[dict], list[Path] | None]:
    """The runs of ``train_several``, each scheme built and its config objects made (so that a bad
    one is refused before anything runs), and the plot files; ``o["workers"]`` is set to the n the
    schemes share when ``-n`` is absent."""
    from gradcode.experiments.cli_output import plot_files
    from gradcode.experiments.cli_sim import params_per_scheme, parse_kv, parse_scheme
    from gradcode.runtime import build_scheme

    plot, run_dir = o["plot"], o["run_dir"]
    specs = split_schemes(o["scheme"])
    if len(set(specs)) < len(specs):
        raise ValueError(f"--scheme {o['scheme']} names a scheme twice")
    if run_dir is not None and run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--run-dir {run_dir} is a file; give a folder (each scheme gets a subfolder)")
    pngs = plot_files(plot, PLOT_FIGURES) if plot is not None else None
    parsed = [parse_scheme(spec) for spec in specs]
    params_of = params_per_scheme(parse_kv(o["code_param"], "--param"), parsed)
    if o["workers"] is None:  # n from the schemes that set one (they must agree), else the default
        own = sorted({p["n"] for p in params_of if "n" in p})
        if len(own) > 1:
            raise ValueError(f"the schemes set different n ({', '.join(map(str, own))}); they are compared on"
                             " the same workers: give one -n")
        o["workers"] = own[0] if own else _DEFAULT_WORKERS
    runs, taken = [], set()
    for spec, (name, _), params in zip(specs, parsed, params_of):
        if name == "auto":  # chosen during the run (torch models): refused below without --model
            configured = configs(o, name, params, run_dir=None if run_dir is None else run_dir / _subfolder(spec, taken))
            runs.append({"spec": spec, "name": name, "params": params, "configs": configured, "exact": True})
            continue
        built = build_scheme(name, workers=o["workers"], stragglers=o["stragglers"], seed=o["seed"],
                             code_params=params or None, verify=o["verify"])
        if built.n != o["workers"]:  # same injected delays need the same n
            raise ValueError(f"{spec} has n = {built.n} but --workers is {o['workers']}: the schemes are"
                             " compared on the same workers; leave n to --workers")
        code = getattr(built, "static_code", None)
        configured = configs(o, name, params, run_dir=None if run_dir is None else run_dir / _subfolder(spec, taken))
        runs.append({"spec": spec, "name": name, "params": params, "configs": configured,
                     "exact": bool(getattr(code, "exact", True)) if code is not None else True})
    return runs, pngs


def _run_each(runs: list[dict], o: dict) -> tuple[list, list]:
    """Train each run in turn: ``(results, errors)``, a result (``None`` when nothing ran) and an
    error text (``None`` when it finished) per run. A run that stops is reported and the next one
    starts; when the first run fails before any round, the command stops as a single run would."""
    from rich.markup import escape

    from gradcode.experiments.cli_output import err
    from gradcode.errors import GradcodeError

    results, errors = [], [None] * len(runs)
    for i, r in enumerate(runs):
        err.print(f"[{i + 1}/{len(runs)}] {escape(r['spec'])}", highlight=False)
        callback, finish = _progress(o["rounds"], err, enabled=True)
        try:
            with contextlib.redirect_stdout(ray_output(planned_failures=bool(o["fail"]))):
                result = run_configured(r["configs"], callback)
        except Exception as exc:
            result = getattr(exc, "result", None)  # the rounds a stopped run completed
            bad_args = isinstance(exc, (ValueError, TypeError, FileNotFoundError, ImportError))
            if not results and result is None and (bad_args or isinstance(exc, GradcodeError)):
                _fail(exc, EXIT_USAGE if bad_args else EXIT_FAILED, o["as_json"], err)  # nothing ran: as a single run would
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


def _report_several(runs: list[dict], results: list, errors: list, pngs: list[Path] | None, o: dict) -> None:
    """The table (or ``--json`` document) of ``train_several``, the planned deaths, the plots;
    exit status 1 when a run stopped or the plots could not be written."""
    from gradcode.experiments.cli_output import emit, err

    rows = comparison_rows(runs, results, errors)
    written, plot_error = [], None
    if pngs is not None and any(res is not None for res in results):
        try:  # before printing, so that the document names the files written; the records are saved
            written = write_comparison_plots(runs, results, pngs)
        except Exception as exc:  # noqa: BLE001 - a plot never loses the printed result
            plot_error = f"plots not written to {o['plot']}: {type(exc).__name__}: {exc}"
    if o["as_json"]:
        doc = {"schemes": [r["spec"] for r in runs], "rows": rows, "plots": [str(p) for p in written],
               "runs": [dict(res.to_json(), scheme=r["spec"], exact=r["exact"]) if res is not None
                        else {"scheme": r["spec"], "exact": r["exact"], "error": e}
                        for r, res, e in zip(runs, results, errors)]}
        emit(doc, as_json=True)
    else:
        columns = [c for c in rows[0] if any(row.get(c) is not None for row in rows)] if rows else None
        emit({"rows": rows}, as_json=False, columns=columns,
             title=f"gradcode train: {len(runs)} schemes, same data, seed and injected delays")
    if o["fail"]:
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
                base.setdefault(i, row["time s"])
            rows.append(row)
            model_of.append(i)
    for row, i in zip(rows, model_of):
        if i is not None:
            b = base.get(i)
            row["speedup"] = b / row["time s"] if b and row["time s"] > 0 else None
    return rows


def write_comparison_plots(runs: list[dict], results: list, paths: list[Path]) -> list[Path]:
    """Every run on the same axes: held-out loss and ROC AUC (accuracy where the problem has no
    AUC) against wall-clock time (Tandon Figs. 6-7), and time per round against the round's largest
    injected delay (Fig. 5). Inexact schemes are labelled so."""
    import matplotlib

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
    for label, res in drawn:
        for m in range(len(res.params)):
            pts = [x for x in res.metrics if x["model"] == m]
            if not pts:
                continue
            name = label + (f" model {m}" if len(res.params) > 1 else "")
            t = [x["elapsed"] for x in pts]
            (line,) = axes[0].plot(t, [x["loss"] for x in pts], marker=".", label=name)
            if score and score in pts[0]:
                axes[1].plot(t, [x[score] for x in pts], marker=".", color=line.get_color(), label=name)
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
