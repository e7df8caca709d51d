"""Command-line options built from the config dataclasses' fields, so that each option is declared
once: its name, type, default and help text are the field's (:func:`gradcode._options.described`),
its flag is the field's name with dashes (``worker_cpus`` -> ``--worker-cpus``), and the JSON key
of ``config.json`` is the field's name again.

    TRAIN = options(("Training", TrainSpec), ("Cluster", ClusterConfig), ...)
    app.command("train")(command(TRAIN, handler, doc="Train a model ..."))

Field types become typer's: ``int``, ``float``, ``str``, ``bool`` (a ``--flag``), a path, a list
for a repeatable option (sequences), and a repeatable ``key=value`` option for a mapping, parsed to
a dict by :func:`~gradcode._options.parse_kv` (JSON values where they parse; several in one item
with commas, or the option repeated: ``-p n=8,assignment=[[0,1],[2,3]]`` is ``-p n=8 -p
assignment=[[0,1],[2,3]]``). A name declared by
two classes (``optimizer`` of the built-in problems and of a torch model) is offered once, by the
first; the handler gets every option's value by name (:class:`Values`).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gradcode._options import described, flag_of, parse_kv, split_commas
from gradcode.codes import CODES
from gradcode.experiments.cli_output import EXIT_USAGE, fail
from gradcode.schemes import SCHEMES
from gradcode.schemes.factory import scheme_kind, scheme_parameters

__all__ = ["Option", "Output", "Values", "accepted_params", "command", "options", "params_per_scheme", "parse_kv",
           "parse_scheme", "split_schemes"]


@dataclasses.dataclass(frozen=True)
class Option:
    """One command-line option, made from a config field (:func:`options`)."""

    name: str
    owner: type
    kind: Any  # what typer parses: int, float, str, bool, Path or a list of one of them
    default: Any
    help: str
    short: str | None = None
    torch_only: bool = False
    mapping: bool = False  # key=value items, handed on as a dict
    metavar: str | None = None
    panel: str | None = None
    argument: bool = False  # positional (typer.Argument), not a --flag

    @property
    def flag(self) -> str:
        return flag_of(self.name)

    def typer_parameter(self) -> inspect.Parameter:
        flags = [self.flag] + ([self.short] if self.short else [])
        shown = not (self.default is None or self.default == () or self.default is False)
        metavar = self.metavar or ("KEY=VALUE" if self.mapping else None)
        if self.argument:
            info = typer.Argument(help=self.help, metavar=metavar or self.name.upper(), show_default=shown)
        else:
            info = typer.Option(*flags, help=self.help, metavar=metavar, rich_help_panel=self.panel,
                                show_default=shown)
        default = None if typing.get_origin(self.kind) is list else self.default
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=Annotated[self.kind, info])


def _kind(hint) -> tuple[Any, bool]:
    """``(typer's type, is a mapping)`` of a field's type hint."""
    args = [a for a in (typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is
                        typing.Union else (hint,)) if a is not type(None)]
    origins = [typing.get_origin(a) or a for a in args]
    if any(o is Mapping or (isinstance(o, type) and issubclass(o, Mapping)) for o in origins):
        return list[str], True
    if bool in args:
        return bool, False
    for a, o in zip(args, origins):
        if o in (tuple, list, Sequence):
            item = (typing.get_args(a) or (str,))[0]
            return list[item if item in (int, float, Path) else str], False
    if os.PathLike in args or Path in args:
        return Path, False
    if args == [int]:
        return int, False
    if args == [float]:
        return float, False
    return str, False  # str, and values given by name (a scheme, a loss, a delay model)


def options(*groups: tuple[str, type]) -> list[Option]:
    """The options of the dataclasses in ``groups`` (``(help panel, class)``), in field order: each
    field whose metadata says ``cli`` (:func:`~gradcode._options.described`); a name already
    offered by an earlier class is skipped."""
    out, seen = [], set()
    for panel, cls in groups:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            meta = f.metadata
            if not meta.get("cli", False) or f.name in seen:
                continue
            seen.add(f.name)
            kind, mapping = _kind(hints[f.name])
            out.append(Option(f.name, cls, kind, f.default, meta["help"], meta.get("short"),
                              meta.get("torch_only", False), mapping, meta.get("metavar"), panel,
                              meta.get("argument", False)))
    return out


@dataclasses.dataclass(frozen=True)
class Output:
    """The option every command shares: its output's form."""

    json: bool = described(False, "Print one JSON document.")


class Values:
    """The values of a command's options by name (``values.workers``), mappings parsed to dicts,
    repeatable options to tuples (or None when not given)."""

    def __init__(self, opts: list[Option], given: dict):
        self._options = {o.name: o for o in opts}
        self._values = dict(given)

    def __getattr__(self, name: str):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def replace(self, **changes) -> Values:
        return Values(list(self._options.values()), {**self._values, **changes})

    def changed(self) -> list[Option]:
        """The options given another value than their default."""
        return [o for o in self._options.values()
                if self._values[o.name] is not None and self._values[o.name] != o.default]

    def fields_of(self, cls: type, **overrides) -> dict:
        """Keyword arguments for ``cls``: every field of it that is an option here, then
        ``overrides``."""
        names = {f.name for f in dataclasses.fields(cls)}
        return {**{k: v for k, v in self._values.items() if k in names}, **overrides}


def command(opts: list[Option], handler: Callable[[Values], Any], *, doc: str, name: str) -> Callable:
    """A typer command with one option per entry of ``opts``: it parses the mapping options
    (``key=value``; a malformed one exits 2 with the flag named) and calls ``handler(values)``."""
    def run(**given):
        try:
            for o in opts:
                value = given[o.name]
                if o.mapping:
                    given[o.name] = parse_kv(value, o.flag) if value else None
                elif typing.get_origin(o.kind) is list:
                    given[o.name] = tuple(value) if value else None
        except ValueError as exc:
            fail(exc, EXIT_USAGE, as_json=bool(given.get("json")))
        return handler(Values(opts, given))

    params = [o.typer_parameter() for o in opts]
    run.__signature__ = inspect.Signature(params)
    run.__annotations__ = {p.name: p.annotation for p in params}
    run.__doc__, run.__name__, run.__qualname__ = doc, name, name
    return run


# ------------------------------------------------------------------------ schemes on the command line


def split_schemes(text: str) -> list[str]:
    """``"crc,frc,gc-dc:clusters=2,r=2"`` -> ``["crc", "frc", "gc-dc:clusters=2,r=2"]``: a comma
    starts a new scheme unless a ``key=`` follows it (a parameter of the scheme before) or it sits
    inside brackets (a JSON value: ``assignment=[[0,1],[2,3]]``). An empty name (``crc,,frc``, a
    trailing comma) is refused (``ValueError``), not skipped."""
    parts = split_commas(text, before_key=False)
    if len(parts) > 1 and any(not p.strip() for p in parts):
        raise ValueError(f"--scheme {text!r}: an empty scheme name in the list (two commas, or one at an end)")
    return [p.strip() for p in parts]


def parse_scheme(spec: str) -> tuple[str, dict]:
    """``"crc"`` or ``"crc:s=2,seed=1"`` -> (name, params), read by :func:`parse_kv` as every
    mapping option is: commas split parameters only where a ``key=`` follows, so JSON values keep
    theirs (``"gc-sc:clusters=2,assignment=[[0,1],[2,3]]"``)."""
    name, _, rest = spec.partition(":")
    return name.strip(), parse_kv([rest] if rest.strip() else [], f"scheme parameter in {spec!r}")


def accepted_params(name: str) -> dict:
    """``{parameter: default}`` of a code or a scheme family, as the command line may set them
    (a scheme's :attr:`api_only_params`, e.g. GC-DC's ``assignment`` object, are left out)."""
    params = scheme_parameters(name)
    if scheme_kind(name) == "scheme":
        hidden = set(getattr(SCHEMES.get(name), "api_only_params", ()))
        return {k: v for k, v in params.items() if k not in hidden}
    return params


def params_per_scheme(common: dict, parsed: list[tuple[str, dict]], *, none_takes: str = "none of the schemes",
                      skip: tuple[str, ...] = ()) -> list[dict]:
    """Each scheme's parameters: the ``--scheme-params`` values it takes (``seed`` to ``crc``, not
    to ``frc`` or ``ignore``), then its inline ones; schemes named in ``skip`` (compare's
    ``uncoded`` baseline) and unknown names (refused by name when built) get their inline ones
    only. A parameter no scheme takes is refused (``"--scheme-params K: {none_takes} takes
    it"``)."""
    takes = [set() if name in skip or not _known(name) else set(accepted_params(name)) for name, _ in parsed]
    unused = [k for k in common if not any(k in t for t in takes)]
    if unused:
        raise ValueError(f"--scheme-params {', '.join(unused)}: {none_takes} takes it")
    return [{**{k: v for k, v in common.items() if k in t}, **inline} for t, (_, inline) in zip(takes, parsed)]


def _known(name: str) -> bool:
    return name in SCHEMES or name in CODES
