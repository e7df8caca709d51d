"""The collective path's all-reduce between worker processes: ``torch.distributed``'s gloo.

The driver hosts a ``TCPStore`` for the run (:func:`driver_store`: the one process that lives as
long as the run); every worker connects to it (:class:`Groups`). A round's reduction runs in a
process group of exactly its members, created by them alone through the store, without a world
group around it (each ``ProcessGroupGloo`` is built directly on a ``PrefixStore`` of its own: the
stragglers, the dead and the restarted take no part), and cached: the same members reduce again
in the group they built. Such a group is built once, at a small cost that grows with its members,
and its all-reduce is no slower than one over every process (BENCHMARKS.md, "The collective path:
the members reduce among themselves (2026-11-27)").

Names. The driver numbers the groups (``ReduceOrder.group``) and keeps the numbers of at most
:data:`LIVE_GROUPS` of them alive (``ReduceOrder.live``); a worker drops a cached group whose number
is no longer live, and a group is never built twice under one number, so no rendezvous reads keys
a previous group left in the store. A group's number changes whenever one of its members died
(the key holds each member's incarnation).

Flags. Every part carries ``size`` slots after it, in which each member says whether it could
contribute (:meth:`Groups.allreduce`): the one all-reduce of a round both sums and agrees.

Faults. gloo raises when a peer's connection closes (a member died mid-reduction):
:meth:`Groups.allreduce` raises :class:`ReductionFailed` then, and the driver plans the round again
among the living. A member that dies before it joins a new group would leave the others waiting in
gloo's rendezvous for the group's whole ``timeout`` (60 s): so the members first count themselves
in through the store, and the driver, once it sees a member die, cancels the group
(:func:`cancel_group`): the others stop waiting within a few milliseconds. One that neither comes
nor dies (a hung process) is named after :attr:`Groups.JOIN_TIMEOUT` seconds, and the round is
planned again without it.
Tensors are CPU tensors; with GPU workers each member copies its part to the host and back (NCCL,
which needs one GPU per rank, is not used: several workers commonly share one GPU here).
"""

from __future__ import annotations

import datetime
from collections import OrderedDict

import numpy as np

from gradcode.errors import GradcodeError

__all__ = ["LIVE_GROUPS", "Groups", "ReductionFailed", "cancel_group", "driver_store"]

#: groups the driver keeps alive at once (each worker caches at most those it is a member of)
LIVE_GROUPS = 32


class ReductionFailed(GradcodeError):
    """The reduction's collective failed: a member died, or did not come within the timeout;
    ``absent``: the ranks that could not contribute or did not come (none when a member died)."""

    def __init__(self, message: str, absent: tuple = ()):
        super().__init__(message)
        self.absent = tuple(absent)


def driver_store(host: str, timeout: float):
    """The run's ``TCPStore``, hosted by the driver on ``host`` (a free port); returns the store
    (keep it alive for the run) and its port."""
    from torch.distributed import TCPStore

    store = TCPStore(host, 0, is_master=True, wait_for_workers=False,
                     timeout=datetime.timedelta(seconds=float(timeout)))
    return store, int(store.port)


def cancel_group(store, group: int) -> None:
    """The driver's side of a group whose member died before it joined: the members still
    waiting for it stop (:meth:`Groups.allreduce` raises :class:`ReductionFailed`)."""
    store.set(f"gradcode-cancel-{int(group)}", "1")


class Groups:
    """A worker's side: its connection to the driver's store at ``(host, port)`` and the process
    groups it is a member of (module docstring). ``timeout``: seconds a group's creation or
    all-reduce may wait for its members."""

    def __init__(self, host: str, port: int, timeout: float):
        from torch.distributed import TCPStore

        self.address = (host, int(port), float(timeout))
        self._timeout = datetime.timedelta(seconds=float(timeout))
        self._store = TCPStore(host, int(port), is_master=False, timeout=self._timeout)
        self._groups: OrderedDict[int, object] = OrderedDict()

    def allreduce(self, group: int, rank: int, size: int, live, part: np.ndarray, ok: bool = True) -> np.ndarray:
        """The sum of every member's part: ``part`` is this member's (a writable array of its own,
        :func:`~gradcode.codes.reduce.contribution`, summed into in place) followed by ``size``
        zero slots, the flags. Each member says in its rank's slot whether it can contribute
        (``ok``; one that cannot sends zeros), and the flags are summed with the parts, in the same
        all-reduce: when one could not, every member raises :class:`ReductionFailed` naming the
        ranks that could not, at once, instead of waiting for it until the timeout, and the sum is
        discarded. One all-reduce, not a small one for the flags first: a gloo all-reduce of 10
        numbers costs what one of 10 000 does, each hop of its ring a wake-up of another process
        (BENCHMARKS.md, "The collective path, continued: heap reuse, one all-reduce, the crossover
        (2026-11-27, later)"). Returns the sum, less
        the flags (a view of ``part``)."""
        import torch

        for gone in [g for g in self._groups if g not in live]:
            del self._groups[gone]
        if part.size <= size:
            raise ValueError(f"part must hold the member's values and {size} flag slots after them; got"
                             f" {part.size} values")
        out = part if part.flags.writeable and part.flags.c_contiguous else np.array(part)
        n = out.size - size
        out[n + rank] = 0 if ok else 1
        if size > 1:
            try:
                pg = self._groups.get(group)
                if pg is None:
                    pg = self._build(group, rank, size)
                pg.allreduce([torch.from_numpy(out)]).wait()
            except RuntimeError as exc:  # gloo: a peer closed its connection, or a timeout
                self._groups.pop(group, None)
                raise ReductionFailed(f"the all-reduce of group {group} failed: {exc}") from None
        absent = tuple(int(r) for r in np.flatnonzero(out[n:]))
        if absent:
            raise ReductionFailed(f"ranks {list(absent)} of group {group} cannot contribute", absent)
        return out[:n]

    #: seconds between looks at the members counted in, and at the group's cancellation
    POLL = 0.001
    #: seconds the members of a new group wait for each other to count in (a member's reductions
    #: run on a thread of their own, so one that does not come within this is hung or gone)
    JOIN_TIMEOUT = 10.0

    def _build(self, group: int, rank: int, size: int):
        import time

        import torch.distributed as dist

        joined, cancelled = f"gradcode-join-{group}", f"gradcode-cancel-{group}"
        self._store.set(f"{joined}-{rank}", "1")
        self._store.add(joined, 1)
        wait = min(self._timeout.total_seconds(), self.JOIN_TIMEOUT)
        deadline = time.monotonic() + wait
        while self._store.add(joined, 0) < size:
            if self._store.check([cancelled]):
                raise ReductionFailed(f"group {group} was cancelled: a member died before it joined")
            if time.monotonic() > deadline:  # alive but not answering (a hung process): named, left out
                absent = tuple(r for r in range(size) if not self._store.check([f"{joined}-{r}"]))
                raise ReductionFailed(f"ranks {list(absent)} of group {group} did not come within {wait:g} s", absent)
            time.sleep(self.POLL)

        pg = dist.ProcessGroupGloo(dist.PrefixStore(f"gradcode-group-{group}", self._store), rank, size,
                                   self._timeout)
        self._groups[group] = pg
        return pg
