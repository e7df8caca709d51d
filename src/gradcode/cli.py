"""The ``gradcode`` command line.

Each area of the tool adds its commands from a module listed in ``_COMMAND_MODULES`` that defines
``register(app: typer.Typer)``. With ``--json`` a command writes exactly one JSON document to
stdout; tables, progress bars and logs go to stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

import typer
from rich.markup import escape

from gradcode._options import described
from gradcode.codes import available_codes, code_info
from gradcode.errors import GradcodeError
from gradcode.experiments.cli_options import Output, Values, accepted_params, command, options
from gradcode.experiments.cli_output import emit, err, exit_code_of, fail, out, plain_warnings
from gradcode.experiments.reproduce import available_reproductions, run_reproduction
from gradcode.schemes import SCHEMES

app = typer.Typer(
    help="Gradient coding: straggler-tolerant distributed gradient descent (codes, simulator, Ray runtime).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _flags_without_a_value(display_type_rich):
    """Typer's help shows ``<bool>`` after a flag (``--json <bool>``), as if it took a value,
    which it refuses (``--json true``: "Got unexpected extra argument"). A flag's help shows no
    value; every other option keeps its type."""

    def display(self, ctx):
        return "" if self.is_flag and self.metavar is None else display_type_rich(self, ctx)

    return display


if hasattr(typer.core.TyperOption, "display_type_rich"):  # typer >= 0.2x shows the type; earlier ones do not
    typer.core.TyperOption.display_type_rich = _flags_without_a_value(typer.core.TyperOption.display_type_rich)


def _version(value: bool) -> None:
    if value:
        from gradcode import __version__

        print(f"gradcode {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print gradcode's version and exit.")) -> None:
    """Gradient coding: straggler-tolerant distributed gradient descent (codes, simulator, Ray runtime)."""


_COMMAND_MODULES: list[str] = ["gradcode.experiments.cli_models", "gradcode.experiments.cli_sim", "gradcode.experiments.cli_train",
                               "gradcode.experiments.cli_tune"]


@dataclass(frozen=True)
class ReproduceCommand:
    """``gradcode reproduce``'s options: what the reproductions share (each takes those it has)."""

    name: str | None = described(None, "Reproduction to run; omit to list them.", argument=True)
    params: Mapping | None = described(None, "Reproduction parameter key=value (repeatable).", short="-p")
    rounds: int | None = described(None, "Monte-Carlo rounds (reproductions that take rounds).")
    seed: int | None = described(None, "Seed (reproductions that take one).")
    out: Path | None = described(None, "Directory for files (reproductions that write figures).")
    full: bool = described(False, "The paper's full length (reproductions that take full).")


def codes_command(o: Values):
    """List the registered codes and scheme families (kind: code or scheme) and their parameters."""
    rows = [dict(code_info(name), kind="code") for name in available_codes()]
    for name in SCHEMES.names():  # families that re-plan every round (GC-DC, ...): no static code
        rows.append(dict(SCHEMES.info(name), kind="scheme", params=accepted_params(name)))
    for r in rows:
        r["params"] = ", ".join(f"{k}={v}" if v is not None else k for k, v in r["params"].items())
    emit({"rows": rows}, as_json=o.json, title="gradient codes and scheme families",
         columns=["name", "kind", "params", "summary"])


def reproduce_command(o: Values):
    """Recompute a table or figure of the papers from the library."""
    if o.name is None:
        emit({"rows": [{"name": k, "what": v} for k, v in available_reproductions().items()]},
             as_json=o.json, title="reproductions")
        return
    try:
        shared = {"rounds": o.rounds, "seed": o.seed, "out": None if o.out is None else str(o.out),
                  "full": o.full or None}  # only those given: each reproduction takes its own
        doc = run_reproduction(o.name, **{**(o.params or {}), **{k: v for k, v in shared.items() if v is not None}})
    except (ValueError, TypeError, OSError, GradcodeError) as exc:
        fail(exc, exit_code_of(exc), as_json=o.json)
    emit(doc, as_json=o.json, title=doc.get("title", o.name) if isinstance(doc, dict) else o.name)
    if not o.json and isinstance(doc, dict):  # what the reproduction says of its rows (e.g. why some differ)
        for note in doc.get("notes") or ():
            out.print(escape(note), highlight=False)


app.command("codes")(command(options(("Output", Output)), codes_command, name="codes", doc=codes_command.__doc__))
app.command("reproduce")(command(options(("Reproduction", ReproduceCommand), ("Reproduction", Output)),
                                 reproduce_command, name="reproduce", doc=reproduce_command.__doc__))


def _register_all() -> None:
    for mod in _COMMAND_MODULES:
        import_module(mod).register(app)


_register_all()


def main(argv: list[str] | None = None) -> None:
    """``gradcode``: the commands, with one failure rule (:func:`gradcode.experiments.cli_output.fail`)
    also for what the argument parser refuses (an unknown option, a bad value: exit 2) and for SIGINT
    outside a run (exit 130): with ``--json`` each prints one JSON document with ``"error"``."""
    args = sys.argv[1:] if argv is None else list(argv)
    as_json = "--json" in args
    plain_warnings()
    try:
        code = app(args=args, standalone_mode=False)  # a command's typer.Exit comes back as its code
        if isinstance(code, int) and code:
            sys.exit(code)
    except typer.Exit as exc:  # the command already said why
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # the parser's usage errors: unknown option, bad value
        code = getattr(exc, "exit_code", 2)
        if as_json and hasattr(exc, "format_message"):
            emit({"error": exc.format_message(), "error_type": type(exc).__name__, "exit_code": code}, as_json=True)
        exc.show()
        sys.exit(code)
    except (typer.Abort, KeyboardInterrupt):
        if as_json:
            emit({"error": "interrupted", "error_type": "KeyboardInterrupt", "exit_code": 130}, as_json=True)
        err.print("[red]error:[/red] interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
