"""``gradcode simulate`` and ``gradcode compare``: the simulator from the command line.

``simulate`` runs one code or scheme family under a delay model (or a trace file) for ``--rounds`` rounds,
``--repeats`` times with seeds ``seed, seed + 1, ...`` (repeat ``i`` is exactly
``gradcode.simulate(code, model, rounds, seed=seed + i, close=...)``), and prints one row per
repeat plus a pooled row. ``compare`` runs several codes on the same draws (same seeds; every
delay model draws its randomness independently of the load, so the codes meet the same straggler
realisations) and prints mean / median / p95 round time and the speedup over uncoded; ``--plot``
writes a PNG of the mean round time per scheme and of the round-time CDF.

Code parameters: ``--workers`` (``n``) and ``--stragglers`` (``s``) for the codes that take them,
``--param key=value`` for any other (values are read as JSON when they parse: ``2``, ``1.5``,
``true``, ``[[0, 1]]``; otherwise as text). A scheme is ``NAME`` or ``NAME:key=value,key=value``
(in ``simulate`` too; inline values win over ``--param``).

Codes and scheme families: ``--scheme`` names a registered code (``gradcode.codes.CODES``) or a
scheme family of ``gradcode.schemes.SCHEMES`` (``gc-dc:clusters=4,r=3,ssi=perfect``), built by
:func:`build_code`; rows read what they need through the registry name, ``n`` and ``load`` (a
code's, or the :class:`~gradcode.schemes.Scheme` property). A scheme family has no static code, so
the simulator drives it on its event path (``--method auto``); each repeat gets a fresh scheme.
GC-DC's perfect straggler state information is the delay model's states of each round
(``observe_states``), e.g. ``-m gilbert-elliot``; under a model without states (``shifted-exp``)
every worker is reported as a non-straggler. Delay model: ``--model NAME`` with ``--model-param key=value``, or
``--trace FILE`` (``.npy``, ``.csv`` or an SGC pickle; ``--model-param`` then sets the trace
options such as ``trace_load`` or ``wrap``).

Memory: runs keep their per-round tables only while small (``gradcode.simulate``'s default) or when
a per-round output needs them (``simulate --records``, ``compare --plot``); otherwise the numbers
come from running summaries, and ``quantile_rel_error`` says how exact median and p95 are (0.0:
exact, as numpy computes them on every round time).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import typer

from gradcode.errors import GradcodeError

_CLOSE_HELP = "Closing rule: 'decodable' (end when the job decodes) or a number mu (SGC mu-tolerance rule)."


# ---------------------------------------------------------------------------------- helpers


def parse_kv(items: list[str] | None, what: str) -> dict:
    """``["k=v", ...]`` -> dict, values parsed as JSON when possible."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{what} must look like key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def parse_scheme(spec: str) -> tuple[str, dict]:
    """``"crc"`` or ``"crc:s=2,seed=1"`` -> (name, params). Commas split parameters only where a
    ``key=`` follows, so JSON values keep theirs (``"gc-sc:clusters=2,assignment=[[0,1],[2,3]]"``)."""
    name, _, rest = spec.partition(":")
    items = [p for p in re.split(r",(?=\s*[A-Za-z_][\w-]*\s*=)", rest) if p.strip()] if rest else []
    return name.strip(), parse_kv(items, f"scheme parameter in {spec!r}")


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
        from gradcode.schemes import make_scheme

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


def _kind(name: str) -> str:
    """``"scheme"`` for a scheme family of ``SCHEMES`` (``gc-dc``), ``"code"`` for a code; an unknown
    name raises the error that lists both registries."""
    from gradcode.schemes import SCHEMES, make_scheme

    if name in SCHEMES:
        return "scheme"
    if name in _available_codes():
        return "code"
    make_scheme(name)  # raises UnknownNameError listing the codes and the scheme families
    raise AssertionError("unreachable")


def accepted_params(name: str) -> dict:
    """``{parameter: default}`` of a code or a scheme family, as the command line may set them
    (a scheme's :attr:`api_only_params`, e.g. GC-DC's ``assignment`` object, are left out)."""
    from gradcode.codes import code_info
    from gradcode.schemes import SCHEMES

    if _kind(name) == "scheme":
        hidden = set(getattr(SCHEMES.get(name), "api_only_params", ()))
        return {k: v for k, v in SCHEMES.info(name)["params"].items() if k not in hidden}
    return dict(code_info(name)["params"])


