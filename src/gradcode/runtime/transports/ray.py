"""Ray's actor calls as a transport (``ClusterConfig.transport="ray"``), and the way every other
transport falls back on for a worker it cannot reach (a channel being re-opened after its process
died; a task that must bring a replica through the object store).

Behaviour of Ray 2.60 measured on these machines (docs/architecture.md, "The runtime"):

* ``ray.wait`` counts a failed reference (dead actor) as ready, so :meth:`ActorCalls.events`
  reads each ready reference for what it holds: a message, the end of a stream, or the error of a
  worker that died. A dead worker becomes an event, never an exception. One call waits once
  (``num_returns=1``, up to the timeout), then collects every other ready reference without
  waiting and reads all their messages with one ``ray.get`` (one wait per message was most of a
  round's time on 16 cores);
* tasks of several messages stream back through actor generators (``num_returns="streaming"``);
  a task of one message (every single-message code) is a plain actor call returning it
  (:meth:`~gradcode.runtime.actors.PlainWorker.run_one`), which saves the stream's end marker and
  a wait per worker; a message is read zero-copy from the object store (a read-only array the
  master never writes);
* each actor call costs the driver the serialisation of its arguments and Ray's dispatch, so a
  round of them with no work costs several times a channel's round (BENCHMARKS.md, "2026-11-27:
  rounds through direct channels, Ray for the rest"), which is why :mod:`.channels` is the default.
"""

from __future__ import annotations

from typing import Any

import ray

from gradcode.runtime.base import Event
from gradcode.runtime.transports.base import Transport

__all__ = ["ActorCalls", "INLINE_BYTES", "TRANSPORT"]

#: Ray's ``max_direct_call_object_size`` (100 KiB by default): a task argument up to this size
#: travels inside the task instead of through the object store
INLINE_BYTES = 100 * 1024


class _Failed:
    """A reference whose ``ray.get`` raised (kept apart from the messages read with it)."""

    def __init__(self, exc):
        self.exc = exc


class ActorCalls(Transport):
    """Every request an actor call (module docstring)."""

    inline_bytes = INLINE_BYTES

    def __init__(self, engine):
        super().__init__(engine)
        self.owner: dict[Any, int] = {}  # a task's reference -> its worker
        self._reductions: dict[Any, tuple[int, int]] = {}  # a reduction's reference -> (worker, round)
        self._streams: dict[int, tuple[Any, Any]] = {}  # worker -> (actor, its streaming ``run``)

    def send(self, w: int, t: int, generation: int, tasks, sleeps: tuple, fail: bool, one: bool, params,
             **extra) -> bool:
        """Round ``t``'s tasks as a plain call (one message) or a stream; ``extra``: keyword
        arguments of the worker's ``run`` (a replica or updates it takes in first)."""
        actor = self.engine.actors[w]
        args = (t, generation, tasks, sleeps, bool(fail), *params)
        if one:
            ref = actor.run_one.remote(*args, **extra)
        else:
            ref = self._stream(w, actor).remote(*args, **extra)
        self.engine.running[w] = (t, ref, not one)
        self.owner[ref] = w
        return True

    def _stream(self, w: int, actor):
        kept = self._streams.get(w)
        if kept is None or kept[0] is not actor:
            kept = self._streams[w] = (actor, actor.run.options(num_returns="streaming"))
        return kept[1]

    def reduce(self, w: int, t: int, order) -> bool:
        try:
            self._reductions[self.engine.actors[w].reduce.remote(order)] = (w, t)
        except Exception as exc:  # a killed actor
            self.engine.pending_events.append(Event(w, t, "failed", exc, lost=True))
        return True

    def abort(self, w: int, t: int) -> bool:
        try:
            self.engine.actors[w].abort.remote(t)
        except Exception:  # a dead actor: nothing to stop
            pass
        return True

    def waiting(self) -> bool:
        return bool(self.owner) or bool(self._reductions)

    def events(self, timeout: float) -> list[Event]:
        """The events of the actor calls that are ready within ``timeout`` seconds."""
        engine = self.engine
        pending = list(self.owner) + list(self._reductions)
        if not pending:
            return []
        ready, rest = ray.wait(pending, num_returns=1, timeout=timeout)
        if not ready:
            return []
        if rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        events: list[Event] = []
        fetch: list[tuple[int, int, Any]] = []  # (worker, round, message ref) to read at once
        reductions = set()  # of those, replies of reductions
        for ref in ready:
            if ref in self._reductions:
                w, t = self._reductions.pop(ref)
                reductions.add(ref)
                fetch.append((w, t, ref))
                continue
            w = self.owner[ref]
            t, _, streaming = engine.running[w]
            if not streaming:  # a plain call: its one return is the message (or None: aborted)
                engine.forget(w)
                fetch.append((w, t, ref))
                continue
            try:
                item = next(ref)
            except StopIteration:
                engine.forget(w)
                events.append(Event(w, t, "done"))
                continue
            except Exception as exc:  # the actor died before the stream started
                engine.forget(w)
                events.append(Event(w, t, "failed", exc, lost=engine.lost_worker(w, exc)))
                continue
            fetch.append((w, t, item))
        if fetch:
            try:
                values = ray.get([ref for _, _, ref in fetch])
            except Exception:  # one of them failed: read them one by one to tell which
                values = []
                for _, _, ref in fetch:
                    try:
                        values.append(ray.get(ref))
                    except Exception as exc:
                        values.append(_Failed(exc))
            for (w, t, ref), value in zip(fetch, values):
                if ref in reductions and not isinstance(value, _Failed):
                    events.append(Event(w, t, "reduced", value))
                elif isinstance(value, _Failed):  # died mid-stream, or the task raised
                    if ref not in reductions:
                        engine.forget(w)
                    events.append(Event(w, t, "failed", value.exc, lost=engine.lost_worker(w, value.exc)))
                elif value is None:  # a plain call aborted in its sleep: no message
                    events.append(Event(w, t, "done"))
                else:
                    events.append(Event(w, t, "message", value))
        return events

    def shutdown(self) -> None:
        self.owner, self._reductions, self._streams = {}, {}, {}


TRANSPORT = ActorCalls
