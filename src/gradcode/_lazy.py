"""Public names that load on first use (PEP 562), for packages whose imports are heavy (numba,
torch, the runtime) and whose light parts must load alone: the command line reads the config
classes without importing the driver or torch."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for the module ``package`` (its ``namespace``, ``globals()``):
    the name ``x`` is ``homes[x]``'s attribute of that name, the module imported when ``x`` is
    first read (``".training"``: relative to ``package``; ``"gradcode.codes"``: absolute) and kept
    in ``namespace`` after."""

    def __getattr__(name: str):
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__
