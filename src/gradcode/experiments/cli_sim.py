"""``gradcode simulate`` and ``gradcode compare``: the simulator from the command line.

``simulate`` runs one code or scheme family under a delay model (or a trace file) for ``--rounds`` rounds,
``--repeats`` times with seeds ``seed, seed + 1, ...`` (repeat ``i`` is exactly
``gradcode.simulate(code, model, rounds, seed=seed + i, close=...)``), and prints one row per
repeat plus a pooled row. ``compare`` runs several codes on the same draws (same seeds; every
delay model draws its randomness independently of the load, so the codes meet the same straggler
realisations) and prints mean / median / p95 round time and the speedup over uncoded; ``--plot``
writes a PNG of the mean round time per scheme and of the round-time CDF.

Code parameters: ``--workers`` (``n``) and ``--tolerance`` (``s``) for the codes that take them,
``--scheme-params key=value`` for any other (values are read as JSON when they parse: ``2``, ``1.5``,
``true``, ``[[0, 1]]``; otherwise as text). A scheme is ``NAME`` or ``NAME:key=value,key=value``
(in ``simulate`` too; inline values win over ``--scheme-params``).

Codes and scheme families: ``--scheme`` names a registered code (``gradcode.codes.CODES``) or a
scheme family of ``gradcode.schemes.SCHEMES`` (``gc-dc:clusters=4,r=3,ssi=perfect``), built by
:func:`build_code`; rows read what they need through the registry name, ``n`` and ``load`` (a
code's, or the :class:`~gradcode.schemes.Scheme` property). A scheme family has no static code, so
the simulator drives it on its event path (``--method auto``); each repeat gets a fresh scheme.
GC-DC's perfect straggler state information is the delay model's states of each round
(``observe_states``), e.g. ``-m gilbert-elliot``; under a model without states (``shifted-exp``)
every worker is reported as a non-straggler. Delay model: ``--delay-model/-m NAME`` with ``--delay-params/-M key=value``, or
``--trace FILE`` (``.npy``, ``.csv`` or an SGC pickle; ``--delay-params`` then sets the trace
options such as ``offset`` or ``wrap``).

Traces (SGC Sec. 2, App. J): how a trace sets ``n``, is adjusted to a scheme's load and bounds
the rounds of ``--jobs`` is :mod:`gradcode.experiments.cli_traces`. The tables give each run's
jobs and total time; ``--plot`` draws the jobs completed against time (SGC Fig. 2a).

Memory: runs keep their per-round tables only while small (``gradcode.simulate``'s default) or when
a per-round output needs them (``simulate --records``, ``compare --plot``); otherwise the numbers
come from running summaries, and ``quantile_rel_error`` says how exact median and p95 are (0.0:
exact, as numpy computes them on every round time).
"""

from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import typer

from gradcode._options import close_option, described, waitout_option
from gradcode._validation import check_closing_rule, check_int
from gradcode.codes import make_code
from gradcode.errors import GradcodeError
from gradcode.experiments.cli_options import Output, Values, accepted_params, command, options, params_per_scheme, parse_scheme
from gradcode.experiments.cli_output import (PLOT_HELP, RunProgress, emit, exit_code_of, fail, make_parents,
                                             plot_files, warn)
from gradcode.experiments.cli_traces import (build_trace_model, check_trace_width, delay_of, is_trace, run_rounds,
                                             trace_workers)
from gradcode.schemes import make_scheme
from gradcode.schemes.factory import resolve_scheme, scheme_kind
from gradcode.sim import pooled_stats, simulate
from gradcode.stragglers import make_delay_model

# ---------------------------------------------------------------------------------- helpers


