"""Registry of reproductions: ``gradcode reproduce NAME`` runs one and prints its rows.

A reproduction is a function returning ``{"rows": [dict, ...], ...}`` computed from the library
(never typed in). Modules listed in ``_MODULES`` register theirs with :func:`reproduction`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Callable

_REPRODUCTIONS: dict[str, tuple[Callable[..., dict], str]] = {}

#: modules that define reproductions; each registers on import
_MODULES: list[str] = ["gradcode.experiments.repro_analysis", "gradcode.experiments.repro_codes"]


def reproduction(name: str):
    """Register ``fn() -> {"rows": [...]}`` as reproduction ``name`` (summary: first docstring line)."""

    def wrap(fn):
        doc = (fn.__doc__ or "").strip().splitlines()
        _REPRODUCTIONS[name] = (fn, doc[0] if doc else "")
        return fn

    return wrap


def _load():
    for mod in _MODULES:
        import_module(mod)


def available_reproductions() -> dict[str, str]:
    _load()
    return {name: summary for name, (_, summary) in sorted(_REPRODUCTIONS.items())}


def run_reproduction(name: str, **kwargs) -> dict:
    _load()
    if name not in _REPRODUCTIONS:
        raise ValueError(f"unknown reproduction {name!r}; available: {', '.join(sorted(_REPRODUCTIONS))}")
    return _REPRODUCTIONS[name][0](**kwargs)
