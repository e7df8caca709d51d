"""Argument checks whose messages name the argument, the bad value and what is allowed."""

from __future__ import annotations

import numbers

import numpy as np


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` or raise ``TypeError``/``ValueError`` naming ``name``.

    Booleans and floats (even integral ones such as ``2.0``) are refused: a parameter that counts
    workers or partitions must be given as an integer.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_memory(what: str, nbytes: float) -> None:
    """Refuse, before allocating, what needs more memory than this machine has (``ValueError``
    saying how much ``what`` needs): a clear error instead of a ``MemoryError`` or a swapping
    machine."""
    total = memory_bytes()
    if nbytes > total:
        raise ValueError(f"{what} needs {_size(nbytes)} of memory; this machine has {_size(total)}")


def memory_bytes() -> float:
    """This machine's memory in bytes (infinity where it cannot be told)."""
    import os

    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return float("inf")


def file_problem(path, limit: float | None = None) -> str | None:
    """:func:`unreadable_file`, or that the file holds more than ``limit`` bytes (default: half
    this machine's memory, what reading it whole could take), or None: a regular file to read."""
    import os

    problem = unreadable_file(path)
    if problem is None:
        limit = memory_bytes() / 2 if limit is None else limit
        size = os.stat(path).st_size
        if size > limit:
            problem = f"{_size(size)}, more than the {_size(limit)} a file read here may hold"
    return problem


def read_regular(path, limit: float | None = None) -> bytes:
    """The bytes of ``path``, read only once it is known to be a regular file of at most
    ``limit`` bytes (:func:`file_problem`): a FIFO, a device (a symbolic link to ``/dev/zero``, say)
    or an oversized file is refused by :class:`~gradcode.errors.UnsafeFileError` at once, instead
    of blocking or filling memory. The file is opened without blocking and checked again on the
    open descriptor, so one swapped in after the first check is refused too."""
    import os
    import stat

    from gradcode.errors import UnsafeFileError

    problem = file_problem(path, limit)
    if problem is not None:
        raise UnsafeFileError(f"{path}: {problem}")
    limit = memory_bytes() / 2 if limit is None else limit
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise UnsafeFileError(f"{path}: changed into something else than a regular file of at most"
                                  f" {_size(limit)} while it was opened")
        data = fh.read(int(min(limit, st.st_size)) + 1)
    if len(data) > limit:
        raise UnsafeFileError(f"{path}: grew past {_size(limit)} while it was read")
    return data


def unreadable_file(path: str) -> str | None:
    """Why ``path`` is not a regular file to read (``"no such file"``, ``"a directory"``, ``"not a
    regular file (a device, a pipe or a socket)"``, ``"a symbolic link loop"``, ``"a broken
    symbolic link"``), or None when it is one."""
    import errno
    import os
    import stat

    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        if os.path.islink(path):
            return "a broken symbolic link"
        return "no such file"
    if stat.S_ISDIR(st.st_mode):
        return "a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a device, a pipe or a socket)"
    return None


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    return f"{nbytes:.3g} PiB"


def check_real(
    name: str,
    value,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    strict_min: bool = False,
    strict_max: bool = False,
) -> float:
    """Return ``value`` as a finite ``float`` in the given range, or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        raise ValueError(f"{name} must be {'>' if strict_min else '>='} {minimum}, got {value}")
    if maximum is not None and (value >= maximum if strict_max else value > maximum):
        raise ValueError(f"{name} must be {'<' if strict_max else '<='} {maximum}, got {value}")
    return value


def check_choice(name: str, value, choices) -> str:
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {allowed}; got {value!r}")
    return value


def check_closing_rule(close, waitout: str = "decodable") -> float | None:
    """The ``mu`` of a closing rule (``None`` for ``close="decodable"``), the one check of the
    simulator's and the runtime's ``close``/``waitout`` (SGC Section 2): ``close`` is
    ``"decodable"`` or a number ``mu >= 0``; ``waitout`` is ``"decodable"`` or ``"all"``, and
    ``"all"`` needs a ``mu`` (it waits out the mu-rule's deadline, which the decodable close has
    not). A number may come as its text (``"0.5"``: the command line's ``--close``)."""
    check_choice("waitout", waitout, ("decodable", "all"))
    if isinstance(close, str) and close != "decodable":
        try:
            close = float(close)
        except ValueError:
            raise ValueError(f"close must be 'decodable' or a number mu >= 0 (the SGC mu-rule), got {close!r}"
                             ) from None
    if isinstance(close, str):
        check_choice("close", close, ("decodable",))
        mu = None
    elif isinstance(close, numbers.Real) and not isinstance(close, bool):
        mu = check_real("close (the mu of the mu-tolerance rule)", close, minimum=0.0)
    else:
        raise TypeError(f"close must be 'decodable' or a number mu >= 0 (the SGC mu-rule), got {close!r}")
    if waitout == "all" and mu is None:
        raise ValueError("waitout='all' is the wait-out of the mu-rule's deadline; with close='decodable'"
                         " there is no deadline to wait out: give close=mu (a number >= 0) or drop waitout")
    return mu


def as_generator(seed) -> np.random.Generator:
    """A ``numpy.random.Generator`` from a seed, a ``SeedSequence`` or a Generator (returned as is)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, (numbers.Integral, np.random.SeedSequence)) and not isinstance(seed, bool):
        return np.random.default_rng(seed)
    raise TypeError(f"seed must be an int, a numpy SeedSequence or Generator, or None; got {seed!r}")
