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
``final_params_checksum``, ``arrivals`` and the rest of :meth:`TrainResult.to_json`). ``--plot DIR``
writes ``loss_auc_vs_time.png`` (held-out loss and ROC AUC against wall-clock time, Tandon Fig. 7)
and ``round_time_vs_delay.png`` (each round's time against the largest delay injected in it, with
the line ``time = delay`` that an uncoded run follows, Tandon Fig. 5).

Data: ``--data`` is a dataset name (``synthetic`` = ``tandon-synthetic``, ``amazon`` =
``amazon-synthetic``, or any registered name) with ``--data-param key=value``, or your own file
(``--data my.csv --target label [--data-param categorical=colour,city]``, ``--data my.npz`` with
arrays ``X`` and ``y``, ``--data my.svm`` in LibSVM format); ``--problem`` defaults
to the data's task (logistic, linear, softmax). Optimizer: ``--optimizer gd|nesterov|sgd`` with
``--lr`` or ``--opt-param key=value`` (default step ``1/L``). Chaos: ``--fail W@R`` (repeatable)
makes worker W's process exit in round R. ``--checkpoint-every K`` and ``--resume`` (same
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
import json
import sys
from pathlib import Path

import typer

DATA_ALIASES = {"synthetic": "tandon-synthetic", "amazon": "amazon-synthetic"}


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)


