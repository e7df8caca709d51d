"""The decoding cache of a code: a bounded table from received patterns to their checked
decodings (or refusals), least recently used dropped first, safe to share between threads.

A training run meets the same few patterns again and again (the same workers late), so a code
solves and checks each once; a pickled code (a checkpoint, a Ray task) travels with an empty cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["DecodingCache"]


class DecodingCache:
    """At most ``size`` entries (0: none kept); ``hits`` and ``misses`` count the lookups."""

    def __init__(self, size: int):
        self.size = int(size)
        self._table: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, pattern):
        """The entry of ``pattern`` (now the most recently used), or None, counted as a hit or a miss."""
        with self._lock:
            entry = self._table.get(pattern)
            if entry is None:
                self.misses += 1
                return None
            self._table.move_to_end(pattern)
            self.hits += 1
            return entry

    def put(self, pattern, entry) -> None:
        if not self.size:
            return
        with self._lock:
            self._table[pattern] = entry
            if len(self._table) > self.size:
                self._table.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._table.clear()

    def __len__(self) -> int:
        return len(self._table)

    def __getstate__(self):
        return {"size": self.size}  # the lock cannot travel; the entries are rebuilt where they are needed

    def __setstate__(self, state):
        self.__init__(state["size"])
