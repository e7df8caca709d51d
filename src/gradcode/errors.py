"""Exceptions shared by every layer of gradcode."""


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
