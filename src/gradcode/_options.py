"""Each option declared once: a config dataclass's field carries its help text (and a short flag)
in its metadata, and the command line builds its options from the fields
(:mod:`gradcode.experiments.cli_options`), so that the flag, the field and the JSON key are one
name: field ``worker_cpus`` is ``--worker-cpus`` and ``"worker_cpus"`` in ``config.json``.

This module sits below every layer (it imports nothing of gradcode) so that the runtime's and the
torch layer's configs can describe their fields without knowing about the command line.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["close_option", "described", "flag_of", "help_of", "parse_kv", "split_commas", "split_kv", "waitout_option"]


def described(default: Any, help: str, *, short: str | None = None, cli: bool = True, torch_only: bool = False,
              metavar: str | None = None, argument: bool = False) -> Any:
    """A dataclass field with ``default`` whose metadata says how the command line offers it:
    ``help``, an optional ``short`` flag (``"-n"``), ``cli=False`` for a field that only the API
    can set (held-out tensors, callables), ``torch_only`` for an option that only a PyTorch model's
    run takes (``gradcode train --model``), ``metavar`` for the help's placeholder, ``argument``
    for a positional argument instead of an option (``gradcode reproduce NAME``)."""
    return dataclasses.field(default=default, metadata={"help": help, "short": short, "cli": cli,
                                                        "torch_only": torch_only, "metavar": metavar,
                                                        "argument": argument})


def close_option() -> Any:
    """The closing rule's ``close`` field, declared once for training and the simulator
    (:class:`~gradcode.runtime.TrainSpec`, :class:`~gradcode.experiments.cli_sim.Simulation`);
    checked by :func:`gradcode._validation.check_closing_rule`."""
    return described("decodable", "When a round ends: decodable (as soon as the due jobs decode) or a number mu,"
                                  " SGC's mu-rule (wait until (1 + mu) x the time the first worker delivered its"
                                  " whole result).")


def waitout_option() -> Any:
    """The closing rule's ``waitout`` field, beside :func:`close_option`."""
    return described("decodable", "With --close MU, what a round the deadline leaves undecodable waits for:"
                                  " decodable (until it decodes) or all (every live worker: the SGC paper's rule).")


def help_of(cls, name: str) -> str:
    """The help text of ``cls``'s field ``name`` (for docstrings and errors)."""
    return next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == name)


def flag_of(name: str) -> str:
    """The command-line flag of a field: ``worker_cpus`` -> ``--worker-cpus``."""
    return "--" + name.replace("_", "-")


def split_commas(text: str, *, before_key: bool) -> list[str]:
    """``text`` split at its commas outside brackets that are followed by a ``key=``
    (``before_key=True``: the items of a ``key=value`` list) or that are not (``False``: the
    entries of a list whose entries carry ``key=value`` parameters, ``crc,gc-dc:clusters=2,r=2``).
    Brackets keep their commas either way (JSON values: ``assignment=[[0,1],[2,3]]``)."""
    import re

    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0 and bool(re.match(r"\s*[A-Za-z_][\w-]*\s*=", text[i + 1:])) == before_key:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def split_kv(text: str) -> list[str]:
    """``"lr=0.1,momentum=0.9"`` -> ``["lr=0.1", "momentum=0.9"]``: a comma starts a new item only
    where a ``key=`` follows it and it sits outside brackets, so values keep theirs: a list of
    names (``categorical=colour,city``) or JSON (``assignment=[[0,1],[2,3]]``)."""
    return split_commas(text, before_key=True)


def parse_kv(items, what: str) -> dict:
    """``["k=v", "k2=v2,k3=v3", ...]`` -> dict: each item holds one ``key=value`` or several
    separated by commas (:func:`split_kv`: repeating the option and listing with commas are the
    same), values parsed as JSON when possible (``"2"`` -> 2, ``"0.1"`` -> 0.1, ``"[[0,1]]"`` -> a
    list, ``"red"`` stays text); ``what`` names the option in errors. The one reading of
    ``key=value`` parameters: the command line's mapping options, inline scheme parameters
    (``crc:s=2,seed=1``), a schedule's ``step:step_size=10,gamma=0.5``."""
    import json

    out = {}
    for item in items or []:
        for part in split_kv(item):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ValueError(f"{what} must look like key=value (several: k=v,k2=v2), got {part!r}")
            try:
                out[key] = json.loads(value)
            except json.JSONDecodeError:
                out[key] = value
    return out
