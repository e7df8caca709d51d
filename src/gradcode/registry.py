"""One registry type for everything gradcode builds by name.

Codes, delay models, problems, datasets, optimizers and reproductions are each a table from a
name to a class or a factory function, filled by a decorator where the class or function is
defined, read by ``make_*`` functions, by the CLI listings and by contract tests that run over
every entry. :class:`Registry` is that table, once: the same lookup, the same listing, the same
parameter check and the same error text for all of them, so a user who mistypes a name or a
parameter anywhere gets one kind of message (the valid names, or the accepted parameters), and a
new registry costs one line.

    CODES = Registry("code")

    @CODES.register("crc")                 # stores cls.name = "crc"
    class CRC(LinearCode):
        summary = "cyclic repetition code"  # else the docstring's first paragraph
        def __init__(self, n, s, seed=0): ...

    CODES.make("crc", n=12, s=2)           # -> CRC(n=12, s=2)
    CODES.names()                          # ['crc', ...]
    CODES.parameters("crc")                # {'n': REQUIRED, 's': REQUIRED, 'seed': 0}
    CODES.info("crc")                      # {'name', 'class', 'summary', 'params'} for the CLI

Parameters are read from the registered object's signature (a class's ``__init__``, a factory's
own), so a registry cannot drift from the code it builds. Two options cover what the registries
need beyond "name -> callable":

* ``inputs``: leading positional arguments that :meth:`Registry.make` passes through and that are
  not parameters (a problem's ``dataset``; a dataset builder's ``rng`` and ``test_fraction``);
* ``common`` and ``wrap``: parameters every entry accepts, handled by composing the built object
  with ``wrap`` (the delay models' communication component, AGC / CommFR-GC) instead of a
  parameter on every class.

Errors: an unknown name raises :class:`UnknownNameError` (a ``ValueError``) listing the valid
names; an unknown or missing parameter raises :class:`ParameterError` listing the accepted
parameters before anything is built, so the message never is Python's bare "unexpected keyword
argument" about some ``__init__``. ``ParameterError`` is a ``ValueError`` and also a ``TypeError``:
Python reports a wrong keyword as ``TypeError``, and callers written against the registries this
replaces caught that. Values are the built object's business: its constructor validates them
(``ValueError``/``TypeError`` naming the argument) and the registry passes those through.

Layering: this module sits at the bottom with :mod:`gradcode.errors` and
:mod:`gradcode._validation`; it imports nothing else from gradcode, and every layer may import it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Generic, TypeVar

from gradcode.errors import GradcodeError

__all__ = ["REQUIRED", "ParameterError", "Registry", "UnknownNameError", "package_modules"]

T = TypeVar("T")


class UnknownNameError(GradcodeError, ValueError):
    """A name that is not in the registry; the message lists the valid names."""


class ParameterError(GradcodeError, ValueError, TypeError):
    """A parameter the entry does not take, or a required one left out; the message lists the
    parameters the entry accepts. Both a ``ValueError`` and a ``TypeError`` (see the module
    docstring)."""


class _Required:
    """Marker for a parameter without a default (:data:`REQUIRED`)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self):
        return (_Required, ())


#: the value :meth:`Registry.parameters` gives a parameter that has no default
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class _Signature:
    """What :meth:`Registry.make` checks calls against, read once per entry."""

    params: dict[str, Any]  # name -> default or REQUIRED, in signature order
    open: bool  # takes **kwargs: names beyond ``params`` are passed on unchecked


@dataclass(frozen=True, eq=False)
class _Entry:
    name: str
    target: Callable[..., Any]
    aliases: tuple[str, ...]


def _summary(target) -> str:
    """``target.summary`` when it is a non-empty string, else the first paragraph of its own
    docstring on one line (not an inherited one, and not the ``Cls(a: int = 0)`` text that
    ``dataclass`` writes for a class without a docstring)."""
    s = getattr(target, "summary", None)
    if isinstance(s, str) and s:
        return s
    doc = target.__dict__.get("__doc__") if isinstance(target, type) else getattr(target, "__doc__", None)
    if not doc or (isinstance(target, type) and doc.startswith(f"{target.__name__}(")):
        return ""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


