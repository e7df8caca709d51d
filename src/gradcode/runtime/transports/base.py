"""The transport protocol: what :class:`~gradcode.runtime.engine.RayEngine` asks of the way its
rounds reach the workers.

The engine owns the workers (Ray places, starts, restarts and kills the actors), what each one
runs (``engine.running``: worker -> ``(round, reference or None, streaming)``) and the rules about
lost and reused workers (``engine.lost_worker``); a transport moves requests to the workers and
turns what comes back into :class:`~gradcode.runtime.base.Event` s. Every request a transport
cannot take (its ``send`` / ``reduce`` / ``abort`` answers False) goes by Ray's actor calls
(:mod:`.ray`), which reach every live worker.

The contract:

* ``start(deadline)``: reach every worker, once they are up (e.g. open their channels);
* ``send(w, t, generation, tasks, sleeps, fail, one, params)``: start round ``t`` on ``w``; True
  when sent (the engine records ``running[w] = (t, None, not one)``), False when ``w`` cannot be
  reached this way now;
* ``reduce(w, t, order)``: send ``w`` its part of round ``t``'s reduction (transports whose
  workers reduce among themselves: ``reduces = True``); ``abort(w, t)``: stop ``w``'s work of
  rounds ``<= t``; both True when sent;
* ``waiting()``: whether anything sent this way is still to answer; ``events(timeout)``: what
  came back within ``timeout`` seconds (``[]`` if nothing);
* ``worker_lost(w)``: ``w``'s process died (its node, say): forget the way to it until it is back;
  ``killed(w)``: ``w`` was ended for good;
* ``shutdown()``: close everything.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from gradcode.runtime.base import Event

__all__ = ["Transport"]


class Transport(ABC):
    """One way a :class:`~gradcode.runtime.engine.RayEngine`'s requests reach its workers (module
    docstring)."""

    #: largest parameter array a request carries itself; above it the engine stores the array once
    #: in Ray's object store and every request names it
    inline_bytes: int
    #: whether the workers reduce among themselves (the collective path)
    reduces = False

    def __init__(self, engine):
        self.engine = engine

    def start(self, deadline: float) -> None:
        """Reach every worker (they are up); ``deadline`` on :func:`time.monotonic`."""

    @abstractmethod
    def send(self, w: int, t: int, generation: int, tasks, sleeps: tuple, fail: bool, one: bool, params) -> bool:
        ...

    def reduce(self, w: int, t: int, order) -> bool:
        return False

    @abstractmethod
    def abort(self, w: int, t: int) -> bool:
        ...

    @abstractmethod
    def waiting(self) -> bool:
        ...

    @abstractmethod
    def events(self, timeout: float) -> list[Event]:
        ...

    def worker_lost(self, w: int) -> None:
        """Worker ``w``'s process died: forget the way to it until it is back."""

    def killed(self, w: int) -> None:
        """Worker ``w`` was ended for good: never reach for it again."""

    def shutdown(self) -> None:
        """Close what the transport opened."""
