"""``gradcode tune``: pick GC, SR-SGC and M-SGC parameters from a measured delay profile (SGC
App. J): replay the profile (adjusted to each scheme's load by adding ``(L - L0) * alpha``
seconds) under the mu-deadline rule, estimate the time of ``--jobs`` jobs for every valid
parameter set, and print the best of each family (:func:`gradcode.schemes.sgc.tune.tune`)."""

from __future__ import annotations

import warnings
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("tune")
    def tune_command(
        trace: list[Path] = typer.Option(..., "--trace", help="Delay profile: a (rounds, workers) .npy/.csv or an"
                                         " SGC pickle (repeat for profiles measured at several loads)."),
        trace_load: list[float] = typer.Option(None, "--trace-load", help="Load each --trace was measured at"
                                               " (one per trace; default 1/n for a single trace)."),
        load_slope: float = typer.Option(None, "--load-slope", help="Seconds per unit load (alpha); fitted from"
                                         " the traces when omitted (needs two or more loads)."),
        jobs: int = typer.Option(..., "--jobs", "-J", help="Jobs (gradients) to run."),
        mu: float = typer.Option(1.0, "--mu", help="Tolerance of the mu-deadline rule."),
        waitout: str = typer.Option("all", "--waitout", help="'all' (the paper's: wait for every worker when the"
                                    " deadline leaves a round unresolved) or 'decodable'."),
        max_w: int = typer.Option(None, "--max-w", help="Largest W searched for SR-SGC and M-SGC (default: the"
                                  " jobs, every W as the paper searches)."),
        max_delay: int = typer.Option(None, "--max-delay", help="Largest delay T searched (default: any that the"
                                      " profile fits)."),
        within: float = typer.Option(0.05, "--within", min=0.0, help="List every parameter set within this fraction"
                                     " of its family's best; the others are bounded out of the replay."),
        every: bool = typer.Option(False, "--all", help="Replay and list every parameter set (no bounding)."),
        top: int = typer.Option(10, "--top", min=1, help="Candidates listed in the table (all of them with --json)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ):
        """Choose sequential-code parameters from a measured delay profile (SGC App. J)."""
        from gradcode.experiments.cli_output import emit
        from gradcode.errors import GradcodeError
        from gradcode.experiments.cli_output import exit_code_of, fail, note, warn
        from gradcode.schemes.sgc.tune import tune
        from gradcode.stragglers import load_trace

        try:
            profiles = [load_trace(p) for p in trace]
            loads = list(trace_load) if trace_load else None
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = tune(profiles if len(profiles) > 1 else profiles[0], jobs=jobs, trace_load=loads,
                              load_slope=load_slope, mu=mu, waitout=waitout, max_w=max_w, max_delay=max_delay,
                              within=None if every else within)
        except (ValueError, TypeError, OSError, GradcodeError) as exc:
            fail(exc, exit_code_of(exc), as_json=as_json)
        for w in caught:
            warn(str(w.message))
        doc = result.to_dict()
        waits = "every worker" if waitout == "all" else "the workers it needs to decode"
        doc["notes"] = [_RULE_NOTE.format(mu=mu, waits=waits), *doc["notes"]]
        if as_json:
            emit(doc, as_json=True)
            return
        warned = {str(w.message) for w in caught}
        for text in doc["notes"]:
            if text not in warned:  # a warning already printed above
                note(text)
        rows = [_row(c, best=True) for c in doc["best"].values()]
        emit({"rows": rows}, as_json=False,
             title=f"best of each family for J = {jobs} jobs (mu = {mu:g}, wait-out: {waitout},"
                   f" alpha = {doc['alpha']:.4g} s per unit load)")
        kept = len(doc["candidates"])
        scope = "parameter sets" if every else (f"parameter sets within {100 * within:g} % of their family's best"
                                                f" ({doc['bounded']} more bounded out)")
        emit({"rows": [_row(c) for c in doc["candidates"][:top]]}, as_json=False,
             title=f"fastest {min(top, kept)} of {kept} {scope}")


#: what rule the replay follows, said in every output: tune's defaults are the paper's, not the
#: decodable close of compare and train
_RULE_NOTE = ("rounds replayed under the SGC paper's rule: the mu-deadline with mu = {mu:g}, and a round it leaves"
              " undecodable waits for {waits} (tune's defaults mu = 1, --waitout all, as SGC App. J; compare and"
              " train close a round as soon as it decodes unless given --close MU)")


def _row(c: dict, best: bool = False) -> dict:
    params = ", ".join(f"{k}={v}" for k, v in c["params"].items())
    return {"scheme": c["scheme"], "params": params or "-", "load": c["load"], "T": c["delay"],
            "time_s": c["time"], "waitouts": c["waitouts"]}
