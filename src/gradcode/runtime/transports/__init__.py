"""How a Ray engine's rounds reach its workers: one module per transport, named as
``ClusterConfig.transport`` names it (docs/architecture.md, "Transports").

* :mod:`.ray`: Ray's actor calls (a task per worker and round; Ray's object store carries the
  parameters above its inline limit and the messages back). Always there: the other transports
  fall back on it for a worker they cannot reach (yet);
* :mod:`.channels` (the default): a direct socket to each worker's persistent loop
  (:mod:`gradcode.runtime.channel`), one ``select`` over all of them; parameters above
  :data:`~gradcode.runtime.channel.CHANNEL_BYTES` go through the object store;
* :mod:`.collective`: channels for the tasks and the workers' notes, and the decode as a gloo
  all-reduce among the round's members, who step their own replicas
  (:mod:`gradcode.runtime.collective`).

A transport is a :class:`~gradcode.runtime.transports.base.Transport`; a new one (MPI, say) is one
new module here defining ``TRANSPORT``, the class, and is found by its file's name
(:func:`transport_names`, which imports nothing: the configuration checks names without Ray).
"""

from __future__ import annotations

from importlib import import_module

from gradcode.registry import package_modules

__all__ = ["load_transport", "transport_names"]


def transport_names() -> tuple[str, ...]:
    """The transports there are: every module of this package but ``base`` (the default first)."""
    names = [m.rsplit(".", 1)[1] for m in package_modules(__file__)]
    return tuple(sorted(names, key=lambda n: (n != "channels", n)))


def load_transport(name: str):
    """The :class:`~gradcode.runtime.transports.base.Transport` class called ``name``."""
    if name not in transport_names():
        raise ValueError(f"unknown transport {name!r}; transports: {', '.join(transport_names())}")
    return import_module(f"{__name__}.{name}").TRANSPORT
