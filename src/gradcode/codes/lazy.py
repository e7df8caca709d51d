"""Encoders built when asked for, for codes too large to hold.

CommFR over an LDPC code of length 10,000 has a dense generator, worker encoders ``E_w`` and
decoding coefficients that together would take gigabytes. Such a code gives
:class:`~gradcode.codes.base.LinearCode` its encoders as :class:`LazyEncoders`: each worker's
``E_w`` is built from the code's own sparse description when it is asked for, and only the most
recent few are kept. The code then decodes by an operator of its own (peeling) instead of
coefficients, and ``LinearCode.lazy`` is true (:mod:`gradcode.codes.base`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["LazyEncoders"]


class LazyEncoders(Sequence):
    """Every worker's encoder ``E_w`` (``(R_w, len(placement[w]), L)``), built by ``build(w)`` when
    asked for instead of held: for codes whose encoders together are too large (module
    docstring). ``messages[w]`` is ``R_w``. The most recent few are kept; ``build`` must pickle
    (codes travel), e.g. a module-level function with ``functools.partial``."""

    KEEP = 8

    def __init__(self, messages: Sequence[int], build: Callable[[int], np.ndarray]):
        self.messages = tuple(int(r) for r in messages)
        self.build = build
        self._kept: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.messages)

    def __getitem__(self, w):
        if isinstance(w, slice):
            return [self[i] for i in range(*w.indices(len(self)))]
        w = range(len(self))[w]
        with self._lock:
            E = self._kept.pop(w, None)
        if E is None:
            E = np.array(self.build(w), dtype=np.float64)
            if E.ndim != 3 or E.shape[0] != self.messages[w]:
                raise ValueError(f"the encoder built for worker {w} has shape {E.shape}; expected"
                                 f" ({self.messages[w]}, partitions, chunks)")
            E.flags.writeable = False
        with self._lock:
            self._kept[w] = E  # most recent last
            while len(self._kept) > self.KEEP:
                del self._kept[next(iter(self._kept))]
        return E

    def __getstate__(self):
        return {"messages": self.messages, "build": self.build}

    def __setstate__(self, state):
        self.__init__(state["messages"], state["build"])