class Built:
    """A code or a scheme family built from the command line, by registry name.

    ``obj`` is the first instance (what rows are labelled with); :meth:`fresh` gives the object a
    run drives: the code itself (codes are immutable values), or a new scheme built from the same
    parameters (a scheme keeps state from round to round: its straggler history, GC-DC's
    observations), so that repeat ``i`` and every compared scheme start from round 0.
    """

    def __init__(self, name: str, kind: str, obj, params: dict):
        self.name, self.kind, self.obj, self.params = name, kind, obj, dict(params)
        self._used = False

    def fresh(self):
        if self.kind == "code" or not self._used:
            self._used = True
            return self.obj
        return make_scheme(self.name, **self.params)

    @property
    def n(self) -> int:
        return int(self.obj.n)

    @property
    def exact(self) -> bool:
        """Whether the decoded gradient is exact (every scheme family is; the ``ignore`` baseline
        is an estimate)."""
        return bool(getattr(self.obj, "exact", True))

    @property
    def load(self) -> float | None:
        """Data fraction computed per worker per round: ``code.load``, or the scheme's ``load``
        (``None`` for a scheme that does not declare one)."""
        load = getattr(self.obj, "load", None)
        return None if load is None else float(load)

    @property
    def label(self) -> str:
        return label(self.obj)


def build_code(name: str, params: dict, workers: int | None, tolerance: int | None,
               jobs: int | None = None) -> Built:
    """A code (``make_code``) or a scheme family (``make_scheme``: GC-DC, ...) by name.
    ``--workers`` fills ``n`` and ``--tolerance`` fills ``s`` where the entry takes them (a
    warning says when ``--tolerance`` does not apply); ``--jobs`` fills ``jobs`` of the
    sequential schemes (jobs past ``J`` are then empty, so the last ``T`` rounds carry only the
    unfinished work of jobs ``< J``); ``params`` are passed as given, and the registries' errors
    name the accepted parameters."""
    kind = scheme_kind(name)
    accepted = accepted_params(name)
    if kind == "scheme":
        hidden = [k for k in params if k not in accepted]
        if hidden:  # e.g. dim or assignment: set by the drivers or the Python API
            raise ValueError(f"scheme {name!r} does not take {', '.join(map(repr, hidden))} from the"
                             f" command line; its parameters are {', '.join(accepted)}")
    spec = resolve_scheme(name, params, n=workers, s=tolerance, jobs=jobs)
    if "s" in spec.ignored:
        warn(f"{kind} {name!r} takes no s (its parameters: {', '.join(accepted)}); "
             f"--tolerance {tolerance} is ignored for it")
    return Built(name, kind, make_code(name, **spec.params) if kind == "code" else spec.build(), dict(spec.params))


#: the delay model simulate and compare use when neither --delay-model nor --trace is given
DEFAULT_MODEL = "shifted-exp"


def build_model(model: str, params: dict | None, trace, trace_loads=None, load_slope=None):
    """The delay model: ``--delay-model`` with its ``--delay-params``, or the trace(s) of
    ``--trace`` load-adjusted as :func:`build_trace_model` says. Returns ``(model, trace_info)``:
    ``trace_info`` (``None`` without a trace) says how the trace is load-adjusted."""
    params = dict(params or {})
    traces = [] if trace is None else [trace] if isinstance(trace, (str, Path)) else list(trace)
    if traces:
        if model not in (DEFAULT_MODEL, "trace"):
            raise ValueError(f"--trace replays the file in place of a delay model; --delay-model {model} would be ignored:"
                             " give one of them")
        return build_trace_model(traces, trace_loads, load_slope, params)
    if trace_loads or load_slope is not None:
        raise ValueError("--trace-load and --load-slope adjust a trace to a scheme's load: they need --trace FILE")
    return make_delay_model(model, **params), None


def job_completions(results) -> list[np.ndarray]:
    """Per run (with records), the sorted clock times at which its jobs finished: the end of the
    round that decoded each (SGC Fig. 2a's curve is the count of these against time)."""
    out = []
    for r in results:
        ends = np.cumsum(r.round_times)
        done = r.job_done_round
        out.append(np.sort(ends[done[done >= 0]]))
    return out


def parse_close(close: str):
    """``--close`` as the simulator takes it: ``"decodable"`` or the number mu
    (:func:`~gradcode._validation.check_closing_rule` reads the text)."""
    mu = check_closing_rule(close)
    return "decodable" if mu is None else mu


def label(code) -> str:
    return repr(code).strip("<>")


