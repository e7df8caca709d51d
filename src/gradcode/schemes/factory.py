"""Schemes by name: the one place that turns a name and its parameters into a :class:`Scheme`
(a scheme family of :data:`~gradcode.schemes.base.SCHEMES`, or any registered code run as a
:class:`~gradcode.schemes.static.StaticScheme`), and that accepts a code where a scheme is due.

It sits above ``schemes.base`` (the protocol) and ``schemes.static`` (which implements it for
codes), so neither imports the other's way back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gradcode.codes import CODES, make_code
from gradcode.codes.base import LinearCode
from gradcode.registry import UnknownNameError
from gradcode.schemes.base import PROTOCOL, SCHEMES, Scheme
from gradcode.schemes.static import StaticScheme

__all__ = ["SchemeSpec", "as_scheme", "available_schemes", "make_scheme", "resolve_scheme", "scheme_kind",
           "scheme_parameters"]


@dataclass(frozen=True)
class SchemeSpec:
    """A scheme by name with its parameters resolved (:func:`resolve_scheme`): ``kind`` is
    ``"code"`` (run as a :class:`~gradcode.schemes.static.StaticScheme`) or ``"scheme"`` (a family
    of :data:`~gradcode.schemes.base.SCHEMES`), ``params`` the keyword arguments its constructor
    gets, and ``ignored`` the run-wide values it does not take (e.g. ``s`` for GC-DC)."""

    name: str
    kind: str
    params: Mapping[str, Any]
    ignored: tuple[str, ...] = ()

    def build(self, *, dim: int | None = None) -> Scheme:
        """The scheme (``dim``: the gradient dimension it decodes to)."""
        return make_scheme(self.name, dim=dim, **self.params)


def scheme_kind(name: str) -> str:
    """``"scheme"`` for a family of :data:`SCHEMES`, ``"code"`` for a registered code; an unknown
    name raises the error that lists both registries."""
    if name in SCHEMES:
        return "scheme"
    if name in CODES:
        return "code"
    make_scheme(name)  # raises UnknownNameError listing the codes and the scheme families
    raise AssertionError("unreachable")


def scheme_parameters(name: str) -> dict[str, Any]:
    """``{parameter: default}`` of a code or scheme family (``None`` for a required one)."""
    return dict((SCHEMES if scheme_kind(name) == "scheme" else CODES).info(name)["params"])


#: the run-wide values :func:`resolve_scheme` fills in, and how a disagreement names them
_RUN_WIDE = (("n", "workers"), ("s", "tolerance"), ("seed", "seed"), ("jobs", "jobs"))


def resolve_scheme(name: str, params: Mapping[str, Any] | None = None, *, n: int | None = None,
                   s: int | None = None, seed=None, jobs: int | None = None,
                   agree: tuple[str, ...] = ("n", "s", "jobs")) -> SchemeSpec:
    """The one rule every entry point uses to turn a name and a run's settings into a scheme's
    parameters: the entry's own ``params`` as given, plus each run-wide value (``n`` the workers,
    ``s`` the tolerance, ``seed``, ``jobs`` the sequential codes' ``J``) that the entry takes and
    that is not ``None``. A run-wide value the entry does not take is listed in ``ignored``. Where
    ``params`` sets the same key: for the keys in ``agree`` a different value is a ``ValueError``
    (neither silently wins: ``simulate -n 4`` with ``crc:n=6``); for the others the entry's own
    value stands and the run's is only its default (a code's ``seed=3`` beside the run's seed;
    ``train``'s default tolerance, its ``--stragglers``, beside ``crc:s=2``).
    Validation of the values is the constructors' (their errors name the parameter)."""
    kind = scheme_kind(name)
    takes = scheme_parameters(name)
    out = dict(params or {})
    ignored = []
    for key, what in _RUN_WIDE:
        value = {"n": n, "s": s, "seed": seed, "jobs": jobs}[key]
        if value is None:
            continue
        if key not in takes:
            ignored.append(key)
        elif key not in out:
            out[key] = value
        elif out[key] != value and key in agree:
            raise ValueError(f"{name}'s {key}={out[key]!r} and the run's {what} {value!r} disagree: give one of them")
    return SchemeSpec(name, kind, out, tuple(ignored))


def as_scheme(obj, *, dim: int | None = None, what: str = "scheme") -> Scheme:
    """What drivers accept: a :class:`Scheme` as it is, a :class:`~gradcode.codes.LinearCode` as a
    :class:`~gradcode.schemes.StaticScheme` (``dim``: its decode dimension); anything else is a
    ``TypeError`` naming what it lacks."""
    if isinstance(obj, Scheme):
        return obj
    if isinstance(obj, LinearCode):
        return StaticScheme(obj, dim=dim)
    missing = [name for name in PROTOCOL if not hasattr(obj, name)]
    raise TypeError(
        f"{what} must be a gradcode Scheme (a subclass of gradcode.schemes.Scheme) or a LinearCode"
        f" (make_code); got {type(obj).__name__}, which "
        + (f"lacks {', '.join(missing)}" if missing else "has the protocol's names but does not subclass Scheme")
    )


def available_schemes() -> list[str]:
    """Names :func:`make_scheme` accepts beyond the codes (``gc-dc``, ...), sorted."""
    return SCHEMES.names()


def make_scheme(name: str, /, *, dim: int | None = None, **params) -> Scheme:
    """A scheme by name: a scheme family of :data:`SCHEMES` (``make_scheme("gc-dc", n=12,
    clusters=4, r=3, ssi="perfect")``) or any registered code, run as a
    :class:`~gradcode.schemes.StaticScheme` (``make_scheme("crc", n=12, s=2)``). ``dim``: the
    gradient dimension to decode to. Unknown names list both registries."""
    if name in SCHEMES:
        if dim is not None:
            params["dim"] = dim
        return SCHEMES.make(name, **params)
    if name in CODES:
        return StaticScheme(make_code(name, **params), dim=dim)
    raise UnknownNameError(
        f"unknown code or scheme {name!r}; available codes: {', '.join(CODES.names())}; scheme families:"
        f" {', '.join(SCHEMES.names())}"
    )
