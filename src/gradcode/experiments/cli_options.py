"""Command-line options built from the config dataclasses' fields, so that each option is declared
once: its name, type, default and help text are the field's (:func:`gradcode._options.described`),
its flag is the field's name with dashes (``worker_cpus`` -> ``--worker-cpus``), and the JSON key
of ``config.json`` is the field's name again.

    TRAIN = options(("Training", TrainSpec), ("Cluster", ClusterConfig), ...)
    app.command("train")(command(TRAIN, handler, doc="Train a model ..."))

Field types become typer's: ``int``, ``float``, ``str``, ``bool`` (a ``--flag``), a path, a list
for a repeatable option (sequences), and a repeatable ``key=value`` option for a mapping, parsed to
a dict (JSON values where they parse: ``-p n=8 -p assignment=[[0,1],[2,3]]``). A name declared by
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

from gradcode._options import flag_of, parse_kv

__all__ = ["Option", "Values", "command", "options", "parse_kv"]


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

    @property
    def flag(self) -> str:
        return flag_of(self.name)

    def typer_parameter(self) -> inspect.Parameter:
        flags = [self.flag] + ([self.short] if self.short else [])
        shown = not (self.default is None or self.default == () or self.default is False)
        metavar = self.metavar or ("KEY=VALUE" if self.mapping else None)
        info = typer.Option(*flags, help=self.help, metavar=metavar, rich_help_panel=self.panel, show_default=shown)
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
                              meta.get("torch_only", False), mapping, meta.get("metavar"), panel))
    return out


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
    from gradcode.experiments.cli_output import EXIT_USAGE, fail

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