@dataclass(frozen=True)
class Simulation:
    """What a ``simulate`` or ``compare`` run is, besides its schemes, one field per command-line
    option (:mod:`~gradcode.experiments.cli_options`): the workers, tolerance and parameters the
    schemes are built with, the delay model (``delay_model`` with ``delay_params``, or ``trace``
    files with ``trace_load`` and ``load_slope``, :func:`build_model`), the length (``rounds``, or
    the ``J + T`` rounds of ``jobs``), ``repeats`` with seeds ``seed, seed + 1, ...``, the closing
    rule (``close``, ``waitout``), the simulator's ``method``, ``transport`` and ``master_link``; and,
    for the program only,
    ``keep_records`` (keep per-round tables: True for ``--records`` and ``--plot``; None, while
    small) and ``progress`` (a bar on a terminal)."""

    workers: int | None = described(None, "Number of workers (the code's n).", short="-n")
    tolerance: int | None = described(None, "Stragglers the codes tolerate (their s).", short="-s")
    scheme_params: Mapping | None = described(None, "key=value parameter of the schemes (repeatable; compare: of"
                                                    " every scheme but uncoded).", short="-p")
    delay_model: str = described(DEFAULT_MODEL, "Delay model (see `gradcode models`).", short="-m")
    delay_params: Mapping | None = described(None, "key=value parameter of --delay-model, or of --trace (offset,"
                                                   " wrap) (repeatable).", short="-M")
    trace: Sequence[Path] | None = described(None, "Replay a (rounds, workers) trace file instead of a model (n is"
                                                   " its number of workers); repeat it, each with --trace-load, to"
                                                   " fit the load slope.")
    trace_load: Sequence[float] | None = described(None, "Load each --trace was recorded at (one per trace; default"
                                                         " 1/n, uncoded, when --load-slope is given).")
    load_slope: float | None = described(None, "Seconds per unit load: a trace is adjusted to a scheme's load L by"
                                               " adding (L - trace load) * slope (SGC App. J); fitted from the traces"
                                               " when several are given. Without it one trace replays as recorded.")
    rounds: int | None = described(None, "Rounds per run (default: 1000, or the trace's length).", short="-r")
    jobs: int | None = described(None, "Run J jobs instead of --rounds: J + T rounds for a scheme of delay T, so"
                                       " that every scheme's total time is that of the same J jobs.", short="-J")
    repeats: int = described(1, "Runs, with seeds seed, seed+1, ...")
    seed: int = described(0, "Seed of the first run.")
    close: str | float = close_option()
    waitout: str = waitout_option()
    method: str = described("auto", "auto | fast (vectorized) | events (protocol path).")
    transport: str = described("star", "How messages reach the master: star (each to the master, the papers'"
                                       " model) or collective (notes to the master, then a ring all-reduce"
                                       " among the round's members over the same links).")
    master_link: str = described("separate", "The master's link: separate (it receives on every worker's link at"
                                             " once, the papers' model) or shared (one link: the star's messages"
                                             " queue for it and the parameters go back over it).")
    keep_records: bool | None = described(None, "Keep the per-round tables.", cli=False)
    progress: bool = described(False, "Show a progress bar.", cli=False)

    def __post_init__(self):
        check_int("repeats", self.repeats, minimum=1)
        if self.jobs is not None:
            check_int("jobs", self.jobs, minimum=1)
        check_closing_rule(self.close, self.waitout)  # refused before anything runs

    def built_delay_model(self):
        """``(model, trace_info)`` of :func:`build_model`."""
        return build_model(self.delay_model, self.delay_params, self.trace, self.trace_load, self.load_slope)

    def bar(self, rounds: int):
        """The progress bar over ``rounds`` rounds in all (a no-op context without ``progress``)."""
        return RunProgress(rounds) if self.progress else contextlib.nullcontext()


