"""``gradcode tune``: pick GC, SR-SGC and M-SGC parameters from a measured delay profile (SGC
App. J): replay the profile (adjusted to each scheme's load by adding ``(L - L0) * alpha``
seconds) under the mu-deadline rule, estimate the time of ``--jobs`` jobs for every valid
parameter set, and print the best of each family (:func:`gradcode.schemes.sgc.tune.tune`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import typer

from gradcode._options import described, flag_of
from gradcode.errors import GradcodeError
from gradcode.experiments.cli_options import Output, Values, command, options
from gradcode.experiments.cli_output import EXIT_USAGE, emit, exit_code_of, fail, note, warn
from gradcode.schemes.sgc.tune import TuneSearch, tune
from gradcode.stragglers import load_trace


@dataclass(frozen=True)
class TuneCommand:
    """``gradcode tune``'s own options (the search's are :class:`~gradcode.schemes.sgc.tune.TuneSearch`'s
    fields): the profile and the output."""

    trace: Sequence[Path] | None = described(None, "Delay profile (required): a (rounds, workers) .npy/.csv or an"
                                             " SGC pickle (repeat for profiles measured at several loads).")
    trace_load: Sequence[float] | None = described(None, "Load each --trace was measured at (one per trace; default"
                                                   " 1/n for a single trace).")
    load_slope: float | None = described(None, "Seconds per unit load (alpha); fitted from the traces when omitted"
                                         " (needs two or more loads).")
    jobs: int | None = described(None, "Jobs (gradients) to run (required).", short="-J")
    every: bool = described(False, "Replay and list every parameter set (no bounding).")
    top: int = described(10, "Candidates listed in the table (all of them with --json).")


def tune_command(o: Values) -> None:
    """Choose sequential-code parameters from a measured delay profile (SGC App. J)."""
    for name in ("trace", "jobs"):
        if getattr(o, name) is None:
            fail(ValueError(f"missing option {flag_of(name)}"), EXIT_USAGE, as_json=o.json)
    if o.top < 1:
        fail(ValueError(f"--top must be at least 1, got {o.top}"), EXIT_USAGE, as_json=o.json)
    search = {k: v for k, v in o.fields_of(TuneSearch).items() if v is not None}
    if o.every:
        search["within"] = None
    try:
        profiles = [load_trace(p) for p in o.trace]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = tune(profiles if len(profiles) > 1 else profiles[0], jobs=o.jobs,
                          trace_load=list(o.trace_load) if o.trace_load else None, load_slope=o.load_slope, **search)
    except (ValueError, TypeError, OSError, GradcodeError) as exc:
        fail(exc, exit_code_of(exc), as_json=o.json)
    for w in caught:
        warn(str(w.message))
    doc = result.to_dict()
    waits = "every worker" if o.waitout == "all" else "the workers it needs to decode"
    doc["notes"] = [_RULE_NOTE.format(mu=o.mu, waits=waits), *doc["notes"]]
    if o.json:
        emit(doc, as_json=True)
        return
    warned = {str(w.message) for w in caught}
    for text in doc["notes"]:
        if text not in warned:  # a warning already printed above
            note(text)
    rows = [_row(c, best=True) for c in doc["best"].values()]
    emit({"rows": rows}, as_json=False,
         title=f"best of each family for J = {o.jobs} jobs (mu = {o.mu:g}, wait-out: {o.waitout},"
               f" alpha = {doc['alpha']:.4g} s per unit load)")
    kept = len(doc["candidates"])
    scope = "parameter sets" if o.every else (f"parameter sets within {100 * o.within:g} % of their family's best"
                                              f" ({doc['bounded']} more bounded out)")
    emit({"rows": [_row(c) for c in doc["candidates"][:o.top]]}, as_json=False,
         title=f"fastest {min(o.top, kept)} of {kept} {scope}")


def register(app: typer.Typer) -> None:
    app.command("tune")(command(options(("Profile and output", TuneCommand), ("Profile and output", Output),
                                        ("Search", TuneSearch)), tune_command, doc=tune_command.__doc__, name="tune"))


#: what rule the replay follows, said in every output: tune's defaults are the paper's, not the
#: decodable close of compare and train
_RULE_NOTE = ("rounds replayed under the SGC paper's rule: the mu-deadline with mu = {mu:g}, and a round it leaves"
              " undecodable waits for {waits} (tune's defaults mu = 1, --waitout all, as SGC App. J; compare and"
              " train close a round as soon as it decodes unless given --close MU)")


def _row(c: dict, best: bool = False) -> dict:
    params = ", ".join(f"{k}={v}" for k, v in c["params"].items())
    return {"scheme": c["scheme"], "params": params or "-", "load": c["load"], "T": c["delay"],
            "time_s": c["time"], "waitouts": c["waitouts"]}