def build_code(name: str, params: dict, workers: int | None, stragglers: int | None) -> Built:
    """A code (``make_code``) or a scheme family (``make_scheme``: GC-DC, ...) by name.
    ``--workers`` fills ``n`` and ``--stragglers`` fills ``s`` where the entry takes them (a
    warning says when ``--stragglers`` does not apply); ``params`` are passed as given, and the
    registries' errors name the accepted parameters."""
    from gradcode.codes import make_code
    from gradcode.schemes import make_scheme

    kind = _kind(name)
    accepted = accepted_params(name)
    params = dict(params)
    if kind == "scheme":
        hidden = [k for k in params if k not in accepted]
        if hidden:  # e.g. dim or assignment: set by the drivers or the Python API
            raise ValueError(f"scheme {name!r} does not take {', '.join(map(repr, hidden))} from the"
                             f" command line; its parameters are {', '.join(accepted)}")
    if workers is not None and "n" in accepted:
        params.setdefault("n", workers)
    if stragglers is not None:
        if "s" in accepted:
            params.setdefault("s", stragglers)
        else:
            _warn(f"{kind} {name!r} takes no s (its parameters: {', '.join(accepted)}); "
                  f"--stragglers {stragglers} is ignored for it")
    obj = make_code(name, **params) if kind == "code" else make_scheme(name, **params)
    return Built(name, kind, obj, params)


def code_info_params(name: str) -> list[str]:
    return list(accepted_params(name)) if _known(name) else []


def _known(name: str) -> bool:
    from gradcode.schemes import SCHEMES

    return name in SCHEMES or name in _available_codes()


def _warn(message: str) -> None:
    from gradcode.cli import err

    err.print(f"[yellow]warning:[/yellow] {message}")


def _available_codes():
    from gradcode.codes import available_codes

    return available_codes()


def build_model(model: str, model_params: list[str] | None, trace: Path | None):
    from gradcode.stragglers import make_delay_model

    params = parse_kv(model_params, "--model-param")
    if trace is not None:
        return make_delay_model("trace", path=str(trace), **params)
    return make_delay_model(model, **params)


def default_rounds(rounds: int | None, model) -> int:
    """``--rounds``, else the rows a trace has left from its offset, else 1000."""
    if rounds is not None:
        return rounds
    delays = getattr(model, "delays", None)
    if isinstance(delays, np.ndarray) and not getattr(model, "wrap", False):
        return max(1, delays.shape[0] - getattr(model, "offset", 0))
    return 1000


def parse_close(close: str):
    if close == "decodable":
        return close
    try:
        return float(close)
    except ValueError:
        raise ValueError(f"--close must be 'decodable' or a number mu >= 0, got {close!r}") from None


def label(code) -> str:
    return repr(code).strip("<>")


def run_repeats(built, model, rounds, repeats, seed, close, method, progress=None, records=None, waitout="decodable"):
    """``built``: a :class:`Built` (a fresh scheme per repeat) or a code. ``records``: keep the
    per-round tables (True: for --records files and --plot); by default only while small, so long
    runs keep summaries in bounded memory (see gradcode.simulate). A scheme family (no static
    code) runs on the simulator's event path, which ``method="auto"`` picks by itself."""
    from gradcode.sim import simulate

    return [
        simulate(built.fresh() if isinstance(built, Built) else built, model, rounds, seed=seed + i,
                 close=close, method=method, progress=progress, records=records, waitout=waitout)
        for i in range(repeats)
    ]