def run_repeats(built, model, rounds: int, run: Simulation, progress=None):
    """``run.repeats`` runs of ``built`` (a :class:`Built`: a fresh scheme per repeat, or a code)
    under ``model`` for ``rounds`` rounds with seeds ``run.seed + i``. ``run.records``: keep the
    per-round tables (``run.keep_records`` True: for --records files and --plot); by default only while small, so long
    runs keep summaries in bounded memory (see gradcode.simulate). A scheme family (no static
    code) runs on the simulator's event path, which ``method="auto"`` picks by itself.
    ``progress``: a :class:`~gradcode.experiments.cli_output.RunProgress` that every repeat
    advances, or None."""
    close = parse_close(run.close)

    def bar():
        if progress is not None:
            return progress.run(built.label if isinstance(built, Built) else label(built), rounds)
        return None

    return [
        simulate(built.fresh() if isinstance(built, Built) else built, model, rounds, seed=run.seed + i,
                 close=close, method=run.method, progress=bar(), records=run.keep_records, waitout=run.waitout,
                 transport=run.transport, master_link=run.master_link)
        for i in range(run.repeats)
    ]


def _write_records(path: Path, rows: list[dict]) -> None:

    if path.suffix == ".json":
        path.write_text(json.dumps({"rows": rows}) + "\n")
    elif path.suffix == ".csv":
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            for r in rows:
                writer.writerow({**r, "jobs": ";".join(map(str, r["jobs"]))})
    else:
        raise ValueError(f"--records must end in .json or .csv, got {str(path)!r}")


def _jobs_axes(ax, names: list[str], completions: list) -> None:
    """Jobs completed against clock time (SGC Fig. 2a): per scheme, the mean over runs of the
    time its k-th job finished, for k up to the fewest jobs any run finished, shaded +- one
    standard deviation over the runs."""
    for name, runs in zip(names, completions):
        if not runs:
            continue
        k = min(len(c) for c in runs)
        if k == 0:
            continue
        t = np.stack([c[:k] for c in runs])
        mean, y = t.mean(axis=0), np.arange(1, k + 1)
        (line,) = ax.step(np.r_[0.0, mean], np.r_[0, y], where="post", label=name)
        if len(runs) > 1:
            sd = t.std(axis=0)
            ax.fill_betweenx(y, mean - sd, mean + sd, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("jobs completed")
    ax.set_title("jobs completed against time")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def plot_jobs(path: Path, names: list[str], completions: list) -> None:
    """PNG: jobs completed against clock time per scheme (SGC Fig. 2a), from
    :func:`job_completions` of each scheme's runs (mean over runs, +- one standard deviation)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    _jobs_axes(ax, names, completions)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_comparison(path: Path, names: list[str], times: list[np.ndarray], completions: list | None = None) -> None:
    """PNG: mean round time per scheme (bars, p95 marked), the round-time CDF of each and, given
    ``completions`` (:func:`job_completions` per scheme), the jobs completed against time (SGC
    Fig. 2a)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 3 if completions is not None else 2
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5))
    ax1, ax2 = axes[0], axes[1]
    means = [t.mean() for t in times]
    p95 = [np.percentile(t, 95) for t in times]
    x = np.arange(len(names))
    ax1.bar(x, means, color="tab:blue", label="mean")
    ax1.scatter(x, p95, color="tab:red", marker="_", s=400, label="p95", zorder=3)
    ax1.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax1.set_ylabel("round time (s)")
    ax1.set_title("mean round time")
    ax1.legend()
    for name, t in zip(names, times):
        s = np.sort(t)
        ax2.step(s, np.arange(1, s.size + 1) / s.size, where="post", label=name)
    ax2.set_xlabel("round time (s)")
    ax2.set_ylabel("P[round time <= x]")
    ax2.set_title("round-time CDF")
    ax2.legend(fontsize=7)
    ax2.grid(alpha=0.3)
    if completions is not None:
        _jobs_axes(axes[2], names, completions)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------- commands


