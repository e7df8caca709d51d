"""Exceptions shared by every layer of gradcode."""

from __future__ import annotations


class GradcodeError(Exception):
    """Base class of gradcode's own errors."""


class NotDecodableError(GradcodeError):
    """The received messages do not determine the full gradient (or only through a solve too
    ill-conditioned to trust). The message says which, and why."""


class TraceError(GradcodeError, ValueError):
    """A delay trace is malformed; the message names the file and the problem."""


class StopTraining(Exception):
    """Raised by a training callback to end the run after the round it was called for: the run
    stops cleanly, its records are saved and :func:`gradcode.train` or :func:`gradcode.torch.fit`
    returns the result trained to that round (not an error, hence not a :class:`GradcodeError`)."""


class CollectiveUnsupportedError(GradcodeError):
    """A scheme, code or problem cannot run on the collective path (its decode is not a fixed
    linear combination of held messages, or its objective needs the parameters at the driver);
    the message names it and why. The runtime then keeps the star path for it, saying so."""


class ResultsLostError(GradcodeError):
    """Results a scheme still needs were lost with the worker that kept them (the collective path
    keeps messages on the workers) and the scheme will not ask for them again: the message names
    the job and the worker."""


class UnsafeFileError(GradcodeError, ValueError):
    """A file to read is not a regular file (a FIFO, a device, a directory), or is larger than a
    file read there may be: refused before it is read (the message names the file and why)."""


class UserCodeError(GradcodeError, ValueError):
    """The user's own code (a model's constructor or forward pass, a loss, a data reader) raised
    while a run was set up, before any worker started. Its message is one line: where in the
    user's files it raised (:func:`user_location`), the exception's type and the first line of its
    message, and what gradcode was doing (``mynet.py:7: RuntimeError: ... (model: building Net())``);
    the user's exception is its ``__cause__``, with the whole traceback (the command line shows it
    with ``--debug``). A ``ValueError``: the argument given does not work, so the command line
    exits with its usage status (2)."""

    def __init__(self, message: str, where: str | None = None):
        super().__init__(message)
        #: ``FILE:LINE`` in the user's code where it raised (None: nowhere outside gradcode and the
        #: installed libraries, e.g. a shape error inside torch on a built-in module)
        self.where = where

    @classmethod
    def of(cls, exc: BaseException, context: str) -> UserCodeError:
        """The error for ``exc``, raised by the user's code while gradcode was doing ``context``
        (``"model: building Net()"``); raise it ``from exc``."""
        where = user_location(exc)
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        what = f"{type(exc).__name__}: {lines[0].strip()}" if lines else type(exc).__name__
        return cls(f"{where}: {what} ({context})" if where else f"{context}: {what}", where)


def user_location(exc: BaseException) -> str | None:
    """``FILE:LINE`` of the innermost frame of ``exc``'s traceback in the user's own code: the
    last frame outside gradcode, the standard library and installed packages (torch, numpy),
    relative to the working directory when it lies under it; None when there is none."""
    import os
    import sysconfig
    import traceback

    paths = sysconfig.get_paths()
    skip = {os.path.dirname(os.path.abspath(__file__))} | {
        os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        name = frame.filename
        if not name or name.startswith("<"):
            continue
        path = os.path.abspath(name)
        if any(path == root or path.startswith(root + os.sep) for root in skip):
            continue
        try:
            shown = os.path.relpath(path)
        except ValueError:  # another drive (Windows)
            shown = path
        return f"{path if shown.startswith('..') else shown}:{frame.lineno}"
    return None
