"""``gradcode models``: the delay models, their parameters and defaults.

Without an argument: one row per model (name, parameters with defaults, summary). With a model
name: one row per parameter (default and meaning). ``--json`` prints the same rows as one JSON
document on stdout.
"""

from __future__ import annotations

from dataclasses import dataclass

import typer

from gradcode._options import described
from gradcode.experiments.cli_options import Output, Values, command, options
from gradcode.experiments.cli_output import EXIT_USAGE, emit, fail
from gradcode.stragglers import DELAY_MODELS, available_delay_models, model_info


def models_rows(name: str | None = None) -> dict:
    """The rows ``gradcode models [NAME]`` prints."""
    if name is None:
        rows = []
        for model in available_delay_models():
            info = model_info(model)
            rows.append({"name": model, "params": info["params"], "summary": info["summary"]})
        return {"rows": rows}
    info = model_info(name)
    return {
        "model": name,
        "summary": info["summary"],
        "rows": [{"param": k, "default": v, "help": info["help"][k]} for k, v in info["params"].items()],
    }


def _fmt_params(params: dict) -> str:
    return ", ".join(k if v is None else f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in params.items())


@dataclass(frozen=True)
class ModelsCommand:
    """``gradcode models``'s argument."""

    name: str | None = described(None, "A delay model to describe parameter by parameter; omit to list them.",
                                 argument=True)


def models_command(o: Values):
    """List the straggler delay models and their parameters (defaults in the table)."""
    try:
        doc = models_rows(o.name)
    except ValueError as exc:
        fail(exc, EXIT_USAGE, as_json=o.json)
    if o.json:
        emit(doc, as_json=True)
        return
    if o.name is None:
        # the parameters every name takes (the communication component) are said once, in the title
        common = DELAY_MODELS.common
        rows = [dict(r, params=_fmt_params({k: v for k, v in r["params"].items() if k not in common}))
                for r in doc["rows"]]
        emit({"rows": rows}, as_json=False, columns=["name", "params", "summary"],
             title="delay models (every model also takes comm=0 and comm_latency=0: message time"
                   " = comm_latency + comm * length / d)")
    else:
        emit(doc, as_json=False, title=f"{o.name}: {doc['summary']}", columns=["param", "default", "help"])


def register(app: typer.Typer) -> None:
    app.command("models")(command(options(("Delay model", ModelsCommand), ("Delay model", Output)), models_command,
                                  name="models", doc=models_command.__doc__))