def simulate_doc(scheme: str, run: Simulation) -> tuple[dict, list]:
    """The document ``gradcode simulate`` prints, and the runs (with per-round records if
    ``run.keep_records``). With a trace, ``n`` is the trace's number of workers unless ``workers`` says
    (and then must match it); ``run.jobs``: run ``J + T`` rounds (``run.rounds`` otherwise)."""
    name, inline = parse_scheme(scheme)
    dmodel, trace_info = run.built_delay_model()
    params = {**(run.scheme_params or {}), **inline}
    code = build_code(name, params, trace_workers(run.workers, dmodel, params), run.tolerance, run.jobs)
    check_trace_width(code, dmodel)
    rounds = run_rounds(run.rounds, run.jobs, code, dmodel)
    with run.bar(rounds * run.repeats) as bar:
        results = run_repeats(code, dmodel, rounds, run, progress=bar)
    rows = []
    for i, res in enumerate(results):
        s = res.summary()
        rows.append({
            "repeat": i, "seed": run.seed + i, "jobs": s["jobs_done"], "total_time": s["total_time"],
            "mean": s["mean"], "median": s["median"], "p95": s["p95"],
            "stragglers_per_round": s["stragglers_per_round"], "waitouts": s["waitouts"],
        })
    summary = {
        "scheme": code.label, "kind": code.kind, **_delay_record(run, dmodel), "close": results[0].close,
        "transport": run.transport, "master_link": run.master_link, "link_model": results[0].transport,
        "rounds": rounds,
        "delay": delay_of(code), "jobs": _jobs_done(results), "repeats": run.repeats, "load": code.load,
        "total_time": float(np.mean([r.total_time for r in results])),
        **pooled_stats(results), "waitouts": int(sum(r.waitouts for r in results)),
    }
    if trace_info is not None:
        summary["trace"] = trace_info
    return {"summary": summary, "rows": rows}, results


def _delay_record(run: Simulation, dmodel) -> dict:
    """How a document names the delay model: by the option's name and parameters (its repr, the
    model as built, under ``delay_model_built``), ``"trace"`` for a replayed trace."""
    return {"delay_model": "trace" if run.trace else run.delay_model, "delay_params": dict(run.delay_params or {}),
            "delay_model_built": repr(dmodel)}


def _jobs_done(results) -> int | float:
    """Jobs the runs finished: an int when every run finished as many (the usual case), else the mean."""
    done = [r.stats.jobs_done for r in results]
    return done[0] if len(set(done)) == 1 else float(np.mean(done))


def compare_codes(specs: list[tuple[str, dict]], params: dict | None, workers, tolerance, dmodel,
                  jobs) -> list:
    """The :class:`Built` schemes ``compare`` runs: each of ``specs`` with the ``--scheme-params`` values
    it takes (:func:`params_per_scheme`; none to the ``uncoded`` baseline) and ``n`` from
    ``workers`` or the trace, plus ``uncoded`` first when not named; all must share one ``n``,
    which a trace must have (:func:`check_trace_width`). Warns when a trace replays the same times
    for schemes of different loads."""
    passed = params_per_scheme(params or {}, specs, none_takes="no compared scheme", skip=("uncoded",))
    # n from the trace goes to each scheme that sets no n of its own in what it is given
    codes = [build_code(name, q, trace_workers(workers, dmodel, q), tolerance if name != "uncoded" else None, jobs)
             for (name, _), q in zip(specs, passed)]
    if not any(c.name == "uncoded" for c in codes):
        codes.insert(0, build_code("uncoded", {"n": codes[0].n}, None, None))
    ns = {c.n for c in codes}
    if len(ns) > 1:
        raise ValueError(f"compare needs one number of workers for every scheme, got {sorted(ns)}")
    for code in codes:
        check_trace_width(code, dmodel)
    loads = {round(c.load, 12) for c in codes if c.load is not None}
    if is_trace(dmodel) and dmodel.trace_load is None and len(loads) > 1:
        warn("the trace replays its recorded times for every scheme whatever its load, so the codes' extra"
             " computation is not charged; pass --load-slope A (seconds per unit load; the trace is then taken"
             f" as recorded uncoded, at 1/n = {1 / codes[0].n:.4g}, unless --trace-load says otherwise), or fit"
             " the slope from traces at several loads: --trace F1 --trace-load L1 --trace F2 --trace-load L2")
    return codes


