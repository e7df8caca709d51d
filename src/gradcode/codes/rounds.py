"""What a code says about one round: the :class:`RoundRules` mixin of
:class:`~gradcode.codes.base.LinearCode`.

Stragglers of a round: :meth:`RoundRules.straggling` says, from the number of leading messages
each worker had delivered when the round closed, which workers count as stragglers (the drivers'
straggler matrix and arrival table use it). By default a worker is a straggler unless it delivered
its whole task result (all ``R_w`` messages); codes whose master stops the workers as soon as it
can decode (AGC, whose active workers need only ``r_s <= L`` messages) override it, and grouped
codes apply their groups' rules. :meth:`RoundRules.comm_cost` is the other per-round figure such
codes override: what each active worker sends when ``s`` workers straggle.

The mixin has no constructor: it reads what :class:`~gradcode.codes.base.LinearCode` sets
(``_n``, ``_messages``, ``_chunks``, ``_tolerance``, ``messages_per_worker``).
"""

from __future__ import annotations

import numpy as np

from gradcode._validation import check_int

__all__ = ["RoundRules"]


class RoundRules:
    """Who straggled in a round and what an active worker sends (module docstring); a code
    overrides them where its master stops the workers early or its groups decide."""

    def straggling(self, counts) -> np.ndarray:
        """Which workers were stragglers of a round, from ``counts[..., w]``: the number of leading
        messages worker ``w`` had delivered when the round closed (shape ``(n,)`` or
        ``(rounds, n)``; returns booleans of the same shape). Default: ``counts < R_w``, a worker
        that had not delivered its whole task result (for the ``partial`` code: a worker without
        its second message)."""
        counts = self._check_counts(counts)
        return counts < np.asarray(self._messages)

    def _check_counts(self, counts) -> np.ndarray:
        """``counts`` as an array of shape ``(n,)`` or ``(rounds, n)`` of integers; a
        ``ValueError``/``TypeError`` saying what is wrong otherwise."""
        counts = np.asarray(counts)
        if counts.ndim not in (1, 2) or counts.shape[-1] != self._n:
            raise ValueError(f"counts must have shape ({self._n},) or (rounds, {self._n}), got {counts.shape}")
        if counts.size and not np.issubdtype(counts.dtype, np.integer):
            raise TypeError(f"counts must hold integer message counts, got dtype {counts.dtype}")
        return counts

    def comm_cost(self, s: int) -> float | None:
        """Message length each active worker sends to decode with ``s`` stragglers, as a fraction
        of d; ``None`` where the code cannot decode with ``s`` stragglers in the worst case."""
        s = check_int("s", s, minimum=0, maximum=self._n)
        return self.messages_per_worker / self._chunks if s <= self._tolerance else None
