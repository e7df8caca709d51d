"""The collective path as a transport (``ClusterConfig.transport="collective"``): the round's
tasks and the workers' notes go by channel (:mod:`.channels`), and the decode is a gloo
all-reduce among the round's members (:mod:`gradcode.runtime.gloo`, groups formed through a
``TCPStore`` the driver starts here), each member stepping its own replica
(:mod:`gradcode.runtime.collective` decides, :mod:`gradcode.runtime.replica` steps).

What travels through Ray here: the replica each worker joins with (one ``ray.put``), and for a
worker that lags, the copy of an up-to-date replica or the updates it missed, as arguments of its
next task (an actor call: Ray resolves them before the task runs, so it cannot compute first).
"""

from __future__ import annotations

from typing import Any

import ray

from gradcode.runtime.gloo import cancel_group, driver_store
from gradcode.runtime.transports.channels import Channels

__all__ = ["TRANSPORT", "Collective"]


class Collective(Channels):
    """Channels for the rounds, gloo for the reductions (module docstring)."""

    reduces = True
    #: seconds a reduction's group may wait for its members (creation and all-reduce)
    GROUP_TIMEOUT = 60.0

    def __init__(self, engine):
        super().__init__(engine)
        self.store = None  # the TCPStore (gloo groups' rendezvous) and its address
        self.store_address = None
        self._syncs: dict[int, Any] = {}  # worker -> the replica its next task brings (export_replica's reference)
        self._replays: dict[int, list] = {}  # worker -> the updates its next task applies first

    @property
    def available(self) -> bool:
        """Whether the path can run: torch there to form the groups, and a channel to every worker
        (the reductions' orders go through them)."""
        if self.unreachable:
            return False
        try:
            import torch.distributed as dist
        except ImportError:
            return False
        return dist.is_available()

    def join(self, replica) -> None:
        """Every worker holds its own copy of ``replica`` (one ``ray.put``, one call each) and
        reaches the run's store, which the driver starts here."""
        if self.store is None:
            host = ray.util.get_node_ip_address() if self.engine.address is not None else "127.0.0.1"
            self.store, port = driver_store(host, self.GROUP_TIMEOUT)
            self.store_address = (host, port, self.GROUP_TIMEOUT)
        ref = ray.put(replica)
        ray.get([a.join_replica.remote(ref, self.store_address) for a in self.engine.actors])

    def sync(self, w: int, source: int) -> None:
        """Before ``w``'s next task, its replica becomes a copy of ``source``'s: the copy travels
        through Ray's object store (the driver holds only its reference) as an argument of that
        task. A copy that fails (the source died) fails the task, lost, and the driver syncs
        again from another."""
        self._syncs[w] = self.engine.actors[source].export_replica.remote()

    def catch_up(self, w: int, updates: list) -> None:
        """Before ``w``'s next task it applies ``updates``: each is asked of the member that kept it
        (an actor call that puts it in the object store), and the references travel with the
        task; the worker reads the values there."""
        actors = self.engine.actors
        self._replays[w] = [(m, k, actors[kept.worker].kept.remote(kept.model, kept.step)) for m, k, kept in updates]

    def task_arguments(self, w: int) -> dict:
        """What ``w``'s next task must take in first (a replica, updates), as keyword arguments
        of the worker's ``run``; such a task goes by actor call."""
        sync, replay = self._syncs.pop(w, None), self._replays.pop(w, None)
        if sync is None and replay is None:
            return {}
        return {"sync": sync, "store": self.store_address, "replay": replay}

    def cancel(self, group: int) -> None:
        """A member of group ``group`` died: the others stop waiting for it (:func:`cancel_group`)."""
        if self.store is not None:
            cancel_group(self.store, group)

    def fetch(self, w: int) -> list:
        """A copy of ``w``'s models (read here: for metrics, checkpoints and the result)."""
        return ray.get(self.engine.actors[w].export_replica.remote()).export()

    def shutdown(self) -> None:
        super().shutdown()
        self._syncs, self._replays = {}, {}
        self.store = None  # the run's groups end with it


TRANSPORT = Collective