def compare_doc(schemes: list[str] | None, run: Simulation) -> tuple[dict, list[str], list[np.ndarray | None], list]:
    """The document ``gradcode compare`` prints, the scheme labels, their pooled round times and
    the clock times their runs finished their jobs (:func:`job_completions`; ``None`` for a scheme
    whose runs kept no per-round records: pass ``records=True`` to plot). ``run.jobs``: every
    scheme runs the ``J + T`` rounds its ``J`` jobs take (``T`` its delay); otherwise all run
    ``run.rounds``. The speed-up is the uncoded run's total time over each scheme's."""
    dmodel, trace_info = run.built_delay_model()
    specs = [parse_scheme(s) for s in schemes] if schemes else _default_specs(trace_workers(run.workers, dmodel),
                                                                             run.tolerance)
    codes = compare_codes(specs, run.scheme_params, run.workers, run.tolerance, dmodel, run.jobs)
    plan = [run_rounds(run.rounds, run.jobs, code, dmodel) for code in codes]
    if run.jobs is None and len({n - delay_of(c) for n, c in zip(plan, codes)}) > 1:
        warn(f"in {plan[0]} rounds a scheme with delay T finishes {plan[0]} - T jobs, so the schemes' totals"
             " cover different numbers of jobs; pass --jobs J to time the same J jobs for every scheme"
             " (J + T rounds each)")
    names, pooled, curves, rows = [], [], [], []
    with run.bar(sum(plan) * run.repeats) as bar:
        for code, n_rounds in zip(codes, plan):
            results = run_repeats(code, dmodel, n_rounds, run, progress=bar)
            link_model = results[0].transport  # the same links for every scheme
            label = code.label + ("" if code.exact else " (inexact)")  # in the table and the plot alike
            names.append(label)
            kept = all(r.has_records for r in results)
            pooled.append(np.concatenate([r.round_times for r in results]) if kept else None)
            curves.append(job_completions(results) if kept else None)
            rows.append({
                "scheme": label, "exact": code.exact,
                "load": code.load, "rounds": n_rounds, "jobs": _jobs_done(results), **pooled_stats(results),
                "total_time": float(np.mean([r.total_time for r in results])),
                "stragglers_per_round": float(np.mean([r.stats.stragglers_per_round for r in results])),
                "waitouts": int(sum(r.waitouts for r in results)),
            })
    # the uncoded run's total over each scheme's: the mean-round-time ratio when all run as many
    # rounds; the ratio of the times of the same J jobs with --jobs
    base = next(r for r, c in zip(rows, codes) if c.name == "uncoded")["total_time"]
    for r in rows:
        r["speedup"] = base / r["total_time"] if r["total_time"] > 0 else None
    # the fastest exact scheme: an inexact baseline (ignore) is faster by not computing the gradient
    exact = [r for r in rows if r["exact"] and r["speedup"] is not None]
    best = max(exact, key=lambda r: r["speedup"])["scheme"] if exact else None
    doc = {**_delay_record(run, dmodel), "close": parse_close(run.close), "transport": run.transport,
           "master_link": run.master_link, "link_model": link_model,
           "rounds": plan[0] if len(set(plan)) == 1 else None,
           "jobs": run.jobs, "repeats": run.repeats, "seed": run.seed, "fastest_exact": best, "rows": rows}
    if trace_info is not None:
        doc["trace"] = trace_info
    return doc, names, pooled, curves


def _default_specs(workers, tolerance):
    n = workers or 12
    s = 1 if tolerance is None else tolerance
    specs = [("uncoded", {}), ("ignore", {"s": s}), ("crc", {"s": s})]
    if n % (s + 1) == 0:
        specs.insert(2, ("frc", {"s": s}))
    return specs


@dataclass(frozen=True)
class SimulateCommand:
    """``gradcode simulate``'s own options (the rest are :class:`Simulation`'s)."""

    scheme: str = described("crc", "Code or scheme family to run, NAME or NAME:key=value,... (see `gradcode"
                                   " codes`).")
    records: Path | None = described(None, "Write per-round records (.csv or .json).")
    plot: Path | None = described(None, "Draw the jobs completed against time (SGC Fig. 2a; mean over the"
                                        " repeats): simulate_jobs.png. " + PLOT_HELP)