def package_modules(anchor: str, *, skip: Iterable[str] = ("__init__", "base"), prefix: str = "",
                    packages: bool = False) -> list[str]:
    """The one discovery rule of the registries: every module of the package holding the file
    ``anchor`` (pass ``__file__``) whose name starts with ``prefix``, less ``skip``, and with
    ``packages`` its sub-packages too, as a registry's ``modules``. A new module that registers
    entries is found by being there; nothing else is edited."""
    from pathlib import Path

    here = Path(anchor).resolve().parent
    package = _package_of(here)
    names = {p.stem for p in here.glob("*.py")}
    if packages:
        names |= {p.parent.name for p in here.glob("*/__init__.py")}
    return sorted(f"{package}.{name}" for name in names if name.startswith(prefix) and name not in set(skip))


def _package_of(folder) -> str:
    """The dotted name of the package in ``folder`` (walking up while there is an ``__init__.py``)."""
    parts = []
    while (folder / "__init__.py").exists():
        parts.append(folder.name)
        folder = folder.parent
    return ".".join(reversed(parts))


def _listing(names: Iterable[str]) -> str:
    names = list(names)
    return ", ".join(names) if names else "(none)"


class Registry(Generic[T]):
    """A table from names to the classes or factories that build ``T``.

    ``kind`` names one entry in messages (``"delay model"``); ``plural`` defaults to
    ``kind + "s"``. ``inputs`` names the leading positional arguments :meth:`make` passes through
    (not parameters, not listed). ``common`` maps parameters every entry accepts to their
    defaults; :meth:`make` removes them from the call and hands the built object and their values
    to ``wrap(obj, **values)``. ``modules`` are imported on first use: the modules that register
    entries but import this registry themselves, so the registry cannot import them up front.
    """

    def __init__(
        self,
        kind: str,
        *,
        plural: str | None = None,
        inputs: Iterable[str] = (),
        common: Mapping[str, Any] | None = None,
        wrap: Callable[..., T] | None = None,
        modules: Iterable[str] = (),
    ):
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"kind must be a non-empty string naming one entry, got {kind!r}")
        self.kind = kind
        self.plural = plural if plural is not None else kind + "s"
        self.inputs = tuple(inputs)
        self.common = dict(common or {})
        if self.common and wrap is None:
            raise TypeError(f"common parameters {', '.join(self.common)} need wrap, the function that applies them")
        self._wrap = wrap
        self._modules = list(modules)
        self._entries: dict[str, _Entry] = {}  # canonical name -> entry
        self._lookup: dict[str, _Entry] = {}  # canonical names and aliases -> entry
        self._signatures: dict[str, _Signature] = {}

    # ------------------------------------------------------------------ filling
    def register(self, name: str, *, aliases: Iterable[str] = ()):
        """Decorator adding a class or a factory function under ``name`` (and ``aliases``).

        A class gets ``cls.name = name``. Registering a name twice is an error: the second
        definition would silently replace the first."""
        aliases = tuple(aliases)
        for n in (name, *aliases):
            if not isinstance(n, str) or not n:
                raise TypeError(f"a {self.kind} name must be a non-empty string, got {n!r}")
        if len(set((name, *aliases))) != 1 + len(aliases):
            raise ValueError(f"{self.kind} {name!r}: aliases {aliases!r} repeat a name")

        def deco(target):
            if not callable(target):
                raise TypeError(f"register({name!r}) needs a class or a function, got {target!r}")
            for n in (name, *aliases):
                if n in self._lookup:
                    raise ValueError(
                        f"{self.kind} name {n!r} is already registered by {_target_name(self._lookup[n].target)}"
                    )
            entry = _Entry(name, target, aliases)
            self._entries[name] = entry
            for n in (name, *aliases):
                self._lookup[n] = entry
            if isinstance(target, type):
                target.name = name
            return target

        return deco

    # ------------------------------------------------------------------ reading
    def names(self, *, aliases: bool = False) -> list[str]:
        """The registered names, sorted; with ``aliases=True`` the aliases too."""
        self._load()
        return sorted(self._lookup if aliases else self._entries)

    def get(self, name: str) -> Callable[..., T]:
        """The class or factory registered as ``name`` (or an alias of it)."""
        return self._entry(name).target

    def canonical(self, name: str) -> str:
        """The registered name ``name`` stands for (itself, or the name it is an alias of)."""
        return self._entry(name).name

    def parameters(self, name: str) -> dict[str, Any]:
        """Parameters of entry ``name`` in signature order, each mapped to its default or to
        :data:`REQUIRED`; the registry's ``common`` parameters come last."""
        sig = self._signature(self._entry(name))
        return {**sig.params, **self.common}

    def info(self, name: str) -> dict[str, Any]:
        """What a listing shows: ``name``, ``class`` (the class or function name), ``summary``
        (:func:`_summary`) and ``params`` (:meth:`parameters` with ``None`` for a required one,
        so that the dict is JSON-able)."""
        entry = self._entry(name)
        return {
            "name": entry.name,
            "class": _target_name(entry.target),
            "summary": _summary(entry.target),
            "params": {k: None if v is REQUIRED else v for k, v in self.parameters(entry.name).items()},
        }

    def __contains__(self, name) -> bool:
        self._load()
        return isinstance(name, str) and name in self._lookup

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<Registry {self.kind!r}: {_listing(self.names())}>"

    # ------------------------------------------------------------------ building
    def check(self, name: str, /, **params) -> None:
        """Raise as :meth:`make` would for an unknown name or parameter, without building."""
        entry = self._entry(name)
        self._check_params(entry, {k: v for k, v in params.items() if k not in self.common})

    def make(self, name: str, /, *inputs, **params) -> T:
        """Build entry ``name``: ``target(*inputs, **params)``, then ``wrap`` with the common
        parameters when the registry has any.

        Raises :class:`UnknownNameError` for an unknown name and :class:`ParameterError` for a
        parameter the entry does not take or a required one left out, each listing what is
        valid; the entry's own constructor validates the values."""
        entry = self._entry(name)
        if len(inputs) != len(self.inputs):
            raise TypeError(
                f"making a {self.kind} takes {len(self.inputs)} positional input(s)"
                f"{' (' + ', '.join(self.inputs) + ')' if self.inputs else ''} before the keyword"
                f" parameters, got {len(inputs)}"
            )
        common = dict(self.common)
        if common:
            for k in list(params):
                if k in common:
                    common[k] = params.pop(k)
        self._check_params(entry, params)
        return self._build(entry, inputs, params, common)

    # ------------------------------------------------------------------ hooks
    def _build(self, entry: _Entry, inputs: tuple, params: dict, common: dict) -> T:
        obj = entry.target(*inputs, **params)
        return self._wrap(obj, **common) if self._wrap is not None else obj

    def _load(self) -> None:
        # pop before importing: a module that reads the registry while it is being imported
        # must not import itself again (and a failed import is retried next time)
        while self._modules:
            mod = self._modules.pop(0)
            try:
                import_module(mod)
            except BaseException:
                self._modules.insert(0, mod)
                raise

    def _entry(self, name) -> _Entry:
        if not isinstance(name, str):
            raise TypeError(f"a {self.kind} name must be a string, got {name!r} ({type(name).__name__})")
        self._load()
        try:
            return self._lookup[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; available {self.plural}: {_listing(self.names(aliases=True))}"
            ) from None

    def _signature(self, entry: _Entry) -> _Signature:
        sig = self._signatures.get(entry.name)
        if sig is None:
            sig = self._signatures[entry.name] = self._read_signature(entry)
        return sig

    def _read_signature(self, entry: _Entry) -> _Signature:
        params, is_open = {}, False
        skip = len(self.inputs)
        for p in inspect.signature(entry.target).parameters.values():
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                is_open = True
            elif p.kind is inspect.Parameter.VAR_POSITIONAL:
                skip = 0  # the inputs are absorbed by *args
            elif skip and p.kind is not inspect.Parameter.KEYWORD_ONLY:
                skip -= 1  # one of the inputs
            elif p.kind is not inspect.Parameter.POSITIONAL_ONLY:
                params[p.name] = REQUIRED if p.default is inspect.Parameter.empty else p.default
        return _Signature(params, is_open)

    def _check_params(self, entry: _Entry, params: Mapping[str, Any]) -> None:
        sig = self._signature(entry)
        accepted = {**sig.params, **self.common}
        unknown = [] if sig.open else sorted(k for k in params if k not in sig.params)
        missing = [k for k, v in sig.params.items() if v is REQUIRED and k not in params]
        if not unknown and not missing:
            return
        tail = f"its parameters are {_listing(accepted)}" if accepted else "it takes no parameters"
        what = []
        if unknown:
            what.append(f"does not take {', '.join(map(repr, unknown))}")
        if missing:
            what.append(f"needs {', '.join(map(repr, missing))}")
        raise ParameterError(f"{self.kind} {entry.name!r} {' and '.join(what)}; {tail}")


def _target_name(target) -> str:
    return getattr(target, "__name__", None) or type(target).__name__
