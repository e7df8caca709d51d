"""Codes are immutable once built: the :class:`Immutable` mixin of
:class:`~gradcode.codes.base.LinearCode`.

A code is shared by the simulator, the schemes, the workers and the decoding cache, and its
verdicts are cached per pattern: changing its placement or encoders after construction would make
every cached verdict wrong without a sign. So once the *outermost* constructor returns, assigning
or deleting an attribute raises ``AttributeError``, except the names a class lists in
``_MUTABLE`` (the decoding caches and the settings whose setters clear them). Subclass
constructors run their base's inside their own, so every class's ``__init__`` is wrapped
(:func:`_freezing`, applied by ``__init_subclass__``) and only the outermost call freezes.
"""

from __future__ import annotations

import functools
from typing import ClassVar

__all__ = ["Immutable"]


def _freezing(init):
    """Wrap a code class's ``__init__`` so that the object is frozen when the outermost
    constructor returns (subclass constructors run the base's inside their own)."""

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        depth = self.__dict__.get("_init_depth", 0)
        object.__setattr__(self, "_init_depth", depth + 1)
        try:
            init(self, *args, **kwargs)
        finally:
            object.__setattr__(self, "_init_depth", depth)
        if depth == 0:
            object.__setattr__(self, "_frozen", True)

    return __init__


class Immutable:
    """Frozen when the outermost constructor returns (module docstring); no constructor of its own.
    Every subclass that defines ``__init__`` has it wrapped by :func:`_freezing`."""

    #: attributes that may still be set once the object is frozen (none here; a class lists its own)
    _MUTABLE: ClassVar[frozenset] = frozenset()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _freezing(cls.__dict__["__init__"])

    def __setattr__(self, name, value):
        if self.__dict__.get("_frozen") and name not in self._MUTABLE:
            raise AttributeError(
                f"{type(self).__name__} is immutable: cannot set {name!r} after construction"
                " (build a new code with the parameters you want)"
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        if self.__dict__.get("_frozen"):
            raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")
        object.__delattr__(self, name)