def _fail(exc: Exception):
    from rich.markup import escape

    from gradcode.cli import err

    text = str(exc)
    if isinstance(exc, MemoryError):  # numpy says how much it tried to allocate
        text = f"not enough memory for this run ({text or 'allocation failed'}): use fewer workers (-n) or rounds"
    err.print(f"[red]error:[/red] {escape(text)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2) from None


def _write_records(path: Path, rows: list[dict]) -> None:
    import csv

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


def plot_comparison(path: Path, names: list[str], times: list[np.ndarray]) -> None:
    """PNG: mean round time per scheme (bars, p95 marked) and the round-time CDF of each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------- commands


def simulate_doc(scheme, params, workers, stragglers, model, model_params, trace, rounds, repeats,
                 seed, close, method, records=None, waitout="decodable") -> tuple[dict, list]:
    """The document ``gradcode simulate`` prints, and the runs (with per-round records if
    ``records``)."""
    from gradcode.sim import pooled_stats

    name, inline = parse_scheme(scheme)
    code = build_code(name, {**params, **inline}, workers, stragglers)
    dmodel = build_model(model, model_params, trace)
    rounds = default_rounds(rounds, dmodel)
    results = run_repeats(code, dmodel, rounds, repeats, seed, parse_close(close), method, records=records,
                          waitout=waitout)
    rows = []
    for i, res in enumerate(results):
        s = res.summary()
        rows.append({
            "repeat": i, "seed": seed + i, "total_time": s["total_time"], "mean": s["mean"],
            "median": s["median"], "p95": s["p95"], "stragglers/round": s["stragglers_per_round"],
            "waitouts": s["waitouts"],
        })
    summary = {
        "scheme": code.label, "kind": code.kind, "model": repr(dmodel), "close": results[0].close, "rounds": rounds,
        "repeats": repeats, "load": code.load, "total_time": float(np.mean([r.total_time for r in results])),
        **pooled_stats(results), "waitouts": int(sum(r.waitouts for r in results)),
    }
    return {"summary": summary, "rows": rows}, results


def compare_doc(schemes, params, workers, stragglers, model, model_params, trace, rounds, repeats,
                seed, close, method, records=None,
                waitout="decodable") -> tuple[dict, list[str], list[np.ndarray | None]]:
    """The document ``gradcode compare`` prints, the scheme labels and their pooled round times
    (``None`` for a scheme whose runs kept no per-round records: pass ``records=True`` to plot)."""
    from gradcode.sim import pooled_stats

    specs = [parse_scheme(s) for s in schemes] if schemes else _default_specs(workers, stragglers)
    extra = parse_kv(params, "--param")
    takes = {name: set(code_info_params(name)) for name, _ in specs}
    unused = [k for k in extra if not any(k in t for name, t in takes.items() if name != "uncoded")]
    if unused:
        raise ValueError(f"--param {', '.join(unused)}: no compared scheme takes it")
    # each --param goes to the schemes that take it (e.g. seed to crc, not to frc or ignore)
    codes = [
        build_code(name, {**{k: v for k, v in extra.items() if k in takes[name]}, **p}
                   if name != "uncoded" else p,
                   workers, stragglers if name != "uncoded" else None)
        for name, p in specs
    ]
    if not any(c.name == "uncoded" for c in codes):
        n = codes[0].n
        codes.insert(0, build_code("uncoded", {"n": n}, None, None))
    ns = {c.n for c in codes}
    if len(ns) > 1:
        raise ValueError(f"compare needs one number of workers for every scheme, got {sorted(ns)}")
    dmodel = build_model(model, model_params, trace)
    loads = {round(c.load, 12) for c in codes if c.load is not None}
    if getattr(dmodel, "name", None) == "trace" and getattr(dmodel, "trace_load", None) is None and len(loads) > 1:
        _warn("the trace replays its recorded times for every scheme whatever its load, so the codes' "
              "extra computation is not charged; pass -M trace_load=<load it was recorded at> "
              f"(e.g. 1/n = {1 / codes[0].n:.4g} for an uncoded run) to scale times with load")
    rounds = default_rounds(rounds, dmodel)
    close = parse_close(close)
    names, pooled, rows = [], [], []
    for code in codes:
        results = run_repeats(code, dmodel, rounds, repeats, seed, close, method, records=records, waitout=waitout)
        label = code.label + ("" if code.exact else " (inexact)")  # in the table and the plot alike
        names.append(label)
        kept = all(r.has_records for r in results)
        pooled.append(np.concatenate([r.round_times for r in results]) if kept else None)
        rows.append({
            "scheme": label, "exact": code.exact,
            "load": code.load, **pooled_stats(results),
            "total_time": float(np.mean([r.total_time for r in results])),
            "stragglers/round": float(np.mean([r.stats.stragglers_per_round for r in results])),
            "waitouts": int(sum(r.waitouts for r in results)),
        })
    base = next(r for r, c in zip(rows, codes) if c.name == "uncoded")["mean"]
    for r in rows:
        r["speedup"] = base / r["mean"] if r["mean"] > 0 else None
    # the fastest exact scheme: an inexact baseline (ignore) is faster by not computing the gradient
    exact = [r for r in rows if r["exact"] and r["speedup"] is not None]
    best = max(exact, key=lambda r: r["speedup"])["scheme"] if exact else None
    doc = {"model": repr(dmodel), "close": close, "rounds": rounds, "repeats": repeats, "seed": seed,
           "fastest_exact": best, "rows": rows}
    return doc, names, pooled


def _default_specs(workers, stragglers):
    n = workers or 12
    s = 1 if stragglers is None else stragglers
    specs = [("uncoded", {}), ("ignore", {"s": s}), ("crc", {"s": s})]
    if n % (s + 1) == 0:
        specs.insert(2, ("frc", {"s": s}))
    return specs


def register(app: typer.Typer) -> None:
    scheme_opt = typer.Option("crc", "--scheme", help="Code or scheme family to run, NAME or NAME:key=value,..."
                              " (see `gradcode codes`).")
    workers_opt = typer.Option(None, "--workers", "-n", help="Number of workers (the code's n).")
    strag_opt = typer.Option(None, "--stragglers", "-s", help="Stragglers to tolerate (the code's s).")
    param_opt = typer.Option(None, "--param", "-p", help="Other code/scheme parameter key=value (repeatable).")
    model_opt = typer.Option("shifted-exp", "--model", "-m", help="Delay model (see `gradcode models`).")
    mparam_opt = typer.Option(None, "--model-param", "-M", help="Delay-model parameter key=value (repeatable).")
    trace_opt = typer.Option(None, "--trace", help="Replay a (rounds, workers) trace file instead of a model.")
    rounds_opt = typer.Option(None, "--rounds", "-r", help="Rounds per run [default: 1000, or the trace's length].")
    repeats_opt = typer.Option(1, "--repeats", help="Runs, with seeds seed, seed+1, ...")
    seed_opt = typer.Option(0, "--seed", help="Seed of the first run.")
    close_opt = typer.Option("decodable", "--close", help=_CLOSE_HELP)
    waitout_opt = typer.Option("decodable", "--waitout", help="With --close MU, what a round the deadline leaves"
                               " unresolved waits for: decodable (first decodable instant) or all (every worker:"
                               " the SGC paper's replay rule).")
    method_opt = typer.Option("auto", "--method", help="auto | fast (vectorized) | events (protocol path).")
    json_opt = typer.Option(False, "--json", help="Print one JSON document.")

    @app.command("simulate")
    def simulate_command(
        scheme: str = scheme_opt,
        workers: int = workers_opt,
        stragglers: int = strag_opt,
        param: list[str] = param_opt,
        model: str = model_opt,
        model_param: list[str] = mparam_opt,
        trace: Path = trace_opt,
        rounds: int | None = rounds_opt,
        repeats: int = repeats_opt,
        seed: int = seed_opt,
        close: str = close_opt,
        waitout: str = waitout_opt,
        method: str = method_opt,
        records: Path = typer.Option(None, "--records", help="Write per-round records (.csv or .json)."),
        as_json: bool = json_opt,
    ):
        """Simulate a code or a scheme (e.g. gc-dc) under a delay model or a trace, in virtual time."""
        from gradcode.cli import emit

        try:
            if repeats < 1:
                raise ValueError(f"--repeats must be >= 1, got {repeats}")
            doc, results = simulate_doc(scheme, parse_kv(param, "--param"), workers, stragglers, model,
                                        model_param, trace, rounds, repeats, seed, close, method,
                                        records=True if records is not None else None, waitout=waitout)
            if records is not None:
                rows = [dict(r, repeat=i) for i, res in enumerate(results) for r in res.to_records()]
                _write_records(records, rows)
        except (ValueError, TypeError, OSError, MemoryError, GradcodeError) as exc:
            _fail(exc)
        s = doc["summary"]
        title = (f"{s['scheme']} under {s['model']}, close={s['close']}: {s['rounds']} rounds x {s['repeats']};"
                 f" mean {s['mean']:.4g} s, median {s['median']:.4g} s, p95 {s['p95']:.4g} s")
        emit(doc, as_json=as_json, title=title)

    @app.command("compare")
    def compare_command(
        scheme: list[str] = typer.Option(
            None, "--scheme", help="NAME or NAME:key=value,... (repeatable); default: uncoded, ignore, frc, crc."),
        workers: int = workers_opt,
        stragglers: int = strag_opt,
        param: list[str] = typer.Option(None, "--param", "-p", help="Parameter key=value for every scheme but uncoded."),
        model: str = model_opt,
        model_param: list[str] = mparam_opt,
        trace: Path = trace_opt,
        rounds: int | None = rounds_opt,
        repeats: int = repeats_opt,
        seed: int = seed_opt,
        close: str = close_opt,
        waitout: str = waitout_opt,
        method: str = method_opt,
        plot: Path = typer.Option(None, "--plot", help="Write a PNG: mean round time per scheme and the CDF."),
        as_json: bool = json_opt,
    ):
        """Compare several codes and schemes on the same random draws (mean/median/p95 round time, speedup over uncoded)."""
        from gradcode.cli import emit

        try:
            if repeats < 1:
                raise ValueError(f"--repeats must be >= 1, got {repeats}")
            # the plot's CDF needs every round time: keep the records only then
            doc, names, pooled = compare_doc(scheme, param, workers, stragglers, model, model_param, trace,
                                             rounds, repeats, seed, close, method,
                                             records=True if plot is not None else None, waitout=waitout)
            if plot is not None:
                plot_comparison(plot, names, pooled)
                doc["plot"] = str(plot)
        except (ValueError, TypeError, OSError, MemoryError, GradcodeError) as exc:
            _fail(exc)
        emit(doc, as_json=as_json,
             title=f"{doc['model']}, close={doc['close']}: {doc['rounds']} rounds x {repeats} (same draws for every"
                   f" scheme); fastest exact: {doc['fastest_exact']}",
             columns=["scheme", "load", "mean", "median", "p95", "speedup", "stragglers/round", "waitouts"])