@dataclass(frozen=True)
class CompareCommand:
    """``gradcode compare``'s own options (the rest are :class:`Simulation`'s)."""

    scheme: Sequence[str] | None = described(None, "NAME or NAME:key=value,... (repeatable); default: uncoded,"
                                                   " ignore, frc, crc.")
    plot: Path | None = described(None, "Draw the mean round time per scheme, the CDF and the jobs completed"
                                        " against time (SGC Fig. 2a): compare.png. " + PLOT_HELP)


def simulate_command(o: Values):
    """Simulate a code or a scheme (e.g. gc-dc) under a delay model or a trace, in virtual time."""
    try:
        pngs = plot_files(o.plot, ["simulate_jobs"]) if o.plot is not None else None  # refused before the run
        keep = True if o.records is not None or o.plot is not None else None
        run = Simulation(**o.fields_of(Simulation, keep_records=keep, progress=True))
        doc, results = simulate_doc(o.scheme, run)
        if o.records is not None:
            rows = [dict(r, repeat=i) for i, res in enumerate(results) for r in res.to_records()]
            _write_records(o.records, rows)
        if o.plot is not None:
            make_parents(pngs)
            plot_jobs(pngs[0], [doc["summary"]["scheme"]], [job_completions(results)])
            doc["plot"] = str(pngs[0])
    except (ValueError, TypeError, OSError, MemoryError, GradcodeError) as exc:
        fail(exc, exit_code_of(exc), as_json=o.json)
    s = doc["summary"]
    via = "" if s["link_model"] == "star" else f", transport {s['link_model']}"
    title = (f"{s['scheme']} under {s['delay_model_built']}, close={s['close']}{via}: {s['rounds']} rounds x"
             f" {s['repeats']}; {s['jobs']} jobs in {s['total_time']:.4g} s (mean total); mean round {s['mean']:.4g} s,"
             f" median {s['median']:.4g} s, p95 {s['p95']:.4g} s")
    emit(doc, as_json=o.json, title=title)


def compare_command(o: Values):
    """Compare several codes and schemes on the same random draws (mean/median/p95 round time, speedup over uncoded)."""
    try:
        pngs = plot_files(o.plot, ["compare"]) if o.plot is not None else None  # refused before the run
        # the plot's CDF needs every round time: keep the records only then
        run = Simulation(**o.fields_of(Simulation, keep_records=True if o.plot is not None else None, progress=True))
        doc, names, pooled, curves = compare_doc(o.scheme, run)
        if o.plot is not None:
            make_parents(pngs)
            plot_comparison(pngs[0], names, pooled, curves)
            doc["plot"] = str(pngs[0])
    except (ValueError, TypeError, OSError, MemoryError, GradcodeError) as exc:
        fail(exc, exit_code_of(exc), as_json=o.json)
    length = f"{doc['jobs']} jobs (J + T rounds each)" if doc["jobs"] else f"{doc['rounds']} rounds"
    emit(doc, as_json=o.json,
         title=f"{doc['delay_model_built']}, close={doc['close']}, transport {doc['transport']}"
               f"{', one link at the master' if doc['master_link'] == 'shared' else ''}: {length} x {run.repeats}"
               " (same draws for every"
               f" scheme); fastest exact: {doc['fastest_exact']}",
         columns=["scheme", "load", "jobs", "total_time", "mean", "median", "p95", "speedup", "stragglers_per_round",
                  "waitouts"])


def register(app: typer.Typer) -> None:
    run = ("Simulation", Simulation)
    app.command("simulate")(command(options(("Scheme and output", SimulateCommand), ("Scheme and output", Output),
                                            run), simulate_command, name="simulate", doc=simulate_command.__doc__))
    app.command("compare")(command(options(("Schemes and output", CompareCommand), ("Schemes and output", Output),
                                           run), compare_command, name="compare", doc=compare_command.__doc__))