def train_command(
    scheme: str = typer.Option("crc", "--scheme", "--code",
                               help="Code or scheme family, NAME or NAME:key=value,... (see `gradcode codes`)."),
    workers: int = typer.Option(4, "--workers", "-n", help="Number of workers n."),
    stragglers: int = typer.Option(0, "--stragglers", "-s", help="Workers delayed per round; tolerance s of codes that take one."),
    delay: float = typer.Option(0.0, "--delay", help="Seconds each delayed worker sleeps per round."),
    delay_model: str = typer.Option(None, "--delay-model", help="Another delay model instead of the fixed delays."),
    delay_param: list[str] = typer.Option(None, "--delay-param", help="key=value for --delay-model (repeatable)."),
    code_param: list[str] = typer.Option(None, "--param", "-p", help="key=value code/scheme parameter (repeatable)."),
    data: str = typer.Option("synthetic", "--data", help="Dataset: synthetic, amazon, breast-cancer, digits, ...,"
                             " or your own FILE (.csv with --target, .npz with X and y, .svm/.libsvm)."),
    target: str = typer.Option(None, "--target", help="CSV files: the column to predict."),
    data_param: list[str] = typer.Option(None, "--data-param", help="key=value dataset parameter (repeatable)."),
    problem: str = typer.Option(None, "--problem", help="logistic, linear, softmax, mlp, cnn (default: by task)."),
    optimizer: str = typer.Option("gd", "--optimizer", help="gd, nesterov or sgd."),
    lr: float = typer.Option(None, "--lr", help="Learning rate of gd/nesterov (default 1/L)."),
    opt_param: list[str] = typer.Option(None, "--opt-param", help="key=value optimizer parameter (repeatable)."),
    rounds: int = typer.Option(100, "--rounds", help="Training rounds."),
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
    verify: bool = typer.Option(False, "--verify", help="Wait for two results more than decoding needs and check "
                                "them against each other: a worker whose result is wrong is named and left out."),
    plot: Path = typer.Option(None, "--plot", help="Directory for PNG plots."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
):
    """Train a model with gradient coding on Ray workers (embedded local cluster by default)."""
    from gradcode.cli import emit, err
    from gradcode.experiments.cli_sim import parse_kv, parse_scheme
    from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig, TrainSpec, train

    try:
        scheme, inline = parse_scheme(scheme)  # gc-dc:clusters=2,r=2,ssi=perfect
        code_params = {**parse_kv(code_param, "--param"), **inline}
        if resume and run_dir is None:  # the default run dir is a new timestamped folder
            raise ValueError("--resume needs --run-dir: the folder of the run to continue")
        if plot is not None and plot.exists() and not plot.is_dir():  # found out now, not after training
            raise ValueError(f"--plot {plot} is a file; give a folder for the PNG plots")
        data_name, data_params = _data_source(data, target, parse_kv(data_param, "--data-param"))
        dm = None
        if delay_model is not None:
            dm = (delay_model, parse_kv(delay_param, "--delay-param"))
        elif delay_param:
            raise ValueError("--delay-param sets a parameter of --delay-model, which is not given;"
                             " add --delay-model NAME (gradcode models lists them)")
        opt_params = parse_kv(opt_param, "--opt-param")
        if lr is not None:
            opt_params["lr"] = lr
        spec = TrainSpec(scheme, workers=workers, stragglers=stragglers, delay=delay, delay_model=dm,
                         code_params=code_params or None, data=data_name, data_params=data_params, problem=problem,
                         optimizer=optimizer, optimizer_params=opt_params, models=models, seed=seed, verify=verify,
                         inject=inject)
        cluster = ClusterConfig(address=address, num_cpus=num_cpus, start_timeout=start_timeout)
        faults = FaultConfig(fail=tuple(fail or ()), round_timeout=round_timeout)
        run = RunConfig(rounds=rounds, checkpoint_every=checkpoint_every, run_dir=run_dir, eval_every=eval_every,
                        resume=resume, overwrite=overwrite)
        callback, finish = _progress(rounds, err, enabled=True)
        try:
            # Ray's driver prints some cluster messages (raylet warnings) to sys.stdout: keep
            # stdout for the one JSON document / table
            with contextlib.redirect_stdout(sys.stderr):
                result = train(spec, cluster=cluster, faults=faults, run=run, callback=callback)
        finally:
            finish()
    except Exception as exc:
        from gradcode.errors import GradcodeError

        started = getattr(exc, "result", None) is not None  # train() attaches the completed rounds
        if isinstance(exc, (ValueError, TypeError, FileNotFoundError, ImportError)) and not started:
            _fail(exc, 2, as_json, err)  # refused before the run started: bad arguments, a missing extra
        if isinstance(exc, GradcodeError):  # round timeout, divergence, cluster, checkpoint...
            _fail(exc, 1, as_json, err)
        if as_json and started:  # a bug: its traceback, after the run's records
            emit(exc.result.to_json(), as_json=True)
        raise
    # the result first: a finished run is never lost to an error while plotting
    if as_json:
        emit(result.to_json(), as_json=True)
    else:
        emit({"rows": summary_rows(result)}, as_json=False, title=f"gradcode train ({result.run_dir})")
    if plot is not None:
        try:
            for path in write_plots(result, plot):
                err.print(f"wrote {path}")
        except OSError as exc:
            err.print(f"[red]error:[/red] plots not written to {plot}: {exc} (the run's records are in"
                      f" {result.run_dir})", highlight=False)
            raise typer.Exit(1) from None


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


def _fail(exc: Exception, code: int, as_json: bool, err) -> None:
    """Report a run that could not start or stopped, and exit with ``code``: the message on
    stderr and, with ``--json``, one JSON document on stdout (the records of the completed rounds
    when the run started, else just the error)."""
    from rich.markup import escape

    from gradcode.cli import emit

    err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
    result = getattr(exc, "result", None)
    if result is not None:
        err.print(f"{result.round_times.size} completed round(s) kept in {escape(str(result.run_dir))}",
                  highlight=False)
    if as_json:
        doc = result.to_json() if result is not None else {"error": str(exc), "error_type": type(exc).__name__}
        emit(doc, as_json=True)
    raise typer.Exit(code) from None


def summary_rows(result) -> list[dict]:
    """One row per model: total training time, median round (ms), mean stragglers per round,
    faults (each worker death, non-finite or dropped result once, however many tasks it failed),
    final training objective and the last held-out loss, accuracy and ROC AUC."""
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


def write_plots(result, directory: Path) -> list[Path]:
    """Loss and AUC against wall-clock time (Tandon Fig. 7); time per round against the round's
    largest injected delay (Tandon Fig. 5: uncoded follows ``time = delay``, coded stays flat)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    name = result.config["code"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for m in range(len(result.params)):
        pts = [r for r in result.metrics if r["model"] == m]
        if not pts:
            continue
        t = [r["elapsed"] for r in pts]
        axes[0].plot(t, [r["loss"] for r in pts], marker=".", label=f"{name} model {m}")
        if "roc_auc" in pts[0]:
            axes[1].plot(t, [r["roc_auc"] for r in pts], marker=".", label=f"{name} model {m}")
    axes[0].set(xlabel="wall-clock time (s)", ylabel="held-out loss", title="loss vs time")
    axes[1].set(xlabel="wall-clock time (s)", ylabel="held-out ROC AUC", title="AUC vs time")
    for ax in axes:
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(directory / "loss_auc_vs_time.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 4))
    injected = result.injected.max(axis=1)
    ax.scatter(injected, result.round_times, s=12, label=name)
    top = float(max(injected.max(initial=0.0), result.round_times.max(initial=0.0)))
    ax.plot([0, top], [0, top], "k--", lw=0.8, label="time = delay")
    ax.set(xlabel="largest injected delay in the round (s)", ylabel="time per round (s)",
           title="time per round vs injected delay")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(directory / "round_time_vs_delay.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    (directory / "train_summary.json").write_text(json.dumps(summary_rows(result), indent=1))
    np.save(directory / "round_times.npy", result.round_times)
    return paths
