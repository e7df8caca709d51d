"""Direct channels as a transport (``ClusterConfig.transport="channels"``, the default): each
round's tasks and messages over one TCP connection per worker (:mod:`gradcode.runtime.channel`,
the wire), one ``select`` over all of them.

Ray stays the engine: it places, starts, restarts and kills the workers and tells the driver where
each one listens (:meth:`~gradcode.runtime.actors.WorkerActor.open_channel`, given a token through
Ray). With no dispatch per call, a round so costs a fraction of what Ray's actor calls cost
(``bench_ray_paths.py``; BENCHMARKS.md, "2026-11-27: rounds through direct channels, Ray for the
rest"). What does not fit a channel goes by actor call (:mod:`.ray`): parameters
above :data:`~gradcode.runtime.channel.CHANNEL_BYTES` (Ray's shared-memory object store moves them
faster than a socket), a worker whose channel cannot be opened (a :class:`ChannelWarning`), one
whose channel is being re-opened after its process died (its next task goes by actor call, which
Ray queues until the restart), and a reused worker until the reset of its data is done.
"""

from __future__ import annotations

import contextlib
import secrets
import warnings
from typing import Any

import ray

from gradcode.runtime.base import Event
from gradcode.runtime.channel import CHANNEL_BYTES, ChannelClosed, DriverChannels, WorkerTaskError
from gradcode.runtime.transports.base import Transport

__all__ = ["TRANSPORT", "ChannelWarning", "Channels"]


class ChannelWarning(RuntimeWarning):
    """A worker's direct channel could not be opened: its rounds go through Ray's actor calls."""


class Channels(Transport):
    """A direct channel to each worker (module docstring)."""

    inline_bytes = CHANNEL_BYTES

    def __init__(self, engine):
        super().__init__(engine)
        self.channels = DriverChannels()
        self._token = secrets.token_bytes(32)
        self._reopen: dict[int, Any] = {}  # worker -> its open_channel reference, after its channel closed
        self.unreachable: set[int] = set()  # workers whose channel could not be opened: actor calls only
        self._reducing: dict[int, int] = {}  # worker -> round of the reduction it is in
        self._loopback = False  # the workers listen on the loopback address (every node is this machine)

    def start(self, deadline: float) -> None:
        import time

        self._loopback = self.engine.one_machine()
        refs = [a.open_channel.remote(self._token, self._loopback) for a in self.engine.actors]
        for w, ref in enumerate(refs):
            self._connect(w, ray.get(ref, timeout=max(deadline - time.monotonic(), 0.0)),
                          timeout=min(5.0, max(deadline - time.monotonic(), 0.1)))

    def _connect(self, w: int, address, timeout: float = 5.0) -> None:
        """Open worker ``w``'s channel at ``address``; when the driver cannot reach it (a firewall
        between nodes), ``w`` takes its rounds through actor calls, and a warning says so."""
        try:
            self.channels.connect(w, address, self._token, timeout)
        except OSError as exc:
            self.unreachable.add(w)
            warnings.warn(f"worker {w}'s direct channel at {address[0]}:{address[1]} cannot be opened ({exc}): its"
                          " rounds go through Ray's actor calls (transport='ray' says so for every worker)",
                          ChannelWarning, stacklevel=4)

    def reachable(self, w: int) -> bool:
        """Whether worker ``w``'s requests can go by channel now: its channel is open (after its
        process died: once Ray has restarted it and it listens again) and no reset of its data is
        still running (looked at without waiting)."""
        if not self.engine.reset_done(w):
            return False
        if not self.channels.has(w) and w in self._reopen:
            ref = self._reopen[w]
            if ray.wait([ref], timeout=0)[0]:
                del self._reopen[w]
                with contextlib.suppress(ray.exceptions.RayError):
                    self._connect(w, ray.get(ref))
        return self.channels.has(w)

    def send(self, w: int, t: int, generation: int, tasks, sleeps: tuple, fail: bool, one: bool, params) -> bool:
        sent = (self.reachable(w) and not any(isinstance(p, ray.ObjectRef) for p in params)
                and self.channels.request(w, t, generation, tasks, sleeps, fail, one, params))
        if not sent and not self.channels.has(w) and w not in self._reopen:
            self.worker_lost(w)  # closed, and no address asked for (an earlier ask failed while Ray restarted it)
        return sent

    def reduce(self, w: int, t: int, order) -> bool:
        if self.reachable(w) and self.channels.reduce(w, t, order):
            self._reducing[w] = t
            return True
        return False

    def abort(self, w: int, t: int) -> bool:
        entry = self.engine.running.get(w)
        if self.channels.has(w) and (entry is None or entry[1] is None):
            self.channels.abort(w, t)
            return True
        return False

    def waiting(self) -> bool:
        return bool(self._reducing) or any(ref is None for _, ref, _ in self.engine.running.values())

    def events(self, timeout: float) -> list[Event]:
        """The events of the frames the channels delivered within ``timeout`` seconds. A frame of
        a task the engine no longer runs (the end of a released stream, an aborted task's end) is
        dropped; a channel that closed is its worker's death (``lost``) when it ran a task."""
        engine = self.engine
        events: list[Event] = []
        for w, frame in self.channels.wait(timeout):
            entry = engine.running.get(w)
            mine = entry is not None and entry[1] is None
            if frame is None:  # the process died (or its connection broke)
                self.worker_lost(w)
                engine.process_died(w)
                if w in self._reducing:  # a member of a reduction: it fails, lost
                    exc = ChannelClosed(f"worker {w}'s process died during a reduction (its channel closed)")
                    events.append(Event(w, self._reducing.pop(w), "failed", exc, lost=True))
                if mine:
                    engine.forget(w)
                    exc = ChannelClosed(f"worker {w}'s process died or its connection broke (its channel closed)")
                    events.append(Event(w, entry[0], "failed", exc, lost=engine.lost_worker(w, exc)))
                continue
            t, kind, payload = frame
            if kind in ("reduced", "reduce-error"):
                if self._reducing.get(w) == t:
                    del self._reducing[w]
                    events.append(Event(w, t, "reduced", payload) if kind == "reduced" else
                                  Event(w, t, "failed", payload, lost=engine.lost_worker(w, payload)))
                continue
            if kind == "unreadable" and mine:  # a whole frame that did not unpickle here: a bug
                t, payload = entry[0], WorkerTaskError(f"a message of worker {w} could not be read here: {payload!r}",
                                                       payload)
            elif not mine or entry[0] != t:
                continue
            if kind == "message":
                if not entry[2]:  # a task of one message: this was all of it
                    engine.forget(w)
                events.append(Event(w, t, "message", payload))
            elif kind == "end":
                engine.forget(w)
                events.append(Event(w, t, "done"))
            else:
                engine.forget(w)
                events.append(Event(w, t, "failed", payload, lost=engine.lost_worker(w, payload)))
        return events

    def worker_lost(self, w: int) -> None:
        """Worker ``w``'s channel closed (its process died, or its node): ask for the restarted
        process's address, which Ray answers once it is back."""
        self.channels.close(w)
        if w not in self.engine.killed and w not in self.unreachable and w not in self._reopen:
            self._reopen[w] = self.engine.actors[w].open_channel.remote(self._token, self._loopback)

    def killed(self, w: int) -> None:
        self._reopen.pop(w, None)

    def shutdown(self) -> None:
        self.channels.close_all()
        self._reopen, self._reducing = {}, {}


TRANSPORT = Channels
