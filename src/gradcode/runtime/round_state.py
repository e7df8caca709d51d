"""The round driver's typed state: the open round (:class:`OpenRound`, what each worker was sent:
:class:`WorkerTasks`) and the per-(round, worker) :class:`Ledger` of what came back
(:class:`Delivery`).

Both drivers (:mod:`gradcode.runtime.driver`, :mod:`gradcode.runtime.collective`) keep these
for the rounds still open: a round's entries are dropped when it closes
(:meth:`Ledger.forget_through`), so later messages of a closed round are recognised as stale by
the round number alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Delivery", "Ledger", "OpenRound", "WorkerTasks"]


@dataclass(frozen=True)
class WorkerTasks:
    """What a worker is sent in a round: its wire tasks (:class:`~gradcode.runtime.worker.WireTask`),
    the parameters they read (the engine's references, one a job), the injected schedule
    (``ready_at[i]``: seconds into the round at which message ``i`` is due, the simulator's
    timing rule) and the number of messages the tasks send."""

    tasks: list
    params: list
    ready_at: np.ndarray
    messages: int


@dataclass
class OpenRound:
    """The round a driver is closing: its number ``t``; ``tasks``, each planned worker's
    :class:`WorkerTasks`; ``unsent``, the workers whose tasks are still to be sent (busy when the
    round opened, or failed and to be sent again); ``retries``, the re-send schedule of workers
    whose task failed (``worker -> (not before, attempts)``, with back-off); and when it started
    and must have decoded by (``deadline``: the round timeout), on the driver's clock."""

    t: int
    tasks: dict[int, WorkerTasks]
    unsent: set[int]
    start: float
    deadline: float
    retries: dict[int, tuple[float, int]] = field(default_factory=dict)

    def planned(self) -> list[int]:
        """The workers given at least one message to send this round."""
        return [w for w, sent in self.tasks.items() if sent.messages > 0]


@dataclass
class Delivery:
    """What the driver knows of one worker's task in one round: the messages it sends
    (``expected``; None until it is sent), those handed to the scheme (``count``, across re-sends
    of the task), those of the current submission seen so far (``streamed``: a re-sent task
    recomputes the messages the dead one delivered, which are not handed over twice), when the
    latest arrived (``last``, seconds into the round), and whether its result was discarded as
    non-finite (``discarded``; ``overflowed``: float16 values that overflowed) or its task failed
    with the worker (``lost``). ``tallied``: messages whose float16 overflows the round has counted
    (a message delivered again after its worker died, or after the collective path forgot it, is
    counted once)."""

    expected: int | None = None
    count: int = 0
    streamed: int = 0
    tallied: int = 0
    last: float = -1.0
    discarded: bool = False
    overflowed: bool = False
    lost: bool = False

    @property
    def complete(self) -> bool:
        """The worker's whole result of the round is in."""
        return self.expected is not None and self.count >= self.expected


class Ledger:
    """The :class:`Delivery` of each ``(round, worker)`` of the rounds still open."""

    def __init__(self):
        self._entries: dict[tuple[int, int], Delivery] = {}
        self._discards: set[int] = set()  # rounds with a result discarded (checked on every message)

    def of(self, t: int, w: int) -> Delivery:
        """Worker ``w``'s delivery in round ``t``, to read (an empty one, not kept, when there is
        none)."""
        entry = self._entries.get((t, w))
        return entry if entry is not None else Delivery()

    def at(self, t: int, w: int) -> Delivery:
        """Worker ``w``'s delivery in round ``t``, to write (made when there is none)."""
        entry = self._entries.get((t, w))
        if entry is None:
            entry = self._entries[(t, w)] = Delivery()
        return entry

    def sent(self, t: int, w: int, messages: int) -> None:
        """Worker ``w`` was sent round ``t``'s tasks (again: what the scheme holds is kept), which
        send ``messages`` messages."""
        entry = self.at(t, w)
        entry.expected, entry.streamed = int(messages), 0

    def received(self, t: int) -> int:
        """Messages of round ``t`` handed to the scheme so far."""
        return sum(d.count for (r, _), d in self._entries.items() if r == t)

    def discard(self, t: int, w: int, *, overflowed: bool = False) -> None:
        """Worker ``w``'s result of round ``t`` held NaN or infinity (``overflowed``: float16
        values that overflowed): it is withheld from the scheme."""
        entry = self.at(t, w)
        entry.discarded, entry.overflowed = True, overflowed
        self._discards.add(t)

    def any_discarded(self, t: int) -> bool:
        """Some worker's result of round ``t`` was discarded as non-finite."""
        return t in self._discards

    def forget_through(self, t: int) -> None:
        """Drop the entries of rounds ``t`` and before (closed)."""
        for key in [k for k in self._entries if k[0] <= t]:
            del self._entries[key]
        self._discards = {r for r in self._discards if r > t}
