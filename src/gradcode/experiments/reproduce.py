"""Registry of reproductions: ``gradcode reproduce NAME`` runs one and prints its rows.

A reproduction is a function returning ``{"rows": [dict, ...], ...}`` computed from the library
(never typed in); its keyword arguments are its parameters (``run_reproduction("commfr-table1",
C=6.414)``) and the first paragraph of its docstring is its summary. The ``repro_*`` modules of
this package register theirs with :func:`reproduction`; :data:`REPRODUCTIONS` imports them the
first time it is read (:func:`~gradcode.registry.package_modules`; they import this module, so it
cannot import them up front).
"""

from __future__ import annotations

from typing import Any

from gradcode.registry import Registry, package_modules

#: Every reproduction by name; ``REPRODUCTIONS.make(name, **kwargs)`` runs one. The modules
#: ``repro_*`` of this package define them, each registering on import.
REPRODUCTIONS: Registry[dict[str, Any]] = Registry("reproduction", modules=package_modules(__file__, prefix="repro_"))


def reproduction(name: str):
    """Register ``fn(**params) -> {"rows": [...]}`` as reproduction ``name`` (summary: the first
    paragraph of its docstring), or a dataclass of its options whose ``run()`` returns that (a
    reproduction with many options)."""
    return REPRODUCTIONS.register(name)


def available_reproductions() -> dict[str, str]:
    """``{name: summary}`` of every reproduction, sorted by name."""
    return {name: REPRODUCTIONS.info(name)["summary"] for name in REPRODUCTIONS.names()}


def run_reproduction(name: str, **kwargs) -> dict:
    """Run reproduction ``name`` with its keyword parameters; an unknown name or parameter
    raises the registry's error, listing the names or the parameters."""
    made = REPRODUCTIONS.make(name, **kwargs)
    return made.run() if hasattr(made, "run") else made  # an options object (a dataclass) runs itself
